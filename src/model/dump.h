// Named intermediates a developer writes out to bisect a mismatch layer by layer, as llama.cpp's
// cb(tensor, name, il) does: with MLASERVE_DUMP=DIR in the environment, each forward of a model
// writes every dump point's rows as DIR/F-NAME-L.npy (F the forward's number in this process,
// L the layer, or "model" for points outside the layers), float32 [tokens, width], for NumPy
// to compare with a reference's; MLASERVE_DUMP_NAMES=a,b keeps only those names. Unset, a
// dump point costs one branch. One rank writes (the first): shards' partial sums are not dumped.
#pragma once
#include <cstdint>
#include <string_view>

namespace mlaserve {

class ActivationDump {
 public:
  // Starts a forward: numbers it, and says whether anything of it is written.
  static ActivationDump begin_forward(bool first_rank);
  bool on() const { return forward_ >= 0; }
  // layer < 0: a point of the model outside its layers (embedding, final norm).
  void write(std::string_view name, int64_t layer, const float* rows, int64_t n_rows, int64_t width) const;

 private:
  explicit ActivationDump(int64_t forward) : forward_(forward) {}
  int64_t forward_;  // -1: nothing written
};

}  // namespace mlaserve
