// MoE routing of DeepSeek-V3 (HF MoEGate): scores from router logits, expert choice with the
// score-correction bias and group limits, weights from the unbiased scores.
#pragma once
#include <cstdint>

namespace mlaserve {

// config.json's scoring_func and topk_method.
enum class ScoringFunc { Sigmoid, Softmax };
enum class TopkMethod { NoAuxTc, Greedy, GroupLimitedGreedy };

struct RouterParams {
  int64_t n_experts = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  int64_t top_k = 0;
  ScoringFunc scoring_func = ScoringFunc::Sigmoid;
  TopkMethod topk_method = TopkMethod::NoAuxTc;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};

// logits: [n_experts] router logits (fp32). correction_bias: [n_experts] or null (used only
// with noaux_tc, for choosing). Writes top_k expert ids (best first) and their weights.
// Masked groups are excluded with -inf (as vLLM and SGLang do; HF fills 0.0, which differs
// only when a biased score is negative).
void route_token(const float* logits, const float* correction_bias, const RouterParams& params, int32_t* expert_ids,
                 float* expert_weights);

}  // namespace mlaserve
