#include "app/doctor_nodes.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/text.hpp"
#include "core/timer.hpp"

namespace st::app {
namespace {

constexpr int kName = 256;

// A string MCA parameter of Open MPI ("pml", "btl", "btl_tcp_if_include") through the MPI tool
// interface: its value, "" when it is unset (the library chooses), or "?" where this MPI has no
// such control variable (another library, or a component that is not built).
std::string control_variable(const char* name) {
  int index = -1;
  if (MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS) return "?";
  char cvar_name[kName], description[1024];
  int name_length = kName, description_length = sizeof description, verbosity = 0, bind = 0, scope = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_T_enum enumtype = MPI_T_ENUM_NULL;
  if (MPI_T_cvar_get_info(index, cvar_name, &name_length, &verbosity, &type, &enumtype, description,
                          &description_length, &bind, &scope) != MPI_SUCCESS ||
      type != MPI_CHAR)
    return "?";
  MPI_T_cvar_handle handle = MPI_T_CVAR_HANDLE_NULL;
  int count = 0;
  if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) != MPI_SUCCESS) return "?";
  std::vector<char> value(static_cast<std::size_t>(std::max(count, 0)) + 1, '\0');
  const bool read = MPI_T_cvar_read(handle, value.data()) == MPI_SUCCESS;
  MPI_T_cvar_handle_free(&handle);
  return read ? std::string(value.data()) : "?";
}

std::string setting(const std::string& value) { return value.empty() ? "the library's choice" : value; }

// What the library is told to use between processes, in one phrase.
std::string transport_settings() {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return "MPI tool interface unavailable";
  const std::string pml = control_variable("pml"), btl = control_variable("btl");
  const std::string tcp_if = control_variable("btl_tcp_if_include");
  MPI_T_finalize();
  if (pml == "?" && btl == "?") return "not an Open MPI library: transport not reported";
  std::string s = "Open MPI pml " + setting(pml) + ", btl " + setting(btl);
  if (!tcp_if.empty() && tcp_if != "?") s += ", tcp on " + tcp_if;
  return s;
}

// Round trips between rank 0 and `peer`: the one-way time of `bytes` (seconds), median of `runs`.
double ping_pong(const World& world, int peer, std::size_t bytes, int runs) {
  std::vector<char> buffer(std::max<std::size_t>(bytes, 1));
  const int count = static_cast<int>(bytes);
  std::vector<double> times;
  for (int i = 0; i < runs + 1; ++i) {  // the first run sets up the connection
    Stopwatch clock;
    if (world.rank() == 0) {
      ST_CHECK_MPI(MPI_Send(buffer.data(), count, MPI_CHAR, peer, 7, world.comm()));
      ST_CHECK_MPI(MPI_Recv(buffer.data(), count, MPI_CHAR, peer, 7, world.comm(), MPI_STATUS_IGNORE));
    } else if (world.rank() == peer) {
      ST_CHECK_MPI(MPI_Recv(buffer.data(), count, MPI_CHAR, 0, 7, world.comm(), MPI_STATUS_IGNORE));
      ST_CHECK_MPI(MPI_Send(buffer.data(), count, MPI_CHAR, 0, 7, world.comm()));
    }
    if (i > 0) times.push_back(clock.seconds() / 2);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

void quiet_barrier(MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  ST_CHECK_MPI(MPI_Ibarrier(comm, &request));
  int done = 0;
  while (true) {
    ST_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) break;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

NodeReport describe_nodes(const World& world) {
  const int size = world.size();
  std::vector<char> names(static_cast<std::size_t>(size) * kName, '\0');
  char mine[kName] = {};
  std::strncpy(mine, world.host().c_str(), kName - 1);
  ST_CHECK_MPI(MPI_Allgather(mine, kName, MPI_CHAR, names.data(), kName, MPI_CHAR, world.comm()));
  std::vector<int> nodes(static_cast<std::size_t>(size));
  const int node = world.node();
  ST_CHECK_MPI(MPI_Allgather(&node, 1, MPI_INT, nodes.data(), 1, MPI_INT, world.comm()));
  auto host_of = [&](int r) { return std::string(names.data() + static_cast<std::size_t>(r) * kName); };

  NodeReport report;
  report.nodes_ok = world.uniform();
  // Per node: its host and its ranks ("0-1" when consecutive, else listed).
  std::vector<std::string> hosts;
  std::string list;
  for (int n = 0; n < world.node_count(); ++n) {
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r)
      if (nodes[static_cast<std::size_t>(r)] == n) ranks.push_back(r);
    if (ranks.empty()) continue;
    const bool consecutive = ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
    std::string members;
    if (consecutive) {
      members = ranks.size() == 1 ? std::to_string(ranks.front())
                                  : std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
    } else {
      for (int r : ranks) {
        if (!members.empty()) members += ',';
        members += std::to_string(r);
      }
    }
    const std::string host = host_of(ranks.front());
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    list += (list.empty() ? "" : ", ") + host + " (rank" + (ranks.size() == 1 ? " " : "s ") + members + ")";
  }
  report.nodes = std::to_string(world.node_count()) + " node(s)" +
                 (world.emulated() ? " emulated on " + std::to_string(hosts.size()) + " host(s)" : "") + ": " + list;
  if (!report.nodes_ok)
    report.nodes += "; the nodes are uneven or their ranks are not consecutive, so collectives stay flat";

  // The first rank of another host: where a byte from rank 0 must leave the host.
  int peer = -1;
  for (int r = 1; r < size && peer < 0; ++r)
    if (host_of(r) != host_of(0)) peer = r;
  const std::string settings = transport_settings();
  if (peer < 0) {
    report.transport = "one host: no inter-node transport (" + settings + ")" +
                       (world.node_count() > 1 ? "; the emulated nodes exchange within this host" : "");
    return report;
  }
  quiet_barrier(world.comm());
  const double small = ping_pong(world, peer, 8, 20);
  const double large = ping_pong(world, peer, 1u << 20, 5);
  quiet_barrier(world.comm());
  report.transport = "between hosts: " + settings + "; rank 0 (" + host_of(0) + ") <-> rank " + std::to_string(peer) +
                     " (" + host_of(peer) + "): 8 B one way in " + format_fixed(small * 1e6, 1) + " us, 1 MiB at " +
                     format_fixed((1u << 20) / large / 1e9, 2) + " GB/s";
  return report;
}

}  // namespace st::app
