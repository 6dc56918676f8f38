#include "runtime/device_choice.hpp"

#include <algorithm>
#include <vector>

#if defined(ST_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

#include "comm/agree.hpp"
#include "comm/group.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"

namespace st {

DeviceChoice decide_device(const DeviceProbe& p, const std::string& deck_path) {
  DeviceChoice c;
  const std::string key = deck_path + ": parallel.device = \"" + name_of(p.requested) + "\"";
  if (p.requested == DeviceKind::cpu) {
    c.note = "cpu (parallel.device = \"cpu\")";
    return c;
  }
  const bool asked = p.requested == DeviceKind::cuda;
  if (!p.cuda_built) {
    if (asked)
      c.error = key + ": this build of shardtrain has no CUDA support; rebuild with "
                      "tools/build.sh build-cuda -DST_ENABLE_CUDA=ON -DST_ENABLE_NCCL=ON, or set parallel.device = "
                      "\"cpu\" (or \"auto\")";
    else
      c.note = "cpu (parallel.device = \"auto\": this build has no CUDA support)";
    return c;
  }
  if (p.visible_devices == 0) {
    if (asked)
      c.error = key + " but no CUDA device is usable on this node: " + p.why_none +
                "; run on a GPU node (check nvidia-smi and CUDA_VISIBLE_DEVICES), or set parallel.device = \"cpu\" "
                "(or \"auto\")";
    else
      c.note = "cpu (parallel.device = \"auto\": no usable CUDA device: " + p.why_none + ")";
    return c;
  }
  if (p.own_gpu_each) {
    c.cuda = true;
    c.device = 0;
    c.note = "cuda: the one GPU visible to this rank, each rank of the node its own (parallel.device = \"" +
             name_of(p.requested) + "\")";
    return c;
  }
  const bool emulated = p.node_ranks > 0 && p.node_ranks < p.host_ranks;
  if (p.host_ranks > p.visible_devices && emulated && p.node_ranks <= p.visible_devices) {
    // Emulated nodes on fewer GPUs than ranks: ranks take the GPUs in turn, so the ranks of one
    // node (consecutive) hold different GPUs and each node's NCCL communicator is legal; ranks of
    // different nodes that share a GPU talk through MPI in pinned host memory (NCCL refuses two
    // ranks of one communicator on one GPU) and split its memory.
    c.cuda = true;
    c.device = p.host_rank % p.visible_devices;
    c.ranks_on_device = (p.host_ranks - c.device + p.visible_devices - 1) / p.visible_devices;
    c.note = "cuda device " + std::to_string(c.device) + " of " + std::to_string(p.visible_devices) +
             " visible, shared by " + std::to_string(c.ranks_on_device) + " ranks of this host (emulated nodes of " +
             std::to_string(p.node_ranks) + " rank(s); parallel.device = \"" + name_of(p.requested) +
             "\"): every rank plans with the most shared GPU's share of its memory, and ranks sharing a GPU "
             "exchange through MPI in pinned host memory";
    return c;
  }
  if (p.host_ranks > p.visible_devices) {
    // Sharing a GPU between ranks of one node breaks NCCL ("duplicate GPU") and halves each
    // rank's memory: refuse it, whether asked for cuda or auto, and say how to match ranks to GPUs.
    c.error = key + ": " + std::to_string(p.host_ranks) + " ranks on this node but " +
              std::to_string(p.visible_devices) + " visible CUDA device(s); start one rank per GPU (e.g. srun " +
              "--ntasks-per-node=" + std::to_string(p.visible_devices) + " or mpirun --npernode " +
              std::to_string(p.visible_devices) + "), widen CUDA_VISIBLE_DEVICES, or set parallel.device = \"cpu\"";
    if (emulated)
      c.error += "; emulated nodes of " + std::to_string(p.node_ranks) +
                 " ranks (parallel.ranks_per_node) may share GPUs only with at most " +
                 std::to_string(p.visible_devices) + " ranks per node, one GPU each";
    else
      c.error += "; to test several ranks on fewer GPUs, emulate nodes of at most " +
                 std::to_string(p.visible_devices) + " rank(s) (parallel.ranks_per_node or SHARDTRAIN_RANKS_PER_NODE)";
    return c;
  }
  c.cuda = true;
  c.device = p.host_rank;
  c.note = "cuda device " + std::to_string(c.device) + " of " + std::to_string(p.visible_devices) +
           " visible (parallel.device = \"" + name_of(p.requested) + "\", one GPU per rank by its place on the node)";
  return c;
}

DeviceChoice choose_device(DeviceKind requested, MPI_Comm comm, const std::string& deck_path, int node_ranks) {
  DeviceProbe probe;
  probe.requested = requested;
  probe.node_ranks = node_ranks;
#if defined(ST_HAVE_CUDA) && defined(ST_HAVE_NCCL)
  probe.cuda_built = true;  // GPU training needs both: its communicators are NCCL's
#endif
  if (requested != DeviceKind::cpu && probe.cuda_built) probe.visible_devices = visible_cuda_devices(probe.why_none);
  const OwnedComm host = host_group(comm);
  probe.host_rank = group_rank(host.get());
  probe.host_ranks = group_size(host.get());
  if (probe.cuda_built && probe.host_ranks > 1) {
    // One GPU each, given by the launcher? Compare the devices' identities across the host.
    std::string mine = probe.visible_devices == 1 ? cuda_device_uuid(0) : std::string();
    mine.resize(16, '\0');
    std::vector<std::string> ids = all_gather_text(mine, host.get());
    const bool known = std::none_of(ids.begin(), ids.end(), [](const std::string& id) {
      return id == std::string(16, '\0');
    });
    std::sort(ids.begin(), ids.end());
    probe.own_gpu_each = known && std::adjacent_find(ids.begin(), ids.end()) == ids.end();
  }

  DeviceChoice choice = decide_device(probe, deck_path);
  agree_or_throw(comm, choice.error);
  // "auto" must come out the same everywhere: a job half on GPUs and half on CPUs cannot share
  // its collectives. If some rank has no GPU, every rank refuses.
  const int on_cuda = choice.cuda ? 1 : 0;
  const int lowest = min_over(on_cuda, comm), highest = max_over(on_cuda, comm);
  std::string mixed;
  if (lowest != highest)
    mixed = deck_path + ": parallel.device = \"auto\" found GPUs on some nodes and none on others; the job must run "
                        "all on GPUs or all on CPUs: set parallel.device = \"cpu\" or place the job on GPU nodes only";
  agree_or_throw(comm, mixed);
  return choice;
}

std::string cuda_device_uuid(int device) {
#if defined(ST_HAVE_CUDA)
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return {};
  return std::string(prop.uuid.bytes, sizeof prop.uuid.bytes);
#else
  (void)device;
  return {};
#endif
}

double cuda_device_memory_bytes(int device) {
#if defined(ST_HAVE_CUDA)
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return 0;
  return static_cast<double>(prop.totalGlobalMem);
#else
  (void)device;
  return 0;
#endif
}

int visible_cuda_devices(std::string& why) {
#if defined(ST_HAVE_CUDA)
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  if (code != cudaSuccess) {
    why = cudaGetErrorString(code);
    return 0;
  }
  if (count == 0) why = "the CUDA runtime reports no device";
  return count;
#else
  why = "this build has no CUDA support";
  return 0;
#endif
}

}  // namespace st
