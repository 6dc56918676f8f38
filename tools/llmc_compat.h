// Force-included (nvcc -include) when tools/gpu_check.sh's phase llmc builds llm.c's train_gpt2cu
// from the staged copy in .gpudeps/llm.c, whose sources are left as they are. CUDA 13 dropped the
// cudaMemAdvise overload that takes a device ordinal (only the cudaMemLocation one is left); llm.c
// calls it with cudaCpuDeviceId on the path where cudaMalloc runs out of memory and it falls back to
// managed memory. This overload gives that call its CUDA 12 meaning.
#pragma once
#include <cuda_runtime.h>

#if defined(__cplusplus) && CUDART_VERSION >= 13000
static inline cudaError_t cudaMemAdvise(const void* ptr, size_t bytes, cudaMemoryAdvise advice, int device) {
  cudaMemLocation location{};
  location.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  location.id = device == cudaCpuDeviceId ? 0 : device;
  return cudaMemAdvise(ptr, bytes, advice, location);
}
#endif
