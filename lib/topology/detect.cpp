#include "topology/detect.hpp"

#include <dlfcn.h>
#include <hwloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "core/error.hpp"

namespace st {

std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (!path) return "";
  std::istringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string run_command(const std::string& command, int* status) {
  *status = -1;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return "";
  std::string out;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  const int rc = pclose(pipe);
  *status = rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + (WIFSIGNALED(rc) ? WTERMSIG(rc) : 0);
  return out;
}

void fill_host_counts(Topology& t) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) throw Error("hwloc_topology_init failed: cannot read the host's topology");
  // The topology is destroyed on every path out.
  std::unique_ptr<std::remove_pointer_t<hwloc_topology_t>, void (*)(hwloc_topology_t)> owner(topo, hwloc_topology_destroy);
  if (hwloc_topology_load(topo) != 0) throw Error("hwloc_topology_load failed: cannot read the host's topology");
  t.sockets = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  t.numa_nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  t.cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  if (t.sockets < 1 || t.cores < 1)
    throw Error("hwloc reports " + std::to_string(t.sockets) + " sockets and " + std::to_string(t.cores) +
                " cores: cannot describe this host");
  t.numa_nodes = std::max(t.numa_nodes, 1);
}

namespace {

// NVML without its header: the few entry points used, declared by hand (NVML API reference).
using NvmlDevice = void*;
using NvmlInit = int (*)();
using NvmlShutdown = int (*)();
using NvmlCount = int (*)(unsigned*);
using NvmlHandle = int (*)(unsigned, NvmlDevice*);
using NvmlAncestor = int (*)(NvmlDevice, NvmlDevice, int*);
using NvmlP2P = int (*)(NvmlDevice, NvmlDevice, int, int*);
using NvmlLinkState = int (*)(NvmlDevice, unsigned, int*);
struct NvmlMemory {
  unsigned long long total, free, used;
};
using NvmlMemoryInfo = int (*)(NvmlDevice, NvmlMemory*);
constexpr int kNvmlP2PCapsNvlink = 2;  // NVML_P2P_CAPS_INDEX_NVLINK
constexpr unsigned kNvmlMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS

// NVML's common-ancestor levels (NVML_TOPOLOGY_INTERNAL .. NVML_TOPOLOGY_SYSTEM) as paths.
Link ancestor_link(int level) {
  if (level <= 10) return {LinkKind::pix, 0};
  if (level <= 20) return {LinkKind::pxb, 0};
  if (level <= 30) return {LinkKind::phb, 0};
  if (level <= 40) return {LinkKind::node, 0};
  return {LinkKind::sys, 0};
}

bool from_nvml(DetectedTopology& d) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    d.notes.push_back("NVML: libnvidia-ml.so.1 not found");
    return false;
  }
  std::unique_ptr<void, int (*)(void*)> owner(lib, dlclose);
  auto sym = [&](const char* name) { return dlsym(lib, name); };
  auto init = reinterpret_cast<NvmlInit>(sym("nvmlInit_v2"));
  auto shutdown = reinterpret_cast<NvmlShutdown>(sym("nvmlShutdown"));
  auto count = reinterpret_cast<NvmlCount>(sym("nvmlDeviceGetCount_v2"));
  auto handle = reinterpret_cast<NvmlHandle>(sym("nvmlDeviceGetHandleByIndex_v2"));
  auto ancestor = reinterpret_cast<NvmlAncestor>(sym("nvmlDeviceGetTopologyCommonAncestor"));
  auto p2p = reinterpret_cast<NvmlP2P>(sym("nvmlDeviceGetP2PStatus"));
  auto link_state = reinterpret_cast<NvmlLinkState>(sym("nvmlDeviceGetNvLinkState"));
  auto memory = reinterpret_cast<NvmlMemoryInfo>(sym("nvmlDeviceGetMemoryInfo"));
  if (!init || !shutdown || !count || !handle || !ancestor || !p2p || !link_state || !memory) {
    d.notes.push_back("NVML: libnvidia-ml.so.1 lacks an entry point this program uses");
    return false;
  }
  if (const int rc = init(); rc != 0) {
    d.notes.push_back("NVML: nvmlInit_v2 returned " + std::to_string(rc));
    return false;
  }
  struct Shutdown {
    NvmlShutdown f;
    ~Shutdown() { f(); }
  } shut{shutdown};
  unsigned n = 0;
  if (const int rc = count(&n); rc != 0) {
    d.notes.push_back("NVML: nvmlDeviceGetCount_v2 returned " + std::to_string(rc));
    return false;
  }
  std::vector<NvmlDevice> devices(n);
  for (unsigned i = 0; i < n; ++i)
    if (const int rc = handle(i, &devices[i]); rc != 0) {
      d.notes.push_back("NVML: nvmlDeviceGetHandleByIndex_v2(" + std::to_string(i) + ") returned " + std::to_string(rc));
      return false;
    }
  Topology& t = d.topology;
  t.source = "NVML";
  for (unsigned i = 0; i < n; ++i) t.gpus.push_back("GPU" + std::to_string(i));
  t.gpu_gpu.assign(n, std::vector<Link>(n));
  t.cpu_affinity.assign(n, "");
  t.numa_affinity.assign(n, "");
  for (unsigned i = 0; i < n; ++i) {
    // Active NVLinks of this GPU: the bond width NVML does not report per pair (exact behind a
    // switch, where every pair uses all of them).
    int active = 0;
    for (unsigned l = 0; l < kNvmlMaxLinks; ++l) {
      int state = 0;
      if (link_state(devices[i], l, &state) == 0 && state == 1) ++active;
    }
    NvmlMemory m{};
    if (memory(devices[i], &m) == 0 && (d.gpu_memory_bytes == 0 || m.total < d.gpu_memory_bytes))
      d.gpu_memory_bytes = static_cast<double>(m.total);
    for (unsigned j = 0; j < n; ++j) {
      if (i == j) {
        t.gpu_gpu[i][j] = {LinkKind::self, 0};
        continue;
      }
      int status = 1;
      if (p2p(devices[i], devices[j], kNvmlP2PCapsNvlink, &status) == 0 && status == 0 && active > 0) {
        t.gpu_gpu[i][j] = {LinkKind::nvlink, active};
        continue;
      }
      int level = 50;
      if (const int rc = ancestor(devices[i], devices[j], &level); rc != 0)
        d.notes.push_back("NVML: nvmlDeviceGetTopologyCommonAncestor returned " + std::to_string(rc) +
                          "; the pair is taken as SYS");
      t.gpu_gpu[i][j] = ancestor_link(level);
    }
  }
  return true;
}

}  // namespace

DetectedTopology detect_topology() {
  DetectedTopology d;
  const std::string smi = find_on_path("nvidia-smi");
  if (!smi.empty()) {
    int status = -1;
    const std::string out = run_command("'" + smi + "' topo -m 2>&1", &status);
    if (status == 0) {
      try {
        d.topology = parse_nvidia_smi_topo(out, "nvidia-smi topo -m");
      } catch (const Error& e) {
        d.notes.push_back(std::string("nvidia-smi: ") + e.what());
      }
    } else {
      d.notes.push_back("nvidia-smi topo -m exited with status " + std::to_string(status));
    }
  } else {
    d.notes.push_back("nvidia-smi: not on PATH");
  }
  // NVML also gives each GPU's memory; it is the source of the links when nvidia-smi failed.
  DetectedTopology nvml;
  const bool have_nvml = from_nvml(nvml);
  for (auto& note : nvml.notes) d.notes.push_back(note);
  if (have_nvml) d.gpu_memory_bytes = nvml.gpu_memory_bytes;
  if (d.topology.gpus.empty() && have_nvml && !nvml.topology.gpus.empty()) d.topology = nvml.topology;
  if (d.topology.gpus.empty()) d.topology.source = "hwloc (no GPU found)";
  fill_host_counts(d.topology);
  return d;
}

}  // namespace st
