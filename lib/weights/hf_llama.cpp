#include "weights/hf_llama.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "deck/schema.hpp"
#include "weights/file_io.hpp"
#include "weights/safetensors_file.hpp"
#include "weights/shape_limits.hpp"
#include "weights/weight_formats.hpp"

namespace st {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Json parse_json_file(const std::string& path) {
  if (!fs::exists(path)) throw Error(path + ": missing");
  try {
    Json j = Json::parse(read_text_file(path));
    if (!j.is_object()) throw Error(path + ": is not a JSON object");
    return j;
  } catch (const Json::exception& e) {
    throw Error(path + ": does not parse as JSON: " + e.what());
  }
}

std::int64_t positive_integer(const Json& config, const char* key, const std::string& path) {
  if (!config.contains(key)) throw Error(path + ": has no \"" + std::string(key) + "\"");
  const Json& v = config[key];
  if (!v.is_number_integer() || v.get<std::int64_t>() <= 0)
    throw Error(path + ": \"" + key + "\" is " + v.dump() + ", expected a positive integer");
  return v.get<std::int64_t>();
}

double positive_number(const Json& config, const char* key, double fallback, const std::string& path) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  const Json& v = config[key];
  if (!v.is_number() || v.get<double>() <= 0)
    throw Error(path + ": \"" + key + "\" is " + v.dump() + ", expected a positive number");
  return v.get<double>();
}

std::uint64_t dtype_bytes(WeightDtype dtype) { return dtype == WeightDtype::bf16 ? 2 : 4; }

// The shards of a write: tensors (indices into hf_llama_tensors) per file.
std::vector<std::vector<std::size_t>> shard_plan(const std::vector<HfLlamaTensor>& tensors, WeightDtype dtype,
                                                 std::uint64_t max_shard_bytes) {
  std::vector<std::vector<std::size_t>> shards(1);
  std::uint64_t in_shard = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::uint64_t bytes = tensors[i].elements() * dtype_bytes(dtype);
    if (!shards.back().empty() && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += bytes;
  }
  return shards;
}

// "DIR/model-00002-of-00003.safetensors" for OUT = "DIR/model.safetensors".
std::string shard_name(const std::string& out, std::size_t k, std::size_t n) {
  char tail[48];
  std::snprintf(tail, sizeof tail, "-%05zu-of-%05zu.safetensors", k + 1, n);
  const fs::path p(out);
  return (p.parent_path() / (p.stem().string() + tail)).string();
}

std::string config_beside(const std::string& file) {
  return (fs::path(file).parent_path() / "config.json").string();
}

// Hugging Face's rope_scaling object: {"rope_type" (older files: "type"): "llama3", "factor",
// "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"} (every key
// required, as transformers requires them); "default" is no scaling. Other types are refused.
void read_rope_scaling(const Json& config, const std::string& path, ModelShape& s) {
  const Json& r = config["rope_scaling"];
  const std::string type =
      r.is_object() ? r.value("rope_type", r.value("type", std::string("(no rope_type)"))) : r.dump();
  if (type == "default") return;
  if (type != "llama3")
    throw Error(path + ": \"rope_scaling\" has type \"" + type +
                "\"; shardtrain computes unscaled rotary embeddings (rope_scaling null or \"default\") and Llama "
                "3.1's \"llama3\" scaling");
  auto number = [&](const char* key) {
    if (!r.contains(key) || !r[key].is_number() || r[key].get<double>() <= 0)
      throw Error(path + ": \"rope_scaling\".\"" + key + "\" is " + (r.contains(key) ? r[key].dump() : "missing") +
                  ", expected a positive number (rope_type \"llama3\" needs factor, low_freq_factor, "
                  "high_freq_factor and original_max_position_embeddings)");
    return r[key].get<double>();
  };
  s.rope_scaling = RopeScaling::llama3;
  s.rope_factor = number("factor");
  s.rope_low_freq_factor = number("low_freq_factor");
  s.rope_high_freq_factor = number("high_freq_factor");
  const double original = number("original_max_position_embeddings");
  if (original != std::floor(original))
    throw Error(path + ": \"rope_scaling\".\"original_max_position_embeddings\" is " +
                r["original_max_position_embeddings"].dump() + ", expected a positive integer");
  s.rope_original_positions = static_cast<std::int64_t>(original);
  if (s.rope_factor < 1.0)
    throw Error(path + ": \"rope_scaling\".\"factor\" is " + r["factor"].dump() + ", expected at least 1");
  if (s.rope_high_freq_factor <= s.rope_low_freq_factor)
    throw Error(path + ": \"rope_scaling\".\"high_freq_factor\" = " + r["high_freq_factor"].dump() +
                " must exceed \"low_freq_factor\" = " + r["low_freq_factor"].dump());
}

ModelShape parse_config(const std::string& path) {
  const Json config = parse_json_file(path);
  auto refuse = [&](const std::string& key, const std::string& why) {
    throw Error(path + ": \"" + key + "\" is " + config[key].dump() + "; " + why);
  };
  if (config.contains("hidden_act") && config["hidden_act"] != "silu")
    refuse("hidden_act", "shardtrain's Llama computes SwiGLU with silu");
  ModelShape s;
  s.arch = Arch::llama;
  s.n_layer = positive_integer(config, "num_hidden_layers", path);
  s.d_model = positive_integer(config, "hidden_size", path);
  s.n_head = positive_integer(config, "num_attention_heads", path);
  s.vocab_size = positive_integer(config, "vocab_size", path);
  s.padded_vocab = s.vocab_size;
  s.seq_len = positive_integer(config, "max_position_embeddings", path);
  s.ffn_dim = positive_integer(config, "intermediate_size", path);
  s.n_kv_head = config.contains("num_key_value_heads") && !config["num_key_value_heads"].is_null()
                    ? positive_integer(config, "num_key_value_heads", path)
                    : s.n_head;
  // transformers' LlamaConfig defaults for keys a file leaves out.
  s.norm_eps = positive_number(config, "rms_norm_eps", 1e-6, path);
  s.rope_theta = positive_number(config, "rope_theta", 10000.0, path);
  if (config.contains("tie_word_embeddings")) {
    if (!config["tie_word_embeddings"].is_boolean()) refuse("tie_word_embeddings", "expected true or false");
    s.tie_embeddings = config["tie_word_embeddings"].get<bool>();
  } else {
    s.tie_embeddings = false;
  }
  // Rotary embeddings have no table: a context longer than the deck allows is used up to that.
  if (const KeySpec* spec = find_key("model", "seq_len"); spec && s.seq_len > spec->max)
    s.seq_len = static_cast<std::int64_t>(spec->max);
  if (const std::string why = shape_outside_deck_limits(
          s, {"\"num_hidden_layers\"", "\"hidden_size\"", "\"num_attention_heads\"", "\"max_position_embeddings\"",
              "\"vocab_size\""});
      !why.empty())
    throw Error(path + ": " + why);
  if (s.d_model % s.n_head != 0)
    throw Error(path + ": \"hidden_size\" = " + std::to_string(s.d_model) + " is not divisible by \"num_attention_heads\" = " +
                std::to_string(s.n_head));
  if (s.head_dim() % 2 != 0)
    throw Error(path + ": the head width hidden_size / num_attention_heads = " + std::to_string(s.head_dim()) +
                " is odd; rotary embeddings rotate pairs of channels");
  if (s.n_head % s.n_kv_head != 0)
    throw Error(path + ": \"num_key_value_heads\" = " + std::to_string(s.n_kv_head) +
                " does not divide \"num_attention_heads\" = " + std::to_string(s.n_head));
  if (config.contains("head_dim") && !config["head_dim"].is_null() && config["head_dim"] != s.head_dim())
    refuse("head_dim", "shardtrain's Llama has heads of hidden_size / num_attention_heads = " +
                           std::to_string(s.head_dim()) + " channels");
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (config.contains(key) && config[key] != false)
      refuse(key, "shardtrain's Llama has no biases");
  if (config.contains("rope_scaling") && !config["rope_scaling"].is_null()) read_rope_scaling(config, path, s);
  return s;
}

}  // namespace

std::uint64_t HfLlamaTensor::elements() const {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

std::vector<HfLlamaTensor> hf_llama_tensors(const ModelShape& s) {
  const std::int64_t C = s.d_model, KV = s.kv_heads() * s.head_dim(), F = s.hidden();
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  std::vector<HfLlamaTensor> out = {{"model.embed_tokens.weight", "wte", 0, {s.vocab_size, C}}};
  for (std::int64_t l = 0; l < s.n_layer; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".", b = "block" + std::to_string(l) + ".";
    const std::vector<HfLlamaTensor> block = {
        {h + "self_attn.q_proj.weight", b + "attn.qkv.w", 0, {C, C}},
        {h + "self_attn.k_proj.weight", b + "attn.qkv.w", u(C * C), {KV, C}},
        {h + "self_attn.v_proj.weight", b + "attn.qkv.w", u((C + KV) * C), {KV, C}},
        {h + "self_attn.o_proj.weight", b + "attn.proj.w", 0, {C, C}},
        {h + "mlp.gate_proj.weight", b + "mlp.gate_up.w", 0, {F, C}},
        {h + "mlp.up_proj.weight", b + "mlp.gate_up.w", u(F * C), {F, C}},
        {h + "mlp.down_proj.weight", b + "mlp.down.w", 0, {C, F}},
        {h + "input_layernorm.weight", b + "attn_norm.w", 0, {C}},
        {h + "post_attention_layernorm.weight", b + "mlp_norm.w", 0, {C}},
    };
    out.insert(out.end(), block.begin(), block.end());
  }
  out.push_back({"model.norm.weight", "lnf.w", 0, {C}});
  if (!s.tie_embeddings) out.push_back({"lm_head.weight", "lm_head.w", 0, {s.vocab_size, C}});
  return out;
}

bool declares_llama(const std::string& config_path) {
  std::error_code ec;
  if (!fs::is_regular_file(config_path, ec)) return false;
  try {
    const Json config = Json::parse(read_text_file(config_path));
    if (!config.is_object()) return false;
    if (config.value("model_type", Json()) == "llama") return true;
    const Json archs = config.value("architectures", Json::array());
    return archs.is_array() && std::find(archs.begin(), archs.end(), Json("LlamaForCausalLM")) != archs.end();
  } catch (const Json::exception&) {
    return false;  // the GPT-2 reader names what is wrong with it
  }
}

ModelShape read_hf_llama_config(const std::string& path) {
  try {
    return parse_config(path);
  } catch (const Json::exception& e) {  // a setting of the wrong JSON type
    throw Error(path + ": " + e.what());
  }
}

std::string hf_llama_config_json(const ModelShape& s, WeightDtype dtype) {
  nlohmann::ordered_json c;
  c["architectures"] = {"LlamaForCausalLM"};
  c["model_type"] = "llama";
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["head_dim"] = s.head_dim();
  c["hidden_act"] = "silu";
  c["hidden_size"] = s.d_model;
  c["initializer_range"] = 0.02;
  c["intermediate_size"] = s.hidden();
  c["max_position_embeddings"] = s.seq_len;
  c["mlp_bias"] = false;
  c["num_attention_heads"] = s.n_head;
  c["num_hidden_layers"] = s.n_layer;
  c["num_key_value_heads"] = s.kv_heads();
  c["pretraining_tp"] = 1;
  c["rms_norm_eps"] = s.norm_eps;
  if (s.rope_scaling == RopeScaling::llama3) {
    nlohmann::ordered_json r;
    r["factor"] = s.rope_factor;
    r["high_freq_factor"] = s.rope_high_freq_factor;
    r["low_freq_factor"] = s.rope_low_freq_factor;
    r["original_max_position_embeddings"] = s.rope_original_positions;
    r["rope_type"] = "llama3";
    c["rope_scaling"] = r;
  } else {
    c["rope_scaling"] = nullptr;
  }
  c["rope_theta"] = s.rope_theta;
  c["tie_word_embeddings"] = s.tie_embeddings;
  c["torch_dtype"] = dtype == WeightDtype::bf16 ? "bfloat16" : "float32";
  c["use_cache"] = true;
  c["vocab_size"] = s.vocab_size;
  return c.dump(2) + "\n";
}

HfLlamaFiles locate_hf_llama(const std::string& path) {
  HfLlamaFiles files;
  std::string index;
  if (fs::is_directory(path)) {
    const fs::path dir(path);
    // transformers' order: the single file first, then the index.
    if (fs::exists(dir / "model.safetensors")) files.shards = {(dir / "model.safetensors").string()};
    else if (fs::exists(dir / "model.safetensors.index.json")) index = (dir / "model.safetensors.index.json").string();
    else
      throw Error(path + ": is a directory with neither model.safetensors nor model.safetensors.index.json");
  } else if (path.ends_with(".index.json")) {
    index = path;
  } else {
    files.shards = {path};
  }
  if (!index.empty()) {
    files.index = index;
    const Json j = parse_json_file(index);
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw Error(index + ": has no \"weight_map\" object (tensor name -> shard file)");
    std::vector<std::string> names;
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string()) throw Error(index + ": weight_map[\"" + tensor + "\"] is " + file.dump() + ", expected a file name");
      names.push_back(file.get<std::string>());
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    if (names.empty()) throw Error(index + ": weight_map is empty");
    for (const std::string& name : names) {
      if (name.find('/') != std::string::npos || name.find("..") != std::string::npos)
        throw Error(index + ": weight_map names " + name + ", not a file beside the index");
      files.shards.push_back((fs::path(index).parent_path() / name).string());
    }
  }
  files.config = config_beside(index.empty() ? files.shards.front() : index);
  return files;
}

namespace {

// The open shards and where each tensor is; the index's weight_map checked against them.
struct OpenLlama {
  std::vector<std::unique_ptr<SafetensorsReader>> readers;
  std::map<std::string, std::pair<const SafetensorsReader*, const SafetensorsTensor*>> tensors;
};

OpenLlama open_llama(const HfLlamaFiles& files) {
  OpenLlama open;
  for (const std::string& shard : files.shards) {
    if (!fs::exists(shard))
      throw Error(shard + ": missing" + (files.index.empty() ? "" : " (" + files.index + " names it in its weight_map)"));
    open.readers.push_back(std::make_unique<SafetensorsReader>(shard));
    const SafetensorsReader& r = *open.readers.back();
    for (const SafetensorsTensor& t : r.tensors()) {
      const auto [it, fresh] = open.tensors.emplace(t.name, std::make_pair(&r, &t));
      if (!fresh) throw Error(shard + ": tensor " + t.name + " is also in " + it->second.first->path());
    }
  }
  if (!files.index.empty()) {
    const Json j = parse_json_file(files.index);
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      const auto it = open.tensors.find(tensor);
      const std::string shard = (fs::path(files.index).parent_path() / file.get<std::string>()).string();
      if (it == open.tensors.end())
        throw Error(files.index + ": weight_map puts tensor " + tensor + " in " + shard + ", which does not hold it");
      if (it->second.first->path() != shard)
        throw Error(files.index + ": weight_map puts tensor " + tensor + " in " + shard + ", it is in " +
                    it->second.first->path());
    }
  }
  return open;
}

}  // namespace

std::string check_hf_llama(const HfLlamaFiles& files, const ModelShape& shape) {
  const OpenLlama open = open_llama(files);
  const auto expected = hf_llama_tensors(shape);
  std::map<std::string, const HfLlamaTensor*> known;
  for (const HfLlamaTensor& t : expected) known[t.name] = &t;
  const std::string where = files.index.empty() ? files.shards.front() : files.index;
  for (const HfLlamaTensor& t : expected) {
    const auto it = open.tensors.find(t.name);
    if (it == open.tensors.end())
      throw Error(where + ": missing tensor " + t.name + " (a Llama of " + files.config + "'s shape: " +
                  model_summary(shape) + ")");
    if (it->second.second->shape != t.shape)
      throw Error(it->second.first->path() + ": tensor " + t.name + " has shape " +
                  shape_text(it->second.second->shape) + ", " + files.config + "'s model needs " + shape_text(t.shape));
  }
  std::string dtypes;
  for (const auto& [name, at] : open.tensors) {
    if (name.ends_with("rotary_emb.inv_freq")) continue;  // a buffer older transformers saved, recomputed from rope_theta
    if (known.count(name) == 0) {
      if (name.ends_with(".bias"))
        throw Error(at.first->path() + ": tensor " + name + " is a bias; shardtrain's Llama has none");
      throw Error(at.first->path() + ": unexpected tensor " + name + ": not part of a Llama of " + files.config +
                  "'s shape (" + model_summary(shape) + ")");
    }
    if (dtypes.find(at.second->dtype) == std::string::npos) dtypes += (dtypes.empty() ? "" : ", ") + at.second->dtype;
  }
  const std::string count = files.index.empty() ? "" : ", " + std::to_string(files.shards.size()) + " shard(s)";
  return "Hugging Face Llama safetensors (" + dtypes + count + ") with " + files.config;
}

void read_hf_llama_params(const HfLlamaFiles& files, const ModelShape& file_shape, const ModelShape& ours,
                          std::span<float> params) {
  check_hf_llama(files, file_shape);
  const OpenLlama open = open_llama(files);
  const ParamLayout layout = make_layout(ours);
  ST_REQUIRE(params.size() == layout.total(), "parameter buffer does not match the layout");
  std::fill(params.begin(), params.end(), 0.0f);  // the token table's padding rows are never used: zero
  for (const HfLlamaTensor& t : hf_llama_tensors(file_shape)) {
    const auto& [reader, tensor] = open.tensors.at(t.name);
    reader->read_f32(*tensor, params.data() + layout.tensor(t.ours).offset + t.offset);
  }
}

std::vector<std::string> hf_llama_outputs(const std::string& out, const ModelShape& shape, WeightDtype dtype,
                                          std::uint64_t max_shard_bytes) {
  const auto plan = shard_plan(hf_llama_tensors(shape), dtype, max_shard_bytes);
  std::vector<std::string> outputs;
  // The other form's file too: it is removed, as a reader would take it instead of these.
  if (plan.size() == 1) {
    outputs.push_back(out);
    outputs.push_back(out + ".index.json");
  } else {
    for (std::size_t k = 0; k < plan.size(); ++k) outputs.push_back(shard_name(out, k, plan.size()));
    outputs.push_back(out + ".index.json");
    outputs.push_back(out);
  }
  outputs.push_back(config_beside(out));
  return outputs;
}

void write_hf_llama(const std::string& out, const ModelShape& shape, std::span<const float> params, WeightDtype dtype,
                    std::uint64_t max_shard_bytes) {
  ST_REQUIRE(shape.arch == Arch::llama, "write_hf_llama takes a llama");
  const ParamLayout layout = make_layout(shape);
  ST_REQUIRE(params.size() == layout.total(), "parameter buffer does not match the layout");
  const auto tensors = hf_llama_tensors(shape);
  const auto plan = shard_plan(tensors, dtype, max_shard_bytes);
  const std::vector<std::pair<std::string, std::string>> metadata = {{"format", "pt"}};
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  std::map<std::string, std::string> sorted_map;  // transformers writes the weight_map sorted by name
  std::uint64_t total = 0;
  for (std::size_t k = 0; k < plan.size(); ++k) {
    const std::string file = plan.size() == 1 ? out : shard_name(out, k, plan.size());
    std::vector<SafetensorsOutput> outputs;
    for (std::size_t i : plan[k]) {
      const HfLlamaTensor& t = tensors[i];
      const float* values = params.data() + layout.tensor(t.ours).offset + t.offset;
      outputs.push_back({t.name, t.shape, std::span<const float>(values, t.elements())});
      sorted_map[t.name] = fs::path(file).filename().string();
      total += t.elements() * dtype_bytes(dtype);
    }
    write_safetensors(file, std::move(outputs), dtype, metadata);
  }
  if (plan.size() > 1) {
    for (const auto& [name, file] : sorted_map) weight_map[name] = file;
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = weight_map;
    const std::string text = index.dump(2) + "\n";
    OutputFile file(out + ".index.json");
    file.write(text.data(), text.size());
    file.commit();
    // A model.safetensors left beside the shards would be read instead of them.
    std::error_code ec;
    if (fs::exists(out, ec) && !fs::remove(out, ec))
      throw Error(out + ": cannot remove the unsharded file the shards replace: " + ec.message());
  } else {
    // Likewise an index left from a sharded export would be read instead of the new file.
    std::error_code ec;
    if (fs::exists(out + ".index.json", ec) && !fs::remove(out + ".index.json", ec))
      throw Error(out + ".index.json: cannot remove the index the unsharded file replaces: " + ec.message());
  }
  OutputFile config(config_beside(out));
  const std::string text = hf_llama_config_json(shape, dtype);
  config.write(text.data(), text.size());
  config.commit();
}

namespace {

// "wrote OUT and DIR/config.json (Hugging Face Llama safetensors, F32)", or the shards, the
// index and config.json with the shards' count.
std::string hf_llama_written(const std::string& out, const ModelShape& shape, WeightDtype dtype,
                             std::uint64_t max_shard_bytes) {
  // The files written, less the other form's file that was removed (or never there).
  std::vector<std::string> files = hf_llama_outputs(out, shape, dtype, max_shard_bytes);
  const bool sharded = files.size() > 3;
  files.erase(files.begin() + (sharded ? files.size() - 2 : 1));
  std::string list;
  for (std::size_t i = 0; i < files.size(); ++i)
    list += (i == 0 ? "" : i + 1 == files.size() ? " and " : ", ") + files[i];
  return "wrote " + list + " (Hugging Face Llama safetensors, " + safetensors_dtype_name(dtype) +
         (sharded ? ", " + std::to_string(files.size() - 2) + " shards" : "") + ")";
}

}  // namespace

const WeightFormats& llama_weight_formats() {
  static const WeightFormats row{
      // Hugging Face files only: llm.c trains no Llama.
      .arch = Arch::llama, .llmc = false,
      .read_hf =
          [](const std::string& path, const ModelShape& file_shape, const ModelShape& ours, std::span<float> params) {
            read_hf_llama_params(locate_hf_llama(path), file_shape, ours, params);
          },
      .write_hf = write_hf_llama,
      .hf_outputs = hf_llama_outputs,
      .hf_written = hf_llama_written,
  };
  return row;
}

}  // namespace st
