#pragma once
// Checked CUDA and NCCL calls (CUDA builds only): the failing call, file:line and rank.
#include <cuda_runtime.h>
#include <nccl.h>

#include "core/error.hpp"

namespace st {

inline void check_cuda(cudaError_t code, const char* call, const char* file, int line) {
  if (code != cudaSuccess)
    fail_requirement(std::string("CUDA error: ") + cudaGetErrorString(code), call, file, line);
}
inline void check_nccl(ncclResult_t code, const char* call, const char* file, int line) {
  if (code != ncclSuccess)
    fail_requirement(std::string("NCCL error: ") + ncclGetErrorString(code), call, file, line);
}

}  // namespace st

#define ST_CHECK_CUDA(call) ::st::check_cuda((call), #call, __FILE__, __LINE__)
#define ST_CHECK_NCCL(call) ::st::check_nccl((call), #call, __FILE__, __LINE__)
