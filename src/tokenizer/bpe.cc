#include "tokenizer/bpe.h"

#include <array>
#include <queue>

#include "base/error.h"

namespace mlaserve {
namespace {

void append_utf8(uint32_t code, std::string& out) {
  if (code < 0x80) {
    out.push_back(char(code));
  } else if (code < 0x800) {
    out.push_back(char(0xc0 | (code >> 6)));
    out.push_back(char(0x80 | (code & 0x3f)));
  } else {
    out.push_back(char(0xe0 | (code >> 12)));
    out.push_back(char(0x80 | ((code >> 6) & 0x3f)));
    out.push_back(char(0x80 | (code & 0x3f)));
  }
}

// GPT-2 bytes_to_unicode: printable bytes map to themselves, the others to 256, 257, ...
const std::array<uint32_t, 256>& byte_to_char() {
  static const auto table = [] {
    std::array<uint32_t, 256> chars{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      chars[b] = printable ? b : next++;
    }
    return chars;
  }();
  return table;
}

}  // namespace

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) append_utf8(byte_to_char()[b], out);
  return out;
}

std::optional<std::string> byte_level_to_bytes(std::string_view text) {
  static const auto char_to_byte = [] {
    std::unordered_map<uint32_t, uint8_t> inverse;
    for (uint32_t b = 0; b < 256; ++b) inverse[byte_to_char()[b]] = uint8_t(b);
    return inverse;
  }();
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const uint8_t lead = uint8_t(text[i]);
    uint32_t code;
    size_t length;
    if (lead < 0x80) {
      code = lead, length = 1;
    } else if ((lead >> 5) == 0x6 && i + 1 < text.size()) {
      code = ((lead & 0x1fu) << 6) | (uint8_t(text[i + 1]) & 0x3fu), length = 2;
    } else {
      return std::nullopt;  // byte-level characters are all below U+0800
    }
    auto found = char_to_byte.find(code);
    if (found == char_to_byte.end()) return std::nullopt;
    out.push_back(char(found->second));
    i += length;
  }
  return out;
}

void BpeModel::set_vocab(const Vocab& vocab) {
  int32_t max_id = -1;
  for (const auto& [bytes, id] : vocab) {
    MLA_CHECK(id >= 0 && id < kMaxTokenId, "tokenizer: token id {} is outside [0, {})", id, kMaxTokenId);
    max_id = std::max(max_id, id);
  }
  bytes_of_.assign(size_t(max_id + 1), std::string());
  present_.assign(size_t(max_id + 1), false);
  for (const auto& [bytes, id] : vocab) {
    id_of_[bytes] = id;
    bytes_of_[id] = bytes;
    present_[id] = true;
  }
  for (int b = 0; b < 256; ++b) {
    auto found = id_of_.find(std::string(1, char(b)));
    MLA_CHECK(found != id_of_.end(), "tokenizer: byte 0x{:02x} has no token: not a byte-level BPE", b);
    byte_ids_[b] = found->second;
  }
}

BpeModel BpeModel::from_merges(const Vocab& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                               bool ignore_merges) {
  BpeModel model;
  model.set_vocab(vocab);
  model.whole_piece_first_ = ignore_merges;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto left_id = model.id_of(left), right_id = model.id_of(right), merged = model.id_of(left + right);
    MLA_CHECK(left_id && right_id && merged, "tokenizer: merge #{} joins tokens not in the vocab", rank);
    const uint64_t key = uint64_t(uint32_t(*left_id)) << 32 | uint32_t(*right_id);
    model.merges_.emplace(key, std::make_pair(int32_t(rank), *merged));  // first rank wins
  }
  return model;
}

BpeModel BpeModel::from_ranks(const Vocab& ranks) {
  BpeModel model;
  model.set_vocab(ranks);
  model.rank_by_concatenation_ = true;
  model.whole_piece_first_ = true;
  return model;
}

std::optional<int32_t> BpeModel::id_of(std::string_view bytes) const {
  auto found = id_of_.find(std::string(bytes));
  if (found == id_of_.end()) return std::nullopt;
  return found->second;
}

const std::string* BpeModel::bytes_of(int32_t id) const {
  if (id < 0 || id >= int32_t(bytes_of_.size()) || !present_[id]) return nullptr;
  return &bytes_of_[id];
}

std::optional<std::pair<int32_t, int32_t>> BpeModel::merge_of(int32_t left, int32_t right) const {
  if (rank_by_concatenation_) {
    auto merged = id_of(bytes_of_[left] + bytes_of_[right]);
    if (!merged) return std::nullopt;
    return std::make_pair(*merged, *merged);
  }
  auto found = merges_.find(uint64_t(uint32_t(left)) << 32 | uint32_t(right));
  if (found == merges_.end()) return std::nullopt;
  return found->second;
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (whole_piece_first_) {
    if (auto whole = id_of(piece)) {
      out.push_back(*whole);
      return;
    }
  }
  // Repeatedly merge the lowest-ranked adjacent pair, leftmost first, with a heap of
  // candidates (stale ones skipped), so a long piece costs O(n log n), not O(n^2).
  struct Symbol {
    int32_t id;
    int prev, next;
  };
  std::vector<Symbol> symbols(piece.size());
  for (size_t i = 0; i < piece.size(); ++i)
    symbols[i] = {byte_ids_[uint8_t(piece[i])], int(i) - 1, i + 1 < piece.size() ? int(i + 1) : -1};
  struct Candidate {
    int32_t rank;
    int left;
    int32_t left_id, right_id, merged;
    bool operator>(const Candidate& other) const { return rank != other.rank ? rank > other.rank : left > other.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push_pair = [&](int left) {
    if (left < 0 || symbols[left].next < 0) return;
    const int right = symbols[left].next;
    if (auto merge = merge_of(symbols[left].id, symbols[right].id))
      heap.push({merge->first, left, symbols[left].id, symbols[right].id, merge->second});
  };
  for (int i = 0; i + 1 < int(piece.size()); ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = symbols[top.left];
    if (left.id != top.left_id || left.next < 0 || symbols[left.next].id != top.right_id) continue;
    const int right = left.next;
    left.id = top.merged;
    left.next = symbols[right].next;
    if (left.next >= 0) symbols[left.next].prev = top.left;
    symbols[right].id = -1;
    push_pair(left.prev);
    push_pair(top.left);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace mlaserve
