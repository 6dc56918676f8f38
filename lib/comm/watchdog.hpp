#pragma once
// Hang diagnosis. Every collective a rank enters is registered here (operation, sequence
// number, bytes, communicator). A background thread notices a collective that has not finished
// within the timeout, asks every rank (over a communicator of its own, so a stuck collective
// does not block the question) what it is doing, prints who waits where, which ranks are
// missing and which do not answer, and aborts the job with its limit's exit code (kExitHang for
// collectives). No silent hang. A checkpoint's collective file I/O has a watchdog of its own
// (kCheckpointLimit, train/checkpointer.hpp), since a write may rightly take far longer.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/world.hpp"
#include "core/error.hpp"

namespace st {

inline constexpr int kExitHang = 3;

// What a watchdog watches, for its report and exit code: the collectives of training, or a
// checkpoint's collective file I/O (HDF5 over MPI-IO, whose calls are not ours to wrap one by
// one), which may legitimately take far longer than one collective.
struct WatchLimit {
  const char* what;  // "collective timeout: ..."
  const char* key;   // the deck key that sets the limit
  int exit_code;
  const char* all_present;  // the likely cause when every rank is in the operation
};
inline constexpr WatchLimit kCollectiveLimit{"collective", "parallel.collective_timeout_s", kExitHang,
                                             "a slow link or a deadlock inside the library"};
inline constexpr WatchLimit kCheckpointLimit{"checkpoint", "checkpoint.timeout_s", kExitAborted,
                                             "a slow or hung file system, or a limit too short for this model"};

class Watchdog {
 public:
  // timeout_seconds <= 0 disables the watchdog. Needs MPI_THREAD_MULTIPLE to ask other ranks;
  // without it, a timed-out rank reports only itself before aborting. Collective over `world`.
  Watchdog(MPI_Comm world, double timeout_seconds, WatchLimit limit = kCollectiveLimit);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // RAII registration of one watched operation (a collective, or a checkpoint write).
  class Scope {
   public:
    Scope(Watchdog* dog, const char* op, std::uint64_t bytes, const char* comm);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Watchdog* dog_;
  };

 private:
  struct State {
    bool active = false;
    char op[32] = {};
    char comm[32] = {};
    std::uint64_t bytes = 0;
    std::uint64_t sequence = 0;   // collectives entered so far (this one included)
    double started = 0;           // seconds on the steady clock
  };
  static double now();
  void enter(const char* op, std::uint64_t bytes, const char* comm);
  void leave();
  void run();              // the background thread
  void answer_requests();  // reply to other ranks' "what are you doing?"
  [[noreturn]] void diagnose(const State& mine);
  std::string describe(const State& s, int rank) const;

  std::string who(int rank) const;  // "rank 2", or "rank 2 (host-b)" in a job on several hosts
  // "  no answer from: rank 2 (host-b), rank 3 (host-b) (every rank on host-b: ...)\n", or "".
  std::string silent_summary(const std::vector<int>& received) const;

  MPI_Comm comm_ = MPI_COMM_NULL;  // a duplicate used only by the watchdog
  // Every rank's hostname, learnt while all ranks are alive, so a report can say where a rank
  // that no longer answers ran; empty when the whole job is on one host.
  std::vector<std::string> hosts_;
  int rank_ = 0, size_ = 1;
  double timeout_ = 0;
  WatchLimit limit_;
  bool can_ask_ = false;
  std::mutex mutex_;
  State state_;
  std::uint64_t entered_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  int request_buffer_ = 0;
};

}  // namespace st
