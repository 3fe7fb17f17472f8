#include <algorithm>
#include <cctype>
#include <charconv>

#include "base/error.h"
#include "base/mmap_file.h"
#include "base/npy.h"
#include "cli/commands.h"
#include "engine/single_sequence.h"

namespace mlaserve {

std::vector<int32_t> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    int32_t value = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), value);
    MLA_CHECK(!item.empty() && error == std::errc() && end == item.data() + item.size(),
              "'{}' is not a token id (in '{}')", item, text);
    ids.push_back(value);
    start = comma + 1;
  }
  return ids;
}

// Token ids from a file: separated by commas, whitespace or both.
std::vector<int32_t> read_id_file(const std::string& path) {
  std::string text = read_text_file(path);
  std::replace_if(
      text.begin(), text.end(), [](char c) { return std::isspace(uint8_t(c)); }, ',');
  std::string list;
  for (char c : text)
    if (c != ',' || (!list.empty() && list.back() != ',')) list += c;
  if (!list.empty() && list.back() == ',') list.pop_back();
  MLA_CHECK(!list.empty(), "'{}' holds no token ids", path);
  return parse_id_list(list);
}

void add_logits_command(CLI::App& app) {
  struct Options {
    std::string model_dir, ids, ids_file, out, mla_path = "auto", kv_dtype = "fp32";
    int64_t chunk = 0;
    ParallelFlags parallel;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("logits", "write float32 logits [tokens, vocab] of one sequence as .npy");
  cmd->add_option("--model", options->model_dir, "model directory or .gguf file")->required();
  auto* ids_flag = cmd->add_option("--ids", options->ids, "comma-separated token ids");
  auto* ids_file =
      cmd->add_option("--ids-file", options->ids_file, "token ids read from a file, separated by commas or whitespace");
  ids_flag->excludes(ids_file);
  cmd->add_option("--kv-cache-dtype", options->kv_dtype,
                  "fp32 (the exact maths) | bf16 | fp8: the latent cache's values")
      ->check(CLI::IsMember({"bf16", "fp8", "fp32"}))
      ->capture_default_str();
  cmd->add_option("--out", options->out, "output .npy file")->required();
  cmd->add_option("--chunk", options->chunk,
                  "feed the sequence in chunks of N tokens (1: decode path); 0: all at once");
  cmd->add_option("--mla-path", options->mla_path, "auto | expanded | absorbed")
      ->check(CLI::IsMember({"auto", "expanded", "absorbed"}))
      ->capture_default_str();
  add_parallel_flags(cmd, options->parallel);
  cmd->callback([options] {
    MLA_CHECK(!options->ids.empty() || !options->ids_file.empty(), "logits needs --ids or --ids-file");
    const std::vector<int32_t> ids =
        options->ids_file.empty() ? parse_id_list(options->ids) : read_id_file(options->ids_file);
    const CacheDType cache_dtype = cache_dtype_from_name(options->kv_dtype);
    const MlaPath path = mla_path_from_name(options->mla_path);
    auto model = load_causal_lm(options->model_dir, activation_quant_from_name(options->parallel.act_quant));
    const int64_t n = int64_t(ids.size()), vocab = model->config().vocab_size;
    MLA_CHECK(n <= model->config().max_position_embeddings, "{} tokens exceed the context length {}", n,
              model->config().max_position_embeddings);
    if (is_mpi_follower()) return follow_rank_zero(*model, executor_options(options->parallel));
    std::vector<float> logits(size_t(n * vocab));
    const int64_t chunk = options->chunk > 0 ? options->chunk : n;
    auto executor = create_executor(*model, executor_options(options->parallel));
    SingleSequence sequence(*executor, n, cache_dtype);
    for (int64_t start = 0; start < n; start += chunk) {
      const auto part = std::span(ids).subspan(size_t(start), size_t(std::min(chunk, n - start)));
      sequence.forward(part, start, true, logits.data() + start * vocab, path);
    }
    write_npy_f32(options->out, logits.data(), {n, vocab});
  });
}

}  // namespace mlaserve
