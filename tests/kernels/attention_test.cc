// causal_attention (the expanded prefill kernel) against a float64 scalar reference: odd query
// counts (short last block of 4), cached keys before the queries, head sizes with SIMD tails;
// and the vectorised exponential of its softmax.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/simd.h"
#include "test_util.h"

namespace mlaserve {
namespace {

std::vector<float> reference(const CausalAttentionParams& p) {
  std::vector<float> out(size_t(p.n_queries * p.n_heads * p.head_dim_v));
  const int64_t offset = p.n_keys - p.n_queries;
  for (int64_t query = 0; query < p.n_queries; ++query)
    for (int64_t head = 0; head < p.n_heads; ++head) {
      const int64_t visible = offset + query + 1;
      std::vector<double> score(static_cast<size_t>(visible));
      double max_score = -1e300, sum = 0;
      for (int64_t key = 0; key < visible; ++key) {
        double dot = 0;
        for (int64_t d = 0; d < p.head_dim_qk; ++d)
          dot += double(p.q[(query * p.n_heads + head) * p.head_dim_qk + d]) *
                 p.k[(head * p.n_keys + key) * p.head_dim_qk + d];
        score[size_t(key)] = dot * p.softmax_scale;
        max_score = std::max(max_score, score[size_t(key)]);
      }
      for (double& s : score) sum += (s = std::exp(s - max_score));
      for (int64_t d = 0; d < p.head_dim_v; ++d) {
        double value = 0;
        for (int64_t key = 0; key < visible; ++key)
          value += score[size_t(key)] / sum * p.v[(head * p.n_keys + key) * p.head_dim_v + d];
        out[size_t((query * p.n_heads + head) * p.head_dim_v + d)] = float(value);
      }
    }
  return out;
}

TEST(CausalAttention, MatchesReference) {
  for (auto [queries, cached, heads, qk_dim, v_dim] :
       {std::tuple{1, 0, 1, 8, 8}, {5, 0, 3, 20, 12}, {13, 7, 2, 24, 16}, {34, 3, 4, 40, 24}}) {
    const int64_t keys = queries + cached;
    const auto q = testing::random_vector(size_t(queries * heads * qk_dim), 1);
    const auto k = testing::random_vector(size_t(keys * heads * qk_dim), 2);
    const auto v = testing::random_vector(size_t(keys * heads * v_dim), 3);
    std::vector<float> out(size_t(queries * heads * v_dim), -7.0f);
    CausalAttentionParams params{q.data(), k.data(), v.data(), out.data(), queries, keys, heads, qk_dim, v_dim, 0.3f};
    causal_attention(params);
    EXPECT_TRUE(testing::relative_close(out, reference(params), 1e-5))
        << queries << " queries, " << cached << " cached keys, " << heads << " heads";
  }
}

// The vectorised exponential behind every softmax, against std::exp: shifted scores from 0
// down to -100 (below the clamp), odd lengths for the scalar tail.
TEST(ExpShifted, MatchesStdExp) {
  for (int64_t n : {1, 7, 8, 61}) {
    std::vector<float> x(static_cast<size_t>(n)), want(x.size());
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = 3.0f - 103.0f * float(i * 37 % n) / float(n);
    double want_sum = 0;
    for (size_t i = 0; i < x.size(); ++i) want_sum += (want[i] = std::exp(x[i] - 3.0f));
    const float sum = simd::exp_shifted(x.data(), n, 3.0f);
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(x[i], want[i], 3e-7 * want[i] + 1e-37) << "n " << n << " element " << i;
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum);
  }
}

}  // namespace
}  // namespace mlaserve
