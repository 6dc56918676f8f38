#pragma once
// cl100k's pre-tokenizer (OpenAI's cl100k_base; Llama 3's tokenizer.json names the same
// pattern): the text is cut into pieces by
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
// where, as in GPT-2's, the first alternative that matches at a position wins. It differs from
// GPT-2's in that contractions ignore case, a letter run takes any one character before it that
// is not a line break, letter or number (a space, a tab, a bracket), numbers go in runs of at
// most three digits with no space, punctuation takes the line breaks after it, and white space
// up to its last line break is one piece. Written out by hand like Gpt2PreTokenizer.
#include <cstddef>
#include <string_view>

#include "tokenizer/unicode_class.hpp"

namespace st {

class Cl100kPreTokenizer {
 public:
  Cl100kPreTokenizer() : classes_(CharClassTable::get()) {}

  // Calls on_piece(offset, length) for each piece of `text`, in order; the pieces tile the text.
  template <class OnPiece>
  void split(std::string_view text, OnPiece&& on_piece) const {
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    const std::size_t n = text.size();
    std::size_t i = 0;
    while (i < n) {
      const std::size_t end = piece_end(s, n, i);
      on_piece(i, end - i);
      i = end;
    }
  }

 private:
  struct Char {
    CharClass cls;
    std::uint32_t length;
    bool line_break;  // \r or \n
  };
  Char at(const unsigned char* s, std::size_t n, std::size_t i) const {
    if (s[i] < 0x80) return {ascii_class(s[i]), 1, s[i] == '\r' || s[i] == '\n'};
    const Utf8Char c = decode_utf8(s + i, n - i);
    return {c.code_point == kInvalidUtf8 ? CharClass::other : classes_.of(c.code_point), c.length, false};
  }
  static CharClass ascii_class(unsigned char b) {
    if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z')) return CharClass::letter;
    if (b >= '0' && b <= '9') return CharClass::number;
    if (b == ' ' || (b >= '\t' && b <= '\r')) return CharClass::space;
    return CharClass::other;
  }
  // The end of the run of characters of class `cls` from i (at most `limit` of them).
  std::size_t run_end(const unsigned char* s, std::size_t n, std::size_t i, CharClass cls,
                      std::size_t limit = static_cast<std::size_t>(-1)) const {
    for (std::size_t count = 0; i < n && count < limit; ++count) {
      const Char c = at(s, n, i);
      if (c.cls != cls) break;
      i += c.length;
    }
    return i;
  }

  // The end of the piece that starts at i (< n): the alternatives of the pattern in order.
  std::size_t piece_end(const unsigned char* s, std::size_t n, std::size_t i) const {
    if (s[i] == '\'')
      if (const std::size_t k = contraction_length(s + i, n - i)) return i + k;
    const Char first = at(s, n, i);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (first.cls == CharClass::letter) return run_end(s, n, i, CharClass::letter);
    if (!first.line_break && first.cls != CharClass::number && i + first.length < n &&
        at(s, n, i + first.length).cls == CharClass::letter)
      return run_end(s, n, i + first.length, CharClass::letter);
    // \p{N}{1,3}
    if (first.cls == CharClass::number) return run_end(s, n, i, CharClass::number, 3);
    // " ?[^\s\p{L}\p{N}]+[\r\n]*"
    std::size_t j = i;
    if (s[i] == ' ' && i + 1 < n && at(s, n, i + 1).cls == CharClass::other) j = i + 1;
    if (at(s, n, j).cls == CharClass::other) {
      j = run_end(s, n, j, CharClass::other);
      while (j < n && (s[j] == '\r' || s[j] == '\n')) ++j;
      return j;
    }
    // White space from here on (first.cls is space). "\s*[\r\n]+": up to the run's last line
    // break, when it has one.
    std::size_t last = i, after_break = 0;
    for (j = i; j < n;) {
      const Char c = at(s, n, j);
      if (c.cls != CharClass::space) break;
      last = j;
      j += c.length;
      if (c.line_break) after_break = j;
    }
    if (after_break) return after_break;
    // "\s+(?!\S)" then "\s+", as in GPT-2's pattern: the run to its end of text, or all of it
    // but its last character when something follows (or the one character alone).
    return (j == n || last == i) ? j : last;
  }

  // 's 't 'm 'd (2 bytes), 're 've 'll (3 bytes), in either case, or 0. Under Unicode's case
  // folding (?i) also matches 's with U+017F (long s, 2 bytes), as tiktoken's regex does.
  static std::size_t contraction_length(const unsigned char* s, std::size_t available) {
    if (available < 2) return 0;
    const unsigned char a = lower(s[1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (available >= 3 && s[1] == 0xC5 && s[2] == 0xBF) return 3;  // 'ſ
    if (available < 3) return 0;
    const unsigned char b = lower(s[2]);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
  }
  static unsigned char lower(unsigned char c) { return c >= 'A' && c <= 'Z' ? static_cast<unsigned char>(c + 32) : c; }

  const CharClassTable& classes_;
};

}  // namespace st
