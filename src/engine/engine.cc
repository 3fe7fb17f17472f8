#include "engine/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>
#include <numeric>
#include <optional>

#include "base/error.h"
#include "model/mla.h"
#include "tokenizer/text_streamer.h"

namespace mlaserve {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

SchedulerConfig scheduler_config(SchedulerConfig config, bool recurrent_state,
                                 std::function<int64_t(std::span<const int32_t>, int64_t)> restorable_blocks,
                                 std::function<void(std::span<const int32_t>)> before_admit) {
  config.recurrent_state = recurrent_state;
  if (recurrent_state) config.restorable_blocks = std::move(restorable_blocks);
  config.before_admit = std::move(before_admit);
  return config;
}

// Block tables [n_seqs][shared_blocks + 1]: pool blocks [0, shared_blocks) shared, then pool
// block shared_blocks + s of sequence s's own.
std::vector<int32_t> shared_prefix_tables(int64_t n_seqs, int64_t shared_blocks) {
  std::vector<int32_t> tables(size_t(n_seqs * (shared_blocks + 1)));
  for (int64_t s = 0; s < n_seqs; ++s) {
    int32_t* table = tables.data() + s * (shared_blocks + 1);
    std::iota(table, table + shared_blocks, 0);
    table[shared_blocks] = int32_t(shared_blocks + s);
  }
  return tables;
}

}  // namespace

struct Engine::Request {
  EngineRequest spec;
  std::vector<int32_t> verify_tokens;  // a decode step's last token and draft
  int64_t draft_cap = 0;               // the most it could draft this step
  Sequence seq;
  std::shared_ptr<RequestHandle> handle;
  RequestSampler sampler;
  TextStreamer streamer;
  StopStringFilter stops;  // holds back decoded text that may begin a stop string
  int64_t completion_tokens = 0, cached_tokens = -1;
  int64_t draft_tokens = 0, accepted_draft_tokens = 0;
  Clock::time_point arrival = Clock::now(), last_token;
  bool done = false;

  Request(EngineRequest request, const Tokenizer& tokenizer, std::shared_ptr<const grammar::Vocabulary> vocabulary)
      : spec(std::move(request)),
        handle(std::make_shared<RequestHandle>()),
        sampler(spec.sampling, spec.prompt, std::move(vocabulary)),
        streamer(tokenizer, spec.skip_special_tokens),
        stops(spec.stop) {}
};

void RequestHandle::push(StreamEvent event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

std::vector<StreamEvent> RequestHandle::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  std::vector<StreamEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

std::vector<int32_t> end_of_turn_ids(std::vector<int32_t> eos_token_ids, const Tokenizer& tokenizer) {
  if (tokenizer.eos_id() && std::count(eos_token_ids.begin(), eos_token_ids.end(), *tokenizer.eos_id()) == 0)
    eos_token_ids.push_back(*tokenizer.eos_id());
  return eos_token_ids;
}

Engine::Engine(ModelExecutor& executor, const Tokenizer& tokenizer, EngineConfig config)
    : Engine(nullptr, &executor, tokenizer, config) {}

Engine::Engine(const CausalLM& model, const Tokenizer& tokenizer, EngineConfig config)
    : Engine(std::make_unique<SingleRankExecutor>(model), nullptr, tokenizer, config) {}

Engine::Engine(std::unique_ptr<ModelExecutor> owned, ModelExecutor* external, const Tokenizer& tokenizer,
               EngineConfig config)
    : owned_executor_(std::move(owned)),
      executor_(external ? *external : *owned_executor_),
      model_config_(executor_.config()),
      tokenizer_(tokenizer),
      config_(config),
      latent_bytes_((config.kv_cache_tokens / config.block_size * config.block_size *
                         model_config_.kv_bytes_per_token(config.cache_dtype) +
                     63) /
                    64 * 64),
      state_bytes_(model_config_.recurrent_state_bytes()),
      block_bytes_(config.block_size * model_config_.kv_bytes_per_token(config.cache_dtype)),
      snapshots_(state_bytes_ > 0
                     ? (config.state_snapshots >= 0 ? config.state_snapshots : config.scheduler.max_num_seqs)
                     : 0),
      pool_(executor_.allocate_cache(
          size_t(latent_bytes_ +
                 (config.scheduler.max_num_seqs * (config.drafter ? 2 : 1) + snapshots_.capacity()) * state_bytes_))),
      blocks_(config.kv_cache_tokens / config.block_size, config.block_size),
      scheduler_(
          scheduler_config(
              config.scheduler, state_bytes_ > 0,
              [this](std::span<const int32_t> tokens, int64_t cached) { return restorable_blocks(tokens, cached); },
              [this](std::span<const int32_t> tokens) { load_from_disk(tokens); }),
          blocks_),
      draft_policy_(config.num_draft_tokens) {
  if (config_.max_model_len <= 0) config_.max_model_len = model_config_.max_position_embeddings;
  MLA_CHECK(config_.num_draft_tokens <= EngineMetrics::kMaxDraftTokens, "at most {} draft tokens a step, not {}",
            EngineMetrics::kMaxDraftTokens, config_.num_draft_tokens);
  if (config_.drafter) {
    hidden_layers_ = config_.drafter->hidden_state_layers();
    config_.drafter->prepare({model_config_.vocab_size, blocks_.total_blocks() * config_.block_size, config_.block_size,
                              config_.cache_dtype, config_.scheduler.max_num_seqs, config_.num_draft_tokens});
  }
  eos_ids_ = end_of_turn_ids(config_.eos_token_ids, tokenizer_);
  metrics_.kv_blocks_total = blocks_.total_blocks();
  metrics_.kv_cache_tokens = blocks_.total_blocks() * config_.block_size;
  metrics_.kv_cache_bytes =
      latent_bytes_ +
      (config_.scheduler.max_num_seqs * (config_.drafter ? 2 : 1) + snapshots_.capacity()) * state_bytes_;
  metrics_.max_prompt_tokens = std::min(config_.max_model_len, metrics_.kv_cache_tokens.load()) - 1;
  if (!config_.prefix_cache_disk.dir.empty()) {
    MLA_CHECK(state_bytes_ == 0,
              "--prefix-cache-dir is not supported yet for models with KDA layers (Kimi Linear, "
              "Kimi K3): their state snapshots are not written to disk");
    MLA_CHECK(executor_.ranks() == 1,
              "--prefix-cache-dir is not supported yet with {} ranks (--tp, MPI): blocks are "
              "read into rank 0's pool only",
              executor_.ranks());
    disk_.emplace(config_.prefix_cache_disk, config_.block_size, block_bytes_);
    blocks_.on_evict(
        [this](int32_t block, uint64_t hash, std::span<const int32_t> tokens) { spill_to_disk(block, hash, tokens); });
  }
  // The warm-up runs on the engine's thread, whose thread-local scratch buffers it sizes; its
  // failure is the constructor's. The thread owns the promise, so setting it cannot race its
  // destruction.
  std::promise<void> warmed_up;
  std::future<void> ready = warmed_up.get_future();
  thread_ = std::thread([this, warmed_up = std::move(warmed_up)]() mutable {
    try {
      warm_up();
    } catch (...) {
      warmed_up.set_exception(std::current_exception());
      return;
    }
    warmed_up.set_value();
    loop();
  });
  try {
    ready.get();
  } catch (...) {
    thread_.join();
    throw;
  }
}

// The largest steps the scheduler can form, run on the engine's thread before any request:
// max_num_seqs sequences decoding at the longest context the cache holds, then the most prefill
// tokens a step can take (chunked_prefill_size or prefill_size_alone, in chunks of at most a
// context, as many sequences' prompts at once) beside the other sequences decoding, once in each
// attention form a chunk may take, and with a drafter max_num_seqs sequences each verifying the
// longest draft. An expanded chunk ends just past one key range (kMlaExpandedKeyTile) and an
// absorbed one starts its sequence: neither form's scratch grows with the context past that,
// and a chunk at a 128k-token context would take a minute. They fault in the weights' pages,
// so the first request does not pay for them, and take the forward's scratch buffers to their
// high-water marks, so the process's memory does not creep up as longer contexts and fuller
// batches arrive. Their tokens are all the same, so every row is routed to the same experts: the
// largest expert batch. The sequences share their leading blocks and each writes its own
// last block; what they write is rewritten before any later read.
void Engine::warm_up() {
  const int64_t n_seqs = std::min(config_.scheduler.max_num_seqs, blocks_.total_blocks());
  const int64_t shared_blocks =
      std::min(blocks_.blocks_for(config_.max_model_len), blocks_.total_blocks() - n_seqs + 1) - 1;
  const int64_t context = std::min(config_.max_model_len, (shared_blocks + 1) * config_.block_size);
  const int64_t prefill = std::min(
      std::max(config_.scheduler.chunked_prefill_size, config_.scheduler.prefill_size_alone), n_seqs * context);
  const int64_t chunk = std::min(prefill, context);  // the longest chunk
  const int64_t expanded_end = std::min(context, kMlaExpandedKeyTile + chunk);
  const std::vector<int32_t> tables = shared_prefix_tables(n_seqs, shared_blocks);
  const auto view = [&](int64_t s) {
    return pool_view(std::span(tables).subspan(size_t(s * (shared_blocks + 1)), size_t(shared_blocks + 1)),
                     state_bytes_ > 0 ? state_offset(s) : -1);
  };
  // Verifying positions stay in each sequence's own last block.
  const int64_t own_positions = context - shared_blocks * config_.block_size;
  const int64_t verified = config_.drafter ? std::min(config_.num_draft_tokens + 1, own_positions) : 1;
  const std::vector<int32_t> tokens(size_t(std::max(chunk, verified)), 0);
  // Prefill chunks beside decoding sequences, or (no chunk) every sequence decoding `positions`
  // positions, with each position's logits when it verifies a draft.
  const auto run = [&](std::optional<MlaPath> chunk_path, int64_t positions) {
    std::vector<ForwardSequence>& batch = step_batch_;
    batch.clear();
    // The absorbed form's scratch follows the step's tokens, not a chunk's: its tokens are spread
    // over the sequences, whose attention costs the square of a chunk.
    const int64_t most = chunk_path == MlaPath::Absorbed ? (prefill + n_seqs - 1) / n_seqs : chunk;
    for (int64_t left = chunk_path ? prefill : 0; left > 0;) {
      const int64_t n = std::min(left, most);
      const int64_t start = *chunk_path == MlaPath::Expanded ? std::min(context, kMlaExpandedKeyTile + n) - n : 0;
      batch.push_back({std::span(tokens).first(size_t(n)), start, view(int64_t(batch.size())), *chunk_path,
                       ForwardSequence::Logits::Last});
      left -= n;
    }
    const auto logits = positions > 1 ? ForwardSequence::Logits::All : ForwardSequence::Logits::Last;
    for (int64_t s = int64_t(batch.size()); s < n_seqs; ++s)
      batch.push_back(
          {std::span(tokens).first(size_t(positions)), context - positions, view(s), MlaPath::Absorbed, logits});
    step_logits_.resize(size_t(logit_rows(batch) * model_config_.vocab_size));
    int64_t n_tokens = 0;
    for (const ForwardSequence& sequence : batch) n_tokens += int64_t(sequence.tokens.size());
    if (!hidden_layers_.empty()) step_hidden_.resize(size_t(n_tokens * hidden_width()));
    const HiddenStates hidden{hidden_layers_, step_hidden_.data()};
    executor_.forward(batch, step_logits_.data(), hidden_layers_.empty() ? nullptr : &hidden);
  };
  const auto start = Clock::now();
  run(std::nullopt, 1);
  if (config_.prefill_path == MlaPath::Auto) {
    run(MlaPath::Expanded, 1);
    run(MlaPath::Absorbed, 1);
  } else {
    run(config_.prefill_path, 1);
  }
  if (verified > 1) run(std::nullopt, verified);
  spdlog::info(
      "warm-up: {} sequences decoding at a context of {} tokens, then {} prefill tokens in chunks of {} "
      "(expanded: ending at {}) beside the others{}, in {:.2f} s",
      n_seqs, context, prefill, chunk, expanded_end,
      verified > 1 ? fmt::format(", then {} verifying {} positions each", n_seqs, verified) : "",
      seconds_between(start, Clock::now()));
}

// Of the first `cached_blocks` blocks of `tokens` (cached in the block pool), how many end
// where a state snapshot was kept: a KDA model can only resume from there.
int64_t Engine::restorable_blocks(std::span<const int32_t> tokens, int64_t cached_blocks) {
  const std::vector<uint64_t> hashes = blocks_.prefix_hashes(tokens, cached_blocks);
  for (int64_t k = cached_blocks; k > 0; --k)
    if (snapshots_.find(hashes[size_t(k - 1)], k * config_.block_size)) return k;
  return 0;
}

void Engine::load_from_disk(std::span<const int32_t> tokens) {
  if (!disk_) return;
  const int64_t reusable = (int64_t(tokens.size()) - 1) / config_.block_size;  // never the last token's block
  const int64_t cached = blocks_.cached_prefix_blocks(tokens);
  if (cached >= reusable) return;
  // A block read only where the disk holds it whole (read() leaves the pool block as it was otherwise).
  const int64_t read =
      blocks_.adopt(tokens, cached, reusable - cached, [&](int32_t block, int64_t index, uint64_t hash) {
        const auto block_tokens = tokens.subspan(size_t(index * config_.block_size), size_t(config_.block_size));
        return disk_->contains(hash) && disk_->read(hash, block_tokens, pool_block(block));
      });
  metrics_.prefix_disk_hit_tokens += read * config_.block_size;
}

void Engine::spill_to_disk(int32_t block, uint64_t hash, std::span<const int32_t> tokens) {
  if (!disk_->contains(hash)) disk_->write(hash, tokens, pool_block(block));
}

void Engine::restore_state(Sequence& seq) {
  const int64_t blocks = seq.restore_tokens / config_.block_size;
  const auto snapshot = snapshots_.find(blocks_.prefix_hash(seq.tokens, blocks), seq.restore_tokens);
  MLA_CHECK(snapshot.has_value(), "internal: the state snapshot after {} tokens is gone", seq.restore_tokens);
  executor_.copy_in_cache(snapshot_offset(*snapshot), state_offset(seq.state_slot), state_bytes_);
  seq.restore_tokens = 0;
}

// After a prefill chunk that ends on a block boundary, keep the state there (once per prefix).
void Engine::keep_state_snapshot(const ScheduledChunk& chunk) {
  const int64_t end = chunk.start + chunk.n_tokens;
  if (!chunk.prefill || end % config_.block_size != 0) return;
  const Sequence& seq = *chunk.seq;
  const auto slot = snapshots_.slot_to_write(blocks_.prefix_hash(seq.tokens, end / config_.block_size), end);
  if (slot) executor_.copy_in_cache(state_offset(seq.state_slot), snapshot_offset(*slot), state_bytes_);
}

Engine::~Engine() { shutdown(std::chrono::milliseconds(0)); }

std::shared_ptr<RequestHandle> Engine::submit(EngineRequest request) {
  const int64_t prompt_length = int64_t(request.prompt.size()), vocab = model_config_.vocab_size;
  if (prompt_length == 0) throw EngineRejection(400, "the prompt is empty");
  for (int32_t id : request.prompt)
    if (id < 0 || id >= vocab) throw EngineRejection(400, fmt::format("token id {} is outside [0, {})", id, vocab));
  if (request.max_tokens < 1)
    throw EngineRejection(400, fmt::format("max_tokens must be at least 1, got {}", request.max_tokens));
  if (prompt_length + request.max_tokens > config_.max_model_len)
    throw EngineRejection(
        400, fmt::format("This model's maximum context length is {} tokens. However, you requested "
                         "{} tokens ({} in the prompt, {} in the completion).",
                         config_.max_model_len, prompt_length + request.max_tokens, prompt_length, request.max_tokens));
  if (blocks_.blocks_for(prompt_length + request.max_tokens) > blocks_.total_blocks())
    throw EngineRejection(
        400, fmt::format("{} tokens do not fit in the KV cache of {} tokens", prompt_length + request.max_tokens,
                         blocks_.total_blocks() * config_.block_size));
  auto vocabulary = request.sampling.grammar ? grammar_vocabulary() : nullptr;
  auto owned = std::make_unique<Request>(std::move(request), tokenizer_, std::move(vocabulary));
  auto handle = owned->handle;
  {
    std::lock_guard lock(mutex_);
    if (!accepting_) throw EngineRejection(503, refusal_);
    if (int64_t(incoming_.size()) + metrics_.waiting >= config_.max_queue)
      throw EngineRejection(429, fmt::format("too many requests waiting (limit {})", config_.max_queue));
    incoming_.push_back(std::move(owned));
  }
  wake_.notify_one();
  return handle;
}

// The tokens' bytes for constrained decoding, made at the first request that needs them, as
// grammars spell them (grammar::token_spelling): only a grammar that names a special token allows
// it; the end-of-sequence tokens end a grammar and write nothing.
std::shared_ptr<const grammar::Vocabulary> Engine::grammar_vocabulary() {
  std::call_once(grammar_vocabulary_once_, [this] {
    std::vector<std::string> token_bytes(size_t(model_config_.vocab_size));
    for (int32_t id = 0; id < int32_t(token_bytes.size()); ++id) {
      const std::string text = tokenizer_.decode(std::span(&id, 1), false);
      const bool eos = std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
      if (!eos) token_bytes[size_t(id)] = grammar::token_spelling(text, tokenizer_.is_special(id));
    }
    grammar_vocabulary_ = std::make_shared<const grammar::Vocabulary>(token_bytes, eos_ids_);
  });
  return grammar_vocabulary_;
}

void Engine::shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mutex_);
    accepting_ = false;
  }
  const auto deadline = Clock::now() + grace;
  while (Clock::now() < deadline && (metrics_.running > 0 || metrics_.waiting > 0))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Engine::admit_incoming() {
  std::vector<std::unique_ptr<Request>> fresh;
  {
    std::lock_guard lock(mutex_);
    fresh.swap(incoming_);
  }
  for (auto& request : fresh) {
    request->seq.id = next_id_++;
    request->seq.tokens = request->spec.prompt;
    request->seq.prompt_length = int64_t(request->spec.prompt.size());
    metrics_.prompt_tokens += request->seq.prompt_length;
    scheduler_.add(&request->seq);
    active_.push_back(std::move(request));
  }
}

void Engine::finish(Request& request, const std::string& reason, const std::string& error) {
  StreamEvent event;
  event.finished = true;
  event.finish_reason = reason;
  event.error = error;
  if (reason == "stop" && request.stops.stopped()) event.stop_string = request.stops.matched();
  event.prompt_tokens = request.seq.prompt_length;
  event.completion_tokens = request.completion_tokens;
  event.cached_tokens = std::max<int64_t>(0, request.cached_tokens);
  event.draft_tokens = request.draft_tokens;
  event.accepted_draft_tokens = request.accepted_draft_tokens;
  request.handle->push(std::move(event));
  scheduler_.remove(&request.seq);
  if (config_.drafter) config_.drafter->release(request.seq.id);
  request.done = true;
  (reason == "abort"   ? metrics_.requests_aborted
   : reason == "error" ? metrics_.requests_failed
                       : metrics_.requests_finished)++;
  metrics_.request_latency.observe(seconds_between(request.arrival, Clock::now()));
}

void Engine::drop_cancelled() {
  for (auto& request : active_)
    if (!request->done && request->handle->cancelled()) finish(*request, "abort");
}

void Engine::on_token(Request& request, int32_t token, TokenLogprobs logprobs) {
  const auto now = Clock::now();
  if (request.completion_tokens == 0)
    metrics_.time_to_first_token.observe(seconds_between(request.arrival, now));
  else
    metrics_.inter_token_latency.observe(seconds_between(request.last_token, now));
  request.last_token = now;
  request.seq.tokens.push_back(token);
  ++request.completion_tokens;
  ++metrics_.generation_tokens;
  const EngineRequest& spec = request.spec;
  StreamEvent event;
  event.token_ids = {token};
  if (spec.sampling.logprobs >= 0) event.logprobs = {std::move(logprobs)};
  std::string reason;
  const bool stop_token = std::count(spec.stop_token_ids.begin(), spec.stop_token_ids.end(), token) > 0 ||
                          (!spec.ignore_eos && std::count(eos_ids_.begin(), eos_ids_.end(), token) > 0);
  if (stop_token) {
    event.text = request.stops.flush() + request.streamer.finish();
    reason = "stop";
  } else {
    event.text = request.stops.push(request.streamer.push(token));
    if (request.stops.stopped()) reason = "stop";
  }
  if (reason.empty() && request.completion_tokens >= spec.max_tokens) {
    event.text += request.stops.flush() + request.streamer.finish();
    reason = "length";
  }
  if (reason.empty()) {
    request.handle->push(std::move(event));
    return;
  }
  request.handle->push(std::move(event));
  finish(request, reason);
}

// Speculative decoding: a draft for every running sequence that decodes this step, no longer
// than the request may still emit after this step's own token, nor past the context.
void Engine::propose_drafts() {
  if (!config_.drafter || config_.num_draft_tokens <= 0) return;
  drafting_.clear();
  draft_requests_.clear();
  for (auto& request : active_) {
    const Sequence& seq = request->seq;
    if (!request->done && seq.running && seq.n_computed >= seq.prefill_target &&
        seq.n_computed + 1 == int64_t(seq.tokens.size()))
      drafting_.push_back(request.get());
  }
  if (drafting_.empty()) return;
  DraftPolicy::Choice choice{config_.num_draft_tokens, false};
  if (config_.draft_policy == DraftPolicyKind::Adaptive) choice = draft_policy_.choose(int64_t(drafting_.size()));
  metrics_.spec_draft_length = choice.length;
  if (choice.length == 0 && !choice.explore_one) return;
  const size_t explorer = size_t(explore_turn_++) % drafting_.size();  // drafts when exploring
  for (size_t i = 0; i < drafting_.size(); ++i) {
    Request& request = *drafting_[i];
    const int64_t known = int64_t(request.seq.tokens.size());
    const int64_t cap = choice.explore_one && i == explorer ? config_.num_draft_tokens : choice.length;
    request.draft_cap =
        std::min({cap, request.spec.max_tokens - request.completion_tokens - 1, config_.max_model_len - known - 1});
    draft_requests_.push_back({request.seq.id, request.seq.tokens, request.draft_cap});
  }
  const auto start = Clock::now();
  config_.drafter->propose(draft_requests_, proposals_);
  const double seconds = seconds_between(start, Clock::now());
  metrics_.spec_draft_us += int64_t(seconds * 1e6);
  int64_t drafted = 0;
  for (size_t i = 0; i < drafting_.size(); ++i) {
    Request& request = *drafting_[i];
    request.seq.draft = std::move(proposals_[i]);
    request.seq.draft.resize(
        request.sampler.allowed_draft_length(request.seq.draft));  // what the grammar refuses is never verified
    drafted += int64_t(request.seq.draft.size());
    if (request.seq.draft.empty() && request.draft_cap > 0) draft_policy_.record_verification(request.draft_cap, 0, 0);
  }
  draft_policy_.record_drafting(drafted, seconds + observe_seconds_);
  observe_seconds_ = 0;
}

void Engine::run_step(const std::vector<ScheduledChunk>& plan) {
  auto request_of = [&](const Sequence* seq) -> Request& {
    return **std::find_if(active_.begin(), active_.end(), [&](const auto& r) { return &r->seq == seq; });
  };
  std::vector<ForwardSequence>& batch = step_batch_;
  batch.clear();
  int64_t n_tokens = 0;
  for (const ScheduledChunk& chunk : plan) {
    Sequence& seq = *chunk.seq;
    const LatentCacheView view = pool_view(seq.block_table, seq.state_slot >= 0 ? state_offset(seq.state_slot) : -1);
    if (seq.restore_tokens > 0) restore_state(seq);
    std::span<const int32_t> tokens = std::span(seq.tokens).subspan(size_t(chunk.start), size_t(chunk.n_tokens));
    const bool verifying = !chunk.prefill && !seq.draft.empty();
    if (verifying && seq.state_slot >= 0)  // the state before the drafts, should one be rejected
      executor_.copy_in_cache(state_offset(seq.state_slot), verify_backup_offset(seq.state_slot), state_bytes_);
    if (verifying) {  // the last token, then the draft: every position's logits
      std::vector<int32_t>& verify = request_of(&seq).verify_tokens;
      verify.assign(1, seq.tokens.back());
      verify.insert(verify.end(), seq.draft.begin(), seq.draft.end());
      tokens = verify;
    }
    batch.push_back({tokens, chunk.start, view, chunk.prefill ? config_.prefill_path : MlaPath::Absorbed,
                     verifying            ? ForwardSequence::Logits::All
                     : chunk.needs_logits ? ForwardSequence::Logits::Last
                                          : ForwardSequence::Logits::None});
    n_tokens += int64_t(tokens.size());
  }
  const int64_t vocab = model_config_.vocab_size;
  std::vector<float>& logits = step_logits_;
  logits.resize(size_t(logit_rows(batch) * vocab));
  const bool show_hidden = !hidden_layers_.empty();
  if (show_hidden) step_hidden_.resize(size_t(n_tokens * hidden_width()));
  const HiddenStates hidden{hidden_layers_, step_hidden_.data()};
  try {
    const auto start = Clock::now();
    executor_.forward(batch, logits.data(), show_hidden ? &hidden : nullptr);
    const double seconds = seconds_between(start, Clock::now());
    metrics_.forward_us += int64_t(seconds * 1e6);
    if (std::none_of(plan.begin(), plan.end(), [](const ScheduledChunk& chunk) { return chunk.prefill; }))
      draft_policy_.record_forward(n_tokens, seconds);
  } catch (const ExecutorLost&) {
    throw;
  } catch (const std::exception& e) {
    spdlog::error("forward pass failed for a batch of {} sequences: {}", plan.size(), e.what());
    for (const ScheduledChunk& chunk : plan) finish(request_of(chunk.seq), "error", e.what());
    return;
  }
  int64_t row = 0;
  std::vector<int64_t> computed(plan.size());
  std::vector<Request*> requests(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    const ScheduledChunk& chunk = plan[i];
    Request& request = *(requests[i] = &request_of(chunk.seq));
    float* chunk_logits = logits.data() + row * vocab;
    row += logit_rows(std::span(&batch[i], 1));
    if (batch[i].logits == ForwardSequence::Logits::All && !chunk.prefill) {
      computed[i] = emit_verified(request, chunk, chunk_logits);
      continue;
    }
    computed[i] = chunk.n_tokens;
    scheduler_.complete(chunk, chunk.n_tokens);
    if (state_bytes_ > 0) keep_state_snapshot(chunk);
    if (request.cached_tokens < 0) request.cached_tokens = chunk.start;  // prefix-cache hit of the first admission
    if (!chunk.needs_logits) continue;
    try {
      TokenLogprobs logprobs;
      const int32_t token = request.sampler.sample(chunk_logits, vocab, &logprobs);
      on_token(request, token, std::move(logprobs));
    } catch (const std::exception& e) {
      spdlog::error("request failed: {}", e.what());
      finish(request, "error", e.what());
    }
  }
  if (show_hidden) show_hidden_states(plan, requests, computed);
}

// Hands the drafter the hidden states of the positions each chunk computed, for the requests
// that go on.
void Engine::show_hidden_states(const std::vector<ScheduledChunk>& plan, std::span<Request* const> requests,
                                std::span<const int64_t> computed) {
  std::vector<ObservedChunk> chunks;
  int64_t offset = 0;  // the chunk's first row in step_hidden_
  for (size_t i = 0; i < plan.size(); ++i) {
    const Sequence& seq = *plan[i].seq;
    if (computed[i] > 0 && !requests[i]->done)
      chunks.push_back({seq.id, seq.tokens, plan[i].start, computed[i], step_hidden_.data() + offset * hidden_width()});
    offset += int64_t(step_batch_[i].tokens.size());
  }
  if (chunks.empty()) return;
  const auto start = Clock::now();
  config_.drafter->observe(chunks);
  const double seconds = seconds_between(start, Clock::now());
  metrics_.spec_draft_us += int64_t(seconds * 1e6);
  observe_seconds_ += seconds;
}

// A verified decode step: emits the accepted drafts and the target's next token, then marks
// the last token and the accepted drafts computed (the rejected drafts' cache rows are
// rewritten by later steps). A recurrent (KDA) state has taken in the rejected drafts too: it
// goes back to its copy from before the step, and the last token and the accepted drafts are
// computed again with the next step's token (recomputing costs those positions once more; a
// state kept after every drafted position would cost k + 1 states' memory a sequence).
int64_t Engine::emit_verified(Request& request, const ScheduledChunk& chunk, float* logits) {
  Sequence& seq = *chunk.seq;
  const int64_t vocab = model_config_.vocab_size, drafted = int64_t(seq.draft.size());
  try {
    std::vector<TokenLogprobs> logprobs;
    const std::vector<int32_t> emitted = request.sampler.verify(logits, seq.draft, vocab, &logprobs);
    seq.draft.clear();
    const int64_t accepted = int64_t(emitted.size()) - 1;
    draft_policy_.record_verification(request.draft_cap, drafted, accepted);
    ++metrics_.spec_drafts;
    metrics_.spec_draft_tokens += drafted;
    metrics_.spec_accepted_tokens += accepted;
    request.draft_tokens += drafted;
    request.accepted_draft_tokens += accepted;
    for (int64_t i = 0; i < drafted; ++i) {
      ++metrics_.spec_drafted_at[size_t(i)];
      if (i < accepted) ++metrics_.spec_accepted_at[size_t(i)];
    }
    for (size_t i = 0; i < emitted.size() && !request.done; ++i) on_token(request, emitted[i], std::move(logprobs[i]));
    if (request.done) return 0;
    if (seq.state_slot >= 0 && accepted < drafted) {
      executor_.copy_in_cache(verify_backup_offset(seq.state_slot), state_offset(seq.state_slot), state_bytes_);
      scheduler_.complete(chunk, 0);
      return 0;
    }
    scheduler_.complete(chunk, int64_t(emitted.size()));
    return int64_t(emitted.size());
  } catch (const ExecutorLost&) {
    throw;
  } catch (const std::exception& e) {
    spdlog::error("request failed: {}", e.what());
    finish(request, "error", e.what());
    return 0;
  }
}

void Engine::update_gauges() {
  metrics_.running = scheduler_.n_running();
  metrics_.waiting = scheduler_.n_waiting();
  metrics_.kv_blocks_used = blocks_.used_blocks();
  metrics_.prefix_queried_tokens = blocks_.prefix_queried_tokens();
  metrics_.prefix_hit_tokens = blocks_.prefix_hit_tokens();
  if (disk_) {
    metrics_.prefix_disk_bytes = disk_->bytes();
    metrics_.prefix_disk_read_bytes = disk_->read_bytes();
    metrics_.prefix_disk_written_bytes = disk_->written_bytes();
  }
  metrics_.preemptions = scheduler_.n_preemptions();
}

void Engine::loop() {
  try {
    steps();
  } catch (const ExecutorLost& e) {
    fail_everything(e.what());
    if (config_.on_executor_lost) config_.on_executor_lost(e.what());
    return;
  }
  admit_incoming();  // requests that arrived during shutdown get their final event too
  for (auto& request : active_)
    if (!request->done) finish(*request, "abort");
  active_.clear();
  if (disk_) {
    blocks_.visit_cached(
        [this](int32_t block, uint64_t hash, std::span<const int32_t> tokens) { spill_to_disk(block, hash, tokens); });
    spdlog::info("prefix cache on disk: {} blocks, {:.2f} GiB", disk_->files(),
                 double(disk_->bytes()) / double(1 << 30));
  }
  update_gauges();
}

// The executor cannot run another step: every request fails with `error`, new ones get 503.
void Engine::fail_everything(const std::string& error) {
  spdlog::critical("{}", error);
  {
    std::lock_guard lock(mutex_);
    accepting_ = false;
    refusal_ = error;
  }
  admit_incoming();
  for (auto& request : active_)
    if (!request->done) finish(*request, "error", error);
  active_.clear();
  update_gauges();
}

// Steps until shutdown.
void Engine::steps() {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(active_.empty() ? 200 : 0),
                     [&] { return stopping_ || !incoming_.empty() || !active_.empty(); });
      if (stopping_) break;
    }
    admit_incoming();
    drop_cancelled();
    std::erase_if(active_, [](const auto& request) { return request->done; });
    propose_drafts();
    const std::vector<ScheduledChunk> plan = scheduler_.schedule();
    if (!plan.empty()) run_step(plan);
    std::erase_if(active_, [](const auto& request) { return request->done; });
    update_gauges();
  }
}

}  // namespace mlaserve
