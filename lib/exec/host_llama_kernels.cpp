#include "exec/host_llama_kernels.hpp"

#include <omp.h>

#include <atomic>
#include <cmath>
#include <type_traits>

#include "exec/fast_exp.hpp"

namespace st::kernels {
namespace {
// The logistic function from e^-|x| (never overflows): the fast float exponential in training,
// the library's in double (gradient checks).
[[gnu::always_inline]] inline float sigmoid(float x) {
  const float z = exp_nonpositive(x < 0 ? x : -x);
  return (x < 0 ? z : 1.0f) / (1.0f + z);
}
[[gnu::always_inline]] inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// One row of each kernel. Every loop is one the compiler vectorises: the sums of squares and
// dot products in double with `omp simd` reductions (partial sums, so not the strict
// left-to-right order; they stay exact to double rounding), the element-wise parts straight.
template <class R>
[[gnu::always_inline]] inline R rmsnorm_forward_row(R* o, const R* x, const R* weight, int C, double eps) {
  double squares = 0;
#pragma omp simd reduction(+ : squares)
  for (int c = 0; c < C; ++c) squares += static_cast<double>(x[c]) * static_cast<double>(x[c]);
  const R s = static_cast<R>(1.0 / std::sqrt(squares / C + eps));
#pragma omp simd
  for (int c = 0; c < C; ++c) o[c] = x[c] * s * weight[c];
  return s;
}

template <class R>
[[gnu::always_inline]] inline void rmsnorm_backward_row(R* dx, const R* d, const R* x, const R* weight, R s, int C) {
  double dnorm_xhat = 0;
#pragma omp simd reduction(+ : dnorm_xhat)
  for (int c = 0; c < C; ++c) dnorm_xhat += static_cast<double>(d[c] * weight[c]) * static_cast<double>(x[c] * s);
  const R b = static_cast<R>(dnorm_xhat / C);
#pragma omp simd
  for (int c = 0; c < C; ++c) {
    const R xhat = x[c] * s;
    dx[c] += s * (d[c] * weight[c] - xhat * b);
  }
}

// The weight's gradient over `rows` rows, columns [begin, end) only: dw[c] += d[c] x xhat[c], the
// rows added one after another, so each column's sum is the same however the columns are shared
// between threads.
template <class R>
[[gnu::always_inline]] inline void rmsnorm_weight_grad_columns(R* dw, const R* dout, const R* in, const R* rstd,
                                                               int rows, int C, int begin, int end) {
  for (int i = 0; i < rows; ++i) {
    const R* d = dout + static_cast<std::size_t>(i) * C;
    const R* x = in + static_cast<std::size_t>(i) * C;
    const R s = rstd[i];
#pragma omp simd
    for (int c = begin; c < end; ++c) {
      const R xhat = x[c] * s;
      dw[c] += d[c] * xhat;
    }
  }
}

template <class R>
[[gnu::always_inline]] inline void rope_row(R* row, const R* c, const R* s, int heads, int hs, R sign) {
  const int half = hs / 2;
  for (int h = 0; h < heads; ++h) {
    R* v = row + static_cast<std::size_t>(h) * hs;
#pragma omp simd
    for (int i = 0; i < half; ++i) {
      const R x1 = v[i], x2 = v[i + half], sn = sign * s[i];
      v[i] = x1 * c[i] - x2 * sn;
      v[i + half] = x2 * c[i] + x1 * sn;
    }
  }
}

template <class R>
[[gnu::always_inline]] inline void swiglu_forward_row(R* o, const R* gate, const R* up, int F) {
#pragma omp simd
  for (int i = 0; i < F; ++i) o[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

template <class R>
[[gnu::always_inline]] inline void swiglu_backward_row(R* dgate, R* dup, const R* gate, const R* up, const R* d,
                                                       int F) {
#pragma omp simd
  for (int i = 0; i < F; ++i) {
    const R g = gate[i], sg = sigmoid(g), dsg = d[i] * sg;
    dup[i] = dsg * g;
    dgate[i] = dsg * up[i] * (R(1) + g * (R(1) - sg));
  }
}

// The float rows, compiled for the baseline x86-64 (SSE2, 4 floats per instruction) and again
// for AVX2 with FMA (8, and the exponential's polynomial in fused multiply-adds), picked once
// by what the CPU reports. The build targets the baseline (ST_NATIVE off), which left these
// loops at half the width the machines they run on offer. The two differ in the last bits
// (FMA rounds once), each deterministic.
struct FloatRows {
  float (*rmsnorm_forward)(float*, const float*, const float*, int, double);
  void (*rmsnorm_backward)(float*, const float*, const float*, const float*, float, int);
  void (*rmsnorm_weight_grad)(float*, const float*, const float*, const float*, int, int, int, int);
  void (*rope)(float*, const float*, const float*, int, int, float);
  void (*swiglu_forward)(float*, const float*, const float*, int);
  void (*swiglu_backward)(float*, float*, const float*, const float*, const float*, int);
};

#define ST_FLOAT_ROWS(NAME, ATTR)                                                                                   \
  ATTR float NAME##_rmsnorm_forward(float* o, const float* x, const float* w, int C, double eps) {                \
    return rmsnorm_forward_row(o, x, w, C, eps);                                                                  \
  }                                                                                                                \
  ATTR void NAME##_rmsnorm_backward(float* dx, const float* d, const float* x, const float* w, float s, int C) {   \
    rmsnorm_backward_row(dx, d, x, w, s, C);                                                                       \
  }                                                                                                                \
  ATTR void NAME##_rmsnorm_weight_grad(float* dw, const float* d, const float* x, const float* rstd, int rows,      \
                                       int C, int begin, int end) {                                                \
    rmsnorm_weight_grad_columns(dw, d, x, rstd, rows, C, begin, end);                                              \
  }                                                                                                                \
  ATTR void NAME##_rope(float* row, const float* c, const float* s, int heads, int hs, float sign) {               \
    rope_row(row, c, s, heads, hs, sign);                                                                          \
  }                                                                                                                \
  ATTR void NAME##_swiglu_forward(float* o, const float* gate, const float* up, int F) {                         \
    swiglu_forward_row(o, gate, up, F);                                                                            \
  }                                                                                                                \
  ATTR void NAME##_swiglu_backward(float* dgate, float* dup, const float* gate, const float* up, const float* d,   \
                                   int F) {                                                                        \
    swiglu_backward_row(dgate, dup, gate, up, d, F);                                                               \
  }                                                                                                                \
  constexpr FloatRows NAME##_rows{NAME##_rmsnorm_forward, NAME##_rmsnorm_backward, NAME##_rmsnorm_weight_grad,    \
                                  NAME##_rope,                                                                     \
                                  NAME##_swiglu_forward, NAME##_swiglu_backward};

ST_FLOAT_ROWS(baseline, )
#if defined(__x86_64__) && defined(__GNUC__)
ST_FLOAT_ROWS(avx2, [[gnu::target("avx2,fma")]])
#endif
#undef ST_FLOAT_ROWS

const FloatRows* widest_rows() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &avx2_rows;
#endif
  return &baseline_rows;
}

std::atomic<const FloatRows*> chosen_rows{widest_rows()};

const FloatRows& float_rows() { return *chosen_rows.load(std::memory_order_relaxed); }

// The row kernel for R: double (gradient checks) calls the template directly.
template <class R>
R rmsnorm_forward_of(R* o, const R* x, const R* w, int C, double eps) {
  if constexpr (std::is_same_v<R, float>) return float_rows().rmsnorm_forward(o, x, w, C, eps);
  else return rmsnorm_forward_row(o, x, w, C, eps);
}
template <class R>
void rmsnorm_backward_of(R* dx, const R* d, const R* x, const R* w, R s, int C) {
  if constexpr (std::is_same_v<R, float>) float_rows().rmsnorm_backward(dx, d, x, w, s, C);
  else rmsnorm_backward_row(dx, d, x, w, s, C);
}
template <class R>
void rmsnorm_weight_grad_of(R* dw, const R* d, const R* x, const R* rstd, int rows, int C, int begin, int end) {
  if constexpr (std::is_same_v<R, float>) float_rows().rmsnorm_weight_grad(dw, d, x, rstd, rows, C, begin, end);
  else rmsnorm_weight_grad_columns(dw, d, x, rstd, rows, C, begin, end);
}
template <class R>
void rope_of(R* row, const R* c, const R* s, int heads, int hs, R sign) {
  if constexpr (std::is_same_v<R, float>) float_rows().rope(row, c, s, heads, hs, sign);
  else rope_row(row, c, s, heads, hs, sign);
}
template <class R>
void swiglu_forward_of(R* o, const R* gate, const R* up, int F) {
  if constexpr (std::is_same_v<R, float>) float_rows().swiglu_forward(o, gate, up, F);
  else swiglu_forward_row(o, gate, up, F);
}
template <class R>
void swiglu_backward_of(R* dgate, R* dup, const R* gate, const R* up, const R* d, int F) {
  if constexpr (std::is_same_v<R, float>) float_rows().swiglu_backward(dgate, dup, gate, up, d, F);
  else swiglu_backward_row(dgate, dup, gate, up, d, F);
}
}  // namespace

void use_float_rows(FloatRowSet set) {
  chosen_rows.store(set == FloatRowSet::baseline ? &baseline_rows : widest_rows(), std::memory_order_relaxed);
}

template <class R>
void rmsnorm_forward(R* out, R* rstd, const R* in, const R* weight, int N, int C, double eps) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const std::size_t row = static_cast<std::size_t>(i) * C;
    rstd[i] = rmsnorm_forward_of(out + row, in + row, weight, C, eps);
  }
}

template <class R>
void rmsnorm_backward(R* din, R* dweight, const R* dout, const R* in, const R* weight, const R* rstd, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const std::size_t row = static_cast<std::size_t>(i) * C;
    rmsnorm_backward_of(din + row, dout + row, in + row, weight, rstd[i], C);
  }
  // The weight's gradient is a sum over rows: each thread takes a block of columns and adds every
  // row in order into a sum of its own, then into dweight (micro-batches accumulate), so the
  // bits are those of one thread whatever the thread count.
#pragma omp parallel
  {
    const int threads = omp_get_num_threads(), id = omp_get_thread_num();
    const int begin = C * id / threads, end = C * (id + 1) / threads;
    std::vector<R> sum(static_cast<std::size_t>(C), R(0));
    rmsnorm_weight_grad_of(sum.data(), dout, in, rstd, N, C, begin, end);
    for (int c = begin; c < end; ++c) dweight[c] += sum[static_cast<std::size_t>(c)];
  }
}

template <class R>
RopeTable<R> rope_table(int positions, const std::vector<double>& inverse_frequencies) {
  RopeTable<R> table;
  table.half = static_cast<int>(inverse_frequencies.size());
  table.cos.resize(static_cast<std::size_t>(positions) * table.half);
  table.sin.resize(table.cos.size());
  for (int p = 0; p < positions; ++p)
    for (int i = 0; i < table.half; ++i) {
      const double angle = p * inverse_frequencies[static_cast<std::size_t>(i)];
      table.cos[static_cast<std::size_t>(p) * table.half + i] = static_cast<R>(std::cos(angle));
      table.sin[static_cast<std::size_t>(p) * table.half + i] = static_cast<R>(std::sin(angle));
    }
  return table;
}

std::vector<double> rope_frequencies(int hs, double theta) {
  std::vector<double> frequencies(static_cast<std::size_t>(hs / 2));
  for (int i = 0; i < hs / 2; ++i) frequencies[static_cast<std::size_t>(i)] = std::pow(theta, -2.0 * i / hs);
  return frequencies;
}

template <class R>
RopeTable<R> rope_table(int positions, int hs, double theta) {
  return rope_table<R>(positions, rope_frequencies(hs, theta));
}

template <class R>
void rope(R* x, const R* cosines, const R* sines, int B, int T, int first, int W, int heads, int hs, bool inverse) {
  const int half = hs / 2;
  const R sign = inverse ? R(-1) : R(1);
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      R* row = x + (static_cast<std::size_t>(b) * T + t) * W;
      const std::size_t at = static_cast<std::size_t>(first + t) * half;
      rope_of(row, cosines + at, sines + at, heads, hs, sign);
    }
}

template <class R>
void swiglu_forward(R* out, const R* in, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const R* gate = in + static_cast<std::size_t>(n) * 2 * F;
    swiglu_forward_of(out + static_cast<std::size_t>(n) * F, gate, gate + F, F);
  }
}

template <class R>
void swiglu_backward(R* din, const R* in, const R* dout, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const R* gate = in + static_cast<std::size_t>(n) * 2 * F;
    R* dgate = din + static_cast<std::size_t>(n) * 2 * F;
    swiglu_backward_of(dgate, dgate + F, gate, gate + F, dout + static_cast<std::size_t>(n) * F, F);
  }
}

#define ST_INSTANTIATE(R)                                                                     \
  template void rmsnorm_forward<R>(R*, R*, const R*, const R*, int, int, double);             \
  template void rmsnorm_backward<R>(R*, R*, const R*, const R*, const R*, const R*, int, int); \
  template RopeTable<R> rope_table<R>(int, const std::vector<double>&);                       \
  template RopeTable<R> rope_table<R>(int, int, double);                                      \
  template void rope<R>(R*, const R*, const R*, int, int, int, int, int, int, bool);         \
  template void swiglu_forward<R>(R*, const R*, int, int);                                    \
  template void swiglu_backward<R>(R*, const R*, const R*, int, int);
ST_INSTANTIATE(float)
ST_INSTANTIATE(double)
#undef ST_INSTANTIATE

}  // namespace st::kernels
