#include "train/checkpointer.hpp"

#include "comm/group.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"

namespace st {

Checkpointer::Checkpointer(JobAgreements& agreements, MPI_Comm world, std::string dir, int keep, double timeout_s, bool async)
    : agreements_(agreements),
      world_(world),
      dir_(std::move(dir)),
      keep_(keep),
      async_(async),
      watchdog_(std::make_unique<Watchdog>(world, timeout_s, kCheckpointLimit)) {
  if (async_) io_comm_ = duplicate_group(world);
}

namespace {
std::uint64_t snapshot_bytes(const StateSnapshot& snapshot) {
  std::uint64_t floats = 0;
  for (const auto& piece : snapshot.pieces) floats += piece.count * ((piece.m ? 1 : 0) + (piece.v ? 1 : 0) + 1);
  return floats * sizeof(float);
}

// What the write reports, into the Done of a synchronous or a background write alike.
void take_written(Checkpointer::Done& done, WrittenCheckpoint written) {
  done.path = std::move(written.path);
  done.bytes = written.bytes;
  done.left_alone = std::move(written.left_alone);
  done.set_aside = std::move(written.set_aside);
}
}  // namespace

Watchdog::Scope Checkpointer::watch_write(std::int64_t step) {
  const std::string op = "write of step " + std::to_string(step);  // copied by the watchdog
  return Watchdog::Scope(watchdog_.get(), op.c_str(), snapshot_bytes(snapshot_), "checkpoint");
}

Checkpointer::~Checkpointer() {
  if (thread_.joinable()) thread_.join();
  if (deleter_.joinable()) deleter_.join();
}

std::vector<Checkpointer::Done> Checkpointer::save(const CheckpointInfo& info, const ParamLayout& layout,
                                                   Strategy& strategy) {
  Stopwatch stall;
  std::vector<Done> finished;
  if (auto previous = finish()) finished.push_back(*previous);  // one write at a time
  if (deleter_.joinable()) deleter_.join();
  Stopwatch clock;
  // A synchronous write reads the state where the strategy keeps it; an asynchronous one copies
  // it first, since training changes it while the write goes on.
  snapshot_ = async_ ? copy_state(strategy, std::move(spare_)) : view_state(strategy);
  const double copy_seconds = clock.seconds();
  copy_bytes_ = snapshot_.copies.capacity() * sizeof(float);
  if (!async_) {
    Done done;
    std::vector<std::string> old;
    {
      Watchdog::Scope watched = watch_write(info.step);
      take_written(done, write_checkpoint(dir_, info, layout, snapshot_, keep_, world_, &done.phases, &old));
    }
    if (!old.empty()) deleter_ = std::thread([old = std::move(old)] { remove_files(old); });
    done.step = info.step;
    done.seconds = clock.seconds();
    done.stall_seconds = stall.seconds();
    snapshot_ = {};
    finished.push_back(done);
    return finished;
  }
  finished_ = false;
  error_.clear();
  result_ = Done{};
  result_.step = info.step;
  result_.stall_seconds = stall.seconds();
  result_.copy_seconds = copy_seconds;
  thread_ = std::thread([this, info, &layout] {
    Stopwatch write_clock;
    try {
      Watchdog::Scope watched = watch_write(info.step);
      take_written(result_, write_checkpoint(dir_, info, layout, snapshot_, keep_, io_comm_.get(), &result_.phases));
    } catch (const std::exception& e) {
      error_ = e.what();
    }
    result_.seconds = write_clock.seconds();
    spare_ = std::move(snapshot_.copies);
    snapshot_ = {};
    finished_ = true;
  });
  return finished;
}

std::optional<Checkpointer::Done> Checkpointer::join() {
  thread_.join();
  agreements_.agree_or_throw(error_, "world (checkpoint result)");
  return result_;
}

std::optional<Checkpointer::Done> Checkpointer::poll() {
  if (!async_) return std::nullopt;
  const int busy = thread_.joinable() && !finished_ ? 1 : 0;
  if (agreements_.max_over_ranks(busy, "world (checkpoint written?)") != 0 || !thread_.joinable()) return std::nullopt;
  return join();
}

std::optional<Checkpointer::Done> Checkpointer::finish() {
  const int busy = thread_.joinable() ? 1 : 0;
  if (agreements_.max_over_ranks(busy, "world (checkpoint in progress?)") == 0) return std::nullopt;
  return join();
}

}  // namespace st
