#include "exec/host_llama_kernels.hpp"

#include <omp.h>

#include <cmath>

#include "exec/fast_exp.hpp"

namespace st::kernels {

template <class R>
void rmsnorm_forward(R* out, R* rstd, const R* in, const R* weight, int N, int C, double eps) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const R* x = in + static_cast<std::size_t>(i) * C;
    R* o = out + static_cast<std::size_t>(i) * C;
    double squares = 0;
    for (int c = 0; c < C; ++c) squares += static_cast<double>(x[c]) * x[c];
    const R s = static_cast<R>(1.0 / std::sqrt(squares / C + eps));
    rstd[i] = s;
    for (int c = 0; c < C; ++c) o[c] = x[c] * s * weight[c];
  }
}

template <class R>
void rmsnorm_backward(R* din, R* dweight, const R* dout, const R* in, const R* weight, const R* rstd, int N, int C) {
  // As layernorm_backward: per-thread partial sums of dweight, added in thread order, so the
  // result does not depend on the schedule.
  const int teams = omp_get_max_threads();
  std::vector<R> partial(static_cast<std::size_t>(teams) * C, R(0));
#pragma omp parallel num_threads(teams)
  {
    R* dw = partial.data() + static_cast<std::size_t>(omp_get_thread_num()) * C;
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      const R* x = in + static_cast<std::size_t>(i) * C;
      const R* d = dout + static_cast<std::size_t>(i) * C;
      R* dx = din + static_cast<std::size_t>(i) * C;
      const R s = rstd[i];
      double dnorm_xhat_mean = 0;
      for (int c = 0; c < C; ++c) dnorm_xhat_mean += static_cast<double>(d[c] * weight[c]) * (x[c] * s);
      const R b = static_cast<R>(dnorm_xhat_mean / C);
      for (int c = 0; c < C; ++c) {
        const R xhat = x[c] * s;
        dw[c] += d[c] * xhat;
        dx[c] += s * (d[c] * weight[c] - xhat * b);
      }
    }
#pragma omp for schedule(static)
    for (int c = 0; c < C; ++c)
      for (int t = 0; t < teams; ++t) dweight[c] += partial[static_cast<std::size_t>(t) * C + c];
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

template <class R>
RopeTable<R> rope_table(int positions, int hs, double theta) {
  std::vector<double> inverse_frequencies(static_cast<std::size_t>(hs / 2));
  for (int i = 0; i < hs / 2; ++i) inverse_frequencies[static_cast<std::size_t>(i)] = std::pow(theta, -2.0 * i / hs);
  return rope_table<R>(positions, inverse_frequencies);
}

template <class R>
void rope(R* x, const R* cosines, const R* sines, int B, int T, int first, int W, int heads, int hs, bool inverse) {
  const int half = hs / 2;
  const R sign = inverse ? R(-1) : R(1);
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      R* row = x + (static_cast<std::size_t>(b) * T + t) * W;
      const R* c = cosines + static_cast<std::size_t>(first + t) * half;
      const R* s = sines + static_cast<std::size_t>(first + t) * half;
      for (int h = 0; h < heads; ++h) {
        R* v = row + static_cast<std::size_t>(h) * hs;
        for (int i = 0; i < half; ++i) {
          const R x1 = v[i], x2 = v[i + half], sn = sign * s[i];
          v[i] = x1 * c[i] - x2 * sn;
          v[i + half] = x2 * c[i] + x1 * sn;
        }
      }
    }
}

namespace {
// The logistic function from e^-|x| (never overflows): the fast float exponential in training,
// the library's in double (gradient checks).
inline float sigmoid(float x) {
  const float z = exp_nonpositive(x < 0 ? x : -x);
  return x < 0 ? z / (1.0f + z) : 1.0f / (1.0f + z);
}
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

template <class R>
void swiglu_forward(R* out, const R* in, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const R* gate = in + static_cast<std::size_t>(n) * 2 * F;
    const R* up = gate + F;
    R* o = out + static_cast<std::size_t>(n) * F;
#pragma omp simd
    for (int i = 0; i < F; ++i) o[i] = gate[i] * sigmoid(gate[i]) * up[i];
  }
}

template <class R>
void swiglu_backward(R* din, const R* in, const R* dout, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const R* gate = in + static_cast<std::size_t>(n) * 2 * F;
    const R* up = gate + F;
    const R* d = dout + static_cast<std::size_t>(n) * F;
    R* dgate = din + static_cast<std::size_t>(n) * 2 * F;
    R* dup = dgate + F;
#pragma omp simd
    for (int i = 0; i < F; ++i) {
      const R g = gate[i], sg = sigmoid(g);
      dup[i] = d[i] * g * sg;
      dgate[i] = d[i] * up[i] * sg * (R(1) + g * (R(1) - sg));
    }
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
