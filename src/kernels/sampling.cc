#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/error.h"
#include "kernels/simd.h"

namespace mlaserve {

int32_t argmax(const float* logits, int64_t vocab_size) {
  return int32_t(std::max_element(logits, logits + vocab_size) - logits);
}

namespace {

// The total order every filter ranks tokens by: score (a logit or a probability) descending,
// then id ascending.
struct ByScore {
  const float* score;
  bool operator()(int32_t a, int32_t b) const { return score[a] > score[b] || (score[a] == score[b] && a < b); }
};

// Puts the top k of ids [0, vocab) first, in order; returns how many stay (vocab when top_k
// is <= 0 or >= vocab: no filter). Inlined, so that each caller's partial sort is compiled
// in place (out of line, sampling_bench's top-k case is measurably slower).
[[gnu::always_inline]] inline int64_t keep_top_k(std::vector<int32_t>& ids, int64_t vocab, int64_t top_k, ByScore by) {
  if (top_k <= 0 || top_k >= vocab) return vocab;
  std::partial_sort(ids.begin(), ids.begin() + top_k, ids.end(), by);
  return top_k;
}

// Sorts candidates [0, kept) of `ids` by the order only as far as the smallest prefix whose
// weights reach top_p of their total (slices of 64, 256, ...: each an nth_element of the rest
// and a sort of the slice); returns that prefix's length, at least 1 (the first token, also
// for top_p <= 0). ids [0, sorted_end) are already in order.
int64_t nucleus(std::vector<int32_t>& ids, int64_t kept, int64_t sorted_end, const float* weight_of, float top_p,
                ByScore by) {
  double total = 0.0;
  for (int64_t i = 0; i < kept; ++i) total += weight_of[ids[size_t(i)]];
  const double target = double(top_p) * total;
  double cumulative = 0.0;
  int64_t prefix = 0;
  while (prefix < kept && (prefix == 0 || cumulative < target)) {
    if (prefix == sorted_end) {
      const int64_t next = std::min(kept, std::max<int64_t>(64, 4 * sorted_end));
      if (next < kept) std::nth_element(ids.begin() + sorted_end, ids.begin() + next, ids.begin() + kept, by);
      std::sort(ids.begin() + sorted_end, ids.begin() + next, by);
      sorted_end = next;
    }
    cumulative += weight_of[ids[size_t(prefix++)]];
  }
  return prefix;
}

// Keeps the candidates [0, kept) whose weight is at least min_p times `largest` (the largest
// weight, which always stays), in their order; returns how many.
int64_t keep_min_p(std::vector<int32_t>& ids, int64_t kept, const float* weight_of, float largest, float min_p) {
  const float threshold = std::min(min_p, 1.0f) * largest;
  int64_t out = 0;
  for (int64_t i = 0; i < kept; ++i)
    if (weight_of[ids[size_t(i)]] >= threshold) ids[size_t(out++)] = ids[size_t(i)];
  return out;
}

}  // namespace

void sampling_candidates(const float* logits, int64_t vocab_size, const SamplingParams& params,
                         SamplingCandidates& candidates) {
  // weight_of[id]: e^((logit - max) / temperature), set for the candidates only.
  thread_local std::vector<float> weight_of;
  weight_of.resize(size_t(vocab_size));
  const float inverse_temperature = 1.0f / params.temperature;
  std::vector<int32_t>& ids = candidates.ids;
  ids.resize(size_t(vocab_size));
  std::iota(ids.begin(), ids.end(), 0);
  const ByScore by_logit{logits};
  int64_t kept = keep_top_k(ids, vocab_size, params.top_k, by_logit);
  bool sorted = kept < vocab_size;
  if (sorted) {
    const float top = logits[ids[0]] * inverse_temperature;
    for (int64_t i = 0; i < kept; ++i)
      weight_of[size_t(ids[size_t(i)])] = std::exp(logits[ids[size_t(i)]] * inverse_temperature - top);
  } else {
    for (int64_t v = 0; v < vocab_size; ++v) weight_of[size_t(v)] = logits[v] * inverse_temperature;
    simd::exp_shifted(weight_of.data(), vocab_size, simd::max_of(weight_of.data(), vocab_size));
  }
  if (params.top_p < 1.0f) {
    kept = nucleus(ids, kept, sorted ? kept : 0, weight_of.data(), params.top_p, by_logit);
    sorted = true;
  }
  if (params.min_p > 0.0f)  // the most likely token has the largest weight and always stays
    kept = keep_min_p(ids, kept, weight_of.data(),
                      sorted ? weight_of[size_t(ids[0])] : simd::max_of(weight_of.data(), vocab_size), params.min_p);
  ids.resize(size_t(kept));
  candidates.weights.resize(size_t(kept));
  for (int64_t i = 0; i < kept; ++i) candidates.weights[size_t(i)] = weight_of[size_t(ids[size_t(i)])];
}

int32_t sample_token(const float* logits, int64_t vocab_size, const SamplingParams& params, std::mt19937_64& rng) {
  if (params.temperature <= 0.0f || params.top_k == 1) return argmax(logits, vocab_size);
  thread_local SamplingCandidates candidates;  // reused: vocabulary-sized every token
  sampling_candidates(logits, vocab_size, params, candidates);
  double total = 0.0;
  for (float weight : candidates.weights) total += weight;
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  double cumulative = 0.0;
  for (size_t i = 0; i < candidates.ids.size(); ++i)
    if (u < (cumulative += candidates.weights[i])) return candidates.ids[i];
  return candidates.ids.back();  // u within rounding of the total
}

void sampling_probs(const float* logits, int64_t vocab_size, const SamplingParams& params, float* probs) {
  std::fill(probs, probs + vocab_size, 0.0f);
  if (params.temperature <= 0.0f || params.top_k == 1) {
    probs[argmax(logits, vocab_size)] = 1.0f;
    return;
  }
  thread_local SamplingCandidates candidates;
  sampling_candidates(logits, vocab_size, params, candidates);
  double total = 0.0;
  for (float weight : candidates.weights) total += weight;
  for (size_t i = 0; i < candidates.ids.size(); ++i) probs[candidates.ids[i]] = float(candidates.weights[i] / total);
}

namespace {

// The ids of one row of probabilities that top-k, then top-p, then min-p keep (each off at its
// no-op value), in `ids` [0, returned).
int64_t filter_probs(const float* probs, int64_t vocab, int64_t top_k, float top_p, float min_p,
                     std::vector<int32_t>& ids) {
  ids.resize(size_t(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  const ByScore by{probs};
  int64_t kept = keep_top_k(ids, vocab, top_k, by);
  bool sorted = kept < vocab;
  if (top_p < 1.0f) {
    kept = nucleus(ids, kept, sorted ? kept : 0, probs, top_p, by);
    sorted = true;
  }
  if (min_p > 0.0f)
    kept = keep_min_p(ids, kept, probs, sorted ? probs[ids[0]] : *std::max_element(probs, probs + vocab), min_p);
  return kept;
}

// out: the row's kept probabilities divided by their sum, zeros elsewhere.
void write_renormalised(const float* probs, int64_t vocab, const std::vector<int32_t>& ids, int64_t kept, float* out) {
  double total = 0.0;
  for (int64_t i = 0; i < kept; ++i) total += probs[ids[size_t(i)]];
  MLA_CHECK(total > 0.0, "a row of probabilities has no mass to renormalise");
  std::fill(out, out + vocab, 0.0f);
  for (int64_t i = 0; i < kept; ++i) out[ids[size_t(i)]] = float(probs[ids[size_t(i)]] / total);
}

// The first id whose cumulative probability exceeds u times the row's total (the last id
// with any probability when rounding leaves u's share past the sum).
int32_t draw(const float* probs, int64_t vocab, float u) {
  double total = 0.0;
  for (int64_t v = 0; v < vocab; ++v) total += probs[v];
  MLA_CHECK(total > 0.0, "a row of probabilities has no mass to sample from");
  const double target = double(u) * total;
  double cumulative = 0.0;
  int32_t last = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    if (probs[v] <= 0.0f) continue;
    last = int32_t(v);
    if ((cumulative += probs[v]) > target) return last;
  }
  return last;
}

template <class Filter>
void renorm_rows(const float* probs, int64_t batch, int64_t vocab, float* out, Filter filter) {
  thread_local std::vector<int32_t> ids;
  for (int64_t row = 0; row < batch; ++row) {
    const float* in = probs + row * vocab;
    write_renormalised(in, vocab, ids, filter(row, in, ids), out + row * vocab);
  }
}

}  // namespace

void top_k_renorm_probs(const float* probs, int64_t batch, int64_t vocab, const int64_t* top_k, float* out) {
  renorm_rows(probs, batch, vocab, out, [&](int64_t row, const float* in, std::vector<int32_t>& ids) {
    return filter_probs(in, vocab, top_k[row], 1.0f, 0.0f, ids);
  });
}

void top_p_renorm_probs(const float* probs, int64_t batch, int64_t vocab, const float* top_p, float* out) {
  renorm_rows(probs, batch, vocab, out, [&](int64_t row, const float* in, std::vector<int32_t>& ids) {
    return filter_probs(in, vocab, 0, top_p[row], 0.0f, ids);
  });
}

void min_p_renorm_probs(const float* probs, int64_t batch, int64_t vocab, const float* min_p, float* out) {
  renorm_rows(probs, batch, vocab, out, [&](int64_t row, const float* in, std::vector<int32_t>& ids) {
    return filter_probs(in, vocab, 0, 1.0f, min_p[row], ids);
  });
}

void top_k_mask_logits(const float* logits, int64_t batch, int64_t vocab, const int64_t* top_k, float* out) {
  thread_local std::vector<int32_t> ids;
  for (int64_t row = 0; row < batch; ++row) {
    const float* in = logits + row * vocab;
    float* masked = out + row * vocab;
    const int64_t kept = filter_probs(in, vocab, top_k[row], 1.0f, 0.0f, ids);
    std::fill(masked, masked + vocab, -std::numeric_limits<float>::infinity());
    for (int64_t i = 0; i < kept; ++i) masked[ids[size_t(i)]] = in[ids[size_t(i)]];
  }
}

void sampling_from_probs(const float* probs, int64_t batch, int64_t vocab, const float* uniforms, int32_t* out) {
  for (int64_t row = 0; row < batch; ++row) out[row] = draw(probs + row * vocab, vocab, uniforms[row]);
}

void top_k_top_p_sampling_from_probs(const float* probs, int64_t batch, int64_t vocab, const int64_t* top_k,
                                     const float* top_p, const float* uniforms, int32_t* out) {
  thread_local std::vector<int32_t> ids;
  thread_local std::vector<float> filtered;
  filtered.resize(size_t(vocab));
  for (int64_t row = 0; row < batch; ++row) {
    const float* in = probs + row * vocab;
    std::fill(filtered.begin(), filtered.end(), 0.0f);
    const int64_t kept = filter_probs(in, vocab, top_k[row], top_p[row], 0.0f, ids);
    for (int64_t i = 0; i < kept; ++i) filtered[size_t(ids[size_t(i)])] = in[ids[size_t(i)]];
    out[row] = draw(filtered.data(), vocab, uniforms[row]);
  }
}

void chain_speculative_sampling(const float* draft_probs, const int32_t* draft_ids, const float* target_probs,
                                int64_t batch, int64_t num_draft, int64_t vocab, const float* uniforms,
                                int32_t* output_ids, int32_t* accepted, int32_t* emitted) {
  thread_local std::vector<float> residual;
  residual.resize(size_t(vocab));
  for (int64_t row = 0; row < batch; ++row) {
    const float* q = draft_probs + row * num_draft * vocab;
    const float* p = target_probs + row * (num_draft + 1) * vocab;
    const int32_t* drafts = draft_ids + row * num_draft;
    const float* u = uniforms + row * (num_draft + 1);
    int32_t* out = output_ids + row * (num_draft + 1);
    int64_t first_rejected = num_draft;
    accepted[row] = 0;
    for (int64_t i = 0; i < num_draft; ++i) {
      const int32_t d = drafts[i];
      MLA_CHECK(d >= 0 && d < vocab, "draft token {} is outside the vocabulary of {}", d, vocab);
      const bool accept = double(u[i]) * q[i * vocab + d] < double(p[i * vocab + d]);
      accepted[row] += accept;
      if (!accept && first_rejected == num_draft) first_rejected = i;
    }
    emitted[row] = int32_t(first_rejected);
    std::fill(out, out + num_draft + 1, -1);
    std::copy(drafts, drafts + first_rejected, out);
    const float* last = p + first_rejected * vocab;
    if (first_rejected < num_draft) {  // max(0, p - q): what the rejected draft leaves of p
      const float* q_j = q + first_rejected * vocab;
      double mass = 0.0;
      for (int64_t v = 0; v < vocab; ++v) mass += residual[size_t(v)] = std::max(0.0f, last[v] - q_j[v]);
      if (mass > 0.0) last = residual.data();
    }
    out[first_rejected] = draw(last, vocab, u[num_draft]);
  }
}

}  // namespace mlaserve
