// --mlock: a shard asked to lock its weights has every stored weight byte in locked memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/mmap_file.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "test_util.h"
#include "tools/model_presets.h"

namespace mlaserve {
namespace {

// This process's mappings, from /proc/self/smaps: [begin, end) and whether mlock'd (the "lo"
// VmFlag). Read per VMA rather than as VmLck's total: memory a previous model freed to the
// heap stays locked and may hold a new model's copies.
struct Mapping {
  uintptr_t begin, end;
  bool locked;
};

std::vector<Mapping> mappings() {
  std::ifstream smaps("/proc/self/smaps");
  std::vector<Mapping> out;
  for (std::string line; std::getline(smaps, line);) {
    const size_t dash = line.find('-'), space = line.find(' ');
    if (dash != std::string::npos && space != std::string::npos && dash < space &&
        line.find_first_not_of("0123456789abcdef") == dash) {
      out.push_back({std::stoull(line.substr(0, dash), nullptr, 16),
                     std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16), false});
    } else if (line.rfind("VmFlags:", 0) == 0 && !out.empty()) {
      std::istringstream flags(line.substr(8));
      for (std::string flag; flags >> flag;) out.back().locked |= flag == "lo";
    }
  }
  return out;
}

// Bytes of [begin, begin + bytes) outside locked mappings.
size_t unlocked_bytes(const std::vector<Mapping>& maps, const ByteRange& range) {
  const uintptr_t begin = uintptr_t(range.begin), end = begin + range.bytes;
  size_t covered = 0;
  for (const Mapping& map : maps)
    if (map.locked && map.begin < end && begin < map.end)
      covered += std::min(end, map.end) - std::max(begin, map.begin);
  return range.bytes - covered;
}

struct Case {
  const char* preset;
  StorageDType dtype;
  bool repack, lock;
};

// for_each_weight, which --mlock and weight_bytes() rely on, visits every matrix of the
// checkpoint: each of its 2-D tensors is a linear weight's data or scales, but for Kimi K3's
// [1, hidden] residual projections, read as vectors (the rest are norms, biases, KDA's A_log
// and convolutions, INT4 shapes).
TEST(LockWeights, ForEachWeightCoversEveryMatrixOfTheCheckpoint) {
  for (const auto& [preset, dtype] : {std::pair{"tiny", StorageDType::BF16},
                                      {"tiny", StorageDType::Int4},
                                      {"tiny", StorageDType::Fp8},
                                      {"kimi-k3-tiny", StorageDType::Mxfp4}}) {
    testing::TempDir dir;
    testing::write_model(dir.path(), model_preset(preset), dtype, 5);
    const Checkpoint checkpoint(dir.path());
    size_t matrices = 0;
    for (const auto& [name, tensor] : checkpoint.all())
      if (tensor->shape.size() == 2 && name.find("res_proj") == std::string::npos) matrices += tensor->nbytes;
    EXPECT_EQ(load_causal_lm(dir.path())->weight_bytes(), matrices) << preset;
  }
}

// DeepSeek-V3 repacked (copies plus the still-mapped embedding, LM head and kv_b_proj) and
// mapped (--no-repack: all in the checkpoint's pages), BF16 and INT4 experts; Kimi K3 (MLA,
// KDA and latent MoE weights) with MXFP4 experts; and a shard not asked to lock, which must
// leave its mapped weights unlocked.
TEST(LockWeights, EveryStoredWeightByteIsLocked) {
  const std::vector<char> probe(1 << 16);
  if (lock_in_memory(probe.data(), probe.size()) != 0) GTEST_SKIP() << "mlock refused here (RLIMIT_MEMLOCK)";
  for (const auto& [preset, dtype, repack, lock] : {Case{"tiny", StorageDType::BF16, true, true},
                                                    {"tiny", StorageDType::BF16, false, true},
                                                    {"tiny", StorageDType::Int4, true, true},
                                                    {"kimi-k3-tiny", StorageDType::Mxfp4, true, true},
                                                    {"tiny", StorageDType::BF16, false, false}}) {
    testing::TempDir dir;
    testing::write_model(dir.path(), model_preset(preset), dtype, 3);
    const auto model = load_causal_lm(dir.path());
    const auto shard = model->shard({0, 1, false, repack, lock, false, {}}, nullptr);
    const std::vector<Mapping> maps = mappings();
    size_t total = 0, unlocked = 0;
    shard->for_each_weight([&](const LinearWeight& weight) {
      for (const ByteRange& range : weight.stored_ranges()) {
        total += range.bytes;
        unlocked += unlocked_bytes(maps, range);
      }
    });
    EXPECT_GT(total, size_t(1) << 20) << preset;
    EXPECT_EQ(unlocked, lock ? 0 : total) << preset << " repack " << repack << " lock " << lock;
  }
}

}  // namespace
}  // namespace mlaserve
