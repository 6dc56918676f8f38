#pragma once
// Weights in the formats other tools use: GPT-2 in llm.c's model file and Hugging Face's
// model.safetensors (+ config.json), Llama in Hugging Face's model.safetensors or its shards
// (+ model.safetensors.index.json, config.json; weights/hf_llama.hpp). Reading fills this
// project's flat parameter layout; writing takes it. The format of a file is told by its first
// bytes, not its name; a Hugging Face file's model by its config.json.
#include <span>
#include <string>
#include <vector>

#include "model/layout.hpp"
#include "weights/hf_llama.hpp"
#include "weights/weight_dtype.hpp"

namespace st {

enum class WeightsFormat { llmc, safetensors };

struct WeightsSource {
  std::string path;  // the weights file (model.safetensors, or a Llama's index, when a directory was named)
  WeightsFormat format = WeightsFormat::llmc;
  std::string description;  // "llm.c model file, version 3 (fp32)"
  ModelShape shape;          // the file's model; padded_vocab: llm.c's Vp, else vocab_size
};

// Opens the file (or DIR/model.safetensors, or a Llama's DIR/model.safetensors.index.json and its
// shards), reads its header(s) and checks that it is a whole, consistent GPT-2 or Llama of one
// shape, without reading the values. Throws Error naming the file and
// what is wrong.
WeightsSource probe_weights(const std::string& path);
// The first model key in which the file and the deck differ ("model.n_layer = 2 in FILE, 4 in the
// deck"), "" if none; the padded vocabulary may differ (padding rows are never used), and a
// Llama's seq_len may be shorter in the deck (rotary positions have no table).
std::string shape_mismatch(const WeightsSource& file, const ModelShape& deck);
// Every parameter, laid out by make_layout(shape); the deck's padding rows are zero. Throws
// Error if the shapes differ (shape_mismatch) or the file cannot be read.
std::vector<float> read_weights(const WeightsSource& source, const ModelShape& shape);

// Writes the parameters (laid out for `shape`) in `format`: llm.c (version 3, or 5 for bf16;
// GPT-2 only) or model.safetensors with config.json beside it (a Llama's in shards above
// max_shard_bytes: hf_llama_outputs).
void write_weights(WeightsFormat format, const std::string& path, const ModelShape& shape, std::span<const float> params,
                   WeightDtype dtype, std::uint64_t max_shard_bytes = kDefaultMaxShardBytes);
// The files write_weights writes (or replaces) for `path`: path, and config.json beside a
// safetensors file; a Llama's shards and index.
std::vector<std::string> weights_outputs(WeightsFormat format, const std::string& path, const ModelShape& shape,
                                         WeightDtype dtype, std::uint64_t max_shard_bytes = kDefaultMaxShardBytes);

}  // namespace st
