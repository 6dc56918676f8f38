#pragma once
// Row-wise helpers shared by the layer kernels and the bf16 products (elementwise.cu).
#include <cuda_runtime.h>

#include "core/bf16.hpp"

namespace st::cuda_detail {

// out[n, :] = row for the N rows of C columns (a bias, before a product adds to it), queued on
// `stream`; nothing for an empty matrix.
void broadcast_rows(float* out, const float* row, int N, int C, cudaStream_t stream);
void broadcast_rows(Bf16* out, const Bf16* row, int N, int C, cudaStream_t stream);

}  // namespace st::cuda_detail
