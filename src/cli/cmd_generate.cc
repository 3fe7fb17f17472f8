#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>

#include "base/error.h"
#include "base/mmap_file.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "io/generation_config.h"
#include "tokenizer/chat_template.h"

namespace mlaserve {

namespace {

struct GenerateOptions {
  std::string model_dir, prompt, ids, prompt_file, ids_file, chat_template;
  int64_t max_new_tokens = 32;
  // Unset: the checkpoint's generation_config.json, else greedy with no filters.
  std::optional<double> temperature, top_p, min_p;
  std::optional<int64_t> top_k;
  uint64_t seed = 0;
  bool chat = false, ignore_eos = false;
  std::string kv_dtype = "fp32";  // one sequence's cache is small: keep it exact, as `logits` does
  ParallelFlags parallel;
  SpeculativeFlags speculative;
};

// The prompt the options describe: ids, or text (with the tokenizer's BOS, or as a user message
// rendered by the checkpoint's chat template), given inline or in a file.
std::vector<int32_t> make_prompt(const GenerateOptions& options, const Tokenizer& tokenizer) {
  if (!options.ids_file.empty()) return read_id_file(options.ids_file);
  if (!options.ids.empty()) return parse_id_list(options.ids);
  const std::string prompt = options.prompt_file.empty() ? options.prompt : read_text_file(options.prompt_file);
  if (options.chat) {
    ChatInput input;
    input.messages.push_back({{"role", "user"}, {"content", prompt}});
    return ChatTemplate::load(options.model_dir, tokenizer, options.chat_template).encode(input, tokenizer);
  }
  return tokenizer.encode_prompt(prompt);
}

// The request: sampled as the options or else the checkpoint's generation_config.json say,
// stopping at an end-of-turn token unless told not to.
EngineRequest make_request(const GenerateOptions& options, const Tokenizer& tokenizer,
                           const GenerationConfig& generation) {
  EngineRequest request;
  request.prompt = make_prompt(options, tokenizer);
  request.max_tokens = options.max_new_tokens;
  request.ignore_eos = options.ignore_eos;
  request.sampling.params = {float(options.temperature.value_or(generation.temperature.value_or(0.0))),
                             options.top_k.value_or(generation.top_k.value_or(0)),
                             float(options.top_p.value_or(generation.top_p.value_or(1.0))),
                             float(options.min_p.value_or(generation.min_p.value_or(0.0)))};
  request.sampling.seed = options.seed;
  return request;
}

// An engine for this one request: a cache that holds it and nothing more.
EngineConfig engine_config(const GenerateOptions& options, const EngineRequest& request,
                           const GenerationConfig& generation, const CausalLM& model) {
  EngineConfig config;
  const int64_t length = int64_t(request.prompt.size()) + request.max_tokens;
  config.kv_cache_tokens = (length + config.block_size - 1) / config.block_size * config.block_size;
  config.cache_dtype = cache_dtype_from_name(options.kv_dtype);
  config.scheduler.max_num_seqs = 1;
  config.state_snapshots = 0;
  config.eos_token_ids = generation.eos_token_ids;
  apply_speculative_flags(options.speculative, model, config);
  return config;
}

void write_stdout(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Acceptance (overall and by draft position), SGLang's "accept length" (tokens a verifying
// step emits) and the drafter's share of the time.
void log_speculation(const EngineMetrics& metrics) {
  std::string by_position;
  for (int i = 0; i < EngineMetrics::kMaxDraftTokens && metrics.spec_drafted_at[size_t(i)] > 0; ++i)
    by_position +=
        fmt::format("{}{:.0f}%", i ? " " : "",
                    100.0 * double(metrics.spec_accepted_at[size_t(i)]) / double(metrics.spec_drafted_at[size_t(i)]));
  spdlog::info(
      "speculative decoding: {} steps verified {} drafted tokens, {} accepted ({:.1f}%; by position {}); mean "
      "accepted length {:.2f}; drafting {:.1f}% of the time",
      int64_t(metrics.spec_drafts), int64_t(metrics.spec_draft_tokens), int64_t(metrics.spec_accepted_tokens),
      100.0 * double(metrics.spec_accepted_tokens) / double(std::max<int64_t>(1, metrics.spec_draft_tokens)),
      by_position, double(metrics.spec_drafts + metrics.spec_accepted_tokens) / double(metrics.spec_drafts),
      100.0 * double(metrics.spec_draft_us) / double(std::max<int64_t>(1, metrics.spec_draft_us + metrics.forward_us)));
}

// Streams the request's text to stdout as the engine produces it; logs the speeds.
void stream_request(Engine& engine, const ModelExecutor& executor, EngineRequest request) {
  const EngineMetrics& metrics = engine.metrics();
  const int64_t prompt_tokens = int64_t(request.prompt.size());
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<RequestHandle> handle;
  try {
    handle = engine.submit(std::move(request));
  } catch (const EngineRejection& e) {  // what serve answers with a 400: the request's own fault
    fail("{}", e.what());
  }
  double first_token_seconds = 0;
  int64_t tokens = 0;
  for (bool finished = false; !finished;) {
    for (const StreamEvent& event : handle->wait(std::chrono::milliseconds(100))) {
      if (tokens == 0 && !event.token_ids.empty()) first_token_seconds = seconds_since(start);
      tokens += int64_t(event.token_ids.size());
      write_stdout(event.text);
      MLA_CHECK(event.finish_reason != "error", "{}", event.error);
      finished = finished || event.finished;
    }
  }
  const double seconds = seconds_since(start);
  spdlog::info("prefill: {} tokens, {:.1f} tok/s; decode: {} tokens, {:.1f} tok/s", prompt_tokens,
               double(prompt_tokens) / first_token_seconds, tokens,
               tokens > 1 ? double(tokens - 1) / (seconds - first_token_seconds) : 0.0);
  if (metrics.spec_drafts > 0) log_speculation(metrics);
  if (executor.ranks() > 1)
    spdlog::info("{} ranks; collectives took {:.1f}% of the time on rank 0 (waiting for other ranks included)",
                 executor.ranks(), 100.0 * executor.collective_seconds() / seconds);
}

// Loads the model and runs the request through the engine, as serve does; under mpirun the
// other ranks follow rank 0.
void run_generate(const GenerateOptions& options) {
  MLA_CHECK(
      !options.prompt.empty() || !options.ids.empty() || !options.prompt_file.empty() || !options.ids_file.empty(),
      "generate needs --prompt, --ids, --prompt-file or --ids-file");
  MLA_CHECK(options.max_new_tokens > 0, "--max-new-tokens must be positive");
  check_speculative_flags(options.speculative);
  auto model = load_causal_lm(options.model_dir, activation_quant_from_name(options.parallel.act_quant));
  auto tokenizer = Tokenizer::load(options.model_dir);
  const GenerationConfig generation = load_generation_config(options.model_dir);
  EngineRequest request = make_request(options, *tokenizer, generation);
  MLA_CHECK(int64_t(request.prompt.size()) + request.max_tokens <= model->config().max_position_embeddings,
            "prompt ({} tokens) plus {} new tokens exceed the context length {}", request.prompt.size(),
            request.max_tokens, model->config().max_position_embeddings);
  if (is_mpi_follower()) return follow_rank_zero(*model, executor_options(options.parallel));
  auto executor = create_executor(*model, executor_options(options.parallel));
  Engine engine(*executor, *tokenizer, engine_config(options, request, generation, *model));
  stream_request(engine, *executor, std::move(request));
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "stream generated text to stdout");
  cmd->add_option("--model", options->model_dir, "model directory or .gguf file")->required();
  auto* prompt = cmd->add_option("--prompt", options->prompt, "prompt text");
  auto* ids = cmd->add_option("--ids", options->ids, "prompt as comma-separated token ids");
  auto* prompt_file = cmd->add_option("--prompt-file", options->prompt_file,
                                      "prompt text read from a file (a prompt too long for the command line)");
  auto* ids_file = cmd->add_option("--ids-file", options->ids_file,
                                   "prompt as token ids read from a file, separated by commas or whitespace");
  const std::vector<CLI::Option*> sources = {prompt, ids, prompt_file, ids_file};
  for (CLI::Option* a : sources)
    for (CLI::Option* b : sources)
      if (a != b) a->excludes(b);
  cmd->add_option("-n,--max-new-tokens", options->max_new_tokens, "tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", options->temperature,
                  "0: greedy (default: the checkpoint's generation_config.json, else 0)");
  cmd->add_option("--top-k", options->top_k, "0: no limit (default: generation_config.json's, else 0)");
  cmd->add_option("--top-p", options->top_p, "nucleus probability (default: generation_config.json's, else 1)");
  cmd->add_option("--min-p", options->min_p,
                  "minimum probability relative to the best (default: generation_config.json's, else 0)");
  cmd->add_option("--seed", options->seed, "sampling seed")->capture_default_str();
  cmd->add_flag("--chat", options->chat, "send the prompt as a user message through the model's chat template");
  cmd->add_option("--chat-template", options->chat_template,
                  "Jinja chat template file for --chat (default: the checkpoint's)");
  cmd->add_flag("--ignore-eos", options->ignore_eos, "do not stop at the end-of-sequence token");
  cmd->add_option("--kv-cache-dtype", options->kv_dtype,
                  "fp32 (the exact maths, as logits computes) | bf16 | fp8 (as serve stores them)")
      ->check(CLI::IsMember({"bf16", "fp8", "fp32"}))
      ->capture_default_str();
  add_parallel_flags(cmd, options->parallel);
  add_speculative_flags(cmd, options->speculative);
  cmd->callback([options] { run_generate(*options); });
}

}  // namespace mlaserve
