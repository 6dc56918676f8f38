#include "ckpt/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <tuple>

#include "ckpt/chunk_io.hpp"
#include "ckpt/h5.hpp"
#include "ckpt/locate.hpp"
#include "ckpt/skeleton_file.hpp"
#include "comm/agree.hpp"
#include "core/error.hpp"
#include "deck/parse.hpp"
#include "core/input_file.hpp"
#include "core/text.hpp"

namespace st {
namespace {

namespace fs = std::filesystem;

// 1 MiB chunks (256 Ki elements). A rank reads and verifies every chunk it touches whole, also
// the two at the ends of each slice it holds, which it shares with a neighbour: with 4 MiB
// chunks that was about a third more than a zero3 rank needs of a 113.7M model and the resume
// read took 0.36-0.43 s, with 1 MiB chunks 0.23-0.28 s (docs/benchmarks.md).
constexpr std::uint64_t kChunkElements = std::uint64_t{1} << 18;
const char* const kStateDatasets[] = {"params", "adam_m", "adam_v"};

std::vector<h5::Range> to_h5(const std::vector<Strategy::StateRange>& ranges) {
  std::vector<h5::Range> out;
  for (const auto& r : ranges) out.push_back({r.offset, r.count});
  return out;
}

std::string errno_text() { return std::strerror(errno); }

// Chunk offsets of /params, /adam_m, /adam_v one after the other: those of dataset k.
std::vector<std::uint64_t> offsets_of(const std::vector<std::uint64_t>& all, std::size_t k, std::uint64_t chunks) {
  const auto first = all.begin() + static_cast<std::ptrdiff_t>(k * chunks);
  return {first, first + static_cast<std::ptrdiff_t>(chunks)};
}

// fsync a file or directory by path; "" or what went wrong.
std::string sync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return "cannot open " + path + " to flush it: " + errno_text();
  const bool ok = ::fsync(fd) == 0;
  const std::string why = ok ? "" : "cannot flush " + path + ": " + errno_text();
  ::close(fd);
  return why;
}

}  // namespace

void remove_files(const std::vector<std::string>& paths) {
  std::error_code ec;  // a file already gone, or that cannot go, is left to the next commit
  for (const auto& path : paths) fs::remove(path, ec);
}

std::string checkpoint_name(std::int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "ckpt_%08lld.h5", static_cast<long long>(step));
  return name;
}

std::int64_t checkpoint_step_of(const std::string& filename) {
  static const std::regex pattern(R"(ckpt_(\d+)\.h5)");
  std::smatch m;
  if (!std::regex_match(filename, m, pattern)) return -1;
  return std::stoll(m[1].str());
}

namespace {

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

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += 'x';
    s += std::to_string(shape[i]);
  }
  return s;
}

std::vector<std::int64_t> parse_shape(const std::string& text) {
  std::vector<std::int64_t> dims;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, 'x')) dims.push_back(std::stoll(part));
  return dims;
}

// An attribute into a field's value, by its type (booleans are stored as integers, the
// architecture by name).
template <class T>
void read_value(hid_t at, const char* name, T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    value = h5::read_int_attribute(at, name) != 0;
  } else if constexpr (std::is_same_v<T, Arch>) {
    const std::string text = h5::read_string_attribute(at, name);
    const std::optional<Arch> arch = arch_from_name(text);
    if (!arch) throw Error("model architecture '" + text + "' is not one this shardtrain knows (gpt2, llama)");
    value = *arch;
  } else if constexpr (std::is_same_v<T, RopeScaling>) {
    const std::string text = h5::read_string_attribute(at, name);
    const std::optional<RopeScaling> scaling = rope_scaling_from_name(text);
    if (!scaling) throw Error("rope scaling '" + text + "' is not one this shardtrain knows (none, llama3)");
    value = *scaling;
  } else {
    h5::read_attribute(at, name, value);
  }
}

CheckpointInfo read_info(hid_t file) {
  if (!h5::has_attribute(file, "format_version")) {
    // The one other HDF5 file a user of shardtrain has at hand: an export of a checkpoint.
    if (h5::has_attribute(file, "source") && h5::has_attribute(file, "step")) {
      const std::string source = h5::read_string_attribute(file, "source");
      throw Error("is a parameters file written by `shardtrain ckpt export` (step " +
                  std::to_string(h5::read_int_attribute(file, "step")) +
                  "), not a checkpoint: it holds the parameters only, one dataset per tensor (read it with h5py or "
                  "h5dump); pass the checkpoint it was exported from, " + source);
    }
    throw Error("is an HDF5 file but not a shardtrain checkpoint (no format_version attribute at /)");
  }
  // The version first, on its own: a newer format may lack or change the other fields.
  CheckpointInfo info;
  info.format_version = h5::read_int_attribute(file, "format_version");
  if (info.format_version > kCheckpointFormat)
    throw Error("written in checkpoint format " + std::to_string(info.format_version) + ", newer than the " +
                std::to_string(kCheckpointFormat) + " this shardtrain reads (use the shardtrain that wrote it, or newer)");
  h5::Handle model = h5::open_group(file, "model");
  for (const CheckpointField& field : kCheckpointFields) {
    const hid_t at = field.in_model() ? model.get() : file;
    if (field.optional && !h5::has_attribute(at, field.name)) {
      // Older checkpoints lack the optional fields; a llama checkpoint always has its own keys, and
      // defaults in their place would describe another model.
      if (field.scaled_rope_only ? field_recorded(field, info.shape)
                                 : field.llama_only && info.shape.arch == Arch::llama)
        throw Error(std::string("attribute '/model/") + field.name + "' is missing (a " +
                    (field.scaled_rope_only ? "llama checkpoint with rope_scaling llama3" : "llama checkpoint") +
                    " records it)");
      continue;
    }
    // The scaling's parameters without the scaling (read before them) would be silently unused.
    if (field.scaled_rope_only && !std::holds_alternative<RopeScaling ModelShape::*>(field.member) &&
        !field_recorded(field, info.shape))
      throw Error(std::string("attribute '/model/rope_scaling' is missing (a llama checkpoint with '/model/") +
                  field.name + "' records it)");
    visit_field(info, field, [&](auto& value) { read_value(at, field.name, value); });
  }
  return info;
}

void write_field(hid_t at, const CheckpointInfo& info, const CheckpointField& field) {
  if (!field_recorded(field, info.shape)) return;
  visit_field(info, field, [&](const auto& value) {
    using T = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<T, double>) h5::write_real_attribute(at, field.name, value);
    else if constexpr (std::is_same_v<T, bool>) h5::write_attribute(at, field.name, std::int64_t{value ? 1 : 0});
    else if constexpr (std::is_same_v<T, Arch>) h5::write_attribute(at, field.name, std::string(arch_name(value)));
    else if constexpr (std::is_same_v<T, RopeScaling>)
      h5::write_attribute(at, field.name, std::string(rope_scaling_name(value)));
    else h5::write_attribute(at, field.name, value);
  });
}

void require_same_shape(const ModelShape& file, const ModelShape& run) {
  const std::string diffs = model_differences(file, run);
  if (!diffs.empty()) throw Error("holds a different model: " + diffs);
}

void require_state_datasets(hid_t file, std::uint64_t elements) {
  for (const char* name : kStateDatasets) {
    if (!h5::has_link(file, name)) throw Error(std::string("dataset '/") + name + "' is missing");
    h5::Handle d = h5::open_dataset(file, name);
    const std::uint64_t n = h5::dataset_length(d.get());
    if (n != elements)
      throw Error(std::string("dataset '/") + name + "' holds " + std::to_string(n) + " elements, the model " +
                  std::to_string(elements));
  }
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
  int rank = 0;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
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
  WrittenCheckpoint written{dir + "/" + name, {}, {}};
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

std::string pointer_target(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec || size > 256) return "";
  std::ifstream in(path);
  std::string name;
  std::getline(in, name);
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  return checkpoint_step_of(name) >= 0 ? name : "";
}

namespace {

// Why `path` cannot be a checkpoint file, found before HDF5 opens it, with what to pass
// instead; "" when it may be one. `resuming`: for checkpoint.resume, which also takes "latest".
std::string checkpoint_path_problem(const std::string& path, bool resuming) {
  const FileCheck check = check_input_file(path);
  switch (check.problem) {
    case FileProblem::none: break;
    case FileProblem::missing: return "no such file";
    case FileProblem::unreadable: return "cannot be read: " + check.reason;
    case FileProblem::directory: {
      // A checkpoint directory, or a run directory with its checkpoints/ inside.
      std::string where = path;
      std::vector<std::string> found = checkpoint_candidates(where);
      if (found.empty() && fs::is_directory(path + "/checkpoints")) {
        where = path + "/checkpoints";
        found = checkpoint_candidates(where);
      }
      std::string text = "is a directory, not a checkpoint file: ";
      text += found.empty() ? "it holds no checkpoint (ckpt_<step>.h5)"
                            : "pass one of its checkpoints, e.g. " + found.front() + " (the newest)";
      if (resuming && !found.empty())
        text += ", or set checkpoint.resume = \"latest\" with checkpoint.dir = \"" + where + "\"";
      return text;
    }
    default: return check.reason + ", not a checkpoint";
  }
  if (const std::string named = pointer_target(path); !named.empty()) {
    const fs::path dir = fs::path(path).parent_path();
    return "is the pointer to the newest checkpoint, not a checkpoint: it names " + named + "; pass " +
           (dir / named).string() +
           (resuming ? ", or set checkpoint.resume = \"latest\" with checkpoint.dir = \"" +
                           (dir.empty() ? std::string(".") : dir.string()) + "\""
                     : "");
  }
  if (!h5::has_hdf5_signature(path)) return "is not an HDF5 file (it lacks HDF5's signature), so not a checkpoint";
  return "";
}

// What rank 0 finds in a checkpoint and every rank needs in order to read its part.
struct ReadPlan {
  CheckpointInfo info;
  // Set when all three state datasets are stored as this shardtrain writes them; then the file
  // offsets of their chunks, /params, /adam_m, /adam_v one after the other.
  std::optional<h5::ChunkGeometry> geometry;
  std::vector<std::uint64_t> chunk_offsets;
};

// Rank 0: opens the file, checks it against the run's model and locates the state's chunks.
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

// Rank 0 makes the plan (reads the file's metadata, and where the chunks are) and shares it: one
// process, not every rank, walks HDF5's headers and chunk index. On failure every rank throws
// the same Error naming the file.
template <class MakePlan>
ReadPlan plan_on_rank0(const std::string& path, MPI_Comm comm, MakePlan make_plan) {
  int rank = 0;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  ReadPlan plan;
  std::string problem;
  if (rank == 0) {
    try {
      plan = make_plan();
    } catch (const Error& e) {
      problem = "checkpoint " + path + ": " + e.what();
    }
  }
  agree_or_throw(comm, problem);
  share(plan, comm);
  return plan;
}

}  // namespace

std::vector<ModelKey> model_keys(const ModelShape& file, const ModelShape& run) {
  using std::to_string;
  std::vector<ModelKey> keys{{"model.n_layer", to_string(file.n_layer), to_string(run.n_layer)},
                             {"model.d_model", to_string(file.d_model), to_string(run.d_model)},
                             {"model.n_head", to_string(file.n_head), to_string(run.n_head)},
                             {"model.seq_len", to_string(file.seq_len), to_string(run.seq_len)},
                             {"model.vocab_size", to_string(file.vocab_size), to_string(run.vocab_size)}};
  if (file.arch != run.arch) keys.push_back({"model.arch", arch_name(file.arch), arch_name(run.arch)});
  // A llama checkpoint names all its keys whatever the deck's architecture, so that the --set
  // suggestions (ckpt/locate.cpp) give the whole model; a GPT-2 deck's side shows Llama's defaults.
  if (file.arch == Arch::llama) {
    auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
    keys.push_back({"model.n_kv_head", to_string(file.kv_heads()), to_string(run.kv_heads())});
    keys.push_back({"model.ffn_dim", to_string(file.hidden()), to_string(run.hidden())});
    keys.push_back({"model.norm_eps", format_shortest(file.norm_eps), format_shortest(run.norm_eps)});
    keys.push_back({"model.rope_theta", format_shortest(file.rope_theta), format_shortest(run.rope_theta)});
    keys.push_back({"model.tie_embeddings", flag(file.tie_embeddings), flag(run.tie_embeddings)});
    if (file.rope_scaling != RopeScaling::none || run.rope_scaling != RopeScaling::none)
      keys.push_back(
          {"model.rope_scaling", rope_scaling_name(file.rope_scaling), rope_scaling_name(run.rope_scaling)});
    if (file.rope_scaling == RopeScaling::llama3) {
      keys.push_back({"model.rope_factor", format_shortest(file.rope_factor), format_shortest(run.rope_factor)});
      keys.push_back({"model.rope_low_freq_factor", format_shortest(file.rope_low_freq_factor),
                      format_shortest(run.rope_low_freq_factor)});
      keys.push_back({"model.rope_high_freq_factor", format_shortest(file.rope_high_freq_factor),
                      format_shortest(run.rope_high_freq_factor)});
      keys.push_back({"model.rope_original_positions", to_string(file.rope_original_positions),
                      to_string(run.rope_original_positions)});
    }
  }
  return keys;
}

std::string model_differences(const ModelShape& file, const ModelShape& run) {
  std::vector<ModelKey> keys = model_keys(file, run);
  keys.push_back({"padded vocabulary (model.vocab_pad_to)", std::to_string(file.padded_vocab),
                  std::to_string(run.padded_vocab)});
  std::vector<std::string> diffs;
  for (const ModelKey& k : keys)
    if (k.file != k.deck) diffs.push_back(std::string(k.key) + " = " + k.file + " in the checkpoint, " + k.deck + " in the deck");
  return join(diffs, "; ");
}

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

VerifiedCheckpoint verify_checkpoint(const std::string& path, MPI_Comm comm) {
  // Rank 0 finds the chunks (and checks the datasets against the model the file says it holds).
  ReadPlan plan = plan_on_rank0(path, comm, [&] { return plan_read(path, read_checkpoint_header(path).shape); });
  int rank = 0, ranks = 1;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  ST_CHECK_MPI(MPI_Comm_size(comm, &ranks));
  VerifiedCheckpoint out;
  out.info = plan.info;
  const std::uint64_t elements = make_layout(plan.info.shape).total();
  std::string problem;
  try {
    std::vector<float> buffer;
    if (plan.geometry) {
      // Each rank reads a contiguous share of every dataset's chunks, a few at a time, exactly as
      // a resume reads them (h5::read_chunks verifies each chunk it touches).
      const h5::ChunkGeometry& g = *plan.geometry;
      const std::uint64_t chunks = g.chunks(), per_read = 64;
      const std::uint64_t first = chunks * static_cast<std::uint64_t>(rank) / static_cast<std::uint64_t>(ranks);
      const std::uint64_t last = chunks * static_cast<std::uint64_t>(rank + 1) / static_cast<std::uint64_t>(ranks);
      for (std::size_t k = 0; k < 3; ++k) {
        const std::vector<std::uint64_t> offsets = offsets_of(plan.chunk_offsets, k, chunks);
        for (std::uint64_t c = first; c < last; c += per_read) {
          const std::uint64_t begin = c * g.chunk, end = g.chunk_end(std::min(last, c + per_read) - 1);
          buffer.resize(end - begin);
          h5::read_chunks(path, {kStateDatasets[k], g, {{begin, end - begin}}, {buffer.data()}, offsets});
          for (float x : buffer) out.sum_squares[k] += static_cast<double>(x) * x;
        }
      }
    } else if (rank == 0) {  // stored otherwise (h5repack, say): HDF5's filter verifies as it reads
      h5::Handle file = h5::open_file_serial(path);
      for (std::size_t k = 0; k < 3; ++k) {
        h5::Handle d = h5::open_dataset(file.get(), kStateDatasets[k]);
        for (std::uint64_t at = 0; at < elements; at += kChunkElements) {
          const std::uint64_t n = std::min<std::uint64_t>(kChunkElements, elements - at);
          buffer.resize(n);
          try {
            h5::read_ranges(d.get(), {{at, n}}, buffer.data());
          } catch (const Error& e) {
            throw Error(std::string("dataset '/") + kStateDatasets[k] + "' elements " + std::to_string(at) + "-" +
                        std::to_string(at + n - 1) + ": " + e.what());
          }
          for (float x : buffer) out.sum_squares[k] += static_cast<double>(x) * x;
        }
      }
    }
  } catch (const Error& e) {
    problem = "checkpoint " + path + ": " + e.what();
  }
  agree_or_throw(comm, problem, false);  // the message names the chunk, whichever rank read it
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, out.sum_squares, 3, MPI_DOUBLE, MPI_SUM, comm));
  return out;
}

namespace {
// How the run that wrote a checkpoint split its layers (its settings' parallel.tensor): ", each
// layer split over 2 ranks (parallel.tensor, with sequence parallelism)", or "" (whole layers, or
// settings this version does not read). The file holds the whole model either way.
std::string tensor_split_of(const CheckpointInfo& info) {
  try {
    const Config config = parse_deck(info.settings_or_deck(), "the checkpoint's settings", {});
    if (config.parallel.tensor <= 1) return "";
    return ", each layer split over " + std::to_string(config.parallel.tensor) + " ranks (parallel.tensor" +
           (config.parallel.sequence_parallel ? ", with sequence parallelism)" : ")");
  } catch (const Error&) {
    return "";
  }
}
}  // namespace

std::string inspect_checkpoint(const std::string& path) {
  // Verified as a resume verifies it, chunk by chunk, so a damaged file is named as a resume names it.
  const VerifiedCheckpoint verified = verify_checkpoint(path, MPI_COMM_SELF);
  try {
    const CheckpointInfo& info = verified.info;
    const ModelShape& s = info.shape;
    const std::uint64_t elements = make_layout(s).total();
    std::ostringstream os;
    os << path << "\n"
       << "  format " << info.format_version << ", step " << info.step << ", tokens seen " << info.tokens_seen
       << ", data position " << info.data_position << ", seed " << info.seed << "\n"
       << (info.data_shard.empty() ? std::string("  data: no file position (written before it was recorded)")
                                   : "  data: " + info.data_order + " order, next batch at token " +
                                         std::to_string(info.data_shard_offset) + " of " + info.data_shard + ", epoch " +
                                         std::to_string(info.data_epoch))
       << "\n"
       << "  written by " << info.world_size << " rank(s) with strategy " << info.strategy << " ("
       << info.precision << (info.strategy == "hsdp" ? ", groups of " + std::to_string(info.shard_group) : "")
       << ")" << tensor_split_of(info) << ", " << info.created_by << (info.run_id.empty() ? "" : ", run " + info.run_id) << "\n"
       << "  model: " << model_summary(s) << ", " << elements << " parameters\n";
    h5::Handle file = h5::open_file_serial(path);
    const auto names = h5::read_strings(h5::open_group(file.get(), "layout").get(), "names");
    file.close("closing " + path);
    os << "  " << names.size() << " tensors in /layout\n";
    for (std::size_t k = 0; k < 3; ++k) {
      char line[160];
      std::snprintf(line, sizeof line, "  /%-7s %llu x float32, Fletcher32 verified, L2 norm %.6g\n", kStateDatasets[k],
                    static_cast<unsigned long long>(elements), std::sqrt(verified.sum_squares[k]));
      os << line;
    }
    // The run's own settings where the checkpoint has them (deck and --set), else its deck file.
    os << (info.settings.empty() ? "  deck (the file the run started with; --set values are not recorded in "
                                   "checkpoints this old):\n"
                                 : "  settings of the run (deck and --set; defaults commented out):\n");
    std::istringstream deck(info.settings_or_deck());
    for (std::string line; std::getline(deck, line);) os << "    " << line << "\n";
    return os.str();
  } catch (const Error& e) {
    throw Error("checkpoint " + path + ": " + e.what(), ErrorScope::all_ranks);
  }
}

CheckpointParams read_checkpoint_params(const std::string& path) {
  try {
    if (!fs::exists(path)) throw Error("no such file");
    h5::Handle file = h5::open_file_serial(path);
    CheckpointParams out;
    out.info = read_info(file.get());
    const std::uint64_t elements = make_layout(out.info.shape).total();
    require_state_datasets(file.get(), elements);
    out.params.resize(elements);
    h5::read_ranges(h5::open_dataset(file.get(), "params").get(), {{0, elements}}, out.params.data());
    file.close("closing " + path);
    return out;
  } catch (const Error& e) {
    throw Error("checkpoint " + path + ": " + e.what(), ErrorScope::all_ranks);
  }
}

void export_checkpoint(const std::string& path, const std::string& out) {
  try {
    if (const std::string problem = checkpoint_path_problem(path, false); !problem.empty()) throw Error(problem);
    h5::Handle file = h5::open_file_serial(path);
    const CheckpointInfo info = read_info(file.get());
    const std::uint64_t elements = make_layout(info.shape).total();
    require_state_datasets(file.get(), elements);
    h5::Handle table = h5::open_group(file.get(), "layout");
    const auto names = h5::read_strings(table.get(), "names");
    const auto shapes = h5::read_strings(table.get(), "shapes");
    const auto offsets = h5::read_int_dataset(table.get(), "offsets");
    std::vector<float> params(elements);
    h5::read_ranges(h5::open_dataset(file.get(), "params").get(), {{0, elements}}, params.data());

    h5::Handle target = h5::create_file_serial(out);
    h5::write_attribute(target.get(), "source", path);
    h5::write_attribute(target.get(), "step", info.step);
    for (const CheckpointField& field : kCheckpointFields)
      if (field.in_model()) write_field(target.get(), info, field);
    for (std::size_t i = 0; i < names.size(); ++i) {
      const auto dims = parse_shape(shapes[i]);
      std::vector<hsize_t> h5dims(dims.begin(), dims.end());
      h5::Handle space(H5Screate_simple(static_cast<int>(h5dims.size()), h5dims.data(), nullptr), H5Sclose, "dataspace");
      h5::Handle d(H5Dcreate2(target.get(), names[i].c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                              H5P_DEFAULT),
                   H5Dclose, "dataset " + names[i]);
      h5::check(H5Dwrite(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                         params.data() + offsets[i]),
                "writing " + names[i]);
    }
    target.close("closing " + out);
  } catch (const Error& e) {
    throw Error("checkpoint " + path + ": " + e.what(), ErrorScope::all_ranks);
  }
}

}  // namespace st
