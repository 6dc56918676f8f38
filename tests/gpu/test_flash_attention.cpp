// Flash attention on the device (exec/cuda/flash_attention.hpp), through the layer-kernel seam as
// training calls it, against the host reference of the same contract (exec/flash_reference.hpp)
// in double precision on the bf16-rounded q, k, v and dO the kernels compute with: the output,
// each row's log-sum-exp and the gradient of q, k and v (each key/value head's summed over its
// group). T = 1, 63, 64 (one tile, and one short of it), 130 and 1024 (many tiles, the last
// short); head widths 32, 64 and 128; multi-head, grouped-query and multi-query attention. The
// backward twice gives the same bits; every output element is written (garbage before). Skips,
// saying why, where no CUDA device is usable.
//
// Tolerances, on max |device - reference| / max |reference|: the reference has the inputs'
// rounding, so what is left is the kernels' own: the probabilities rounded to bf16 (2^-9
// relative) before P V in forward, P and dS rounded before dV, dK and dQ in backward, and fp32
// sums. A host emulation of exactly those roundings (numpy, tiles of 64, fp32 sums, these shapes
// and seeds alike) measured at most 1.4e-3 for the output and 3.3e-3 for the gradients; the
// bounds are 2^-7 = 7.8e-3 and 2^-6 = 1.6e-2, about five times that. The log-sum-exp is fp32
// throughout: 1e-5 (measured 1.1e-7). A kernel that reads a wrong tile, row or head is off by
// O(1).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "exec/cuda/cuda_exec.hpp"
#include "exec/flash_reference.hpp"
#include "exec/layer_kernels.hpp"
#include "device_test.hpp"

namespace st {
namespace {

constexpr double kOutputBound = 1.0 / 128;   // 2^-7
constexpr double kGradientBound = 1.0 / 64;  // 2^-6
constexpr double kLseBound = 1e-5;

struct Case {
  int B, T, NH, NKV, hs;
  int C() const { return NH * hs; }
  int W() const { return C() + 2 * NKV * hs; }
  std::string name() const {
    return "B " + std::to_string(B) + " T " + std::to_string(T) + " NH " + std::to_string(NH) + " NKV " +
           std::to_string(NKV) + " hs " + std::to_string(hs);
  }
};

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

// The values the kernels compute with: each rounded to bf16 (as they round on load), in double.
std::vector<double> rounded(const std::vector<float>& v) {
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = to_float(to_bf16(v[i]));
  return r;
}

double norm_relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  if (std::isnan(diff)) return std::numeric_limits<double>::infinity();
  return diff / std::max(scale, 1e-30);
}

class FlashAttention : public testing_support::DeviceTest {
};

// What the seam returns for one case: forward's output and lse, backward's gradient twice.
struct DeviceRun {
  std::vector<float> out, lse, dqkv, dqkv_again;
};

TEST_F(FlashAttention, HeadWidthsWithKernelsRunIt) {
  LayerKernels<float>& k = exec->layer_kernels();
  for (const int hs : {32, 64, 128}) EXPECT_TRUE(k.attention_uses_flash(hs)) << hs;
  for (const int hs : {8, 12, 48, 96, 256}) EXPECT_FALSE(k.attention_uses_flash(hs)) << hs;
  CudaExec fp32(CudaExecSettings{0, false, true}), exact(CudaExecSettings{0, true, false});
  EXPECT_FALSE(fp32.layer_kernels().attention_uses_flash(64)) << "fp32 keeps the exact path";
  EXPECT_FALSE(exact.layer_kernels().attention_uses_flash(64)) << "parallel.attention = \"exact\"";
}

DeviceRun run_on_device(FlashAttention& f, CudaExec& exec, const Case& c, const std::vector<float>& qkv,
                        const std::vector<float>& dout) {
  const std::size_t rows = static_cast<std::size_t>(c.B) * c.T, stats = rows * c.NH;
  Memory qkv_g = f.upload(qkv), dout_g = f.upload(dout);
  // Garbage first: every element must be written.
  Memory out_g = f.upload(std::vector<float>(rows * c.C(), 1e30f)), lse_g = f.upload(std::vector<float>(stats, 1e30f)),
         dots_g = f.upload(std::vector<float>(stats, 1e30f)), dqkv_g = f.upload(std::vector<float>(qkv.size(), 1e30f));
  AttentionProbs<float> probs;
  probs.lse = static_cast<float*>(lse_g.data());
  probs.row_dots = static_cast<float*>(dots_g.data());
  probs.out = static_cast<const float*>(out_g.data());
  LayerKernels<float>& k = exec.layer_kernels();
  auto* qkv_p = static_cast<const float*>(qkv_g.data());
  k.attention_forward(static_cast<float*>(out_g.data()), probs, qkv_p, c.B, c.T, c.C(), c.NH, c.NKV);
  k.attention_backward(static_cast<float*>(dqkv_g.data()), probs, static_cast<const float*>(dout_g.data()), qkv_p,
                       c.B, c.T, c.C(), c.NH, c.NKV);
  DeviceRun r;
  r.out = f.download<float>(out_g, rows * c.C());
  r.lse = f.download<float>(lse_g, stats);
  r.dqkv = f.download<float>(dqkv_g, qkv.size());
  exec.zero(dqkv_g.data(), qkv.size() * sizeof(float));
  k.attention_backward(static_cast<float*>(dqkv_g.data()), probs, static_cast<const float*>(dout_g.data()), qkv_p,
                       c.B, c.T, c.C(), c.NH, c.NKV);
  r.dqkv_again = f.download<float>(dqkv_g, qkv.size());
  return r;
}

void check_case(FlashAttention& f, const Case& c, unsigned seed) {
  ASSERT_TRUE(f.exec->layer_kernels().attention_uses_flash(c.hs)) << c.name();
  const std::size_t rows = static_cast<std::size_t>(c.B) * c.T;
  const auto qkv = random_floats(rows * c.W(), seed), dout = random_floats(rows * c.C(), seed + 1);
  const auto qkv_r = rounded(qkv), dout_r = rounded(dout);
  std::vector<double> out(rows * c.C()), lse(rows * c.NH), dqkv(qkv.size());
  kernels::flash_attention_forward(out.data(), lse.data(), qkv_r.data(), c.B, c.T, c.C(), c.NH, c.NKV);
  kernels::flash_attention_backward(dqkv.data(), dout_r.data(), out.data(), lse.data(), qkv_r.data(), c.B, c.T, c.C(),
                                    c.NH, c.NKV);
  const DeviceRun got = run_on_device(f, *f.exec, c, qkv, dout);
  EXPECT_LE(norm_relative_error(got.out, out), kOutputBound) << c.name() << ": output";
  EXPECT_LE(norm_relative_error(got.lse, lse), kLseBound) << c.name() << ": log-sum-exp";
  EXPECT_EQ(0, std::memcmp(got.dqkv.data(), got.dqkv_again.data(), got.dqkv.size() * sizeof(float)))
      << c.name() << ": backward not bit-identical run to run";
  if (c.T == 1) {
    // One key: the output is v, and q and k get no gradient (the softmax of one score is 1).
    std::vector<double> dqk;
    for (std::size_t r = 0; r < rows; ++r)
      for (int i = 0; i < c.W(); ++i) {
        const double d = got.dqkv[r * c.W() + i];
        if (i < c.C() + c.NKV * c.hs) dqk.push_back(d);
      }
    double largest = 0;
    for (const double d : dqk) largest = std::max(largest, std::abs(d));
    EXPECT_LE(largest, 1e-6) << c.name() << ": dq and dk of a single position";
    std::vector<float> dv_got;
    std::vector<double> dv_want;
    for (std::size_t r = 0; r < rows; ++r)
      for (int i = c.C() + c.NKV * c.hs; i < c.W(); ++i) {
        dv_got.push_back(got.dqkv[r * c.W() + i]);
        dv_want.push_back(dqkv[r * c.W() + i]);
      }
    EXPECT_LE(norm_relative_error(dv_got, dv_want), kGradientBound) << c.name() << ": dv of a single position";
    return;
  }
  EXPECT_LE(norm_relative_error(got.dqkv, dqkv), kGradientBound) << c.name() << ": gradient";
}

// T = 1, 63, 64 and 1024 at head widths 64 and 128, multi-head, grouped-query and multi-query.
TEST_F(FlashAttention, MatchesTheHostReferenceAtGpt2AndLlamaHeadWidths) {
  unsigned seed = 100;
  for (const int hs : {64, 128})
    for (const int T : {1, 63, 64, 1024})
      for (const auto& [NH, NKV] : {std::pair{2, 2}, std::pair{4, 2}, std::pair{4, 1}})
        check_case(*this, Case{T == 1024 ? 1 : 2, T, NH, NKV, hs}, seed += 2);
}

// The shipped decks' head width (inputs/*.toml: d_model 192 over 6 heads), across tile edges.
TEST_F(FlashAttention, MatchesTheHostReferenceAtHeadWidth32) {
  unsigned seed = 300;
  for (const int T : {1, 65, 130})
    for (const auto& [NH, NKV] : {std::pair{6, 6}, std::pair{6, 2}}) check_case(*this, Case{3, T, NH, NKV, 32}, seed += 2);
}

// Row t depends on positions 0..t alone: changing the last position's q, k and v leaves every
// earlier row's output and log-sum-exp as they were, bit for bit.
TEST_F(FlashAttention, IsCausal) {
  const Case c{1, 200, 4, 2, 64};
  auto qkv = random_floats(static_cast<std::size_t>(c.T) * c.W(), 7);
  const auto dout = random_floats(static_cast<std::size_t>(c.T) * c.C(), 8);
  const DeviceRun before = run_on_device(*this, *exec, c, qkv, dout);
  for (int i = 0; i < c.W(); ++i) qkv[static_cast<std::size_t>(c.T - 1) * c.W() + i] += 1.0f;
  const DeviceRun after = run_on_device(*this, *exec, c, qkv, dout);
  const std::size_t earlier = static_cast<std::size_t>(c.T - 1) * c.C();
  EXPECT_TRUE(std::equal(before.out.begin(), before.out.begin() + static_cast<std::ptrdiff_t>(earlier), after.out.begin()));
  for (int h = 0; h < c.NH; ++h)
    for (int t = 0; t + 1 < c.T; ++t) EXPECT_EQ(before.lse[h * c.T + t], after.lse[h * c.T + t]) << h << " " << t;
}

// A head width without a kernel takes the exact path on the same backend: the probabilities
// kept, and results as the bf16 exact path's.
TEST_F(FlashAttention, OtherHeadWidthsTakeTheExactPath) {
  const int B = 2, T = 9, NH = 2, C = 16;  // head width 8
  ASSERT_FALSE(exec->layer_kernels().attention_uses_flash(C / NH));
  const auto qkv = random_floats(static_cast<std::size_t>(B) * T * 3 * C, 11);
  Memory qkv_g = upload(qkv), out_g = exec->allocate(sizeof(float) * B * T * C),
         att_g = exec->allocate(sizeof(float) * B * NH * T * T), dwork_g = exec->allocate(sizeof(float) * B * NH * T * T);
  const AttentionProbs<float> probs{static_cast<float*>(att_g.data()), nullptr, static_cast<float*>(dwork_g.data()),
                                    NH};
  exec->layer_kernels().attention_forward(static_cast<float*>(out_g.data()), probs,
                                          static_cast<const float*>(qkv_g.data()), B, T, C, NH, NH);
  const auto att = download<float>(att_g, static_cast<std::size_t>(B) * NH * T * T);
  double row = 0;
  for (int j = 0; j < T; ++j) row += att[static_cast<std::size_t>(T - 1) * T + j];
  EXPECT_NEAR(row, 1.0, 1e-5) << "the exact path keeps the probabilities";
}

}  // namespace
}  // namespace st
