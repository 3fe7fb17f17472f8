#include "model/shard_layers.h"

#include <spdlog/spdlog.h>

#include "base/error.h"
#include "base/numa.h"
#include "io/requantize.h"
#include "kernels/dispatch.h"

namespace mlaserve {
namespace {

int64_t split_alignment(const LinearWeight& weight) {
  return weight.format == WeightFormat::Int4Group || weight.format == WeightFormat::Mxfp4 ? weight.group_size : 1;
}

// Columns [begin, end) of a weight: left a view when it is about to be copied (once, from the
// view), else compacted (compact_columns).
LinearWeight column_slice(const LinearWeight& weight, int64_t begin, int64_t end, const ShardContext& context) {
  const LinearWeight view = weight.cols_view(begin, end);
  if (context.spec.copy_weights) return view;
  return compact_columns(view, context.storage, context.source);
}

MlpWeights mlp_copied_if_asked(MlpWeights mlp, const ShardContext& context) {
  for (LinearWeight* weight : {&mlp.gate_proj, &mlp.up_proj, &mlp.down_proj})
    *weight = copied_if_asked(*weight, context);
  return mlp;
}

}  // namespace

LinearWeight copied_if_asked(const LinearWeight& weight, const ShardContext& context, bool may_requantize) {
  if (!context.spec.copy_weights) return weight;
  if (weight.format == WeightFormat::BF16 && context.spec.requantize_q4 && may_requantize &&
      weight.cols % kRequantizeGroup == 0)
    return requantize_int4(weight, context.storage, repacks_4bit_panels(kernel_config()), context.source);
  if (weight.format == WeightFormat::BF16) return repack_bf16_panels(weight, context.storage, context.source);
  if (repacks_4bit_panels(kernel_config())) {
    const LinearWeight panels = repack_4bit_panels(weight, context.storage, context.source);
    if (is_4bit_panels(panels.format)) return panels;
  }
  return copy_weight(weight, context.storage, context.source);
}

void log_shard_progress(const ShardSpec& spec, size_t layers_done, size_t layers) {
  if (spec.copy_weights && layers >= 8 && layers_done * 4 / layers != (layers_done - 1) * 4 / layers)
    spdlog::info("rank {} of {}: {} of {} layers sharded and repacked", spec.rank, spec.size, layers_done, layers);
}

void log_shard_copies(const ShardSpec& spec, const WeightCopies& copies, double seconds) {
  const size_t bytes = copies.bytes();
  if (bytes == 0) return;
  const char* how = !spec.copy_weights                     ? "column slices"
                    : repacks_4bit_panels(kernel_config()) ? "BF16, INT4 and MXFP4 in panels, other formats as stored"
                                                           : "BF16 panels, other formats as stored";
  spdlog::info("rank {} of {}: {:.2f} GB of weights copied from the checkpoint ({}) in {:.1f} s", spec.rank, spec.size,
               double(bytes) / 1e9, how, seconds);
  if (!copies.placement_error().empty())
    spdlog::warn(
        "rank {} of {}: its weight copies could not be placed on NUMA node(s) {} ({}); they stay where first "
        "touched",
        spec.rank, spec.size, format_cpu_list(copies.numa_nodes()), copies.placement_error());
}

MlpWeights shard_mlp_weights(const MlpWeights& mlp, const ShardContext& context) {
  const ShardSpec& spec = context.spec;
  const Range part = even_split(mlp.gate_proj.rows, spec.size, spec.rank, split_alignment(mlp.down_proj));
  MLA_CHECK(part.size() > 0, "an MLP of width {} cannot be split {} ways", mlp.gate_proj.rows, spec.size);
  return mlp_copied_if_asked(
      MlpWeights{mlp.gate_proj.rows_view(part.begin, part.end), mlp.up_proj.rows_view(part.begin, part.end),
                 column_slice(mlp.down_proj, part.begin, part.end, context), mlp.activation},
      context);
}

MlaWeights shard_mla_weights(const MlaWeights& mla, const ModelConfig& config, const Range& heads,
                             const ShardContext& context) {
  const int64_t qk = config.qk_head_dim(), kv = config.qk_nope_head_dim + config.v_head_dim, v = config.v_head_dim;
  MlaWeights out = mla;  // q_a_proj, kv_a_proj_with_mqa and the norms are replicated
  if (mla.q_proj) out.q_proj = mla.q_proj->rows_view(heads.begin * qk, heads.end * qk);
  if (mla.q_b_proj) out.q_b_proj = mla.q_b_proj->rows_view(heads.begin * qk, heads.end * qk);
  out.kv_b_proj = mla.kv_b_proj.rows_view(heads.begin * kv, heads.end * kv);
  out.o_proj = column_slice(mla.o_proj, heads.begin * v, heads.end * v, context);
  if (mla.g_proj) out.g_proj = mla.g_proj->rows_view(heads.begin * v, heads.end * v);
  // Into panels: the projections split by heads, and the replicated q_a / kv_a only on a
  // single rank (ranks of a split would each hold a copy of them). Absorbed decode gets its own
  // panels of W_UK transposed and W_UV from kv_b_proj's rows, then kv_b_proj itself is copied
  // for the expanded form (its mapped pages released, so resident memory does not grow): as
  // panels, the prefill's expansion runs on the panel GEMMs (with --bf16-terms 1 on vdpbf16ps)
  // rather than packing the rows a tile at a time for the fp32 GEMM.
  for (auto* weight : {&out.q_proj, &out.q_b_proj, &out.g_proj})
    if (*weight) **weight = copied_if_asked(**weight, context);
  out.o_proj = copied_if_asked(out.o_proj, context);
  if (context.spec.copy_weights) {
    add_absorbed_panels(out, config.qk_nope_head_dim, config.v_head_dim, context.storage);
    // Never requantized: the expanded form would otherwise compute with other weights than
    // the absorbed panels above.
    out.kv_b_proj = copied_if_asked(out.kv_b_proj, context, false);
  }
  if (context.spec.size == 1) {
    if (out.q_a_proj) *out.q_a_proj = copied_if_asked(*out.q_a_proj, context);
    out.kv_a_proj_with_mqa = copied_if_asked(out.kv_a_proj_with_mqa, context);
  }
  return out;
}

MoeWeights shard_moe_weights(const MoeWeights& moe, const ShardContext& context) {
  const ShardSpec& spec = context.spec;
  // The router and its bias are replicated (every rank routes alike), and LatentMoE's
  // projections and norm.
  MoeWeights out = moe;
  if (spec.expert_parallel) {
    const Range experts = even_split(int64_t(moe.experts.size()), spec.size, spec.rank);
    out.first_owned_expert = experts.begin;
    out.end_owned_expert = experts.end;
    for (int64_t e = experts.begin; e < experts.end; ++e)
      out.experts[size_t(e)] = mlp_copied_if_asked(moe.experts[size_t(e)], context);
  } else {
    for (auto& expert : out.experts) expert = shard_mlp_weights(expert, context);
  }
  if (moe.shared_experts) out.shared_experts = shard_mlp_weights(*moe.shared_experts, context);
  return out;
}

KdaWeights shard_kda_weights(const KdaWeights& kda, const KdaShape& shape, const Range& heads,
                             const ShardContext& context) {
  const int64_t first = heads.begin * shape.head_dim, end = heads.end * shape.head_dim;
  KdaWeights out = kda;
  out.q_conv1d = kda.q_conv1d + first * shape.conv_kernel;
  out.k_conv1d = kda.k_conv1d + first * shape.conv_kernel;
  out.v_conv1d = kda.v_conv1d + first * shape.conv_kernel;
  out.q_proj = kda.q_proj.rows_view(first, end);
  out.k_proj = kda.k_proj.rows_view(first, end);
  out.v_proj = kda.v_proj.rows_view(first, end);
  out.f_b_proj = kda.f_b_proj.rows_view(first, end);
  out.b_proj = kda.b_proj.rows_view(heads.begin, heads.end);
  if (kda.g_proj)
    out.g_proj = kda.g_proj->rows_view(first, end);
  else
    out.g_b_proj = kda.g_b_proj.rows_view(first, end);
  out.o_proj = compact_columns(kda.o_proj.cols_view(first, end), context.storage, context.source);
  out.A_log = kda.A_log + heads.begin;
  out.dt_bias = kda.dt_bias + first;
  return out;
}

}  // namespace mlaserve
