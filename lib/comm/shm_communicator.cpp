#include "comm/shm_communicator.hpp"

#include <chrono>
#include <thread>

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace st {

ShmCommunicator::ShmCommunicator(MPI_Comm comm, TrafficLevel level, std::size_t slot_bytes) : comm_(comm), level_(level) {
  ST_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  ST_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  slot_bytes_ = slot_bytes / 8 * 8;
  ST_REQUIRE(slot_bytes_ >= 8 * static_cast<std::size_t>(size_), "shared-memory slot too small for the group");
  void* base = nullptr;
  // Two halves per slot: one for inputs, one for all-reduce results.
  ST_CHECK_MPI(MPI_Win_allocate_shared(static_cast<MPI_Aint>(2 * slot_bytes_), 1,
                                       MPI_INFO_NULL, comm_, &base, &window_));
  ST_CHECK_MPI(MPI_Win_set_errhandler(window_, MPI_ERRORS_RETURN));
  slots_.resize(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    MPI_Aint size = 0;
    int unit = 0;
    void* pointer = nullptr;
    ST_CHECK_MPI(MPI_Win_shared_query(window_, r, &size, &unit, &pointer));
    slots_[static_cast<std::size_t>(r)] = static_cast<char*>(pointer);
  }
  // The barrier's two counters live on separate cache lines of rank 0's control area.
  constexpr MPI_Aint kControlBytes = 256;
  void* control = nullptr;
  ST_CHECK_MPI(MPI_Win_allocate_shared(rank_ == 0 ? kControlBytes : 0, 1, MPI_INFO_NULL, comm_, &control,
                                       &control_window_));
  MPI_Aint control_size = 0;
  int control_unit = 0;
  ST_CHECK_MPI(MPI_Win_shared_query(control_window_, 0, &control_size, &control_unit, &control));
  for (int k = 0; k < 2; ++k) {
    arrived_[k] = reinterpret_cast<int*>(static_cast<char*>(control) + 128 * k);
    release_[k] = reinterpret_cast<int*>(static_cast<char*>(control) + 128 * k + 64);
    if (rank_ == 0) *arrived_[k] = *release_[k] = 0;
  }
  // A passive-target epoch for the windows' life; MPI_Win_sync orders the plain accesses.
  ST_CHECK_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, window_));
  ST_CHECK_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, control_window_));
  ST_CHECK_MPI(MPI_Win_sync(control_window_));
  ST_CHECK_MPI(MPI_Barrier(comm_));
}

ShmCommunicator::~ShmCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || window_ == MPI_WIN_NULL) return;
  MPI_Win_unlock_all(window_);  // failures cannot be reported from a destructor
  MPI_Win_free(&window_);
  MPI_Win_unlock_all(control_window_);
  MPI_Win_free(&control_window_);
}

void ShmCommunicator::synchronize(Counter which) {
  const int k = static_cast<int>(which);
  ST_CHECK_MPI(MPI_Win_sync(window_));
  sense_[k] = 1 - sense_[k];
  if (__atomic_add_fetch(arrived_[k], 1, __ATOMIC_ACQ_REL) == size_) {
    __atomic_store_n(arrived_[k], 0, __ATOMIC_RELAXED);
    __atomic_store_n(release_[k], sense_[k], __ATOMIC_RELEASE);
  } else {
    // Spin briefly (the others are usually microseconds away), then yield, then nap: when ranks
    // and their progress threads outnumber the cores (emulated nodes, oversubscribed tests), a
    // waiter that keeps yielding still takes the core from the compute it is waiting for.
    for (int spins = 0; __atomic_load_n(release_[k], __ATOMIC_ACQUIRE) != sense_[k]; ++spins) {
      if (spins < 2000) continue;
      if (spins < 2100) sched_yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  ST_CHECK_MPI(MPI_Win_sync(window_));
}

void ShmCommunicator::run_all_reduce(Buffer buffer, ReduceOp op) {
  const std::size_t e = size_of(buffer.type), piece = slot_bytes_ / e;
  // Per piece, rank l reduces part l. It publishes only the parts the others reduce (input
  // half of its slot), adds the others' part l into its own buffer, copies the result to the
  // result half of its slot, and finally copies the other parts' results. Each part is summed
  // once, by its owner, so every rank ends with the same bits.
  for (std::size_t begin = 0; begin < buffer.count; begin += piece) {
    const std::size_t n = std::min(piece, buffer.count - begin);
    char* data = static_cast<char*>(buffer.data) + begin * e;
    const std::size_t part = (n + static_cast<std::size_t>(size_) - 1) / static_cast<std::size_t>(size_);
    auto part_range = [&](int r) {
      const std::size_t lo = std::min(n, static_cast<std::size_t>(r) * part);
      return std::pair{lo, std::min(n, lo + part)};
    };
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const auto [lo, hi] = part_range(r);
      std::memcpy(slot(rank_) + lo * e, data + lo * e, (hi - lo) * e);
    }
    synchronize();
    const auto [lo, hi] = part_range(rank_);
    const Buffer mine{data + lo * e, hi - lo, buffer.type};
    for (int r = 0; r < size_; ++r)
      if (r != rank_) accumulate_buffer(mine, slot(r) + lo * e, hi - lo);
    if (op == ReduceOp::average) scale_buffer(mine, 1.0 / size_);
    std::memcpy(slot(rank_) + slot_bytes_ + lo * e, mine.data, mine.bytes());
    synchronize();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const auto [rlo, rhi] = part_range(r);
      std::memcpy(data + rlo * e, slot(r) + slot_bytes_ + rlo * e, (rhi - rlo) * e);
    }
    synchronize();  // the result halves are free again
  }
  traffic_.add(Collective::all_reduce, 2 * ring_share(buffer.bytes(), size_));
}

void ShmCommunicator::run_reduce_scatter(Buffer input, Buffer output, ReduceOp op) {
  require_reduce_scatter_shapes(input, output, size_);
  const std::size_t L = static_cast<std::size_t>(size_), c = output.count, e = size_of(input.type);
  // Pieces of p elements of every chunk: the slot holds L x p.
  const std::size_t p = slot_bytes_ / e / L;
  const char* in = static_cast<const char*>(input.data);
  for (std::size_t k = 0; k < c; k += p) {
    const std::size_t m = std::min(p, c - k);
    for (std::size_t j = 0; j < L; ++j) std::memcpy(slot(rank_) + j * m * e, in + (j * c + k) * e, m * e);
    synchronize();
    const Buffer out{static_cast<char*>(output.data) + k * e, m, output.type};
    std::memcpy(out.data, slot(0) + static_cast<std::size_t>(rank_) * m * e, m * e);
    for (int r = 1; r < size_; ++r) accumulate_buffer(out, slot(r) + static_cast<std::size_t>(rank_) * m * e, m);
    if (op == ReduceOp::average) scale_buffer(out, 1.0 / size_);
    synchronize();
  }
  traffic_.add(Collective::reduce_scatter, ring_share(input.bytes(), size_));
}

void ShmCommunicator::run_all_gather(Buffer input, Buffer output) {
  require_all_gather_shapes(input, output, size_);
  const std::size_t L = static_cast<std::size_t>(size_), c = input.count, e = size_of(input.type);
  const std::size_t piece = slot_bytes_ / e;
  for (std::size_t k = 0; k < c; k += piece) {
    const std::size_t m = std::min(piece, c - k);
    std::memcpy(slot(rank_), static_cast<const char*>(input.data) + k * e, m * e);
    synchronize();
    for (std::size_t r = 0; r < L; ++r)
      std::memcpy(static_cast<char*>(output.data) + (r * c + k) * e, slot(static_cast<int>(r)), m * e);
    synchronize();
  }
  traffic_.add(Collective::all_gather, ring_share(output.bytes(), size_));
}

void ShmCommunicator::run_broadcast(Buffer buffer, int root) {
  const std::size_t e = size_of(buffer.type), piece = slot_bytes_ / e;
  char* data = static_cast<char*>(buffer.data);
  for (std::size_t k = 0; k < buffer.count; k += piece) {
    const std::size_t m = std::min(piece, buffer.count - k);
    if (rank_ == root) std::memcpy(slot(root), data + k * e, m * e);
    synchronize();
    if (rank_ != root) std::memcpy(data + k * e, slot(root), m * e);
    synchronize();
  }
  traffic_.add(Collective::broadcast, ring_share(buffer.bytes(), size_));
}

void ShmCommunicator::run_barrier() { synchronize(Counter::barrier); }

LevelTraffic ShmCommunicator::traffic() const { return LevelTraffic::at(level_, traffic_); }

}  // namespace st
