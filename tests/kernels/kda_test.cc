// The chunked (WY) KDA form against the token-by-token recurrence, and the recurrence against
// a float64 scalar reference, on random inputs with mild and very strong decays (log decay
// down to -30 a token, which would overflow a form that factors exp(-G)).
#include "kernels/kda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test_util.h"

namespace mlaserve {
namespace {

struct Inputs {
  std::vector<float> q, k, v, g, beta;
};

Inputs make_inputs(int64_t n, int64_t dim, float strongest_decay, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  Inputs in;
  in.q = testing::random_vector(size_t(n * dim), seed + 1);
  in.k = testing::random_vector(size_t(n * dim), seed + 2);
  in.v = testing::random_vector(size_t(n * dim), seed + 3);
  in.g.resize(size_t(n * dim));
  for (auto& g : in.g) g = strongest_decay * unit(rng) * unit(rng);  // mostly mild, some strong
  in.beta.resize(size_t(n));
  for (auto& b : in.beta) b = unit(rng);
  for (int64_t t = 0; t < n; ++t) {
    l2_normalize(in.q.data() + t * dim, dim, 1.0f / std::sqrt(float(dim)));
    l2_normalize(in.k.data() + t * dim, dim, 1.0f);
  }
  return in;
}

TEST(Kda, RecurrenceMatchesFloat64Reference) {
  const int64_t n = 40, dim = 16;
  const Inputs in = make_inputs(n, dim, -2.0f, 5);
  std::vector<float> state(size_t(dim * dim), 0.0f), out(size_t(n * dim));
  std::vector<double> s(size_t(dim * dim), 0.0), want(size_t(n * dim));
  for (int64_t t = 0; t < n; ++t) {
    kda_recurrent_step(state.data(), &in.q[size_t(t * dim)], &in.k[size_t(t * dim)], &in.v[size_t(t * dim)],
                       &in.g[size_t(t * dim)], in.beta[size_t(t)], dim, dim, &out[size_t(t * dim)]);
    for (int64_t i = 0; i < dim; ++i)
      for (int64_t j = 0; j < dim; ++j) s[size_t(i * dim + j)] *= std::exp(double(in.g[size_t(t * dim + i)]));
    for (int64_t j = 0; j < dim; ++j) {
      double sk = 0;
      for (int64_t i = 0; i < dim; ++i) sk += s[size_t(i * dim + j)] * in.k[size_t(t * dim + i)];
      const double delta = in.beta[size_t(t)] * (in.v[size_t(t * dim + j)] - sk);
      for (int64_t i = 0; i < dim; ++i) s[size_t(i * dim + j)] += in.k[size_t(t * dim + i)] * delta;
    }
    for (int64_t j = 0; j < dim; ++j) {
      double o = 0;
      for (int64_t i = 0; i < dim; ++i) o += s[size_t(i * dim + j)] * in.q[size_t(t * dim + i)];
      want[size_t(t * dim + j)] = o;
    }
  }
  EXPECT_TRUE(testing::relative_close(out, std::vector<float>(want.begin(), want.end()), 1e-5));
}

TEST(Kda, ChunkedFormEqualsTheRecurrence) {
  const int64_t n = 150, dim = 32;
  for (float strongest : {-1.0f, -30.0f})
    for (int64_t chunk : {1, 5, 16, 64}) {
      const Inputs in = make_inputs(n, dim, strongest, 9);
      std::vector<float> start = testing::random_vector(size_t(dim * dim), 11);  // a state carried in
      std::vector<float> state = start, chunked_state = start, out(size_t(n * dim)), chunked(out.size());
      for (int64_t t = 0; t < n; ++t)
        kda_recurrent_step(state.data(), &in.q[size_t(t * dim)], &in.k[size_t(t * dim)], &in.v[size_t(t * dim)],
                           &in.g[size_t(t * dim)], in.beta[size_t(t)], dim, dim, &out[size_t(t * dim)]);
      kda_chunked(chunked_state.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), n, dim, 1,
                  dim, chunk, chunked.data());
      EXPECT_TRUE(testing::relative_close(chunked, out, 1e-4)) << "chunk " << chunk << ", decay " << strongest;
      EXPECT_TRUE(testing::relative_close(chunked_state, state, 1e-4)) << "state, chunk " << chunk;
    }
}

}  // namespace
}  // namespace mlaserve
