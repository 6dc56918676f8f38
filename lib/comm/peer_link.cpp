#include "comm/peer_link.hpp"

#include <chrono>
#include <cstring>
#include <thread>

#include "comm/mpi_check.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"

namespace st {

PeerLink::PeerLink(MPI_Comm comm, double timeout_seconds) : comm_(comm), timeout_seconds_(timeout_seconds) {
  ST_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  ST_CHECK_MPI(MPI_Comm_size(comm_, &size_));
}

PeerLink::~PeerLink() {
  // A send still in flight when an error unwinds: cancelled, as its receiver will not come. A
  // destructor cannot throw: a failing call here leaves the job to end on the error unwinding.
  for (Outgoing& out : outgoing_)
    if (out.request != MPI_REQUEST_NULL) {
      try {
        ST_CHECK_MPI(MPI_Cancel(&out.request));
        ST_CHECK_MPI(MPI_Request_free(&out.request));
      } catch (const Error&) {
      }
    }
}

void PeerLink::complete(MPI_Request& request, const std::string& what) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int done = 0;
  for (long polls = 0;; ++polls) {
    ST_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) break;
    if (polls > 2000) std::this_thread::sleep_for(std::chrono::microseconds(polls > 20000 ? 50 : 10));
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (timeout_seconds_ > 0 && waited > timeout_seconds_)
      throw Error("pipeline stage " + std::to_string(rank_) + " waited " + std::to_string(static_cast<int>(waited)) +
                  " s for " + what + " (parallel.collective_timeout_s = " +
                  std::to_string(static_cast<int>(timeout_seconds_)) +
                  "): the neighbouring stage stopped or is stuck");
  }
  waited_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
}

void PeerLink::reap() {
  for (auto it = outgoing_.begin(); it != outgoing_.end();) {
    int done = 0;
    ST_CHECK_MPI(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE));
    it = done ? outgoing_.erase(it) : std::next(it);
  }
}

void PeerLink::send(int peer, int tag, Buffer data) {
  ST_REQUIRE(peer >= 0 && peer < size_ && peer != rank_, "a pipeline message to a stage that is not a neighbour");
  reap();
  Outgoing& out = outgoing_.emplace_back();
  out.copy.resize(data.bytes());
  if (staging_.to_host) staging_.to_host(out.copy.data(), data.data, data.bytes());
  else std::memcpy(out.copy.data(), data.data, data.bytes());
  ST_CHECK_MPI(MPI_Isend(out.copy.data(), static_cast<int>(data.count), MpiCommunicator::mpi_type(data.type), peer, tag,
                         comm_, &out.request));
  bytes_sent_ += data.bytes();
}

void PeerLink::receive(int peer, int tag, Buffer data) {
  ST_REQUIRE(peer >= 0 && peer < size_ && peer != rank_, "a pipeline message from a stage that is not a neighbour");
  const bool staged = static_cast<bool>(staging_.from_host);
  if (staged) incoming_.resize(data.bytes());
  void* into = staged ? static_cast<void*>(incoming_.data()) : data.data;
  MPI_Request request = MPI_REQUEST_NULL;
  ST_CHECK_MPI(MPI_Irecv(into, static_cast<int>(data.count), MpiCommunicator::mpi_type(data.type), peer, tag, comm_,
                         &request));
  complete(request, "message " + std::to_string(tag) + " from stage " + std::to_string(peer));
  if (staged) staging_.from_host(data.data, incoming_.data(), data.bytes());
}

void PeerLink::drain() {
  for (Outgoing& out : outgoing_) complete(out.request, "a stage to receive what this one sent");
  outgoing_.clear();
}

}  // namespace st
