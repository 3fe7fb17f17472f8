// An OpenAI request body for /v1/completions or /v1/chat/completions, parsed against the
// committed models/kjv tokenizer and chat template: a request whose prompt fits the context (the
// engine checks the rest: empty prompts, token ids, the cache) or an ApiError, never another
// exception.
#include "fuzz_input.h"
#include "io/model_config.h"
#include "server/openai_protocol.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

struct Fixture {
  std::unique_ptr<mlaserve::Tokenizer> tokenizer = mlaserve::Tokenizer::load(mlaserve::fuzz::models_dir() + "/kjv");
  mlaserve::ChatTemplate chat_template = mlaserve::ChatTemplate::load(mlaserve::fuzz::models_dir() + "/kjv", *tokenizer);
  mlaserve::GrammarCache grammars;
  mlaserve::RequestContext context{*tokenizer, chat_template, "kjv", 256,
                                   mlaserve::load_model_config(mlaserve::fuzz::models_dir() + "/kjv").vocab_size,
                                   {}, mlaserve::chat_parsing("deepseek_v3", "deepseek_r1", ""), &grammars};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fixture;
  mlaserve::fuzz::InputReader input(data, size);
  const auto endpoint = input.byte() & 1 ? mlaserve::Endpoint::ChatCompletions : mlaserve::Endpoint::Completions;
  try {
    const auto request = mlaserve::parse_request(endpoint, std::string(input.rest()), fixture.context);
    if (int64_t(request.engine.prompt.size()) >= fixture.context.max_model_len) __builtin_trap();
  } catch (const mlaserve::ApiError&) {
  }
  return 0;
}
