#include "weights/init_from.hpp"

#include <algorithm>
#include <cstdio>

#include "comm/agree.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "weights/gpt2_weights.hpp"

namespace st {
namespace {

struct ModelKey {
  const char* name;
  std::int64_t ModelConfig::*field;
  std::int64_t ModelShape::*from;
};
const ModelKey kShapeKeys[] = {
    {"model.n_layer", &ModelConfig::n_layer, &ModelShape::n_layer},
    {"model.n_head", &ModelConfig::n_head, &ModelShape::n_head},
    {"model.d_model", &ModelConfig::d_model, &ModelShape::d_model},
    {"model.seq_len", &ModelConfig::seq_len, &ModelShape::seq_len},
    {"model.vocab_size", &ModelConfig::vocab_size, &ModelShape::vocab_size},
};

// The deck's model, unpadded (the padded vocabulary is not compared).
ModelShape deck_shape(const ModelConfig& m) { return {m.n_layer, m.d_model, m.n_head, m.seq_len, m.vocab_size, m.vocab_size}; }

void share(WeightsSource& source, MPI_Comm comm) {
  const ModelShape& s = source.shape;
  auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  std::vector<std::uint64_t> numbers = {u(s.n_layer), u(s.d_model), u(s.n_head), u(s.seq_len), u(s.vocab_size),
                                        u(s.padded_vocab), source.format == WeightsFormat::llmc ? 0u : 1u};
  broadcast(numbers, 0, comm);
  auto v = [&](std::size_t k) { return static_cast<std::int64_t>(numbers[k]); };
  source.shape = {v(0), v(1), v(2), v(3), v(4), v(5)};
  source.format = numbers[6] == 0 ? WeightsFormat::llmc : WeightsFormat::safetensors;
  broadcast(source.path, 0, comm);
  broadcast(source.description, 0, comm);
}

// Rank 0 reads the file's headers and runs `check` on what it found, so a bad file gives one
// message however many ranks there are; every rank gets the result. Collective.
template <class Check>
WeightsSource probe_on_rank0(const std::string& path, MPI_Comm comm, Check check) {
  int rank = 0;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  WeightsSource source;
  std::string problem;
  if (rank == 0) {
    try {
      source = probe_weights(path);
      check(source);
    } catch (const Error& e) {
      problem = std::string("model.init_from: ") + e.what();
    }
  }
  agree_or_throw(comm, problem);
  share(source, comm);
  return source;
}

}  // namespace

std::int64_t pad_to_for(std::int64_t vocab_size, std::int64_t padded) {
  if (padded == vocab_size) return 1;
  for (std::int64_t p = std::int64_t{1} << 20; p > 1; p /= 2)
    if ((vocab_size + p - 1) / p * p == padded) return p;
  return padded;  // rounds vocab_size up to exactly padded
}

void resolve_init_from(Config& config, MPI_Comm comm) {
  ModelConfig& m = config.model;
  if (m.init_from.empty()) return;
  if (m.arch != "gpt2")
    throw Error(config.deck_path + ": model.init_from reads GPT-2 weights (llm.c or Hugging Face GPT-2 files); "
                    "model.arch = \"" + m.arch + "\" starts from its own initialisation in this version",
                ErrorScope::all_ranks);
  const WeightsSource source = probe_on_rank0(m.init_from, comm, [](const WeightsSource&) {});

  const std::string origin = "model.from_file (" + source.path + ")";
  for (const ModelKey& key : kShapeKeys) {
    std::int64_t& value = m.*key.field;
    const std::int64_t in_file = source.shape.*key.from;
    if (value == in_file) continue;
    const bool deck_set = config.origin[key.name] != "default";
    if (m.from_file && !deck_set) {
      value = in_file;
      config.origin[key.name] = origin;
      config.resolved[key.name] = std::to_string(in_file);
      continue;
    }
    throw Error(config.deck_path + ": model.init_from: " + shape_mismatch(source, deck_shape(m)) +
                    (m.from_file ? " (" + config.origin[key.name] + " sets it; leave it out to take the file's)"
                                 : " (set model.from_file = true to take the model's shape from the file)"),
                ErrorScope::all_ranks);
  }
  // llm.c pads its token table (50257 -> 50304): the same padding keeps an export byte-identical.
  if (m.from_file && config.origin["model.vocab_pad_to"] == "default" && source.shape.padded_vocab != m.vocab_size) {
    m.vocab_pad_to = pad_to_for(m.vocab_size, source.shape.padded_vocab);
    config.origin["model.vocab_pad_to"] = origin;
    config.resolved["model.vocab_pad_to"] = std::to_string(m.vocab_pad_to);
  }
  if (m.d_model % m.n_head != 0)
    throw Error(config.deck_path + ": model.d_model = " + std::to_string(m.d_model) +
                    " is not divisible by model.n_head = " + std::to_string(m.n_head),
                ErrorScope::all_ranks);
}

InitialWeights load_initial_weights(const std::string& path, const ModelShape& shape, MPI_Comm comm) {
  const WeightsSource source = probe_on_rank0(path, comm, [&](const WeightsSource& found) {
    if (const std::string why = shape_mismatch(found, shape); !why.empty())
      throw Error(found.path + ": holds another model: " + why);
  });
  // Then every rank reads the whole file itself, as every rank maps data.path: the node's page
  // cache serves the ranks after the first, and rank 0 sends no copy of the model to each rank.
  Stopwatch clock;
  InitialWeights out;
  std::string problem;
  try {
    out.params = read_weights(source, shape);
  } catch (const Error& e) {
    problem = "model.init_from: " + std::string(e.what());
  }
  agree_or_throw(comm, problem);
  double seconds = clock.seconds();
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, comm));
  char line[96];
  std::snprintf(line, sizeof line, "; every rank read it, the slowest in %.2f s", seconds);
  out.note = "initialised from " + source.path + " (" + source.description + "): step 0, fresh optimizer state" + line;
  return out;
}

}  // namespace st
