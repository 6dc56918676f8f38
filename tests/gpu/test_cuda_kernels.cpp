// The CUDA backend against the host: every layer kernel (GPT-2's and Llama's), forward and
// backward, against the host kernels in double precision on the same inputs (small odd shapes,
// so no size is a multiple of a block or a warp); every element-wise operation of the strategy
// against HostExec; memory and copies. Skips, saying why, where no CUDA device is usable (login nodes, CI).
//
// Tolerances, on the norm-relative error max|device - reference| / max|reference|:
//  - fp32: 1e-5.
//  - bf16 matmuls: each input is rounded to bf16 (relative error at most 2^-8, rounding to
//    nearest gives 2^-9), so each product a_k b_k is off by at most 2^-7 |a_k b_k|. Over a
//    reduction of length K these errors add like a random walk, to about 2^-7 sqrt(K) times the
//    typical |a_k b_k|, which is no more than the largest |result| for these random inputs:
//    bound 2^-7 sqrt(K) (plus the fp32 bound), summed over the matmuls a result passes through.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "exec/cuda/bf16_matmuls.hpp"
#include "exec/cuda/cuda_exec.hpp"
#include "exec/cuda/cuda_layer_kernels.hpp"
#include "exec/host_exec.hpp"
#include "exec/host_kernels.hpp"
#include "exec/host_llama_kernels.hpp"
#include "exec/layer_kernels.hpp"
#include "device_test.hpp"

namespace st {
namespace {

// Shapes: odd and small. hs = C / NH = 8, N = B*T = 14 rows, V < Vp.
constexpr int B = 2, T = 7, C = 24, NH = 3, V = 37, Vp = 40, N = B * T;
constexpr double kFp32Tolerance = 1e-5;

double bf16_tolerance(int K) { return std::ldexp(1.0, -7) * std::sqrt(static_cast<double>(K)) + kFp32Tolerance; }

std::vector<float> random_floats(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

double norm_relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  if (std::isnan(diff)) return std::numeric_limits<double>::infinity();
  return diff / std::max(1e-6, scale);
}

#define ST_EXPECT_CLOSE(got, want, tolerance) \
  EXPECT_LE(norm_relative_error((got), (want)), (tolerance)) << #got " against " #want

// Distance in units in the last place (0: the same float).
std::int64_t ulp_distance(float a, float b) {
  auto ordered = [](float f) {
    const auto i = static_cast<std::int64_t>(std::bit_cast<std::int32_t>(f));
    return i < 0 ? std::int64_t{std::numeric_limits<std::int32_t>::min()} - i : i;
  };
  const std::int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

// A device array filled from the host, owned by its Memory.
template <class T>
struct DeviceArray {
  Memory memory;
  std::size_t n = 0;
  T* data() const { return static_cast<T*>(memory.data()); }
};

template <class T>
DeviceArray<T> to_device(Exec& exec, const std::vector<T>& host) {
  DeviceArray<T> a{exec.allocate(host.size() * sizeof(T)), host.size()};
  exec.upload(a.data(), host.data(), host.size() * sizeof(T));
  return a;
}

template <class T>
std::vector<T> to_host(Exec& exec, const DeviceArray<T>& a) {
  std::vector<T> host(a.n);
  exec.download(host.data(), a.data(), a.n * sizeof(T));
  return host;
}

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    const cudaError_t code = cudaGetDeviceCount(&devices);
    if (code != cudaSuccess) GTEST_SKIP() << "no usable CUDA device: " << cudaGetErrorString(code);
    if (devices == 0) GTEST_SKIP() << "no usable CUDA device: none visible";
    fp32 = std::make_unique<CudaExec>(CudaExecSettings{0, false});
    bf16 = std::make_unique<CudaExec>(CudaExecSettings{0, true});
  }
  std::unique_ptr<CudaExec> fp32, bf16;
};

// ---- layer kernels ----

TEST_F(CudaKernels, EncoderForwardAndDeterministicBackward) {
  CudaExec& e = *fp32;
  std::vector<int> tokens(N);
  std::mt19937 rng(7);
  for (auto& t : tokens) t = static_cast<int>(rng() % 5);  // five distinct tokens: many repeats
  tokens[N - 1] = V - 1;
  const auto wte = random_floats(std::size_t{1} * V * C, 1), wpe = random_floats(std::size_t{1} * T * C, 2);
  const auto dout = random_floats(std::size_t{1} * N * C, 3);
  const auto dwte0 = random_floats(wte.size(), 4), dwpe0 = random_floats(wpe.size(), 5);  // gradients add up

  std::vector<double> out_ref(std::size_t{1} * N * C), dwte_ref = widen(dwte0), dwpe_ref = widen(dwpe0);
  const auto wte_d = widen(wte), wpe_d = widen(wpe), dout_d = widen(dout);
  kernels::encoder_forward(out_ref.data(), tokens.data(), wte_d.data(), wpe_d.data(), B, T, C);
  kernels::encoder_backward(dwte_ref.data(), dwpe_ref.data(), dout_d.data(), tokens.data(), B, T, C);

  auto tok = to_device(e, tokens);
  auto wte_g = to_device(e, wte), wpe_g = to_device(e, wpe), dout_g = to_device(e, dout);
  auto out_g = to_device(e, std::vector<float>(out_ref.size(), 1e30f));
  e.layer_kernels().encoder_forward(out_g.data(), tok.data(), wte_g.data(), wpe_g.data(), B, T, C);
  ST_EXPECT_CLOSE(to_host(e, out_g), out_ref, kFp32Tolerance);

  std::vector<float> first_dwte, first_dwpe;
  for (int run = 0; run < 2; ++run) {
    auto dwte_g = to_device(e, dwte0), dwpe_g = to_device(e, dwpe0);
    e.layer_kernels().encoder_backward(dwte_g.data(), dwpe_g.data(), dout_g.data(), tok.data(), B, T, C);
    const auto dwte = to_host(e, dwte_g), dwpe = to_host(e, dwpe_g);
    ST_EXPECT_CLOSE(dwte, dwte_ref, kFp32Tolerance);
    ST_EXPECT_CLOSE(dwpe, dwpe_ref, kFp32Tolerance);
    if (run == 0) {
      first_dwte = dwte;
      first_dwpe = dwpe;
    } else {
      EXPECT_EQ(0, std::memcmp(first_dwte.data(), dwte.data(), dwte.size() * sizeof(float))) << "dwte not deterministic";
      EXPECT_EQ(0, std::memcmp(first_dwpe.data(), dwpe.data(), dwpe.size() * sizeof(float))) << "dwpe not deterministic";
    }
  }
}

// Llama has no position table: the encoder is the token lookup alone (null wpe and dwpe).
TEST_F(CudaKernels, EncoderWithoutAPositionTable) {
  CudaExec& e = *fp32;
  std::vector<int> tokens(N);
  std::mt19937 rng(8);
  for (auto& t : tokens) t = static_cast<int>(rng() % V);
  const auto wte = random_floats(std::size_t{1} * V * C, 6), dout = random_floats(std::size_t{1} * N * C, 9);
  const auto dwte0 = random_floats(wte.size(), 10);
  std::vector<double> out_ref(std::size_t{1} * N * C), dwte_ref = widen(dwte0);
  const auto wte_d = widen(wte), dout_d = widen(dout);
  kernels::encoder_forward(out_ref.data(), tokens.data(), wte_d.data(), static_cast<const double*>(nullptr), B, T, C);
  kernels::encoder_backward(dwte_ref.data(), static_cast<double*>(nullptr), dout_d.data(), tokens.data(), B, T, C);

  auto tok = to_device(e, tokens);
  auto wte_g = to_device(e, wte), dout_g = to_device(e, dout), dwte_g = to_device(e, dwte0);
  auto out_g = to_device(e, std::vector<float>(out_ref.size(), 1e30f));
  e.layer_kernels().encoder_forward(out_g.data(), tok.data(), wte_g.data(), nullptr, B, T, C);
  ST_EXPECT_CLOSE(to_host(e, out_g), out_ref, kFp32Tolerance);
  e.layer_kernels().encoder_backward(dwte_g.data(), nullptr, dout_g.data(), tok.data(), B, T, C);
  ST_EXPECT_CLOSE(to_host(e, dwte_g), dwte_ref, kFp32Tolerance);
}

TEST_F(CudaKernels, LayerNormForwardBackward) {
  CudaExec& e = *fp32;
  const auto in = random_floats(std::size_t{1} * N * C, 11, 2.0f), w = random_floats(C, 12), b = random_floats(C, 13);
  const auto dout = random_floats(in.size(), 14), din0 = random_floats(in.size(), 15);
  const auto dw0 = random_floats(C, 16), db0 = random_floats(C, 17);

  const auto in_d = widen(in), w_d = widen(w), b_d = widen(b), dout_d = widen(dout);
  std::vector<double> out_ref(in.size()), mean_ref(N), rstd_ref(N);
  std::vector<double> din_ref = widen(din0), dw_ref = widen(dw0), db_ref = widen(db0);
  kernels::layernorm_forward(out_ref.data(), mean_ref.data(), rstd_ref.data(), in_d.data(), w_d.data(), b_d.data(), N,
                             C);
  kernels::layernorm_backward(din_ref.data(), dw_ref.data(), db_ref.data(), dout_d.data(), in_d.data(), w_d.data(),
                              mean_ref.data(), rstd_ref.data(), N, C);

  auto in_g = to_device(e, in), w_g = to_device(e, w), b_g = to_device(e, b), dout_g = to_device(e, dout);
  auto out_g = to_device(e, std::vector<float>(in.size())), mean_g = to_device(e, std::vector<float>(N)),
       rstd_g = to_device(e, std::vector<float>(N));
  e.layer_kernels().layernorm_forward(out_g.data(), mean_g.data(), rstd_g.data(), in_g.data(), w_g.data(), b_g.data(),
                                      N, C);
  ST_EXPECT_CLOSE(to_host(e, out_g), out_ref, kFp32Tolerance);
  ST_EXPECT_CLOSE(to_host(e, mean_g), mean_ref, kFp32Tolerance);
  ST_EXPECT_CLOSE(to_host(e, rstd_g), rstd_ref, kFp32Tolerance);

  auto din_g = to_device(e, din0), dw_g = to_device(e, dw0), db_g = to_device(e, db0);
  e.layer_kernels().layernorm_backward(din_g.data(), dw_g.data(), db_g.data(), dout_g.data(), in_g.data(), w_g.data(),
                                       mean_g.data(), rstd_g.data(), N, C);
  ST_EXPECT_CLOSE(to_host(e, din_g), din_ref, kFp32Tolerance);
  ST_EXPECT_CLOSE(to_host(e, dw_g), dw_ref, kFp32Tolerance);
  ST_EXPECT_CLOSE(to_host(e, db_g), db_ref, kFp32Tolerance);
}

// The fused residual norms and the one-pass norm backwards at a shape the small ones above do not
// reach: 100 rows (three whole chunks of kRowsPerChunk and a partial one) and 600 columns (more
// than a block's threads: each thread takes two or three). The fused forward writes the same
// bits as the device's add then norm; both backwards match the host and repeat their bits.
TEST_F(CudaKernels, ResidualNormsAndOnePassBackwardsOverSeveralChunks) {
  CudaExec& e = *fp32;
  LayerKernels<float>& k = e.layer_kernels();
  const int rows = 100, width = 600;
  const double eps = 1e-5;
  const std::size_t n = std::size_t{1} * rows * width;
  const auto a = random_floats(n, 301, 2.0f), b = random_floats(n, 302), w = random_floats(width, 303),
             bias = random_floats(width, 304), dout = random_floats(n, 305), din0 = random_floats(n, 306),
             dw0 = random_floats(width, 307), db0 = random_floats(width, 308);
  const auto a_d = widen(a), b_d = widen(b), w_d = widen(w), bias_d = widen(bias), dout_d = widen(dout);
  std::vector<double> res_ref(n), ln_ref(n), mean_ref(rows), rstd_ref(rows), rms_ref(n), rms_rstd_ref(rows);
  kernels::add(res_ref.data(), a_d.data(), b_d.data(), n);
  kernels::layernorm_forward(ln_ref.data(), mean_ref.data(), rstd_ref.data(), res_ref.data(), w_d.data(),
                             bias_d.data(), rows, width);
  kernels::rmsnorm_forward(rms_ref.data(), rms_rstd_ref.data(), res_ref.data(), w_d.data(), rows, width, eps);

  auto a_g = to_device(e, a), b_g = to_device(e, b), w_g = to_device(e, w), bias_g = to_device(e, bias),
       dout_g = to_device(e, dout);
  auto fresh = [&](std::size_t count) { return to_device(e, std::vector<float>(count, 1e30f)); };
  auto bits_equal = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };

  // LayerNorm: fused against the host, and against the device's own add then norm.
  auto res_g = fresh(n), ln_g = fresh(n), mean_g = fresh(rows), rstd_g = fresh(rows);
  k.residual_layernorm_forward(res_g.data(), ln_g.data(), mean_g.data(), rstd_g.data(), a_g.data(), b_g.data(),
                               w_g.data(), bias_g.data(), rows, width);
  ST_EXPECT_CLOSE(to_host(e, res_g), res_ref, kFp32Tolerance);
  ST_EXPECT_CLOSE(to_host(e, ln_g), ln_ref, kFp32Tolerance);
  ST_EXPECT_CLOSE(to_host(e, mean_g), mean_ref, kFp32Tolerance);
  ST_EXPECT_CLOSE(to_host(e, rstd_g), rstd_ref, kFp32Tolerance);
  auto res2_g = fresh(n), ln2_g = fresh(n), mean2_g = fresh(rows), rstd2_g = fresh(rows);
  k.add(res2_g.data(), a_g.data(), b_g.data(), n);
  k.layernorm_forward(ln2_g.data(), mean2_g.data(), rstd2_g.data(), res2_g.data(), w_g.data(), bias_g.data(), rows,
                      width);
  EXPECT_TRUE(bits_equal(to_host(e, res_g), to_host(e, res2_g)));
  EXPECT_TRUE(bits_equal(to_host(e, ln_g), to_host(e, ln2_g)));
  EXPECT_TRUE(bits_equal(to_host(e, mean_g), to_host(e, mean2_g)));
  EXPECT_TRUE(bits_equal(to_host(e, rstd_g), to_host(e, rstd2_g)));

  std::vector<double> din_ref = widen(din0), dw_ref = widen(dw0), db_ref = widen(db0);
  kernels::layernorm_backward(din_ref.data(), dw_ref.data(), db_ref.data(), dout_d.data(), res_ref.data(), w_d.data(),
                              mean_ref.data(), rstd_ref.data(), rows, width);
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    auto din_g = to_device(e, din0), dw_g = to_device(e, dw0), db_g = to_device(e, db0);
    k.layernorm_backward(din_g.data(), dw_g.data(), db_g.data(), dout_g.data(), res_g.data(), w_g.data(),
                         mean_g.data(), rstd_g.data(), rows, width);
    const auto din = to_host(e, din_g), dw = to_host(e, dw_g), db = to_host(e, db_g);
    ST_EXPECT_CLOSE(din, din_ref, kFp32Tolerance);
    ST_EXPECT_CLOSE(dw, dw_ref, kFp32Tolerance);
    ST_EXPECT_CLOSE(db, db_ref, kFp32Tolerance);
    std::vector<float> all = din;
    all.insert(all.end(), dw.begin(), dw.end());
    all.insert(all.end(), db.begin(), db.end());
    if (run == 0) {
      first = all;
    } else {
      EXPECT_TRUE(bits_equal(first, all)) << "LayerNorm backward not deterministic";
    }
  }

  // RMSNorm likewise.
  auto rres_g = fresh(n), rms_g = fresh(n), rms_rstd_g = fresh(rows);
  k.residual_rmsnorm_forward(rres_g.data(), rms_g.data(), rms_rstd_g.data(), a_g.data(), b_g.data(), w_g.data(), rows,
                             width, eps);
  ST_EXPECT_CLOSE(to_host(e, rres_g), res_ref, kFp32Tolerance);
  ST_EXPECT_CLOSE(to_host(e, rms_g), rms_ref, kFp32Tolerance);
  ST_EXPECT_CLOSE(to_host(e, rms_rstd_g), rms_rstd_ref, kFp32Tolerance);
  auto rms2_g = fresh(n), rms_rstd2_g = fresh(rows);
  k.rmsnorm_forward(rms2_g.data(), rms_rstd2_g.data(), res2_g.data(), w_g.data(), rows, width, eps);
  EXPECT_TRUE(bits_equal(to_host(e, rms_g), to_host(e, rms2_g)));
  EXPECT_TRUE(bits_equal(to_host(e, rms_rstd_g), to_host(e, rms_rstd2_g)));

  std::vector<double> rdin_ref = widen(din0), rdw_ref = widen(dw0);
  kernels::rmsnorm_backward(rdin_ref.data(), rdw_ref.data(), dout_d.data(), res_ref.data(), w_d.data(),
                            rms_rstd_ref.data(), rows, width);
  first.clear();
  for (int run = 0; run < 2; ++run) {
    auto din_g = to_device(e, din0), dw_g = to_device(e, dw0);
    k.rmsnorm_backward(din_g.data(), dw_g.data(), dout_g.data(), rres_g.data(), w_g.data(), rms_rstd_g.data(), rows,
                       width);
    const auto din = to_host(e, din_g), dw = to_host(e, dw_g);
    ST_EXPECT_CLOSE(din, rdin_ref, kFp32Tolerance);
    ST_EXPECT_CLOSE(dw, rdw_ref, kFp32Tolerance);
    std::vector<float> all = din;
    all.insert(all.end(), dw.begin(), dw.end());
    if (run == 0) {
      first = all;
    } else {
      EXPECT_TRUE(bits_equal(first, all)) << "RMSNorm backward not deterministic";
    }
  }
}

// Linear forward (with and without bias) and backward (din overwritten or accumulated, with and
// without dbias), in fp32 and with bf16 matmuls.
void check_linear(CudaExec& e, bool bf16_matmuls) {
  const int OC = V;  // 37 outputs from 24 inputs
  const auto in = random_floats(std::size_t{1} * N * C, 21), w = random_floats(std::size_t{1} * OC * C, 22),
             bias = random_floats(OC, 23), dout = random_floats(std::size_t{1} * N * OC, 24),
             din0 = random_floats(in.size(), 25), dw0 = random_floats(w.size(), 26), db0 = random_floats(OC, 27);
  const auto in_d = widen(in), w_d = widen(w), bias_d = widen(bias), dout_d = widen(dout);
  auto in_g = to_device(e, in), w_g = to_device(e, w), bias_g = to_device(e, bias), dout_g = to_device(e, dout);
  const double forward_tolerance = bf16_matmuls ? bf16_tolerance(C) : kFp32Tolerance;

  for (const bool with_bias : {true, false}) {
    std::vector<double> out_ref(std::size_t{1} * N * OC);
    kernels::linear_forward(out_ref.data(), in_d.data(), w_d.data(), with_bias ? bias_d.data() : nullptr, N, C, OC);
    auto out_g = to_device(e, std::vector<float>(out_ref.size(), 1e30f));
    e.layer_kernels().linear_forward(out_g.data(), in_g.data(), w_g.data(), with_bias ? bias_g.data() : nullptr, N, C,
                                     OC);
    EXPECT_LE(norm_relative_error(to_host(e, out_g), out_ref), forward_tolerance) << "bias " << with_bias;
  }
  for (const bool accumulate_din : {false, true}) {
    std::vector<double> din_ref = widen(din0), dw_ref = widen(dw0), db_ref = widen(db0);
    kernels::linear_backward(din_ref.data(), dw_ref.data(), accumulate_din ? db_ref.data() : nullptr, dout_d.data(),
                             in_d.data(), w_d.data(), N, C, OC, accumulate_din);
    auto din_g = to_device(e, din0), dw_g = to_device(e, dw0), db_g = to_device(e, db0);
    e.layer_kernels().linear_backward(din_g.data(), dw_g.data(), accumulate_din ? db_g.data() : nullptr, dout_g.data(),
                                      in_g.data(), w_g.data(), N, C, OC, accumulate_din);
    EXPECT_LE(norm_relative_error(to_host(e, din_g), din_ref), bf16_matmuls ? bf16_tolerance(OC) : kFp32Tolerance)
        << "accumulate_din " << accumulate_din;
    EXPECT_LE(norm_relative_error(to_host(e, dw_g), dw_ref), bf16_matmuls ? bf16_tolerance(N) : kFp32Tolerance)
        << "accumulate_din " << accumulate_din;
    ST_EXPECT_CLOSE(to_host(e, db_g), db_ref, kFp32Tolerance);  // column sums: no matmul
  }
}

TEST_F(CudaKernels, LinearFp32) { check_linear(*fp32, false); }
TEST_F(CudaKernels, LinearBf16Matmuls) { check_linear(*bf16, true); }

// The bf16 setting's linear products take operands rounded to bf16 exactly as the host rounds
// them (core/bf16.hpp), with fp32 accumulation: against the host's products of the rounded
// operands they agree to fp32's bound, which TF32 operands (10 mantissa bits, not 7) would not
// meet. In pieces of a few rows (the weight gradient summed over pieces) as in one piece.
TEST_F(CudaKernels, Bf16MatmulOperandsAreRoundedAsTheHostRounds) {
  CudaExec& e = *bf16;
  const int OC = V;
  const auto in = random_floats(std::size_t{1} * N * C, 41), w = random_floats(std::size_t{1} * OC * C, 42),
             dout = random_floats(std::size_t{1} * N * OC, 43), dw0 = random_floats(w.size(), 44);
  auto rounded = [](const std::vector<float>& v) {
    std::vector<double> r(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) r[i] = to_float(to_bf16(v[i]));
    return r;
  };
  const auto in_r = rounded(in), w_r = rounded(w), dout_r = rounded(dout);
  std::vector<double> out_ref(std::size_t{1} * N * OC), din_ref(in.size()), dw_ref = widen(dw0);
  kernels::linear_forward(out_ref.data(), in_r.data(), w_r.data(), static_cast<const double*>(nullptr), N, C, OC);
  kernels::linear_backward(din_ref.data(), dw_ref.data(), static_cast<double*>(nullptr), dout_r.data(), in_r.data(),
                           w_r.data(), N, C, OC, false);
  // The unrounded reference is farther off than the bound: the test can tell the two apart.
  std::vector<double> out_unrounded(out_ref.size());
  const auto in_d = widen(in), w_d = widen(w);
  kernels::linear_forward(out_unrounded.data(), in_d.data(), w_d.data(), static_cast<const double*>(nullptr), N, C, OC);
  ASSERT_GT(norm_relative_error(std::vector<float>(out_unrounded.begin(), out_unrounded.end()), out_ref), 1e-4);

  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  std::unique_ptr<cublasContext, cublasStatus_t (*)(cublasHandle_t)> owned(handle, cublasDestroy);
  ASSERT_EQ(cublasSetStream(handle, e.compute_stream()), CUBLAS_STATUS_SUCCESS);
  auto in_g = to_device(e, in), w_g = to_device(e, w), dout_g = to_device(e, dout);
  for (const std::size_t piece : {Bf16Matmuls::kPieceElements, std::size_t{3} * OC}) {
    Bf16Matmuls matmuls(e.compute_stream(), handle, piece);
    auto out_g = to_device(e, std::vector<float>(out_ref.size(), 1e30f));
    auto din_g = to_device(e, std::vector<float>(in.size(), 1e30f)), dw_g = to_device(e, dw0);
    matmuls.forward(out_g.data(), in_g.data(), w_g.data(), nullptr, N, C, OC);
    matmuls.backward(din_g.data(), dw_g.data(), nullptr, dout_g.data(), in_g.data(), w_g.data(), N, C, OC, 0.0f);
    ST_EXPECT_CLOSE(to_host(e, out_g), out_ref, kFp32Tolerance) << " piece " << piece;
    ST_EXPECT_CLOSE(to_host(e, din_g), din_ref, kFp32Tolerance) << " piece " << piece;
    ST_EXPECT_CLOSE(to_host(e, dw_g), dw_ref, kFp32Tolerance) << " piece " << piece;
  }
}

// The bf16 backward rounds dout once and takes the bias gradient's column sums in that pass: on
// 1000 rows (32 chunks of 32, the last short) they are the fp32 path's sums bit for bit (the same
// chunks, each in row order, then the same fixed tree over the chunks), within fp32's bound of
// the host's sum in double, the same bits again on a second run, and the same chunk sums when the
// rows go through in pieces of 32 and 64 rows.
TEST_F(CudaKernels, Bf16BackwardTakesTheBiasGradientFromItsRoundingPass) {
  const int rows = 1000, OC = 77;
  const auto in = random_floats(std::size_t{1} * rows * C, 71), w = random_floats(std::size_t{1} * OC * C, 72),
             dout = random_floats(std::size_t{1} * rows * OC, 73), db0 = random_floats(OC, 74);
  std::vector<double> db_ref = widen(db0);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < OC; ++c) db_ref[static_cast<std::size_t>(c)] += dout[static_cast<std::size_t>(r) * OC + c];
  auto bias_gradient = [&](CudaExec& e) {
    auto in_g = to_device(e, in), w_g = to_device(e, w), dout_g = to_device(e, dout);
    auto din = to_device(e, std::vector<float>(in.size())), dw = to_device(e, std::vector<float>(w.size())),
         db = to_device(e, db0);
    e.layer_kernels().linear_backward(din.data(), dw.data(), db.data(), dout_g.data(), in_g.data(), w_g.data(), rows,
                                      C, OC, false);
    return to_host(e, db);
  };
  const std::vector<float> from_bf16 = bias_gradient(*bf16), from_fp32 = bias_gradient(*fp32);
  EXPECT_EQ(0, std::memcmp(from_bf16.data(), from_fp32.data(), OC * sizeof(float)));
  ST_EXPECT_CLOSE(from_bf16, db_ref, kFp32Tolerance);
  const std::vector<float> again = bias_gradient(*bf16);
  EXPECT_EQ(0, std::memcmp(from_bf16.data(), again.data(), OC * sizeof(float)));

  CudaExec& e = *bf16;
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  std::unique_ptr<cublasContext, cublasStatus_t (*)(cublasHandle_t)> owned(handle, cublasDestroy);
  ASSERT_EQ(cublasSetStream(handle, e.compute_stream()), CUBLAS_STATUS_SUCCESS);
  auto in_g = to_device(e, in), w_g = to_device(e, w), dout_g = to_device(e, dout);
  const int chunks = (rows + 31) / 32;
  std::vector<float> whole;
  // 40 and 70 rows' worth of elements: pieces of 32 and 64 rows.
  for (const std::size_t piece : {Bf16Matmuls::kPieceElements, std::size_t{40} * OC, std::size_t{70} * OC}) {
    Bf16Matmuls matmuls(e.compute_stream(), handle, piece);
    auto din = to_device(e, std::vector<float>(in.size())), dw = to_device(e, std::vector<float>(w.size()));
    auto partials = to_device(e, std::vector<float>(std::size_t{1} * chunks * OC, 1e30f));
    matmuls.backward(din.data(), dw.data(), partials.data(), dout_g.data(), in_g.data(), w_g.data(), rows, C, OC, 0.0f);
    const std::vector<float> sums = to_host(e, partials);
    for (const float v : sums) ASSERT_LT(std::abs(v), 1e29f) << "every chunk's sum written, piece " << piece;
    if (whole.empty()) whole = sums;
    EXPECT_EQ(0, std::memcmp(whole.data(), sums.data(), sums.size() * sizeof(float))) << "piece " << piece;
  }
}

// cuBLASLt's epilogues (Bf16Matmuls: the bias, GELU with its argument kept, GELU's derivative on
// the input gradient) against the host's composition in double on the same bf16-rounded
// operands: the products to fp32's bound, GELU and the gradient through it to 1e-4 of the
// largest value (cuBLASLt's tanh against the host's). At widths that are multiples of 8, which
// cuBLASLt takes, each fused call must have run through it; in one piece and in pieces of a few
// rows; and the backward with its input in dpre's own memory (GPT-2 recomputing the GELU output
// into the scratch the gradient then overwrites). At width 37, which cuBLASLt does not take for
// GELU, the seam's fallback against the same host reference.
TEST_F(CudaKernels, Bf16EpiloguesMatchTheHostComposition) {
  CudaExec& e = *bf16;
  const int rows = 64, in_width = 32, out_width = 64;  // the MLP's input layer: in_width -> out_width
  const auto in = random_floats(std::size_t{1} * rows * in_width, 81),
             w = random_floats(std::size_t{1} * out_width * in_width, 82), bias = random_floats(out_width, 83),
             dout = random_floats(std::size_t{1} * rows * in_width, 84),
             w2 = random_floats(std::size_t{1} * in_width * out_width, 85), dw0 = random_floats(w2.size(), 86);
  auto rounded = [](const std::vector<float>& v) {
    std::vector<double> r(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) r[i] = to_float(to_bf16(v[i]));
    return r;
  };
  const auto in_r = rounded(in), w_r = rounded(w), dout_r = rounded(dout), w2_r = rounded(w2), bias_d = widen(bias);
  // Forward: pre = in W^T + bias, out = gelu(pre).
  std::vector<double> pre_ref(std::size_t{1} * rows * out_width), gelu_ref(pre_ref.size());
  kernels::linear_forward(pre_ref.data(), in_r.data(), w_r.data(), bias_d.data(), rows, in_width, out_width);
  kernels::gelu_forward(gelu_ref.data(), pre_ref.data(), pre_ref.size());

  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  std::unique_ptr<cublasContext, cublasStatus_t (*)(cublasHandle_t)> owned(handle, cublasDestroy);
  ASSERT_EQ(cublasSetStream(handle, e.compute_stream()), CUBLAS_STATUS_SUCCESS);
  auto in_g = to_device(e, in), w_g = to_device(e, w), bias_g = to_device(e, bias), dout_g = to_device(e, dout),
       w2_g = to_device(e, w2);
  // One piece, and pieces of 1024 elements.
  for (const std::size_t piece : {Bf16Matmuls::kPieceElements, std::size_t{16} * out_width}) {
    SCOPED_TRACE("piece of " + std::to_string(piece) + " elements");
    Bf16Matmuls matmuls(e.compute_stream(), handle, piece);
    auto out_g = to_device(e, std::vector<float>(pre_ref.size(), 1e30f)),
         pre_g = to_device(e, std::vector<float>(pre_ref.size(), 1e30f)),
         biased_g = to_device(e, std::vector<float>(pre_ref.size(), 1e30f));
    matmuls.forward(biased_g.data(), in_g.data(), w_g.data(), bias_g.data(), rows, in_width, out_width);
    EXPECT_GT(matmuls.epilogue_runs(LtEpilogue::bias), 0u) << "the bias added by cuBLASLt";
    ST_EXPECT_CLOSE(to_host(e, biased_g), pre_ref, kFp32Tolerance);
    ASSERT_TRUE(matmuls.forward_gelu(out_g.data(), pre_g.data(), in_g.data(), w_g.data(), bias_g.data(), rows,
                                     in_width, out_width))
        << "cuBLASLt takes GELU_AUX_BIAS at these widths";
    const std::vector<float> pre = to_host(e, pre_g);
    ST_EXPECT_CLOSE(pre, pre_ref, kFp32Tolerance);
    ST_EXPECT_CLOSE(to_host(e, out_g), gelu_ref, 1e-4);

    // Backward of the next layer (out_width -> in_width, weight w2 [in_width, out_width]) whose
    // input was gelu(pre): dpre = (dout w2) * gelu'(pre), dw2 += dout^T gelu(pre).
    const std::vector<float> gelu_out = to_host(e, out_g);
    const auto gelu_r = rounded(gelu_out);
    std::vector<double> dgelu_ref(pre_ref.size()), dpre_ref(pre_ref.size()), dw_ref = widen(dw0);
    kernels::linear_backward(dgelu_ref.data(), dw_ref.data(), static_cast<double*>(nullptr), dout_r.data(),
                             gelu_r.data(), w2_r.data(), rows, out_width, in_width, false);
    const auto pre_d = widen(pre);  // the derivative at the stored argument
    kernels::gelu_backward(dpre_ref.data(), pre_d.data(), dgelu_ref.data(), pre_ref.size());
    auto dpre_g = to_device(e, std::vector<float>(pre_ref.size(), 1e30f)), dw_g = to_device(e, dw0);
    ASSERT_TRUE(matmuls.backward_dgelu(dpre_g.data(), dw_g.data(), nullptr, dout_g.data(), out_g.data(), pre_g.data(),
                                       w2_g.data(), rows, out_width, in_width))
        << "cuBLASLt takes DGELU at these widths";
    ST_EXPECT_CLOSE(to_host(e, dpre_g), dpre_ref, 1e-4);
    ST_EXPECT_CLOSE(to_host(e, dw_g), dw_ref, kFp32Tolerance);
    // The same with the GELU output in dpre's memory: read (for the weight's gradient) first.
    auto shared_g = to_device(e, gelu_out), dw_shared = to_device(e, dw0);
    ASSERT_TRUE(matmuls.backward_dgelu(shared_g.data(), dw_shared.data(), nullptr, dout_g.data(), shared_g.data(),
                                       pre_g.data(), w2_g.data(), rows, out_width, in_width));
    ST_EXPECT_CLOSE(to_host(e, shared_g), dpre_ref, 1e-4);
    ST_EXPECT_CLOSE(to_host(e, dw_shared), dw_ref, kFp32Tolerance);
    // The small pieces: the forward's 1024 elements are 32 rows of 32, the backward's 16 of 64.
    const bool whole = piece == Bf16Matmuls::kPieceElements;
    EXPECT_EQ(matmuls.epilogue_runs(LtEpilogue::gelu_aux_bias), whole ? 1u : 2u);
    EXPECT_EQ(matmuls.epilogue_runs(LtEpilogue::dgelu), whole ? 2u : 8u);
  }

  // Through the seam with the fusion asked for, at a width cuBLASLt does not take for GELU (37):
  // the separate kernels, against the same host reference.
  CudaExecSettings fused_settings;
  fused_settings.bf16_matmuls = true;
  fused_settings.gelu_fusion = true;
  CudaExec fused(fused_settings);
  const int odd = V;  // 37
  const auto w_odd = random_floats(std::size_t{1} * odd * in_width, 87), b_odd = random_floats(odd, 88);
  std::vector<double> odd_pre_ref(std::size_t{1} * rows * odd), odd_ref(odd_pre_ref.size());
  const auto w_odd_r = rounded(w_odd), b_odd_d = widen(b_odd);
  kernels::linear_forward(odd_pre_ref.data(), in_r.data(), w_odd_r.data(), b_odd_d.data(), rows, in_width, odd);
  kernels::gelu_forward(odd_ref.data(), odd_pre_ref.data(), odd_ref.size());
  auto in_f = to_device(fused, in), w_odd_g = to_device(fused, w_odd), b_odd_g = to_device(fused, b_odd);
  auto odd_out = to_device(fused, std::vector<float>(odd_ref.size(), 1e30f)),
       odd_pre = to_device(fused, std::vector<float>(odd_ref.size(), 1e30f));
  fused.layer_kernels().linear_gelu_forward(odd_out.data(), odd_pre.data(), in_f.data(), w_odd_g.data(), b_odd_g.data(),
                                            rows, in_width, odd);
  ST_EXPECT_CLOSE(to_host(fused, odd_pre), odd_pre_ref, kFp32Tolerance);
  ST_EXPECT_CLOSE(to_host(fused, odd_out), odd_ref, 1e-5);  // gelu_forward's own tanh: fp32's bound
  EXPECT_EQ(dynamic_cast<CudaLayerKernels&>(fused.layer_kernels()).epilogue_runs(LtEpilogue::gelu_aux_bias), 0u);
}

// Attention forward and backward; att must be exactly 0 above the diagonal. Not kept (the
// probabilities recomputed in backward), the results are those of the kept run, bit for bit.
void check_attention(CudaExec& e, bool bf16_matmuls) {
  const int hs = C / NH;
  const auto qkv = random_floats(std::size_t{1} * N * 3 * C, 31), dout = random_floats(std::size_t{1} * N * C, 32);
  const std::size_t att_size = std::size_t{1} * B * NH * T * T;
  const int heads = e.layer_kernels().attention_heads_at_once(B, NH);
  const std::size_t working_size = std::size_t{1} * heads * T * T;
  const auto qkv_d = widen(qkv), dout_d = widen(dout);
  std::vector<double> out_ref(dout.size()), att_ref(att_size), dqkv_ref(qkv.size()), dworking_ref(att_size);
  const AttentionProbs<double> ref_probs{att_ref.data(), nullptr, dworking_ref.data(), B * NH};
  kernels::attention_forward(out_ref.data(), ref_probs, qkv_d.data(), B, T, C, NH, NH);
  kernels::attention_backward(dqkv_ref.data(), ref_probs, dout_d.data(), qkv_d.data(), B, T, C, NH, NH);

  auto qkv_g = to_device(e, qkv), dout_g = to_device(e, dout);
  auto out_g = to_device(e, std::vector<float>(dout.size(), 1e30f)),
       att_g = to_device(e, std::vector<float>(att_size, 1e30f));
  // The working sets start as garbage: every block is written before it is read.
  auto working_g = to_device(e, std::vector<float>(working_size, 1e30f)),
       dworking_g = to_device(e, std::vector<float>(working_size, -1e30f));
  const AttentionProbs<float> kept{att_g.data(), nullptr, dworking_g.data(), heads};
  const AttentionProbs<float> recomputed{nullptr, working_g.data(), dworking_g.data(), heads};
  e.layer_kernels().attention_forward(out_g.data(), kept, qkv_g.data(), B, T, C, NH, NH);
  const auto att = to_host(e, att_g);
  // Scores pass through one matmul of length hs, the output through a second of length T.
  const double tolerance = bf16_matmuls ? bf16_tolerance(hs) + bf16_tolerance(T) : kFp32Tolerance;
  ST_EXPECT_CLOSE(att, att_ref, tolerance);
  const auto out = to_host(e, out_g);
  ST_EXPECT_CLOSE(out, out_ref, tolerance);
  for (int bh = 0; bh < B * NH; ++bh)
    for (int t = 0; t < T; ++t)
      for (int s = t + 1; s < T; ++s) ASSERT_EQ(att[(static_cast<std::size_t>(bh) * T + t) * T + s], 0.0f);

  // dqkv is overwritten (start from garbage).
  auto dqkv_g = to_device(e, std::vector<float>(qkv.size(), 1e30f));
  e.layer_kernels().attention_backward(dqkv_g.data(), kept, dout_g.data(), qkv_g.data(), B, T, C, NH, NH);
  // Gradients pass through dP (length hs) then dQ/dK (length T): twice the forward bound.
  const auto dqkv = to_host(e, dqkv_g);
  ST_EXPECT_CLOSE(dqkv, dqkv_ref, bf16_matmuls ? 2 * tolerance : kFp32Tolerance);

  auto out_r = to_device(e, std::vector<float>(dout.size(), 1e30f)),
       dqkv_r = to_device(e, std::vector<float>(qkv.size(), 1e30f));
  e.layer_kernels().attention_forward(out_r.data(), recomputed, qkv_g.data(), B, T, C, NH, NH);
  e.layer_kernels().attention_backward(dqkv_r.data(), recomputed, dout_g.data(), qkv_g.data(), B, T, C, NH, NH);
  EXPECT_EQ(to_host(e, out_r), out);
  EXPECT_EQ(to_host(e, dqkv_r), dqkv);
}

TEST_F(CudaKernels, AttentionFp32) { check_attention(*fp32, false); }

// Decoding's attention over a cache: rows first.. of one sequence against the host's causal
// attention in double, from several first rows (70 positions: past two warps of keys), and one
// row past 12288 positions, where the kernel asks the device for more than 48 KiB of shared
// memory for its scores.
TEST_F(CudaKernels, AttentionRowsOverACacheMatchTheHost) {
  const int positions = 70;
  const auto qkv = random_floats(std::size_t{1} * positions * 3 * C, 41);
  const auto qkv_d = widen(qkv);
  std::vector<double> reference(std::size_t{1} * positions * C), att(std::size_t{1} * NH * positions * positions);
  const AttentionProbs<double> probs{att.data(), nullptr, nullptr, NH};
  kernels::attention_forward(reference.data(), probs, qkv_d.data(), 1, positions, C, NH, NH);
  auto qkv_g = to_device(*fp32, qkv);
  for (const int first : {0, 1, 33, positions - 1}) {
    const int n = positions - first;
    auto out_g = to_device(*fp32, std::vector<float>(std::size_t{1} * n * C, 1e30f));
    fp32->layer_kernels().attention_rows(out_g.data(), qkv_g.data(), first, n, C, NH, NH);
    const std::vector<double> want(reference.begin() + std::ptrdiff_t{first} * C, reference.end());
    ST_EXPECT_CLOSE(to_host(*fp32, out_g), want, kFp32Tolerance);
  }
  // Just under, at and past the default limit with the kernel's static reduction space counted.
  for (const int long_cache : {12255, 12270, 13000}) {
    const auto long_qkv = random_floats(std::size_t{1} * long_cache * 3 * C, 42, 0.3f);
    const auto long_d = widen(long_qkv);
    std::vector<double> last_row(C);
    kernels::attention_rows(last_row.data(), long_d.data(), long_cache - 1, 1, C, NH, NH);
    auto long_g = to_device(*fp32, long_qkv);
    auto row_g = to_device(*fp32, std::vector<float>(C, 1e30f));
    fp32->layer_kernels().attention_rows(row_g.data(), long_g.data(), long_cache - 1, 1, C, NH, NH);
    ST_EXPECT_CLOSE(to_host(*fp32, row_g), last_row, kFp32Tolerance) << long_cache << " positions";
  }
}
TEST_F(CudaKernels, AttentionBf16Matmuls) { check_attention(*bf16, true); }

TEST_F(CudaKernels, GeluAndAdd) {
  CudaExec& e = *fp32;
  const std::size_t n = std::size_t{1} * N * 4 * C + 3;
  auto in = random_floats(n, 41, 3.0f);
  in[0] = 0.0f;
  in[1] = 12.0f;  // where tanh saturates
  in[2] = -12.0f;
  const auto dout = random_floats(n, 42), other = random_floats(n, 43);
  const auto in_d = widen(in), dout_d = widen(dout), other_d = widen(other);
  std::vector<double> out_ref(n), din_ref(n), sum_ref(n);
  kernels::gelu_forward(out_ref.data(), in_d.data(), n);
  kernels::gelu_backward(din_ref.data(), in_d.data(), dout_d.data(), n);
  kernels::add(sum_ref.data(), in_d.data(), other_d.data(), n);

  auto in_g = to_device(e, in), dout_g = to_device(e, dout), other_g = to_device(e, other);
  auto out_g = to_device(e, std::vector<float>(n, 1e30f)), din_g = to_device(e, std::vector<float>(n, 1e30f)),
       sum_g = to_device(e, std::vector<float>(n, 1e30f));
  e.layer_kernels().gelu_forward(out_g.data(), in_g.data(), n);
  e.layer_kernels().gelu_backward(din_g.data(), in_g.data(), dout_g.data(), n);
  e.layer_kernels().add(sum_g.data(), in_g.data(), other_g.data(), n);
  ST_EXPECT_CLOSE(to_host(e, out_g), out_ref, kFp32Tolerance);
  ST_EXPECT_CLOSE(to_host(e, din_g), din_ref, kFp32Tolerance);
  ST_EXPECT_CLOSE(to_host(e, sum_g), sum_ref, kFp32Tolerance);
}

TEST_F(CudaKernels, SoftmaxCrossEntropyWithPaddedVocabulary) {
  CudaExec& e = *fp32;
  auto logits = random_floats(std::size_t{1} * N * Vp, 51, 3.0f);  // padded columns hold garbage too
  std::vector<int> targets(N);
  std::mt19937 rng(52);
  for (auto& t : targets) t = static_cast<int>(rng() % V);
  targets[0] = V - 1;
  const float scale = 1.0f / N;

  std::vector<double> probs_ref = widen(logits), losses_ref(N);
  const double sum_ref =
      kernels::softmax_cross_entropy_forward(probs_ref.data(), losses_ref.data(), targets.data(), N, V, Vp);
  std::vector<double> dlogits_ref = probs_ref;
  kernels::softmax_cross_entropy_backward(dlogits_ref.data(), targets.data(), N, V, Vp, static_cast<double>(scale));

  auto probs_g = to_device(e, logits), losses_g = to_device(e, std::vector<float>(N, 1e30f));
  auto targets_g = to_device(e, targets);
  const double sum = testing_support::device_loss_sum(e, [&](LossSum loss) {
    e.layer_kernels().softmax_cross_entropy_forward(probs_g.data(), losses_g.data(), targets_g.data(), N, V, Vp, loss);
  });
  EXPECT_NEAR(sum, sum_ref, kFp32Tolerance * std::abs(sum_ref));
  const auto probs = to_host(e, probs_g);
  ST_EXPECT_CLOSE(probs, probs_ref, kFp32Tolerance);
  ST_EXPECT_CLOSE(to_host(e, losses_g), losses_ref, kFp32Tolerance);
  for (int i = 0; i < N; ++i)
    for (int j = V; j < Vp; ++j) ASSERT_EQ(probs[static_cast<std::size_t>(i) * Vp + j], 0.0f);
  // The same inputs give the same loss sum, bit for bit.
  auto again_g = to_device(e, logits);
  EXPECT_EQ(sum, testing_support::device_loss_sum(e, [&](LossSum loss) {
              e.layer_kernels().softmax_cross_entropy_forward(again_g.data(), losses_g.data(), targets_g.data(), N, V,
                                                              Vp, loss);
            }));

  e.layer_kernels().softmax_cross_entropy_backward(probs_g.data(), targets_g.data(), N, V, Vp, scale);
  ST_EXPECT_CLOSE(to_host(e, probs_g), dlogits_ref, kFp32Tolerance);

  // Without targets: only the softmax, and nothing is added to the loss.
  auto plain_g = to_device(e, logits);
  EXPECT_EQ(0.0, testing_support::device_loss_sum(e, [&](LossSum loss) {
              e.layer_kernels().softmax_cross_entropy_forward(plain_g.data(), nullptr, nullptr, N, V, Vp, loss);
            }));
  ST_EXPECT_CLOSE(to_host(e, plain_g), probs_ref, kFp32Tolerance);
}

// A negative token is a row another tensor-parallel rank's table holds: the forward writes the
// position row (zeros without wpe), the backward adds to dwpe alone and never touches dwte
// (the sort puts negative tokens first; they must not index the table).
TEST_F(CudaKernels, EncoderWithRowsAnotherRankHolds) {
  CudaExec& e = *fp32;
  std::vector<int> tokens(N);
  std::mt19937 rng(18);
  for (auto& t : tokens) t = static_cast<int>(rng() % 5);
  tokens[0] = -1;
  tokens[3] = -1;
  tokens[4] = -7;  // any negative value
  tokens[N - 2] = -1;
  tokens[N - 1] = V - 1;
  const auto wte = random_floats(std::size_t{1} * V * C, 19), wpe = random_floats(std::size_t{1} * T * C, 20);
  const auto dout = random_floats(std::size_t{1} * N * C, 21);
  const auto dwte0 = random_floats(wte.size(), 22), dwpe0 = random_floats(wpe.size(), 23);
  const auto wte_d = widen(wte), wpe_d = widen(wpe), dout_d = widen(dout);
  auto tok = to_device(e, tokens);
  auto wte_g = to_device(e, wte), wpe_g = to_device(e, wpe), dout_g = to_device(e, dout);

  // With a position table.
  std::vector<double> out_ref(std::size_t{1} * N * C), dwte_ref = widen(dwte0), dwpe_ref = widen(dwpe0);
  kernels::encoder_forward(out_ref.data(), tokens.data(), wte_d.data(), wpe_d.data(), B, T, C);
  kernels::encoder_backward(dwte_ref.data(), dwpe_ref.data(), dout_d.data(), tokens.data(), B, T, C);
  auto out_g = to_device(e, std::vector<float>(out_ref.size(), 1e30f));
  e.layer_kernels().encoder_forward(out_g.data(), tok.data(), wte_g.data(), wpe_g.data(), B, T, C);
  const auto out = to_host(e, out_g);
  ST_EXPECT_CLOSE(out, out_ref, kFp32Tolerance);
  for (int c = 0; c < C; ++c) ASSERT_EQ(out[std::size_t{4} * C + c], wpe[std::size_t{4} * C + c]) << "position row, c=" << c;
  std::vector<float> first_dwte;
  for (int run = 0; run < 2; ++run) {
    auto dwte_g = to_device(e, dwte0), dwpe_g = to_device(e, dwpe0);
    e.layer_kernels().encoder_backward(dwte_g.data(), dwpe_g.data(), dout_g.data(), tok.data(), B, T, C);
    const auto dwte = to_host(e, dwte_g);
    ST_EXPECT_CLOSE(dwte, dwte_ref, kFp32Tolerance);
    ST_EXPECT_CLOSE(to_host(e, dwpe_g), dwpe_ref, kFp32Tolerance);
    if (run == 0) first_dwte = dwte;
    else EXPECT_EQ(0, std::memcmp(first_dwte.data(), dwte.data(), dwte.size() * sizeof(float))) << "dwte not deterministic";
  }

  // Without one: zeros for the other rank's rows, and dwte alone.
  std::vector<double> plain_ref(out_ref.size()), plain_dwte_ref = widen(dwte0);
  kernels::encoder_forward(plain_ref.data(), tokens.data(), wte_d.data(), static_cast<const double*>(nullptr), B, T, C);
  kernels::encoder_backward(plain_dwte_ref.data(), static_cast<double*>(nullptr), dout_d.data(), tokens.data(), B, T,
                            C);
  auto plain_g = to_device(e, std::vector<float>(out_ref.size(), 1e30f)), plain_dwte_g = to_device(e, dwte0);
  e.layer_kernels().encoder_forward(plain_g.data(), tok.data(), wte_g.data(), nullptr, B, T, C);
  const auto plain = to_host(e, plain_g);
  ST_EXPECT_CLOSE(plain, plain_ref, kFp32Tolerance);
  for (int c = 0; c < C; ++c) ASSERT_EQ(plain[c], 0.0f) << "row of token -1, c=" << c;
  e.layer_kernels().encoder_backward(plain_dwte_g.data(), nullptr, dout_g.data(), tok.data(), B, T, C);
  ST_EXPECT_CLOSE(to_host(e, plain_dwte_g), plain_dwte_ref, kFp32Tolerance);

  // Every token another rank's: dwte keeps its bits, dwpe still gets the whole gradient.
  const std::vector<int> foreign(N, -1);
  std::vector<double> foreign_dwpe_ref = widen(dwpe0), unused_dwte = widen(dwte0);
  kernels::encoder_backward(unused_dwte.data(), foreign_dwpe_ref.data(), dout_d.data(), foreign.data(), B, T, C);
  auto foreign_g = to_device(e, foreign);
  auto dwte_g = to_device(e, dwte0), dwpe_g = to_device(e, dwpe0);
  e.layer_kernels().encoder_backward(dwte_g.data(), dwpe_g.data(), dout_g.data(), foreign_g.data(), B, T, C);
  const auto dwte = to_host(e, dwte_g);
  EXPECT_EQ(0, std::memcmp(dwte0.data(), dwte.data(), dwte.size() * sizeof(float))) << "dwte changed";
  ST_EXPECT_CLOSE(to_host(e, dwpe_g), foreign_dwpe_ref, kFp32Tolerance);
}

// Column k of an N x 3 stats array (max, sum, target logit).
template <class R>
std::vector<R> stats_column(const std::vector<R>& stats, std::size_t offset, int rows, int k) {
  std::vector<R> column(static_cast<std::size_t>(rows));
  for (int i = 0; i < rows; ++i) column[static_cast<std::size_t>(i)] = stats[offset + 3 * static_cast<std::size_t>(i) + k];
  return column;
}

// The vocabulary-parallel cross-entropy against the host, slice by slice: three slices of
// kSliceVp = 24 columns as three ranks hold them (firsts 0, 24, 48), with 24, 19 and 0 real
// columns (a vocabulary of 43; the last rank's slice is all padding). Targets fall in the first
// two slices, so each slice sees rows whose target it holds and rows whose target it does not.
// The combined loss is also checked against the whole vocabulary's softmax cross-entropy.
TEST_F(CudaKernels, LogitSlicesMatchTheHost) {
  CudaExec& e = *fp32;
  constexpr int kRows = 7, kSliceVp = 24, kParts = 3, kVocab = 43;
  constexpr int kFirst[kParts] = {0, 24, 48}, kReal[kParts] = {24, 19, 0};
  const std::size_t slice_size = std::size_t{1} * kRows * kSliceVp, stats_size = 3 * std::size_t{kRows};
  const float scale = 1.0f / kRows;
  std::vector<int> targets(kRows);
  std::mt19937 rng(71);
  for (auto& t : targets) t = static_cast<int>(rng() % kVocab);
  targets[0] = 30;  // in the second slice
  targets[1] = 5;   // in the first
  targets[2] = kVocab - 1;
  std::vector<std::vector<float>> logits;  // padded columns hold garbage too
  for (int p = 0; p < kParts; ++p) logits.push_back(random_floats(slice_size, 72 + static_cast<unsigned>(p), 3.0f));

  // Host, in double.
  std::vector<double> gathered_ref(kParts * stats_size), row_stats_ref(2 * std::size_t{kRows}), losses_ref(kRows);
  std::vector<std::vector<double>> probs_ref, dlogits_ref;
  for (int p = 0; p < kParts; ++p) {
    const auto slice = widen(logits[static_cast<std::size_t>(p)]);
    kernels::logit_slice_stats(slice.data(), targets.data(), gathered_ref.data() + p * stats_size, kRows, kReal[p],
                               kSliceVp, kFirst[p]);
    probs_ref.push_back(slice);
  }
  const double sum_ref = kernels::logit_slices_combine(gathered_ref.data(), row_stats_ref.data(), losses_ref.data(),
                                                       targets.data(), kRows, kParts);
  for (int p = 0; p < kParts; ++p) {
    auto& probs = probs_ref[static_cast<std::size_t>(p)];
    kernels::logit_slice_softmax(probs.data(), row_stats_ref.data(), kRows, kReal[p], kSliceVp);
    dlogits_ref.push_back(probs);
    kernels::logit_slice_backward(dlogits_ref.back().data(), targets.data(), kRows, kReal[p], kSliceVp, kFirst[p],
                                  static_cast<double>(scale));
  }

  // Device: each rank's stats written where the gather would put them.
  auto targets_g = to_device(e, targets);
  auto gathered_g = to_device(e, std::vector<float>(kParts * stats_size, 1e30f));
  std::vector<DeviceArray<float>> slices_g;
  for (int p = 0; p < kParts; ++p) {
    slices_g.push_back(to_device(e, logits[static_cast<std::size_t>(p)]));
    e.layer_kernels().logit_slice_stats(slices_g.back().data(), targets_g.data(), gathered_g.data() + p * stats_size,
                                        kRows, kReal[p], kSliceVp, kFirst[p]);
  }
  const auto gathered = to_host(e, gathered_g);
  for (int p = 0; p < kParts; ++p) {
    const std::size_t offset = p * stats_size;
    SCOPED_TRACE("slice " + std::to_string(p));
    if (kReal[p] == 0) {  // no real columns: -inf, 0, 0 exactly
      for (int i = 0; i < kRows; ++i) {
        EXPECT_EQ(gathered[offset + 3 * static_cast<std::size_t>(i)], -std::numeric_limits<float>::infinity());
        EXPECT_EQ(gathered[offset + 3 * static_cast<std::size_t>(i) + 1], 0.0f);
        EXPECT_EQ(gathered[offset + 3 * static_cast<std::size_t>(i) + 2], 0.0f);
      }
      continue;
    }
    ST_EXPECT_CLOSE(stats_column(gathered, offset, kRows, 0), stats_column(gathered_ref, offset, kRows, 0),
                    kFp32Tolerance);
    ST_EXPECT_CLOSE(stats_column(gathered, offset, kRows, 1), stats_column(gathered_ref, offset, kRows, 1),
                    kFp32Tolerance);
    // The target's logit is a copy (exact), 0 where the slice does not hold the target.
    for (int i = 0; i < kRows; ++i) {
      const double want = gathered_ref[offset + 3 * static_cast<std::size_t>(i) + 2];
      EXPECT_EQ(static_cast<double>(gathered[offset + 3 * static_cast<std::size_t>(i) + 2]), want) << "row " << i;
    }
  }

  auto row_stats_g = to_device(e, std::vector<float>(row_stats_ref.size(), 1e30f));
  auto losses_g = to_device(e, std::vector<float>(kRows, 1e30f));
  const double sum = testing_support::device_loss_sum(e, [&](LossSum loss) {
    e.layer_kernels().logit_slices_combine(gathered_g.data(), row_stats_g.data(), losses_g.data(), targets_g.data(),
                                           kRows, kParts, loss);
  });
  EXPECT_NEAR(sum, sum_ref, kFp32Tolerance * std::abs(sum_ref));
  ST_EXPECT_CLOSE(to_host(e, row_stats_g), row_stats_ref, kFp32Tolerance);
  ST_EXPECT_CLOSE(to_host(e, losses_g), losses_ref, kFp32Tolerance);
  // The same inputs give the same loss sum, bit for bit.
  EXPECT_EQ(sum, testing_support::device_loss_sum(e, [&](LossSum loss) {
              e.layer_kernels().logit_slices_combine(gathered_g.data(), row_stats_g.data(), losses_g.data(),
                                                     targets_g.data(), kRows, kParts, loss);
            }));

  // The same loss as the whole vocabulary's cross-entropy (the real columns side by side).
  std::vector<double> whole(std::size_t{1} * kRows * kVocab), whole_losses(kRows);
  for (int i = 0; i < kRows; ++i)
    for (int p = 0; p < kParts; ++p)
      for (int j = 0; j < kReal[p]; ++j)
        whole[static_cast<std::size_t>(i) * kVocab + kFirst[p] + j] =
            logits[static_cast<std::size_t>(p)][static_cast<std::size_t>(i) * kSliceVp + j];
  const double whole_sum = kernels::softmax_cross_entropy_forward(whole.data(), whole_losses.data(), targets.data(),
                                                                  kRows, kVocab, kVocab);
  EXPECT_NEAR(sum, whole_sum, kFp32Tolerance * std::abs(whole_sum));
  ST_EXPECT_CLOSE(to_host(e, losses_g), whole_losses, kFp32Tolerance);

  for (int p = 0; p < kParts; ++p) {
    SCOPED_TRACE("slice " + std::to_string(p));
    auto& slice_g = slices_g[static_cast<std::size_t>(p)];
    e.layer_kernels().logit_slice_softmax(slice_g.data(), row_stats_g.data(), kRows, kReal[p], kSliceVp);
    const auto probs = to_host(e, slice_g);
    ST_EXPECT_CLOSE(probs, probs_ref[static_cast<std::size_t>(p)], kFp32Tolerance);
    for (int i = 0; i < kRows; ++i)
      for (int j = kReal[p]; j < kSliceVp; ++j) ASSERT_EQ(probs[static_cast<std::size_t>(i) * kSliceVp + j], 0.0f);
    e.layer_kernels().logit_slice_backward(slice_g.data(), targets_g.data(), kRows, kReal[p], kSliceVp, kFirst[p],
                                           scale);
    ST_EXPECT_CLOSE(to_host(e, slice_g), dlogits_ref[static_cast<std::size_t>(p)], kFp32Tolerance);
  }

  // Without targets: the row stats alone, and nothing is added to the loss.
  auto plain_row_stats_g = to_device(e, std::vector<float>(row_stats_ref.size(), 1e30f));
  EXPECT_EQ(0.0, testing_support::device_loss_sum(e, [&](LossSum loss) {
              e.layer_kernels().logit_slices_combine(gathered_g.data(), plain_row_stats_g.data(), nullptr, nullptr,
                                                     kRows, kParts, loss);
            }));
  ST_EXPECT_CLOSE(to_host(e, plain_row_stats_g), row_stats_ref, kFp32Tolerance);
}

// Every backward kernel that reduces over rows gives the same bits on a second run.
TEST_F(CudaKernels, BackwardIsDeterministic) {
  CudaExec& e = *fp32;
  const int OC = 4 * C;
  const auto in = random_floats(std::size_t{1} * N * C, 61), w = random_floats(std::size_t{1} * OC * C, 62),
             dout = random_floats(std::size_t{1} * N * OC, 63), lnw = random_floats(C, 64),
             lndout = random_floats(in.size(), 65), qkv = random_floats(std::size_t{1} * N * 3 * C, 66);
  auto in_g = to_device(e, in), w_g = to_device(e, w), dout_g = to_device(e, dout), lnw_g = to_device(e, lnw),
       lnb_g = to_device(e, std::vector<float>(C)), lndout_g = to_device(e, lndout), qkv_g = to_device(e, qkv);
  auto ln_out = to_device(e, std::vector<float>(in.size())), mean = to_device(e, std::vector<float>(N)),
       rstd = to_device(e, std::vector<float>(N)), att = to_device(e, std::vector<float>(std::size_t{1} * B * NH * T * T)),
       att_out = to_device(e, std::vector<float>(std::size_t{1} * N * C));
  e.layer_kernels().layernorm_forward(ln_out.data(), mean.data(), rstd.data(), in_g.data(), lnw_g.data(), lnb_g.data(),
                                      N, C);
  auto dworking = to_device(e, std::vector<float>(std::size_t{1} * B * NH * T * T));
  const AttentionProbs<float> probs{att.data(), nullptr, dworking.data(), e.layer_kernels().attention_heads_at_once(B, NH)};
  e.layer_kernels().attention_forward(att_out.data(), probs, qkv_g.data(), B, T, C, NH, NH);
  auto run = [&] {
    auto din = to_device(e, std::vector<float>(in.size())), dw = to_device(e, std::vector<float>(w.size())),
         db = to_device(e, std::vector<float>(OC)), lndin = to_device(e, std::vector<float>(in.size())),
         lndw = to_device(e, std::vector<float>(C)), lndb = to_device(e, std::vector<float>(C)),
         dqkv = to_device(e, std::vector<float>(qkv.size()));
    e.layer_kernels().linear_backward(din.data(), dw.data(), db.data(), dout_g.data(), in_g.data(), w_g.data(), N, C,
                                      OC, false);
    e.layer_kernels().layernorm_backward(lndin.data(), lndw.data(), lndb.data(), lndout_g.data(), in_g.data(),
                                         lnw_g.data(), mean.data(), rstd.data(), N, C);
    e.layer_kernels().attention_backward(dqkv.data(), probs, att_out.data(), qkv_g.data(), B, T, C, NH, NH);
    std::vector<float> all;
    for (const auto* a : {&din, &dw, &db, &lndin, &lndw, &lndb, &dqkv}) {
      const auto h = to_host(e, *a);
      all.insert(all.end(), h.begin(), h.end());
    }
    return all;
  };
  const auto first = run(), second = run();
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(0, std::memcmp(first.data(), second.data(), first.size() * sizeof(float)));
}

// ---- Llama's kernels ----

TEST_F(CudaKernels, RmsNormForwardBackward) {
  CudaExec& e = *fp32;
  const double eps = 1e-5;
  const auto in = random_floats(std::size_t{1} * N * C, 201, 2.0f), w = random_floats(C, 202);
  const auto dout = random_floats(in.size(), 203), din0 = random_floats(in.size(), 204), dw0 = random_floats(C, 205);
  const auto in_d = widen(in), w_d = widen(w), dout_d = widen(dout);
  std::vector<double> out_ref(in.size()), rstd_ref(N), din_ref = widen(din0), dw_ref = widen(dw0);
  kernels::rmsnorm_forward(out_ref.data(), rstd_ref.data(), in_d.data(), w_d.data(), N, C, eps);
  kernels::rmsnorm_backward(din_ref.data(), dw_ref.data(), dout_d.data(), in_d.data(), w_d.data(), rstd_ref.data(), N,
                            C);

  auto in_g = to_device(e, in), w_g = to_device(e, w), dout_g = to_device(e, dout);
  auto out_g = to_device(e, std::vector<float>(in.size(), 1e30f)), rstd_g = to_device(e, std::vector<float>(N, 1e30f));
  e.layer_kernels().rmsnorm_forward(out_g.data(), rstd_g.data(), in_g.data(), w_g.data(), N, C, eps);
  ST_EXPECT_CLOSE(to_host(e, out_g), out_ref, kFp32Tolerance);
  ST_EXPECT_CLOSE(to_host(e, rstd_g), rstd_ref, kFp32Tolerance);

  // din and dweight accumulate; a second run gives the same bits.
  std::vector<float> first_din, first_dw;
  for (int run = 0; run < 2; ++run) {
    auto din_g = to_device(e, din0), dw_g = to_device(e, dw0);
    e.layer_kernels().rmsnorm_backward(din_g.data(), dw_g.data(), dout_g.data(), in_g.data(), w_g.data(),
                                       rstd_g.data(), N, C);
    const auto din = to_host(e, din_g), dw = to_host(e, dw_g);
    ST_EXPECT_CLOSE(din, din_ref, kFp32Tolerance);
    ST_EXPECT_CLOSE(dw, dw_ref, kFp32Tolerance);
    if (run == 0) {
      first_din = din;
      first_dw = dw;
    } else {
      EXPECT_EQ(0, std::memcmp(first_din.data(), din.data(), din.size() * sizeof(float))) << "din not deterministic";
      EXPECT_EQ(0, std::memcmp(first_dw.data(), dw.data(), dw.size() * sizeof(float))) << "dweight not deterministic";
    }
  }
}

// Rotary embeddings in place on fused q, k, v rows (NH = 3 query heads, one key/value head: the
// first 4 heads of each row rotate, v passes through), from position 3 on, forward and inverse.
TEST_F(CudaKernels, RopeForwardAndInverseFromANonzeroPosition) {
  CudaExec& e = *fp32;
  const int hs = C / NH, NKV = 1, W = C + 2 * NKV * hs, heads = NH + NKV, first = 3;
  const auto table_d = kernels::rope_table<double>(first + T, hs, 10000.0);
  const auto table_f = kernels::rope_table<float>(first + T, hs, 10000.0);
  std::vector<float> tables(table_f.cos);
  tables.insert(tables.end(), table_f.sin.begin(), table_f.sin.end());
  auto tables_g = to_device(e, tables);
  const float* cos_g = tables_g.data();
  const float* sin_g = tables_g.data() + table_f.cos.size();
  const auto x = random_floats(std::size_t{1} * N * W, 211);
  for (const bool inverse : {false, true}) {
    std::vector<double> want = widen(x);
    kernels::rope(want.data(), table_d, B, T, first, W, heads, hs, inverse);
    auto x_g = to_device(e, x);
    e.layer_kernels().rope(x_g.data(), cos_g, sin_g, B, T, first, W, heads, hs, inverse);
    const auto got = to_host(e, x_g);
    EXPECT_LE(norm_relative_error(got, want), kFp32Tolerance) << (inverse ? "inverse" : "forward");
    for (int row = 0; row < N; ++row)  // v's channels are not touched
      for (int c = heads * hs; c < W; ++c)
        ASSERT_EQ(got[static_cast<std::size_t>(row) * W + c], x[static_cast<std::size_t>(row) * W + c]) << row << " " << c;
  }
  // The inverse undoes the forward.
  auto x_g = to_device(e, x);
  e.layer_kernels().rope(x_g.data(), cos_g, sin_g, B, T, first, W, heads, hs, false);
  e.layer_kernels().rope(x_g.data(), cos_g, sin_g, B, T, first, W, heads, hs, true);
  ST_EXPECT_CLOSE(to_host(e, x_g), widen(x), kFp32Tolerance);
}

TEST_F(CudaKernels, SwiGluForwardBackward) {
  CudaExec& e = *fp32;
  const int F = V;  // 37
  auto in = random_floats(std::size_t{1} * N * 2 * F, 221, 3.0f);
  in[0] = 30.0f;  // where the logistic function saturates, both ways
  in[1] = -30.0f;
  in[2] = 0.0f;
  const auto dout = random_floats(std::size_t{1} * N * F, 222);
  const auto in_d = widen(in), dout_d = widen(dout);
  std::vector<double> out_ref(dout.size()), din_ref(in.size());
  kernels::swiglu_forward(out_ref.data(), in_d.data(), N, F);
  kernels::swiglu_backward(din_ref.data(), in_d.data(), dout_d.data(), N, F);
  auto in_g = to_device(e, in), dout_g = to_device(e, dout);
  auto out_g = to_device(e, std::vector<float>(dout.size(), 1e30f)), din_g = to_device(e, std::vector<float>(in.size(), 1e30f));
  e.layer_kernels().swiglu_forward(out_g.data(), in_g.data(), N, F);
  e.layer_kernels().swiglu_backward(din_g.data(), in_g.data(), dout_g.data(), N, F);  // overwrites din
  ST_EXPECT_CLOSE(to_host(e, out_g), out_ref, kFp32Tolerance);
  ST_EXPECT_CLOSE(to_host(e, din_g), din_ref, kFp32Tolerance);
}

// Grouped-query attention, NH = 4 query heads (hs = 6) over NKV key/value heads: forward and
// backward against the host's (its per-query-head gradient folded over each group), kept and
// recomputed probabilities alike, and the backward twice gives the same bits.
void check_gqa_attention(CudaExec& e, bool bf16_matmuls, int NKV) {
  const int nh = 4, hs = C / nh, W = C + 2 * NKV * hs, G = nh / NKV;
  const auto qkv = random_floats(std::size_t{1} * N * W, 231), dout = random_floats(std::size_t{1} * N * C, 232);
  const std::size_t att_size = std::size_t{1} * B * nh * T * T;
  const int heads = e.layer_kernels().attention_heads_at_once(B, nh);
  const std::size_t working_size = std::size_t{1} * heads * T * T;
  const auto qkv_d = widen(qkv), dout_d = widen(dout);
  std::vector<double> out_ref(dout.size()), att_ref(att_size), dqkv_ref(qkv.size()), dworking_ref(att_size);
  std::vector<double> per_query_head(grouped_gradient_elements(false, N, C, nh, NKV));
  const AttentionProbs<double> ref_probs{att_ref.data(), nullptr, dworking_ref.data(), B * nh, per_query_head.data()};
  HostLayerKernels<double> host;  // folds the host kernel's per-query-head gradient
  host.attention_forward(out_ref.data(), ref_probs, qkv_d.data(), B, T, C, nh, NKV);
  host.attention_backward(dqkv_ref.data(), ref_probs, dout_d.data(), qkv_d.data(), B, T, C, nh, NKV);

  auto qkv_g = to_device(e, qkv), dout_g = to_device(e, dout);
  auto out_g = to_device(e, std::vector<float>(dout.size(), 1e30f)),
       att_g = to_device(e, std::vector<float>(att_size, 1e30f));
  auto working_g = to_device(e, std::vector<float>(working_size, 1e30f)),
       dworking_g = to_device(e, std::vector<float>(working_size, -1e30f));
  const AttentionProbs<float> kept{att_g.data(), nullptr, dworking_g.data(), heads};
  const AttentionProbs<float> recomputed{nullptr, working_g.data(), dworking_g.data(), heads};
  e.layer_kernels().attention_forward(out_g.data(), kept, qkv_g.data(), B, T, C, nh, NKV);
  const double tolerance = bf16_matmuls ? bf16_tolerance(hs) + bf16_tolerance(T) : kFp32Tolerance;
  ST_EXPECT_CLOSE(to_host(e, att_g), att_ref, tolerance);
  const auto out = to_host(e, out_g);
  ST_EXPECT_CLOSE(out, out_ref, tolerance);

  auto dqkv_g = to_device(e, std::vector<float>(qkv.size(), 1e30f));  // overwritten
  e.layer_kernels().attention_backward(dqkv_g.data(), kept, dout_g.data(), qkv_g.data(), B, T, C, nh, NKV);
  const auto dqkv = to_host(e, dqkv_g);
  // dK and dV sum G heads' products: reductions of length G T rather than T.
  const double backward_tolerance = bf16_matmuls ? 2 * (bf16_tolerance(hs) + bf16_tolerance(G * T)) : kFp32Tolerance;
  EXPECT_LE(norm_relative_error(dqkv, dqkv_ref), backward_tolerance) << "NKV " << NKV;

  auto again_g = to_device(e, std::vector<float>(qkv.size(), -1e30f));
  e.layer_kernels().attention_backward(again_g.data(), kept, dout_g.data(), qkv_g.data(), B, T, C, nh, NKV);
  EXPECT_EQ(to_host(e, again_g), dqkv) << "backward not deterministic, NKV " << NKV;

  auto out_r = to_device(e, std::vector<float>(dout.size(), 1e30f)),
       dqkv_r = to_device(e, std::vector<float>(qkv.size(), 1e30f));
  e.layer_kernels().attention_forward(out_r.data(), recomputed, qkv_g.data(), B, T, C, nh, NKV);
  e.layer_kernels().attention_backward(dqkv_r.data(), recomputed, dout_g.data(), qkv_g.data(), B, T, C, nh, NKV);
  EXPECT_EQ(to_host(e, out_r), out) << "NKV " << NKV;
  EXPECT_EQ(to_host(e, dqkv_r), dqkv) << "NKV " << NKV;
}

TEST_F(CudaKernels, GroupedQueryAttentionFp32) {
  for (const int NKV : {2, 1}) check_gqa_attention(*fp32, false, NKV);
}
TEST_F(CudaKernels, GroupedQueryAttentionBf16Matmuls) {
  for (const int NKV : {2, 1}) check_gqa_attention(*bf16, true, NKV);
}

// Decoding over a grouped-query cache (rows of C + 2 NKV hs): rows first.. of one sequence
// against the host's causal attention in double, 70 positions, NH = 4 over 2 and over 1
// key/value heads.
TEST_F(CudaKernels, AttentionRowsOverAGroupedQueryCacheMatchTheHost) {
  const int positions = 70, nh = 4, hs = C / nh;
  for (const int NKV : {2, 1}) {
    const int W = C + 2 * NKV * hs;
    const auto qkv = random_floats(std::size_t{1} * positions * W, 241);
    const auto qkv_d = widen(qkv);
    std::vector<double> reference(std::size_t{1} * positions * C), att(std::size_t{1} * nh * positions * positions);
    const AttentionProbs<double> probs{att.data(), nullptr, nullptr, nh};
    kernels::attention_forward(reference.data(), probs, qkv_d.data(), 1, positions, C, nh, NKV);
    auto qkv_g = to_device(*fp32, qkv);
    for (const int first : {0, 1, 33, positions - 1}) {
      const int n = positions - first;
      auto out_g = to_device(*fp32, std::vector<float>(std::size_t{1} * n * C, 1e30f));
      fp32->layer_kernels().attention_rows(out_g.data(), qkv_g.data(), first, n, C, nh, NKV);
      const std::vector<double> want(reference.begin() + std::ptrdiff_t{first} * C, reference.end());
      EXPECT_LE(norm_relative_error(to_host(*fp32, out_g), want), kFp32Tolerance) << "NKV " << NKV << " first " << first;
    }
  }
}

// ---- the strategy's element-wise operations, against HostExec ----

TEST_F(CudaKernels, ConvertIsBitExact) {
  CudaExec& e = *fp32;
  Exec& host = host_exec();
  std::vector<std::uint32_t> bits = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u,
                                     0x7F800001u, 0x7F7FFFFFu, 0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0x00000001u,
                                     0x807FFFFFu, 0x3F800000u, 0x7F7F8000u, 0xC0490FDBu};
  std::mt19937 rng(71);
  while (bits.size() < 100003) bits.push_back(rng());
  std::vector<float> f(bits.size());
  std::memcpy(f.data(), bits.data(), bits.size() * sizeof(float));

  std::vector<Bf16> want(f.size());
  host.convert(Buffer::of(std::span<Bf16>(want)), Buffer::of(std::span<float>(f)));
  auto f_g = to_device(e, f);
  auto b_g = to_device(e, std::vector<Bf16>(f.size()));
  e.convert(Buffer{b_g.data(), b_g.n, DataType::bf16}, Buffer{f_g.data(), f_g.n, DataType::f32});
  const auto got = to_host(e, b_g);
  for (std::size_t i = 0; i < f.size(); ++i) ASSERT_EQ(got[i].bits, want[i].bits) << "f32 bits 0x" << std::hex << bits[i];

  std::vector<Bf16> all(1 << 16);
  for (std::size_t i = 0; i < all.size(); ++i) all[i].bits = static_cast<std::uint16_t>(i);
  std::vector<float> back_want(all.size());
  host.convert(Buffer::of(std::span<float>(back_want)), Buffer::of(std::span<Bf16>(all)));
  auto all_g = to_device(e, all);
  auto back_g = to_device(e, std::vector<float>(all.size()));
  e.convert(Buffer{back_g.data(), back_g.n, DataType::f32}, Buffer{all_g.data(), all_g.n, DataType::bf16});
  const auto back = to_host(e, back_g);
  EXPECT_EQ(0, std::memcmp(back.data(), back_want.data(), back.size() * sizeof(float)));

  // Same type: a copy.
  auto copy_g = to_device(e, std::vector<float>(f.size()));
  e.convert(Buffer{copy_g.data(), copy_g.n, DataType::f32}, Buffer{f_g.data(), f_g.n, DataType::f32});
  const auto copied = to_host(e, copy_g);
  EXPECT_EQ(0, std::memcmp(copied.data(), f.data(), f.size() * sizeof(float)));
}

TEST_F(CudaKernels, AccumulateIsBitExact) {
  CudaExec& e = *fp32;
  Exec& host = host_exec();
  const std::size_t n = 100003;
  const auto from = random_floats(n, 81), into = random_floats(n, 82);
  std::vector<Bf16> into_bf16(n);
  host.convert(Buffer::of(std::span<Bf16>(into_bf16)), Buffer::of(std::span<const float>(into)));
  auto from_g = to_device(e, from);

  std::vector<float> want = into;
  host.accumulate(Buffer::of(std::span<float>(want)), from.data());
  auto into_g = to_device(e, into);
  e.accumulate(Buffer{into_g.data(), n, DataType::f32}, from_g.data());
  const auto got = to_host(e, into_g);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), n * sizeof(float)));

  std::vector<Bf16> want_bf16 = into_bf16;
  host.accumulate(Buffer::of(std::span<Bf16>(want_bf16)), from.data());
  auto bf16_g = to_device(e, into_bf16);
  e.accumulate(Buffer{bf16_g.data(), n, DataType::bf16}, from_g.data());
  const auto got_bf16 = to_host(e, bf16_g);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got_bf16[i].bits, want_bf16[i].bits) << i;
}

TEST_F(CudaKernels, SumSquaresInDoubleAddToTheTotalOnTheDevice) {
  CudaExec& e = *fp32;
  HostExec host;
  auto device_sum = [&](std::vector<Buffer> parts, double start) {
    auto total_g = to_device(e, std::vector<double>{start});
    e.add_sum_squares(total_g.data(), parts);
    return to_host(e, total_g)[0];
  };
  for (const std::size_t n : {std::size_t{1}, std::size_t{255}, std::size_t{100003}, std::size_t{3000017}}) {
    const auto f = random_floats(n, 91);
    std::vector<Bf16> b(n);
    host.convert(Buffer::of(std::span<Bf16>(b)), Buffer::of(std::span<const float>(f)));
    const std::vector<double> d = widen(f);
    auto f_g = to_device(e, f);
    auto b_g = to_device(e, b);
    auto d_g = to_device(e, d);
    const double want_f = host.sum_squares(Buffer::of(std::span<const float>(f)));
    const double want_b = host.sum_squares(Buffer::of(std::span<Bf16>(b)));
    const double want_d = host.sum_squares(Buffer::of(std::span<const double>(d)));
    const Buffer whole_f{f_g.data(), n, DataType::f32};
    const double got_f = device_sum({whole_f}, 0.0);
    EXPECT_NEAR(got_f, want_f, 1e-12 * want_f) << n;
    EXPECT_NEAR(device_sum({Buffer{b_g.data(), n, DataType::bf16}}, 0.0), want_b, 1e-12 * want_b) << n;
    EXPECT_NEAR(device_sum({Buffer{d_g.data(), n, DataType::f64}}, 0.0), want_d, 1e-12 * want_d) << n;
    EXPECT_EQ(got_f, device_sum({whole_f}, 0.0)) << "not deterministic, n " << n;
    // Added to what the total holds; several parts (a tensor group's slices) summed first.
    EXPECT_NEAR(device_sum({whole_f}, 2.5), want_f + 2.5, 1e-12 * (want_f + 2.5)) << n;
    if (n > 2) {
      const std::size_t cut = n / 3;
      const Buffer head{f_g.data(), cut, DataType::f32}, tail{f_g.data() + cut, n - cut, DataType::f32};
      EXPECT_NEAR(device_sum({head, tail}, 1.0), want_f + 1.0, 1e-12 * (want_f + 1.0)) << n;
    }
  }
}

TEST_F(CudaKernels, StepScalarsStayOnTheDevice) {
  CudaExec& e = *fp32;
  for (const double norm_squared : {0.25, 9.0, std::nan(""), HUGE_VAL}) {
    StepScalars s;
    s.loss = 12.0;
    s.grad_norm_squared = norm_squared;
    auto s_g = to_device(e, std::vector<StepScalars>{s});
    e.divide(&s_g.data()->loss, 4.0);
    e.set_clip_factor(s_g.data(), 1.0);
    const StepScalars got = to_host(e, s_g)[0];
    EXPECT_EQ(got.loss, 3.0);
    const float want = clip_factor(3.0, norm_squared, 1.0);
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(got.grad_scale)) << norm_squared;
    else EXPECT_EQ(got.grad_scale, want) << norm_squared;
  }
}

TEST_F(CudaKernels, AdamWOverTilesMatchesHostBitForBit) {
  CudaExec& e = *fp32;
  HostExec host;
  // Two runs of elements with a gap between, the first decayed and longer than a tile, read from
  // fp32 and from bf16 gradients.
  const std::size_t n = 200003;
  auto params = random_floats(n, 101), grads = random_floats(n, 102), m = random_floats(n, 103, 0.1f),
       v = random_floats(n, 104, 0.01f);
  for (auto& x : v) x = x * x;
  std::vector<AdamWTile> tiles;
  for (std::size_t at = 0; at < 150000; at += kAdamWTileElements)
    tiles.push_back({at, at, at, static_cast<std::uint32_t>(std::min<std::size_t>(kAdamWTileElements, 150000 - at)), 1});
  tiles.push_back({150100, 150100, 150100, static_cast<std::uint32_t>(n - 150100), 0});
  AdamWStepConstants c;
  c.beta1 = 0.9f;
  c.beta2 = 0.95f;
  c.step_size = 6e-4f / (1.0f - 0.9f * 0.9f * 0.9f);
  c.inv_correction2 = 1.0f / (1.0f - 0.95f * 0.95f * 0.95f);
  c.eps = 1e-8f;
  c.decay_factor[1] = 1.0f - 6e-4f * 0.1f;
  const float scale = 0.7f;
  std::vector<Bf16> grads16(n);
  host.convert(Buffer::of(std::span<Bf16>(grads16)), Buffer::of(std::span<const float>(grads)));
  for (const bool bf16_grads : {false, true}) {
    SCOPED_TRACE(bf16_grads ? "bf16 gradients" : "fp32 gradients");
    auto want_p = params, want_m = m, want_v = v;
    const Buffer host_grads = bf16_grads ? Buffer::of(std::span<const Bf16>(grads16)) : Buffer::of(std::span<const float>(grads));
    host.adamw(c, tiles.data(), tiles.size(), want_p.data(), host_grads, want_m.data(), want_v.data(), &scale);
    auto p_g = to_device(e, params), g_g = to_device(e, grads), m_g = to_device(e, m), v_g = to_device(e, v);
    auto g16_g = to_device(e, grads16);
    auto tiles_g = to_device(e, tiles);
    auto scale_g = to_device(e, std::vector<float>{scale});
    const Buffer device_grads = bf16_grads ? Buffer{g16_g.data(), n, DataType::bf16} : Buffer{g_g.data(), n, DataType::f32};
    e.adamw(c, tiles_g.data(), tiles.size(), p_g.data(), device_grads, m_g.data(), v_g.data(), scale_g.data());
    const auto p = to_host(e, p_g), mm = to_host(e, m_g), vv = to_host(e, v_g);
    // Built without fused multiply-adds, the device matches bit for bit.
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(p[i]), std::bit_cast<std::uint32_t>(want_p[i])) << i;
      ASSERT_EQ(std::bit_cast<std::uint32_t>(mm[i]), std::bit_cast<std::uint32_t>(want_m[i])) << i;
      ASSERT_EQ(std::bit_cast<std::uint32_t>(vv[i]), std::bit_cast<std::uint32_t>(want_v[i])) << i;
    }
    // The gap between the runs is left alone.
    for (std::size_t i = 150000; i < 150100; ++i) ASSERT_EQ(p[i], params[i]) << i;
  }
}

// ---- memory, copies, ordering ----

TEST_F(CudaKernels, MemoryIsZeroedAndCopiesRoundTrip) {
  CudaExec& e = *fp32;
  const std::size_t n = 1000003;
  const std::uint64_t before = e.allocated_bytes();
  {
    auto dirty = to_device(e, std::vector<float>(n, 1.5f));  // leaves non-zero bytes behind when freed
    EXPECT_EQ(e.allocated_bytes(), before + n * sizeof(float));
  }
  EXPECT_EQ(e.allocated_bytes(), before);
  EXPECT_GE(e.peak_allocated_bytes(), before + n * sizeof(float));
  Memory fresh = e.allocate(n * sizeof(float));
  EXPECT_EQ(fresh.space(), MemorySpace::device);
  std::vector<float> host(n, 1.0f);
  e.download(host.data(), fresh.data(), n * sizeof(float));
  EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](float x) { return x == 0.0f; }));

  const auto values = random_floats(n, 111);
  e.upload(fresh.data(), values.data(), n * sizeof(float));
  Memory other = e.allocate(n * sizeof(float));
  e.copy(other.data(), fresh.data(), n * sizeof(float));
  e.before_communication();  // records a marker after the copy; must not fail
  e.download(host.data(), other.data(), n * sizeof(float));
  EXPECT_EQ(0, std::memcmp(host.data(), values.data(), n * sizeof(float)));
  e.zero(other.data(), n * sizeof(float));
  e.synchronize();
  e.download(host.data(), other.data(), n * sizeof(float));
  EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](float x) { return x == 0.0f; }));
}

// A collective runs on its communicator's own stream: ordered after before_communication()'s
// marker (or, without one, after everything queued), work there sees every kernel queued
// before, with no host wait; kernels queued after the marker are not waited for.
TEST_F(CudaKernels, CommunicationStreamsWaitForCompute) {
  CudaExec& e = *fp32;
  const std::size_t n = std::size_t{1} << 24;  // long enough that an unordered copy would overtake
  auto sum = to_device(e, std::vector<float>(n, 1.0f)), ones = to_device(e, std::vector<float>(n, 1.0f));
  std::vector<float> host(n);
  auto check = [&](cudaStream_t stream, float expected) {
    ASSERT_EQ(cudaMemcpyAsync(host.data(), sum.data(), n * sizeof(float), cudaMemcpyDeviceToHost, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_TRUE(std::all_of(host.begin(), host.end(), [&](float x) { return x == expected; }));
  };
  cudaStream_t own = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking), cudaSuccess);
  for (int i = 0; i < 8; ++i) e.accumulate(Buffer{sum.data(), n, DataType::f32}, ones.data());
  const void* marker = e.before_communication();
  e.order_after_compute(own, marker);
  check(own, 9.0f);
  e.synchronize();
  for (int i = 0; i < 8; ++i) e.accumulate(Buffer{sum.data(), n, DataType::f32}, ones.data());
  e.order_after_compute(own);
  check(own, 17.0f);
  cudaStreamDestroy(own);
}

TEST_F(CudaKernels, DescriptionAndGemmRate) {
  const std::string d = fp32->description();
  EXPECT_EQ(d.rfind("cuda: device 0 of ", 0), 0u) << d;
  EXPECT_NE(d.find("compute capability"), std::string::npos) << d;
  EXPECT_NE(d.find("matmuls fp32"), std::string::npos) << d;
  EXPECT_NE(bf16->description().find("matmuls bf16"), std::string::npos);
  for (CudaExec* e : {fp32.get(), bf16.get()}) {
    const double flops = e->measure_gemm_flops(512, 768, 256);
    EXPECT_TRUE(std::isfinite(flops));
    EXPECT_GT(flops, 1e9) << e->description();
  }
}

}  // namespace
}  // namespace st
