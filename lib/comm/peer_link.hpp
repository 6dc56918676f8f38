#pragma once
// Point-to-point messages between a pipeline's stages: what one stage's last block computed, on
// its way to the next stage, and the gradient of it on its way back. One MPI communicator whose
// ranks are the stages (the ranks holding the same place in each stage), host memory.
//
// A send copies its data and returns at once: the copy travels while the sender computes, and
// the sender may overwrite its buffer. A receive blocks until its message is there, polling with
// naps (the peer is usually still computing it). Tags name each message (the pass, the
// micro-batch and the model chunk), so messages may arrive in any order. A wait longer than
// `timeout_seconds` (parallel.collective_timeout_s; 0: none) is an Error naming the peer and the
// tag, so a stage whose neighbour died does not hang the job.
#include <mpi.h>

#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <vector>

namespace st {

class PeerLink {
 public:
  PeerLink(MPI_Comm comm, double timeout_seconds);
  ~PeerLink();  // waits for the sends still in flight
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  void send(int peer, int tag, std::span<const float> data);
  void receive(int peer, int tag, std::span<float> data);
  // Waits for every send in flight (their peers have received them).
  void drain();
  // Bytes this rank sent, and seconds it waited in receive() and drain(), so far.
  std::uint64_t bytes_sent() const { return bytes_sent_; }
  double waited_seconds() const { return waited_seconds_; }

 private:
  struct Outgoing {
    std::vector<float> copy;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  // Waits for `request`, naming what it waits for if the timeout passes.
  void complete(MPI_Request& request, const std::string& what);
  void reap();  // frees the sends that have completed

  MPI_Comm comm_;
  double timeout_seconds_;
  int rank_ = 0, size_ = 1;
  std::list<Outgoing> outgoing_;
  std::uint64_t bytes_sent_ = 0;
  double waited_seconds_ = 0;
};

}  // namespace st
