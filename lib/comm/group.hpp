#pragma once
// A group of ranks as the code around the training step sees it: who am I in it, how many are
// we, a subgroup, a barrier, a round trip between two ranks. Each is a checked MPI call here.
#include <mpi.h>

#include <span>

#include "comm/world.hpp"

namespace st {

int group_rank(MPI_Comm comm);
int group_size(MPI_Comm comm);

// The ranks of `parent` with the same `color`, ordered by `key` (MPI_Comm_split); errors return
// codes on it, as on World's communicators. Collective over parent.
OwnedComm split_group(MPI_Comm parent, int color, int key);
// The ranks of `parent` that share this host's memory, in parent's order. Collective.
OwnedComm host_group(MPI_Comm parent);
// A communicator of its own over the same ranks (for traffic that must not mix with parent's).
OwnedComm duplicate_group(MPI_Comm parent);

void barrier(MPI_Comm comm);
// A barrier whose waiters nap rather than spin, so that they leave the cores to ranks that are
// measuring (several ranks per core is common on a test host).
void quiet_barrier(MPI_Comm comm);

// `from` sends `bytes` to `to`, which sends them back; the other ranks do nothing. A ping-pong.
void round_trip(std::span<char> bytes, int from, int to, MPI_Comm comm);

}  // namespace st
