// model.safetensors.index.json beside two valid shards: whatever the index says, Checkpoint
// opens tensors the shards hold (those of the shards it lists) or throws an Error naming the
// problem.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "fuzz_input.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace {

std::string make_checkpoint() {
  const std::string dir = "/tmp/mlaserve-fuzz-index-" + std::to_string(getpid());
  std::atexit([] { std::filesystem::remove_all("/tmp/mlaserve-fuzz-index-" + std::to_string(getpid())); });
  const auto fill = [](uint8_t* bytes) { bytes[0] = 1; };
  // Each tensor over the shard limit: two shards and an index, which the input then replaces.
  mlaserve::write_checkpoint(
      dir, {{"a.weight", mlaserve::DType::F32, {64}, fill}, {"b.weight", mlaserve::DType::BF16, {8, 16}, fill}}, 64);
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = make_checkpoint();
  std::ofstream(dir + "/model.safetensors.index.json", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), std::streamsize(size));
  try {
    const mlaserve::Checkpoint checkpoint(dir);
    if (checkpoint.all().size() > 2) __builtin_trap();  // an index can only map the shards' tensors
    for (const auto& [name, tensor] : checkpoint.all()) {
      volatile uint8_t sum = 0;
      for (size_t i = 0; i < tensor->nbytes; ++i) sum = sum ^ tensor->data[i];
    }
  } catch (const mlaserve::Error&) {
  }
  return 0;
}
