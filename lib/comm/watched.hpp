#pragma once
// A communicator that registers every call with the hang watchdog, then delegates, and adds up
// the time spent in its calls.
#include <string>

#include "comm/communicator.hpp"
#include "comm/watchdog.hpp"
#include "core/timer.hpp"

namespace st {

class WatchedCommunicator final : public Communicator {
 public:
  WatchedCommunicator(Communicator& inner, Watchdog& dog, std::string name)
      : inner_(inner), dog_(dog), name_(std::move(name)) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  LevelTraffic traffic() const override { return inner_.traffic(); }
  Memory allocate(std::size_t bytes) override { return inner_.allocate(bytes); }
  // Seconds spent inside this communicator's calls so far (read it on the thread that makes
  // them). For a group whose calls block the training thread (the tensor group's), the
  // communication the step waited for. (A device backend returns once the collective is
  // queued: it counts only that.)
  double seconds_in_calls() const { return seconds_; }

 protected:
  void run_all_reduce(Buffer b, ReduceOp op) override {
    const Timed timed(seconds_);
    Watchdog::Scope scope(&dog_, "all_reduce", b.bytes(), name_.c_str());
    inner_.all_reduce(b, op);
  }
  void run_reduce_scatter(Buffer in, Buffer out, ReduceOp op) override {
    const Timed timed(seconds_);
    Watchdog::Scope scope(&dog_, "reduce_scatter", in.bytes(), name_.c_str());
    inner_.reduce_scatter(in, out, op);
  }
  void run_all_gather(Buffer in, Buffer out) override {
    const Timed timed(seconds_);
    Watchdog::Scope scope(&dog_, "all_gather", out.bytes(), name_.c_str());
    inner_.all_gather(in, out);
  }
  void run_broadcast(Buffer b, int root) override {
    const Timed timed(seconds_);
    Watchdog::Scope scope(&dog_, "broadcast", b.bytes(), name_.c_str());
    inner_.broadcast(b, root);
  }
  void run_barrier() override {
    const Timed timed(seconds_);
    Watchdog::Scope scope(&dog_, "barrier", 0, name_.c_str());
    inner_.barrier();
  }

 private:
  // Adds the time from its making to its end to `total`.
  struct Timed {
    double& total;
    Stopwatch clock;
    explicit Timed(double& t) : total(t) {}
    ~Timed() { total += clock.seconds(); }
  };
  Communicator& inner_;
  Watchdog& dog_;
  std::string name_;
  double seconds_ = 0;
};

}  // namespace st
