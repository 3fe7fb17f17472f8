// Runs a model with an MTP layer over token ids and writes, as .npy, what the reference test
// compares: the final normed hidden states [n, hidden]; the MTP layer's logits for rows
// 0..n-2 (row j: state j and token j + 1) as one prefill chunk and one row at a time (the
// absorbed decode path); and one chained row n - 1 on the module's own state at row n - 2 with
// its argmax token.
// Usage: mtp_dump MODEL_DIR OUT_DIR ID,ID,...
#include <cstdio>

#include "base/npy.h"
#include "kernels/sampling.h"
#include "model/causal_lm.h"
#include "model/deepseek_mtp.h"
#include "dump_util.h"

using namespace mlaserve;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: mtp_dump MODEL_DIR OUT_DIR ID,ID,...\n");
    return 2;
  }
  const std::string out = argv[2];
  const auto model = load_causal_lm(argv[1], ActivationQuant::Off);
  const auto mtp = next_token_module(*model);
  const ModelConfig& config = model->config();
  const std::vector<int32_t> ids = parse_ids(argv[3]);
  const int64_t n = int64_t(ids.size()), width = config.hidden_size, vocab = config.vocab_size;

  SequenceCache target_cache(config, n);
  std::vector<float> hidden(static_cast<size_t>(n * width)), logits(static_cast<size_t>(vocab));
  const ForwardSequence whole{ids, 0, target_cache.view(), MlaPath::Auto, ForwardSequence::Logits::Last};
  const int final_norm = HiddenStates::kFinalNorm;
  const HiddenStates final_states{std::span(&final_norm, 1), hidden.data()};
  model->forward(std::span(&whole, 1), logits.data(), &final_states);
  write_npy_f32(out + "/hidden.npy", hidden.data(), {n, width});

  const std::span<const int32_t> next(ids.data() + 1, size_t(n - 1));
  std::vector<float> states(size_t(n * width)), mtp_logits(size_t(n * vocab));
  OneSequenceCache prefill_cache(1, config.kv_latent_dim(), n);
  const ForwardSequence rows{next, 0, prefill_cache.view, MlaPath::Auto, ForwardSequence::Logits::All};
  mtp->forward(std::span(&rows, 1), hidden.data(), states.data(), mtp_logits.data());
  write_npy_f32(out + "/mtp_prefill.npy", mtp_logits.data(), {n - 1, vocab});

  OneSequenceCache decode_cache(1, config.kv_latent_dim(), n);
  for (int64_t j = 0; j + 1 < n; ++j) {
    const ForwardSequence row{next.subspan(size_t(j), 1), j, decode_cache.view, MlaPath::Absorbed,
                              ForwardSequence::Logits::Last};
    mtp->forward(std::span(&row, 1), hidden.data() + j * width, states.data() + j * width,
                 mtp_logits.data() + j * vocab);
  }
  write_npy_f32(out + "/mtp_decode.npy", mtp_logits.data(), {n - 1, vocab});

  const int32_t drafted = argmax(mtp_logits.data() + (n - 2) * vocab, vocab);
  const ForwardSequence chained{std::span(&drafted, 1), n - 1, decode_cache.view, MlaPath::Absorbed,
                                ForwardSequence::Logits::Last};
  std::vector<float> chained_state(static_cast<size_t>(width));
  mtp->forward(std::span(&chained, 1), states.data() + (n - 2) * width, chained_state.data(), logits.data());
  write_npy_f32(out + "/mtp_chained.npy", logits.data(), {1, vocab});
  const float drafted_value = float(drafted);
  write_npy_f32(out + "/chained_token.npy", &drafted_value, {1});
  return 0;
}
