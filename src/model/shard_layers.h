// One rank's slice of the layers every family shares (MLA, MLP, MoE) and of KDA: attention
// heads (and their rows/columns) split by heads_of_rank; MLP intermediate columns split
// evenly (at quantization group boundaries); MoE experts split whole under expert parallelism,
// else each expert's columns. Row slices are views into the mapped checkpoint; column slices
// are compacted into `storage` (see compact_columns).
#pragma once
#include <vector>

#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/kda.h"
#include "model/mla.h"
#include "model/moe.h"
#include "parallel/shard_plan.h"

namespace mlaserve {

struct ShardContext {
  const ShardSpec& spec;
  WeightCopies& storage;     // owns the compacted column slices
  const Checkpoint* source;  // the mapped checkpoint whose pages they replace
};

// While repacking (the long part of making a shard of a large model), logs each quarter of
// the layers done.
void log_shard_progress(const ShardSpec& spec, size_t layers_done, size_t layers);

// Logs what a shard copied out of the mapped checkpoint (column slices, repacked panels), if
// anything, and how long making the shard took.
void log_shard_copies(const ShardSpec& spec, const WeightCopies& copies, double seconds);

// The weight copied out of the checkpoint when the spec asks for it (ShardSpec::copy_weights):
// BF16 into the panel layout (or, with requantize_q4, quantized to INT4), other formats as
// stored; else unchanged. may_requantize false keeps a BF16 weight BF16 under requantize_q4.
LinearWeight copied_if_asked(const LinearWeight& weight, const ShardContext& context, bool may_requantize = true);

MlpWeights shard_mlp_weights(const MlpWeights& mlp, const ShardContext& context);
MlaWeights shard_mla_weights(const MlaWeights& mla, const ModelConfig& config, const Range& heads,
                             const ShardContext& context);
MoeWeights shard_moe_weights(const MoeWeights& moe, const ShardContext& context);
// KDA heads [heads.begin, heads.end): the tensors' rows or channels of those heads; A_log and
// dt_bias are offset to them; f_a_proj, g_a_proj and o_norm are replicated.
KdaWeights shard_kda_weights(const KdaWeights& kda, const KdaShape& shape, const Range& heads,
                             const ShardContext& context);

}  // namespace mlaserve
