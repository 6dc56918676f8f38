#pragma once
// Checked CUDA runtime and cuBLAS calls for the CUDA backend: the failing call, file:line and the
// library's message, raised as st::Error like every other checked call.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "core/error.hpp"

#if defined(ST_HAVE_NCCL)
#include "comm/cuda_check.hpp"  // ST_CHECK_CUDA, defined once next to ST_CHECK_NCCL
#else
// Builds without NCCL have no comm/cuda_check.hpp (it needs nccl.h): the same check, here.
namespace st {
inline void check_cuda(cudaError_t code, const char* call, const char* file, int line) {
  if (code != cudaSuccess)
    fail_requirement(std::string("CUDA error: ") + cudaGetErrorString(code), call, file, line);
}
}  // namespace st
#define ST_CHECK_CUDA(call) ::st::check_cuda((call), #call, __FILE__, __LINE__)
#endif

namespace st {

inline void check_cublas(cublasStatus_t code, const char* call, const char* file, int line) {
  if (code != CUBLAS_STATUS_SUCCESS)
    fail_requirement(std::string("cuBLAS error: ") + cublasGetStatusName(code) + " (" + cublasGetStatusString(code) +
                         ")",
                     call, file, line);
}

}  // namespace st

#define ST_CHECK_CUBLAS(call) ::st::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: a bad launch configuration is reported here, at the launch.
#define ST_CHECK_LAUNCH() ST_CHECK_CUDA(cudaGetLastError())
