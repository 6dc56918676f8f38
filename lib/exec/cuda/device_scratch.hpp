#pragma once
// Grow-only device scratch memory for kernels that need temporaries (partial sums, sort keys,
// the bf16 operands of the linear layers, cuBLASLt's workspace). Work queued on one stream may
// still read the old block when it grows, so growing waits for that stream before freeing it.
// Not copyable; the destructor never throws. Every block is counted process-wide
// (DeviceScratch::held_bytes, peak_bytes): device memory outside the accounted buffers, which
// the memory line reports beside them. A model reserves its kernels' blocks before its first
// step (LayerKernels::reserve_scratch), so that nothing grows inside one.
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>

#include "exec/cuda/cuda_checks.hpp"

namespace st {

class DeviceScratch {
 public:
  DeviceScratch() = default;
  ~DeviceScratch() {
    if (data_) {
      cudaFree(data_);  // a failure cannot be reported from a destructor
      held_ -= capacity_;
    }
  }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  // At least `bytes` of device memory, valid until the next get() on this object. Growing a block
  // that was reserved is counted (grown_after_reserve): the reservation fell short.
  void* get(std::size_t bytes, cudaStream_t stream) {
    if (bytes > capacity_) {
      if (reserved_) ++grown_after_reserve_;
      if (data_) {
        ST_CHECK_CUDA(cudaStreamSynchronize(stream));
        ST_CHECK_CUDA(cudaFree(data_));
        data_ = nullptr;
        held_ -= capacity_;
        capacity_ = 0;
      }
      ST_CHECK_CUDA(cudaMalloc(&data_, bytes));
      capacity_ = bytes;
      const std::size_t now = held_ += bytes;
      std::size_t peak = peak_.load();
      while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
      }
    }
    return data_;
  }
  template <class T>
  T* get(std::size_t count, cudaStream_t stream) {
    return static_cast<T*>(get(count * sizeof(T), stream));
  }
  // Holds at least `bytes` from now on (before the first step: nothing then grows inside one). A
  // second reservation (another model on the same kernels, a pipeline stage's next chunk) may
  // grow the block without counting as growth.
  void reserve(std::size_t bytes, cudaStream_t stream) {
    if (bytes > capacity_) {
      reserved_ = false;
      get(bytes, stream);
    }
    reserved_ = true;
  }

  // Bytes all of this process's scratch blocks hold now, and at most since it started.
  static std::size_t held_bytes() { return held_.load(); }
  static std::size_t peak_bytes() { return peak_.load(); }
  // The peak from now on starts at what is held (after a measurement's own blocks are freed).
  static void restart_peak() { peak_.store(held_.load()); }
  // How many times a reserved block had to grow, in this process: 0 where the reservations
  // (exec/kernel_scratch.hpp) cover what the kernels ask for.
  static std::size_t grown_after_reserve() { return grown_after_reserve_.load(); }

 private:
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
  bool reserved_ = false;
  static inline std::atomic<std::size_t> held_{0}, peak_{0}, grown_after_reserve_{0};
};

}  // namespace st
