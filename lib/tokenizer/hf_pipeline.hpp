#pragma once
// tokenizer.json's normalizer, pre_tokenizer and decoder read into a TextPipeline. What is not
// supported is refused with an Error naming the file, the key, what it has and what is allowed.
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/pipeline.hpp"

namespace st {

// The normalizer and pre-tokenizer of `file` (a parsed tokenizer.json read from `path`).
TextPipeline read_hf_text_steps(const nlohmann::json& file, const std::string& path);

// Whether the pre-tokenizer makes bytes of the text (a ByteLevel step): the vocabulary then
// spells bytes in GPT-2's alphabet; otherwise it spells text, with byte-fallback tokens.
bool is_byte_level(const TextPipeline& pipeline);

// The decoder's steps, for a byte-level vocabulary (ByteLevel or null: tokens are bytes) or one of
// text (Replace, ByteFallback, Fuse, Strip, Metaspace and a Sequence of them; null joins tokens
// with spaces).
std::vector<DecoderStep> read_hf_decoder(const nlohmann::json& file, const std::string& path, bool byte_level);

}  // namespace st
