#include "weights/init_from.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "comm/agree.hpp"
#include "comm/group.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "model/arch.hpp"
#include "model/deck_shape.hpp"
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
ModelShape deck_shape(const ModelConfig& m) {
  ModelShape s = model_shape(m);
  s.padded_vocab = s.vocab_size;
  return s;
}

std::uint64_t bits_of(double v) {
  std::uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}
double double_of(std::uint64_t b) {
  double v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

void share(WeightsSource& source, MPI_Comm comm) {
  const ModelShape& s = source.shape;
  auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  std::vector<std::uint64_t> numbers = {u(s.n_layer), u(s.d_model), u(s.n_head), u(s.seq_len), u(s.vocab_size),
                                        u(s.padded_vocab), source.format == WeightsFormat::llmc ? 0u : 1u,
                                        static_cast<std::uint64_t>(s.arch), u(s.n_kv_head), u(s.ffn_dim),
                                        bits_of(s.norm_eps), bits_of(s.rope_theta), s.tie_embeddings ? 1u : 0u,
                                        static_cast<std::uint64_t>(s.rope_scaling), bits_of(s.rope_factor),
                                        bits_of(s.rope_low_freq_factor), bits_of(s.rope_high_freq_factor),
                                        u(s.rope_original_positions)};
  broadcast(numbers, 0, comm);
  auto v = [&](std::size_t k) { return static_cast<std::int64_t>(numbers[k]); };
  source.shape = {v(0), v(1), v(2), v(3), v(4), v(5)};
  source.format = numbers[6] == 0 ? WeightsFormat::llmc : WeightsFormat::safetensors;
  source.shape.arch = static_cast<Arch>(numbers[7]);
  source.shape.n_kv_head = v(8);
  source.shape.ffn_dim = v(9);
  source.shape.norm_eps = double_of(numbers[10]);
  source.shape.rope_theta = double_of(numbers[11]);
  source.shape.tie_embeddings = numbers[12] == 1;
  source.shape.rope_scaling = static_cast<RopeScaling>(numbers[13]);
  source.shape.rope_factor = double_of(numbers[14]);
  source.shape.rope_low_freq_factor = double_of(numbers[15]);
  source.shape.rope_high_freq_factor = double_of(numbers[16]);
  source.shape.rope_original_positions = v(17);
  broadcast(source.path, 0, comm);
  broadcast(source.description, 0, comm);
}

// Rank 0 reads the file's headers and runs `check` on what it found, so a bad file gives one
// message however many ranks there are; every rank gets the result. Collective.
template <class Check>
WeightsSource probe_on_rank0(const std::string& path, MPI_Comm comm, Check check) {
  const int rank = group_rank(comm);
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
  const WeightsSource source = probe_on_rank0(m.init_from, comm, [](const WeightsSource&) {});

  const std::string origin = "model.from_file (" + source.path + ")";
  // A key the deck leaves at its default takes the file's value with model.from_file; one it sets
  // must agree (a Llama's seq_len may be shorter: rotary positions have no table).
  auto take = [&](const char* key, auto& value, const auto& in_file, const std::string& text, bool agrees) {
    const bool left_to_the_file = m.from_file && config.origin[key] == "default";
    if (agrees) {
      // The file's value is the default's too: the settings table says where it came from all the same.
      if (left_to_the_file) config.origin[key] = origin;
      return;
    }
    if (left_to_the_file) {
      value = in_file;
      config.origin[key] = origin;
      config.resolved[key] = text;
      return;
    }
    throw Error(config.deck_path + ": model.init_from: " + shape_mismatch(source, deck_shape(m)) +
                    (m.from_file ? " (" + config.origin[key] + " sets it; leave it out to take the file's)"
                                 : " (set model.from_file = true to take the model's shape from the file)"),
                ErrorScope::all_ranks);
  };
  const ArchSpec& arch = arch_spec(source.shape.arch);
  const std::string file_arch = arch_name(source.shape.arch);
  take("model.arch", m.arch, source.shape.arch, "\"" + file_arch + "\"", m.arch == source.shape.arch);
  for (const ModelKey& key : kShapeKeys) {
    std::int64_t& value = m.*key.field;
    const std::int64_t in_file = source.shape.*key.from;
    // Rotary positions have no table: any context up to the file's runs on its weights.
    const bool shorter_context = arch.rotary_positions && key.field == &ModelConfig::seq_len && value < in_file &&
                                 !(m.from_file && config.origin[key.name] == "default");
    take(key.name, value, in_file, std::to_string(in_file), value == in_file || shorter_context);
  }
  if (arch.llama_keys) {
    const ModelShape& f = source.shape;
    const ModelShape d = deck_shape(m);
    take("model.n_kv_head", m.n_kv_head, f.kv_heads(), std::to_string(f.kv_heads()), d.kv_heads() == f.kv_heads());
    take("model.ffn_dim", m.ffn_dim, f.hidden(), std::to_string(f.hidden()), d.hidden() == f.hidden());
    take("model.norm_eps", m.norm_eps, f.norm_eps, nlohmann::json(f.norm_eps).dump(), m.norm_eps == f.norm_eps);
    take("model.rope_theta", m.rope_theta, f.rope_theta, nlohmann::json(f.rope_theta).dump(),
         m.rope_theta == f.rope_theta);
    take("model.tie_embeddings", m.tie_embeddings, f.tie_embeddings, f.tie_embeddings ? "true" : "false",
         m.tie_embeddings == f.tie_embeddings);
    const std::string scaling = rope_scaling_name(f.rope_scaling);
    take("model.rope_scaling", m.rope_scaling, f.rope_scaling, "\"" + scaling + "\"", d.rope_scaling == f.rope_scaling);
    if (f.rope_scaling == RopeScaling::llama3) {
      take("model.rope_factor", m.rope_factor, f.rope_factor, nlohmann::json(f.rope_factor).dump(),
           m.rope_factor == f.rope_factor);
      take("model.rope_low_freq_factor", m.rope_low_freq_factor, f.rope_low_freq_factor,
           nlohmann::json(f.rope_low_freq_factor).dump(), m.rope_low_freq_factor == f.rope_low_freq_factor);
      take("model.rope_high_freq_factor", m.rope_high_freq_factor, f.rope_high_freq_factor,
           nlohmann::json(f.rope_high_freq_factor).dump(), m.rope_high_freq_factor == f.rope_high_freq_factor);
      take("model.rope_original_positions", m.rope_original_positions, f.rope_original_positions,
           std::to_string(f.rope_original_positions), m.rope_original_positions == f.rope_original_positions);
    }
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
  const double seconds = max_over(clock.seconds(), comm);
  char line[96];
  std::snprintf(line, sizeof line, "; every rank read it, the slowest in %.2f s", seconds);
  out.note = "initialised from " + source.path + " (" + source.description + "): step 0, fresh optimizer state" + line;
  return out;
}

}  // namespace st
