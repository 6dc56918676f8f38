#include "ckpt/read_plan.hpp"

#include <bit>
#include <type_traits>
#include <utility>

#include "ckpt/catalogue.hpp"
#include "ckpt/file_format.hpp"
#include "ckpt/h5.hpp"
#include "comm/agree.hpp"
#include "comm/group.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"

namespace st {
namespace {

void require_same_shape(const ModelShape& file, const ModelShape& run) {
  const std::string diffs = model_differences(file, run);
  if (!diffs.empty()) throw Error("holds a different model: " + diffs);
}

void share(ReadPlan& plan, MPI_Comm comm) {
  // The integers (the table's, then the chunk geometry) go in one broadcast, each string in its own.
  std::vector<std::uint64_t> numbers;
  for (const CheckpointField& field : kCheckpointFields)
    visit_field(plan.info, field, [&](auto& value) {
      using T = std::decay_t<decltype(value)>;
      if constexpr (std::is_same_v<T, std::string>) broadcast(value, 0, comm);
      else if constexpr (std::is_same_v<T, double>) numbers.push_back(std::bit_cast<std::uint64_t>(value));
      else numbers.push_back(static_cast<std::uint64_t>(value));
    });
  const h5::ChunkGeometry geometry = plan.geometry.value_or(h5::ChunkGeometry{0, 0});
  numbers.insert(numbers.end(), {plan.geometry ? 1u : 0u, geometry.elements, geometry.chunk});
  broadcast(numbers, 0, comm);
  std::size_t k = 0;
  for (const CheckpointField& field : kCheckpointFields)
    visit_field(plan.info, field, [&](auto& value) {
      using T = std::decay_t<decltype(value)>;
      if constexpr (std::is_same_v<T, double>) value = std::bit_cast<double>(numbers[k++]);
      else if constexpr (std::is_same_v<T, bool>) value = numbers[k++] != 0;
      else if constexpr (!std::is_same_v<T, std::string>) value = static_cast<T>(numbers[k++]);
    });
  plan.geometry.reset();
  if (numbers[k] != 0) plan.geometry = h5::ChunkGeometry{numbers[k + 1], numbers[k + 2]};
  broadcast(plan.chunk_offsets, 0, comm);
}

}  // namespace

ReadPlan plan_read(const std::string& path, const ModelShape& shape) {
  if (const std::string problem = checkpoint_path_problem(path, true); !problem.empty()) throw Error(problem);
  ReadPlan plan;
  h5::Handle file = h5::open_file_serial(path);
  plan.info = read_info(file.get());
  require_same_shape(plan.info.shape, shape);
  const std::uint64_t elements = make_layout(shape).total();
  require_state_datasets(file.get(), elements);
  // Read directly only if all three datasets are stored as this shardtrain writes them, in
  // chunks of one size; otherwise HDF5 reads them all.
  std::optional<h5::ChunkGeometry> geometry;
  std::vector<std::uint64_t> offsets;
  for (const char* name : kStateDatasets) {
    h5::Handle d = h5::open_dataset(file.get(), name);
    const auto mine = h5::direct_geometry(d.get());
    if (!mine || (geometry && mine->chunk != geometry->chunk)) return plan;
    geometry = mine;
    const std::vector<std::uint64_t> where = h5::chunk_offsets(d.get(), *mine);
    offsets.insert(offsets.end(), where.begin(), where.end());
  }
  plan.geometry = geometry;
  plan.chunk_offsets = std::move(offsets);
  file.close("closing " + path);
  return plan;
}

ReadPlan plan_on_rank0(const std::string& path, MPI_Comm comm, const std::function<ReadPlan()>& make_plan) {
  const int rank = group_rank(comm);
  ReadPlan plan;
  agreed(comm, [&] {
    if (rank != 0) return;
    try {
      plan = make_plan();
    } catch (const Error& e) {
      throw Error("checkpoint " + path + ": " + e.what());
    }
  });
  share(plan, comm);
  return plan;
}

}  // namespace st
