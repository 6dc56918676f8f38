// The CUDA kernels with bf16 storage (exec/cuda/cuda_bf16_layer_kernels.hpp) against the host's
// reference with bf16 storage (exec/host_bf16_kernels.hpp) on the same bf16 inputs. Both compute
// in fp32 between bf16 operands and round what they store once, so a bf16 result may differ only
// where the two fp32 results round to neighbouring bf16 values: sums in other orders (warps
// against loops, cuBLAS against OpenBLAS), and the host's GELU, whose tanh is a rational
// approximation within 3.3e-7 where the device calls tanhf (that alone changes 1.3-1.5% of the
// bits). So: each element within one bf16 unit of the reference's plus 1e-5 of the tensor's
// largest (a difference of fp32 order near a cancellation), and at least 97% of them the same
// bits. A kernel that rounds an intermediate, or rounds twice, fails the second (25-50% of the
// bits change; the host tests see 65-75% there). fp32 results (parameters' gradients, row
// statistics) within 1e-5 of the tensor's largest. Each kernel is compared on the same inputs:
// where a result feeds the next kernel, the host's is copied to the device first, so that a
// neighbouring rounding is not carried into the next comparison.
//
// Flash attention has no host twin in bf16 (the host keeps its exact attention): its bf16
// kernels are held to the fp32-storage kernels on the same values, which must give the same
// fp32 results, so the bf16 outputs are those rounded once, bit for bit.
//
// Then the models: GPT-2 and Llama with bf16 storage on the device against the same models on the
// host reference, and their scratch and activations against kernel_scratch and the formula.
// Skips, saying why, where no CUDA device is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "core/random.hpp"
#include "device_test.hpp"
#include "exec/cuda/cuda_bf16_layer_kernels.hpp"
#include "exec/cuda/cuda_exec.hpp"
#include "exec/cuda/device_scratch.hpp"
#include "exec/host_bf16_kernels.hpp"
#include "exec/kernel_scratch.hpp"
#include "model/activations.hpp"
#include "model/model.hpp"

namespace st {
namespace {

using testing_support::DeviceTest;

std::vector<float> normal_floats(std::size_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<Bf16> rounded(const std::vector<float>& v) {
  std::vector<Bf16> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_bf16(v[i]);
  return out;
}

std::vector<Bf16> random_bf16(std::size_t n, unsigned seed, float scale = 1.0f) {
  return rounded(normal_floats(n, seed, scale));
}

double bf16_unit(double x) { return std::ldexp(1.0, std::ilogb(std::max(std::abs(x), 1e-30)) - 7); }

// One buffer on both sides, the same values to start with: the host reference works on `host`,
// the device kernels on `device`.
template <class T>
struct Twin {
  std::vector<T> host;
  Memory device;
  T* h() { return host.data(); }
  T* d() { return static_cast<T*>(device.data()); }
};

class Bf16StorageKernels : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped()) return;
    dev = exec->bf16_layer_kernels();
    ASSERT_NE(dev, nullptr) << "a backend with bf16 matmuls, flash attention and the fused classifier has them";
  }

  template <class T>
  Twin<T> twin(const std::vector<T>& values) {
    return Twin<T>{values, upload(values)};
  }
  Twin<float> zeros(std::size_t n) { return twin(std::vector<float>(n, 0.0f)); }
  // The host's values on the device too, before the next kernel reads or adds to them.
  template <class T>
  void same_inputs(Twin<T>& t) {
    exec->upload(t.d(), t.h(), t.host.size() * sizeof(T));
  }

  // The device's bf16 result against the host's (the file's comment says why these bounds).
  void expect_same_rounding(Twin<Bf16>& t, const std::string& what) {
    const std::vector<Bf16> got = download<Bf16>(t.device, t.host.size());
    double largest = 0;
    for (Bf16 w : t.host) largest = std::max(largest, std::abs(static_cast<double>(to_float(w))));
    std::size_t same = 0, outside = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double g = to_float(got[i]), w = to_float(t.host[i]);
      if (got[i].bits == t.host[i].bits) ++same;
      if (!(std::abs(g - w) <= bf16_unit(w) + 1e-5 * largest) && ++outside <= 3)
        ADD_FAILURE() << what << "[" << i << "]: device " << g << ", host " << w;
    }
    EXPECT_GE(static_cast<double>(same), 0.97 * static_cast<double>(got.size()))
        << what << ": " << same << " of " << got.size() << " the same bits as the host's";
  }
  void expect_close(Twin<float>& t, const std::string& what, double bound = 1e-5) {
    const std::vector<float> got = download<float>(t.device, t.host.size());
    double largest = 1e-30, worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      largest = std::max(largest, static_cast<double>(std::abs(t.host[i])));
      worst = std::max(worst, static_cast<double>(std::abs(got[i] - t.host[i])));
    }
    EXPECT_LE(worst / largest, bound) << what << ": largest difference " << worst << " against " << largest;
  }

  HostBf16LayerKernels host;
  LayerKernels<float, Bf16>* dev = nullptr;
};

// Odd row counts and widths, so that no size is a multiple of a warp, a block or a chunk of rows.
constexpr int kB = 2, kT = 37, kN = kB * kT, kC = 40, kOC = 72;

TEST_F(Bf16StorageKernels, EncoderAndNorms) {
  const std::vector<int> tokens_host = [] {
    std::vector<int> t(kN);
    for (int i = 0; i < kN; ++i) t[static_cast<std::size_t>(i)] = (i * 7 + 3) % 11;  // repeated tokens
    return t;
  }();
  Memory tokens = upload(tokens_host);
  const auto* token_ids = static_cast<const int*>(tokens.data());
  auto wte = twin(random_bf16(11 * kC, 1)), wpe = twin(random_bf16(kT * kC, 2));
  auto x = twin(std::vector<Bf16>(kN * kC));
  host.encoder_forward(x.h(), tokens_host.data(), wte.h(), wpe.h(), kB, kT, kC);
  dev->encoder_forward(x.d(), token_ids, wte.d(), wpe.d(), kB, kT, kC);
  expect_same_rounding(x, "encoder_forward");
  auto dout = twin(random_bf16(kN * kC, 3));
  auto dwte = twin(normal_floats(11 * kC, 4, 0.1f)), dwpe = twin(normal_floats(kT * kC, 5, 0.1f));
  host.encoder_backward(dwte.h(), dwpe.h(), dout.h(), tokens_host.data(), kB, kT, kC);
  dev->encoder_backward(dwte.d(), dwpe.d(), dout.d(), token_ids, kB, kT, kC);
  expect_close(dwte, "encoder_backward dwte");
  expect_close(dwpe, "encoder_backward dwpe");

  // LayerNorm, alone and after the residual add (whose sum it reads as stored: rounded).
  auto in = twin(random_bf16(kN * kC, 6, 2.0f)), other = twin(random_bf16(kN * kC, 7));
  auto weight = twin(random_bf16(kC, 8)), bias = twin(random_bf16(kC, 9));
  auto out = twin(std::vector<Bf16>(kN * kC)), res = twin(std::vector<Bf16>(kN * kC));
  auto mean = zeros(kN), rstd = zeros(kN);
  host.layernorm_forward(out.h(), mean.h(), rstd.h(), in.h(), weight.h(), bias.h(), kN, kC);
  dev->layernorm_forward(out.d(), mean.d(), rstd.d(), in.d(), weight.d(), bias.d(), kN, kC);
  expect_same_rounding(out, "layernorm_forward");
  expect_close(mean, "layernorm mean");
  expect_close(rstd, "layernorm rstd");
  host.residual_layernorm_forward(res.h(), out.h(), mean.h(), rstd.h(), in.h(), other.h(), weight.h(), bias.h(), kN,
                                  kC);
  dev->residual_layernorm_forward(res.d(), out.d(), mean.d(), rstd.d(), in.d(), other.d(), weight.d(), bias.d(), kN,
                                  kC);
  expect_same_rounding(res, "residual_layernorm_forward's sum");
  expect_same_rounding(out, "residual_layernorm_forward");
  // Backward adds into din (bf16: read, added in fp32, rounded once) and the fp32 gradients.
  same_inputs(res);
  same_inputs(mean);
  same_inputs(rstd);
  auto din = twin(random_bf16(kN * kC, 10));
  auto dweight = twin(normal_floats(kC, 11, 0.5f)), dbias = twin(normal_floats(kC, 12, 0.5f));
  host.layernorm_backward(din.h(), dweight.h(), dbias.h(), dout.h(), res.h(), weight.h(), mean.h(), rstd.h(), kN, kC);
  dev->layernorm_backward(din.d(), dweight.d(), dbias.d(), dout.d(), res.d(), weight.d(), mean.d(), rstd.d(), kN, kC);
  expect_same_rounding(din, "layernorm_backward din");
  expect_close(dweight, "layernorm_backward dweight");
  expect_close(dbias, "layernorm_backward dbias");

  // RMSNorm likewise.
  auto rrstd = zeros(kN);
  same_inputs(din);
  same_inputs(dweight);
  host.rmsnorm_forward(out.h(), rrstd.h(), in.h(), weight.h(), kN, kC, 1e-5);
  dev->rmsnorm_forward(out.d(), rrstd.d(), in.d(), weight.d(), kN, kC, 1e-5);
  expect_same_rounding(out, "rmsnorm_forward");
  expect_close(rrstd, "rmsnorm rstd");
  host.residual_rmsnorm_forward(res.h(), out.h(), rrstd.h(), in.h(), other.h(), weight.h(), kN, kC, 1e-5);
  dev->residual_rmsnorm_forward(res.d(), out.d(), rrstd.d(), in.d(), other.d(), weight.d(), kN, kC, 1e-5);
  expect_same_rounding(res, "residual_rmsnorm_forward's sum");
  expect_same_rounding(out, "residual_rmsnorm_forward");
  same_inputs(res);
  same_inputs(rrstd);
  host.rmsnorm_backward(din.h(), dweight.h(), dout.h(), res.h(), weight.h(), rrstd.h(), kN, kC);
  dev->rmsnorm_backward(din.d(), dweight.d(), dout.d(), res.d(), weight.d(), rrstd.d(), kN, kC);
  expect_same_rounding(din, "rmsnorm_backward din");
  expect_close(dweight, "rmsnorm_backward dweight");
}

TEST_F(Bf16StorageKernels, LinearLayersAndElementWise) {
  auto in = twin(random_bf16(kN * kC, 21)), weight = twin(random_bf16(kOC * kC, 22, 0.2f));
  auto bias = twin(random_bf16(kOC, 23));
  auto out = twin(std::vector<Bf16>(kN * kOC));
  for (const bool with_bias : {true, false}) {
    const std::string what = with_bias ? "linear_forward with a bias" : "linear_forward";
    host.linear_forward(out.h(), in.h(), weight.h(), with_bias ? bias.h() : nullptr, kN, kC, kOC);
    dev->linear_forward(out.d(), in.d(), weight.d(), with_bias ? bias.d() : nullptr, kN, kC, kOC);
    expect_same_rounding(out, what);
  }
  // The bias rode cuBLASLt's epilogue (these widths and 256-byte aligned buffers have an algorithm).
  EXPECT_GT(dynamic_cast<const CudaBf16LayerKernels&>(*dev).epilogue_runs(LtEpilogue::bias), 0u);
  auto dout = twin(random_bf16(kN * kOC, 24));
  auto din = twin(random_bf16(kN * kC, 25));
  auto dweight = twin(normal_floats(kOC * kC, 26, 0.5f)), dbias = twin(normal_floats(kOC, 27, 0.5f));
  for (const bool accumulate : {false, true}) {
    const std::string what = accumulate ? "linear_backward adding into din" : "linear_backward";
    same_inputs(din);
    same_inputs(dweight);
    same_inputs(dbias);
    host.linear_backward(din.h(), dweight.h(), dbias.h(), dout.h(), in.h(), weight.h(), kN, kC, kOC, accumulate);
    dev->linear_backward(din.d(), dweight.d(), dbias.d(), dout.d(), in.d(), weight.d(), kN, kC, kOC, accumulate);
    expect_same_rounding(din, what + ": din");
    expect_close(dweight, what + ": dweight");
    expect_close(dbias, what + ": dbias");
  }
  // The compositions GPT-2's MLP calls (unfused on both sides in bf16 storage).
  auto pre = twin(std::vector<Bf16>(kN * kOC)), act = twin(std::vector<Bf16>(kN * kOC));
  host.linear_gelu_forward(act.h(), pre.h(), in.h(), weight.h(), bias.h(), kN, kC, kOC);
  dev->linear_gelu_forward(act.d(), pre.d(), in.d(), weight.d(), bias.d(), kN, kC, kOC);
  expect_same_rounding(pre, "linear_gelu_forward's argument");
  // Each side's GELU reads its own argument, where a neighbouring rounding of it can move the
  // output by two units: the device's output against the host's GELU of the device's argument.
  const std::vector<Bf16> host_act = act.host, device_pre = download<Bf16>(pre.device, pre.host.size());
  host.gelu_forward(act.h(), device_pre.data(), act.host.size());
  expect_same_rounding(act, "linear_gelu_forward");
  act.host = host_act;
  same_inputs(pre);
  same_inputs(act);
  auto dpre = twin(std::vector<Bf16>(kN * kOC)), scratch = twin(std::vector<Bf16>(kN * kOC));
  auto dweight2 = twin(normal_floats(kC * kOC, 28, 0.5f)), dbias2 = twin(normal_floats(kC, 29, 0.5f));
  auto dout2 = twin(random_bf16(kN * kC, 30));
  auto weight2 = twin(random_bf16(kC * kOC, 31, 0.2f));
  host.linear_backward_gelu(dpre.h(), scratch.h(), dweight2.h(), dbias2.h(), dout2.h(), act.h(), pre.h(), weight2.h(),
                            kN, kOC, kC);
  dev->linear_backward_gelu(dpre.d(), scratch.d(), dweight2.d(), dbias2.d(), dout2.d(), act.d(), pre.d(), weight2.d(),
                            kN, kOC, kC);
  expect_same_rounding(dpre, "linear_backward_gelu");
  expect_close(dweight2, "linear_backward_gelu dweight");
  expect_close(dbias2, "linear_backward_gelu dbias");

  const std::size_t n = kN * kOC;
  auto a = twin(random_bf16(n, 32, 2.0f)), b = twin(random_bf16(n, 33, 2.0f)), sum = twin(std::vector<Bf16>(n));
  host.add(sum.h(), a.h(), b.h(), n);  // element-wise from here: nothing carried between them
  dev->add(sum.d(), a.d(), b.d(), n);
  expect_same_rounding(sum, "add");
  host.gelu_forward(sum.h(), a.h(), n);
  dev->gelu_forward(sum.d(), a.d(), n);
  expect_same_rounding(sum, "gelu_forward");
  host.gelu_backward(sum.h(), a.h(), b.h(), n);
  dev->gelu_backward(sum.d(), a.d(), b.d(), n);
  expect_same_rounding(sum, "gelu_backward");
}

// parallel.gelu_fusion with bf16 storage: GPT-2's GELU in cuBLASLt's epilogues with bf16
// outputs. The argument is the host's (the product plus the bias, rounded once); the GELU and its
// gradient differ from the host's composition by the roundings it makes in between (one unit
// each) and cuBLASLt's tanh (within 1e-4): two bf16 units plus 2e-4 of the tensor's largest.
TEST_F(Bf16StorageKernels, GeluInCublasLtsEpilogues) {
  CudaExecSettings settings{0, true, true};
  settings.gelu_fusion = true;
  CudaExec fused_exec(settings);
  auto& fused = dynamic_cast<CudaBf16LayerKernels&>(*fused_exec.bf16_layer_kernels());
  auto in = twin(random_bf16(kN * kC, 81)), weight = twin(random_bf16(kOC * kC, 82, 0.2f));
  auto bias = twin(random_bf16(kOC, 83));
  auto pre = twin(std::vector<Bf16>(kN * kOC)), act = twin(std::vector<Bf16>(kN * kOC));
  exec->synchronize();  // the uploads ran on the other backend's stream
  auto within_two_units = [&](Twin<Bf16>& t, const std::string& what) {
    const std::vector<Bf16> got = download<Bf16>(t.device, t.host.size());
    double largest = 0;
    for (Bf16 w : t.host) largest = std::max(largest, std::abs(static_cast<double>(to_float(w))));
    std::size_t outside = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double g = to_float(got[i]), w = to_float(t.host[i]);
      if (!(std::abs(g - w) <= 2 * bf16_unit(w) + 2e-4 * largest) && ++outside <= 3)
        ADD_FAILURE() << what << "[" << i << "]: device " << g << ", host " << w;
    }
  };
  host.linear_gelu_forward(act.h(), pre.h(), in.h(), weight.h(), bias.h(), kN, kC, kOC);
  fused.linear_gelu_forward(act.d(), pre.d(), in.d(), weight.d(), bias.d(), kN, kC, kOC);
  fused_exec.synchronize();
  EXPECT_GT(fused.epilogue_runs(LtEpilogue::gelu_aux_bias), 0u) << "the forward rode GELU_AUX_BIAS";
  expect_same_rounding(pre, "the fused forward's argument");
  within_two_units(act, "the fused forward's GELU");

  // The output projection (kOC -> kC) on through the GELU, from the same argument on both sides.
  same_inputs(pre);
  same_inputs(act);
  auto dout = twin(random_bf16(kN * kC, 84)), weight2 = twin(random_bf16(kC * kOC, 85, 0.2f));
  auto dpre = twin(std::vector<Bf16>(kN * kOC)), scratch = twin(std::vector<Bf16>(kN * kOC));
  auto dweight = twin(normal_floats(kC * kOC, 86, 0.5f)), dbias = twin(normal_floats(kC, 87, 0.5f));
  exec->synchronize();
  host.linear_backward_gelu(dpre.h(), scratch.h(), dweight.h(), dbias.h(), dout.h(), act.h(), pre.h(), weight2.h(), kN,
                            kOC, kC);
  fused.linear_backward_gelu(dpre.d(), scratch.d(), dweight.d(), dbias.d(), dout.d(), act.d(), pre.d(), weight2.d(),
                             kN, kOC, kC);
  fused_exec.synchronize();
  EXPECT_GT(fused.epilogue_runs(LtEpilogue::dgelu), 0u) << "the backward rode DGELU";
  within_two_units(dpre, "the fused backward's dpre");
  expect_close(dweight, "the fused backward's dweight");
  expect_close(dbias, "the fused backward's dbias");

  // As GPT-2 calls it: dpre in the memory of `in` (the GELU output), which the weight's gradient
  // reads first. The same inputs on both sides, then dpre written over act.
  same_inputs(act);
  same_inputs(dweight);
  same_inputs(dbias);
  exec->synchronize();
  host.linear_backward_gelu(act.h(), scratch.h(), dweight.h(), dbias.h(), dout.h(), act.h(), pre.h(), weight2.h(), kN,
                            kOC, kC);
  fused.linear_backward_gelu(act.d(), scratch.d(), dweight.d(), dbias.d(), dout.d(), act.d(), pre.d(), weight2.d(),
                             kN, kOC, kC);
  fused_exec.synchronize();
  within_two_units(act, "the fused backward's dpre over its input");
  expect_close(dweight, "the fused backward's dweight from the input it then overwrote");
}

// Products whose sums are long and whose outputs are few (4 rows): where cuBLAS or cuBLASLt split
// such a sum, the parts must be added in fp32 and the result rounded once, as the host does; parts
// rounded to bf16 would move most of the 256 outputs off the host's bits.
TEST_F(Bf16StorageKernels, LongSumsIntoFewOutputsRoundOnce) {
  constexpr int N = 4, K = 4096, M = 64;
  auto in = twin(random_bf16(N * K, 91)), weight = twin(random_bf16(M * K, 92, 0.05f)), bias = twin(random_bf16(M, 93));
  auto out = twin(std::vector<Bf16>(N * M));
  for (const bool with_bias : {false, true}) {
    host.linear_forward(out.h(), in.h(), weight.h(), with_bias ? bias.h() : nullptr, N, K, M);
    dev->linear_forward(out.d(), in.d(), weight.d(), with_bias ? bias.d() : nullptr, N, K, M);
    expect_same_rounding(out, with_bias ? "a long forward with a bias" : "a long forward");
  }
  // The input's gradient of a layer from M to K values: M outputs a row, each a sum over K.
  auto dout = twin(random_bf16(N * K, 94)), weight_t = twin(random_bf16(K * M, 95, 0.05f));
  auto din = twin(std::vector<Bf16>(N * M));
  auto dweight = zeros(K * M);
  host.linear_backward(din.h(), dweight.h(), nullptr, dout.h(), out.h(), weight_t.h(), N, M, K, false);
  dev->linear_backward(din.d(), dweight.d(), nullptr, dout.d(), out.d(), weight_t.d(), N, M, K, false);
  expect_same_rounding(din, "a long input gradient");
  // The LM head's input gradient sums over the vocabulary.
  auto dlogits = twin(random_bf16(N * K, 96));
  host.classifier_backward(din.h(), dweight.h(), dlogits.h(), out.h(), weight_t.h(), N, M, K, 0.5f);
  dev->classifier_backward(din.d(), dweight.d(), dlogits.d(), out.d(), weight_t.d(), N, M, K, 0.5f);
  expect_same_rounding(din, "the head's long input gradient");
}

TEST_F(Bf16StorageKernels, LlamasGateAndRotation) {
  constexpr int F = 36, heads = 3, hs = 8, W = heads * hs + 8;  // rows wider than the rotated heads
  auto in = twin(random_bf16(kN * 2 * F, 41, 2.0f)), out = twin(std::vector<Bf16>(kN * F));
  host.swiglu_forward(out.h(), in.h(), kN, F);
  dev->swiglu_forward(out.d(), in.d(), kN, F);
  expect_same_rounding(out, "swiglu_forward");
  auto dout = twin(random_bf16(kN * F, 42)), din = twin(std::vector<Bf16>(kN * 2 * F));
  host.swiglu_backward(din.h(), in.h(), dout.h(), kN, F);
  dev->swiglu_backward(din.d(), in.d(), dout.d(), kN, F);
  expect_same_rounding(din, "swiglu_backward");
  // Rotation tables for positions up to first + T (fp32 statistics).
  constexpr int first = 5, positions = first + kT;
  std::vector<float> cosines(positions * hs / 2), sines(positions * hs / 2);
  for (int p = 0; p < positions; ++p)
    for (int i = 0; i < hs / 2; ++i) {
      const double angle = p * std::pow(500.0, -2.0 * i / hs);
      cosines[static_cast<std::size_t>(p * hs / 2 + i)] = static_cast<float>(std::cos(angle));
      sines[static_cast<std::size_t>(p * hs / 2 + i)] = static_cast<float>(std::sin(angle));
    }
  auto cos_t = twin(cosines), sin_t = twin(sines);
  auto x = twin(random_bf16(kN * W, 43, 3.0f));
  for (const bool inverse : {false, true}) {
    same_inputs(x);
    host.rope(x.h(), cos_t.h(), sin_t.h(), kB, kT, first, W, heads, hs, inverse);
    dev->rope(x.d(), cos_t.d(), sin_t.d(), kB, kT, first, W, heads, hs, inverse);
    expect_same_rounding(x, inverse ? "rope, inverse" : "rope");
  }
}

TEST_F(Bf16StorageKernels, ClassifierFromBf16Operands) {
  constexpr int V = 53, Vp = 64;
  auto in = twin(random_bf16(kN * kC, 51)), weight = twin(random_bf16(Vp * kC, 52, 0.5f));
  auto logits = twin(std::vector<Bf16>(kN * Vp));
  host.classifier_logits(logits.h(), in.h(), weight.h(), kN, kC, Vp);
  dev->classifier_logits(logits.d(), in.d(), weight.d(), kN, kC, Vp);
  expect_same_rounding(logits, "classifier_logits");
  // The same logits on both sides from here, so the cross-entropy is compared alone.
  exec->upload(logits.d(), logits.h(), logits.host.size() * sizeof(Bf16));
  std::vector<int> targets_host(kN);
  for (int i = 0; i < kN; ++i) targets_host[static_cast<std::size_t>(i)] = (i * 13) % V;
  Memory targets = upload(targets_host);
  auto losses = zeros(kN);
  double host_total = 0;
  host.classifier_cross_entropy(logits.h(), losses.h(), targets_host.data(), kN, V, Vp, LossSum{&host_total, 1.0});
  const double device_total = testing_support::device_loss_sum(*exec, [&](LossSum sum) {
    dev->classifier_cross_entropy(logits.d(), losses.d(), static_cast<const int*>(targets.data()), kN, V, Vp, sum);
  });
  expect_same_rounding(logits, "classifier_cross_entropy's d(logits)");
  expect_close(losses, "classifier_cross_entropy's losses");
  EXPECT_NEAR(device_total, host_total, 1e-5 * std::abs(host_total));
  exec->upload(logits.d(), logits.h(), logits.host.size() * sizeof(Bf16));
  auto din = twin(std::vector<Bf16>(kN * kC));
  auto dweight = twin(normal_floats(Vp * kC, 53, 0.5f));
  host.classifier_backward(din.h(), dweight.h(), logits.h(), in.h(), weight.h(), kN, kC, Vp, 0.25f);
  dev->classifier_backward(din.d(), dweight.d(), logits.d(), in.d(), weight.d(), kN, kC, Vp, 0.25f);
  expect_same_rounding(din, "classifier_backward din");
  expect_close(dweight, "classifier_backward dweight");
}

// The unfused cross-entropy on bf16 logits (the models fuse it with bf16 storage; these are the
// seam's for other callers), whole and over two slices of the vocabulary.
TEST_F(Bf16StorageKernels, UnfusedCrossEntropyOnBf16Logits) {
  constexpr int V = 53, Vp = 64, half = 32;
  const std::vector<Bf16> values = random_bf16(kN * Vp, 55, 2.0f);
  std::vector<int> targets_host(kN);
  for (int i = 0; i < kN; ++i) targets_host[static_cast<std::size_t>(i)] = (i * 13) % V;
  Memory targets = upload(targets_host);
  const auto* target_ids = static_cast<const int*>(targets.data());

  auto logits = twin(values);
  auto losses = zeros(kN);
  double host_total = 0;
  host.softmax_cross_entropy_forward(logits.h(), losses.h(), targets_host.data(), kN, V, Vp,
                                     LossSum{&host_total, 1.0});
  const double device_total = testing_support::device_loss_sum(*exec, [&](LossSum sum) {
    dev->softmax_cross_entropy_forward(logits.d(), losses.d(), target_ids, kN, V, Vp, sum);
  });
  expect_same_rounding(logits, "softmax_cross_entropy_forward's probabilities");
  expect_close(losses, "softmax_cross_entropy_forward's losses");
  EXPECT_NEAR(device_total, host_total, 1e-5 * std::abs(host_total));
  same_inputs(logits);
  host.softmax_cross_entropy_backward(logits.h(), targets_host.data(), kN, V, Vp, 0.25f);
  dev->softmax_cross_entropy_backward(logits.d(), target_ids, kN, V, Vp, 0.25f);
  expect_same_rounding(logits, "softmax_cross_entropy_backward");

  // Two slices of 32 columns (the second with 21 real ones): statistics, combined, then each
  // slice's probabilities and gradient.
  for (const int first : {0, half}) {
    const int real = first == 0 ? half : V - half;
    std::vector<Bf16> slice_values(kN * half);
    for (int r = 0; r < kN; ++r)
      for (int j = 0; j < half; ++j)
        slice_values[static_cast<std::size_t>(r * half + j)] = values[static_cast<std::size_t>(r * Vp + first + j)];
    auto slice = twin(slice_values);
    auto stats = zeros(3 * kN);
    host.logit_slice_stats(slice.h(), targets_host.data(), stats.h(), kN, real, half, first);
    dev->logit_slice_stats(slice.d(), target_ids, stats.d(), kN, real, half, first);
    expect_close(stats, "logit_slice_stats from token " + std::to_string(first));
    auto row_stats = twin(normal_floats(2 * kN, 56, 1.0f));
    for (int r = 0; r < kN; ++r) row_stats.host[static_cast<std::size_t>(2 * r + 1)] = 3.0f + static_cast<float>(r % 5);
    same_inputs(row_stats);
    host.logit_slice_softmax(slice.h(), row_stats.h(), kN, real, half);
    dev->logit_slice_softmax(slice.d(), row_stats.d(), kN, real, half);
    expect_same_rounding(slice, "logit_slice_softmax from token " + std::to_string(first));
    same_inputs(slice);
    host.logit_slice_backward(slice.h(), targets_host.data(), kN, real, half, first, 0.5f);
    dev->logit_slice_backward(slice.d(), target_ids, kN, real, half, first, 0.5f);
    expect_same_rounding(slice, "logit_slice_backward from token " + std::to_string(first));
  }
}

TEST_F(Bf16StorageKernels, DecodingAttentionRows) {
  constexpr int C = 64, NH = 4, NKV = 2, hs = C / NH, W = C + 2 * NKV * hs, first = 9, n = 5;
  auto qkv = twin(random_bf16((first + n) * W, 61));
  auto out = twin(std::vector<Bf16>(n * C));
  host.attention_rows(out.h(), qkv.h(), first, n, C, NH, NKV);
  dev->attention_rows(out.d(), qkv.d(), first, n, C, NH, NKV);
  expect_same_rounding(out, "attention_rows");
}

// Flash attention in bf16 storage against its fp32-storage twin (CudaLayerKernels with bf16
// matmuls) on the same values: q, k, v and dO are bf16 values either way, so both compute the same
// fp32 results, and the bf16 outputs must be those rounded once, bit for bit.
TEST_F(Bf16StorageKernels, FlashAttentionIsItsFp32TwinRoundedOnce) {
  for (const int head_dim : {32, 64, 128}) {
    constexpr int B = 2, T = 70, NH = 4, NKV = 2;
    const int C = NH * head_dim, W = C + 2 * NKV * head_dim;
    const std::string what = "heads " + std::to_string(head_dim) + " wide";
    ASSERT_TRUE(dev->attention_uses_flash(head_dim)) << what;
    const std::vector<Bf16> qkv_bf16 = random_bf16(static_cast<std::size_t>(B) * T * W, 71, 1.5f);
    const std::vector<Bf16> dout_bf16 = random_bf16(static_cast<std::size_t>(B) * T * C, 72);
    std::vector<float> qkv_f(qkv_bf16.size()), dout_f(dout_bf16.size());
    widen_bf16(qkv_f.data(), qkv_bf16.data(), qkv_f.size());
    widen_bf16(dout_f.data(), dout_bf16.data(), dout_f.size());
    const std::size_t rows = flash_rows(B, T, NH);

    // fp32 storage: out, lse, then dqkv from the bf16 output widened (what bf16 storage reads).
    LayerKernels<float>& fp32 = exec->layer_kernels();
    ASSERT_TRUE(fp32.attention_uses_flash(head_dim)) << what;
    Memory qkv32 = upload(qkv_f), dout32 = upload(dout_f), out32 = exec->allocate(B * T * C * sizeof(float));
    Memory lse32 = exec->allocate(rows * sizeof(float)), dots32 = exec->allocate(rows * sizeof(float));
    Memory dqkv32 = exec->allocate(qkv_f.size() * sizeof(float));
    AttentionProbs<float> p32;
    p32.lse = static_cast<float*>(lse32.data());
    p32.row_dots = static_cast<float*>(dots32.data());
    fp32.attention_forward(static_cast<float*>(out32.data()), p32, static_cast<const float*>(qkv32.data()), B, T, C,
                           NH, NKV);

    // bf16 storage.
    Memory qkv16 = upload(qkv_bf16), dout16 = upload(dout_bf16), out16 = exec->allocate(B * T * C * sizeof(Bf16));
    Memory lse16 = exec->allocate(rows * sizeof(float)), dots16 = exec->allocate(rows * sizeof(float));
    Memory dqkv16 = exec->allocate(qkv_bf16.size() * sizeof(Bf16));
    AttentionProbs<float, Bf16> p16;
    p16.lse = static_cast<float*>(lse16.data());
    p16.row_dots = static_cast<float*>(dots16.data());
    p16.out = static_cast<const Bf16*>(out16.data());
    dev->attention_forward(static_cast<Bf16*>(out16.data()), p16, static_cast<const Bf16*>(qkv16.data()), B, T, C, NH,
                           NKV);
    const std::vector<float> out_f = download<float>(out32, static_cast<std::size_t>(B) * T * C);
    const std::vector<Bf16> out_b = download<Bf16>(out16, out_f.size());
    std::size_t mismatched = 0;
    for (std::size_t i = 0; i < out_f.size(); ++i) mismatched += to_bf16(out_f[i]).bits != out_b[i].bits;
    EXPECT_EQ(mismatched, 0u) << what << ": forward outputs that are not the fp32 output rounded once";
    EXPECT_EQ(download<float>(lse32, rows), download<float>(lse16, rows)) << what << ": log-sum-exps";

    // The fp32 backward reads the output bf16 storage keeps: widened, the same values.
    std::vector<float> out_widened(out_b.size());
    widen_bf16(out_widened.data(), out_b.data(), out_b.size());
    exec->upload(out32.data(), out_widened.data(), out_widened.size() * sizeof(float));
    p32.out = static_cast<const float*>(out32.data());
    fp32.attention_backward(static_cast<float*>(dqkv32.data()), p32, static_cast<const float*>(dout32.data()),
                            static_cast<const float*>(qkv32.data()), B, T, C, NH, NKV);
    dev->attention_backward(static_cast<Bf16*>(dqkv16.data()), p16, static_cast<const Bf16*>(dout16.data()),
                            static_cast<const Bf16*>(qkv16.data()), B, T, C, NH, NKV);
    const std::vector<float> dqkv_f = download<float>(dqkv32, qkv_f.size());
    const std::vector<Bf16> dqkv_b = download<Bf16>(dqkv16, qkv_f.size());
    mismatched = 0;
    for (std::size_t i = 0; i < dqkv_f.size(); ++i) mismatched += to_bf16(dqkv_f[i]).bits != dqkv_b[i].bits;
    EXPECT_EQ(mismatched, 0u) << what << ": gradients that are not the fp32 gradient rounded once";
  }
}

// ---- the models ----

struct Passes {
  std::vector<double> losses;
  std::vector<float> grads;
};

// Two micro-batches accumulated into fp32 gradients, on whichever side `exec` is.
Passes train(Model<float, Bf16>& model, Exec& exec, const std::vector<Bf16>& params, const std::vector<int>& tokens,
             const std::vector<int>& targets, int B, int T) {
  Memory p = exec.allocate(params.size() * sizeof(Bf16)), g = exec.allocate(params.size() * sizeof(float));
  exec.upload(p.data(), params.data(), params.size() * sizeof(Bf16));
  exec.zero(g.data(), params.size() * sizeof(float));
  const std::span<const Bf16> ps(static_cast<const Bf16*>(p.data()), params.size());
  const std::span<float> gs(static_cast<float*>(g.data()), params.size());
  Passes r;
  for (int micro = 0; micro < 2; ++micro) {
    const std::size_t at = static_cast<std::size_t>(micro) * B * T;
    r.losses.push_back(model.forward(ps, tokens.data() + at, targets.data() + at, B, T));
    model.backward(ps, gs, 0.5f);
  }
  r.grads.resize(params.size());
  exec.download(r.grads.data(), g.data(), params.size() * sizeof(float));
  return r;
}

// Heads 32 wide (flash attention's kernels); Llama with 4 query heads over 2 key/value heads.
ModelShape flash_shape(Arch arch) {
  ModelShape s{3, 64, 2, 40, 61, 64};
  if (arch == Arch::llama) {
    s.arch = Arch::llama;
    s.d_model = 128;
    s.n_head = 4;
    s.n_kv_head = 2;
    s.ffn_dim = 80;
    s.tie_embeddings = false;
    s.rope_theta = 500.0;
  }
  return s;
}

// The device's flash attention rounds its probabilities to bf16 inside its products, where the
// host's exact attention keeps them in fp32: about 2^-8 relative per product, which the fp32
// models' flash tests bound by 5e-2 of each tensor's largest gradient (GpuModel.*FlashAttention);
// the same bound here, and 1e-2 relative on the loss.
TEST_F(Bf16StorageKernels, ModelsMatchTheHostReference) {
  struct Variant {
    Arch arch;
    bool gelu_fusion;
  };
  for (const Variant v : {Variant{Arch::gpt2, false}, Variant{Arch::gpt2, true}, Variant{Arch::llama, false}}) {
    const Arch arch = v.arch;
    const ModelShape shape = flash_shape(arch);
    const std::string what = std::string(arch_name(arch)) + (v.gelu_fusion ? " with its GELU fused" : "");
    const int B = 3, T = 40;
    // A backend of its own, so that its kernels' scratch is this model's alone.
    CudaExecSettings settings{0, true, true};
    settings.gelu_fusion = v.gelu_fusion;
    CudaExec own(settings);
    const std::size_t grown_before = DeviceScratch::grown_after_reserve();
    const auto device = make_model<float, Bf16>(shape, B, own);
    const auto reference = make_model<float, Bf16>(shape, B);
    // Scratch as kernel_scratch sizes it for bf16 storage (no operand rounding, the fused head),
    // and activations as the formula counts them at 2 bytes a value, flash attention's rows kept.
    const auto& kernels = dynamic_cast<const CudaBf16LayerKernels&>(*own.bf16_layer_kernels());
    KernelScratchChoices choices;
    choices.bf16_storage = true;
    choices.fused_classifier = true;
    choices.sort_temp_bytes = kernels.reserved_scratch().sort_temp;
    EXPECT_EQ(kernels.reserved_scratch().reserved(),
              kernel_scratch(kernel_workload(shape, B, 1, false, ModelPart{}), choices).reserved())
        << what;
    const KernelScratch& held = kernels.reserved_scratch();
    EXPECT_EQ(held.matmul_weight + held.matmul_rows_in + held.matmul_rows_out, 0u)
        << what << ": bf16 operands need no rounding scratch";
    EXPECT_EQ(held.lt_workspace, arch == Arch::gpt2 ? kLtWorkspaceBytes : 0u)
        << what << ": cuBLASLt's workspace where products have biases (GPT-2's, not Llama's)";
    EXPECT_EQ(device->activation_bytes(),
              activation_sizes(shape, B, Recompute::none,
                               kernels.attention_heads_at_once(B, static_cast<int>(shape.n_head)), true, 1, false,
                               true, true)
                  .bytes(2, 4))
        << what;

    std::vector<float> params32(reference->layout().total());
    make_model<float>(shape, B)->init_params(params32, 7);
    NormalStream noise(11, 3);
    for (float& p : params32) p += static_cast<float>(0.05 * noise.next());
    const std::vector<Bf16> params = rounded(params32);
    std::vector<int> tokens(2 * B * T), targets(2 * B * T);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int>(noise.next_bits() % shape.vocab_size);
      targets[i] = static_cast<int>(noise.next_bits() % shape.vocab_size);
    }
    const Passes want = train(*reference, host_exec(), params, tokens, targets, B, T);
    const Passes got = train(*device, own, params, tokens, targets, B, T);
    for (std::size_t i = 0; i < want.losses.size(); ++i)
      EXPECT_NEAR(got.losses[i], want.losses[i], 1e-2 * std::abs(want.losses[i])) << what << ": loss " << i;
    for (const TensorSlot* t : reference->layout().all_tensors()) {
      double scale = 1e-12, worst = 0;
      for (std::size_t i = t->offset; i < t->offset + t->size; ++i) {
        scale = std::max(scale, static_cast<double>(std::abs(want.grads[i])));
        worst = std::max(worst, static_cast<double>(std::abs(got.grads[i] - want.grads[i])));
      }
      EXPECT_GT(scale, 1e-12) << what << ": " << t->name << " receives no gradient on the host";
      EXPECT_LE(worst / scale, 5e-2) << what << ": " << t->name << ": largest difference " << worst << " against "
                                     << scale;
    }
    // The same passes again give the same bits (no atomics), and nothing grew inside them.
    const Passes again = train(*device, own, params, tokens, targets, B, T);
    EXPECT_EQ(again.losses, got.losses) << what;
    EXPECT_EQ(again.grads, got.grads) << what;
    EXPECT_EQ(DeviceScratch::grown_after_reserve(), grown_before) << what << ": scratch grew inside a step";
    // The GELU rode the epilogues in both passes of every block, or never: two calls of train(),
    // two micro-batches each.
    const auto passes = static_cast<std::size_t>(v.gelu_fusion ? 2 * 2 * shape.n_layer : 0);
    EXPECT_EQ(kernels.epilogue_runs(LtEpilogue::gelu_aux_bias), passes) << what << ": forwards through GELU_AUX_BIAS";
    EXPECT_EQ(kernels.epilogue_runs(LtEpilogue::dgelu), passes) << what << ": backwards through DGELU";
  }
}

}  // namespace
}  // namespace st
