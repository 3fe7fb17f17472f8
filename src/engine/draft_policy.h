// How many tokens speculative decoding drafts a step: as many as maximise the tokens emitted
// per second, by a cost model measured while serving (no model of the hardware). A decode
// step's forward time is fitted as a + b·n for n tokens computed and the drafter's time as
// c + d·m for m tokens drafted (least squares, older steps decayed). Per draft position i,
// reach_i and accept_i are the shares of sequence-steps that could draft position i in which
// it was drafted and accepted. Drafting at most k each for B decoding sequences then emits
// B·(1 + Σ_{i<k} accept_i) tokens in fwd(B·(1 + L)) + draft(B·L) seconds, L = Σ_{i<k} reach_i;
// without drafts B tokens take fwd(B). The policy picks the k that emits most per second, 0
// when no k beats not drafting. It first drafts 1, 2, ... the maximum in turn (to learn), and
// while it chooses less than the maximum it lets one sequence draft the maximum (a few tokens
// more in that step) after 32 steps, then 64, ... up to 1,024, so a change in acceptance or
// load is noticed at little cost.
// Pure logic: unit-tested on synthetic costs.
#pragma once
#include <cstdint>
#include <vector>

namespace mlaserve {

class DraftPolicy {
 public:
  explicit DraftPolicy(int64_t max_draft_tokens);
  struct Choice {
    int64_t length = 0;        // the most tokens each decoding sequence drafts in the next step
    bool explore_one = false;  // a probe: one sequence drafts the maximum
  };
  Choice choose(int64_t decoding_sequences);
  // A decode-only step's forward computed `tokens` positions in `seconds`.
  void record_forward(int64_t tokens, double seconds);
  // The drafter drafted `tokens` tokens for one step in `seconds`.
  void record_drafting(int64_t tokens, double seconds);
  // One sequence's verification: it could draft up to `cap`, drafted `drafted`, `accepted` kept.
  void record_verification(int64_t cap, int64_t drafted, int64_t accepted);
  // The expected emitted tokens per second of drafting at most k for B sequences (0: unknown).
  double throughput(int64_t k, int64_t decoding_sequences) const;

 private:
  struct LinearFit {  // y = intercept + slope x, weighted least squares with decay
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    void add(double x, double y);
    bool ready() const;  // two distinct sizes seen
    double at(double x) const;
  };
  int64_t max_draft_tokens_;
  LinearFit forward_, drafting_;
  std::vector<double> offered_, drafted_, accepted_;  // decayed counts per draft position
  int64_t steps_since_probe_ = 0, probe_every_ = 32;
  int64_t learning_steps_ = 0;
};

}  // namespace mlaserve
