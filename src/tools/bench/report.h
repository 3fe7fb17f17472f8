// Benchmark results: the summary block SGLang's bench_serving and vllm bench serve print,
// JSON with per-request records, and the sweep chart (SVG).
#pragma once
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "tools/bench/runner.h"

namespace mlaserve {

struct Distribution {
  double mean = 0, median = 0, p99 = 0, max = 0;
};

struct Summary {
  int64_t max_concurrency = 0;
  double request_rate = 0, duration_s = 0;
  int64_t completed = 0, failed = 0;
  std::map<std::string, int64_t> errors;  // error message (first 120 chars) -> count
  int64_t total_input = 0, total_output = 0;
  double request_throughput = 0, input_throughput = 0, output_throughput = 0, total_throughput = 0;
  double concurrency = 0;  // sum of request latencies / duration
  Distribution ttft_ms, tpot_ms, itl_ms, e2e_ms;
  Distribution user_tok_s;   // per request: 1 / TPOT ("single-stream speed")
  double accept_length = 0;  // RunResult::accept_length (0: no speculative decoding seen)
};

Summary summarize(const RunResult& run);
std::string summary_block(const Summary& summary, const std::string& label);
nlohmann::json summary_json(const Summary& summary, const RunResult& run);
// Two panels: total output tok/s against per-user tok/s (points labelled by concurrency), and
// median TTFT against concurrency.
std::string sweep_svg(const std::vector<Summary>& runs, const std::string& title);

}  // namespace mlaserve
