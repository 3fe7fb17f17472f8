#include "kernels/dispatch.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.h"

namespace mlaserve {
namespace {

LinearWeight weight_of(WeightFormat format, int64_t group_size = 32) {
  LinearWeight weight;
  weight.format = format;
  weight.rows = 256;
  weight.cols = weight.stored_cols = 1024;
  weight.group_size = group_size;
  weight.block_rows = weight.block_cols = 128;
  return weight;
}

// A config of the build `isa` (its token limits), with the units and options given.
KernelConfig config_of(bool amx, bool bf16_dot, int terms, Isa isa = Isa::Avx512) {
  KernelConfig config;
  config.isa = isa;
  // Each build's limits (bf16_panel_decode.h, block_scaled_dot.h): the kernel_tests of a build
  // check them against the build's constants.
  config.bf16_panel_few_tokens = isa == Isa::Avx512 ? 15 : 3;
  config.block_scaled_max_tokens = isa == Isa::Avx512 ? 15 : 1;
  config.amx = amx;
  config.bf16_dot = bf16_dot;
  config.four_bit_panels = true;
  config.bf16_activation_terms = terms;
  return config;
}

struct Row {
  WeightFormat format;
  int64_t tokens;
  LinearKernel want;
};

void expect_table(const KernelConfig& config, const std::vector<Row>& rows, const std::string& label) {
  for (const Row& row : rows)
    EXPECT_EQ(linear_kernel_name(choose_linear_kernel(weight_of(row.format), row.tokens, config)),
              std::string(linear_kernel_name(row.want)))
        << label << ": " << weight_format_name(row.format) << ", " << row.tokens << " tokens";
}

// The vector units alone (no AMX, exact fp32 activations): each format's few-token kernel,
// then its GEMM from the documented token counts, with each build's limits.
TEST(Dispatch, LinearKernelsOnTheVectorUnits) {
  using K = LinearKernel;
  using F = WeightFormat;
  for (Isa isa : kIsas) {
    const KernelConfig config = config_of(false, isa == Isa::Avx512, 3, isa);
    expect_table(config,
                 {{F::F32, 1, K::OneTokenDots},
                  {F::F32, 63, K::FewTokenDots},
                  {F::F32, 64, K::PackedGemm},
                  {F::BF16, 1, K::OneTokenDots},
                  {F::BF16, 64, K::PackedGemm},
                  {F::Fp8Block, 1, K::BlockScaledDots},
                  {F::Fp8Block, config.block_scaled_max_tokens, K::BlockScaledDots},
                  {F::Fp8Block, 16, K::PackedGemm},
                  {F::Int8Block, 16, K::PackedGemm},
                  {F::Int4Group, 1, K::Q8Dots},
                  {F::Int4Group, 15, K::Q8Dots},
                  {F::Int4Group, 16, K::IntegerGemm},
                  {F::Mxfp4, 3, K::Q8Dots},
                  {F::Mxfp4, 512, K::IntegerGemm},
                  {F::Int4Panels, 8, K::FourBitPanelDots},
                  {F::Int4Panels, 9, K::IntegerGemm},
                  {F::Mxfp4Panels, 1, K::FourBitPanelDots},
                  {F::Bf16Panels, 1, K::Bf16PanelStream},
                  {F::Bf16Panels, config.bf16_panel_few_tokens, K::Bf16PanelStream},
                  {F::Bf16Panels, config.bf16_panel_few_tokens + 1, K::Bf16PanelGemm},
                  {F::Bf16Panels, 512, K::Bf16PanelGemm}},
                 isa_name(isa));
  }
  // The avx2 build's FP8 dots take one token: two already take the few-token dots.
  expect_table(config_of(false, false, 3, Isa::Avx2), {{F::Fp8Block, 2, K::FewTokenDots}}, "avx2");
}

// --bf16-terms 1 sends BF16 panels of 2+ tokens to vdpbf16ps where it is built and AMX is not
// used; AMX takes BF16 panels, FP8 and INT8 from 16 tokens and row-major BF16 from 64, and the
// 4-bit integer GEMM runs on its tiles.
TEST(Dispatch, Bf16DotAndAmxTakeTheirShare) {
  using K = LinearKernel;
  using F = WeightFormat;
  expect_table(
      config_of(false, true, 1),
      {{F::Bf16Panels, 1, K::Bf16PanelStream}, {F::Bf16Panels, 2, K::Bf16Dot}, {F::Bf16Panels, 512, K::Bf16Dot}},
      "bf16 dot");
  expect_table(config_of(false, false, 1), {{F::Bf16Panels, 512, K::Bf16PanelGemm}}, "bf16 dot not built");
  expect_table(config_of(true, true, 1),
               {{F::Bf16Panels, 2, K::Bf16PanelStream},
                {F::Bf16Panels, 16, K::AmxTiles},
                {F::Fp8Block, 15, K::BlockScaledDots},
                {F::Fp8Block, 16, K::AmxTiles},
                {F::BF16, 63, K::FewTokenDots},
                {F::BF16, 64, K::AmxTiles},
                {F::Int4Group, 16, K::IntegerGemmAmx},
                {F::Mxfp4, 4, K::Q8Dots}},
               "amx");
}

// INT4 whose groups are not whole int8 blocks, or with --act-quant off, dequantizes rows.
TEST(Dispatch, FourBitWithoutInt8ActivationsDequantizesRows) {
  const KernelConfig config = config_of(false, true, 3);
  EXPECT_EQ(choose_linear_kernel(weight_of(WeightFormat::Int4Group, 16), 1, config), LinearKernel::OneTokenDots);
  LinearWeight exact = weight_of(WeightFormat::Mxfp4);
  exact.activation_quant = ActivationQuant::Off;
  EXPECT_EQ(choose_linear_kernel(exact, 4, config), LinearKernel::FewTokenDots);
  EXPECT_EQ(choose_linear_kernel(exact, 64, config), LinearKernel::PackedGemm);
}

TEST(Dispatch, PanelsRepackedOnlyWithoutAmx) {
  EXPECT_TRUE(repacks_4bit_panels(config_of(false, false, 3)));
  EXPECT_FALSE(repacks_4bit_panels(config_of(true, false, 3)));
  KernelConfig not_built = config_of(false, false, 3);
  not_built.four_bit_panels = false;
  EXPECT_FALSE(repacks_4bit_panels(not_built));
  EXPECT_TRUE(prefill_attention_on_bf16_dot(config_of(false, true, 1)));
  EXPECT_FALSE(prefill_attention_on_bf16_dot(config_of(false, true, 2)));
  EXPECT_FALSE(prefill_attention_on_bf16_dot(config_of(true, true, 1)));
}

TEST(Dispatch, KdaChunksLongRunsOnly) {
  KernelConfig config;
  config.kda_chunk = 32;
  EXPECT_EQ(kda_chunk_tokens(15, config), 0);
  EXPECT_EQ(kda_chunk_tokens(16, config), 32);
  config.kda_chunk = 0;
  EXPECT_EQ(kda_chunk_tokens(500, config), 0);
}

TEST(Dispatch, OptionsOutOfRangeAreRefused) {
  EXPECT_THROW(host_kernel_config(0), Error);
  EXPECT_THROW(host_kernel_config(4), Error);
  EXPECT_THROW(host_kernel_config(3, MlaDecodeKernel::Auto, -1), Error);
  EXPECT_EQ(host_kernel_config(2).bf16_activation_terms, 2);
}

TEST(Isa, NamesRoundTripAndUnknownOnesAreRefused) {
  for (Isa isa : kIsas) EXPECT_EQ(isa_from_name(isa_name(isa)), isa);
  EXPECT_THROW(isa_from_name("avx10"), Error);
}

// MLASERVE_ISA picks the build; without it the process takes the best this CPU runs.
TEST(Isa, ProcessIsaFollowsMlaserveIsa) {
  const char* set = std::getenv("MLASERVE_ISA");
  const std::string saved = set ? set : "";
  ASSERT_TRUE(host_runs(Isa::Avx2));
  setenv("MLASERVE_ISA", "avx2", 1);
  EXPECT_EQ(process_isa(), Isa::Avx2);
  EXPECT_EQ(host_kernel_config().isa, Isa::Avx2);
  EXPECT_FALSE(host_kernel_config().bf16_dot);
  setenv("MLASERVE_ISA", "sse2", 1);
  EXPECT_THROW(process_isa(), Error);
  unsetenv("MLASERVE_ISA");
  EXPECT_EQ(process_isa(), host_runs(Isa::Avx512) ? Isa::Avx512 : Isa::Avx2);
  if (!host_runs(Isa::Avx512)) {
    setenv("MLASERVE_ISA", "avx512", 1);
    EXPECT_THROW(process_isa(), Error);
    KernelConfig config = kernel_config();
    config.isa = Isa::Avx512;
    EXPECT_THROW(use_kernel_config(config), Error);
  }
  if (set)
    setenv("MLASERVE_ISA", saved.c_str(), 1);
  else
    unsetenv("MLASERVE_ISA");
}

// A scoped config is the process's for its scope, and the one before is back after it.
TEST(Dispatch, ScopedConfigRestoresTheOneBefore) {
  const int before = kernel_config().bf16_activation_terms;
  {
    KernelConfig config = kernel_config();
    config.bf16_activation_terms = before == 1 ? 2 : 1;
    const ScopedKernelConfig use(config);
    EXPECT_EQ(kernel_config().bf16_activation_terms, config.bf16_activation_terms);
  }
  EXPECT_EQ(kernel_config().bf16_activation_terms, before);
}

}  // namespace
}  // namespace mlaserve
