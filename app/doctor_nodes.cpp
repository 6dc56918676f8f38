#include "app/doctor_nodes.hpp"

#include <algorithm>
#include <vector>

#include "comm/group.hpp"
#include "comm/mpi_library.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "core/timer.hpp"

namespace st::app {
namespace {

// Round trips between rank 0 and `peer`: the one-way time of `bytes` (seconds), median of `runs`.
double ping_pong(const World& world, int peer, std::size_t bytes, int runs) {
  std::vector<char> buffer(std::max<std::size_t>(bytes, 1));
  std::vector<double> times;
  for (int i = 0; i < runs + 1; ++i) {  // the first run sets up the connection
    Stopwatch clock;
    round_trip(std::span<char>(buffer.data(), bytes), 0, peer, world.comm());
    if (i > 0) times.push_back(clock.seconds() / 2);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

NodeReport describe_nodes(const World& world) {
  const int size = world.size();
  const std::vector<std::string> names = all_gather_text(world.host(), world.comm());
  const std::vector<int> nodes = all_gather_values(world.node(), world.comm());
  auto host_of = [&](int r) { return names[static_cast<std::size_t>(r)]; };

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
  const std::string settings = mpi_transport_settings();
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
