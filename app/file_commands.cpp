// `shardtrain ckpt inspect/export` and `shardtrain weights inspect/convert`: one process reads and
// writes files; the other ranks of the job wait for its verdict.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "app/commands.hpp"
#include "ckpt/catalogue.hpp"
#include "ckpt/checkpoint.hpp"
#include "ckpt/export.hpp"
#include "ckpt/inspect.hpp"
#include "ckpt/locate.hpp"
#include "ckpt/read.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "weights/gpt2_weights.hpp"
#include "weights/hf_gpt2.hpp"
#include "weights/hf_llama.hpp"
#include "weights/weight_formats.hpp"

namespace st::app {
namespace {

namespace fs = std::filesystem;

WeightsFormat weights_format(const std::string& name) {
  return name == "llmc" ? WeightsFormat::llmc : WeightsFormat::safetensors;
}

WeightDtype weight_dtype(const std::string& name) { return name == "bf16" ? WeightDtype::bf16 : WeightDtype::fp32; }

// "wrote OUT (llm.c model file, version 5, bf16)", naming config.json where one was written too,
// and a Llama's shards and index when it was split.
std::string wrote(WeightsFormat format, const std::string& out, const ModelShape& shape, WeightDtype dtype,
                  std::uint64_t max_shard_bytes) {
  if (format == WeightsFormat::llmc)
    return "wrote " + out + " (llm.c model file, version " + (dtype == WeightDtype::bf16 ? "5" : "3") + ", " +
           dtype_name(dtype) + ")";
  return weight_formats(shape.arch).hf_written(out, shape, dtype, max_shard_bytes);
}

// "5GB", "200MB", "64KB" (decimal, as transformers reads them), "1GiB", "1000000" (bytes).
std::uint64_t parse_shard_size(const std::string& text) {
  static const std::pair<const char*, std::uint64_t> units[] = {
      {"GiB", 1ull << 30}, {"MiB", 1ull << 20}, {"KiB", 1ull << 10}, {"GB", 1'000'000'000},
      {"MB", 1'000'000},   {"KB", 1'000},       {"B", 1}};
  std::uint64_t scale = 1;
  std::string number = text;
  for (const auto& [suffix, factor] : units)
    if (text.size() > std::strlen(suffix) && text.ends_with(suffix)) {
      scale = factor;
      number = text.substr(0, text.size() - std::strlen(suffix));
      break;
    }
  std::size_t used = 0;
  std::uint64_t value = 0;
  try {
    value = std::stoull(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != number.size() || value == 0)
    throw Error("--max-shard-size " + text + ": expected a positive size such as 5GB, 200MB, 64KB or a byte count");
  return value * scale;
}

// Before an export or a conversion writes `outputs` (the file and what goes beside it): an
// existing one is replaced only with --force, a checkpoint never (its run's state would be lost);
// a missing directory is created. The input is never an output.
void prepare_outputs(const std::vector<std::string>& outputs, const std::string& input, bool force) {
  std::error_code ec;
  for (const std::string& out : outputs) {
    if (fs::exists(out, ec) && fs::exists(input, ec) && fs::equivalent(out, input, ec))
      throw Error(out + " is the input file; write the output elsewhere");
    if (!fs::exists(out, ec)) continue;
    if (fs::is_directory(out, ec)) throw Error("output " + out + " is a directory; name a file in it");
    if (is_checkpoint(out))
      throw Error("output " + out + " is a checkpoint (or its `latest` pointer); it is never overwritten, even with "
                  "--force: write the output elsewhere");
    if (!force) throw Error("output " + out + " exists; pass --force to replace it, or write the output elsewhere");
  }
  for (const std::string& out : outputs) {
    const fs::path dir = fs::path(out).parent_path();
    if (dir.empty() || fs::is_directory(dir, ec)) continue;
    fs::create_directories(dir, ec);
    if (ec) throw Error("cannot create the output's directory " + dir.string() + ": " + ec.message());
  }
}

// The checkpoint a path names (a file, a `latest`, a checkpoint or run directory), every checksum
// verified: a damaged newest one in a directory is skipped for the next, and said.
std::string located_checkpoint(const std::string& given) {
  const LocatedCheckpoint located = locate_for_reading(given, MPI_COMM_SELF, verifying(MPI_COMM_SELF));
  for (const std::string& note : located.skip_notes("read")) std::cerr << "note: " << note << "\n";
  if (located.path != given) std::cerr << "note: " << given << " stands for checkpoint " << located.path << "\n";
  return located.path;
}

}  // namespace

int ckpt_command(const CkptRequest& request, World& world) {
  return on_root(world, [&] {
    if (request.action == "inspect") {
      // The checkpoint the path stands for, verified as a resume verifies it (inspect_checkpoint).
      std::string text;
      const LocatedCheckpoint located = locate_for_reading(
          request.file, MPI_COMM_SELF, [&](const std::string& path, const CheckpointInfo&) {
            return attempt_problem([&] { text = inspect_checkpoint(path); });
          });
      for (const std::string& note : located.skip_notes("read")) std::cout << note << "\n";
      std::cout << text;
      return;
    }
    if (request.format == "hdf5" && request.dtype != "fp32")
      throw Error("ckpt export: --dtype " + request.dtype + " applies to --format llmc and safetensors; HDF5 exports "
                                                            "are fp32");
    const WeightsFormat format = weights_format(request.format);
    const std::uint64_t max_shard = parse_shard_size(request.max_shard_size);
    if (request.format == "hdf5") {
      prepare_outputs({request.out}, request.file, request.force);
      const std::string source = located_checkpoint(request.file);
      export_checkpoint(source, request.out);
      std::cout << "wrote " << request.out << "\n";
      return;
    }
    // The files written depend on the model (a Llama's shards): read from the checkpoint's header.
    const std::string source = located_checkpoint(request.file);
    const WeightDtype dtype = weight_dtype(request.dtype);
    const ModelShape shape = read_checkpoint_header(source).shape;
    if (format == WeightsFormat::llmc) require_llmc_holds(shape);
    prepare_outputs(weights_outputs(format, request.out, shape, dtype, max_shard), request.file, request.force);
    const CheckpointParams checkpoint = read_checkpoint_params(source);
    write_weights(format, request.out, checkpoint.info.shape, checkpoint.params, dtype, max_shard);
    std::cout << wrote(format, request.out, shape, dtype, max_shard) << " from step " << checkpoint.info.step << " of "
              << source << "\n";
  });
}

int weights_command(const WeightsRequest& request, World& world) {
  return on_root(world, [&] {
    const WeightsSource source = probe_weights(request.file);
    ModelShape shape = source.shape;
    if (request.vocab_pad_to > 0)
      shape.padded_vocab = (shape.vocab_size + request.vocab_pad_to - 1) / request.vocab_pad_to * request.vocab_pad_to;
    Stopwatch clock;
    const std::vector<float> params = read_weights(source, shape);
    const double seconds = clock.seconds();
    if (request.action == "convert") {
      const WeightsFormat format = weights_format(request.format);
      const WeightDtype dtype = weight_dtype(request.dtype);
      const std::uint64_t max_shard = parse_shard_size(request.max_shard_size);
      prepare_outputs(weights_outputs(format, request.out, shape, dtype, max_shard), source.path, request.force);
      write_weights(format, request.out, shape, params, dtype, max_shard);
      std::cout << wrote(format, request.out, shape, dtype, max_shard) << " from " << source.path << "\n";
      return;
    }
    double sum_squares = 0;
    bool finite = true;
    for (float x : params) {
      sum_squares += static_cast<double>(x) * x;
      finite = finite && std::isfinite(x);
    }
    char line[200];
    std::snprintf(line, sizeof line, "  read in %.3f s; %zu parameters, L2 norm %.6g%s\n", seconds, params.size(),
                  std::sqrt(sum_squares), finite ? "" : " (NOT all finite)");
    std::cout << source.path << "\n  " << source.description << "\n  model: " << model_summary(source.shape) << "\n"
              << line << "  deck: [model] init_from = \"" << request.file << "\", from_file = true\n";
  });
}

}  // namespace st::app
