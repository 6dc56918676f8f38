#pragma once
// Which device a rank computes on (parallel.device): "cpu", "cuda", or "auto" (the GPU where
// one is usable). One GPU per rank, chosen by the rank's place among the ranks of its host, out
// of the devices it can see (CUDA_VISIBLE_DEVICES applies).
#include <mpi.h>

#include <string>

#include "core/choices.hpp"

namespace st {

// What one rank sees and is asked for: the input of the decision.
struct DeviceProbe {
  DeviceKind requested = DeviceKind::automatic;
  bool cuda_built = false;         // this build trains on GPUs (CUDA and NCCL)
  int visible_devices = 0;         // CUDA devices the runtime reports (0 when none or no driver)
  std::string why_none;            // the driver's reason when visible_devices == 0
  int host_rank = 0, host_ranks = 1;  // this rank's place among the ranks of its host
  // Every rank of this host sees exactly one GPU, each a different one: the launcher gave each
  // rank its own (srun --gpus-per-task=1, or a wrapper setting CUDA_VISIBLE_DEVICES per rank).
  bool own_gpu_each = false;
  // Ranks per node as the job emulates them (parallel.ranks_per_node or SHARDTRAIN_RANKS_PER_NODE);
  // 0, or as many as the host has: real nodes.
  int node_ranks = 0;
};

struct DeviceChoice {
  bool cuda = false;
  int device = -1;     // CUDA device index (cuda only)
  int ranks_on_device = 1;  // ranks of this host computing on `device` (more than 1: they share its memory)
  std::string note;    // how it was decided, for the settings table
  std::string error;   // non-empty: the deck cannot run here; what to change
};

// The decision for one rank; pure, so it is tested without a GPU. deck_path names the file in
// messages.
DeviceChoice decide_device(const DeviceProbe& probe, const std::string& deck_path);

// Probes this rank (device count, its place on the host) and decides; collective over `comm`:
// every rank decides the same way (all on GPUs or all on CPUs), and if any rank cannot run as
// asked every rank throws the same Error with that rank's reason. node_ranks: the job's emulated
// ranks per node (deck_ranks_per_node), 0 for real nodes.
DeviceChoice choose_device(DeviceKind requested, MPI_Comm comm, const std::string& deck_path, int node_ranks);

// Memory of CUDA device `device` in bytes (0 in a build without CUDA or when it cannot be read).
double cuda_device_memory_bytes(int device);

// A CUDA device's identity (its UUID, 16 bytes), "" in a build without CUDA or on failure.
std::string cuda_device_uuid(int device);

// CUDA devices this process can see, or 0 with the driver's reason in `why` (always 0 in a build
// without CUDA).
int visible_cuda_devices(std::string& why);

}  // namespace st
