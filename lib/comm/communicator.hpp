#pragma once
// The seam between the training code and a collective library. Backends (MPI today, NCCL with
// the CUDA build) implement it for one group of ranks; TwoLevelCommunicator composes a
// node-local and a cross-node one behind the same interface.
#include <array>
#include <cstdint>
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
};

}  // namespace st
