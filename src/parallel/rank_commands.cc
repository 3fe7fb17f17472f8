#include "parallel/rank_commands.h"

#include "base/error.h"

namespace mlaserve {
namespace {

// Message layout (int64 words): kind, then for Forward: n_sequences and per sequence
// n_tokens, start_position, path, logits, cache dtype, n_blocks, block_size, n_layers,
// latent_dim, state_offset, the block table (one word each) and the tokens (one word each).
constexpr int64_t kSequenceHeader = 10;

void send(Communicator& comm, std::vector<int64_t> message) {
  int64_t length = int64_t(message.size());
  comm.broadcast(&length, sizeof length, 0);
  comm.broadcast(message.data(), length * int64_t(sizeof(int64_t)), 0);
}

}  // namespace

void send_allocate_cache(Communicator& comm, int64_t bytes) {
  send(comm, {int64_t(RankCommandKind::AllocateCache), bytes});
}

void send_stop(Communicator& comm) { send(comm, {int64_t(RankCommandKind::Stop)}); }

void send_copy_in_cache(Communicator& comm, int64_t from, int64_t to, int64_t bytes) {
  send(comm, {int64_t(RankCommandKind::CopyInCache), bytes, from, to});
}

void send_forward(Communicator& comm, std::span<const ForwardSequence> batch) {
  std::vector<int64_t> message = {int64_t(RankCommandKind::Forward), int64_t(batch.size())};
  for (const ForwardSequence& seq : batch) {
    const LatentCacheView& cache = seq.cache;
    message.insert(message.end(), {int64_t(seq.tokens.size()), seq.start_position, int64_t(seq.path),
                                   int64_t(seq.logits), int64_t(cache.dtype), cache.n_blocks, cache.block_size,
                                   cache.n_layers, cache.latent_dim, cache.state_offset});
    message.insert(message.end(), cache.block_table, cache.block_table + cache.n_blocks);
    message.insert(message.end(), seq.tokens.begin(), seq.tokens.end());
  }
  send(comm, std::move(message));
}

RankCommand receive_rank_command(Communicator& comm, void* pool) {
  int64_t length = 0;
  comm.broadcast(&length, sizeof length, 0);
  MLA_CHECK(length >= 1, "rank 0 sent an empty command");
  RankCommand command;
  std::vector<int64_t>& words = command.message;
  words.resize(size_t(length));
  comm.broadcast(words.data(), length * int64_t(sizeof(int64_t)), 0);
  command.kind = RankCommandKind(words[0]);
  if (command.kind == RankCommandKind::AllocateCache) command.cache_bytes = words.at(1);
  if (command.kind == RankCommandKind::CopyInCache) {
    command.cache_bytes = words.at(1);
    command.copy_from = words.at(2);
    command.copy_to = words.at(3);
  }
  if (command.kind != RankCommandKind::Forward) return command;
  // Block tables and tokens, narrowed back to int32 in one buffer the batch's spans view.
  command.ids.reserve(words.size());
  size_t at = 2;
  for (int64_t s = 0; s < words.at(1); ++s) {
    MLA_CHECK(at + kSequenceHeader <= words.size(), "truncated forward command from rank 0");
    const int64_t* h = &words[at];
    ForwardSequence seq;
    seq.start_position = h[1];
    seq.path = MlaPath(h[2]);
    seq.logits = ForwardSequence::Logits(h[3]);
    seq.cache = {pool, CacheDType(h[4]), nullptr, h[5], h[6], h[7], h[8], h[9]};
    const int64_t n_tokens = h[0], n_blocks = h[5];
    at += kSequenceHeader;
    MLA_CHECK(n_tokens >= 0 && n_blocks >= 0 && at + size_t(n_blocks + n_tokens) <= words.size(),
              "truncated forward command from rank 0");
    const size_t first = command.ids.size();
    for (int64_t i = 0; i < n_blocks + n_tokens; ++i) command.ids.push_back(int32_t(words[at + size_t(i)]));
    seq.cache.block_table = command.ids.data() + first;
    seq.tokens = std::span<const int32_t>(command.ids.data() + first + n_blocks, size_t(n_tokens));
    at += size_t(n_blocks + n_tokens);
    command.batch.push_back(seq);
  }
  return command;
}

}  // namespace mlaserve
