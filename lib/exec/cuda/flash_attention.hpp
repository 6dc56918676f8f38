#pragma once
// Causal flash attention on one CUDA device (FlashAttention-2's algorithm, Dao 2023), for
// training with bf16 matmuls: the T x T scores and probabilities never leave the chip. The
// contract is the host reference's (exec/flash_reference.hpp), which the GPU tests check it
// against: forward writes the output and each row's log-sum-exp; backward recomputes the
// probabilities from q, k and the log-sum-exp, and writes the gradient of q, k and v in qkv's
// layout (each key/value head's summed over its group of query heads, in a fixed order).
//
// q, k and v are read as they are (qkv[B, T, W] as the layer kernels lay it out: fp32, rounded to
// bf16 on their way into shared memory, or bf16 storage, whose values they are already);
// products run on the tensor cores with fp32 accumulation; the softmax and its statistics are
// fp32, and every output is fp32 or, in bf16 storage, the fp32 result rounded once. Grouped-query attention
// reads each key/value head where it is, for every query head of its group (no copies).
// Deterministic: no atomics; every sum runs in an order fixed by the shapes.
//
// Requires: an sm_80 or later device; head width C / NH one of flash_attention_head_dim's
// (exec/attention_probs.hpp); B NH (forward, dQ) and B NKV (dK, dV) at most 65535 (a grid
// dimension). All calls are queued on `stream`.
#include <cuda_runtime.h>

#include "core/bf16.hpp"

namespace st {

struct FlashShape {
  int B, T, C, NH, NKV;  // sequences, rows per sequence, q's width, query heads, key/value heads
};

// out[B, T, C], lse[B, NH, T].
void flash_attention_forward(float* out, float* lse, const float* qkv, const FlashShape& shape, cudaStream_t stream);
void flash_attention_forward(Bf16* out, float* lse, const Bf16* qkv, const FlashShape& shape, cudaStream_t stream);

// dqkv[B, T, W] (overwritten) from dout[B, T, C] and the forward's out and lse; row_dots[B, NH, T]
// is scratch (each row's <dO, O>).
void flash_attention_backward(float* dqkv, float* row_dots, const float* dout, const float* out, const float* lse,
                              const float* qkv, const FlashShape& shape, cudaStream_t stream);
void flash_attention_backward(Bf16* dqkv, float* row_dots, const Bf16* dout, const Bf16* out, const float* lse,
                              const Bf16* qkv, const FlashShape& shape, cudaStream_t stream);

}  // namespace st
