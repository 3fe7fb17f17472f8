// An OpenAI request body for /v1/completions or /v1/chat/completions, parsed against the
// committed models/kjv tokenizer and chat template: a request whose prompt fits the context (the
// engine checks the rest: empty prompts, token ids, the cache) or an ApiError, never another
// exception.
#include "kjv_request_context.h"
#include "server/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static mlaserve::fuzz::KjvRequestContext fixture;
  mlaserve::fuzz::InputReader input(data, size);
  const auto endpoint = input.byte() & 1 ? mlaserve::Endpoint::ChatCompletions : mlaserve::Endpoint::Completions;
  try {
    const auto request = mlaserve::parse_request(endpoint, std::string(input.rest()), fixture.context);
    if (int64_t(request.engine.prompt.size()) >= fixture.context.max_model_len) __builtin_trap();
  } catch (const mlaserve::ApiError&) {
  }
  return 0;
}
