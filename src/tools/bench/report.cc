#include "tools/bench/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace mlaserve {
namespace {

Distribution distribution(std::vector<double> values, double scale) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double& v : values) sum += v *= scale;
  d.mean = sum / double(values.size());
  const size_t n = values.size();
  d.median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  d.p99 = values[std::min(n - 1, size_t(std::ceil(0.99 * double(n))) - 1)];
  d.max = values.back();
  return d;
}

nlohmann::json to_json(const Distribution& d) {
  return {{"mean", d.mean}, {"median", d.median}, {"p99", d.p99}, {"max", d.max}};
}

}  // namespace

Summary summarize(const RunResult& run) {
  Summary s;
  s.max_concurrency = run.max_concurrency;
  s.request_rate = run.request_rate;
  s.duration_s = run.duration_s;
  std::vector<double> ttft, tpot, itl, e2e, user;
  double latency_sum = 0;
  for (const RequestRecord& r : run.records) {
    if (!r.success) {
      ++s.failed;
      ++s.errors[r.error.substr(0, 120)];
      continue;
    }
    ++s.completed;
    s.total_input += r.prompt_tokens;
    s.total_output += r.completion_tokens;
    ttft.push_back(r.ttft_s);
    e2e.push_back(r.e2e_s);
    latency_sum += r.e2e_s;
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    if (r.completion_tokens > 1) {
      const double per_token = (r.e2e_s - r.ttft_s) / double(r.completion_tokens - 1);
      tpot.push_back(per_token);
      if (per_token > 0) user.push_back(1.0 / per_token);
    }
  }
  const double duration = std::max(run.duration_s, 1e-9);
  s.request_throughput = double(s.completed) / duration;
  s.input_throughput = double(s.total_input) / duration;
  s.output_throughput = double(s.total_output) / duration;
  s.total_throughput = double(s.total_input + s.total_output) / duration;
  s.concurrency = latency_sum / duration;
  s.ttft_ms = distribution(ttft, 1e3);
  s.tpot_ms = distribution(tpot, 1e3);
  s.itl_ms = distribution(itl, 1e3);
  s.e2e_ms = distribution(e2e, 1e3);
  s.user_tok_s = distribution(user, 1.0);
  s.accept_length = run.accept_length;
  return s;
}

std::string summary_block(const Summary& s, const std::string& label) {
  std::string out = fmt::format("{:=^50}\n", " Serving Benchmark Result ");
  auto row = [&](const std::string& key, const std::string& value) {
    out += fmt::format("{:<40}{:>10}\n", key, value);
  };
  auto num = [](double v) { return fmt::format("{:.2f}", v); };
  row("Label:", label);
  row("Traffic request rate:", std::isfinite(s.request_rate) ? num(s.request_rate) : "inf");
  row("Max request concurrency:", s.max_concurrency > 0 ? std::to_string(s.max_concurrency) : "not set");
  row("Successful requests:", std::to_string(s.completed));
  row("Failed requests:", std::to_string(s.failed));
  row("Benchmark duration (s):", num(s.duration_s));
  row("Total input tokens:", std::to_string(s.total_input));
  row("Total generated tokens:", std::to_string(s.total_output));
  row("Request throughput (req/s):", num(s.request_throughput));
  row("Input token throughput (tok/s):", num(s.input_throughput));
  row("Output token throughput (tok/s):", num(s.output_throughput));
  row("Total token throughput (tok/s):", num(s.total_throughput));
  row("Concurrency:", num(s.concurrency));
  if (s.accept_length > 0) row("Accept length:", num(s.accept_length));
  auto section = [&](const char* title, const char* name, const Distribution& d, bool p99_only) {
    out += fmt::format("{:-^50}\n", std::string(" ") + title + " ");
    row(fmt::format("Mean {} (ms):", name), num(d.mean));
    row(fmt::format("Median {} (ms):", name), num(d.median));
    row(fmt::format("P99 {} (ms):", name), num(d.p99));
    if (!p99_only) row(fmt::format("Max {} (ms):", name), num(d.max));
  };
  section("End-to-End Latency", "E2E Latency", s.e2e_ms, true);
  section("Time to First Token", "TTFT", s.ttft_ms, true);
  section("Time per Output Token (excl. 1st token)", "TPOT", s.tpot_ms, true);
  section("Inter-Token Latency", "ITL", s.itl_ms, false);
  out += fmt::format("{:-^50}\n", " Single-Stream Speed ");
  row("Mean per-user output (tok/s):", num(s.user_tok_s.mean));
  row("Median per-user output (tok/s):", num(s.user_tok_s.median));
  for (const auto& [message, count] : s.errors) out += fmt::format("error x{}: {}\n", count, message);
  out += std::string(50, '=') + "\n";
  return out;
}

nlohmann::json summary_json(const Summary& s, const RunResult& run) {
  nlohmann::json requests = nlohmann::json::array();
  for (const RequestRecord& r : run.records)
    requests.push_back({{"success", r.success},
                        {"error", r.error},
                        {"intended_input_tokens", r.intended_input},
                        {"intended_output_tokens", r.intended_output},
                        {"prompt_tokens", r.prompt_tokens},
                        {"completion_tokens", r.completion_tokens},
                        {"usage_from_server", r.usage_from_server},
                        {"start_s", r.start_s},
                        {"ttft_s", r.ttft_s},
                        {"e2e_s", r.e2e_s},
                        {"itl_s", r.itl_s}});
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& [message, count] : s.errors) errors[message] = count;
  return {{"max_concurrency", s.max_concurrency},
          {"request_rate", std::isfinite(s.request_rate) ? nlohmann::json(s.request_rate) : nlohmann::json("inf")},
          {"duration_s", s.duration_s},
          {"completed", s.completed},
          {"failed", s.failed},
          {"errors", errors},
          {"total_input_tokens", s.total_input},
          {"total_output_tokens", s.total_output},
          {"request_throughput", s.request_throughput},
          {"input_throughput", s.input_throughput},
          {"output_throughput", s.output_throughput},
          {"total_token_throughput", s.total_throughput},
          {"concurrency", s.concurrency},
          {"accept_length", s.accept_length},
          {"ttft_ms", to_json(s.ttft_ms)},
          {"tpot_ms", to_json(s.tpot_ms)},
          {"itl_ms", to_json(s.itl_ms)},
          {"e2e_ms", to_json(s.e2e_ms)},
          {"per_user_tok_s", to_json(s.user_tok_s)},
          {"requests", requests}};
}

std::string sweep_svg(const std::vector<Summary>& runs, const std::string& title) {
  constexpr double kW = 420, kH = 300, kLeft = 60, kTop = 40, kPlotW = 320, kPlotH = 200;
  std::string svg = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="11">)"
      "\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      R"(<text x="{}" y="18" font-size="14" text-anchor="middle">{}</text>)"
      "\n",
      2 * kW, kH + 20, kW, title);
  auto panel = [&](double x0, const char* x_label, const char* y_label,
                   const std::vector<std::pair<double, double>>& points, const std::vector<std::string>& labels) {
    double x_max = 1e-9, y_max = 1e-9;
    for (const auto& [x, y] : points) x_max = std::max(x_max, x), y_max = std::max(y_max, y);
    x_max *= 1.1, y_max *= 1.15;
    auto px = [&](double x) { return x0 + kLeft + x / x_max * kPlotW; };
    auto py = [&](double y) { return kTop + kPlotH - y / y_max * kPlotH; };
    svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#444"/>)"
                       "\n",
                       x0 + kLeft, kTop, kPlotW, kPlotH);
    for (int tick = 0; tick <= 4; ++tick) {
      const double xv = x_max * tick / 4, yv = y_max * tick / 4;
      svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle">{:.3g}</text>)"
                         "\n",
                         px(xv), kTop + kPlotH + 14, xv);
      svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="end">{:.3g}</text>)"
                         "\n",
                         x0 + kLeft - 4, py(yv) + 4, yv);
    }
    svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle">{}</text>)"
                       "\n",
                       x0 + kLeft + kPlotW / 2, kTop + kPlotH + 32, x_label);
    svg += fmt::format(
        R"svg(<text x="{:.1f}" y="{:.1f}" text-anchor="middle" transform="rotate(-90 {:.1f} {:.1f})">{}</text>)svg"
        "\n",
        x0 + 14, kTop + kPlotH / 2, x0 + 14, kTop + kPlotH / 2, y_label);
    std::string path;
    for (size_t i = 0; i < points.size(); ++i) {
      path += fmt::format("{}{:.1f},{:.1f} ", i ? "L" : "M", px(points[i].first), py(points[i].second));
      svg += fmt::format(
          R"(<circle cx="{:.1f}" cy="{:.1f}" r="4" fill="#1f77b4"/><text x="{:.1f}" y="{:.1f}">{}</text>)"
          "\n",
          px(points[i].first), py(points[i].second), px(points[i].first) + 6, py(points[i].second) - 6, labels[i]);
    }
    svg += fmt::format(R"(<path d="{}" fill="none" stroke="#1f77b4"/>)"
                       "\n",
                       path);
  };
  std::vector<std::pair<double, double>> throughput, ttft;
  std::vector<std::string> labels;
  for (const Summary& s : runs) {
    throughput.emplace_back(s.user_tok_s.median, s.output_throughput);
    ttft.emplace_back(double(s.max_concurrency), s.ttft_ms.median);
    labels.push_back(fmt::format("c={}", s.max_concurrency));
  }
  panel(0, "per-user output tok/s (median)", "total output tok/s", throughput, labels);
  panel(kW, "max concurrency", "median TTFT (ms)", ttft, labels);
  return svg + "</svg>\n";
}

}  // namespace mlaserve
