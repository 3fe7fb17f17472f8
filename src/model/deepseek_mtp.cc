#include "model/deepseek_mtp.h"

#include <vector>

#include "base/error.h"
#include "kernels/linear.h"
#include "kernels/norm.h"

namespace mlaserve {

DeepseekMtp::DeepseekMtp(std::shared_ptr<ModelStorage> storage, const NextTokenWeights& weights,
                         LinearWeight embed_tokens, LinearWeight lm_head)
    : storage_(std::move(storage)),
      weights_(weights),
      embed_tokens_(std::move(embed_tokens)),
      lm_head_(std::move(lm_head)),
      rope_(config().qk_rope_head_dim, config().rope_theta, config().rope_scaling),
      mla_shape_(mla_shape_of(config())),
      router_(router_params(config())) {}

void DeepseekMtp::forward(std::span<const ForwardSequence> batch, const float* hidden, float* states,
                          float* logits) const {
  const ModelConfig& config = this->config();
  const int64_t width = config.hidden_size;
  const double eps = config.rms_norm_eps;
  thread_local BatchLayout layout;
  layout_batch(batch, layout);
  const int64_t n_tokens = layout.n_tokens;
  thread_local std::vector<float> inputs, residual, normed, mixed;  // reused from step to step
  inputs.resize(size_t(n_tokens * 2 * width));  // [n_tokens, 2 x hidden]: enorm(embedding), hnorm(state)
  residual.resize(size_t(n_tokens * width));
  normed.resize(residual.size());
  mixed.resize(residual.size());
  embed_vocab_slice(embed_tokens_, VocabSlice::whole(config.vocab_size), config.vocab_size, width, batch,
                    residual.data(), nullptr);
  rms_norm(residual.data(), width, weights_.enorm, n_tokens, width, eps, inputs.data(), 2 * width);
  rms_norm(hidden, width, weights_.hnorm, n_tokens, width, eps, inputs.data() + width, 2 * width);
  linear(weights_.eh_proj, inputs.data(), n_tokens, residual.data());
  const DecoderLayerWeights& layer = weights_.layer;
  rms_norm(residual.data(), width, layer.input_layernorm, n_tokens, width, eps, normed.data(), width);
  mla_forward(mla_shape_, layer.self_attn, rope_, MlaInput{normed.data(), n_tokens, layout.sequences, 0}, mixed.data());
  add_rms_norm(residual.data(), mixed.data(), layer.post_attention_layernorm, n_tokens, width, eps, normed.data());
  moe_forward(router_, *layer.moe, normed.data(), n_tokens, mixed.data());
  for (size_t i = 0; i < residual.size(); ++i) residual[i] += mixed[i];
  rms_norm(residual.data(), width, weights_.shared_head_norm, n_tokens, width, eps, states, width);
  const int64_t n_out = int64_t(layout.logit_tokens.size());
  for (int64_t r = 0; r < n_out; ++r)
    std::copy_n(states + layout.logit_tokens[size_t(r)] * width, width, normed.data() + r * width);
  if (n_out > 0) linear(lm_head_, normed.data(), n_out, logits);
}

std::unique_ptr<DeepseekMtp> next_token_module(const CausalLM& model) {
  const auto* deepseek = dynamic_cast<const DeepseekV3Model*>(&model);
  MLA_CHECK(deepseek != nullptr, "{} has no multi-token-prediction layer (only DeepSeek-V3-family models do)",
            model.config().model_type);
  const DeepseekV3Weights& weights = deepseek->weights();
  MLA_CHECK(weights.next_token.has_value(),
            "the model has no multi-token-prediction layer (num_nextn_predict_layers is 0 in its config.json)");
  return std::make_unique<DeepseekMtp>(deepseek->storage(), *weights.next_token, weights.embed_tokens, weights.lm_head);
}

}  // namespace mlaserve
