// Hardware catalog for the planner: published per-device specs and an illustrative price.
// Built in; `mlaserve plan --dump-catalog` prints it as JSON and --hardware-file FILE.json
// adds or overrides entries by name.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace mlaserve {

struct Hardware {
  std::string name;                   // lower case: b200, b300, mi355x, h200, mi300x, epyc-genoa-12ch, ...
  std::string kind = "gpu";           // gpu | cpu
  double memory_gb = 0;               // per device
  double usable_fraction = 0.9;       // left for weights + cache after runtime, activations, fragmentation
  double bandwidth_gb_s = 0;          // memory bandwidth per device
  double bf16_tflops = 0;             // dense peak per device
  double fp8_tflops = 0;              // dense peak per device (0: none; bf16 is used); CPUs: int8 dot products
  double fp4_tflops = 0;              // dense peak per device for MXFP4 weights (0: none; fp8 or bf16 is used)
  double interconnect_gb_s = 0;       // per device, within a node (NVLink, Infinity Fabric, sockets)
  double inter_node_gb_s = 0;         // per device, between nodes
  double collective_latency_us = 5;   // one all-reduce, small message, within a node
  double inter_node_latency_us = 30;  // one all-reduce, small message, across nodes
  // Achievable fractions and fixed costs (docs/planning.md gives each one's source):
  double bandwidth_efficiency = 0.9;     // of bandwidth_gb_s that streaming weight reads reach
  double flops_efficiency = 0.6;         // of the dense peaks that large GEMMs reach
  double expert_flops_efficiency = 0.6;  // of their units' peak that routed experts' grouped GEMMs reach
  double attention_efficiency = 0.6;     // of the bf16 peak that prefill's FlashAttention-style kernels reach
  double kernel_overhead_us = 3.4;       // one small kernel in a captured graph: launch plus its shortest run
  double generic_mla_slowdown = 8.5;     // the generic MLA kernel against the head-blocked one
  int devices_per_node = 8;
  double price_per_hour = 0;  // $ per device-hour
  std::string note;
};

std::vector<Hardware> builtin_hardware();
nlohmann::json hardware_to_json(const std::vector<Hardware>& catalog);
// The named entry of the built-in catalog, overridden or extended by `catalog_file` if given.
Hardware find_hardware(const std::string& name, const std::string& catalog_file = "");

}  // namespace mlaserve
