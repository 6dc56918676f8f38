#pragma once
// bf16 products through cuBLASLt, for what cuBLAS's GEMM cannot do in the product's own write:
// add a bias, apply GELU and keep its input, or apply GELU's derivative to an input gradient
// (llm.c's fusions). Each saves a pass over the product: the bias broadcast into the output
// before the product (and the product's read of it back), the GELU kernel, or the GELU
// backward kernel and the gradient it reads.
//
// cuBLASLt chooses an algorithm from the shapes, the epilogue and the pointers' alignment; the
// choice is made once per such key and kept (with its descriptors), so a training step asks
// the heuristic only in its first step. Where cuBLASLt has no algorithm (an auxiliary matrix's
// leading dimension not a multiple of 8, pointers aligned to less than 16 bytes) supports() says
// no and the caller takes its unfused path.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "exec/kernel_scratch.hpp"
#include "exec/cuda/device_scratch.hpp"

namespace st {

enum class LtEpilogue {
  bias,           // D += bias[m] on every column
  gelu_aux_bias,  // aux = D + bias, D = gelu(aux) (tanh approximation, GPT-2's)
  dgelu,          // D *= gelu'(aux)
};

// D[m, n] = op(A)[m, k] op(B)[k, n], then the epilogue, column-major as cuBLAS sees matrices. A
// and B bf16; D of d_type, fp32 or bf16 (overwritten, leading dimension m; the epilogue computes
// in fp32 and a bf16 D is rounded once); bias [m] and aux [m, n] (leading dimension m) of D's
// type, as cuBLASLt takes them by default.
struct LtProduct {
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  int m = 0, n = 0, k = 0;
  const std::uint16_t* A = nullptr;
  int lda = 0;
  const std::uint16_t* B = nullptr;
  int ldb = 0;
  void* D = nullptr;
  LtEpilogue epilogue = LtEpilogue::bias;
  const void* bias = nullptr;
  void* aux = nullptr;
  cudaDataType_t d_type = CUDA_R_32F;
};

class LtMatmul {
 public:
  explicit LtMatmul(cudaStream_t stream);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // Whether cuBLASLt has an algorithm for `p`; asks its heuristic the first time a key is seen.
  bool supports(const LtProduct& p);
  // Queues `p` on the stream; supports(p) must have said yes.
  void run(const LtProduct& p);
  // Products run so far with epilogue `e` (tests ask whether a path was taken).
  std::size_t runs(LtEpilogue e) const { return runs_[static_cast<std::size_t>(e)]; }
  // Holds the workspace from now on where `bytes` is not 0 (a workload with an epilogue).
  void reserve_workspace(std::size_t bytes) { workspace_.reserve(bytes, stream_); }

  // cuBLASLt's workspace: device memory outside the accounted buffers, as cuBLAS's own is.
  static constexpr std::size_t kWorkspaceBytes = kLtWorkspaceBytes;  // exec/kernel_scratch.hpp

 private:
  struct Plan;
  // The shapes, the epilogue and each pointer's alignment (a power of two up to 256 bytes).
  using Key = std::tuple<int, int, int, int, int, int, int, int, int, int, int, int, int, int>;
  Key key_of(const LtProduct& p) const;
  Plan& plan_for(const LtProduct& p);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceScratch workspace_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::size_t runs_[3] = {0, 0, 0};
};

}  // namespace st
