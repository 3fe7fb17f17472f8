#include "engine/generator.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "base/error.h"

namespace mlaserve {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Length of the longest prefix of `bytes` that does not end inside a UTF-8 character.
size_t complete_utf8_prefix(const std::string& bytes) {
  size_t end = bytes.size();
  for (size_t back = 1; back <= std::min<size_t>(3, bytes.size()); ++back) {
    const uint8_t byte = uint8_t(bytes[bytes.size() - back]);
    if ((byte & 0xc0) == 0x80) continue;  // continuation byte: look further back
    const size_t length = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
    if (length > back) end = bytes.size() - back;  // a lead byte still waiting for the rest
    break;
  }
  return end;
}

}  // namespace

GenerateStats generate(const SequenceForward& forward, int64_t vocab_size, const GenerateRequest& request,
                       const std::function<bool(int32_t)>& on_token) {
  const int64_t prompt_length = int64_t(request.prompt.size());
  MLA_CHECK(prompt_length > 0, "the prompt is empty");
  std::vector<float> logits(static_cast<size_t>(vocab_size));
  std::mt19937_64 rng(request.seed);
  GenerateStats stats;
  auto start = std::chrono::steady_clock::now();
  forward(request.prompt, 0, logits.data());
  stats.prefill_tokens = prompt_length;
  stats.prefill_seconds = seconds_since(start);
  start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < request.max_new_tokens; ++step) {
    const int32_t token = sample_token(logits.data(), vocab_size, request.sampling, rng);
    ++stats.decode_tokens;
    const bool stop = std::find(request.stop_token_ids.begin(), request.stop_token_ids.end(),
                                token) != request.stop_token_ids.end();
    if (!on_token(token) || stop || step + 1 == request.max_new_tokens) break;
    forward(std::span(&token, 1), prompt_length + step, logits.data());
  }
  stats.decode_seconds = seconds_since(start);
  return stats;
}

std::string TextStreamer::push(int32_t id) {
  pending_ += tokenizer_.decode(std::span(&id, 1));
  const size_t complete = complete_utf8_prefix(pending_);
  std::string ready = sanitize_utf8(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return ready;
}

std::string TextStreamer::finish() {
  std::string rest = sanitize_utf8(pending_);
  pending_.clear();
  return rest;
}

}  // namespace mlaserve
