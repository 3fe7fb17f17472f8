// NUMA placement: the kernel's list format, the sysfs topology, the plan on made-up machines
// (every rank inside its nodes, ranks of a node on disjoint CPUs), and binding threads and
// memory on this machine (its node 0), read back through sched_getaffinity / get_mempolicy.
#include "base/numa.h"

#include <gtest/gtest.h>
#include <numaif.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "base/error.h"
#include "io/linear_weight.h"
#include "test_util.h"

namespace mlaserve {
namespace {

TEST(Numa, ParsesAndFormatsTheKernelsLists) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5"), std::vector<int>{5});
  EXPECT_EQ(parse_cpu_list("\n"), std::vector<int>{});
  EXPECT_EQ(parse_cpu_list(""), std::vector<int>{});
  for (const char* bad : {"1-", "a", "3-1", "1,,2", "0-3x", "-2"}) EXPECT_THROW(parse_cpu_list(bad), Error) << bad;
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({7}), "7");
  EXPECT_EQ(format_cpu_list({}), "");
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(Numa, ReadsTheTopologyFromSysfs) {
  testing::TempDir dir;
  write_file(dir.file("online"), "0-2\n");
  for (const auto& [node, cpus] :
       std::vector<std::pair<int, std::string>>{{0, "0-3,8-11\n"}, {1, "4-7\n"}, {2, "\n"}}) {
    std::filesystem::create_directory(dir.file("node" + std::to_string(node)));
    write_file(dir.file("node" + std::to_string(node) + "/cpulist"), cpus);
  }
  const NumaTopology topology = NumaTopology::read(dir.path());
  ASSERT_EQ(topology.nodes.size(), 2u);  // node 2 has memory only
  EXPECT_EQ(topology.nodes[0].id, 0);
  EXPECT_EQ(topology.nodes[0].cpus, (std::vector<int>{0, 1, 2, 3, 8, 9, 10, 11}));
  EXPECT_EQ(topology.nodes[1].id, 1);
  EXPECT_EQ(topology.nodes[1].cpus, (std::vector<int>{4, 5, 6, 7}));
  const NumaTopology without = NumaTopology::read(dir.file("missing"));
  ASSERT_EQ(without.nodes.size(), 1u);
  EXPECT_FALSE(without.nodes[0].cpus.empty());
  EXPECT_GE(NumaTopology::read().nodes.size(), 1u);
}

NumaTopology machine(int nodes, int cpus_per_node) {
  NumaTopology topology;
  for (int node = 0; node < nodes; ++node) {
    topology.nodes.push_back({node, {}});
    for (int cpu = 0; cpu < cpus_per_node; ++cpu) topology.nodes.back().cpus.push_back(node * cpus_per_node + cpu);
  }
  return topology;
}

std::vector<int> range(int begin, int end) {
  std::vector<int> ids;
  for (int id = begin; id < end; ++id) ids.push_back(id);
  return ids;
}

TEST(Numa, PlansRanksOverNodes) {
  const NumaTopology two = machine(2, 4);
  const std::vector<int> all = range(0, 8);
  const auto plan = [&](int rank, int ranks, NumaMode mode = NumaMode::Auto) {
    return plan_rank_placement(two, all, rank, ranks, mode);
  };
  // One rank: every node, its memory interleaved over them.
  EXPECT_EQ(plan(0, 1).nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan(0, 1).cpus, all);
  EXPECT_EQ(plan(0, 1).describe(), "nodes 0-1 interleaved, CPUs 0-7");
  // A rank a node; then ranks sharing a node split its CPUs.
  EXPECT_EQ(plan(1, 2).nodes, std::vector<int>{1});
  EXPECT_EQ(plan(1, 2).cpus, range(4, 8));
  EXPECT_EQ(plan(1, 2).describe(), "node 1, CPUs 4-7");
  const std::vector<std::vector<int>> four = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(plan(rank, 4).cpus, four[size_t(rank)]) << rank;
    EXPECT_EQ(plan(rank, 4).nodes, std::vector<int>{rank / 2}) << rank;
  }
  EXPECT_EQ(plan(0, 3).cpus, range(0, 2));  // ranks 0, 1 on node 0, rank 2 alone on node 1
  EXPECT_EQ(plan(1, 3).cpus, range(2, 4));
  EXPECT_EQ(plan(2, 3).cpus, range(4, 8));
  // Five ranks on a node of four CPUs: each bound to the whole node, not pinned to a CPU.
  EXPECT_EQ(plan(3, 10).cpus, range(0, 4));
  EXPECT_EQ(plan(3, 10).nodes, std::vector<int>{0});
  // auto does nothing on one node (or one node left by the launcher); bind does; off never.
  EXPECT_FALSE(plan(0, 2, NumaMode::Off).placed());
  EXPECT_FALSE(plan_rank_placement(machine(1, 8), all, 1, 2, NumaMode::Auto).placed());
  EXPECT_EQ(plan_rank_placement(machine(1, 8), all, 1, 2, NumaMode::Bind).cpus, range(4, 8));
  EXPECT_FALSE(plan_rank_placement(two, range(4, 8), 0, 1, NumaMode::Auto).placed());
  EXPECT_EQ(plan_rank_placement(two, range(4, 8), 0, 1, NumaMode::Bind).describe(), "node 1, CPUs 4-7");
  // Two ranks on four nodes: two nodes each.
  EXPECT_EQ(plan_rank_placement(machine(4, 2), range(0, 8), 1, 2, NumaMode::Auto).nodes, (std::vector<int>{2, 3}));
  EXPECT_THROW(plan(2, 2), Error);
}

// Every rank lies inside its nodes and the allowed CPUs, and ranks that split a node hold
// disjoint CPUs covering it.
TEST(Numa, PlacesEveryRankInsideItsNodes) {
  for (int nodes : {1, 2, 3, 4, 8})
    for (int cpus_per_node : {1, 2, 6})
      for (int ranks = 1; ranks <= 12; ++ranks) {
        const NumaTopology topology = machine(nodes, cpus_per_node);
        const std::vector<int> allowed = range(0, nodes * cpus_per_node);
        std::vector<std::vector<int>> cpus_of_node(static_cast<size_t>(nodes));
        for (int rank = 0; rank < ranks; ++rank) {
          SCOPED_TRACE(::testing::Message()
                       << nodes << " nodes x " << cpus_per_node << " CPUs, rank " << rank << " of " << ranks);
          const RankPlacement placement = plan_rank_placement(topology, allowed, rank, ranks, NumaMode::Bind);
          ASSERT_FALSE(placement.nodes.empty());
          ASSERT_FALSE(placement.cpus.empty());
          for (int cpu : placement.cpus)
            EXPECT_NE(std::find(placement.nodes.begin(), placement.nodes.end(), cpu / cpus_per_node),
                      placement.nodes.end());
          if (placement.nodes.size() == 1 && ranks > nodes)
            for (int cpu : placement.cpus) cpus_of_node[size_t(placement.nodes[0])].push_back(cpu);
        }
        for (int node = 0; node < nodes && ranks > nodes; ++node) {
          const std::vector<int>& held = cpus_of_node[size_t(node)];
          const std::set<int> distinct(held.begin(), held.end());
          const bool split = int(held.size()) == cpus_per_node;  // else each sharer holds the whole node
          EXPECT_TRUE(split ? distinct.size() == held.size() : int(distinct.size()) == cpus_per_node)
              << nodes << " nodes x " << cpus_per_node << " CPUs, " << ranks << " ranks, node " << node;
        }
      }
}

// The calling thread's preferred node (-1 for the default policy).
int preferred_node_of_this_thread() {
  int mode = -1;
  unsigned long mask[16] = {};
  EXPECT_EQ(get_mempolicy(&mode, mask, 1024, nullptr, 0), 0);
  if (mode != MPOL_PREFERRED) return -1;
  for (int node = 0; node < 1024; ++node)
    if (mask[node / 64] >> (node % 64) & 1) return node;
  return -1;
}

TEST(Numa, BindsThreadsAndTheThreadsTheyStart) {
  const NumaTopology topology = NumaTopology::read();
  const std::vector<int> allowed = this_thread_cpus();
  const int ranks = std::min<int>(2, int(topology.nodes[0].cpus.size()));
  for (int rank = 0; rank < ranks; ++rank) {
    const RankPlacement placement = plan_rank_placement(topology, allowed, rank, ranks, NumaMode::Bind);
    std::vector<int> seen_cpus, inherited_cpus;
    int seen_node = -2, inherited_node = -2;
    std::string error = "not run";
    std::thread([&] {
      error = bind_this_thread(placement);
      seen_cpus = this_thread_cpus();
      seen_node = preferred_node_of_this_thread();
      std::thread([&] {
        inherited_cpus = this_thread_cpus();
        inherited_node = preferred_node_of_this_thread();
      }).join();
    }).join();
    EXPECT_EQ(error, "");
    EXPECT_EQ(seen_cpus, placement.cpus) << placement.describe();
    EXPECT_EQ(inherited_cpus, placement.cpus);
    EXPECT_EQ(seen_node, placement.nodes.at(0));
    EXPECT_EQ(inherited_node, placement.nodes.at(0));
  }
  EXPECT_EQ(preferred_node_of_this_thread(), -1);  // the test's own thread is untouched
}

// The policy of the page at `address`, and its preferred node (-1 for none).
std::pair<int, int> policy_at(const void* address) {
  int mode = -1;
  unsigned long mask[16] = {};
  EXPECT_EQ(get_mempolicy(&mode, mask, 1024, const_cast<void*>(address), MPOL_F_ADDR), 0);
  for (int node = 0; node < 1024; ++node)
    if (mask[node / 64] >> (node % 64) & 1) return {mode, node};
  return {mode, -1};
}

TEST(Numa, WeightCopiesLieOnTheirNode) {
  const int node = NumaTopology::read().nodes[0].id;
  WeightCopies placed({node}), unplaced;
  for (size_t bytes : {size_t(100) << 10, size_t(3) << 20}) {  // a shared block, a block of its own
    uint8_t* copy = placed.allocate(bytes);
    std::fill(copy, copy + bytes, uint8_t(7));
    EXPECT_EQ(policy_at(copy), std::make_pair(int(MPOL_PREFERRED), node)) << bytes;
    int on_node = -1;
    ASSERT_EQ(get_mempolicy(&on_node, nullptr, 0, copy, MPOL_F_NODE | MPOL_F_ADDR), 0);
    EXPECT_EQ(on_node, node);
    EXPECT_EQ(policy_at(unplaced.allocate(bytes)).first, MPOL_DEFAULT) << bytes;
  }
  EXPECT_EQ(placed.placement_error(), "");
  // Memory already touched is moved.
  std::vector<uint8_t> touched(size_t(1) << 20, uint8_t(1));
  EXPECT_EQ(place_memory(touched.data(), touched.size(), {node}), "");
  EXPECT_EQ(policy_at(touched.data() + touched.size() / 2).first, MPOL_PREFERRED);
  EXPECT_EQ(place_memory(touched.data(), touched.size(), {}), "");      // no nodes: nothing
  EXPECT_NE(place_memory(touched.data(), touched.size(), {1023}), "");  // a node that is not there
}

}  // namespace
}  // namespace mlaserve
