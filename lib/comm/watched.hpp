#pragma once
// A communicator that registers every call with the hang watchdog, then delegates.
#include <string>

#include "comm/communicator.hpp"
#include "comm/watchdog.hpp"

namespace st {

class WatchedCommunicator final : public Communicator {
 public:
  WatchedCommunicator(Communicator& inner, Watchdog& dog, std::string name)
      : inner_(inner), dog_(dog), name_(std::move(name)) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  LevelTraffic traffic() const override { return inner_.traffic(); }
  Memory allocate(std::size_t bytes) override { return inner_.allocate(bytes); }

 protected:
  void run_all_reduce(Buffer b, ReduceOp op) override {
    Watchdog::Scope scope(&dog_, "all_reduce", b.bytes(), name_.c_str());
    inner_.all_reduce(b, op);
  }
  void run_reduce_scatter(Buffer in, Buffer out, ReduceOp op) override {
    Watchdog::Scope scope(&dog_, "reduce_scatter", in.bytes(), name_.c_str());
    inner_.reduce_scatter(in, out, op);
  }
  void run_all_gather(Buffer in, Buffer out) override {
    Watchdog::Scope scope(&dog_, "all_gather", out.bytes(), name_.c_str());
    inner_.all_gather(in, out);
  }
  void run_broadcast(Buffer b, int root) override {
    Watchdog::Scope scope(&dog_, "broadcast", b.bytes(), name_.c_str());
    inner_.broadcast(b, root);
  }
  void run_barrier() override {
    Watchdog::Scope scope(&dog_, "barrier", 0, name_.c_str());
    inner_.barrier();
  }

 private:
  Communicator& inner_;
  Watchdog& dog_;
  std::string name_;
};

}  // namespace st
