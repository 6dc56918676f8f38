#include "weights/llmc_file.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "weights/shape_limits.hpp"

namespace st {
namespace {

// Our tensors in the order llm.c stores them: all layers of one kind of block tensor together.
std::vector<const TensorSlot*> llmc_order(const ParamLayout& layout, std::int64_t n_layer) {
  static const char* const kBlockKinds[] = {"ln1.w",       "ln1.b",       "attn.qkv.w", "attn.qkv.b",
                                            "attn.proj.w", "attn.proj.b", "ln2.w",      "ln2.b",
                                            "mlp.fc.w",    "mlp.fc.b",    "mlp.proj.w", "mlp.proj.b"};
  std::vector<const TensorSlot*> order{&layout.tensor("wte"), &layout.tensor("wpe")};
  for (const char* kind : kBlockKinds)
    for (std::int64_t l = 0; l < n_layer; ++l) order.push_back(&layout.tensor("block" + std::to_string(l) + "." + kind));
  order.push_back(&layout.tensor("lnf.w"));
  order.push_back(&layout.tensor("lnf.b"));
  return order;
}

std::uint64_t element_bytes(WeightDtype dtype) { return dtype == WeightDtype::bf16 ? 2 : 4; }

// Elements the file holds: the layout's, with the token table at the file's padded vocabulary.
std::uint64_t file_elements(const ModelShape& shape) { return make_layout(shape).total(); }

std::string llmc_name(const TensorSlot& t) { return "the tensor " + t.name; }

// Reads `count` elements at `offset` into `into`, widening bf16.
void read_values(const InputFile& file, std::uint64_t offset, std::size_t count, WeightDtype dtype, float* into,
                 std::vector<Bf16>& scratch, const std::string& what) {
  if (dtype == WeightDtype::fp32) {
    file.read(offset, into, count * sizeof(float), what);
    return;
  }
  // Through a bounded buffer: a 124M model's token table alone is 77 MB in bf16.
  constexpr std::size_t kBlock = std::size_t{1} << 22;
  for (std::size_t done = 0; done < count; done += kBlock) {
    const std::size_t n = std::min(kBlock, count - done);
    scratch.resize(n);
    file.read(offset + done * 2, scratch.data(), n * 2, what);
    for (std::size_t i = 0; i < n; ++i) into[done + i] = to_float(scratch[i]);
  }
}

}  // namespace

bool is_llmc_file(const InputFile& file) {
  if (file.size() < sizeof(std::int32_t)) return false;
  std::int32_t magic = 0;
  file.read(0, &magic, sizeof magic, "the magic number");
  return magic == kLlmcModelMagic || magic == kLlmcTokenMagic;
}

LlmcHeader read_llmc_header(const InputFile& file) {
  const std::string& path = file.path();
  std::array<std::int32_t, 256> h{};
  if (file.size() < kLlmcHeaderBytes)
    throw Error(path + ": truncated: an llm.c model file starts with a header of " + std::to_string(kLlmcHeaderBytes) +
                " bytes, the file has " + std::to_string(file.size()));
  file.read(0, h.data(), kLlmcHeaderBytes, "the header");
  if (h[0] == kLlmcTokenMagic)
    throw Error(path + ": bad header: this is an llm.c token file (magic " + std::to_string(kLlmcTokenMagic) +
                "), not a model file (magic " + std::to_string(kLlmcModelMagic) + ")");
  if (h[0] != kLlmcModelMagic)
    throw Error(path + ": bad header: magic number " + std::to_string(h[0]) + ", an llm.c model file has " +
                std::to_string(kLlmcModelMagic));
  LlmcHeader header;
  header.version = h[1];
  if (header.version != kLlmcVersionFp32 && header.version != kLlmcVersionBf16)
    throw Error(path + ": bad header: llm.c model file version " + std::to_string(header.version) +
                "; shardtrain reads versions 3 (fp32) and 5 (bf16), with the padded vocabulary (llm.c's "
                "train_gpt2.py writes them)");
  const char* const names[] = {"maxT (header[2])", "V (header[3])", "L (header[4])", "NH (header[5])",
                               "C (header[6])", "Vp (header[7])"};
  for (int i = 2; i <= 7; ++i)
    if (h[i] <= 0) throw Error(path + ": bad header: " + names[i - 2] + " = " + std::to_string(h[i]) + ", must be positive");
  ModelShape& s = header.shape;
  s.seq_len = h[2];
  s.vocab_size = h[3];
  s.n_layer = h[4];
  s.n_head = h[5];
  s.d_model = h[6];
  s.padded_vocab = h[7];
  if (const std::string why = shape_outside_deck_limits(s, {names[2], names[4], names[3], names[0], names[1]}); !why.empty())
    throw Error(path + ": bad header: " + why);
  // The padded vocabulary is not a deck key: it may exceed the vocabulary by a few padding rows.
  if (s.padded_vocab > 2 * s.vocab_size + 65536)
    throw Error(path + ": bad header: padded vocabulary Vp = " + std::to_string(s.padded_vocab) +
                " is far larger than the vocabulary V = " + std::to_string(s.vocab_size));
  if (s.padded_vocab < s.vocab_size)
    throw Error(path + ": bad header: padded vocabulary Vp = " + std::to_string(s.padded_vocab) +
                " is smaller than the vocabulary V = " + std::to_string(s.vocab_size));
  if (s.d_model % s.n_head != 0)
    throw Error(path + ": bad header: C = " + std::to_string(s.d_model) + " is not divisible by NH = " +
                std::to_string(s.n_head));
  const std::uint64_t expected = kLlmcHeaderBytes + file_elements(s) * element_bytes(header.dtype());
  if (file.size() < expected)
    throw Error(path + ": truncated: the header's model (L " + std::to_string(s.n_layer) + ", C " +
                std::to_string(s.d_model) + ", Vp " + std::to_string(s.padded_vocab) + ", maxT " +
                std::to_string(s.seq_len) + ", " + (header.dtype() == WeightDtype::bf16 ? "bf16" : "fp32") +
                ") needs " + std::to_string(expected) + " bytes, the file has " + std::to_string(file.size()));
  if (file.size() > expected)
    throw Error(path + ": " + std::to_string(file.size() - expected) +
                " bytes follow the last tensor: the file is larger than its header's model (" +
                std::to_string(expected) + " bytes)");
  return header;
}

void read_llmc_params(const InputFile& file, const LlmcHeader& header, const ModelShape& shape, std::span<float> params) {
  const ModelShape& f = header.shape;
  ST_REQUIRE(f.n_layer == shape.n_layer && f.d_model == shape.d_model && f.n_head == shape.n_head &&
                 f.seq_len == shape.seq_len && f.vocab_size == shape.vocab_size,
             "read_llmc_params: the shapes were not checked");
  const ParamLayout ours = make_layout(shape);
  const ParamLayout theirs = make_layout(f);
  ST_REQUIRE(params.size() == ours.total(), "parameter buffer does not match the layout");
  const WeightDtype dtype = header.dtype();
  const std::uint64_t bytes = element_bytes(dtype);
  std::vector<Bf16> scratch;
  std::uint64_t offset = kLlmcHeaderBytes;
  const auto file_order = llmc_order(theirs, f.n_layer);
  const auto our_order = llmc_order(ours, shape.n_layer);
  for (std::size_t i = 0; i < file_order.size(); ++i) {
    const TensorSlot& in_file = *file_order[i];
    const TensorSlot& mine = *our_order[i];
    float* into = params.data() + mine.offset;
    if (mine.name == "wte") {
      // The first V rows; the file's padding rows are skipped, ours are zero.
      const std::size_t rows = static_cast<std::size_t>(shape.vocab_size * shape.d_model);
      read_values(file, offset, rows, dtype, into, scratch, llmc_name(in_file));
      std::fill(into + rows, into + mine.size, 0.0f);
    } else {
      read_values(file, offset, mine.size, dtype, into, scratch, llmc_name(in_file));
    }
    offset += in_file.size * bytes;
  }
}

void write_llmc(const std::string& path, const ModelShape& shape, std::span<const float> params, WeightDtype dtype) {
  const ParamLayout layout = make_layout(shape);
  ST_REQUIRE(params.size() == layout.total(), "parameter buffer does not match the layout");
  std::array<std::int32_t, 256> h{};
  h[0] = kLlmcModelMagic;
  h[1] = dtype == WeightDtype::bf16 ? kLlmcVersionBf16 : kLlmcVersionFp32;
  h[2] = static_cast<std::int32_t>(shape.seq_len);
  h[3] = static_cast<std::int32_t>(shape.vocab_size);
  h[4] = static_cast<std::int32_t>(shape.n_layer);
  h[5] = static_cast<std::int32_t>(shape.n_head);
  h[6] = static_cast<std::int32_t>(shape.d_model);
  h[7] = static_cast<std::int32_t>(shape.padded_vocab);
  OutputFile out(path);
  out.write(h.data(), kLlmcHeaderBytes);
  std::vector<Bf16> narrow;
  auto put = [&](const float* values, std::size_t count) {
    if (dtype == WeightDtype::fp32) return out.write(values, count * sizeof(float));
    constexpr std::size_t kBlock = std::size_t{1} << 22;
    for (std::size_t done = 0; done < count; done += kBlock) {
      const std::size_t n = std::min(kBlock, count - done);
      narrow.resize(n);
      for (std::size_t i = 0; i < n; ++i) narrow[i] = to_bf16(values[done + i]);
      out.write(narrow.data(), n * sizeof(Bf16));
    }
  };
  for (const TensorSlot* t : llmc_order(layout, shape.n_layer)) {
    if (t->name == "wte") {
      // llm.c's padding rows are zeros; ours are never trained, written as llm.c writes them.
      const std::size_t rows = static_cast<std::size_t>(shape.vocab_size * shape.d_model);
      put(params.data() + t->offset, rows);
      const std::vector<float> padding(t->size - rows, 0.0f);
      put(padding.data(), padding.size());
    } else {
      put(params.data() + t->offset, t->size);
    }
  }
  out.commit();
}

}  // namespace st
