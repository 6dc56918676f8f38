#pragma once
// The execution seam: where the model, the parallel strategy's arithmetic and the optimizer
// run. One backend per rank: the host (OpenMP and OpenBLAS; exec/host_exec.hpp) or one CUDA
// device (kernels and cuBLAS on a compute stream; exec/cuda/cuda_exec.hpp).
//
// Everything the strategy does to its buffers between collectives is here, so the strategy
// holds the schedule (when to gather, reduce, release) and the backend the maths. Pointers are
// in the backend's memory space. On a device, calls are queued on the compute stream in the
// order they are made and return at once; calls that hand a value to the host (download,
// sum_squares) wait for what they need.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/buffer.hpp"
#include "exec/layer_kernels.hpp"
#include "exec/adamw_constants.hpp"

namespace st {

class Exec {
 public:
  virtual ~Exec() = default;
  virtual MemorySpace space() const = 0;
  // "host: 2 OpenMP threads, OpenBLAS (Cooperlake)" or "cuda: device 0 of 8, NVIDIA H200 (...)".
  virtual std::string description() const = 0;

  // ---- memory ----
  // A zeroed block of `bytes` in this backend's space (device: cudaMalloc, freed with the handle).
  virtual Memory allocate(std::size_t bytes) = 0;
  virtual void zero(void* data, std::size_t bytes) = 0;
  // Both in this space.
  virtual void copy(void* to, const void* from, std::size_t bytes) = 0;
  // Host memory into this space; `from` may be reused as soon as the call returns.
  virtual void upload(void* to, const void* host_from, std::size_t bytes) = 0;
  // This space into host memory, after all queued work; complete when the call returns.
  virtual void download(void* host_to, const void* from, std::size_t bytes) = 0;

  // ---- the strategy's element-wise arithmetic (Buffers are in this space) ----
  // Element-wise conversion between f32 and bf16 (round to nearest even), or a copy when the
  // types agree. Same count.
  virtual void convert(Buffer to, Buffer from) = 0;
  // into += from, element by element; bf16 `into` adds in fp32 and rounds once.
  virtual void accumulate(Buffer into, const float* from) = 0;
  // Sum of squares in double precision, on the host when the call returns.
  virtual double sum_squares(Buffer values) = 0;
  // AdamW on n elements (exec/adamw_element.hpp); grads are fp32.
  virtual void adamw(const AdamWConstants& c, float* params, const float* grads, float* m, float* v,
                     std::size_t n) = 0;

  // ---- ordering ----
  // Wait for every queued kernel and copy (the host: nothing to wait for). Not for collectives:
  // they are the communicators' work, finished when their requests complete.
  virtual void synchronize() = 0;
  // Called before a collective starts on buffers this backend wrote: returns a marker of every
  // kernel queued so far (a device's event; null on the host), which the caller sets on the
  // collective's Buffers (Buffer::ready) so that a device communicator orders the collective
  // after exactly that work, however late its progress thread gets to it.
  virtual const void* before_communication() { return nullptr; }

  // The model's kernels in this space (fp32 activations; a device computes its matmuls with the
  // precision it was made with).
  virtual LayerKernels<float>& layer_kernels() = 0;
};

// The host backend, shared by every caller in the process (it holds no state of its own).
Exec& host_exec();

// Typed helpers.
template <class T>
inline std::span<T> as_span(const Memory& memory) {
  return memory.as<T>();
}

}  // namespace st
