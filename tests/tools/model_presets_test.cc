// make-model --override: keys land where the config keeps them (Kimi K3: text_config), and a
// key the config does not have is refused by name.
#include "tools/model_presets.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "io/model_config.h"

namespace mlaserve {
namespace {

std::string override_error(const std::string& preset, const char* overrides) {
  try {
    apply_overrides(model_preset(preset), nlohmann::json::parse(overrides));
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ApplyOverrides, KimiK3KeysGoIntoTextConfig) {
  const auto config =
      apply_overrides(model_preset("kimi-k3-tiny"), {{"attn_res_block_size", 3}, {"latent_moe_use_norm", false}});
  EXPECT_FALSE(config.contains("attn_res_block_size"));
  const ModelConfig parsed = parse_model_config(config);
  EXPECT_EQ(parsed.attn_res_block_size, 3);
  EXPECT_FALSE(parsed.latent_moe_use_norm);
}

TEST(ApplyOverrides, KeyAtBothLevelsIsPatchedAtBoth) {
  const auto config = apply_overrides(model_preset("kimi-k3-tiny"), {{"eos_token_id", 7}});
  EXPECT_EQ(config["eos_token_id"], 7);
  EXPECT_EQ(config["text_config"]["eos_token_id"], 7);
}

TEST(ApplyOverrides, NestedObjectsMergeKeyByKey) {
  const auto config = apply_overrides(model_preset("kimi-linear-tiny"),
                                      nlohmann::json::parse(R"({"linear_attn_config": {"full_attn_layers": [1, 3]}})"));
  EXPECT_EQ(config["linear_attn_config"]["full_attn_layers"], nlohmann::json::parse("[1, 3]"));
  EXPECT_EQ(config["linear_attn_config"]["num_heads"], 4);  // kept
}

TEST(ApplyOverrides, NullRemovesAKeyAndAnObjectReplacesANull) {
  const auto config = apply_overrides(
      model_preset("tiny"), nlohmann::json::parse(R"({"q_lora_rank": null, "rope_scaling": {"type": "yarn"}})"));
  EXPECT_FALSE(config.contains("q_lora_rank"));
  EXPECT_EQ(config["rope_scaling"]["type"], "yarn");
}

TEST(ApplyOverrides, UnknownKeysAreErrorsNamingThem) {
  EXPECT_EQ(override_error("tiny", R"({"num_hiden_layers": 2})"),
            "--override: config.json has no key 'num_hiden_layers'");
  EXPECT_EQ(override_error("kimi-k3-tiny", R"({"n_routed_experts": 8})"),
            "--override: config.json (nor its text_config) has no key 'n_routed_experts'");
  EXPECT_EQ(override_error("kimi-k3-tiny", R"({"linear_attn_config": {"heads": 8}})"),
            "--override: 'linear_attn_config' has no key 'heads'");
  EXPECT_EQ(override_error("tiny", "[1]"), "--override: config.json must be a JSON object, got [1]");
}

}  // namespace
}  // namespace mlaserve
