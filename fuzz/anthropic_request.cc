// An Anthropic Messages body for /v1/messages (or count_tokens), parsed against the committed
// models/kjv tokenizer and chat template: a request whose prompt fits the context, or an
// ApiError (answered in Anthropic's shape), never another exception.
#include "kjv_request_context.h"
#include "server/anthropic_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static mlaserve::fuzz::KjvRequestContext fixture;
  mlaserve::fuzz::InputReader input(data, size);
  const bool count_tokens = input.byte() & 1;
  try {
    const std::string body(input.rest());
    if (count_tokens) {
      if (mlaserve::count_message_tokens(body, fixture.context) >= fixture.context.max_model_len) __builtin_trap();
    } else {
      const auto request = mlaserve::parse_messages_request(body, fixture.context);
      if (int64_t(request.engine.prompt.size()) >= fixture.context.max_model_len) __builtin_trap();
    }
  } catch (const mlaserve::ApiError&) {
  }
  return 0;
}
