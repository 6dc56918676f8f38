#include "exec/flash_reference.hpp"

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace st::kernels {
namespace {

// Where one (sequence, head) reads and writes in qkv's layout.
struct FlashGeometry {
  int hs, W, group;  // head width, row width, query heads per key/value head
  std::size_t row(int b, int t, int T) const { return (static_cast<std::size_t>(b) * T + t) * W; }
  std::size_t q(int h) const { return static_cast<std::size_t>(h) * hs; }
  std::size_t k(int g, int C) const { return static_cast<std::size_t>(C) + static_cast<std::size_t>(g) * hs; }
  std::size_t v(int g, int C, int NKV) const {
    return static_cast<std::size_t>(C) + static_cast<std::size_t>(NKV + g) * hs;
  }
};

FlashGeometry geometry(int C, int NH, int NKV) {
  const int hs = C / NH;
  return {hs, C + 2 * NKV * hs, NH / NKV};
}

template <class R>
R dot(const R* a, const R* b, int n) {
  R s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

template <class R>
void flash_attention_forward(R* out, R* lse, const R* qkv, int B, int T, int C, int NH, int NKV) {
  const FlashGeometry g = geometry(C, NH, NKV);
  const R scale = R(1) / std::sqrt(static_cast<R>(g.hs));
#pragma omp parallel
  {
    std::vector<R> s(static_cast<std::size_t>(T));
#pragma omp for collapse(3) schedule(static)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int t = 0; t < T; ++t) {
          const int kv = h / g.group;
          const R* q = qkv + g.row(b, t, T) + g.q(h);
          R max = -std::numeric_limits<R>::infinity();
          for (int j = 0; j <= t; ++j) {
            s[j] = scale * dot(q, qkv + g.row(b, j, T) + g.k(kv, C), g.hs);
            max = s[j] > max ? s[j] : max;
          }
          R sum = 0;
          for (int j = 0; j <= t; ++j) sum += std::exp(s[j] - max);
          R* o = out + (static_cast<std::size_t>(b) * T + t) * C + g.q(h);
          for (int d = 0; d < g.hs; ++d) o[d] = 0;
          for (int j = 0; j <= t; ++j) {
            const R p = std::exp(s[j] - max) / sum;
            const R* v = qkv + g.row(b, j, T) + g.v(kv, C, NKV);
            for (int d = 0; d < g.hs; ++d) o[d] += p * v[d];
          }
          lse[(static_cast<std::size_t>(b) * NH + h) * T + t] = max + std::log(sum);
        }
  }
}

template <class R>
void flash_attention_backward(R* dqkv, const R* dout, const R* out, const R* lse, const R* qkv, int B, int T, int C,
                              int NH, int NKV) {
  const FlashGeometry g = geometry(C, NH, NKV);
  const R scale = R(1) / std::sqrt(static_cast<R>(g.hs));
  auto at = [&](int b, int h, int t) { return (static_cast<std::size_t>(b) * NH + h) * T + t; };
  auto out_row = [&](int b, int t, int h) { return (static_cast<std::size_t>(b) * T + t) * C + g.q(h); };
  // P_tj and dS_tj of query head h (key/value head kv) recomputed from the scores and lse.
  auto probability = [&](int b, int h, int t, int j) {
    const R* q = qkv + g.row(b, t, T) + g.q(h);
    const R* k = qkv + g.row(b, j, T) + g.k(h / g.group, C);
    return std::exp(scale * dot(q, k, g.hs) - lse[at(b, h, t)]);
  };
  // D_t = <dO_t, O_t> for every row of every head.
  std::vector<R> row_dots(static_cast<std::size_t>(B) * NH * T);
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) row_dots[at(b, h, t)] = dot(dout + out_row(b, t, h), out + out_row(b, t, h), g.hs);
  auto score_gradient = [&](int b, int h, int t, int j, R p) {
    const R* v = qkv + g.row(b, j, T) + g.v(h / g.group, C, NKV);
    return p * (dot(dout + out_row(b, t, h), v, g.hs) - row_dots[at(b, h, t)]);
  };
  // dQ_t = scale sum_{j <= t} dS_tj k_j, one query row at a time.
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        R* dq = dqkv + g.row(b, t, T) + g.q(h);
        for (int d = 0; d < g.hs; ++d) dq[d] = 0;
        for (int j = 0; j <= t; ++j) {
          const R ds = score_gradient(b, h, t, j, probability(b, h, t, j));
          const R* k = qkv + g.row(b, j, T) + g.k(h / g.group, C);
          for (int d = 0; d < g.hs; ++d) dq[d] += ds * k[d];
        }
        for (int d = 0; d < g.hs; ++d) dq[d] *= scale;
      }
  // dK_j = scale sum_h sum_{t >= j} dS_tj q_t and dV_j = sum_h sum_{t >= j} P_tj dO_t over the
  // query heads h of key/value head kv, one key at a time.
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int kv = 0; kv < NKV; ++kv)
      for (int j = 0; j < T; ++j) {
        R* dk = dqkv + g.row(b, j, T) + g.k(kv, C);
        R* dv = dqkv + g.row(b, j, T) + g.v(kv, C, NKV);
        for (int d = 0; d < g.hs; ++d) dk[d] = dv[d] = 0;
        for (int h = kv * g.group; h < (kv + 1) * g.group; ++h)
          for (int t = j; t < T; ++t) {
            const R p = probability(b, h, t, j), ds = score_gradient(b, h, t, j, p);
            const R* q = qkv + g.row(b, t, T) + g.q(h);
            const R* dO = dout + out_row(b, t, h);
            for (int d = 0; d < g.hs; ++d) {
              dk[d] += ds * q[d];
              dv[d] += p * dO[d];
            }
          }
        for (int d = 0; d < g.hs; ++d) dk[d] *= scale;
      }
}

template void flash_attention_forward<float>(float*, float*, const float*, int, int, int, int, int);
template void flash_attention_forward<double>(double*, double*, const double*, int, int, int, int, int);
template void flash_attention_backward<float>(float*, const float*, const float*, const float*, const float*, int, int,
                                              int, int, int);
template void flash_attention_backward<double>(double*, const double*, const double*, const double*, const double*, int,
                                               int, int, int, int);

}  // namespace st::kernels
