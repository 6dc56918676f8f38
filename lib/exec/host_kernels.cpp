#include "exec/host_kernels.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "exec/gemm.hpp"

namespace st::kernels {
namespace {
constexpr double kLayerNormEps = 1e-5;
}

template <class R>
void encoder_forward(R* out, const int* tokens, const R* wte, const R* wpe, int B, int T, int C) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      R* o = out + (static_cast<std::size_t>(b) * T + t) * C;
      const R* e = wte + static_cast<std::size_t>(tokens[b * T + t]) * C;
      const R* p = wpe + static_cast<std::size_t>(t) * C;
      for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
}

template <class R>
void encoder_backward(R* dwte, R* dwpe, const R* dout, const int* tokens, int B, int T, int C) {
  // Rows of dwte may repeat (the same token twice), so threads split the channels, not rows.
#pragma omp parallel
  {
    const int threads = omp_get_num_threads(), id = omp_get_thread_num();
    const int begin = C * id / threads, end = C * (id + 1) / threads;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        const R* d = dout + (static_cast<std::size_t>(b) * T + t) * C;
        R* e = dwte + static_cast<std::size_t>(tokens[b * T + t]) * C;
        R* p = dwpe + static_cast<std::size_t>(t) * C;
        for (int c = begin; c < end; ++c) {
          e[c] += d[c];
          p[c] += d[c];
        }
      }
  }
}

template <class R>
void layernorm_forward(R* out, R* mean, R* rstd, const R* in, const R* weight, const R* bias, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const R* x = in + static_cast<std::size_t>(i) * C;
    double sum = 0;
    for (int c = 0; c < C; ++c) sum += x[c];
    const double m = sum / C;
    double var = 0;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    const double s = 1.0 / std::sqrt(var / C + kLayerNormEps);
    R* o = out + static_cast<std::size_t>(i) * C;
    const R mr = static_cast<R>(m), sr = static_cast<R>(s);
    for (int c = 0; c < C; ++c) o[c] = (x[c] - mr) * sr * weight[c] + bias[c];
    mean[i] = mr;
    rstd[i] = sr;
  }
}

template <class R>
void layernorm_backward(R* din, R* dweight, R* dbias, const R* dout, const R* in, const R* weight, const R* mean,
                        const R* rstd, int N, int C) {
#pragma omp parallel
  {
    // Parameter gradients are sums over rows: each thread sums its rows, then one merge.
    std::vector<R> dw(C, R(0)), db(C, R(0));
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      const R* x = in + static_cast<std::size_t>(i) * C;
      const R* d = dout + static_cast<std::size_t>(i) * C;
      R* dx = din + static_cast<std::size_t>(i) * C;
      const R m = mean[i], s = rstd[i];
      double dnorm_mean = 0, dnorm_xhat_mean = 0;
      for (int c = 0; c < C; ++c) {
        const R xhat = (x[c] - m) * s;
        const R dnorm = d[c] * weight[c];
        dnorm_mean += dnorm;
        dnorm_xhat_mean += dnorm * xhat;
      }
      const R a = static_cast<R>(dnorm_mean / C), b = static_cast<R>(dnorm_xhat_mean / C);
      for (int c = 0; c < C; ++c) {
        const R xhat = (x[c] - m) * s;
        dw[c] += d[c] * xhat;
        db[c] += d[c];
        dx[c] += s * (d[c] * weight[c] - a - xhat * b);
      }
    }
#pragma omp critical
    for (int c = 0; c < C; ++c) {
      dweight[c] += dw[c];
      dbias[c] += db[c];
    }
  }
}

template <class R>
void linear_forward(R* out, const R* in, const R* weight, const R* bias, int N, int C, int OC) {
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; ++i) std::memcpy(out + static_cast<std::size_t>(i) * OC, bias, sizeof(R) * OC);
  }
  gemm(false, true, N, OC, C, R(1), in, C, weight, C, bias ? R(1) : R(0), out, OC);
}

template <class R>
void linear_backward(R* din, R* dweight, R* dbias, const R* dout, const R* in, const R* weight, int N, int C, int OC,
                     bool accumulate_din) {
  gemm(false, false, N, C, OC, R(1), dout, OC, weight, C, accumulate_din ? R(1) : R(0), din, C);
  gemm(true, false, OC, C, N, R(1), dout, OC, in, C, R(1), dweight, C);
  if (dbias) {
    // Column sums: each thread owns a block of columns and walks the rows, so the inner loop
    // runs along contiguous memory.
#pragma omp parallel
    {
      const int threads = omp_get_num_threads(), id = omp_get_thread_num();
      const int begin = OC * id / threads, end = OC * (id + 1) / threads;
      for (int i = 0; i < N; ++i) {
        const R* row = dout + static_cast<std::size_t>(i) * OC;
#pragma omp simd
        for (int o = begin; o < end; ++o) dbias[o] += row[o];
      }
    }
  }
}

template <class R>
void attention_forward(R* out, R* att, const R* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const R scale = R(1) / std::sqrt(static_cast<R>(hs));
  // One (batch, head) pair per iteration; BLAS runs single-threaded inside the parallel region.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const R* q = qkv + static_cast<std::size_t>(b) * T * C3 + h * hs;
      const R* k = q + C;
      const R* v = q + 2 * C;
      R* a = att + (static_cast<std::size_t>(b) * NH + h) * T * T;
      gemm(false, true, T, T, hs, scale, q, C3, k, C3, R(0), a, T);
      for (int t = 0; t < T; ++t) {
        R* row = a + static_cast<std::size_t>(t) * T;
        R max = row[0];
        for (int j = 1; j <= t; ++j) max = std::max(max, row[j]);
        R sum = 0;
        for (int j = 0; j <= t; ++j) {
          row[j] = std::exp(row[j] - max);
          sum += row[j];
        }
        const R inv = R(1) / sum;
        for (int j = 0; j <= t; ++j) row[j] *= inv;
        for (int j = t + 1; j < T; ++j) row[j] = 0;
      }
      gemm(false, false, T, hs, T, R(1), a, T, v, C3, R(0), out + static_cast<std::size_t>(b) * T * C + h * hs, C);
    }
}

template <class R>
void attention_backward(R* dqkv, R* scratch, const R* dout, const R* qkv, const R* att, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const R scale = R(1) / std::sqrt(static_cast<R>(hs));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const std::size_t head = (static_cast<std::size_t>(b) * NH + h) * T * T;
      const R* q = qkv + static_cast<std::size_t>(b) * T * C3 + h * hs;
      const R* k = q + C;
      const R* v = q + 2 * C;
      R* dq = dqkv + static_cast<std::size_t>(b) * T * C3 + h * hs;
      R* dk = dq + C;
      R* dv = dq + 2 * C;
      const R* a = att + head;
      R* da = scratch + head;
      const R* dO = dout + static_cast<std::size_t>(b) * T * C + h * hs;
      gemm(false, true, T, T, hs, R(1), dO, C, v, C3, R(0), da, T);  // dP = dO V^T
      gemm(true, false, T, hs, T, R(1), a, T, dO, C, R(0), dv, C3);  // dV = P^T dO
      for (int t = 0; t < T; ++t) {                                   // softmax backward, causal rows
        const R* p = a + static_cast<std::size_t>(t) * T;
        R* d = da + static_cast<std::size_t>(t) * T;
        R dot = 0;
        for (int j = 0; j <= t; ++j) dot += p[j] * d[j];
        for (int j = 0; j <= t; ++j) d[j] = p[j] * (d[j] - dot);
        for (int j = t + 1; j < T; ++j) d[j] = 0;
      }
      gemm(false, false, T, hs, T, scale, da, T, k, C3, R(0), dq, C3);  // dQ = dS K / sqrt(hs)
      gemm(true, false, T, hs, T, scale, da, T, q, C3, R(0), dk, C3);   // dK = dS^T Q / sqrt(hs)
    }
}

namespace {
template <class R>
constexpr R kGeluScale = static_cast<R>(0.7978845608028654);  // sqrt(2/pi)

// tanh for float as a rational function (the approximation Eigen uses; absolute error below
// 1e-6 on the whole line, checked in tests). Unlike the library call it vectorises, which
// matters: GELU evaluates it on every element of the 4x-wide MLP activations.
inline float tanh_rational(float x) {
  // Written as compare-selects that map onto vector min/max instructions.
  constexpr float kLimit = 7.90531110763549805f;
  x = x < kLimit ? x : kLimit;
  x = x > -kLimit ? x : -kLimit;
  const float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return x * p / q;
}
inline float tanh_of(float x) { return tanh_rational(x); }
inline double tanh_of(double x) { return std::tanh(x); }  // gradient checks want the exact one
}  // namespace

float tanh_float(float x) { return tanh_rational(x); }

template <class R>
void gelu_forward(R* out, const R* in, std::size_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const R x = in[i];
    out[i] = R(0.5) * x * (R(1) + tanh_of(kGeluScale<R> * (x + R(0.044715) * x * x * x)));
  }
}

template <class R>
void gelu_backward(R* din, const R* in, const R* dout, std::size_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const R x = in[i];
    const R u = kGeluScale<R> * (x + R(0.044715) * x * x * x);
    const R th = tanh_of(u);
    const R du = kGeluScale<R> * (R(1) + R(3 * 0.044715) * x * x);
    din[i] = dout[i] * (R(0.5) * (R(1) + th) + R(0.5) * x * (R(1) - th * th) * du);
  }
}

template <class R>
void add(R* out, const R* a, const R* b, std::size_t n) {
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <class R>
void accumulate(R* out, const R* a, std::size_t n) {
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) out[i] += a[i];
}

template <class R>
double softmax_cross_entropy_forward(R* logits, R* losses, const int* targets, int N, int V, int Vp) {
  double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
  for (int i = 0; i < N; ++i) {
    R* row = logits + static_cast<std::size_t>(i) * Vp;
    R max = row[0];
    for (int j = 1; j < V; ++j) max = std::max(max, row[j]);
    double sum = 0;
    for (int j = 0; j < V; ++j) {
      row[j] = std::exp(row[j] - max);
      sum += row[j];
    }
    const R inv = static_cast<R>(1.0 / sum);
    for (int j = 0; j < V; ++j) row[j] *= inv;
    for (int j = V; j < Vp; ++j) row[j] = 0;
    if (targets) {
      const double loss = -std::log(std::max(static_cast<double>(row[targets[i]]), 1e-300));
      losses[i] = static_cast<R>(loss);
      total += loss;
    }
  }
  return total;
}

template <class R>
void softmax_cross_entropy_backward(R* probs, const int* targets, int N, int V, int Vp, R scale) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    R* row = probs + static_cast<std::size_t>(i) * Vp;
    for (int j = 0; j < V; ++j) row[j] *= scale;
    row[targets[i]] -= scale;
    for (int j = V; j < Vp; ++j) row[j] = 0;
  }
}

#define ST_INSTANTIATE_KERNELS(R)                                                                                \
  template void encoder_forward<R>(R*, const int*, const R*, const R*, int, int, int);                          \
  template void encoder_backward<R>(R*, R*, const R*, const int*, int, int, int);                               \
  template void layernorm_forward<R>(R*, R*, R*, const R*, const R*, const R*, int, int);                       \
  template void layernorm_backward<R>(R*, R*, R*, const R*, const R*, const R*, const R*, const R*, int, int);  \
  template void linear_forward<R>(R*, const R*, const R*, const R*, int, int, int);                             \
  template void linear_backward<R>(R*, R*, R*, const R*, const R*, const R*, int, int, int, bool);              \
  template void attention_forward<R>(R*, R*, const R*, int, int, int, int);                                     \
  template void attention_backward<R>(R*, R*, const R*, const R*, const R*, int, int, int, int);                \
  template void gelu_forward<R>(R*, const R*, std::size_t);                                                     \
  template void gelu_backward<R>(R*, const R*, const R*, std::size_t);                                          \
  template void add<R>(R*, const R*, const R*, std::size_t);                                                    \
  template void accumulate<R>(R*, const R*, std::size_t);                                                       \
  template double softmax_cross_entropy_forward<R>(R*, R*, const int*, int, int, int);                          \
  template void softmax_cross_entropy_backward<R>(R*, const int*, int, int, int, R);

ST_INSTANTIATE_KERNELS(float)
ST_INSTANTIATE_KERNELS(double)

}  // namespace st::kernels
