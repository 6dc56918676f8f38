#pragma once
// Builds a rank's execution backend from the device choice, with what the rest of the job needs
// to match it: the communicator backends for device buffers and the matmul rate MFU is
// measured against. The only place that knows which backends this build has.
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "comm/communicator.hpp"  // the device communicators this factory builds
#include "deck/config.hpp"
#include "exec/exec.hpp"
#include "runtime/device_choice.hpp"

namespace st {

// A rank's execution backend and what the rest of the job asks of its device. make_execution
// builds one of two implementations (make_exec.cpp): the host's, which has no device (no device
// communicators, no device memory, sgemm measured by the trainer), and the CUDA device's.
class Execution {
 public:
  Execution(std::unique_ptr<Exec> exec, DeviceChoice choice) : exec_(std::move(exec)), choice_(std::move(choice)) {}
  virtual ~Execution() = default;
  Execution(const Execution&) = delete;
  Execution& operator=(const Execution&) = delete;

  Exec& exec() const { return *exec_; }
  const DeviceChoice& choice() const { return choice_; }

  // The CUDA runtime's name of the GPU ("NVIDIA H200"); empty on the host.
  virtual std::string device_name() const = 0;
  // The device's matmul rate for an m x n x k GEMM at the run's precision (FLOP/s); none on the
  // host, where the trainer measures sgemm itself.
  virtual std::optional<double> matmul_rate(int m, int n, int k) const = 0;

  // GPU runs: a group's backend on device buffers (NCCL), and a host backend carried over
  // pinned host memory (MPI across nodes). Only where has_device_communicators().
  // device_peers' timeout_seconds is the job's collective timeout (parallel.collective_timeout_s;
  // 0: none).
  virtual bool has_device_communicators() const = 0;
  virtual std::unique_ptr<Communicator> device_peers(MPI_Comm comm, TrafficLevel level,
                                                     double timeout_seconds) const = 0;
  virtual std::unique_ptr<Communicator> device_staging(Communicator& host) const = 0;

  // Device memory the backend holds now and at most, and what the whole device has in use (the
  // CUDA context, cuBLAS's and NCCL's buffers included; cudaMemGetInfo) and in total; 0 on the
  // host.
  virtual std::uint64_t device_bytes() const = 0;
  virtual std::uint64_t device_peak_bytes() const = 0;
  virtual std::uint64_t device_used_bytes() const = 0;
  virtual std::uint64_t device_total_bytes() const = 0;
  // The kernels' scratch on the device (operands rounded to bf16, partial sums, cuBLASLt's
  // workspace): at most since the start; 0 on the host.
  virtual std::uint64_t device_scratch_peak_bytes() const = 0;
  // How many times a kernel's scratch grew past what its model reserved before the first step
  // (exec/kernel_scratch.hpp): 0 where the sizing covers every kernel; 0 on the host.
  virtual std::uint64_t device_scratch_grown() const = 0;

 private:
  std::unique_ptr<Exec> exec_;
  DeviceChoice choice_;
};

// The GPU libraries this build has, with versions ("CUDA runtime 13.0 (driver: ...), cuBLAS
// 13.x, NCCL 2.28.x"), or that it has none.
std::string gpu_backend_versions();

// The host's execution around a given host backend: tests wrap the host's backend to count its
// waits or to stand in for a device's kernel choices.
std::unique_ptr<Execution> host_execution(std::unique_ptr<Exec> exec, const DeviceChoice& choice = {});

// The backend the deck's [parallel] settings ask for on this device: bf16 matmuls with
// precision "bf16", flash attention and the fused classifier where attention and classifier are
// "auto" (on a device, with bf16 matmuls: exec/attention_probs.hpp, docs/gpu.md), and every
// launch waited for and checked with sync_every_launch.
std::unique_ptr<Execution> make_execution(const DeviceChoice& choice, const ParallelConfig& parallel);

}  // namespace st
