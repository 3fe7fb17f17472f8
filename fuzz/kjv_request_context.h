// What the request-parser fuzz targets parse against: the committed models/kjv tokenizer and chat
// template, a context of 256 tokens, and DeepSeek's output parsers.
#pragma once
#include <memory>

#include "fuzz_input.h"
#include "io/model_config.h"
#include "server/chat_request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve::fuzz {

struct KjvRequestContext {
  std::unique_ptr<Tokenizer> tokenizer = Tokenizer::load(models_dir() + "/kjv");
  ChatTemplate chat_template = ChatTemplate::load(models_dir() + "/kjv", *tokenizer);
  GrammarCache grammars;
  RequestContext context{*tokenizer,
                         chat_template,
                         "kjv",
                         256,
                         load_model_config(models_dir() + "/kjv").vocab_size,
                         {},
                         chat_parsing("deepseek_v3", "deepseek_r1", ""),
                         &grammars};
};

}  // namespace mlaserve::fuzz
