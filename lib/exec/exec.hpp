#pragma once
// The execution seam: where the model, the parallel strategy's arithmetic and the optimizer
// run. One backend per rank: the host (OpenMP and OpenBLAS; exec/host_exec.hpp) or one CUDA
// device (kernels and cuBLAS on a compute stream; exec/cuda/cuda_exec.hpp).
//
// Everything the strategy does to its buffers between collectives is here, so the strategy
// holds the schedule (when to gather, reduce, release) and the backend the maths. Pointers are
// in the backend's memory space. On a device, calls are queued on the compute stream in the
// order they are made and return at once; only download and synchronize make the host wait. A
// training step keeps its scalars (the loss, the gradient norm, clipping's factor) in this
// backend's memory (exec/step_scalars.hpp) and reads them once, at its end.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/buffer.hpp"
#include "exec/layer_kernels.hpp"
#include "exec/adamw_constants.hpp"
#include "exec/step_scalars.hpp"

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
  // Host memory into this space; `from` may be reused as soon as the call returns. Queued: a
  // device stages small copies (a micro-batch's tokens) through pinned memory, so the host does
  // not wait for the work before them.
  virtual void upload(void* to, const void* host_from, std::size_t bytes) = 0;
  // This space into host memory, after all queued work; complete when the call returns.
  virtual void download(void* host_to, const void* from, std::size_t bytes) = 0;

  // ---- the strategy's element-wise arithmetic (Buffers are in this space) ----
  // Element-wise conversion between f32 and bf16 (round to nearest even), or a copy when the
  // types agree. Same count.
  virtual void convert(Buffer to, Buffer from) = 0;
  // into += from, element by element; bf16 `into` adds in fp32 and rounds once.
  virtual void accumulate(Buffer into, const float* from) = 0;
  // AdamW (exec/adamw_element.hpp) over every tile in one launch; `tiles` is in this space.
  // grads are f32 or bf16 (widened exactly), each multiplied by *grad_scale (in this space) first;
  // a NaN factor leaves parameters and state as they are.
  virtual void adamw(const AdamWStepConstants& c, const AdamWTile* tiles, std::size_t tile_count, float* params,
                     Buffer grads, float* m, float* v, const float* grad_scale) = 0;

  // ---- the step's scalars (in this space; queued, no host wait) ----
  // *total += the sum of squares of the parts, in double precision: each part's sum, the parts'
  // sums added in order, then that to *total.
  virtual void add_sum_squares(double* total, std::span<const Buffer> parts) = 0;
  // *value /= divisor.
  virtual void divide(double* value, double divisor) = 0;
  // scalars->grad_scale = clip_factor(loss, grad_norm_squared, clip) (exec/step_scalars.hpp).
  virtual void set_clip_factor(StepScalars* scalars, double clip) = 0;

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
  // The model's kernels with bf16 storage (bf16 parameters and activations, fp32 gradients and
  // statistics: LayerKernels<float, Bf16>), or null where this backend has none.
  virtual LayerKernels<float, Bf16>* bf16_layer_kernels() { return nullptr; }
};

// The host backend, shared by every caller in the process (its only state: the bf16 reference
// kernels' widening scratch).
Exec& host_exec();

// Typed helpers.
template <class T>
inline std::span<T> as_span(const Memory& memory) {
  return memory.as<T>();
}

}  // namespace st
