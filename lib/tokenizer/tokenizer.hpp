#pragma once
// Text <-> token ids, behind one interface: training reads text through it, samples and prompts
// are encoded and decoded through it, and so will any command that generates text.
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/choices.hpp"

namespace st {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "byte", or "gpt2 (50257 tokens from <vocab> and <merges>)": for the settings table.
  virtual std::string description() const = 0;
  // Token ids lie in [0, vocab_size()).
  virtual int vocab_size() const = 0;
  // Appends the ids of `text`. Text is taken as ordinary text: no special token is recognised in
  // it. Any bytes are accepted, valid UTF-8 or not. Not thread-safe (an encoder may cache).
  virtual void encode(std::string_view text, std::vector<int>& out) = 0;
  // The text of the tokens. For bytes and byte-level BPE without a normalizer, decode(encode(x))
  // == x for every byte string x; a tokenizer.json with a normalizer or byte fallback decodes as
  // Hugging Face's tokenizers does (NFC text stays composed, Llama 2's "▁" in a text comes back a
  // space). Throws Error on an id outside the vocabulary.
  virtual std::string decode(std::span<const int> tokens) const = 0;
  // The token a document starts from, so an empty prompt has something to continue: a newline
  // for bytes, <|endoftext|> for GPT-2 (as GPT-2 and llm.c begin each document with it), the
  // file's beginning-of-text token where it has one (Llama 3's <|begin_of_text|>), else its
  // end-of-text token.
  virtual int document_start() const = 0;
  // Whether a text cut after a line break with a printable ASCII character on each side ("x\ny")
  // encodes as its two parts do, joined: then ranks may encode shares of one stream. False for a
  // tokenizer that puts something before the text ("▁") or whose pieces may reach across such a
  // line break: a stream is then encoded whole, by one rank.
  virtual bool cuts_streams_at_line_breaks() const { return true; }

  std::vector<int> encode(std::string_view text) {
    std::vector<int> out;
    encode(text, out);
    return out;
  }
};

// data.tokenizer: byte (each byte is a token, vocabulary 256), gpt2 (byte-level BPE from
// `files`: [vocab.json, merges.txt] or [encoder.json, vocab.bpe] or one directory holding
// either pair), hf ([tokenizer.json] or its directory) or tiktoken ([a rank file]).
// `pattern` (data.tokenizer_pattern): automatic (the file's), gpt2 or cl100k, for hf and
// tiktoken only. Throws Error naming the file and the problem.
std::unique_ptr<Tokenizer> make_tokenizer(TokenizerKind kind, const std::vector<std::string>& files,
                                          TokenizerPattern pattern = TokenizerPattern::automatic);

}  // namespace st
