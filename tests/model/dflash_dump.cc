// Runs a target and a block draft (model/dflash.h) over token ids and writes, as .npy, what the
// reference test compares: the target's states at the draft's target_layer_ids for ids[0, n-1)
// (features [n - 1, feature_width]); the last normed states of two blocks drafted in one batch
// (states [2 x block_size, hidden]): block A after context n - 1 (written in two pieces) with
// first token ids[n - 1], block B after context n - 4 with first token ids[n - 4]; and each
// block's logits for positions 1.. (the Markov head's terms added, drafted greedily left to
// right: logits [2 x (block_size - 1), vocab], tokens [2 x (block_size - 1)]).
// Usage: dflash_dump TARGET_DIR DRAFT_DIR OUT_DIR ID,ID,...
#include <cstdio>

#include "base/npy.h"
#include "kernels/sampling.h"
#include "model/dflash.h"
#include "dump_util.h"

using namespace mlaserve;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: dflash_dump TARGET_DIR DRAFT_DIR OUT_DIR ID,ID,...\n");
    return 2;
  }
  const std::string out = argv[3];
  const auto target = load_causal_lm(argv[1], ActivationQuant::Off);
  const BlockDraftModel draft(argv[2], *target);
  const std::vector<int32_t> ids = parse_ids(argv[4]);
  const int64_t n = int64_t(ids.size()), width = draft.feature_width(), vocab = draft.config().vocab_size;
  const int64_t block = draft.config().block_size, hidden = draft.config().hidden_size;

  SequenceCache target_cache(target->config(), n);
  std::vector<float> features(static_cast<size_t>((n - 1) * width)), logits(static_cast<size_t>(vocab));
  const ForwardSequence prefix{std::span(ids).first(size_t(n - 1)), 0, target_cache.view(), MlaPath::Auto,
                               ForwardSequence::Logits::Last};
  const HiddenStates wanted{draft.config().target_layer_ids, features.data()};
  target->forward(std::span(&prefix, 1), logits.data(), &wanted);
  write_npy_f32(out + "/features.npy", features.data(), {n - 1, width});

  const int64_t layers = draft.config().num_hidden_layers;
  OneSequenceCache a(layers, draft.context_row_width(), n + block), b(layers, draft.context_row_width(), n + block);
  const ContextRows pieces[] = {{a.view, 0, 3}, {a.view, 3, n - 4}, {b.view, 0, n - 4}};
  std::vector<float> piece_features(features.begin(), features.end());
  piece_features.insert(piece_features.end(), features.begin(), features.begin() + (n - 4) * width);
  draft.write_context(pieces, piece_features.data());

  const DraftBlock blocks[] = {{a.view, n - 1}, {b.view, n - 4}};
  const int32_t first_tokens[] = {ids[size_t(n - 1)], ids[size_t(n - 4)]};
  std::vector<float> states(size_t(2 * block * hidden));
  draft.forward(blocks, first_tokens, states.data());
  write_npy_f32(out + "/states.npy", states.data(), {2 * block, hidden});

  std::vector<float> drafted_logits(size_t(2 * (block - 1) * vocab)), tokens;
  for (int64_t s = 0; s < 2; ++s) {
    int32_t previous = first_tokens[s];
    for (int64_t j = 1; j < block; ++j) {
      float* row = drafted_logits.data() + (s * (block - 1) + j - 1) * vocab;
      draft.logits(states.data() + (s * block + j) * hidden, 1, row);
      if (draft.has_markov_head()) draft.add_markov_logits(previous, row);
      previous = argmax(row, vocab);
      tokens.push_back(float(previous));
    }
  }
  write_npy_f32(out + "/logits.npy", drafted_logits.data(), {2 * (block - 1), vocab});
  write_npy_f32(out + "/tokens.npy", tokens.data(), {2 * (block - 1)});
  return 0;
}
