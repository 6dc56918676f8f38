#include "comm/nccl_communicator.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "comm/nccl_check.hpp"
#include "comm/device_wait.hpp"
#include "comm/mpi_check.hpp"

namespace st {

CudaStream::CudaStream() { ST_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
CudaStream::~CudaStream() {
  if (stream_) cudaStreamDestroy(stream_);  // a failure cannot be reported from a destructor
}

template <class T>
DeviceBuffer<T>::DeviceBuffer(std::size_t n) : size_(n) {
  void* p = nullptr;
  ST_CHECK_CUDA(cudaMalloc(&p, n * sizeof(T)));
  data_ = static_cast<T*>(p);
}
template <class T>
DeviceBuffer<T>::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}
template class DeviceBuffer<float>;
template class DeviceBuffer<double>;
template class DeviceBuffer<Bf16>;

NcclCommunicator::NcclCommunicator(MPI_Comm bootstrap, int device, TrafficLevel level, StreamOrder order,
                                   double wait_limit_seconds)
    : wait_limit_(wait_limit_seconds), device_(device), order_(std::move(order)), level_(level) {
  ST_CHECK_MPI(MPI_Comm_rank(bootstrap, &rank_));
  ST_CHECK_MPI(MPI_Comm_size(bootstrap, &size_));
  ST_CHECK_CUDA(cudaSetDevice(device_));
  ncclUniqueId id{};
  if (rank_ == 0) ST_CHECK_NCCL(ncclGetUniqueId(&id));
  ST_CHECK_MPI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, bootstrap));
  stream_.emplace();
  token_.emplace(1);  // the barrier's all-reduce: allocated once, not while collectives run
  ST_CHECK_NCCL(ncclCommInitRank(&comm_, size_, id, rank_));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) ncclCommDestroy(comm_);
}

void NcclCommunicator::begin(const void* ready) {
  ST_REQUIRE(comm_ != nullptr, "this NCCL communicator was aborted after an earlier collective failed; see above");
  ST_CHECK_CUDA(cudaSetDevice(device_));
  if (order_) order_(stream_->get(), ready);
}

void NcclCommunicator::finish(const char* op, std::size_t bytes) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  for (long polls = 0;; ++polls) {
    const cudaError_t state = cudaStreamQuery(stream_->get());
    if (state == cudaSuccess) return;
    if (state != cudaErrorNotReady) ST_CHECK_CUDA(state);
    // A peer that died shows here (a closed connection, a remote error) while the kernels on
    // the stream would wait for it forever; cudaStreamSynchronize would not return.
    ncclResult_t async = ncclSuccess;
    ST_CHECK_NCCL(ncclCommGetAsyncError(comm_, &async));
    if (async != ncclSuccess && async != ncclInProgress)
      abort_with(device_collective_failed(describe_device_collective(op, bytes, rank_, size_, level_),
                                          ncclGetErrorString(async), ncclGetLastError(comm_)));
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (wait_limit_ > 0 && waited > wait_limit_)
      abort_with(device_collective_timed_out(describe_device_collective(op, bytes, rank_, size_, level_), waited,
                                             wait_limit_));
    // Spin briefly (most collectives of a step take well under a millisecond to finish once
    // polled), then poll every 50 us so a long wait does not hold a core.
    if (polls < 2000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclCommunicator::abort_with(const std::string& message) {
  // Aborting ends the communicator's kernels on the device, so the stream and its buffers can
  // be freed; the communicator cannot be used again (begin() refuses).
  ncclCommAbort(comm_);  // the error below is the one to report, whatever abort returns
  comm_ = nullptr;
  throw Error(message);
}

namespace {
ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::average ? ncclAvg : ncclSum; }
ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::f32: return ncclFloat;
    case DataType::f64: return ncclDouble;
    case DataType::bf16: return ncclBfloat16;
  }
  return ncclFloat;
}
}  // namespace

void NcclCommunicator::run_all_reduce(Buffer b, ReduceOp op) {
  begin(b.ready);
  ST_CHECK_NCCL(ncclAllReduce(b.data, b.data, b.count, nccl_type(b.type), nccl_op(op), comm_, stream_->get()));
  finish("all_reduce", b.bytes());
  traffic_.add(Collective::all_reduce, 2 * ring_share(b.bytes(), size_));
}

void NcclCommunicator::run_reduce_scatter(Buffer input, Buffer output, ReduceOp op) {
  require_reduce_scatter_shapes(input, output, size_);
  begin(input.ready ? input.ready : output.ready);
  ST_CHECK_NCCL(ncclReduceScatter(input.data, output.data, output.count, nccl_type(input.type), nccl_op(op), comm_,
                                  stream_->get()));
  finish("reduce_scatter", input.bytes());
  traffic_.add(Collective::reduce_scatter, ring_share(input.bytes(), size_));
}

void NcclCommunicator::run_all_gather(Buffer input, Buffer output) {
  require_all_gather_shapes(input, output, size_);
  begin(input.ready ? input.ready : output.ready);
  ST_CHECK_NCCL(ncclAllGather(input.data, output.data, input.count, nccl_type(input.type), comm_, stream_->get()));
  finish("all_gather", output.bytes());
  traffic_.add(Collective::all_gather, ring_share(output.bytes(), size_));
}

void NcclCommunicator::run_broadcast(Buffer b, int root) {
  begin(b.ready);
  ST_CHECK_NCCL(ncclBroadcast(b.data, b.data, b.count, nccl_type(b.type), root, comm_, stream_->get()));
  finish("broadcast", b.bytes());
  traffic_.add(Collective::broadcast, ring_share(b.bytes(), size_));
}

void NcclCommunicator::run_barrier() {
  begin();
  ST_CHECK_NCCL(ncclAllReduce(token_->data(), token_->data(), 1, ncclFloat, ncclSum, comm_, stream_->get()));
  finish("barrier", sizeof(float));
}

LevelTraffic NcclCommunicator::traffic() const { return LevelTraffic::at(level_, traffic_); }

namespace {

// Device memory for a communicator's buffers, zeroed on its stream and finished before it is
// handed out (plain cudaMemset runs on the legacy stream, which a non-blocking stream does not
// wait for).
Memory zeroed_device_memory(int device, cudaStream_t stream, std::size_t bytes) {
  ST_CHECK_CUDA(cudaSetDevice(device));
  void* p = nullptr;
  ST_CHECK_CUDA(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)));
  std::shared_ptr<void> owner(p, [](void* q) { cudaFree(q); });  // a destructor cannot report a failure
  ST_CHECK_CUDA(cudaMemsetAsync(p, 0, bytes, stream));
  ST_CHECK_CUDA(cudaStreamSynchronize(stream));
  return Memory(std::move(owner), p, bytes, MemorySpace::device);
}

// A copy or a zeroing on `stream`, complete when the call returns.
void copy_on(cudaStream_t stream, void* to, const void* from, std::size_t bytes) {
  ST_CHECK_CUDA(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, stream));
  ST_CHECK_CUDA(cudaStreamSynchronize(stream));
}
void zero_on(cudaStream_t stream, void* data, std::size_t bytes) {
  ST_CHECK_CUDA(cudaMemsetAsync(data, 0, bytes, stream));
  ST_CHECK_CUDA(cudaStreamSynchronize(stream));
}

}  // namespace

Memory NcclCommunicator::allocate(std::size_t bytes) { return zeroed_device_memory(device_, stream_->get(), bytes); }

void NcclCommunicator::copy_bytes(void* to, const void* from, std::size_t bytes, const void* ready) {
  if (bytes == 0 || to == from) return;
  begin(ready);
  copy_on(stream_->get(), to, from, bytes);
}

void NcclCommunicator::zero_bytes(void* data, std::size_t bytes, const void* ready) {
  if (bytes == 0) return;
  begin(ready);
  zero_on(stream_->get(), data, bytes);
}

// The staged communicator's own buffers and moves are device memory too: it may stand in for a
// node's NCCL communicator in a two-level composition, which allocates, copies and zeroes
// through it.
Memory HostStagedCommunicator::allocate(std::size_t bytes) {
  return zeroed_device_memory(device_, stream_->get(), bytes);
}

void HostStagedCommunicator::copy_bytes(void* to, const void* from, std::size_t bytes, const void* ready) {
  if (bytes == 0 || to == from) return;
  ST_CHECK_CUDA(cudaSetDevice(device_));
  if (order_) order_(stream_->get(), ready);
  copy_on(stream_->get(), to, from, bytes);
}

void HostStagedCommunicator::zero_bytes(void* data, std::size_t bytes, const void* ready) {
  if (bytes == 0) return;
  ST_CHECK_CUDA(cudaSetDevice(device_));
  if (order_) order_(stream_->get(), ready);
  zero_on(stream_->get(), data, bytes);
}

}  // namespace st

namespace st {

HostStagedCommunicator::HostStagedCommunicator(Communicator& host, int device, StreamOrder order)
    : host_(host), device_(device), order_(std::move(order)) {
  ST_CHECK_CUDA(cudaSetDevice(device_));
  stream_.emplace();
}

HostStagedCommunicator::HostStagedCommunicator(std::unique_ptr<Communicator> host, int device, StreamOrder order)
    : HostStagedCommunicator(*host, device, std::move(order)) {
  owned_ = std::move(host);  // the same object host_ refers to, now held here
}

HostStagedCommunicator::~HostStagedCommunicator() {
  for (void* p : pinned_)
    if (p) cudaFreeHost(p);  // a failure cannot be reported from a destructor
}

Buffer HostStagedCommunicator::stage(Buffer device, int which, bool copy_in) {
  ST_CHECK_CUDA(cudaSetDevice(device_));
  if (capacity_[which] < device.bytes()) {
    void* old = pinned_[which];
    pinned_[which] = nullptr;  // a failed allocation below must leave no stale capacity behind
    capacity_[which] = 0;
    if (old) ST_CHECK_CUDA(cudaFreeHost(old));
    ST_CHECK_CUDA(cudaMallocHost(&pinned_[which], device.bytes()));
    capacity_[which] = device.bytes();
  }
  if (copy_in) {
    if (order_) order_(stream_->get(), device.ready);
    ST_CHECK_CUDA(cudaMemcpyAsync(pinned_[which], device.data, device.bytes(), cudaMemcpyDeviceToHost, stream_->get()));
    ST_CHECK_CUDA(cudaStreamSynchronize(stream_->get()));
  }
  return {pinned_[which], device.count, device.type};
}

void HostStagedCommunicator::unstage(Buffer device, Buffer host) {
  ST_CHECK_CUDA(cudaMemcpyAsync(device.data, host.data, device.bytes(), cudaMemcpyHostToDevice, stream_->get()));
  ST_CHECK_CUDA(cudaStreamSynchronize(stream_->get()));
}

void HostStagedCommunicator::run_all_reduce(Buffer buffer, ReduceOp op) {
  const Buffer host = stage(buffer, 0, true);
  host_.all_reduce(host, op);
  unstage(buffer, host);
}

void HostStagedCommunicator::run_reduce_scatter(Buffer input, Buffer output, ReduceOp op) {
  const Buffer in = stage(input, 0, true), out = stage(output, 1, false);
  host_.reduce_scatter(in, out, op);
  unstage(output, out);
}

void HostStagedCommunicator::run_all_gather(Buffer input, Buffer output) {
  const Buffer in = stage(input, 0, true), out = stage(output, 1, false);
  host_.all_gather(in, out);
  unstage(output, out);
}

void HostStagedCommunicator::run_broadcast(Buffer buffer, int root) {
  const Buffer host = stage(buffer, 0, true);
  host_.broadcast(host, root);
  unstage(buffer, host);
}

}  // namespace st
