#include "comm/stack.hpp"

#include "comm/mpi_check.hpp"

namespace st {

CommStack::CommStack(const World& world, const Settings& settings) : world_(world), settings_(settings) {
  const Collectives mode = settings.mode;
  const IntraNode intra_node = settings.intra_node;
  // A flat ring over several nodes crosses between them: its bytes count as inter-node.
  const bool spans_nodes = world.node_count() > 1;
  const TrafficLevel flat_level = spans_nodes ? TrafficLevel::inter : TrafficLevel::intra;
  if (settings.device_peers) {
    // GPUs: NCCL over the world and inside the node; MPI across nodes, staged through the host.
    flat_ = settings.device_peers(world.comm(), flat_level, settings.timeout_seconds);
    intra_ = settings.device_peers(world.node_comm(), TrafficLevel::intra, settings.timeout_seconds);
    inter_host_ = std::make_unique<MpiCommunicator>(world.cross_comm(), TrafficLevel::inter, MpiWait::polling);
    inter_ = settings.device_staging(*inter_host_);
  } else {
    shared_memory_ = intra_node == IntraNode::shm;
    const bool single_host = world.host_ranks() == world.size();
    if (shared_memory_ && single_host)
      flat_ = std::make_unique<ShmCommunicator>(world.comm(), flat_level);
    else
      flat_ = std::make_unique<MpiCommunicator>(world.comm(), flat_level, MpiWait::polling);
    if (shared_memory_)
      intra_ = std::make_unique<ShmCommunicator>(world.node_comm(), TrafficLevel::intra);
    else
      intra_ = std::make_unique<MpiCommunicator>(world.node_comm(), TrafficLevel::intra, MpiWait::polling);
    inter_ = std::make_unique<MpiCommunicator>(world.cross_comm(), TrafficLevel::inter, MpiWait::polling);
  }
  Communicator* inter = inter_.get();
  Communicator* flat = flat_.get();
  if (settings.inter_gbps > 0 && spans_nodes) {
    // Only what crosses nodes is slowed: the cross-node level, and a flat ring over nodes.
    const double rate = settings.inter_gbps * 1e9, latency = settings.inter_latency_us * 1e-6;
    slow_inter_ = std::make_unique<ThrottledCommunicator>(*inter_, rate, latency);
    slow_flat_ = std::make_unique<ThrottledCommunicator>(*flat_, rate, latency);
    inter = slow_inter_.get();
    flat = slow_flat_.get();
    throttle_note_ = "; inter-node link emulated at " + std::to_string(settings.inter_gbps).substr(0, 6) + " GB/s, " +
                     std::to_string(settings.inter_latency_us).substr(0, 6) + " us";
  }
  two_level_ = std::make_unique<TwoLevelCommunicator>(*intra_, *inter);
  if (mode == Collectives::two_level && !world.uniform())
    throw Error("parallel.collectives = \"two_level\" needs nodes with equal numbers of consecutive ranks; this "
                "job's ranks are placed unevenly (use \"flat\" or \"auto\", or place ranks by node)",
                ErrorScope::all_ranks);
  two_level_active_ = mode == Collectives::two_level || (mode == Collectives::automatic && world.uniform() && world.node_count() > 1 &&
                                               world.local_size() > 1);
  watchdog_ = std::make_unique<Watchdog>(world.comm(), settings.timeout_seconds);
  Communicator& chosen = two_level_active_ ? static_cast<Communicator&>(*two_level_) : *flat;
  watched_ = std::make_unique<WatchedCommunicator>(chosen, *watchdog_, two_level_active_ ? "two-level" : "world");
  async_ = std::make_unique<AsyncCommunicator>(*watched_);
  agreements_ = std::make_unique<JobAgreements>(world.comm(), watchdog_.get());
}

std::string CommStack::description() const {
  const std::string nodes = std::to_string(world_.node_count()) + " node(s) x " + std::to_string(world_.local_size()) +
                            " ranks" + (world_.emulated() ? " (emulated nodes)" : "");
  std::string hosts;  // real nodes: where they are
  if (!world_.emulated() && world_.node_count() > 1)
    for (const std::string& host : world_.node_hosts()) {
      hosts += hosts.empty() ? " (" : ", ";
      hosts += host;
    }
  if (!hosts.empty()) hosts += ")";
  const bool flat_in_shm = shared_memory_ && world_.host_ranks() == world_.size();
  const std::string in_node = !intra_->transport().empty() ? intra_->transport()
                              : shared_memory_               ? "shared memory"
                                                             : "MPI";
  const std::string flat = !flat_->transport().empty() ? flat_->transport() : flat_in_shm ? "shared memory" : "MPI";
  const std::string across = inter_->transport().empty() ? "MPI" : inter_->transport();
  return (two_level_active_ ? "two-level (" + in_node + " in the node, " + across + " across), "
                            : "flat (" + flat + "), ") +
         nodes + hosts + throttle_note_;
}

LevelTraffic CommStack::traffic() const {
  LevelTraffic t = flat_->traffic();
  const LevelTraffic a = intra_->traffic(), b = inter_->traffic();
  t.intra += a.intra;
  t.intra += b.intra;
  t.inter += a.inter;
  t.inter += b.inter;
  for (const Lane* lane : {within_.get(), across_.get()})
    if (lane) {
      const LevelTraffic l = lane->backend->traffic();
      t.intra += l.intra;
      t.inter += l.inter;
    }
  return t;
}

std::unique_ptr<CommStack::Lane> CommStack::make_lane(int color, const char* name) {
  auto lane = std::make_unique<Lane>();
  MPI_Comm split = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_split(world_.comm(), color, world_.rank(), &split));
  lane->comm = OwnedComm(split);
  ST_CHECK_MPI(MPI_Comm_set_errhandler(split, MPI_ERRORS_RETURN));
  int size = 0;
  ST_CHECK_MPI(MPI_Comm_size(split, &size));
  // Does the group span nodes (as the job sees them, emulated or not)? Does it share memory?
  int node_range[2] = {-world_.node(), world_.node()};
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, node_range, 2, MPI_INT, MPI_MAX, split));
  const bool spans_nodes = -node_range[0] != node_range[1];
  MPI_Comm host = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_split_type(split, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host));
  int host_size = 0;
  ST_CHECK_MPI(MPI_Comm_size(host, &host_size));
  ST_CHECK_MPI(MPI_Comm_free(&host));
  int one_host = host_size == size ? 1 : 0;
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &one_host, 1, MPI_INT, MPI_MIN, split));

  const TrafficLevel level = spans_nodes ? TrafficLevel::inter : TrafficLevel::intra;
  if (settings_.device_peers)
    lane->backend = settings_.device_peers(split, level, settings_.timeout_seconds);
  else if (settings_.intra_node == IntraNode::shm && one_host)
    lane->backend = std::make_unique<ShmCommunicator>(split, level);
  else
    lane->backend = std::make_unique<MpiCommunicator>(split, level, MpiWait::polling);
  Communicator* chosen = lane->backend.get();
  if (settings_.inter_gbps > 0 && spans_nodes) {
    lane->throttled = std::make_unique<ThrottledCommunicator>(*lane->backend, settings_.inter_gbps * 1e9,
                                                              settings_.inter_latency_us * 1e-6);
    chosen = lane->throttled.get();
  }
  lane->watchdog = std::make_unique<Watchdog>(world_.comm(), settings_.timeout_seconds);
  lane->watched = std::make_unique<WatchedCommunicator>(*chosen, *lane->watchdog, name);
  lane->async = std::make_unique<AsyncCommunicator>(*lane->watched);
  return lane;
}

void CommStack::trace_to(Timeline* timeline) {
  async_->trace_to(timeline, "comm: world");
  if (within_) within_->async->trace_to(timeline, "comm: group");
  if (across_) across_->async->trace_to(timeline, "comm: replicas");
}

CommStack::Groups CommStack::groups(int group_size) {
  ST_REQUIRE(group_size >= 1 && world_.size() % group_size == 0, "group size must divide the world size");
  if (!within_ || group_size_ != group_size) {
    within_.reset();
    across_.reset();
    within_ = make_lane(world_.rank() / group_size, "group");
    across_ = make_lane(world_.rank() % group_size, "replicas");
    group_size_ = group_size;
  }
  return {*within_->async, *across_->async};
}

}  // namespace st
