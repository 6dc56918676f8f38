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
//
// This header says what a checkpoint records (CheckpointInfo, kCheckpointFields) and how two
// models' shapes differ; each job on the file has a header of its own: ckpt/write.hpp,
// ckpt/read.hpp, ckpt/verify.hpp, ckpt/inspect.hpp, ckpt/export.hpp; where the checkpoints are,
// ckpt/catalogue.hpp and ckpt/locate.hpp.
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "model/layout.hpp"

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

// Which checkpoints hold an attribute, by what the architecture table (model/arch.hpp) says of
// the model's family: every one; those whose family is named (ArchSpec::checkpoint_names_arch;
// without the name, GPT-2); those with Llama's shape keys (ArchSpec::llama_keys: a GPT-2
// checkpoint's bytes stay those of earlier versions); those whose rotary frequencies are
// rescaled (model.rope_scaling other than "none"; absent, the shape's defaults: no scaling).
enum class Recorded { always, named_arch, llama_keys, scaled_rope };

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
  // Which models record it (read when present, whatever the model):
  Recorded recorded = Recorded::always;
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
    {"arch", &ModelShape::arch, true, Recorded::named_arch},
    {"n_kv_head", &ModelShape::n_kv_head, true, Recorded::llama_keys},
    {"ffn_dim", &ModelShape::ffn_dim, true, Recorded::llama_keys},
    {"norm_eps", &ModelShape::norm_eps, true, Recorded::llama_keys},
    {"rope_theta", &ModelShape::rope_theta, true, Recorded::llama_keys},
    {"tie_embeddings", &ModelShape::tie_embeddings, true, Recorded::llama_keys},
    {"rope_scaling", &ModelShape::rope_scaling, true, Recorded::scaled_rope},
    {"rope_factor", &ModelShape::rope_factor, true, Recorded::scaled_rope},
    {"rope_low_freq_factor", &ModelShape::rope_low_freq_factor, true, Recorded::scaled_rope},
    {"rope_high_freq_factor", &ModelShape::rope_high_freq_factor, true, Recorded::scaled_rope},
    {"rope_original_positions", &ModelShape::rope_original_positions, true, Recorded::scaled_rope},
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
bool field_recorded(const CheckpointField& field, const ModelShape& shape);

// The deck keys that set a model's shape, each with the checkpoint's value and the deck's.
struct ModelKey {
  const char* key;
  std::string file, deck;  // the values as a deck would write them (unquoted; --set takes them so)
};
std::vector<ModelKey> model_keys(const ModelShape& file, const ModelShape& run);

// "" when the shapes are the same, else each difference: "model.n_layer = 4 in the checkpoint, 6
// in the deck; ...".
std::string model_differences(const ModelShape& file, const ModelShape& run);

}  // namespace st
