#include "server/prometheus.h"

#include <fmt/format.h>

namespace mlaserve {
namespace {

void metric(std::string& out, const char* name, const char* type, const char* help, const std::string& labels,
            double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{{{}}} {}\n", name, help, name, type, name, labels, value);
}

void histogram(std::string& out, const char* name, const char* help, const std::string& labels, const Histogram& h) {
  const Histogram::Snapshot s = h.snapshot();
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  for (size_t i = 0; i < s.bounds.size(); ++i)
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, s.bounds[i], s.cumulative[i]);
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels,
                     s.cumulative.back(), name, labels, s.sum, name, labels, s.count);
}

// A label value as the exposition format writes it: backslash, quote and newline escaped.
std::string label_value(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

// A counter per draft position, for the positions drafted so far.
void per_position(std::string& out, const char* name, const char* help, const std::string& labels,
                  const std::array<std::atomic<int64_t>, EngineMetrics::kMaxDraftTokens>& counts) {
  out += fmt::format("# HELP {} {}\n# TYPE {} counter\n", name, help, name);
  for (int i = 0; i < EngineMetrics::kMaxDraftTokens && counts[size_t(i)] > 0; ++i)
    out += fmt::format("{}{{{},position=\"{}\"}} {}\n", name, labels, i, int64_t(counts[size_t(i)]));
}

// The latent cache: its size, use, and the prefix cache's hits in memory and on disk.
void render_cache(std::string& out, EngineMetrics& m, const std::string& labels) {
  metric(out, "mlaserve_kv_cache_tokens", "gauge", "Tokens the latent KV cache holds.", labels,
         double(m.kv_cache_tokens));
  metric(out, "mlaserve_kv_cache_bytes", "gauge", "Bytes of the latent KV cache's pool (KDA state included).", labels,
         double(m.kv_cache_bytes));
  metric(out, "mlaserve_max_prompt_tokens", "gauge",
         "The longest prompt a request can send: the context length or the cache, less one token to generate.", labels,
         double(m.max_prompt_tokens));
  const double total = double(m.kv_blocks_total);
  metric(out, "mlaserve_kv_cache_usage_perc", "gauge", "Fraction of latent KV cache blocks in use (0-1).", labels,
         total > 0 ? double(m.kv_blocks_used) / total : 0.0);
  metric(out, "mlaserve_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", labels,
         double(m.prefix_queried_tokens));
  metric(out, "mlaserve_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.", labels,
         double(m.prefix_hit_tokens));
  const double queried = double(m.prefix_queried_tokens);
  metric(out, "mlaserve_prefix_cache_hit_rate", "gauge", "Prefix cache hits / queries (tokens).", labels,
         queried > 0 ? double(m.prefix_hit_tokens) / queried : 0.0);
  metric(out, "mlaserve_prefix_cache_disk_hits_total", "counter",
         "Prompt tokens whose blocks were read from the prefix cache's disk tier (also counted as hits).", labels,
         double(m.prefix_disk_hit_tokens));
  metric(out, "mlaserve_prefix_cache_disk_bytes", "gauge", "Bytes of this model's prefix-cache files on disk.", labels,
         double(m.prefix_disk_bytes));
  metric(out, "mlaserve_prefix_cache_disk_read_bytes_total", "counter", "Bytes read from the prefix cache's disk tier.",
         labels, double(m.prefix_disk_read_bytes));
  metric(out, "mlaserve_prefix_cache_disk_written_bytes_total", "counter",
         "Bytes written to the prefix cache's disk tier.", labels, double(m.prefix_disk_written_bytes));
}

// Speculative decoding: drafts, accepted tokens by position, the drafter's time.
void render_speculative(std::string& out, EngineMetrics& m, const std::string& labels) {
  metric(out, "mlaserve_spec_decode_num_drafts_total", "counter", "Decode steps that verified a draft.", labels,
         double(m.spec_drafts));
  metric(out, "mlaserve_spec_decode_num_draft_tokens_total", "counter", "Tokens drafted.", labels,
         double(m.spec_draft_tokens));
  metric(out, "mlaserve_spec_decode_num_accepted_tokens_total", "counter", "Drafted tokens accepted.", labels,
         double(m.spec_accepted_tokens));
  per_position(out, "mlaserve_spec_decode_num_draft_tokens_per_pos", "Tokens drafted, by position in the draft.",
               labels, m.spec_drafted_at);
  per_position(out, "mlaserve_spec_decode_num_accepted_tokens_per_pos", "Drafted tokens accepted, by position.", labels,
               m.spec_accepted_at);
  metric(out, "mlaserve_spec_decode_draft_seconds_total", "counter", "Time the drafter took.", labels,
         double(m.spec_draft_us) * 1e-6);
  metric(out, "mlaserve_spec_decode_draft_length", "gauge",
         "The most tokens a sequence drafted in the last step (the adaptive policy's choice).", labels,
         double(m.spec_draft_length));
}

}  // namespace

std::string render_prometheus(EngineMetrics& m, const std::string& model_name, const ModelInfo& model_info) {
  const std::string labels = fmt::format("model_name=\"{}\"", label_value(model_name));
  std::string out;
  std::string info_labels = labels;
  for (const auto& [key, value] : model_info) info_labels += fmt::format(",{}=\"{}\"", key, label_value(value));
  metric(out, "mlaserve_model_info", "gauge", "What is served: the model, its weights, ranks and kernels (labels).",
         info_labels, 1.0);
  metric(out, "mlaserve_num_requests_running", "gauge", "Requests in the running batch.", labels, double(m.running));
  metric(out, "mlaserve_num_requests_waiting", "gauge", "Requests waiting to be scheduled.", labels, double(m.waiting));
  render_cache(out, m, labels);
  metric(out, "mlaserve_prompt_tokens_total", "counter", "Prompt tokens received.", labels, double(m.prompt_tokens));
  metric(out, "mlaserve_generation_tokens_total", "counter", "Tokens generated.", labels, double(m.generation_tokens));
  metric(out, "mlaserve_num_preemptions_total", "counter", "Sequences preempted for lack of cache.", labels,
         double(m.preemptions));
  render_speculative(out, m, labels);
  metric(out, "mlaserve_forward_seconds_total", "counter",
         "Time of the model's forward passes (verification included).", labels, double(m.forward_us) * 1e-6);
  out +=
      "# HELP mlaserve_request_success_total Finished requests by finish reason.\n"
      "# TYPE mlaserve_request_success_total counter\n";
  out += fmt::format("mlaserve_request_success_total{{{},finished_reason=\"finished\"}} {}\n", labels,
                     int64_t(m.requests_finished));
  out += fmt::format("mlaserve_request_success_total{{{},finished_reason=\"abort\"}} {}\n", labels,
                     int64_t(m.requests_aborted));
  out += fmt::format("mlaserve_request_success_total{{{},finished_reason=\"error\"}} {}\n", labels,
                     int64_t(m.requests_failed));
  histogram(out, "mlaserve_time_to_first_token_seconds", "Time to first token.", labels, m.time_to_first_token);
  histogram(out, "mlaserve_inter_token_latency_seconds", "Time between successive tokens of a request.", labels,
            m.inter_token_latency);
  histogram(out, "mlaserve_e2e_request_latency_seconds", "Request latency from arrival to finish.", labels,
            m.request_latency);
  return out;
}

}  // namespace mlaserve
