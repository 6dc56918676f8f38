#pragma once
// Carries out a TextPipeline (pipeline.hpp) as Hugging Face's Rust tokenizers does: the normalizer
// on the whole text, then each pre-tokenizer step on every piece the steps before it made (a step
// never joins pieces), and the decoder's steps on token strings.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pipeline.hpp"

namespace st {

// The normalizer's text. NFC leaves bytes that are not UTF-8 as they are (only the UTF-8 runs
// between them are normalized); Replace and Prepend work on bytes.
std::string normalize_text(const std::vector<NormalizerStep>& steps, std::string_view text);

// The text of token strings through the decoder's steps, joined (tokenizers' decode_chain, then
// concatenation). `steps` must not hold byte_level (byte-level tokens are bytes, decoded as such).
std::string decode_token_strings(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens);

class PieceSplitter {
 public:
  // Compiles the steps' regexes (ICU for patterns other than GPT-2's and cl100k's, which are
  // matched by hand). Throws Error naming `file` and the step's key when a regex does not compile.
  PieceSplitter(const TextPipeline& pipeline, const std::string& file);
  ~PieceSplitter();
  PieceSplitter(const PieceSplitter&) = delete;
  PieceSplitter& operator=(const PieceSplitter&) = delete;

  // Calls on_piece for each piece of `text` (normalized first), in order; empty pieces are
  // dropped. A piece is valid only during its call. Not thread-safe (matchers are reused).
  void split(std::string_view text, const std::function<void(std::string_view)>& on_piece);

  struct Step;  // one pre-tokenizer step and its matcher

 private:
  void run(std::size_t step, std::string_view piece, bool at_text_start,
           const std::function<void(std::string_view)>& on_piece);

  std::vector<NormalizerStep> normalizer_;
  std::vector<std::unique_ptr<Step>> steps_;
  std::string normalized_;
};

}  // namespace st
