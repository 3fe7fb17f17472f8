// Byte-level BPE over raw bytes: Hugging Face merges (pair -> rank) and tiktoken ranks (bytes
// -> rank, a pair ranks as its concatenation). Hand-written: no Debian package does BPE.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mlaserve {

// GPT-2's reversible map of bytes to printable characters, used in byte-level vocabularies.
std::string bytes_to_byte_level(std::string_view bytes);
std::optional<std::string> byte_level_to_bytes(std::string_view text);  // nullopt if not byte-level

class BpeModel {
 public:
  using Vocab = std::vector<std::pair<std::string, int32_t>>;  // raw bytes -> id
  // Ids are below 2^24 (the largest published vocabularies are under 2^18): a file with a larger
  // id is refused rather than sizing tables to it.
  static constexpr int32_t kMaxTokenId = 1 << 24;

  // Hugging Face BPE: merges in priority order, each a pair of raw byte strings.
  static BpeModel from_merges(const Vocab& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                              bool ignore_merges);
  // tiktoken: every token's rank is its id.
  static BpeModel from_ranks(const Vocab& ranks);

  // Appends the ids of one pre-tokenized piece.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  std::optional<int32_t> id_of(std::string_view bytes) const;
  const std::string* bytes_of(int32_t id) const;  // null for ids outside the model
  int32_t max_id() const { return int32_t(bytes_of_.size()) - 1; }

 private:
  void set_vocab(const Vocab& vocab);
  // (rank, merged id) of adjacent tokens, or nullopt when they do not merge.
  std::optional<std::pair<int32_t, int32_t>> merge_of(int32_t left, int32_t right) const;

  std::unordered_map<std::string, int32_t> id_of_;
  std::vector<std::string> bytes_of_;
  std::vector<bool> present_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // HF: (l << 32 | r) -> (rank, id)
  bool rank_by_concatenation_ = false;                                // tiktoken
  bool whole_piece_first_ = false;                                    // tiktoken, and HF ignore_merges
  int32_t byte_ids_[256];
};

}  // namespace mlaserve
