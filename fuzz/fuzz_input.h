// What the fuzz targets share: the libFuzzer entry point's signature, a reader that cuts one input
// into the pieces a target needs, and the repository's models (the fixtures some targets parse
// against).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace mlaserve::fuzz {

// Reads an input front to back: bytes as small numbers, then the rest as text.
class InputReader {
 public:
  InputReader(const uint8_t* data, size_t size) : text_(reinterpret_cast<const char*>(data), size) {}
  uint8_t byte() {
    if (text_.empty()) return 0;
    const auto value = uint8_t(text_.front());
    text_.remove_prefix(1);
    return value;
  }
  // Up to the first `separator` (or all), which is consumed.
  std::string_view until(char separator) {
    const size_t end = text_.find(separator);
    const std::string_view piece = text_.substr(0, end);
    text_.remove_prefix(end == std::string_view::npos ? text_.size() : end + 1);
    return piece;
  }
  std::string_view rest() const { return text_; }

 private:
  std::string_view text_;
};

// `size` bytes of `data` written to this process's own file /tmp/mlaserve-fuzz-PID.EXTENSION
// (replaced by every call, removed at exit): for parsers that read a file. Returns its path.
std::string write_input_file(const uint8_t* data, size_t size, const std::string& extension);

// The repository's models/ folder (the kjv model's tokenizer and chat template are fixtures).
std::string models_dir();

}  // namespace mlaserve::fuzz
