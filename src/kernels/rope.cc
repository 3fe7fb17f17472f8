#include "kernels/rope.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace mlaserve {
namespace {

// YaRN (Peng et al. 2023, eq. 17-19 as in HF yarn_find_correction_dim): the rotary dimension
// index whose wavelength completes `rotations` turns over the original context.
double correction_dim(double rotations, int64_t dim, double base, int64_t max_position) {
  return double(dim) * std::log(double(max_position) / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
}

}  // namespace

double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

RotaryEmbedding::RotaryEmbedding(int64_t dim, double theta, const std::optional<YarnScaling>& yarn_scaling,
                                 RotaryPairing pairing)
    : dim_(dim), pairing_(pairing) {
  MLA_CHECK(dim_ > 0 && dim_ % 2 == 0 && dim_ <= kMaxRopeDim, "qk_rope_head_dim {} must be even and at most {}", dim_,
            kMaxRopeDim);
  const int64_t half = dim_ / 2;
  const double base = theta;
  inv_freq_.resize(size_t(half));
  for (int64_t i = 0; i < half; ++i) inv_freq_[i] = 1.0 / std::pow(base, double(2 * i) / double(dim_));
  if (!yarn_scaling) return;
  const YarnScaling& yarn = *yarn_scaling;
  double low = std::floor(correction_dim(yarn.beta_fast, dim_, base, yarn.original_max_position_embeddings));
  double high = std::ceil(correction_dim(yarn.beta_slow, dim_, base, yarn.original_max_position_embeddings));
  low = std::max(low, 0.0);
  high = std::min(high, double(dim_ - 1));
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < half; ++i) {
    // extrapolation_weight 1: keep the original frequency; 0: interpolate (divide by factor).
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;
    const double interpolated = inv_freq_[i] / yarn.factor;
    inv_freq_[i] = interpolated * (1.0 - extrapolation_weight) + inv_freq_[i] * extrapolation_weight;
  }
  attention_factor_ = yarn_get_mscale(yarn.factor, yarn.mscale) / yarn_get_mscale(yarn.factor, yarn.mscale_all_dim);
}

void RotaryEmbedding::apply(float* x, int64_t position, int64_t n_slices, int64_t stride) const {
  const int64_t half = dim_ / 2;
  float cos_a[kMaxRopeDim / 2], sin_a[kMaxRopeDim / 2];
  for (int64_t i = 0; i < half; ++i) {
    const double angle = double(position) * inv_freq_[i];
    cos_a[i] = float(std::cos(angle) * attention_factor_);
    sin_a[i] = float(std::sin(angle) * attention_factor_);
  }
  for (int64_t slice = 0; slice < n_slices; ++slice) {
    float* v = x + slice * stride;
    float permuted[kMaxRopeDim];
    for (int64_t i = 0; i < half; ++i) {
      const bool interleaved = pairing_ == RotaryPairing::Interleaved;
      permuted[i] = interleaved ? v[2 * i] : v[i];
      permuted[i + half] = interleaved ? v[2 * i + 1] : v[i + half];
    }
    for (int64_t i = 0; i < half; ++i) {
      v[i] = permuted[i] * cos_a[i] - permuted[i + half] * sin_a[i];
      v[i + half] = permuted[i + half] * cos_a[i] + permuted[i] * sin_a[i];
    }
  }
}

}  // namespace mlaserve
