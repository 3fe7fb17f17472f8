#include "base/error.h"
#include "cli/commands.h"

namespace mlaserve {

ExecutorOptions executor_options(const ParallelFlags& flags) {
  ExecutorOptions options;
  options.ranks = flags.tp;
  options.expert_parallel = flags.ep;
  options.collective_timeout = std::chrono::milliseconds(int64_t(flags.comm_timeout_s * 1000));
  options.copy_weights = flags.repack;
  options.lock_weights = flags.mlock;
  MLA_CHECK(flags.requantize == "none" || flags.requantize == "q4",
            "--requantize {}: only q4 is implemented (q8 would run on the INT8 one-token kernel, slower than BF16 "
            "panels on the CPUs measured so far)",
            flags.requantize);
  MLA_CHECK(flags.requantize == "none" || flags.repack,
            "--requantize quantizes the weights as they are copied: it "
            "needs the copies --no-repack turns off");
  options.requantize_q4 = flags.requantize == "q4";
  options.numa = parse_numa_mode(flags.numa);
  return options;
}

void add_parallel_flags(CLI::App* cmd, ParallelFlags& flags) {
  cmd->add_option("--tp", flags.tp, "ranks (threads) the model is split over: heads, MLP columns, vocab")
      ->capture_default_str();
  cmd->add_flag("--ep", flags.ep, "split the MoE experts over the ranks (expert parallelism) instead of their columns");
  cmd->add_option("--comm-timeout", flags.comm_timeout_s, "seconds a rank waits in a collective before failing")
      ->capture_default_str();
  cmd->add_flag("!--no-repack", flags.repack,
                "keep the weights in the mapped checkpoint (by default each rank copies its MLP, expert and "
                "attention projections and LM head at load, BF16 (and, with AVX2 or AVX-512 VNNI and no AMX, INT4 and "
                "MXFP4) into the CPU kernels' panel layouts and other formats as stored, onto huge pages: faster "
                "prefill and decode, those weights no longer paged "
                "from the file)");
  cmd->add_option("--numa", flags.numa,
                  "auto: on a machine with several NUMA nodes bind each rank's threads to its node(s) (ranks split "
                  "the nodes, or share a node's cores) and put its weight copies and latent cache there, a lone "
                  "rank's interleaved over all nodes; bind: the same on one node; off: leave them to the kernel")
      ->check(CLI::IsMember({"auto", "bind", "off"}))
      ->capture_default_str();
  cmd->add_option("--act-quant", flags.act_quant,
                  "activations of INT4 and MXFP4 layers: int8 (rounded per 32 columns for integer dot products, as "
                  "llama.cpp does; fast) | off (fp32 against the dequantized weights: the exact maths, slower)")
      ->check(CLI::IsMember({"int8", "off"}))
      ->capture_default_str();
  cmd->add_option("--requantize", flags.requantize,
                  "q4: quantize BF16 projections, MLPs and the LM head at load to INT4 groups of 32 (4-bit kernels, "
                  "int8 activations; ~0.56 bytes a weight read instead of 2, as llama.cpp's Q4_0; not exact) | none")
      ->capture_default_str();
  cmd->add_flag("--mlock", flags.mlock,
                "lock each rank's weights in RAM (mlock) so memory pressure cannot page them out; needs "
                "CAP_IPC_LOCK or a large enough `ulimit -l` (warns and runs unlocked otherwise)");
}

}  // namespace mlaserve
