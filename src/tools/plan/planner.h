// The deployment planner: memory fit, nodes, cache capacity, roofline estimates of decode and
// prefill speed, and cost per token, for a model on hardware the user may not have.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "tools/plan/hardware.h"
#include "tools/plan/model_spec.h"

namespace mlaserve {

struct PlanInput {
  ModelSpec model;
  std::string weights = "native";       // native | bf16 | fp8 | int4[:group] | mxfp4
  std::string kv_cache_dtype = "bf16";  // bf16 | fp8 | fp32: a value of the deployment's latent cache
  Hardware hardware;
  int64_t devices = 8;           // total
  int64_t devices_per_node = 0;  // 0: the hardware's
  int64_t tp = 0;                // attention tensor-parallel size; 0: devices per node
  int64_t context = 8192;        // tokens per sequence
  int64_t concurrency = 1;       // sequences in flight (also the decode batch)
  std::optional<double> measured_tok_s, price_per_hour;
};

// Bytes per parameter of the routed experts and of the other linear layers in a format.
struct WeightBytes {
  std::string format;
  double routed_expert = 2, linear = 2;  // embeddings, norms and routers stay bf16 (2)
};
WeightBytes weight_bytes_of(const std::string& format, const ModelSpec& model);

struct HeadPadding {
  int64_t heads_per_rank = 0;
  bool fast_kernel_shape = false;  // a supported head block: 4, 8, 16 or a multiple of 16
  int64_t padded_heads = 0;        // next supported block when not
  double padding_overhead = 0;     // extra attention work when padded (16/12 - 1 = 0.33)
};
HeadPadding head_padding(int64_t heads, int64_t tp);

struct Plan {
  PlanInput input;
  WeightBytes format;
  double weight_bytes = 0, active_weight_bytes = 0;
  int64_t kv_bytes_per_token = 0, state_bytes_per_sequence = 0;
  double memory_per_device_gb = 0;  // weights share + cache for the requested load
  double usable_per_device_gb = 0;
  bool fits = false;  // weights plus the requested cache fit the devices
  int64_t nodes = 0, nodes_needed = 0;
  int64_t max_kv_tokens = 0, max_concurrency = 0;
  double cache_free_bytes = 0;  // all devices' usable memory left after the weights
  double decode_tok_s_single = 0, decode_tok_s_batch = 0, prefill_tok_s = 0;
  double weight_bytes_per_rank = 0;          // weights split evenly (TP over heads/columns, EP)
  double comm_bytes_per_token_per_rank = 0;  // ring all-reduce/all-gather traffic, one decoded token
  double price_per_hour = 0;                 // all devices
  std::optional<double> tok_s_per_dollar_hour, measured_vs_roofline;
  double roofline_tok_s_per_dollar_hour = 0;
  HeadPadding padding;
};

Plan make_plan(const PlanInput& input);
nlohmann::json plan_to_json(const Plan& plan);
std::string plan_to_table(const Plan& plan);

}  // namespace mlaserve
