#include "exec/host_kernels.hpp"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "exec/fast_exp.hpp"
#include "exec/gemm.hpp"
#include "exec/ordered_sum.hpp"

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
      const int token = tokens[b * T + t];
      const R* p = wpe ? wpe + static_cast<std::size_t>(t) * C : nullptr;
      if (token < 0) {  // another rank's row of the table: the position alone
        if (p) std::copy(p, p + C, o);
        else std::fill(o, o + C, R(0));
        continue;
      }
      const R* e = wte + static_cast<std::size_t>(token) * C;
      if (!p) {
        std::copy(e, e + C, o);
        continue;
      }
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
        const int token = tokens[b * T + t];
        if (token < 0) {  // another rank's row: the position's gradient alone
          if (dwpe)
            for (int c = begin; c < end; ++c) dwpe[static_cast<std::size_t>(t) * C + c] += d[c];
          continue;
        }
        R* e = dwte + static_cast<std::size_t>(token) * C;
        if (!dwpe) {
          for (int c = begin; c < end; ++c) e[c] += d[c];
          continue;
        }
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
#pragma omp parallel for schedule(static)
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
      dx[c] += s * (d[c] * weight[c] - a - xhat * b);
    }
  }
  // Parameter gradients are sums over rows: each thread takes a block of columns and adds every
  // row in order into sums of its own, then into dweight and dbias (micro-batches accumulate),
  // so the bits are those of one thread whatever the thread count (and a recomputed block's
  // are the kept one's).
#pragma omp parallel
  {
    const int threads = omp_get_num_threads(), id = omp_get_thread_num();
    const int begin = C * id / threads, end = C * (id + 1) / threads;
    std::vector<R> dw(static_cast<std::size_t>(C), R(0)), db(static_cast<std::size_t>(C), R(0));
    for (int i = 0; i < N; ++i) {
      const R* x = in + static_cast<std::size_t>(i) * C;
      const R* d = dout + static_cast<std::size_t>(i) * C;
      const R m = mean[i], s = rstd[i];
      for (int c = begin; c < end; ++c) {
        const R xhat = (x[c] - m) * s;
        dw[static_cast<std::size_t>(c)] += d[c] * xhat;
        db[static_cast<std::size_t>(c)] += d[c];
      }
    }
    for (int c = begin; c < end; ++c) {
      dweight[c] += dw[static_cast<std::size_t>(c)];
      dbias[c] += db[static_cast<std::size_t>(c)];
    }
  }
}

template <class R>
void linear_forward(R* out, const R* in, const R* weight, const R* bias, int N, int C, int OC) {
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; ++i) std::memcpy(out + static_cast<std::size_t>(i) * OC, bias, sizeof(R) * OC);
  }
  // One row (decoding a token): a matrix-vector product streams the weights once, where GEMM
  // would first pack all of them into its own layout.
  if (N == 1) gemv(false, OC, C, R(1), weight, C, in, bias ? R(1) : R(0), out);
  else gemm(false, true, N, OC, C, R(1), in, C, weight, C, bias ? R(1) : R(0), out, OC);
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

namespace {
// Causal attention touches only the lower triangle of each T x T block: its matmuls run over
// bands of this many query rows, each against the keys up to the band's end, so about half of
// the full block's FLOPs are spent (9/16 at T = 8 bands) rather than all of them.
constexpr int kBandRows = 128;

// The query rows [r0, r1) of band `r0`: r1 keys take part.
inline int band_end(int r0, int T) { return std::min(T, r0 + kBandRows); }

inline float softmax_exp(float x) { return exp_nonpositive(x); }
inline double softmax_exp(double x) { return std::exp(x); }  // gradient checks want the exact one

// One causal row's unnormalised softmax: row[j] = e^(row[j] - max) for j < n, max the largest
// of them. The largest is the same at any vector width, and each exponential is the same
// IEEE operations whatever the width, so vectorising keeps the bits: the float row is
// compiled for baseline x86-64 and again for AVX2 *without* FMA (a fused multiply-add would
// round differently), twice the width on the CPUs that have it; the exponential runs on every
// causal score.
template <class R>
[[gnu::always_inline]] inline void exp_shifted_row(R* row, int n) {
  R max = row[0];
#pragma omp simd reduction(max : max)
  for (int j = 1; j < n; ++j) max = max < row[j] ? row[j] : max;  // std::max's choice
#pragma omp simd
  for (int j = 0; j < n; ++j) row[j] = softmax_exp(row[j] - max);
}
void exp_shifted_baseline(float* row, int n) { exp_shifted_row(row, n); }
#if defined(__x86_64__) && defined(__GNUC__)
[[gnu::target("avx2,no-fma")]] void exp_shifted_avx2(float* row, int n) { exp_shifted_row(row, n); }
#endif
using ExpShifted = void (*)(float*, int);
const ExpShifted exp_shifted_float = [] {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2")) return &exp_shifted_avx2;
#endif
  return &exp_shifted_baseline;
}();
inline void exp_shifted(float* row, int n) { exp_shifted_float(row, n); }
inline void exp_shifted(double* row, int n) { exp_shifted_row(row, n); }

// One head's causal softmax probabilities, a[t, s] = softmax_s(<q_t, k_s> / sqrt(hs)) for s <= t
// and 0 above: the forward and the recomputation in backward run this same code, so a
// recomputed block equals the kept one bit for bit.
template <class R>
void head_probabilities(R* a, const R* q, const R* k, int T, int hs, int W) {
  const R scale = R(1) / std::sqrt(static_cast<R>(hs));
  for (int r0 = 0; r0 < T; r0 += kBandRows) {
    const int r1 = band_end(r0, T);
    gemm(false, true, r1 - r0, r1, hs, scale, q + static_cast<std::size_t>(r0) * W, W, k, W, R(0),
         a + static_cast<std::size_t>(r0) * T, T);
  }
  for (int t = 0; t < T; ++t) {
    R* row = a + static_cast<std::size_t>(t) * T;
    // Apart: the exponentials vectorise, the sum keeps its order.
    exp_shifted(row, t + 1);
    R sum = 0;
    for (int j = 0; j <= t; ++j) sum += row[j];
    const R inv = R(1) / sum;
    for (int j = 0; j <= t; ++j) row[j] *= inv;
    std::fill(row + t + 1, row + T, R(0));
  }
}

// Where (sequence, head) pair `pair` reads and writes. qkv rows are W = C + 2 KV wide: q (NH
// heads), k and v (NKV heads each, KV = NKV hs wide); query head h attends with key/value head
// h / (NH / NKV) (grouped-query attention; NKV = NH is multi-head). dqkv rows are 3C wide with a
// gradient of k and v per query head (summed over each group by gqa_fold when NKV < NH).
struct HeadOffsets {
  std::size_t q, k, v;  // into qkv
  std::size_t dq;       // into dqkv (dk at + C, dv at + 2C)
  std::size_t out;      // into out[B, T, C] (dout)
  int W;                // qkv's row width
};
inline HeadOffsets head_offsets(int pair, int NH, int NKV, int T, int C) {
  const int hs = C / NH, h = pair % NH, g = h / (NH / NKV), W = C + 2 * NKV * hs;
  const std::size_t b = static_cast<std::size_t>(pair / NH), column = static_cast<std::size_t>(h) * hs;
  const std::size_t row0 = b * T * static_cast<std::size_t>(W);
  const std::size_t kv = static_cast<std::size_t>(g) * hs;
  return {row0 + column, row0 + C + kv, row0 + C + static_cast<std::size_t>(NKV) * hs + kv,
          b * T * 3 * C + column, b * T * C + column, W};
}

// Threads for the loop over (sequence, head) pairs: one working block each, so never more
// threads than blocks.
template <class R>
int head_threads(const AttentionProbs<R>& p, int pairs) {
  return std::max(1, std::min(p.heads, pairs));
}
}  // namespace

template <class R>
void attention_forward(R* out, const AttentionProbs<R>& probs, const R* qkv, int B, int T, int C, int NH, int NKV) {
  const int hs = C / NH, pairs = B * NH;
  const std::size_t block = static_cast<std::size_t>(T) * T;
  // One (batch, head) pair per iteration; BLAS runs single-threaded inside the parallel region.
#pragma omp parallel for num_threads(head_threads(probs, pairs)) schedule(static)
  for (int pair = 0; pair < pairs; ++pair) {
    const HeadOffsets at = head_offsets(pair, NH, NKV, T, C);
    const R* q = qkv + at.q;
    const R* k = qkv + at.k;
    const R* v = qkv + at.v;
    R* a = probs.kept ? probs.kept + pair * block : probs.working + omp_get_thread_num() * block;
    head_probabilities(a, q, k, T, hs, at.W);
    R* o = out + at.out;
    for (int r0 = 0; r0 < T; r0 += kBandRows) {  // O = P V, band by band
      const int r1 = band_end(r0, T);
      gemm(false, false, r1 - r0, hs, r1, R(1), a + static_cast<std::size_t>(r0) * T, T, v, at.W, R(0),
           o + static_cast<std::size_t>(r0) * C, C);
    }
  }
}

template <class R>
void attention_backward(R* dqkv, const AttentionProbs<R>& probs, const R* dout, const R* qkv, int B, int T, int C,
                        int NH, int NKV) {
  const int hs = C / NH, C3 = 3 * C, pairs = B * NH;
  const R scale = R(1) / std::sqrt(static_cast<R>(hs));
  const std::size_t block = static_cast<std::size_t>(T) * T;
#pragma omp parallel for num_threads(head_threads(probs, pairs)) schedule(static)
  for (int pair = 0; pair < pairs; ++pair) {
    const HeadOffsets at = head_offsets(pair, NH, NKV, T, C);
    const int W = at.W;
    const R* q = qkv + at.q;
    const R* k = qkv + at.k;
    const R* v = qkv + at.v;
    R* dq = dqkv + at.dq;
    R* dk = dq + C;
    R* dv = dq + 2 * C;
    const std::size_t slot = static_cast<std::size_t>(omp_get_thread_num()) * block;
    const R* a = probs.kept ? probs.kept + pair * block : probs.working + slot;
    if (!probs.kept) head_probabilities(probs.working + slot, q, k, T, hs, W);
    R* da = probs.dworking + slot;
    const R* dO = dout + at.out;
    // Bands from the last, which reaches every key: it sets dV and dK, the others add to them.
    const int last = (T - 1) / kBandRows * kBandRows;
    for (int r0 = last; r0 >= 0; r0 -= kBandRows) {
      const int r1 = band_end(r0, T), rows = r1 - r0;
      const R keep = r0 == last ? R(0) : R(1);
      const R* p = a + static_cast<std::size_t>(r0) * T;
      R* d = da + static_cast<std::size_t>(r0) * T;
      gemm(false, true, rows, r1, hs, R(1), dO + static_cast<std::size_t>(r0) * C, C, v, W, R(0), d, T);  // dP = dO V^T
      gemm(true, false, r1, hs, rows, R(1), p, T, dO + static_cast<std::size_t>(r0) * C, C, keep, dv, C3);  // dV += P^T dO
      for (int t = r0; t < r1; ++t) {  // softmax backward, causal rows
        const R* pt = a + static_cast<std::size_t>(t) * T;
        R* dt = da + static_cast<std::size_t>(t) * T;
        R dot = 0;
        for (int j = 0; j <= t; ++j) dot += pt[j] * dt[j];
        for (int j = 0; j <= t; ++j) dt[j] = pt[j] * (dt[j] - dot);
        std::fill(dt + t + 1, dt + r1, R(0));
      }
      gemm(false, false, rows, hs, r1, scale, d, T, k, W, R(0), dq + static_cast<std::size_t>(r0) * C3, C3);  // dQ = dS K / sqrt(hs)
      gemm(true, false, r1, hs, rows, scale, d, T, q + static_cast<std::size_t>(r0) * W, W, keep, dk, C3);   // dK += dS^T Q / sqrt(hs)
    }
  }
}

template <class R>
void gqa_fold(R* dqkv, const R* expanded, int N, int C, int NH, int NKV) {
  const int hs = C / NH, group = NH / NKV, KV = NKV * hs, W = C + 2 * KV;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const R* e = expanded + static_cast<std::size_t>(n) * 3 * C;
    R* d = dqkv + static_cast<std::size_t>(n) * W;
    std::copy(e, e + C, d);
    for (int part = 1; part <= 2; ++part) {  // k, then v
      const R* from = e + part * C;
      R* to = d + C + (part - 1) * KV;
      for (int g = 0; g < NKV; ++g) {
        R* kv = to + g * hs;
        std::copy(from + static_cast<std::size_t>(g) * group * hs, from + static_cast<std::size_t>(g) * group * hs + hs, kv);
        for (int j = 1; j < group; ++j) {
          const R* head = from + (static_cast<std::size_t>(g) * group + j) * hs;
          for (int i = 0; i < hs; ++i) kv[i] += head[i];
        }
      }
    }
  }
}

template <class R>
void attention_rows(R* out, const R* qkv, int first, int n, int C, int NH, int NKV) {
  const int hs = C / NH, W = C + 2 * NKV * hs, group = NH / NKV;
  const R scale = R(1) / std::sqrt(static_cast<R>(hs));
  // Decoding feeds one row at a time: a row is a few dot products per key, too little for a BLAS
  // call to pay; the pairs of (head, row) spread over the threads instead.
#pragma omp parallel
  {
    std::vector<R> scores(static_cast<std::size_t>(first + n));
#pragma omp for collapse(2) schedule(static)
    for (int h = 0; h < NH; ++h) {
      for (int i = 0; i < n; ++i) {
        const int t = first + i;
        const std::size_t kv = static_cast<std::size_t>(h / group) * hs;
        const R* q = qkv + static_cast<std::size_t>(t) * W + h * hs;
        R max = -std::numeric_limits<R>::infinity();
        for (int j = 0; j <= t; ++j) {
          const R* k = qkv + static_cast<std::size_t>(j) * W + C + kv;
          R dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int d = 0; d < hs; ++d) dot += q[d] * k[d];
          scores[j] = dot * scale;
          max = std::max(max, scores[j]);
        }
        for (int j = 0; j <= t; ++j) scores[j] = softmax_exp(scores[j] - max);
        R sum = 0;
        for (int j = 0; j <= t; ++j) sum += scores[j];
        R* o = out + static_cast<std::size_t>(i) * C + h * hs;
        std::fill(o, o + hs, R(0));
        for (int j = 0; j <= t; ++j) {
          const R* v = qkv + static_cast<std::size_t>(j) * W + C + static_cast<std::size_t>(NKV) * hs + kv;
          const R p = scores[j];
#pragma omp simd
          for (int d = 0; d < hs; ++d) o[d] += p * v[d];
        }
        const R inv = R(1) / sum;
        for (int d = 0; d < hs; ++d) o[d] *= inv;
      }
    }
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
float exp_float(float x) { return exp_nonpositive(x); }

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
  const double total = ordered_parallel_sum(static_cast<std::size_t>(N), 1, [&](std::size_t n) {
    const int i = static_cast<int>(n);
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
      return loss;
    }
    return 0.0;
  });
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

template <class R>
void logit_slice_stats(const R* logits, const int* targets, R* stats, int N, int V, int Vp, int first) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const R* row = logits + static_cast<std::size_t>(i) * Vp;
    R* out = stats + 3 * static_cast<std::size_t>(i);
    R max = V > 0 ? row[0] : -std::numeric_limits<R>::infinity();
    for (int j = 1; j < V; ++j) max = std::max(max, row[j]);
    double sum = 0;
    for (int j = 0; j < V; ++j) sum += std::exp(row[j] - max);
    out[0] = max;
    out[1] = static_cast<R>(sum);
    const int local = targets ? targets[i] - first : -1;
    out[2] = local >= 0 && local < V ? row[local] : R(0);
  }
}

template <class R>
double logit_slices_combine(const R* gathered, R* row_stats, R* losses, const int* targets, int N, int parts) {
  const std::size_t stride = 3 * static_cast<std::size_t>(N);
  return ordered_parallel_sum(static_cast<std::size_t>(N), 1, [&](std::size_t i) {
    R max = -std::numeric_limits<R>::infinity();
    for (int p = 0; p < parts; ++p) max = std::max(max, gathered[p * stride + 3 * i]);
    double sum = 0, target_logit = 0;
    for (int p = 0; p < parts; ++p) {
      const R* s = gathered + p * stride + 3 * i;
      if (s[1] > 0) sum += static_cast<double>(s[1]) * std::exp(static_cast<double>(s[0]) - max);
      target_logit += s[2];  // one slice holds the target; the others add 0
    }
    row_stats[2 * i] = max;
    row_stats[2 * i + 1] = static_cast<R>(sum);
    if (!targets) return 0.0;
    // -log softmax at the target, without forming the probabilities.
    const double loss = std::log(sum) + static_cast<double>(max) - target_logit;
    losses[i] = static_cast<R>(loss);
    return loss;
  });
}

template <class R>
void logit_slice_softmax(R* logits, const R* row_stats, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    R* row = logits + static_cast<std::size_t>(i) * Vp;
    const R max = row_stats[2 * i];
    const R inv = static_cast<R>(1.0 / static_cast<double>(row_stats[2 * i + 1]));
    for (int j = 0; j < V; ++j) row[j] = std::exp(row[j] - max) * inv;
    for (int j = V; j < Vp; ++j) row[j] = 0;
  }
}

template <class R>
void logit_slice_backward(R* probs, const int* targets, int N, int V, int Vp, int first, R scale) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    R* row = probs + static_cast<std::size_t>(i) * Vp;
    for (int j = 0; j < V; ++j) row[j] *= scale;
    const int local = targets[i] - first;
    if (local >= 0 && local < V) row[local] -= scale;
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
  template void attention_forward<R>(R*, const AttentionProbs<R>&, const R*, int, int, int, int, int);          \
  template void attention_backward<R>(R*, const AttentionProbs<R>&, const R*, const R*, int, int, int, int, int); \
  template void gqa_fold<R>(R*, const R*, int, int, int, int);                                                  \
  template void attention_rows<R>(R*, const R*, int, int, int, int, int);                                       \
  template void gelu_forward<R>(R*, const R*, std::size_t);                                                     \
  template void gelu_backward<R>(R*, const R*, const R*, std::size_t);                                          \
  template void add<R>(R*, const R*, const R*, std::size_t);                                                    \
  template void accumulate<R>(R*, const R*, std::size_t);                                                       \
  template double softmax_cross_entropy_forward<R>(R*, R*, const int*, int, int, int);                          \
  template void softmax_cross_entropy_backward<R>(R*, const int*, int, int, int, R);                            \
  template void logit_slice_stats<R>(const R*, const int*, R*, int, int, int, int);                             \
  template double logit_slices_combine<R>(const R*, R*, R*, const int*, int, int);                              \
  template void logit_slice_softmax<R>(R*, const R*, int, int, int);                                            \
  template void logit_slice_backward<R>(R*, const int*, int, int, int, int, R);

ST_INSTANTIATE_KERNELS(float)
ST_INSTANTIATE_KERNELS(double)

}  // namespace st::kernels
