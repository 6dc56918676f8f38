#pragma once
// Training data as one stream of token ids over one or more files ("shards"), in the order
// given: byte-level text (each byte a token, vocabulary 256), text encoded by a tokenizer, or
// token files in llm.c's format (header of 256 int32: magic 20240520, version 1, token count;
// then uint16 tokens; or magic 20240801, version 7, as llm.c writes for Llama 3: uint32
// tokens), mapped rather than read so large files cost no memory. A window may run
// from one file into the next: a list of shards is the same data as their concatenation.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/choices.hpp"
#include "data/mapped_file.hpp"

namespace st {

inline constexpr std::int32_t kTokenFileMagic = 20240520;
inline constexpr std::int32_t kTokenFileVersion = 1;
// Token files of uint32 ids, for vocabularies beyond 65536 tokens: llm.c's Llama 3 header.
inline constexpr std::int32_t kTokenFileMagic32 = 20240801;
inline constexpr std::int32_t kTokenFileVersion32 = 7;
inline constexpr std::size_t kTokenFileHeaderInts = 256;

// One file of the stream and its place in it.
struct DataShard {
  std::string path;
  std::size_t begin = 0;  // position of its first token in the stream
  std::size_t size = 0;   // its tokens
  bool text = false;      // a text file (its tokens are bytes, or its encoding)
};

class TokenDataset {
 public:
  // Encodes one text file's bytes: used for text when data.tokenizer is not "byte".
  using TextEncoder = std::function<std::vector<std::uint32_t>(std::string_view text, const std::string& path)>;

  // format: text, tokens or automatic (tokens if a file starts with either magic); every file
  // must be of one kind. Text is byte tokens unless `encode_text` is given. Throws Error naming
  // the file and what is wrong with it.
  static TokenDataset open(const std::vector<std::string>& paths, DataFormat format,
                           const TextEncoder& encode_text = {});
  static TokenDataset open(const std::string& path, DataFormat format) {
    return open(std::vector<std::string>{path}, format);
  }

  std::size_t size() const { return size_; }
  int operator[](std::size_t i) const;
  // The tokens [begin, begin + count) into `out`, across file boundaries.
  void copy(std::size_t begin, std::size_t count, int* out) const;
  bool byte_level() const { return byte_level_; }
  const std::vector<DataShard>& shards() const { return shards_; }
  // The file holding stream position `position` (< size()).
  std::size_t shard_of(std::size_t position) const;
  // "data/x.txt", or "3 files data/a.bin ... data/c.bin", for messages and the settings table.
  std::string name() const;
  // The first position in [begin, end) whose token is `limit` or more, if any (a scan).
  std::optional<std::size_t> first_token_at_least(int limit, std::size_t begin, std::size_t end) const;
  int max_token(std::size_t begin, std::size_t end) const;
  // One unigram entropy in nats over [begin, end): the loss of the best model that ignores context.
  double unigram_entropy(std::size_t begin, std::size_t end) const;

 private:
  struct Source {
    std::optional<MappedFile> file;
    std::vector<std::uint32_t> encoded;  // text encoded by a tokenizer
    // Exactly one is set: byte-level text, a uint16 token file, uint32 tokens (file or encoded).
    const unsigned char* bytes = nullptr;
    const std::uint16_t* wide = nullptr;
    const std::uint32_t* wide32 = nullptr;
    // Calls fn(pointer to the tokens) with the pointer of its type.
    template <class Fn>
    decltype(auto) visit(Fn&& fn) const {
      if (bytes) return fn(bytes);
      if (wide) return fn(wide);
      return fn(wide32);
    }
  };
  // Calls fn(shard, first, count) over the pieces of [begin, end) in each file, in order.
  template <class Fn>
  void for_each_piece(std::size_t begin, std::size_t end, Fn&& fn) const;

  std::vector<Source> sources_;
  std::vector<DataShard> shards_;
  std::size_t size_ = 0;
  bool byte_level_ = true;
};

// Writes a token file in the format above (for tools and tests): uint16, or uint32 with the
// Llama 3 header.
void write_token_file(const std::string& path, const std::uint16_t* tokens, std::size_t count);
void write_token_file(const std::string& path, const std::uint32_t* tokens, std::size_t count);

}  // namespace st
