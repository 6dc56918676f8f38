#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace st {

// Collective check after a step that can fail on some ranks only (opening a node-local file,
// say): every rank passes its own error text ("" if fine); if any rank failed, every rank
// throws the same Error naming the first failing rank, so none is left in a later collective.
// `name_rank`: prefix the message with "rank R: " on the other ranks (off where the message
// names what failed by itself, a file's chunk say).
void agree_or_throw(MPI_Comm comm, const std::string& local_error, bool name_rank = true);

// Runs `step` on every rank; if it throws an Error on any, every rank throws that rank's message.
template <class Step>
void agreed(MPI_Comm comm, Step&& step) {
  std::string problem;
  try {
    step();
  } catch (const Error& e) {
    problem = e.what();
  }
  agree_or_throw(comm, problem);
}

// The root's value on every rank (resized to fit). Collective.
void broadcast(std::string& text, int root, MPI_Comm comm);
void broadcast(std::vector<std::uint64_t>& values, int root, MPI_Comm comm);
// Every rank's `text`, in rank order, on every rank. Collective.
std::vector<std::string> all_gather_text(const std::string& text, MPI_Comm comm);

}  // namespace st
