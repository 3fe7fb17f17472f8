#include "model/dump.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>

#include "base/error.h"
#include "base/npy.h"

namespace mlaserve {
namespace {

struct DumpSettings {
  std::string dir;              // empty: off
  std::set<std::string> names;  // empty: every name
};

const DumpSettings& settings() {
  static const DumpSettings read = [] {
    DumpSettings s;
    if (const char* dir = std::getenv("MLASERVE_DUMP"); dir && *dir) {
      s.dir = dir;
      std::error_code error;
      std::filesystem::create_directories(s.dir, error);
      MLA_CHECK(!error, "MLASERVE_DUMP: cannot create '{}': {}", s.dir, error.message());
      if (const char* names = std::getenv("MLASERVE_DUMP_NAMES")) {
        std::stringstream list(names);
        for (std::string name; std::getline(list, name, ',');)
          if (!name.empty()) s.names.insert(name);
      }
      spdlog::warn("MLASERVE_DUMP: writing activations to {} (slow; for debugging)", s.dir);
    }
    return s;
  }();
  return read;
}

std::atomic<int64_t> forwards{0};

}  // namespace

ActivationDump ActivationDump::begin_forward(bool first_rank) {
  if (settings().dir.empty() || !first_rank) return ActivationDump(-1);
  return ActivationDump(forwards++);
}

void ActivationDump::write(std::string_view name, int64_t layer, const float* rows, int64_t n_rows,
                           int64_t width) const {
  if (!on()) return;
  const DumpSettings& s = settings();
  if (!s.names.empty() && !s.names.count(std::string(name))) return;
  const std::string where = layer < 0 ? "model" : std::to_string(layer);
  write_npy_f32(s.dir + "/" + std::to_string(forward_) + "-" + std::string(name) + "-" + where + ".npy", rows,
                {n_rows, width});
}

}  // namespace mlaserve
