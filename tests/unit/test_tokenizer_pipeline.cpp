// tokenizer.json's steps (lib/tokenizer/pipeline*.{hpp,cpp}, hf_pipeline.cpp): each pre-tokenizer's
// pieces by Hugging Face's rules, ICU's regex against the hand-written GPT-2 and cl100k matchers,
// the normalizers and decoders, SentencePiece-style BPE with byte fallback, and refusals. Token for
// token equality with Hugging Face's tokenizers on real texts is the e2e test hf_tokenizers.py.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "temp_dir.hpp"
#include "core/error.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/hf_pipeline.hpp"
#include "tokenizer/icu_regex.hpp"
#include "tokenizer/pipeline_run.hpp"
#include "tokenizer/pretokenize.hpp"
#include "tokenizer/pretokenize_cl100k.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/tokenizer_files.hpp"

namespace st {
namespace {

using nlohmann::json;
using Pieces = std::vector<std::string>;
const std::string kMeta = "\xE2\x96\x81";  // ▁

// The pieces of `text` under a pre_tokenizer (and normalizer) written as in tokenizer.json.
Pieces pieces(const json& pre_tokenizer, std::string_view text, const json& normalizer = nullptr) {
  const TextPipeline steps = read_hf_text_steps({{"pre_tokenizer", pre_tokenizer}, {"normalizer", normalizer}}, "t.json");
  PieceSplitter splitter(steps, "t.json");
  Pieces out;
  splitter.split(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

json split(const json& pattern, const char* behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", invert}};
}
json sequence(const json& steps) { return {{"type", "Sequence"}, {"pretokenizers", steps}}; }

// The examples of tokenizers' SplitDelimiterBehavior documentation.
TEST(PipelineSplit, EachBehaviorAsHuggingFaces) {
  const json dash = {{"String", "-"}};
  const std::string text = "the-final--countdown";
  EXPECT_EQ(pieces(split(dash, "Isolated"), text), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(pieces(split(dash, "Removed"), text), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(pieces(split(dash, "MergedWithPrevious"), text), (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(pieces(split(dash, "MergedWithNext"), text), (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(pieces(split(dash, "Contiguous"), text), (Pieces{"the", "-", "final", "--", "countdown"}));
  // Inverted, the pattern finds the pieces and what lies between them is the delimiter.
  EXPECT_EQ(pieces(split({{"Regex", "\\p{L}+"}}, "Removed", true), text), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(pieces(split({{"Regex", "\\p{L}+"}}, "Isolated", true), text), pieces(split(dash, "Contiguous"), text));
  EXPECT_EQ(pieces(split({{"Regex", "\\s+"}}, "MergedWithPrevious"), "a b  c\n"), (Pieces{"a ", "b  ", "c\n"}));
  // A regex's "." and "$" see only "\n" as a line break, as Oniguruma's do; \s is White_Space.
  EXPECT_EQ(pieces(split({{"Regex", ".+$"}}, "Isolated"), "ab\r\ncd\xC2\x85" "e"), (Pieces{"ab\r", "\n", "cd\xC2\x85" "e"}));
  EXPECT_EQ(pieces(split({{"Regex", "\\s"}}, "Removed"), "a\xC2\x85" "b\vc"), (Pieces{"a", "b", "c"}));
  EXPECT_EQ(pieces(split({{"Regex", "[^\\s]+"}}, "Removed", true), "a\xC2\x85" "b"), (Pieces{"a", "b"}));
}

TEST(PipelineDigits, AloneOrInRunsOfAnyNumberCharacter) {
  const json alone = {{"type", "Digits"}, {"individual_digits", true}};
  const json runs = {{"type", "Digits"}, {"individual_digits", false}};
  // Rust's char::is_numeric: \p{N}, so Arabic-Indic digits, fractions and Roman numerals too.
  EXPECT_EQ(pieces(alone, "abc 123 \xC2\xBDx\xD9\xA3"), (Pieces{"abc ", "1", "2", "3", " ", "\xC2\xBD", "x", "\xD9\xA3"}));
  EXPECT_EQ(pieces(runs, "abc 123 \xC2\xBDx\xD9\xA3"), (Pieces{"abc ", "123", " ", "\xC2\xBD", "x", "\xD9\xA3"}));
}

TEST(PipelineByteLevel, SmolLm2sSequenceSplitsDigitsThenByGpt2sPattern) {
  // SmolLM2's pre_tokenizer, as its tokenizer.json has it.
  const json smollm2 = json::parse(
      R"({"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},)"
      R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}]})");
  EXPECT_EQ(pieces(smollm2, "In 2024, it's 12.5 km"),
            (Pieces{"In", " ", "2", "0", "2", "4", ",", " it", "'s", " ", "1", "2", ".", "5", " km"}));
  // add_prefix_space puts a space before every piece it is given that lacks one.
  const json prefixed = sequence({split({{"String", " "}}, "Isolated"),
                                  {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}}});
  EXPECT_EQ(pieces(prefixed, "a b"), (Pieces{" a", " ", " b"}));
  EXPECT_EQ(pieces({{"type", "ByteLevel"}, {"add_prefix_space", true}}, "Hi there"), (Pieces{" Hi", " there"}));
}

TEST(PipelineMetaspace, ReplacesSpacesPrependsAndSplits) {
  auto meta = [](const char* prepend, bool split_pieces) {
    return json{{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", prepend},
                {"split", split_pieces}};
  };
  const std::string text = "Hey  friend";
  EXPECT_EQ(pieces(meta("first", true), text), (Pieces{kMeta + "Hey", kMeta, kMeta + "friend"}));
  EXPECT_EQ(pieces(meta("first", false), text), (Pieces{kMeta + "Hey" + kMeta + kMeta + "friend"}));
  EXPECT_EQ(pieces(meta("never", true), text), (Pieces{"Hey", kMeta, kMeta + "friend"}));
  // "first" prepends only at the start of the text; "always" before every piece it is given.
  const json dash = split({{"String", "-"}}, "Removed");
  EXPECT_EQ(pieces(sequence({dash, meta("first", false)}), "a-b"), (Pieces{kMeta + "a", "b"}));
  EXPECT_EQ(pieces(sequence({dash, meta("always", false)}), "a-b"), (Pieces{kMeta + "a", kMeta + "b"}));
  // The older form: add_prefix_space true is "always".
  EXPECT_EQ(pieces({{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"add_prefix_space", true}}, "a b"),
            (Pieces{kMeta + "a", kMeta + "b"}));
}

TEST(PipelineNormalizer, NfcPrependAndReplace) {
  EXPECT_EQ(normalize_text({{NormalizerStep::Kind::nfc, "", ""}}, "cafe\xCC\x81 \xFF x"), "caf\xC3\xA9 \xFF x")
      << "NFC composes e + U+0301; a byte that is not UTF-8 stays";
  const json llama2 = json::parse(R"({"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},)"
                                  R"({"type":"Replace","pattern":{"String":" "},"content":"▁"}]})");
  EXPECT_EQ(pieces(nullptr, "Hello  world", llama2), (Pieces{kMeta + "Hello" + kMeta + kMeta + "world"}));
}

TEST(PipelineDecoder, StepsAsHuggingFaces) {
  using Kind = DecoderStep::Kind;
  const std::vector<DecoderStep> llama2 = {
      {Kind::replace, kMeta, " ", 0, 0, PrependScheme::always}, {Kind::byte_fallback, "", "", 0, 0, PrependScheme::always},
      {Kind::fuse, "", "", 0, 0, PrependScheme::always}, {Kind::strip, " ", "", 1, 0, PrependScheme::always}};
  EXPECT_EQ(decode_token_strings(llama2, {kMeta + "Hello", kMeta + "wor", "ld", "<0x0A>", "<0xE6>", "<0x97>", "<0xA5>"}),
            "Hello world\n\xE6\x97\xA5");
  EXPECT_EQ(decode_token_strings(llama2, {"<0xE6>", "<0x97>", "x"}), "\xEF\xBF\xBD\xEF\xBF\xBDx")
      << "byte tokens that are not UTF-8 are U+FFFD each";
  EXPECT_EQ(decode_token_strings(llama2, {"<s>", kMeta + "Hi"}), "<s> Hi") << "the space after <s> is not stripped";
  const std::vector<DecoderStep> metaspace = {{Kind::metaspace, kMeta, "", 0, 0, PrependScheme::always}};
  EXPECT_EQ(decode_token_strings(metaspace, {kMeta + "Hi" + kMeta, kMeta + "there"}), "Hi there")
      << "in the first token every replacement character is dropped";
  EXPECT_EQ(decode_token_strings({}, {"a", "b"}), "a b") << "no decoder: joined by spaces";
}

// A many-scripts text like tests/e2e/many_scripts.py's: scripts, digits, spaces, contractions.
std::string many_scripts(unsigned seed, int pieces_count) {
  std::mt19937 random(seed);
  const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7e}, {0x20, 0x7e}, {0x20, 0x7e}, {0xa0, 0x24f}, {0x370, 0x3ff}, {0x400, 0x4ff}, {0x5d0, 0x5ea},
      {0x620, 0x64a}, {0x660, 0x669}, {0x900, 0x97f}, {0xe01, 0xe3a}, {0x2000, 0x206f}, {0x2150, 0x218f},
      {0x2460, 0x24ff}, {0x3000, 0x303f}, {0x3041, 0x30ff}, {0x4e00, 0x4fff}, {0xac00, 0xacff}, {0x1f300, 0x1f64f},
      {0xff01, 0xff5e}, {0x1d400, 0x1d454}};
  const std::vector<std::string> spaces = {" ", "  ", "\n", "\n\n", "\t", " \n", "\r\n", "\xC2\xA0", "\xE3\x80\x80",
                                           "\xE2\x80\xA8", "\xC2\x85", "   \n  ", "\v", "\f"};
  const std::vector<std::string> words = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "''", " 's", "123",
                                          "12345678", "\xD9\xA3\xD9\xA4\xD9\xA5", "\xE2\x85\xAB", "\xC2\xBD", "x\xC2\xB2",
                                          "caf\xC3\xA9", "e\xCC\x81", "\xF0\x9F\x8E\x89", "'\xC5\xBF"};
  std::string out;
  auto append = [&](char32_t cp) {
    if (cp < 0x80) out += static_cast<char>(cp);
    else if (cp < 0x800) out += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    else if (cp < 0x10000)
      out += {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
              static_cast<char>(0x80 | (cp & 0x3F))};
    else
      out += {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
              static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
  };
  for (int i = 0; i < pieces_count; ++i) {
    const double k = std::uniform_real_distribution<double>(0, 1)(random);
    if (k < 0.3) out += spaces[random() % spaces.size()];
    else if (k < 0.5) out += words[random() % words.size()];
    else {
      const auto [lo, hi] = ranges[random() % ranges.size()];
      for (int n = 1 + static_cast<int>(random() % 8); n > 0; --n) append(lo + static_cast<char32_t>(random() % (hi - lo + 1)));
    }
  }
  return out;
}

std::vector<std::string> comparison_texts() {
  std::vector<std::string> texts = {many_scripts(2025, 40000), many_scripts(7, 5000)};
  std::ifstream in(std::string(ST_SOURCE_DIR) + "/data/fortunes.txt", std::ios::binary);
  std::string fortunes(400000, '\0');
  in.read(fortunes.data(), static_cast<std::streamsize>(fortunes.size()));
  fortunes.resize(static_cast<std::size_t>(in.gcount()));
  if (!fortunes.empty()) texts.push_back(fortunes);
  return texts;
}

using Spans = std::vector<std::pair<std::size_t, std::size_t>>;

template <class HandWritten>
Spans hand_spans(const std::string& text) {
  Spans out;
  HandWritten().split(text, [&](std::size_t at, std::size_t n) { out.emplace_back(at, at + n); });
  return out;
}

// ICU with the rewritten pattern finds exactly the hand-written matchers' pieces, so any other
// regex it runs is run as those two are.
TEST(IcuRegex, MatchesTheHandWrittenPatterns) {
  IcuRegex gpt2(kGpt2Pattern, "gpt2"), cl100k(kCl100kPattern, "cl100k");
  for (const std::string& text : comparison_texts()) {
    Spans icu;
    gpt2.find_all(text, icu);
    EXPECT_EQ(icu, hand_spans<Gpt2PreTokenizer>(text)) << "GPT-2's pattern on a text of " << text.size() << " bytes";
    icu.clear();
    cl100k.find_all(text, icu);
    EXPECT_EQ(icu, hand_spans<Cl100kPreTokenizer>(text)) << "cl100k's pattern on a text of " << text.size() << " bytes";
  }
}

// Qwen2's pattern, run by ICU, ends a piece after every "\n" between printable ASCII characters:
// what lets ranks cut a stream there (TextPipeline::cuts_streams_at_line_breaks).
TEST(IcuRegex, Qwen2sPatternEndsPiecesAtLineBreaks) {
  IcuRegex qwen2(kQwen2Pattern, "qwen2");
  std::string text = many_scripts(3, 20000);
  for (const char* line : {"a\nb", "1\n2", ".\n.", "x.\n(", "'\nd", "!!\n12", "z\n'll", "a\r\nb"}) text += line;
  Spans spans;
  qwen2.find_all(text, spans);
  std::vector<bool> starts(text.size() + 1, false);
  std::size_t at = 0;
  for (const auto& [start, end] : spans) {
    ASSERT_EQ(start, at) << "the pieces tile the text";
    starts[start] = true;
    at = end;
  }
  auto printable = [](char c) { return c >= '!' && c <= '~'; };
  int cuts = 0;
  for (std::size_t p = 2; p < text.size(); ++p)
    if (text[p - 1] == '\n' && printable(text[p - 2]) && printable(text[p])) {
      EXPECT_TRUE(starts[p]) << "no piece starts at " << p;
      ++cuts;
    }
  EXPECT_GT(cuts, 6);
}

class HfFiles : public TempDirTest {
 protected:
  // A Llama 2-style tokenizer.json: <unk> <s> </s>, the 256 byte tokens, ▁ and a few letters, and
  // the merges ▁ h, e l, el l, ▁h ell, ell o... giving ▁hello; the legacy normalizer.
  json llama2() const {
    json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
    const char* hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) vocab[std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">"] = 3 + b;
    int next = 259;
    for (const std::string& t : {kMeta, std::string("h"), std::string("e"), std::string("l"), std::string("o"),
                                std::string("w"), std::string("r"), std::string("d"), kMeta + "h", std::string("el"),
                                std::string("ell"), kMeta + "hell", kMeta + "hello", kMeta + "w", std::string("or"),
                                kMeta + "wor", kMeta + "worl", kMeta + "world", kMeta + kMeta})
      vocab[t] = next++;
    const json merges = json::array({kMeta + " h", "e l", "el l", kMeta + "h ell", kMeta + "hell o", kMeta + " w",
                                     "o r", kMeta + "w or", kMeta + "wor l", kMeta + "worl d",
                                     kMeta + " " + kMeta});
    json file = json::parse(R"({"version":"1.0","added_tokens":[{"id":0,"content":"<unk>","special":true},)"
                       R"({"id":1,"content":"<s>","special":true},{"id":2,"content":"</s>","special":true}],)"
                       R"("normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},)"
                       R"({"type":"Replace","pattern":{"String":" "},"content":"▁"}]},"pre_tokenizer":null,)"
                       R"("decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},)"
                       R"("content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ",)"
                       R"("start":1,"stop":0}]}})");
    file["model"] = {{"type", "BPE"}, {"byte_fallback", true}, {"unk_token", "<unk>"}, {"fuse_unk", true},
                     {"vocab", vocab}, {"merges", merges}};
    return file;
  }
  std::string write(const json& file) const {
    std::ofstream(path("tokenizer.json"), std::ios::binary) << file.dump();
    return path("tokenizer.json");
  }
  std::string error(const json& file, TokenizerPattern pattern = TokenizerPattern::automatic) const {
    try {
      read_hf_tokenizer(write(file), pattern);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(HfFiles, ByteFallbackBpeEncodesCharactersAndBytes) {
  const auto t = make_tokenizer(TokenizerKind::hf, {write(llama2())});
  const int hello = 259 + 12, world = 259 + 17, meta = 259, o = 259 + 4;
  // "▁hello" is merged from ▁ h e l l o (the vocabulary lacks "l l", so "el l" and so on).
  EXPECT_EQ(t->encode("hello world"), (std::vector<int>{hello, world}));
  // "é" is not in the vocabulary: its two bytes' fallback tokens; so is a byte that is not UTF-8.
  EXPECT_EQ(t->encode("h\xC3\xA9"), (std::vector<int>{259 + 8, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t->encode("o\xFF"), (std::vector<int>{meta, o, 3 + 0xFF}));
  EXPECT_EQ(t->encode("  world"), (std::vector<int>{259 + 18, world})) << "▁world first (rank 9), then ▁ ▁";
  EXPECT_EQ(t->decode(t->encode("hello world\nhello")), "hello world\nhello");
  EXPECT_EQ(t->decode(std::vector<int>{1, hello}), "<s> hello");
  EXPECT_EQ(t->document_start(), 1);
  EXPECT_FALSE(t->cuts_streams_at_line_breaks()) << "a ▁ before the text: a stream is encoded whole";
  EXPECT_NE(t->description().find("hf (BPE with byte fallback, 278 tokens, normalizer Prepend+Replace, no "
                                  "pre-tokenizer, from "),
            std::string::npos)
      << t->description();
  // Mistral's form of the same: Metaspace prepending at the start of the text only, no split.
  json mistral = llama2();
  mistral["normalizer"] = nullptr;
  mistral["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "first"}, {"split", false}};
  const auto m = make_tokenizer(TokenizerKind::hf, {write(mistral)});
  for (const char* text : {"hello world", "o\xFF hello\n world"}) EXPECT_EQ(m->encode(text), t->encode(text));
  EXPECT_EQ(m->encode(" world"), (std::vector<int>{world})) << "a text that starts with a space gets no second ▁";
  // ignore_merges: a piece that is a token is that token, however the merges would go.
  json whole = mistral;
  whole["model"]["merges"] = json::array({kMeta + " h"});
  EXPECT_EQ(make_tokenizer(TokenizerKind::hf, {write(whole)})->encode("hello"),
            (std::vector<int>{259 + 8, 259 + 2, 259 + 3, 259 + 3, o}));
  whole["model"]["ignore_merges"] = true;
  EXPECT_EQ(make_tokenizer(TokenizerKind::hf, {write(whole)})->encode("hello"), (std::vector<int>{hello}));
}

TEST_F(HfFiles, ByteLevelPipelinesAndWhichCutStreams) {
  // SmolLM2's pre-tokenizer on a byte-level vocabulary: it cuts streams where GPT-2's does.
  json file = llama2();
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    const char32_t c = gpt2_byte_alphabet()[static_cast<std::size_t>(b)];
    std::string spelled;
    if (c < 0x80) spelled += static_cast<char>(c);
    else spelled += {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    vocab[spelled] = b;
  }
  vocab["12"] = 256;
  file["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"1 2"})}};
  file["normalizer"] = nullptr;
  file["decoder"] = {{"type", "ByteLevel"}};
  file["added_tokens"] = json::array();
  file["pre_tokenizer"] = json::parse(
      R"({"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},)"
      R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}]})");
  auto t = make_tokenizer(TokenizerKind::hf, {write(file)});
  EXPECT_EQ(t->encode("12 x12"), (std::vector<int>{'1', '2', ' ', 'x', '1', '2'})) << "digits alone: no 12";
  EXPECT_TRUE(t->cuts_streams_at_line_breaks());
  EXPECT_EQ(t->decode(t->encode("any\xFF bytes 123\n")), "any\xFF bytes 123\n");
  file["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = false;
  EXPECT_EQ(make_tokenizer(TokenizerKind::hf, {write(file)})->encode("12 x12"), (std::vector<int>{256, ' ', 'x', 256}));
  // Qwen2's: NFC and its pattern by ICU.
  file["normalizer"] = {{"type", "NFC"}};
  file["pre_tokenizer"] = sequence({split({{"Regex", kQwen2Pattern}}, "Isolated"),
                                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}});
  t = make_tokenizer(TokenizerKind::hf, {write(file)});
  EXPECT_EQ(t->encode("e\xCC\x81"), (std::vector<int>{0xC3, 0xA9})) << "NFC: é";
  EXPECT_TRUE(t->cuts_streams_at_line_breaks());
  EXPECT_NE(t->description().find("normalizer NFC, pre-tokenizer Split(qwen2)+ByteLevel"), std::string::npos);
  // Another regex, or a space before the text, and streams are encoded whole.
  file["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{L}+|\\p{N}+|[^\\p{L}\\p{N}]+";
  EXPECT_FALSE(make_tokenizer(TokenizerKind::hf, {write(file)})->cuts_streams_at_line_breaks());
  file["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  t = make_tokenizer(TokenizerKind::hf, {write(file)});
  EXPECT_FALSE(t->cuts_streams_at_line_breaks());
  EXPECT_EQ(t->encode("x"), (std::vector<int>{' ', 'x'}));
}

TEST_F(HfFiles, WhatIsNotSupportedIsRefusedByKey) {
  auto has = [](const std::string& e, const std::string& part) {
    return e.find(part) != std::string::npos ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << e;
  };
  const std::string file = "tokenizer file '" + path("tokenizer.json") + "': ";
  json f = llama2();
  f["normalizer"]["normalizers"][1] = {{"type", "Lowercase"}};
  EXPECT_TRUE(has(error(f), file + "normalizer.normalizers[1] is a Lowercase normalizer; this reader takes the "
                                   "normalizers of byte-level and SentencePiece-style BPE models: null, NFC"));
  f = llama2();
  f["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", "\\s"}};
  EXPECT_TRUE(has(error(f), file + "normalizer.normalizers[1].pattern is {\"Regex\":\"\\\\s\"}; expected "
                                   "{\"String\": text}"));
  f = llama2();
  f["pre_tokenizer"] = sequence({{{"type", "Whitespace"}}});
  EXPECT_TRUE(has(error(f), file + "pre_tokenizer.pretokenizers[0] is a Whitespace pre-tokenizer; this reader takes "
                                   "the pre-tokenizers ByteLevel, Split, Digits, Metaspace"));
  f["pre_tokenizer"] = split({{"Regex", "(unclosed"}}, "Isolated");
  EXPECT_TRUE(has(error(f), file + "pre_tokenizer.pattern.Regex is a regex ICU cannot compile"));
  f["pre_tokenizer"] = split({{"Regex", "x"}}, "Merged");
  EXPECT_TRUE(has(error(f), file + "pre_tokenizer.behavior is \"Merged\"; expected Isolated, Removed"));
  f["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kMeta}, {"add_prefix_space", false},
                        {"prepend_scheme", "always"}};
  EXPECT_TRUE(has(error(f), file + "pre_tokenizer.add_prefix_space is false but prepend_scheme is \"always\""));
  f = llama2();
  f["decoder"]["decoders"][2] = {{"type", "WordPiece"}};
  EXPECT_TRUE(has(error(f), file + "decoder.decoders[2] is a WordPiece decoder; a tokenizer with byte fallback takes"));
  f = llama2();
  f["model"]["byte_fallback"] = false;
  EXPECT_TRUE(has(error(f), file + "pre_tokenizer has no ByteLevel step (normalizer Prepend+Replace, no "
                                   "pre-tokenizer) and model.byte_fallback is not true"));
  f = llama2();
  f["model"]["vocab"].erase("<0x41>");
  EXPECT_TRUE(has(error(f), file + "model.vocab lacks the byte-fallback token <0x41>"));
  f = llama2();
  f["model"]["continuing_subword_prefix"] = "##";
  EXPECT_TRUE(has(error(f), file + "model.continuing_subword_prefix is \"##\""));
  f = llama2();
  f["model"]["merges"][1] = "e x";
  EXPECT_TRUE(has(error(f), file + "model.merges[1]: token 'x' is not in model.vocab"));
  EXPECT_TRUE(has(error(llama2(), TokenizerPattern::cl100k),
                  "data.tokenizer_pattern = \"cl100k\" but the tokenizer file '" + path("tokenizer.json") +
                      "' has steps of its own"));
}

}  // namespace
}  // namespace st
