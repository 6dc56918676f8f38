// cl100k's pre-tokenizer against its pattern read by hand, small tokenizer.json and tiktoken rank
// files (their merging, special tokens and errors), and uint32 token files. Token-for-token
// equality with tiktoken on real texts is the e2e test cl100k_tokenizer.py.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "temp_dir.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/pretokenize_cl100k.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/tokenizer_files.hpp"

namespace st {
namespace {

using Pieces = std::vector<std::string>;
using nlohmann::json;

Pieces pieces(std::string_view text) {
  Pieces out;
  Cl100kPreTokenizer().split(text, [&](std::size_t at, std::size_t n) { out.emplace_back(text.substr(at, n)); });
  return out;
}

// Each expectation follows from cl100k's pattern
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
// read by hand: the first alternative that matches wins, each greedy.
TEST(Cl100kPreTokenizer, FollowsItsPattern) {
  EXPECT_EQ(pieces("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces("I'M HERE, YOU'RE"), (Pieces{"I", "'M", " HERE", ",", " YOU", "'RE"})) << "any case";
  EXPECT_EQ(pieces("we'Ll don't"), (Pieces{"we", "'Ll", " don", "'t"}));
  EXPECT_EQ(pieces("x'\xC5\xBFt"), (Pieces{"x", "'\xC5\xBF", "t"})) << "'ſ folds to 's";
  EXPECT_EQ(pieces("12345 1234567"), (Pieces{"123", "45", " ", "123", "456", "7"})) << "digits by three, no space";
  EXPECT_EQ(pieces("(hello [x"), (Pieces{"(hello", " [", "x"})) << "one character that is not a letter joins a word";
  EXPECT_EQ(pieces("\tword"), (Pieces{"\tword"}));
  EXPECT_EQ(pieces("\nword"), (Pieces{"\n", "word"})) << "but not a line break";
  EXPECT_EQ(pieces("...\n\nx"), (Pieces{"...\n\n", "x"})) << "punctuation takes the line breaks after it";
  EXPECT_EQ(pieces("a  \n\n  b"), (Pieces{"a", "  \n\n", " ", " b"})) << "white space up to its last line break";
  EXPECT_EQ(pieces("x\r\ny"), (Pieces{"x", "\r\n", "y"}));
  EXPECT_EQ(pieces("   x"), (Pieces{"  ", " x"}));
  EXPECT_EQ(pieces(" 42"), (Pieces{" ", "42"}));
  EXPECT_EQ(pieces("end   "), (Pieces{"end", "   "}));
  EXPECT_EQ(pieces(" !?"), (Pieces{" !?"}));
  EXPECT_EQ(pieces("日本語 テスト"), (Pieces{"日本語", " テスト"}));
  EXPECT_EQ(pieces("\xff\xfe" "ab"), (Pieces{"\xff\xfe", "ab"})) << "bytes that are not UTF-8 are other characters";
  // The pieces tile any text.
  const std::string text = "Mixed\r\n\t  TEXT's 1234 \xe2\x80\xa8 \xf0\x9f\x8e\x89!!\n\n";
  std::string joined;
  for (const auto& p : pieces(text)) joined += p;
  EXPECT_EQ(joined, text);
}

class TokenizerFiles : public TempDirTest {
 protected:
  static std::string spell(const std::string& bytes) {
    std::string out;
    for (const unsigned char b : bytes) {
      const char32_t c = gpt2_byte_alphabet()[b];
      if (c < 0x80) out += static_cast<char>(c);
      else out += static_cast<char>(0xC0 | (c >> 6)), out += static_cast<char>(0x80 | (c & 0x3F));
    }
    return out;
  }
  // The 256 bytes, then ab, bc, abc; merges a b, b c, ab c (the second as a pair); the cl100k
  // Split; <|begin_of_text|> and <|end_of_text|> as added tokens.
  json small_tokenizer() const {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[spell(std::string(1, static_cast<char>(b)))] = b;
    vocab["ab"] = 256, vocab["bc"] = 257, vocab["abc"] = 258;
    return {{"version", "1.0"},
            {"normalizer", nullptr},
            {"added_tokens", json::array({{{"id", 259}, {"content", "<|begin_of_text|>"}, {"special", true}},
                                          {{"id", 260}, {"content", "<|end_of_text|>"}, {"special", true}}})},
            {"pre_tokenizer",
             {{"type", "Sequence"},
              {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", kCl100kPattern}}},
                                              {"behavior", "Isolated"}, {"invert", false}},
                                             {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b", json::array({"b", "c"}), "ab c"})}}}};
  }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }
  std::string hf_error(const json& file) const {
    try {
      read_hf_tokenizer(write("tokenizer.json", file.dump()));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  std::string ranks_error(const std::string& name, const std::string& text,
                          TokenizerPattern pattern = TokenizerPattern::cl100k) const {
    try {
      read_tiktoken_ranks(write(name, text), pattern);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  static std::string base64(const std::string& bytes) {
    static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (std::size_t i = 0; i < bytes.size(); i += 3) {
      unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
      if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
      if (i + 2 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 2]);
      out += digits[v >> 18], out += digits[(v >> 12) & 63];
      out += i + 1 < bytes.size() ? digits[(v >> 6) & 63] : '=';
      out += i + 2 < bytes.size() ? digits[v & 63] : '=';
    }
    return out;
  }
  // Bytes at ranks 0..255 in byte order, then ab, bc, abc.
  static std::string small_ranks() {
    std::string text;
    for (int b = 0; b < 256; ++b) text += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
    return text + base64("ab") + " 256\n" + base64("bc") + " 257\n" + base64("abc") + " 258\n";
  }
};

TEST_F(TokenizerFiles, ATokenizerJsonMergesAndKeepsItsSpecialTokens) {
  write("tokenizer.json", small_tokenizer().dump());
  const auto t = make_tokenizer(TokenizerKind::hf, {dir_.string()});  // the directory holding it
  EXPECT_EQ(t->vocab_size(), 261);
  EXPECT_EQ(t->document_start(), 259) << "<|begin_of_text|> before <|end_of_text|>";
  EXPECT_EQ(t->encode("abc"), (std::vector<int>{258}));
  EXPECT_EQ(t->encode("abcab bcd"), (std::vector<int>{258, 256, ' ', 257, 'd'}));
  EXPECT_EQ(t->encode("<|begin_of_text|>").size(), 17u) << "special tokens are not recognised in text";
  EXPECT_EQ(t->decode(std::vector<int>{259, 258, 260}), "<|begin_of_text|>abc<|end_of_text|>");
  EXPECT_NE(t->description().find("hf (byte-level BPE, 261 tokens, cl100k pattern, from " + path("tokenizer.json")),
            std::string::npos);
  // Without a beginning of text, documents start from the end-of-text token.
  json no_bos = small_tokenizer();
  no_bos["added_tokens"].erase(0);
  write("tokenizer.json", no_bos.dump());
  EXPECT_EQ(make_tokenizer(TokenizerKind::hf, {path("tokenizer.json")})->document_start(), 260);
  // GPT-2's pre-tokenizer spelled as ByteLevel with its regex: "'S" splits in GPT-2's pattern.
  json gpt2 = small_tokenizer();
  gpt2["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  write("tokenizer.json", gpt2.dump());
  EXPECT_EQ(make_tokenizer(TokenizerKind::hf, {path("tokenizer.json")})->encode("'S"), (std::vector<int>{'\'', 'S'}));
  EXPECT_EQ(read_hf_tokenizer(path("tokenizer.json")).pattern, PreTokenizerPattern::gpt2);
}

TEST_F(TokenizerFiles, TokenizerJsonMistakesAreNamed) {
  auto has = [](const std::string& e, const std::string& part) {
    return e.find(part) != std::string::npos ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << e;
  };
  const std::string file = "tokenizer file '" + path("tokenizer.json") + "': ";
  // Other pre-tokenizers and normalizers are read (tests/unit/test_tokenizer_pipeline.cpp); the
  // ones this reader lacks are refused by key.
  json other = small_tokenizer();
  other["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{N}|\\s+";
  EXPECT_EQ(read_hf_tokenizer(write("tokenizer.json", other.dump())).pattern, PreTokenizerPattern::custom);
  json punctuation = small_tokenizer();
  punctuation["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Punctuation"}};
  EXPECT_TRUE(has(hf_error(punctuation), file + "pre_tokenizer.pretokenizers[0] is a Punctuation pre-tokenizer"));
  json normalized = small_tokenizer();
  normalized["normalizer"] = {{"type", "NFKC"}};
  EXPECT_TRUE(has(hf_error(normalized), file + "normalizer is a NFKC normalizer"));
  json bad_merge = small_tokenizer();
  bad_merge["model"]["merges"][2] = json::array({"ab", "x"});
  EXPECT_TRUE(has(hf_error(bad_merge), file + "model.merges[2]: merging 'ab' and 'x' gives a token that the "));
  bad_merge["model"]["merges"][2] = 7;
  EXPECT_TRUE(has(hf_error(bad_merge), file + "model.merges[2] is 7; expected \"a b\" or [\"a\", \"b\"]"));
  json missing_byte = small_tokenizer();
  missing_byte["model"]["vocab"].erase(spell("z"));
  EXPECT_TRUE(has(hf_error(missing_byte), "lacks the one-byte token of byte 0x7A"));
  json no_bytes = small_tokenizer();
  no_bytes["pre_tokenizer"]["pretokenizers"].erase(1);
  EXPECT_TRUE(has(hf_error(no_bytes), file + "pre_tokenizer has no ByteLevel step"));
  EXPECT_TRUE(has(hf_error(json::array()), file + "no \"model\" object"));
  try {
    read_hf_tokenizer(write("tokenizer.json", small_tokenizer().dump()), TokenizerPattern::gpt2);
    ADD_FAILURE() << "a pattern other than the file's is refused";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "data.tokenizer_pattern = \"gpt2\" but the tokenizer file"));
  }
  EXPECT_THROW(make_tokenizer(TokenizerKind::hf, {path("a"), path("b")}), Error);
  EXPECT_THROW(make_tokenizer(TokenizerKind::gpt2, {}, TokenizerPattern::cl100k), Error)
      << "a pattern applies to hf and tiktoken only";
}

TEST_F(TokenizerFiles, ARankFileMergesByRank) {
  const auto t =
      make_tokenizer(TokenizerKind::tiktoken, {write("small.tiktoken", small_ranks())}, TokenizerPattern::cl100k);
  EXPECT_EQ(t->vocab_size(), 259);
  EXPECT_EQ(t->encode("abc"), (std::vector<int>{258}));
  EXPECT_EQ(t->encode("xabcd"), (std::vector<int>{'x', 258, 'd'})) << "x abc: ab, then ab + c";
  EXPECT_EQ(t->encode("I'LL"), (std::vector<int>{'I', '\'', 'L', 'L'}));
  EXPECT_EQ(t->document_start(), '\n') << "a rank file of another name has no special tokens";
  // Named cl100k_base: cl100k's pattern and special tokens; ids without a token decode to nothing.
  const auto named = make_tokenizer(TokenizerKind::tiktoken, {write("cl100k_base.tiktoken", small_ranks())});
  EXPECT_EQ(named->vocab_size(), 100277);
  EXPECT_EQ(named->document_start(), 100257);
  EXPECT_EQ(named->decode(std::vector<int>{258, 100257, 5000, 100276}), "abc<|endoftext|><|endofprompt|>");
}

TEST_F(TokenizerFiles, RankFileMistakesAreNamed) {
  auto has = [](const std::string& e, const std::string& part) {
    return e.find(part) != std::string::npos ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << e;
  };
  EXPECT_TRUE(has(ranks_error("r.tiktoken", small_ranks(), TokenizerPattern::automatic),
                  "tiktoken rank file '" + path("r.tiktoken") + "': its name does not say its encoding"));
  EXPECT_TRUE(has(ranks_error("r.tiktoken", small_ranks() + "YWJj 259\n"), "ranks 258 and 259 have the same bytes"));
  EXPECT_TRUE(has(ranks_error("r.tiktoken", small_ranks() + "YW*j 259\n"),
                  path("r.tiktoken") + ":260: expected a base64 token, one space and its rank"));
  EXPECT_TRUE(has(ranks_error("r.tiktoken", small_ranks() + "eHl6 2x\n"), ":260: the rank '2x' is not an integer"));
  EXPECT_TRUE(has(ranks_error("r.tiktoken", small_ranks() + "eHl6 3\n"), ":260: rank 3 is given twice"));
  EXPECT_TRUE(has(ranks_error("r.tiktoken", "YQ== 0\n"), "lacks the one-byte token of byte 0x00"));
  EXPECT_TRUE(has(ranks_error("cl100k_base.tiktoken", small_ranks() + "eHl6 100257\n", TokenizerPattern::automatic),
                  "gives rank 100257 to a token, but cl100k_base has the special token <|endoftext|> there"));
}

TEST_F(TokenizerFiles, Uint32TokenFilesAreRead) {
  std::vector<std::uint32_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint32_t>((i * 7919) % 100277);
  write_token_file(path("t32.bin"), tokens.data(), tokens.size());
  std::int32_t header[3];
  std::ifstream(path("t32.bin"), std::ios::binary).read(reinterpret_cast<char*>(header), sizeof header);
  EXPECT_EQ(header[0], 20240801);
  EXPECT_EQ(header[1], 7);
  EXPECT_EQ(header[2], 1000);
  EXPECT_EQ(std::filesystem::file_size(path("t32.bin")), 1024u + 4000u);
  const TokenDataset d = TokenDataset::open(path("t32.bin"), DataFormat::automatic);
  ASSERT_EQ(d.size(), tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(d[i], static_cast<int>(tokens[i]));
  EXPECT_EQ(d.max_token(0, d.size()), static_cast<int>(*std::max_element(tokens.begin(), tokens.end())));
  EXPECT_GT(d.max_token(0, d.size()), 65535);
  std::vector<int> some(10);
  d.copy(995, 5, some.data());
  EXPECT_EQ(some[4], static_cast<int>(tokens[999]));
  // A uint16 file and a uint32 file are one stream.
  std::vector<std::uint16_t> narrow = {1, 2, 3};
  write_token_file(path("t16.bin"), narrow.data(), narrow.size());
  const TokenDataset both =
      TokenDataset::open(std::vector<std::string>{path("t16.bin"), path("t32.bin")}, DataFormat::tokens);
  EXPECT_EQ(both.size(), 1003u);
  EXPECT_EQ(both[2], 3);
  EXPECT_EQ(both[1002], static_cast<int>(tokens[999]));

  auto message = [&](const std::string& p) -> std::string {
    try {
      TokenDataset::open(p, DataFormat::tokens);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  std::filesystem::resize_file(path("t32.bin"), 1024 + 3998);
  EXPECT_NE(message(path("t32.bin")).find("declares 1000 tokens (5024 bytes with the header, 4 bytes a token) but has "
                                          "5022 bytes"),
            std::string::npos);
  header[1] = 2;
  std::fstream(path("t32.bin"), std::ios::binary | std::ios::in | std::ios::out)
      .write(reinterpret_cast<const char*>(header), sizeof header);
  EXPECT_NE(message(path("t32.bin")).find("has the magic 20240801 and version 2; this build reads that magic with version 7"),
            std::string::npos);
}

}  // namespace
}  // namespace st
