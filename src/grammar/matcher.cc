#include "grammar/matcher.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <unordered_map>

#include "base/error.h"

namespace mlaserve::grammar {
namespace {

constexpr int kMaxExpansionDepth = 4096;
constexpr size_t kPathClassBytes = 32;  // fewer bytes to a common state: the walk prunes fast anyway
std::atomic<uint64_t> next_vocabulary_id{1};

void set_bit(TokenBitmask& mask, int32_t id) { mask[size_t(id) / 64] |= uint64_t(1) << (id % 64); }

}  // namespace

Vocabulary::Vocabulary(const std::vector<std::string>& token_bytes, std::vector<int32_t> eos_ids)
    : id_(next_vocabulary_id++), token_bytes_(token_bytes), eos_ids_(std::move(eos_ids)) {
  std::vector<int32_t> order;
  for (size_t id = 0; id < token_bytes_.size(); ++id)
    if (!token_bytes_[id].empty() && !is_eos(int32_t(id))) order.push_back(int32_t(id));
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return token_bytes_[size_t(a)] < token_bytes_[size_t(b)]; });
  nodes_.emplace_back();
  build(0, order, 0, order.size(), 0);
}

bool Vocabulary::is_eos(int32_t id) const { return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end(); }

// order[low, high) share their first `depth` bytes: those of exactly that length end at `node`
// (they sort first), the rest go to one child per next byte.
void Vocabulary::build(int32_t node, const std::vector<int32_t>& order, size_t low, size_t high, size_t depth) {
  max_length_ = std::max(max_length_, depth);
  nodes_[size_t(node)].first_token = int32_t(node_tokens_.size());
  while (low < high && token_bytes_[size_t(order[low])].size() == depth) node_tokens_.push_back(order[low++]);
  nodes_[size_t(node)].tokens = int32_t(node_tokens_.size()) - nodes_[size_t(node)].first_token;
  std::vector<std::pair<size_t, size_t>> groups;
  for (size_t begin = low; begin < high;) {
    const char byte = token_bytes_[size_t(order[begin])][depth];
    size_t end = begin;
    while (end < high && token_bytes_[size_t(order[end])][depth] == byte) ++end;
    groups.emplace_back(begin, end);
    begin = end;
  }
  const int32_t first_child = int32_t(nodes_.size());
  nodes_[size_t(node)].first_child = first_child;
  nodes_[size_t(node)].children = int32_t(groups.size());
  for (const auto& [begin, end] : groups) {
    Node child;
    child.byte = uint8_t(token_bytes_[size_t(order[begin])][depth]);
    nodes_.push_back(child);
  }
  for (size_t i = 0; i < groups.size(); ++i)
    build(first_child + int32_t(i), order, groups[i].first, groups[i].second, depth + 1);
  nodes_[size_t(node)].subtree_end = int32_t(node_tokens_.size());
}

std::shared_ptr<const PositionMask> Vocabulary::find_position(const std::string& structure) const {
  std::lock_guard lock(positions_mutex_);
  auto found = positions_.find(structure);
  return found == positions_.end() ? nullptr : found->second;
}

void Vocabulary::add_position(std::string structure, std::shared_ptr<const PositionMask> mask) const {
  std::lock_guard lock(positions_mutex_);
  if (positions_.size() >= kPositionCapacity) positions_.clear();
  positions_.emplace(std::move(structure), std::move(mask));
}

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocabulary)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)), levels_(vocabulary_->max_length_ + 2) {
  for (int32_t start : grammar_->alternatives[size_t(grammar_->root)])
    expand(push_frame(start, -1), tops_, accepting_, 0);
}

int32_t Matcher::push_frame(int32_t position, int32_t parent) {
  frames_.push_back({position, parent});
  return int32_t(frames_.size() - 1);
}

// Brings a stack to byte sets: a rule reference becomes one stack per alternative (continuing
// after the reference), an alternative's end returns to its parent, the root's end accepts.
void Matcher::expand(int32_t frame, std::vector<int32_t>& tops, bool& accepting, int depth) {
  MLA_CHECK(depth < kMaxExpansionDepth, "the grammar has a rule that reaches itself without consuming a byte");
  const int32_t position = frames_[size_t(frame)].position, parent = frames_[size_t(frame)].parent;
  const Element& element = grammar_->elements[size_t(position)];
  if (element.kind == Element::Kind::Bytes) {
    const bool seen = std::any_of(tops.begin(), tops.end(), [&](int32_t top) {
      return frames_[size_t(top)].position == position && frames_[size_t(top)].parent == parent;
    });
    if (!seen) tops.push_back(frame);
  } else if (element.kind == Element::Kind::End) {
    if (parent < 0)
      accepting = true;
    else
      expand(parent, tops, accepting, depth + 1);
  } else {
    const bool last = grammar_->elements[size_t(position) + 1].kind == Element::Kind::End;
    const int32_t after = last ? parent : push_frame(position + 1, parent);
    for (int32_t start : grammar_->alternatives[size_t(element.rule)])
      expand(push_frame(start, after), tops, accepting, depth + 1);
  }
}

void Matcher::advance(const std::vector<int32_t>& tops, uint8_t byte, std::vector<int32_t>& next, bool& accepting) {
  for (int32_t top : tops) {
    const Frame frame = frames_[size_t(top)];
    if (grammar_->elements[size_t(frame.position)].bytes.test(byte))
      expand(push_frame(frame.position + 1, frame.parent), next, accepting, 0);
  }
}

// Whether two states have the same stacks, position by position (then they accept the same).
bool Matcher::same_stacks(const std::vector<int32_t>& a, bool a_accepting, const std::vector<int32_t>& b,
                          bool b_accepting) const {
  if (a_accepting != b_accepting || a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    int32_t x = a[i], y = b[i];
    for (; x >= 0 && y >= 0 && x != y; x = frames_[size_t(x)].parent, y = frames_[size_t(y)].parent)
      if (frames_[size_t(x)].position != frames_[size_t(y)].position) return false;
    if ((x < 0) != (y < 0)) return false;
  }
  return true;
}

// The tokens below `node` by what the stacks at levels_[depth] (a stack top's, its last frame's
// end standing for the root's) decide alone: accepted when their bytes fit inside the rule, or end
// it; uncertain when the rule may have ended before their last byte (left_rule: at a shallower
// depth), since what follows the rule is the stack's below. Frames made for a subtree are dropped
// when it is done. A node whose state is the walk's common path at its depth (path_, such as a
// string after d plain characters) reaches the next level's path state by any byte of the path's
// class with no grammar work at all.
void Matcher::fill(int32_t node, size_t depth, bool left_rule, PositionMask& mask) {
  const Vocabulary::Node& parent = vocabulary_->nodes_[size_t(node)];
  const PathLevel* here = on_path_[depth] ? path_at(depth) : nullptr;
  const PathLevel* below = path_at(depth + 1);
  const std::vector<int32_t>& node_tokens = vocabulary_->node_tokens_;
  for (int32_t child = parent.first_child; child < parent.first_child + parent.children; ++child) {
    const Vocabulary::Node& next_node = vocabulary_->nodes_[size_t(child)];
    const size_t mark = frames_.size();
    std::vector<int32_t>& next = levels_[depth + 1];
    bool ended = false;  // the rule ended right after this byte
    if (here && here->bytes.test(next_node.byte)) {
      next = below->tops;
      ended = below->accepting;
      on_path_[depth + 1] = true;
    } else {
      next.clear();
      advance(levels_[depth], next_node.byte, next, ended);
      on_path_[depth + 1] = below && same_stacks(next, ended, below->tops, below->accepting);
    }
    const auto tokens_at = [&](int32_t begin, int32_t end) {
      return std::span(node_tokens).subspan(size_t(begin), size_t(end - begin));
    };
    const auto own = tokens_at(next_node.first_token, next_node.first_token + next_node.tokens);
    if (!next.empty() || ended) {
      for (int32_t id : own) set_bit(mask.accepted, id);
    } else if (left_rule) {
      mask.uncertain.insert(mask.uncertain.end(), own.begin(), own.end());
    }
    if (!next.empty() && next_node.children > 0) {
      fill(child, depth + 1, left_rule || ended, mask);
    } else if (left_rule || ended) {  // nothing inside the rule continues: the stack below decides
      const auto deeper = tokens_at(next_node.first_token + next_node.tokens, next_node.subtree_end);
      mask.uncertain.insert(mask.uncertain.end(), deeper.begin(), deeper.end());
    }
    frames_.resize(mark);
  }
}

// The path's state at a depth: past its last level, the last one again when it loops.
const Matcher::PathLevel* Matcher::path_at(size_t depth) const {
  if (depth < path_.size()) return &path_[depth];
  return path_loops_ ? &path_.back() : nullptr;
}

// The walk's common path from the current state: at each depth the state that the first byte
// to continue (letters first) leads to, while at least kPathClassBytes bytes lead there (a
// permissive state such as a string's contents), until it repeats itself or the tokens end.
// Its frames stay until the walk is over.
void Matcher::start_walk(const std::vector<int32_t>& tops, bool accepting) {
  levels_[0] = tops;
  on_path_.assign(levels_.size(), false);
  on_path_[0] = true;
  path_.assign(1, PathLevel{tops, accepting, {}});
  path_loops_ = false;
  std::vector<int32_t> next, candidate;
  while (path_.size() < levels_.size() - 1) {
    const PathLevel& level = path_.back();
    bool candidate_accepting = false, found = false;
    ByteSet bytes;
    for (int step = 0; step < 256; ++step) {
      const uint8_t byte = uint8_t(step < 26 ? 'a' + step : step);  // letters first
      if (step >= 26 && byte >= 'a' && byte <= 'z') continue;
      const size_t mark = frames_.size();
      next.clear();
      bool ended = false;
      advance(level.tops, byte, next, ended);
      if (next.empty()) {
        frames_.resize(mark);
      } else if (!found) {
        found = true;
        candidate = next;  // its frames are kept
        candidate_accepting = ended;
        bytes.set(byte);
      } else {
        if (same_stacks(next, ended, candidate, candidate_accepting)) bytes.set(byte);
        frames_.resize(mark);
      }
    }
    if (bytes.count() < kPathClassBytes) break;
    path_.back().bytes = bytes;
    if (same_stacks(candidate, candidate_accepting, path_.back().tops, path_.back().accepting)) {
      path_loops_ = true;
      break;
    }
    path_.push_back(PathLevel{candidate, candidate_accepting, {}});
  }
}

std::string Matcher::signature() const {
  std::string key(accepting_ ? "A" : "-");
  for (int32_t top : tops_) {
    for (int32_t frame = top; frame >= 0; frame = frames_[size_t(frame)].parent)
      key.append(reinterpret_cast<const char*>(&frames_[size_t(frame)].position), sizeof(int32_t));
    key += '|';
  }
  return key;
}

bool MaskCache::same_vocabulary(const Vocabulary& vocabulary) {
  if (vocabulary_ == 0) vocabulary_ = vocabulary.id();
  return vocabulary.id() == vocabulary_;
}

std::shared_ptr<const TokenBitmask> MaskCache::find(const Vocabulary& vocabulary, const std::string& state) {
  std::lock_guard lock(mutex_);
  if (vocabulary.id() != vocabulary_) return nullptr;
  auto found = masks_.find(state);
  return found == masks_.end() ? nullptr : found->second;
}

void MaskCache::add(const Vocabulary& vocabulary, std::string state, std::shared_ptr<const TokenBitmask> mask) {
  std::lock_guard lock(mutex_);
  if (!same_vocabulary(vocabulary)) return;
  if (masks_.size() >= kCapacity) masks_.clear();
  masks_.emplace(std::move(state), std::move(mask));
}

std::shared_ptr<const PositionMask> MaskCache::find_position(const Vocabulary& vocabulary,
                                                             const std::string& positions) {
  std::lock_guard lock(mutex_);
  if (vocabulary.id() != vocabulary_) return nullptr;
  auto found = positions_.find(positions);
  return found == positions_.end() ? nullptr : found->second;
}

void MaskCache::add_position(const Vocabulary& vocabulary, std::string positions,
                             std::shared_ptr<const PositionMask> mask) {
  std::lock_guard lock(mutex_);
  if (same_vocabulary(vocabulary)) positions_.emplace(std::move(positions), std::move(mask));
}

namespace {

constexpr size_t kMaxTopFrames = 8;
constexpr size_t kDelimiterBytes = 16;

void append_bytes(std::string& out, const void* data, size_t size) { out.append(static_cast<const char*>(data), size); }

// The rules a matcher sees from each of `positions` to the end of its alternative, with the
// rules they reach, numbered in the order first met: equal for equal structure in any grammar.
std::string structure_of(const Grammar& grammar, const std::vector<int32_t>& positions) {
  std::string out;
  std::vector<int32_t> order;  // rule ids, in canonical order
  std::unordered_map<int32_t, int32_t> canonical;
  const auto write_run = [&](int32_t at) {
    for (;; ++at) {
      const Element& element = grammar.elements[size_t(at)];
      out += char(element.kind);
      if (element.kind == Element::Kind::End) return;
      if (element.kind == Element::Kind::Bytes) {
        for (size_t word = 0; word < 4; ++word) {
          const uint64_t bits = ((element.bytes >> (64 * word)) & ByteSet(~uint64_t(0))).to_ullong();
          append_bytes(out, &bits, sizeof bits);
        }
        continue;
      }
      auto [found, added] = canonical.emplace(element.rule, int32_t(order.size()));
      if (added) order.push_back(element.rule);
      append_bytes(out, &found->second, sizeof(int32_t));
    }
  };
  for (int32_t position : positions) write_run(position);
  for (size_t i = 0; i < order.size(); ++i) {  // grows as rules are met
    out += '#';
    for (int32_t start : grammar.alternatives[size_t(order[i])]) write_run(start);
  }
  return out;
}

}  // namespace

// The positions of a stack's top, top first: its top frame, and the frames under it down to the
// first that waits for a delimiter (a set of at most kDelimiterBytes bytes, such as a string's
// closing quote), so that few tokens get past it.
std::vector<int32_t> Matcher::stack_top(int32_t frame) const {
  std::vector<int32_t> positions = {frames_[size_t(frame)].position};
  for (int32_t below = frames_[size_t(frame)].parent; below >= 0 && positions.size() < kMaxTopFrames;
       below = frames_[size_t(below)].parent) {
    const int32_t position = frames_[size_t(below)].position;
    positions.push_back(position);
    const Element& element = grammar_->elements[size_t(position)];
    if (element.kind == Element::Kind::Bytes && element.bytes.count() <= kDelimiterBytes) break;
  }
  return positions;
}

// A stack top's mask: from this grammar's cache, else from the vocabulary's (any grammar with the
// same rules there), else a walk of the trie from those frames alone, the last one's end
// standing for the root's.
std::shared_ptr<const PositionMask> Matcher::position_mask(int32_t top) {
  const std::vector<int32_t> positions = stack_top(top);
  std::string key;
  append_bytes(key, positions.data(), positions.size() * sizeof(int32_t));
  std::shared_ptr<const PositionMask> mask;
  if (grammar_->masks && (mask = grammar_->masks->find_position(*vocabulary_, key))) return mask;
  std::string structure = structure_of(*grammar_, positions);
  mask = vocabulary_->find_position(structure);
  if (!mask) {
    auto walked = std::make_shared<PositionMask>();
    walked->accepted.assign(size_t(vocabulary_->size() + 63) / 64, 0);
    const size_t mark = frames_.size();
    int32_t frame = -1;
    for (auto position = positions.rbegin(); position != positions.rend(); ++position)
      frame = push_frame(*position, frame);
    start_walk({frame}, false);
    fill(0, 0, false, *walked);
    frames_.resize(mark);
    vocabulary_->add_position(std::move(structure), walked);
    mask = std::move(walked);
  }
  if (grammar_->masks) grammar_->masks->add_position(*vocabulary_, std::move(key), mask);
  return mask;
}

bool Matcher::allows(int32_t id) {
  const size_t mark = frames_.size();
  std::vector<int32_t> tops = tops_;
  bool accepting = accepting_;
  const bool allowed = advance_bytes(tops, accepting, vocabulary_->bytes(id));
  frames_.resize(mark);
  return allowed;
}

void apply_token_mask(const TokenBitmask& allowed, float* logits, int64_t vocab_size) {
  for (int64_t word = 0; word * 64 < vocab_size; ++word) {
    const uint64_t bits = size_t(word) < allowed.size() ? allowed[size_t(word)] : 0;
    if (bits == ~uint64_t(0)) continue;
    float* out = logits + word * 64;
    const int64_t end = std::min<int64_t>(64, vocab_size - word * 64);
    if (bits == 0) {
      std::fill(out, out + end, -INFINITY);
      continue;
    }
    for (int64_t bit = 0; bit < end; ++bit)
      out[bit] = (bits >> bit) & 1 ? out[bit] : -INFINITY;  // a select the compiler vectorizes
  }
}

// The union of the stack tops' accepted tokens, and of their uncertain tokens those the whole
// state accepts.
const TokenBitmask& Matcher::allowed_tokens() {
  if (current_mask_) return *current_mask_;
  const std::string key = signature();
  if (grammar_->masks) current_mask_ = grammar_->masks->find(*vocabulary_, key);
  if (current_mask_) return *current_mask_;
  auto mask = std::make_shared<TokenBitmask>(size_t(vocabulary_->size() + 63) / 64, 0);
  std::vector<std::shared_ptr<const PositionMask>> parts;
  for (int32_t top : tops_) {
    std::shared_ptr<const PositionMask> part = position_mask(top);
    if (std::find(parts.begin(), parts.end(), part) != parts.end()) continue;
    for (size_t word = 0; word < mask->size(); ++word) (*mask)[word] |= part->accepted[word];
    parts.push_back(std::move(part));
  }
  for (const auto& part : parts)
    for (int32_t id : part->uncertain)
      if (!((*mask)[size_t(id) / 64] >> (id % 64) & 1) && allows(id)) set_bit(*mask, id);
  if (accepting_)
    for (int32_t eos : vocabulary_->eos_ids_)
      if (eos < vocabulary_->size()) set_bit(*mask, eos);
  current_mask_ = mask;
  if (grammar_->masks) grammar_->masks->add(*vocabulary_, key, std::move(mask));
  return *current_mask_;
}

// Takes a state (tops, accepting) past `bytes`; false as soon as no stack accepts one.
bool Matcher::advance_bytes(std::vector<int32_t>& tops, bool& accepting, std::string_view bytes) {
  std::vector<int32_t> next;
  for (char c : bytes) {
    next.clear();
    accepting = false;
    advance(tops, uint8_t(c), next, accepting);
    if (next.empty() && !accepting) return false;
    tops.swap(next);
  }
  return true;
}

bool Matcher::accept_bytes(std::string_view bytes) {
  std::vector<int32_t> tops = tops_;
  bool accepting = accepting_;
  if (!advance_bytes(tops, accepting, bytes)) return false;
  tops_ = std::move(tops);
  accepting_ = accepting;
  current_mask_ = nullptr;
  return true;
}

size_t Matcher::allowed_prefix(std::span<const int32_t> tokens) {
  const size_t mark = frames_.size();
  std::vector<int32_t> tops = tops_;
  bool accepting = accepting_;
  size_t allowed = 0;
  for (int32_t id : tokens) {
    if (id < 0 || id >= vocabulary_->size()) break;
    if (vocabulary_->is_eos(id)) {
      allowed += accepting ? 1 : 0;
      break;  // nothing follows the end of sequence
    }
    const std::string& bytes = vocabulary_->bytes(id);
    if (bytes.empty() || !advance_bytes(tops, accepting, bytes)) break;
    ++allowed;
  }
  frames_.resize(mark);
  return allowed;
}

bool Matcher::accept_token(int32_t id) {
  if (id < 0 || id >= vocabulary_->size()) return false;
  if (vocabulary_->is_eos(id)) return accepting_;
  const std::string& bytes = vocabulary_->bytes(id);
  return !bytes.empty() && accept_bytes(bytes);
}

}  // namespace mlaserve::grammar
