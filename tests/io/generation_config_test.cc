// generation_config.json and config.json's end-of-turn ids and sampling defaults.
#include "io/generation_config.h"

#include <gtest/gtest.h>

#include <fstream>

#include "base/error.h"
#include "test_util.h"

namespace mlaserve {
namespace {

using testing::TempDir;

TEST(GenerationConfig, EosIdsFromBothFilesInOrderOnce) {
  TempDir dir;
  std::ofstream(dir.file("generation_config.json"))
      << R"({"eos_token_id": [163586, 163585], "temperature": 0.6, "top_p": 0.95, "top_k": 40, "do_sample": true})";
  std::ofstream(dir.file("config.json"))
      << R"({"model_type": "kimi_k3", "eos_token_id": 163585, "text_config": {"eos_token_id": 7}})";
  const GenerationConfig generation = load_generation_config(dir.path());
  EXPECT_EQ(generation.eos_token_ids, (std::vector<int32_t>{163586, 163585, 7}));
  EXPECT_EQ(generation.temperature, 0.6);
  EXPECT_EQ(generation.top_p, 0.95);
  EXPECT_EQ(generation.top_k, 40);
  EXPECT_FALSE(generation.min_p.has_value());
}

TEST(GenerationConfig, ConfigAloneOrNothing) {
  TempDir dir;
  EXPECT_TRUE(load_generation_config(dir.path()).eos_token_ids.empty());
  std::ofstream(dir.file("config.json")) << R"({"eos_token_id": 1})";
  const GenerationConfig generation = load_generation_config(dir.path());
  EXPECT_EQ(generation.eos_token_ids, std::vector<int32_t>{1});
  EXPECT_FALSE(generation.temperature.has_value());
}

TEST(GenerationConfig, WrongTypesAreErrorsNamingFileAndKey) {
  TempDir dir;
  std::ofstream(dir.file("generation_config.json")) << R"({"temperature": "hot"})";
  try {
    load_generation_config(dir.path());
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("generation_config.json': 'temperature' must be a number"), std::string::npos)
        << e.what();
  }
  std::ofstream(dir.file("generation_config.json")) << R"({"eos_token_id": ["</s>"]})";
  EXPECT_THROW(load_generation_config(dir.path()), Error);
  std::ofstream(dir.file("generation_config.json")) << "{";
  EXPECT_THROW(load_generation_config(dir.path()), Error);
}

}  // namespace
}  // namespace mlaserve
