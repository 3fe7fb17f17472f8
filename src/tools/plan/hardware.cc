#include "tools/plan/hardware.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mmap_file.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

// An entry of a --hardware-file: every key given replaces `base`'s (the built-in entry of that
// name, or a blank one for a new name, which must then give the figures no default can).
Hardware from_json(const json& entry, Hardware hw) {
  hw.name = entry.at("name").get<std::string>();
  auto read = [&](const char* key, auto& field) { field = entry.value(key, field); };
  read("kind", hw.kind);
  read("memory_gb", hw.memory_gb);
  read("usable_fraction", hw.usable_fraction);
  read("bandwidth_gb_s", hw.bandwidth_gb_s);
  read("bf16_tflops", hw.bf16_tflops);
  read("fp8_tflops", hw.fp8_tflops);
  read("fp4_tflops", hw.fp4_tflops);
  read("interconnect_gb_s", hw.interconnect_gb_s);
  read("inter_node_gb_s", hw.inter_node_gb_s);
  read("collective_latency_us", hw.collective_latency_us);
  read("inter_node_latency_us", hw.inter_node_latency_us);
  read("bandwidth_efficiency", hw.bandwidth_efficiency);
  read("flops_efficiency", hw.flops_efficiency);
  read("expert_flops_efficiency", hw.expert_flops_efficiency);
  read("attention_efficiency", hw.attention_efficiency);
  read("kernel_overhead_us", hw.kernel_overhead_us);
  read("generic_mla_slowdown", hw.generic_mla_slowdown);
  read("devices_per_node", hw.devices_per_node);
  read("price_per_hour", hw.price_per_hour);
  read("note", hw.note);
  MLA_CHECK(hw.memory_gb > 0 && hw.bandwidth_gb_s > 0 && hw.bf16_tflops > 0 && hw.devices_per_node > 0,
            "hardware '{}': memory_gb, bandwidth_gb_s, bf16_tflops and devices_per_node must be positive", hw.name);
  const auto fraction = [](double x) { return x > 0 && x <= 1; };
  MLA_CHECK(
      fraction(hw.bandwidth_efficiency) && fraction(hw.flops_efficiency) && fraction(hw.expert_flops_efficiency) &&
          fraction(hw.attention_efficiency) && hw.generic_mla_slowdown >= 1,
      "hardware '{}': bandwidth_efficiency, flops_efficiency, expert_flops_efficiency and attention_efficiency must "
      "be in (0, 1], generic_mla_slowdown at least 1",
      hw.name);
  return hw;
}

}  // namespace

std::vector<Hardware> builtin_hardware() {
  // Vendor datasheet figures (dense peaks). Prices: the seed deployment's ($2.5 MI355X, $4.25
  // B200, $6 B300); the others are illustrative on-demand rates — override them with --price.
  // The efficiencies and fixed costs, per vendor, are docs/planning.md's, with their sources.
  Hardware nvidia;
  nvidia.collective_latency_us = 5, nvidia.inter_node_latency_us = 30, nvidia.bandwidth_efficiency = 0.69;
  nvidia.flops_efficiency = 0.53, nvidia.expert_flops_efficiency = 0.6, nvidia.attention_efficiency = 0.63;
  nvidia.kernel_overhead_us = 3.4;
  Hardware amd = nvidia;
  amd.collective_latency_us = 6, amd.bandwidth_efficiency = 0.75, amd.flops_efficiency = 0.3,
  amd.kernel_overhead_us = 5;
  amd.expert_flops_efficiency = 0.12, amd.attention_efficiency = 0.34;
  Hardware cpu;
  cpu.kind = "cpu", cpu.devices_per_node = 1, cpu.collective_latency_us = 10, cpu.bandwidth_efficiency = 0.8;
  cpu.flops_efficiency = cpu.expert_flops_efficiency = cpu.attention_efficiency = 0.6, cpu.kernel_overhead_us = 2;
  auto gpu = [](Hardware base, std::string name, double memory_gb, double bandwidth_gb_s, double bf16, double fp8,
                double fp4, double interconnect_gb_s, double inter_node_gb_s, double price, std::string note) {
    base.name = std::move(name), base.memory_gb = memory_gb, base.bandwidth_gb_s = bandwidth_gb_s;
    base.bf16_tflops = bf16, base.fp8_tflops = fp8, base.fp4_tflops = fp4, base.interconnect_gb_s = interconnect_gb_s;
    base.inter_node_gb_s = inter_node_gb_s, base.price_per_hour = price, base.note = std::move(note);
    return base;
  };
  Hardware gb300 = gpu(nvidia, "gb300-nvl72", 288, 8000, 2500, 5000, 15000, 900, 100, 7.0,
                       "NVIDIA GB300 NVL72: 72 Blackwell Ultra GPUs in one NVLink domain (price illustrative)");
  gb300.devices_per_node = 72;
  Hardware genoa = gpu(cpu, "epyc-genoa-12ch", 1536, 460.8, 20, 0, 0, 100, 50, 5.0,
                       "2-socket-class EPYC 9004 node, 12 x DDR5-4800 per socket counted once (460.8 GB/s), AVX-512 "
                       "BF16 (price illustrative)");
  Hardware turin = gpu(cpu, "epyc-turin-12ch", 3072, 614.4, 30, 0, 0, 100, 50, 7.0,
                       "EPYC 9005, 12 x DDR5-6400 (614.4 GB/s), AVX-512 BF16 (price illustrative)");
  Hardware dev = gpu(cpu, "cpu-dev-2core", 24, 32, 0.465, 0, 0, 32, 1, 0.1,
                     "this project's build machine: 2 Zen 4 cores, measured ~32 GB/s and ~465 GFLOP/s BF16");
  dev.usable_fraction = 0.8, dev.collective_latency_us = 2;
  return {
      gpu(nvidia, "b200", 192, 8000, 2250, 4500, 9000, 900, 50, 4.25, "NVIDIA B200, HBM3e, NVLink 5"),
      gpu(nvidia, "b300", 288, 8000, 2250, 4500, 13500, 900, 100, 6.0, "NVIDIA B300 (Blackwell Ultra), HBM3e 12-high"),
      gpu(amd, "mi355x", 288, 8000, 2500, 5000, 10000, 538, 50, 2.5, "AMD Instinct MI355X, HBM3E, Infinity Fabric"),
      gpu(nvidia, "h200", 141, 4800, 989, 1979, 0, 450, 50, 3.5,
          "NVIDIA H200 SXM, HBM3e, NVLink 4 (price illustrative)"),
      gpu(amd, "mi300x", 192, 5300, 1307, 2615, 0, 448, 50, 2.0, "AMD Instinct MI300X (price illustrative)"),
      gpu(amd, "mi325x", 256, 6000, 1307, 2615, 0, 448, 50, 2.25, "AMD Instinct MI325X, HBM3E (price illustrative)"),
      gpu(nvidia, "h100", 80, 3350, 989, 1979, 0, 450, 50, 2.5, "NVIDIA H100 SXM (price illustrative)"),
      gb300,
      genoa,
      turin,
      dev,
  };
}

json hardware_to_json(const std::vector<Hardware>& catalog) {
  json out = json::array();
  for (const auto& hw : catalog)
    out.push_back({{"name", hw.name},
                   {"kind", hw.kind},
                   {"memory_gb", hw.memory_gb},
                   {"usable_fraction", hw.usable_fraction},
                   {"bandwidth_gb_s", hw.bandwidth_gb_s},
                   {"bf16_tflops", hw.bf16_tflops},
                   {"fp8_tflops", hw.fp8_tflops},
                   {"fp4_tflops", hw.fp4_tflops},
                   {"interconnect_gb_s", hw.interconnect_gb_s},
                   {"inter_node_gb_s", hw.inter_node_gb_s},
                   {"collective_latency_us", hw.collective_latency_us},
                   {"inter_node_latency_us", hw.inter_node_latency_us},
                   {"bandwidth_efficiency", hw.bandwidth_efficiency},
                   {"flops_efficiency", hw.flops_efficiency},
                   {"expert_flops_efficiency", hw.expert_flops_efficiency},
                   {"attention_efficiency", hw.attention_efficiency},
                   {"kernel_overhead_us", hw.kernel_overhead_us},
                   {"generic_mla_slowdown", hw.generic_mla_slowdown},
                   {"devices_per_node", hw.devices_per_node},
                   {"price_per_hour", hw.price_per_hour},
                   {"note", hw.note}});
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
        const std::string entry_name = entry.at("name").get<std::string>();
        const auto builtin =
            std::find_if(catalog.begin(), catalog.end(), [&](const Hardware& h) { return h.name == entry_name; });
        hw = from_json(entry, builtin != catalog.end() ? *builtin : Hardware{});
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
