#include "runtime/make_exec.hpp"

#include "core/error.hpp"
#include "exec/host_exec.hpp"

#if defined(ST_HAVE_CUDA)
#include "exec/cuda/cuda_checks.hpp"
#include "exec/cuda/cuda_exec.hpp"
#include "exec/cuda/device_scratch.hpp"
#endif
#if defined(ST_HAVE_NCCL)
#include "comm/device_wait.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/nccl_communicator.hpp"
#include "comm/values.hpp"
#endif

namespace st {

std::string gpu_backend_versions() {
#if defined(ST_HAVE_CUDA)
  auto dotted = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);  // both answer without a device
  std::string text = "CUDA runtime " + dotted(runtime);
  text += cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0 ? " (driver supports " + dotted(driver) + ")"
                                                                      : " (no CUDA driver here)";
  text += ", cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) + "." + std::to_string(CUBLAS_VER_MINOR) + "." +
          std::to_string(CUBLAS_VER_PATCH);
#if defined(ST_HAVE_NCCL)
  int nccl = 0;
  ncclGetVersion(&nccl);
  text += ", NCCL " + std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) + "." +
          std::to_string(nccl % 100);
#else
  text += ", no NCCL (built without ST_ENABLE_NCCL)";
#endif
  return text;
#else
  return "none (built without ST_ENABLE_CUDA)";
#endif
}

namespace {

// The host: OpenMP and BLAS, no device. The trainer measures sgemm itself.
class HostExecution final : public Execution {
 public:
  HostExecution(std::unique_ptr<Exec> exec, const DeviceChoice& choice) : Execution(std::move(exec), choice) {}
  std::string device_name() const override { return {}; }
  std::optional<double> matmul_rate(int, int, int) const override { return std::nullopt; }
  bool has_device_communicators() const override { return false; }
  std::unique_ptr<Communicator> device_peers(MPI_Comm, TrafficLevel, double) const override { no_device(); }
  std::unique_ptr<Communicator> device_staging(Communicator&) const override { no_device(); }
  std::uint64_t device_bytes() const override { return 0; }
  std::uint64_t device_peak_bytes() const override { return 0; }
  std::uint64_t device_used_bytes() const override { return 0; }
  std::uint64_t device_total_bytes() const override { return 0; }
  std::uint64_t device_scratch_peak_bytes() const override { return 0; }
  std::uint64_t device_scratch_grown() const override { return 0; }

 private:
  [[noreturn]] static void no_device() {
    throw Error("the host execution has no device communicators (ask has_device_communicators first)");
  }
};

#if defined(ST_HAVE_CUDA) && defined(ST_HAVE_NCCL)
// One CUDA device: its GEMM rate, its memory, and NCCL communicators whose collectives start
// after the kernels queued before them, by an event (no host wait).
class CudaExecution final : public Execution {
 public:
  CudaExecution(std::unique_ptr<CudaExec> cuda, const DeviceChoice& choice)
      : Execution(std::move(cuda), choice), device_(static_cast<CudaExec*>(&exec())), index_(choice.device) {
    cudaDeviceProp prop{};
    ST_CHECK_CUDA(cudaGetDeviceProperties(&prop, index_));
    name_ = prop.name;
    uuid_.assign(prop.uuid.bytes, sizeof prop.uuid.bytes);
  }
  std::string device_name() const override { return name_; }
  std::optional<double> matmul_rate(int m, int n, int k) const override { return device_->measure_gemm_flops(m, n, k); }
  bool has_device_communicators() const override { return true; }
  std::unique_ptr<Communicator> device_peers(MPI_Comm comm, TrafficLevel level, double timeout_seconds) const override {
    // NCCL refuses two ranks of one communicator on one GPU. Where ranks of `comm` share one
    // (emulated nodes on fewer GPUs than ranks), their collectives go through MPI in pinned host
    // memory instead; the bytes are counted at the same level.
    if (some_host_repeats(uuid_, comm))
      return std::make_unique<HostStagedCommunicator>(
          std::make_unique<MpiCommunicator>(comm, level, MpiWait::polling), index_, order());
    return std::make_unique<NcclCommunicator>(comm, index_, level, order(), device_wait_limit(timeout_seconds));
  }
  std::unique_ptr<Communicator> device_staging(Communicator& host) const override {
    return std::make_unique<HostStagedCommunicator>(host, index_, order());
  }
  std::uint64_t device_bytes() const override { return device_->allocated_bytes(); }
  std::uint64_t device_peak_bytes() const override { return device_->peak_allocated_bytes(); }
  std::uint64_t device_used_bytes() const override {
    std::size_t free = 0, total = 0;
    ST_CHECK_CUDA(cudaMemGetInfo(&free, &total));
    return static_cast<std::uint64_t>(total - free);
  }
  std::uint64_t device_total_bytes() const override {
    std::size_t free = 0, total = 0;
    ST_CHECK_CUDA(cudaMemGetInfo(&free, &total));
    return static_cast<std::uint64_t>(total);
  }
  std::uint64_t device_scratch_peak_bytes() const override { return DeviceScratch::peak_bytes(); }
  std::uint64_t device_scratch_grown() const override { return DeviceScratch::grown_after_reserve(); }

 private:
  StreamOrder order() const {
    CudaExec* device = device_;
    return [device](cudaStream_t stream, const void* ready) { device->order_after_compute(stream, ready); };
  }
  CudaExec* device_;  // exec(), with its CUDA-only calls
  int index_;
  std::string name_;
  std::string uuid_;  // the device's identity: do ranks of a communicator share it?
};
#endif

}  // namespace

std::unique_ptr<Execution> host_execution(std::unique_ptr<Exec> exec, const DeviceChoice& choice) {
  if (exec->space() != MemorySpace::host)
    throw Error("host_execution takes a host backend; " + exec->description() + " is not one");
  return std::make_unique<HostExecution>(std::move(exec), choice);
}

std::unique_ptr<Execution> make_execution(const DeviceChoice& choice, const ParallelConfig& parallel) {
  if (!choice.cuda) return host_execution(std::make_unique<HostExec>(), choice);
#if defined(ST_HAVE_CUDA) && defined(ST_HAVE_NCCL)
  CudaExecSettings settings;
  settings.device = choice.device;
  settings.bf16_matmuls = parallel.precision == Precision::bf16;
  settings.flash_attention = parallel.attention == AttentionChoice::automatic;
  settings.fused_classifier = parallel.classifier == ClassifierChoice::automatic;
  settings.gelu_fusion = parallel.gelu_fusion;
  settings.sync_every_launch = parallel.sync_every_launch;
  return std::make_unique<CudaExecution>(std::make_unique<CudaExec>(settings), choice);
#else
  (void)parallel;
#if defined(ST_HAVE_CUDA)
  throw Error("GPU training needs NCCL; choose_device refuses cuda in a build without it", ErrorScope::all_ranks);
#else
  throw Error("GPU training is not built in; choose_device refuses cuda in such a build", ErrorScope::all_ranks);
#endif
#endif
}

}  // namespace st
