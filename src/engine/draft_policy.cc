#include "engine/draft_policy.h"

#include <algorithm>
#include <cmath>

namespace mlaserve {
namespace {

constexpr double kFitDecay = 0.995;    // per recorded step: about the last 200 steps count
constexpr double kCountDecay = 0.999;  // per verified sequence: about the last 1,000
constexpr int64_t kLastProbe = 1024;   // steps between probes double from 32 up to this

}  // namespace

void DraftPolicy::LinearFit::add(double x, double y) {
  sw = sw * kFitDecay + 1;
  sx = sx * kFitDecay + x;
  sy = sy * kFitDecay + y;
  sxx = sxx * kFitDecay + x * x;
  sxy = sxy * kFitDecay + x * y;
}

bool DraftPolicy::LinearFit::ready() const { return sw > 0 && sxx * sw - sx * sx > 1e-9 * sw * sw; }

double DraftPolicy::LinearFit::at(double x) const {
  const double slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx);
  const double intercept = (sy - slope * sx) / sw;
  return std::max(0.0, intercept + std::max(0.0, slope) * x);
}

DraftPolicy::DraftPolicy(int64_t max_draft_tokens)
    : max_draft_tokens_(max_draft_tokens),
      offered_(size_t(max_draft_tokens)),
      drafted_(size_t(max_draft_tokens)),
      accepted_(size_t(max_draft_tokens)) {}

void DraftPolicy::record_forward(int64_t tokens, double seconds) { forward_.add(double(tokens), seconds); }

void DraftPolicy::record_drafting(int64_t tokens, double seconds) { drafting_.add(double(tokens), seconds); }

void DraftPolicy::record_verification(int64_t cap, int64_t drafted, int64_t accepted) {
  for (int64_t i = 0; i < max_draft_tokens_; ++i) {
    offered_[size_t(i)] = offered_[size_t(i)] * kCountDecay + (i < cap);
    drafted_[size_t(i)] = drafted_[size_t(i)] * kCountDecay + (i < drafted);
    accepted_[size_t(i)] = accepted_[size_t(i)] * kCountDecay + (i < accepted);
  }
}

double DraftPolicy::throughput(int64_t k, int64_t decoding_sequences) const {
  if (!forward_.ready()) return 0;
  const double sequences = double(decoding_sequences);
  if (k == 0) return sequences / forward_.at(sequences);
  if (!drafting_.ready()) return 0;
  double emitted = 1, drafted = 0;  // a sequence's expected tokens emitted and drafted
  for (int64_t i = 0; i < k; ++i) {
    if (offered_[size_t(i)] <= 0) break;
    emitted += accepted_[size_t(i)] / offered_[size_t(i)];
    drafted += drafted_[size_t(i)] / offered_[size_t(i)];
  }
  const double seconds = forward_.at(sequences * (1 + drafted)) + drafting_.at(sequences * drafted);
  return seconds > 0 ? sequences * emitted / seconds : 0;
}

DraftPolicy::Choice DraftPolicy::choose(int64_t decoding_sequences) {
  if (!forward_.ready() || !drafting_.ready() || learning_steps_ < max_draft_tokens_)
    return {1 + learning_steps_++ % max_draft_tokens_, false};
  Choice best;
  double best_rate = throughput(0, decoding_sequences);
  for (int64_t k = 1; k <= max_draft_tokens_; ++k)
    if (const double rate = throughput(k, decoding_sequences); rate > best_rate) {
      best.length = k;
      best_rate = rate;
    }
  if (best.length < max_draft_tokens_ && ++steps_since_probe_ >= probe_every_) {
    best.explore_one = true;
    probe_every_ = std::min(2 * probe_every_, kLastProbe);
    steps_since_probe_ = 0;
  }
  return best;
}

}  // namespace mlaserve
