// CudaExec: the device, its streams, memory and copies, and the matmul rate. The element-wise
// arithmetic is in elementwise.cu, the model's kernels in cuda_layer_kernels.cu and
// cuda_attention.cu.
#include "exec/cuda/cuda_exec.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <limits>

#include "exec/cuda/cuda_checks.hpp"
#include "exec/cuda/cuda_exec_state.hpp"
#include "exec/cuda/bf16_matmuls.hpp"
#include "exec/cuda/cuda_gemm.hpp"
#include "exec/cuda/device_scratch.hpp"

namespace st {
namespace {

std::atomic<bool> every_launch_synced{false};
// upload()'s staging: slots of 1 MiB (a micro-batch of 64 x 2048 token ids is 512 KiB), eight of
// them, so that a slot comes round again long after its copy has finished.
constexpr std::size_t kStagingSlotBytes = std::size_t{1} << 20;
constexpr int kStagingSlots = 8;
}  // namespace

CudaExec::State::~State() {
  // Failures cannot be reported from a destructor; the pointers are valid or null.
  kernels.reset();
  bf16_kernels.reset();
  if (cublas) cublasDestroy(cublas);
  if (cublas_workspace) cudaFree(cublas_workspace);
  if (reduce_scratch) cudaFree(reduce_scratch);
}

void sync_every_launch(bool on) {
  if (on) every_launch_synced.store(true, std::memory_order_relaxed);
}
bool syncing_every_launch() { return every_launch_synced.load(std::memory_order_relaxed); }

CudaExec::CudaExec(const CudaExecSettings& settings) : settings_(settings) {
  sync_every_launch(settings.sync_every_launch);
  try {
    int devices = 0;
    ST_CHECK_CUDA(cudaGetDeviceCount(&devices));
    ST_REQUIRE(settings.device >= 0 && settings.device < devices,
               "CUDA device " + std::to_string(settings.device) + " requested, but " + std::to_string(devices) +
                   " are visible");
    ST_CHECK_CUDA(cudaSetDevice(settings.device));
    // Non-blocking: the stream does not wait for work on the legacy default stream (nor it for it).
    ST_CHECK_CUDA(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    ST_CHECK_CUDA(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    // Markers: more than the collectives a strategy keeps in flight (a few reductions and
    // prefetched gathers), so a marker is seldom recorded again while still awaited.
    for (int i = 0; i < 64; ++i) {
      cudaEvent_t marker = nullptr;
      ST_CHECK_CUDA(cudaEventCreateWithFlags(&marker, cudaEventDisableTiming));
      markers_.push_back(marker);
    }
    for (int i = 0; i < kStagingSlots; ++i) {
      StagingSlot slot;
      ST_CHECK_CUDA(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming));
      staging_.push_back(slot);  // the event is released with the slot, even if the allocation fails
      ST_CHECK_CUDA(cudaMallocHost(&staging_.back().pinned, kStagingSlotBytes));
    }
    state_ = std::make_unique<State>();
    ST_CHECK_CUBLAS(cublasCreate(&state_->cublas));
    ST_CHECK_CUBLAS(cublasSetStream(state_->cublas, compute_));
    ST_CHECK_CUBLAS(cublasSetMathMode(state_->cublas, CUBLAS_DEFAULT_MATH));  // fp32 means fp32: no TF32
    ST_CHECK_CUDA(cudaMalloc(&state_->cublas_workspace, kCublasWorkspaceBytes));
    ST_CHECK_CUBLAS(cublasSetWorkspace(state_->cublas, state_->cublas_workspace, kCublasWorkspaceBytes));
    ST_CHECK_CUDA(cudaMalloc(&state_->reduce_scratch, (kSumSquaresBlocks + 1) * sizeof(double)));
    state_->kernels =
        std::make_unique<CudaLayerKernels>(settings.device, compute_, state_->cublas, settings.bf16_matmuls,
                                           settings.flash_attention, settings.fused_classifier, settings.gelu_fusion);
    // Their attention is flash attention, which needs bf16 tensor cores (sm_80 or later).
    int major = 0;
    ST_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, settings.device));
    if (settings.bf16_matmuls && settings.flash_attention && settings.fused_classifier && major >= 8)
      state_->bf16_kernels =
          std::make_unique<CudaBf16LayerKernels>(settings.device, compute_, state_->cublas, settings.gelu_fusion);
  } catch (...) {
    release();
    throw;
  }
}

CudaExec::~CudaExec() { release(); }

void CudaExec::release() noexcept {
  // Nothing may still run on the stream when it and the buffers go.
  if (compute_) cudaStreamSynchronize(compute_);
  state_.reset();
  if (ready_) cudaEventDestroy(ready_);
  for (cudaEvent_t marker : markers_) cudaEventDestroy(marker);
  markers_.clear();
  for (StagingSlot& slot : staging_) {
    if (slot.pinned) cudaFreeHost(slot.pinned);
    if (slot.copied) cudaEventDestroy(slot.copied);
  }
  staging_.clear();
  if (compute_) cudaStreamDestroy(compute_);
  ready_ = nullptr;
  compute_ = nullptr;
}

std::string CudaExec::description() const {
  int devices = 0;
  ST_CHECK_CUDA(cudaGetDeviceCount(&devices));
  cudaDeviceProp prop{};
  ST_CHECK_CUDA(cudaGetDeviceProperties(&prop, settings_.device));
  char memory[32];
  std::snprintf(memory, sizeof memory, "%.1f", static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  return "cuda: device " + std::to_string(settings_.device) + " of " + std::to_string(devices) + ", " + prop.name +
         ", " + memory + " GiB, compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
         ", matmuls " + (settings_.bf16_matmuls ? "bf16" : "fp32") +
         (settings_.bf16_matmuls && settings_.flash_attention ? ", flash attention" : "");
}

Memory CudaExec::allocate(std::size_t bytes) {
  use_device();
  if (bytes == 0) return Memory({}, nullptr, 0, MemorySpace::device);
  void* data = nullptr;
  ST_CHECK_CUDA(cudaMalloc(&data, bytes));
  // Zeroed, and complete before the block is handed out: the first user may be another stream.
  const cudaError_t zeroed = cudaMemsetAsync(data, 0, bytes, compute_);
  const cudaError_t done = zeroed == cudaSuccess ? cudaStreamSynchronize(compute_) : zeroed;
  if (done != cudaSuccess) {
    cudaFree(data);
    ST_CHECK_CUDA(done);
  }
  std::shared_ptr<CudaAllocationCounters> counters = state_->counters;
  const std::uint64_t now = counters->allocated += bytes;
  std::uint64_t peak = counters->peak.load();
  while (now > peak && !counters->peak.compare_exchange_weak(peak, now)) {
  }
  // Counted first: shared_ptr runs the deleter (free, count out) if its control block cannot be had.
  std::shared_ptr<void> owner(data, [counters, bytes](void* p) noexcept {
    cudaFree(p);  // waits for work still using the block; a failure cannot be reported from here
    counters->allocated -= bytes;
  });
  return Memory(std::move(owner), data, bytes, MemorySpace::device);
}

void CudaExec::use_device() const { ST_CHECK_CUDA(cudaSetDevice(settings_.device)); }

std::uint64_t CudaExec::allocated_bytes() const { return state_->counters->allocated.load(); }
std::uint64_t CudaExec::peak_allocated_bytes() const { return state_->counters->peak.load(); }

void CudaExec::zero(void* data, std::size_t bytes) {
  use_device();
  if (bytes) ST_CHECK_CUDA(cudaMemsetAsync(data, 0, bytes, compute_));
}

void CudaExec::copy(void* to, const void* from, std::size_t bytes) {
  use_device();
  if (bytes && to != from) ST_CHECK_CUDA(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, compute_));
}

void CudaExec::upload(void* to, const void* host_from, std::size_t bytes) {
  use_device();
  if (!bytes) return;
  if (bytes <= kStagingSlotBytes) {
    StagingSlot& slot = staging_[next_staging_++ % staging_.size()];
    ST_CHECK_CUDA(cudaEventSynchronize(slot.copied));  // its copy of kStagingSlots uploads ago
    std::memcpy(slot.pinned, host_from, bytes);
    ST_CHECK_CUDA(cudaMemcpyAsync(to, slot.pinned, bytes, cudaMemcpyHostToDevice, compute_));
    ST_CHECK_CUDA(cudaEventRecord(slot.copied, compute_));
    return;
  }
  ST_CHECK_CUDA(cudaMemcpyAsync(to, host_from, bytes, cudaMemcpyHostToDevice, compute_));
  // The caller may reuse `host_from` at once. From pageable memory the runtime has copied it to
  // its staging buffers when the call returns, so the host need not wait for the compute stream;
  // from pinned (or registered) memory the copy may still be reading it.
  cudaPointerAttributes where{};
  ST_CHECK_CUDA(cudaPointerGetAttributes(&where, host_from));
  if (where.type != cudaMemoryTypeUnregistered) ST_CHECK_CUDA(cudaStreamSynchronize(compute_));
}

void CudaExec::download(void* host_to, const void* from, std::size_t bytes) {
  use_device();
  if (!bytes) return;
  ST_CHECK_CUDA(cudaMemcpyAsync(host_to, from, bytes, cudaMemcpyDeviceToHost, compute_));
  ST_CHECK_CUDA(cudaStreamSynchronize(compute_));
}

void CudaExec::synchronize() {
  use_device();
  // Collectives need no wait here: their requests complete only after their communicators'
  // streams have finished (NcclCommunicator::finish, HostStagedCommunicator's copies).
  ST_CHECK_CUDA(cudaStreamSynchronize(compute_));
}

const void* CudaExec::before_communication() {
  use_device();
  // Only recorded: the communicator that runs the collective makes its own stream wait for it
  // (order_after_compute), whenever its progress thread gets there.
  cudaEvent_t marker = markers_[next_marker_++ % markers_.size()];
  ST_CHECK_CUDA(cudaEventRecord(marker, compute_));
  return marker;
}

void CudaExec::order_after_compute(cudaStream_t stream, const void* ready) {
  use_device();
  cudaEvent_t event = static_cast<cudaEvent_t>(const_cast<void*>(ready));
  if (!event) {
    event = ready_;
    ST_CHECK_CUDA(cudaEventRecord(event, compute_));
  }
  ST_CHECK_CUDA(cudaStreamWaitEvent(stream, event, 0));
}

LayerKernels<float>& CudaExec::layer_kernels() { return *state_->kernels; }
LayerKernels<float, Bf16>* CudaExec::bf16_layer_kernels() { return state_->bf16_kernels.get(); }

double CudaExec::measure_gemm_flops(int m, int n, int k) {
  const double flops = timed_gemm_flops(m, n, k);
  // The measurement's blocks are freed: the scratch peak the memory line reports is the kernels'.
  DeviceScratch::restart_peak();
  return flops;
}

double CudaExec::timed_gemm_flops(int m, int n, int k) {
  use_device();
  ST_REQUIRE(m > 0 && n > 0 && k > 0, "measure_gemm_flops: m, n and k must be positive");
  const std::size_t a = static_cast<std::size_t>(m) * k, b = static_cast<std::size_t>(k) * n,
                    c = static_cast<std::size_t>(m) * n;
  DeviceScratch block;  // not from allocate(): a measurement should not count in peak_allocated_bytes()
  float* A = block.get<float>(a + b + c, compute_);
  float* B = A + a;
  float* C = B + b;
  // Non-zero inputs (each byte 0x3c: every float about 0.0115): all-zero data draws less power and
  // would flatter the clock.
  ST_CHECK_CUDA(cudaMemsetAsync(A, 0x3c, (a + b) * sizeof(float), compute_));
  // The layout of linear_forward: C[m,n] = A[m,k] B[n,k]^T, row-major; with bf16 matmuls, as
  // linear_forward makes them (the operands' rounding to bf16 included).
  Bf16Matmuls bf16(compute_, state_->cublas);
  auto run = [&] {
    if (settings_.bf16_matmuls) bf16.forward(C, A, B, nullptr, m, k, n);
    else cuda_gemm(state_->cublas, false, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, 1.0f, B, k, A, k, 0.0f, C, n);
  };
  cudaEvent_t start = nullptr, stop = nullptr;
  ST_CHECK_CUDA(cudaEventCreate(&start));
  const cudaError_t created = cudaEventCreate(&stop);
  if (created != cudaSuccess) cudaEventDestroy(start);
  ST_CHECK_CUDA(created);
  float best_ms = std::numeric_limits<float>::infinity();
  try {
    for (int i = 0; i < 2; ++i) run();  // warm-up: cuBLAS picks and loads its kernel
    for (int i = 0; i < 5; ++i) {
      ST_CHECK_CUDA(cudaEventRecord(start, compute_));
      run();
      ST_CHECK_CUDA(cudaEventRecord(stop, compute_));
      ST_CHECK_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      ST_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
      best_ms = std::min(best_ms, ms);
    }
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 2.0 * m * n * k / (static_cast<double>(best_ms) * 1e-3);
}

}  // namespace st
