// The serving engine: one thread that owns the paged latent cache and runs the scheduler's
// steps through the model, sampling each request's tokens, detokenizing them, applying stop
// strings and limits, and streaming events to the request's handle. HTTP threads submit
// requests and wait on handles; a handle can be cancelled from any thread and the engine
// frees the request at its next step.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/block_manager.h"
#include "engine/disk_prefix_cache.h"
#include "engine/draft_policy.h"
#include "engine/drafter.h"
#include "engine/metrics.h"
#include "engine/executor.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/state_snapshots.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {

enum class DraftPolicyKind { Adaptive, Fixed };

struct EngineConfig {
  int64_t block_size = 16;      // tokens per cache block
  int64_t kv_cache_tokens = 0;  // cache capacity in tokens (rounded down to blocks)
  CacheDType cache_dtype = CacheDType::BF16;
  SchedulerConfig scheduler;
  int64_t max_queue = 256;                  // waiting requests beyond this are refused (429)
  int64_t max_model_len = 0;                // prompt + generated tokens; 0: the model's context
  int64_t state_snapshots = -1;             // KDA models: prefix-cache state snapshots kept (-1: max_num_seqs)
  DiskPrefixCacheConfig prefix_cache_disk;  // the prefix cache's disk tier (dir empty: none)
  // Prefill chunks' attention form. Auto: the cheaper for each chunk (mla_prefill_path), so a
  // request's numbers may differ in rounding with its chunking and prefix-cache hits;
  // Expanded for every chunk makes them independent of both (decode is always Absorbed).
  MlaPath prefill_path = MlaPath::Auto;
  // Tokens that end a request unless it asks ignore_eos (GenerationConfig::eos_token_ids); the
  // tokenizer's eos_token ends it too.
  std::vector<int32_t> eos_token_ids;
  // Speculative decoding: what proposes tokens for the decoding sequences (null: none) and at
  // most how many a sequence's step verifies. Not on models with recurrent (KDA) layers.
  // Adaptive: each step drafts as many (down to none) as the measured costs and acceptance
  // say emit the most tokens a second (DraftPolicy); Fixed: always num_draft_tokens.
  std::shared_ptr<Drafter> drafter;
  int64_t num_draft_tokens = 0;
  DraftPolicyKind draft_policy = DraftPolicyKind::Adaptive;
  // Called on the engine thread when the executor is lost (ExecutorLost), after every request
  // has failed with its message: the process should exit.
  std::function<void(const std::string& error)> on_executor_lost;
};

// The tokens that end a turn: the checkpoint's eos ids (GenerationConfig::eos_token_ids) and
// the tokenizer's eos_token, each once.
std::vector<int32_t> end_of_turn_ids(std::vector<int32_t> eos_token_ids, const Tokenizer& tokenizer);

struct EngineRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;
  SamplingOptions sampling;
  std::vector<std::string> stop;        // stop strings (not included in the output)
  std::vector<int32_t> stop_token_ids;  // end the request after one of these
  bool ignore_eos = false;
  bool skip_special_tokens = true;  // special tokens add no text to the output
};

struct StreamEvent {
  std::string text;                     // new text (may be empty while a stop string is pending)
  std::vector<int32_t> token_ids;       // tokens this event covers
  std::vector<TokenLogprobs> logprobs;  // one per token when requested
  bool finished = false;
  std::string finish_reason;  // stop | length | abort | error
  std::string stop_string;    // finished: the request's stop string that ended it, if one did
  std::string error;          // message when finish_reason is error
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  int64_t draft_tokens = 0, accepted_draft_tokens = 0;  // speculative decoding: drafted, accepted
};

// A refused request: the HTTP status and a message naming the problem.
struct EngineRejection : std::runtime_error {
  EngineRejection(int status_code, const std::string& message) : std::runtime_error(message), status(status_code) {}
  int status;
};

class RequestHandle {
 public:
  // Events so far, waiting up to `timeout` for the first one.
  std::vector<StreamEvent> wait(std::chrono::milliseconds timeout);
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  friend class Engine;
  void push(StreamEvent event);
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<StreamEvent> events_;
  std::atomic<bool> cancelled_{false};
};

class Engine {
 public:
  // Runs batches through `executor` (which must outlive the engine), after one warm-up pass.
  Engine(ModelExecutor& executor, const Tokenizer& tokenizer, EngineConfig config);
  // The model on one rank.
  Engine(const CausalLM& model, const Tokenizer& tokenizer, EngineConfig config);
  ~Engine();

  // Throws EngineRejection (400: invalid, 429: queue full, 503: shutting down or executor lost).
  std::shared_ptr<RequestHandle> submit(EngineRequest request);
  // Stops accepting; lets running requests finish for up to `grace`, then cancels the rest.
  void shutdown(std::chrono::milliseconds grace);

  const EngineConfig& config() const { return config_; }
  int64_t max_model_len() const { return config_.max_model_len; }
  EngineMetrics& metrics() { return metrics_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  int64_t vocab_size() const { return model_config_.vocab_size; }

 private:
  struct Request;
  void loop();
  void steps();
  void fail_everything(const std::string& error);
  void admit_incoming();
  void drop_cancelled();
  void propose_drafts();
  void run_step(const std::vector<ScheduledChunk>& plan);
  // Returns the positions it computed: the last token and the accepted drafts (0 on failure).
  int64_t emit_verified(Request& request, const ScheduledChunk& chunk, float* logits);  // logits: [1 + draft, vocab]
  // Hands the drafter the hidden states of what each chunk computed (requests[i]: plan[i]'s).
  void show_hidden_states(const std::vector<ScheduledChunk>& plan, std::span<Request* const> requests,
                          std::span<const int64_t> computed);
  int64_t hidden_width() const { return int64_t(hidden_layers_.size()) * model_config_.hidden_size; }
  void on_token(Request& request, int32_t token, TokenLogprobs logprobs);
  void finish(Request& request, const std::string& reason, const std::string& error = "");
  void update_gauges();
  std::shared_ptr<const grammar::Vocabulary> grammar_vocabulary();

  Engine(std::unique_ptr<ModelExecutor> owned, ModelExecutor* external, const Tokenizer& tokenizer,
         EngineConfig config);
  void warm_up();
  int64_t state_offset(int64_t slot) const { return latent_bytes_ + slot * state_bytes_; }
  int64_t snapshot_offset(int64_t snapshot) const { return state_offset(config_.scheduler.max_num_seqs + snapshot); }
  // Where a verifying sequence's state is kept during its step (speculative decoding only).
  int64_t verify_backup_offset(int64_t slot) const { return snapshot_offset(snapshots_.capacity() + slot); }
  int64_t restorable_blocks(std::span<const int32_t> tokens, int64_t cached_blocks);
  void restore_state(Sequence& seq);
  // The disk tier: the prompt's full blocks past those in the pool, read back into it; a
  // cached block written out when evicted, and every one at shutdown.
  void load_from_disk(std::span<const int32_t> tokens);
  void spill_to_disk(int32_t block, uint64_t hash, std::span<const int32_t> tokens);
  // A sequence's view of the pool through its block table (state_offset -1: no KDA state).
  LatentCacheView pool_view(std::span<const int32_t> table, int64_t state_offset) const {
    return {pool_,
            config_.cache_dtype,
            table.data(),
            int64_t(table.size()),
            config_.block_size,
            model_config_.cache_layers(),
            model_config_.kv_latent_dim(),
            state_offset,
            model_config_.qk_rope_head_dim};
  }
  uint8_t* pool_block(int32_t block) const { return static_cast<uint8_t*>(pool_) + int64_t(block) * block_bytes_; }
  void keep_state_snapshot(const ScheduledChunk& chunk);

  std::unique_ptr<ModelExecutor> owned_executor_;  // the single-rank constructor's
  ModelExecutor& executor_;
  const ModelConfig& model_config_;
  const Tokenizer& tokenizer_;
  EngineConfig config_;
  std::vector<int32_t> eos_ids_;  // config_.eos_token_ids and the tokenizer's eos_token
  std::once_flag grammar_vocabulary_once_;
  std::shared_ptr<const grammar::Vocabulary> grammar_vocabulary_;
  // Rank 0's pool: [n_blocks, n_layers, block_size, latent_dim] of cache_dtype (latent_bytes_,
  // padded to 64), then (KDA models) max_num_seqs state slots of state_bytes_, then the
  // prefix-cache state snapshots, then (with a drafter) max_num_seqs verification backups.
  int64_t latent_bytes_, state_bytes_;
  int64_t block_bytes_;  // one pool block: every layer's rows of block_size positions
  StateSnapshots snapshots_;
  void* pool_;
  BlockManager blocks_;
  Scheduler scheduler_;
  std::optional<DiskPrefixCache> disk_;
  EngineMetrics metrics_;

  std::mutex mutex_;  // guards incoming_, accepting_, stopping_
  std::condition_variable wake_;
  std::vector<std::unique_ptr<Request>> incoming_;
  bool accepting_ = true, stopping_ = false;
  std::string refusal_ = "the server is shutting down";  // the 503's message once not accepting_
  std::atomic<int64_t> queued_{0};                       // incoming + waiting, for the queue limit

  std::vector<std::unique_ptr<Request>> active_;  // engine thread only
  std::vector<ForwardSequence> step_batch_;       // run_step's, reused (engine thread only)
  std::vector<float> step_logits_;
  std::vector<int> hidden_layers_;  // the target's states the drafter reads (none: it reads none)
  std::vector<float> step_hidden_;  // [n_tokens, hidden_layers_ x hidden]
  std::vector<Request*> drafting_;  // propose_drafts' (engine thread only)
  std::vector<DraftRequest> draft_requests_;
  DraftPolicy draft_policy_;
  int64_t explore_turn_ = 0;    // which decoding sequence drafts in the policy's next exploring step
  double observe_seconds_ = 0;  // the drafter's time reading hidden states since it last drafted
  std::vector<std::vector<int32_t>> proposals_;
  int64_t next_id_ = 0;
  std::thread thread_;
};

}  // namespace mlaserve
