#pragma once
// Checked CUDA runtime calls: the failing call, file:line and rank, raised as st::Error like every
// other checked call. Here in core so that the CUDA backend (exec/cuda) and the NCCL communicators
// (comm) share one definition without either including the other; it needs only the CUDA
// runtime's header, so only code built with CUDA includes it.
#include <cuda_runtime.h>

#include <string>

#include "core/error.hpp"

namespace st {

inline void check_cuda(cudaError_t code, const char* call, const char* file, int line) {
  if (code != cudaSuccess)
    fail_requirement(std::string("CUDA error: ") + cudaGetErrorString(code), call, file, line);
}

}  // namespace st

#define ST_CHECK_CUDA(call) ::st::check_cuda((call), #call, __FILE__, __LINE__)
