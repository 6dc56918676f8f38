#include "exec/make_exec.hpp"

#include "core/error.hpp"
#include "exec/host_exec.hpp"

#if defined(ST_HAVE_CUDA)
#include "exec/cuda/cuda_checks.hpp"
#include "exec/cuda/cuda_exec.hpp"
#endif
#if defined(ST_HAVE_NCCL)
#include "comm/device_wait.hpp"
#include "comm/nccl_communicator.hpp"
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

Execution make_execution(const DeviceChoice& choice, bool bf16_matmuls, bool flash_attention, bool fused_classifier) {
  Execution e;
  e.choice = choice;
  if (!choice.cuda) {
    e.exec = std::make_unique<HostExec>();
    return e;
  }
#if defined(ST_HAVE_CUDA)
  auto cuda =
      std::make_unique<CudaExec>(CudaExecSettings{choice.device, bf16_matmuls, flash_attention, fused_classifier});
  CudaExec* device = cuda.get();
  e.exec = std::move(cuda);
  cudaDeviceProp prop{};
  ST_CHECK_CUDA(cudaGetDeviceProperties(&prop, choice.device));
  e.device_name = prop.name;
  e.matmul_rate = [device](int m, int n, int k) { return device->measure_gemm_flops(m, n, k); };
  e.device_bytes = [device] { return device->allocated_bytes(); };
  e.device_peak_bytes = [device] { return device->peak_allocated_bytes(); };
  e.device_used_bytes = [] {
    std::size_t free = 0, total = 0;
    ST_CHECK_CUDA(cudaMemGetInfo(&free, &total));
    return static_cast<std::uint64_t>(total - free);
  };
  e.device_total_bytes = [] {
    std::size_t free = 0, total = 0;
    ST_CHECK_CUDA(cudaMemGetInfo(&free, &total));
    return static_cast<std::uint64_t>(total);
  };
#if defined(ST_HAVE_NCCL)
  const int index = choice.device;
  // Collectives start after the kernels queued before them, by an event: no host wait.
  StreamOrder order = [device](cudaStream_t stream, const void* ready) { device->order_after_compute(stream, ready); };
  e.device_peers = [index, order](MPI_Comm comm, TrafficLevel level,
                                   double timeout_seconds) -> std::unique_ptr<Communicator> {
    return std::make_unique<NcclCommunicator>(comm, index, level, order, device_wait_limit(timeout_seconds));
  };
  e.device_staging = [index, order](Communicator& host) -> std::unique_ptr<Communicator> {
    return std::make_unique<HostStagedCommunicator>(host, index, order);
  };
  e.device_comm_name = "NCCL";
#else
  (void)bf16_matmuls;
  (void)flash_attention;
  (void)fused_classifier;
  throw Error("GPU training needs NCCL; choose_device refuses cuda in a build without it", ErrorScope::all_ranks);
#endif
  return e;
#else
  (void)bf16_matmuls;
  (void)flash_attention;
  (void)fused_classifier;
  throw Error("GPU training is not built in; choose_device refuses cuda in such a build", ErrorScope::all_ranks);
#endif
}

}  // namespace st
