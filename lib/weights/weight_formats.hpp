#pragma once
// The weights layer's rows of the architecture table (model/arch.hpp): which other tools' files
// hold each family, and how this project reads and writes them. They sit here, keyed by the same
// Arch, because model/ lies below weights/ and cannot name these readers and writers. Each row is
// defined in its family's file (weights/hf_gpt2.cpp, weights/hf_llama.cpp); a new family adds its
// row to weight_formats.cpp's list.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/layout.hpp"
#include "weights/weight_dtype.hpp"

namespace st {

struct WeightFormats {
  Arch arch;
  // llm.c's model file holds the family (GPT-2 only: llm.c trains no other).
  bool llmc;
  // Hugging Face's model.safetensors (or its shards) with config.json beside it: reads the file
  // (or directory) at `path`, whose model is `file_shape`, into parameters laid out for `ours`.
  void (*read_hf)(const std::string& path, const ModelShape& file_shape, const ModelShape& ours,
                  std::span<float> params);
  // Writes `params` (laid out for `shape`) at `out`, and config.json beside it.
  void (*write_hf)(const std::string& out, const ModelShape& shape, std::span<const float> params, WeightDtype dtype,
                   std::uint64_t max_shard_bytes);
  // The files write_hf writes (or replaces) for `out`.
  std::vector<std::string> (*hf_outputs)(const std::string& out, const ModelShape& shape, WeightDtype dtype,
                                         std::uint64_t max_shard_bytes);
  // "wrote OUT (Hugging Face GPT-2 safetensors, F32) and CONFIG": what write_hf wrote, for the
  // command that asked for it.
  std::string (*hf_written)(const std::string& out, const ModelShape& shape, WeightDtype dtype,
                            std::uint64_t max_shard_bytes);
};

const WeightFormats& gpt2_weight_formats();   // weights/hf_gpt2.cpp
const WeightFormats& llama_weight_formats();  // weights/hf_llama.cpp
const WeightFormats& weight_formats(Arch arch);

// Throws Error unless llm.c's files hold the model (WeightFormats::llmc), naming the formats that do.
void require_llmc_holds(const ModelShape& shape);

}  // namespace st
