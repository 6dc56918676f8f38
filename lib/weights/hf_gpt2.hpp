#pragma once
// Hugging Face's GPT-2 (transformers' GPT2LMHeadModel) in a safetensors file: its tensor names,
// its layout and its config.json. Its linear layers are Conv1D modules, whose weights are stored
// [in, out], the transpose of this project's [out, in]; its token table has exactly vocab_size
// rows; the LM head is tied to the token table and not stored (an lm_head.weight that is stored
// must equal it).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/layout.hpp"
#include "weights/safetensors_file.hpp"
#include "weights/weight_dtype.hpp"

namespace st {

struct HfGpt2Tensor {
  std::string name;  // without the "transformer." prefix: "h.0.attn.c_attn.weight"
  std::string ours;  // "block0.attn.qkv.w"
  bool conv1d = false;  // stored transposed: [in, out]
  std::vector<std::int64_t> shape;  // as stored
};

inline constexpr const char* kHfPrefix = "transformer.";

// Every parameter tensor of a GPT-2 of this shape (the token table at vocab_size rows).
std::vector<HfGpt2Tensor> hf_gpt2_tensors(const ModelShape& shape);

// The model's shape from config.json (n_layer, n_head, n_embd, n_positions or n_ctx,
// vocab_size; padded_vocab = vocab_size), after checking that the architecture's settings are the
// ones this project's GPT-2 computes (tanh GELU, LayerNorm epsilon 1e-5, tied head, attention
// scaled by 1/sqrt(head size) only); throws Error naming the file and the setting.
ModelShape read_hf_gpt2_config(const std::string& path);
// config.json for this shape, which transformers' GPT2LMHeadModel.from_pretrained reads.
std::string hf_gpt2_config_json(const ModelShape& shape, WeightDtype dtype);

// Checks the file's tensors against a GPT-2 of `shape` (from its config.json): each present with
// its shape, none unknown (the attention-mask buffers older files carry are ignored). Returns the
// prefix the names carry: "transformer." (GPT2LMHeadModel) or "" (GPT2Model). Throws Error naming
// the file and the first tensor that is missing, misshapen or unknown.
std::string check_hf_gpt2_tensors(const SafetensorsReader& file, const ModelShape& shape);
// Fills `params` (laid out for `ours`; the same model as `file_shape` but for the padded
// vocabulary) from the checked file.
void read_hf_gpt2_params(const SafetensorsReader& file, const ModelShape& file_shape, const ModelShape& ours,
                         std::span<float> params);
// Writes model.safetensors with GPT2LMHeadModel's names and layout (lm_head left to the tie),
// and config.json in the same directory.
void write_hf_gpt2(const std::string& path, const ModelShape& shape, std::span<const float> params, WeightDtype dtype);

// config.json beside a safetensors file.
std::string hf_config_path(const std::string& safetensors_path);

}  // namespace st
