// A deepseek2 GGUF (DeepSeek-V2/V3/R1, Kimi K2, as llama.cpp and ik_llama.cpp write them) read
// as the Hugging Face checkpoint it was converted from: its keys become a config.json that
// parse_model_config checks, its tensors carry the HF names in formats the weight loader takes.
// F32, F16 and BF16 stay in the mapped file; Q8_0 projections become INT8 with an fp32 scale
// per 32 columns (the same values, 9 bits a weight); every other type, and quantized tensors
// that are not projections (embeddings), is dequantized to F32 at load: exact, 4 bytes a
// weight, until it has a kernel of its own. docs/models.md lists what is read and refused.
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/safetensors.h"

namespace mlaserve {

// config.json's keys from a deepseek2 GGUF's metadata (and its tensors' types); a key the
// model needs that is missing, of the wrong type or inconsistent is an Error naming it.
nlohmann::json gguf_config_json(const std::vector<std::unique_ptr<GgufFile>>& parts);

class GgufTensors {
 public:
  explicit GgufTensors(const std::string& path);  // opens every part of the set
  const nlohmann::json& config() const { return config_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  void release_pages(const void* begin, size_t bytes) const;

 private:
  // Layer prefix -> its attn_k_b and attn_v_b (llama.cpp's MLA layout), put together at the end.
  using SplitKvB = std::map<std::string, std::pair<const GgufTensor*, const GgufTensor*>>;
  void add(const std::string& name, const GgufTensor& tensor, int64_t slice, bool projection);
  void add_layer_tensor(const GgufTensor& tensor, SplitKvB& split_kv_b);
  void add_kv_b(const std::string& prefix, const GgufTensor& k_b, const GgufTensor& v_b);
  uint8_t* own(size_t bytes);

  std::vector<std::unique_ptr<GgufFile>> parts_;
  nlohmann::json config_;
  std::map<std::string, TensorInfo> tensors_;
  std::deque<std::vector<uint8_t>> owned_;  // converted tensors
};

}  // namespace mlaserve
