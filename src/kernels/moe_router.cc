#include "kernels/moe_router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace mlaserve {
namespace {

// Routing runs per token and layer on the decode path: its buffers are reused, not allocated.
struct RouterScratch {
  std::vector<float> scores, choice, group_scores;
  std::vector<int32_t> order, best_groups;
  std::vector<bool> kept;
};

RouterScratch& router_scratch() {
  thread_local RouterScratch scratch;
  return scratch;
}

// Writes the indices of the k largest of values[0, n) to out, best first; ties go to the
// lower index. `order` is scratch.
void top_indices(const float* values, int64_t n, int64_t k, std::vector<int32_t>& order, int32_t* out) {
  order.resize(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return values[a] > values[b] || (values[a] == values[b] && a < b); });
  std::copy(order.begin(), order.begin() + k, out);
}

void expert_scores(const float* logits, const RouterParams& params, std::vector<float>& scores) {
  scores.resize(static_cast<size_t>(params.n_experts));
  if (params.scoring_func == ScoringFunc::Sigmoid) {
    for (int64_t e = 0; e < params.n_experts; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
    return;
  }
  const float max_logit = *std::max_element(logits, logits + params.n_experts);
  float sum = 0.0f;
  for (int64_t e = 0; e < params.n_experts; ++e) sum += scores[e] = std::exp(logits[e] - max_logit);
  for (auto& score : scores) score /= sum;
}

// The sum of the two largest of values[0, n) (the one value when n is 1).
float top2_sum(const float* values, int64_t n) {
  float first = -std::numeric_limits<float>::infinity(), second = first;
  for (int64_t i = 0; i < n; ++i) {
    if (values[i] > first)
      second = first, first = values[i];
    else if (values[i] > second)
      second = values[i];
  }
  return n >= 2 ? first + second : first;
}

// Sets to -inf the choice scores of experts outside the topk_group best groups.
void mask_groups(std::vector<float>& choice, const RouterParams& params, RouterScratch& scratch) {
  const int64_t group_size = params.n_experts / params.n_group;
  scratch.group_scores.resize(static_cast<size_t>(params.n_group));
  for (int64_t g = 0; g < params.n_group; ++g) {
    const float* members = choice.data() + g * group_size;
    scratch.group_scores[g] = params.topk_method == TopkMethod::NoAuxTc
                                  ? top2_sum(members, group_size)                      // sum of the group's top-2
                                  : *std::max_element(members, members + group_size);  // group_limited_greedy
  }
  scratch.best_groups.resize(static_cast<size_t>(params.topk_group));
  top_indices(scratch.group_scores.data(), params.n_group, params.topk_group, scratch.order,
              scratch.best_groups.data());
  scratch.kept.assign(size_t(params.n_group), false);
  for (int32_t g : scratch.best_groups) scratch.kept[size_t(g)] = true;
  for (int64_t e = 0; e < params.n_experts; ++e)
    if (!scratch.kept[size_t(e / group_size)]) choice[e] = -std::numeric_limits<float>::infinity();
}

}  // namespace

void route_token(const float* logits, const float* correction_bias, const RouterParams& params, int32_t* expert_ids,
                 float* expert_weights) {
  RouterScratch& scratch = router_scratch();
  expert_scores(logits, params, scratch.scores);
  scratch.choice = scratch.scores;
  if (params.topk_method == TopkMethod::NoAuxTc && correction_bias)
    for (int64_t e = 0; e < params.n_experts; ++e) scratch.choice[e] += correction_bias[e];
  if (params.topk_method != TopkMethod::Greedy && params.n_group > 1) mask_groups(scratch.choice, params, scratch);
  top_indices(scratch.choice.data(), params.n_experts, params.top_k, scratch.order, expert_ids);
  float sum = 0.0f;
  for (int64_t k = 0; k < params.top_k; ++k) {
    expert_weights[k] = scratch.scores[expert_ids[k]];
    sum += expert_weights[k];
  }
  const bool normalise = params.top_k > 1 && params.norm_topk_prob;
  for (int64_t k = 0; k < params.top_k; ++k) {
    if (normalise) expert_weights[k] /= sum + 1e-20f;
    expert_weights[k] *= params.routed_scaling_factor;
  }
}

}  // namespace mlaserve
