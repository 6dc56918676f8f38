#include "ckpt/read.hpp"

#include <tuple>

#include "ckpt/catalogue.hpp"
#include "ckpt/chunk_io.hpp"
#include "ckpt/file_format.hpp"
#include "ckpt/h5.hpp"
#include "ckpt/read_plan.hpp"
#include "comm/agree.hpp"
#include "core/error.hpp"

namespace st {
namespace {

std::vector<h5::Range> to_h5(const std::vector<Strategy::StateRange>& ranges) {
  std::vector<h5::Range> out;
  for (const auto& r : ranges) out.push_back({r.offset, r.count});
  return out;
}

}  // namespace

CheckpointInfo read_checkpoint(const std::string& path, const ModelShape& shape, Strategy& strategy, MPI_Comm comm) {
  ReadPlan plan = plan_on_rank0(path, comm, [&] { return plan_read(path, shape); });
  std::string problem;

  // Every rank reads its slices straight into the strategy, verifying every chunk it touches.
  try {
    const Strategy::LoadTargets targets = strategy.load_targets();
    const std::tuple<const char*, const std::vector<Strategy::StateRange>*, const std::vector<float*>*> reads[] = {
        {"params", &targets.param_ranges, &targets.params},
        {"adam_m", &targets.optimizer_ranges, &targets.m},
        {"adam_v", &targets.optimizer_ranges, &targets.v}};
    if (plan.geometry) {
      for (std::size_t k = 0; k < 3; ++k) {
        const auto [name, ranges, into] = reads[k];
        h5::read_chunks(path, {name, *plan.geometry, to_h5(*ranges), *into,
                               offsets_of(plan.chunk_offsets, k, plan.geometry->chunks())});
      }
    } else {  // not stored as this shardtrain writes it: HDF5's filter reads and verifies it
      h5::Handle file = h5::open_file_serial(path);
      for (const auto& [name, ranges, into] : reads) {
        h5::Handle d = h5::open_dataset(file.get(), name);
        const auto h5_ranges = to_h5(*ranges);
        for (std::size_t i = 0; i < h5_ranges.size(); ++i) h5::read_ranges(d.get(), {h5_ranges[i]}, (*into)[i]);
      }
    }
    strategy.finish_load();
  } catch (const Error& e) {
    problem = "checkpoint " + path + ": " + e.what();
  }
  agree_or_throw(comm, problem, false);  // the message names the chunk, whichever rank read it
  return plan.info;
}

CheckpointInfo read_checkpoint_header(const std::string& path) {
  if (const std::string problem = checkpoint_path_problem(path, true); !problem.empty()) throw Error(problem);
  h5::Handle file = h5::open_file_serial(path);
  CheckpointInfo info = read_info(file.get());
  file.close("closing " + path);
  return info;
}

CheckpointInfo read_checkpoint_info(const std::string& path, MPI_Comm comm) {
  return plan_on_rank0(path, comm, [&] {
           ReadPlan plan;
           plan.info = read_checkpoint_header(path);
           return plan;
         })
      .info;
}

}  // namespace st
