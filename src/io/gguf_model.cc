#include "io/gguf_model.h"

#include <cstring>
#include <optional>
#include <set>

#include <spdlog/spdlog.h>

#include "base/dtype.h"
#include "base/error.h"
#include "base/thread_pool.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

// The first part's metadata, read with the key named in every error.
class Keys {
 public:
  Keys(const GgufFile& file, std::string prefix) : file_(file), prefix_(std::move(prefix)) {}

  const json* find(const std::string& key) const {
    const auto found = file_.metadata().find(prefix_ + key);
    return found == file_.metadata().end() ? nullptr : &*found;
  }
  std::optional<int64_t> integer(const std::string& key) const {
    const json* value = find(key);
    if (!value) return std::nullopt;
    MLA_CHECK(value->is_number_integer() && (!value->is_number_unsigned() || value->get<uint64_t>() <= (1ull << 62)),
              "'{}': key '{}{}' is {} where an integer is expected", file_.file().path(), prefix_, key, value->dump());
    return value->get<int64_t>();
  }
  int64_t positive(const std::string& key) const {
    const std::optional<int64_t> value = integer(key);
    MLA_CHECK(value, "'{}': key '{}{}' is missing", file_.file().path(), prefix_, key);
    MLA_CHECK(*value > 0, "'{}': key '{}{}' is {} where a positive count is expected", file_.file().path(), prefix_,
              key, *value);
    return *value;
  }
  std::optional<double> number(const std::string& key) const {
    const json* value = find(key);
    if (!value) return std::nullopt;
    MLA_CHECK(value->is_number(), "'{}': key '{}{}' is {} where a number is expected", file_.file().path(), prefix_,
              key, value->dump());
    return value->get<double>();
  }
  std::optional<std::string> string(const std::string& key) const {
    const json* value = find(key);
    if (!value) return std::nullopt;
    MLA_CHECK(value->is_string(), "'{}': key '{}{}' is not a string", file_.file().path(), prefix_, key);
    return value->get<std::string>();
  }
  std::optional<bool> flag(const std::string& key) const {
    const json* value = find(key);
    if (!value) return std::nullopt;
    MLA_CHECK(value->is_boolean(), "'{}': key '{}{}' is not a boolean", file_.file().path(), prefix_, key);
    return value->get<bool>();
  }
  const std::string& path() const { return file_.file().path(); }

 private:
  const GgufFile& file_;
  std::string prefix_;
};

// The attention's widths: llama.cpp's MLA layout stores the latent's as key/value_length and
// the heads' as key/value_length_mla; older files store the heads' as key/value_length.
void add_attention(const Keys& model, json& config) {
  const int64_t rope = model.positive("rope.dimension_count");
  const int64_t kv_lora_rank = model.positive("attention.kv_lora_rank");
  int64_t key_length = model.positive("attention.key_length"), value_length = model.positive("attention.value_length");
  if (model.find("attention.key_length_mla")) {
    MLA_CHECK(
        key_length == kv_lora_rank + rope && value_length == kv_lora_rank,
        "'{}': attention.key_length {} and value_length {} are not kv_lora_rank + rope ({}) and kv_lora_rank ({})",
        model.path(), key_length, value_length, kv_lora_rank + rope, kv_lora_rank);
    key_length = model.positive("attention.key_length_mla");
    value_length = model.positive("attention.value_length_mla");
  }
  MLA_CHECK(key_length > rope, "'{}': key length {} is not more than rope.dimension_count {}", model.path(), key_length,
            rope);
  config["num_attention_heads"] = model.positive("attention.head_count");
  config["kv_lora_rank"] = kv_lora_rank;
  config["q_lora_rank"] = model.integer("attention.q_lora_rank").value_or(0) > 0
                              ? json(*model.integer("attention.q_lora_rank"))
                              : json(nullptr);
  config["qk_rope_head_dim"] = rope;
  config["qk_nope_head_dim"] = key_length - rope;
  config["v_head_dim"] = value_length;
}

// Routing: gating function 1 softmax, 2 sigmoid (llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE);
// sigmoid routing carries exp_probs_b (noaux_tc), softmax is greedy or group-limited.
void add_experts(const Keys& model, json& config) {
  config["n_routed_experts"] = model.positive("expert_count");
  config["num_experts_per_tok"] = model.positive("expert_used_count");
  config["n_shared_experts"] = model.integer("expert_shared_count").value_or(0);
  config["moe_intermediate_size"] = model.positive("expert_feed_forward_length");
  config["first_k_dense_replace"] = model.integer("leading_dense_block_count").value_or(0);
  config["routed_scaling_factor"] = model.number("expert_weights_scale").value_or(1.0);
  config["norm_topk_prob"] = model.flag("expert_weights_norm").value_or(false);
  const int64_t n_group = model.integer("expert_group_count").value_or(1);
  config["n_group"] = n_group;
  config["topk_group"] = model.integer("expert_group_used_count").value_or(1);
  const int64_t gating = model.integer("expert_gating_func").value_or(1);
  MLA_CHECK(gating == 1 || gating == 2, "'{}': expert_gating_func {} (1 softmax or 2 sigmoid)", model.path(), gating);
  config["scoring_func"] = gating == 2 ? "sigmoid" : "softmax";
  config["topk_method"] = gating == 2 ? "noaux_tc" : n_group > 1 ? "group_limited_greedy" : "greedy";
}

// rope.scaling.type yarn: llama.cpp stores 0.1 * mscale_all_dim as yarn_log_multiplier (and
// DeepSeek's mscale equals mscale_all_dim).
json rope_scaling(const Keys& model) {
  const std::string type = model.string("rope.scaling.type").value_or("none");
  if (type == "none") return nullptr;
  MLA_CHECK(type == "yarn", "'{}': rope.scaling.type '{}' is not supported (yarn, none)", model.path(), type);
  const double mscale = model.number("rope.scaling.yarn_log_multiplier").value_or(0.0) / 0.1;
  return {{"type", "yarn"},
          {"factor", *model.number("rope.scaling.factor")},
          {"original_max_position_embeddings", model.positive("rope.scaling.original_context_length")},
          {"beta_fast", model.number("rope.scaling.yarn_beta_fast").value_or(32.0)},
          {"beta_slow", model.number("rope.scaling.yarn_beta_slow").value_or(1.0)},
          {"mscale", mscale},
          {"mscale_all_dim", mscale}};
}

const GgufTensor* find_tensor(const std::vector<std::unique_ptr<GgufFile>>& parts, const std::string& name) {
  for (const auto& part : parts)
    for (const GgufTensor& tensor : part->tensors())
      if (tensor.name == name) return &tensor;
  return nullptr;
}

// blk.N.<part>.weight or .bias, its parts; nullopt for other names.
struct LayerTensorName {
  std::string layer, part, suffix;
};
std::optional<LayerTensorName> parse_layer_tensor(const std::string& name) {
  const size_t dot = name.find('.', 4);
  if (!name.starts_with("blk.") || dot == std::string::npos || dot == 4 ||
      name.find_first_not_of("0123456789", 4) != dot)
    return std::nullopt;
  for (const std::string suffix : {"weight", "bias"})
    if (name.size() > dot + 2 + suffix.size() && name.ends_with("." + suffix))
      return LayerTensorName{name.substr(4, dot - 4), name.substr(dot + 1, name.size() - dot - 2 - suffix.size()),
                             suffix};
  return std::nullopt;
}

// GGUF's projections (blk.N.attn_q_a ... ffn_down_exps, nextn.eh_proj, output), which the
// loader reads as linear weights: the symmetric types stay 8-bit for them.
bool is_projection(const std::string& gguf_name) {
  static const std::set<std::string> parts = {"attn_q",         "attn_q_a",      "attn_q_b",       "attn_kv_a_mqa",
                                              "attn_kv_b",      "attn_output",   "ffn_gate",       "ffn_up",
                                              "ffn_down",       "ffn_gate_exps", "ffn_up_exps",    "ffn_down_exps",
                                              "ffn_gate_shexp", "ffn_up_shexp",  "ffn_down_shexp", "nextn.eh_proj"};
  const std::optional<LayerTensorName> name = parse_layer_tensor(gguf_name);
  return gguf_name == "output.weight" || (name && name->suffix == "weight" && parts.count(name->part));
}

// blk.N.<part> -> model.layers.N.<HF part>: projections, norms, the router, shared experts,
// and the MTP layer's own tensors (nextn.*). Stacked experts and attn_k_b / attn_v_b are
// handled apart.
const std::map<std::string, std::string>& layer_names() {
  static const std::map<std::string, std::string> names = {{"attn_norm", "input_layernorm"},
                                                           {"ffn_norm", "post_attention_layernorm"},
                                                           {"attn_q_a", "self_attn.q_a_proj"},
                                                           {"attn_q_a_norm", "self_attn.q_a_layernorm"},
                                                           {"attn_q_b", "self_attn.q_b_proj"},
                                                           {"attn_q", "self_attn.q_proj"},
                                                           {"attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"},
                                                           {"attn_kv_a_norm", "self_attn.kv_a_layernorm"},
                                                           {"attn_kv_b", "self_attn.kv_b_proj"},
                                                           {"attn_output", "self_attn.o_proj"},
                                                           {"ffn_gate", "mlp.gate_proj"},
                                                           {"ffn_up", "mlp.up_proj"},
                                                           {"ffn_down", "mlp.down_proj"},
                                                           {"ffn_gate_inp", "mlp.gate"},
                                                           {"ffn_gate_shexp", "mlp.shared_experts.gate_proj"},
                                                           {"ffn_up_shexp", "mlp.shared_experts.up_proj"},
                                                           {"ffn_down_shexp", "mlp.shared_experts.down_proj"},
                                                           {"nextn.eh_proj", "eh_proj"},
                                                           {"nextn.enorm", "enorm"},
                                                           {"nextn.hnorm", "hnorm"},
                                                           {"nextn.shared_head_norm", "shared_head.norm"},
                                                           {"nextn.shared_head_head", "shared_head.head"},
                                                           {"nextn.embed_tokens", "embed_tokens"}};
  return names;
}

// fn(first element, elements, byte offset) over `elements` of `type` in whole blocks, spread
// over the thread pool (a DeepSeek-V3 file converts hundreds of GB at load).
template <typename Fn>
void over_blocks(GgmlType type, int64_t elements, const Fn& fn) {
  const GgmlTypeTraits& traits = *ggml_type_traits(uint32_t(type));
  thread_pool().parallel_for(
      elements / traits.block_size,
      [&](int64_t begin, int64_t end, int) {
        fn(begin * traits.block_size, (end - begin) * traits.block_size, size_t(begin) * traits.block_bytes);
      },
      64);
}

DType plain_dtype(GgmlType type) {
  return type == GgmlType::F32 ? DType::F32 : type == GgmlType::F16 ? DType::F16 : DType::BF16;
}

}  // namespace

json gguf_config_json(const std::vector<std::unique_ptr<GgufFile>>& parts) {
  const Keys general(*parts[0], "");
  const std::string arch = general.string("general.architecture").value_or("");
  MLA_CHECK(arch == "deepseek2", "'{}': general.architecture '{}' is not supported (deepseek2)", general.path(), arch);
  const Keys model(*parts[0], arch + ".");
  const int64_t nextn = model.integer("nextn_predict_layers").value_or(0);
  const int64_t blocks = model.positive("block_count");
  MLA_CHECK(nextn >= 0 && nextn < blocks, "'{}': nextn_predict_layers {} of {} blocks", general.path(), nextn, blocks);
  const std::string pre = general.string("tokenizer.ggml.pre").value_or("");
  json config = {{"architectures", {"DeepseekV3ForCausalLM"}},
                 {"model_type", pre == "kimi-k2" ? "kimi_k2" : "deepseek_v3"},
                 {"num_hidden_layers", blocks - nextn},
                 {"num_nextn_predict_layers", nextn},
                 {"hidden_size", model.positive("embedding_length")},
                 {"intermediate_size", model.positive("feed_forward_length")},
                 {"max_position_embeddings", model.positive("context_length")},
                 {"rope_theta", model.number("rope.freq_base").value_or(10000.0)},
                 {"rope_scaling", rope_scaling(model)},
                 {"tie_word_embeddings", find_tensor(parts, "output.weight") == nullptr}};
  const std::optional<double> eps = model.number("attention.layer_norm_rms_epsilon");
  MLA_CHECK(eps, "'{}': key '{}.attention.layer_norm_rms_epsilon' is missing", general.path(), arch);
  config["rms_norm_eps"] = *eps;
  add_attention(model, config);
  add_experts(model, config);
  const GgufTensor* embedding = find_tensor(parts, "token_embd.weight");
  MLA_CHECK(embedding && embedding->shape.size() == 2, "'{}': no two-dimensional tensor 'token_embd.weight'",
            general.path());
  config["vocab_size"] = model.integer("vocab_size").value_or(embedding->shape[0]);
  for (const char* key : {"bos_token_id", "eos_token_id"})
    if (const auto id = general.integer(std::string("tokenizer.ggml.") + key)) config[key] = *id;
  bool int8_projections = false;
  for (const auto& part : parts)
    for (const GgufTensor& tensor : part->tensors())
      int8_projections |= ggml_int8_group(tensor.type) > 0 && is_projection(tensor.name);
  if (int8_projections) {  // compressed-tensors INT8, each weight's group given by its scales' shape
    const json weights = {
        {"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"}, {"group_size", 32}};
    config["quantization_config"] = {{"quant_method", "compressed-tensors"},
                                     {"format", "int-quantized"},
                                     {"config_groups", {{"q8_0", {{"weights", weights}}}}}};
  }
  return config;
}

uint8_t* GgufTensors::own(size_t bytes) { return owned_.emplace_back(bytes).data(); }

// `tensor` (or expert `slice` of a stacked one) as HF's `name`: in place when F32, F16 or BF16;
// projections of a symmetric type (ggml_int8_group) as I8 codes and name's weight_scale, fp32
// per group; everything else as F32 values.
void GgufTensors::add(const std::string& name, const GgufTensor& tensor, int64_t slice, bool projection) {
  std::vector<int64_t> shape = tensor.shape;
  const uint8_t* data = tensor.data;
  size_t nbytes = tensor.nbytes;
  if (slice >= 0) {
    shape.erase(shape.begin());
    nbytes /= size_t(tensor.shape[0]);
    data += size_t(slice) * nbytes;
  }
  int64_t numel = 1;
  for (int64_t dim : shape) numel *= dim;
  TensorInfo info{name, DType::F32, shape, data, nbytes, tensor.file, tensor.name};
  if (!is_ggml_quantized(tensor.type)) {
    info.dtype = plain_dtype(tensor.type);
  } else if (const int64_t group = ggml_int8_group(tensor.type); group > 0 && projection) {
    int8_t* codes = reinterpret_cast<int8_t*>(own(size_t(numel)));
    float* scales = reinterpret_cast<float*>(own(size_t(numel / group) * 4));
    over_blocks(tensor.type, numel, [&](int64_t first, int64_t count, size_t offset) {
      ggml_to_int8(tensor.type, data + offset, count, codes + first, scales + first / group);
    });
    info =
        TensorInfo{name, DType::I8, shape, reinterpret_cast<uint8_t*>(codes), size_t(numel), tensor.file, tensor.name};
    const std::string scale_name = name.substr(0, name.size() - std::string(".weight").size()) + ".weight_scale";
    std::vector<int64_t> scale_shape = shape;
    scale_shape.back() /= group;
    tensors_.emplace(scale_name, TensorInfo{scale_name, DType::F32, scale_shape, reinterpret_cast<uint8_t*>(scales),
                                            size_t(numel / group) * 4, tensor.file, tensor.name});
  } else {
    float* values = reinterpret_cast<float*>(own(size_t(numel) * 4));
    over_blocks(tensor.type, numel, [&](int64_t first, int64_t count, size_t offset) {
      dequantize_ggml(tensor.type, data + offset, count, values + first);
    });
    info.data = reinterpret_cast<uint8_t*>(values);
    info.nbytes = size_t(numel) * 4;
  }
  MLA_CHECK(tensors_.emplace(name, std::move(info)).second, "'{}': two tensors are '{}'", tensor.file, name);
}

// llama.cpp's MLA layout splits kv_b_proj [heads x (nope + v), rank] into attn_k_b [heads, rank,
// nope] (transposed) and attn_v_b [heads, v, rank]; this puts them back together, in F32.
void GgufTensors::add_kv_b(const std::string& prefix, const GgufTensor& k_b, const GgufTensor& v_b) {
  const int64_t heads = config_["num_attention_heads"].get<int64_t>(), rank = config_["kv_lora_rank"].get<int64_t>();
  const int64_t nope = config_["qk_nope_head_dim"].get<int64_t>(), v = config_["v_head_dim"].get<int64_t>();
  MLA_CHECK(
      k_b.shape == std::vector<int64_t>({heads, rank, nope}) && v_b.shape == std::vector<int64_t>({heads, v, rank}),
      "'{}': '{}' {} and '{}' {} are not [heads, kv_lora_rank, qk_nope_head_dim] = [{}, {}, {}] and "
      "[heads, v_head_dim, kv_lora_rank] = [{}, {}, {}]",
      k_b.file, k_b.name, shape_string(k_b.shape), v_b.name, shape_string(v_b.shape), heads, rank, nope, heads, v,
      rank);
  std::vector<float> k(size_t(k_b.numel())), vv(size_t(v_b.numel()));
  dequantize_ggml(k_b.type, k_b.data, k_b.numel(), k.data());
  dequantize_ggml(v_b.type, v_b.data, v_b.numel(), vv.data());
  const int64_t rows = heads * (nope + v);
  float* kv_b = reinterpret_cast<float*>(own(size_t(rows * rank) * 4));
  for (int64_t h = 0; h < heads; ++h) {
    float* head = kv_b + h * (nope + v) * rank;
    for (int64_t i = 0; i < nope; ++i)
      for (int64_t c = 0; c < rank; ++c) head[i * rank + c] = k[size_t((h * rank + c) * nope + i)];
    std::memcpy(head + nope * rank, vv.data() + h * v * rank, size_t(v * rank) * 4);
  }
  const std::string name = prefix + "self_attn.kv_b_proj.weight";
  tensors_.emplace(name, TensorInfo{name,
                                    DType::F32,
                                    {rows, rank},
                                    reinterpret_cast<uint8_t*>(kv_b),
                                    size_t(rows * rank) * 4,
                                    k_b.file,
                                    k_b.name + " and " + v_b.name});
}

// One blk.N.* tensor: experts split into views, attn_k_b / attn_v_b kept for add_kv_b, the
// rest under their HF names.
void GgufTensors::add_layer_tensor(const GgufTensor& tensor, SplitKvB& split_kv_b) {
  const std::optional<LayerTensorName> name = parse_layer_tensor(tensor.name);
  MLA_CHECK(name, "'{}': tensor '{}' is not one of deepseek2's", tensor.file, tensor.name);
  const std::string prefix = "model.layers." + name->layer + ".";
  static const std::set<std::string> experts = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
  if (name->part == "exp_probs_b" && name->suffix == "bias") {
    add(prefix + "mlp.gate.e_score_correction_bias", tensor, -1, false);
  } else if (name->part == "attn_k_b" || name->part == "attn_v_b") {
    (name->part == "attn_k_b" ? split_kv_b[prefix].first : split_kv_b[prefix].second) = &tensor;
  } else if (experts.count(name->part) && name->suffix == "weight") {
    MLA_CHECK(tensor.shape.size() == 3, "'{}': tensor '{}' of shape {} is not [experts, rows, columns]", tensor.file,
              tensor.name, shape_string(tensor.shape));
    const std::string projection = name->part.substr(4, name->part.size() - 9) + "_proj";  // ffn_X_exps -> X_proj
    for (int64_t e = 0; e < tensor.shape[0]; ++e)
      add(prefix + "mlp.experts." + std::to_string(e) + "." + projection + ".weight", tensor, e, true);
  } else {
    const auto found = layer_names().find(name->part);
    MLA_CHECK(found != layer_names().end() && name->suffix == "weight", "'{}': tensor '{}' is not one of deepseek2's",
              tensor.file, tensor.name);
    add(prefix + found->second + ".weight", tensor, -1, is_projection(tensor.name));
  }
}

GgufTensors::GgufTensors(const std::string& path) : parts_(open_gguf(path)), config_(gguf_config_json(parts_)) {
  static const std::map<std::string, std::string> top = {{"token_embd.weight", "model.embed_tokens.weight"},
                                                         {"output_norm.weight", "model.norm.weight"},
                                                         {"output.weight", "lm_head.weight"}};
  SplitKvB split_kv_b;
  size_t file_bytes = 0, tensor_count = 0, done = 0;
  for (const auto& part : parts_) {
    file_bytes += part->file().size();
    tensor_count += part->tensors().size();
  }
  for (const auto& part : parts_)
    for (const GgufTensor& tensor : part->tensors()) {
      if (file_bytes > (size_t(1) << 30) &&
          ++done % std::max<size_t>(tensor_count / 10, 1) == 0)  // long: show progress
        spdlog::info("reading '{}': {}/{} tensors ({}%)", path, done, tensor_count, done * 100 / tensor_count);
      if (const auto found = top.find(tensor.name); found != top.end())
        add(found->second, tensor, -1, is_projection(tensor.name));
      else
        add_layer_tensor(tensor, split_kv_b);
    }
  for (const auto& [prefix, pair] : split_kv_b) {
    if (tensors_.count(prefix + "self_attn.kv_b_proj.weight")) continue;  // ik_llama.cpp keeps attn_kv_b beside them
    MLA_CHECK(pair.first && pair.second, "'{}': layer '{}' has only one of attn_k_b and attn_v_b", path, prefix);
    add_kv_b(prefix, *pair.first, *pair.second);
  }
}

void GgufTensors::release_pages(const void* begin, size_t bytes) const {
  for (const auto& part : parts_)
    if (part->file().contains(begin)) part->file().release(begin, bytes);
}

}  // namespace mlaserve
