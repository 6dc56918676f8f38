#pragma once
// A tokenizer.json regex run by ICU. Hugging Face's tokenizers compiles Split patterns with
// Oniguruma (Ruby syntax), whose few differences from ICU's are rewritten first (icu_pattern):
// \s and \S are Unicode's White_Space (ICU's \s lacks U+000B and U+0085), \h and \H hex digits
// (ICU's are horizontal space), and ^ $ . see only "\n" as a line break, at every line.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace st {

// The pattern in ICU's syntax; throws Error naming `where` for what cannot be rewritten.
std::string icu_pattern(const std::string& oniguruma, const std::string& where);

class IcuRegex {
 public:
  // Throws Error naming `where` (the file and key) and ICU's complaint when it does not compile.
  IcuRegex(const std::string& oniguruma, const std::string& where);
  ~IcuRegex();
  IcuRegex(const IcuRegex&) = delete;
  IcuRegex& operator=(const IcuRegex&) = delete;

  // The [start, end) byte offsets of the matches in UTF-8 `text`, left to right, each search
  // starting where the last match ended (after an empty match, one character on). Bytes that are
  // not UTF-8 are U+FFFD to the pattern. Not thread-safe: the matcher is reused.
  void find_all(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& matches);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace st
