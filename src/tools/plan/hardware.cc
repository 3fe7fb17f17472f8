#include "tools/plan/hardware.h"

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mmap_file.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

Hardware from_json(const json& entry) {
  Hardware hw;
  hw.name = entry.at("name").get<std::string>();
  hw.kind = entry.value("kind", "gpu");
  hw.memory_gb = entry.at("memory_gb").get<double>();
  hw.usable_fraction = entry.value("usable_fraction", 0.9);
  hw.bandwidth_gb_s = entry.at("bandwidth_gb_s").get<double>();
  hw.bf16_tflops = entry.at("bf16_tflops").get<double>();
  hw.fp8_tflops = entry.value("fp8_tflops", 0.0);
  hw.interconnect_gb_s = entry.value("interconnect_gb_s", 0.0);
  hw.inter_node_gb_s = entry.value("inter_node_gb_s", 0.0);
  hw.collective_latency_us = entry.value("collective_latency_us", 5.0);
  hw.devices_per_node = entry.value("devices_per_node", 8);
  hw.price_per_hour = entry.value("price_per_hour", 0.0);
  hw.note = entry.value("note", "");
  MLA_CHECK(hw.memory_gb > 0 && hw.bandwidth_gb_s > 0 && hw.bf16_tflops > 0 && hw.devices_per_node > 0,
            "hardware '{}': memory_gb, bandwidth_gb_s, bf16_tflops and devices_per_node must be positive", hw.name);
  return hw;
}

}  // namespace

std::vector<Hardware> builtin_hardware() {
  // Vendor datasheet figures (dense peaks). Prices: the seed deployment's ($2.5 MI355X, $4.25
  // B200, $6 B300); the others are illustrative on-demand rates — override them with --price.
  return {
      {"b200", "gpu", 192, 0.9, 8000, 2250, 4500, 900, 50, 5, 8, 4.25, "NVIDIA B200, HBM3e, NVLink 5"},
      {"b300", "gpu", 288, 0.9, 8000, 2250, 4500, 900, 100, 5, 8, 6.0, "NVIDIA B300 (Blackwell Ultra), HBM3e 12-high"},
      {"mi355x", "gpu", 288, 0.9, 8000, 2500, 5000, 538, 50, 6, 8, 2.5, "AMD Instinct MI355X, HBM3E, Infinity Fabric"},
      {"h200", "gpu", 141, 0.9, 4800, 989, 1979, 450, 50, 5, 8, 3.5, "NVIDIA H200 SXM, HBM3e, NVLink 4 (price illustrative)"},
      {"mi300x", "gpu", 192, 0.9, 5300, 1307, 2615, 448, 50, 6, 8, 2.0, "AMD Instinct MI300X (price illustrative)"},
      {"h100", "gpu", 80, 0.9, 3350, 989, 1979, 450, 50, 5, 8, 2.5, "NVIDIA H100 SXM (price illustrative)"},
      {"epyc-genoa-12ch", "cpu", 1536, 0.9, 460.8, 20, 0, 100, 50, 10, 1, 5.0,
       "2-socket-class EPYC 9004 node, 12 x DDR5-4800 per socket counted once (460.8 GB/s), AVX-512 BF16 (price illustrative)"},
      {"epyc-turin-12ch", "cpu", 3072, 0.9, 614.4, 30, 0, 100, 50, 10, 1, 7.0,
       "EPYC 9005, 12 x DDR5-6400 (614.4 GB/s), AVX-512 BF16 (price illustrative)"},
      {"cpu-dev-2core", "cpu", 24, 0.8, 32, 0.465, 0, 32, 1, 2, 1, 0.1,
       "this project's build machine: 2 Zen 4 cores, measured ~32 GB/s and ~465 GFLOP/s BF16"},
  };
}

json hardware_to_json(const std::vector<Hardware>& catalog) {
  json out = json::array();
  for (const auto& hw : catalog)
    out.push_back({{"name", hw.name}, {"kind", hw.kind}, {"memory_gb", hw.memory_gb}, {"usable_fraction", hw.usable_fraction},
                   {"bandwidth_gb_s", hw.bandwidth_gb_s}, {"bf16_tflops", hw.bf16_tflops}, {"fp8_tflops", hw.fp8_tflops},
                   {"interconnect_gb_s", hw.interconnect_gb_s}, {"inter_node_gb_s", hw.inter_node_gb_s},
                   {"collective_latency_us", hw.collective_latency_us}, {"devices_per_node", hw.devices_per_node},
                   {"price_per_hour", hw.price_per_hour}, {"note", hw.note}});
  return out;
}

Hardware find_hardware(const std::string& name, const std::string& catalog_file) {
  std::vector<Hardware> catalog = builtin_hardware();
  if (!catalog_file.empty()) {
    json entries;
    try {
      entries = json::parse(read_text_file(catalog_file));
    } catch (const json::exception& e) {
      fail("'{}': not valid JSON: {}", catalog_file, e.what());
    }
    MLA_CHECK(entries.is_array(), "'{}' must hold a JSON array of hardware entries", catalog_file);
    for (const auto& entry : entries) {
      Hardware hw;
      try {
        hw = from_json(entry);
      } catch (const json::exception& e) {
        fail("'{}': bad hardware entry: {}", catalog_file, e.what());
      }
      std::erase_if(catalog, [&](const Hardware& existing) { return existing.name == hw.name; });
      catalog.push_back(hw);
    }
  }
  for (const auto& hw : catalog)
    if (hw.name == name) return hw;
  std::string names;
  for (const auto& hw : catalog) names += (names.empty() ? "" : ", ") + hw.name;
  fail("unknown hardware '{}' (known: {})", name, names);
}

}  // namespace mlaserve
