#include "tools/bench/model_bench.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/dispatch.h"
#include "model/moe.h"
#include "tools/bench/machine.h"
#include "tools/plan/model_spec.h"

namespace mlaserve {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::vector<int32_t> random_tokens(int64_t count, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  for (auto& token : tokens) token = int32_t(rng() % uint64_t(vocab));
  return tokens;
}

// Latent caches (and recurrent states) for the benchmark's sequences: one pool block of
// `capacity` positions each, allocated once on every rank of the executor.
class BenchCaches {
 public:
  BenchCaches(ModelExecutor& executor, int64_t n_sequences, int64_t capacity, CacheDType dtype)
      : config_(executor.config()), capacity_(capacity), dtype_(dtype), block_ids_(size_t(n_sequences)) {
    for (size_t b = 0; b < block_ids_.size(); ++b) block_ids_[b] = int32_t(b);
    latent_bytes_ = (n_sequences * capacity * config_.kv_bytes_per_token(dtype) + 63) / 64 * 64;
    pool_ = executor.allocate_cache(size_t(latent_bytes_ + n_sequences * config_.recurrent_state_bytes()));
  }
  LatentCacheView view(int64_t sequence) const {
    LatentCacheView view{pool_,
                         dtype_,
                         &block_ids_[size_t(sequence)],
                         1,
                         capacity_,
                         config_.cache_layers(),
                         config_.kv_latent_dim(),
                         -1,
                         config_.qk_rope_head_dim};
    if (config_.recurrent_state_bytes() > 0)
      view.state_offset = latent_bytes_ + sequence * config_.recurrent_state_bytes();
    return view;
  }

 private:
  const ModelConfig& config_;
  int64_t capacity_;
  CacheDType dtype_;
  std::vector<int32_t> block_ids_;
  int64_t latent_bytes_ = 0;
  void* pool_ = nullptr;
};

// Seconds to prefill `options.prompt` tokens into sequence 0's cache after `options.depth`
// tokens already there (llama-bench's "pp512 @ d1024"; the depth's own prefill not timed), its
// attention in the form `path` (Auto: the cost model's choice).
double time_prefill(ModelExecutor& executor, const BenchCaches& caches, const ModelBenchOptions& options, MlaPath path,
                    uint64_t seed) {
  const auto tokens = random_tokens(options.depth + options.prompt, executor.config().vocab_size, seed);
  std::vector<float> logits(size_t(executor.config().vocab_size));
  if (options.depth > 0) {
    const ForwardSequence context{std::span(tokens).first(size_t(options.depth)), 0, caches.view(0), MlaPath::Auto,
                                  ForwardSequence::Logits::None};
    executor.forward(std::span(&context, 1), logits.data());
  }
  const ForwardSequence seq{std::span(tokens).subspan(size_t(options.depth)), options.depth, caches.view(0), path,
                            ForwardSequence::Logits::Last};
  const auto start = Clock::now();
  executor.forward(std::span(&seq, 1), logits.data());
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A timed run of decode steps: its seconds and the routed-expert bytes its steps read.
struct DecodeRun {
  double seconds = 0;
  int64_t routed_bytes = 0;
};

// `options.generate` decode steps of `batch` sequences, each starting at `depth` tokens. With
// positions > 1, verification steps: each step a sequence computes `positions` tokens with
// every position's logits, from one position past the last step's first (every draft
// rejected, so the context grows as in plain decode).
DecodeRun time_decode(ModelExecutor& executor, const BenchCaches& caches, const ModelBenchOptions& options,
                      int64_t batch, uint64_t seed, int64_t positions = 1) {
  const ModelConfig& config = executor.config();
  const int64_t depth = std::max<int64_t>(1, options.depth);
  std::vector<std::vector<int32_t>> tokens;
  std::vector<float> logits(size_t(batch * positions * config.vocab_size));
  for (int64_t b = 0; b < batch; ++b) {
    tokens.push_back(random_tokens(depth + options.generate + positions - 1, config.vocab_size, seed + uint64_t(b)));
    const ForwardSequence prefill{std::span(tokens[b]).first(size_t(depth)), 0, caches.view(b), MlaPath::Expanded,
                                  ForwardSequence::Logits::Last};
    executor.forward(std::span(&prefill, 1), logits.data());
  }
  const int64_t routed_before = routed_expert_bytes_read();
  const auto start = Clock::now();
  for (int64_t step = 0; step < options.generate; ++step) {
    std::vector<ForwardSequence> sequences;
    for (int64_t b = 0; b < batch; ++b)
      sequences.push_back({std::span(tokens[b]).subspan(size_t(depth + step), size_t(positions)), depth + step,
                           caches.view(b), MlaPath::Absorbed,
                           positions > 1 ? ForwardSequence::Logits::All : ForwardSequence::Logits::Last});
    executor.forward(sequences, logits.data());
  }
  return {std::chrono::duration<double>(Clock::now() - start).count(), routed_expert_bytes_read() - routed_before};
}

// The machine's limits, measured before and after the model runs: on this kind of shared VM
// one measurement sometimes meets a descheduled core (half the FMA peak, a low triad), and
// the limits do not change within a run, so each is the best of the two.
struct MachineLimits {
  double triad_gb_s = 0, read_gb_s = 0, fma_gflops = 0, bf16_dot_gflops = 0;
  static MachineLimits measure() {
    return {measure_triad_bandwidth_gb_s(), measure_read_bandwidth_gb_s(), measure_peak_fma_gflops(),
            measure_peak_bf16_dot_gflops()};
  }
  MachineLimits best(const MachineLimits& other) const {
    return {std::max(triad_gb_s, other.triad_gb_s), std::max(read_gb_s, other.read_gb_s),
            std::max(fma_gflops, other.fma_gflops), std::max(bf16_dot_gflops, other.bf16_dot_gflops)};
  }
  nlohmann::json json() const {
    return {{"triad_gb_s", triad_gb_s},
            {"read_gb_s", read_gb_s},
            {"fma_gflops", fma_gflops},
            {"bf16_dot_gflops", bf16_dot_gflops}};
  }
};

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;
}

// Lowers the peak-RSS mark to the current RSS (Linux's clear_refs "5"), so that the peak
// reported is the runs', not the bandwidth probe's 768 MB of arrays on top of weights already
// resident (repacked at load). Best effort: elsewhere the peak includes the probe.
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// The timed runs of every repetition: tokens/s of each, and the routed-expert bytes read by
// all the batch-1 and all the batch-B decode steps. With --depth, decode_start holds batch-1
// decode at the start (no context) timed beside each repetition's decode at depth.
struct BenchRuns {
  std::vector<double> prefill, decode, decode_batch, decode_start;
  std::vector<double> verify_cost, verify_batch_cost;  // a verification step's time over a decode step's
  double routed_bytes_alone = 0, routed_bytes_batch = 0;
};

// Batch-1 decode tokens/s at the start of a sequence (depth 0), for comparison with decode at
// options.depth.
double time_decode_at_start(ModelExecutor& executor, const BenchCaches& caches, ModelBenchOptions options,
                            uint64_t seed) {
  options.depth = 0;
  return double(options.generate) / time_decode(executor, caches, options, 1, seed).seconds;
}

BenchRuns time_repetitions(ModelExecutor& executor, const BenchCaches& caches, const ModelBenchOptions& options,
                           MlaPath prefill_path) {
  BenchRuns runs;
  for (int64_t r = 0; r < options.repetitions; ++r) {
    spdlog::info(
        "repetition {}/{}: pp{}, tg{}, tg{} x batch {}{}", r + 1, options.repetitions, options.prompt, options.generate,
        options.generate, options.batch,
        options.depth > 0 ? fmt::format(" (at depth {}), tg{} at the start", options.depth, options.generate) : "");
    runs.prefill.push_back(double(options.prompt) /
                           time_prefill(executor, caches, options, prefill_path, 7 + uint64_t(r)));
    // At depth, decode at the start runs beside decode at depth, before it in even
    // repetitions and after it in odd ones, so a drift in the machine's speed (minutes-long on
    // a shared VM) does not favour either.
    const bool start_first = r % 2 == 0;
    if (options.depth > 0 && start_first)
      runs.decode_start.push_back(time_decode_at_start(executor, caches, options, 17 + uint64_t(r)));
    const DecodeRun alone = time_decode(executor, caches, options, 1, 11 + uint64_t(r));
    if (options.depth > 0 && !start_first)
      runs.decode_start.push_back(time_decode_at_start(executor, caches, options, 17 + uint64_t(r)));
    const DecodeRun batch = time_decode(executor, caches, options, options.batch, 13 + uint64_t(r));
    runs.decode.push_back(double(options.generate) / alone.seconds);
    runs.decode_batch.push_back(double(options.generate * options.batch) / batch.seconds);
    runs.routed_bytes_alone += double(alone.routed_bytes);
    runs.routed_bytes_batch += double(batch.routed_bytes);
    if (options.num_draft_tokens > 0) {
      const int64_t positions = 1 + options.num_draft_tokens;
      runs.verify_cost.push_back(time_decode(executor, caches, options, 1, 11 + uint64_t(r), positions).seconds /
                                 alone.seconds);
      runs.verify_batch_cost.push_back(
          time_decode(executor, caches, options, options.batch, 13 + uint64_t(r), positions).seconds / batch.seconds);
    }
  }
  return runs;
}

// What a decoded token alone and a batch step read: the active weights and the latent cache
// at the run's average depth.
struct DecodeBytes {
  double per_token = 0, per_step = 0;
  nlohmann::json experts_per_layer;  // distinct routed experts a batch step's MoE layer read; null without MoE
};

DecodeBytes decode_bytes(const ModelExecutor& executor, const ModelBenchOptions& options, CacheDType dtype,
                         const BenchRuns& runs) {
  const ModelConfig& config = executor.config();
  const RankWeightBytes weights = executor.weight_bytes();
  const double weights_per_token = weights.active_per_token;
  const double kv_per_token =
      double(config.kv_bytes_per_token(dtype)) * double(std::max<int64_t>(1, options.depth) + options.generate / 2);
  // A batch step reads the weights once, and each routed expert any of its tokens chose once:
  // routed bytes a step / routed bytes a token alone, both counted by moe_forward, is the step's
  // distinct experts per MoE layer over num_experts_per_tok (a ratio, so it holds when this
  // process runs one MPI rank's share). Each further token's embedding row (KB) is left out.
  const double routed_per_token =
      config.n_routed_experts > 0
          ? weights.routed_experts * double(config.num_experts_per_tok) / double(config.n_routed_experts)
          : 0.0;
  const double step_expert_ratio =
      runs.routed_bytes_alone > 0 ? runs.routed_bytes_batch / runs.routed_bytes_alone : 0.0;
  DecodeBytes bytes;
  bytes.per_token = weights_per_token + kv_per_token;
  bytes.per_step = weights_per_token - routed_per_token + routed_per_token * step_expert_ratio +
                   kv_per_token * double(options.batch);
  if (runs.routed_bytes_alone > 0) bytes.experts_per_layer = step_expert_ratio * double(config.num_experts_per_tok);
  return bytes;
}

// 2 FLOPs per active weight, plus each MLA layer's causal attention at the average depth
// d + p/2 counted as the expanded form's (queries against per-head keys and values, not the
// expansion; a hybrid's KDA layers have no softmax attention to count). The output
// projection (lm_head, or the tied embedding) runs for the prompt's last token only
// (Logits::Last, as llama-bench), so it counts once per prompt, not once per token.
double prefill_flops_per_token(const ModelConfig& config, const ModelSpec& spec, const ModelBenchOptions& options) {
  const double attention_flops = double(config.cache_layers()) * 2.0 * double(config.num_attention_heads) *
                                 double(config.qk_head_dim() + config.v_head_dim) *
                                 (double(options.depth) + double(options.prompt) / 2.0);
  const double output_params = double(spec.params.lm_head > 0 ? spec.params.lm_head : spec.params.embedding);
  return 2.0 * (double(spec.active_params) - output_params) + attention_flops +
         2.0 * output_params / double(options.prompt);
}

// With --depth: decode at the start, and decode at depth against it in percent, the median of
// each repetition's pair (the two ran within seconds of each other, where the medians of
// either alone can come from different minutes of a shared machine). Null without --depth.
nlohmann::json depth_comparison(const BenchRuns& runs) {
  if (runs.decode_start.empty()) return {{"decode_start_tok_s", nullptr}, {"decode_depth_change_pct", nullptr}};
  std::vector<double> changes;
  for (size_t r = 0; r < runs.decode_start.size(); ++r)
    changes.push_back(100.0 * (runs.decode[r] / runs.decode_start[r] - 1.0));
  return {{"decode_start_tok_s", median(runs.decode_start)},
          {"decode_start_runs", runs.decode_start},
          {"decode_depth_change_pct", median(changes)},
          {"decode_depth_change_runs", changes}};
}

// With --num-draft-tokens: what a verification step of 1 + k positions costs, in decode steps
// (medians of the repetitions' ratios). Drafting gains only where a verifying step emits more
// tokens than that, before the drafter's own time.
nlohmann::json verification_cost(const ModelBenchOptions& options, const BenchRuns& runs) {
  if (runs.verify_cost.empty())
    return {{"num_draft_tokens", 0}, {"verify_cost", nullptr}, {"verify_batch_cost", nullptr}};
  return {{"num_draft_tokens", options.num_draft_tokens},
          {"verify_cost", median(runs.verify_cost)},
          {"verify_cost_runs", runs.verify_cost},
          {"verify_batch_cost", median(runs.verify_batch_cost)},
          {"verify_batch_cost_runs", runs.verify_batch_cost}};
}

// The timed runs between two measurements of the machine, and the peak RSS the runs reached.
struct MeasuredRuns {
  MachineLimits before, after;
  BenchRuns runs;
  double rss_mb = 0;
};

MeasuredRuns measure_runs(const ModelBenchOptions& options, ModelExecutor& executor, CacheDType dtype,
                          MlaPath prefill_path) {
  MeasuredRuns out;
  spdlog::info("measuring this machine: memory bandwidth (triad, read) and peak FMA and bf16 dot rates");
  out.before = MachineLimits::measure();
  reset_peak_rss();
  const int64_t capacity =
      std::max<int64_t>(1, options.depth) + std::max(options.prompt, options.generate + options.num_draft_tokens);
  const BenchCaches caches(executor, options.batch, capacity, dtype);
  // As llama-bench: one uncounted run first, which faults the mapped weights in (the first
  // prefill of a fresh process otherwise measures page faults, ~6x slower on mini).
  spdlog::info("warm-up: pp{} (not counted)", options.prompt);
  time_prefill(executor, caches, options, prefill_path, 5);
  out.runs = time_repetitions(executor, caches, options, prefill_path);
  out.rss_mb = peak_rss_mb();  // before the second measurement's arrays
  spdlog::info("measuring this machine again");
  out.after = MachineLimits::measure();
  return out;
}

}  // namespace

void check_model_bench_options(const ModelBenchOptions& options) {
  MLA_CHECK(options.prompt > 0 && options.generate > 0 && options.batch > 0 && options.repetitions > 0,
            "-p, -n, --batch and --repetitions must be positive");
  MLA_CHECK(options.depth >= 0, "--depth must not be negative, got {}", options.depth);
  MLA_CHECK(options.num_draft_tokens >= 0, "--num-draft-tokens must not be negative, got {}", options.num_draft_tokens);
}

namespace {

// What ran: the model, the options, and the kernels the host chose.
nlohmann::json run_description(const ModelBenchOptions& options, const CausalLM& model, const ModelExecutor& executor,
                               const ModelSpec& spec, MlaPath prefill_form) {
  const int64_t heads_per_rank = model.config().num_attention_heads / executor.ranks();
  return {{"model", options.model_dir},
          {"weight_bytes", model.weight_bytes()},
          {"total_params", spec.params.total()},
          {"active_params", spec.active_params},
          {"threads", thread_pool().size()},
          {"ranks", executor.ranks()},
          {"prompt", options.prompt},
          {"mla_decode_kernel", mla_decode_kernel_name(choose_mla_decode_kernel(heads_per_rank, kernel_config()))},
          {"generate", options.generate},
          {"batch", options.batch},
          {"depth", options.depth},
          {"repetitions", options.repetitions},
          {"kv_cache_dtype", options.cache_dtype},
          {"amx", kernel_config().amx},
          {"bf16_terms", kernel_config().bf16_activation_terms},
          {"bf16_dot_gemm", prefill_attention_on_bf16_dot(kernel_config())},
          {"mla_prefill", mla_path_name(prefill_form)}};
}

}  // namespace

nlohmann::json run_model_bench(const ModelBenchOptions& options, const CausalLM& model, ModelExecutor& executor) {
  check_model_bench_options(options);
  const CacheDType dtype = cache_dtype_from_name(options.cache_dtype);
  const MlaPath prefill_path = mla_path_from_name(options.mla_prefill);
  const ModelSpec spec = load_model_spec(options.model_dir);
  const MeasuredRuns measured = measure_runs(options, executor, dtype, prefill_path);
  const BenchRuns& runs = measured.runs;
  const MachineLimits &before = measured.before, &after = measured.after, limits = before.best(after);
  const double rss_mb = measured.rss_mb;
  const double membw = limits.triad_gb_s, read_bw = limits.read_gb_s, peak = limits.fma_gflops;
  const ModelConfig& config = model.config();
  const DecodeBytes bytes = decode_bytes(executor, options, dtype, runs);
  const double flops_per_token = prefill_flops_per_token(config, spec, options);
  const MlaShape shape{config.hidden_size,
                       config.num_attention_heads / executor.ranks(),
                       config.kv_lora_rank,
                       config.qk_nope_head_dim,
                       config.qk_rope_head_dim,
                       config.v_head_dim,
                       0.0,
                       0.0f};
  const MlaPath prefill_form =
      prefill_path != MlaPath::Auto ? prefill_path : mla_prefill_path(shape, options.prompt, options.depth, dtype);
  const double prefill_tok_s = median(runs.prefill), decode_tok_s = median(runs.decode);
  const double batch_tok_s = median(runs.decode_batch);
  const double prefill_gflops = prefill_tok_s * flops_per_token / 1e9;
  const nlohmann::json prefill_bf16_dot_pct =  // null where the build has no bf16 dot
      limits.bf16_dot_gflops > 0 ? nlohmann::json(100.0 * prefill_gflops / limits.bf16_dot_gflops) : nlohmann::json();
  nlohmann::json report = {
      {"prefill_tok_s", prefill_tok_s},
      {"decode_tok_s", decode_tok_s},
      {"decode_batch_tok_s", batch_tok_s},
      {"prefill_runs", runs.prefill},
      {"decode_runs", runs.decode},
      {"decode_batch_runs", runs.decode_batch},
      {"membw_gb_s", membw},
      {"peak_fma_gflops", peak},
      {"bytes_per_decoded_token", bytes.per_token},
      {"decode_roofline_tok_s", membw * 1e9 / bytes.per_token},
      {"decode_roofline_pct", 100.0 * decode_tok_s * bytes.per_token / (membw * 1e9)},
      {"read_bw_gb_s", read_bw},
      {"decode_read_roofline_pct", 100.0 * decode_tok_s * bytes.per_token / (read_bw * 1e9)},
      {"machine_before", before.json()},
      {"machine_after", after.json()},
      {"flops_per_prefill_token", flops_per_token},
      {"prefill_peak_pct", 100.0 * prefill_gflops / peak},
      {"peak_bf16_dot_gflops", limits.bf16_dot_gflops},
      {"prefill_bf16_dot_peak_pct", prefill_bf16_dot_pct},
      {"decode_batch_speedup", batch_tok_s / decode_tok_s},
      {"decode_batch_bytes_per_step", bytes.per_step},
      {"decode_batch_experts_per_layer", bytes.experts_per_layer},
      {"decode_batch_roofline_tok_s", double(options.batch) * membw * 1e9 / bytes.per_step},
      {"decode_batch_roofline_pct", 100.0 * batch_tok_s / double(options.batch) * bytes.per_step / (membw * 1e9)},
      {"decode_batch_speedup_limit", double(options.batch) * bytes.per_token / bytes.per_step},
      {"peak_rss_mb", rss_mb}};
  report.update(run_description(options, model, executor, spec, prefill_form));
  report.update(depth_comparison(runs));
  report.update(verification_cost(options, runs));
  return report;
}

std::string model_bench_table(const nlohmann::json& r) {
  const std::string amx =
      r["amx"].get<bool>() ? fmt::format(", AMX for 16+ token GEMMs ({} activation terms)", r["bf16_terms"].get<int>())
      : r["bf16_dot_gemm"].get<bool>() ? ", vdpbf16ps for BF16 panels of 2+ tokens (activations rounded to bf16)"
                                       : "";
  std::string out = fmt::format(
      "machine: {:.1f} GB/s triad bandwidth, {:.1f} GB/s read, {:.1f} GFLOP/s fp32 FMA peak, {} threads, {} "
      "rank(s){}\n",
      r["membw_gb_s"].get<double>(), r["read_bw_gb_s"].get<double>(), r["peak_fma_gflops"].get<double>(),
      r["threads"].get<int>(), r["ranks"].get<int>(), amx);
  out += fmt::format("model: {} ({:.2f} GB of weights, {:.1f}M params, {:.1f}M active), peak RSS {:.0f} MB\n",
                     r["model"].get<std::string>(), r["weight_bytes"].get<double>() / 1e9,
                     r["total_params"].get<double>() / 1e6, r["active_params"].get<double>() / 1e6,
                     r["peak_rss_mb"].get<double>());
  // llama-bench's test names: "pp512", or "pp512 @ d1024" with tokens already in the cache.
  const int64_t depth = r["depth"].get<int64_t>();
  const std::string at_depth = depth > 0 ? fmt::format(" @ d{}", depth) : "";
  const std::string pp = fmt::format("pp{}{}", r["prompt"].get<int64_t>(), at_depth);
  const std::string tg = fmt::format("tg{}{}", r["generate"].get<int64_t>(), at_depth);
  out += "| test              |        t/s | roofline |\n|-------------------|-----------:|---------:|\n";
  out +=
      fmt::format("| {:<17} | {:10.2f} | {:6.1f}% of peak FLOP/s (fp32 FMA){}; MLA {}\n", pp,
                  r["prefill_tok_s"].get<double>(), r["prefill_peak_pct"].get<double>(),
                  r["prefill_bf16_dot_peak_pct"].is_null() ? ""
                                                           : fmt::format("; {:.1f}% of the bf16 dot's {:.1f} GFLOP/s",
                                                                         r["prefill_bf16_dot_peak_pct"].get<double>(),
                                                                         r["peak_bf16_dot_gflops"].get<double>()),
                  r["mla_prefill"].get<std::string>());
  out +=
      fmt::format("| {:<17} | {:10.2f} | {:6.1f}% of bandwidth ({:.1f} MB/token, limit {:.1f} t/s; {:.1f}% of read)\n",
                  tg, r["decode_tok_s"].get<double>(), r["decode_roofline_pct"].get<double>(),
                  r["bytes_per_decoded_token"].get<double>() / 1e6, r["decode_roofline_tok_s"].get<double>(),
                  r["decode_read_roofline_pct"].get<double>());
  if (!r["decode_start_tok_s"].is_null())
    out += fmt::format("| {:<17} | {:10.2f} | decode at the start; {} {:+.1f}% against it (median of the pairs)\n",
                       fmt::format("tg{}", r["generate"].get<int64_t>()), r["decode_start_tok_s"].get<double>(), tg,
                       r["decode_depth_change_pct"].get<double>());
  const nlohmann::json& experts = r["decode_batch_experts_per_layer"];
  out += fmt::format(
      "| {} x batch {:<4} | {:10.2f} | {:6.1f}% of bandwidth ({:.1f} MB/step{}, limit {:.1f} t/s); {:.2f}x batch 1, "
      "limit {:.2f}x\n",
      tg, r["batch"].get<int64_t>(), r["decode_batch_tok_s"].get<double>(),
      r["decode_batch_roofline_pct"].get<double>(), r["decode_batch_bytes_per_step"].get<double>() / 1e6,
      experts.is_null() ? "" : fmt::format(": {:.1f} routed experts a MoE layer", experts.get<double>()),
      r["decode_batch_roofline_tok_s"].get<double>(), r["decode_batch_speedup"].get<double>(),
      r["decode_batch_speedup_limit"].get<double>());
  if (!r["verify_cost"].is_null())
    out += fmt::format(
        "| {:<17} | {:>10} | a step costs {:.2f} decode steps alone, {:.2f} at batch {}: drafting "
        "gains where a verifying step emits more tokens than that\n",
        fmt::format("{} verify 1+{}", tg, r["num_draft_tokens"].get<int64_t>()), "-", r["verify_cost"].get<double>(),
        r["verify_batch_cost"].get<double>(), r["batch"].get<int64_t>());
  return out;
}

}  // namespace mlaserve
