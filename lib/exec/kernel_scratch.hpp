#pragma once
// The device memory a GPU backend's kernels hold beside the accounted buffers (parameters,
// gradients, optimizer state, activations): cuBLAS's and cuBLASLt's workspaces, the bf16 copies
// of matmul operands, the chunk sums of parameter gradients, the encoder's sort of the tokens,
// the cross-entropy's row losses. Sized here, on the host, from what a model asks of its kernels
// at most (KernelWorkload), so that the planner and `check` count it for a GPU rank
// (plan/planner.cpp) and the CUDA backend reserves it before the first step
// (LayerKernels::reserve_scratch), after which nothing grows inside a step. The CUDA code takes
// its sizes from the constants and piece functions below, so the two cannot drift apart.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace st {

// cuBLAS's workspace (cublasSetWorkspace), what cuBLAS advises for Hopper.
inline constexpr std::uint64_t kCublasWorkspaceBytes = std::uint64_t{32} << 20;
// cuBLASLt's workspace for the products with an epilogue (exec/cuda/lt_matmul.hpp).
inline constexpr std::uint64_t kLtWorkspaceBytes = std::uint64_t{32} << 20;
// add_sum_squares' first pass runs at most this many blocks (its scratch holds as many doubles + 1).
inline constexpr unsigned kSumSquaresBlocks = 1024;
// Parameter gradients sum over rows in chunks of this many rows: a partial sum per chunk and
// column, then the chunks in order. Fixed, so the order of addition depends only on the shape.
inline constexpr int kRowsPerChunk = 32;
// The bf16 matmuls round activation rows into pieces of at most this many elements (64 Mi, 128
// MiB of bf16): the language-model head's gradient (a few thousand rows of 50304) still makes
// products wide enough to fill an H200 (exec/cuda/bf16_matmuls.hpp).
inline constexpr std::size_t kMatmulPieceElements = std::size_t{1} << 26;

// Rows of `cols` elements in one piece of at most `piece_elements`: at least one, at most `rows`.
int matmul_rows_per_piece(std::size_t piece_elements, int cols, int rows);
// A backward piece holds rows of dout (OC wide) and of the input (C wide); with the bias's column
// sums (`chunked`), whole chunks of kRowsPerChunk rows, so each chunk's sum is one thread's.
int matmul_backward_rows_per_piece(std::size_t piece_elements, int C, int OC, int rows, bool chunked);

// One linear layer's product as a rank runs it: rows of `in` values to rows of `out` (its share
// of a split layer). `lm_head`: the language-model head, which the fused classifier takes from
// bf16 logits (no dout to round).
struct LinearProduct {
  std::int64_t in = 0, out = 0;
  bool bias = false;
  bool lm_head = false;
};

// What a model (or a pipeline stage's part of it) asks of its kernels at most in one pass.
struct KernelWorkload {
  std::vector<LinearProduct> products;  // each distinct product of its blocks and head
  std::int64_t rows = 0;        // B x T: the rows every linear layer sees
  std::int64_t norm_rows = 0;   // the rows the norms see (this rank's share under sequence parallelism)
  std::int64_t norm_width = 0;  // d_model
  int norm_vectors = 2;         // parameter vectors a norm has: LayerNorm 2 (weight, bias), RMSNorm 1
  bool embeds = false;          // the encoder's backward sorts the tokens
  bool heads = false;           // the cross-entropy keeps a loss per row
};

// The backend's choices that decide which scratch its kernels use.
struct KernelScratchChoices {
  bool bf16_matmuls = false;      // operands rounded to bf16 in scratch (parallel.precision = "bf16")
  bool fused_classifier = false;  // the LM head from bf16 logits (LayerKernels::fused_classifier)
  // bf16 storage (CudaBf16LayerKernels): operands multiplied as stored, so none in scratch; a
  // biased product adds its bias in cuBLASLt's epilogue (its workspace).
  bool bf16_storage = false;
  // The token sort's own temporary storage: cub's, asked of it on the device; the planner's
  // estimate where no device is at hand (estimated_sort_temp_bytes).
  std::uint64_t sort_temp_bytes = 0;
};

// Bytes by what holds them; the CUDA backend's DeviceScratch blocks of the same names.
struct KernelScratch {
  std::uint64_t matmul_weight = 0;    // one weight rounded to bf16 (the widest product's)
  std::uint64_t matmul_rows_in = 0;   // a piece of input rows in bf16
  std::uint64_t matmul_rows_out = 0;  // a piece of dout rows in bf16
  std::uint64_t lt_workspace = 0;     // cuBLASLt's, where a product has a bias (an epilogue)
  std::uint64_t partials = 0;         // chunk sums of the parameter gradients (norms, biases)
  std::uint64_t sort_keys = 0, sort_values = 0, sort_temp = 0;
  std::uint64_t row_losses = 0;
  // The grow-only blocks above: what the backend reserves.
  std::uint64_t reserved() const;
  // With cuBLAS's workspace and the gradient norm's partial sums, which the backend holds from its
  // start: all the device memory its kernels hold beside the accounted buffers.
  std::uint64_t total() const;
};

KernelScratch kernel_scratch(const KernelWorkload& workload, const KernelScratchChoices& choices);

// The host's bf16-storage reference (exec/host_bf16_kernels.hpp) widens each call's operands into
// four fp32 slots it keeps, by argument position: at most, for `workload`, rows of the widest
// activation in each, or a whole weight (the head's in one of them: the fused classifier's product
// and its backward read it widened). Elements of each slot.
struct HostBf16Slots {
  std::uint64_t elements[4] = {0, 0, 0, 0};
  std::uint64_t bytes() const { return 4 * (elements[0] + elements[1] + elements[2] + elements[3]); }
};
HostBf16Slots host_bf16_slots(const KernelWorkload& workload);

// cub's radix sort of `rows` int keys with int values, estimated (its own temporary storage: the
// sort's alternate buffers and its digit counts): within a few KiB of what it asks for.
std::uint64_t estimated_sort_temp_bytes(std::int64_t rows);

}  // namespace st
