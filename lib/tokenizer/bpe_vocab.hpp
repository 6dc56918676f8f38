#pragma once
// A byte-level BPE vocabulary in GPT-2's file format: a JSON object from token strings to ids
// (encoder.json, or vocab.json as Hugging Face names it) and the merges in rank order, one
// "left right" pair per line after a "#version" line (vocab.bpe, or merges.txt). Token strings
// spell bytes in GPT-2's printable byte alphabet (byte 0x20 is "Ġ", 0x0A is "Ċ", ...).
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace st {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

struct BpeMerge {
  std::int32_t rank;   // the merge's line among the merges: lower merges first
  std::int32_t token;  // the id of the merged token
};

struct BpeVocabulary {
  std::vector<std::string> token_bytes;  // id -> the token's bytes
  std::array<std::int32_t, 256> byte_token{};  // byte -> the id of its one-byte token
  // (left id << 32 | right id) -> the merge whose token is their concatenation. Every split of a
  // merged token into two tokens of the vocabulary is listed, not only the one on its merge
  // line: tiktoken merges any adjacent pair whose bytes form a merged token, and so do we.
  std::unordered_map<std::uint64_t, BpeMerge> pair_merges;
  // The bytes of every one-byte and merged token -> its id: a piece that is a token whole is
  // that token.
  std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>> whole_tokens;
  std::int32_t end_of_text = -1;  // "<|endoftext|>" when the vocabulary has it
  std::string vocab_path, merges_path;

  int size() const { return static_cast<int>(token_bytes.size()); }
};

// The vocabulary and merges files named by data.tokenizer_files: [vocab, merges], or one
// directory holding encoder.json + vocab.bpe (OpenAI's names) or vocab.json + merges.txt
// (Hugging Face's). Throws Error saying what was looked for.
std::pair<std::string, std::string> locate_bpe_files(const std::vector<std::string>& files);

// Reads and checks both files; throws Error naming the file (and line or key) and what is
// wrong: malformed JSON, ids that are not 0..N-1, characters outside the byte alphabet, a
// missing one-byte token, a merge of unknown tokens or one whose result is not in the vocabulary.
BpeVocabulary read_bpe_vocabulary(const std::string& vocab_path, const std::string& merges_path);

// GPT-2's byte alphabet: the printable character that stands for each byte in token strings.
const std::array<char32_t, 256>& gpt2_byte_alphabet();

}  // namespace st
