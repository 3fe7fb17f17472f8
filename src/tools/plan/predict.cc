#include "tools/plan/predict.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace mlaserve {
namespace {

constexpr double kGB = 1e9, kUs = 1e-6;
constexpr int64_t kPrefillChunk = 8192;  // tokens a prefill step takes (vLLM's and SGLang's usual budget)

// Kernels a decode step launches, by layer part, counted from the operations a GPU serving stack
// runs at decode with the usual fusions (docs/planning.md lists them). All-reduces are the
// collectives term's.
constexpr double kMlaKernels = 11, kKdaKernels = 12, kMoeKernels = 10, kLatentMoeKernels = 3, kDenseMlpKernels = 4,
                 kStepKernels = 6;

// How the deployment splits the work: attention tensor-parallel over `tp` devices in each of
// `replicas` groups (sequences spread over them), routed experts over all devices.
struct Layout {
  double devices, tp, replicas;
};

Layout layout_of(const Plan& plan) {
  const PlanInput& in = plan.input;
  const double tp = double(std::min(in.tp, in.devices));
  return {double(in.devices), tp, std::max(1.0, double(in.devices) / tp)};
}

// Per device: bytes/s the weights stream at, FLOP/s of the dense layers and of the routed
// experts' grouped GEMMs (MXFP4 experts on FP4 units, FP8 on FP8 units, where the device has
// them), each at its own efficiency.
struct Rates {
  double bandwidth, dense_flops, expert_flops;
};

Rates rates_of(const Plan& plan) {
  const Hardware& hw = plan.input.hardware;
  const double bf16 = hw.bf16_tflops, fp8 = hw.fp8_tflops > 0 ? hw.fp8_tflops : bf16;
  const std::string& format = plan.format.format;
  const double dense = format == "fp8" || format == "int8" ? fp8 : bf16;
  // GPUs run MXFP4 experts on FP4 units and INT4 ones as bf16 (W4A16); CPUs both on int8 products.
  const bool four_bit = format == "mxfp4" || format.starts_with("int4");
  const double expert = format == "mxfp4" && hw.fp4_tflops > 0 ? hw.fp4_tflops
                        : hw.kind == "cpu" && four_bit         ? fp8
                                                               : dense;
  return {hw.bandwidth_gb_s * kGB * hw.bandwidth_efficiency, dense * 1e12 * hw.flops_efficiency,
          expert * 1e12 * hw.expert_flops_efficiency};
}

double routed_active_params(const ModelSpec& m) {
  return double(m.moe_layers) * double(m.experts_per_token) * double(m.params_per_expert);
}

// Kernels of one forward through every layer.
double kernels_per_forward(const ModelSpec& m) {
  const bool latent_moe = m.config.routed_expert_hidden_size.value_or(m.hidden_size) != m.hidden_size;
  const double moe = kMoeKernels + (latent_moe ? kLatentMoeKernels : 0);
  return double(m.mla_layers) * kMlaKernels + double(m.kda_layers) * kKdaKernels + double(m.moe_layers) * moe +
         double(m.num_layers - m.moe_layers) * kDenseMlpKernels + kStepKernels;
}

// Attention heads a rank computes, as the kernel runs them: padded to the next block it takes.
double attention_heads(const Plan& plan, bool padded) {
  const double heads = double(plan.input.model.num_attention_heads);
  return padded ? heads * double(plan.padding.padded_heads) / double(plan.padding.heads_per_rank) : heads;
}

// One all-reduce of `bytes` over `ranks` devices: a latency and a ring's 2(n-1)/n of the message
// on the node's fabric; over ranks on several nodes, hierarchical: within each node, then each
// device's 1/devices_per_node share across the network at the inter-node figures.
double all_reduce_seconds(const Plan& plan, double ranks, double bytes) {
  const Hardware& hw = plan.input.hardware;
  const double per_node = std::min(ranks, double(plan.input.devices_per_node));
  const double intra = per_node > 1 ? hw.collective_latency_us * kUs +
                                          bytes * 2 * (per_node - 1) / per_node / (hw.interconnect_gb_s * kGB)
                                    : 0;
  if (ranks <= per_node) return intra;
  const double nodes = std::ceil(ranks / per_node);
  return 2 * intra + hw.inter_node_latency_us * kUs +
         bytes / per_node * 2 * (nodes - 1) / nodes / (std::max(hw.inter_node_gb_s, 1e-3) * kGB);
}

// A forward's collectives over `tokens` hidden states in bf16: per layer an all-reduce after
// attention over its tensor-parallel group and one after the MLP or MoE over every device the
// experts spread over, and one for the logits.
double collective_seconds(const Plan& plan, const Layout& layout, double tokens) {
  const ModelSpec& m = plan.input.model;
  const double bytes = std::ceil(tokens / layout.replicas) * double(m.hidden_size) * 2;
  const double attention = all_reduce_seconds(plan, layout.tp, bytes);
  return double(m.num_layers) * (attention + all_reduce_seconds(plan, layout.devices, bytes)) + attention;
}

// Attention FLOPs of one decode position over `context` cached ones: MLA absorbed (scores over
// kv_lora_rank + rope, values over kv_lora_rank), KDA's state update and read-out (~4 d^2 a head).
double decode_attention_flops(const Plan& plan, double context) {
  const ModelSpec& m = plan.input.model;
  const double latent = double(m.config.kv_lora_rank), rope = double(m.config.qk_rope_head_dim);
  const double mla = double(m.mla_layers) * attention_heads(plan, true) * 2 * (2 * latent + rope) * context;
  const double kda = double(m.kda_layers) * double(m.kda_heads) * 4 * double(m.kda_head_dim * m.kda_head_dim);
  return mla + kda;
}

// Bytes of activations one token moves through memory on an attention rank in kernels of their
// own, beside the GEMMs that produce and read them (GPU serving stacks, bf16): per layer two
// fused residual-add + norms (read the residual and the output, write both: 4 passes over the
// hidden state) and two all-reduces (read and write: 2 each); per MoE layer what vLLM's fused
// MoE keeps per token and expert (intermediate_cache1-3): the gate/up outputs and the
// activation's, each written and read back, and each expert's output at the full width, written
// and then read by the sum over the top k. With the experts' columns split over the tp ranks,
// the first two are 1/tp of the expert's width on a rank; the outputs are not split.
double activation_bytes_per_token(const Plan& plan, const Layout& layout) {
  const ModelSpec& m = plan.input.model;
  constexpr double kBf16 = 2, kHiddenPasses = 12;
  const double moe_width = double(m.config.routed_expert_hidden_size.value_or(m.hidden_size));
  const double intermediate = double(m.config.moe_intermediate_size) / layout.tp;
  const double per_expert = 2 * (2 * intermediate) + 2 * intermediate + 2 * moe_width;
  return kBf16 * (double(m.num_layers) * kHiddenPasses * double(m.hidden_size) +
                  double(m.moe_layers) * double(m.experts_per_token) * per_expert);
}

// One decode step of `sequences` sequences, each computing `positions` positions (1, or a
// verified draft and one more) after `context` cached tokens.
StepTime decode_step(const Plan& plan, double sequences, double positions, double context) {
  const ModelSpec& m = plan.input.model;
  const Layout layout = layout_of(plan);
  const Rates rates = rates_of(plan);
  const double tokens = sequences * positions;
  const double replica_sequences = std::ceil(sequences / layout.replicas),
               replica_tokens = replica_sequences * positions;
  const double touched = m.experts_touched(tokens);  // each read once
  const double expert_bytes = double(m.params_per_expert) * plan.format.routed_expert;
  const double dense_bytes = plan.active_weight_bytes - routed_active_params(m) * plan.format.routed_expert;
  const double dense_params = double(m.active_params) - routed_active_params(m);
  StepTime step;
  step.weights = dense_bytes / (layout.tp * rates.bandwidth) +
                 double(m.moe_layers) * touched * expert_bytes / (layout.devices * rates.bandwidth);
  // Every attention rank reads its sequences' whole latent (MLA) and its heads' KDA state, which
  // it also writes back.
  step.cache = replica_sequences *
               (context * double(plan.kv_bytes_per_token) + 2 * double(plan.state_bytes_per_sequence) / layout.tp) /
               rates.bandwidth;
  step.compute =
      replica_tokens * (2 * dense_params + decode_attention_flops(plan, context)) / (layout.tp * rates.dense_flops) +
      tokens * 2 * routed_active_params(m) / (layout.devices * rates.expert_flops);
  // A CPU (mlaserve) keeps a step's activations in cache at the batches it runs, and its MoE adds
  // each expert's output into place.
  if (plan.input.hardware.kind != "cpu")
    step.activations = replica_tokens * activation_bytes_per_token(plan, layout) / rates.bandwidth;
  step.collectives = collective_seconds(plan, layout, tokens);
  step.fixed = kernels_per_forward(m) * plan.input.hardware.kernel_overhead_us * kUs;
  return step;
}

// Causal MLA attention of a prefill chunk of `chunk` tokens after `start` (expanded form: each
// head's scores over qk_head_dim and values over v_head_dim, half the square within the chunk).
double prefill_attention_flops(const Plan& plan, double chunk, double start, bool padded) {
  const ModelSpec& m = plan.input.model;
  return double(m.mla_layers) * attention_heads(plan, padded) * 2 * double(m.qk_head_dim + m.v_head_dim) * chunk *
         (start + chunk / 2);
}

// Seconds to prefill one prompt of `length` tokens in chunks: each a forward of the chunk's
// tokens (weights, linear FLOPs, collectives, kernels) plus its causal attention in bf16 at
// attention_efficiency, which on the generic kernel runs generic_mla_slowdown times slower than
// on the blocked one.
double prefill_seconds(const Plan& plan, double length, bool generic) {
  const Layout layout = layout_of(plan);
  const Rates rates = rates_of(plan);
  const Hardware& hw = plan.input.hardware;
  const double attention_rate =
      hw.bf16_tflops * 1e12 * hw.attention_efficiency / (generic ? hw.generic_mla_slowdown : 1.0);
  const ParamCounts& p = plan.input.model.params;
  const double output_params = double(p.lm_head > 0 ? p.lm_head : p.embedding);
  double seconds = 0;
  for (double start = 0; start < length; start += double(kPrefillChunk)) {
    const double chunk = std::min(double(kPrefillChunk), length - start);
    StepTime step = decode_step(plan, 1, chunk, 0);
    step.compute -= (chunk - 1) * 2 * output_params / (layout.tp * rates.dense_flops);  // logits of the last token only
    step.cache = start * double(plan.kv_bytes_per_token) / rates.bandwidth;
    step.compute += prefill_attention_flops(plan, chunk, start, !generic) / (layout.tp * attention_rate);
    seconds += step.total();
  }
  return seconds;
}

// One forward of a draft of `params` bf16 weights over `tokens` tokens on each attention group,
// launching `kernels` kernels.
double draft_forward_seconds(const Plan& plan, double params, double tokens, double kernels) {
  const Layout layout = layout_of(plan);
  const Rates rates = rates_of(plan);
  const double memory = params * 2 / (layout.tp * rates.bandwidth),
               compute = tokens * 2 * params / (layout.tp * rates.dense_flops);
  return std::max(memory, compute) + kernels * plan.input.hardware.kernel_overhead_us * kUs;
}

// Parameters of `layers` dense layers at the target's width: attention 4 h^2, an MLP of the
// target's dense width.
double draft_layer_params(const ModelSpec& m, int64_t layers) {
  const double hidden = double(m.hidden_size);
  return double(layers) * (4 * hidden * hidden + 3 * hidden * double(m.config.intermediate_size));
}

// Drafting's seconds a step. A block draft (DFlash, DSpark): one forward of its dense layers for
// the whole block. An EAGLE draft: one dense layer and an LM head over the target's vocabulary,
// a forward per draft token. MTP, per draft token: a target-sized layer, and around it the
// module's eh_proj (2 h x h) and the shared LM head, with its two input norms, eh_proj and a
// step's kernels. Prompt lookup: nothing.
double draft_seconds(const Plan& plan, const SpeculativeSpec& spec, double sequences, double context) {
  const ModelSpec& m = plan.input.model;
  const double replica_sequences = std::ceil(sequences / layout_of(plan).replicas);
  const double layer_kernels = kMlaKernels + kDenseMlpKernels;
  if (spec.method == "ngram") return 0;
  const double lm_head = double(m.params.lm_head > 0 ? m.params.lm_head : m.params.embedding);
  if (spec.method == "mtp") {
    const double hidden = double(m.hidden_size);
    const double head = draft_forward_seconds(plan, 2 * hidden * hidden + lm_head, replica_sequences, 3 + kStepKernels);
    return double(spec.draft_tokens) * (decode_step(plan, sequences, 1, context).total() / double(m.num_layers) + head);
  }
  if (spec.method == "eagle") {
    const double params = draft_layer_params(m, spec.draft_layers) + lm_head;
    return double(spec.draft_tokens) *
           draft_forward_seconds(plan, params, replica_sequences, layer_kernels + kStepKernels);
  }
  return draft_forward_seconds(plan, draft_layer_params(m, spec.draft_layers),
                               replica_sequences * double(spec.draft_tokens + 1),
                               double(spec.draft_layers) * layer_kernels + kStepKernels);
}

// Output tokens/s of `concurrency` sequences that each prefill input_len tokens and decode
// output_len: prefills take each attention group in turn (the groups side by side), decode
// steps serve every running sequence.
ThroughputPoint throughput_at(const Plan& plan, const Workload& workload, int64_t concurrency, double prefill_s) {
  const double sequences = double(concurrency), output = double(workload.output_len);
  const double context = double(workload.input_len) + output / 2;
  const std::optional<SpeculativeSpec>& spec = workload.speculative;
  const double positions = spec ? double(spec->draft_tokens + 1) : 1, accepted = spec ? spec->accept_length : 1;
  const double step = decode_step(plan, sequences, positions, context).total() +
                      (spec ? draft_seconds(plan, *spec, sequences, context) : 0);
  const double seconds = output / accepted * step + sequences * prefill_s / layout_of(plan).replicas;
  return {concurrency, sequences * output / seconds, accepted / step};
}

// Sequences of input_len + output_len tokens the cache holds, capped by the sweep's end.
int64_t concurrency_limit(const Plan& plan, const Workload& workload) {
  const double tokens = double(workload.input_len + workload.output_len);
  const double per_sequence =
      double(plan.kv_bytes_per_token) * tokens * double(std::min(plan.input.tp, plan.input.devices)) +
      double(plan.state_bytes_per_sequence);
  const int64_t fits = int64_t(plan.cache_free_bytes / per_sequence);
  return workload.max_concurrency > 0 ? std::min(fits, workload.max_concurrency) : fits;
}

}  // namespace

double StepTime::total() const { return fixed + collectives + activations + std::max(weights + cache, compute); }

std::string StepTime::binding() const {
  const std::pair<double, const char*> terms[] = {{weights, "weights"},         {cache, "cache"},
                                                  {compute, "compute"},         {collectives, "collectives"},
                                                  {activations, "activations"}, {fixed, "fixed"}};
  return std::max_element(std::begin(terms), std::end(terms))->second;
}

SpeculativeSpec parse_speculative(const std::string& text, std::optional<int64_t> draft_tokens) {
  const size_t colon = text.find(':');
  SpeculativeSpec spec;
  spec.method = text.substr(0, colon);
  // Defaults, each a published figure (docs/planning.md): DSpark 3.85 at block 7; DFlash's
  // 16-31% shorter (3.85 / 1.24); DeepSeek-V3's MTP accepts its one token 85-90% of the time.
  // EAGLE drafts and prompt lookup have none: their acceptance is the draft checkpoint's and the
  // prompts' repetition. EAGLE's 3 draft tokens are SGLang's usual --speculative-num-steps.
  if (spec.method == "dspark")
    spec = {"dspark", 7, 3.85, 5};
  else if (spec.method == "dflash")
    spec = {"dflash", 7, 3.85 / 1.24, 5};
  else if (spec.method == "mtp")
    spec = {"mtp", 1, 1.875, 0};
  else if (spec.method == "eagle")
    spec = {"eagle", 3, 0, 1};
  else if (spec.method == "ngram")
    spec = {"ngram", 4, 0, 0};
  else
    fail("unknown --speculative '{}' (dspark, dflash, mtp, eagle or ngram, each optionally :ACCEPT)", text);
  if (colon != std::string::npos) {
    try {
      spec.accept_length = std::stod(text.substr(colon + 1));
    } catch (const std::exception&) {
      fail("--speculative '{}': '{}' is not a mean acceptance length", text, text.substr(colon + 1));
    }
  }
  MLA_CHECK(spec.accept_length > 0, "--speculative {} needs a mean acceptance length ({}:ACCEPT): {}", spec.method,
            spec.method,
            spec.method == "ngram" ? "prompt lookup's depends on how much the outputs repeat the prompts"
                                   : "an EAGLE draft's depends on its checkpoint");
  if (draft_tokens) {
    MLA_CHECK(*draft_tokens >= 1, "--num-draft-tokens must be at least 1, got {}", *draft_tokens);
    spec.draft_tokens = *draft_tokens;
  }
  MLA_CHECK(spec.accept_length >= 1 && spec.accept_length <= double(spec.draft_tokens + 1),
            "--speculative {}: the mean acceptance length must be 1 to {} (the draft's {} tokens and one more), got {}",
            spec.method, spec.draft_tokens + 1, spec.draft_tokens, spec.accept_length);
  return spec;
}

Prediction predict(const Plan& plan, const Workload& workload) {
  MLA_CHECK(
      workload.input_len > 0 && workload.output_len > 0 && workload.prompt_len >= 0 && workload.max_concurrency >= 0,
      "--input-len and --output-len must be positive, --prompt-len and --max-concurrency not negative");
  Prediction out;
  const double context = double(workload.input_len) + double(workload.output_len) / 2;
  out.single_step = decode_step(plan, 1, 1, context);
  out.single_stream_plain_tok_s = 1 / out.single_step.total();
  const double prefill_s = prefill_seconds(plan, double(workload.input_len), false);
  out.prefill_tok_s = double(workload.input_len) / prefill_s;
  out.single_stream_tok_s = out.single_stream_plain_tok_s;
  if (const std::optional<SpeculativeSpec>& spec = workload.speculative) {  // throughput_at's step at one stream
    out.verify_step = decode_step(plan, 1, double(spec->draft_tokens + 1), context);
    out.draft_s = draft_seconds(plan, *spec, 1, context);
    out.single_stream_tok_s = spec->accept_length / (out.verify_step->total() + out.draft_s);
  }
  const int64_t limit = concurrency_limit(plan, workload);
  for (int64_t c = 1; c <= limit; c = c * 2 > limit && c < limit ? limit : c * 2) {
    out.curve.push_back(throughput_at(plan, workload, c, prefill_s));
    if (out.curve.back().total_tok_s > out.peak_total_tok_s)
      out.peak_total_tok_s = out.curve.back().total_tok_s, out.peak_concurrency = c;
  }
  if (workload.prompt_len > 0) {
    out.ttft_s = prefill_seconds(plan, double(workload.prompt_len), false);
    if (!plan.padding.fast_kernel_shape) out.ttft_generic_s = prefill_seconds(plan, double(workload.prompt_len), true);
  }
  if (plan.price_per_hour > 0 && out.peak_total_tok_s > 0)
    out.tok_s_per_dollar_hour = out.peak_total_tok_s / plan.price_per_hour;
  return out;
}

namespace {

nlohmann::json step_to_json(const StepTime& s) {
  return {{"weights", s.weights},         {"cache", s.cache}, {"compute", s.compute}, {"collectives", s.collectives},
          {"activations", s.activations}, {"fixed", s.fixed}, {"total", s.total()},   {"binding", s.binding()}};
}

std::string step_formula(const StepTime& s) {
  return fmt::format(
      "{:.2f} = fixed {:.2f} + collectives {:.2f} + activations {:.2f} + max(weights {:.2f} + cache {:.2f}, "
      "compute {:.2f})",
      s.total() * 1e3, s.fixed * 1e3, s.collectives * 1e3, s.activations * 1e3, s.weights * 1e3, s.cache * 1e3,
      s.compute * 1e3);
}

}  // namespace

nlohmann::json prediction_to_json(const Prediction& p, const Workload& workload) {
  nlohmann::json curve = nlohmann::json::array();
  for (const ThroughputPoint& point : p.curve)
    curve.push_back({{"concurrency", point.concurrency},
                     {"total_tok_s", point.total_tok_s},
                     {"tok_s_per_user", point.tok_s_per_user}});
  nlohmann::json out = {{"single_stream_tok_s", p.single_stream_tok_s},
                        {"single_stream_plain_tok_s", p.single_stream_plain_tok_s},
                        {"peak_total_tok_s", p.peak_total_tok_s},
                        {"peak_concurrency", p.peak_concurrency},
                        {"prefill_tok_s", p.prefill_tok_s},
                        {"decode_step_s", step_to_json(p.single_step)},
                        {"curve", curve},
                        {"input_len", workload.input_len},
                        {"output_len", workload.output_len}};
  if (workload.speculative)
    out["speculative"] = {{"method", workload.speculative->method},
                          {"draft_tokens", workload.speculative->draft_tokens},
                          {"accept_length", workload.speculative->accept_length},
                          {"verify_step_s", step_to_json(*p.verify_step)},
                          {"draft_s", p.draft_s}};
  if (p.ttft_s) out["ttft_s"] = *p.ttft_s;
  if (p.ttft_generic_s) out["ttft_generic_s"] = *p.ttft_generic_s;
  if (p.tok_s_per_dollar_hour) out["tok_s_per_dollar_hour"] = *p.tok_s_per_dollar_hour;
  return out;
}

std::string prediction_to_table(const Prediction& p, const Workload& workload) {
  auto row = [](std::string& out, const std::string& key, const std::string& value) {
    out += fmt::format("{:<40}{}\n", key, value);
  };
  const StepTime& s = p.single_step;
  std::string out = fmt::format(
      "---- predicted, {} in / {} out{} ----\n", workload.input_len, workload.output_len,
      workload.speculative ? fmt::format(", {} accepting {:.2f} of {}", workload.speculative->method,
                                         workload.speculative->accept_length, workload.speculative->draft_tokens)
                           : "");
  row(out, "Decode step, 1 stream (ms):", step_formula(s));
  row(out, "  binds:", s.binding());
  if (p.verify_step) {
    row(out, fmt::format("Verify step, {} positions (ms):", workload.speculative->draft_tokens + 1),
        step_formula(*p.verify_step));
    row(out, "  binds:", p.verify_step->binding());
    row(out, "Draft, a step (ms):", fmt::format("{:.2f}", p.draft_s * 1e3));
  }
  row(out, "Single stream:",
      workload.speculative
          ? fmt::format("{:.1f} tok/s ({:.1f} without speculation)", p.single_stream_tok_s, p.single_stream_plain_tok_s)
          : fmt::format("{:.1f} tok/s", p.single_stream_tok_s));
  row(out, "Peak total:",
      p.peak_concurrency > 0 ? fmt::format("{:.0f} tok/s at concurrency {}", p.peak_total_tok_s, p.peak_concurrency)
                             : "none: no sequence fits the cache");
  row(out, fmt::format("Prefill ({} tokens):", workload.input_len), fmt::format("{:.0f} tok/s", p.prefill_tok_s));
  if (p.ttft_s)
    row(out, fmt::format("Time to first token ({} tokens):", workload.prompt_len), fmt::format("{:.2f} s", *p.ttft_s));
  if (p.ttft_generic_s) row(out, "  on the generic MLA kernel:", fmt::format("{:.2f} s", *p.ttft_generic_s));
  if (p.tok_s_per_dollar_hour)
    row(out, "Predicted tok/s per $/h (peak):", fmt::format("{:.2f}", *p.tok_s_per_dollar_hour));
  return out;
}

}  // namespace mlaserve
