#include "engine/block_drafter.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "base/error.h"
#include "kernels/sampling.h"

namespace mlaserve {

BlockDrafter::BlockDrafter(std::unique_ptr<BlockDraftModel> model, std::string model_dir, bool markov_head,
                           int64_t held_bytes)
    : model_(std::move(model)), model_dir_(std::move(model_dir)), held_bytes_(held_bytes) {
  MLA_CHECK(!markov_head || model_->has_markov_head(),
            "dspark:{}: the checkpoint has no Markov head (markov_w1, markov_w2); load it as dflash:{}", model_dir_,
            model_dir_);
}

void BlockDrafter::prepare(const DraftBudget& budget) {
  MLA_CHECK(!cache_, "the block draft '{}' already drafts for another engine", model_dir_);
  const BlockDraftConfig& config = model_->config();
  MLA_CHECK(config.vocab_size == budget.vocab_size, "the block draft '{}' has a vocabulary of {} tokens, the target {}",
            model_dir_, config.vocab_size, budget.vocab_size);
  cache_.emplace(budget, config.num_hidden_layers, model_->context_row_width());
  if (budget.max_draft_tokens > config.block_size - 1)
    spdlog::warn("block draft '{}': blocks of {} draft at most {} tokens, not {}", model_dir_, config.block_size,
                 config.block_size - 1, budget.max_draft_tokens);
  spdlog::info("block draft '{}': {} layers, a context cache of {} tokens ({:.1f} MB)", model_dir_,
               config.num_hidden_layers, cache_->tokens(), double(cache_->bytes()) / 1e6);
}

bool BlockDrafter::reserve(const ObservedChunk& chunk, Context& context, std::span<const ObservedChunk> chunks) {
  const auto idle = [&](int64_t id) {
    return std::none_of(chunks.begin(), chunks.end(), [&](const ObservedChunk& c) { return c.sequence_id == id; });
  };
  const auto reservation = cache_->reserve(chunk.sequence_id, chunk.tokens, chunk.start + chunk.count, idle);
  if (reservation && reservation->fresh) {
    context.rows = context.projected = reservation->cached_tokens;
    context.held.clear();
  }
  if (reservation && context.rows >= chunk.start) return true;
  context.blind = true;
  cache_->release(chunk.sequence_id);
  return false;
}

void BlockDrafter::observe(std::span<const ObservedChunk> chunks) {
  const int64_t width = model_->feature_width();
  std::vector<int64_t> full;  // sequences holding more than held_bytes_
  std::vector<std::span<const int32_t>> full_tokens;
  for (const ObservedChunk& chunk : chunks) {
    Context& context = sequences_[chunk.sequence_id];
    if (chunk.start == 0) context = Context{};  // computed from the first token: nothing is missing
    const int64_t end = chunk.start + chunk.count;
    if (context.blind || !reserve(chunk, context, chunks) || context.rows >= end) continue;
    const int64_t from = context.rows;  // rows the prefix cache gave past the chunk's start are kept
    context.held.insert(context.held.end(), chunk.hidden + (from - chunk.start) * width,
                        chunk.hidden + chunk.count * width);
    context.rows = end;
    if (int64_t(context.held.size()) * 4 > held_bytes_) {
      full.push_back(chunk.sequence_id);
      full_tokens.push_back(chunk.tokens);
    }
  }
  project(full, full_tokens);
}

void BlockDrafter::project(std::span<const int64_t> ids, std::span<const std::span<const int32_t>> tokens) {
  rows_.clear();
  features_.clear();
  const int64_t width = model_->feature_width();
  for (const int64_t id : ids) {
    Context& context = sequences_.at(id);
    rows_.push_back({cache_->view(id), context.projected, context.rows - context.projected});
    features_.insert(features_.end(), context.held.begin(), context.held.end());
    MLA_CHECK(int64_t(context.held.size()) == rows_.back().count * width, "internal: held rows out of step");
  }
  model_->write_context(rows_, features_.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    Context& context = sequences_.at(ids[i]);
    context.projected = context.rows;
    context.held.clear();
    cache_->publish(ids[i], tokens[i], context.projected);
  }
}

void BlockDrafter::propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& proposals) {
  proposals.assign(requests.size(), {});
  blocks_.clear();
  first_tokens_.clear();
  std::vector<size_t> drafting;  // requests[drafting[b]] is block b
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& request = requests[i];
    const auto found = sequences_.find(request.sequence_id);
    const int64_t length = int64_t(request.tokens.size());
    // The context must end just before the last committed token, the block's first.
    if (request.max_tokens <= 0 || found == sequences_.end() || found->second.blind ||
        found->second.rows != length - 1 || !cache_->holds(request.sequence_id))
      continue;
    blocks_.push_back({cache_->view(request.sequence_id), length - 1});
    first_tokens_.push_back(request.tokens.back());
    drafting.push_back(i);
  }
  if (blocks_.empty()) return;
  std::vector<int64_t> ids;
  std::vector<std::span<const int32_t>> tokens;
  for (const size_t i : drafting)
    if (const Context& context = sequences_.at(requests[i].sequence_id); context.projected < context.rows) {
      ids.push_back(requests[i].sequence_id);
      tokens.push_back(requests[i].tokens);
    }
  project(ids, tokens);
  states_.resize(size_t(int64_t(blocks_.size()) * model_->config().block_size * model_->config().hidden_size));
  model_->forward(blocks_, first_tokens_, states_.data());
  draft_tokens(drafting, requests, proposals);
}

void BlockDrafter::draft_tokens(std::span<const size_t> drafting, std::span<const DraftRequest> requests,
                                std::vector<std::vector<int32_t>>& proposals) {
  const int64_t block = model_->config().block_size, hidden = model_->config().hidden_size;
  const int64_t vocab = model_->config().vocab_size;
  // Block position j > 0 predicts the j-th token after the last committed one: only the
  // positions a request may still use go through the head.
  std::vector<int64_t> counts;
  picked_.clear();
  for (size_t b = 0; b < drafting.size(); ++b) {
    counts.push_back(std::min(requests[drafting[b]].max_tokens, block - 1));
    const float* first = states_.data() + (int64_t(b) * block + 1) * hidden;
    picked_.insert(picked_.end(), first, first + counts.back() * hidden);
  }
  logits_.resize(picked_.size() / size_t(hidden) * size_t(vocab));
  model_->logits(picked_.data(), int64_t(picked_.size()) / hidden, logits_.data());
  float* row = logits_.data();
  for (size_t b = 0; b < drafting.size(); ++b) {
    std::vector<int32_t>& proposal = proposals[drafting[b]];
    int32_t previous = first_tokens_[b];
    for (int64_t j = 0; j < counts[b]; ++j, row += vocab) {
      if (model_->has_markov_head()) model_->add_markov_logits(previous, row);
      previous = argmax(row, vocab);
      proposal.push_back(previous);
    }
  }
}

void BlockDrafter::release(int64_t sequence_id) {
  if (cache_) cache_->release(sequence_id);
  sequences_.erase(sequence_id);
}

std::string BlockDrafter::describe() const {
  const BlockDraftConfig& config = model_->config();
  return fmt::format("block draft '{}' ({} layers, blocks of {}, target layers {}{})", model_dir_,
                     config.num_hidden_layers, config.block_size, fmt::join(config.target_layer_ids, ","),
                     model_->has_markov_head() ? ", Markov head" : "");
}

}  // namespace mlaserve
