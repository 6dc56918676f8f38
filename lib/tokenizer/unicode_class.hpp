#pragma once
// The character classes GPT-2's pre-tokenizer splits text by: letters (\p{L}: Lu Ll Lt Lm Lo),
// numbers (\p{N}: Nd Nl No), white space (\s: Unicode's White_Space property) and everything
// else, taken from ICU's Unicode tables, and a strict UTF-8 decoder that lets any byte through.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace st {

enum class CharClass : std::uint8_t { other, letter, number, space };

// One byte per code point, filled from ICU once per process (about 1 MiB): a lookup per
// character instead of a call into ICU.
class CharClassTable {
 public:
  static const CharClassTable& get();
  CharClass of(char32_t code_point) const {
    return code_point < classes_.size() ? static_cast<CharClass>(classes_[code_point]) : CharClass::other;
  }

 private:
  CharClassTable();
  std::vector<std::uint8_t> classes_;
};

// One character of UTF-8 text: its code point and length in bytes. A byte that does not start
// a valid sequence (stray continuation bytes, overlong forms, surrogates, code points above
// U+10FFFF, a sequence cut short) is a character of its own, one byte long, of class other:
// byte-level BPE still encodes it, so every byte string round-trips.
struct Utf8Char {
  char32_t code_point;
  std::uint32_t length;
};
inline constexpr char32_t kInvalidUtf8 = 0xFFFFFFFF;

inline Utf8Char decode_utf8(const unsigned char* s, std::size_t available) {
  const unsigned b0 = s[0];
  if (b0 < 0x80) return {b0, 1};
  auto cont = [&](std::size_t k) { return k < available && (s[k] & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (cont(1)) return {((b0 & 0x1Fu) << 6) | (s[1] & 0x3Fu), 2};
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (cont(1) && cont(2)) {
      const char32_t cp = ((b0 & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
      if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return {cp, 3};
    }
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (cont(1) && cont(2) && cont(3)) {
      const char32_t cp = ((b0 & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
      if (cp >= 0x10000 && cp <= 0x10FFFF) return {cp, 4};
    }
  }
  return {kInvalidUtf8, 1};
}

}  // namespace st
