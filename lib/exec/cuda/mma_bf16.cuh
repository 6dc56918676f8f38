#pragma once
// bf16 matrix products on the tensor cores, one warp at a time: PTX mma.sync m16n8k16 with fp32
// accumulation (sm_80 and later), the fragment layouts its operands come in, and loads of those
// fragments from tiles in shared memory. For flash attention (flash_attention.cu).
//
// In a warp, lane = 4 g + t (g = lane / 4 in 0..7, t = lane % 4). For D (16 x 8, fp32) +=
// A (16 x 16, bf16) B (16 x 8, bf16), each lane holds (PTX ISA, "Matrix Fragments for
// mma.m16n8k16 with floating point type"):
//   A: a[0] = A[g][2t, 2t+1]    a[1] = A[g+8][2t, 2t+1]    a[2] = A[g][2t+8, 2t+9]    a[3] = A[g+8][2t+8, 2t+9]
//   B: b[0] = B[2t, 2t+1][g]    b[1] = B[2t+8, 2t+9][g]
//   D: d[0], d[1] = D[g][2t], D[g][2t+1]    d[2], d[3] = D[g+8][2t], D[g+8][2t+1]
// two bf16 to a 32-bit register, the lower column (row, for B) in the lower half. So two
// accumulator tiles side by side (columns 0-7 and 8-15), rounded to bf16, are the A operand of
// 16 columns (a_from_accumulators): scores become probabilities, and probabilities the next
// product's operand, without passing through shared memory.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace st::cuda_detail {

// d += a b.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  // No tensor-core bf16 before sm_80: the host refuses flash attention there (flash_attention.cu).
  (void)d;
  (void)a;
  (void)b;
#if defined(__CUDA_ARCH__)
  __trap();
#endif
#endif
}

// Two floats rounded to bf16 (to nearest even, as st::to_bf16 rounds finite values), `low` in the
// lower half.
__device__ __forceinline__ std::uint32_t pack_bf16(float low, float high) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
  return *reinterpret_cast<const std::uint32_t*>(&pair);
}

// Shared-memory tiles of bf16, row-major with `pitch` elements per row (even, so every pair of
// columns starting at an even column is one aligned 32-bit word).
__device__ __forceinline__ std::uint32_t load_pair(const std::uint16_t* at) { return *reinterpret_cast<const std::uint32_t*>(at); }
__device__ __forceinline__ void store_pair(std::uint16_t* at, std::uint32_t pair) { *reinterpret_cast<std::uint32_t*>(at) = pair; }

// A = tile rows r0..r0+15, columns k0..k0+15.
__device__ __forceinline__ void load_a(std::uint32_t (&a)[4], const std::uint16_t* tile, int pitch, int r0, int k0) {
  const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const std::uint16_t* at = tile + (r0 + g) * pitch + k0 + 2 * t;
  a[0] = load_pair(at);
  a[1] = load_pair(at + 8 * pitch);
  a[2] = load_pair(at + 8);
  a[3] = load_pair(at + 8 * pitch + 8);
}

// B[k][n] = tile[n0 + n][k0 + k]: B's columns are rows of the tile, so B = X^T for a row-major X
// in the tile (the keys of S = Q K^T), or B = Y for a Y stored transposed.
__device__ __forceinline__ void load_b(std::uint32_t (&b)[2], const std::uint16_t* tile, int pitch, int n0, int k0) {
  const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const std::uint16_t* at = tile + (n0 + g) * pitch + k0 + 2 * t;
  b[0] = load_pair(at);
  b[1] = load_pair(at + 8);
}

// The A operand of columns 16 kk..16 kk+15 from accumulator tiles (8 columns each) of one warp's
// 16 rows, rounded to bf16.
template <int Tiles>
__device__ __forceinline__ void a_from_accumulators(std::uint32_t (&a)[4], const float (&acc)[Tiles][4], int kk) {
  a[0] = pack_bf16(acc[2 * kk][0], acc[2 * kk][1]);
  a[1] = pack_bf16(acc[2 * kk][2], acc[2 * kk][3]);
  a[2] = pack_bf16(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
  a[3] = pack_bf16(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
}

}  // namespace st::cuda_detail
