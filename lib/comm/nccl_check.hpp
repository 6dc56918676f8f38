#pragma once
// Checked NCCL calls (NCCL builds only): the failing call, file:line and rank. ST_CHECK_CUDA comes
// with it, from core/cuda_check.hpp.
#include <nccl.h>

#include <string>

#include "core/cuda_check.hpp"
#include "core/error.hpp"

namespace st {

inline void check_nccl(ncclResult_t code, const char* call, const char* file, int line) {
  if (code != ncclSuccess)
    fail_requirement(std::string("NCCL error: ") + ncclGetErrorString(code), call, file, line);
}

}  // namespace st

#define ST_CHECK_NCCL(call) ::st::check_nccl((call), #call, __FILE__, __LINE__)
