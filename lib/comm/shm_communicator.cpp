#include "comm/shm_communicator.hpp"

#include <chrono>
#include <thread>

#include <sched.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <exception>

#include "comm/mpi_check.hpp"

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
  // Rank 0's control area: the barrier's two counters on cache lines of their own, then a line
  // per rank where it states where its buffer lies (begin_collective).
  const MPI_Aint kControlBytes = 256 + 64 * static_cast<MPI_Aint>(size_);
  void* control = nullptr;
  ST_CHECK_MPI(MPI_Win_allocate_shared(rank_ == 0 ? kControlBytes : 0, 1, MPI_INFO_NULL, comm_, &control,
                                       &control_window_));
  MPI_Aint control_size = 0;
  int control_unit = 0;
  ST_CHECK_MPI(MPI_Win_shared_query(control_window_, 0, &control_size, &control_unit, &control));
  control_ = static_cast<char*>(control);
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
  if (finalized || window_ == MPI_WIN_NULL || std::uncaught_exceptions() > 0) return;  // see Region
  MPI_Win_unlock_all(window_);  // failures cannot be reported from a destructor
  MPI_Win_free(&window_);
  MPI_Win_unlock_all(control_window_);
  MPI_Win_free(&control_window_);
}

struct ShmCommunicator::Region {
  MPI_Win window = MPI_WIN_NULL;
  std::vector<char*> parts;  // each rank's part, as this process maps it
  std::size_t bytes = 0;     // of each part
  Region() = default;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() {
    // Freeing is collective: not while an error unwinds this rank alone (the job is about to
    // end, and the others may never come to free it).
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && window != MPI_WIN_NULL && std::uncaught_exceptions() == 0)
      MPI_Win_free(&window);  // cannot report from a destructor
  }
};

namespace {
// An MPI_Info for the life of a scope.
class Info {
 public:
  Info() { ST_CHECK_MPI(MPI_Info_create(&info_)); }
  ~Info() { MPI_Info_free(&info_); }
  Info(const Info&) = delete;
  Info& operator=(const Info&) = delete;
  void set(const char* key, const char* value) { ST_CHECK_MPI(MPI_Info_set(info_, key, value)); }
  MPI_Info get() const { return info_; }

 private:
  MPI_Info info_ = MPI_INFO_NULL;
};

// Where Open MPI puts the files behind shared windows, and how much room is left there.
std::string backing_directory() {
  const char* dir = std::getenv("OMPI_MCA_shmem_mmap_backing_file_base_dir");
  return dir && *dir ? dir : "/dev/shm";
}
std::uint64_t backing_free_bytes() {
  struct statvfs fs {};
  if (statvfs(backing_directory().c_str(), &fs) != 0) return UINT64_MAX;  // unknown: Open MPI chooses elsewhere
  return static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
}
}  // namespace

Memory ShmCommunicator::allocate(std::size_t bytes) {
  // Each rank's part on pages of its own (noncontig), rounded to whole pages.
  constexpr std::size_t kPage = 4096;
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  // Every rank decides the same: all parts in shared memory, or none.
  const std::uint64_t free_bytes = backing_free_bytes();
  const bool under_limit = rounded <= shared_limit_;
  // With room to spare for the window's own bookkeeping and whatever else the node is writing.
  const std::uint64_t needed = (rounded + (std::uint64_t{1} << 20)) * static_cast<std::uint64_t>(size_);
  int fits = under_limit && needed <= free_bytes ? 1 : 0;
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &fits, 1, MPI_INT, MPI_MIN, comm_));
  if (!fits) {
    if (rank_ == 0 && !said_private_) {
      const std::string why = !under_limit ? "over this communicator's limit of " + std::to_string(shared_limit_) + " bytes per rank"
                                           : backing_directory() + " has " + std::to_string(free_bytes) + " bytes free for " +
                                                 std::to_string(size_) + " ranks' parts";
      std::fprintf(stderr,
                   "shardtrain: note: a %zu-byte buffer per rank does not fit in shared memory (%s); it stays in "
                   "process memory and its collectives copy through staging slots\n",
                   bytes, why.c_str());
      said_private_ = true;
    }
    return Memory::private_memory(bytes);
  }
  Info info;
  info.set("alloc_shared_noncontig", "true");
  auto region = std::make_shared<Region>();
  region->bytes = rounded;
  void* base = nullptr;
  ST_CHECK_MPI(MPI_Win_allocate_shared(static_cast<MPI_Aint>(rounded), 1, info.get(), comm_, &base, &region->window));
  ST_CHECK_MPI(MPI_Win_set_errhandler(region->window, MPI_ERRORS_RETURN));
  region->parts.resize(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    MPI_Aint size = 0;
    int unit = 0;
    void* pointer = nullptr;
    ST_CHECK_MPI(MPI_Win_shared_query(region->window, r, &size, &unit, &pointer));
    ST_REQUIRE(static_cast<std::size_t>(size) >= rounded, "shared region smaller than asked for");
    region->parts[static_cast<std::size_t>(r)] = static_cast<char*>(pointer);
  }
  std::memset(base, 0, rounded);
  regions_.push_back(region);
  // The handle shares ownership of the region and points at this rank's part.
  return Memory(std::shared_ptr<void>(region, base), base, bytes);
}

ShmCommunicator::Place ShmCommunicator::place_of(const void* data, std::size_t bytes) const {
  const char* p = static_cast<const char*>(data);
  for (std::size_t i = 0; i < regions_.size(); ++i) {
    const std::shared_ptr<Region> region = regions_[i].lock();
    if (!region) continue;
    const char* part = region->parts[static_cast<std::size_t>(rank_)];
    if (p >= part && p + bytes <= part + region->bytes)
      return {static_cast<std::int64_t>(i), static_cast<std::uint64_t>(p - part)};
  }
  return {};
}

ShmCommunicator::Place& ShmCommunicator::place_line(int r) const {
  return *reinterpret_cast<Place*>(control_ + 256 + 64 * r);
}

std::vector<char*> ShmCommunicator::begin_collective(const void* data, std::size_t bytes,
                                                     const std::function<void()>& publish_first) {
  ++collectives_;
  const Place mine = place_of(data, bytes);
  place_line(rank_) = mine;
  if (mine.region < 0) publish_first();
  synchronize();
  // Every rank reads the same lines, so every rank takes the same path. (Nobody writes its line
  // again before the next collective, which starts after this one's last synchronisation.)
  std::vector<char*> buffers(static_cast<std::size_t>(size_));
  bool all_shared = true, any_shared = false;
  for (int r = 0; r < size_; ++r) {
    const Place place = place_line(r);
    if (place.region < 0) {
      all_shared = false;
      continue;
    }
    any_shared = true;
    const std::shared_ptr<Region> region =
        place.region < static_cast<std::int64_t>(regions_.size()) ? regions_[static_cast<std::size_t>(place.region)].lock() : nullptr;
    ST_REQUIRE(region, "shared-memory collective: a rank's buffer lies in a region this rank does not map");
    buffers[static_cast<std::size_t>(r)] = region->parts[static_cast<std::size_t>(r)] + place.offset;
  }
  if (all_shared) {
    ++in_place_;
    return buffers;
  }
  if (any_shared) {  // some ranks skipped publishing: they catch up, and all meet again
    if (mine.region >= 0) publish_first();
    synchronize();
  }
  return {};
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

// Per piece, rank l reduces part l: each part is summed once, by its owner, in rank order (its
// own data first), so every rank ends with the same bits on either path.
namespace {
std::pair<std::size_t, std::size_t> part_of(std::size_t n, int parts, int r) {
  const std::size_t part = (n + static_cast<std::size_t>(parts) - 1) / static_cast<std::size_t>(parts);
  const std::size_t lo = std::min(n, static_cast<std::size_t>(r) * part);
  return {lo, std::min(n, lo + part)};
}
}  // namespace

void ShmCommunicator::publish_others_parts(const char* piece, std::size_t n, std::size_t e) {
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const auto [lo, hi] = part_of(n, size_, r);
    std::memcpy(slot(rank_) + lo * e, piece + lo * e, (hi - lo) * e);
  }
}

void ShmCommunicator::run_all_reduce(Buffer buffer, ReduceOp op) {
  traffic_.add(Collective::all_reduce, 2 * ring_share(buffer.bytes(), size_));
  if (buffer.count == 0) return;
  const std::size_t e = size_of(buffer.type), piece = slot_bytes_ / e;
  // The slot path's first step: publish the parts of the first piece the others reduce.
  auto publish_first = [&] { publish_others_parts(static_cast<const char*>(buffer.data), std::min(piece, buffer.count), e); };
  const std::vector<char*> buffers = begin_collective(buffer.data, buffer.bytes(), publish_first);
  if (!buffers.empty())
    all_reduce_in_place(buffer, op, buffers);
  else
    all_reduce_through_slots(buffer, op);
}

void ShmCommunicator::all_reduce_in_place(Buffer buffer, ReduceOp op, const std::vector<char*>& buffers) {
  // Per piece (kept in cache between its two passes): rank l sums part l of every rank's buffer
  // into its own, then, once all have, copies the other parts from their owners' buffers. Only
  // the owner writes a part, and only after everyone has read it, so no staging is needed.
  const std::size_t e = size_of(buffer.type), piece = slot_bytes_ / e;
  char* data = static_cast<char*>(buffer.data);
  std::vector<const void*> terms;
  for (std::size_t begin = 0; begin < buffer.count; begin += piece) {
    const std::size_t n = std::min(piece, buffer.count - begin), at = begin * e;
    const auto [lo, hi] = part_of(n, size_, rank_);
    const Buffer mine{data + at + lo * e, hi - lo, buffer.type};
    terms.clear();  // its own part first, then the others' in rank order
    terms.push_back(mine.data);
    for (int r = 0; r < size_; ++r)
      if (r != rank_) terms.push_back(buffers[static_cast<std::size_t>(r)] + at + lo * e);
    sum_buffers(mine, terms, hi - lo);
    if (op == ReduceOp::average) scale_buffer(mine, 1.0 / size_);
    synchronize();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const auto [rlo, rhi] = part_of(n, size_, r);
      std::memcpy(data + at + rlo * e, buffers[static_cast<std::size_t>(r)] + at + rlo * e, (rhi - rlo) * e);
    }
  }
  synchronize();  // nobody changes its buffer while another still reads it
}

void ShmCommunicator::all_reduce_through_slots(Buffer buffer, ReduceOp op) {
  // Per piece: each rank publishes the parts the others reduce (input half of its slot), adds
  // the others' part l into its own buffer, copies the result to the result half of its slot,
  // and finally copies the other parts' results. The first piece is published already.
  const std::size_t e = size_of(buffer.type), piece = slot_bytes_ / e;
  std::vector<const void*> terms;
  for (std::size_t begin = 0; begin < buffer.count; begin += piece) {
    const std::size_t n = std::min(piece, buffer.count - begin);
    char* data = static_cast<char*>(buffer.data) + begin * e;
    if (begin > 0) {
      publish_others_parts(data, n, e);
      synchronize();
    }
    const auto [lo, hi] = part_of(n, size_, rank_);
    const Buffer mine{data + lo * e, hi - lo, buffer.type};
    terms.clear();  // its own part first, then the others' in rank order
    terms.push_back(mine.data);
    for (int r = 0; r < size_; ++r)
      if (r != rank_) terms.push_back(slot(r) + lo * e);
    sum_buffers(mine, terms, hi - lo);
    if (op == ReduceOp::average) scale_buffer(mine, 1.0 / size_);
    std::memcpy(slot(rank_) + slot_bytes_ + lo * e, mine.data, mine.bytes());
    synchronize();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const auto [rlo, rhi] = part_of(n, size_, r);
      std::memcpy(data + rlo * e, slot(r) + slot_bytes_ + rlo * e, (rhi - rlo) * e);
    }
    synchronize();  // the result halves are free again
  }
}

void ShmCommunicator::run_reduce_scatter(Buffer input, Buffer output, ReduceOp op) {
  require_reduce_scatter_shapes(input, output, size_);
  traffic_.add(Collective::reduce_scatter, ring_share(input.bytes(), size_));
  const std::size_t L = static_cast<std::size_t>(size_), c = output.count, e = size_of(input.type);
  if (c == 0) return;
  const std::size_t mine = static_cast<std::size_t>(rank_) * c * e;
  const char* in = static_cast<const char*>(input.data);
  // Rank l's output is chunk l of every rank's input, summed in rank order: pieces of p elements
  // of every chunk (the slot holds L x p).
  const std::size_t p = slot_bytes_ / e / L;
  auto publish = [&](std::size_t k) {
    const std::size_t m = std::min(p, c - k);
    for (std::size_t j = 0; j < L; ++j) std::memcpy(slot(rank_) + j * m * e, in + (j * c + k) * e, m * e);
  };
  const std::vector<char*> inputs = begin_collective(input.data, input.bytes(), [&] { publish(0); });
  std::vector<const void*> terms;
  for (std::size_t k = 0; k < c; k += p) {
    const std::size_t m = std::min(p, c - k);
    const Buffer out{static_cast<char*>(output.data) + k * e, m, output.type};
    if (!inputs.empty()) {
      terms.clear();
      for (std::size_t r = 0; r < L; ++r) terms.push_back(inputs[r] + mine + k * e);
      sum_buffers(out, terms, m);
    } else {
      if (k > 0) {
        publish(k);
        synchronize();
      }
      terms.clear();
      for (int r = 0; r < size_; ++r) terms.push_back(slot(r) + static_cast<std::size_t>(rank_) * m * e);
      sum_buffers(out, terms, m);
      synchronize();  // the slots are free again
    }
    if (op == ReduceOp::average) scale_buffer(out, 1.0 / size_);
  }
  if (!inputs.empty()) synchronize();  // nobody changes its input while another still reads it
}

void ShmCommunicator::run_all_gather(Buffer input, Buffer output) {
  require_all_gather_shapes(input, output, size_);
  traffic_.add(Collective::all_gather, ring_share(output.bytes(), size_));
  const std::size_t L = static_cast<std::size_t>(size_), c = input.count, e = size_of(input.type);
  if (c == 0) return;
  const std::size_t piece = slot_bytes_ / e;
  const char* in = static_cast<const char*>(input.data);
  char* out = static_cast<char*>(output.data);
  auto publish = [&](std::size_t k) { std::memcpy(slot(rank_), in + k * e, std::min(piece, c - k) * e); };
  const std::vector<char*> inputs = begin_collective(input.data, input.bytes(), [&] { publish(0); });
  if (!inputs.empty()) {
    for (std::size_t r = 0; r < L; ++r)
      if (out + r * c * e != inputs[r]) std::memcpy(out + r * c * e, inputs[r], c * e);  // own chunk may be in place
    synchronize();  // nobody changes its input while another still reads it
    return;
  }
  for (std::size_t k = 0; k < c; k += piece) {
    const std::size_t m = std::min(piece, c - k);
    if (k > 0) {
      publish(k);
      synchronize();
    }
    for (std::size_t r = 0; r < L; ++r) std::memcpy(out + (r * c + k) * e, slot(static_cast<int>(r)), m * e);
    synchronize();
  }
}

void ShmCommunicator::run_broadcast(Buffer buffer, int root) {
  traffic_.add(Collective::broadcast, ring_share(buffer.bytes(), size_));
  if (buffer.count == 0) return;
  const std::size_t e = size_of(buffer.type), piece = slot_bytes_ / e;
  char* data = static_cast<char*>(buffer.data);
  // Slot path: piece j goes through half j % 2 of the root's slot, so the root publishes the next
  // piece while the others copy this one, one synchronisation per piece.
  auto staged = [&](std::size_t k) { return slot(root) + (k / piece) % 2 * slot_bytes_; };
  auto publish = [&](std::size_t k) {
    if (rank_ == root) std::memcpy(staged(k), data + k * e, std::min(piece, buffer.count - k) * e);
  };
  const std::vector<char*> buffers = begin_collective(buffer.data, buffer.bytes(), [&] { publish(0); });
  if (!buffers.empty()) {
    if (rank_ != root) std::memcpy(data, buffers[static_cast<std::size_t>(root)], buffer.bytes());
    synchronize();  // the root keeps its buffer unchanged until everyone has its copy
    return;
  }
  for (std::size_t k = 0; k < buffer.count; k += piece) {
    const std::size_t m = std::min(piece, buffer.count - k);
    // The other half was last read for the previous piece, which every rank finished before the
    // last synchronisation.
    if (k + piece < buffer.count) publish(k + piece);
    if (rank_ != root) std::memcpy(data + k * e, staged(k), m * e);
    synchronize();
  }
}

void ShmCommunicator::run_barrier() { synchronize(Counter::barrier); }

LevelTraffic ShmCommunicator::traffic() const { return LevelTraffic::at(level_, traffic_); }

}  // namespace st
