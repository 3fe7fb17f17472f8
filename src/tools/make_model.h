// make-model: writes a random-weight model in the real Hugging Face layout (config.json,
// safetensors, tokenizer.json, tokenizer_config.json), initialised so activations stay O(1)
// through every layer and routing is not degenerate.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace mlaserve {

enum class StorageDType { F32, BF16, Fp8, Int8, Int4, Mxfp4 };
StorageDType storage_dtype_from_name(const std::string& name);  // f32 | bf16 | fp8 | int8 | int4 | mxfp4

struct MakeModelOptions {
  nlohmann::json config;  // a DeepseekV3 / Kimi Linear / Kimi K3 config.json (preset or user file)
  StorageDType dtype = StorageDType::BF16;
  int64_t int4_group_size = 32;
  uint64_t seed = 0;
  size_t shard_bytes = size_t(4) << 30;  // 0: a single model.safetensors
  std::string out_dir;
};

void make_model(const MakeModelOptions& options);

}  // namespace mlaserve
