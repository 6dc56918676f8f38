#pragma once
// Grow-only device scratch memory for kernels that need temporaries (partial sums, sort keys).
// Work queued on one stream may still read the old block when it grows, so growing waits for that
// stream before freeing it. Move-only; the destructor never throws.
#include <cuda_runtime.h>

#include <cstddef>

#include "exec/cuda/cuda_checks.hpp"

namespace st {

class DeviceScratch {
 public:
  DeviceScratch() = default;
  ~DeviceScratch() {
    if (data_) cudaFree(data_);  // a failure cannot be reported from a destructor
  }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  // At least `bytes` of device memory, valid until the next get() on this object.
  void* get(std::size_t bytes, cudaStream_t stream) {
    if (bytes > capacity_) {
      if (data_) {
        ST_CHECK_CUDA(cudaStreamSynchronize(stream));
        ST_CHECK_CUDA(cudaFree(data_));
        data_ = nullptr;
        capacity_ = 0;
      }
      ST_CHECK_CUDA(cudaMalloc(&data_, bytes));
      capacity_ = bytes;
    }
    return data_;
  }
  template <class T>
  T* get(std::size_t count, cudaStream_t stream) {
    return static_cast<T*>(get(count * sizeof(T), stream));
  }

 private:
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace st
