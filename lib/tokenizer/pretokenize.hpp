#pragma once
// GPT-2's pre-tokenizer: the text is cut into pieces by the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (the first alternative that matches at a position wins, each one greedy), and BPE runs on
// each piece alone. Written out by hand over UTF-8 characters rather than with a regex engine:
// std::regex has no Unicode classes and no lookahead of this kind, and a hand-written scan is
// several times faster than a general engine.
#include <cstddef>
#include <string_view>

#include "tokenizer/unicode_class.hpp"

namespace st {

class Gpt2PreTokenizer {
 public:
  Gpt2PreTokenizer() : classes_(CharClassTable::get()) {}

  // Calls on_piece(offset, length) for each piece of `text`, in order; the pieces tile the text.
  template <class OnPiece>
  void split(std::string_view text, OnPiece&& on_piece) const {
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    const std::size_t n = text.size();
    std::size_t i = 0;
    while (i < n) {
      const std::size_t start = i;
      if (s[i] == '\'') {
        if (const std::size_t k = contraction_length(s + i, n - i)) {
          on_piece(start, k);
          i += k;
          continue;
        }
      }
      Char first = at(s, n, i);
      std::size_t j = i;
      // " ?X+": a space joins the run of letters, numbers or other characters that follows it.
      if (s[i] == ' ' && i + 1 < n) {
        const Char next = at(s, n, i + 1);
        if (next.cls != CharClass::space) first = next, j = i + 1;
      }
      if (first.cls != CharClass::space) {
        j += first.length;
        while (j < n) {
          const Char c = at(s, n, j);
          if (c.cls != first.cls) break;
          j += c.length;
        }
        on_piece(start, j - start);
        i = j;
        continue;
      }
      // White space: "\s+(?!\S)" takes the run up to its end of text, or all of it but its last
      // character when something follows (that character goes with the next piece, or, when
      // the run is that one character, "\s+" takes it alone).
      std::size_t last = i;
      while (j < n) {
        const Char c = at(s, n, j);
        if (c.cls != CharClass::space) break;
        last = j;
        j += c.length;
      }
      const std::size_t end = (j == n || last == i) ? j : last;
      on_piece(start, end - start);
      i = end;
    }
  }

 private:
  struct Char {
    CharClass cls;
    std::uint32_t length;
  };
  Char at(const unsigned char* s, std::size_t n, std::size_t i) const {
    if (s[i] < 0x80) return {ascii_class(s[i]), 1};
    const Utf8Char c = decode_utf8(s + i, n - i);
    return {c.code_point == kInvalidUtf8 ? CharClass::other : classes_.of(c.code_point), c.length};
  }
  static CharClass ascii_class(unsigned char b) {
    if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z')) return CharClass::letter;
    if (b >= '0' && b <= '9') return CharClass::number;
    if (b == ' ' || (b >= '\t' && b <= '\r')) return CharClass::space;
    return CharClass::other;
  }
  // 's 't 'm 'd (2 bytes), 're 've 'll (3 bytes), or 0. Case-sensitive, as GPT-2's pattern is.
  static std::size_t contraction_length(const unsigned char* s, std::size_t available) {
    if (available < 2) return 0;
    const unsigned char a = s[1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (available < 3) return 0;
    const unsigned char b = s[2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
  }

  const CharClassTable& classes_;
};

}  // namespace st
