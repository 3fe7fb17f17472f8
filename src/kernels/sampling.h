// Token sampling from logits: greedy, or temperature with top-k / top-p (nucleus) / min-p
// filtering, with the filters applied in the order vLLM applies them (top-k, then top-p, then
// min-p), each on the distribution the previous one left (FlashInfer's top_k_renorm_prob).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace mlaserve {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // 0: no limit
  float top_p = 1.0f;        // keep the smallest set of tokens whose probability reaches top_p
  float min_p = 0.0f;        // drop tokens below min_p * max probability
};

int32_t argmax(const float* logits, int64_t vocab_size);

// The tokens a temperature sample draws from and their unnormalised probabilities,
// e^((logit - max logit) / temperature), after the filters (temperature > 0). Without top-p
// the vocabulary is never sorted: top-k selects its k (a partial sort), and top-p sorts only
// as far down the order as the nucleus reaches (in slices that grow 4x). ids are in
// descending logit order (lowest id first on ties) when top-k or top-p ran, else in id order.
struct SamplingCandidates {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};
void sampling_candidates(const float* logits, int64_t vocab_size, const SamplingParams& params,
                         SamplingCandidates& candidates);

int32_t sample_token(const float* logits, int64_t vocab_size, const SamplingParams& params, std::mt19937_64& rng);

// The distribution sample_token draws from, as a dense row probs [vocab_size]: the candidates'
// weights normalised, zeros elsewhere; one-hot at the argmax when greedy.
void sampling_probs(const float* logits, int64_t vocab_size, const SamplingParams& params, float* probs);

// FlashInfer's sampling ops (flashinfer.sampling), on `batch` rows of `vocab` values, each row
// with its own parameter, on the same filters as sampling_candidates: every filter ranks
// tokens by a total order, probability (or logit) descending and then id ascending, so top-k
// keeps exactly k tokens even when the k-th value is tied. Rows of probabilities need not be
// normalised; the *_renorm_probs ops write rows that sum to 1, zeros outside the kept set.
// top_k <= 0 or >= vocab keeps every token, top_p >= 1 likewise; top-p keeps the shortest
// prefix in the order whose mass reaches top_p of the row's (at least its first token).
void top_k_renorm_probs(const float* probs, int64_t batch, int64_t vocab, const int64_t* top_k, float* out);
void top_p_renorm_probs(const float* probs, int64_t batch, int64_t vocab, const float* top_p, float* out);
// Drops tokens below min_p times the row's largest probability.
void min_p_renorm_probs(const float* probs, int64_t batch, int64_t vocab, const float* min_p, float* out);
// Logits outside each row's top k set to -inf.
void top_k_mask_logits(const float* logits, int64_t batch, int64_t vocab, const int64_t* top_k, float* out);
// One id per row, drawn with the row's uniform u in [0, 1): the first id (in id order) whose
// cumulative probability exceeds u times the row's total. Callers draw the uniforms from the
// request's seeded generator, so a seed fixes the draw.
void sampling_from_probs(const float* probs, int64_t batch, int64_t vocab, const float* uniforms, int32_t* out);
// Top-k, then top-p on what it kept, then sampling_from_probs.
void top_k_top_p_sampling_from_probs(const float* probs, int64_t batch, int64_t vocab, const int64_t* top_k,
                                     const float* top_p, const float* uniforms, int32_t* out);

// Speculative sampling of a chain of K drafted tokens (Leviathan et al., Chen et al.), as
// FlashInfer's chain_speculative_sampling: draft_probs [batch, K, vocab] (the distributions
// the drafts were drawn from), draft_ids [batch, K], target_probs [batch, K + 1, vocab],
// uniforms [batch, K + 1]. Draft i is accepted when u_i * q_i(d_i) < p_i(d_i); at the first
// rejection j the token is drawn with u_K from max(0, p_j - q_j) renormalised (from p_j when
// that is all zero), else the bonus token from p_K. output_ids [batch, K + 1]: the accepted
// drafts, then that token, then -1. emitted [batch]: drafts accepted before the first
// rejection; accepted [batch]: drafts that would be accepted each on its own (FlashInfer's
// accepted_token_num, for acceptance statistics). With independent uniforms every emitted
// token is distributed as the target's p, whatever the draft.
void chain_speculative_sampling(const float* draft_probs, const int32_t* draft_ids, const float* target_probs,
                                int64_t batch, int64_t num_draft, int64_t vocab, const float* uniforms,
                                int32_t* output_ids, int32_t* accepted, int32_t* emitted);

}  // namespace mlaserve
