#include "model/mla.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/dispatch.h"
#include "kernels/linear.h"
#include "kernels/mla_decode.h"
#include "kernels/norm.h"

namespace mlaserve {
namespace {

// The per-step buffers below are thread-local and reused (the decode path allocates nothing
// once they have grown to a step's size); mla_forward is never re-entered on a thread. A
// lambda run by the pool reaches them through a reference taken outside it: named inside, a
// thread_local is the running thread's own buffer.

// Per-token work (rope, latent rows) splits over the pool in parts of this many tokens; a
// decode step's few tokens stay on the calling thread.
constexpr int64_t kTokensPerTask = 16;

// mla_prefill_path's cost model, in the time of one multiply-add of the expansion (kv_b_proj
// over a cached latent, its loading and the per-head key/value panels included), fitted to
// bench-model's prefill of T tokens after P cached ones in either form (docs/performance.md).
// absorption: a new token's cost in the absorbed form (W_UK / W_UV and its per-query work) per
// multiply-add of one position's expansion; expanded_pair / latent_pair: a (query, key) pair's
// per multiply-add over H (qk + v) expanded, H (2 kv_lora_rank + rope) in the latent cache.
// Latent multiply-adds on AMX tiles (mini and small, T 4-512, P 0-2048, 30 points) cost about
// 1.5 times expanded ones; on the vector units (MLASERVE_AMX=0: bf16 products at this Xeon's
// half rate, or fp32; mini, 7 points) about 30 times.
struct PrefillCosts {
  double absorption, expanded_pair, latent_pair;
};
constexpr PrefillCosts kOnTiles{4.6, 0.021, 0.033}, kOnVectors{2.70, 0.021, 0.61};

// Where each token of the batch goes: its sequence and its position in it.
struct TokenPlace {
  const MlaSequence* seq;
  int64_t position;
};

const std::vector<TokenPlace>& token_places(const MlaInput& input) {
  thread_local std::vector<TokenPlace> places;
  places.resize(size_t(input.n_tokens));
  for (const MlaSequence& seq : input.sequences)
    for (int64_t t = 0; t < seq.n_tokens; ++t) places[size_t(seq.token_offset + t)] = {&seq, seq.start_position + t};
  return places;
}

// q: [n_tokens, H * qk_head_dim], with rope applied to each head's pe slice.
void project_queries(const MlaShape& shape, const MlaWeights& weights, const RotaryEmbedding& rope,
                     const MlaInput& input, std::span<const TokenPlace> places, std::vector<float>& q) {
  const int64_t n_tokens = input.n_tokens, qk_head_dim = shape.qk_head_dim();
  q.resize(size_t(n_tokens * shape.n_heads * qk_head_dim));
  if (weights.q_proj) {
    linear(*weights.q_proj, input.x, n_tokens, q.data());
  } else {
    const int64_t q_lora_rank = weights.q_a_proj->rows;
    thread_local std::vector<float> q_a;  // [n_tokens, q_lora_rank]
    q_a.resize(size_t(n_tokens * q_lora_rank));
    linear(*weights.q_a_proj, input.x, n_tokens, q_a.data());
    rms_norm(q_a.data(), q_lora_rank, weights.q_a_layernorm, n_tokens, q_lora_rank, shape.norm_eps, q_a.data(),
             q_lora_rank);
    linear(*weights.q_b_proj, q_a.data(), n_tokens, q.data());
  }
  if (!shape.use_rope) return;
  float* q_rows = q.data();
  thread_pool().parallel_for(
      n_tokens,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; ++t)
          rope.apply(q_rows + t * shape.n_heads * qk_head_dim + shape.qk_nope_head_dim, places[size_t(t)].position,
                     shape.n_heads, qk_head_dim);
      },
      kTokensPerTask);
}

// kv_a_proj_with_mqa -> [compressed_kv | k_pe]; norm the first, rotate the second, cache both.
void write_latents(const MlaShape& shape, const MlaWeights& weights, const RotaryEmbedding& rope, const MlaInput& input,
                   std::span<const TokenPlace> places) {
  const int64_t latent_dim = shape.latent_dim(), n_tokens = input.n_tokens;
  thread_local std::vector<float> latent_buffer;  // [n_tokens, latent_dim]
  std::vector<float>& latent = latent_buffer;
  latent.resize(size_t(n_tokens * latent_dim));
  linear(weights.kv_a_proj_with_mqa, input.x, n_tokens, latent.data());
  rms_norm(latent.data(), latent_dim, weights.kv_a_layernorm, n_tokens, shape.kv_lora_rank, shape.norm_eps,
           latent.data(), latent_dim);
  thread_pool().parallel_for(
      n_tokens,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; ++t) {
          float* row = latent.data() + t * latent_dim;
          if (shape.use_rope) rope.apply(row + shape.kv_lora_rank, places[size_t(t)].position);
          places[size_t(t)].seq->cache.store(input.layer, places[size_t(t)].position, row);
        }
      },
      kTokensPerTask);
}

// The attention's two panel layouts (kernels/attention.h): fp32, or bf16 pairs rounded to
// nearest even, whose GEMM reads the column past an odd width.
struct Fp32Panels {
  using Element = float;
  static constexpr bool kPairs = false;
  static int64_t key_words(int64_t n_keys, int64_t qk) { return key_panels_floats(n_keys, qk); }
  static int64_t value_words(int64_t n_keys, int64_t v) { return value_panels_floats(n_keys, v); }
  static int64_t key_at(int64_t key, int64_t d, int64_t qk) { return key_panel_index(key, d, qk); }
  static int64_t value_at(int64_t key, int64_t d, int64_t n_keys) { return value_panel_index(key, d, n_keys); }
  static float from(float x) { return x; }
};
struct Bf16Pairs {
  using Element = uint16_t;
  static constexpr bool kPairs = true;
  static int64_t key_words(int64_t n_keys, int64_t qk) { return key_pair_panels_words(n_keys, qk); }
  static int64_t value_words(int64_t n_keys, int64_t v) { return value_pair_panels_words(n_keys, v); }
  static int64_t key_at(int64_t key, int64_t d, int64_t qk) { return key_pair_index(key, d, qk); }
  static int64_t value_at(int64_t key, int64_t d, int64_t n_keys) { return value_pair_index(key, d, n_keys); }
  static uint16_t from(float x) { return f32_to_bf16(x); }
};

// Keys [begin, end) of every head into the panels, from the expanded kv [n_keys, H, nope + v]
// and the shared rope keys k_pe [n_keys, rope]; whole panels of 16 keys a task, the last task
// also writing the padding the GEMMs read.
template <class Layout>
void pack_head_panels(const MlaShape& shape, const float* kv, const float* k_pe, int64_t n_keys,
                      typename Layout::Element* k, typename Layout::Element* v, int64_t begin, int64_t end) {
  const int64_t nope = shape.qk_nope_head_dim, rope_dim = shape.qk_rope_head_dim, v_dim = shape.v_head_dim;
  const int64_t qk = shape.qk_head_dim(), kv_dim = nope + v_dim;
  const int64_t qk_read = Layout::kPairs ? (qk + 1) / 2 * 2 : qk;  // a key's columns the GEMM reads
  for (int64_t h = 0; h < shape.n_heads; ++h) {
    typename Layout::Element* k_head = k + h * Layout::key_words(n_keys, qk);
    typename Layout::Element* v_head = v + h * Layout::value_words(n_keys, v_dim);
    for (int64_t s = begin; s < end; ++s) {
      const float* kv_head = kv + (s * shape.n_heads + h) * kv_dim;
      for (int64_t d = 0; d < nope; ++d) k_head[Layout::key_at(s, d, qk)] = Layout::from(kv_head[d]);
      for (int64_t d = 0; d < rope_dim; ++d)
        k_head[Layout::key_at(s, nope + d, qk)] = Layout::from(k_pe[s * rope_dim + d]);
      for (int64_t d = qk; d < qk_read; ++d) k_head[Layout::key_at(s, d, qk)] = 0;
      for (int64_t d = 0; d < v_dim; ++d) v_head[Layout::value_at(s, d, n_keys)] = Layout::from(kv_head[nope + d]);
      for (int64_t d = v_dim; d < round_up_to_panel(v_dim); ++d) v_head[Layout::value_at(s, d, n_keys)] = 0;
    }
    if (end < n_keys) continue;
    for (int64_t s = n_keys; s < round_up_to_panel(n_keys); ++s)
      for (int64_t d = 0; d < qk_read; ++d) k_head[Layout::key_at(s, d, qk)] = 0;
    if (Layout::kPairs && n_keys % 2 == 1)
      for (int64_t d = 0; d < v_dim; ++d) v_head[Layout::value_at(n_keys, d, n_keys)] = 0;
  }
}

// The head panels of `Layout` for kv and k_pe in buffers k and v; sets params' pointers to them.
template <class Layout>
void lay_out_heads(const MlaShape& shape, const float* kv, const float* k_pe, int64_t n_keys,
                   std::vector<typename Layout::Element>& k, std::vector<typename Layout::Element>& v,
                   CausalAttentionParams& params) {
  k.resize(size_t(shape.n_heads * Layout::key_words(n_keys, shape.qk_head_dim())));
  v.resize(size_t(shape.n_heads * Layout::value_words(n_keys, shape.v_head_dim)));
  static_assert(kTokensPerTask % kAttentionPanel == 0, "each task writes whole key panels");
  thread_pool().parallel_for(
      n_keys,
      [&](int64_t begin, int64_t end, int) {
        pack_head_panels<Layout>(shape, kv, k_pe, n_keys, k.data(), v.data(), begin, end);
      },
      kTokensPerTask);
  if constexpr (Layout::kPairs) {
    params.k_pairs = k.data();
    params.v_pairs = v.data();
  } else {
    params.k_panels = k.data();
    params.v_panels = v.data();
  }
}

// Keys [first, first + n_keys) of the sequence expanded through kv_b_proj and laid out as
// head panels for causal_attention (their pointers set in params; the buffers are the calling
// thread's, reused).
void expand_keys(const MlaShape& shape, const MlaWeights& weights, const MlaSequence& seq, int64_t layer, int64_t first,
                 int64_t n_keys, CausalAttentionParams& params) {
  const int64_t n_heads = shape.n_heads, rope_dim = shape.qk_rope_head_dim, rank = shape.kv_lora_rank;
  const int64_t kv_dim = shape.qk_nope_head_dim + shape.v_head_dim;
  thread_local std::vector<float> latents_buffer, k_pe_buffer, kv_buffer;
  std::vector<float>& latents = latents_buffer;  // [n_keys, kv_lora_rank]
  std::vector<float>& k_pe = k_pe_buffer;        // [n_keys, rope]
  std::vector<float>& kv = kv_buffer;            // [n_keys, H, nope + v]
  latents.resize(size_t(n_keys * rank));
  k_pe.resize(size_t(n_keys * rope_dim));
  kv.resize(size_t(n_keys * n_heads * kv_dim));
  thread_pool().parallel_for(
      n_keys,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t s = begin; s < end; ++s) {
          seq.cache.load(layer, first + s, 0, rank, latents.data() + s * rank);
          seq.cache.load(layer, first + s, rank, rope_dim, k_pe.data() + s * rope_dim);
        }
      },
      kTokensPerTask);
  linear(weights.kv_b_proj, latents.data(), n_keys, kv.data());
  thread_local std::vector<float> k_buffer, v_buffer;  // [H] key / value panels (attention.h)
  thread_local std::vector<uint16_t> k_pairs_buffer, v_pairs_buffer;
  if (prefill_attention_on_bf16_dot(kernel_config()))
    lay_out_heads<Bf16Pairs>(shape, kv.data(), k_pe.data(), n_keys, k_pairs_buffer, v_pairs_buffer, params);
  else
    lay_out_heads<Fp32Panels>(shape, kv.data(), k_pe.data(), n_keys, k_buffer, v_buffer, params);
  params.n_keys = n_keys;
  params.key_position = first;
}

// Softmax terms of one key range (out, max, sum: causal_attention's partial form) folded into
// the running ones (acc, running_max, running_sum), each row of v values rescaled to the larger
// maximum.
void merge_key_range(const std::vector<float>& out, const std::vector<float>& max, const std::vector<float>& sum,
                     int64_t v_dim, float* acc, std::vector<float>& running_max, std::vector<float>& running_sum) {
  thread_pool().parallel_for(int64_t(max.size()), [&](int64_t begin, int64_t end, int) {
    for (int64_t row = begin; row < end; ++row) {
      const float merged = std::max(running_max[size_t(row)], max[size_t(row)]);
      if (merged == -INFINITY) continue;  // no key of either seen yet
      const float keep = std::exp(running_max[size_t(row)] - merged), add = std::exp(max[size_t(row)] - merged);
      float* a = acc + row * v_dim;
      const float* o = out.data() + row * v_dim;
      for (int64_t d = 0; d < v_dim; ++d) a[d] = a[d] * keep + o[d] * add;
      running_sum[size_t(row)] = running_sum[size_t(row)] * keep + sum[size_t(row)] * add;
      running_max[size_t(row)] = merged;
    }
  });
}

// attn: [seq.n_tokens, H * v_head_dim]; q: the sequence's queries [seq.n_tokens, H, qk]. Keys
// are expanded kMlaExpandedKeyTile at a time, so the form's scratch does not grow with the
// context (mini's 4,096 keys: 34 MB of fp32 K/V, 21 MB of panels); a longer sequence's ranges
// are merged by their softmax terms.
void attend_expanded(const MlaShape& shape, const MlaWeights& weights, const MlaSequence& seq, int64_t layer,
                     const float* q, float* attn) {
  const int64_t n_keys = seq.start_position + seq.n_tokens, v_dim = shape.v_head_dim;
  CausalAttentionParams params;
  params.q = q;
  params.n_queries = seq.n_tokens;
  params.n_heads = shape.n_heads;
  params.head_dim_qk = shape.qk_head_dim();
  params.head_dim_v = v_dim;
  params.softmax_scale = shape.softmax_scale;
  params.query_position = seq.start_position;
  if (n_keys <= kMlaExpandedKeyTile) {
    expand_keys(shape, weights, seq, layer, 0, n_keys, params);
    params.out = attn;
    causal_attention(params);
    return;
  }
  const size_t rows = size_t(seq.n_tokens * shape.n_heads);
  thread_local std::vector<float> out, max, sum, running_max, running_sum;  // the calling thread's, reused
  out.resize(rows * size_t(v_dim));
  max.resize(rows);
  sum.resize(rows);
  running_max.assign(rows, -INFINITY);
  running_sum.assign(rows, 0.0f);
  std::fill(attn, attn + rows * size_t(v_dim), 0.0f);  // attn accumulates the ranges: [n_tokens, H, v]
  params.out = out.data();
  params.row_max = max.data();
  params.row_sum = sum.data();
  for (int64_t first = 0; first < n_keys; first += kMlaExpandedKeyTile) {
    expand_keys(shape, weights, seq, layer, first, std::min(kMlaExpandedKeyTile, n_keys - first), params);
    causal_attention(params);
    merge_key_range(out, max, sum, v_dim, attn, running_max, running_sum);
  }
  for (size_t row = 0; row < rows; ++row)
    for (int64_t d = 0; d < v_dim; ++d) attn[row * size_t(v_dim) + size_t(d)] /= running_sum[row];
}

// The absorbed sequences of a batch (decode) together. kv_b_proj rows of head h:
// [h*(nope+v), +nope) are W_UK, [h*(nope+v)+nope, +v) are W_UV; q_latent = W_UK^T q_nope,
// out = W_UV o_latent, each head's rows read once for all the sequences' tokens (read once a
// sequence, a batch of 8 decodes re-read mini's kv_b_proj 16 times a layer); attention over
// each sequence's cache in turn. q: [n_tokens, H, qk] and attn: [n_tokens, H * v_head_dim] of
// the whole batch.
void attend_absorbed(const MlaShape& shape, const MlaWeights& weights, std::span<const MlaSequence* const> seqs,
                     int64_t layer, const float* q, float* attn) {
  const int64_t n_heads = shape.n_heads, rank = shape.kv_lora_rank, nope = shape.qk_nope_head_dim;
  const int64_t rope_dim = shape.qk_rope_head_dim, v_dim = shape.v_head_dim, qk_dim = shape.qk_head_dim();
  const int64_t kv_dim = nope + v_dim, q_stride = n_heads * qk_dim, attn_stride = n_heads * v_dim;
  thread_local std::vector<float> q_buffer, q_latent_buffer, q_pe_buffer, o_latent_buffer, out_buffer;
  std::vector<float>& queries = q_buffer;          // [T, H, qk]: the absorbed tokens' queries, gathered
  std::vector<float>& q_latent = q_latent_buffer;  // [T, H, kv_lora_rank], accumulated
  std::vector<float>& q_pe = q_pe_buffer;          // [T, H, rope]
  std::vector<float>& o_latent = o_latent_buffer;  // [T, H, kv_lora_rank]
  std::vector<float>& out = out_buffer;            // [T, H, v]
  int64_t n_tokens = 0;
  for (const MlaSequence* seq : seqs) n_tokens += seq->n_tokens;
  queries.resize(size_t(n_tokens * q_stride));
  for (int64_t first = 0; const MlaSequence* seq : seqs) {
    std::memcpy(queries.data() + first * q_stride, q + seq->token_offset * q_stride,
                size_t(seq->n_tokens * q_stride) * sizeof(float));
    first += seq->n_tokens;
  }
  q_latent.assign(size_t(n_tokens * n_heads * rank), 0.0f);
  q_pe.resize(size_t(n_tokens * n_heads * rope_dim));
  o_latent.resize(size_t(n_tokens * n_heads * rank));
  out.resize(size_t(n_tokens * attn_stride));
  thread_pool().parallel_for(n_heads, [&](int64_t begin, int64_t end, int) {
    for (int64_t head = begin; head < end; ++head) {
      if (weights.absorbed_uk_t)
        linear_rows(*weights.absorbed_uk_t, head * rank, (head + 1) * rank, queries.data() + head * qk_dim, q_stride,
                    n_tokens, q_latent.data() + head * rank, n_heads * rank);
      else
        linear_transposed_rows(weights.kv_b_proj, head * kv_dim, head * kv_dim + nope, queries.data() + head * qk_dim,
                               q_stride, n_tokens, q_latent.data() + head * rank, n_heads * rank);
      for (int64_t t = 0; t < n_tokens; ++t)
        std::memcpy(q_pe.data() + (t * n_heads + head) * rope_dim, queries.data() + t * q_stride + head * qk_dim + nope,
                    size_t(rope_dim) * sizeof(float));
    }
  });
  thread_local std::vector<MlaAbsorbedParams> attention_buffer;  // one a sequence
  std::vector<MlaAbsorbedParams>& attention = attention_buffer;
  attention.clear();
  for (int64_t first = 0; const MlaSequence* seq : seqs) {
    MlaAbsorbedParams& params = attention.emplace_back();
    params.q_latent = q_latent.data() + first * n_heads * rank;
    params.q_pe = q_pe.data() + first * n_heads * rope_dim;
    params.out_latent = o_latent.data() + first * n_heads * rank;
    params.cache = seq->cache;
    params.layer = layer;
    params.n_queries = seq->n_tokens;
    params.first_position = seq->start_position;
    params.n_heads = n_heads;
    params.kv_lora_rank = rank;
    params.qk_rope_head_dim = rope_dim;
    params.softmax_scale = shape.softmax_scale;
    first += seq->n_tokens;
  }
  // The attention computes from cache while memory would idle: its threads prefetch what they
  // read next, the W_UV panels and o_proj, as far as its products leave time.
  const ByteRange read_next[] = {weights.absorbed_uv ? weights.absorbed_uv->stored_codes() : ByteRange{},
                                 weights.o_proj.stored_codes()};
  mla_absorbed_attention(attention, read_next);
  thread_pool().parallel_for(n_heads, [&](int64_t begin, int64_t end, int) {
    for (int64_t head = begin; head < end; ++head)
      if (weights.absorbed_uv)
        linear_rows(*weights.absorbed_uv, head * v_dim, (head + 1) * v_dim, o_latent.data() + head * rank,
                    n_heads * rank, n_tokens, out.data() + head * v_dim, attn_stride);
      else
        linear_rows(weights.kv_b_proj, head * kv_dim + nope, head * kv_dim + kv_dim, o_latent.data() + head * rank,
                    n_heads * rank, n_tokens, out.data() + head * v_dim, attn_stride);
  });
  for (int64_t first = 0; const MlaSequence* seq : seqs) {
    std::memcpy(attn + seq->token_offset * attn_stride, out.data() + first * attn_stride,
                size_t(seq->n_tokens * attn_stride) * sizeof(float));
    first += seq->n_tokens;
  }
}

}  // namespace

MlaPath mla_path_from_name(const std::string& name) {
  if (name == "auto") return MlaPath::Auto;
  if (name == "expanded") return MlaPath::Expanded;
  if (name == "absorbed") return MlaPath::Absorbed;
  fail("unknown MLA path '{}' (auto, expanded, absorbed)", name);
}

const char* mla_path_name(MlaPath path) {
  switch (path) {
    case MlaPath::Expanded: return "expanded";
    case MlaPath::Absorbed: return "absorbed";
    case MlaPath::Auto: break;
  }
  return "auto";
}

MlaPath mla_prefill_path(const MlaShape& shape, int64_t n_tokens, int64_t start_position, CacheDType cache_dtype) {
  if (n_tokens <= 1) return MlaPath::Absorbed;
  const PrefillCosts& cost =
      mla_absorbed_on_tiles(shape.n_heads, shape.kv_lora_rank, shape.qk_rope_head_dim, cache_dtype, kernel_config())
          ? kOnTiles
          : kOnVectors;
  const double tokens = double(n_tokens), keys = double(start_position + n_tokens);
  const double pairs = tokens * (double(start_position) + (tokens + 1) / 2);  // causal (query, key) pairs
  const double heads = double(shape.n_heads);
  const double projection = heads * double(shape.kv_lora_rank * (shape.qk_nope_head_dim + shape.v_head_dim));
  const double expanded_pair = heads * double(shape.qk_head_dim() + shape.v_head_dim);
  const double latent_pair = heads * double(2 * shape.kv_lora_rank + shape.qk_rope_head_dim);
  const double expanded = keys * projection + pairs * cost.expanded_pair * expanded_pair;
  const double absorbed = tokens * projection * cost.absorption + pairs * cost.latent_pair * latent_pair;
  return absorbed < expanded ? MlaPath::Absorbed : MlaPath::Expanded;
}

void mla_forward(const MlaShape& shape, const MlaWeights& weights, const RotaryEmbedding& rope, const MlaInput& input,
                 float* out) {
  thread_local std::vector<float> q, attn;
  const std::vector<TokenPlace>& places = token_places(input);
  project_queries(shape, weights, rope, input, places, q);
  write_latents(shape, weights, rope, input, places);
  const int64_t q_stride = shape.n_heads * shape.qk_head_dim(), attn_stride = shape.n_heads * shape.v_head_dim;
  attn.resize(size_t(input.n_tokens * attn_stride));  // [n_tokens, H * v_head_dim]
  thread_local std::vector<const MlaSequence*> absorbed;
  absorbed.clear();
  for (const MlaSequence& seq : input.sequences) {
    const MlaPath path = seq.path != MlaPath::Auto
                             ? seq.path
                             : mla_prefill_path(shape, seq.n_tokens, seq.start_position, seq.cache.dtype);
    if (path == MlaPath::Absorbed) {
      absorbed.push_back(&seq);
      continue;
    }
    attend_expanded(shape, weights, seq, input.layer, q.data() + seq.token_offset * q_stride,
                    attn.data() + seq.token_offset * attn_stride);
  }
  if (!absorbed.empty()) attend_absorbed(shape, weights, absorbed, input.layer, q.data(), attn.data());
  if (weights.g_proj) {  // Kimi K3's output gate: attn *= sigmoid(g_proj(x))
    thread_local std::vector<float> gate;
    gate.resize(attn.size());
    linear(*weights.g_proj, input.x, input.n_tokens, gate.data());
    for (size_t i = 0; i < attn.size(); ++i) attn[i] /= 1.0f + std::exp(-gate[i]);
  }
  linear(weights.o_proj, attn.data(), input.n_tokens, out);
}

void visit_mla(const MlaWeights& mla, const std::function<void(const LinearWeight&)>& visit) {
  for (const auto* w : {&mla.kv_a_proj_with_mqa, &mla.kv_b_proj, &mla.o_proj}) visit(*w);
  for (const auto* w : {&mla.q_proj, &mla.q_a_proj, &mla.q_b_proj, &mla.g_proj, &mla.absorbed_uk_t, &mla.absorbed_uv})
    if (*w) visit(**w);
}

void add_absorbed_panels(MlaWeights& mla, int64_t qk_nope_head_dim, int64_t v_head_dim, WeightCopies& storage) {
  const LinearWeight& kv_b = mla.kv_b_proj;
  if (kv_b.format != WeightFormat::BF16) return;
  const int64_t nope = qk_nope_head_dim, v_dim = v_head_dim, kv_dim = nope + v_dim, rank = kv_b.cols;
  const int64_t n_heads = kv_b.rows / kv_dim;
  std::vector<uint16_t> uk_t(size_t(n_heads * rank * nope)), uv(size_t(n_heads * v_dim * rank));
  const auto* stored = static_cast<const uint16_t*>(kv_b.data);
  const auto row = [&](int64_t r) { return stored + (kv_b.row_offset + r) * kv_b.stored_cols + kv_b.col_offset; };
  thread_pool().parallel_for(n_heads, [&](int64_t begin, int64_t end, int) {
    for (int64_t head = begin; head < end; ++head) {
      for (int64_t i = 0; i < nope; ++i) {
        const uint16_t* w_uk = row(head * kv_dim + i);
        for (int64_t d = 0; d < rank; ++d) uk_t[size_t((head * rank + d) * nope + i)] = w_uk[d];
      }
      for (int64_t j = 0; j < v_dim; ++j)
        std::memcpy(uv.data() + (head * v_dim + j) * rank, row(head * kv_dim + nope + j), size_t(rank) * 2);
    }
  });
  const auto panels = [&](const std::vector<uint16_t>& values, int64_t rows, int64_t cols) {
    LinearWeight weight;
    weight.format = WeightFormat::BF16;
    weight.rows = rows;
    weight.cols = weight.stored_cols = cols;
    weight.data = values.data();
    return repack_bf16_panels(weight, storage);
  };
  mla.absorbed_uk_t = panels(uk_t, n_heads * rank, nope);
  mla.absorbed_uv = panels(uv, n_heads * v_dim, rank);
}

MlaShape mla_shape_of(const ModelConfig& config) {
  return MlaShape{config.hidden_size,      config.num_attention_heads,   config.kv_lora_rank,
                  config.qk_nope_head_dim, config.qk_rope_head_dim,      config.v_head_dim,
                  config.rms_norm_eps,     float(config.softmax_scale())};
}

MlaWeights load_mla_weights(WeightLoader& loader, const ModelConfig& config, const std::string& prefix) {
  const int64_t hidden = config.hidden_size, heads = config.num_attention_heads;
  MlaWeights mla;
  if (config.q_lora_rank) {
    mla.q_a_proj = loader.linear(prefix + ".q_a_proj", *config.q_lora_rank, hidden);
    mla.q_a_layernorm = loader.vector(prefix + ".q_a_layernorm.weight", *config.q_lora_rank);
    mla.q_b_proj = loader.linear(prefix + ".q_b_proj", heads * config.qk_head_dim(), *config.q_lora_rank);
  } else {
    mla.q_proj = loader.linear(prefix + ".q_proj", heads * config.qk_head_dim(), hidden);
  }
  mla.kv_a_proj_with_mqa = loader.linear(prefix + ".kv_a_proj_with_mqa", config.kv_latent_dim(), hidden);
  mla.kv_a_layernorm = loader.vector(prefix + ".kv_a_layernorm.weight", config.kv_lora_rank);
  mla.kv_b_proj =
      loader.linear(prefix + ".kv_b_proj", heads * (config.qk_nope_head_dim + config.v_head_dim), config.kv_lora_rank);
  mla.o_proj = loader.linear(prefix + ".o_proj", hidden, heads * config.v_head_dim);
  if (config.mla_use_output_gate) mla.g_proj = loader.linear(prefix + ".g_proj", heads * config.v_head_dim, hidden);
  return mla;
}

}  // namespace mlaserve
