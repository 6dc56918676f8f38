#pragma once
// llm.c's model file (gpt2_124M.bin, gpt2_124M_bf16.bin): a header of 256 int32 (magic
// 20240326, version, maxT, V, L, NH, C, Vp, then zeros), then every parameter, all in fp32
// (version 3) or all in bf16 (version 5), tensor by tensor in llm.c's order: wte (Vp x C, the rows
// past V zero), wpe, then each kind of block tensor for all layers together (ln1w, ln1b, qkvw,
// qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb), then lnfw, lnfb. Matrices are
// [out, in], as in this project's layout, so each llm.c tensor of one layer is one of our tensors.
#include <cstdint>
#include <span>
#include <string>

#include "model/layout.hpp"
#include "weights/file_io.hpp"
#include "weights/weight_dtype.hpp"

namespace st {

inline constexpr std::int32_t kLlmcModelMagic = 20240326;
inline constexpr std::int32_t kLlmcTokenMagic = 20240520;  // a token file, named in the message
inline constexpr std::int32_t kLlmcVersionFp32 = 3;
inline constexpr std::int32_t kLlmcVersionBf16 = 5;
inline constexpr std::uint64_t kLlmcHeaderBytes = 256 * sizeof(std::int32_t);

struct LlmcHeader {
  std::int32_t version = 0;
  ModelShape shape;  // seq_len = maxT, vocab_size = V, padded_vocab = Vp
  WeightDtype dtype() const { return version == kLlmcVersionBf16 ? WeightDtype::bf16 : WeightDtype::fp32; }
};

// True if the file starts with the magic of llm.c's model files (or of its token files, which
// read_llmc_header then names).
bool is_llmc_file(const InputFile& file);
// Reads and checks the header and the file's size against it; throws Error naming the file and
// the problem (magic, version, a field, truncated, trailing bytes).
LlmcHeader read_llmc_header(const InputFile& file);
// Fills `params`, laid out by make_layout(shape), from the file. The shape must agree with
// the header except for the padded vocabulary: the first V rows of wte are taken, the rows of
// ours past V are zero. bf16 values are widened exactly.
void read_llmc_params(const InputFile& file, const LlmcHeader& header, const ModelShape& shape, std::span<float> params);
// Writes the parameters (laid out for `shape`) as a version 3 (fp32) or 5 (bf16, rounded to
// nearest even) file with Vp = shape.padded_vocab, the padded rows written as zeros.
void write_llmc(const std::string& path, const ModelShape& shape, std::span<const float> params, WeightDtype dtype);

}  // namespace st
