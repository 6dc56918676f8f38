#pragma once
// The seam between the training code and a collective library (MPI today; NCCL and two-level
// compositions plug in behind the same interface).
#include <cstdint>
#include <span>

namespace st {

enum class ReduceOp { sum, average };

// Bytes this rank has sent, per operation, as each algorithm must move them.
struct TrafficCounters {
  std::uint64_t all_reduce = 0;
  std::uint64_t broadcast = 0;
  std::uint64_t total() const { return all_reduce + broadcast; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void all_reduce(std::span<float> buffer, ReduceOp op) = 0;
  virtual void all_reduce(std::span<double> buffer, ReduceOp op) = 0;
  virtual void broadcast(std::span<float> buffer, int root) = 0;
  virtual void barrier() = 0;
  virtual const TrafficCounters& traffic() const = 0;
};

}  // namespace st
