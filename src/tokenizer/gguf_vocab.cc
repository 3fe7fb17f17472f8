#include "tokenizer/gguf_vocab.h"

#include "base/error.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

// llama.cpp's token types (llama_token_type): control and user-defined tokens are matched as
// added tokens before BPE, control ones special (skipped when decoding for the user).
constexpr int kControl = 3, kUserDefined = 4;

json split(const std::string& pattern) {
  return {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
}

// The pre-tokenizer `tokenizer.ggml.pre` names, as the models' tokenizer.json has it.
json pre_tokenizer(const std::string& pre, const std::string& path) {
  json steps = json::array();
  if (pre == "deepseek-v3") {  // DeepSeek-V3/R1: digits in runs of up to 3, CJK runs, then words
    steps.push_back(split(R"(\p{N}{1,3})"));
    steps.push_back(split("[一-龥぀-ゟ゠-ヿ]+"));
    steps.push_back(split(
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"));
  } else if (pre == "kimi-k2") {  // Kimi K2's tiktoken pattern
    steps.push_back(split(kKimiPattern));
  } else {
    fail("'{}': tokenizer.ggml.pre '{}' is not supported (deepseek-v3, kimi-k2)", path, pre);
  }
  steps.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
  return {{"type", "Sequence"}, {"pretokenizers", steps}};
}

const json& array_key(const json& metadata, const std::string& key, const std::string& path) {
  const auto found = metadata.find(key);
  MLA_CHECK(found != metadata.end() && found->is_array(), "'{}': key '{}' is missing or not an array", path, key);
  return *found;
}

// The special tokens' text by id, where the GGUF names one.
void add_special(const json& metadata, const json& tokens, const char* id_key, const char* token_key, json& config,
                 const std::string& path) {
  const auto found = metadata.find(std::string("tokenizer.ggml.") + id_key);
  if (found == metadata.end()) return;
  MLA_CHECK(found->is_number_unsigned() && found->get<uint64_t>() < tokens.size(),
            "'{}': tokenizer.ggml.{} {} is not a token id below {}", path, id_key, found->dump(), tokens.size());
  config[token_key] = tokens[found->get<size_t>()];
}

}  // namespace

HfTokenizerFiles gguf_tokenizer_files(const std::string& path) {
  const GgufFile file(path);
  const json& metadata = file.metadata();
  const std::string model = metadata.value("tokenizer.ggml.model", "");
  MLA_CHECK(model == "gpt2", "'{}': tokenizer.ggml.model '{}' is not supported (gpt2: byte-level BPE)", path, model);
  const json& tokens = array_key(metadata, "tokenizer.ggml.tokens", path);
  const json& merges = array_key(metadata, "tokenizer.ggml.merges", path);
  const json& types = array_key(metadata, "tokenizer.ggml.token_type", path);
  MLA_CHECK(types.size() == tokens.size(), "'{}': {} token types for {} tokens", path, types.size(), tokens.size());
  HfTokenizerFiles files;
  json vocab = json::object(), added = json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    MLA_CHECK(tokens[id].is_string() && types[id].is_number_integer(), "'{}': token {} is not a string with a type",
              path, id);
    const int type = types[id].get<int>();
    if (type == kControl || type == kUserDefined)
      added.push_back({{"id", id}, {"content", tokens[id]}, {"special", type == kControl}});
    vocab[tokens[id].get<std::string>()] = id;
  }
  files.tokenizer = {{"model", {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", merges}}},
                     {"added_tokens", std::move(added)},
                     {"pre_tokenizer", pre_tokenizer(metadata.value("tokenizer.ggml.pre", ""), path)}};
  files.config = json::object();
  add_special(metadata, tokens, "bos_token_id", "bos_token", files.config, path);
  add_special(metadata, tokens, "eos_token_id", "eos_token", files.config, path);
  const auto add_bos = metadata.find("tokenizer.ggml.add_bos_token");
  files.config["add_bos_token"] = add_bos != metadata.end() && add_bos->is_boolean() && add_bos->get<bool>();
  const auto chat_template = metadata.find("tokenizer.chat_template");
  if (chat_template != metadata.end()) {
    MLA_CHECK(chat_template->is_string(), "'{}': tokenizer.chat_template is not a string", path);
    files.config["chat_template"] = *chat_template;
  }
  return files;
}

}  // namespace mlaserve
