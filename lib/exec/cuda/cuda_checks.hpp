#pragma once
// Checked CUDA runtime and cuBLAS calls for the CUDA backend: the failing call, file:line and the
// library's message, raised as st::Error like every other checked call.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "core/cuda_check.hpp"  // ST_CHECK_CUDA, shared with comm's NCCL communicators
#include "core/error.hpp"

namespace st {

// parallel.sync_every_launch: each checked launch and cuBLAS call also waits for the device, so
// that a kernel that fails while it runs (an illegal address, a trap) is reported at its own
// launch, by file and line, instead of by whichever later call first sees CUDA's sticky error.
// Process-wide, as launches are checked in free functions; the backend sets it when it is made
// (cuda_exec.cpp) and it only ever turns on.
void sync_every_launch(bool on);
bool syncing_every_launch();

// A launch's configuration error, or with sync_every_launch what the kernel did when it ran.
inline void check_launch(const char* file, int line) {
  check_cuda(cudaGetLastError(), "kernel launch", file, line);
  if (syncing_every_launch()) check_cuda(cudaDeviceSynchronize(), "kernel (waited for: parallel.sync_every_launch)", file, line);
}

inline void check_cublas(cublasStatus_t code, const char* call, const char* file, int line) {
  if (code != CUBLAS_STATUS_SUCCESS)
    fail_requirement(std::string("cuBLAS error: ") + cublasGetStatusName(code) + " (" + cublasGetStatusString(code) +
                         ")",
                     call, file, line);
  if (syncing_every_launch()) check_cuda(cudaDeviceSynchronize(), call, file, line);
}

}  // namespace st

#define ST_CHECK_CUBLAS(call) ::st::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: a bad launch configuration is reported here, at the launch.
#define ST_CHECK_LAUNCH() ::st::check_launch(__FILE__, __LINE__)
