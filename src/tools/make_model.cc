#include "tools/make_model.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "base/dtype.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "io/model_config.h"
#include "io/requantize.h"
#include "io/safetensors_writer.h"
#include "tools/tokenizer_trainer.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& name) {  // FNV-1a
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : name) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

// How a tensor's values are drawn: uniform with standard deviation `std` around `center`.
struct Init {
  double center = 0.0;
  double std = 1.0;
};

// A logical f32 matrix [rows, cols] drawn from a seed, row by row (rows independent, so
// threads can fill it in parallel and a quantizer can regenerate any row).
struct RandomMatrix {
  std::string name;
  int64_t rows, cols;
  Init init;
  uint64_t seed;

  void row(int64_t r, float* out) const {
    uint64_t state = splitmix64(seed ^ splitmix64(uint64_t(r)));
    const double half_width = std::sqrt(3.0) * init.std;  // uniform(-a, a) has std a/sqrt(3)
    for (int64_t c = 0; c < cols; ++c) {
      state = splitmix64(state);
      const double unit = double(state >> 11) * 0x1.0p-53;  // [0, 1)
      out[c] = float(init.center + (2.0 * unit - 1.0) * half_width);
    }
  }
};

template <typename RowFn>
void for_rows(int64_t rows, RowFn fn) {
  thread_pool().parallel_for(rows, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) fn(r);
  });
}

void add_dense(std::vector<TensorToWrite>& out, const RandomMatrix& m, DType dtype, bool vector) {
  std::vector<int64_t> shape = vector ? std::vector<int64_t>{m.cols} : std::vector<int64_t>{m.rows, m.cols};
  out.push_back({m.name, dtype, shape, [m, dtype](uint8_t* bytes) {
                   for_rows(m.rows, [&](int64_t r) {
                     std::vector<float> values(static_cast<size_t>(m.cols));
                     m.row(r, values.data());
                     for (int64_t c = 0; c < m.cols; ++c) {
                       const size_t index = size_t(r * m.cols + c);
                       if (dtype == DType::F32)
                         std::memcpy(bytes + 4 * index, &values[c], 4);
                       else {
                         const uint16_t half = f32_to_bf16(values[c]);
                         std::memcpy(bytes + 2 * index, &half, 2);
                       }
                     }
                   });
                 }});
}

// FP8 E4M3 with one scale per 128x128 block: scale = max|w| / 448, stored as weight_scale_inv
// (the factor that dequantizes: w = fp8 * weight_scale_inv), as DeepSeek-V3 ships.
void add_fp8(std::vector<TensorToWrite>& out, const RandomMatrix& m, const std::string& prefix) {
  constexpr int64_t kBlock = 128;
  const int64_t block_rows = (m.rows + kBlock - 1) / kBlock, block_cols = (m.cols + kBlock - 1) / kBlock;
  auto block_scales = [m, block_cols](int64_t block_row) {
    std::vector<float> scales(size_t(block_cols), 0.0f), values(static_cast<size_t>(m.cols));
    for (int64_t r = block_row * kBlock; r < std::min(m.rows, (block_row + 1) * kBlock); ++r) {
      m.row(r, values.data());
      for (int64_t c = 0; c < m.cols; ++c)
        scales[c / kBlock] = std::max(scales[c / kBlock], std::fabs(values[c]) / 448.0f);
    }
    for (auto& scale : scales) scale = scale > 0 ? scale : 1.0f;
    return scales;
  };
  out.push_back({prefix + ".weight", DType::F8_E4M3, {m.rows, m.cols}, [m, block_scales](uint8_t* bytes) {
                   for_rows((m.rows + kBlock - 1) / kBlock, [&](int64_t block_row) {
                     const std::vector<float> scales = block_scales(block_row);
                     std::vector<float> values(static_cast<size_t>(m.cols));
                     for (int64_t r = block_row * kBlock; r < std::min(m.rows, (block_row + 1) * kBlock); ++r) {
                       m.row(r, values.data());
                       for (int64_t c = 0; c < m.cols; ++c)
                         bytes[r * m.cols + c] = f32_to_fp8_e4m3(values[c] / scales[c / kBlock]);
                     }
                   });
                 }});
  out.push_back({prefix + ".weight_scale_inv",
                 DType::F32,
                 {block_rows, block_cols},
                 [block_scales, block_rows, block_cols](uint8_t* bytes) {
                   for_rows(block_rows, [&](int64_t block_row) {
                     const std::vector<float> scales = block_scales(block_row);
                     std::memcpy(bytes + 4 * block_row * block_cols, scales.data(), 4 * size_t(block_cols));
                   });
                 }});
}

// compressed-tensors int-quantized INT8, strategy channel: scale = max|w| / 127 per output row
// (rounded to bf16 first, so codes use the stored scale), q = clamp(round(w / scale), -127, 127).
void add_int8(std::vector<TensorToWrite>& out, const RandomMatrix& m, const std::string& prefix) {
  auto row_scale = [m](int64_t r, std::vector<float>& values) {
    m.row(r, values.data());
    float max_abs = 0.0f;
    for (float v : values) max_abs = std::max(max_abs, std::fabs(v));
    return f32_to_bf16(max_abs > 0 ? max_abs / 127.0f : 1.0f);
  };
  out.push_back({prefix + ".weight", DType::I8, {m.rows, m.cols}, [m, row_scale](uint8_t* bytes) {
                   for_rows(m.rows, [&](int64_t r) {
                     std::vector<float> values(static_cast<size_t>(m.cols));
                     const float scale = bf16_to_f32(row_scale(r, values));
                     for (int64_t c = 0; c < m.cols; ++c) {
                       const auto q = int8_t(std::clamp(std::nearbyint(values[c] / scale), -127.0f, 127.0f));
                       std::memcpy(bytes + r * m.cols + c, &q, 1);
                     }
                   });
                 }});
  out.push_back({prefix + ".weight_scale", DType::BF16, {m.rows, 1}, [m, row_scale](uint8_t* bytes) {
                   for_rows(m.rows, [&](int64_t r) {
                     std::vector<float> values(static_cast<size_t>(m.cols));
                     const uint16_t scale = row_scale(r, values);
                     std::memcpy(bytes + 2 * r, &scale, 2);
                   });
                 }});
}

// compressed-tensors pack-quantized INT4 (quantize_int4_row: what --requantize q4 does at load).
void add_int4(std::vector<TensorToWrite>& out, const RandomMatrix& m, const std::string& prefix, int64_t group) {
  MLA_CHECK(m.cols % group == 0, "'{}': in_features {} is not a multiple of the INT4 group {}", prefix, m.cols, group);
  auto quantize_row = [m, group](int64_t r, uint32_t* words, uint16_t* scales) {
    std::vector<float> values(static_cast<size_t>(m.cols));
    m.row(r, values.data());
    quantize_int4_row(values.data(), m.cols, group, words, scales);
  };
  out.push_back({prefix + ".weight_packed", DType::I32, {m.rows, m.cols / 8}, [m, quantize_row](uint8_t* bytes) {
                   for_rows(m.rows, [&](int64_t r) {
                     quantize_row(r, reinterpret_cast<uint32_t*>(bytes) + r * (m.cols / 8), nullptr);
                   });
                 }});
  out.push_back(
      {prefix + ".weight_scale", DType::BF16, {m.rows, m.cols / group}, [m, group, quantize_row](uint8_t* bytes) {
         for_rows(m.rows, [&](int64_t r) {
           quantize_row(r, nullptr, reinterpret_cast<uint16_t*>(bytes) + r * (m.cols / group));
         });
       }});
  out.push_back({prefix + ".weight_shape", DType::I32, {2}, [m](uint8_t* bytes) {
                   const int32_t shape[2] = {int32_t(m.rows), int32_t(m.cols)};
                   std::memcpy(bytes, shape, sizeof shape);
                 }});
}

// compressed-tensors mxfp4-pack-quantized: per 32 columns the E8M0 scale 2^(s-127) that
// brings max |w| within E2M1's 6, then each value's nearest E2M1 code (low nibble: even column).
void add_mxfp4(std::vector<TensorToWrite>& out, const RandomMatrix& m, const std::string& prefix) {
  MLA_CHECK(m.cols % 32 == 0, "MXFP4 needs in_features divisible by 32, '{}' has {}", prefix, m.cols);
  static constexpr float kE2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  auto quantize_row = [m](int64_t r, uint8_t* packed, uint8_t* scales) {
    std::vector<float> values(static_cast<size_t>(m.cols));
    m.row(r, values.data());
    for (int64_t g = 0; g < m.cols / 32; ++g) {
      float max_abs = 0.0f;
      for (int64_t c = g * 32; c < g * 32 + 32; ++c) max_abs = std::max(max_abs, std::fabs(values[size_t(c)]));
      const int exponent = max_abs > 0 ? int(std::ceil(std::log2(max_abs / 6.0f))) : -127;
      const int stored = std::clamp(exponent + 127, 0, 254);
      if (scales) scales[g] = uint8_t(stored);
      if (!packed) continue;
      const float scale = std::ldexp(1.0f, stored - 127);
      for (int64_t c = g * 32; c < g * 32 + 32; ++c) {
        const float v = values[size_t(c)] / scale;
        int best = 0;
        for (int code = 1; code < 8; ++code)
          if (std::fabs(std::fabs(v) - kE2M1[code]) < std::fabs(std::fabs(v) - kE2M1[best])) best = code;
        const uint8_t nibble = uint8_t(best | (v < 0 && best != 0 ? 8 : 0));
        packed[c / 2] = c % 2 ? uint8_t(packed[c / 2] | (nibble << 4)) : nibble;
      }
    }
  };
  out.push_back({prefix + ".weight_packed", DType::U8, {m.rows, m.cols / 2}, [m, quantize_row](uint8_t* bytes) {
                   for_rows(m.rows, [&](int64_t r) { quantize_row(r, bytes + r * (m.cols / 2), nullptr); });
                 }});
  out.push_back({prefix + ".weight_scale", DType::U8, {m.rows, m.cols / 32}, [m, quantize_row](uint8_t* bytes) {
                   for_rows(m.rows, [&](int64_t r) { quantize_row(r, nullptr, bytes + r * (m.cols / 32)); });
                 }});
}

class TensorPlan {
 public:
  TensorPlan(const MakeModelOptions& options, const ModelConfig& config) : options_(options), config_(config) {}

  std::vector<TensorToWrite> build();

 private:
  RandomMatrix matrix(const std::string& name, int64_t rows, int64_t cols, Init init) const {
    return {name, rows, cols, init, splitmix64(options_.seed ^ name_hash(name))};
  }
  // A layer's linear weight in the format the chosen dtype gives that kind of layer.
  void linear(const std::string& prefix, int64_t rows, int64_t cols, double std, bool routed_expert);
  void norm(const std::string& name, int64_t size) {
    add_dense(tensors_, matrix(name, 1, size, {1.0, 0.1}), base_dtype(), true);
  }
  void mlp(const std::string& prefix, int64_t width, bool routed_expert);
  void attention(const std::string& prefix);
  void kda(const std::string& prefix);
  void moe(const std::string& prefix);
  void deepseek_moe(const std::string& prefix);
  void next_token_module(int64_t layer);
  void f32_tensor(const std::string& name, std::vector<int64_t> shape, Init init) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    add_dense(tensors_, matrix(name, 1, count, init), DType::F32, true);
    tensors_.back().shape = std::move(shape);
  }
  DType base_dtype() const { return options_.dtype == StorageDType::F32 ? DType::F32 : DType::BF16; }

  const MakeModelOptions& options_;
  const ModelConfig& config_;
  std::vector<TensorToWrite> tensors_;
};

void TensorPlan::linear(const std::string& prefix, int64_t rows, int64_t cols, double std, bool routed_expert) {
  const RandomMatrix m = matrix(prefix + ".weight", rows, cols, {0.0, std});
  if (options_.dtype == StorageDType::Fp8)
    add_fp8(tensors_, m, prefix);
  else if (options_.dtype == StorageDType::Int8 && !prefix.ends_with("lm_head"))
    add_int8(tensors_, m, prefix);
  else if (options_.dtype == StorageDType::Int4 && routed_expert)
    add_int4(tensors_, m, prefix, options_.int4_group_size);
  else if (options_.dtype == StorageDType::Mxfp4 && routed_expert)
    add_mxfp4(tensors_, m, prefix);
  else
    add_dense(tensors_, m, base_dtype(), false);
}

void TensorPlan::mlp(const std::string& prefix, int64_t width, bool routed_expert) {
  const int64_t hidden = config_.hidden_size;
  const double residual_std = 1.0 / std::sqrt(double(width) * 2.0 * double(config_.num_hidden_layers));
  linear(prefix + ".gate_proj", width, hidden, 1.0 / std::sqrt(double(hidden)), routed_expert);
  linear(prefix + ".up_proj", width, hidden, 1.0 / std::sqrt(double(hidden)), routed_expert);
  linear(prefix + ".down_proj", hidden, width, residual_std, routed_expert);
}

void TensorPlan::attention(const std::string& prefix) {
  const int64_t hidden = config_.hidden_size, heads = config_.num_attention_heads;
  auto inv_sqrt = [](int64_t n) { return 1.0 / std::sqrt(double(n)); };
  if (config_.q_lora_rank) {
    linear(prefix + ".q_a_proj", *config_.q_lora_rank, hidden, inv_sqrt(hidden), false);
    norm(prefix + ".q_a_layernorm.weight", *config_.q_lora_rank);
    linear(prefix + ".q_b_proj", heads * config_.qk_head_dim(), *config_.q_lora_rank, inv_sqrt(*config_.q_lora_rank),
           false);
  } else {
    linear(prefix + ".q_proj", heads * config_.qk_head_dim(), hidden, inv_sqrt(hidden), false);
  }
  linear(prefix + ".kv_a_proj_with_mqa", config_.kv_latent_dim(), hidden, inv_sqrt(hidden), false);
  norm(prefix + ".kv_a_layernorm.weight", config_.kv_lora_rank);
  linear(prefix + ".kv_b_proj", heads * (config_.qk_nope_head_dim + config_.v_head_dim), config_.kv_lora_rank,
         inv_sqrt(config_.kv_lora_rank), false);
  const int64_t o_width = heads * config_.v_head_dim;
  linear(prefix + ".o_proj", hidden, o_width, inv_sqrt(o_width) / std::sqrt(2.0 * double(config_.num_hidden_layers)),
         false);
  if (config_.mla_use_output_gate) linear(prefix + ".g_proj", o_width, hidden, inv_sqrt(hidden), false);
}

// Kimi Linear's KimiDeltaAttention tensors (HF names and shapes).
void TensorPlan::kda(const std::string& prefix) {
  const KdaConfig& kda = *config_.kda;
  const int64_t hidden = config_.hidden_size, width = kda.num_heads * kda.head_dim, dim = kda.head_dim;
  const double in_std = 1.0 / std::sqrt(double(hidden));
  for (const char* name : {"q", "k", "v"}) {
    linear(fmt::format("{}.{}_proj", prefix, name), width, hidden, in_std, false);
    f32_tensor(fmt::format("{}.{}_conv1d.weight", prefix, name), {width, 1, kda.short_conv_kernel_size}, {0.0, 0.5});
  }
  // Decay rates exp(A_log) around e: Kimi Linear [1, 1, H, 1]; K3 a vector of 128 entries
  // whatever its head count (the published checkpoint's shape), o_norm in F32 as it ships.
  const bool k3 = kda.gate_lower_bound.has_value();
  if (k3)
    f32_tensor(prefix + ".A_log", {std::max<int64_t>(128, kda.num_heads)}, {1.0, 0.8});
  else
    f32_tensor(prefix + ".A_log", {1, 1, kda.num_heads, 1}, {1.0, 0.8});
  linear(prefix + ".f_a_proj", dim, hidden, in_std, false);
  linear(prefix + ".f_b_proj", width, dim, 1.0 / std::sqrt(double(dim)), false);
  f32_tensor(prefix + ".dt_bias", {width}, {-1.0, 0.5});
  linear(prefix + ".b_proj", kda.num_heads, hidden, in_std, false);
  if (kda.use_full_rank_gate) {
    linear(prefix + ".g_proj", width, hidden, in_std, false);
  } else {
    linear(prefix + ".g_a_proj", dim, hidden, in_std, false);
    linear(prefix + ".g_b_proj", width, dim, 1.0 / std::sqrt(double(dim)), false);
  }
  if (k3)
    f32_tensor(prefix + ".o_norm.weight", {dim}, {1.0, 0.1});
  else
    norm(prefix + ".o_norm.weight", dim);
  linear(prefix + ".o_proj", hidden, width, 1.0 / std::sqrt(double(width) * 2.0 * double(config_.num_hidden_layers)),
         false);
}

// Kimi Linear's block_sparse_moe: gate (+ bias), experts w1/w3/w2, shared_experts.
void TensorPlan::moe(const std::string& prefix) {
  const int64_t hidden = config_.hidden_size, width = config_.moe_intermediate_size;
  add_dense(tensors_,
            matrix(prefix + ".gate.weight", config_.n_routed_experts, hidden, {0.0, 1.0 / std::sqrt(double(hidden))}),
            base_dtype(), false);
  add_dense(tensors_, matrix(prefix + ".gate.e_score_correction_bias", 1, config_.n_routed_experts, {0.0, 0.1}),
            DType::F32, true);
  const double residual_std = 1.0 / std::sqrt(double(width) * 2.0 * double(config_.num_hidden_layers));
  const int64_t expert_io = config_.routed_expert_hidden_size.value_or(hidden);
  if (config_.routed_expert_hidden_size) {  // K3 LatentMoE
    linear(prefix + ".routed_expert_down_proj", expert_io, hidden, 1.0 / std::sqrt(double(hidden)), false);
    if (config_.latent_moe_use_norm) norm(prefix + ".routed_expert_norm.weight", expert_io);
    linear(prefix + ".routed_expert_up_proj", hidden, expert_io, 1.0 / std::sqrt(double(expert_io)), false);
  }
  for (int64_t e = 0; e < config_.n_routed_experts; ++e) {
    const std::string expert = fmt::format("{}.experts.{}", prefix, e);
    linear(expert + ".w1", width, expert_io, 1.0 / std::sqrt(double(expert_io)), true);
    linear(expert + ".w3", width, expert_io, 1.0 / std::sqrt(double(expert_io)), true);
    linear(expert + ".w2", expert_io, width, residual_std, true);
  }
  if (config_.n_shared_experts > 0) mlp(prefix + ".shared_experts", config_.n_shared_experts * width, false);
}

void TensorPlan::deepseek_moe(const std::string& prefix) {
  const int64_t hidden = config_.hidden_size;
  add_dense(tensors_,
            matrix(prefix + ".gate.weight", config_.n_routed_experts, hidden, {0.0, 1.0 / std::sqrt(double(hidden))}),
            base_dtype(), false);
  if (config_.topk_method == TopkMethod::NoAuxTc)  // varied so it changes the choice
    add_dense(tensors_, matrix(prefix + ".gate.e_score_correction_bias", 1, config_.n_routed_experts, {0.0, 0.1}),
              DType::F32, true);
  for (int64_t e = 0; e < config_.n_routed_experts; ++e)
    mlp(fmt::format("{}.experts.{}", prefix, e), config_.moe_intermediate_size, true);
  if (config_.n_shared_experts > 0)
    mlp(prefix + ".shared_experts", config_.n_shared_experts * config_.moe_intermediate_size, false);
}

// DeepSeek-V3's multi-token-prediction layer, stored after the last layer: enorm, hnorm,
// eh_proj, a MoE decoder layer and shared_head.norm (the embedding and head are the model's).
void TensorPlan::next_token_module(int64_t layer) {
  const int64_t hidden = config_.hidden_size;
  const std::string prefix = fmt::format("model.layers.{}", layer);
  norm(prefix + ".enorm.weight", hidden);
  norm(prefix + ".hnorm.weight", hidden);
  linear(prefix + ".eh_proj", hidden, 2 * hidden, 1.0 / std::sqrt(double(2 * hidden)), false);
  norm(prefix + ".input_layernorm.weight", hidden);
  norm(prefix + ".post_attention_layernorm.weight", hidden);
  attention(prefix + ".self_attn");
  deepseek_moe(prefix + ".mlp");
  norm(prefix + ".shared_head.norm.weight", hidden);
}

std::vector<TensorToWrite> TensorPlan::build() {
  const int64_t hidden = config_.hidden_size;
  const std::string& root = config_.weight_prefix;
  // K3 attention residuals: the pseudo-query (res_norm * res_proj) of one mix.
  auto attn_res = [&](const std::string& prefix) {
    norm(prefix + "_res_norm.weight", hidden);
    add_dense(tensors_, matrix(prefix + "_res_proj.weight", 1, hidden, {0.0, 1.0 / std::sqrt(double(hidden))}),
              base_dtype(), false);
  };
  add_dense(tensors_, matrix(root + "model.embed_tokens.weight", config_.vocab_size, hidden, {0.0, 1.0}), base_dtype(),
            false);
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    const std::string prefix = fmt::format("{}model.layers.{}", root, i);
    if (config_.attn_res_block_size) {
      attn_res(prefix + ".self_attention");
      attn_res(prefix + ".mlp");
    }
    norm(prefix + ".input_layernorm.weight", hidden);
    norm(prefix + ".post_attention_layernorm.weight", hidden);
    if (config_.is_kimi_linear() && !config_.kda->is_mla_layer[size_t(i)])
      kda(prefix + ".self_attn");
    else
      attention(prefix + ".self_attn");
    if (!config_.is_moe_layer(i)) {
      mlp(prefix + ".mlp", config_.intermediate_size, false);
      continue;
    }
    if (config_.is_kimi_linear())
      moe(prefix + ".block_sparse_moe");
    else
      deepseek_moe(prefix + ".mlp");
  }
  if (!config_.is_kimi_linear())
    for (int64_t i = 0; i < config_.num_nextn_predict_layers; ++i) next_token_module(config_.num_hidden_layers + i);
  if (config_.attn_res_block_size) attn_res(root + "model.output_attn");
  norm(root + "model.norm.weight", hidden);
  if (!config_.tie_word_embeddings)
    linear(root + "lm_head", config_.vocab_size, hidden, 1.0 / std::sqrt(double(hidden)), false);
  return std::move(tensors_);
}

json quantization_config(const MakeModelOptions& options) {
  if (options.dtype == StorageDType::Mxfp4) {
    json weights = {{"num_bits", 4},       {"type", "float"},  {"symmetric", true},
                    {"strategy", "group"}, {"group_size", 32}, {"scale_dtype", "torch.uint8"}};
    return {{"quant_method", "compressed-tensors"},
            {"format", "mxfp4-pack-quantized"},
            {"quantization_status", "compressed"},
            {"config_groups",
             {{"group_0", {{"format", "mxfp4-pack-quantized"}, {"targets", {"Linear"}}, {"weights", weights}}}}},
            // Kimi K3's published list (its LatentMoE projections are stored BF16 all the same)
            {"ignore",
             {"re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:.*lm_head.*",
              "re:.*vision_tower.*", "re:.*mm_projector.*"}}};
  }
  if (options.dtype == StorageDType::Fp8)
    return {
        {"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  if (options.dtype == StorageDType::Int8) {
    // W8A8 as llm-compressor writes it: int8 weights per channel, int8 activations per token.
    json weights = {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "channel"}, {"dynamic", false}};
    json activations = {
        {"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "token"}, {"dynamic", true}};
    return {{"quant_method", "compressed-tensors"},
            {"format", "int-quantized"},
            {"quantization_status", "compressed"},
            {"config_groups",
             {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", activations}}}}},
            {"ignore", {"lm_head", "re:.*mlp\\.gate$"}}};
  }
  json weights = {{"num_bits", 4},
                  {"type", "int"},
                  {"symmetric", true},
                  {"strategy", "group"},
                  {"group_size", options.int4_group_size},
                  {"dynamic", false}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "pack-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}}}}},
          {"ignore",
           {"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|down)_proj.*",
            "re:.*mlp\\.gate$"}}};
}

}  // namespace

StorageDType storage_dtype_from_name(const std::string& name) {
  if (name == "f32") return StorageDType::F32;
  if (name == "bf16") return StorageDType::BF16;
  if (name == "fp8") return StorageDType::Fp8;
  if (name == "int8") return StorageDType::Int8;
  if (name == "int4") return StorageDType::Int4;
  if (name == "mxfp4") return StorageDType::Mxfp4;
  fail("unknown --dtype '{}' (f32, bf16, fp8, int8, int4, mxfp4)", name);
}

void make_model(const MakeModelOptions& options) {
  json config = options.config;
  // Kimi K3 keeps the text model's keys, quantization included, in text_config.
  json& text =
      config.value("model_type", "") == "kimi_k3" && config.contains("text_config") ? config["text_config"] : config;
  text.erase("quantization_config");
  if (options.dtype != StorageDType::F32 && options.dtype != StorageDType::BF16)
    text["quantization_config"] = quantization_config(options);
  const ModelConfig parsed = parse_model_config(config);
  const auto tensors = TensorPlan(options, parsed).build();
  std::filesystem::create_directories(options.out_dir);
  std::ofstream((std::filesystem::path(options.out_dir) / "config.json").string()) << config.dump(2) << "\n";
  write_checkpoint(options.out_dir, tensors, options.shard_bytes, [](size_t done, size_t total) {
    if (done == total || done % std::max<size_t>(1, total / 20) == 0)
      spdlog::info("writing tensors: {}/{} ({}%)", done, total, done * 100 / total);
  });
  if (config.value("model_type", "") == "kimi_k3")
    write_kimi_k3_tokenizer_files(options.out_dir, parsed.vocab_size);
  else
    write_tokenizer_files(options.out_dir, parsed.vocab_size);
  spdlog::info("wrote '{}' ({} tensors)", options.out_dir, tensors.size());
}

}  // namespace mlaserve
