#include "comm/world.hpp"

#include <unistd.h>

#include "comm/mpi_check.hpp"

namespace st {

OwnedComm& OwnedComm::operator=(OwnedComm&& other) noexcept {
  if (this != &other) {
    OwnedComm dying(comm_);
    comm_ = other.comm_;
    other.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

OwnedComm::~OwnedComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF)
    MPI_Comm_free(&comm_);  // a failure here cannot be reported from a destructor
}

MpiSession::MpiSession(int& argc, char**& argv) {
  int provided = 0;
  // The main thread makes the collectives; the hang watchdog's thread asks other ranks what
  // they are doing while a collective may be stuck, hence MPI_THREAD_MULTIPLE. A library that
  // offers less still runs; the watchdog then reports only its own rank.
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    throw Error("MPI_Init_thread failed");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  set_rank_for_messages(world_rank_for_report());
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  set_rank_for_messages(-1);
  if (!finalized) MPI_Finalize();
}

int world_rank_for_report() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);  // unchecked: this runs while the job is failing
  return rank;
}

void abort_job(int exit_code) { MPI_Abort(MPI_COMM_WORLD, exit_code); }

World::World(MPI_Comm parent, int ranks_per_node) : emulated_(ranks_per_node > 0) {
  MPI_Comm dup = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_dup(parent, &dup));
  world_ = OwnedComm(dup);
  ST_CHECK_MPI(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
  ST_CHECK_MPI(MPI_Comm_rank(dup, &rank_));
  ST_CHECK_MPI(MPI_Comm_size(dup, &size_));

  MPI_Comm host = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_split_type(dup, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &host));
  OwnedComm host_owner(host);
  ST_CHECK_MPI(MPI_Comm_size(host, &host_ranks_));

  MPI_Comm node = MPI_COMM_NULL;
  if (emulated_) {
    if (size_ % ranks_per_node != 0)
      throw Error("parallel.ranks_per_node = " + std::to_string(ranks_per_node) + " does not divide the " +
                      std::to_string(size_) + " ranks of this job",
                  ErrorScope::all_ranks);
    ST_CHECK_MPI(MPI_Comm_split(dup, rank_ / ranks_per_node, rank_, &node));
  } else {
    ST_CHECK_MPI(MPI_Comm_dup(host, &node));
  }
  node_ = OwnedComm(node);
  ST_CHECK_MPI(MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN));
  ST_CHECK_MPI(MPI_Comm_rank(node, &local_rank_));
  ST_CHECK_MPI(MPI_Comm_size(node, &local_size_));

  // Node index: the number of node leaders with a lower world rank than this node's leader.
  int is_leader = local_rank_ == 0 ? 1 : 0;
  ST_CHECK_MPI(MPI_Allreduce(&is_leader, &node_count_, 1, MPI_INT, MPI_SUM, dup));
  int leaders_before = 0;
  int mine = is_leader;
  ST_CHECK_MPI(MPI_Exscan(&mine, &leaders_before, 1, MPI_INT, MPI_SUM, dup));
  if (rank_ == 0) leaders_before = 0;  // MPI_Exscan leaves rank 0's result undefined
  node_index_ = leaders_before;
  ST_CHECK_MPI(MPI_Bcast(&node_index_, 1, MPI_INT, 0, node));

  MPI_Comm cross = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_split(dup, local_rank_, rank_, &cross));
  cross_ = OwnedComm(cross);
  ST_CHECK_MPI(MPI_Comm_set_errhandler(cross, MPI_ERRORS_RETURN));

  // Uniform: equal node sizes and world rank = node x ranks per node + local rank everywhere.
  int ok = (rank_ == node_index_ * local_size_ + local_rank_) ? 1 : 0;
  int max_local = local_size_, min_local = local_size_;
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, dup));
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &max_local, 1, MPI_INT, MPI_MAX, dup));
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &min_local, 1, MPI_INT, MPI_MIN, dup));
  uniform_ = ok == 1 && max_local == min_local;

  char name[256] = {};
  gethostname(name, sizeof name - 1);
  host_ = name;
  // The node leaders' hostnames, for logs that say where the nodes are.
  std::vector<char> names(static_cast<std::size_t>(size_) * sizeof name);
  ST_CHECK_MPI(MPI_Allgather(name, sizeof name, MPI_CHAR, names.data(), sizeof name, MPI_CHAR, dup));
  std::vector<int> leaders(static_cast<std::size_t>(size_));
  ST_CHECK_MPI(MPI_Allgather(&is_leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, dup));
  for (int r = 0; r < size_; ++r)
    if (leaders[static_cast<std::size_t>(r)]) node_hosts_.emplace_back(names.data() + static_cast<std::size_t>(r) * sizeof name);
}

}  // namespace st
