// The GPU kernels' scratch as kernel_scratch sizes it from a model's workload (what the CUDA
// backend reserves before the first step, and what the planner adds to a GPU rank's memory),
// against sizes worked out here by hand from the kernels' rules: GPT-2 124M's products at 16
// sequences of 1024, unfused and with the fused classifier, a tensor split, pipeline parts, fp32.
// The GPU tests (GpuModel.*) check that the reservation is what the kernels then use.
#include <gtest/gtest.h>

#include <cstdint>

#include "exec/kernel_scratch.hpp"
#include "model/activations.hpp"
#include "model/layout.hpp"

namespace st {
namespace {

ModelShape gpt2_124m() {
  ModelShape s;
  s.n_layer = 12;
  s.d_model = 768;
  s.n_head = 12;
  s.seq_len = 1024;
  s.vocab_size = 50257;
  s.padded_vocab = 50304;
  return s;
}

constexpr std::uint64_t kBf16 = 2, kFloat = 4, MiB = std::uint64_t{1} << 20;

TEST(KernelScratch, PiecesOfRowsFollowTheMatmulsRules) {
  // 64 Mi elements a piece: all 16384 rows of 768 or 3072 values; 1334 rows of the LM head's 50304.
  EXPECT_EQ(matmul_rows_per_piece(kMatmulPieceElements, 768, 16384), 16384);
  EXPECT_EQ(matmul_rows_per_piece(kMatmulPieceElements, 3072, 16384), 16384);
  EXPECT_EQ(matmul_rows_per_piece(kMatmulPieceElements, 50304, 16384), 1334);
  EXPECT_EQ(matmul_rows_per_piece(kMatmulPieceElements, 50304, 100), 100);
  EXPECT_EQ(matmul_rows_per_piece(4, 50304, 100), 1) << "at least a row";
  // With a bias's chunk sums, whole chunks of 32 rows: 1334 rows become 1312.
  EXPECT_EQ(matmul_backward_rows_per_piece(kMatmulPieceElements, 768, 50304, 16384, false), 1334);
  EXPECT_EQ(matmul_backward_rows_per_piece(kMatmulPieceElements, 768, 50304, 16384, true), 1312);
  EXPECT_EQ(matmul_backward_rows_per_piece(4, 768, 50304, 16384, true), kRowsPerChunk);
}

TEST(KernelScratch, Gpt2At16SequencesInBf16) {
  const ModelShape shape = gpt2_124m();
  const KernelWorkload w = kernel_workload(shape, 16, 1, false, ModelPart{});
  ASSERT_EQ(w.products.size(), 5u) << "qkv, proj, fc, mlp proj, the LM head";
  EXPECT_EQ(w.rows, 16384);
  EXPECT_EQ(w.norm_rows, 16384);
  EXPECT_EQ(w.norm_vectors, 2);
  EXPECT_TRUE(w.embeds && w.heads);
  const std::uint64_t N = 16384, C = 768, V = 50304;

  KernelScratchChoices unfused;
  unfused.bf16_matmuls = true;
  unfused.sort_temp_bytes = 12345;
  const KernelScratch s = kernel_scratch(w, unfused);
  EXPECT_EQ(s.matmul_weight, V * C * kBf16) << "the LM head's weight, the largest";
  EXPECT_EQ(s.matmul_rows_in, N * 4 * C * kBf16) << "the MLP projection's input, whole";
  EXPECT_EQ(s.matmul_rows_out, 1334 * V * kBf16) << "the LM head's dlogits, 1334 rows a piece";
  EXPECT_EQ(s.lt_workspace, 32 * MiB);
  EXPECT_EQ(s.partials, (N / 32) * 4 * C * kFloat) << "the MLP input's bias, wider than a norm's two vectors";
  EXPECT_EQ(s.sort_keys, N * 4);
  EXPECT_EQ(s.sort_values, 2 * N * 4);
  EXPECT_EQ(s.sort_temp, 12345u);
  EXPECT_EQ(s.row_losses, N * 8);
  EXPECT_EQ(s.reserved(), s.matmul_weight + s.matmul_rows_in + s.matmul_rows_out + s.lt_workspace + s.partials +
                              s.sort_keys + s.sort_values + s.sort_temp + s.row_losses);
  EXPECT_EQ(s.total(), s.reserved() + 32 * MiB + (kSumSquaresBlocks + 1) * 8) << "cuBLAS's workspace and the norm's sums";

  // The fused classifier reads bf16 dlogits as they are: no dout piece for the head, so the
  // widest dout piece is the MLP input layer's.
  KernelScratchChoices fused = unfused;
  fused.fused_classifier = true;
  const KernelScratch f = kernel_scratch(w, fused);
  EXPECT_EQ(f.matmul_rows_out, N * 4 * C * kBf16);
  EXPECT_EQ(f.matmul_weight, s.matmul_weight);
  EXPECT_EQ(f.matmul_rows_in, s.matmul_rows_in);
  EXPECT_LT(f.total(), s.total());

  // bf16 storage multiplies the operands as stored (no pieces, no weight copy); its biased
  // products add the bias in cuBLASLt's epilogue, so GPT-2 holds cuBLASLt's workspace.
  KernelScratchChoices storage;
  storage.bf16_storage = true;
  storage.fused_classifier = true;
  const KernelScratch b = kernel_scratch(w, storage);
  EXPECT_EQ(b.matmul_weight + b.matmul_rows_in + b.matmul_rows_out, 0u);
  EXPECT_EQ(b.lt_workspace, 32 * MiB);
  EXPECT_EQ(b.partials, s.partials);
  ModelShape llama = shape;
  llama.arch = Arch::llama;
  llama.n_kv_head = 12;
  llama.ffn_dim = 2048;
  const KernelScratch no_bias = kernel_scratch(kernel_workload(llama, 16, 1, false, ModelPart{}), storage);
  EXPECT_EQ(no_bias.lt_workspace, 0u) << "Llama's products have no bias";
  EXPECT_EQ(no_bias.matmul_weight + no_bias.matmul_rows_in + no_bias.matmul_rows_out, 0u);

  // fp32 products round nothing and run no epilogue: the chunk sums, the sort and the losses.
  const KernelScratch fp32 = kernel_scratch(w, KernelScratchChoices{});
  EXPECT_EQ(fp32.matmul_weight + fp32.matmul_rows_in + fp32.matmul_rows_out + fp32.lt_workspace, 0u);
  EXPECT_EQ(fp32.partials, s.partials);
  EXPECT_EQ(fp32.row_losses, s.row_losses);
}

TEST(KernelScratch, TensorSplitsAndPipelinePartsAskForTheirShare) {
  const ModelShape shape = gpt2_124m();
  const std::uint64_t N = 16384, C = 768, V = 50304;
  KernelScratchChoices bf16;
  bf16.bf16_matmuls = true;
  // Two-way tensor split: half of each split width; the LM head's slice of the vocabulary.
  const KernelScratch split = kernel_scratch(kernel_workload(shape, 16, 2, true, ModelPart{}), bf16);
  EXPECT_EQ(split.matmul_weight, V / 2 * C * kBf16);
  EXPECT_EQ(split.matmul_rows_in, N * 2 * C * kBf16) << "the MLP projection's input: its half of 4 C";
  // Sequence parallelism: a norm sees half the rows; the MLP input's bias still sums all of them.
  EXPECT_EQ(split.partials, (N / 32) * 2 * C * kFloat);
  // A middle stage: blocks only (no head product, no sort, no row losses).
  const KernelWorkload middle = kernel_workload(shape, 16, 1, false, ModelPart{4, 8});
  EXPECT_EQ(middle.products.size(), 4u);
  EXPECT_FALSE(middle.embeds || middle.heads);
  const KernelScratch m = kernel_scratch(middle, bf16);
  EXPECT_EQ(m.matmul_weight, 4 * C * C * kBf16);
  EXPECT_EQ(m.sort_keys + m.sort_values + m.sort_temp + m.row_losses, 0u);
  // The last stage: its blocks and the head.
  const KernelWorkload last = kernel_workload(shape, 16, 1, false, ModelPart{8, -1});
  EXPECT_EQ(last.products.size(), 5u);
  EXPECT_TRUE(last.heads && !last.embeds);
  // Llama: no biases (no epilogue, no bias sums), one vector a norm.
  ModelShape llama = shape;
  llama.arch = Arch::llama;
  llama.n_kv_head = 4;
  llama.ffn_dim = 2048;
  const KernelWorkload lw = kernel_workload(llama, 16, 1, false, ModelPart{});
  EXPECT_EQ(lw.norm_vectors, 1);
  const KernelScratch l = kernel_scratch(lw, bf16);
  EXPECT_EQ(l.lt_workspace, 0u);
  EXPECT_EQ(l.partials, (N / 32) * C * kFloat) << "RMSNorm's weight alone";
}

}  // namespace
}  // namespace st
