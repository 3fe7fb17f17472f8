// A grammar's state as a request's tokens are accepted, and which tokens may come next.
//
// A state is a set of stacks; the token mask is the union, over the stacks, of what the top of
// each decides alone (XGrammar's adaptive token mask cache): the tokens its rules accept whatever
// lies further down, and the few "uncertain" tokens that leave them partway, which are then
// checked against the whole stack. A stack's top is its top frame and the frames under it while
// their rules stay small (a JSON string's character, its loop and its closing quote). Its part is
// computed once per vocabulary by walking the trie of the tokens' bytes (subtrees the rules refuse
// are skipped whole) and shared by every grammar whose rules there are the same: every JSON
// string of every schema shares one. The end-of-sequence tokens are allowed exactly when the
// grammar is complete.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace mlaserve::grammar {

using TokenBitmask = std::vector<uint64_t>;  // bit id % 64 of word id / 64: token id allowed

// What the top of a stack decides alone over a vocabulary: the tokens its frames accept whatever
// lies below them, and those that may leave them partway (uncertain: the rest of the stack
// decides). Every other token is refused there.
struct PositionMask {
  TokenBitmask accepted;
  std::vector<int32_t> uncertain;
};

// The vocabulary's token bytes as a trie, shared by every request's matcher, with the masks of
// stack tops computed over it, by the structure of their rules.
class Vocabulary {
 public:
  // token_bytes[id]: what the token writes; empty for tokens a grammar never allows (special
  // tokens). eos_ids: the tokens that end a sequence.
  Vocabulary(const std::vector<std::string>& token_bytes, std::vector<int32_t> eos_ids);
  int64_t size() const { return int64_t(token_bytes_.size()); }
  const std::string& bytes(int32_t id) const { return token_bytes_[size_t(id)]; }
  bool is_eos(int32_t id) const;
  uint64_t id() const { return id_; }  // distinct for every vocabulary made in this process

  std::shared_ptr<const PositionMask> find_position(const std::string& structure) const;
  void add_position(std::string structure, std::shared_ptr<const PositionMask> mask) const;

 private:
  friend class Matcher;
  struct Node {
    int32_t first_child = 0, children = 0, first_token = 0, tokens = 0;
    int32_t subtree_end = 0;  // node_tokens_[first_token, subtree_end): the tokens at and below
    uint8_t byte = 0;
  };
  void build(int32_t node, const std::vector<int32_t>& order, size_t low, size_t high, size_t depth);
  uint64_t id_;
  std::vector<std::string> token_bytes_;
  std::vector<int32_t> eos_ids_;
  std::vector<Node> nodes_;           // nodes_[0] is the root (the empty prefix)
  std::vector<int32_t> node_tokens_;  // the tokens ending at each node, in depth-first order
  size_t max_length_ = 0;
  static constexpr size_t kPositionCapacity = 1024;  // 20 MiB of masks at 163,840 tokens
  mutable std::mutex positions_mutex_;
  mutable std::unordered_map<std::string, std::shared_ptr<const PositionMask>> positions_;
};

// Sets the logits of the tokens `allowed` leaves out to -infinity (ids past the mask included).
void apply_token_mask(const TokenBitmask& allowed, float* logits, int64_t vocab_size);

// Token masks by grammar state, for one vocabulary (the first one it is used with): requests
// with the same grammar reuse each other's. Thread-safe; forgets everything when full.
class MaskCache {
 public:
  std::shared_ptr<const TokenBitmask> find(const Vocabulary& vocabulary, const std::string& state);
  void add(const Vocabulary& vocabulary, std::string state, std::shared_ptr<const TokenBitmask> mask);
  // A stack top's mask by its positions, once this grammar has asked the vocabulary for it.
  std::shared_ptr<const PositionMask> find_position(const Vocabulary& vocabulary, const std::string& positions);
  void add_position(const Vocabulary& vocabulary, std::string positions, std::shared_ptr<const PositionMask> mask);

 private:
  bool same_vocabulary(const Vocabulary& vocabulary);  // the first one used; under mutex_
  static constexpr size_t kCapacity = 1024;            // 20 MiB of masks at 163,840 tokens
  std::mutex mutex_;
  uint64_t vocabulary_ = 0;  // Vocabulary::id(); 0: none yet
  std::unordered_map<std::string, std::shared_ptr<const TokenBitmask>> masks_;
  std::unordered_map<std::string, std::shared_ptr<const PositionMask>> positions_;
};

class Matcher {
 public:
  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocabulary);

  // The tokens allowed next, as a bitmask of (vocabulary size + 63) / 64 words.
  const TokenBitmask& allowed_tokens();
  // Advances past a token; false (and no change) if the grammar does not allow it.
  bool accept_token(int32_t id);
  bool accept_bytes(std::string_view bytes);
  // How many of `tokens` the grammar accepts in a row from here (no change to the state).
  size_t allowed_prefix(std::span<const int32_t> tokens);
  bool is_complete() const { return accepting_; }  // the text so far is a whole sentence
  bool can_continue() const { return !tops_.empty(); }

 private:
  // A position in a rule's alternative, then what follows once that alternative ends.
  struct Frame {
    int32_t position;
    int32_t parent;  // -1: the root's end
  };
  int32_t push_frame(int32_t position, int32_t parent);
  void expand(int32_t frame, std::vector<int32_t>& tops, bool& accepting, int depth);
  void advance(const std::vector<int32_t>& tops, uint8_t byte, std::vector<int32_t>& next, bool& accepting);
  bool same_stacks(const std::vector<int32_t>& a, bool a_accepting, const std::vector<int32_t>& b,
                   bool b_accepting) const;
  struct PathLevel {
    std::vector<int32_t> tops;
    bool accepting;
    ByteSet bytes;  // the bytes that lead to the next level's state
  };
  void start_walk(const std::vector<int32_t>& tops, bool accepting);
  const PathLevel* path_at(size_t depth) const;
  bool advance_bytes(std::vector<int32_t>& tops, bool& accepting, std::string_view bytes);
  std::vector<int32_t> stack_top(int32_t frame) const;
  std::shared_ptr<const PositionMask> position_mask(int32_t top);
  void fill(int32_t node, size_t depth, bool left_rule, PositionMask& mask);
  bool allows(int32_t id);        // whether the current state accepts the token's bytes
  std::string signature() const;  // the state's stacks, as a cache key

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const Vocabulary> vocabulary_;
  std::vector<Frame> frames_;  // persistent stacks: frames are never changed, only added
  std::vector<int32_t> tops_;  // the current stacks' top frames (each at a byte set)
  bool accepting_ = false;
  std::vector<std::vector<int32_t>> levels_;          // the trie walk's stacks at each depth
  std::vector<char> on_path_;                         // ... and whether they are the path's state there
  std::vector<PathLevel> path_;                       // the walk's common path (start_walk)
  bool path_loops_ = false;                           // its last level leads to itself
  std::shared_ptr<const TokenBitmask> current_mask_;  // of the current state, once asked for
};

}  // namespace mlaserve::grammar
