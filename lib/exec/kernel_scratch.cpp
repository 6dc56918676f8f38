#include "exec/kernel_scratch.hpp"

#include <algorithm>

namespace st {

int matmul_rows_per_piece(std::size_t piece_elements, int cols, int rows) {
  const std::size_t fit = piece_elements / static_cast<std::size_t>(std::max(cols, 1));
  return static_cast<int>(std::clamp<std::size_t>(fit, 1, static_cast<std::size_t>(std::max(rows, 1))));
}

int matmul_backward_rows_per_piece(std::size_t piece_elements, int C, int OC, int rows, bool chunked) {
  int n = matmul_rows_per_piece(piece_elements, std::max(C, OC), rows);
  if (chunked && n < rows) n = std::max(kRowsPerChunk, n / kRowsPerChunk * kRowsPerChunk);
  return n;
}

std::uint64_t KernelScratch::reserved() const {
  return matmul_weight + matmul_rows_in + matmul_rows_out + lt_workspace + partials + sort_keys + sort_values +
         sort_temp + row_losses;
}

std::uint64_t KernelScratch::total() const {
  return reserved() + kCublasWorkspaceBytes + (std::uint64_t{kSumSquaresBlocks} + 1) * sizeof(double);
}

KernelScratch kernel_scratch(const KernelWorkload& w, const KernelScratchChoices& choices) {
  KernelScratch s;
  const auto rows = static_cast<int>(w.rows);
  const auto chunks = [](std::int64_t n) { return static_cast<std::uint64_t>((n + kRowsPerChunk - 1) / kRowsPerChunk); };
  constexpr std::uint64_t kBf16 = 2, kFloat = 4;
  for (const LinearProduct& p : w.products) {
    const auto C = static_cast<int>(p.in), OC = static_cast<int>(p.out);
    if (rows == 0 || C == 0 || OC == 0) continue;
    // A biased product's gradient sums dout's columns per chunk of rows (fp32 and bf16 alike).
    if (p.bias) s.partials = std::max(s.partials, chunks(rows) * static_cast<std::uint64_t>(OC) * kFloat);
    if (p.bias && choices.bf16_storage) s.lt_workspace = kLtWorkspaceBytes;
    if (!choices.bf16_matmuls) continue;
    // Bf16Matmuls: the weight whole; the forward's input rows in pieces; the backward's pieces of
    // dout and of the input, or, for the fused classifier's head, the input's rows alone.
    s.matmul_weight = std::max(s.matmul_weight, static_cast<std::uint64_t>(OC) * static_cast<std::uint64_t>(C) * kBf16);
    const int forward_rows = matmul_rows_per_piece(kMatmulPieceElements, C, rows);
    std::uint64_t in_rows = static_cast<std::uint64_t>(forward_rows) * static_cast<std::uint64_t>(C);
    if (!(p.lm_head && choices.fused_classifier)) {
      // Whole chunks where the bias's sums ride the pass; a rank that has no bias gradient to take
      // (a row-parallel layer's) cuts without them: the larger of the two.
      const int n = std::min(std::max(matmul_backward_rows_per_piece(kMatmulPieceElements, C, OC, rows, p.bias),
                                      matmul_backward_rows_per_piece(kMatmulPieceElements, C, OC, rows, false)),
                             rows);
      in_rows = std::max(in_rows, static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(C));
      s.matmul_rows_out = std::max(s.matmul_rows_out, static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(OC) * kBf16);
    }
    s.matmul_rows_in = std::max(s.matmul_rows_in, in_rows * kBf16);
    // A bias is added by cuBLASLt's epilogue (and GELU's, where fused, rides the same products).
    if (p.bias) s.lt_workspace = kLtWorkspaceBytes;
  }
  // A norm's backward: a chunk sum per parameter vector.
  if (w.norm_rows > 0)
    s.partials = std::max(s.partials, chunks(w.norm_rows) * static_cast<std::uint64_t>(w.norm_vectors) *
                                          static_cast<std::uint64_t>(w.norm_width) * kFloat);
  if (w.embeds && rows > 0) {
    s.sort_keys = static_cast<std::uint64_t>(rows) * sizeof(int);
    s.sort_values = 2 * static_cast<std::uint64_t>(rows) * sizeof(int);  // positions in, sorted positions out
    s.sort_temp = std::max<std::uint64_t>(choices.sort_temp_bytes, 1);
  }
  if (w.heads) s.row_losses = static_cast<std::uint64_t>(rows) * sizeof(double);
  return s;
}

HostBf16Slots host_bf16_slots(const KernelWorkload& w) {
  // Each call widens its outputs (slot 0), then its inputs by position: rows of an activation (a
  // product's input or output, qkv, the MLP's width, d_model), or a weight: a block's product's in
  // slot 2 (forward) or 3 (backward), the head's in slot 1 (its logits and its backward). The
  // unfused cross-entropy's logits (rows x the vocabulary) are not counted: bf16 storage fuses the
  // classifier, so the models never call it.
  std::uint64_t widest = static_cast<std::uint64_t>(w.norm_width), weight = 0, head = 0;
  for (const LinearProduct& p : w.products) {
    const auto in = static_cast<std::uint64_t>(p.in), out = static_cast<std::uint64_t>(p.out);
    if (p.lm_head) {
      head = std::max(head, in * out);
      widest = std::max(widest, in);
      continue;
    }
    widest = std::max({widest, in, out});
    weight = std::max(weight, in * out);
  }
  const std::uint64_t rows = static_cast<std::uint64_t>(w.rows) * widest;
  HostBf16Slots s;
  s.elements[0] = rows;
  s.elements[1] = std::max(rows, head);
  s.elements[2] = std::max(rows, weight);
  s.elements[3] = weight;
  return s;
}

std::uint64_t estimated_sort_temp_bytes(std::int64_t rows) {
  // The keys' and values' alternate buffers, and a few KiB of digit counts.
  return static_cast<std::uint64_t>(rows) * 2 * sizeof(int) + (std::uint64_t{16} << 10);
}

}  // namespace st
