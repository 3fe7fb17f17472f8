// What a deployment will do, predicted from specs: the time of a decode step by term (weights,
// cache, compute, collectives, activations, fixed), total tokens/s against concurrency for an input/output
// length, speculative decoding, prefill and time to first token. docs/planning.md states each
// term and the source of each efficiency figure the catalog holds.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tools/plan/planner.h"

namespace mlaserve {

// --speculative METHOD[:ACCEPT]: a drafter, its mean acceptance length (tokens one verification
// step emits, the bonus token included) and what drafting costs.
struct SpeculativeSpec {
  std::string method;        // dspark | dflash | mtp | eagle | ngram
  int64_t draft_tokens = 0;  // proposed a step
  double accept_length = 0;
  int64_t draft_layers = 0;  // dense layers at the target's width a draft runs (dspark, dflash; eagle per token)
};
// METHOD[:ACCEPT]; draft_tokens, when given, replaces the method's draft tokens a step. Throws for an
// unknown method, an acceptance length outside [1, draft_tokens + 1], or eagle and ngram without
// one (their acceptance is the draft checkpoint's and the prompts' repetition, which no figure
// predicts).
SpeculativeSpec parse_speculative(const std::string& text, std::optional<int64_t> draft_tokens = std::nullopt);

struct Workload {
  int64_t input_len = 1024, output_len = 400;
  int64_t prompt_len = 0;       // > 0: predict the time to first token of one such prompt
  int64_t max_concurrency = 0;  // the sweep's end; 0: as many sequences as the cache holds
  std::optional<SpeculativeSpec> speculative;
};

// Seconds of one decode step by term: fixed + collectives + activations + max(weights + cache,
// compute).
struct StepTime {
  double weights = 0, cache = 0, compute = 0, collectives = 0, activations = 0, fixed = 0;
  double total() const;
  std::string binding() const;  // the term that takes the most time
};

struct ThroughputPoint {
  int64_t concurrency = 0;
  double total_tok_s = 0, tok_s_per_user = 0;  // output tokens; per user while decoding
};

struct Prediction {
  StepTime single_step;                  // one sequence, plain decode, at input + output/2 context
  std::optional<StepTime> verify_step;   // speculative: one sequence verifying draft_tokens + 1 positions
  double draft_s = 0;                    // speculative: one sequence's drafting a step
  double single_stream_tok_s = 0;        // with speculative decoding when given
  double single_stream_plain_tok_s = 0;  // without
  std::vector<ThroughputPoint> curve;    // concurrency 1, 2, 4, ... and the sweep's end
  double peak_total_tok_s = 0;
  int64_t peak_concurrency = 0;
  double prefill_tok_s = 0;                     // one prompt of input_len
  std::optional<double> ttft_s;                 // prompt_len: on the blocked kernel (heads padded where needed)
  std::optional<double> ttft_generic_s;         // prompt_len on the generic kernel, where heads a rank need padding
  std::optional<double> tok_s_per_dollar_hour;  // at the peak
};

Prediction predict(const Plan& plan, const Workload& workload);
nlohmann::json prediction_to_json(const Prediction& prediction, const Workload& workload);
std::string prediction_to_table(const Prediction& prediction, const Workload& workload);

}  // namespace mlaserve
