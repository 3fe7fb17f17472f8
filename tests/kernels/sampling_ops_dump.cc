// Writes random inputs of FlashInfer's sampling ops (kernels/sampling.h) and mlaserve's
// outputs as .npy files, for tests/kernels/test_sampling_ops.py to check against the NumPy
// reference (tests/reference/sampling_ref.py). Rows mix parameters at their edges (k = 0, 1,
// vocab - 1, vocab and past it; p = 0, 1e-6, 1; min_p = 0 and 1) and values with many ties.
// Usage: sampling_ops_dump OUT_DIR
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "base/npy.h"
#include "kernels/sampling.h"

namespace mlaserve {
namespace {

// Rows of unnormalised probabilities; every third row drawn from 6 levels, so ties abound
// (at the k-th value too), every fifth with most entries zero.
std::vector<float> random_rows(int64_t batch, int64_t vocab, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> rows(size_t(batch * vocab));
  for (int64_t row = 0; row < batch; ++row)
    for (int64_t v = 0; v < vocab; ++v) {
      float value = std::exp(4.0f * uniform(rng));
      if (row % 3 == 0) value = float(1 + int(uniform(rng) * 6));
      if (row % 5 == 0 && v % 7 != 0) value = 0.0f;
      rows[size_t(row * vocab + v)] = value;
    }
  return rows;
}

std::vector<float> as_float(const std::vector<int32_t>& ids) { return {ids.begin(), ids.end()}; }

void write(const std::string& dir, const std::string& name, const std::vector<float>& data,
           std::vector<int64_t> shape) {
  write_npy_f32(dir + "/" + name + ".npy", data.data(), shape);
}

void dump_filters(const std::string& dir, int64_t batch, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const std::vector<float> probs = random_rows(batch, vocab, rng);
  std::vector<float> logits(probs.size());
  for (size_t i = 0; i < probs.size(); ++i) logits[i] = std::log(probs[i] + 1e-3f);
  const int64_t edge_k[] = {0, 1, 2, vocab - 1, vocab, vocab + 3};
  const float edge_p[] = {0.0f, 1e-6f, 1.0f}, edge_min_p[] = {0.0f, 1.0f};
  std::vector<int64_t> top_k(static_cast<size_t>(batch));
  std::vector<float> top_p(static_cast<size_t>(batch)), min_p(top_p), uniforms(top_p);
  for (int64_t row = 0; row < batch; ++row) {
    top_k[size_t(row)] = row < 6 ? edge_k[row] : 1 + int64_t(uniform(rng) * float(vocab / 2));
    top_p[size_t(row)] = row < 3 ? edge_p[row] : uniform(rng);
    min_p[size_t(row)] = row < 2 ? edge_min_p[row] : 0.3f * uniform(rng);
    uniforms[size_t(row)] = uniform(rng);
  }
  std::vector<float> out(probs.size());
  std::vector<int32_t> ids(static_cast<size_t>(batch));
  write(dir, "probs", probs, {batch, vocab});
  write(dir, "logits", logits, {batch, vocab});
  write(dir, "top_k", {top_k.begin(), top_k.end()}, {batch});
  write(dir, "top_p", top_p, {batch});
  write(dir, "min_p", min_p, {batch});
  write(dir, "uniforms", uniforms, {batch});
  top_k_renorm_probs(probs.data(), batch, vocab, top_k.data(), out.data());
  write(dir, "top_k_renorm", out, {batch, vocab});
  top_p_renorm_probs(probs.data(), batch, vocab, top_p.data(), out.data());
  write(dir, "top_p_renorm", out, {batch, vocab});
  min_p_renorm_probs(probs.data(), batch, vocab, min_p.data(), out.data());
  write(dir, "min_p_renorm", out, {batch, vocab});
  top_k_mask_logits(logits.data(), batch, vocab, top_k.data(), out.data());
  write(dir, "top_k_mask", out, {batch, vocab});
  sampling_from_probs(probs.data(), batch, vocab, uniforms.data(), ids.data());
  write(dir, "sampled", as_float(ids), {batch});
  top_k_top_p_sampling_from_probs(probs.data(), batch, vocab, top_k.data(), top_p.data(), uniforms.data(), ids.data());
  write(dir, "top_k_top_p_sampled", as_float(ids), {batch});
}

// Drafts drawn from their own rows; targets close to them in some rows, far in others.
void dump_chain(const std::string& dir, int64_t batch, int64_t num_draft, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const std::vector<float> draft = random_rows(batch * num_draft, vocab, rng);
  std::vector<float> target = random_rows(batch * (num_draft + 1), vocab, rng);
  for (int64_t row = 0; row < batch; row += 2)  // even rows: the target near the draft
    for (int64_t i = 0; i < num_draft; ++i)
      for (int64_t v = 0; v < vocab; ++v)
        target[size_t((row * (num_draft + 1) + i) * vocab + v)] =
            draft[size_t((row * num_draft + i) * vocab + v)] * (0.8f + 0.4f * uniform(rng));
  std::vector<float> normalised(draft);  // chain_speculative_sampling takes probabilities
  for (std::vector<float>* rows : {&normalised, &target})
    for (size_t start = 0; start < rows->size(); start += size_t(vocab)) {
      double total = 0.0;
      for (int64_t v = 0; v < vocab; ++v) total += (*rows)[start + size_t(v)];
      for (int64_t v = 0; v < vocab; ++v) (*rows)[start + size_t(v)] = float((*rows)[start + size_t(v)] / total);
    }
  std::vector<int32_t> draft_ids(size_t(batch * num_draft));
  std::vector<float> draw_u(draft_ids.size()), uniforms(size_t(batch * (num_draft + 1)));
  for (float& u : draw_u) u = uniform(rng);
  sampling_from_probs(normalised.data(), batch * num_draft, vocab, draw_u.data(), draft_ids.data());
  for (float& u : uniforms) u = uniform(rng);
  std::vector<int32_t> output(uniforms.size()), accepted(static_cast<size_t>(batch)), emitted(accepted);
  chain_speculative_sampling(normalised.data(), draft_ids.data(), target.data(), batch, num_draft, vocab,
                             uniforms.data(), output.data(), accepted.data(), emitted.data());
  write(dir, "draft_probs", normalised, {batch, num_draft, vocab});
  write(dir, "draft_ids", as_float(draft_ids), {batch, num_draft});
  write(dir, "target_probs", target, {batch, num_draft + 1, vocab});
  write(dir, "chain_uniforms", uniforms, {batch, num_draft + 1});
  write(dir, "output_ids", as_float(output), {batch, num_draft + 1});
  write(dir, "accepted", as_float(accepted), {batch});
  write(dir, "emitted", as_float(emitted), {batch});
}

}  // namespace
}  // namespace mlaserve

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: sampling_ops_dump OUT_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  mlaserve::dump_filters(dir + "/small", 96, 50, 1);
  mlaserve::dump_filters(dir + "/large", 12, 5000, 2);  // top-p sorts past its first slices
  mlaserve::dump_chain(dir + "/chain", 64, 5, 40, 3);
  return 0;
}
