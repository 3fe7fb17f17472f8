// What proposes tokens for speculative decoding: one interface for every drafter — given each
// running sequence's tokens, propose up to k tokens that may follow them. The engine verifies
// every sequence's proposal in its next batched forward and keeps the longest accepted prefix
// (RequestSampler::verify), so a drafter only affects speed, never the output.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/latent_cache_view.h"

namespace mlaserve {

class CausalLM;

// One running sequence the engine wants a draft for.
struct DraftRequest {
  int64_t sequence_id;              // stable while the request lives (released by Drafter::release)
  std::span<const int32_t> tokens;  // prompt and output so far
  int64_t max_tokens;               // propose at most this many (may be 0)
};

// What a drafter with a model of its own is told of the engine it drafts for.
struct DraftBudget {
  int64_t vocab_size = 0;    // the target's
  int64_t cache_tokens = 0;  // the target's latent-cache capacity
  int64_t block_size = 16;
  CacheDType cache_dtype = CacheDType::BF16;
  int64_t max_sequences = 0;  // running at once
  int64_t max_draft_tokens = 0;
};

// One sequence's part of a target forward, for drafters that read the target's states: its
// positions [start, start + count) were computed, and `tokens` (prompt and output after the
// step) holds token start + count, so each computed position's next token is known.
struct ObservedChunk {
  int64_t sequence_id;
  std::span<const int32_t> tokens;
  int64_t start, count;
  const float* hidden;  // [count, layers x hidden]: the target's states the drafter asked for
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Called once by the engine that uses the drafter, before any proposal.
  virtual void prepare(const DraftBudget& budget) {}
  // A drafter that reads the target's hidden states (MTP, DFlash) names them (as HiddenStates'
  // layers: decoder layer ids, or HiddenStates::kFinalNorm) and is shown every forward's, after
  // its tokens were sampled or verified and before the next proposal.
  virtual std::vector<int> hidden_state_layers() const { return {}; }
  virtual void observe(std::span<const ObservedChunk> chunks) {}
  // proposals[i]: at most requests[i].max_tokens tokens to follow requests[i].tokens.
  virtual void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& proposals) = 0;
  // The sequence has finished: whatever the drafter keeps for it can go.
  virtual void release(int64_t sequence_id) {}
  virtual std::string describe() const = 0;
};

// Prompt lookup (vLLM's "ngram", llama.cpp's lookup decoding): the longest suffix of the
// sequence, of max_ngram tokens down to min_ngram, that occurred earlier in it (prompt or
// output); proposes the tokens that followed its latest earlier occurrence. No model.
class NgramDrafter : public Drafter {
 public:
  NgramDrafter(int64_t min_ngram, int64_t max_ngram);
  void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& proposals) override;
  std::string describe() const override;

 private:
  int64_t min_ngram_, max_ngram_;
};

// Throws Error naming an unknown or not yet implemented drafter, or a draft model directory
// without a config.json: what `--speculative` may name is checked before any model loads.
void check_drafter_spec(const std::string& spec);

// The drafter `--speculative` names: "ngram" (prompt lookup, n-grams of 1 to 4 tokens),
// "draft:DIR" (the model in DIR, greedy, with a latent cache of its own), "mtp" (the target's
// own multi-token-prediction layer), "dflash:DIR" or "dspark:DIR" (a block draft reading the
// target's hidden states; dspark requires its Markov head). For mtp, dflash and dspark,
// `target` must be the loaded, unsharded model, and outlive the drafter.
std::unique_ptr<Drafter> make_drafter(const std::string& spec, const CausalLM* target = nullptr);

}  // namespace mlaserve
