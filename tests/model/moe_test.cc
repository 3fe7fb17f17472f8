// moe_forward against a float64 reference (odd sizes, experts with no tokens, one expert's
// gate/up rows split between the threads inside it, F32 and BF16-panel experts), and its count of
// routed-expert bytes read: each expert chosen by any token of a call counts once, the shared
// expert and experts another rank owns not at all.
#include "model/moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <set>

#include "base/dtype.h"
#include "test_util.h"

namespace mlaserve {
namespace {

constexpr int64_t kExperts = 12, kTopK = 3;

struct MoeShape {
  int64_t hidden = 32, intermediate = 8;
  bool bf16_panels = false;  // experts repacked as at load (their values rounded to bf16)
};

// Random router, experts and shared expert, each matrix's values kept (as fp32) for the reference.
struct RandomMoe {
  MoeShape shape;
  std::deque<std::vector<float>> values;
  std::deque<std::vector<uint16_t>> bf16;
  WeightCopies panels;
  MoeWeights weights;
  RouterParams router;

  explicit RandomMoe(MoeShape moe_shape = {}) : shape(moe_shape) {
    router.n_experts = kExperts;
    router.top_k = kTopK;
    router.n_group = 1;
    router.topk_group = 1;
    weights.gate = add(kExperts, shape.hidden, 1, false);
    for (int64_t e = 0; e <= kExperts; ++e) {
      MlpWeights mlp{add(shape.intermediate, shape.hidden, 10 + 3 * e, shape.bf16_panels),
                     add(shape.intermediate, shape.hidden, 11 + 3 * e, shape.bf16_panels),
                     add(shape.hidden, shape.intermediate, 12 + 3 * e, shape.bf16_panels)};
      if (e < kExperts)
        weights.experts.push_back(mlp);
      else
        weights.shared_experts = mlp;
    }
  }
  LinearWeight add(int64_t rows, int64_t cols, uint64_t seed, bool as_panels) {
    values.push_back(testing::random_vector(size_t(rows * cols), seed));
    LinearWeight weight;
    weight.rows = rows;
    weight.cols = weight.stored_cols = cols;
    weight.data = values.back().data();
    if (!as_panels) return weight;
    auto& words = bf16.emplace_back(values.back().size());
    for (size_t i = 0; i < words.size(); ++i) {
      words[i] = f32_to_bf16(values.back()[i]);
      values.back()[i] = bf16_to_f32(words[i]);
    }
    weight.format = WeightFormat::BF16;
    weight.data = words.data();
    return repack_bf16_panels(weight, panels);
  }

  // Token t's router choice (ids and weights), from logits summed here in float64.
  void route(const std::vector<float>& x, int64_t t, int32_t ids[kTopK], float expert_weights[kTopK]) const {
    std::vector<float> logits(kExperts);
    for (int64_t e = 0; e < kExperts; ++e) {
      double sum = 0;
      for (int64_t c = 0; c < shape.hidden; ++c)
        sum += double(values[0][size_t(e * shape.hidden + c)]) * x[size_t(t * shape.hidden + c)];
      logits[size_t(e)] = float(sum);
    }
    route_token(logits.data(), nullptr, router, ids, expert_weights);
  }

  // The experts the router picks for x's tokens among [first, end).
  std::set<int32_t> chosen(const std::vector<float>& x, int64_t n_tokens, int64_t first, int64_t end) const {
    std::set<int32_t> experts;
    for (int64_t t = 0; t < n_tokens; ++t) {
      int32_t ids[kTopK];
      float expert_weights[kTopK];
      route(x, t, ids, expert_weights);
      for (int32_t id : ids)
        if (id >= first && id < end) experts.insert(id);
    }
    return experts;
  }

  // out[t] += scale * down(silu(gate x_t) * up x_t) for the MLP whose gate is values[first], in float64.
  void add_mlp(size_t first, const float* x, double scale, std::vector<double>& out) const {
    const int64_t hidden = shape.hidden, width = shape.intermediate;
    std::vector<double> h(static_cast<size_t>(width));
    for (int64_t i = 0; i < width; ++i) {
      double gate = 0, up = 0;
      for (int64_t c = 0; c < hidden; ++c) {
        gate += double(values[first][size_t(i * hidden + c)]) * x[c];
        up += double(values[first + 1][size_t(i * hidden + c)]) * x[c];
      }
      h[size_t(i)] = gate / (1.0 + std::exp(-gate)) * up;
    }
    for (int64_t r = 0; r < hidden; ++r)
      for (int64_t i = 0; i < width; ++i)
        out[size_t(r)] += scale * values[first + 2][size_t(r * width + i)] * h[size_t(i)];
  }

  // sum over the chosen experts this rank owns of weight * expert(x), plus the shared expert.
  std::vector<float> reference(const std::vector<float>& x, int64_t n_tokens) const {
    std::vector<float> out(size_t(n_tokens * shape.hidden));
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* token = x.data() + t * shape.hidden;
      std::vector<double> sum(size_t(shape.hidden), 0.0);
      int32_t ids[kTopK];
      float expert_weights[kTopK];
      route(x, t, ids, expert_weights);
      for (int k = 0; k < kTopK; ++k)
        if (ids[k] >= weights.first_owned_expert && ids[k] < weights.end_owned_expert)
          add_mlp(size_t(1 + 3 * ids[k]), token, expert_weights[k], sum);
      add_mlp(size_t(1 + 3 * kExperts), token, 1.0, sum);
      for (int64_t c = 0; c < shape.hidden; ++c) out[size_t(t * shape.hidden + c)] = float(sum[size_t(c)]);
    }
    return out;
  }
};

// Hidden 40 (vector tails), intermediate 20 (a panel and a partial one; the threads' shares of
// pass 1 start at multiples of 8 rows, inside an expert), 1 and 3 tokens (at least 3 of the 12
// experts get none), 9 and 70 (the dot blocks, the GEMMs of ~17 tokens an expert), with and
// without expert parallelism.
TEST(MoeForward, MatchesTheFloat64Reference) {
  for (bool bf16_panels : {false, true}) {
    RandomMoe moe({40, 20, bf16_panels});
    for (const auto& [first_owned, end_owned] : {std::pair<int64_t, int64_t>{0, kExperts}, {4, 9}}) {
      moe.weights.first_owned_expert = first_owned;
      moe.weights.end_owned_expert = end_owned;
      for (int64_t n_tokens : {1, 3, 9, 70}) {
        const std::vector<float> x = testing::random_vector(size_t(n_tokens * 40), 200 + uint64_t(n_tokens));
        if (n_tokens <= 3) {
          ASSERT_LT(moe.chosen(x, n_tokens, 0, kExperts).size(), size_t(kExperts));
        }
        std::vector<float> out(x.size());
        moe_forward(moe.router, moe.weights, x.data(), n_tokens, out.data());
        EXPECT_TRUE(testing::relative_close(out, moe.reference(x, n_tokens), 1e-5))
            << (bf16_panels ? "BF16 panels" : "F32") << ", " << n_tokens << " tokens, experts " << first_owned << ".."
            << end_owned;
      }
    }
  }
}

TEST(MoeForward, CountsEachChosenExpertsBytesOnce) {
  const RandomMoe moe;
  const size_t expert_bytes = moe.weights.experts[0].bytes();
  for (int64_t n_tokens : {1, 2, 5, 9}) {
    const std::vector<float> x = testing::random_vector(size_t(n_tokens * moe.shape.hidden), 100 + uint64_t(n_tokens));
    const std::set<int32_t> chosen = moe.chosen(x, n_tokens, 0, kExperts);
    ASSERT_GE(chosen.size(), size_t(kTopK));
    if (n_tokens >= 5) {
      ASSERT_LT(chosen.size(), size_t(n_tokens * kTopK)) << "no expert shared: a weak check";
    }
    std::vector<float> out(x.size());
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
  const std::vector<float> x = testing::random_vector(size_t(n_tokens * moe.shape.hidden), 7);
  const std::set<int32_t> chosen = moe.chosen(x, n_tokens, 4, 9);
  ASSERT_FALSE(chosen.empty());
  std::vector<float> out(x.size());
  const int64_t before = routed_expert_bytes_read();
  moe_forward(moe.router, moe.weights, x.data(), n_tokens, out.data());
  EXPECT_EQ(routed_expert_bytes_read() - before, int64_t(chosen.size() * moe.weights.experts[0].bytes()));
}

}  // namespace
}  // namespace mlaserve
