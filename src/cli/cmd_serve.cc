#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <csignal>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "base/error.h"
#include "base/signals.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "io/generation_config.h"
#include "kernels/dispatch.h"
#include "parallel/mpi_world.h"
#include "server/http_server.h"

namespace mlaserve {
namespace {

int64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

struct ServeOptions {
  std::string model_dir, chat_template, kv_dtype = "bf16", mla_prefill = "auto", kimi_k3_prompt = "channel";
  std::string prefix_cache_dir;
  double kv_cache_gb = 0, kv_cache_fraction = 0.25, prefix_cache_disk_gb = 16;
  int64_t block_size = 16, max_model_len = 0, shutdown_timeout_s = 30, state_snapshots = -1;
  SchedulerConfig scheduler;
  int64_t max_queue = 256;
  ServerOptions server;
  ParallelFlags parallel;
  SpeculativeFlags speculative;
  bool webui = false, no_webui = false;
};

// What /metrics's mlaserve_model_info says is served (the web page's dashboard shows it).
ModelInfo model_info(const CausalLM& model, const ModelExecutor& executor, const EngineConfig& config) {
  double parameters = 0, bytes = 0;
  std::map<std::string, double> bytes_by_format;
  model.for_each_weight([&](const LinearWeight& weight) {
    parameters += double(weight.rows) * double(weight.cols);
    bytes += double(weight.bytes());
    bytes_by_format[weight_format_name(weight.format)] += double(weight.bytes());
  });
  std::vector<std::pair<double, std::string>> formats;
  for (const auto& [name, format_bytes] : bytes_by_format) formats.emplace_back(-format_bytes, name);
  std::sort(formats.begin(), formats.end());
  std::string weight_format;
  for (const auto& [negative_bytes, name] : formats)
    weight_format +=
        fmt::format("{}{} {:.0f}%", weight_format.empty() ? "" : ", ", name, -100 * negative_bytes / bytes);
  return {{"model_type", model.config().model_type},
          {"parameters", fmt::format("{:.0f}", parameters)},
          {"weight_bytes", fmt::format("{:.0f}", bytes)},
          {"weight_format", weight_format},
          {"max_model_len", std::to_string(config.max_model_len)},
          {"ranks", executor.describe()},
          {"kernels", kernel_features(kernel_config())},
          {"speculative", config.drafter ? config.drafter->describe() : "off"}};
}

// Every rank keeps a full latent cache, so with R ranks on this machine the budget is split R ways.
// Recurrent (KDA) state: one slot per running sequence, the prefix-cache snapshots and, with a
// drafter, each verifying sequence's copy from before its step (rejected drafts roll back to
// it), taken from the cache budget. Sets config.state_snapshots; returns the state's bytes.
double state_slot_bytes(const ServeOptions& options, const ModelConfig& model, double budget, EngineConfig& config) {
  config.state_snapshots = options.state_snapshots >= 0 ? options.state_snapshots : options.scheduler.max_num_seqs;
  const int64_t backups = options.speculative.speculative.empty() ? 0 : options.scheduler.max_num_seqs;
  const int64_t state_slots = options.scheduler.max_num_seqs + config.state_snapshots + backups;
  const double state_bytes = double(state_slots * model.recurrent_state_bytes());
  if (state_bytes > 0) {
    spdlog::info(
        "KDA state: {:.2f} MiB per sequence x ({} running (--max-num-seqs) + {} prefix snapshots "
        "(--state-snapshots) + {} verification copies (--speculative)) = {:.2f} GiB",
        double(model.recurrent_state_bytes()) / double(1 << 20), options.scheduler.max_num_seqs, config.state_snapshots,
        backups, state_bytes / double(1 << 30));
    MLA_CHECK(state_bytes < budget,
              "the KDA state of {} slots ({:.2f} GiB) does not fit the cache budget of "
              "{:.2f} GiB: lower --max-num-seqs or --state-snapshots, or raise --kv-cache-gb",
              state_slots, state_bytes / double(1 << 30), budget / double(1 << 30));
  }
  return state_bytes;
}

EngineConfig engine_config(const ServeOptions& options, const ModelConfig& model, int ranks) {
  EngineConfig config;
  config.block_size = options.block_size;
  config.cache_dtype = cache_dtype_from_name(options.kv_dtype);
  config.scheduler = options.scheduler;
  config.prefill_path = mla_path_from_name(options.mla_prefill);
  config.max_queue = options.max_queue;
  if (!options.prefix_cache_dir.empty()) {
    config.prefix_cache_disk.dir = options.prefix_cache_dir;
    config.prefix_cache_disk.budget_bytes = int64_t(options.prefix_cache_disk_gb * double(1 << 30));
    config.prefix_cache_disk.model_key =
        model_cache_key(options.model_dir, fmt::format("{} {}", options.kv_dtype, options.block_size));
  }
  config.max_model_len = options.max_model_len > 0 ? std::min(options.max_model_len, model.max_position_embeddings)
                                                   : model.max_position_embeddings;
  const int64_t per_token = model.kv_bytes_per_token(config.cache_dtype);
  double budget = options.kv_cache_gb > 0 ? options.kv_cache_gb * double(1 << 30)
                                          : options.kv_cache_fraction * double(available_memory_bytes()) / ranks;
  const double state_bytes = state_slot_bytes(options, model, budget, config);
  budget -= state_bytes;
  // More than every sequence at full length is never needed.
  const int64_t useful = options.scheduler.max_num_seqs * config.max_model_len;
  config.kv_cache_tokens =
      std::min<int64_t>(int64_t(budget / double(per_token)), useful) / config.block_size * config.block_size;
  MLA_CHECK(config.kv_cache_tokens >= config.block_size, "the KV cache budget holds no block: raise --kv-cache-gb");
  // The pool is committed at start-up (place_cache_pool), so a budget past what this machine
  // has free would only meet the OOM killer while its pages are faulted in.
  const double pool_bytes = double(config.kv_cache_tokens * per_token) + state_bytes;
  const double available = double(available_memory_bytes());
  MLA_CHECK(available <= 0 || pool_bytes * ranks <= available,
            "the KV cache pool of {:.2f} GiB{} does not fit the {:.2f} GiB of memory available here (it is committed "
            "at start-up): lower --kv-cache-gb or --max-num-seqs",
            pool_bytes / double(1 << 30), ranks > 1 ? fmt::format(" x {} ranks", ranks) : "",
            available / double(1 << 30));
  spdlog::info(
      "KV cache: {} tokens ({} blocks of {}), {} bytes per token = {} layers x {} bytes a row of {} latent "
      "values in {}, {:.2f} GiB",
      config.kv_cache_tokens, config.kv_cache_tokens / config.block_size, config.block_size, per_token,
      model.cache_layers(), per_token / model.cache_layers(), model.kv_latent_dim(), options.kv_dtype,
      double(config.kv_cache_tokens * per_token) / double(1 << 30));
  spdlog::info("context: {} tokens (--max-model-len); the longest prompt that fits: {} tokens", config.max_model_len,
               std::min(config.max_model_len, config.kv_cache_tokens) - 1);
  return config;
}

void serve(const ServeOptions& options) {
  check_speculative_flags(options.speculative);
  const bool follower = is_mpi_follower();
  // The tokenizer and chat template first: a template that does not parse fails in a second.
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  if (!follower) {
    tokenizer = Tokenizer::load(options.model_dir);
    chat_template =
        ChatTemplate::load(options.model_dir, *tokenizer, options.chat_template, options.kimi_k3_prompt == "channel");
    spdlog::info("chat template: {}", chat_template->origin());
  }
  spdlog::info("loading model from '{}'", options.model_dir);
  auto model = load_causal_lm(options.model_dir, activation_quant_from_name(options.parallel.act_quant));
  if (follower) {
    on_shutdown_signal([](int) {});  // rank 0 decides when to stop, and tells this rank
    return follow_rank_zero(*model, executor_options(options.parallel));
  }
  auto executor = create_executor(*model, executor_options(options.parallel));
  spdlog::info("running the model on {}; warming up", executor->describe());
  const GenerationConfig generation = load_generation_config(options.model_dir);
  EngineConfig config = engine_config(options, model->config(), executor->ranks());
  config.eos_token_ids = generation.eos_token_ids;
  apply_speculative_flags(options.speculative, *model, config);
  config.on_executor_lost = [](const std::string&) {
    // The requests have their error events; give the connections a second to deliver them.
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      spdlog::critical("exiting: the model's ranks are lost");
      abort_mpi_job();
    }).detach();
  };
  Engine engine(*executor, *tokenizer, config);
  ServerOptions server_options = options.server;
  server_options.generation = generation;
  if (server_options.served_model_name.empty())
    server_options.served_model_name = std::filesystem::path(options.model_dir).filename().string();
  server_options.model_info = model_info(*model, *executor, config);
  server_options.webui = options.webui || (!options.no_webui && is_loopback_host(server_options.host));
  HttpServer server(engine, std::move(*chat_template), server_options);
  const int port = server.bind();
  if (server_options.webui)
    spdlog::info("web page: http://{}:{}/ (chat) and /dashboard", server_options.host, port);
  else if (!options.no_webui)
    spdlog::info("web page: off on the non-loopback address {} (--webui turns it on)", server_options.host);
  std::promise<void> stopped;
  std::thread drain;       // finishes the running requests off the signal thread, which keeps listening
  std::mutex drain_mutex;  // the signal thread has assigned `drain` before it is joined
  on_shutdown_signal([&](int signal) {
    // During the drain a second SIGINT (Ctrl-C again) exits at once; a second SIGTERM changes nothing.
    on_shutdown_signal([](int again) {
      if (again != SIGINT) return;
      spdlog::warn("second SIGINT: exiting without finishing the running requests");
      std::_Exit(128 + again);
    });
    spdlog::info("signal {}: finishing running requests (up to {} s), then exiting (Ctrl-C again: at once)", signal,
                 options.shutdown_timeout_s);
    std::lock_guard lock(drain_mutex);
    drain = std::thread([&] {
      engine.shutdown(std::chrono::seconds(options.shutdown_timeout_s));
      server.stop();
      stopped.set_value();
    });
  });
  spdlog::info("ready: serving '{}' on http://{}:{}", server_options.served_model_name, server_options.host, port);
  server.serve();
  stopped.get_future().wait();
  std::lock_guard lock(drain_mutex);
  drain.join();
  spdlog::info("stopped");
}

// The latent cache: its size, dtype and blocks, the prefix cache's disk tier, KDA snapshots.
void add_cache_flags(CLI::App* cmd, ServeOptions& options) {
  cmd->add_option("--kv-cache-gb", options.kv_cache_gb,
                  "latent KV cache size in GiB (default: a fraction of free memory)");
  cmd->add_option("--kv-cache-fraction", options.kv_cache_fraction, "fraction of available memory for the KV cache")
      ->capture_default_str();
  cmd->add_option("--kv-cache-dtype", options.kv_dtype,
                  "bf16 | fp8 (E4M3 latent with a scale per 128 values, rope key in bf16: 57% of bf16's bytes) | fp32")
      ->check(CLI::IsMember({"bf16", "fp8", "fp32"}))
      ->capture_default_str();
  cmd->add_option("--block-size", options.block_size, "tokens per KV cache block")->capture_default_str();
  cmd->add_option("--prefix-cache-dir", options.prefix_cache_dir,
                  "keep the prefix cache's blocks in this directory too: written when evicted from memory and at "
                  "shutdown, read back when a prompt's prefix matches, in this process or after a restart");
  cmd->add_option("--prefix-cache-disk-gb", options.prefix_cache_disk_gb,
                  "this model's files in --prefix-cache-dir at most (the oldest are dropped)")
      ->capture_default_str();
  cmd->add_option("--state-snapshots", options.state_snapshots,
                  "KDA models: recurrent-state snapshots kept for prefix caching (default: --max-num-seqs)");
}

// What a step runs: sequences, prefill chunks and their attention form, the queue, the context.
void add_scheduler_flags(CLI::App* cmd, ServeOptions& options) {
  cmd->add_option("--max-num-seqs", options.scheduler.max_num_seqs, "running sequences at most")->capture_default_str();
  cmd->add_option("--chunked-prefill-size", options.scheduler.chunked_prefill_size,
                  "prefill tokens per step while any sequence decodes")
      ->capture_default_str();
  cmd->add_option("--chunked-prefill-size-alone", options.scheduler.prefill_size_alone,
                  "prefill tokens per step when no sequence decodes (a long prompt alone: larger chunks re-expand "
                  "the cached keys fewer times)")
      ->capture_default_str();
  cmd->add_option(
         "--mla-prefill", options.mla_prefill,
         "prefill chunks' MLA attention: auto (per chunk, the cheaper form: absorbed for a short chunk after "
         "a long cached prefix) | expanded (every chunk; outputs independent of chunking and prefix-cache hits)"
         " | absorbed")
      ->check(CLI::IsMember({"auto", "expanded", "absorbed"}))
      ->capture_default_str();
  cmd->add_option("--max-queue", options.max_queue, "waiting requests before 429")->capture_default_str();
  cmd->add_option("--max-model-len", options.max_model_len, "context length (default: the model's)");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  cmd->add_option("--model", options->model_dir, "model directory or .gguf file")->required();
  cmd->add_option("--host", options->server.host, "listen address")->capture_default_str();
  cmd->add_option("--port", options->server.port, "port (0: any free port)")->capture_default_str();
  cmd->add_option("--chat-template", options->chat_template,
                  "Jinja chat template file to render chat requests with (default: the checkpoint's "
                  "chat_template.jinja or tokenizer_config.json chat_template)");
  cmd->add_option("--kimi-k3-prompt", options->kimi_k3_prompt,
                  "Kimi K3's generation prompt: channel (opens the think or response channel, as the checkpoint's "
                  "encoding_k3.py) or message (opens only the assistant message, as Moonshot's API)")
      ->check(CLI::IsMember({"channel", "message"}))
      ->capture_default_str();
  cmd->add_option("--tool-parser", options->server.tool_parser,
                  "tool-call format parsed from chat output: auto (the chat template's), none, deepseek_v3, "
                  "deepseek_v31, kimi_k2, kimi_k3")
      ->check(CLI::IsMember({"auto", "none", "deepseek_v3", "deepseek_v31", "kimi_k2", "kimi_k3"}))
      ->capture_default_str();
  cmd->add_option("--reasoning-parser", options->server.reasoning_parser,
                  "reasoning split into reasoning_content: auto (<think> blocks when the chat template writes them, "
                  "K3's think channel with K3's format), none, deepseek_r1, deepseek_v3, kimi_k2, kimi_k3")
      ->check(CLI::IsMember({"auto", "none", "deepseek_r1", "deepseek_v3", "kimi_k2", "kimi_k3"}))
      ->capture_default_str();
  cmd->add_option("--allowed-origins", options->server.allowed_origins,
                  "CORS: browser origins allowed to call the API (\"*\": any; default: none)")
      ->delimiter(',');
  cmd->add_option("--api-key", options->server.api_key, "require Authorization: Bearer KEY on /v1/*");
  auto* webui = cmd->add_flag("--webui", options->webui,
                              "serve the web page (chat and dashboard) at / also on a non-loopback --host");
  cmd->add_flag("--no-webui", options->no_webui, "no web page (default: served when --host is a loopback address)")
      ->excludes(webui);
  cmd->add_option("--served-model-name", options->server.served_model_name,
                  "model name in the API (default: directory name)");
  add_cache_flags(cmd, *options);
  add_scheduler_flags(cmd, *options);
  cmd->add_option("--http-threads", options->server.http_threads, "HTTP worker threads")->capture_default_str();
  cmd->add_option("--shutdown-timeout", options->shutdown_timeout_s, "seconds to finish requests on SIGTERM")
      ->capture_default_str();
  add_parallel_flags(cmd, options->parallel);
  add_speculative_flags(cmd, options->speculative);
  cmd->callback([options] {
    MLA_CHECK(
        options->block_size > 0 && options->scheduler.max_num_seqs > 0 && options->scheduler.chunked_prefill_size > 0,
        "--block-size, --max-num-seqs and --chunked-prefill-size must be positive");
    MLA_CHECK(options->prefix_cache_disk_gb >= 0, "--prefix-cache-disk-gb must be 0 or more, not {}",
              options->prefix_cache_disk_gb);
    serve(*options);
  });
}

}  // namespace mlaserve
