#pragma once
// Collectives among GPUs through NCCL (CUDA builds with ST_ENABLE_NCCL). The communicator is
// bootstrapped from an MPI communicator: rank 0 creates the unique id, MPI broadcasts it, every
// rank joins with ncclCommInitRank. Buffers passed to it are device memory. Calls are enqueued
// on the communicator's stream, after the work `order` names (the compute the buffers come
// from), and waited for before returning; they may be made from another thread than the one
// that built the communicator (AsyncCommunicator's progress thread). The wait polls NCCL's
// asynchronous error, so a dead peer ends it with NCCL's reason instead of a hang, and ends at
// a limit (comm/device_wait.hpp); either aborts the communicator and throws, naming the
// collective.
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "comm/communicator.hpp"

namespace st {

// Move-only owner of a CUDA stream.
class CudaStream {
 public:
  CudaStream();
  ~CudaStream();
  CudaStream(CudaStream&& other) noexcept : stream_(other.stream_) { other.stream_ = nullptr; }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  CudaStream& operator=(CudaStream&&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Move-only owner of a device allocation of n elements of T.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), size_(other.size_) { other.data_ = nullptr; }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  T* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<T> span() const { return {data_, size_}; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// Makes a stream wait for the compute its collective's buffers come from (an event; no host
// wait): the work the Buffer's `ready` marker names, or without one all work queued so far.
// Empty: the caller has synchronised already.
using StreamOrder = std::function<void(cudaStream_t, const void* ready)>;

class NcclCommunicator final : public Communicator {
 public:
  // Joins a NCCL communicator with the ranks of `bootstrap` on CUDA device `device`. Traffic is
  // counted at `level` (intra: NVLink inside a node).
  // wait_limit_seconds: the longest wait for one call (device_wait_limit(); 0: no limit).
  NcclCommunicator(MPI_Comm bootstrap, int device, TrafficLevel level, StreamOrder order = {},
                   double wait_limit_seconds = 0);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  LevelTraffic traffic() const override;
  // Device memory on this communicator's GPU (zeroed); copies on its stream.
  Memory allocate(std::size_t bytes) override;
  MemorySpace memory_space() const override { return MemorySpace::device; }
  std::string transport() const override { return "NCCL"; }
  void copy_bytes(void* to, const void* from, std::size_t bytes, const void* ready = nullptr) override;
  void zero_bytes(void* data, std::size_t bytes, const void* ready = nullptr) override;

 protected:
  void run_all_reduce(Buffer buffer, ReduceOp op) override;
  void run_reduce_scatter(Buffer input, Buffer output, ReduceOp op) override;
  void run_all_gather(Buffer input, Buffer output) override;
  void run_broadcast(Buffer buffer, int root) override;
  void run_barrier() override;

 private:
  // On the calling thread: the device, and the stream after the compute `ready` marks.
  void begin(const void* ready = nullptr);
  // Waits for the enqueued operation (op, bytes: for the messages), polling the stream and
  // NCCL's asynchronous error; on an error or at the limit aborts the communicator and throws.
  void finish(const char* op, std::size_t bytes);
  [[noreturn]] void abort_with(const std::string& message);
  ncclComm_t comm_ = nullptr;
  double wait_limit_ = 0;
  int device_ = 0;
  StreamOrder order_;
  std::optional<CudaStream> stream_;  // created once the device is selected
  std::optional<DeviceBuffer<float>> token_;
  int rank_ = 0, size_ = 1;
  TrafficLevel level_;
  TrafficCounters traffic_;
};

}  // namespace st

namespace st {

// Runs a host communicator (MPI across nodes) on device buffers: copies them to pinned host
// memory, runs the collective there, copies the result back. The two-level GPU composition is
// NCCL inside the node and this across nodes, for an MPI that is not CUDA-aware.
class HostStagedCommunicator final : public Communicator {
 public:
  HostStagedCommunicator(Communicator& host, int device, StreamOrder order = {});
  // The same, owning its host communicator (ranks that share a GPU: MPI between them).
  HostStagedCommunicator(std::unique_ptr<Communicator> host, int device, StreamOrder order = {});
  ~HostStagedCommunicator() override;
  HostStagedCommunicator(const HostStagedCommunicator&) = delete;
  HostStagedCommunicator& operator=(const HostStagedCommunicator&) = delete;
  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  LevelTraffic traffic() const override { return host_.traffic(); }
  MemorySpace memory_space() const override { return MemorySpace::device; }
  std::string transport() const override { return "MPI through pinned host memory"; }
  Memory allocate(std::size_t bytes) override;
  void copy_bytes(void* to, const void* from, std::size_t bytes, const void* ready = nullptr) override;
  void zero_bytes(void* data, std::size_t bytes, const void* ready = nullptr) override;

 protected:
  void run_all_reduce(Buffer buffer, ReduceOp op) override;
  void run_reduce_scatter(Buffer input, Buffer output, ReduceOp op) override;
  void run_all_gather(Buffer input, Buffer output) override;
  void run_broadcast(Buffer buffer, int root) override;
  void run_barrier() override { host_.barrier(); }

 private:
  // Pinned staging areas, grown on demand: a for inputs (and in-place buffers), b for outputs.
  Buffer stage(Buffer device, int which, bool copy_in);
  void unstage(Buffer device, Buffer host);
  std::unique_ptr<Communicator> owned_;  // the host communicator where this one owns it
  Communicator& host_;
  int device_ = 0;
  StreamOrder order_;
  std::optional<CudaStream> stream_;  // the copies, ordered after the compute
  void* pinned_[2] = {nullptr, nullptr};
  std::size_t capacity_[2] = {0, 0};
};

}  // namespace st
