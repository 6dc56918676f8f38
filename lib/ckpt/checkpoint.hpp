#pragma once
// Checkpoints: one parallel HDF5 file per checkpoint, self-describing, atomically committed.
//
// Layout (format 1; docs/checkpoints.md; the attributes are kCheckpointFields below):
//   /                   attributes: format_version, step, tokens_seen, data_position, seed,
//                       strategy, precision, world_size, shard_group, deck (text), created_by;
//                       data_order, data_shard, data_shard_offset, data_epoch (where the
//                       training data loader stands; absent from files written before them)
//   /model              attributes: n_layer, d_model, n_head, seq_len, vocab_size, padded_vocab
//   /layout/names       tensor names; /layout/offsets, /layout/sizes: their place in the flat
//                       layout; /layout/shapes: "768x2304"
//   /params             fp32 parameters (the master copy in mixed precision), flat layout
//   /adam_m, /adam_v    Adam moments, flat layout
// The three state datasets are chunked with Fletcher32 checksums. Rank 0 lays the file out
// with HDF5 (skeleton_file.hpp); every rank then writes the chunks' bytes of its own slices
// straight into the file (O_DIRECT where the file system takes it) and reads back only what it
// needs (chunk_io.hpp), so a checkpoint written by any world size and strategy resumes on any
// other.
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "ckpt/phase_log.hpp"
#include "model/layout.hpp"
#include "parallel/strategy.hpp"

namespace st {

inline constexpr std::int64_t kCheckpointFormat = 1;

struct CheckpointInfo {
  std::int64_t format_version = kCheckpointFormat;
  std::int64_t step = 0;           // optimizer steps taken
  std::int64_t tokens_seen = 0;
  std::int64_t data_position = 0;  // training batches drawn
  // The data file where the next training batch starts and its token offset in that file, the
  // order the loader reads in, and the passes over the training data completed ("" and 0 in a
  // checkpoint written before these were recorded).
  std::string data_order, data_shard;
  std::int64_t data_shard_offset = 0, data_epoch = 0;
  std::int64_t seed = 0;
  std::string strategy, precision, deck, created_by;
  std::int64_t world_size = 0, shard_group = 0;
  // Every setting of the run that wrote it: the deck after --set and the model's shape from a
  // weights file, as resolved.toml holds them (deck/parse.hpp resolved_deck_text), which
  // generate, eval and inspect read instead of `deck` ("" in a checkpoint written before these
  // were recorded).
  std::string settings;
  // The run this checkpoint belongs to: made when a run starts from step 0, kept by the runs that
  // resume it. Retention deletes only this run's checkpoints ("" in older checkpoints, and in
  // runs that resume one of them).
  std::string run_id;
  ModelShape shape;
  // The deck text a command that reads the checkpoint parses: its resolved settings, else (older
  // checkpoints) the deck file it was started with.
  const std::string& settings_or_deck() const { return settings.empty() ? deck : settings; }
};

// One attribute of a checkpoint's metadata. Reading, writing, sharing with the other ranks and
// exporting all loop over kCheckpointFields, so a field added there is written, read and reaches
// every rank; listed by hand in each of those places, one could be missed in one of them.
struct CheckpointField {
  const char* name;  // the attribute's name: at /, or at /model for the model's shape
  std::variant<std::int64_t CheckpointInfo::*, std::string CheckpointInfo::*, std::int64_t ModelShape::*,
               double ModelShape::*, bool ModelShape::*, Arch ModelShape::*, RopeScaling ModelShape::*>
      member;
  // Absent from checkpoints written before it was recorded: read when present, else left at its
  // default.
  bool optional = false;
  // Written for llama models only (a GPT-2 checkpoint's bytes stay those of earlier versions);
  // read when present.
  bool llama_only = false;
  // Written only for a llama whose rotary frequencies are rescaled (model.rope_scaling other than
  // "none"); absent, the shape's defaults: no scaling.
  bool scaled_rope_only = false;
  bool in_model() const {
    return !std::holds_alternative<std::int64_t CheckpointInfo::*>(member) &&
           !std::holds_alternative<std::string CheckpointInfo::*>(member);
  }
};

inline constexpr CheckpointField kCheckpointFields[] = {
    {"format_version", &CheckpointInfo::format_version},
    {"step", &CheckpointInfo::step},
    {"tokens_seen", &CheckpointInfo::tokens_seen},
    {"data_position", &CheckpointInfo::data_position},
    {"seed", &CheckpointInfo::seed},
    {"strategy", &CheckpointInfo::strategy},
    {"precision", &CheckpointInfo::precision},
    {"world_size", &CheckpointInfo::world_size},
    {"shard_group", &CheckpointInfo::shard_group},
    {"deck", &CheckpointInfo::deck},
    {"created_by", &CheckpointInfo::created_by},
    {"data_order", &CheckpointInfo::data_order, true},
    {"data_shard", &CheckpointInfo::data_shard, true},
    {"data_shard_offset", &CheckpointInfo::data_shard_offset, true},
    {"data_epoch", &CheckpointInfo::data_epoch, true},
    {"settings", &CheckpointInfo::settings, true},
    {"run_id", &CheckpointInfo::run_id, true},
    {"n_layer", &ModelShape::n_layer},
    {"d_model", &ModelShape::d_model},
    {"n_head", &ModelShape::n_head},
    {"seq_len", &ModelShape::seq_len},
    {"vocab_size", &ModelShape::vocab_size},
    {"padded_vocab", &ModelShape::padded_vocab},
    {"arch", &ModelShape::arch, true, true},
    {"n_kv_head", &ModelShape::n_kv_head, true, true},
    {"ffn_dim", &ModelShape::ffn_dim, true, true},
    {"norm_eps", &ModelShape::norm_eps, true, true},
    {"rope_theta", &ModelShape::rope_theta, true, true},
    {"tie_embeddings", &ModelShape::tie_embeddings, true, true},
    {"rope_scaling", &ModelShape::rope_scaling, true, true, true},
    {"rope_factor", &ModelShape::rope_factor, true, true, true},
    {"rope_low_freq_factor", &ModelShape::rope_low_freq_factor, true, true, true},
    {"rope_high_freq_factor", &ModelShape::rope_high_freq_factor, true, true, true},
    {"rope_original_positions", &ModelShape::rope_original_positions, true, true, true},
};

// Calls visit with the field's value in `info`: a std::int64_t&, std::string&, double&, bool&,
// Arch& or RopeScaling& (const when `info` is).
template <class Info, class Visit>
void visit_field(Info& info, const CheckpointField& field, Visit&& visit) {
  std::visit(
      [&](auto member) {
        if constexpr (std::is_same_v<decltype(member), std::int64_t CheckpointInfo::*> ||
                      std::is_same_v<decltype(member), std::string CheckpointInfo::*>)
          visit(info.*member);
        else
          visit(info.shape.*member);
      },
      field.member);
}

// Whether `field` is written for a checkpoint of this model.
inline bool field_recorded(const CheckpointField& field, const ModelShape& shape) {
  if (field.scaled_rope_only) return shape.arch == Arch::llama && shape.rope_scaling != RopeScaling::none;
  return !field.llama_only || shape.arch == Arch::llama;
}

// What one rank writes: pieces of the flat layout with their parameters, m and v, either where
// the strategy keeps them (a view: nothing copied, valid until training changes them) or in
// copies the snapshot owns (training may go on while they are written). Move-only: the pieces
// point into `copies`.
struct StateSnapshot {
  std::vector<Strategy::StatePiece> pieces;
  std::vector<float> copies;
  StateSnapshot() = default;
  StateSnapshot(StateSnapshot&&) = default;
  StateSnapshot& operator=(StateSnapshot&&) = default;
  StateSnapshot(const StateSnapshot&) = delete;
  StateSnapshot& operator=(const StateSnapshot&) = delete;
};
StateSnapshot view_state(Strategy& strategy);
// Copies into `storage`'s memory when it is large enough (a previous snapshot's, handed back):
// fresh memory costs a page fault per 4 KiB, which was most of the copy's time.
StateSnapshot copy_state(Strategy& strategy, std::vector<float> storage = {});

// Writes `dir`/ckpt_<step>.h5 through a temporary name, flushes, renames it into place (rank 0,
// then the directory is synced), points `dir`/latest at it and keeps this run's `keep` most
// recently committed checkpoints (ckpt/locate.hpp plan_retention: never the one just written,
// never another run's or model's). Collective over comm. Returns what was written. When `log` is given, the write's phases go into
// it (rank 0's clock): layout, checksums, open, write_<round>, file_sync, close, then on rank 0
// fsync, rename (with the directory's fsync), latest, keep, and commit_agree (the others wait).
// When `deferred_deletes` is given, rank 0 adds the files that `keep` (and leftovers of
// interrupted writes) let go to it instead of deleting them: deleting a 1.36 GB file took
// 0.17-0.28 s here (ext4 mounted with `discard` waits for the device), which the caller can take
// off the training's critical path with remove_files.
struct WrittenCheckpoint {
  std::string path;
  // Rank 0: checkpoints in the directory of another run (another run_id or model, or unreadable)
  // that retention left alone, each with why, and what the commit moved out of its way
  // (ckpt/locate.hpp set_aside_other_run).
  std::vector<std::string> left_alone, set_aside;
};
WrittenCheckpoint write_checkpoint(const std::string& dir, const CheckpointInfo& info, const ParamLayout& layout,
                                   const StateSnapshot& state, int keep, MPI_Comm comm, PhaseLog* log = nullptr,
                                   std::vector<std::string>* deferred_deletes = nullptr);
// Deletes the files, ignoring those already gone.
void remove_files(const std::vector<std::string>& paths);

// Reads what this rank needs into the strategy after checking the file against the run's model
// shape. Collective; on any rank's failure every rank throws the same Error naming the file.
CheckpointInfo read_checkpoint(const std::string& path, const ModelShape& shape, Strategy& strategy, MPI_Comm comm);

// The deck keys that set a model's shape, each with the checkpoint's value and the deck's.
struct ModelKey {
  const char* key;
  std::string file, deck;  // the values as a deck would write them (unquoted; --set takes them so)
};
std::vector<ModelKey> model_keys(const ModelShape& file, const ModelShape& run);

// "" when the shapes are the same, else each difference: "model.n_layer = 4 in the checkpoint, 6
// in the deck; ...".
std::string model_differences(const ModelShape& file, const ModelShape& run);

// One process: what a checkpoint says of itself (its attributes and model shape), after the
// checks that name what a path is when it is no checkpoint. Throws Error (without the path).
CheckpointInfo read_checkpoint_header(const std::string& path);

// What a checkpoint says of itself (step, strategy, the deck that wrote it, the model shape),
// read by rank 0 and shared. Collective; on failure every rank throws the same Error naming the
// file.
CheckpointInfo read_checkpoint_info(const std::string& path, MPI_Comm comm);

// What verify_checkpoint read: the sum of squares of each state dataset (/params, /adam_m,
// /adam_v, in that order) and the checkpoint's metadata.
struct VerifiedCheckpoint {
  CheckpointInfo info;
  double sum_squares[3] = {0, 0, 0};
};
// Reads every chunk of the three state datasets and checks its Fletcher32 checksum, the ranks of
// `comm` each taking a share of the chunks: the checks a resume makes, without a model to read
// into (check, inspect, generate and eval use it). Collective; on the first problem every rank
// throws the same Error, naming the file and, for damaged data, the dataset, the chunk, its
// elements and its file offset, as a resume does.
VerifiedCheckpoint verify_checkpoint(const std::string& path, MPI_Comm comm);

// One-process tools: what a checkpoint holds, with every checksum verified (throws on the first
// problem), and an export to a plain HDF5 file with one dataset per tensor in its shape.
std::string inspect_checkpoint(const std::string& path);
void export_checkpoint(const std::string& path, const std::string& out);

// The step of a checkpoint's file name (ckpt_00000300.h5: 300), or -1 for any other name.
std::int64_t checkpoint_step_of(const std::string& filename);
// The file name of a step's checkpoint: ckpt_00000300.h5.
std::string checkpoint_name(std::int64_t step);
// The checkpoint a `latest` file names ("ckpt_00000900.h5"), or "" when `path` is not one.
std::string pointer_target(const std::string& path);

// One process: the checkpoint's fp32 parameters (flat layout, every chunk's checksum verified by
// HDF5 as it reads) and its metadata, for exports to other formats.
struct CheckpointParams {
  CheckpointInfo info;
  std::vector<float> params;
};
CheckpointParams read_checkpoint_params(const std::string& path);

}  // namespace st
