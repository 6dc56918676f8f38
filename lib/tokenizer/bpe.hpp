#pragma once
// BPE: the pre-tokenizer cuts text into pieces, each piece starts as its bytes' one-byte tokens
// (byte-level BPE: GPT-2) or its characters' tokens (with byte fallback: Llama 2), and the
// adjacent pair with the lowest-ranked merge is merged (the leftmost of equals) until no pair has
// one. Pieces repeat a lot in text, so each distinct piece is merged once and its tokens kept in
// a cache.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe_vocab.hpp"
#include "tokenizer/pipeline_run.hpp"
#include "tokenizer/pretokenize.hpp"
#include "tokenizer/pretokenize_cl100k.hpp"
#include "tokenizer/tokenizer.hpp"

namespace st {

// How one piece is merged: `scan` looks for the lowest pair each round (fast for the short
// pieces of ordinary text), `heap` keeps the pairs in a priority queue (n log n for long pieces,
// a run of thousands of letters, say). Both give the same tokens; bpe_merge picks by length.
enum class MergeAlgorithm { scan, heap };
void bpe_merge(const BpeVocabulary& vocab, std::string_view piece, std::vector<int>& out, MergeAlgorithm algorithm);
void bpe_merge(const BpeVocabulary& vocab, std::string_view piece, std::vector<int>& out);

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeVocabulary vocab, std::string name = "gpt2");
  ~BpeTokenizer() override;
  std::string description() const override;
  int vocab_size() const override { return vocab_.size(); }
  void encode(std::string_view text, std::vector<int>& out) override;
  using Tokenizer::encode;
  std::string decode(std::span<const int> tokens) const override;
  int document_start() const override;
  bool cuts_streams_at_line_breaks() const override;
  const BpeVocabulary& vocabulary() const { return vocab_; }

 private:
  void encode_piece(std::string_view piece, std::vector<int>& out);

  BpeVocabulary vocab_;
  std::string name_;
  Gpt2PreTokenizer pretokenizer_;
  Cl100kPreTokenizer cl100k_pretokenizer_;  // used when vocab_.pattern is cl100k
  std::unique_ptr<PieceSplitter> splitter_;  // the file's own steps, when vocab_.pattern is custom
  // piece -> [offset, offset + length) in cached_tokens_, for pieces of up to 256 bytes. Emptied
  // when it holds 2^20 pieces, so memory stays bounded on corpora with many distinct pieces.
  struct Span {
    std::uint32_t offset, length;
  };
  std::unordered_map<std::string, Span, StringHash, std::equal_to<>> cache_;
  std::vector<int> cached_tokens_;
};

}  // namespace st
