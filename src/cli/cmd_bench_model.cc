#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "tools/bench/model_bench.h"

namespace mlaserve {

void add_bench_model_command(CLI::App& app) {
  struct Options {
    ModelBenchOptions bench;
    bool json = false;
    ParallelFlags parallel;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("bench-model", "prefill/decode speed against this machine's measured limits");
  cmd->add_option("--model", options->bench.model_dir, "model directory or .gguf file")->required();
  cmd->add_option("-p,--prompt", options->bench.prompt, "prefill tokens")->capture_default_str();
  cmd->add_option("-n,--generate", options->bench.generate, "decode steps")->capture_default_str();
  cmd->add_option("--batch", options->bench.batch, "sequences decoding together")->capture_default_str();
  cmd->add_option("--depth", options->bench.depth,
                  "tokens in the cache before the prefill and the decode (llama-bench's pp512 @ d1024)")
      ->capture_default_str();
  cmd->add_option("--mla-prefill", options->bench.mla_prefill,
                  "the prefill's MLA attention: auto (the cost model's choice) | expanded | absorbed")
      ->check(CLI::IsMember({"auto", "expanded", "absorbed"}))
      ->capture_default_str();
  cmd->add_option("-r,--repetitions", options->bench.repetitions, "runs (medians are reported)")->capture_default_str();
  cmd->add_option("--kv-cache-dtype", options->bench.cache_dtype, "bf16 | fp8 | fp32")
      ->check(CLI::IsMember({"bf16", "fp8", "fp32"}))
      ->capture_default_str();
  cmd->add_option("--num-draft-tokens", options->bench.num_draft_tokens,
                  "also time speculative decoding's verification steps (1 + K positions a sequence, every "
                  "position's logits) against decode steps, alone and at --batch")
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "print one JSON object");
  add_parallel_flags(cmd, options->parallel);
  cmd->callback([options] {
    check_model_bench_options(options->bench);  // before a load that can take minutes
    auto model = load_causal_lm(options->bench.model_dir, activation_quant_from_name(options->parallel.act_quant));
    if (is_mpi_follower()) return follow_rank_zero(*model, executor_options(options->parallel));
    nlohmann::json result;
    {
      auto executor = create_executor(*model, executor_options(options->parallel));
      result = run_model_bench(options->bench, *model, *executor);
    }
    std::fputs(options->json ? (result.dump(2) + "\n").c_str() : model_bench_table(result).c_str(), stdout);
  });
}

}  // namespace mlaserve
