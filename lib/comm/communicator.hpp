#pragma once
// The seam between the training code and a collective library. Backends (MPI today, NCCL with
// the CUDA build) implement it for one group of ranks; TwoLevelCommunicator composes a
// node-local and a cross-node one behind the same interface.
#include <array>
#include <chrono>
#include <cstdint>
#include <future>
#include <span>
#include <string_view>

namespace st {

enum class ReduceOp { sum, average };

enum class Collective { all_reduce, reduce_scatter, all_gather, broadcast };
inline constexpr std::size_t kCollectiveKinds = 4;
std::string_view collective_name(Collective c);

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

// Traffic split by level: inside a node and across nodes.
struct LevelTraffic {
  TrafficCounters intra, inter;
  std::uint64_t total() const { return intra.total() + inter.total(); }
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
  bool ready() const {
    return !done_.valid() || done_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
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

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place over the whole buffer.
  virtual void all_reduce(std::span<float> buffer, ReduceOp op) = 0;
  virtual void all_reduce(std::span<double> buffer, ReduceOp op) = 0;
  // input holds size() x chunk elements (pad with shard_range's rule); rank i receives the
  // reduction of chunk i in output (chunk elements).
  virtual void reduce_scatter(std::span<const float> input, std::span<float> output, ReduceOp op) = 0;
  // input: this rank's chunk; output: size() x chunk, chunk i from rank i.
  virtual void all_gather(std::span<const float> input, std::span<float> output) = 0;
  virtual void broadcast(std::span<float> buffer, int root) = 0;
  virtual void barrier() = 0;
  virtual LevelTraffic traffic() const = 0;

  // Non-blocking forms: the buffers must stay alive and untouched until the request is waited
  // for. Here they run to completion before returning; AsyncCommunicator overlaps them.
  virtual Request start_all_reduce(std::span<float> buffer, ReduceOp op) {
    all_reduce(buffer, op);
    return {};
  }
  virtual Request start_reduce_scatter(std::span<const float> input, std::span<float> output, ReduceOp op) {
    reduce_scatter(input, output, op);
    return {};
  }
  virtual Request start_all_gather(std::span<const float> input, std::span<float> output) {
    all_gather(input, output);
    return {};
  }
};

}  // namespace st
