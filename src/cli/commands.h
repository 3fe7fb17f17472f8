// Subcommands of the mlaserve binary. Each registers its options and callback on the app.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/executor.h"

namespace mlaserve {

void add_make_model_command(CLI::App& app);
void add_logits_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_bench_serve_command(CLI::App& app);
void add_bench_model_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);

// How a command loads and places the model (--tp, --ep, --no-repack, --numa, --mlock,
// --act-quant), shared by the commands that run one.
struct ParallelFlags {
  int tp = 1;
  bool ep = false;
  double comm_timeout_s = 120;
  bool repack = true;               // weights copied out of the checkpoint at load (ShardSpec::copy_weights)
  bool mlock = false;               // each rank's weights locked in RAM (ShardSpec::lock_weights)
  std::string numa = "auto";        // parse_numa_mode: auto | bind | off
  std::string act_quant = "int8";   // activation_quant_from_name: int8 | off
  std::string requantize = "none";  // none | q4 (ShardSpec::requantize_q4)
};
void add_parallel_flags(CLI::App* cmd, ParallelFlags& flags);
// The executor the flags ask for (create_executor).
ExecutorOptions executor_options(const ParallelFlags& flags);

// Speculative decoding (--speculative, --num-draft-tokens), shared by serve and generate.
struct SpeculativeFlags {
  std::string speculative;  // empty: none
  int64_t num_draft_tokens = 4;
  std::string draft_policy = "adaptive";
};
void add_speculative_flags(CLI::App* cmd, SpeculativeFlags& flags);
// Throws Error naming an unknown or unimplemented drafter or a bad count: before a model loads.
void check_speculative_flags(const SpeculativeFlags& flags);
// Sets the engine's drafter.
void apply_speculative_flags(const SpeculativeFlags& flags, const CausalLM& model, EngineConfig& config);

// "1,2,3" -> {1, 2, 3}; throws Error naming the bad element.
std::vector<int32_t> parse_id_list(const std::string& text);
std::vector<int32_t> read_id_file(const std::string& path);  // ids separated by commas, whitespace or both

}  // namespace mlaserve
