// llama.cpp's llama-perplexity over a tokenized text: chunks of `ctx` tokens, the first token of
// each replaced by BOS (when the tokenizer adds one), each scored on its second half: the
// predictions of tokens ctx/2 + 1 .. ctx - 1, from the positions before them. PPL = exp(mean NLL).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>

namespace mlaserve {

struct PerplexityResult {
  double perplexity = 0, mean_nll = 0;
  double nll_stderr = 0;  // standard error of the mean NLL (PPL's error is ~ PPL x this)
  int64_t chunks = 0, scored_tokens = 0;
};

// forward(chunk, logits): the chunk's logits [ctx, vocab], the chunk alone from position 0.
using ChunkLogits = std::function<void(std::span<const int32_t> chunk, float* logits)>;
// After each chunk: (chunks done, chunks in all, perplexity so far).
using PerplexityProgress = std::function<void(int64_t done, int64_t total, double perplexity)>;

// Throws Error when ids hold fewer than ctx tokens or ctx < 4. max_chunks 0: all of them.
PerplexityResult perplexity(std::span<const int32_t> ids, std::optional<int32_t> bos, int64_t ctx, int64_t max_chunks,
                            int64_t vocab_size, const ChunkLogits& forward, const PerplexityProgress& progress = {});

}  // namespace mlaserve
