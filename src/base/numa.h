// NUMA placement (`--numa`): which nodes and CPUs each rank of this machine uses, and binding
// threads and memory to them. A rank's weight copies, latent cache and scratch then sit on the
// node whose cores read them, so a two-socket host decodes from both sockets' memory channels
// instead of pulling half its bytes over the inter-socket link (what vLLM's CPU backend does
// with VLLM_CPU_OMP_THREADS_BIND=auto, and llama.cpp approximates with --numa distribute).
// The topology is read from sysfs rather than libnuma's view so that the plan can be tested
// on made-up machines; the binding itself goes through libnuma's mbind / set_mempolicy.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace mlaserve {

// The kernel's CPU / node list format ("0-3,8,10-11\n"), as sorted ids. Throws Error when
// malformed.
std::vector<int> parse_cpu_list(const std::string& list);
// The inverse, with ranges: {0, 1, 2, 3, 8} -> "0-3,8".
std::string format_cpu_list(const std::vector<int>& ids);

struct NumaNode {
  int id = 0;
  std::vector<int> cpus;
};

// The online nodes that have CPUs (memory-only nodes, such as CXL expanders, run no rank).
struct NumaTopology {
  std::vector<NumaNode> nodes;
  // From `root`/online and `root`/nodeN/cpulist; one node holding every CPU where the
  // directory is missing (a kernel without NUMA support).
  static NumaTopology read(const std::string& root = "/sys/devices/system/node");
};

// auto: place ranks only on a machine with more than one node; bind: also on one node (each
// rank on its own share of the CPUs); off: leave threads and pages where the kernel puts them.
enum class NumaMode { Auto, Bind, Off };
NumaMode parse_numa_mode(const std::string& name);  // Error for anything else

// Where one rank runs. cpus: the CPUs its threads are bound to (empty: not bound). nodes: the
// nodes its memory goes to, preferred for one node and interleaved over several (empty: the
// kernel's default, first touch).
struct RankPlacement {
  std::vector<int> cpus;
  std::vector<int> nodes;
  bool placed() const { return !cpus.empty() || !nodes.empty(); }
  std::string describe() const;  // "node 1, CPUs 32-63", "nodes 0-1 interleaved, CPUs 0-127", "not placed"
};

// Rank `rank` of the `ranks` ranks that share this machine, whose threads may run on
// `allowed_cpus` (the process's affinity: all CPUs, or what a launcher such as mpirun or
// numactl left it). With no more ranks than nodes each rank takes a contiguous group of whole
// nodes; with more, ranks fill the nodes in order (rank r on node r * nodes / ranks) and the
// ranks of a node split its CPUs into contiguous shares (not at all when it has fewer CPUs
// than ranks: oversubscribed threads spin better unpinned).
RankPlacement plan_rank_placement(const NumaTopology& topology, const std::vector<int>& allowed_cpus, int rank,
                                  int ranks, NumaMode mode);

// The CPUs the calling thread may run on (sched_getaffinity).
std::vector<int> this_thread_cpus();

// Binds the calling thread to placement.cpus and, for one node, prefers that node for the
// memory it touches first; threads it starts afterwards inherit both. Returns "" or what failed.
std::string bind_this_thread(const RankPlacement& placement);

// Puts the pages of [begin, begin + bytes) on `nodes` (preferred for one node, interleaved over
// several; pages already touched are moved), rounded inward to whole pages. Does nothing for
// no nodes. Returns "" or what failed (mbind's error).
std::string place_memory(void* begin, size_t bytes, const std::vector<int>& nodes);

}  // namespace mlaserve
