#include "weights/hf_gpt2.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "weights/file_io.hpp"
#include "weights/shape_limits.hpp"
#include "weights/weight_formats.hpp"

namespace st {
namespace {

using Json = nlohmann::json;

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The attention-mask buffers (causal mask, masked bias) transformers once saved with the weights.
bool is_mask_buffer(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

std::int64_t positive_integer(const Json& config, const char* key, const std::string& path) {
  const Json& v = config[key];
  if (!v.is_number_integer() || v.get<std::int64_t>() <= 0)
    throw Error(path + ": \"" + key + "\" is " + v.dump() + ", expected a positive integer");
  return v.get<std::int64_t>();
}

// [rows, cols] row-major -> [cols, rows] row-major.
void transpose(const float* in, float* out, std::int64_t rows, std::int64_t cols) {
  constexpr std::int64_t kTile = 64;  // cache-sized tiles: a 3072 x 768 matrix otherwise strides through memory
  for (std::int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (std::int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (std::int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (std::int64_t c = c0; c < std::min(cols, c0 + kTile); ++c) out[c * rows + r] = in[r * cols + c];
}

}  // namespace

std::vector<HfGpt2Tensor> hf_gpt2_tensors(const ModelShape& s) {
  const std::int64_t C = s.d_model;
  std::vector<HfGpt2Tensor> out = {{"wte.weight", "wte", false, {s.vocab_size, C}},
                                   {"wpe.weight", "wpe", false, {s.seq_len, C}}};
  for (std::int64_t l = 0; l < s.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".", b = "block" + std::to_string(l) + ".";
    const std::vector<HfGpt2Tensor> block = {
        {h + "ln_1.weight", b + "ln1.w", false, {C}},
        {h + "ln_1.bias", b + "ln1.b", false, {C}},
        {h + "attn.c_attn.weight", b + "attn.qkv.w", true, {C, 3 * C}},
        {h + "attn.c_attn.bias", b + "attn.qkv.b", false, {3 * C}},
        {h + "attn.c_proj.weight", b + "attn.proj.w", true, {C, C}},
        {h + "attn.c_proj.bias", b + "attn.proj.b", false, {C}},
        {h + "ln_2.weight", b + "ln2.w", false, {C}},
        {h + "ln_2.bias", b + "ln2.b", false, {C}},
        {h + "mlp.c_fc.weight", b + "mlp.fc.w", true, {C, 4 * C}},
        {h + "mlp.c_fc.bias", b + "mlp.fc.b", false, {4 * C}},
        {h + "mlp.c_proj.weight", b + "mlp.proj.w", true, {4 * C, C}},
        {h + "mlp.c_proj.bias", b + "mlp.proj.b", false, {C}},
    };
    out.insert(out.end(), block.begin(), block.end());
  }
  out.push_back({"ln_f.weight", "lnf.w", false, {C}});
  out.push_back({"ln_f.bias", "lnf.b", false, {C}});
  return out;
}

std::string hf_config_path(const std::string& safetensors_path) {
  return (std::filesystem::path(safetensors_path).parent_path() / "config.json").string();
}

namespace {

ModelShape parse_hf_gpt2_config(const std::string& path);

}  // namespace

ModelShape read_hf_gpt2_config(const std::string& path) {
  try {
    return parse_hf_gpt2_config(path);
  } catch (const Json::exception& e) {  // a setting of the wrong JSON type
    throw Error(path + ": " + e.what());
  }
}

namespace {

ModelShape parse_hf_gpt2_config(const std::string& path) {
  if (!std::filesystem::exists(path))
    throw Error(path + ": missing: a Hugging Face model.safetensors needs its config.json beside it (for n_head and "
                       "the context length)");
  Json config;
  try {
    config = Json::parse(read_text_file(path));
  } catch (const Json::exception& e) {
    throw Error(path + ": does not parse as JSON: " + e.what());
  }
  if (!config.is_object()) throw Error(path + ": is not a JSON object");
  auto refuse = [&](const std::string& setting, const std::string& needed) {
    throw Error(path + ": " + setting + "; shardtrain's GPT-2 needs " + needed);
  };
  if (config.contains("model_type") && config["model_type"] != "gpt2")
    refuse("\"model_type\" is " + config["model_type"].dump(), "\"gpt2\"");
  for (const char* key : {"n_layer", "n_head", "n_embd", "vocab_size"})
    if (!config.contains(key)) throw Error(path + ": has no \"" + key + "\"");
  const char* positions = config.contains("n_positions") ? "n_positions" : "n_ctx";
  if (!config.contains(positions)) throw Error(path + ": has neither \"n_positions\" nor \"n_ctx\"");
  ModelShape s;
  s.n_layer = positive_integer(config, "n_layer", path);
  s.n_head = positive_integer(config, "n_head", path);
  s.d_model = positive_integer(config, "n_embd", path);
  s.vocab_size = positive_integer(config, "vocab_size", path);
  s.seq_len = positive_integer(config, positions, path);
  s.padded_vocab = s.vocab_size;
  if (const std::string why =
          shape_outside_deck_limits(s, {"\"n_layer\"", "\"n_embd\"", "\"n_head\"", std::string("\"") + positions + "\"",
                                        "\"vocab_size\""});
      !why.empty())
    throw Error(path + ": " + why);
  if (s.d_model % s.n_head != 0)
    throw Error(path + ": n_embd = " + std::to_string(s.d_model) + " is not divisible by n_head = " +
                std::to_string(s.n_head));
  if (config.contains("activation_function")) {
    const Json& a = config["activation_function"];
    if (a != "gelu_new" && a != "gelu_pytorch_tanh")
      refuse("\"activation_function\" is " + a.dump(), "the tanh GELU (\"gelu_new\" or \"gelu_pytorch_tanh\")");
  }
  if (config.contains("layer_norm_epsilon") &&
      (!config["layer_norm_epsilon"].is_number() || config["layer_norm_epsilon"].get<double>() != 1e-5))
    refuse("\"layer_norm_epsilon\" is " + config["layer_norm_epsilon"].dump(), "1e-05");
  if (config.contains("n_inner") && !config["n_inner"].is_null() && config["n_inner"] != 4 * s.d_model)
    refuse("\"n_inner\" is " + config["n_inner"].dump(), "null or 4 x n_embd = " + std::to_string(4 * s.d_model));
  if (config.value("tie_word_embeddings", true) != true)
    refuse("\"tie_word_embeddings\" is false", "the LM head tied to the token embedding");
  if (config.value("scale_attn_weights", true) != true)
    refuse("\"scale_attn_weights\" is false", "attention scores scaled by 1/sqrt(head size)");
  if (config.value("scale_attn_by_inverse_layer_idx", false) != false)
    refuse("\"scale_attn_by_inverse_layer_idx\" is true", "no per-layer scaling of attention scores");
  return s;
}

}  // namespace

std::string hf_gpt2_config_json(const ModelShape& s, WeightDtype dtype) {
  nlohmann::ordered_json c;
  c["architectures"] = {"GPT2LMHeadModel"};
  c["model_type"] = "gpt2";
  c["activation_function"] = "gelu_new";
  c["layer_norm_epsilon"] = 1e-5;
  c["n_layer"] = s.n_layer;
  c["n_head"] = s.n_head;
  c["n_embd"] = s.d_model;
  c["n_positions"] = s.seq_len;
  c["n_ctx"] = s.seq_len;
  c["n_inner"] = nullptr;
  c["vocab_size"] = s.vocab_size;
  c["scale_attn_weights"] = true;
  c["tie_word_embeddings"] = true;
  c["torch_dtype"] = dtype == WeightDtype::bf16 ? "bfloat16" : "float32";
  return c.dump(2) + "\n";
}

std::string check_hf_gpt2_tensors(const SafetensorsReader& file, const ModelShape& shape) {
  const std::string& path = file.path();
  const std::string prefix = file.find(std::string(kHfPrefix) + "wte.weight") ? kHfPrefix
                             : file.find("wte.weight")                        ? ""
                                                                              : kHfPrefix;
  const auto expected = hf_gpt2_tensors(shape);
  for (const HfGpt2Tensor& t : expected) {
    const SafetensorsTensor* found = file.find(prefix + t.name);
    if (!found)
      throw Error(path + ": missing tensor " + prefix + t.name + " (a GPT-2 of config.json's shape: n_layer " +
                  std::to_string(shape.n_layer) + ", n_embd " + std::to_string(shape.d_model) + ")");
    if (found->shape != t.shape)
      throw Error(path + ": tensor " + found->name + " has shape " + shape_text(found->shape) + ", config.json's model " +
                  (t.conv1d ? "(Conv1D, [in, out]) " : "") + "needs " + shape_text(t.shape));
  }
  for (const SafetensorsTensor& t : file.tensors()) {
    if (is_mask_buffer(t.name)) continue;
    if (t.name == "lm_head.weight") {
      if (t.shape != std::vector<std::int64_t>{shape.vocab_size, shape.d_model})
        throw Error(path + ": tensor lm_head.weight has shape " + shape_text(t.shape) + ", the token table's is " +
                    shape_text({shape.vocab_size, shape.d_model}));
      continue;
    }
    const bool known = t.name.starts_with(prefix) &&
                       std::any_of(expected.begin(), expected.end(),
                                   [&](const HfGpt2Tensor& e) { return t.name == prefix + e.name; });
    if (!known)
      throw Error(path + ": unexpected tensor " + t.name + ": not part of a GPT-2 of config.json's shape (n_layer " +
                  std::to_string(shape.n_layer) + ")");
  }
  return prefix;
}

void read_hf_gpt2_params(const SafetensorsReader& file, const ModelShape& file_shape, const ModelShape& ours,
                         std::span<float> params) {
  const std::string prefix = check_hf_gpt2_tensors(file, file_shape);
  const ParamLayout layout = make_layout(ours);
  ST_REQUIRE(params.size() == layout.total(), "parameter buffer does not match the layout");
  std::vector<float> stored;
  for (const HfGpt2Tensor& t : hf_gpt2_tensors(file_shape)) {
    const SafetensorsTensor& in_file = *file.find(prefix + t.name);
    const TensorSlot& mine = layout.tensor(t.ours);
    float* into = params.data() + mine.offset;
    if (t.conv1d) {
      stored.resize(in_file.elements());
      file.read_f32(in_file, stored.data());
      transpose(stored.data(), into, t.shape[0], t.shape[1]);
    } else {
      file.read_f32(in_file, into);
      // The token table's rows past the vocabulary (this run's padding) are never used: zero.
      std::fill(into + in_file.elements(), into + mine.size, 0.0f);
    }
  }
  // A stored LM head must be the tied one: this model has no other.
  if (const SafetensorsTensor* head = file.find("lm_head.weight")) {
    stored.resize(head->elements());
    file.read_f32(*head, stored.data());
    const float* wte = params.data() + layout.tensor("wte").offset;
    if (std::memcmp(stored.data(), wte, stored.size() * sizeof(float)) != 0)
      throw Error(file.path() + ": tensor lm_head.weight differs from " + prefix +
                  "wte.weight; shardtrain's LM head is tied to the token embedding");
  }
}

void write_hf_gpt2(const std::string& path, const ModelShape& shape, std::span<const float> params, WeightDtype dtype) {
  const ParamLayout layout = make_layout(shape);
  ST_REQUIRE(params.size() == layout.total(), "parameter buffer does not match the layout");
  const auto tensors = hf_gpt2_tensors(shape);
  std::vector<std::vector<float>> transposed;  // the Conv1D weights, [in, out]
  transposed.reserve(tensors.size());
  std::vector<SafetensorsOutput> out;
  for (const HfGpt2Tensor& t : tensors) {
    const TensorSlot& mine = layout.tensor(t.ours);
    const float* values = params.data() + mine.offset;
    std::uint64_t n = 1;
    for (std::int64_t d : t.shape) n *= static_cast<std::uint64_t>(d);
    if (t.conv1d) {
      transposed.emplace_back(n);
      transpose(values, transposed.back().data(), t.shape[1], t.shape[0]);
      values = transposed.back().data();
    }
    out.push_back({kHfPrefix + t.name, t.shape, std::span<const float>(values, n)});
  }
  write_safetensors(path, std::move(out), dtype, {{"format", "pt"}});
  OutputFile config(hf_config_path(path));
  const std::string text = hf_gpt2_config_json(shape, dtype);
  config.write(text.data(), text.size());
  config.commit();
}

const WeightFormats& gpt2_weight_formats() {
  static const WeightFormats row{
      // llm.c trains GPT-2: its model file holds it.
      .arch = Arch::gpt2, .llmc = true,
      .read_hf =
          [](const std::string& path, const ModelShape& file_shape, const ModelShape& ours, std::span<float> params) {
            const SafetensorsReader reader(path);
            read_hf_gpt2_params(reader, file_shape, ours, params);
          },
      .write_hf = [](const std::string& out, const ModelShape& shape, std::span<const float> params, WeightDtype dtype,
                     std::uint64_t /*max_shard_bytes: GPT-2 is written whole*/) {
        write_hf_gpt2(out, shape, params, dtype);
      },
      .hf_outputs = [](const std::string& out, const ModelShape&, WeightDtype, std::uint64_t) {
        return std::vector<std::string>{out, hf_config_path(out)};
      },
      .hf_written = [](const std::string& out, const ModelShape&, WeightDtype dtype, std::uint64_t) {
        return "wrote " + out + " (Hugging Face GPT-2 safetensors, " + safetensors_dtype_name(dtype) + ") and " +
               hf_config_path(out);
      },
  };
  return row;
}

}  // namespace st
