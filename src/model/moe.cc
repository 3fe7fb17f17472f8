#include "model/moe.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <span>

#include "base/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/norm.h"
#include "kernels/simd.h"

namespace mlaserve {

namespace {

// gate[i] = act(gate[i]) * up[i] over n outputs.
void apply_glu(const GluActivation& act, float* gate, const float* up, int64_t n) {
  if (!act.situ) return simd::silu_times(gate, up, n);
  for (int64_t i = 0; i < n; ++i)
    gate[i] = act.beta * std::tanh(gate[i] / act.beta) / (1.0f + std::exp(-gate[i])) *
              (act.linear_beta * std::tanh(up[i] / act.linear_beta));
}

// One expert (or MLP) of a layer on the tokens routed to it: out[token] += weight * mlp(x).
// Its tokens, weights and inputs are slices of buffers shared by the step's jobs (JobList),
// which keep their capacity from step to step: a decode step allocates nothing.
struct ExpertJob {
  const MlpWeights* mlp = nullptr;
  std::span<const int64_t> tokens;  // rows of x / out
  std::span<const float> weights;   // one per token
  const float* input = nullptr;     // [tokens, in width]: x itself, a row of it, or gathered rows
  float* hidden = nullptr;          // [tokens, intermediate]: act(gate) * up (run_expert_jobs)
  int64_t first_cost = 0;           // of this job's gate/up rows among all the jobs' (pass 1)
};

// Pass 1 splits the jobs' gate/up rows by cost, not by count. A row costs reading it plus its
// tokens' products. Reading is counted in bytes, since a decode step is memory-bound and
// formats differ 4x in bytes a row (costed alike, a BF16 shared expert beside INT4 routed
// experts leaves one thread most of the bytes). Products are counted as a third of a byte per
// column and token: a 4096-byte BF16 row reads in about the time of 6 tokens' products over its
// 2048 columns (linear_bench at 1 and 8 tokens).
int64_t row_cost(const ExpertJob& job) {
  const LinearWeight& gate = job.mlp->gate_proj;
  const int64_t row_bytes = 2 * int64_t(gate.bytes()) / gate.rows;  // gate and up
  return 3 * row_bytes + 2 * int64_t(job.tokens.size()) * gate.cols;
}

// The first gate/up row of `job` at or after the point `cost` of pass 1's total cost: a
// multiple of 8 rows, or the end of the job. Neighbouring threads compute the same boundary.
int64_t row_at_cost(const ExpertJob& job, int64_t cost) {
  const int64_t rows = job.mlp->gate_proj.rows;
  if (cost <= job.first_cost) return 0;
  if (cost >= job.first_cost + rows * row_cost(job)) return rows;
  return (cost - job.first_cost) / row_cost(job) / 8 * 8;
}

// All of a layer's experts in two parallel passes, so a decode step pays two dispatches per
// MoE layer rather than two per expert, and each weight is still read once for all its
// tokens. Pass 1: the jobs' gate/up rows are laid end to end and each thread takes a
// contiguous share of their cost, computing them for the job's tokens and applying the
// activation. Pass 2: each thread takes a share of the output features and runs every job's
// down_proj over it, adding the weighted results: threads write disjoint columns of out, so
// no locking.
void run_expert_jobs(std::span<ExpertJob> jobs, int64_t in_width, float* out, int64_t out_width) {
  int64_t total_cost = 0;
  size_t hidden_size = 0;
  for (auto& job : jobs) {
    job.first_cost = total_cost;
    total_cost += job.mlp->gate_proj.rows * row_cost(job);
    hidden_size += job.tokens.size() * size_t(job.mlp->gate_proj.rows);
  }
  thread_local std::vector<float> hidden;
  hidden.resize(hidden_size);
  for (size_t at = 0; auto& job : jobs) {
    job.hidden = hidden.data() + at;
    at += job.tokens.size() * size_t(job.mlp->gate_proj.rows);
  }
  const int n_threads = thread_pool().size();
  thread_pool().parallel_for(n_threads, [&](int64_t first_thread, int64_t end_thread, int) {
    const int64_t cost_begin = total_cost * first_thread / n_threads, cost_end = total_cost * end_thread / n_threads;
    for (auto& job : jobs) {
      const int64_t width = job.mlp->gate_proj.rows, count = int64_t(job.tokens.size());
      const int64_t row_begin = row_at_cost(job, cost_begin), row_end = row_at_cost(job, cost_end);
      if (row_begin >= row_end) continue;
      thread_local std::vector<float> up;
      up.resize(size_t(count * (row_end - row_begin)));
      float* gate = job.hidden + row_begin;
      linear_rows(job.mlp->gate_proj, row_begin, row_end, job.input, in_width, count, gate, width);
      linear_rows(job.mlp->up_proj, row_begin, row_end, job.input, in_width, count, up.data(), row_end - row_begin);
      for (int64_t t = 0; t < count; ++t)
        apply_glu(job.mlp->activation, gate + t * width, up.data() + t * (row_end - row_begin), row_end - row_begin);
    }
  });
  thread_pool().parallel_for(
      out_width,
      [&](int64_t begin, int64_t end, int) {
        thread_local std::vector<float> partial;
        for (const auto& job : jobs) {
          const int64_t count = int64_t(job.tokens.size()), width = job.mlp->gate_proj.rows;
          partial.resize(size_t(count * (end - begin)));
          linear_rows(job.mlp->down_proj, begin, end, job.hidden, width, count, partial.data(), end - begin);
          for (int64_t t = 0; t < count; ++t)
            simd::axpy(job.weights[size_t(t)], partial.data() + t * (end - begin),
                       out + job.tokens[size_t(t)] * out_width + begin, end - begin);
        }
      },
      8);
}

// The jobs of one step (a thread-local list: its vectors keep their capacity).
struct JobList {
  std::vector<ExpertJob> jobs;
  std::vector<int64_t> all_tokens;  // 0, 1, ..., n_tokens - 1: an MLP's or shared expert's tokens
  std::vector<float> ones;          // their weights
  std::vector<float> gathered;      // the routed jobs' input rows, job after job
  void clear() { jobs.clear(); }
};

// The routed tokens grouped by expert: expert e's are pairs [first[e], first[e + 1]) of
// `tokens` (rows of x) and `weights`, in token order (a counting sort of the router's choices).
struct ExpertAssignments {
  std::vector<int64_t> first, tokens;
  std::vector<float> weights;
  std::vector<int64_t> next;  // while sorting: each expert's next free pair
  void assign(std::span<const int32_t> ids, std::span<const float> id_weights, int64_t top_k, int64_t n_experts) {
    first.assign(size_t(n_experts + 1), 0);
    for (int32_t id : ids) ++first[size_t(id) + 1];
    for (size_t e = 0; e < size_t(n_experts); ++e) first[e + 1] += first[e];
    tokens.resize(ids.size());
    weights.resize(ids.size());
    next.assign(first.begin(), first.end() - 1);
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto at = size_t(next[size_t(ids[i])]++);
      tokens[at] = int64_t(i) / top_k;
      weights[at] = id_weights[i];
    }
  }
};

void add_all_tokens_job(JobList& list, const MlpWeights& mlp, const float* x, int64_t n_tokens) {
  list.all_tokens.resize(size_t(n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) list.all_tokens[size_t(t)] = t;
  list.ones.assign(size_t(n_tokens), 1.0f);
  list.jobs.push_back({&mlp, list.all_tokens, list.ones, x});
}

std::atomic<int64_t> routed_bytes_read{0};

// Jobs for the routed experts this rank owns that have tokens; their weights' bytes are added
// to routed_bytes_read. A job of one token reads its row of x where it is; the rows of a job of
// several are gathered into one block (the kernels take a job's tokens as consecutive rows).
void add_routed_jobs(const MoeWeights& weights, const ExpertAssignments& assigned, const float* x, int64_t width,
                     JobList& list) {
  const int64_t n_experts = int64_t(assigned.first.size()) - 1;
  const int64_t begin = std::clamp<int64_t>(weights.first_owned_expert, 0, n_experts);
  const int64_t end = std::clamp<int64_t>(weights.end_owned_expert, begin, n_experts);
  const int64_t first_row = assigned.first[size_t(begin)], end_row = assigned.first[size_t(end)];
  list.gathered.resize(size_t((end_row - first_row) * width));
  int64_t bytes = 0;
  for (int64_t e = begin; e < end; ++e) {
    const int64_t row = assigned.first[size_t(e)], count = assigned.first[size_t(e) + 1] - row;
    if (count == 0) continue;
    const float* input = x + assigned.tokens[size_t(row)] * width;
    if (count > 1) {
      float* block = list.gathered.data() + (row - first_row) * width;
      for (int64_t i = 0; i < count; ++i)
        std::memcpy(block + i * width, x + assigned.tokens[size_t(row + i)] * width, size_t(width) * sizeof(float));
      input = block;
    }
    list.jobs.push_back({&weights.experts[size_t(e)], std::span(assigned.tokens).subspan(size_t(row), size_t(count)),
                         std::span(assigned.weights).subspan(size_t(row), size_t(count)), input});
    bytes += int64_t(weights.experts[size_t(e)].bytes());
  }
  routed_bytes_read.fetch_add(bytes, std::memory_order_relaxed);
}

}  // namespace

RouterParams router_params(const ModelConfig& config) {
  RouterParams params;
  params.n_experts = config.n_routed_experts;
  params.n_group = config.n_group;
  params.topk_group = config.topk_group;
  params.top_k = config.num_experts_per_tok;
  params.scoring_func = config.scoring_func;
  params.topk_method = config.topk_method;
  params.norm_topk_prob = config.norm_topk_prob;
  params.routed_scaling_factor = float(config.routed_scaling_factor);
  return params;
}

int64_t routed_expert_bytes_read() { return routed_bytes_read.load(std::memory_order_relaxed); }

void mlp_forward(const MlpWeights& weights, const float* x, int64_t n_tokens, float* out) {
  const int64_t hidden = weights.gate_proj.cols;
  std::fill(out, out + n_tokens * weights.down_proj.rows, 0.0f);
  thread_local JobList list;
  list.clear();
  add_all_tokens_job(list, weights, x, n_tokens);
  run_expert_jobs(list.jobs, hidden, out, weights.down_proj.rows);
}

void moe_forward(const RouterParams& router, const MoeWeights& weights, const float* x, int64_t n_tokens, float* out,
                 Communicator* comm) {
  const int64_t hidden = weights.gate.cols, top_k = router.top_k;
  // Reused from step to step: the decode path allocates nothing once these have grown.
  thread_local std::vector<float> logits, expert_weights;
  thread_local std::vector<int32_t> ids;
  thread_local ExpertAssignments assigned;
  logits.resize(size_t(n_tokens * router.n_experts));  // [n_tokens, n_experts]
  linear(weights.gate, x, n_tokens, logits.data());
  ids.resize(size_t(n_tokens * top_k));
  expert_weights.resize(size_t(n_tokens * top_k));
  for (int64_t t = 0; t < n_tokens; ++t)
    route_token(logits.data() + t * router.n_experts, weights.e_score_correction_bias, router, ids.data() + t * top_k,
                expert_weights.data() + t * top_k);
  assigned.assign(ids, expert_weights, top_k, router.n_experts);
  std::fill(out, out + n_tokens * hidden, 0.0f);
  thread_local JobList list, routed_list;
  list.clear();
  routed_list.clear();
  // A job an expert (and the shared one): however many experts a step's tokens reach.
  list.jobs.reserve(size_t(router.n_experts + 1));
  routed_list.jobs.reserve(size_t(router.n_experts));
  if (weights.shared_experts) add_all_tokens_job(list, *weights.shared_experts, x, n_tokens);
  if (!weights.latent) {
    add_routed_jobs(weights, assigned, x, hidden, list);
    return run_expert_jobs(list.jobs, hidden, out, hidden);
  }
  if (!list.jobs.empty()) run_expert_jobs(list.jobs, hidden, out, hidden);
  const LatentMoeWeights& latent = *weights.latent;
  const int64_t width = latent.routed_expert_down_proj.rows;
  thread_local std::vector<float> h, routed, back;
  h.resize(size_t(n_tokens * width));
  routed.assign(h.size(), 0.0f);
  back.resize(size_t(n_tokens * hidden));
  linear(latent.routed_expert_down_proj, x, n_tokens, h.data());
  add_routed_jobs(weights, assigned, h.data(), width, routed_list);
  run_expert_jobs(routed_list.jobs, width, routed.data(), width);
  if (comm) comm->all_reduce_sum(routed.data(), int64_t(routed.size()));
  if (comm && comm->rank() != 0) return;
  if (latent.routed_expert_norm)
    rms_norm(routed.data(), width, latent.routed_expert_norm, n_tokens, width, latent.norm_eps, routed.data(), width);
  linear(latent.routed_expert_up_proj, routed.data(), n_tokens, back.data());
  for (size_t i = 0; i < back.size(); ++i) out[i] += back[i];
}

MlpWeights load_mlp_weights(WeightLoader& loader, const std::string& prefix, int64_t hidden, int64_t width) {
  return MlpWeights{loader.linear(prefix + ".gate_proj", width, hidden),
                    loader.linear(prefix + ".up_proj", width, hidden),
                    loader.linear(prefix + ".down_proj", hidden, width)};
}

}  // namespace mlaserve
