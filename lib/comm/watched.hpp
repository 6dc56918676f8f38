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
  void all_reduce(std::span<float> b, ReduceOp op) override {
    Watchdog::Scope scope(&dog_, "all_reduce", b.size_bytes(), name_.c_str());
    inner_.all_reduce(b, op);
  }
  void all_reduce(std::span<double> b, ReduceOp op) override {
    Watchdog::Scope scope(&dog_, "all_reduce", b.size_bytes(), name_.c_str());
    inner_.all_reduce(b, op);
  }
  void reduce_scatter(std::span<const float> in, std::span<float> out, ReduceOp op) override {
    Watchdog::Scope scope(&dog_, "reduce_scatter", in.size_bytes(), name_.c_str());
    inner_.reduce_scatter(in, out, op);
  }
  void all_gather(std::span<const float> in, std::span<float> out) override {
    Watchdog::Scope scope(&dog_, "all_gather", out.size_bytes(), name_.c_str());
    inner_.all_gather(in, out);
  }
  void broadcast(std::span<float> b, int root) override {
    Watchdog::Scope scope(&dog_, "broadcast", b.size_bytes(), name_.c_str());
    inner_.broadcast(b, root);
  }
  void barrier() override {
    Watchdog::Scope scope(&dog_, "barrier", 0, name_.c_str());
    inner_.barrier();
  }
  LevelTraffic traffic() const override { return inner_.traffic(); }

 private:
  Communicator& inner_;
  Watchdog& dog_;
  std::string name_;
};

}  // namespace st
