// Multi-head Latent Attention (DeepSeek-V2/V3), shared by every model family that uses it.
// Per token the cache holds only the normalised compressed KV and the rotated rope key;
// prefill expands per-head K/V through kv_b_proj, decode absorbs kv_b_proj into the query.
#pragma once
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "io/linear_weight.h"
#include "kernels/latent_cache_view.h"
#include "kernels/rope.h"

namespace mlaserve {

struct MlaWeights {
  std::optional<LinearWeight> q_proj;     // [H * qk_head_dim, hidden] when q_lora_rank is null
  std::optional<LinearWeight> q_a_proj;   // [q_lora_rank, hidden]
  const float* q_a_layernorm = nullptr;   // [q_lora_rank]
  std::optional<LinearWeight> q_b_proj;   // [H * qk_head_dim, q_lora_rank]
  LinearWeight kv_a_proj_with_mqa;        // [kv_lora_rank + qk_rope_head_dim, hidden]
  const float* kv_a_layernorm = nullptr;  // [kv_lora_rank]
  LinearWeight kv_b_proj;                 // [H * (qk_nope_head_dim + v_head_dim), kv_lora_rank]
  LinearWeight o_proj;                    // [hidden, H * v_head_dim]
  std::optional<LinearWeight> g_proj;     // Kimi K3 output gate [H * v_head_dim, hidden]
  // Absorbed decode's two products of a BF16 kv_b_proj, copied into panels at load
  // (add_absorbed_panels): absorbed_uk_t [H * kv_lora_rank, qk_nope_head_dim], row
  // h * kv_lora_rank + d = column d of head h's W_UK; absorbed_uv [H * v_head_dim,
  // kv_lora_rank], head h's W_UV rows. kv_b_proj itself serves the expanded form.
  std::optional<LinearWeight> absorbed_uk_t, absorbed_uv;
};

// Which form computes attention: Expanded recomputes per-head K/V for every cached position
// (cheap per query when many queries share them: prefill); Absorbed works in the latent
// space (decode). Both are exact; they differ only in rounding. Auto: the cheaper for the
// sequence's new tokens and cached positions (mla_prefill_path), Absorbed for one token.
enum class MlaPath { Auto, Expanded, Absorbed };
MlaPath mla_path_from_name(const std::string& name);  // auto | expanded | absorbed; throws otherwise
const char* mla_path_name(MlaPath path);

struct MlaShape {
  int64_t hidden_size, n_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
  double norm_eps;       // q_a_layernorm / kv_a_layernorm eps
  float softmax_scale;   // qk_head_dim^-1/2 (times the YaRN mscale^2)
  bool use_rope = true;  // false: Kimi Linear's mla_use_nope, the pe slices stay unrotated
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int64_t latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }
};

// The cheaper form for n_tokens new tokens of a sequence whose cache (of cache_dtype) holds
// start_position positions (cost model in mla.cc): Expanded expands every position through
// kv_b_proj, so a short chunk after a long cached prefix (a prefix-cache hit, a chat's next
// turn, a chunked prefill's later chunks) costs it O(positions) projections where Absorbed
// spends O(tokens); Absorbed's queries walk the latent cache, cheaply on AMX tiles.
MlaPath mla_prefill_path(const MlaShape& shape, int64_t n_tokens, int64_t start_position, CacheDType cache_dtype);

// Keys the expanded form expands and attends at a time (its scratch is sized by this, not by
// the context).
inline constexpr int64_t kMlaExpandedKeyTile = 4096;

// One sequence's slice of a batch: tokens [token_offset, token_offset + n_tokens) of the
// batch are its positions [start_position, start_position + n_tokens).
struct MlaSequence {
  int64_t token_offset = 0;
  int64_t n_tokens = 0;
  int64_t start_position = 0;  // the cache holds [0, start_position)
  LatentCacheView cache;       // capacity >= start_position + n_tokens
  MlaPath path = MlaPath::Auto;
};

struct MlaInput {
  const float* x = nullptr;  // [n_tokens, hidden], the normed layer input of the whole batch
  int64_t n_tokens = 0;
  std::span<const MlaSequence> sequences;
  int64_t layer = 0;
};

// The attention's shape from config.json (all heads; a shard sets its own n_heads).
MlaShape mla_shape_of(const ModelConfig& config);

// prefix.{q_proj | q_a_proj, q_a_layernorm, q_b_proj}, kv_a_proj_with_mqa, kv_a_layernorm,
// kv_b_proj, o_proj, shaped by the config.
MlaWeights load_mla_weights(WeightLoader& loader, const ModelConfig& config, const std::string& prefix);

// Every weight of the layer, absorbed decode's panels included (copies of kv_b_proj's bytes:
// a shard's weight_bytes() counts them twice, and --mlock locks them).
void visit_mla(const MlaWeights& mla, const std::function<void(const LinearWeight&)>& visit);

// Sets absorbed_uk_t and absorbed_uv from a BF16 kv_b_proj (else leaves them unset), copied
// into `storage`: absorbed decode then runs both products through the panel kernels instead of
// reading kv_b_proj's rows transposed.
void add_absorbed_panels(MlaWeights& mla, int64_t qk_nope_head_dim, int64_t v_head_dim, WeightCopies& storage);

// out: [n_tokens, hidden]. Writes the new tokens' latent rows into each sequence's cache.
void mla_forward(const MlaShape& shape, const MlaWeights& weights, const RotaryEmbedding& rope, const MlaInput& input,
                 float* out);

}  // namespace mlaserve
