#pragma once
// The rank hierarchy: the job's communicator and the node-local one beneath it.
#include <mpi.h>

#include <string>

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

// MPI_Init_thread / MPI_Finalize for the life of main().
class MpiSession {
 public:
  MpiSession(int& argc, char**& argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

class World {
 public:
  // Duplicates `parent` (errors return codes, so every call is checked) and splits off the
  // ranks that share memory with this one.
  explicit World(MPI_Comm parent = MPI_COMM_WORLD);

  MPI_Comm comm() const { return world_.get(); }
  MPI_Comm node_comm() const { return node_.get(); }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int node_count() const { return node_count_; }
  const std::string& host() const { return host_; }
  bool is_root() const { return rank_ == 0; }

 private:
  OwnedComm world_;
  OwnedComm node_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, node_count_ = 1;
  std::string host_;
};

}  // namespace st
