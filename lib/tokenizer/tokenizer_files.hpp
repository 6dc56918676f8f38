#pragma once
// The byte-level BPE tokenizers of today's models from their own files:
// - Hugging Face's tokenizer.json (GPT-2, SmolLM, Llama 3, Qwen2, Llama 2, Mistral, ... as
//   published with the model): model.vocab (token strings -> ids: bytes in GPT-2's byte alphabet
//   for byte-level models, text with <0xAB> byte-fallback tokens for SentencePiece-style ones),
//   model.merges ("a b" strings or [a, b] pairs, in rank order), the normalizer, pre-tokenizer and
//   decoder steps (hf_pipeline.hpp), and added_tokens (the special tokens: <|begin_of_text|>, <s>).
// - A tiktoken rank file (cl100k_base.tiktoken): one "base64-of-token-bytes rank" per line; the
//   rank of a token is its id and its merge priority. The file holds no pattern and no special
//   tokens: they come from the encoding's name (cl100k_base: cl100k's pattern and its five
//   specials from <|endoftext|> = 100257; r50k_base/gpt2: GPT-2's and <|endoftext|> = 50256).
#include <string>
#include <vector>

#include "core/choices.hpp"
#include "tokenizer/bpe_vocab.hpp"

namespace st {

// data.tokenizer_files for "hf": [tokenizer.json] or [a directory holding tokenizer.json].
std::string locate_hf_tokenizer(const std::vector<std::string>& files);

// Reads and checks tokenizer.json; throws Error naming the file, the key (model.merges[12],
// pre_tokenizer.pretokenizers[0].type, ...), what it has and what is allowed. `pattern`
// automatic takes the file's; a named one (gpt2, cl100k) must be the file's pre-tokenizer alone.
BpeVocabulary read_hf_tokenizer(const std::string& path, TokenizerPattern pattern = TokenizerPattern::automatic);

// Reads a tiktoken rank file. `pattern` automatic takes it from the file's name (cl100k_base.*,
// r50k_base.*, gpt2.*); an encoding of another name needs it named (cl100k or gpt2).
BpeVocabulary read_tiktoken_ranks(const std::string& path, TokenizerPattern pattern = TokenizerPattern::automatic);

}  // namespace st
