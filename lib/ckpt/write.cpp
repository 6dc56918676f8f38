#include "ckpt/write.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "ckpt/catalogue.hpp"
#include "ckpt/chunk_io.hpp"
#include "ckpt/file_format.hpp"
#include "ckpt/h5.hpp"
#include "ckpt/locate.hpp"
#include "ckpt/skeleton_file.hpp"
#include "comm/agree.hpp"
#include "comm/group.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"

namespace st {
namespace {

namespace fs = std::filesystem;

std::string errno_text() { return std::strerror(errno); }

// fsync a file or directory by path; "" or what went wrong.
std::string sync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return "cannot open " + path + " to flush it: " + errno_text();
  const bool ok = ::fsync(fd) == 0;
  const std::string why = ok ? "" : "cannot flush " + path + ": " + errno_text();
  ::close(fd);
  return why;
}

// Rank 0, after every rank has closed the temporary file: make it durable, give it its name,
// point `latest` at it, drop old ones. "" or what went wrong.
std::string commit(const std::string& dir, const std::string& tmp, const std::string& name, const CheckpointInfo& info,
                   int keep, PhaseLog& log, std::vector<std::string>* deferred, WrittenCheckpoint& written) {
  const std::string final_path = dir + "/" + name;
  if (auto why = sync_path(tmp, false); !why.empty()) return why;
  log.mark("fsync");
  if (const std::string moved = set_aside_other_run(final_path, info); !moved.empty()) written.set_aside.push_back(moved);
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0)
    return "cannot rename " + tmp + " to " + final_path + ": " + errno_text();
  if (auto why = sync_path(dir, true); !why.empty()) return why;
  log.mark("rename");
  const std::string latest = dir + "/latest", latest_tmp = dir + "/latest.tmp";
  {
    std::ofstream out(latest_tmp, std::ios::trunc);
    out << name << "\n";
    out.close();
    if (!out) return "cannot write " + latest_tmp;
  }
  if (auto why = sync_path(latest_tmp, false); !why.empty()) return why;
  if (std::rename(latest_tmp.c_str(), latest.c_str()) != 0) return "cannot rename " + latest_tmp + ": " + errno_text();
  if (auto why = sync_path(dir, true); !why.empty()) return why;
  log.mark("latest");

  // This run's newest `keep` stay (ckpt/locate.hpp); leftovers of interrupted writes go too.
  const RetentionPlan plan = plan_retention(dir, final_path, info, keep);
  std::vector<std::string> doomed = plan.remove;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().filename().string().ends_with(".h5.tmp") && entry.path() != fs::path(tmp))
      doomed.push_back(entry.path().string());
  if (deferred) deferred->insert(deferred->end(), doomed.begin(), doomed.end());
  else remove_files(doomed);
  written.left_alone = plan.left_alone;
  log.mark("keep");
  return "";
}

// Rank 0: creates `tmp` with everything but the state datasets' data (attributes, the tensor
// table, the datasets with their chunks allocated) and returns the file offset of every chunk of
// /params, /adam_m and /adam_v, in that order.
std::vector<std::uint64_t> lay_out(const std::string& dir, const std::string& tmp, const CheckpointInfo& info,
                                   const ParamLayout& layout, const h5::ChunkGeometry& geometry) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create checkpoint directory '" + dir + "' (checkpoint.dir): " + ec.message());
  h5::SkeletonFile file(tmp);
  const hid_t f = file.get();
  CheckpointInfo written = info;
  written.format_version = kCheckpointFormat;  // the format this shardtrain writes, whatever `info` says
  // The root's attributes before /model is created: in this order the file's bytes are those
  // earlier versions of shardtrain wrote (objects' timestamps aside).
  for (const CheckpointField& field : kCheckpointFields)
    if (!field.in_model()) write_field(f, written, field);
  {
    h5::Handle model = h5::create_group(f, "model");
    for (const CheckpointField& field : kCheckpointFields)
      if (field.in_model()) write_field(model.get(), written, field);
  }
  {
    h5::Handle table = h5::create_group(f, "layout");
    std::vector<std::string> names, shapes;
    std::vector<std::int64_t> offsets, sizes;
    for (const TensorSlot* t : layout.all_tensors()) {
      names.push_back(t->name);
      shapes.push_back(shape_text(t->shape));
      offsets.push_back(static_cast<std::int64_t>(t->offset));
      sizes.push_back(static_cast<std::int64_t>(t->size));
    }
    h5::write_strings(table.get(), "names", names);
    h5::write_strings(table.get(), "shapes", shapes);
    h5::write_int_dataset(table.get(), "offsets", offsets);
    h5::write_int_dataset(table.get(), "sizes", sizes);
  }
  // The state datasets: chunks allocated now (their fill values not written), data later.
  std::vector<std::uint64_t> chunk_offsets;
  file.skip_raw_data(true);
  for (const char* name : kStateDatasets) {
    h5::Handle d = h5::create_float_dataset(f, name, geometry.elements, geometry.chunk);
    const std::vector<std::uint64_t> where = h5::chunk_offsets(d.get(), geometry);
    chunk_offsets.insert(chunk_offsets.end(), where.begin(), where.end());
  }
  file.skip_raw_data(false);
  file.close("closing " + tmp);
  return chunk_offsets;
}

}  // namespace

std::uint64_t checkpoint_state_bytes(const ParamLayout& layout) {
  return std::size(kStateDatasets) * sizeof(float) * layout.total();
}

void remove_files(const std::vector<std::string>& paths) {
  std::error_code ec;  // a file already gone, or that cannot go, is left to the next commit
  for (const auto& path : paths) fs::remove(path, ec);
}

StateSnapshot view_state(Strategy& strategy) {
  StateSnapshot snapshot;
  snapshot.pieces = strategy.state_pieces();
  return snapshot;
}

StateSnapshot copy_state(Strategy& strategy, std::vector<float> storage) {
  StateSnapshot snapshot = view_state(strategy);
  std::size_t n = 0;
  for (const auto& p : snapshot.pieces) n += p.count;
  snapshot.copies = std::move(storage);
  snapshot.copies.resize(3 * n);
  float* at = snapshot.copies.data();
  for (auto& p : snapshot.pieces) {
    for (const float** field : {&p.params, &p.m, &p.v}) {
      std::copy_n(*field, p.count, at);
      *field = at;
      at += p.count;
    }
  }
  return snapshot;
}

WrittenCheckpoint write_checkpoint(const std::string& dir, const CheckpointInfo& info, const ParamLayout& layout,
                                   const StateSnapshot& state, int keep, MPI_Comm comm, PhaseLog* log,
                                   std::vector<std::string>* deferred_deletes) {
  PhaseLog unused;
  PhaseLog& phases = log ? *log : unused;
  phases.skip();
  const int rank = group_rank(comm);
  const std::string name = checkpoint_name(info.step);
  const std::string tmp = dir + "/" + name + ".tmp";
  const h5::ChunkGeometry geometry{layout.total(), std::min<std::uint64_t>(kChunkElements, layout.total())};

  // Rank 0 lays the file out and tells every rank where the state datasets' chunks are.
  std::vector<std::uint64_t> chunk_offsets;
  std::string problem;
  if (rank == 0) {
    try {
      chunk_offsets = lay_out(dir, tmp, info, layout, geometry);
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  agree_or_throw(comm, problem);
  broadcast(chunk_offsets, 0, comm);
  phases.mark("layout");

  // Every rank writes the bytes of its pieces, and the checksums (chunk_io.hpp).
  std::vector<h5::ChunkedWrite> writes;
  std::vector<h5::Range> ranges;
  for (const auto& p : state.pieces) ranges.push_back({p.offset, p.count});
  for (std::size_t k = 0; k < 3; ++k) {
    h5::ChunkedWrite w{geometry, ranges, {}, offsets_of(chunk_offsets, k, geometry.chunks())};
    for (const auto& p : state.pieces) w.data.push_back(k == 0 ? p.params : k == 1 ? p.m : p.v);
    writes.push_back(std::move(w));
  }
  h5::write_chunks(tmp, writes, comm, &phases);

  problem.clear();
  WrittenCheckpoint written{dir + "/" + name, checkpoint_state_bytes(layout), {}, {}};
  if (rank == 0) {
    try {
      problem = commit(dir, tmp, name, info, keep, phases, deferred_deletes, written);
    } catch (const std::exception& e) {  // a directory listing or an HDF5 header that throws
      problem = std::string("committing ") + written.path + ": " + e.what();
    }
  }
  agree_or_throw(comm, problem);
  phases.mark("commit_agree");
  return written;
}

}  // namespace st
