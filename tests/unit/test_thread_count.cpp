// The host's sums do not depend on the thread count: a run resumed with other threads per rank
// (another launcher, another node's cores, another run.threads) continues bit for bit. Each
// kernel with a sum over rows runs with 1, 2, 3 and 5 threads on the same input; every result
// must equal the one-thread result bit for bit.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <random>
#include <vector>

#include "comm/communicator.hpp"
#include "exec/host_exec.hpp"
#include "exec/host_kernels.hpp"
#include "exec/host_llama_kernels.hpp"
#include "exec/ordered_sum.hpp"

namespace st {
namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs `f` with each thread count and restores the previous one.
template <class F>
void for_thread_counts(F&& f) {
  const int before = omp_get_max_threads();
  for (int threads : {1, 2, 3, 5}) {
    omp_set_num_threads(threads);
    f(threads);
  }
  omp_set_num_threads(before);
}

TEST(ThreadCount, OrderedSumIsTheSameForEveryThreadCount) {
  const std::vector<float> x = random_floats(100003, 1);  // not a multiple of the block
  const auto square = [&](std::size_t i) { return static_cast<double>(x[i]) * x[i]; };
  double one = 0, sequential = 0;
  for (float v : x) sequential += static_cast<double>(v) * v;
  for_thread_counts([&](int threads) {
    const double blocked = ordered_parallel_sum(x.size(), 4096, square);
    const double per_term = ordered_parallel_sum(x.size(), 1, square);
    if (threads == 1) one = blocked;
    EXPECT_EQ(blocked, one) << threads << " threads";
    // One term a block is the plain sequential sum, in any thread count.
    EXPECT_EQ(per_term, sequential) << threads << " threads";
  });
}

TEST(ThreadCount, SumSquaresIsTheSameForEveryThreadCount) {
  std::vector<float> x = random_floats(70001, 2);
  double one = 0;
  for_thread_counts([&](int threads) {
    const Buffer values = Buffer::of(std::span<float>(x));
    double got = 0;
    host_exec().add_sum_squares(&got, std::span<const Buffer>(&values, 1));
    if (threads == 1) one = got;
    EXPECT_EQ(got, one) << threads << " threads";
  });
}

TEST(ThreadCount, LayerNormBackwardIsTheSameForEveryThreadCount) {
  const int N = 97, C = 48;
  const auto in = random_floats(N * C, 3), w = random_floats(C, 4), b = random_floats(C, 5), dout = random_floats(N * C, 6);
  std::vector<float> out(N * C), mean(N), rstd(N);
  kernels::layernorm_forward(out.data(), mean.data(), rstd.data(), in.data(), w.data(), b.data(), N, C);
  std::vector<float> din1, dw1, db1;
  for_thread_counts([&](int threads) {
    // Gradients accumulate: start from a nonzero value, as a second micro-batch does.
    std::vector<float> din(N * C, 0.25f), dw(C, 0.5f), db(C, -0.5f);
    kernels::layernorm_backward(din.data(), dw.data(), db.data(), dout.data(), in.data(), w.data(), mean.data(),
                                rstd.data(), N, C);
    if (threads == 1) din1 = din, dw1 = dw, db1 = db;
    EXPECT_TRUE(same_bits(din, din1) && same_bits(dw, dw1) && same_bits(db, db1)) << threads << " threads";
  });
}

TEST(ThreadCount, RmsNormBackwardIsTheSameForEveryThreadCount) {
  const int N = 97, C = 48;
  const auto in = random_floats(N * C, 7), w = random_floats(C, 8), dout = random_floats(N * C, 9);
  std::vector<float> out(N * C), rstd(N);
  kernels::rmsnorm_forward(out.data(), rstd.data(), in.data(), w.data(), N, C, 1e-5);
  std::vector<float> din1, dw1;
  for_thread_counts([&](int threads) {
    std::vector<float> din(N * C, 0.25f), dw(C, 0.5f);
    kernels::rmsnorm_backward(din.data(), dw.data(), dout.data(), in.data(), w.data(), rstd.data(), N, C);
    if (threads == 1) din1 = din, dw1 = dw;
    EXPECT_TRUE(same_bits(din, din1) && same_bits(dw, dw1)) << threads << " threads";
  });
}

TEST(ThreadCount, CrossEntropyLossIsTheSameForEveryThreadCount) {
  const int N = 61, V = 50, Vp = 64;
  const auto logits = random_floats(static_cast<std::size_t>(N) * Vp, 10);
  std::vector<int> targets(N);
  for (int i = 0; i < N; ++i) targets[static_cast<std::size_t>(i)] = (i * 7) % V;
  double one = 0;
  for_thread_counts([&](int threads) {
    std::vector<float> probs = logits, losses(N);
    const double total =
        kernels::softmax_cross_entropy_forward(probs.data(), losses.data(), targets.data(), N, V, Vp);
    if (threads == 1) one = total;
    EXPECT_EQ(total, one) << threads << " threads";
  });
}

}  // namespace
}  // namespace st
