#include "comm/stack.hpp"

#include "core/error.hpp"

namespace st {

CommStack::CommStack(const World& world, const std::string& mode) : world_(world) {
  using Level = MpiCommunicator::Level;
  // A flat ring over several nodes crosses between them: its bytes count as inter-node.
  flat_ = std::make_unique<MpiCommunicator>(world.comm(), world.node_count() > 1 ? Level::inter : Level::intra);
  intra_ = std::make_unique<MpiCommunicator>(world.node_comm(), Level::intra);
  inter_ = std::make_unique<MpiCommunicator>(world.cross_comm(), Level::inter);
  two_level_ = std::make_unique<TwoLevelCommunicator>(*intra_, *inter_);
  if (mode == "two_level" && !world.uniform())
    throw Error("parallel.collectives = \"two_level\" needs nodes with equal numbers of consecutive ranks; this "
                "job's ranks are placed unevenly (use \"flat\" or \"auto\", or place ranks by node)",
                ErrorScope::all_ranks);
  two_level_active_ = mode == "two_level" || (mode == "auto" && world.uniform() && world.node_count() > 1 &&
                                               world.local_size() > 1);
}

std::string CommStack::description() const {
  const std::string nodes = std::to_string(world_.node_count()) + " node(s) x " + std::to_string(world_.local_size()) +
                            " ranks" + (world_.emulated() ? " (emulated nodes)" : "");
  return (two_level_active_ ? "two-level, " : "flat ring, ") + nodes;
}

LevelTraffic CommStack::traffic() const {
  LevelTraffic t = flat_->traffic();
  const LevelTraffic a = intra_->traffic(), b = inter_->traffic();
  t.intra += a.intra;
  t.intra += b.intra;
  t.inter += a.inter;
  t.inter += b.inter;
  return t;
}

}  // namespace st
