#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdio>

#include "base/error.h"
#include "base/mmap_file.h"
#include "cli/commands.h"
#include "engine/single_sequence.h"
#include "tokenizer/tokenizer.h"
#include "tools/perplexity.h"

namespace mlaserve {
namespace {

struct PerplexityOptions {
  std::string model_dir, file, kv_dtype = "fp32";
  int64_t ctx = 512, chunks = 0;
  ParallelFlags parallel;
};

// A bar redrawn in place on a terminal; elsewhere (a log) a line every tenth of the chunks.
void draw_progress(int64_t done, int64_t total, double perplexity) {
  constexpr int kWidth = 30;
  const bool terminal = isatty(fileno(stderr));
  if (!terminal && done != total && done * 10 / total == (done - 1) * 10 / total) return;
  const int filled = int(kWidth * done / total);
  std::fprintf(stderr, "%s[perplexity] [%s%s] %lld/%lld chunks, PPL %.4f%s", terminal ? "\r" : "",
               std::string(size_t(filled), '#').c_str(), std::string(size_t(kWidth - filled), '.').c_str(),
               (long long)done, (long long)total, perplexity, terminal && done != total ? "" : "\n");
}

void run_perplexity(const PerplexityOptions& options) {
  auto model = load_causal_lm(options.model_dir, activation_quant_from_name(options.parallel.act_quant));
  auto tokenizer = Tokenizer::load(options.model_dir);
  const CacheDType cache_dtype = cache_dtype_from_name(options.kv_dtype);
  const std::vector<int32_t> ids = tokenizer->encode_prompt(read_text_file(options.file), false);
  MLA_CHECK(options.ctx <= model->config().max_position_embeddings, "--ctx {} exceeds the model's context length {}",
            options.ctx, model->config().max_position_embeddings);
  if (is_mpi_follower()) return follow_rank_zero(*model, executor_options(options.parallel));
  auto executor = create_executor(*model, executor_options(options.parallel));
  SingleSequence sequence(*executor, options.ctx, cache_dtype);
  const std::optional<int32_t> bos = tokenizer->add_bos() ? tokenizer->bos_id() : std::nullopt;
  spdlog::info("{} tokens of '{}', chunks of {} scored on their second half", ids.size(), options.file, options.ctx);
  const PerplexityResult result = perplexity(
      ids, bos, options.ctx, options.chunks, model->config().vocab_size,
      [&](std::span<const int32_t> chunk, float* logits) { sequence.forward(chunk, 0, true, logits); },
      [&](int64_t done, int64_t total, double ppl) { draw_progress(done, total, ppl); });
  std::printf("Final estimate: PPL = %.4f +/- %.4f (%lld chunks of %lld tokens, %lld scored; mean NLL %.6f)\n",
              result.perplexity, result.perplexity * result.nll_stderr, (long long)result.chunks,
              (long long)options.ctx, (long long)result.scored_tokens, result.mean_nll);
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto options = std::make_shared<PerplexityOptions>();
  CLI::App* cmd = app.add_subcommand("perplexity", "perplexity of a text file (llama-perplexity's conventions)");
  cmd->add_option("--model", options->model_dir, "model directory or .gguf file")->required();
  cmd->add_option("-f,--file", options->file, "text file")->required();
  cmd->add_option("-c,--ctx", options->ctx, "tokens a chunk; each is scored on its second half")->capture_default_str();
  cmd->add_option("--chunks", options->chunks, "score at most this many chunks (0: all)")->capture_default_str();
  cmd->add_option("--kv-cache-dtype", options->kv_dtype,
                  "fp32 (the exact maths) | bf16 | fp8: the latent cache's values")
      ->check(CLI::IsMember({"bf16", "fp8", "fp32"}))
      ->capture_default_str();
  add_parallel_flags(cmd, options->parallel);
  cmd->callback([options] { run_perplexity(*options); });
}

}  // namespace mlaserve
