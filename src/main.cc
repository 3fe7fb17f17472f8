// mlaserve: one binary, one subcommand per job. Errors a user can cause print one clear line
// and exit 1.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "base/error.h"
#include "base/signals.h"
#include "base/thread_pool.h"
#include "cli/commands.h"
#include "cli/version.h"
#include "kernels/dispatch.h"
#include "parallel/mpi_world.h"

int main(int argc, char** argv) {
  mlaserve::block_shutdown_signals();  // before any thread starts
  mlaserve::init_mpi_if_launched(&argc, &argv);
  spdlog::set_default_logger(spdlog::stderr_color_mt("mlaserve"));
  spdlog::set_pattern("[%H:%M:%S.%e] %^%l%$ %v");
  CLI::App app{"mlaserve: inference engine and server for MLA + MoE models (DeepSeek-V3, Kimi)"};
  app.set_version_flag("--version", mlaserve::version_text());
  app.require_subcommand(1);
  // The global options below are also accepted after a subcommand (`bench-model --threads 2`,
  // as llama-bench spells it).
  app.fallthrough();
  int threads = 0;
  std::string mla_kernel = "auto";
  app.add_option("--threads", threads, "worker threads (default: all cores)");
  app.add_option("--mla-kernel", mla_kernel,
                 "MLA decode kernel for head counts other than 4, 8, 16k: auto | padded | generic")
      ->capture_default_str();
  int bf16_terms = 3;
  app.add_option("--bf16-terms", bf16_terms,
                 "bf16 terms each activation is split into for GEMMs of 16+ tokens on the AMX tile unit, or without "
                 "AMX on vdpbf16ps (BF16 weights from 2 tokens, and the prefill attention): 3 exact (fp32 "
                 "products; without AMX the fp32 kernels), 2 keep 16 significand bits (faster prefill), 1 rounds "
                 "it to bf16 (fastest)")
      ->capture_default_str();
  int64_t kda_chunk = 64;
  app.add_option("--kda-chunk", kda_chunk, "KDA prefill chunk size (0: token-by-token recurrence)")
      ->capture_default_str();
  app.parse_complete_callback([&] {
    mlaserve::set_num_threads(threads);
    mlaserve::use_kernel_config(
        mlaserve::host_kernel_config(bf16_terms, mlaserve::mla_decode_kernel_from_name(mla_kernel.c_str()), kda_chunk));
  });
  mlaserve::add_make_model_command(app);
  mlaserve::add_logits_command(app);
  mlaserve::add_generate_command(app);
  mlaserve::add_serve_command(app);
  mlaserve::add_plan_command(app);
  mlaserve::add_bench_serve_command(app);
  mlaserve::add_bench_model_command(app);
  mlaserve::add_perplexity_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const mlaserve::Error& e) {
    spdlog::error("{}", e.what());
    if (mlaserve::launched_by_mpi()) mlaserve::abort_mpi_job();  // end every rank, not just this one
    return 1;
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    if (mlaserve::launched_by_mpi()) mlaserve::abort_mpi_job();
    return 2;
  }
  mlaserve::finalize_mpi();
  return 0;
}
