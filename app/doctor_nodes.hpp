#pragma once
// `shardtrain doctor`'s view of the nodes: which hosts the job's nodes are, and what carries
// bytes between them (the MPI library's transport settings and a measured ping-pong).
#include <string>

#include "comm/world.hpp"

namespace st::app {

struct NodeReport {
  std::string nodes;      // "2 node(s): host-a (ranks 0-1), host-b (ranks 2-3)"
  std::string transport;  // "between nodes: Open MPI pml ob1, btl tcp,self,vader ...; rank 0 <-> rank 2 ..."
  bool nodes_ok = true;   // false: uneven nodes or ranks not consecutive per node (no two-level collectives)
};

// Collective over the world; the strings are complete on rank 0.
NodeReport describe_nodes(const World& world);

}  // namespace st::app
