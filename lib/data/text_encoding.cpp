#include "data/text_encoding.hpp"

#include <climits>

#include "comm/agree.hpp"
#include "comm/group.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"

namespace st {
namespace {

bool printable_ascii(char c) { return c >= '!' && c <= '~'; }

// The line [begin, end of line) without its "\n" (and a "\r" before it), and where the next
// line starts.
std::pair<std::string_view, std::size_t> line_at(std::string_view text, std::size_t begin) {
  const std::size_t newline = text.find('\n', begin);
  const std::size_t next = newline == std::string_view::npos ? text.size() : newline + 1;
  std::string_view line = text.substr(begin, (newline == std::string_view::npos ? text.size() : newline) - begin);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return {line, next};
}

}  // namespace

std::size_t next_text_cut(std::string_view text, std::size_t from, const std::string& separator, bool line_cuts) {
  const std::size_t n = text.size();
  if (from == 0 || from >= n) return std::min(from, n);
  if (separator.empty()) {
    if (!line_cuts) return n;
    for (std::size_t p = std::max<std::size_t>(from, 2); p < n; ++p)
      if (text[p - 1] == '\n' && printable_ascii(text[p - 2]) && printable_ascii(text[p])) return p;
    return n;
  }
  // Document starts are where a separator line ends: walk lines from the one holding `from`.
  std::size_t line = text.rfind('\n', from - 1);
  line = line == std::string_view::npos ? 0 : line + 1;
  while (line < n) {
    const auto [content, next] = line_at(text, line);
    if (content == separator && next >= from) return next;
    line = next;
  }
  return n;
}

std::pair<std::size_t, std::size_t> text_share(std::string_view text, int rank, int ranks, const std::string& separator,
                                               bool line_cuts) {
  auto boundary = [&](int r) {
    // size * r / ranks without overflow.
    const std::size_t size = text.size(), n = static_cast<std::size_t>(ranks), k = static_cast<std::size_t>(r);
    const std::size_t at = size / n * k + size % n * k / n;
    return next_text_cut(text, at, separator, line_cuts);
  };
  return {boundary(rank), boundary(rank + 1)};
}

void encode_text_share(std::string_view text, std::size_t begin, std::size_t end, const std::string& separator,
                       Tokenizer& tokenizer, std::vector<int>& out) {
  if (separator.empty()) {
    tokenizer.encode(text.substr(begin, end - begin), out);
    return;
  }
  std::size_t document = begin;
  auto finish = [&](std::size_t document_end) {
    if (document_end > document) {
      out.push_back(tokenizer.document_start());
      tokenizer.encode(text.substr(document, document_end - document), out);
    }
  };
  for (std::size_t line = begin; line < end;) {
    const auto [content, next] = line_at(text, line);
    if (content == separator) {
      finish(line);
      document = next;
    }
    line = next;
  }
  finish(end);
}

std::size_t token_file_bytes(const Tokenizer& tokenizer) { return tokenizer.vocab_size() > 65536 ? 4 : 2; }

std::vector<std::uint32_t> encode_rank_share(std::string_view text, const std::string& separator, Tokenizer& tokenizer,
                                             MPI_Comm comm) {
  const int rank = group_rank(comm), ranks = group_size(comm);
  const auto [begin, end] = text_share(text, rank, ranks, separator, tokenizer.cuts_streams_at_line_breaks());
  std::vector<int> tokens;
  encode_text_share(text, begin, end, separator, tokenizer, tokens);
  return std::vector<std::uint32_t>(tokens.begin(), tokens.end());
}

std::vector<std::uint32_t> encode_text_over_ranks(std::string_view text, const std::string& separator,
                                                  Tokenizer& tokenizer, MPI_Comm comm, const std::string& path) {
  const std::vector<std::uint32_t> mine = encode_rank_share(text, separator, tokenizer, comm);
  const unsigned long long total = sum_over<unsigned long long>(mine.size(), comm);
  if (total > INT_MAX)
    throw Error("data file '" + path + "' encodes to " + std::to_string(total) +
                    " tokens, too many to encode at start-up; write token files with `shardtrain tokenize` and "
                    "train on those",
                ErrorScope::all_ranks);
  return all_gather_joined(std::span<const std::uint32_t>(mine), comm);
}

}  // namespace st
