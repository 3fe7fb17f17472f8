#include "io/generation_config.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mmap_file.h"
#include "io/gguf_model.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

json read_json_object(const std::filesystem::path& path) {
  json value;
  try {
    value = json::parse(read_text_file(path.string()));
  } catch (const json::exception& e) {
    fail("'{}': not valid JSON: {}", path.string(), e.what());
  }
  MLA_CHECK(value.is_object(), "'{}': not a JSON object", path.string());
  return value;
}

// eos_token_id as an id or a list of ids, appended to `ids` unless already there.
void add_eos_ids(const json& object, const std::string& file, std::vector<int32_t>& ids) {
  const auto found = object.find("eos_token_id");
  if (found == object.end() || found->is_null()) return;
  const json list = found->is_array() ? *found : json::array({*found});
  for (const json& id : list) {
    MLA_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX,
              "'{}': eos_token_id must be a token id or a list of them, got {}", file, found->dump());
    if (std::find(ids.begin(), ids.end(), id.get<int32_t>()) == ids.end()) ids.push_back(id.get<int32_t>());
  }
}

template <class T>
std::optional<T> number(const json& object, const char* key, const std::string& file) {
  const auto found = object.find(key);
  if (found == object.end() || found->is_null()) return std::nullopt;
  const bool ok = std::is_integral_v<T> ? found->is_number_integer() : found->is_number();
  MLA_CHECK(ok, "'{}': '{}' must be a number, got {}", file, key, found->dump());
  return found->get<T>();
}

}  // namespace

GenerationConfig load_generation_config(const std::string& model_dir) {
  namespace fs = std::filesystem;
  GenerationConfig generation;
  if (is_gguf_path(model_dir)) {  // a GGUF has no sampling defaults, and its EOS among its keys
    add_eos_ids(gguf_config_json(open_gguf(model_dir)), model_dir, generation.eos_token_ids);
    return generation;
  }
  const fs::path generation_file = fs::path(model_dir) / "generation_config.json";
  if (fs::exists(generation_file)) {
    const json values = read_json_object(generation_file);
    const std::string file = generation_file.string();
    add_eos_ids(values, file, generation.eos_token_ids);
    generation.temperature = number<double>(values, "temperature", file);
    generation.top_p = number<double>(values, "top_p", file);
    generation.min_p = number<double>(values, "min_p", file);
    generation.repetition_penalty = number<double>(values, "repetition_penalty", file);
    generation.top_k = number<int64_t>(values, "top_k", file);
  }
  const fs::path config_file = fs::path(model_dir) / "config.json";
  if (fs::exists(config_file)) {
    const json config = read_json_object(config_file);
    add_eos_ids(config, config_file.string(), generation.eos_token_ids);
    if (config.contains("text_config") && config["text_config"].is_object())
      add_eos_ids(config["text_config"], config_file.string(), generation.eos_token_ids);
  }
  return generation;
}

}  // namespace mlaserve
