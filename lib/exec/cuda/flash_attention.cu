// Flash attention's kernels (flash_attention.hpp): FlashAttention-2's forward (one block per 64
// query rows of a head, looping over key tiles with an online softmax), and its backward as two
// passes that need no atomics: dK and dV per 64-key tile of a key/value head (looping over the
// query heads of its group and the query tiles at and after the keys), then dQ per 64-row query
// tile (looping over the key tiles up to its rows). Each pass recomputes the probabilities of
// its tiles from q, k and the forward's log-sum-exp, so backward does 7 tile products where
// FlashAttention-2's one pass with atomic dQ does 5: the price of a deterministic dQ. Every kernel
// is a template on the storage of q, k, v, dO, O and dqkv (storage.cuh): fp32 (rounded to bf16 on
// the way into shared memory), or bf16 (already the operands' values).
//
// A block is 4 warps; each warp owns 16 rows of the block's 64 (query rows, or keys in the dK/dV
// pass) and computes their products with mma.sync (mma_bf16.cuh), so the softmax's row
// statistics stay within the 4 lanes that hold a row. Tiles of q, k, v and dO are read from
// global memory, rounded to bf16 (where fp32) and stored in shared memory, row-major or transposed
// as the products read them (mma_bf16.cuh's load_b reads B's columns from a tile's rows); rows
// at or past T are zeros. A tile's rows are padded by 8 elements: the 8 rows a fragment load
// touches then start in 8 different groups of 4 banks, so the loads are free of conflicts.
#include "exec/cuda/flash_attention.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "exec/attention_probs.hpp"
#include "exec/cuda/cuda_checks.hpp"
#include "exec/cuda/device_reduce.cuh"
#include "exec/cuda/mma_bf16.cuh"
#include "exec/cuda/storage.cuh"

namespace st {
namespace {

using namespace cuda_detail;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kTile = 16 * kWarps;  // rows of a block: 16 a warp
constexpr int kPad = 8;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.69314718055994531f;

__host__ __device__ constexpr int pitch(int columns) { return columns + kPad; }

// Queries per step of the dK/dV pass and keys per step of the dQ pass: 64, or 32 for heads 128
// wide, whose two D-wide accumulators (dK and dV) already take 128 registers a thread.
__host__ __device__ constexpr int backward_step(int D) { return D >= 128 ? 32 : 64; }

// A head's place in qkv, and the softmax scale. Row t of sequence b starts at (b T + t) W; query
// head h at column h D, key/value head kv's k at C + kv D and its v at C + (NKV + kv) D.
struct Geometry {
  int T, C, NH, NKV, W, group;  // group: query heads per key/value head
  float scale;                  // 1 / sqrt(D)
  float scale_log2;             // scale log2(e): the scores in base 2, for exp2f
};

// Rows row0..row0+Rows-1 of D columns starting at `src` (rows `stride` floats apart) into `tile`
// [Rows][pitch(D)] as bf16; rows at or past T are zeros. Every thread of the block calls it.
template <int D, int Rows, class S>
__device__ void load_rows(std::uint16_t* tile, const S* src, std::size_t stride, int row0, int T) {
  constexpr int pairs = D / 2;
  for (int i = static_cast<int>(threadIdx.x); i < Rows * pairs; i += kThreads) {
    const int r = i / pairs, c = 2 * (i % pairs);
    float x = 0.0f, y = 0.0f;
    if (row0 + r < T) {
      const S* p = src + static_cast<std::size_t>(row0 + r) * stride + c;
      x = load(p[0]);
      y = load(p[1]);
    }
    store_pair(tile + r * pitch(D) + c, pack_bf16(x, y));
  }
}

// The same rows transposed: tile [D][pitch(Rows)], tile[c][r] = row row0 + r, column c.
template <int D, int Rows, class S>
__device__ void load_rows_transposed(std::uint16_t* tile, const S* src, std::size_t stride, int row0, int T) {
  for (int i = static_cast<int>(threadIdx.x); i < (Rows / 2) * D; i += kThreads) {
    const int c = i % D, r = 2 * (i / D);  // neighbouring threads read neighbouring columns
    const float x = row0 + r < T ? load(src[static_cast<std::size_t>(row0 + r) * stride + c]) : 0.0f;
    const float y = row0 + r + 1 < T ? load(src[static_cast<std::size_t>(row0 + r + 1) * stride + c]) : 0.0f;
    store_pair(tile + c * pitch(Rows) + r, pack_bf16(x, y));
  }
}

// lse (to base 2) and row dots of rows row0..row0+Rows-1 into shared memory; rows at or past T
// get an infinite lse (probability 0) and a zero dot.
template <int Rows>
__device__ void load_row_statistics(float* lse2, float* dots, const float* lse, const float* row_dots, int row0, int T) {
  for (int i = static_cast<int>(threadIdx.x); i < Rows; i += kThreads) {
    const bool in = row0 + i < T;
    lse2[i] = in ? lse[row0 + i] * kLog2e : INFINITY;
    dots[i] = in ? row_dots[row0 + i] : 0.0f;
  }
}

// Dynamic shared memory of each kernel, in bytes (the launches and the kernels carve the same).
template <int D>
constexpr std::size_t forward_shared_bytes() {
  return sizeof(std::uint16_t) * (kTile * pitch(D) + D * pitch(kTile));
}
template <int D>
constexpr std::size_t backward_kv_shared_bytes() {
  constexpr int Q = backward_step(D);
  return sizeof(std::uint16_t) * (2 * kTile * pitch(D) + 2 * Q * pitch(D) + 2 * D * pitch(Q)) + sizeof(float) * 2 * Q;
}
template <int D>
constexpr std::size_t backward_q_shared_bytes() {
  constexpr int K = backward_step(D);
  return sizeof(std::uint16_t) * (2 * kTile * pitch(D) + 2 * K * pitch(D) + D * pitch(K)) + sizeof(float) * 2 * kTile;
}

// ---- forward ----
// Block (x, y): query rows qb kTile.. of head y % NH of sequence y / NH, qb = gridDim.x - 1 - x
// (the longest rows start first). Each warp keeps its 16 rows' q fragments in registers, and
// for each key tile kb <= qb: S = Q K^T (scaled, masked above the diagonal on the last tile),
// the running max m and sum l per row (each of a lane's two rows lives in the 4 lanes of its
// quad: reduced with two shuffles), O scaled by e^(m_old - m_new) and O += P V with P rounded to
// bf16. Last O / l, and lse = m + log l.
template <int D, class S>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(S* out, float* lse, const S* qkv, Geometry geo) {
  constexpr int kSteps = D / 16, kOutTiles = D / 8, kKeyTiles = kTile / 8, kKeySteps = kTile / 16;
  extern __shared__ __align__(16) unsigned char flash_shared[];
  std::uint16_t* qk = reinterpret_cast<std::uint16_t*>(flash_shared);  // [kTile][pitch(D)]: Q, then each K tile
  std::uint16_t* vt = qk + kTile * pitch(D);                          // [D][pitch(kTile)]: the V tile transposed

  const int T = geo.T, qb = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
  const int b = static_cast<int>(blockIdx.y) / geo.NH, h = static_cast<int>(blockIdx.y) % geo.NH, kv = h / geo.group;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, t = lane % 4;
  const std::size_t W = static_cast<std::size_t>(geo.W);
  const S* sequence = qkv + static_cast<std::size_t>(b) * T * W;
  const S* k_src = sequence + geo.C + kv * D;
  const S* v_src = sequence + geo.C + (geo.NKV + kv) * D;
  const int row0 = qb * kTile;
  const int rows[2] = {row0 + warp * 16 + g, row0 + warp * 16 + g + 8};  // a lane's two rows

  load_rows<D, kTile>(qk, sequence + h * D, W, row0, T);
  __syncthreads();
  std::uint32_t qa[kSteps][4];
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) load_a(qa[kk], qk, pitch(D), warp * 16, kk * 16);

  float o[kOutTiles][4];
#pragma unroll
  for (int n = 0; n < kOutTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's share of the row sum

  for (int kb = 0; kb <= qb; ++kb) {
    const int key0 = kb * kTile;
    __syncthreads();  // every warp is done with the previous tile (the first time: with Q)
    load_rows<D, kTile>(qk, k_src, W, key0, T);
    load_rows_transposed<D, kTile>(vt, v_src, W, key0, T);
    __syncthreads();

    float s[kKeyTiles][4];
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
        std::uint32_t kb_frag[2];
        load_b(kb_frag, qk, pitch(D), n * 8, kk * 16);
        mma_bf16_16816(s[n], qa[kk], kb_frag);
      }
    // Keys after a row are masked on the diagonal tile only: every earlier tile's keys precede
    // all of this block's rows. Keys at or past T lie after every row below T there too; rows at
    // or past T are never written.
    const bool diagonal = kb == qb;
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = key0 + n * 8 + 2 * t + (i & 1);
        s[n][i] = diagonal && key > rows[i / 2] ? -INFINITY : s[n][i] * geo.scale_log2;
      }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float row_max = -INFINITY;
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) row_max = fmaxf(row_max, fmaxf(s[n][2 * half], s[n][2 * half + 1]));
      row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
      row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));
      const float m_new = fmaxf(m[half], row_max);
      // Every row sees key 0 on its first tile, so m_new is finite; kept safe all the same.
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      const float rescale = exp2f(m[half] - base);
      m[half] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = exp2f(s[n][2 * half + e] - base);
          s[n][2 * half + e] = p;
          sum += p;
        }
      l[half] = l[half] * rescale + sum;
#pragma unroll
      for (int n = 0; n < kOutTiles; ++n) {
        o[n][2 * half] *= rescale;
        o[n][2 * half + 1] *= rescale;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) {
      std::uint32_t pa[4];
      a_from_accumulators(pa, s, kk);
#pragma unroll
      for (int n = 0; n < kOutTiles; ++n) {
        std::uint32_t vb[2];
        load_b(vb, vt, pitch(kTile), n * 8, kk * 16);
        mma_bf16_16816(o[n], pa, vb);
      }
    }
  }

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = l[half];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = rows[half];
    if (row >= T) continue;
    const float inv = 1.0f / sum;
    S* o_row = out + (static_cast<std::size_t>(b) * T + row) * geo.C + h * D;
#pragma unroll
    for (int n = 0; n < kOutTiles; ++n) {
      o_row[n * 8 + 2 * t] = stored<S>(o[n][2 * half] * inv);
      o_row[n * 8 + 2 * t + 1] = stored<S>(o[n][2 * half + 1] * inv);
    }
    if (t == 0) lse[(static_cast<std::size_t>(b) * geo.NH + h) * T + row] = (m[half] + log2f(sum)) * kLn2;
  }
}

// ---- backward ----
// row_dots[b, h, t] = <dO_t, O_t> over head h's D columns, dO rounded to bf16 as the products
// see it: one warp per row of a head, its lanes over the columns, a fixed butterfly.
template <class S>
__global__ void flash_row_dots_kernel(float* row_dots, const S* dout, const S* out, int B, int T, int C, int NH, int D) {
  const std::size_t r = static_cast<std::size_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  if (r >= static_cast<std::size_t>(B) * NH * T) return;  // the whole warp leaves together
  const int t = static_cast<int>(r % static_cast<std::size_t>(T));
  const std::size_t bh = r / static_cast<std::size_t>(T);
  const int h = static_cast<int>(bh % static_cast<std::size_t>(NH)), b = static_cast<int>(bh / static_cast<std::size_t>(NH));
  const std::size_t at = (static_cast<std::size_t>(b) * T + t) * C + static_cast<std::size_t>(h) * D;
  float sum = 0.0f;
  for (int d = lane; d < D; d += kWarp) sum += __bfloat162float(__float2bfloat16_rn(load(dout[at + d]))) * load(out[at + d]);
  sum = warp_reduce(sum, Sum{});
  if (lane == 0) row_dots[r] = sum;
}

// dK and dV of 64 keys (kb kTile.. , block x) of key/value head kv of sequence b (block y = b NKV
// + kv). Each warp owns 16 keys and keeps their dK and dV in registers while it walks the query
// heads of the group, and for each the query tiles from the one holding key kb kTile on (earlier
// queries do not see these keys), Q rows at a time: S^T = K Q^T, P^T = exp2(S^T scale_log2 -
// lse2) (zero where the query precedes the key), dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T -
// D), dK += dS^T Q. Last dK scale. The order of the sums is fixed by the shapes.
template <int D, class S>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kv_kernel(S* dqkv, const S* dout, const float* lse, const float* row_dots, const S* qkv,
                             Geometry geo) {
  constexpr int Q = backward_step(D);
  constexpr int kSteps = D / 16, kOutTiles = D / 8, kQueryTiles = Q / 8, kQuerySteps = Q / 16;
  extern __shared__ __align__(16) unsigned char flash_shared[];
  std::uint16_t* ks = reinterpret_cast<std::uint16_t*>(flash_shared);  // [kTile][pitch(D)]
  std::uint16_t* vs = ks + kTile * pitch(D);                          // [kTile][pitch(D)]
  std::uint16_t* qs = vs + kTile * pitch(D);                          // [Q][pitch(D)]
  std::uint16_t* qt = qs + Q * pitch(D);                              // [D][pitch(Q)]: Q transposed
  std::uint16_t* dos = qt + D * pitch(Q);                             // [Q][pitch(D)]
  std::uint16_t* dot = dos + Q * pitch(D);                            // [D][pitch(Q)]: dO transposed
  float* lse2 = reinterpret_cast<float*>(dot + D * pitch(Q));         // [Q] (an even count of bf16 before it)
  float* dots = lse2 + Q;                                             // [Q]

  const int T = geo.T, kb = static_cast<int>(blockIdx.x);  // the first key tiles have the most work
  const int b = static_cast<int>(blockIdx.y) / geo.NKV, kv = static_cast<int>(blockIdx.y) % geo.NKV;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, t = lane % 4;
  const std::size_t W = static_cast<std::size_t>(geo.W), C = static_cast<std::size_t>(geo.C);
  const S* sequence = qkv + static_cast<std::size_t>(b) * T * W;
  const int key0 = kb * kTile;
  const int keys[2] = {key0 + warp * 16 + g, key0 + warp * 16 + g + 8};  // a lane's two keys

  load_rows<D, kTile>(ks, sequence + geo.C + kv * D, W, key0, T);
  load_rows<D, kTile>(vs, sequence + geo.C + (geo.NKV + kv) * D, W, key0, T);

  float dk[kOutTiles][4], dv[kOutTiles][4];
#pragma unroll
  for (int n = 0; n < kOutTiles; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) dk[n][i] = dv[n][i] = 0.0f;

  const int query_tiles = (T + Q - 1) / Q;
  for (int hq = kv * geo.group; hq < (kv + 1) * geo.group; ++hq) {
    const S* q_src = sequence + hq * D;
    const S* do_src = dout + static_cast<std::size_t>(b) * T * C + hq * D;
    const std::size_t stats = (static_cast<std::size_t>(b) * geo.NH + hq) * T;
    for (int qi = key0 / Q; qi < query_tiles; ++qi) {
      const int q0 = qi * Q;
      __syncthreads();  // every warp is done with the previous query tile
      load_rows<D, Q>(qs, q_src, W, q0, T);
      load_rows_transposed<D, Q>(qt, q_src, W, q0, T);
      load_rows<D, Q>(dos, do_src, C, q0, T);
      load_rows_transposed<D, Q>(dot, do_src, C, q0, T);
      load_row_statistics<Q>(lse2, dots, lse + stats, row_dots + stats, q0, T);
      __syncthreads();

      float p[kQueryTiles][4], dp[kQueryTiles][4];
#pragma unroll
      for (int n = 0; n < kQueryTiles; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) p[n][i] = dp[n][i] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kSteps; ++kk) {
        std::uint32_t ka[4], va[4];
        load_a(ka, ks, pitch(D), warp * 16, kk * 16);
        load_a(va, vs, pitch(D), warp * 16, kk * 16);
#pragma unroll
        for (int n = 0; n < kQueryTiles; ++n) {
          std::uint32_t qb_frag[2], dob[2];
          load_b(qb_frag, qs, pitch(D), n * 8, kk * 16);
          mma_bf16_16816(p[n], ka, qb_frag);  // S^T = K Q^T
          load_b(dob, dos, pitch(D), n * 8, kk * 16);
          mma_bf16_16816(dp[n], va, dob);  // dP^T = V dO^T
        }
      }
      // Only tiles whose first query precedes this block's last key hold masked entries. Keys at
      // or past T follow every query below T; their rows are never written.
      const bool diagonal = q0 < key0 + kTile;
#pragma unroll
      for (int n = 0; n < kQueryTiles; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int column = n * 8 + 2 * t + (i & 1), query = q0 + column;
          const float prob =
              diagonal && query < keys[i / 2] ? 0.0f : exp2f(p[n][i] * geo.scale_log2 - lse2[column]);
          p[n][i] = prob;
          dp[n][i] = prob * (dp[n][i] - dots[column]);  // dS^T
        }
#pragma unroll
      for (int kk = 0; kk < kQuerySteps; ++kk) {
        std::uint32_t pa[4], dsa[4];
        a_from_accumulators(pa, p, kk);
        a_from_accumulators(dsa, dp, kk);
#pragma unroll
        for (int n = 0; n < kOutTiles; ++n) {
          std::uint32_t dob[2], qb_frag[2];
          load_b(dob, dot, pitch(Q), n * 8, kk * 16);
          mma_bf16_16816(dv[n], pa, dob);  // dV += P^T dO
          load_b(qb_frag, qt, pitch(Q), n * 8, kk * 16);
          mma_bf16_16816(dk[n], dsa, qb_frag);  // dK += dS^T Q
        }
      }
    }
  }

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = keys[half];
    if (key >= T) continue;
    S* row = dqkv + (static_cast<std::size_t>(b) * T + key) * W;
    S* dk_row = row + geo.C + kv * D;
    S* dv_row = row + geo.C + (geo.NKV + kv) * D;
#pragma unroll
    for (int n = 0; n < kOutTiles; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        dk_row[n * 8 + 2 * t + e] = stored<S>(dk[n][2 * half + e] * geo.scale);
        dv_row[n * 8 + 2 * t + e] = stored<S>(dv[n][2 * half + e]);
      }
  }
}

// dQ of 64 query rows (qb kTile.., qb = gridDim.x - 1 - x: the longest first) of head h of
// sequence b (block y = b NH + h), K keys at a time up to the block's last row: S = Q K^T, P
// from lse (zero above the diagonal), dP = dO V^T, dS = P (dP - D), dQ += dS K. Last dQ scale.
template <int D, class S>
__global__ void __launch_bounds__(kThreads)
    flash_backward_q_kernel(S* dqkv, const S* dout, const float* lse, const float* row_dots, const S* qkv,
                            Geometry geo) {
  constexpr int K = backward_step(D);
  constexpr int kSteps = D / 16, kOutTiles = D / 8, kKeyTiles = K / 8, kKeySteps = K / 16;
  extern __shared__ __align__(16) unsigned char flash_shared[];
  std::uint16_t* qs = reinterpret_cast<std::uint16_t*>(flash_shared);  // [kTile][pitch(D)]
  std::uint16_t* dos = qs + kTile * pitch(D);                         // [kTile][pitch(D)]
  std::uint16_t* ks = dos + kTile * pitch(D);                         // [K][pitch(D)]
  std::uint16_t* kt = ks + K * pitch(D);                              // [D][pitch(K)]: K transposed
  std::uint16_t* vs = kt + D * pitch(K);                              // [K][pitch(D)]
  float* lse2 = reinterpret_cast<float*>(vs + K * pitch(D));          // [kTile]
  float* dots = lse2 + kTile;                                         // [kTile]

  const int T = geo.T, qb = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
  const int b = static_cast<int>(blockIdx.y) / geo.NH, h = static_cast<int>(blockIdx.y) % geo.NH, kv = h / geo.group;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, t = lane % 4;
  const std::size_t W = static_cast<std::size_t>(geo.W), C = static_cast<std::size_t>(geo.C);
  const S* sequence = qkv + static_cast<std::size_t>(b) * T * W;
  const S* k_src = sequence + geo.C + kv * D;
  const S* v_src = sequence + geo.C + (geo.NKV + kv) * D;
  const int row0 = qb * kTile;
  const int rows[2] = {row0 + warp * 16 + g, row0 + warp * 16 + g + 8};
  const int row_at[2] = {warp * 16 + g, warp * 16 + g + 8};  // in the block's statistics

  load_rows<D, kTile>(qs, sequence + h * D, W, row0, T);
  load_rows<D, kTile>(dos, dout + static_cast<std::size_t>(b) * T * C + h * D, C, row0, T);
  const std::size_t stats = (static_cast<std::size_t>(b) * geo.NH + h) * T;
  load_row_statistics<kTile>(lse2, dots, lse + stats, row_dots + stats, row0, T);

  float dq[kOutTiles][4];
#pragma unroll
  for (int n = 0; n < kOutTiles; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

  const int last_key = (row0 + kTile < T ? row0 + kTile : T) - 1;
  for (int k0 = 0; k0 <= last_key; k0 += K) {
    __syncthreads();  // every warp is done with the previous key tile
    load_rows<D, K>(ks, k_src, W, k0, T);
    load_rows_transposed<D, K>(kt, k_src, W, k0, T);
    load_rows<D, K>(vs, v_src, W, k0, T);
    __syncthreads();

    float p[kKeyTiles][4], dp[kKeyTiles][4];
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) p[n][i] = dp[n][i] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      std::uint32_t qa[4], doa[4];
      load_a(qa, qs, pitch(D), warp * 16, kk * 16);
      load_a(doa, dos, pitch(D), warp * 16, kk * 16);
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
        std::uint32_t kb_frag[2], vb[2];
        load_b(kb_frag, ks, pitch(D), n * 8, kk * 16);
        mma_bf16_16816(p[n], qa, kb_frag);  // S = Q K^T
        load_b(vb, vs, pitch(D), n * 8, kk * 16);
        mma_bf16_16816(dp[n], doa, vb);  // dP = dO V^T
      }
    }
    // Tiles whose last key follows the block's first row hold masked entries; keys at or past T
    // follow every row below T.
    const bool diagonal = k0 + K > row0;
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + n * 8 + 2 * t + (i & 1), r = row_at[i / 2];
        const float prob = diagonal && key > rows[i / 2] ? 0.0f : exp2f(p[n][i] * geo.scale_log2 - lse2[r]);
        dp[n][i] = prob * (dp[n][i] - dots[r]);  // dS
      }
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) {
      std::uint32_t dsa[4];
      a_from_accumulators(dsa, dp, kk);
#pragma unroll
      for (int n = 0; n < kOutTiles; ++n) {
        std::uint32_t kb_frag[2];
        load_b(kb_frag, kt, pitch(K), n * 8, kk * 16);
        mma_bf16_16816(dq[n], dsa, kb_frag);  // dQ += dS K
      }
    }
  }

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (rows[half] >= T) continue;
    S* dq_row = dqkv + (static_cast<std::size_t>(b) * T + rows[half]) * W + h * D;
#pragma unroll
    for (int n = 0; n < kOutTiles; ++n) {
      dq_row[n * 8 + 2 * t] = stored<S>(dq[n][2 * half] * geo.scale);
      dq_row[n * 8 + 2 * t + 1] = stored<S>(dq[n][2 * half + 1] * geo.scale);
    }
  }
}

// ---- launches ----

Geometry geometry_of(const FlashShape& s) {
  const int hs = s.C / s.NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  return {s.T, s.C, s.NH, s.NKV, s.C + 2 * s.NKV * hs, s.NH / s.NKV, scale, scale * kLog2e};
}

// Refuses what the kernels cannot run, saying why.
void require_runnable(const FlashShape& s) {
  ST_REQUIRE(s.NH > 0 && s.NKV > 0 && s.NH % s.NKV == 0 && s.C % s.NH == 0, "flash attention: bad head counts");
  const int hs = s.C / s.NH;
  ST_REQUIRE(flash_attention_head_dim(hs), "flash attention: head width " + std::to_string(hs) +
                                               " has no kernel (32, 64 and 128 do; parallel.attention = \"exact\" "
                                               "runs any width)");
  ST_REQUIRE(static_cast<long long>(s.B) * s.NH <= 65535,
             "flash attention: " + std::to_string(s.B) + " sequences x " + std::to_string(s.NH) +
                 " heads exceed the grid's 65535 blocks in y; use smaller micro-batches");
  int device = 0, major = 0;
  ST_CHECK_CUDA(cudaGetDevice(&device));
  ST_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  ST_REQUIRE(major >= 8, "flash attention needs bf16 tensor cores (compute capability 8.0 or later); this device has " +
                             std::to_string(major) + ".x: set parallel.attention = \"exact\"");
}

// Above 48 KiB a kernel must ask for its dynamic shared memory (the device allows up to 163 KiB
// on an A100, 227 KiB on an H100; these kernels take at most 72 KiB).
template <class Kernel>
void allow_shared(Kernel kernel, std::size_t bytes) {
  if (bytes > 48 * 1024)
    ST_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

unsigned tiles_of(int T, int rows) { return static_cast<unsigned>((T + rows - 1) / rows); }

template <int D, class S>
void forward_for(S* out, float* lse, const S* qkv, const FlashShape& s, cudaStream_t stream) {
  constexpr std::size_t bytes = forward_shared_bytes<D>();
  allow_shared(flash_forward_kernel<D, S>, bytes);
  const dim3 grid(tiles_of(s.T, kTile), static_cast<unsigned>(s.B * s.NH));
  flash_forward_kernel<D, S><<<grid, kThreads, bytes, stream>>>(out, lse, qkv, geometry_of(s));
  ST_CHECK_LAUNCH();
}

template <int D, class S>
void backward_for(S* dqkv, const S* dout, const float* lse, const float* row_dots, const S* qkv, const FlashShape& s,
                  cudaStream_t stream) {
  const Geometry geo = geometry_of(s);
  constexpr std::size_t kv_bytes = backward_kv_shared_bytes<D>(), q_bytes = backward_q_shared_bytes<D>();
  allow_shared(flash_backward_kv_kernel<D, S>, kv_bytes);
  allow_shared(flash_backward_q_kernel<D, S>, q_bytes);
  const dim3 kv_grid(tiles_of(s.T, kTile), static_cast<unsigned>(s.B * s.NKV));
  flash_backward_kv_kernel<D, S><<<kv_grid, kThreads, kv_bytes, stream>>>(dqkv, dout, lse, row_dots, qkv, geo);
  ST_CHECK_LAUNCH();
  const dim3 q_grid(tiles_of(s.T, kTile), static_cast<unsigned>(s.B * s.NH));
  flash_backward_q_kernel<D, S><<<q_grid, kThreads, q_bytes, stream>>>(dqkv, dout, lse, row_dots, qkv, geo);
  ST_CHECK_LAUNCH();
}

template <class S>
void forward_any(S* out, float* lse, const S* qkv, const FlashShape& s, cudaStream_t stream) {
  if (s.B == 0 || s.T == 0) return;
  require_runnable(s);
  switch (s.C / s.NH) {
    case 32: return forward_for<32>(out, lse, qkv, s, stream);
    case 64: return forward_for<64>(out, lse, qkv, s, stream);
    case 128: return forward_for<128>(out, lse, qkv, s, stream);
    default: break;  // refused above
  }
}

template <class S>
void backward_any(S* dqkv, float* row_dots, const S* dout, const S* out, const float* lse, const S* qkv,
                  const FlashShape& s, cudaStream_t stream) {
  if (s.B == 0 || s.T == 0) return;
  require_runnable(s);
  const int hs = s.C / s.NH;
  const std::size_t rows = flash_rows(static_cast<std::size_t>(s.B), static_cast<std::size_t>(s.T), s.NH);
  const int rows_per_block = kBlock / kWarp;
  flash_row_dots_kernel<<<static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block), kBlock, 0, stream>>>(
      row_dots, dout, out, s.B, s.T, s.C, s.NH, hs);
  ST_CHECK_LAUNCH();
  switch (hs) {
    case 32: return backward_for<32>(dqkv, dout, lse, row_dots, qkv, s, stream);
    case 64: return backward_for<64>(dqkv, dout, lse, row_dots, qkv, s, stream);
    case 128: return backward_for<128>(dqkv, dout, lse, row_dots, qkv, s, stream);
    default: break;
  }
}

}  // namespace

void flash_attention_forward(float* out, float* lse, const float* qkv, const FlashShape& s, cudaStream_t stream) {
  forward_any(out, lse, qkv, s, stream);
}
void flash_attention_forward(Bf16* out, float* lse, const Bf16* qkv, const FlashShape& s, cudaStream_t stream) {
  forward_any(out, lse, qkv, s, stream);
}

void flash_attention_backward(float* dqkv, float* row_dots, const float* dout, const float* out, const float* lse,
                              const float* qkv, const FlashShape& s, cudaStream_t stream) {
  backward_any(dqkv, row_dots, dout, out, lse, qkv, s, stream);
}
void flash_attention_backward(Bf16* dqkv, float* row_dots, const Bf16* dout, const Bf16* out, const float* lse,
                              const Bf16* qkv, const FlashShape& s, cudaStream_t stream) {
  backward_any(dqkv, row_dots, dout, out, lse, qkv, s, stream);
}

}  // namespace st
