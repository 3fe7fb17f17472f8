#include <spdlog/spdlog.h>

#include <cstdio>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/model_runner.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "io/generation_config.h"
#include "tokenizer/chat_template.h"

namespace mlaserve {

namespace {

struct GenerateOptions {
  std::string model_dir, prompt, ids;
  int64_t max_new_tokens = 32;
  // Unset: the checkpoint's generation_config.json, else greedy with no filters.
  std::optional<double> temperature, top_p, min_p;
  std::optional<int64_t> top_k;
  uint64_t seed = 0;
  bool chat = false, ignore_eos = false;
  ParallelFlags parallel;
};

// The request the options describe: the prompt as ids, or as text (with the tokenizer's BOS, or
// wrapped in the chat template), stopping at any end-of-turn token unless told not to, sampled
// as the options or else the checkpoint's generation_config.json say.
GenerateRequest make_request(const GenerateOptions& options, const Tokenizer& tokenizer) {
  GenerateRequest request;
  if (!options.ids.empty()) {
    request.prompt = parse_id_list(options.ids);
  } else if (options.chat) {
    const std::string text = apply_chat_template(chat_format_of(tokenizer), {{"user", options.prompt}}, true);
    request.prompt = tokenizer.encode(text);
  } else {
    if (tokenizer.add_bos()) request.prompt.push_back(*tokenizer.bos_id());
    const auto encoded = tokenizer.encode(options.prompt);
    request.prompt.insert(request.prompt.end(), encoded.begin(), encoded.end());
  }
  request.max_new_tokens = options.max_new_tokens;
  request.seed = options.seed;
  const GenerationConfig generation = load_generation_config(options.model_dir);
  if (!options.ignore_eos) request.stop_token_ids = end_of_turn_ids(generation.eos_token_ids, tokenizer);
  request.sampling = {float(options.temperature.value_or(generation.temperature.value_or(0.0))),
                      options.top_k.value_or(generation.top_k.value_or(0)),
                      float(options.top_p.value_or(generation.top_p.value_or(1.0))),
                      float(options.min_p.value_or(generation.min_p.value_or(0.0)))};
  return request;
}

void write_stdout(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// Loads the model, streams the generated text to stdout (rank 0) and logs the speeds.
void run_generate(const GenerateOptions& options) {
  MLA_CHECK(!options.prompt.empty() || !options.ids.empty(), "generate needs --prompt or --ids");
  MLA_CHECK(options.max_new_tokens > 0, "--max-new-tokens must be positive");
  auto model = load_causal_lm(options.model_dir, activation_quant_from_name(options.parallel.act_quant));
  auto tokenizer = Tokenizer::load(options.model_dir);
  const GenerateRequest request = make_request(options, *tokenizer);
  const int64_t capacity = int64_t(request.prompt.size()) + request.max_new_tokens;
  MLA_CHECK(capacity <= model->config().max_position_embeddings,
            "prompt ({} tokens) plus {} new tokens exceed the context length {}", request.prompt.size(),
            request.max_new_tokens, model->config().max_position_embeddings);
  auto runner = SequenceRunner::create(*model, options.parallel, capacity);
  const bool output = runner->writes_output();
  TextStreamer streamer(*tokenizer);
  const GenerateStats stats = generate(
      [&](std::span<const int32_t> tokens, int64_t start, float* logits) { runner->forward(tokens, start, false, logits); },
      model->config().vocab_size, request, [&](int32_t token) {
        const std::string text = streamer.push(token);
        if (output) write_stdout(text);
        return true;
      });
  if (!output) return;
  write_stdout(streamer.finish());
  const int64_t decode_steps = std::max<int64_t>(0, stats.decode_tokens - 1);  // first token comes from prefill
  spdlog::info("prefill: {} tokens, {:.1f} tok/s; decode: {} tokens, {:.1f} tok/s", stats.prefill_tokens,
               double(stats.prefill_tokens) / stats.prefill_seconds, stats.decode_tokens,
               decode_steps > 0 ? double(decode_steps) / stats.decode_seconds : 0.0);
  if (runner->ranks() > 1)
    spdlog::info("{} ranks; collectives took {:.1f}% of the time on rank 0 (waiting for other ranks included)",
                 runner->ranks(), 100.0 * runner->collective_seconds() / (stats.prefill_seconds + stats.decode_seconds));
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "stream generated text to stdout");
  cmd->add_option("--model", options->model_dir, "model directory")->required();
  auto* prompt = cmd->add_option("--prompt", options->prompt, "prompt text");
  auto* ids = cmd->add_option("--ids", options->ids, "prompt as comma-separated token ids");
  prompt->excludes(ids);
  cmd->add_option("-n,--max-new-tokens", options->max_new_tokens, "tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", options->temperature,
                  "0: greedy (default: the checkpoint's generation_config.json, else 0)");
  cmd->add_option("--top-k", options->top_k, "0: no limit (default: generation_config.json's, else 0)");
  cmd->add_option("--top-p", options->top_p, "nucleus probability (default: generation_config.json's, else 1)");
  cmd->add_option("--min-p", options->min_p,
                  "minimum probability relative to the best (default: generation_config.json's, else 0)");
  cmd->add_option("--seed", options->seed, "sampling seed")->capture_default_str();
  cmd->add_flag("--chat", options->chat, "wrap the prompt in the model's chat template");
  cmd->add_flag("--ignore-eos", options->ignore_eos, "do not stop at the end-of-sequence token");
  add_parallel_flags(cmd, options->parallel);
  cmd->callback([options] { run_generate(*options); });
}

}  // namespace mlaserve
