#include "tokenizer/bpe.hpp"

#include <climits>
#include <queue>

#include "core/error.hpp"

namespace st {
namespace {

constexpr std::size_t kCacheEntries = 1 << 20;
// Longer pieces (runs of thousands of letters or spaces) are rare and would only fill the cache.
constexpr std::size_t kCachedPieceBytes = 256;
// Pieces up to this many bytes are merged by scanning: below it the scan's quadratic cost is
// smaller than the heap's bookkeeping.
constexpr std::size_t kScanLimit = 64;

struct PairLookup {
  const BpeVocabulary& vocab;
  // The merge that joins tokens a and b, or rank INT_MAX.
  BpeMerge operator()(int a, int b) const {
    const auto it = vocab.pair_merges.find(static_cast<std::uint64_t>(a) << 32 | static_cast<std::uint32_t>(b));
    return it == vocab.pair_merges.end() ? BpeMerge{INT_MAX, -1} : it->second;
  }
};

// The tokens a piece starts as: its bytes' one-byte tokens, or (BpeSymbols::characters) the token
// of each character, its bytes' fallback tokens where the vocabulary lacks it (as tokenizers'
// merge_word; a byte that is not UTF-8 is a character the vocabulary lacks).
std::vector<int> initial_tokens(const BpeVocabulary& vocab, std::string_view piece) {
  std::vector<int> tokens;
  if (vocab.symbols == BpeSymbols::bytes) {
    tokens.resize(piece.size());
    for (std::size_t i = 0; i < piece.size(); ++i) tokens[i] = vocab.byte_token[static_cast<unsigned char>(piece[i])];
    return tokens;
  }
  tokens.reserve(piece.size());
  const auto* s = reinterpret_cast<const unsigned char*>(piece.data());
  for (std::size_t i = 0; i < piece.size();) {
    const std::size_t length = decode_utf8(s + i, piece.size() - i).length;
    if (const auto it = vocab.whole_tokens.find(piece.substr(i, length)); it != vocab.whole_tokens.end()) {
      tokens.push_back(it->second);
    } else {
      for (std::size_t k = i; k < i + length; ++k) tokens.push_back(vocab.byte_token[s[k]]);
    }
    i += length;
  }
  return tokens;
}

void merge_by_scan(const BpeVocabulary& vocab, std::vector<int> tokens, std::vector<int>& out) {
  const PairLookup lookup{vocab};
  // merges[i]: the merge of tokens[i] and tokens[i + 1].
  std::vector<BpeMerge> merges(tokens.size() - 1);
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i) merges[i] = lookup(tokens[i], tokens[i + 1]);
  while (!merges.empty()) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < merges.size(); ++i)
      if (merges[i].rank < merges[best].rank) best = i;
    if (merges[best].rank == INT_MAX) break;
    tokens[best] = merges[best].token;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    merges.erase(merges.begin() + static_cast<std::ptrdiff_t>(best));
    if (best > 0) merges[best - 1] = lookup(tokens[best - 1], tokens[best]);
    if (best < merges.size()) merges[best] = lookup(tokens[best], tokens[best + 1]);
  }
  out.insert(out.end(), tokens.begin(), tokens.end());
}

void merge_by_heap(const BpeVocabulary& vocab, std::vector<int> token, std::vector<int>& out) {
  // Symbols are a linked list over the piece's initial tokens, in order, so ordering candidate
  // pairs by (rank, left symbol) merges the leftmost of equal ranks first, as the scan does. A
  // candidate is stale once either symbol changed: it is skipped when popped.
  const PairLookup lookup{vocab};
  const int n = static_cast<int>(token.size());
  std::vector<int> next(static_cast<std::size_t>(n)), prev(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    next[static_cast<std::size_t>(i)] = i + 1;
    prev[static_cast<std::size_t>(i)] = i - 1;
  }
  struct Candidate {
    std::int32_t rank, left, right, left_token, right_token, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int left) {
    if (left < 0) return;
    const int right = next[static_cast<std::size_t>(left)];
    if (right >= n) return;
    const int a = token[static_cast<std::size_t>(left)], b = token[static_cast<std::size_t>(right)];
    const BpeMerge m = lookup(a, b);
    if (m.rank != INT_MAX) heap.push({m.rank, left, right, a, b, m.token});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const auto l = static_cast<std::size_t>(c.left), r = static_cast<std::size_t>(c.right);
    if (token[l] != c.left_token || next[l] != c.right || token[r] != c.right_token) continue;  // stale
    token[l] = c.merged;
    token[r] = -1;  // gone
    next[l] = next[r];
    if (next[r] < n) prev[static_cast<std::size_t>(next[r])] = c.left;
    consider(prev[l]);
    consider(c.left);
  }
  for (int i = 0; i < n; i = next[static_cast<std::size_t>(i)]) out.push_back(token[static_cast<std::size_t>(i)]);
}

}  // namespace

void bpe_merge(const BpeVocabulary& vocab, std::string_view piece, std::vector<int>& out, MergeAlgorithm algorithm) {
  if (piece.empty()) return;
  if (vocab.whole_pieces)
    if (const auto whole = vocab.whole_tokens.find(piece); whole != vocab.whole_tokens.end()) {
      out.push_back(whole->second);
      return;
    }
  if (algorithm == MergeAlgorithm::scan) merge_by_scan(vocab, initial_tokens(vocab, piece), out);
  else merge_by_heap(vocab, initial_tokens(vocab, piece), out);
}

void bpe_merge(const BpeVocabulary& vocab, std::string_view piece, std::vector<int>& out) {
  bpe_merge(vocab, piece, out, piece.size() <= kScanLimit ? MergeAlgorithm::scan : MergeAlgorithm::heap);
}

BpeTokenizer::BpeTokenizer(BpeVocabulary vocab, std::string name) : vocab_(std::move(vocab)), name_(std::move(name)) {
  if (vocab_.pattern == PreTokenizerPattern::custom)
    splitter_ = std::make_unique<PieceSplitter>(vocab_.pipeline, vocab_.vocab_path);
}

BpeTokenizer::~BpeTokenizer() = default;

std::string BpeTokenizer::description() const {
  const char* kind = vocab_.symbols == BpeSymbols::bytes ? "byte-level BPE, " : "BPE with byte fallback, ";
  if (vocab_.pattern == PreTokenizerPattern::custom)
    return name_ + " (" + kind + std::to_string(vocab_.size()) + " tokens, " + vocab_.pipeline.summary() + ", from " +
           vocab_.vocab_path + ")";
  if (vocab_.merges_path.empty()) {
    const char* pattern = vocab_.pattern == PreTokenizerPattern::gpt2 ? "gpt2" : "cl100k";
    return name_ + " (byte-level BPE, " + std::to_string(vocab_.size()) + " tokens, " + pattern + " pattern, from " +
           vocab_.vocab_path + ")";
  }
  return name_ + " (byte-level BPE, " + std::to_string(vocab_.size()) + " tokens from " + vocab_.vocab_path + " and " +
         vocab_.merges_path + ")";
}

int BpeTokenizer::document_start() const {
  if (vocab_.begin_of_text >= 0) return vocab_.begin_of_text;
  return vocab_.end_of_text >= 0 ? vocab_.end_of_text : vocab_.byte_token['\n'];
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int>& out) {
  if (piece.size() == 1 && vocab_.symbols == BpeSymbols::bytes) {  // most punctuation and line breaks
    out.push_back(vocab_.byte_token[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (const auto hit = cache_.find(piece); hit != cache_.end()) {
    const int* first = cached_tokens_.data() + hit->second.offset;
    out.insert(out.end(), first, first + hit->second.length);
    return;
  }
  const std::size_t before = out.size();
  bpe_merge(vocab_, piece, out);
  if (piece.size() > kCachedPieceBytes) return;
  if (cache_.size() >= kCacheEntries) {
    cache_.clear();
    cached_tokens_.clear();
  }
  cache_.emplace(std::string(piece), Span{static_cast<std::uint32_t>(cached_tokens_.size()),
                                          static_cast<std::uint32_t>(out.size() - before)});
  cached_tokens_.insert(cached_tokens_.end(), out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
}

bool BpeTokenizer::cuts_streams_at_line_breaks() const {
  return vocab_.pattern != PreTokenizerPattern::custom || vocab_.pipeline.cuts_streams_at_line_breaks();
}

void BpeTokenizer::encode(std::string_view text, std::vector<int>& out) {
  if (splitter_) {
    splitter_->split(text, [&](std::string_view piece) { encode_piece(piece, out); });
    return;
  }
  if (vocab_.pattern == PreTokenizerPattern::cl100k) {
    cl100k_pretokenizer_.split(text, [&](std::size_t offset, std::size_t length) { encode_piece(text.substr(offset, length), out); });
    return;
  }
  pretokenizer_.split(text, [&](std::size_t offset, std::size_t length) { encode_piece(text.substr(offset, length), out); });
}

std::string BpeTokenizer::decode(std::span<const int> tokens) const {
  for (const int t : tokens)
    if (t < 0 || t >= vocab_.size())
      throw Error("token id " + std::to_string(t) + " is outside " + name_ + "'s vocabulary of " +
                  std::to_string(vocab_.size()) + " tokens");
  if (vocab_.symbols == BpeSymbols::characters) {  // token strings through the file's decoder
    std::vector<std::string> strings;
    strings.reserve(tokens.size());
    for (const int t : tokens) strings.push_back(vocab_.token_bytes[static_cast<std::size_t>(t)]);
    return decode_token_strings(vocab_.pipeline.decoder, std::move(strings));
  }
  std::string text;
  for (const int t : tokens) text += vocab_.token_bytes[static_cast<std::size_t>(t)];
  return text;
}

}  // namespace st
