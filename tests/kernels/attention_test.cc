// causal_attention (the expanded prefill kernel) against a float64 scalar reference: odd query
// counts (one short tile, several tiles of 64 with a short last one, on the packed GEMM),
// cached keys before the queries, head sizes with SIMD tails.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_util.h"

namespace mlaserve {
namespace {

// Keys [n_heads, n_keys, qk] and values [n_heads, n_keys, v] in plain layouts, and the same
// as the kernel's panels.
struct HeadMajorKeysValues {
  std::vector<float> k, v, k_panels, v_panels;
  HeadMajorKeysValues(int64_t heads, int64_t keys, int64_t qk_dim, int64_t v_dim)
      : k(testing::random_vector(size_t(heads * keys * qk_dim), 2)),
        v(testing::random_vector(size_t(heads * keys * v_dim), 3)),
        k_panels(size_t(heads * key_panels_floats(keys, qk_dim)), 0.0f),
        v_panels(size_t(heads * value_panels_floats(keys, v_dim)), 0.0f) {
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t key = 0; key < keys; ++key) {
        for (int64_t d = 0; d < qk_dim; ++d)
          k_panels[size_t(h * key_panels_floats(keys, qk_dim) + key_panel_index(key, d, qk_dim))] =
              k[size_t((h * keys + key) * qk_dim + d)];
        for (int64_t d = 0; d < v_dim; ++d)
          v_panels[size_t(h * value_panels_floats(keys, v_dim) + value_panel_index(key, d, keys))] =
              v[size_t((h * keys + key) * v_dim + d)];
      }
  }
};

std::vector<float> reference(const CausalAttentionParams& p, const HeadMajorKeysValues& kv) {
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
                 kv.k[size_t((head * p.n_keys + key) * p.head_dim_qk + d)];
        score[size_t(key)] = dot * p.softmax_scale;
        max_score = std::max(max_score, score[size_t(key)]);
      }
      for (double& s : score) sum += (s = std::exp(s - max_score));
      for (int64_t d = 0; d < p.head_dim_v; ++d) {
        double value = 0;
        for (int64_t key = 0; key < visible; ++key)
          value += score[size_t(key)] / sum * kv.v[size_t((head * p.n_keys + key) * p.head_dim_v + d)];
        out[size_t((query * p.n_heads + head) * p.head_dim_v + d)] = float(value);
      }
    }
  return out;
}

TEST(CausalAttention, MatchesReference) {
  for (auto [queries, cached, heads, qk_dim, v_dim] :
       {std::tuple{1, 0, 1, 8, 8}, {5, 0, 3, 20, 12}, {13, 7, 2, 24, 16}, {34, 3, 4, 40, 24}, {150, 0, 3, 72, 40},
        {141, 37, 2, 192, 128}, {64, 300, 1, 36, 20}}) {
    const int64_t keys = queries + cached;
    const auto q = testing::random_vector(size_t(queries * heads * qk_dim), 1);
    const HeadMajorKeysValues kv(heads, keys, qk_dim, v_dim);
    std::vector<float> out(size_t(queries * heads * v_dim), -7.0f);
    CausalAttentionParams params{q.data(), kv.k_panels.data(), kv.v_panels.data(), out.data(), queries, keys, heads,
                                 qk_dim, v_dim, 0.3f};
    causal_attention(params);
    EXPECT_TRUE(testing::relative_close(out, reference(params, kv), 1e-5))
        << queries << " queries, " << cached << " cached keys, " << heads << " heads";
  }
}

}  // namespace
}  // namespace mlaserve
