#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/commands.h"
#include "tools/bench/report.h"

namespace mlaserve {
namespace {

struct BenchServeOptions {
  BenchOptions bench;
  RandomDataset dataset;
  SharedPrefixDataset gsp;
  std::string tokenizer_dir, dataset_name = "random", json_file, svg_file, sweep, request_rate = "inf",
                             response_format_file;
  int64_t max_concurrency = 0, warmup_requests = 0, long_prefill = 0;
  bool no_progress = false;
};

std::vector<int64_t> parse_sweep(const std::string& text) {
  std::vector<int64_t> levels;
  for (int32_t level : parse_id_list(text)) {
    MLA_CHECK(level > 0, "--sweep levels must be positive, got {}", level);
    levels.push_back(level);
  }
  return levels;
}

constexpr const char* kSharedPrefix = "generated-shared-prefix";

// A run's prompts, fresh for each sweep level (seeds offset by `level`), so that a level never
// hits the prefix cache the last one filled.
std::vector<BenchPrompt> make_prompts(const BenchServeOptions& options, const Tokenizer& tokenizer, uint64_t level) {
  if (options.dataset_name == kSharedPrefix) {
    SharedPrefixDataset gsp = options.gsp;
    gsp.seed = options.dataset.seed + level;
    return make_shared_prefix_prompts(tokenizer, gsp);
  }
  RandomDataset dataset = options.dataset;
  dataset.seed += level;
  int64_t mismatched = 0;
  std::vector<BenchPrompt> prompts = make_random_prompts(tokenizer, dataset, &mismatched);
  if (mismatched) spdlog::warn("{} prompts do not re-tokenize to their drawn length", mismatched);
  return prompts;
}

// Runs one benchmark and prints its block; returns its summary and JSON.
std::pair<Summary, nlohmann::json> run_once(const BenchServeOptions& options, const Tokenizer& tokenizer,
                                            const std::vector<BenchPrompt>& prompts, int64_t concurrency,
                                            const std::string& label) {
  const RunResult run = run_benchmark(options.bench, tokenizer, prompts, concurrency);
  const Summary summary = summarize(run);
  std::fputs(summary_block(summary, label).c_str(), stdout);
  std::fflush(stdout);
  return {summary, summary_json(summary, run)};
}

// --long-prefill: one request of that many prompt tokens and one output token, its time to
// first token the cold prefill's. The prompt is drawn with a seed of its own each run, so no
// earlier run's prompt sits in the server's prefix cache; a server that still reports cached
// prompt tokens is warned about (the figure is then not cold).
nlohmann::json run_long_prefill(const BenchServeOptions& options, const Tokenizer& tokenizer) {
  const RunResult run = [&] {
    RandomDataset one = options.dataset;
    one.input_len = options.long_prefill, one.output_len = 1, one.range_ratio = 0, one.num_prompts = 1;
    one.seed = std::random_device{}() ^ uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
    return run_benchmark(options.bench, tokenizer, make_random_prompts(tokenizer, one), 1);
  }();
  const Summary summary = summarize(run);
  std::fputs(summary_block(summary, fmt::format("long prefill, {} tokens", options.long_prefill)).c_str(), stdout);
  const int64_t cached = run.records.empty() ? 0 : run.records[0].cached_tokens;
  if (cached > 0)
    spdlog::warn("the server reports {} of the prompt's tokens served from its prefix cache: this TTFT is not cold",
                 cached);
  std::printf("Cold time to first token for %lld tokens: %.1f ms\n", (long long)options.long_prefill,
              summary.ttft_ms.mean);
  nlohmann::json json = summary_json(summary, run);
  json["long_prefill_tokens"] = options.long_prefill;
  json["cached_tokens"] = cached;
  return json;
}

// The warm-up requests (prompts of their own), then one run per concurrency level (--sweep,
// charted to an SVG, or --max-concurrency alone: its run's object is the result).
nlohmann::json run_levels(const BenchServeOptions& options, const Tokenizer& tokenizer) {
  if (options.warmup_requests > 0) {
    RandomDataset warmup = options.dataset;
    warmup.num_prompts = options.warmup_requests;
    warmup.seed = options.dataset.seed + 1000003;  // prompts of their own: no prefix-cache help
    BenchOptions quiet = options.bench;
    quiet.progress = false;
    run_benchmark(quiet, tokenizer, make_random_prompts(tokenizer, warmup), 1);
  }
  const std::vector<int64_t> levels =
      options.sweep.empty() ? std::vector<int64_t>{options.max_concurrency} : parse_sweep(options.sweep);
  std::vector<Summary> summaries;
  nlohmann::json out;
  out["runs"] = nlohmann::json::array();
  for (size_t i = 0; i < levels.size(); ++i) {
    const std::vector<BenchPrompt> prompts = make_prompts(options, tokenizer, i);
    auto [summary, json] = run_once(options, tokenizer, prompts, levels[i],
                                    levels[i] > 0 ? fmt::format("concurrency {}", levels[i]) : "unbounded");
    summaries.push_back(summary);
    out["runs"].push_back(json);
  }
  if (!options.sweep.empty()) {
    const std::string svg_path = options.svg_file.empty() ? "bench-sweep.svg" : options.svg_file;
    std::ofstream(svg_path) << sweep_svg(summaries,
                                         fmt::format("{} on {}", options.bench.model, options.bench.base_url));
    spdlog::info("wrote the sweep chart to '{}'", svg_path);
  }
  return levels.size() == 1 ? out["runs"][0] : out;
}

nlohmann::json config_json(const BenchServeOptions& options) {
  nlohmann::json config = {{"base_url", options.bench.base_url},
                           {"endpoint", options.bench.endpoint},
                           {"model", options.bench.model},
                           {"dataset", options.dataset_name},
                           {"input_len", options.dataset.input_len},
                           {"output_len", options.dataset.output_len},
                           {"range_ratio", options.dataset.range_ratio},
                           {"num_prompts", options.dataset.num_prompts},
                           {"request_rate", options.request_rate},
                           {"seed", options.dataset.seed},
                           {"ignore_eos", options.bench.ignore_eos}};
  if (!options.bench.response_format.empty())
    config["response_format"] = nlohmann::json::parse(options.bench.response_format);
  if (options.dataset_name == kSharedPrefix)
    config["gsp"] = {{"num_groups", options.gsp.num_groups},
                     {"prompts_per_group", options.gsp.prompts_per_group},
                     {"system_prompt_len", options.gsp.system_prompt_len},
                     {"question_len", options.gsp.question_len},
                     {"output_len", options.gsp.output_len}};
  return config;
}

int bench_serve(BenchServeOptions& options) {
  MLA_CHECK(options.dataset_name == "random" || options.dataset_name == kSharedPrefix,
            "--dataset '{}' is not supported (random, {})", options.dataset_name, kSharedPrefix);
  MLA_CHECK(options.bench.endpoint == "completions" || options.bench.endpoint == "chat",
            "--endpoint must be completions or chat");
  MLA_CHECK(!options.tokenizer_dir.empty(), "bench-serve needs --tokenizer DIR (the served model's tokenizer files)");
  options.bench.request_rate =
      options.request_rate == "inf" ? std::numeric_limits<double>::infinity() : std::stod(options.request_rate);
  options.bench.progress = !options.no_progress;
  if (!options.response_format_file.empty()) {
    MLA_CHECK(options.bench.endpoint == "chat", "--response-format needs --endpoint chat");
    std::ifstream file(options.response_format_file);
    MLA_CHECK(file.good(), "cannot read '{}'", options.response_format_file);
    const nlohmann::json format = nlohmann::json::parse(file, nullptr, false);
    MLA_CHECK(format.is_object(), "'{}' is not a JSON object (a chat request's response_format)",
              options.response_format_file);
    options.bench.response_format = format.dump();
  }
  auto tokenizer = Tokenizer::load(options.tokenizer_dir);
  if (options.bench.model.empty()) options.bench.model = discover_model(options.bench);
  nlohmann::json out =
      options.long_prefill > 0 ? run_long_prefill(options, *tokenizer) : run_levels(options, *tokenizer);
  out["config"] = config_json(options);
  if (!options.json_file.empty()) {
    std::ofstream file(options.json_file);
    file << out.dump(2) << "\n";
    MLA_CHECK(file.good(), "cannot write '{}'", options.json_file);
  }
  const auto all_failed = [](const nlohmann::json& run) { return run["completed"].get<int64_t>() == 0; };
  const bool failed =
      out.contains("runs") ? std::all_of(out["runs"].begin(), out["runs"].end(), all_failed) : all_failed(out);
  return failed ? 1 : 0;
}

}  // namespace

void add_bench_serve_command(CLI::App& app) {
  auto options = std::make_shared<BenchServeOptions>();
  CLI::App* cmd =
      app.add_subcommand("bench-serve", "benchmark an OpenAI-compatible server (SGLang bench_serving style)");
  cmd->add_option("--base-url", options->bench.base_url, "server URL")->capture_default_str();
  cmd->add_option("--endpoint", options->bench.endpoint, "completions | chat")->capture_default_str();
  cmd->add_option("--model", options->bench.model, "model name in requests (default: the server's first)");
  cmd->add_option("--tokenizer", options->tokenizer_dir, "directory with the model's tokenizer files")->required();
  cmd->add_option("--api-key", options->bench.api_key, "Bearer token");
  cmd->add_option("--dataset", options->dataset_name, "random | generated-shared-prefix (SGLang's; --gsp-*)")
      ->capture_default_str();
  cmd->add_option("--gsp-num-groups", options->gsp.num_groups, "shared-prefix groups (system prompts)")
      ->capture_default_str();
  cmd->add_option("--gsp-prompts-per-group", options->gsp.prompts_per_group, "questions per system prompt")
      ->capture_default_str();
  cmd->add_option("--gsp-system-prompt-len", options->gsp.system_prompt_len, "system prompt tokens")
      ->capture_default_str();
  cmd->add_option("--gsp-question-len", options->gsp.question_len, "question tokens")->capture_default_str();
  cmd->add_option("--gsp-output-len", options->gsp.output_len, "max tokens to generate per question")
      ->capture_default_str();
  cmd->add_option("--input-len", options->dataset.input_len, "prompt tokens")->capture_default_str();
  cmd->add_option("--output-len", options->dataset.output_len, "max tokens to generate")->capture_default_str();
  cmd->add_option("--range-ratio", options->dataset.range_ratio, "lengths uniform in len*(1 -+ ratio)")
      ->capture_default_str();
  cmd->add_option("--num-prompts", options->dataset.num_prompts, "requests per run")->capture_default_str();
  cmd->add_option("--max-concurrency", options->max_concurrency, "requests in flight at most (0: unbounded)")
      ->capture_default_str();
  cmd->add_option("--request-rate", options->request_rate, "Poisson arrivals per second, or inf")
      ->capture_default_str();
  cmd->add_option("--seed", options->dataset.seed, "dataset and arrival seed")->capture_default_str();
  cmd->add_option("--warmup-requests", options->warmup_requests, "requests sent first and not counted")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", options->bench.ignore_eos, "ask the server to generate --output-len tokens");
  cmd->add_option("--response-format", options->response_format_file,
                  "a JSON file holding a response_format object sent with each chat request (constrained decoding)");
  cmd->add_option("--timeout", options->bench.timeout_s, "seconds per request")->capture_default_str();
  cmd->add_option("--json", options->json_file, "write all results and per-request records");
  cmd->add_option("--sweep", options->sweep, "concurrency levels, e.g. 1,2,4,8,16,32 (draws an SVG chart)");
  cmd->add_option("--svg", options->svg_file, "chart path for --sweep (default bench-sweep.svg)");
  cmd->add_option("--long-prefill", options->long_prefill, "measure cold TTFT of one N-token prompt");
  cmd->add_flag("--no-progress", options->no_progress, "no progress bar");
  cmd->callback([options] {
    options->bench.seed = options->dataset.seed;
    if (bench_serve(*options) != 0) fail("every benchmark request failed (see the errors above)");
  });
}

}  // namespace mlaserve
