#pragma once
// Slow-link emulation: a communicator whose calls take at least latency + bytes / bandwidth,
// so nodes joined by a slow network (and how much communication overlaps compute) can be
// studied on one host. The extra time is slept, not spun: the cores stay free for compute.
#include <chrono>
#include <thread>

#include "comm/communicator.hpp"

namespace st {

class ThrottledCommunicator final : public Communicator {
 public:
  // bytes_per_second > 0; latency in seconds per call.
  ThrottledCommunicator(Communicator& inner, double bytes_per_second, double latency_seconds)
      : inner_(inner), rate_(bytes_per_second), latency_(latency_seconds) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  LevelTraffic traffic() const override { return inner_.traffic(); }
  Memory allocate(std::size_t bytes) override { return inner_.allocate(bytes); }

 protected:
  void run_all_reduce(Buffer b, ReduceOp op) override { paced([&] { inner_.all_reduce(b, op); }); }
  void run_reduce_scatter(Buffer in, Buffer out, ReduceOp op) override {
    paced([&] { inner_.reduce_scatter(in, out, op); });
  }
  void run_all_gather(Buffer in, Buffer out) override { paced([&] { inner_.all_gather(in, out); }); }
  void run_broadcast(Buffer b, int root) override { paced([&] { inner_.broadcast(b, root); }); }
  void run_barrier() override { paced([&] { inner_.barrier(); }); }

 private:
  template <class Call>
  void paced(Call&& call) {
    const auto start = std::chrono::steady_clock::now();
    const auto sent_before = inner_.traffic().total();
    call();
    const double sent = static_cast<double>(inner_.traffic().total() - sent_before);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double wait = latency_ + sent / rate_ - elapsed;
    if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  }
  Communicator& inner_;
  double rate_, latency_;
};

}  // namespace st
