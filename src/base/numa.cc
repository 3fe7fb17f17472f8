#include "base/numa.h"

#include <numaif.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/error.h"

namespace mlaserve {
namespace {

// Node masks for mbind / set_mempolicy: up to 1024 nodes (the kernel's largest MAX_NUMNODES).
constexpr int kMaxNodes = 1024;
struct NodeMask {
  unsigned long bits[kMaxNodes / (8 * sizeof(unsigned long))] = {};
  explicit NodeMask(const std::vector<int>& nodes) {
    for (int node : nodes) {
      MLA_CHECK(node >= 0 && node < kMaxNodes, "NUMA node {} is outside [0, {})", node, kMaxNodes);
      bits[size_t(node) / (8 * sizeof(unsigned long))] |= 1UL << (size_t(node) % (8 * sizeof(unsigned long)));
    }
  }
  // The kernel reads maxnode - 1 bits (a historical off-by-one that libnuma also allows for).
  static constexpr unsigned long kMaxNode = kMaxNodes + 1;
};

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string errno_text(const char* call) { return fmt::format("{}: {}", call, std::strerror(errno)); }

}  // namespace

std::vector<int> parse_cpu_list(const std::string& list) {
  std::vector<int> ids;
  size_t at = 0;
  const auto number = [&]() {
    MLA_CHECK(at < list.size() && std::isdigit(static_cast<unsigned char>(list[at])), "malformed CPU or node list '{}'",
              list);
    int value = 0;
    for (; at < list.size() && std::isdigit(static_cast<unsigned char>(list[at])); ++at) {
      value = value * 10 + (list[at] - '0');
      MLA_CHECK(value < (1 << 20), "id too large in CPU or node list '{}'", list);
    }
    return value;
  };
  const size_t end = list.find_last_not_of(" \n\t") + 1;  // 0 when blank
  while (at < end) {
    const int first = number();
    int last = first;
    if (at < end && list[at] == '-') {
      ++at;
      last = number();
    }
    MLA_CHECK(last >= first, "reversed range {}-{} in CPU or node list '{}'", first, last, list);
    for (int id = first; id <= last; ++id) ids.push_back(id);
    MLA_CHECK(at == end || list[at] == ',', "malformed CPU or node list '{}'", list);
    if (at < end) ++at;
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::string format_cpu_list(const std::vector<int>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? std::to_string(ids[i]) : fmt::format("{}-{}", ids[i], ids[j]);
    i = j + 1;
  }
  return out;
}

NumaTopology NumaTopology::read(const std::string& root) {
  NumaTopology topology;
  if (!std::filesystem::exists(root + "/online")) {
    NumaNode all;
    for (int cpu = 0; cpu < int(std::max(1u, std::thread::hardware_concurrency())); ++cpu) all.cpus.push_back(cpu);
    topology.nodes.push_back(all);
    return topology;
  }
  for (int id : parse_cpu_list(read_first_line(root + "/online"))) {
    NumaNode node{id, parse_cpu_list(read_first_line(fmt::format("{}/node{}/cpulist", root, id)))};
    if (!node.cpus.empty()) topology.nodes.push_back(std::move(node));
  }
  return topology;
}

NumaMode parse_numa_mode(const std::string& name) {
  if (name == "auto") return NumaMode::Auto;
  if (name == "bind") return NumaMode::Bind;
  if (name == "off") return NumaMode::Off;
  throw Error(fmt::format("unknown --numa mode '{}' (auto, bind or off)", name));
}

std::string RankPlacement::describe() const {
  if (!placed()) return "not placed";
  const std::string threads = cpus.empty() ? "threads unbound" : "CPUs " + format_cpu_list(cpus);
  if (nodes.size() == 1) return fmt::format("node {}, {}", nodes[0], threads);
  return fmt::format("nodes {} interleaved, {}", format_cpu_list(nodes), threads);
}

RankPlacement plan_rank_placement(const NumaTopology& topology, const std::vector<int>& allowed_cpus, int rank,
                                  int ranks, NumaMode mode) {
  MLA_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "rank {} outside {} ranks", rank, ranks);
  if (mode == NumaMode::Off) return {};
  std::vector<NumaNode> usable;  // the nodes with allowed CPUs, and only those CPUs
  for (const NumaNode& node : topology.nodes) {
    NumaNode own{node.id, {}};
    for (int cpu : node.cpus)
      if (std::binary_search(allowed_cpus.begin(), allowed_cpus.end(), cpu)) own.cpus.push_back(cpu);
    if (!own.cpus.empty()) usable.push_back(std::move(own));
  }
  const int n_nodes = int(usable.size());
  if (n_nodes == 0 || (mode == NumaMode::Auto && n_nodes < 2)) return {};
  RankPlacement placement;
  if (ranks <= n_nodes) {  // a group of whole nodes
    for (int i = rank * n_nodes / ranks; i < (rank + 1) * n_nodes / ranks; ++i) {
      placement.nodes.push_back(usable[size_t(i)].id);
      placement.cpus.insert(placement.cpus.end(), usable[size_t(i)].cpus.begin(), usable[size_t(i)].cpus.end());
    }
    std::sort(placement.cpus.begin(), placement.cpus.end());
    return placement;
  }
  const int node = rank * n_nodes / ranks;  // a share of one node
  int first = 0, sharing = 0;               // the node's ranks: [first, first + sharing)
  while (first * n_nodes / ranks < node) ++first;
  while (first + sharing < ranks && (first + sharing) * n_nodes / ranks == node) ++sharing;
  const std::vector<int>& cpus = usable[size_t(node)].cpus;
  const int n_cpus = int(cpus.size()), share = rank - first;
  placement.nodes = {usable[size_t(node)].id};
  if (n_cpus < sharing)
    placement.cpus = cpus;
  else
    placement.cpus.assign(cpus.begin() + share * n_cpus / sharing, cpus.begin() + (share + 1) * n_cpus / sharing);
  return placement;
}

std::vector<int> this_thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  MLA_CHECK(sched_getaffinity(0, sizeof(set), &set) == 0, "{}", errno_text("sched_getaffinity"));
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

std::string bind_this_thread(const RankPlacement& placement) {
  if (!placement.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : placement.cpus)
      if (cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) return errno_text("sched_setaffinity");
  }
  if (placement.nodes.size() == 1) {
    const NodeMask mask(placement.nodes);
    if (set_mempolicy(MPOL_PREFERRED, mask.bits, NodeMask::kMaxNode) != 0) return errno_text("set_mempolicy");
  }
  return "";
}

std::string place_memory(void* begin, size_t bytes, const std::vector<int>& nodes) {
  if (nodes.empty()) return "";
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (uintptr_t(begin) + page - 1) / page * page, end = (uintptr_t(begin) + bytes) / page * page;
  if (end <= first) return "";
  const NodeMask mask(nodes);
  const int mode = nodes.size() == 1 ? MPOL_PREFERRED : MPOL_INTERLEAVE;
  if (mbind(reinterpret_cast<void*>(first), end - first, mode, mask.bits, NodeMask::kMaxNode, MPOL_MF_MOVE) != 0)
    return errno_text("mbind");
  return "";
}

}  // namespace mlaserve
