#pragma once
// Flash attention's contract on the host: the reference the CUDA kernels
// (exec/cuda/flash_attention.cu) are tested against. Not used in training: the host trains with
// kernels::attention_forward/backward (exec/host_kernels.hpp), whose numbers stay as they are.
//
// Causal attention over qkv[B, T, W] laid out as attention_forward's (q: NH heads of hs = C / NH,
// then k and v: NKV heads each, W = C + 2 NKV hs; query head h attends with key/value head
// h / (NH / NKV)). What forward keeps for backward is not the T x T probabilities but, per row,
// the log-sum-exp of its scaled scores, lse[b, h, t] = log sum_{j <= t} e^(s_tj),
// s_tj = <q_t, k_j> / sqrt(hs) ([B, NH, T], row t of head h of sequence b at (b NH + h) T + t).
// Backward recomputes each probability as e^(s_tj - lse_t) and needs the forward's output for
// D_t = <dO_t, O_t> (softmax's backward: dS_tj = P_tj (dP_tj - D_t)).
//
// Plain loops, one row (or one key) at a time, the exponentials from the library: written to be
// read against the algorithm, not to be fast.
namespace st::kernels {

// out[B, T, C] and lse[B, NH, T].
template <class R>
void flash_attention_forward(R* out, R* lse, const R* qkv, int B, int T, int C, int NH, int NKV);

// dqkv[B, T, W] (overwritten, qkv's layout): the gradient of q, and of each key/value head summed
// over the query heads of its group (what the device writes; the host's attention_backward
// leaves one per query head for gqa_fold). From the output and lse of flash_attention_forward.
template <class R>
void flash_attention_backward(R* dqkv, const R* dout, const R* out, const R* lse, const R* qkv, int B, int T, int C,
                              int NH, int NKV);

}  // namespace st::kernels
