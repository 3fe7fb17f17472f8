// Microbenchmark of one MoE layer's forward (router, routed and shared experts, combine) at the
// `mini` preset's sizes and routing (its config.json: hidden 1024, 64 routed experts of 256 as
// BF16 panels, as loaded, one shared, top 6 of 4 groups of 8). Arguments: tokens (1: decode; 8:
// a batch-8 decode step) and the experts' format (0 BF16 panels; 1 INT4, 2 INT4 panels, 3
// MXFP4, 4 MXFP4 panels: the 4-bit weights row-major as stored, or repacked as models load them
// on AVX2 and AVX-512 VNNI hosts without AMX). weight_GB/s is the bytes of router, shared and chosen experts read
// per second (each chosen expert once per call), to be set against linear_bench's
// BM_ReadBandwidth of the same run.
//   build/bench/moe_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <random>
#include <vector>

#include "io/model_config.h"
#include "kernels/dispatch.h"
#include "model/moe.h"
#include "random_weight.h"
#include "tools/model_presets.h"

namespace mlaserve {
namespace {

using bench::RandomWeight;

constexpr int kLayers = 8;      // ~790 MB of experts: from memory, not from L3
constexpr int kInputSets = 64;  // different tokens each call, so the chosen experts vary

const ModelConfig& mini() {
  static const ModelConfig config = parse_model_config(model_preset("mini"));
  return config;
}

// The layers' weights, owned here: one expert drawn, every other a copy of it in memory of its
// own; the routers drawn per layer so the layers choose differently.
struct MoeLayers {
  std::vector<RandomWeight> owned;
  std::vector<float> correction_bias;
  std::vector<MoeWeights> layers;

  explicit MoeLayers(WeightFormat expert_format) {
    const int64_t hidden = mini().hidden_size, experts = mini().n_routed_experts;
    const int64_t intermediate = mini().moe_intermediate_size;
    const int64_t per_layer = 3 * (experts + 1) + 1;  // gate, up, down of each expert; the router
    owned.reserve(size_t(2 + kLayers * per_layer));   // no reallocation: copies are made from owned[0..1]
    const size_t gate_up = owned.size();
    owned.emplace_back(expert_format, intermediate, hidden);
    owned.emplace_back(expert_format, hidden, intermediate);
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    correction_bias.resize(size_t(experts));
    for (auto& bias : correction_bias) bias = normal(rng);
    for (int layer = 0; layer < kLayers; ++layer) {
      MoeWeights& moe = layers.emplace_back();
      owned.emplace_back(WeightFormat::BF16, experts, hidden);
      auto* router = reinterpret_cast<uint16_t*>(owned.back().data.data());
      for (int64_t i = 0; i < experts * hidden; ++i) router[i] = f32_to_bf16(normal(rng));
      moe.gate = owned.back().weight;
      moe.e_score_correction_bias = correction_bias.data();
      for (int64_t e = 0; e <= experts; ++e) {
        MlpWeights mlp;
        mlp.gate_proj = owned.emplace_back(owned[gate_up]).weight;
        mlp.up_proj = owned.emplace_back(owned[gate_up]).weight;
        mlp.down_proj = owned.emplace_back(owned[gate_up + 1]).weight;
        if (e < experts)
          moe.experts.push_back(mlp);
        else
          moe.shared_experts = mlp;
      }
    }
  }
};

constexpr WeightFormat kExpertFormats[] = {WeightFormat::Bf16Panels, WeightFormat::Int4Group, WeightFormat::Int4Panels,
                                           WeightFormat::Mxfp4, WeightFormat::Mxfp4Panels};

void BM_MoeLayer(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  const WeightFormat format = kExpertFormats[state.range(1)];
  if (is_4bit_panels(format) && !repacks_4bit_panels(kernel_config()))
    return state.SkipWithError("4-bit panels need AVX2 or AVX-512 VNNI, and no AMX");
  static std::map<WeightFormat, std::unique_ptr<MoeLayers>> built;  // each format's layers drawn once
  if (!built[format]) built[format] = std::make_unique<MoeLayers>(format);
  const MoeLayers& weights = *built[format];
  const RouterParams router = router_params(mini());
  const int64_t hidden = mini().hidden_size;
  const std::vector<float> x = bench::random_activations(kInputSets * tokens * hidden);
  std::vector<float> out(size_t(tokens * hidden));
  const MoeWeights& first = weights.layers.front();
  const int64_t fixed_bytes = int64_t(first.gate.bytes() + first.shared_experts->bytes());
  const int64_t routed_before = routed_expert_bytes_read();
  int64_t calls = 0;
  for (auto _ : state) {
    const MoeWeights& layer = weights.layers[size_t(calls % kLayers)];
    moe_forward(router, layer, x.data() + (calls % kInputSets) * tokens * hidden, tokens, out.data());
    benchmark::DoNotOptimize(out.data());
    ++calls;
  }
  const double routed = double(routed_expert_bytes_read() - routed_before);
  state.counters["weight_GB/s"] = benchmark::Counter(routed + double(calls * fixed_bytes), benchmark::Counter::kIsRate);
  state.counters["experts"] = routed / double(calls) / double(first.experts.front().bytes());
}

BENCHMARK(BM_MoeLayer)->ArgsProduct({{1, 8}, {0, 1, 2, 3, 4}})->UseRealTime();

}  // namespace
}  // namespace mlaserve

BENCHMARK_MAIN();
