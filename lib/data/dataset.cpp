#include "data/dataset.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.hpp"

namespace st {
namespace {

constexpr std::size_t kHeaderBytes = kTokenFileHeaderInts * sizeof(std::int32_t);

bool starts_with_magic(const MappedFile& file) {
  std::int32_t magic = 0;
  if (file.size() >= sizeof magic) std::memcpy(&magic, file.data(), sizeof magic);
  return magic == kTokenFileMagic || magic == kTokenFileMagic32;
}

struct TokenFileShape {
  std::size_t count = 0;
  std::size_t token_bytes = 2;  // 2 (uint16) or 4 (uint32)
};

// The token count and width of a token file after checking its header and length.
TokenFileShape checked_token_file(const MappedFile& file) {
  const std::string& path = file.path();
  std::int32_t header[3] = {};
  if (file.size() >= sizeof header) std::memcpy(header, file.data(), sizeof header);
  if (file.size() < kHeaderBytes || (header[0] != kTokenFileMagic && header[0] != kTokenFileMagic32))
    throw Error("data file '" + path + "' is not a token file: it does not start with the magic " +
                std::to_string(kTokenFileMagic) + " (uint16 tokens) or " + std::to_string(kTokenFileMagic32) +
                " (uint32 tokens) (use data.format = \"text\" for text)");
  TokenFileShape shape;
  if (header[0] == kTokenFileMagic32) {
    shape.token_bytes = 4;
    if (header[1] != kTokenFileVersion32)
      throw Error("token file '" + path + "' has the magic " + std::to_string(kTokenFileMagic32) + " and version " +
                  std::to_string(header[1]) + "; this build reads that magic with version " +
                  std::to_string(kTokenFileVersion32) + " (uint32 tokens)");
  } else if (header[1] != kTokenFileVersion) {
    throw Error("token file '" + path + "' has version " + std::to_string(header[1]) + "; this build reads version " +
                std::to_string(kTokenFileVersion) + " (uint16 tokens)");
  }
  if (header[2] <= 0) throw Error("token file '" + path + "' declares " + std::to_string(header[2]) + " tokens");
  shape.count = static_cast<std::size_t>(header[2]);
  if (file.size() != kHeaderBytes + shape.count * shape.token_bytes)
    throw Error("token file '" + path + "' declares " + std::to_string(shape.count) + " tokens (" +
                std::to_string(kHeaderBytes + shape.count * shape.token_bytes) + " bytes with the header, " +
                std::to_string(shape.token_bytes) + " bytes a token) but has " + std::to_string(file.size()) +
                " bytes: truncated or not a token file");
  return shape;
}

template <class Token>
void write_tokens(const std::string& path, const Token* tokens, std::size_t count, std::int32_t magic,
                  std::int32_t version) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error("cannot write token file '" + path + "'");
  std::int32_t header[kTokenFileHeaderInts] = {};
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<std::int32_t>(count);
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  out.write(reinterpret_cast<const char*>(tokens), static_cast<std::streamsize>(count * sizeof(Token)));
  if (!out) throw Error("failed writing token file '" + path + "'");
}

}  // namespace

TokenDataset TokenDataset::open(const std::vector<std::string>& paths, DataFormat format,
                                const TextEncoder& encode_text) {
  ST_REQUIRE(!paths.empty(), "a data set needs at least one file");
  TokenDataset data;
  data.sources_.reserve(paths.size());
  std::optional<bool> all_text;
  for (const std::string& path : paths) {
    Source source;
    source.file.emplace(path);
    const MappedFile& file = *source.file;
    const bool as_tokens =
        format == DataFormat::tokens || (format == DataFormat::automatic && starts_with_magic(file));
    if (all_text && *all_text == as_tokens)
      throw Error("data file '" + path + "' is " + (as_tokens ? "a token file" : "text") + " but '" + paths.front() +
                  "' is " + (as_tokens ? "text" : "a token file") + ": the files of one data set must be of one kind");
    all_text = !as_tokens;
    DataShard shard{path, data.size_, 0, !as_tokens};
    if (as_tokens) {
      const TokenFileShape shape = checked_token_file(file);
      shard.size = shape.count;
      if (shape.token_bytes == 2) source.wide = reinterpret_cast<const std::uint16_t*>(file.data() + kHeaderBytes);
      else source.wide32 = reinterpret_cast<const std::uint32_t*>(file.data() + kHeaderBytes);
    } else if (encode_text) {
      source.encoded = encode_text(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()), path);
      source.file.reset();  // the text is not needed once encoded
      if (source.encoded.empty()) throw Error("data file '" + path + "' encodes to no tokens");
      shard.size = source.encoded.size();
      source.wide32 = source.encoded.data();
    } else {
      shard.size = file.size();
      source.bytes = file.data();
    }
    data.byte_level_ = data.byte_level_ && shard.text && !encode_text;
    data.size_ += shard.size;
    data.shards_.push_back(shard);
    data.sources_.push_back(std::move(source));  // the mapping and the vector's storage stay where they are
  }
  return data;
}

std::size_t TokenDataset::shard_of(std::size_t position) const {
  const auto after = std::upper_bound(shards_.begin(), shards_.end(), position,
                                      [](std::size_t p, const DataShard& s) { return p < s.begin; });
  return static_cast<std::size_t>(after - shards_.begin()) - 1;
}

template <class Fn>
void TokenDataset::for_each_piece(std::size_t begin, std::size_t end, Fn&& fn) const {
  if (begin >= end) return;
  for (std::size_t k = shard_of(begin); k < shards_.size() && begin < end; ++k) {
    const DataShard& s = shards_[k];
    const std::size_t first = begin - s.begin, count = std::min(end, s.begin + s.size) - begin;
    fn(k, first, count);
    begin += count;
  }
}

int TokenDataset::operator[](std::size_t i) const {
  const std::size_t k = shard_of(i);
  const Source& s = sources_[k];
  const std::size_t at = i - shards_[k].begin;
  return s.visit([&](const auto* tokens) { return static_cast<int>(tokens[at]); });
}

void TokenDataset::copy(std::size_t begin, std::size_t count, int* out) const {
  for_each_piece(begin, begin + count, [&](std::size_t k, std::size_t first, std::size_t n) {
    const Source& s = sources_[k];
    s.visit([&](const auto* tokens) { std::copy(tokens + first, tokens + first + n, out); });
    out += n;
  });
}

std::string TokenDataset::name() const {
  if (shards_.size() == 1) return shards_.front().path;
  return std::to_string(shards_.size()) + " files " + shards_.front().path + " ... " + shards_.back().path;
}

std::optional<std::size_t> TokenDataset::first_token_at_least(int limit, std::size_t begin, std::size_t end) const {
  std::optional<std::size_t> found;
  for_each_piece(begin, end, [&](std::size_t k, std::size_t first, std::size_t n) {
    if (found) return;
    const Source& s = sources_[k];
    auto scan = [&](const auto* tokens) {
      const auto* hit = std::find_if(tokens + first, tokens + first + n, [&](int t) { return t >= limit; });
      if (hit != tokens + first + n) found = shards_[k].begin + static_cast<std::size_t>(hit - tokens);
    };
    s.visit(scan);
  });
  return found;
}

int TokenDataset::max_token(std::size_t begin, std::size_t end) const {
  int largest = 0;
  for_each_piece(begin, end, [&](std::size_t k, std::size_t first, std::size_t n) {
    const Source& s = sources_[k];
    s.visit([&](const auto* tokens) {
      largest = std::max<int>(largest, static_cast<int>(*std::max_element(tokens + first, tokens + first + n)));
    });
  });
  return largest;
}

double TokenDataset::unigram_entropy(std::size_t begin, std::size_t end) const {
  std::vector<double> counts(static_cast<std::size_t>(max_token(begin, end)) + 1, 0.0);
  for_each_piece(begin, end, [&](std::size_t k, std::size_t first, std::size_t n) {
    const Source& s = sources_[k];
    s.visit([&](const auto* tokens) {
      for (std::size_t i = first; i < first + n; ++i) counts[tokens[i]] += 1;
    });
  });
  const double total = static_cast<double>(end - begin);
  double h = 0;
  for (double c : counts)
    if (c > 0) h -= c / total * std::log(c / total);
  return h;
}

void write_token_file(const std::string& path, const std::uint16_t* tokens, std::size_t count) {
  write_tokens(path, tokens, count, kTokenFileMagic, kTokenFileVersion);
}

void write_token_file(const std::string& path, const std::uint32_t* tokens, std::size_t count) {
  write_tokens(path, tokens, count, kTokenFileMagic32, kTokenFileVersion32);
}

}  // namespace st
