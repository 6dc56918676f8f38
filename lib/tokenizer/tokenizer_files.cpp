#include "tokenizer/tokenizer_files.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.hpp"

namespace st {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

using nlohmann::json;

const char* pattern_text(PreTokenizerPattern p) { return p == PreTokenizerPattern::gpt2 ? "gpt2" : "cl100k"; }

// Token names a model's beginning and end of text go by, in the order they are preferred.
const char* const kBeginNames[] = {"<|begin_of_text|>", "<|startoftext|>", "<s>", "<bos>"};
const char* const kEndNames[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};

void find_document_tokens(BpeVocabulary& v) {
  auto find = [&](const auto& names) {
    for (const char* name : names)
      for (const auto& [id, text] : v.special_tokens)
        if (text == name) return id;
    return std::int32_t{-1};
  };
  v.begin_of_text = find(kBeginNames);
  v.end_of_text = find(kEndNames);
}

// The file's pattern from its pre_tokenizer, or an Error that quotes what it has instead.
PreTokenizerPattern hf_pattern(const json& pre, const std::string& file) {
  const std::string allowed =
      "; this reader takes byte-level BPE pre-tokenizers: {\"type\": \"ByteLevel\", \"use_regex\": true} (GPT-2's "
      "pattern) or a Sequence of a Split by GPT-2's or cl100k's pattern and a ByteLevel with \"use_regex\": false";
  auto refuse = [&](const std::string& key, const std::string& what) -> PreTokenizerPattern {
    throw Error("tokenizer file '" + file + "': " + key + " " + what + allowed);
  };
  auto byte_level = [&](const json& p, const std::string& key, bool regex) {
    if (p.value("add_prefix_space", false))
      refuse(key + ".add_prefix_space", "is true (a space would be added before the text)");
    if (p.value("use_regex", true) != regex)
      refuse(key + ".use_regex", std::string("is ") + (regex ? "false" : "true") + " here");
  };
  auto split = [&](const json& p, const std::string& key) {
    const json* regex = p.contains("pattern") && p["pattern"].is_object() && p["pattern"].contains("Regex")
                            ? &p["pattern"]["Regex"]
                            : nullptr;
    if (!regex || !regex->is_string())
      refuse(key + ".pattern", "is " + (p.contains("pattern") ? p["pattern"].dump() : std::string("missing")) +
                                   ", not {\"Regex\": pattern}");
    const std::string text = regex->get<std::string>();
    if (p.value("behavior", std::string("Isolated")) != "Isolated" || p.value("invert", false))
      refuse(key + ".behavior", "is " + p.value("behavior", std::string("?")) + " (with invert " +
                                    (p.value("invert", false) ? "true" : "false") +
                                    "); the pieces must be the matches, \"Isolated\" and not inverted");
    if (text == kGpt2Pattern) return PreTokenizerPattern::gpt2;
    if (text == kCl100kPattern) return PreTokenizerPattern::cl100k;
    return refuse(key + ".pattern.Regex", "is the pattern " + json(text).dump() +
                                              ", which this project does not implement (it implements GPT-2's " +
                                              json(kGpt2Pattern).dump() + " and cl100k's " +
                                              json(kCl100kPattern).dump() + ")");
  };
  const std::string type = pre.is_object() ? pre.value("type", std::string()) : std::string();
  if (type == "ByteLevel") {
    byte_level(pre, "pre_tokenizer", true);
    return PreTokenizerPattern::gpt2;
  }
  if (type == "Split") return split(pre, "pre_tokenizer");
  if (type == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array()) {
    const json& list = pre["pretokenizers"];
    if (list.size() == 1 && list[0].value("type", std::string()) == "ByteLevel") {
      byte_level(list[0], "pre_tokenizer.pretokenizers[0]", true);
      return PreTokenizerPattern::gpt2;
    }
    if (list.size() == 2 && list[0].value("type", std::string()) == "Split" &&
        list[1].value("type", std::string()) == "ByteLevel") {
      byte_level(list[1], "pre_tokenizer.pretokenizers[1]", false);
      return split(list[0], "pre_tokenizer.pretokenizers[0]");
    }
    std::string types;
    for (const auto& p : list) types += (types.empty() ? "" : ", ") + p.value("type", std::string("?"));
    return refuse("pre_tokenizer", "is a Sequence of [" + types + "]");
  }
  return refuse("pre_tokenizer", "is " + (pre.is_null() ? std::string("null") : pre.dump().substr(0, 200)));
}

PreTokenizerPattern chosen_pattern(PreTokenizerPattern from_file, const std::string& asked, const std::string& file) {
  if (asked == "auto") return from_file;
  const PreTokenizerPattern p = pattern_named(asked, "data.tokenizer_pattern");
  if (p != from_file)
    throw Error("data.tokenizer_pattern = \"" + asked + "\" but the tokenizer file '" + file + "' names the " +
                pattern_text(from_file) + " pattern; set \"auto\" or \"" + pattern_text(from_file) + "\"");
  return p;
}

std::string base64_decode(std::string_view text, bool& ok) {
  static const std::array<int, 256> value = [] {
    std::array<int, 256> v{};
    v.fill(-1);
    const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) v[static_cast<unsigned char>(digits[i])] = i;
    return v;
  }();
  std::string out;
  ok = text.size() % 4 == 0 && !text.empty();
  unsigned bits = 0;
  int have = 0;
  std::size_t pad = 0;
  for (std::size_t i = 0; ok && i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '=' && i + 2 >= text.size()) {
      ++pad;
      continue;
    }
    if (value[c] < 0 || pad) {
      ok = false;
      break;
    }
    bits = bits << 6 | static_cast<unsigned>(value[c]);
    have += 6;
    if (have >= 8) {
      have -= 8;
      out += static_cast<char>((bits >> have) & 0xFF);
    }
  }
  return out;
}

}  // namespace

PreTokenizerPattern pattern_named(const std::string& name, const std::string& where) {
  if (name == "gpt2") return PreTokenizerPattern::gpt2;
  if (name == "cl100k") return PreTokenizerPattern::cl100k;
  throw Error(where + " = \"" + name + "\" names no pattern this project implements; the patterns are \"gpt2\" "
              "(GPT-2, r50k_base) and \"cl100k\" (cl100k_base, Llama 3)");
}

std::string locate_hf_tokenizer(const std::vector<std::string>& files) {
  namespace fs = std::filesystem;
  if (files.size() != 1)
    throw Error("data.tokenizer = \"hf\" takes data.tokenizer_files = [tokenizer.json] or [a directory holding "
                "tokenizer.json]; this names " + std::to_string(files.size()) + " path(s)");
  if (fs::is_directory(files[0])) {
    const fs::path path = fs::path(files[0]) / "tokenizer.json";
    if (!fs::exists(path)) throw Error("data.tokenizer_files: the directory '" + files[0] + "' holds no tokenizer.json");
    return path.string();
  }
  return files[0];
}

BpeVocabulary read_hf_tokenizer(const std::string& path, const std::string& pattern) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open tokenizer file '" + path + "': " + std::strerror(errno));
  json file;
  try {
    file = json::parse(in);
  } catch (const json::exception& e) {
    throw Error("tokenizer file '" + path + "' is not valid JSON: " + e.what());
  }
  const std::string where = "tokenizer file '" + path + "': ";
  if (!file.is_object() || !file.contains("model") || !file["model"].is_object())
    throw Error(where + "no \"model\" object; expected a Hugging Face tokenizer.json");
  const json& model = file["model"];
  if (model.value("type", std::string("BPE")) != "BPE")
    throw Error(where + "model.type is \"" + model.value("type", std::string()) + "\"; this reader takes \"BPE\"");
  if (model.value("byte_fallback", false))
    throw Error(where + "model.byte_fallback is true (a SentencePiece-style BPE); this reader takes byte-level BPE "
                "with byte_fallback false");
  if (file.contains("normalizer") && !file["normalizer"].is_null())
    throw Error(where + "normalizer is " + file["normalizer"].dump().substr(0, 200) +
                "; this reader takes tokenizers without a normalizer (null), as byte-level BPE models have");
  if (!model.contains("vocab") || !model["vocab"].is_object())
    throw Error(where + "model.vocab is missing or not an object from token strings to ids");
  if (!model.contains("merges") || !model["merges"].is_array())
    throw Error(where + "model.merges is missing or not an array of merges (\"a b\" or [\"a\", \"b\"])");

  BpeVocabulary v;
  v.vocab_path = path;
  v.pattern = chosen_pattern(hf_pattern(file.contains("pre_tokenizer") ? file["pre_tokenizer"] : json(), path),
                             pattern, path);
  const json& vocab = model["vocab"];
  std::string bytes, why;
  for (const auto& [key, value] : vocab.items()) {
    const std::string here = where + "model.vocab[" + json(key).dump() + "]";
    if (!value.is_number_unsigned() || value.get<std::uint64_t>() >= (1u << 30))
      throw Error(here + " is " + value.dump() + "; ids are integers from 0 to 2^30 - 1");
    const auto id = value.get<std::size_t>();
    if (id >= v.token_bytes.size()) v.token_bytes.resize(id + 1);
    if (!v.token_bytes[id].empty())
      throw Error(here + " has the id " + std::to_string(id) + ", which another token has too");
    if (!alphabet_bytes(key, bytes, why)) throw Error(here + " " + why);
    v.token_bytes[id] = bytes;
  }
  MergeBuilder builder(v, "tokenizer file '" + path + "' model.vocab");
  const json& merges = model["merges"];
  for (std::size_t k = 0; k < merges.size(); ++k) {
    const json& m = merges[k];
    const std::string key = "model.merges[" + std::to_string(k) + "]";
    if (m.is_string()) {
      const std::string text = m.get<std::string>();
      const auto space = text.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == text.size() || text.find(' ', space + 1) != std::string::npos)
        throw Error(where + key + " is " + m.dump() + "; expected two tokens separated by one space");
      builder.add(std::string_view(text).substr(0, space), std::string_view(text).substr(space + 1), where + key + ": ",
                  key);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      builder.add(m[0].get_ref<const std::string&>(), m[1].get_ref<const std::string&>(), where + key + ": ", key);
    } else {
      throw Error(where + key + " is " + m.dump().substr(0, 200) + "; expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  builder.finish(where + "model.merges");
  // The added tokens join after the merges, so none of them takes part in merging.
  if (file.contains("added_tokens") && !file["added_tokens"].is_null()) {
    const json& added = file["added_tokens"];
    if (!added.is_array()) throw Error(where + "added_tokens is not an array");
    for (std::size_t k = 0; k < added.size(); ++k) {
      const json& t = added[k];
      const std::string here = where + "added_tokens[" + std::to_string(k) + "]";
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_unsigned() || !t.contains("content") ||
          !t["content"].is_string() || t["id"].get<std::uint64_t>() >= (1u << 30))
        throw Error(here + " is " + t.dump().substr(0, 200) + "; expected {\"id\": integer, \"content\": text, ...}");
      const auto id = t["id"].get<std::size_t>();
      const std::string content = t["content"].get<std::string>();
      if (id >= v.token_bytes.size()) v.token_bytes.resize(id + 1);
      // GPT-2's file lists <|endoftext|> both in model.vocab and here, with the same text.
      if (!v.token_bytes[id].empty() && v.token_bytes[id] != content)
        throw Error(here + " gives id " + std::to_string(id) + " the text " + json(content).dump() +
                    ", but model.vocab gives it to another token");
      v.token_bytes[id] = content;
      v.special_tokens.emplace_back(static_cast<std::int32_t>(id), content);
    }
  }
  find_document_tokens(v);
  return v;
}

BpeVocabulary read_tiktoken_ranks(const std::string& path, const std::string& pattern) {
  namespace fs = std::filesystem;
  const std::string stem = fs::path(path).stem().string();
  BpeVocabulary v;
  v.vocab_path = path;
  std::vector<std::pair<std::int32_t, std::string>> specials;
  if (stem == "cl100k_base") {
    v.pattern = PreTokenizerPattern::cl100k;
    specials = {{100257, "<|endoftext|>"}, {100258, "<|fim_prefix|>"}, {100259, "<|fim_middle|>"},
                {100260, "<|fim_suffix|>"}, {100276, "<|endofprompt|>"}};
  } else if (stem == "r50k_base" || stem == "gpt2") {
    v.pattern = PreTokenizerPattern::gpt2;
    specials = {{50256, "<|endoftext|>"}};
  } else if (pattern == "auto") {
    throw Error("tiktoken rank file '" + path + "': its name does not say its encoding (cl100k_base.tiktoken, "
                "r50k_base.tiktoken): set data.tokenizer_pattern to \"cl100k\" or \"gpt2\" (it then has no special "
                "tokens)");
  }
  if (pattern != "auto") {
    const PreTokenizerPattern asked = pattern_named(pattern, "data.tokenizer_pattern");
    if (!specials.empty() && asked != v.pattern)
      throw Error("data.tokenizer_pattern = \"" + pattern + "\" but '" + path + "' is " + stem + ", whose pattern is " +
                  pattern_text(v.pattern) + "; set \"auto\"");
    v.pattern = asked;
  }

  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open tiktoken rank file '" + path + "': " + std::strerror(errno));
  std::string line;
  std::vector<std::int32_t> merged;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(number) + ": ";
    const auto space = line.find(' ');
    bool ok = space != std::string::npos && space > 0;
    std::string bytes = ok ? base64_decode(std::string_view(line).substr(0, space), ok) : std::string();
    if (!ok) throw Error(where + "expected a base64 token, one space and its rank, got '" + line.substr(0, 80) + "'");
    std::size_t rank = 0, used = 0;
    try {
      rank = std::stoul(line.substr(space + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || space + 1 + used != line.size() || rank >= (1u << 30))
      throw Error(where + "the rank '" + line.substr(space + 1) + "' is not an integer from 0 to 2^30 - 1");
    if (rank >= v.token_bytes.size()) v.token_bytes.resize(rank + 1);
    if (!v.token_bytes[rank].empty()) throw Error(where + "rank " + std::to_string(rank) + " is given twice");
    v.token_bytes[rank] = std::move(bytes);
    if (v.token_bytes[rank].size() > 1) merged.push_back(static_cast<std::int32_t>(rank));
  }
  if (in.bad()) throw Error("failed reading tiktoken rank file '" + path + "'");
  {
    std::unordered_map<std::string_view, std::size_t> seen;
    for (std::size_t id = 0; id < v.token_bytes.size(); ++id)
      if (!v.token_bytes[id].empty() && !seen.emplace(v.token_bytes[id], id).second)
        throw Error("tiktoken rank file '" + path + "': ranks " + std::to_string(seen[v.token_bytes[id]]) + " and " +
                    std::to_string(id) + " have the same bytes");
  }
  MergeBuilder builder(v, "tiktoken rank file '" + path + "'");  // finds the 256 one-byte tokens
  std::sort(merged.begin(), merged.end());
  index_merges(v, merged);
  for (const auto& [id, text] : specials) {
    if (static_cast<std::size_t>(id) < v.token_bytes.size() && !v.token_bytes[static_cast<std::size_t>(id)].empty())
      throw Error("tiktoken rank file '" + path + "' gives rank " + std::to_string(id) + " to a token, but " + stem +
                  " has the special token " + text + " there: the file is not " + stem + "'s");
    if (static_cast<std::size_t>(id) >= v.token_bytes.size()) v.token_bytes.resize(static_cast<std::size_t>(id) + 1);
    v.token_bytes[static_cast<std::size_t>(id)] = text;
  }
  v.special_tokens = specials;
  find_document_tokens(v);
  return v;
}

}  // namespace st
