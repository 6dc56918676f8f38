#pragma once
// Training data as a sequence of token ids: byte-level text (each byte a token, vocabulary 256)
// or a token file in llm.c's format (header of 256 int32: magic 20240520, version 1, token
// count; then uint16 tokens), mapped rather than read so large files cost no memory.
#include <cstdint>
#include <optional>
#include <string>

#include "data/mapped_file.hpp"

namespace st {

inline constexpr std::int32_t kTokenFileMagic = 20240520;
inline constexpr std::int32_t kTokenFileVersion = 1;
inline constexpr std::size_t kTokenFileHeaderInts = 256;

class TokenDataset {
 public:
  // format: "text", "tokens" or "auto" (tokens if the file starts with the magic).
  static TokenDataset open(const std::string& path, const std::string& format);

  std::size_t size() const { return count_; }
  int operator[](std::size_t i) const { return wide_ ? wide_[i] : bytes_[i]; }
  bool byte_level() const { return bytes_ != nullptr; }
  int max_token() const { return max_token_; }
  const std::string& path() const { return file_.path(); }
  // One unigram entropy in nats over [begin, end): the loss of the best model that ignores context.
  double unigram_entropy(std::size_t begin, std::size_t end) const;

 private:
  explicit TokenDataset(MappedFile file) : file_(std::move(file)) {}
  MappedFile file_;
  const unsigned char* bytes_ = nullptr;
  const std::uint16_t* wide_ = nullptr;
  std::size_t count_ = 0;
  int max_token_ = 0;
};

// Writes a token file in the format above (for tools and tests).
void write_token_file(const std::string& path, const std::uint16_t* tokens, std::size_t count);

}  // namespace st
