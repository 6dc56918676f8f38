#pragma once
// Builds a rank's execution backend from the device choice, with what the rest of the job needs
// to match it: the communicator backends for device buffers and the matmul rate MFU is
// measured against. The only place that knows which backends this build has.
#include <mpi.h>

#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.hpp"  // the device communicators this factory builds
#include "exec/device_choice.hpp"
#include "exec/exec.hpp"

namespace st {

struct Execution {
  std::unique_ptr<Exec> exec;
  DeviceChoice choice;
  // GPU runs: a group's backend on device buffers (NCCL), and a host backend carried over
  // pinned host memory (MPI across nodes). Unset on the host. device_peers' double is the
  // job's collective timeout (parallel.collective_timeout_s; 0: none).
  std::function<std::unique_ptr<Communicator>(MPI_Comm, TrafficLevel, double)> device_peers;
  std::function<std::unique_ptr<Communicator>(Communicator&)> device_staging;
  std::string device_comm_name;  // "NCCL"
  std::string device_name;       // the CUDA runtime's name of the GPU ("NVIDIA H200"); empty on the host
  // The device's matmul rate for an m x n x k GEMM at the run's precision (FLOP/s); unset on
  // the host, where the trainer measures sgemm itself.
  std::function<double(int, int, int)> matmul_rate;
  // Device memory the backend holds now and at most, and what the whole device has in use
  // (the CUDA context, cuBLAS's and NCCL's buffers included; cudaMemGetInfo) and in total.
  std::function<std::uint64_t()> device_bytes, device_peak_bytes, device_used_bytes, device_total_bytes;
};

// The GPU libraries this build has, with versions ("CUDA runtime 13.0 (driver: ...), cuBLAS
// 13.x, NCCL 2.28.x"), or that it has none.
std::string gpu_backend_versions();

// bf16_matmuls: parallel.precision = "bf16" (matmuls with bf16 inputs on a device);
// flash_attention: parallel.attention = "auto" (flash attention where it runs: with bf16 matmuls
// on a device, exec/attention_probs.hpp); fused_classifier: parallel.classifier = "auto" (bf16
// logits and the fused cross-entropy, with bf16 matmuls on a device).
Execution make_execution(const DeviceChoice& choice, bool bf16_matmuls, bool flash_attention,
                         bool fused_classifier = true);

}  // namespace st
