#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mmap_file.h"
#include "cli/commands.h"
#include "tools/make_model.h"
#include "tools/model_presets.h"

namespace mlaserve {

void add_make_model_command(CLI::App& app) {
  struct Options {
    std::string preset = "tiny", config_file, override_json, dtype = "bf16", out_dir;
    uint64_t seed = 0;
    int64_t group_size = 32;
    double shard_mb = 4096;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("make-model", "write a random-weight model in the Hugging Face layout");
  cmd->add_option("--preset", options->preset, kModelPresetNames)->capture_default_str();
  cmd->add_option("--config", options->config_file, "a config.json to use instead of a preset");
  cmd->add_option("--override", options->override_json,
                  "JSON object merged into the config where it keeps each key (Kimi K3: text_config); unknown keys "
                  "are errors");
  cmd->add_option("--dtype", options->dtype,
                  "f32 | bf16 | fp8 | int8 | int4 | mxfp4 (fp8: every linear layer but router and head, block-scaled; "
                  "int8: W8A8 per channel, all but the head; int4, mxfp4: the routed experts)")
      ->capture_default_str();
  cmd->add_option("--group-size", options->group_size, "INT4 group size")->capture_default_str();
  cmd->add_option("--seed", options->seed, "random seed")->capture_default_str();
  cmd->add_option("--shard-mb", options->shard_mb, "max shard size in MB (0: one file)")->capture_default_str();
  cmd->add_option("OUT_DIR", options->out_dir, "output directory")->required();
  cmd->callback([options] {
    MakeModelOptions make;
    try {
      make.config = options->config_file.empty() ? model_preset(options->preset)
                                                 : nlohmann::json::parse(read_text_file(options->config_file));
      if (!options->override_json.empty())
        make.config = apply_overrides(std::move(make.config), nlohmann::json::parse(options->override_json));
    } catch (const nlohmann::json::exception& e) {
      fail("make-model: invalid JSON in --config or --override: {}", e.what());
    }
    make.dtype = storage_dtype_from_name(options->dtype);
    make.int4_group_size = options->group_size;
    make.seed = options->seed;
    make.shard_bytes = size_t(options->shard_mb * 1e6);
    make.out_dir = options->out_dir;
    make_model(make);
  });
}

}  // namespace mlaserve
