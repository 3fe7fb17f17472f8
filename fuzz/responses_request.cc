// An OpenAI Responses body for /v1/responses, mapped and parsed against the committed models/kjv
// tokenizer and chat template (with one stored response to continue): a request whose prompt
// fits the context, or an ApiError, never another exception.
#include "kjv_request_context.h"
#include "server/openai_protocol.h"
#include "server/responses_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static mlaserve::fuzz::KjvRequestContext fixture;
  static mlaserve::ResponseStore store;
  static const bool stored = [] {
    store.put("resp_1", nlohmann::json::object(), nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "f", "arguments": "{}"}}]}])"));
    return true;
  }();
  (void)stored;
  try {
    const auto body = mlaserve::request_body(std::string(reinterpret_cast<const char*>(data), size));
    const auto mapped = mlaserve::responses_to_chat(body, store);
    const auto request = mlaserve::parse_chat_request(mapped.chat, fixture.context);
    if (int64_t(request.engine.prompt.size()) >= fixture.context.max_model_len) __builtin_trap();
  } catch (const mlaserve::ApiError&) {
  } catch (const nlohmann::ordered_json::exception&) {  // a field of the wrong type: a 400 in the server
  }
  return 0;
}
