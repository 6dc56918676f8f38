#pragma once
// The rank hierarchy: the job's communicator and the node-local one beneath it.
#include <mpi.h>

#include <string>
#include <vector>

namespace st {

// Move-only owner of an MPI communicator; frees it unless it is a predefined one.
class OwnedComm {
 public:
  OwnedComm() = default;
  explicit OwnedComm(MPI_Comm comm) : comm_(comm) {}
  OwnedComm(OwnedComm&& other) noexcept : comm_(other.comm_) { other.comm_ = MPI_COMM_NULL; }
  OwnedComm& operator=(OwnedComm&& other) noexcept;
  OwnedComm(const OwnedComm&) = delete;
  OwnedComm& operator=(const OwnedComm&) = delete;
  ~OwnedComm();
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// MPI_Init_thread / MPI_Finalize for the life of main(); error messages name this rank meanwhile.
class MpiSession {
 public:
  MpiSession(int& argc, char**& argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

// This process's rank in MPI_COMM_WORLD for a failing job's last message (0 when MPI cannot say).
int world_rank_for_report();
// Ends every rank of the job with `exit_code` (MPI_Abort over the world): the way out of an error
// one rank saw alone, so that no other rank waits in a collective.
void abort_job(int exit_code);

// world -> node-local communicator -> cross-node communicator (the ranks with the same local
// rank, one per node). Two-level collectives need every node to hold the same number of ranks
// and a node's ranks to be consecutive in the world; uniform() says whether that holds.
class World {
 public:
  // Duplicates `parent` (errors return codes, so every call is checked). ranks_per_node = 0
  // takes the ranks that share memory as a node; K > 0 makes each K consecutive ranks a node
  // (emulated nodes on one host; the world size must be a multiple of K).
  explicit World(MPI_Comm parent = MPI_COMM_WORLD, int ranks_per_node = 0);

  MPI_Comm comm() const { return world_.get(); }
  MPI_Comm node_comm() const { return node_.get(); }
  MPI_Comm cross_comm() const { return cross_.get(); }
  int node() const { return node_index_; }
  bool emulated() const { return emulated_; }
  bool uniform() const { return uniform_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int node_count() const { return node_count_; }
  // Ranks sharing this host's memory (and cores), emulated nodes or not.
  int host_ranks() const { return host_ranks_; }
  const std::string& host() const { return host_; }
  // Each node's hostname (its first rank's), in node order; emulated nodes share one.
  const std::vector<std::string>& node_hosts() const { return node_hosts_; }
  bool is_root() const { return rank_ == 0; }

 private:
  OwnedComm world_;
  OwnedComm node_;
  OwnedComm cross_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, node_count_ = 1, node_index_ = 0, host_ranks_ = 1;
  bool emulated_ = false, uniform_ = true;
  std::string host_;
  std::vector<std::string> node_hosts_;
};

}  // namespace st
