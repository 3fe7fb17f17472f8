// moe_forward's count of routed-expert bytes read: each expert chosen by any token of a call
// counts once, the shared expert and experts another rank owns not at all.
#include "model/moe.h"

#include <gtest/gtest.h>

#include <set>

#include "test_util.h"

namespace mlaserve {
namespace {

constexpr int64_t kHidden = 32, kIntermediate = 8, kExperts = 12, kTopK = 3;

LinearWeight f32_weight(const std::vector<float>& values, int64_t rows, int64_t cols) {
  LinearWeight weight;
  weight.rows = rows;
  weight.cols = cols;
  weight.stored_cols = cols;
  weight.data = values.data();
  return weight;
}

struct RandomMoe {
  std::vector<std::vector<float>> storage;
  MoeWeights weights;
  RouterParams router;

  RandomMoe() {
    router.n_experts = kExperts;
    router.top_k = kTopK;
    router.n_group = 1;
    router.topk_group = 1;
    storage.reserve(3 * (kExperts + 1) + 1);
    weights.gate = add(kExperts, kHidden, 1);
    for (int64_t e = 0; e <= kExperts; ++e) {
      MlpWeights mlp{add(kIntermediate, kHidden, 10 + 3 * e), add(kIntermediate, kHidden, 11 + 3 * e),
                     add(kHidden, kIntermediate, 12 + 3 * e)};
      if (e < kExperts)
        weights.experts.push_back(mlp);
      else
        weights.shared_experts = mlp;
    }
  }
  LinearWeight add(int64_t rows, int64_t cols, uint64_t seed) {
    storage.push_back(testing::random_vector(size_t(rows * cols), seed));
    return f32_weight(storage.back(), rows, cols);
  }

  // The experts the router picks for x's tokens among [first, end), from logits summed here.
  std::set<int32_t> chosen(const std::vector<float>& x, int64_t n_tokens, int64_t first, int64_t end) const {
    std::set<int32_t> experts;
    const auto* gate = static_cast<const float*>(weights.gate.data);
    for (int64_t t = 0; t < n_tokens; ++t) {
      std::vector<float> logits(kExperts, 0.0f);
      for (int64_t e = 0; e < kExperts; ++e)
        for (int64_t c = 0; c < kHidden; ++c) logits[size_t(e)] += gate[e * kHidden + c] * x[size_t(t * kHidden + c)];
      int32_t ids[kTopK];
      float expert_weights[kTopK];
      route_token(logits.data(), nullptr, router, ids, expert_weights);
      for (int32_t id : ids)
        if (id >= first && id < end) experts.insert(id);
    }
    return experts;
  }
};

TEST(MoeForward, CountsEachChosenExpertsBytesOnce) {
  RandomMoe moe;
  const size_t expert_bytes = moe.weights.experts[0].bytes();
  for (int64_t n_tokens : {1, 2, 5, 9}) {
    const std::vector<float> x = testing::random_vector(size_t(n_tokens * kHidden), 100 + uint64_t(n_tokens));
    const std::set<int32_t> chosen = moe.chosen(x, n_tokens, 0, kExperts);
    ASSERT_GE(chosen.size(), size_t(kTopK));
    if (n_tokens >= 5) {
      ASSERT_LT(chosen.size(), size_t(n_tokens * kTopK)) << "no expert shared: a weak check";
    }
    std::vector<float> out(size_t(n_tokens * kHidden));
    const int64_t before = routed_expert_bytes_read();
    moe_forward(moe.router, moe.weights, x.data(), n_tokens, out.data());
    EXPECT_EQ(routed_expert_bytes_read() - before, int64_t(chosen.size() * expert_bytes)) << n_tokens << " tokens";
  }
}

TEST(MoeForward, CountsOnlyTheExpertsThisRankOwns) {
  RandomMoe moe;
  moe.weights.first_owned_expert = 4;
  moe.weights.end_owned_expert = 9;
  const int64_t n_tokens = 7;
  const std::vector<float> x = testing::random_vector(size_t(n_tokens * kHidden), 7);
  const std::set<int32_t> chosen = moe.chosen(x, n_tokens, 4, 9);
  ASSERT_FALSE(chosen.empty());
  std::vector<float> out(size_t(n_tokens * kHidden));
  const int64_t before = routed_expert_bytes_read();
  moe_forward(moe.router, moe.weights, x.data(), n_tokens, out.data());
  EXPECT_EQ(routed_expert_bytes_read() - before, int64_t(chosen.size() * moe.weights.experts[0].bytes()));
}

}  // namespace
}  // namespace mlaserve
