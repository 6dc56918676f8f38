#pragma once
// The host kernels Llama adds to GPT-2's (exec/host_kernels.hpp): RMSNorm, rotary position
// embeddings and the SwiGLU gate. Same conventions: N = rows (batch x time), C = channels,
// parameter gradients accumulate (+=); written once for float (training) and double (gradient
// checks).
#include <cstddef>
#include <vector>

namespace st::kernels {

// out = in / rms(in) * weight, rms = sqrt(mean(in^2) + eps) per row; keeps 1/rms for backward.
template <class R>
void rmsnorm_forward(R* out, R* rstd, const R* in, const R* weight, int N, int C, double eps);
// din += ..., dweight += ...
template <class R>
void rmsnorm_backward(R* din, R* dweight, const R* dout, const R* in, const R* weight, const R* rstd, int N, int C);

// The rotary embedding's angles: cos and sin of position x inverse_frequencies[i], i < hs/2, for
// positions [0, positions), row-major [positions, hs/2]; computed in double.
template <class R>
struct RopeTable {
  std::vector<R> cos, sin;
  int half = 0;  // hs / 2
};
template <class R>
RopeTable<R> rope_table(int positions, const std::vector<double>& inverse_frequencies);
// The unscaled inverse frequencies theta^(-2i/hs), i < hs/2 (model/rope.hpp rescales them).
std::vector<double> rope_frequencies(int hs, double theta);
// rope_table(positions, rope_frequencies(hs, theta)).
template <class R>
RopeTable<R> rope_table(int positions, int hs, double theta);

// Rotates, in place, the first `heads` heads (hs wide) of each row of x[B*T, W] by its position
// (first + t for row t of each sequence), in Hugging Face's rotate-half layout: channel i pairs
// with i + hs/2. Llama's fused q, k, v rows hold q's and k's heads first, so heads = NH + NKV
// rotates both. inverse: the transposed rotation (backward: the gradient of the unrotated
// input from that of the rotated one).
// cosines and sines: the table's two arrays (or copies of them).
template <class R>
void rope(R* x, const R* cosines, const R* sines, int B, int T, int first, int W, int heads, int hs, bool inverse);
template <class R>
void rope(R* x, const RopeTable<R>& table, int B, int T, int first, int W, int heads, int hs, bool inverse) {
  rope(x, table.cos.data(), table.sin.data(), B, T, first, W, heads, hs, inverse);
}

// SwiGLU: out[N, F] = silu(gate) * up, gate and up the two halves of in[N, 2F] (gate first).
template <class R>
void swiglu_forward(R* out, const R* in, int N, int F);
// din[N, 2F] = the gradient of gate and up (overwritten).
template <class R>
void swiglu_backward(R* din, const R* in, const R* dout, int N, int F);

// The float kernels above run rows compiled twice: for the baseline x86-64 and, where the CPU
// has them, for AVX2 with FMA (twice the vector width; the default build targets the
// baseline). widest picks the best the CPU has (the default); baseline forces the other, so
// tests cover both. Not to be switched while a kernel runs.
enum class FloatRowSet { widest, baseline };
void use_float_rows(FloatRowSet set);

}  // namespace st::kernels
