#include "tokenizer/pipeline.hpp"

namespace st {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

const char* step_name(const NormalizerStep& s) {
  switch (s.kind) {
    case NormalizerStep::Kind::nfc: return "NFC";
    case NormalizerStep::Kind::prepend: return "Prepend";
    case NormalizerStep::Kind::replace: return "Replace";
  }
  return "?";
}

std::string step_name(const PreTokenizerStep& s) {
  switch (s.kind) {
    case PreTokenizerStep::Kind::split:
      if (!s.literal && s.pattern == kGpt2Pattern) return "Split(gpt2)";
      if (!s.literal && s.pattern == kCl100kPattern) return "Split(cl100k)";
      if (!s.literal && s.pattern == kQwen2Pattern) return "Split(qwen2)";
      return "Split";
    case PreTokenizerStep::Kind::digits: return "Digits";
    case PreTokenizerStep::Kind::byte_level: return "ByteLevel";
    case PreTokenizerStep::Kind::metaspace: return "Metaspace";
  }
  return "?";
}

// A step that always ends a piece after "\n" between printable ASCII characters: GPT-2's pattern
// ends every run at white space and takes a lone "\n" as a piece of its own; cl100k's and Qwen2's
// end a letter, number or white-space run there and let punctuation take the line breaks after it.
bool ends_pieces_at_line_breaks(const PreTokenizerStep& s) {
  if (s.kind == PreTokenizerStep::Kind::byte_level) return s.use_regex;
  return s.kind == PreTokenizerStep::Kind::split && !s.literal && !s.invert && s.behavior == SplitBehavior::isolated &&
         (s.pattern == kGpt2Pattern || s.pattern == kCl100kPattern || s.pattern == kQwen2Pattern);
}

}  // namespace

std::string TextPipeline::summary() const {
  std::string out;
  if (!normalizer.empty()) {
    out = "normalizer ";
    for (std::size_t k = 0; k < normalizer.size(); ++k) {
      if (k) out += '+';
      out += step_name(normalizer[k]);
    }
    out += ", ";
  }
  if (pre_tokenizer.empty()) return out + "no pre-tokenizer";
  out += "pre-tokenizer ";
  for (std::size_t k = 0; k < pre_tokenizer.size(); ++k) {
    if (k) out += '+';
    out += step_name(pre_tokenizer[k]);
  }
  return out;
}

bool TextPipeline::cuts_streams_at_line_breaks() const {
  for (const NormalizerStep& n : normalizer)
    if (n.kind != NormalizerStep::Kind::nfc) return false;
  bool cut = false;
  for (const PreTokenizerStep& s : pre_tokenizer) {
    if (s.kind == PreTokenizerStep::Kind::metaspace && s.prepend == PrependScheme::first) return false;
    // Before the step that cuts, the text's start is not a piece start: a prefix there would be
    // put before each rank's share.
    const bool prefix = (s.kind == PreTokenizerStep::Kind::byte_level && s.add_prefix_space) ||
                        (s.kind == PreTokenizerStep::Kind::metaspace && s.prepend != PrependScheme::never);
    if (!cut && prefix) return false;
    cut = cut || ends_pieces_at_line_breaks(s);
  }
  return cut;
}

}  // namespace st
