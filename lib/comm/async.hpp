#pragma once
// Non-blocking collectives: one progress thread per communicator runs the operations in the
// order they were started (the same order on every rank, as MPI requires), so the caller can
// compute while they move. Blocking calls go through the same queue, so they cannot overtake
// a started one. Needs MPI_THREAD_MULTIPLE; without it every call runs inline.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "comm/communicator.hpp"
#include "core/timeline.hpp"

namespace st {

class AsyncCommunicator final : public Communicator {
 public:
  explicit AsyncCommunicator(Communicator& inner);
  ~AsyncCommunicator() override;
  AsyncCommunicator(const AsyncCommunicator&) = delete;
  AsyncCommunicator& operator=(const AsyncCommunicator&) = delete;

  bool overlaps() const { return threaded_; }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  LevelTraffic traffic() const override;
  // In turn with the collectives (allocation is collective in the backend too).
  Memory allocate(std::size_t bytes) override {
    Memory memory;
    submit("allocate", 0, [this, bytes, &memory] { memory = inner_.allocate(bytes); }).wait();
    return memory;
  }

  // Each operation becomes a span on `track` of the timeline while it is enabled.
  void trace_to(Timeline* timeline, std::string track) {
    timeline_ = timeline;
    track_ = std::move(track);
  }

  Request start_all_reduce(Buffer b, ReduceOp op) override {
    return submit("all_reduce", b.bytes(), [this, b, op] { inner_.all_reduce(b, op); });
  }
  Request start_reduce_scatter(Buffer in, Buffer out, ReduceOp op) override {
    return submit("reduce_scatter", in.bytes(), [this, in, out, op] { inner_.reduce_scatter(in, out, op); });
  }
  Request start_all_gather(Buffer in, Buffer out) override {
    return submit("all_gather", out.bytes(), [this, in, out] { inner_.all_gather(in, out); });
  }
  using Communicator::start_all_gather;
  using Communicator::start_all_reduce;
  using Communicator::start_reduce_scatter;

 protected:
  void run_all_reduce(Buffer b, ReduceOp op) override { start_all_reduce(b, op).wait(); }
  void run_reduce_scatter(Buffer in, Buffer out, ReduceOp op) override { start_reduce_scatter(in, out, op).wait(); }
  void run_all_gather(Buffer in, Buffer out) override { start_all_gather(in, out).wait(); }
  void run_broadcast(Buffer b, int root) override {
    submit("broadcast", b.bytes(), [this, b, root] { inner_.broadcast(b, root); }).wait();
  }
  void run_barrier() override { submit("barrier", 0, [this] { inner_.barrier(); }).wait(); }

 private:
  Request submit(const char* op, std::uint64_t bytes, std::function<void()> work);
  void run();

  Communicator& inner_;
  bool threaded_ = false;
  std::mutex mutex_;                  // guards the queue
  mutable std::mutex counter_mutex_;  // held while an operation runs: traffic() reads consistent counters
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stop_ = false;
  std::thread worker_;
  Timeline* timeline_ = nullptr;
  std::string track_;
};

}  // namespace st
