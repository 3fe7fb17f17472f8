#include "kernels/moe_router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace mlaserve {
namespace {

// Indices of the k largest values, best first; ties go to the lower index.
std::vector<int32_t> top_indices(const std::vector<float>& values, int64_t k) {
  std::vector<int32_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  order.resize(static_cast<size_t>(k));
  return order;
}

std::vector<float> expert_scores(const float* logits, const RouterParams& params) {
  std::vector<float> scores(static_cast<size_t>(params.n_experts));
  if (params.scoring_func == ScoringFunc::Sigmoid) {
    for (int64_t e = 0; e < params.n_experts; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
    return scores;
  }
  const float max_logit = *std::max_element(logits, logits + params.n_experts);
  float sum = 0.0f;
  for (int64_t e = 0; e < params.n_experts; ++e) sum += scores[e] = std::exp(logits[e] - max_logit);
  for (auto& score : scores) score /= sum;
  return scores;
}

// Sets to -inf the choice scores of experts outside the topk_group best groups.
void mask_groups(std::vector<float>& choice, const RouterParams& params) {
  const int64_t group_size = params.n_experts / params.n_group;
  std::vector<float> group_scores(static_cast<size_t>(params.n_group));
  for (int64_t g = 0; g < params.n_group; ++g) {
    std::vector<float> members(choice.begin() + g * group_size, choice.begin() + (g + 1) * group_size);
    if (params.topk_method == TopkMethod::NoAuxTc) {  // sum of the group's top-2
      const auto best = top_indices(members, std::min<int64_t>(2, group_size));
      group_scores[g] = 0.0f;
      for (int32_t i : best) group_scores[g] += members[i];
    } else {  // group_limited_greedy: the group's best score
      group_scores[g] = *std::max_element(members.begin(), members.end());
    }
  }
  std::vector<bool> kept(size_t(params.n_group), false);
  for (int32_t g : top_indices(group_scores, params.topk_group)) kept[g] = true;
  for (int64_t e = 0; e < params.n_experts; ++e)
    if (!kept[e / group_size]) choice[e] = -std::numeric_limits<float>::infinity();
}

}  // namespace

RouterParams RouterParams::from_config(const ModelConfig& config) {
  RouterParams params;
  params.n_experts = config.n_routed_experts;
  params.n_group = config.n_group;
  params.topk_group = config.topk_group;
  params.top_k = config.num_experts_per_tok;
  params.scoring_func = config.scoring_func;
  params.topk_method = config.topk_method;
  params.norm_topk_prob = config.norm_topk_prob;
  params.routed_scaling_factor = float(config.routed_scaling_factor);
  return params;
}

void route_token(const float* logits, const float* correction_bias, const RouterParams& params,
                 int32_t* expert_ids, float* expert_weights) {
  const std::vector<float> scores = expert_scores(logits, params);
  std::vector<float> choice = scores;
  if (params.topk_method == TopkMethod::NoAuxTc && correction_bias)
    for (int64_t e = 0; e < params.n_experts; ++e) choice[e] += correction_bias[e];
  if (params.topk_method != TopkMethod::Greedy && params.n_group > 1) mask_groups(choice, params);
  const auto chosen = top_indices(choice, params.top_k);
  float sum = 0.0f;
  for (int64_t k = 0; k < params.top_k; ++k) {
    expert_ids[k] = chosen[k];
    expert_weights[k] = scores[chosen[k]];
    sum += expert_weights[k];
  }
  const bool normalise = params.top_k > 1 && params.norm_topk_prob;
  for (int64_t k = 0; k < params.top_k; ++k) {
    if (normalise) expert_weights[k] /= sum + 1e-20f;
    expert_weights[k] *= params.routed_scaling_factor;
  }
}

}  // namespace mlaserve
