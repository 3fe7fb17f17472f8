// Absorbed MLA attention over the latent cache, the decode hot path: MQA with one
// kv_lora_rank + qk_rope_head_dim key per cached position shared by every head,
//   score[h, s] = scale * (q_latent[h] . c[s] + q_pe[h] . k_pe[s]),
//   out_latent[h] = sum_s softmax(score[h])[s] * c[s].
// Two kernels: a generic one that walks the cache once per head, and a head-blocked one
// (blocks of 4, 8 or 16 heads) that reads each cached row once per block and keeps the
// block's softmax online (flash-decoding, positions split over the threads). Other head
// counts (12 per rank is Kimi K3 at TP 8) are either padded with zero queries to the next
// supported count and sliced back, or run generic; choose_mla_decode_kernel (dispatch.h) picks.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/isa_namespace.h"
#include "kernels/latent_cache_view.h"
#include "kernels/weight.h"

namespace mlaserve {

struct MlaAbsorbedParams {
  const float* q_latent = nullptr;  // [n_queries, n_heads, kv_lora_rank]
  const float* q_pe = nullptr;      // [n_queries, n_heads, qk_rope_head_dim], rotated
  float* out_latent = nullptr;      // [n_queries, n_heads, kv_lora_rank]
  LatentCacheView cache;
  int64_t layer = 0;
  int64_t n_queries = 0;
  int64_t first_position = 0;  // query i attends to positions [0, first_position + i]
  int64_t n_heads = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_rope_head_dim = 0;
  float softmax_scale = 1.0f;
};

enum class MlaDecodeKernel { Auto, Blocked, Padded, Generic };
const char* mla_decode_kernel_name(MlaDecodeKernel kernel);
MlaDecodeKernel mla_decode_kernel_from_name(const char* name);  // auto | padded | generic; throws

// True for 4, 8, 16 and multiples of 16. mla_padded_heads: the next such count.
bool mla_blocked_supports(int64_t n_heads);
int64_t mla_padded_heads(int64_t n_heads);

}  // namespace mlaserve

namespace MLASERVE_KERNELS_NS {

// Whether a block of 16 heads with these params can run on the AMX tile unit: built with AMX,
// the blocked kernel's bf16 products, a key width of whole 32-value steps.
bool mla_amx_tiles_take(const MlaAbsorbedParams& params);

// True when the blocked kernel multiplies in bf16 for these params: a bf16 or fp8 cache on a host
// with AVX512_BF16 (rank a multiple of 16, even rope width). Queries and softmax weights are
// then rounded to bf16 (relative error up to 2^-9 a product); otherwise every product is fp32.
bool mla_blocked_bf16_products(const MlaAbsorbedParams& params);

// The sequences of a decode step together (one kv_lora_rank and head count), on the kernel
// choose_mla_decode_kernel picks: the blocked kernel splits every sequence's work over the threads in one pass; the
// generic one runs them in turn. `read_next`: at most two byte ranges the caller reads next
// (the weights after the attention), each read by its threads in equal parts in order; where
// the blocked kernel computes in fp32 each thread prefetches its parts, a line every few
// columns of its products (so more the longer the cache), instead of memory idling while
// the attention computes. A hint: the results do not depend on it.
void mla_absorbed_attention(std::span<const MlaAbsorbedParams> batch, std::span<const ByteRange> read_next = {});
inline void mla_absorbed_attention(const MlaAbsorbedParams& params) { mla_absorbed_attention(std::span(&params, 1)); }
void mla_absorbed_generic(const MlaAbsorbedParams& params);
// The blocked kernel (n_heads supported), blocks of 16 heads on the AMX tiles where `amx` and
// mla_amx_tiles_take; the padded one runs it on zero queries appended up to mla_padded_heads.
void mla_absorbed_blocked(std::span<const MlaAbsorbedParams> batch, std::span<const ByteRange> read_next, bool amx);
void mla_absorbed_padded(std::span<const MlaAbsorbedParams> batch, std::span<const ByteRange> read_next, bool amx);

}  // namespace MLASERVE_KERNELS_NS
