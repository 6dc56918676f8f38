// A checkpoint's metadata on 1..4 ranks: every field of kCheckpointFields, each given its own
// value, comes back from write_checkpoint + read_checkpoint_info on every rank (rank 0 reads
// the file, the others get what it shares); a file without the optional fields reads them as
// their defaults and the rest as written.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <type_traits>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "ckpt/h5.hpp"
#include "ckpt/read.hpp"
#include "ckpt/write.hpp"
#include "comm/agree.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "world.hpp"

namespace st {
namespace {

// Field k's value: distinct across fields and from every default, so a field read into another's
// place, or left unread or unshared, shows.
CheckpointInfo distinct_info() {
  CheckpointInfo info;
  std::int64_t k = 0;
  for (const CheckpointField& field : kCheckpointFields) {
    ++k;
    // The architecture llama, so that the fields only llama records are written too.
    visit_field(info, field, [&](auto& value) {
      using T = std::decay_t<decltype(value)>;
      if constexpr (std::is_same_v<T, std::string>) value = std::string("value of ") + field.name;
      else if constexpr (std::is_same_v<T, Arch>) value = Arch::llama;
      else if constexpr (std::is_same_v<T, RopeScaling>) value = RopeScaling::llama3;
      else if constexpr (std::is_same_v<T, bool>) value = !value;
      else if constexpr (std::is_same_v<T, double>) value = 1000.25 + 17 * static_cast<double>(k);
      else value = 1000 + 17 * k;
    });
  }
  return info;
}

std::string shown(const CheckpointInfo& info, const CheckpointField& field) {
  std::string text;
  visit_field(info, field, [&](const auto& value) {
    using T = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<T, std::string>) text = "\"" + value + "\"";
    else if constexpr (std::is_same_v<T, Arch>) text = arch_name(value);
    else if constexpr (std::is_same_v<T, RopeScaling>) text = rope_scaling_name(value);
    else if constexpr (std::is_same_v<T, bool>) text = value ? "true" : "false";
    else text = std::to_string(value);
  });
  return text;
}

// The fields where `read` differs from `expected`, as "name: read R, expected E; ...", from the
// first rank that has any ("" when none does): only rank 0's test output is shown.
std::string differences_on_any_rank(const CheckpointInfo& read, const CheckpointInfo& expected) {
  std::string mine;
  for (const CheckpointField& field : kCheckpointFields)
    if (shown(read, field) != shown(expected, field))
      mine += std::string(field.name) + ": read " + shown(read, field) + ", expected " + shown(expected, field) + "; ";
  try {
    agree_or_throw(MPI_COMM_WORLD, mine);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Writes `info` (with a small model's state, sliced across the ranks) into a directory of its
// own; returns the file's path.
std::string write_small_checkpoint(const std::string& label, const CheckpointInfo& info, int keep = 1) {
  const ParamLayout layout = make_layout({1, 8, 2, 4, 16, 16});
  const std::size_t n = layout.total(), ranks = static_cast<std::size_t>(world_size());
  const std::size_t rank = static_cast<std::size_t>(world_rank());
  const std::size_t from = n * rank / ranks, to = n * (rank + 1) / ranks;
  std::vector<float> params(to - from, 0.5f), m(to - from, 0.25f), v(to - from, 0.125f);
  StateSnapshot state;
  state.pieces.push_back({from, to - from, params.data(), m.data(), v.data()});
  const std::string dir = "ckpt_info_" + label + "_np" + std::to_string(ranks);
  return write_checkpoint(dir, info, layout, state, keep, MPI_COMM_WORLD).path;
}

void remove_dir(const std::string& path) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST(CheckpointInfo, EveryFieldRoundTripsToEveryRank) {
  const CheckpointInfo written = distinct_info();
  const std::string path = write_small_checkpoint("roundtrip", written);
  CheckpointInfo expected = written;
  expected.format_version = kCheckpointFormat;  // what this shardtrain writes, whatever the caller says
  const CheckpointInfo read = read_checkpoint_info(path, MPI_COMM_WORLD);
  EXPECT_EQ(differences_on_any_rank(read, expected), "");
  // The shape's fields land in the shape (checked by member, not through the table).
  EXPECT_EQ(read.shape.padded_vocab, written.shape.padded_vocab);
  remove_dir(path);
}

TEST(CheckpointInfo, OptionalFieldsMayBeAbsent) {
  const CheckpointInfo written = distinct_info();
  const std::string path = write_small_checkpoint("optional", written);
  if (world_rank() == 0) {  // as a checkpoint written before these fields were recorded
    h5::Handle file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose, "opening " + path);
    h5::Handle model = h5::open_group(file.get(), "model");
    for (const CheckpointField& field : kCheckpointFields)
      if (field.optional)
        h5::check(H5Adelete(field.in_model() ? model.get() : file.get(), field.name),
                  std::string("deleting ") + field.name);
    model = h5::Handle();
    file.close("closing " + path);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CheckpointInfo expected = written;
  expected.format_version = kCheckpointFormat;
  int optional = 0;
  const CheckpointInfo defaults;
  for (const CheckpointField& field : kCheckpointFields) {
    if (!field.optional) continue;
    ++optional;
    visit_field(defaults, field, [&](const auto& value) {
      visit_field(expected, field, [&](auto& target) {
        if constexpr (std::is_same_v<std::remove_cvref_t<decltype(target)>, std::remove_cvref_t<decltype(value)>>)
          target = value;
      });
    });
  }
  // data_order, data_shard, data_shard_offset, data_epoch, settings, run_id; llama's arch,
  // n_kv_head, ffn_dim, norm_eps, rope_theta, tie_embeddings (a GPT-2 checkpoint's defaults); and
  // a scaled rope's rope_scaling, rope_factor, rope_low_freq_factor, rope_high_freq_factor,
  // rope_original_positions.
  EXPECT_EQ(optional, 17);
  EXPECT_EQ(differences_on_any_rank(read_checkpoint_info(path, MPI_COMM_WORLD), expected), "");
  remove_dir(path);
}

// A llama checkpoint's own keys, and a scaled rope's, are not optional for it: defaults in their
// place would describe another model. Without one, the read fails on every rank naming it.
TEST(CheckpointInfo, ALlamaCheckpointWithoutOneOfItsKeysIsRefusedNamingIt) {
  for (const std::string missing : {"n_kv_head", "rope_scaling", "rope_original_positions"}) {
    const CheckpointInfo written = distinct_info();  // a llama with rope_scaling llama3
    const std::string path = write_small_checkpoint("missing_" + missing, written);
    if (world_rank() == 0) {
      h5::Handle file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose, "opening " + path);
      h5::Handle model = h5::open_group(file.get(), "model");
      h5::check(H5Adelete(model.get(), missing.c_str()), "deleting " + missing);
      model = h5::Handle();
      file.close("closing " + path);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    std::string error;
    try {
      read_checkpoint_info(path, MPI_COMM_WORLD);
    } catch (const Error& e) {
      error = e.what();
    }
    EXPECT_NE(error.find("attribute '/model/" + missing + "' is missing"), std::string::npos) << error;
    remove_dir(path);
  }
}

// Retention keeps the newest `keep` checkpoints of the run that writes, newest by commit, not by
// step: a run started over from step 0 in a directory never deletes the checkpoint it has just
// written for an older one of a higher step, and another run's checkpoints are left alone, and
// moved aside rather than replaced when one has the name the new one takes.
TEST(CheckpointRetention, KeepsTheNewestCommittedOfThisRunAndLeavesOtherRunsAlone) {
  CheckpointInfo first = distinct_info();
  first.run_id = "aaaaaaaaaaaaaaaa";
  std::string path;
  for (std::int64_t step : {4, 8, 12}) {
    first.step = step;
    path = write_small_checkpoint("retention", first, 2);
  }
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  CheckpointInfo second = first;
  second.run_id = "bbbbbbbbbbbbbbbb";
  for (std::int64_t step : {2, 4, 6}) {
    second.step = step;
    const std::string written = write_small_checkpoint("retention", second, 2);
    EXPECT_EQ(read_checkpoint_info(written, MPI_COMM_WORLD).run_id, second.run_id);
  }
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  // The first run's 8 and 12 (keep 2 while it ran), left alone by the second run, whose newest
  // two are 4 and 6: its 2 was kept while it was its newest, although the lowest step of all.
  EXPECT_EQ(names, (std::vector<std::string>{"ckpt_00000004.h5", "ckpt_00000006.h5", "ckpt_00000008.h5",
                                             "ckpt_00000012.h5", "latest"}))
      << "found: " << join(names, ", ");
  EXPECT_EQ(read_checkpoint_info((dir / "ckpt_00000012.h5").string(), MPI_COMM_WORLD).run_id, first.run_id);
  remove_dir(path);
}

TEST(CheckpointRetention, AnotherRunsFileAtTheNewNameIsMovedAsideNotReplaced) {
  CheckpointInfo first = distinct_info();
  first.run_id = "aaaaaaaaaaaaaaaa";
  first.step = 4;
  const std::string path = write_small_checkpoint("aside", first, 3);
  CheckpointInfo second = first;
  second.run_id = "bbbbbbbbbbbbbbbb";
  const std::string written = write_small_checkpoint("aside", second, 3);
  EXPECT_EQ(written, path);
  const std::filesystem::path aside =
      std::filesystem::path(path).parent_path() / "ckpt_00000004.run-aaaaaaaaaaaaaaaa.h5";
  EXPECT_TRUE(std::filesystem::exists(aside)) << aside;
  EXPECT_EQ(read_checkpoint_header(aside.string()).run_id, first.run_id);
  EXPECT_EQ(read_checkpoint_info(path, MPI_COMM_WORLD).run_id, second.run_id);
  remove_dir(path);
}

}  // namespace
}  // namespace st
