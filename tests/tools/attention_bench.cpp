// Attention's speed on one GPU, flash attention against the exact path, through the layer-kernel
// seam as training calls it (bf16 matmuls both: CudaExecSettings flash_attention true and false),
// at GPT-2 124M's shape (16 sequences of 1024, 12 heads of 64) and SmolLM2-135M's (8 of 2048,
// 9 query heads over 3 key/value heads of 64). Forward and backward are timed apart, with device
// events around each repetition, the two paths in turn (rounds x reps of each, interleaved: a
// drift of the card's clock touches both alike); every sample is printed, then a table of
// medians. TFLOP/s count causal attention's useful work for both paths: forward 2 products over
// half of T x T (4 B NH T^2 hs / 2 FLOPs), backward 2.5 times that (FlashAttention's convention:
// 5 products), so the exact path's figure is what it achieves on the same work, although it
// computes the whole T x T. Also prints the two paths' largest difference (a sanity check, not
// the test: gpu.cuda_kernels is) and the memory each keeps for backward. Called by
// tools/gpu_check.sh (phase attn); alone: attention_bench [--shape gpt2|smollm2|all]
// [--rounds R] [--reps N].
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "exec/cuda/cuda_checks.hpp"
#include "exec/cuda/cuda_exec.hpp"
#include "exec/layer_kernels.hpp"

namespace st {
namespace {

struct Shape {
  const char* name;
  int B, T, NH, NKV, hs;
  int C() const { return NH * hs; }
  int W() const { return C() + 2 * NKV * hs; }
  double forward_flops() const { return 2.0 * B * NH * static_cast<double>(T) * T * hs; }
  double backward_flops() const { return 2.5 * forward_flops(); }
};

// One path's backend and buffers: what attention keeps (lse for flash, the probabilities for the
// exact path) and its backward's scratch.
struct Path {
  std::unique_ptr<CudaExec> exec;
  Memory out, dqkv, kept, scratch, lse, dots;
  AttentionProbs<float> probs;
  std::size_t kept_bytes = 0;
};

Path make_path(bool flash, const Shape& s) {
  Path p;
  p.exec = std::make_unique<CudaExec>(CudaExecSettings{0, true, flash});
  CudaExec& e = *p.exec;
  const std::size_t rows = static_cast<std::size_t>(s.B) * s.T;
  p.out = e.allocate(rows * s.C() * sizeof(float));
  p.dqkv = e.allocate(rows * s.W() * sizeof(float));
  if (flash) {
    p.lse = e.allocate(rows * s.NH * sizeof(float));
    p.dots = e.allocate(rows * s.NH * sizeof(float));
    p.probs.lse = static_cast<float*>(p.lse.data());
    p.probs.row_dots = static_cast<float*>(p.dots.data());
    p.probs.out = static_cast<const float*>(p.out.data());
    p.kept_bytes = rows * s.NH * sizeof(float);
  } else {
    const std::size_t block = static_cast<std::size_t>(s.T) * s.T;
    const int heads = e.layer_kernels().attention_heads_at_once(s.B, s.NH);
    p.kept = e.allocate(block * s.B * s.NH * sizeof(float));
    p.scratch = e.allocate(block * heads * sizeof(float));
    p.probs = {static_cast<float*>(p.kept.data()), nullptr, static_cast<float*>(p.scratch.data()), heads};
    p.kept_bytes = block * s.B * s.NH * sizeof(float);
  }
  if (flash != e.layer_kernels().attention_uses_flash(s.hs)) {
    std::fprintf(stderr, "attention_bench: the backend does not run the path asked for\n");
    std::exit(1);
  }
  return p;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : (v[v.size() / 2] + v[(v.size() - 1) / 2]) / 2;
}

struct Inputs {
  Memory qkv, dout;
};

// Milliseconds of each of `reps` runs of `work` on the path's stream, after one untimed run.
template <class Work>
std::vector<double> time_reps(Path& p, int reps, Work&& work) {
  cudaStream_t stream = p.exec->compute_stream();
  cudaEvent_t start = nullptr, stop = nullptr;
  ST_CHECK_CUDA(cudaEventCreate(&start));
  ST_CHECK_CUDA(cudaEventCreate(&stop));
  work();
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    ST_CHECK_CUDA(cudaEventRecord(start, stream));
    work();
    ST_CHECK_CUDA(cudaEventRecord(stop, stream));
    ST_CHECK_CUDA(cudaEventSynchronize(stop));
    float elapsed = 0;
    ST_CHECK_CUDA(cudaEventElapsedTime(&elapsed, start, stop));
    ms.push_back(elapsed);
  }
  ST_CHECK_CUDA(cudaEventDestroy(start));
  ST_CHECK_CUDA(cudaEventDestroy(stop));
  return ms;
}

std::string joined(const std::vector<double>& ms) {
  std::string text;
  char one[32];
  for (const double m : ms) {
    std::snprintf(one, sizeof one, " %.3f", m);
    text += one;
  }
  return text;
}

double largest_difference(Path& a, Path& b, const Memory& ma, const Memory& mb, std::size_t n) {
  std::vector<float> x(n), y(n);
  a.exec->download(x.data(), ma.data(), n * sizeof(float));
  b.exec->download(y.data(), mb.data(), n * sizeof(float));
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::abs(static_cast<double>(y[i])));
  }
  return diff / std::max(scale, 1e-30);
}

void bench(const Shape& s, int rounds, int reps) {
  std::printf("%s: B %d, T %d, %d query heads over %d key/value heads of %d\n", s.name, s.B, s.T, s.NH, s.NKV, s.hs);
  Path paths[2] = {make_path(true, s), make_path(false, s)};
  const char* names[2] = {"flash", "exact"};
  const std::size_t rows = static_cast<std::size_t>(s.B) * s.T;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> qkv(rows * s.W()), dout(rows * s.C());
  for (float& x : qkv) x = normal(rng);
  for (float& x : dout) x = normal(rng);
  Inputs in[2];
  for (int i = 0; i < 2; ++i) {
    in[i].qkv = paths[i].exec->allocate(qkv.size() * sizeof(float));
    in[i].dout = paths[i].exec->allocate(dout.size() * sizeof(float));
    paths[i].exec->upload(in[i].qkv.data(), qkv.data(), qkv.size() * sizeof(float));
    paths[i].exec->upload(in[i].dout.data(), dout.data(), dout.size() * sizeof(float));
  }
  std::vector<double> forward[2], backward[2];
  for (int round = 0; round < rounds; ++round)
    for (int i = 0; i < 2; ++i) {
      Path& p = paths[i];
      LayerKernels<float>& k = p.exec->layer_kernels();
      auto* q = static_cast<const float*>(in[i].qkv.data());
      auto* d = static_cast<const float*>(in[i].dout.data());
      auto fwd = [&] { k.attention_forward(static_cast<float*>(p.out.data()), p.probs, q, s.B, s.T, s.C(), s.NH, s.NKV); };
      auto bwd = [&] {
        k.attention_backward(static_cast<float*>(p.dqkv.data()), p.probs, d, q, s.B, s.T, s.C(), s.NH, s.NKV);
      };
      const std::vector<double> f = time_reps(p, reps, fwd);
      const std::vector<double> b = time_reps(p, reps, bwd);  // after a forward: its lse and output
      std::printf("  round %d %s forward  ms:%s\n", round + 1, names[i], joined(f).c_str());
      std::printf("  round %d %s backward ms:%s\n", round + 1, names[i], joined(b).c_str());
      std::fflush(stdout);
      forward[i].insert(forward[i].end(), f.begin(), f.end());
      backward[i].insert(backward[i].end(), b.begin(), b.end());
    }
  const double out_diff = largest_difference(paths[0], paths[1], paths[0].out, paths[1].out, rows * s.C());
  const double grad_diff = largest_difference(paths[0], paths[1], paths[0].dqkv, paths[1].dqkv, rows * s.W());
  std::printf("  flash against exact: output %.2e, gradient %.2e of the largest (norm-relative)\n", out_diff, grad_diff);
  std::printf("  kept for backward per layer: flash %.1f MiB (log-sum-exp), exact %.1f MiB (probabilities)\n",
              static_cast<double>(paths[0].kept_bytes) / (1 << 20), static_cast<double>(paths[1].kept_bytes) / (1 << 20));
  std::printf("| %s | pass | flash ms | flash TFLOP/s | exact ms | exact TFLOP/s | exact / flash |\n|---|---|---|---|---|---|---|\n",
              s.name);
  for (int pass = 0; pass < 2; ++pass) {
    const double flops = pass == 0 ? s.forward_flops() : s.backward_flops();
    const double fm = median(pass == 0 ? forward[0] : backward[0]), em = median(pass == 0 ? forward[1] : backward[1]);
    std::printf("| %s | %s | %.3f | %.1f | %.3f | %.1f | %.2fx |\n", s.name, pass == 0 ? "forward" : "backward", fm,
                flops / (fm * 1e-3) / 1e12, em, flops / (em * 1e-3) / 1e12, em / fm);
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace st

int main(int argc, char** argv) {
  std::string shape = "all";
  int rounds = 3, reps = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--shape") shape = argv[i + 1];
    else if (key == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (key == "--reps") reps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "attention_bench: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  int devices = 0;
  const cudaError_t code = cudaGetDeviceCount(&devices);
  if (code != cudaSuccess || devices == 0) {
    std::printf("attention_bench: no usable CUDA device: %s\n", code != cudaSuccess ? cudaGetErrorString(code) : "none visible");
    return 77;
  }
  try {
    const st::Shape gpt2{"gpt2-124m", 16, 1024, 12, 12, 64}, smollm2{"smollm2-135m", 8, 2048, 9, 3, 64};
    if (shape == "gpt2" || shape == "all") st::bench(gpt2, rounds, reps);
    if (shape == "smollm2" || shape == "all") st::bench(smollm2, rounds, reps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
