#include "comm/watchdog.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <vector>

#include "comm/mpi_check.hpp"
#include "core/text.hpp"

namespace st {
namespace {
constexpr int kTagRequest = 901, kTagReply = 902;
constexpr double kPoll = 0.05;         // seconds between checks
constexpr double kReplyGrace = 3.0;    // seconds to wait for other ranks' answers
constexpr int kHostName = 64;          // bytes of a hostname kept for reports

struct Reply {
  int active;
  char op[32];
  char comm[32];
  std::uint64_t bytes;
  std::uint64_t sequence;
  double waited;
};
}  // namespace

double Watchdog::now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Watchdog::Watchdog(MPI_Comm world, double timeout_seconds, WatchLimit limit)
    : timeout_(timeout_seconds), limit_(limit) {
  if (timeout_ <= 0) return;
  int provided = 0;
  MPI_Query_thread(&provided);
  can_ask_ = provided == MPI_THREAD_MULTIPLE;
  ST_CHECK_MPI(MPI_Comm_dup(world, &comm_));
  ST_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  ST_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  char host[kHostName] = {};
  gethostname(host, sizeof host - 1);
  std::vector<char> all(static_cast<std::size_t>(size_) * kHostName);
  ST_CHECK_MPI(MPI_Allgather(host, kHostName, MPI_CHAR, all.data(), kHostName, MPI_CHAR, comm_));
  for (int r = 0; r < size_; ++r) hosts_.emplace_back(all.data() + static_cast<std::size_t>(r) * kHostName);
  if (std::all_of(hosts_.begin(), hosts_.end(), [&](const std::string& h) { return h == hosts_.front(); }))
    hosts_.clear();
  if (can_ask_) ST_CHECK_MPI(MPI_Irecv(&request_buffer_, 1, MPI_INT, MPI_ANY_SOURCE, kTagRequest, comm_, &request_));
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  if (timeout_ <= 0) return;
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (request_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&request_);
    MPI_Request_free(&request_);
  }
  MPI_Comm_free(&comm_);
}

Watchdog::Scope::Scope(Watchdog* dog, const char* op, std::uint64_t bytes, const char* comm) : dog_(dog) {
  if (dog_ && dog_->timeout_ > 0) dog_->enter(op, bytes, comm);
}
Watchdog::Scope::~Scope() {
  if (dog_ && dog_->timeout_ > 0) dog_->leave();
}

void Watchdog::enter(const char* op, std::uint64_t bytes, const char* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_.active = true;
  std::snprintf(state_.op, sizeof state_.op, "%s", op);
  std::snprintf(state_.comm, sizeof state_.comm, "%s", comm);
  state_.bytes = bytes;
  state_.sequence = ++entered_;
  state_.started = now();
}

void Watchdog::leave() {
  std::lock_guard<std::mutex> lock(mutex_);
  state_.active = false;
}

void Watchdog::answer_requests() {
  if (!can_ask_) return;
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    if (MPI_Test(&request_, &arrived, &status) != MPI_SUCCESS || !arrived) return;
    Reply reply{};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      reply.active = state_.active ? 1 : 0;
      std::memcpy(reply.op, state_.op, sizeof reply.op);
      std::memcpy(reply.comm, state_.comm, sizeof reply.comm);
      reply.bytes = state_.bytes;
      reply.sequence = state_.active ? state_.sequence : entered_;
      reply.waited = state_.active ? now() - state_.started : 0;
    }
    MPI_Send(&reply, sizeof reply, MPI_BYTE, status.MPI_SOURCE, kTagReply, comm_);
    MPI_Irecv(&request_buffer_, 1, MPI_INT, MPI_ANY_SOURCE, kTagRequest, comm_, &request_);
  }
}

std::string Watchdog::describe(const State& s, int rank) const {
  std::ostringstream os;
  os << who(rank) << ": ";
  if (s.active)
    os << "waiting " << static_cast<int>(now() - s.started) << " s in " << s.op << " #" << s.sequence << " ("
       << format_bytes(static_cast<double>(s.bytes)) << ", communicator '" << s.comm << "')";
  else
    os << "not in a " << limit_.what << " (" << s.sequence << " entered so far)";
  return os.str();
}

void Watchdog::run() {
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kPoll));
    answer_requests();
    State snapshot;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      snapshot = state_;
    }
    if (snapshot.active && now() - snapshot.started > timeout_) diagnose(snapshot);
  }
}

std::string Watchdog::who(int rank) const {
  const std::string r = "rank " + std::to_string(rank);
  return hosts_.empty() ? r : r + " (" + hosts_[static_cast<std::size_t>(rank)] + ")";
}

// The root cause, whatever collective each survivor happens to wait in: live ranks may wait in
// different collectives (one already in the next step's, one still in this one), so "missing
// from" differs between their reports, while the ranks that do not answer are the same in all.
std::string Watchdog::silent_summary(const std::vector<int>& received) const {
  std::vector<int> silent;
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && !received[static_cast<std::size_t>(r)]) silent.push_back(r);
  if (silent.empty()) return {};
  std::ostringstream line;
  line << "  no answer from: ";
  for (std::size_t i = 0; i < silent.size(); ++i) line << (i ? ", " : "") << who(silent[i]);
  if (!hosts_.empty()) {
    std::map<std::string, std::pair<int, int>> per_host;  // host -> (silent ranks, ranks)
    for (int r = 0; r < size_; ++r) ++per_host[hosts_[static_cast<std::size_t>(r)]].second;
    for (int r : silent) ++per_host[hosts_[static_cast<std::size_t>(r)]].first;
    std::vector<std::string> lost;
    for (const auto& [host, counts] : per_host)
      if (counts.first == counts.second) lost.push_back(host);
    for (std::size_t i = 0; i < lost.size(); ++i)
      line << (i ? ", " : " (every rank on ") << lost[i];
    if (!lost.empty()) line << ": host down or unreachable?)";
  }
  line << "\n";
  return line.str();
}

void Watchdog::diagnose(const State& mine) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::ostringstream report;
  report << "[rank " << rank_ << " on " << host << "] shardtrain: " << limit_.what << " timeout: "
         << describe(mine, rank_) << " exceeds " << timeout_ << " s (" << limit_.key << ")\n";
  if (can_ask_) {
    std::vector<Reply> replies(static_cast<std::size_t>(size_));
    std::vector<MPI_Request> requests;
    std::vector<int> received(static_cast<std::size_t>(size_), 0);
    int ask = 1;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_Request send = MPI_REQUEST_NULL, recv = MPI_REQUEST_NULL;
      MPI_Isend(&ask, 1, MPI_INT, r, kTagRequest, comm_, &send);
      MPI_Request_free(&send);
      MPI_Irecv(&replies[static_cast<std::size_t>(r)], sizeof(Reply), MPI_BYTE, r, kTagReply, comm_, &recv);
      requests.push_back(recv);
    }
    const double deadline = now() + kReplyGrace;
    int done = 0;
    while (now() < deadline && !done) {
      answer_requests();  // another rank may be asking us at the same time
      MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
      std::this_thread::sleep_for(std::chrono::duration<double>(kPoll / 5));
    }
    std::size_t k = 0;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      int flag = 0;
      if (requests[k] != MPI_REQUEST_NULL) MPI_Test(&requests[k], &flag, MPI_STATUS_IGNORE);
      received[static_cast<std::size_t>(r)] = requests[k] == MPI_REQUEST_NULL ? 1 : flag;
      ++k;
    }
    report << "  what every rank is doing:\n";
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      State s = mine;
      if (r != rank_) {
        if (!received[static_cast<std::size_t>(r)]) {
          report << "    " << who(r) << ": no answer within " << kReplyGrace << " s (process gone or MPI wedged)\n";
          missing.push_back(r);
          continue;
        }
        const Reply& reply = replies[static_cast<std::size_t>(r)];
        s.active = reply.active != 0;
        std::memcpy(s.op, reply.op, sizeof s.op);
        std::memcpy(s.comm, reply.comm, sizeof s.comm);
        s.bytes = reply.bytes;
        s.sequence = reply.sequence;
        s.started = now() - reply.waited;
      }
      report << "    " << describe(s, r) << "\n";
      const bool same = s.active && s.sequence == mine.sequence && std::strcmp(s.op, mine.op) == 0 &&
                        std::strcmp(s.comm, mine.comm) == 0;
      if (!same) missing.push_back(r);
    }
    report << "  missing from " << mine.op << " #" << mine.sequence << ": ";
    for (std::size_t i = 0; i < missing.size(); ++i) report << (i ? ", " : "") << who(missing[i]);
    if (missing.empty()) report << "none (every rank is in it: " << limit_.all_present << ")";
    report << "\n";
    report << silent_summary(received);
  }
  report << "  aborting the job (exit code " << limit_.exit_code << ")\n";
  std::fputs(report.str().c_str(), stderr);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, limit_.exit_code);
  std::_Exit(limit_.exit_code);
}

}  // namespace st
