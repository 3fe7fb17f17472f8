#include "base/mmap_file.h"

#include <gtest/gtest.h>

namespace mlaserve {

// The kernel's node-list format (Documentation/ABI: /sys/devices/system/node/online).
TEST(NumaNodes, CountsTheKernelsNodeList) {
  EXPECT_EQ(count_numa_nodes("0"), 1);
  EXPECT_EQ(count_numa_nodes("0-1\n"), 2);
  EXPECT_EQ(count_numa_nodes("0,2-3"), 3);
  EXPECT_EQ(count_numa_nodes("0-7,16-23"), 16);
  EXPECT_EQ(count_numa_nodes(""), 0);
  EXPECT_GE(numa_node_count(), 1);
}

}  // namespace mlaserve
