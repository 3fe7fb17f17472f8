// Engine metrics, read by the server's /metrics endpoint. Histograms use fixed bucket bounds
// (seconds) and are safe to update and read from different threads.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace mlaserve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void observe(double value);
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct EngineMetrics {
  std::atomic<int64_t> running{0}, waiting{0};
  std::atomic<int64_t> kv_blocks_used{0}, kv_blocks_total{0};
  // The cache as sized at start-up: tokens it holds, bytes of its pool (KDA state slots
  // included), and the longest prompt a request can send (one token left to generate).
  std::atomic<int64_t> kv_cache_tokens{0}, kv_cache_bytes{0}, max_prompt_tokens{0};
  std::atomic<int64_t> prompt_tokens{0}, generation_tokens{0};
  std::atomic<int64_t> prefix_queried_tokens{0}, prefix_hit_tokens{0};
  // The prefix cache's disk tier: prompt tokens whose blocks were read from it, its files'
  // bytes now, and the bytes read and written since start.
  std::atomic<int64_t> prefix_disk_hit_tokens{0}, prefix_disk_bytes{0}, prefix_disk_read_bytes{0},
      prefix_disk_written_bytes{0};
  std::atomic<int64_t> requests_finished{0}, requests_aborted{0}, requests_failed{0};
  std::atomic<int64_t> preemptions{0};
  // Speculative decoding: decode steps that verified a draft, tokens drafted, drafts accepted;
  // per draft position (0: the first drafted token), drafts there and those accepted; the
  // time the drafter took and the time of every step's forward (microseconds).
  static constexpr int kMaxDraftTokens = 32;
  std::atomic<int64_t> spec_drafts{0}, spec_draft_tokens{0}, spec_accepted_tokens{0};
  std::array<std::atomic<int64_t>, kMaxDraftTokens> spec_drafted_at{}, spec_accepted_at{};
  std::atomic<int64_t> spec_draft_us{0}, forward_us{0};
  std::atomic<int64_t> spec_draft_length{0};  // the most tokens a sequence may draft this step
  Histogram time_to_first_token{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram inter_token_latency{{0.005, 0.01, 0.02, 0.04, 0.06, 0.1, 0.25, 0.5, 1, 2.5}};
  Histogram request_latency{{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
};

}  // namespace mlaserve
