#include "io/model_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tools/model_presets.h"

namespace mlaserve {
namespace {

std::string error_of(const nlohmann::json& patch) {
  nlohmann::json config = model_preset("tiny");
  config.merge_patch(patch);
  try {
    parse_model_config(config);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, ParsesPresetAndOptionalKeys) {
  nlohmann::json config = model_preset("mini");
  ModelConfig parsed = parse_model_config(config);
  EXPECT_EQ(parsed.hidden_size, 1024);
  EXPECT_EQ(parsed.q_lora_rank, 384);
  EXPECT_EQ(parsed.kv_latent_dim(), 288);
  EXPECT_FALSE(parsed.rope_scaling.has_value());
  config["q_lora_rank"] = nullptr;
  config["model_type"] = "kimi_k2";
  config["rope_scaling"] = {{"type", "yarn"},
                            {"factor", 40},
                            {"mscale_all_dim", 1.0},
                            {"mscale", 1.0},
                            {"original_max_position_embeddings", 4096}};
  parsed = parse_model_config(config);
  EXPECT_FALSE(parsed.q_lora_rank.has_value());
  ASSERT_TRUE(parsed.rope_scaling.has_value());
  EXPECT_EQ(parsed.rope_scaling->factor, 40);
  const double mscale = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(parsed.softmax_scale(), mscale * mscale / std::sqrt(96.0), 1e-12);
}

TEST(ModelConfig, ErrorsNameTheKey) {
  EXPECT_NE(error_of({{"model_type", "llama"}}).find("model_type 'llama'"), std::string::npos);
  EXPECT_NE(error_of({{"hidden_size", "big"}}).find("'hidden_size' must be an integer"), std::string::npos);
  EXPECT_NE(error_of({{"scoring_func", "relu"}}).find("scoring_func 'relu'"), std::string::npos);
  EXPECT_NE(error_of({{"topk_method", "x"}}).find("topk_method 'x'"), std::string::npos);
  EXPECT_NE(error_of({{"rope_scaling", {{"type", "linear"}, {"factor", 2}}}}).find("rope_scaling.type 'linear'"),
            std::string::npos);
  EXPECT_NE(error_of({{"n_group", 7}}).find("not divisible by n_group"), std::string::npos);
  EXPECT_NE(error_of({{"topk_group", 9}}).find("topk_group"), std::string::npos);
  EXPECT_NE(error_of({{"qk_rope_head_dim", 15}}).find("qk_rope_head_dim"), std::string::npos);
  EXPECT_NE(error_of({{"hidden_act", "gelu"}}).find("hidden_act 'gelu'"), std::string::npos);
  EXPECT_NE(error_of({{"vocab_size", nullptr}}).find("'vocab_size' is missing"), std::string::npos);
  EXPECT_NE(error_of({{"quantization_config", {{"quant_method", "gptq"}}}}).find("quant_method 'gptq'"),
            std::string::npos);
  const auto int8_weights = [](nlohmann::json weights) {
    return nlohmann::json{{"quantization_config",
                           {{"quant_method", "compressed-tensors"},
                            {"format", "int-quantized"},
                            {"config_groups", {{"group_0", {{"weights", weights}}}}}}}};
  };
  EXPECT_EQ(error_of(int8_weights({{"num_bits", 8}, {"strategy", "channel"}})), "");
  EXPECT_EQ(error_of(int8_weights({{"num_bits", 8}, {"strategy", "group"}, {"group_size", 64}})), "");
  EXPECT_NE(error_of(int8_weights({{"num_bits", 4}})).find("8-bit symmetric int"), std::string::npos);
  EXPECT_NE(error_of(int8_weights({{"num_bits", 8}, {"strategy", "tensor"}})).find("channel or group"),
            std::string::npos);
  EXPECT_NE(error_of(int8_weights({{"num_bits", 8}, {"symmetric", false}})).find("config_groups.group_0"),
            std::string::npos);
  EXPECT_NE(error_of(int8_weights({{"num_bits", 8}, {"strategy", "group"}, {"group_size", 0}})).find("group_size"),
            std::string::npos);
  EXPECT_EQ(error_of(nlohmann::json::object()), "");
}

// Sizes that would overflow a product or size a table to them are errors (found by fuzzing).
TEST(ModelConfig, OutOfRangeSizesAreErrors) {
  EXPECT_NE(error_of({{"hidden_size", int64_t(1) << 40}}).find("'hidden_size' 1099511627776 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of({{"vocab_size", uint64_t(1) << 63}}).find("out of range"), std::string::npos);
  EXPECT_NE(error_of({{"num_hidden_layers", 100000}}).find("above 4096"), std::string::npos);
  nlohmann::json kimi = model_preset("kimi-linear-tiny");
  kimi["num_hidden_layers"] = -4;
  try {
    parse_model_config(kimi);
    ADD_FAILURE() << "num_hidden_layers -4 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'num_hidden_layers' -4 is not in [1, 4096]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mlaserve
