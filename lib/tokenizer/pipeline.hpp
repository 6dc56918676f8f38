#pragma once
// What a Hugging Face tokenizer.json does around its BPE model, as read from the file: the
// normalizer (text -> text), the pre-tokenizer (text -> pieces; BPE runs on each piece alone)
// and the decoder (token strings -> text). Only the steps today's BPE models use are here (the
// reader refuses others, naming them): Hugging Face's Rust `tokenizers` is the reference for
// what each one does, and the comments below say where its behaviour is subtle.
//
// This header is the description only (no ICU): pipeline_run.hpp carries it out.
#include <string>
#include <vector>

namespace st {

// The patterns this project matches by hand (pretokenize.hpp, pretokenize_cl100k.hpp), as
// tokenizer.json's Split.pattern.Regex spells them (JSON-decoded). Any other regex goes to ICU.
extern const char* const kGpt2Pattern;
extern const char* const kCl100kPattern;
// Qwen2's: cl100k's with a number run of any length (\p{N} for \p{N}{1,3}). Matched by ICU; listed
// because, like the two above, it always ends a piece at a line break between printable ASCII
// characters (see TextPipeline::cuts_streams_at_line_breaks).
extern const char* const kQwen2Pattern;

// What happens to the pieces a Split's pattern finds (tokenizers' SplitDelimiterBehavior): each
// match alone (isolated), dropped (removed), joined to the piece before (merged_with_previous) or
// after it (merged_with_next), or runs of matches joined (contiguous).
enum class SplitBehavior { isolated, removed, merged_with_previous, merged_with_next, contiguous };

// When Metaspace puts its replacement character before a piece that does not start with it:
// always, only before the piece at the start of the text (first), or never.
enum class PrependScheme { always, first, never };

struct NormalizerStep {
  enum class Kind { nfc, prepend, replace } kind;
  std::string text;     // prepend: what is put before the text (when it is not empty);
                        // replace: the string replaced (tokenizer.json's pattern.String)
  std::string content;  // replace: what replaces it
};

struct PreTokenizerStep {
  enum class Kind { split, digits, byte_level, metaspace } kind;
  std::string key;  // where it is in the file ("pre_tokenizer.pretokenizers[1]"), for messages
  // split: the pattern, a regex (Oniguruma syntax, as tokenizers compiles it) or a literal string
  std::string pattern;
  bool literal = false;
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;  // the pattern finds the pieces between delimiters instead of delimiters
  // digits: each number character alone, or runs of them (tokenizers' char::is_numeric: \p{N})
  bool individual_digits = false;
  // byte_level: a space before a piece that does not start with one; GPT-2's pattern
  bool add_prefix_space = false;
  bool use_regex = true;
  // metaspace: spaces become `replacement` (U+2581 "▁"), which is put before pieces per `prepend`;
  // with `split`, pieces are cut before each replacement character
  std::string replacement = "\xE2\x96\x81";
  PrependScheme prepend = PrependScheme::always;
  bool split = true;
};

struct DecoderStep {
  // byte_level: tokens are bytes in GPT-2's byte alphabet (the one decoder of byte-level models).
  // The others work on token strings, in order, as tokenizers' decode_chain does: replace (each
  // `text` in a token becomes `content`), byte_fallback (runs of <0xAB> tokens become their bytes,
  // U+FFFD for each byte when they are not UTF-8), fuse (all tokens become one), strip (up to
  // `start` characters `text` from each token's start and `stop` from its end), metaspace (the
  // replacement `text` becomes a space; in the first token it is dropped unless `prepend` is never).
  enum class Kind { byte_level, replace, byte_fallback, fuse, strip, metaspace } kind;
  std::string text;
  std::string content;
  std::size_t start = 0, stop = 0;
  PrependScheme prepend = PrependScheme::always;
};

struct TextPipeline {
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;  // a Sequence flattened: each step cuts every piece
  std::vector<DecoderStep> decoder;             // empty: token strings joined by spaces (no decoder)

  // "normalizer NFC, pre-tokenizer Sequence[Digits, ByteLevel]": for descriptions.
  std::string summary() const;

  // Whether encoding a text in two parts cut after a line break that has a printable ASCII
  // character on each side ("x\ny") gives the tokens of the whole, so ranks can encode shares of
  // a stream: a step must end a piece there (GPT-2's, cl100k's or Qwen2's pattern, isolated),
  // nothing before it may put a prefix before the text (ByteLevel's add_prefix_space, Metaspace),
  // no step may prepend at the start of the text only (Metaspace's "first", the Prepend
  // normalizer), and the normalizer must be none or NFC (which composes nothing across a line break).
  bool cuts_streams_at_line_breaks() const;
};

}  // namespace st
