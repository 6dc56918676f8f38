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

#include "tokenizer/pipeline.hpp"

namespace st {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// The pre-tokenizer: GPT-2's or cl100k's pattern alone (matched by hand: pretokenize.hpp,
// pretokenize_cl100k.hpp), or a tokenizer.json's own normalizer and pre-tokenizer steps (custom:
// BpeVocabulary::pipeline).
enum class PreTokenizerPattern { gpt2, cl100k, custom };

// What a piece is before merging: its bytes, each the one-byte token (byte-level BPE: GPT-2,
// Llama 3, SmolLM, Qwen2), or its characters, each the token of that character or, when the
// vocabulary lacks it, the byte-fallback tokens <0xAB> of its UTF-8 bytes (Llama 2, Mistral).
enum class BpeSymbols { bytes, characters };

struct BpeMerge {
  std::int32_t rank;   // the merge's line among the merges: lower merges first
  std::int32_t token;  // the id of the merged token
};

struct BpeVocabulary {
  // id -> the token's bytes. With BpeSymbols::characters, the token's string as the vocabulary
  // spells it ("▁the", "<0x0A>"): the decoder's steps make text of them.
  std::vector<std::string> token_bytes;
  // byte -> the id of its one-byte token (characters: of its byte-fallback token <0xAB>)
  std::array<std::int32_t, 256> byte_token{};
  // (left id << 32 | right id) -> the merge that joins them. From GPT-2's files and tiktoken's,
  // every split of a merged token into two tokens of the vocabulary is listed, not only the one
  // on its merge line: tiktoken merges any adjacent pair whose bytes form a merged token, and so
  // do we. From a tokenizer.json, the pairs its merges list, as Hugging Face's tokenizers merges
  // (its conversions of tiktoken encodings list every split).
  std::unordered_map<std::uint64_t, BpeMerge> pair_merges;
  // Token bytes (characters: strings) -> id: every one-byte and merged token (tokenizer.json:
  // every token of model.vocab). With whole_pieces, a piece that is a token whole is that token.
  std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>> whole_tokens;
  bool whole_pieces = true;  // tiktoken's rule; tokenizer.json's model.ignore_merges
  BpeSymbols symbols = BpeSymbols::bytes;
  TextPipeline pipeline;  // PreTokenizerPattern::custom: the file's steps; characters: its decoder
  std::int32_t end_of_text = -1;  // "<|endoftext|>" (or another end-of-text token) when the vocabulary has it
  PreTokenizerPattern pattern = PreTokenizerPattern::gpt2;
  std::int32_t begin_of_text = -1;  // a beginning-of-text token ("<|begin_of_text|>") when it has one
  // Special tokens (tokenizer.json's added_tokens, a tiktoken encoding's specials): id -> text.
  // They are never produced from ordinary text; decoding gives their text.
  std::vector<std::pair<std::int32_t, std::string>> special_tokens;
  // Where it came from: [vocab, merges] for GPT-2's files, one file for tokenizer.json or a rank file.
  std::string vocab_path, merges_path;

  // Ids no token has (tiktoken's cl100k leaves gaps below its special tokens) have empty bytes.

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

// Checks merges given as token strings in rank order and fills whole_tokens and pair_merges.
// `vocab` must have its token_bytes; the constructor finds the 256 one-byte tokens.
class MergeBuilder {
 public:
  // vocab_source: "tokenizer vocabulary 'path'", for messages. Throws Error if a byte lacks a token.
  MergeBuilder(BpeVocabulary& vocab, std::string vocab_source);
  // One merge, its tokens spelled in GPT-2's byte alphabet; `where` prefixes messages
  // ("merges.txt:7: "), `position` names it in a later duplicate's message ("line 7").
  void add(std::string_view left, std::string_view right, const std::string& where, const std::string& position);
  // Throws Error naming merges_source if no merge was added.
  void finish(const std::string& merges_source);

 private:
  // "vocabulary 'path'" of "tokenizer vocabulary 'path'" (a merges line names its file already).
  std::string short_source() const {
    const auto at = vocab_source_.rfind("vocabulary '");
    return at == std::string::npos ? vocab_source_ : vocab_source_.substr(at);
  }

  BpeVocabulary& v_;
  std::string vocab_source_;
  std::unordered_map<std::string_view, std::int32_t> id_of_;
  std::vector<std::int32_t> merged_;  // token ids in rank order
  std::unordered_map<std::int32_t, std::string> merged_at_;
};

// Every split of each merged token (ids in rank order) into two tokens becomes a pair merge of
// that rank; merged tokens join whole_tokens. v.byte_token and its whole_tokens must be set.
void index_merges(BpeVocabulary& v, const std::vector<std::int32_t>& merged);

// The bytes a token string spells in GPT-2's byte alphabet, or false and why it spells none.
bool alphabet_bytes(std::string_view text, std::string& bytes, std::string& why);

// GPT-2's byte alphabet: the printable character that stands for each byte in token strings.
const std::array<char32_t, 256>& gpt2_byte_alphabet();

}  // namespace st
