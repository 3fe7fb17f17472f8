// causal_attention (the expanded prefill kernel) against a float64 scalar reference, on its
// fp32 panels and on its bf16 ones.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "base/dtype.h"
#include "kernels/bf16_dot_gemm.h"
#include "test_util.h"

namespace mlaserve {
namespace {

// Keys [n_heads, n_keys, qk] and values [n_heads, n_keys, v] in plain layouts, and the same
// as the kernel's fp32 panels and its bf16 pair panels (rounded to nearest even; the padding
// the GEMMs read zero, the rest left at a NaN the outputs would show).
struct HeadMajorKeysValues {
  std::vector<float> k, v, k_panels, v_panels;
  std::vector<uint16_t> k_pairs, v_pairs;
  HeadMajorKeysValues(int64_t heads, int64_t keys, int64_t qk_dim, int64_t v_dim)
      : HeadMajorKeysValues(heads, keys, qk_dim, v_dim, testing::random_vector(size_t(heads * keys * qk_dim), 2),
                            testing::random_vector(size_t(heads * keys * v_dim), 3)) {}
  HeadMajorKeysValues(int64_t heads, int64_t keys, int64_t qk_dim, int64_t v_dim, std::vector<float> keys_in,
                      std::vector<float> values_in)
      : k(std::move(keys_in)),
        v(std::move(values_in)),
        k_panels(size_t(heads * key_panels_floats(keys, qk_dim)), 0.0f),
        v_panels(size_t(heads * value_panels_floats(keys, v_dim)), 0.0f),
        k_pairs(size_t(heads * key_pair_panels_words(keys, qk_dim)), kNaN),
        v_pairs(size_t(heads * value_pair_panels_words(keys, v_dim)), kNaN) {
    for (int64_t h = 0; h < heads; ++h) {
      uint16_t* k_head = k_pairs.data() + h * key_pair_panels_words(keys, qk_dim);
      uint16_t* v_head = v_pairs.data() + h * value_pair_panels_words(keys, v_dim);
      for (int64_t key = 0; key < keys; ++key) {
        for (int64_t d = 0; d < qk_dim; ++d) {
          const float value = k[size_t((h * keys + key) * qk_dim + d)];
          k_panels[size_t(h * key_panels_floats(keys, qk_dim) + key_panel_index(key, d, qk_dim))] = value;
          k_head[key_pair_index(key, d, qk_dim)] = f32_to_bf16(value);
        }
        k_head[key_pair_index(key, qk_dim, qk_dim)] = 0;
        for (int64_t d = 0; d < v_dim; ++d) {
          const float value = v[size_t((h * keys + key) * v_dim + d)];
          v_panels[size_t(h * value_panels_floats(keys, v_dim) + value_panel_index(key, d, keys))] = value;
          v_head[value_pair_index(key, d, keys)] = f32_to_bf16(value);
        }
      }
      for (int64_t d = 0; d < v_dim; ++d) v_head[value_pair_index(keys, d, keys)] = 0;
    }
  }
  static constexpr uint16_t kNaN = 0x7fc0;
};

// float64 attention; with `bf16`, over q, k and v rounded to bf16, and `bound` gets each
// output's allowance for the kernel's probabilities rounded to bf16 before P V: 2^-9 of
// sum p |v| (half a bf16 ulp each), doubled.
std::vector<float> reference(const CausalAttentionParams& p, const HeadMajorKeysValues& kv, bool bf16 = false,
                             std::vector<float>* bound = nullptr) {
  const auto value = [&](float x) { return bf16 ? double(bf16_to_f32(f32_to_bf16(x))) : double(x); };
  std::vector<float> out(size_t(p.n_queries * p.n_heads * p.head_dim_v));
  if (bound) bound->assign(out.size(), 0.0f);
  const int64_t offset = p.n_keys - p.n_queries;
  for (int64_t query = 0; query < p.n_queries; ++query)
    for (int64_t head = 0; head < p.n_heads; ++head) {
      const int64_t visible = offset + query + 1;
      std::vector<double> score(static_cast<size_t>(visible));
      double max_score = -1e300, sum = 0;
      for (int64_t key = 0; key < visible; ++key) {
        double dot = 0;
        for (int64_t d = 0; d < p.head_dim_qk; ++d)
          dot += value(p.q[(query * p.n_heads + head) * p.head_dim_qk + d]) *
                 value(kv.k[size_t((head * p.n_keys + key) * p.head_dim_qk + d)]);
        score[size_t(key)] = dot * p.softmax_scale;
        max_score = std::max(max_score, score[size_t(key)]);
      }
      for (double& s : score) sum += (s = std::exp(s - max_score));
      for (int64_t d = 0; d < p.head_dim_v; ++d) {
        double total = 0, magnitude = 0;
        for (int64_t key = 0; key < visible; ++key) {
          const double weighted =
              score[size_t(key)] / sum * value(kv.v[size_t((head * p.n_keys + key) * p.head_dim_v + d)]);
          total += weighted;
          magnitude += std::abs(weighted);
        }
        const size_t at = size_t((query * p.n_heads + head) * p.head_dim_v + d);
        out[at] = float(total);
        if (bound) (*bound)[at] = float(2.0 * std::ldexp(magnitude, -9));
      }
    }
  return out;
}

// Query counts: one short tile, tiles of 64 with a short last one; cached keys before them;
// head sizes with SIMD tails, odd ones and odd key counts (the GEMMs' padding column).
constexpr std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t> kShapes[] = {
    {1, 0, 1, 8, 8},     {5, 0, 3, 20, 12},      {13, 7, 2, 24, 16},   {34, 3, 4, 40, 24},
    {150, 0, 3, 72, 40}, {141, 37, 2, 192, 128}, {64, 300, 1, 36, 20}, {70, 5, 2, 19, 13}};

// One shape's queries, keys and values, and causal_attention run over its fp32 or bf16 panels.
struct AttentionCase {
  int64_t queries, cached, heads, qk_dim, v_dim;
  std::vector<float> q;
  HeadMajorKeysValues kv;
  std::vector<float> out;
  CausalAttentionParams params;
  AttentionCase(std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t> shape, bool bf16)
      : queries(std::get<0>(shape)),
        cached(std::get<1>(shape)),
        heads(std::get<2>(shape)),
        qk_dim(std::get<3>(shape)),
        v_dim(std::get<4>(shape)),
        q(testing::random_vector(size_t(queries * heads * qk_dim), 1)),
        kv(heads, queries + cached, qk_dim, v_dim),
        out(size_t(queries * heads * v_dim), -7.0f) {
    params.q = q.data();
    params.out = out.data();
    params.n_queries = queries;
    params.n_keys = queries + cached;
    params.n_heads = heads;
    params.head_dim_qk = qk_dim;
    params.head_dim_v = v_dim;
    params.softmax_scale = 0.3f;
    params.k_panels = bf16 ? nullptr : kv.k_panels.data();
    params.v_panels = bf16 ? nullptr : kv.v_panels.data();
    params.k_pairs = bf16 ? kv.k_pairs.data() : nullptr;
    params.v_pairs = bf16 ? kv.v_pairs.data() : nullptr;
    causal_attention(params);
  }
  std::string label() const {
    return std::to_string(queries) + " queries, " + std::to_string(cached) + " cached keys, " + std::to_string(heads) +
           " heads, qk " + std::to_string(qk_dim);
  }
};

TEST(CausalAttention, MatchesReference) {
  for (const auto& shape : kShapes) {
    const AttentionCase run(shape, false);
    EXPECT_TRUE(testing::relative_close(run.out, reference(run.params, run.kv), 1e-5)) << run.label();
  }
}

// On the bf16 panels (vdpbf16ps, --bf16-terms 1): the queries' and keys' bf16 products are
// exact, so the scores match float64 of the rounded values to fp32 sums; the probabilities,
// rounded to bf16 for P V, keep each output within its bound (above).
TEST(CausalAttention, Bf16PanelsMatchTheRoundedReference) {
  if (!bf16_dot_gemm_built()) GTEST_SKIP() << "no AVX512_BF16 in this build";
  for (const auto& shape : kShapes) {
    const AttentionCase run(shape, true);
    std::vector<float> bound;
    const std::vector<float> want = reference(run.params, run.kv, true, &bound);
    int64_t outside = 0;
    for (size_t i = 0; i < run.out.size(); ++i) outside += !(std::abs(run.out[i] - want[i]) <= bound[i] + 1e-6f);
    EXPECT_EQ(outside, 0) << run.label();
  }
}

// The partial form over key ranges: the keys split in three ranges of their own panels (the
// first ending before the first query, so some queries see nothing of the later ranges' keys
// and the last range's early queries see none of it), each run with row_max and row_sum, and
// the ranges merged as the model merges them: the full attention, fp32 and bf16 panels.
TEST(CausalAttention, KeyRangesMergeIntoTheWholeAttention) {
  for (const bool bf16 : {false, true}) {
    if (bf16 && !bf16_dot_gemm_built()) continue;
    for (const auto& shape : {std::make_tuple<int64_t, int64_t, int64_t, int64_t, int64_t>(150, 37, 3, 40, 24),
                              std::make_tuple<int64_t, int64_t, int64_t, int64_t, int64_t>(70, 5, 2, 19, 13)}) {
      AttentionCase run(shape, bf16);
      const int64_t heads = run.heads, keys = run.queries + run.cached, qk = run.qk_dim, vd = run.v_dim;
      std::vector<float> acc(run.out.size(), 0.0f), max(size_t(run.queries * heads), -INFINITY), sum(max.size(), 0.0f);
      const int64_t cuts[] = {0, run.cached / 2 + 1, run.cached + run.queries / 2, keys};
      for (int r = 0; r < 3; ++r) {
        const int64_t first = cuts[r], n = cuts[r + 1] - cuts[r];
        std::vector<float> k(size_t(heads * n * qk)), v(size_t(heads * n * vd));
        for (int64_t h = 0; h < heads; ++h) {
          std::copy_n(run.kv.k.begin() + (h * keys + first) * qk, n * qk, k.begin() + h * n * qk);
          std::copy_n(run.kv.v.begin() + (h * keys + first) * vd, n * vd, v.begin() + h * n * vd);
        }
        const HeadMajorKeysValues part(heads, n, qk, vd, k, v);
        std::vector<float> out(run.out.size()), part_max(max.size()), part_sum(max.size());
        CausalAttentionParams params = run.params;
        params.k_panels = bf16 ? nullptr : part.k_panels.data();
        params.v_panels = bf16 ? nullptr : part.v_panels.data();
        params.k_pairs = bf16 ? part.k_pairs.data() : nullptr;
        params.v_pairs = bf16 ? part.v_pairs.data() : nullptr;
        params.n_keys = n;
        params.key_position = first;
        params.query_position = run.cached;
        params.out = out.data();
        params.row_max = part_max.data();
        params.row_sum = part_sum.data();
        causal_attention(params);
        for (size_t row = 0; row < max.size(); ++row) {
          const float merged = std::max(max[row], part_max[row]);
          if (merged == -INFINITY) continue;
          const float keep = std::exp(max[row] - merged), add = std::exp(part_max[row] - merged);
          for (int64_t d = 0; d < vd; ++d)
            acc[row * size_t(vd) + size_t(d)] =
                acc[row * size_t(vd) + size_t(d)] * keep + out[row * size_t(vd) + size_t(d)] * add;
          sum[row] = sum[row] * keep + part_sum[row] * add;
          max[row] = merged;
        }
      }
      for (size_t row = 0; row < max.size(); ++row)
        for (int64_t d = 0; d < vd; ++d) acc[row * size_t(vd) + size_t(d)] /= sum[row];
      std::vector<float> bound;
      const std::vector<float> want = reference(run.params, run.kv, bf16, &bound);
      if (!bf16) {
        EXPECT_TRUE(testing::relative_close(acc, want, 1e-5)) << run.label();
        continue;
      }
      int64_t outside = 0;  // bf16: probabilities rounded in each range, as in one
      for (size_t i = 0; i < acc.size(); ++i) outside += !(std::abs(acc[i] - want[i]) <= 2 * bound[i] + 1e-6f);
      EXPECT_EQ(outside, 0) << run.label();
    }
  }
}

}  // namespace
}  // namespace mlaserve
