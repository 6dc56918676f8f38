#include "weights/gpt2_weights.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/arch.hpp"
#include "weights/file_io.hpp"
#include "weights/hf_gpt2.hpp"
#include "weights/llmc_file.hpp"
#include "weights/safetensors_file.hpp"
#include "weights/weight_formats.hpp"

namespace st {
namespace {

std::string weights_file_of(const std::string& path) {
  if (std::filesystem::is_directory(path)) {
    const std::string inside = (std::filesystem::path(path) / "model.safetensors").string();
    if (!std::filesystem::exists(inside))
      throw Error(path + ": is a directory without a model.safetensors (name an llm.c model file or a safetensors file)");
    return inside;
  }
  if (!std::filesystem::exists(path)) throw Error(path + ": no such file");
  return path;
}

// A safetensors file starts with its JSON header's length, which fits inside the file, and the
// header's '{' (an llm.c file's first eight bytes, magic and version, read as a length, are far
// larger). A file cut inside its header is still told by the '{', so it is called truncated.
bool looks_like_safetensors(const InputFile& file) {
  if (file.size() < 9) return false;
  std::uint64_t header_bytes = 0;
  char first = 0;
  file.read(0, &header_bytes, 8, "the header length");
  file.read(8, &first, 1, "the JSON header");
  return header_bytes >= 2 && (header_bytes <= file.size() - 8 || (first == '{' && header_bytes <= 100'000'000));
}

std::string safetensors_dtypes(const SafetensorsReader& reader) {
  std::string dtypes;
  for (const auto& t : reader.tensors())
    if (dtypes.find(t.dtype) == std::string::npos) dtypes += (dtypes.empty() ? "" : ", ") + t.dtype;
  return dtypes;
}

// The config.json that says which model a Hugging Face path holds.
std::string hf_config_of(const std::string& path) {
  return std::filesystem::is_directory(path) ? (std::filesystem::path(path) / "config.json").string()
                                             : hf_config_path(path);
}

std::string number_text(double v) { return nlohmann::json(v).dump(); }

}  // namespace

WeightsSource probe_weights(const std::string& requested) {
  WeightsSource source;
  if (std::filesystem::exists(requested) && declares_llama(hf_config_of(requested))) {
    const HfLlamaFiles files = locate_hf_llama(requested);
    source.path = files.index.empty() ? files.shards.front() : files.index;
    source.format = WeightsFormat::safetensors;
    source.shape = read_hf_llama_config(files.config);
    source.description = check_hf_llama(files, source.shape);
    return source;
  }
  source.path = weights_file_of(requested);
  const InputFile file(source.path);
  if (is_llmc_file(file)) {
    const LlmcHeader header = read_llmc_header(file);
    source.format = WeightsFormat::llmc;
    source.shape = header.shape;
    source.description = "llm.c model file, version " + std::to_string(header.version) + " (" +
                         dtype_name(header.dtype()) + ")";
    return source;
  }
  if (!looks_like_safetensors(file))
    throw Error(source.path + ": bad header: neither an llm.c model file (it starts with the int32 magic " +
                std::to_string(kLlmcModelMagic) + ") nor a safetensors file (an 8-byte length of the JSON header that follows)");
  const SafetensorsReader reader(source.path);
  source.format = WeightsFormat::safetensors;
  source.shape = read_hf_gpt2_config(hf_config_path(source.path));
  check_hf_gpt2_tensors(reader, source.shape);
  source.description = "Hugging Face GPT-2 safetensors (" + safetensors_dtypes(reader) + ") with " +
                       hf_config_path(source.path);
  return source;
}

std::string shape_mismatch(const WeightsSource& file, const ModelShape& deck) {
  const ModelShape& f = file.shape;
  auto differ = [&](const std::string& key, const std::string& in_file, const std::string& in_deck) {
    return key + " = " + in_file + " in " + file.path + ", " + in_deck + " in the deck";
  };
  if (f.arch != deck.arch) return differ("model.arch", arch_name(f.arch), arch_name(deck.arch));
  const ArchSpec& arch = arch_spec(f.arch);
  const std::pair<const char*, std::pair<std::int64_t, std::int64_t>> fields[] = {
      {"model.n_layer", {f.n_layer, deck.n_layer}},
      {"model.n_head", {f.n_head, deck.n_head}},
      {"model.d_model", {f.d_model, deck.d_model}},
      {"model.seq_len", {f.seq_len, deck.seq_len}},
      {"model.vocab_size", {f.vocab_size, deck.vocab_size}},
      {"model.n_kv_head", {f.kv_heads(), deck.kv_heads()}},
      {"model.ffn_dim", {f.hidden(), deck.hidden()}},
  };
  for (const auto& [key, values] : fields) {
    if (values.first == values.second) continue;
    if (!arch.llama_keys && (std::string(key) == "model.n_kv_head" || std::string(key) == "model.ffn_dim")) continue;
    // Rotary positions have no table: any context up to the file's runs on its weights.
    if (arch.rotary_positions && std::string(key) == "model.seq_len" && values.second < values.first) continue;
    return differ(key, std::to_string(values.first), std::to_string(values.second));
  }
  if (!arch.llama_keys) return "";
  if (f.norm_eps != deck.norm_eps) return differ("model.norm_eps", number_text(f.norm_eps), number_text(deck.norm_eps));
  if (f.rope_theta != deck.rope_theta)
    return differ("model.rope_theta", number_text(f.rope_theta), number_text(deck.rope_theta));
  if (f.tie_embeddings != deck.tie_embeddings)
    return differ("model.tie_embeddings", f.tie_embeddings ? "true" : "false", deck.tie_embeddings ? "true" : "false");
  if (f.rope_scaling != deck.rope_scaling)
    return differ("model.rope_scaling", rope_scaling_name(f.rope_scaling), rope_scaling_name(deck.rope_scaling));
  if (f.rope_scaling == RopeScaling::none) return "";
  const std::pair<const char*, std::pair<double, double>> scaling[] = {
      {"model.rope_factor", {f.rope_factor, deck.rope_factor}},
      {"model.rope_low_freq_factor", {f.rope_low_freq_factor, deck.rope_low_freq_factor}},
      {"model.rope_high_freq_factor", {f.rope_high_freq_factor, deck.rope_high_freq_factor}},
      {"model.rope_original_positions",
       {static_cast<double>(f.rope_original_positions), static_cast<double>(deck.rope_original_positions)}},
  };
  for (const auto& [key, values] : scaling)
    if (values.first != values.second) return differ(key, number_text(values.first), number_text(values.second));
  return "";
}

std::vector<float> read_weights(const WeightsSource& source, const ModelShape& shape) {
  if (const std::string why = shape_mismatch(source, shape); !why.empty())
    throw Error(source.path + ": holds another model: " + why);
  std::vector<float> params(make_layout(shape).total());
  if (source.format == WeightsFormat::llmc) {
    const InputFile file(source.path);
    read_llmc_params(file, read_llmc_header(file), shape, params);
  } else {
    weight_formats(source.shape.arch).read_hf(source.path, source.shape, shape, params);
  }
  return params;
}

std::vector<std::string> weights_outputs(WeightsFormat format, const std::string& path, const ModelShape& shape,
                                         WeightDtype dtype, std::uint64_t max_shard_bytes) {
  if (format == WeightsFormat::llmc) return {path};
  return weight_formats(shape.arch).hf_outputs(path, shape, dtype, max_shard_bytes);
}

void write_weights(WeightsFormat format, const std::string& path, const ModelShape& shape, std::span<const float> params,
                   WeightDtype dtype, std::uint64_t max_shard_bytes) {
  if (format == WeightsFormat::llmc) {
    require_llmc_holds(shape);
    write_llmc(path, shape, params, dtype);
  } else {
    weight_formats(shape.arch).write_hf(path, shape, params, dtype, max_shard_bytes);
  }
}

}  // namespace st
