#include "train/stop_signals.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <cstring>

#include "core/error.hpp"

namespace st {
namespace {

volatile std::sig_atomic_t g_received = 0;

void on_signal(int signal) {
  if (g_received != 0) {
    // Second signal: stop now. Only async-signal-safe calls here.
    const char message[] = "shardtrain: second stop signal: aborting without a checkpoint\n";
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, message, sizeof message - 1);
    ::_exit(kExitAborted);
  }
  g_received = signal;
}

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // MPI and file I/O calls in progress go on
  sigaction(SIGUSR1, &action, &previous_usr1_);
  sigaction(SIGTERM, &action, &previous_term_);
  sigaction(SIGINT, &action, &previous_int_);
}

StopSignals::~StopSignals() {
  sigaction(SIGUSR1, &previous_usr1_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGINT, &previous_int_, nullptr);
}

int StopSignals::received() const {
  const int signal = g_received;
  if (signal != SIGUSR1) return signal;
  // Read here, at a step's end, not in the handler: file I/O is not async-signal-safe.
  const char* note = std::getenv("SHARDTRAIN_STOP_NOTE");
  if (!note || !*note) return signal;
  std::ifstream in(note);
  std::string relayed;
  in >> relayed;
  if (relayed == "SIGTERM") return SIGTERM + kRelayed;
  if (relayed == "SIGINT") return SIGINT + kRelayed;
  return signal;
}

std::string StopSignals::name(int signal) {
  if (signal > kRelayed) return name(signal - kRelayed) + " (passed on by tools/launch.sh as SIGUSR1)";
  switch (signal) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "signal " + std::to_string(signal);
  }
}

}  // namespace st
