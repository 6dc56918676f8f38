#pragma once
// Encoding a text with a tokenizer, spread over ranks. Each rank encodes one contiguous share
// of the bytes, cut where encoding the parts and joining them gives exactly the encoding of the
// whole, so the tokens are the same on any number of ranks.
//
// Two layouts:
// - A stream (separator ""): the text is encoded as it is, as tiktoken's encode_ordinary does.
//   Shares are cut after a newline that has a printable ASCII character on both sides: there
//   GPT-2's and cl100k's pre-tokenizers always end a piece, whatever comes before or after. A
//   tokenizer that cannot promise this (Tokenizer::cuts_streams_at_line_breaks: Llama 2's puts
//   "▁" before the text and its pieces reach across lines) has the whole stream on rank 0.
// - Documents separated by lines that hold exactly `separator` (fortune files use "%"): each
//   document (the lines between two separator lines, newlines included; empty ones skipped)
//   is encoded alone and preceded by the tokenizer's document start (GPT-2's <|endoftext|>,
//   50256, as llm.c's data preparation does; a tokenizer file's beginning-of-text token); separator lines become no tokens. Shares are cut
//   at document starts.
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.hpp"

namespace st {

// The first place at or after `from` where the text may be cut (text.size() if none). Without
// `line_cuts` a stream has no cut but its ends.
std::size_t next_text_cut(std::string_view text, std::size_t from, const std::string& separator,
                          bool line_cuts = true);

// The bytes [begin, end) rank `rank` of `ranks` encodes: from the first cut at or after
// rank/ranks of the text to the next rank's.
std::pair<std::size_t, std::size_t> text_share(std::string_view text, int rank, int ranks, const std::string& separator,
                                               bool line_cuts = true);

// Appends the tokens of text[begin, end), which must start and end at cuts.
void encode_text_share(std::string_view text, std::size_t begin, std::size_t end, const std::string& separator,
                       Tokenizer& tokenizer, std::vector<int>& out);

// Bytes a token in the token files of this tokenizer: 2 (uint16, llm.c's GPT-2 files) when its
// ids fit, else 4 (uint32, llm.c's Llama 3 files).
std::size_t token_file_bytes(const Tokenizer& tokenizer);

// This rank's share of the text's tokens (collective only in that all ranks must agree on the
// text, the separator and the tokenizer).
std::vector<std::uint32_t> encode_rank_share(std::string_view text, const std::string& separator, Tokenizer& tokenizer,
                                             MPI_Comm comm);

// The whole text's tokens on every rank: each encodes its share, then all gather. Collective.
std::vector<std::uint32_t> encode_text_over_ranks(std::string_view text, const std::string& separator,
                                                  Tokenizer& tokenizer, MPI_Comm comm, const std::string& path);

}  // namespace st
