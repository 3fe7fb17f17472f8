// Rotary embedding of DeepSeek-V3, with YaRN context extension.
// Checkpoint convention (HF modeling_deepseek apply_rotary_pos_emb): the rope slice is stored
// interleaved, so it is first permuted to [x0, x2, x4, ..., x1, x3, ...], then rotated
// rotate_half-style: out_i = y_i cos - y_{i+d/2} sin, out_{i+d/2} = y_{i+d/2} cos + y_i sin.
// q_pe and k_pe get the same permutation, so their dot products are unchanged by it.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace mlaserve {

// qk_rope_head_dim is 64 in every published config; this bounds a stack buffer.
constexpr int64_t kMaxRopeDim = 512;

// config.json's rope_scaling of type "yarn".
struct YarnScaling {
  double factor = 1.0;                              // context extension factor s
  int64_t original_max_position_embeddings = 4096;  // pre-extension context length
  double beta_fast = 32.0;                          // ramp bound (rotations) for extrapolation
  double beta_slow = 1.0;                           // ramp bound (rotations) for interpolation
  double mscale = 1.0;                              // attention factor numerator
  double mscale_all_dim = 0.0;                      // attention factor denominator and softmax scale
};

// YaRN's attention scaling mscale(s, m) = 0.1 m ln s + 1 (1 for s <= 1).
double yarn_get_mscale(double scale, double mscale);

// Which features a rotation pairs: DeepSeek-V3's checkpoints store the rope slice interleaved
// (pairs 2i, 2i + 1, permuted first as above); Llama / Qwen3 layers pair i with i + dim / 2.
enum class RotaryPairing { Interleaved, Halves };

class RotaryEmbedding {
 public:
  // dim: qk_rope_head_dim; theta: rope_theta.
  RotaryEmbedding(int64_t dim, double theta, const std::optional<YarnScaling>& yarn,
                  RotaryPairing pairing = RotaryPairing::Interleaved);
  // Rotates x[0..dim) in place for `position`; x is in checkpoint order (see pairing). With
  // n_slices > 1, the slices x + i * stride (every head of a token) alike, the angles' cosines
  // and sines computed once for all of them (double-precision sin/cos were most of the cost).
  void apply(float* x, int64_t position, int64_t n_slices = 1, int64_t stride = 0) const;
  int64_t dim() const { return dim_; }
  const std::vector<double>& inv_freq() const { return inv_freq_; }
  double attention_factor() const { return attention_factor_; }

 private:
  int64_t dim_;
  std::vector<double> inv_freq_;   // [dim / 2]
  double attention_factor_ = 1.0;  // YaRN: mscale(s, mscale) / mscale(s, mscale_all_dim)
  RotaryPairing pairing_;
};

}  // namespace mlaserve
