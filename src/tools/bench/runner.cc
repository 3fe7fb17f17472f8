#include "tools/bench/runner.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "base/error.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr int64_t kMaxWorkers = 512;

httplib::Headers headers_of(const BenchOptions& options) {
  httplib::Headers headers = {{"Content-Type", "application/json"}};
  if (!options.api_key.empty()) headers.emplace("Authorization", "Bearer " + options.api_key);
  return headers;
}

std::unique_ptr<httplib::Client> make_client(const BenchOptions& options) {
  auto client = std::make_unique<httplib::Client>(options.base_url);
  MLA_CHECK(client->is_valid(), "--base-url '{}' is not a valid http URL", options.base_url);
  const auto seconds = time_t(options.timeout_s);
  client->set_read_timeout(seconds, 0);
  client->set_write_timeout(seconds, 0);
  client->set_connection_timeout(10, 0);
  return client;
}

std::string request_body(const BenchOptions& options, const BenchPrompt& prompt) {
  json body = {{"model", options.model},
               {"max_tokens", prompt.output_tokens},
               {"temperature", 0.0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (options.ignore_eos) body["ignore_eos"] = true;
  if (!options.response_format.empty()) body["response_format"] = json::parse(options.response_format);
  if (options.endpoint == "chat")
    body["messages"] = json::array({{{"role", "user"}, {"content", prompt.text}}});
  else
    body["prompt"] = prompt.text;
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Parses one SSE payload into the record; returns the content it carried.
std::string consume_event(const std::string& payload, RequestRecord& record) {
  const json event = json::parse(payload, nullptr, false);
  if (event.is_discarded()) throw std::runtime_error("unparsable stream event: " + payload.substr(0, 200));
  if (event.contains("error")) throw std::runtime_error("server error in stream: " + event["error"].dump());
  if (event.contains("usage") && event["usage"].is_object()) {
    record.prompt_tokens = event["usage"].value("prompt_tokens", int64_t(0));
    record.completion_tokens = event["usage"].value("completion_tokens", int64_t(0));
    record.usage_from_server = true;
    const json details = event["usage"].value("prompt_tokens_details", json::object());
    if (details.is_object()) record.cached_tokens = details.value("cached_tokens", int64_t(0));
  }
  if (!event.contains("choices") || event["choices"].empty()) return "";
  const json& choice = event["choices"][0];
  if (choice.contains("text") && choice["text"].is_string()) return choice["text"].get<std::string>();
  if (choice.contains("delta") && choice["delta"].contains("content") && choice["delta"]["content"].is_string())
    return choice["delta"]["content"].get<std::string>();
  return "";
}

RequestRecord send_request(httplib::Client& client, const BenchOptions& options, const Tokenizer& tokenizer,
                           const BenchPrompt& prompt, Clock::time_point run_start) {
  RequestRecord record;
  record.intended_input = prompt.input_tokens;
  record.intended_output = prompt.output_tokens;
  const auto start = Clock::now();
  record.start_s = std::chrono::duration<double>(start - run_start).count();
  std::string buffer, generated, raw;
  Clock::time_point last_content{};
  bool done = false;
  httplib::Request request;
  request.method = "POST";
  request.path = options.endpoint == "chat" ? "/v1/chat/completions" : "/v1/completions";
  request.headers = headers_of(options);
  request.body = request_body(options, prompt);
  request.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
    const auto now = Clock::now();
    buffer.append(data, length);
    if (raw.size() < 1000) raw.append(data, std::min<size_t>(length, 1000));
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
      const std::string line = buffer.substr(0, end);
      if (!line.starts_with("data: ")) continue;
      const std::string payload = line.substr(6);
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      const std::string content = consume_event(payload, record);
      if (content.empty()) continue;
      generated += content;
      if (last_content == Clock::time_point{})
        record.ttft_s = std::chrono::duration<double>(now - start).count();
      else
        record.itl_s.push_back(std::chrono::duration<double>(now - last_content).count());
      last_content = now;
    }
    return true;
  };
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  try {
    const bool sent = client.send(request, response, error);
    record.e2e_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (!sent) throw std::runtime_error("connection: " + httplib::to_string(error));
    if (response.status != 200)
      throw std::runtime_error(fmt::format("HTTP {}: {}", response.status, raw.substr(0, 300)));
    if (!done) throw std::runtime_error("stream ended without [DONE]");
    if (!record.usage_from_server) record.completion_tokens = int64_t(tokenizer.encode(generated, false).size());
    if (!record.usage_from_server) record.prompt_tokens = prompt.input_tokens;
    record.success = true;
  } catch (const std::exception& e) {
    record.error = e.what();
  }
  return record;
}

void draw_progress(int64_t done, int64_t failed, int64_t total) {
  constexpr int kWidth = 30;
  const int filled = int(kWidth * done / std::max<int64_t>(1, total));
  std::fprintf(stderr, "\r[bench-serve] [%s%s] %lld/%lld requests%s", std::string(size_t(filled), '#').c_str(),
               std::string(size_t(kWidth - filled), '.').c_str(), (long long)done, (long long)total,
               failed ? fmt::format(", {} failed", failed).c_str() : "");
  if (done == total) std::fputc('\n', stderr);
}

// The server's speculative-decoding counters in /metrics: verifying steps and accepted drafts
// (mlaserve's names, or vLLM's); zeros when it has none or no /metrics.
struct SpecCounters {
  double drafts = 0, accepted = 0;
};

SpecCounters read_spec_counters(const BenchOptions& options) {
  auto client = make_client(options);
  auto response = client->Get("/metrics", headers_of(options));
  SpecCounters counters;
  if (!response || response->status != 200) return counters;
  std::istringstream lines(response->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const std::string name = line.substr(0, line.find_first_of("{ "));
    const double value = std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
    if (name == "mlaserve_spec_decode_num_drafts_total" || name == "vllm:spec_decode_num_drafts_total")
      counters.drafts += value;
    if (name == "mlaserve_spec_decode_num_accepted_tokens_total" ||
        name == "vllm:spec_decode_num_accepted_tokens_total")
      counters.accepted += value;
  }
  return counters;
}

}  // namespace

std::string discover_model(const BenchOptions& options) {
  auto client = make_client(options);
  auto response = client->Get("/v1/models", headers_of(options));
  MLA_CHECK(response, "cannot reach {}: {}", options.base_url, httplib::to_string(response.error()));
  MLA_CHECK(response->status == 200, "{}/v1/models answered HTTP {}: {}", options.base_url, response->status,
            response->body.substr(0, 300));
  const json models = json::parse(response->body, nullptr, false);
  MLA_CHECK(!models.is_discarded() && models.contains("data") && !models["data"].empty(), "{}/v1/models lists no model",
            options.base_url);
  return models["data"][0].value("id", "");
}

RunResult run_benchmark(const BenchOptions& options, const Tokenizer& tokenizer,
                        const std::vector<BenchPrompt>& prompts, int64_t max_concurrency) {
  const int64_t total = int64_t(prompts.size());
  std::vector<double> arrival(prompts.size(), 0.0);  // Poisson: exponential gaps at request_rate
  if (std::isfinite(options.request_rate) && options.request_rate > 0) {
    std::mt19937_64 rng(options.seed);
    std::exponential_distribution<double> gap(options.request_rate);
    for (size_t i = 1; i < arrival.size(); ++i) arrival[i] = arrival[i - 1] + gap(rng);
  }
  RunResult result;
  result.max_concurrency = max_concurrency;
  result.request_rate = options.request_rate;
  result.records.resize(prompts.size());
  std::atomic<int64_t> next{0}, finished{0}, failed{0};
  std::mutex progress_mutex;
  const SpecCounters before = read_spec_counters(options);
  const auto run_start = Clock::now();
  const int64_t workers = std::min({total, max_concurrency > 0 ? max_concurrency : total, kMaxWorkers});
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < workers; ++w)
    threads.emplace_back([&] {
      auto client = make_client(options);
      for (int64_t i; (i = next++) < total;) {
        std::this_thread::sleep_until(
            run_start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrival[i])));
        result.records[i] = send_request(*client, options, tokenizer, prompts[i], run_start);
        failed += !result.records[i].success;
        const int64_t done = ++finished;
        if (options.progress) {
          std::lock_guard lock(progress_mutex);
          draw_progress(done, failed, total);
        }
      }
    });
  for (auto& thread : threads) thread.join();
  result.duration_s = std::chrono::duration<double>(Clock::now() - run_start).count();
  const SpecCounters after = read_spec_counters(options);
  const double drafts = after.drafts - before.drafts;
  if (drafts > 0) result.accept_length = (drafts + after.accepted - before.accepted) / drafts;
  return result;
}

}  // namespace mlaserve
