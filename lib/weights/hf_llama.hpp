#pragma once
// Hugging Face's Llama (transformers' LlamaForCausalLM): config.json, and its tensors in one
// model.safetensors or in shards named by model.safetensors.index.json's weight_map. Its linear
// weights are [out, in] as this project's; q_proj, k_proj and v_proj are consecutive rows of our
// fused attn.qkv.w, gate_proj and up_proj of mlp.gate_up.w, so every tensor of the file is one
// contiguous range of the flat parameters. Rotary embeddings use the same rotate-half layout on
// both sides: q and k are taken as stored.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/layout.hpp"
#include "weights/weight_dtype.hpp"

namespace st {

// transformers' default max_shard_size ("5GB", decimal).
inline constexpr std::uint64_t kDefaultMaxShardBytes = 5'000'000'000;

struct HfLlamaTensor {
  std::string name;                 // "model.layers.0.self_attn.k_proj.weight"
  std::string ours;                 // "block0.attn.qkv.w"
  std::uint64_t offset = 0;         // elements into `ours` where this tensor's rows start
  std::vector<std::int64_t> shape;  // as stored: [rows, cols]
  std::uint64_t elements() const;
};

// Every tensor of a Llama of this shape, in the order transformers' modules hold them (embedding,
// layers, norm, lm_head when untied); the token table and head at vocab_size rows.
std::vector<HfLlamaTensor> hf_llama_tensors(const ModelShape& shape);

// Whether the config.json at `path` declares a Llama (model_type "llama" or architectures
// naming LlamaForCausalLM); false when it is absent or says another model.
bool declares_llama(const std::string& config_path);

// The model's shape from config.json, refusing (file and key named) what this project's Llama
// does not compute: head_dim other than hidden_size / num_attention_heads, attention or MLP
// biases, rope_scaling of a type other than "llama3" (or "default"), another activation than silu.
ModelShape read_hf_llama_config(const std::string& path);
// config.json for this shape as transformers writes one for LlamaForCausalLM.
std::string hf_llama_config_json(const ModelShape& shape, WeightDtype dtype);

// The files of a Hugging Face Llama named by `path`: a directory (its model.safetensors.index.json,
// else its model.safetensors), an index file, or a safetensors file; config.json beside them.
struct HfLlamaFiles {
  std::string config;
  std::string index;                // "" when the weights are one file
  std::vector<std::string> shards;  // the safetensors file(s)
};
HfLlamaFiles locate_hf_llama(const std::string& path);

// Opens every shard, checks the tensors against a Llama of `shape` (each present once, in the
// shard the index names, with its shape; none unknown: a bias is refused as one) and returns
// "Hugging Face Llama safetensors (BF16, 2 shards) with DIR/config.json". Throws Error naming the
// file and the tensor.
std::string check_hf_llama(const HfLlamaFiles& files, const ModelShape& shape);
// Fills `params` (laid out for `ours`: the file's model but for the padded vocabulary; padding
// rows zero) from the checked files.
void read_hf_llama_params(const HfLlamaFiles& files, const ModelShape& file_shape, const ModelShape& ours,
                          std::span<float> params);

// What write_hf_llama writes for OUT (".../model.safetensors"): OUT itself with config.json, or,
// when the tensors' bytes exceed max_shard_bytes, OUT's stem + "-0000k-of-0000n.safetensors"
// shards and OUT + ".index.json" (the shards split as transformers splits them: in module order,
// a new shard when the next tensor would pass the limit), then the other form's file, which the
// write removes (a reader would take it instead), and config.json last.
std::vector<std::string> hf_llama_outputs(const std::string& out, const ModelShape& shape, WeightDtype dtype,
                                          std::uint64_t max_shard_bytes);
void write_hf_llama(const std::string& out, const ModelShape& shape, std::span<const float> params, WeightDtype dtype,
                    std::uint64_t max_shard_bytes);

}  // namespace st
