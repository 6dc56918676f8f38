// GPT-2 weights in llm.c's and Hugging Face's formats: round trips bit for bit, the files' layout
// (llm.c's tensor order, Conv1D's transposed weights, padded vocabularies), and a message naming
// the file and the problem for every kind of bad file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "temp_dir.hpp"
#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/random.hpp"
#include "weights/gpt2_weights.hpp"
#include "weights/hf_gpt2.hpp"
#include "weights/init_from.hpp"
#include "weights/llmc_file.hpp"
#include "weights/safetensors_file.hpp"

namespace st {
namespace {

namespace fs = std::filesystem;

// 2 layers, C 16, 4 heads, 8 positions, 50 tokens padded to 64.
const ModelShape kShape{2, 16, 4, 8, 50, 64};

std::vector<float> random_params(const ModelShape& shape, std::uint64_t seed) {
  const ParamLayout layout = make_layout(shape);
  std::vector<float> p(layout.total());
  NormalStream normal(seed, 0);
  for (auto& x : p) x = static_cast<float>(normal.next());
  // llm.c's and our padding rows are zero.
  const TensorSlot& wte = layout.tensor("wte");
  std::fill(p.begin() + static_cast<std::ptrdiff_t>(wte.offset + shape.vocab_size * shape.d_model),
            p.begin() + static_cast<std::ptrdiff_t>(wte.offset + wte.size), 0.0f);
  return p;
}

std::vector<char> bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The message probe_weights (and read_weights) raise, or "" if the file reads.
std::string read_problem(const std::string& path, const ModelShape& shape = kShape) {
  try {
    const WeightsSource source = probe_weights(path);
    read_weights(source, {shape.n_layer, shape.d_model, shape.n_head, shape.seq_len, shape.vocab_size, source.shape.padded_vocab});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

using Weights = TempDirTest;

// ---- llm.c ----

TEST_F(Weights, LlmcFileHasTheHeaderAndLlmcsTensorOrderAndReadsBackBitForBit) {
  const std::vector<float> params = random_params(kShape, 1);
  write_llmc(path("m.bin"), kShape, params, WeightDtype::fp32);
  const std::vector<char> file = bytes_of(path("m.bin"));
  const ParamLayout layout = make_layout(kShape);
  ASSERT_EQ(file.size(), 1024 + 4 * layout.total());
  std::int32_t header[8];
  std::memcpy(header, file.data(), sizeof header);
  const std::int32_t expected[8] = {20240326, 3, 8, 50, 2, 4, 16, 64};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(header[i], expected[i]) << "header[" << i << "]";
  // After wte and wpe come ln1w of layer 0, then ln1w of layer 1 (llm.c keeps one kind together).
  const std::size_t after_embeddings = 1024 + 4 * (64 * 16 + 8 * 16);
  float first[16], second[16];
  std::memcpy(first, file.data() + after_embeddings, sizeof first);
  std::memcpy(second, file.data() + after_embeddings + sizeof first, sizeof second);
  EXPECT_EQ(0, std::memcmp(first, params.data() + layout.tensor("block0.ln1.w").offset, sizeof first));
  EXPECT_EQ(0, std::memcmp(second, params.data() + layout.tensor("block1.ln1.w").offset, sizeof second));

  const WeightsSource source = probe_weights(path("m.bin"));
  EXPECT_EQ(source.format, WeightsFormat::llmc);
  EXPECT_EQ(source.description, "llm.c model file, version 3 (fp32)");
  EXPECT_EQ(source.shape.padded_vocab, 64);
  const std::vector<float> back = read_weights(source, kShape);
  ASSERT_EQ(back.size(), params.size());
  EXPECT_EQ(0, std::memcmp(back.data(), params.data(), params.size() * sizeof(float)));
}

TEST_F(Weights, LlmcBf16IsVersion5AndWidensExactly) {
  const std::vector<float> params = random_params(kShape, 2);
  write_llmc(path("m16.bin"), kShape, params, WeightDtype::bf16);
  EXPECT_EQ(bytes_of(path("m16.bin")).size(), 1024 + 2 * params.size());
  const WeightsSource source = probe_weights(path("m16.bin"));
  EXPECT_EQ(source.description, "llm.c model file, version 5 (bf16)");
  const std::vector<float> back = read_weights(source, kShape);
  for (std::size_t i = 0; i < params.size(); ++i) ASSERT_EQ(back[i], to_float(to_bf16(params[i]))) << i;
  // What was read writes the same file again.
  write_llmc(path("again.bin"), kShape, back, WeightDtype::bf16);
  EXPECT_EQ(bytes_of(path("again.bin")), bytes_of(path("m16.bin")));
}

TEST_F(Weights, LlmcPaddingRowsMapToTheDecksPadding) {
  const std::vector<float> params = random_params(kShape, 3);
  write_llmc(path("m.bin"), kShape, params, WeightDtype::fp32);
  const WeightsSource source = probe_weights(path("m.bin"));
  const ParamLayout file_layout = make_layout(kShape);
  for (const std::int64_t padded : {50, 128}) {
    ModelShape deck = kShape;
    deck.padded_vocab = padded;
    const ParamLayout layout = make_layout(deck);
    const std::vector<float> back = read_weights(source, deck);
    for (const TensorSlot* t : layout.all_tensors()) {
      const TensorSlot& f = file_layout.tensor(t->name);
      const std::size_t same = t->name == "wte" ? 50 * 16 : t->size;
      EXPECT_EQ(0, std::memcmp(back.data() + t->offset, params.data() + f.offset, same * sizeof(float))) << t->name;
      for (std::size_t i = same; i < t->size; ++i) ASSERT_EQ(back[t->offset + i], 0.0f) << t->name << " row padding";
    }
  }
  EXPECT_EQ(pad_to_for(50257, 50304), 128);
  EXPECT_EQ(pad_to_for(50, 64), 64);
  EXPECT_EQ(pad_to_for(300, 384), 128);
  EXPECT_EQ(pad_to_for(256, 256), 1);
  EXPECT_EQ(pad_to_for(10, 13), 13);
}

TEST_F(Weights, BadLlmcFilesAreNamedWithTheProblem) {
  write_llmc(path("good.bin"), kShape, random_params(kShape, 4), WeightDtype::fp32);
  const std::vector<char> good = bytes_of(path("good.bin"));
  auto variant = [&](const std::string& name, auto change) {
    std::vector<char> b = good;
    change(b);
    write_bytes(path(name), b);
    return read_problem(path(name));
  };
  auto set_int = [](std::vector<char>& b, int index, std::int32_t value) { std::memcpy(b.data() + 4 * index, &value, 4); };
  EXPECT_EQ(read_problem(path("good.bin")), "");

  std::string m = variant("version.bin", [&](auto& b) { set_int(b, 1, 4); });
  EXPECT_NE(m.find(path("version.bin") + ": bad header: llm.c model file version 4"), std::string::npos) << m;
  m = variant("truncated.bin", [](auto& b) { b.resize(b.size() - 10); });
  EXPECT_NE(m.find(path("truncated.bin") + ": truncated"), std::string::npos) << m;
  m = variant("short.bin", [](auto& b) { b.resize(100); });
  EXPECT_NE(m.find(path("short.bin") + ": truncated: an llm.c model file starts with a header of 1024 bytes"),
            std::string::npos) << m;
  m = variant("longer.bin", [](auto& b) { b.resize(b.size() + 8); });
  EXPECT_NE(m.find(path("longer.bin") + ": 8 bytes follow the last tensor"), std::string::npos) << m;
  m = variant("vp.bin", [&](auto& b) { set_int(b, 7, 40); });
  EXPECT_NE(m.find("padded vocabulary Vp = 40 is smaller than the vocabulary V = 50"), std::string::npos) << m;
  m = variant("heads.bin", [&](auto& b) { set_int(b, 5, 3); });
  EXPECT_NE(m.find("C = 16 is not divisible by NH = 3"), std::string::npos) << m;
  m = variant("huge.bin", [&](auto& b) { set_int(b, 4, 100000); });
  EXPECT_NE(m.find(path("huge.bin") + ": bad header: L (header[4]) = 100000 is outside the deck's range for model.n_layer"),
            std::string::npos) << m;
  m = variant("tokens.bin", [&](auto& b) { set_int(b, 0, 20240520); });
  EXPECT_NE(m.find(path("tokens.bin") + ": bad header: this is an llm.c token file"), std::string::npos) << m;
  m = variant("magic.bin", [&](auto& b) { set_int(b, 0, 1234); });
  EXPECT_NE(m.find(path("magic.bin") + ": bad header: neither an llm.c model file"), std::string::npos) << m;
  // Another model: the first differing key, the file's value and the deck's.
  ModelShape deck = kShape;
  deck.n_head = 2;
  deck.seq_len = 4;
  m = read_problem(path("good.bin"), deck);
  EXPECT_NE(m.find(path("good.bin") + ": holds another model: model.n_head = 4 in " + path("good.bin") + ", 2 in the deck"),
            std::string::npos) << m;
  EXPECT_NE(read_problem(path("absent.bin")).find(path("absent.bin") + ": no such file"), std::string::npos);
}

// ---- Hugging Face safetensors ----

// A safetensors file built here from the format's description, independently of the writer.
struct RawTensor {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::vector<char> data;
};
void write_raw_safetensors(const std::string& path, const std::vector<RawTensor>& tensors, const std::string& header_text = "") {
  nlohmann::ordered_json header;
  std::uint64_t at = 0;
  std::vector<char> data;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.data.size()}}};
    at += t.data.size();
    data.insert(data.end(), t.data.begin(), t.data.end());
  }
  const std::string text = header_text.empty() ? header.dump() : header_text;
  const std::uint64_t n = text.size();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(text.data(), static_cast<std::streamsize>(n));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// The tensors of a valid GPT-2 file as written by write_hf_gpt2, read back raw.
std::vector<RawTensor> raw_tensors(const std::string& path) {
  SafetensorsReader reader(path);
  std::vector<RawTensor> out;
  const std::vector<char> file = bytes_of(path);
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  for (const auto& t : reader.tensors())
    out.push_back({t.name, t.dtype, t.shape,
                   std::vector<char>(file.begin() + static_cast<std::ptrdiff_t>(8 + n + t.begin),
                                     file.begin() + static_cast<std::ptrdiff_t>(8 + n + t.end))});
  return out;
}

TEST_F(Weights, SafetensorsHaveTransformersNamesAndConv1dLayoutAndReadBackBitForBit) {
  const std::vector<float> params = random_params(kShape, 5);
  fs::create_directories(path("hf"));
  write_hf_gpt2(path("hf/model.safetensors"), kShape, params, WeightDtype::fp32);
  const ParamLayout layout = make_layout(kShape);
  SafetensorsReader reader(path("hf/model.safetensors"));
  EXPECT_EQ(reader.metadata().at("format"), "pt");
  EXPECT_EQ(reader.tensors().size(), 2u + 12u * 2u + 2u);  // no lm_head: it is tied
  EXPECT_EQ(reader.find("lm_head.weight"), nullptr);
  const SafetensorsTensor* qkv = reader.find("transformer.h.1.attn.c_attn.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->shape, (std::vector<std::int64_t>{16, 48}));
  std::vector<float> stored(qkv->elements());
  reader.read_f32(*qkv, stored.data());
  const float* ours = params.data() + layout.tensor("block1.attn.qkv.w").offset;  // [48, 16]
  for (int i = 0; i < 16; ++i)
    for (int o = 0; o < 48; ++o) ASSERT_EQ(stored[i * 48 + o], ours[o * 16 + i]) << i << "," << o;
  const SafetensorsTensor* wte = reader.find("transformer.wte.weight");
  ASSERT_NE(wte, nullptr);
  EXPECT_EQ(wte->shape, (std::vector<std::int64_t>{50, 16}));  // unpadded
  // Tensors sorted by name, back to back, the data 8-byte aligned.
  for (std::size_t i = 1; i < reader.tensors().size(); ++i)
    EXPECT_LT(reader.tensors()[i - 1].name, reader.tensors()[i].name);
  const std::vector<char> file = bytes_of(path("hf/model.safetensors"));
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, file.data(), 8);
  EXPECT_EQ(header_bytes % 8, 0u);
  EXPECT_EQ(file[8], '{');

  const nlohmann::json config = nlohmann::json::parse(bytes_of(path("hf/config.json")));
  EXPECT_EQ(config["n_head"], 4);
  EXPECT_EQ(config["n_positions"], 8);
  EXPECT_EQ(config["architectures"][0], "GPT2LMHeadModel");

  // A directory names its model.safetensors; the shape comes from config.json.
  const WeightsSource source = probe_weights(path("hf"));
  EXPECT_EQ(source.format, WeightsFormat::safetensors);
  EXPECT_EQ(source.shape.n_head, 4);
  EXPECT_EQ(source.shape.padded_vocab, 50);
  const std::vector<float> back = read_weights(source, kShape);  // into the deck's padding of 64
  EXPECT_EQ(0, std::memcmp(back.data(), params.data(), params.size() * sizeof(float)));
  write_hf_gpt2(path("again.safetensors"), kShape, back, WeightDtype::fp32);
  EXPECT_EQ(bytes_of(path("again.safetensors")), file);
}

TEST_F(Weights, SafetensorsReadBf16F16AndNamesWithoutPrefixIgnoringMaskBuffers) {
  const std::vector<float> params = random_params(kShape, 6);
  fs::create_directories(path("a"));
  write_hf_gpt2(path("a/model.safetensors"), kShape, params, WeightDtype::bf16);
  const std::vector<float> bf16 = read_weights(probe_weights(path("a/model.safetensors")), kShape);
  for (std::size_t i = 0; i < params.size(); ++i) ASSERT_EQ(bf16[i], to_float(to_bf16(params[i]))) << i;

  // GPT2Model's names (no "transformer."), F16 values, and the attention-mask buffers old files carry.
  std::vector<RawTensor> tensors = raw_tensors(path("a/model.safetensors"));
  for (auto& t : tensors) {
    t.name = t.name.substr(std::string("transformer.").size());
    std::vector<char> half(t.data.size());
    for (std::size_t i = 0; i < t.data.size() / 2; ++i) {
      std::uint16_t b;
      std::memcpy(&b, t.data.data() + 2 * i, 2);
      // bf16 -> f16 for values that f16 holds exactly: small integers times powers of two.
      const float x = std::round(to_float(Bf16{b}) * 64.0f) / 64.0f;
      const float clipped = std::max(-8.0f, std::min(8.0f, x));
      // f16: sign, 5-bit exponent, 10-bit mantissa; built from the float's bits (normal range).
      std::uint32_t u;
      std::memcpy(&u, &clipped, 4);
      std::uint16_t h = 0;
      if (clipped != 0.0f)
        h = static_cast<std::uint16_t>(((u >> 16) & 0x8000u) | ((((u >> 23) & 0xFFu) - 112u) << 10) | ((u >> 13) & 0x3FFu));
      std::memcpy(half.data() + 2 * i, &h, 2);
    }
    t.dtype = "F16";
    t.data = half;
  }
  tensors.push_back({"h.0.attn.bias", "F32", {1, 1, 8, 8}, std::vector<char>(4 * 64, 0)});
  tensors.push_back({"h.1.attn.masked_bias", "F32", {}, std::vector<char>(4, 0)});
  fs::create_directories(path("b"));
  write_raw_safetensors(path("b/model.safetensors"), tensors);
  fs::copy_file(path("a/config.json"), path("b/config.json"));
  const std::vector<float> f16 = read_weights(probe_weights(path("b/model.safetensors")), kShape);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const float x = std::max(-8.0f, std::min(8.0f, std::round(bf16[i] * 64.0f) / 64.0f));
    ASSERT_EQ(f16[i], x) << i;
  }
}

TEST_F(Weights, BadSafetensorsFilesAreNamedWithTheProblem) {
  fs::create_directories(path("ok"));
  write_hf_gpt2(path("ok/model.safetensors"), kShape, random_params(kShape, 7), WeightDtype::fp32);
  const std::vector<RawTensor> good = raw_tensors(path("ok/model.safetensors"));
  int case_number = 0;
  // Writes a variant (with config.json beside it) and returns the message reading it raises.
  auto variant = [&](std::vector<RawTensor> tensors, const std::string& header_text = "",
                     const std::string& config = "") {
    const std::string dir = path("case" + std::to_string(++case_number));
    fs::create_directories(dir);
    write_raw_safetensors(dir + "/model.safetensors", tensors, header_text);
    if (config.empty()) fs::copy_file(path("ok/config.json"), dir + "/config.json");
    else std::ofstream(dir + "/config.json") << config;
    return std::pair(dir + "/model.safetensors", read_problem(dir + "/model.safetensors"));
  };
  EXPECT_EQ(variant(good).second, "");

  auto missing = good;
  missing.erase(std::find_if(missing.begin(), missing.end(), [](auto& t) { return t.name == "transformer.h.1.mlp.c_fc.bias"; }));
  auto [file, m] = variant(missing);
  EXPECT_NE(m.find(file + ": missing tensor transformer.h.1.mlp.c_fc.bias"), std::string::npos) << m;

  auto misshapen = good;
  for (auto& t : misshapen)
    if (t.name == "transformer.h.0.attn.c_proj.weight") t.shape = {4, 64};
  std::tie(file, m) = variant(misshapen);
  EXPECT_NE(m.find(file + ": tensor transformer.h.0.attn.c_proj.weight has shape [4, 64], config.json's model (Conv1D, "
                          "[in, out]) needs [16, 16]"),
            std::string::npos) << m;

  auto extra = good;
  extra.push_back({"transformer.h.2.ln_1.weight", "F32", {16}, std::vector<char>(64, 0)});
  std::tie(file, m) = variant(extra);
  EXPECT_NE(m.find(file + ": unexpected tensor transformer.h.2.ln_1.weight"), std::string::npos) << m;

  auto integers = good;
  for (auto& t : integers)
    if (t.name == "transformer.ln_f.bias") t.dtype = "I32";
  std::tie(file, m) = variant(integers);
  EXPECT_NE(m.find(file + ": tensor 'transformer.ln_f.bias' has dtype I32, which shardtrain does not read"),
            std::string::npos) << m;

  auto untied = good;
  auto head = *std::find_if(good.begin(), good.end(), [](auto& t) { return t.name == "transformer.wte.weight"; });
  head.name = "lm_head.weight";
  head.data[0] ^= 1;
  untied.push_back(head);
  std::tie(file, m) = variant(untied);
  EXPECT_NE(m.find(file + ": tensor lm_head.weight differs from transformer.wte.weight"), std::string::npos) << m;
  head.data[0] ^= 1;  // the tied head, stored: accepted
  untied.back() = head;
  EXPECT_EQ(variant(untied).second, "");

  std::tie(file, m) = variant(good, "{\"transformer.wte.weight\": {\"dtype\": \"F32\", ");
  EXPECT_NE(m.find(file + ": bad header: the JSON header does not parse"), std::string::npos) << m;
  std::tie(file, m) = variant(good, "[1, 2]");
  EXPECT_NE(m.find(file + ": bad header: the JSON header is not an object"), std::string::npos) << m;

  auto lying = good;  // a shape whose bytes are not those its offsets span
  for (auto& t : lying)
    if (t.name == "transformer.wte.weight") t.shape = {51, 16};
  std::tie(file, m) = variant(lying);
  EXPECT_NE(m.find(file + ": bad header: tensor 'transformer.wte.weight': data_offsets span 3200 bytes, its shape and "
                          "dtype F32 need 3264"),
            std::string::npos) << m;

  // Truncated: the last tensor's bytes cut short.
  std::tie(file, m) = variant(good);
  std::vector<char> bytes = bytes_of(file);
  bytes.resize(bytes.size() - 6);
  write_bytes(file, bytes);
  m = read_problem(file);
  EXPECT_NE(m.find(file + ": truncated: tensor '" + good.back().name + "' needs data bytes"), std::string::npos) << m;
  bytes.resize(20);
  write_bytes(file, bytes);
  m = read_problem(file);
  EXPECT_NE(m.find(file + ": truncated: the JSON header is"), std::string::npos) << m;

  std::tie(file, m) = variant(good, "", "{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 16, \"n_positions\": 8, "
                                        "\"vocab_size\": 50, \"activation_function\": \"relu\"}");
  EXPECT_NE(m.find("config.json: \"activation_function\" is \"relu\"; shardtrain's GPT-2 needs the tanh GELU"),
            std::string::npos) << m;
  std::tie(file, m) = variant(good, "", "{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 16, \"n_positions\": 8, "
                                        "\"vocab_size\": 50, \"tie_word_embeddings\": \"yes\"}");
  EXPECT_NE(m.find("config.json: [json.exception.type_error"), std::string::npos) << m;
  std::tie(file, m) = variant(good, "", "{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 16, \"vocab_size\": 50}");
  EXPECT_NE(m.find("config.json: has neither \"n_positions\" nor \"n_ctx\""), std::string::npos) << m;
  std::tie(file, m) = variant(good, "", "{\"n_layer\": 3, \"n_head\": 4, \"n_embd\": 16, \"n_positions\": 8, \"vocab_size\": 50}");
  EXPECT_NE(m.find(file + ": missing tensor transformer.h.2.ln_1.weight"), std::string::npos) << m;

  fs::remove(path("ok/config.json"));
  m = read_problem(path("ok/model.safetensors"));
  EXPECT_NE(m.find(path("ok/config.json") + ": missing"), std::string::npos) << m;
}

}  // namespace
}  // namespace st
