#include "comm/shm_communicator.hpp"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace st {

ShmCommunicator::ShmCommunicator(MPI_Comm comm, Level level, std::size_t slot_bytes) : comm_(comm), level_(level) {
  ST_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  ST_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  slot_floats_ = slot_bytes / sizeof(float);
  ST_REQUIRE(slot_floats_ >= static_cast<std::size_t>(size_), "shared-memory slot too small for the group");
  void* base = nullptr;
  // Two halves per slot: one for inputs, one for all-reduce results.
  ST_CHECK_MPI(MPI_Win_allocate_shared(static_cast<MPI_Aint>(2 * slot_floats_ * sizeof(float)), sizeof(float),
                                       MPI_INFO_NULL, comm_, &base, &window_));
  ST_CHECK_MPI(MPI_Win_set_errhandler(window_, MPI_ERRORS_RETURN));
  slots_.resize(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    MPI_Aint size = 0;
    int unit = 0;
    void* pointer = nullptr;
    ST_CHECK_MPI(MPI_Win_shared_query(window_, r, &size, &unit, &pointer));
    slots_[static_cast<std::size_t>(r)] = static_cast<float*>(pointer);
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
    // Spin briefly, then yield: ranks may outnumber cores (tests, emulated nodes).
    for (int spins = 0; __atomic_load_n(release_[k], __ATOMIC_ACQUIRE) != sense_[k]; ++spins)
      if (spins > 200) sched_yield();
  }
  ST_CHECK_MPI(MPI_Win_sync(window_));
}

std::uint64_t ShmCommunicator::others_share(std::uint64_t bytes) const {
  return bytes * static_cast<std::uint64_t>(size_ - 1) / static_cast<std::uint64_t>(size_);
}

void ShmCommunicator::all_reduce(std::span<float> buffer, ReduceOp op) {
  const float factor = op == ReduceOp::average ? 1.0f / static_cast<float>(size_) : 1.0f;
  // Per piece, rank l reduces part l. It publishes only the parts the others reduce (input
  // half of its slot), adds the others' part l into its own buffer, copies the result to the
  // result half of its slot, and finally copies the other parts' results. Each part is summed
  // once, by its owner, so every rank ends with the same bits. Each rank moves about 4 bytes of memory per
  // byte of buffer (L = 2), against 5.5 for publish-everything.
  for (std::size_t begin = 0; begin < buffer.size(); begin += slot_floats_) {
    const std::size_t n = std::min(slot_floats_, buffer.size() - begin);
    float* data = buffer.data() + begin;
    const std::size_t part = (n + static_cast<std::size_t>(size_) - 1) / static_cast<std::size_t>(size_);
    auto part_range = [&](int r) {
      const std::size_t lo = std::min(n, static_cast<std::size_t>(r) * part);
      return std::pair{lo, std::min(n, lo + part)};
    };
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const auto [lo, hi] = part_range(r);
      std::memcpy(slot(rank_) + lo, data + lo, (hi - lo) * sizeof(float));
    }
    synchronize();
    const auto [my_lo, my_hi] = part_range(rank_);
    const auto lo = static_cast<std::ptrdiff_t>(my_lo), hi = static_cast<std::ptrdiff_t>(my_hi);
    float* result = slot(rank_) + slot_floats_;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const float* source = slot(r);
#pragma omp parallel for simd schedule(static)
      for (std::ptrdiff_t i = lo; i < hi; ++i) data[i] += source[i];
    }
#pragma omp parallel for simd schedule(static)
    for (std::ptrdiff_t i = lo; i < hi; ++i) result[i] = data[i] *= factor;
    synchronize();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const auto [rlo, rhi] = part_range(r);
      std::memcpy(data + rlo, slot(r) + slot_floats_ + rlo, (rhi - rlo) * sizeof(float));
    }
    synchronize();  // the result halves are free again
  }
  traffic_.add(Collective::all_reduce, 2 * others_share(buffer.size_bytes()));
}

void ShmCommunicator::all_reduce(std::span<double> buffer, ReduceOp op) {
  // A handful of scalars: not worth a second window.
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(buffer.size()), MPI_DOUBLE, MPI_SUM, comm_));
  if (op == ReduceOp::average)
    for (auto& x : buffer) x /= size_;
  traffic_.add(Collective::all_reduce, 2 * others_share(buffer.size_bytes()));
}

void ShmCommunicator::reduce_scatter(std::span<const float> input, std::span<float> output, ReduceOp op) {
  const std::size_t L = static_cast<std::size_t>(size_), c = output.size();
  ST_REQUIRE(input.size() == c * L, "reduce_scatter: input must hold size() x output elements");
  const float factor = op == ReduceOp::average ? 1.0f / static_cast<float>(size_) : 1.0f;
  // Pieces of p elements of every chunk: the slot holds L x p.
  const std::size_t p = slot_floats_ / L;
  for (std::size_t k = 0; k < c; k += p) {
    const std::size_t m = std::min(p, c - k);
    for (std::size_t j = 0; j < L; ++j) std::memcpy(slot(rank_) + j * m, input.data() + j * c + k, m * sizeof(float));
    synchronize();
    float* out = output.data() + k;
    std::fill(out, out + m, 0.0f);
    for (int r = 0; r < size_; ++r) {
      const float* source = slot(r) + static_cast<std::size_t>(rank_) * m;
#pragma omp simd
      for (std::size_t i = 0; i < m; ++i) out[i] += source[i];
    }
    if (factor != 1.0f)
      for (std::size_t i = 0; i < m; ++i) out[i] *= factor;
    synchronize();
  }
  traffic_.add(Collective::reduce_scatter, others_share(input.size_bytes()));
}

void ShmCommunicator::all_gather(std::span<const float> input, std::span<float> output) {
  const std::size_t L = static_cast<std::size_t>(size_), c = input.size();
  ST_REQUIRE(output.size() == c * L, "all_gather: output must hold size() x input elements");
  for (std::size_t k = 0; k < c; k += slot_floats_) {
    const std::size_t m = std::min(slot_floats_, c - k);
    std::memcpy(slot(rank_), input.data() + k, m * sizeof(float));
    synchronize();
    for (std::size_t r = 0; r < L; ++r) std::memcpy(output.data() + r * c + k, slot(static_cast<int>(r)), m * sizeof(float));
    synchronize();
  }
  traffic_.add(Collective::all_gather, others_share(output.size_bytes()));
}

void ShmCommunicator::broadcast(std::span<float> buffer, int root) {
  for (std::size_t k = 0; k < buffer.size(); k += slot_floats_) {
    const std::size_t m = std::min(slot_floats_, buffer.size() - k);
    if (rank_ == root) std::memcpy(slot(root), buffer.data() + k, m * sizeof(float));
    synchronize();
    if (rank_ != root) std::memcpy(buffer.data() + k, slot(root), m * sizeof(float));
    synchronize();
  }
  traffic_.add(Collective::broadcast, others_share(buffer.size_bytes()));
}

void ShmCommunicator::barrier() { synchronize(Counter::barrier); }

LevelTraffic ShmCommunicator::traffic() const {
  LevelTraffic t;
  (level_ == Level::intra ? t.intra : t.inter) = traffic_;
  return t;
}

}  // namespace st
