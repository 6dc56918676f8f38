#pragma once
// What Slurm sends before a job's time limit (SIGTERM, or SIGUSR1 with --signal), and Ctrl-C
// (SIGINT) where it reaches the ranks: the first one asks the run to finish its step, write a
// checkpoint and stop; a second one aborts at once. mpirun itself does not pass SIGINT or SIGTERM
// on (it kills the ranks and exits 1); tools/launch.sh turns them into SIGUSR1, which it does.
#include <csignal>
#include <string>

namespace st {

class StopSignals {
 public:
  StopSignals();   // installs the handlers for SIGUSR1, SIGTERM and SIGINT
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The signal received on this process, or 0. A SIGUSR1 that tools/launch.sh sent in place of
  // the SIGINT or SIGTERM it received (it names that one in the file SHARDTRAIN_STOP_NOTE gives)
  // is that signal with kRelayed added: larger than any signal, so that a rank which could read
  // the note (one on the launcher's host) decides the name the job reports.
  int received() const;
  static constexpr int kRelayed = 1 << 8;
  // "SIGTERM", or "SIGTERM (passed on by tools/launch.sh as SIGUSR1)" for a relayed one.
  static std::string name(int signal);

 private:
  struct sigaction previous_usr1_ {}, previous_term_ {}, previous_int_ {};
};

}  // namespace st
