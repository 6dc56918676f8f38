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
//
// On GPUs the data are device memory and MPI is not assumed CUDA-aware: stage_through() gives
// the copies that carry them to host memory before a send and back after a receive.
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <span>
#include <string>
#include <vector>

#include "core/buffer.hpp"

namespace st {

class PeerLink {
 public:
  PeerLink(MPI_Comm comm, double timeout_seconds);
  ~PeerLink();  // waits for the sends still in flight
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  // How data in another memory space reach host memory (complete when the call returns, after
  // the work queued before) and go back (queued; the host copy may be reused at once).
  struct Staging {
    std::function<void(void* host, const void* from, std::size_t bytes)> to_host;
    std::function<void(void* to, const void* host, std::size_t bytes)> from_host;
  };
  void stage_through(Staging staging) { staging_ = std::move(staging); }

  int rank() const { return rank_; }
  int size() const { return size_; }
  // `data`: a Buffer of any element type in its memory space (fp32 or bf16 activations).
  void send(int peer, int tag, Buffer data);
  void receive(int peer, int tag, Buffer data);
  // Waits for every send in flight (their peers have received them).
  void drain();
  // Bytes this rank sent, and seconds it waited in receive() and drain(), so far.
  std::uint64_t bytes_sent() const { return bytes_sent_; }
  double waited_seconds() const { return waited_seconds_; }

 private:
  struct Outgoing {
    std::vector<std::byte> copy;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  // Waits for `request`, naming what it waits for if the timeout passes.
  void complete(MPI_Request& request, const std::string& what);
  void reap();  // frees the sends that have completed

  MPI_Comm comm_;
  double timeout_seconds_;
  int rank_ = 0, size_ = 1;
  std::list<Outgoing> outgoing_;
  Staging staging_;             // unset: the data are host memory
  std::vector<std::byte> incoming_;  // a received message on its way to device memory
  std::uint64_t bytes_sent_ = 0;
  double waited_seconds_ = 0;
};

}  // namespace st
