#include "core/error.hpp"

#include <atomic>
#include <sstream>

namespace st {
namespace {

// Read by whichever thread raises an error (the hang watchdog's among them).
std::atomic<int> rank_for_messages{-1};

}  // namespace

void set_rank_for_messages(int rank) { rank_for_messages.store(rank); }

std::string call_site(const char* file, int line) {
  std::ostringstream os;
  os << file << ":" << line;
  const int rank = rank_for_messages.load();
  if (rank >= 0) os << " (rank " << rank << ")";
  return os.str();
}

void fail_call(const char* library, long code, const char* call, const char* file, int line) {
  std::ostringstream os;
  os << library << " call failed (code " << code << "): " << call << " at " << call_site(file, line);
  throw Error(os.str());
}

void fail_requirement(const std::string& message, const char* condition, const char* file, int line) {
  throw Error(message + " [" + condition + " failed at " + call_site(file, line) + "]");
}

}  // namespace st
