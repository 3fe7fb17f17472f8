// Runs a serving benchmark against any OpenAI-compatible server: streams every request,
// timestamps every content chunk, and records per-request outcomes (errors included).
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tools/bench/dataset.h"

namespace mlaserve {

struct BenchOptions {
  std::string base_url = "http://127.0.0.1:8000";
  std::string endpoint = "completions";  // completions | chat
  std::string model;                     // "model" in the requests (empty: the server's first)
  std::string api_key;
  double request_rate = std::numeric_limits<double>::infinity();  // Poisson arrivals per second
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::string response_format;  // a chat request's response_format object as JSON (empty: none)
  double timeout_s = 600;       // per request
  bool progress = true;         // a progress bar on stderr
};

struct RequestRecord {
  int64_t intended_input = 0, intended_output = 0;
  bool success = false;
  std::string error;
  int64_t prompt_tokens = 0, completion_tokens = 0;  // the server's usage (or re-tokenized text)
  int64_t cached_tokens = 0;                         // usage.prompt_tokens_details.cached_tokens
  bool usage_from_server = false;
  double start_s = 0, ttft_s = 0, e2e_s = 0;  // relative to the run's start
  std::vector<double> itl_s;                  // gaps between content chunks
};

struct RunResult {
  int64_t max_concurrency = 0;  // 0: unlimited
  double request_rate = 0;
  double duration_s = 0;
  std::vector<RequestRecord> records;
  // Speculative decoding during the run, from the server's /metrics before and after it
  // (mlaserve's or vLLM's counters): tokens a verifying step emitted on average (SGLang's
  // "accept length"); 0 when the server verified no drafts or exposes no such counters.
  double accept_length = 0;
};

// The server's first model id from /v1/models; throws Error when the server cannot be reached.
std::string discover_model(const BenchOptions& options);

RunResult run_benchmark(const BenchOptions& options, const Tokenizer& tokenizer,
                        const std::vector<BenchPrompt>& prompts, int64_t max_concurrency);

}  // namespace mlaserve
