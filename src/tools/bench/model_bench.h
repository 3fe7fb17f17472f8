// bench-model: llama-bench-style speed of a model on this machine, with the machine's own
// measured bandwidth and FMA peak, so decode is reported as % of the bandwidth roofline and
// prefill as % of peak FLOP/s. Medians over repetitions.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "engine/executor.h"

namespace mlaserve {

struct ModelBenchOptions {
  std::string model_dir;
  int64_t prompt = 512;              // -p: prefill tokens
  int64_t generate = 128;            // -n: decode steps
  int64_t batch = 8;                 // sequences decoding together for decode_batch_tok_s
  int64_t depth = 0;                 // tokens already in the cache before prefill and decode
  std::string mla_prefill = "auto";  // the prefill's attention form: auto | expanded | absorbed
  int64_t repetitions = 3;
  std::string cache_dtype = "bf16";
  // > 0: also time verification steps, each sequence computing 1 + num_draft_tokens positions
  // with every position's logits (speculative decoding's step), against plain decode steps.
  int64_t num_draft_tokens = 0;
};

// Runs on `executor` (one rank or several); `model` is the whole model, for its byte counts.
// Throws a clear error for options no run can take (a non-positive -p, -n, --batch or -r, a
// negative depth, an unknown cache dtype); run_model_bench checks them too.
void check_model_bench_options(const ModelBenchOptions& options);
nlohmann::json run_model_bench(const ModelBenchOptions& options, const CausalLM& model,
                               ModelExecutor& executor);  // progress on stderr
std::string model_bench_table(const nlohmann::json& result);

}  // namespace mlaserve
