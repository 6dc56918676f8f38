// Text for terminals and logs: printable_utf8, byte samples.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "core/text.hpp"
#include "train/sampler.hpp"

namespace st {
namespace {

using namespace std::string_literals;

TEST(PrintableUtf8, ValidTextPassesThrough) {
  const std::string text = "a b\n\tc ~";
  EXPECT_EQ(printable_utf8(text), text);
  // Two, three and four bytes: e acute, the euro sign, U+1F600.
  const std::string wide = "\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
  EXPECT_EQ(printable_utf8(wide), wide);
  // The largest code points of each length.
  const std::string edges = "\xdf\xbf\xef\xbf\xbf\xf4\x8f\xbf\xbf";
  EXPECT_EQ(printable_utf8(edges), edges);
}

TEST(PrintableUtf8, InvalidBytesAreEscapedOneByOne) {
  EXPECT_EQ(printable_utf8("\xff"), "\\xff");
  EXPECT_EQ(printable_utf8("a\x80z"), "a\\x80z");                          // a stray continuation byte
  EXPECT_EQ(printable_utf8("\xe2\x82"), "\\xe2\\x82");                     // truncated at the end
  EXPECT_EQ(printable_utf8("\xe2\x82" "A"), "\\xe2\\x82A");                 // truncated by an ASCII byte
  EXPECT_EQ(printable_utf8("\xc0\xaf"), "\\xc0\\xaf");                     // overlong '/'
  EXPECT_EQ(printable_utf8("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");             // overlong in three bytes
  EXPECT_EQ(printable_utf8("\xed\xa0\x80"), "\\xed\\xa0\\x80");             // a surrogate, U+D800
  EXPECT_EQ(printable_utf8("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");     // U+110000
  EXPECT_EQ(printable_utf8("\xf5\x80\x80\x80"), "\\xf5\\x80\\x80\\x80");
  // A bad byte does not swallow the valid sequence after it.
  EXPECT_EQ(printable_utf8("\xc3\xc3\xa9"), "\\xc3\xc3\xa9");
}

TEST(PrintableUtf8, ControlCharactersAreEscapedButNewlineAndTab) {
  EXPECT_EQ(printable_utf8("\x1b[31mred"), "\\x1b[31mred");  // no terminal escape sequence gets through
  EXPECT_EQ(printable_utf8("a\rb"), "a\\x0db");
  EXPECT_EQ(printable_utf8("\x7f"), "\\x7f");
  EXPECT_EQ(printable_utf8("\0x"s), "\\x00x");
  EXPECT_EQ(printable_utf8("\xc2\x9b"), "\\xc2\\x9b");  // C1 CSI, U+009B
  EXPECT_EQ(printable_utf8("\xc2\xa0"), "\xc2\xa0");      // U+00A0, the first after C1, is text
}

// Undoes printable_utf8's escapes: for input without backslashes nothing may be lost.
std::string unescape(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] == 'x') {
      out += static_cast<char>(std::stoi(s.substr(i + 2, 2), nullptr, 16));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

TEST(PrintableUtf8, RandomBytesComeOutAsValidUtf8AndLoseNothing) {
  std::mt19937 random(7);
  std::uniform_int_distribution<int> byte(0, 255), length(0, 40);
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes;
    for (int n = length(random); n > 0; --n) {
      const int b = byte(random);
      if (b != '\\') bytes += static_cast<char>(b);
    }
    const std::string text = printable_utf8(bytes);
    ASSERT_EQ(unescape(text), bytes);
    // Valid UTF-8, by the definition's byte ranges (RFC 3629), with no control character left
    // but newline and tab.
    for (std::size_t i = 0; i < text.size();) {
      const auto c = static_cast<unsigned char>(text[i]);
      auto cont = [&](std::size_t k, unsigned lo = 0x80, unsigned hi = 0xbf) {
        const auto x = static_cast<unsigned char>(text[i + k]);
        return i + k < text.size() && x >= lo && x <= hi;
      };
      std::size_t n = 0;
      if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f)) n = 1;
      else if (c == 0xc2) n = cont(1, 0xa0) ? 2 : 0;
      else if (c >= 0xc3 && c <= 0xdf) n = cont(1) ? 2 : 0;
      else if (c == 0xe0) n = cont(1, 0xa0) && cont(2) ? 3 : 0;
      else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) n = cont(1) && cont(2) ? 3 : 0;
      else if (c == 0xed) n = cont(1, 0x80, 0x9f) && cont(2) ? 3 : 0;
      else if (c == 0xf0) n = cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
      else if (c >= 0xf1 && c <= 0xf3) n = cont(1) && cont(2) && cont(3) ? 4 : 0;
      else if (c == 0xf4) n = cont(1, 0x80, 0x8f) && cont(2) && cont(3) ? 4 : 0;
      ASSERT_GT(n, 0u) << "byte " << int(c) << " at " << i << " of the output for input of " << bytes.size()
                       << " bytes";
      i += n;
    }
  }
}

TEST(RenderTokens, ByteSamplesAreValidUtf8) {
  // "é" as two byte tokens, a lone 0xff, an escape character, a newline; an id beyond the
  // tokenizer's vocabulary as <id>.
  const auto bytes = make_tokenizer(TokenizerKind::byte, {});
  EXPECT_EQ(render_text({'a', 0xc3, 0xa9, 0xff, 0x1b, '\n'}, *bytes), "a\xc3\xa9\\xff\\x1b\n");
  EXPECT_EQ(render_text({'a', 0xc3, 300, 0xa9}, *bytes), "a\\xc3<300>\\xa9");
  EXPECT_EQ(render_ids({5, 300, 7}), "5 300 7");
}

TEST(FormatFixed, NanIsNanWhateverItsSign) {
  EXPECT_EQ(format_fixed(std::nan(""), 4), "nan");
  EXPECT_EQ(format_fixed(-std::nan(""), 4), "nan");
  EXPECT_EQ(format_fixed(std::numeric_limits<double>::infinity(), 2), "inf");
  EXPECT_EQ(format_fixed(2.0 / 3.0, 3), "0.667");
}

}  // namespace
}  // namespace st
