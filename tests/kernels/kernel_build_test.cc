// What a kernel build tells the dispatcher (isa_kernels.cc) against the build's own constants.
#include <gtest/gtest.h>

#include "kernels/bf16_dot_gemm.h"
#include "kernels/bf16_panel_decode.h"
#include "kernels/block_scaled_dot.h"
#include "kernels/dispatch.h"
#include "kernels/four_bit_panels.h"

namespace mlaserve {
namespace {

const Isa kThisBuild = isa_from_name(MLASERVE_KERNEL_ISA_NAME);

// The process runs this build (kernel_build_main sets MLASERVE_ISA), and its config carries the
// build's limits: the ones the dispatcher's table test assumes of each build.
TEST(KernelBuild, TheProcessRunsThisBuildWithItsLimits) {
  const KernelConfig& config = kernel_config();
  EXPECT_EQ(config.isa, kThisBuild);
  EXPECT_EQ(config.bf16_panel_few_tokens, kBf16PanelFewTokens);
  EXPECT_EQ(config.block_scaled_max_tokens, block_scaled_max_tokens());
  EXPECT_EQ(config.bf16_dot, bf16_dot_gemm_built());
  EXPECT_EQ(config.four_bit_panels, four_bit_panels_built());
  const bool avx512 = kThisBuild == Isa::Avx512;
  EXPECT_EQ(kBf16PanelFewTokens, avx512 ? 15 : 3);
  EXPECT_EQ(block_scaled_max_tokens(), avx512 ? 15 : 1);
  EXPECT_EQ(bf16_dot_gemm_built(), avx512);
  EXPECT_TRUE(four_bit_panels_built());
  EXPECT_NE(kernel_features(config).find(std::string(isa_name(kThisBuild)) + " build"), std::string::npos);
}

}  // namespace
}  // namespace mlaserve
