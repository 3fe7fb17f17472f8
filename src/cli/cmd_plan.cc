#include <cstdio>
#include <optional>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mmap_file.h"
#include "cli/commands.h"
#include "tools/bench/machine.h"
#include "tools/plan/hardware.h"
#include "tools/plan/planner.h"
#include "tools/plan/predict.h"

namespace mlaserve {
namespace {

struct PlanOptions {
  std::string model = "kimi-k3", weights = "native", kv_cache_dtype = "bf16", hardware = "mi355x", hardware_file,
              measured_file;
  int64_t devices = 8, devices_per_node = 0, tp = 0, context = 8192, concurrency = 1;
  double measured_tok_s = 0, price = 0, inter_node_gb_s = 0;
  int64_t input_len = 1024, output_len = 400, prompt_len = 0, max_concurrency = 0;
  std::string speculative;
  std::optional<int64_t> draft_tokens;
  bool json = false, dump_catalog = false;
};

// Output token throughput from a bench-serve --json file (one run, or the last of a sweep).
double measured_throughput(const std::string& path) {
  nlohmann::json results;
  try {
    results = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("'{}': not valid JSON: {}", path, e.what());
  }
  const nlohmann::json& run = results.contains("runs") ? results["runs"].back() : results;
  MLA_CHECK(run.contains("output_throughput") && run["output_throughput"].is_number(),
            "'{}' has no output_throughput (is it bench-serve --json output?)", path);
  return run["output_throughput"].get<double>();
}

void run_plan(const PlanOptions& options) {
  if (options.dump_catalog) {
    std::puts(hardware_to_json(builtin_hardware()).dump(2).c_str());
    return;
  }
  PlanInput input;
  input.model = load_model_spec(options.model);
  input.weights = options.weights;
  input.kv_cache_dtype = options.kv_cache_dtype;
  input.hardware =
      options.hardware == "this-cpu" ? this_cpu_hardware() : find_hardware(options.hardware, options.hardware_file);
  if (options.inter_node_gb_s > 0) input.hardware.inter_node_gb_s = options.inter_node_gb_s;
  input.devices = options.devices;
  input.devices_per_node = options.devices_per_node;
  input.tp = options.tp;
  input.context = options.context;
  input.concurrency = options.concurrency;
  if (options.measured_tok_s > 0) input.measured_tok_s = options.measured_tok_s;
  if (!options.measured_file.empty()) input.measured_tok_s = measured_throughput(options.measured_file);
  if (options.price > 0) input.price_per_hour = options.price;
  const Plan plan = make_plan(input);
  Workload workload{options.input_len, options.output_len, options.prompt_len, options.max_concurrency, std::nullopt};
  MLA_CHECK(!options.draft_tokens || !options.speculative.empty(), "--num-draft-tokens needs --speculative");
  if (!options.speculative.empty()) workload.speculative = parse_speculative(options.speculative, options.draft_tokens);
  const Prediction prediction = predict(plan, workload);
  if (options.json) {
    nlohmann::json out = plan_to_json(plan);
    out["predicted"] = prediction_to_json(prediction, workload);
    std::puts(out.dump(2).c_str());
  } else {
    std::fputs((plan_to_table(plan) + prediction_to_table(prediction, workload)).c_str(), stdout);
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "memory fit, nodes, roofline speed and cost of a deployment");
  cmd->add_option("--model", options->model,
                  "deepseek-v3 | kimi-k2 | kimi-k3 | path to config.json, a model directory or a .gguf file")
      ->capture_default_str();
  cmd->add_option("--weights", options->weights, "native | bf16 | fp8 | int8 | int4[:group] | mxfp4")
      ->capture_default_str();
  std::string hardware_names;
  for (const Hardware& hardware : builtin_hardware())
    hardware_names += (hardware_names.empty() ? "" : " | ") + hardware.name;
  cmd->add_option("--kv-cache-dtype", options->kv_cache_dtype,
                  "bf16 | fp8 | fp32: the deployment's latent cache (vLLM's, SGLang's and ATOM's --kv-cache-dtype fp8 "
                  "halves it)")
      ->capture_default_str();
  cmd->add_option(
         "--hardware", options->hardware,
         hardware_names +
             " | this-cpu (this machine, probed), or a --hardware-file entry (--dump-catalog prints the catalog)")
      ->capture_default_str();
  cmd->add_option("--hardware-file", options->hardware_file,
                  "JSON array of entries adding to or overriding the catalog");
  cmd->add_option("--devices", options->devices, "devices in total")->capture_default_str();
  cmd->add_option("--devices-per-node", options->devices_per_node, "devices per node (default: the hardware's)");
  cmd->add_option("--tp", options->tp, "attention tensor-parallel size (default: devices per node)");
  cmd->add_option("--context", options->context, "tokens per sequence")->capture_default_str();
  cmd->add_option("--concurrency", options->concurrency, "sequences in flight (the decode batch)")
      ->capture_default_str();
  cmd->add_option("--input-len", options->input_len, "prompt tokens a request of the predicted workload has")
      ->capture_default_str();
  cmd->add_option("--output-len", options->output_len, "tokens a request of the predicted workload generates")
      ->capture_default_str();
  cmd->add_option("--prompt-len", options->prompt_len, "predict the time to first token of one prompt this long");
  cmd->add_option("--max-concurrency", options->max_concurrency,
                  "the largest concurrency the throughput sweep tries (default: as many sequences as the cache holds)");
  cmd->add_option(
      "--speculative", options->speculative,
      "dspark | dflash | mtp | eagle | ngram, each with :ACCEPT for a mean acceptance length (eagle and ngram "
      "need one)");
  cmd->add_option("--num-draft-tokens", options->draft_tokens,
                  "tokens the draft proposes a step (default: dspark and dflash 7, mtp 1, eagle 3, ngram 4)");
  cmd->add_option("--inter-node-gb-s", options->inter_node_gb_s,
                  "network bandwidth per device between nodes (default: the hardware's)");
  cmd->add_option("--measured", options->measured_file, "bench-serve --json output: its output token throughput");
  cmd->add_option("--measured-tok-s", options->measured_tok_s, "a measured throughput in tokens/s");
  cmd->add_option("--price", options->price, "$ per device-hour (default: the catalog's)");
  cmd->add_flag("--json", options->json, "print JSON");
  cmd->add_flag("--dump-catalog", options->dump_catalog, "print the built-in hardware catalog as JSON");
  cmd->callback([options] { run_plan(*options); });
}

}  // namespace mlaserve
