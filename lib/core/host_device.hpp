#pragma once
// Marks a function that the host and the CUDA kernels both call, so the CPU tests cover the
// exact arithmetic the device runs (GELU, LayerNorm statistics, softmax, AdamW).
#if defined(__CUDACC__)
#define ST_HOST_DEVICE __host__ __device__
#else
#define ST_HOST_DEVICE
#endif
