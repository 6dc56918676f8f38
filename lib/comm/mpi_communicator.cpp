#include "comm/mpi_communicator.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>

#include "comm/mpi_check.hpp"

namespace st {
namespace {

// MPI counts are int: larger buffers go in pieces of this many elements.
constexpr std::size_t kPiece = std::size_t{1} << 30;

void add_bf16(void* in, void* inout, int* count, MPI_Datatype*) {
  const auto* a = static_cast<const Bf16*>(in);
  auto* b = static_cast<Bf16*>(inout);
  for (int i = 0; i < *count; ++i) b[i] = to_bf16(to_float(a[i]) + to_float(b[i]));
}

char* at(const Buffer& b, std::size_t element) { return static_cast<char*>(b.data) + element * size_of(b.type); }

// MpiWait::polling: poll briefly, then nap between polls; each poll also drives MPI's progress.
void complete(MPI_Request& request) {
  int done = 0;
  for (int polls = 0;; ++polls) {
    ST_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (polls > 2000) std::this_thread::sleep_for(std::chrono::microseconds(polls > 20000 ? 50 : 10));
  }
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, TrafficLevel level, MpiWait wait)
    : comm_(comm), wait_(wait), level_(level) {
  ST_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  ST_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  ST_CHECK_MPI(MPI_Op_create(&add_bf16, 1, &bf16_sum_));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && bf16_sum_ != MPI_OP_NULL) MPI_Op_free(&bf16_sum_);
}

MPI_Datatype MpiCommunicator::mpi_type(DataType t) {
  switch (t) {
    case DataType::f32: return MPI_FLOAT;
    case DataType::f64: return MPI_DOUBLE;
    case DataType::bf16: return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

void MpiCommunicator::run_all_reduce(Buffer b, ReduceOp op) {
  for (std::size_t begin = 0; begin < b.count; begin += kPiece) {
    const std::size_t count = std::min(kPiece, b.count - begin);
    void* data = at(b, begin);
    const int n = static_cast<int>(count);
    if (wait_ == MpiWait::blocking) {
      ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, data, n, mpi_type(b.type), sum_op(b.type), comm_));
    } else {
      MPI_Request request = MPI_REQUEST_NULL;
      ST_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, data, n, mpi_type(b.type), sum_op(b.type), comm_, &request));
      complete(request);
    }
  }
  if (op == ReduceOp::average && size_ > 1) scale_buffer(b, 1.0 / size_);
  traffic_.add(Collective::all_reduce, 2 * ring_share(b.bytes(), size_));
}

void MpiCommunicator::run_reduce_scatter(Buffer input, Buffer output, ReduceOp op) {
  require_reduce_scatter_shapes(input, output, size_);
  ST_REQUIRE(output.count <= static_cast<std::size_t>(INT_MAX), "reduce_scatter: chunk exceeds an MPI count");
  const int n = static_cast<int>(output.count);
  if (wait_ == MpiWait::blocking) {
    ST_CHECK_MPI(MPI_Reduce_scatter_block(input.data, output.data, n, mpi_type(input.type), sum_op(input.type), comm_));
  } else {
    MPI_Request request = MPI_REQUEST_NULL;
    ST_CHECK_MPI(MPI_Ireduce_scatter_block(input.data, output.data, n, mpi_type(input.type), sum_op(input.type), comm_,
                                           &request));
    complete(request);
  }
  if (op == ReduceOp::average && size_ > 1) scale_buffer(output, 1.0 / size_);
  traffic_.add(Collective::reduce_scatter, ring_share(input.bytes(), size_));
}

void MpiCommunicator::run_all_gather(Buffer input, Buffer output) {
  require_all_gather_shapes(input, output, size_);
  ST_REQUIRE(input.count <= static_cast<std::size_t>(INT_MAX), "all_gather: chunk exceeds an MPI count");
  const int n = static_cast<int>(input.count);
  const MPI_Datatype type = mpi_type(input.type);
  // MPI forbids a send buffer inside the receive buffer: say so with MPI_IN_PLACE instead.
  const void* send = gathers_in_place(input, output, rank_) ? MPI_IN_PLACE : input.data;
  if (wait_ == MpiWait::blocking) {
    ST_CHECK_MPI(MPI_Allgather(send, n, type, output.data, n, type, comm_));
  } else {
    MPI_Request request = MPI_REQUEST_NULL;
    ST_CHECK_MPI(MPI_Iallgather(send, n, type, output.data, n, type, comm_, &request));
    complete(request);
  }
  traffic_.add(Collective::all_gather, ring_share(output.bytes(), size_));
}

void MpiCommunicator::run_broadcast(Buffer b, int root) {
  for (std::size_t begin = 0; begin < b.count; begin += kPiece) {
    const std::size_t count = std::min(kPiece, b.count - begin);
    if (wait_ == MpiWait::blocking) {
      ST_CHECK_MPI(MPI_Bcast(at(b, begin), static_cast<int>(count), mpi_type(b.type), root, comm_));
    } else {
      MPI_Request request = MPI_REQUEST_NULL;
      ST_CHECK_MPI(MPI_Ibcast(at(b, begin), static_cast<int>(count), mpi_type(b.type), root, comm_, &request));
      complete(request);
    }
  }
  traffic_.add(Collective::broadcast, ring_share(b.bytes(), size_));
}

void MpiCommunicator::run_barrier() {
  if (wait_ == MpiWait::blocking) {
    ST_CHECK_MPI(MPI_Barrier(comm_));
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  ST_CHECK_MPI(MPI_Ibarrier(comm_, &request));
  complete(request);
}

LevelTraffic MpiCommunicator::traffic() const { return LevelTraffic::at(level_, traffic_); }

}  // namespace st
