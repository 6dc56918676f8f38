#pragma once
// Agreeing on an error: the one way a step that may fail on some ranks only (or on rank 0 alone)
// ends on every rank together, with the same message, so that none is left in a later collective.
#include <mpi.h>

#include <string>

#include "comm/group.hpp"
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

// Runs `step` on rank 0 of `comm` alone (reading a file the others then receive, say); if it
// throws an Error there, every rank throws that message unchanged. Collective.
template <class Step>
void agreed_on_root(MPI_Comm comm, Step&& step) {
  std::string problem;
  if (group_rank(comm) == 0) {
    try {
      step();
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  agree_or_throw(comm, problem, false);
}

}  // namespace st
