#include "tools/plan/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace mlaserve {
namespace {

constexpr double kGB = 1e9;

double linear_params(const ParamCounts& p) { return double(p.attention + p.dense_mlp + p.shared_experts); }
double bf16_params(const ParamCounts& p) { return double(p.embedding + p.lm_head + p.moe_other + p.norms); }

// Bytes of one latent-cache value in the deployment's --kv-cache-dtype.
int64_t kv_value_bytes(const std::string& dtype) {
  if (dtype == "bf16") return 2;
  if (dtype == "fp8") return 1;
  if (dtype == "fp32") return 4;
  fail("--kv-cache-dtype must be bf16, fp8 or fp32, not '{}'", dtype);
}

// Free bytes for cache over all devices, and the cache cost of one sequence of `context`
// tokens: the MLA latent is replicated on every attention-TP rank, KDA state split by heads.
struct CacheBudget {
  double free_bytes;
  double bytes_per_sequence;
};

CacheBudget cache_budget(const Plan& plan, int64_t devices, int64_t context) {
  const double usable = double(devices) * plan.input.hardware.memory_gb * kGB * plan.input.hardware.usable_fraction;
  const double tp = double(std::min(plan.input.tp, devices));
  return {usable - plan.weight_bytes,
          double(plan.kv_bytes_per_token) * double(context) * tp + double(plan.state_bytes_per_sequence)};
}

// Seconds for one decode step of `batch` sequences at `context` tokens each.
double decode_step_seconds(const Plan& plan, const ModelSpec& m, double batch) {
  const PlanInput& in = plan.input;
  const Hardware& hw = in.hardware;
  const double devices = double(in.devices), bandwidth = hw.bandwidth_gb_s * kGB;
  const double touched = m.experts_touched(batch);  // each read once
  const double expert_bytes = double(m.params_per_expert) * plan.format.routed_expert;
  const double routed_active = double(m.moe_layers) * double(m.experts_per_token) * expert_bytes;
  const double weights = plan.active_weight_bytes - routed_active + double(m.moe_layers) * touched * expert_bytes;
  const double replicas = std::max(1.0, devices / double(in.tp));  // cache split over data/pipeline groups
  const double cache = batch * (double(plan.kv_bytes_per_token) * double(in.context) / replicas +
                                double(plan.state_bytes_per_sequence) / devices);
  const double memory_time = weights / (devices * bandwidth) + cache / bandwidth;
  const double peak = (plan.format.format == "fp8" && hw.fp8_tflops > 0 ? hw.fp8_tflops : hw.bf16_tflops) * 1e12;
  const double compute_time = 2.0 * double(m.active_params) * batch / (devices * peak);
  // Two all-reduces per layer (after attention, after the FFN), latency-bound at decode.
  const double hop_latency = (in.devices > in.devices_per_node ? 4.0 : 1.0) * hw.collective_latency_us * 1e-6;
  const double comm_time = in.devices > 1 ? 2.0 * double(m.num_layers) * hop_latency : 0.0;
  return std::max(memory_time, compute_time) + comm_time;
}

double prefill_tokens_per_second(const Plan& plan, const ModelSpec& m) {
  const Hardware& hw = plan.input.hardware;
  // 2 FLOPs per active weight, plus causal attention: MLA expanded form at average depth C/2,
  // KDA chunked form ~ 4 d^2 per head and token.
  const double attention = double(m.mla_layers) * 2.0 * double(m.num_attention_heads) *
                               double(m.qk_head_dim + m.v_head_dim) * double(plan.input.context) / 2.0 +
                           double(m.kda_layers) * double(m.kda_heads) * 4.0 * double(m.kda_head_dim * m.kda_head_dim);
  const double peak = (plan.format.format == "fp8" && hw.fp8_tflops > 0 ? hw.fp8_tflops : hw.bf16_tflops) * 1e12;
  return double(plan.input.devices) * peak / (2.0 * double(m.active_params) + attention);
}

}  // namespace

WeightBytes weight_bytes_of(const std::string& requested, const ModelSpec& model) {
  const std::string format = requested == "native" ? model.native_weights : requested;
  constexpr double kFp8 = 1.0 + 4.0 / (128.0 * 128.0);  // e4m3 + an f32 scale per 128x128 block
  if (format == "bf16") return {format, 2, 2};
  if (format == "fp8") return {format, kFp8, kFp8};
  // W8A8 int-quantized: every linear layer int8, a scale per output row (< 0.1% of its bytes).
  if (format == "int8") return {format, 1, 1};
  if (format == "mxfp4") return {format, 0.5 + 1.0 / 32.0, 2};  // E2M1 + an E8M0 scale per 32
  if (format.starts_with("int4")) {
    const int64_t group = format.size() > 5 ? std::stoll(format.substr(5)) : 32;
    MLA_CHECK(group > 0, "--weights int4:GROUP needs a positive group size");
    return {fmt::format("int4:{}", group), 0.5 + 2.0 / double(group), 2};  // + a bf16 scale per group
  }
  fail("unknown --weights '{}' (native, bf16, fp8, int8, int4[:group], mxfp4)", requested);
}

HeadPadding head_padding(int64_t heads, int64_t tp) {
  MLA_CHECK(tp > 0 && heads % tp == 0, "{} attention heads do not divide by tensor-parallel size {}", heads, tp);
  HeadPadding padding;
  padding.heads_per_rank = heads / tp;
  const int64_t h = padding.heads_per_rank;
  padding.fast_kernel_shape = h == 4 || h == 8 || h % 16 == 0;
  padding.padded_heads = padding.fast_kernel_shape ? h : (h < 4 ? 4 : h < 8 ? 8 : (h + 15) / 16 * 16);
  padding.padding_overhead = double(padding.padded_heads) / double(h) - 1.0;
  return padding;
}

Plan make_plan(const PlanInput& raw_input) {
  Plan plan;
  plan.input = raw_input;
  PlanInput& in = plan.input;
  const ModelSpec& m = in.model;
  MLA_CHECK(in.devices > 0 && in.context > 0 && in.concurrency > 0,
            "--devices, --context and --concurrency must be positive");
  if (in.devices_per_node <= 0) in.devices_per_node = in.hardware.devices_per_node;
  if (in.tp <= 0) in.tp = std::min(in.devices, in.devices_per_node);
  plan.padding = head_padding(m.num_attention_heads, in.tp);
  plan.format = weight_bytes_of(in.weights, m);
  const ParamCounts& p = m.params;
  plan.weight_bytes =
      double(p.routed_experts) * plan.format.routed_expert + linear_params(p) * plan.format.linear + bf16_params(p) * 2;
  const double routed_active = double(m.moe_layers * m.experts_per_token * m.params_per_expert);
  plan.active_weight_bytes = routed_active * plan.format.routed_expert + linear_params(p) * plan.format.linear +
                             double(p.lm_head > 0 ? p.lm_head : p.embedding) * 2 + double(p.moe_other + p.norms) * 2;
  plan.kv_bytes_per_token = m.kv_bytes_per_token(kv_value_bytes(in.kv_cache_dtype));
  plan.state_bytes_per_sequence = m.recurrent_state_bytes_per_sequence() + m.conv_state_bytes_per_sequence();
  const CacheBudget budget = cache_budget(plan, in.devices, in.context);
  plan.fits = budget.free_bytes >= budget.bytes_per_sequence * double(in.concurrency);
  plan.nodes = (in.devices + in.devices_per_node - 1) / in.devices_per_node;
  for (int64_t nodes = 1; nodes <= 64 && plan.nodes_needed == 0; ++nodes) {
    const CacheBudget option = cache_budget(plan, nodes * in.devices_per_node, in.context);
    if (option.free_bytes >= option.bytes_per_sequence * double(in.concurrency)) plan.nodes_needed = nodes;
  }
  plan.usable_per_device_gb = in.hardware.memory_gb * in.hardware.usable_fraction;
  plan.memory_per_device_gb =
      (plan.weight_bytes + budget.bytes_per_sequence * double(in.concurrency)) / double(in.devices) / kGB;
  const double free = std::max(0.0, budget.free_bytes);
  plan.cache_free_bytes = free;
  plan.max_kv_tokens = int64_t(free / (double(plan.kv_bytes_per_token) * double(std::min(in.tp, in.devices))));
  plan.max_concurrency = int64_t(free / budget.bytes_per_sequence);
  plan.weight_bytes_per_rank = plan.weight_bytes / double(in.devices);
  if (in.devices > 1) {
    // Per decoded token, each rank: an all-reduce of the hidden state (bf16) after attention
    // and after the FFN of every layer plus one for the embedding, a ring moving 2(N-1)/N of
    // the message; and an all-gather of fp32 logits, (N-1)/N of the vocabulary.
    const double n = double(in.devices), ring = 2.0 * (n - 1.0) / n;
    const double hidden_bytes = double(m.hidden_size) * 2.0;
    const double vocab = double(m.params.embedding) / double(m.hidden_size);
    plan.comm_bytes_per_token_per_rank =
        (2.0 * double(m.num_layers) + 1.0) * hidden_bytes * ring + vocab * 4.0 * (n - 1.0) / n;
  }
  plan.decode_tok_s_single = 1.0 / decode_step_seconds(plan, m, 1.0);
  plan.decode_tok_s_batch = double(in.concurrency) / decode_step_seconds(plan, m, double(in.concurrency));
  plan.prefill_tok_s = prefill_tokens_per_second(plan, m);
  plan.price_per_hour = double(in.devices) * in.price_per_hour.value_or(in.hardware.price_per_hour);
  if (plan.price_per_hour > 0) {
    plan.roofline_tok_s_per_dollar_hour = plan.decode_tok_s_batch / plan.price_per_hour;
    if (in.measured_tok_s) plan.tok_s_per_dollar_hour = *in.measured_tok_s / plan.price_per_hour;
  }
  if (in.measured_tok_s) plan.measured_vs_roofline = *in.measured_tok_s / plan.decode_tok_s_batch;
  return plan;
}

namespace {

nlohmann::json params_json(const ParamCounts& p) {
  return {{"embedding", p.embedding},           {"lm_head", p.lm_head},
          {"attention", p.attention},           {"dense_mlp", p.dense_mlp},
          {"routed_experts", p.routed_experts}, {"shared_experts", p.shared_experts},
          {"moe_other", p.moe_other},           {"norms", p.norms}};
}

nlohmann::json padding_json(const HeadPadding& padding) {
  return {{"heads_per_rank", padding.heads_per_rank},
          {"fast_kernel_shape", padding.fast_kernel_shape},
          {"padded_heads", padding.padded_heads},
          {"padding_overhead", padding.padding_overhead}};
}

}  // namespace

nlohmann::json plan_to_json(const Plan& plan) {
  const PlanInput& in = plan.input;
  const ModelSpec& m = in.model;
  const ParamCounts& p = m.params;
  nlohmann::json out = {
      {"model", m.name},
      {"family", m.family},
      {"weights", plan.format.format},
      {"hardware", in.hardware.name},
      {"hardware_note", in.hardware.note},
      {"kv_cache_dtype", in.kv_cache_dtype},
      {"devices", in.devices},
      {"devices_per_node", in.devices_per_node},
      {"tp", in.tp},
      {"context", in.context},
      {"concurrency", in.concurrency},
      {"total_params", p.total()},
      {"active_params", m.active_params},
      {"params", params_json(p)},
      {"layers", {{"total", m.num_layers}, {"mla", m.mla_layers}, {"kda", m.kda_layers}, {"moe", m.moe_layers}}},
      {"weight_bytes", plan.weight_bytes},
      {"active_weight_bytes_per_token", plan.active_weight_bytes},
      {"kv_bytes_per_token", plan.kv_bytes_per_token},
      {"state_bytes_per_sequence", plan.state_bytes_per_sequence},
      {"kda_recurrent_state_bytes", m.recurrent_state_bytes_per_sequence()},
      {"kda_conv_state_bytes", m.conv_state_bytes_per_sequence()},
      {"memory_per_device_gb", plan.memory_per_device_gb},
      {"weight_bytes_per_rank", plan.weight_bytes_per_rank},
      {"comm_bytes_per_token_per_rank", plan.comm_bytes_per_token_per_rank},
      {"usable_memory_per_device_gb", plan.usable_per_device_gb},
      {"fits", plan.fits},
      {"nodes", plan.nodes},
      {"nodes_needed", plan.nodes_needed},
      {"max_kv_tokens", plan.max_kv_tokens},
      {"max_concurrency", plan.max_concurrency},
      {"decode_tok_s_single", plan.decode_tok_s_single},
      {"decode_tok_s_batch", plan.decode_tok_s_batch},
      {"prefill_tok_s", plan.prefill_tok_s},
      {"price_per_hour", plan.price_per_hour},
      {"roofline_tok_s_per_dollar_hour", plan.roofline_tok_s_per_dollar_hour},
      {"head_padding", padding_json(plan.padding)}};
  if (in.measured_tok_s) {
    out["measured_tok_s"] = *in.measured_tok_s;
    out["measured_tok_s_per_node"] = *in.measured_tok_s / double(plan.nodes);
    out["measured_vs_roofline"] = *plan.measured_vs_roofline;
  }
  if (plan.tok_s_per_dollar_hour) out["tok_s_per_dollar_hour"] = *plan.tok_s_per_dollar_hour;
  return out;
}

std::string plan_to_table(const Plan& plan) {
  const PlanInput& in = plan.input;
  const ModelSpec& m = in.model;
  auto row = [](std::string& out, const std::string& key, const std::string& value) {
    out += fmt::format("{:<40}{}\n", key, value);
  };
  std::string out = fmt::format("==== mlaserve plan: {} ({} weights) on {} x {} ====\n", m.name, plan.format.format,
                                in.devices, in.hardware.name);
  row(out, "Hardware:", in.hardware.note);
  row(out, "Parameters (total / active per token):",
      fmt::format("{:.1f} B / {:.1f} B", m.params.total() / 1e9, m.active_params / 1e9));
  row(out, "  routed experts:",
      fmt::format("{:.1f} B in {} MoE layers x {} experts", m.params.routed_experts / 1e9, m.moe_layers,
                  m.n_routed_experts));
  row(out, "Layers (MLA / KDA):", fmt::format("{} / {}", m.mla_layers, m.kda_layers));
  row(out, "Weight bytes:",
      fmt::format("{:.1f} GB ({:.1f} GiB); {:.2f} GB read per token", plan.weight_bytes / 1e9,
                  plan.weight_bytes / double(1ull << 30), plan.active_weight_bytes / 1e9));
  row(out, fmt::format("KV bytes per token (MLA latent, {}):", in.kv_cache_dtype),
      fmt::format("{} ({:.1f} KB)", plan.kv_bytes_per_token, plan.kv_bytes_per_token / 1e3));
  row(out,
      "State bytes per sequence (KDA):", fmt::format("{:.1f} MiB", plan.state_bytes_per_sequence / double(1 << 20)));
  row(out, "Weights / comm per token, per rank:",
      fmt::format("{:.1f} GB / {:.2f} MB", plan.weight_bytes_per_rank / 1e9, plan.comm_bytes_per_token_per_rank / 1e6));
  row(out, "Memory per device (needed / usable):",
      fmt::format("{:.1f} / {:.1f} GB", plan.memory_per_device_gb, plan.usable_per_device_gb));
  row(out, "Fits:",
      fmt::format("{} ({} node(s) given, {} needed for {} x {} tokens)", plan.fits ? "yes" : "NO", plan.nodes,
                  plan.nodes_needed, in.concurrency, in.context));
  row(out, "Max KV tokens / max concurrency:",
      fmt::format("{} / {} at {} tokens", plan.max_kv_tokens, plan.max_concurrency, in.context));
  row(out, "Roofline decode (1 stream):", fmt::format("{:.1f} tok/s", plan.decode_tok_s_single));
  row(out, fmt::format("Roofline decode (batch {}):", in.concurrency),
      fmt::format("{:.1f} tok/s", plan.decode_tok_s_batch));
  row(out, "Roofline prefill:", fmt::format("{:.0f} tok/s", plan.prefill_tok_s));
  row(out, "Price:", fmt::format("${:.2f} per hour", plan.price_per_hour));
  row(out, "Roofline tok/s per $/h:", fmt::format("{:.2f}", plan.roofline_tok_s_per_dollar_hour));
  if (in.measured_tok_s)
    row(out, "Measured tok/s (per node, vs roofline):",
        fmt::format("{:.1f} ({:.1f} per node, {:.0f}% of roofline)", *in.measured_tok_s,
                    *in.measured_tok_s / double(plan.nodes), *plan.measured_vs_roofline * 100));
  if (plan.tok_s_per_dollar_hour)
    row(out, "Measured tok/s per $/h:", fmt::format("{:.2f}", *plan.tok_s_per_dollar_hour));
  row(out, fmt::format("Heads per rank at TP {}:", in.tp),
      plan.padding.fast_kernel_shape
          ? fmt::format("{} (fast MLA kernel shape)", plan.padding.heads_per_rank)
          : fmt::format("{} -> pad to {} (+{:.0f}% attention work) or generic kernel", plan.padding.heads_per_rank,
                        plan.padding.padded_heads, plan.padding.padding_overhead * 100));
  return out;
}

}  // namespace mlaserve
