#include "comm/world.hpp"

#include <unistd.h>

#include "core/error.hpp"

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
  // Funneled: only the main thread calls MPI; OpenMP threads compute.
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    throw Error("MPI_Init_thread failed");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

World::World(MPI_Comm parent) {
  MPI_Comm dup = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_dup(parent, &dup));
  world_ = OwnedComm(dup);
  ST_CHECK_MPI(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
  ST_CHECK_MPI(MPI_Comm_rank(dup, &rank_));
  ST_CHECK_MPI(MPI_Comm_size(dup, &size_));

  MPI_Comm node = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_split_type(dup, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  node_ = OwnedComm(node);
  ST_CHECK_MPI(MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN));
  ST_CHECK_MPI(MPI_Comm_rank(node, &local_rank_));
  ST_CHECK_MPI(MPI_Comm_size(node, &local_size_));
  int leader = local_rank_ == 0 ? 1 : 0;
  ST_CHECK_MPI(MPI_Allreduce(&leader, &node_count_, 1, MPI_INT, MPI_SUM, dup));

  char name[256] = {};
  gethostname(name, sizeof name - 1);
  host_ = name;
}

}  // namespace st
