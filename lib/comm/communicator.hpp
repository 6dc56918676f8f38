#pragma once
// The seam between the training code and a collective library. Backends (MPI today, NCCL with
// the CUDA build) implement it for one group of ranks; TwoLevelCommunicator composes a
// node-local and a cross-node one behind the same interface.
#include <array>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/buffer.hpp"

namespace st {

enum class ReduceOp { sum, average };

enum class Collective { all_reduce, reduce_scatter, all_gather, broadcast };
inline constexpr std::size_t kCollectiveKinds = 4;

// Bytes this rank sends, per collective, as a ring algorithm moves them on a group of N:
// all-reduce 2 (N-1)/N of the buffer, reduce-scatter (N-1)/N of the input, all-gather (N-1)/N
// of the output, broadcast (N-1)/N of the buffer.
struct TrafficCounters {
  std::array<std::uint64_t, kCollectiveKinds> bytes{};
  void add(Collective c, std::uint64_t n) { bytes[static_cast<std::size_t>(c)] += n; }
  std::uint64_t of(Collective c) const { return bytes[static_cast<std::size_t>(c)]; }
  std::uint64_t total() const {
    std::uint64_t t = 0;
    for (auto b : bytes) t += b;
    return t;
  }
  TrafficCounters& operator+=(const TrafficCounters& o) {
    for (std::size_t i = 0; i < kCollectiveKinds; ++i) bytes[i] += o.bytes[i];
    return *this;
  }
};

// The share of `bytes` a ring over `size` ranks sends per rank: bytes x (N-1)/N.
inline std::uint64_t ring_share(std::uint64_t bytes, int size) {
  return bytes * static_cast<std::uint64_t>(size - 1) / static_cast<std::uint64_t>(size);
}

// Traffic split by level: inside a node and across nodes.
enum class TrafficLevel { intra, inter };
struct LevelTraffic {
  TrafficCounters intra, inter;
  std::uint64_t total() const { return intra.total() + inter.total(); }
  // One backend's counters, booked at the level its group spans.
  static LevelTraffic at(TrafficLevel level, const TrafficCounters& counters) {
    LevelTraffic t;
    (level == TrafficLevel::intra ? t.intra : t.inter) = counters;
    return t;
  }
};

// A collective in flight. wait() blocks until it is done and rethrows its error, if any; a
// request that is never waited for is waited for by its destructor (a buffer must not be
// released under a running collective).
class Request {
 public:
  Request() = default;  // an already completed request
  explicit Request(std::future<void> done) : done_(std::move(done)) {}
  Request(Request&&) noexcept = default;
  Request& operator=(Request&& other) noexcept {
    if (this != &other) {
      finish_quietly();
      done_ = std::move(other.done_);
    }
    return *this;
  }
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request() { finish_quietly(); }
  void wait() {
    if (done_.valid()) done_.get();
  }

 private:
  void finish_quietly() noexcept {
    if (!done_.valid()) return;
    try {
      done_.get();
    } catch (...) {  // the owner did not wait, so it did not want the error; the job aborts elsewhere
    }
  }
  std::future<void> done_;
};

// The public calls take typed spans (float, double, Bf16) and forward to the backend's
// run_* functions, which see a Buffer; decorators forward Buffers unchanged.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual LevelTraffic traffic() const = 0;

  // In place over the whole buffer.
  template <class T>
  void all_reduce(std::span<T> buffer, ReduceOp op) { run_all_reduce(Buffer::of(buffer), op); }
  // input holds size() x chunk elements (pad with shard_range's rule); rank i receives the
  // reduction of chunk i in output (chunk elements).
  template <class T>
  void reduce_scatter(std::span<const T> input, std::span<T> output, ReduceOp op) {
    run_reduce_scatter(Buffer::of(input), Buffer::of(output), op);
  }
  template <class T>
  void reduce_scatter(std::span<T> input, std::span<T> output, ReduceOp op) {
    run_reduce_scatter(Buffer::of(input), Buffer::of(output), op);
  }
  // input: this rank's chunk; output: size() x chunk, chunk i from rank i. input may be this
  // rank's own chunk of output (an in-place all-gather).
  template <class T>
  void all_gather(std::span<const T> input, std::span<T> output) { run_all_gather(Buffer::of(input), Buffer::of(output)); }
  template <class T>
  void all_gather(std::span<T> input, std::span<T> output) { run_all_gather(Buffer::of(input), Buffer::of(output)); }
  template <class T>
  void broadcast(std::span<T> buffer, int root) { run_broadcast(Buffer::of(buffer), root); }
  void barrier() { run_barrier(); }

  // Memory for a buffer this communicator will reduce or gather many times. A backend whose
  // ranks share memory hands out memory they all map and then works on such buffers in place,
  // skipping the copies through its own staging area; the others hand out process memory.
  // Collective over the group: every rank calls it with the same size, in the same order.
  virtual Memory allocate(std::size_t bytes) { return Memory::private_memory(bytes); }
  // Where the buffers this communicator works on live, and the byte moves a composition of
  // communicators (two-level) makes on them: plain memcpy/memset on the host; a device
  // backend copies on its device, ordered after the compute its buffers come from.
  virtual MemorySpace memory_space() const { return MemorySpace::host; }
  // How a device backend moves its bytes, for the run's description ("NCCL"); empty for the
  // host's communicators, which the stack names from its settings.
  virtual std::string transport() const { return {}; }
  // `ready`: the marker of the work the bytes come from (Buffer::ready).
  virtual void copy_bytes(void* to, const void* from, std::size_t bytes, const void* ready = nullptr);
  virtual void zero_bytes(void* data, std::size_t bytes, const void* ready = nullptr);
  // The same for vectors.
  template <class T>
  void all_reduce(std::vector<T>& b, ReduceOp op) { all_reduce(std::span<T>(b), op); }
  template <class T>
  void reduce_scatter(const std::vector<T>& in, std::vector<T>& out, ReduceOp op) {
    reduce_scatter(std::span<const T>(in), std::span<T>(out), op);
  }
  template <class T>
  void all_gather(const std::vector<T>& in, std::vector<T>& out) { all_gather(std::span<const T>(in), std::span<T>(out)); }
  template <class T>
  void broadcast(std::vector<T>& b, int root) { broadcast(std::span<T>(b), root); }

  // Non-blocking forms: the buffers must stay alive and untouched until the request is waited
  // for. Backends run them to completion before returning; AsyncCommunicator overlaps them.
  template <class T>
  Request start_all_reduce(std::span<T> buffer, ReduceOp op) { return start_all_reduce(Buffer::of(buffer), op); }
  template <class T>
  Request start_reduce_scatter(std::span<const T> input, std::span<T> output, ReduceOp op) {
    return start_reduce_scatter(Buffer::of(input), Buffer::of(output), op);
  }
  template <class T>
  Request start_reduce_scatter(const std::vector<T>& input, std::vector<T>& output, ReduceOp op) {
    return start_reduce_scatter(std::span<const T>(input), std::span<T>(output), op);
  }
  template <class T>
  Request start_all_gather(std::span<const T> input, std::span<T> output) {
    return start_all_gather(Buffer::of(input), Buffer::of(output));
  }
  template <class T>
  Request start_all_gather(const std::vector<T>& input, std::vector<T>& output) {
    return start_all_gather(std::span<const T>(input), std::span<T>(output));
  }

  // The Buffer level, for decorators and generic code.
  void all_reduce(Buffer b, ReduceOp op) { run_all_reduce(b, op); }
  void reduce_scatter(Buffer in, Buffer out, ReduceOp op) { run_reduce_scatter(in, out, op); }
  void all_gather(Buffer in, Buffer out) { run_all_gather(in, out); }
  void broadcast(Buffer b, int root) { run_broadcast(b, root); }
  virtual Request start_all_reduce(Buffer b, ReduceOp op) {
    run_all_reduce(b, op);
    return {};
  }
  virtual Request start_reduce_scatter(Buffer in, Buffer out, ReduceOp op) {
    run_reduce_scatter(in, out, op);
    return {};
  }
  virtual Request start_all_gather(Buffer in, Buffer out) {
    run_all_gather(in, out);
    return {};
  }

 protected:
  virtual void run_all_reduce(Buffer buffer, ReduceOp op) = 0;
  virtual void run_reduce_scatter(Buffer input, Buffer output, ReduceOp op) = 0;
  virtual void run_all_gather(Buffer input, Buffer output) = 0;
  virtual void run_broadcast(Buffer buffer, int root) = 0;
  virtual void run_barrier() = 0;
};

// Checks shared by the backends: element types agree and the sizes fit the padding rule.
void require_reduce_scatter_shapes(const Buffer& input, const Buffer& output, int size);
void require_all_gather_shapes(const Buffer& input, const Buffer& output, int size);
// Is input rank's own chunk of output (an in-place all-gather)?
inline bool gathers_in_place(const Buffer& input, const Buffer& output, int rank) {
  return static_cast<const char*>(input.data) == static_cast<const char*>(output.data) + static_cast<std::size_t>(rank) * input.bytes();
}
// In-place helpers on typed buffers, used by the host backends.
void scale_buffer(Buffer b, double factor);                // b *= factor
void accumulate_buffer(Buffer into, const void* from, std::size_t count);  // into += from (same type)
// into = ((terms[0] + terms[1]) + terms[2]) + ..., element by element in one pass, with the bits
// of copying terms[0] and then accumulate_buffer of each later term in order (bf16 rounds after
// every addition). terms[0] may be `into` itself (the in-place reductions' own part); no later
// term may. count elements of into.type; terms.size() >= 1.
void sum_buffers(Buffer into, std::span<const void* const> terms, std::size_t count);

}  // namespace st
