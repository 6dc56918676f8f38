#pragma once
// Text <-> token ids, behind one interface: training reads text through it, samples and prompts
// are encoded and decoded through it, and so will any command that generates text.
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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
  // The bytes of the tokens; decode(encode(x)) == x for every byte string x. Throws Error on an
  // id outside the vocabulary.
  virtual std::string decode(std::span<const int> tokens) const = 0;
  // The token a document starts from, so an empty prompt has something to continue: a newline
  // for bytes, <|endoftext|> for GPT-2 (as GPT-2 and llm.c begin each document with it), the
  // file's beginning-of-text token where it has one (Llama 3's <|begin_of_text|>), else its
  // end-of-text token.
  virtual int document_start() const = 0;

  std::vector<int> encode(std::string_view text) {
    std::vector<int> out;
    encode(text, out);
    return out;
  }
};

// data.tokenizer: "byte" (each byte is a token, vocabulary 256), "gpt2" (byte-level BPE from
// `files`: [vocab.json, merges.txt] or [encoder.json, vocab.bpe] or one directory holding
// either pair), "hf" ([tokenizer.json] or its directory) or "tiktoken" ([a rank file]).
// `pattern` (data.tokenizer_pattern): "auto" (the file's), "gpt2" or "cl100k", for hf and
// tiktoken only. Throws Error naming the file and the problem.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& kind, const std::vector<std::string>& files,
                                          const std::string& pattern = "auto");

}  // namespace st
