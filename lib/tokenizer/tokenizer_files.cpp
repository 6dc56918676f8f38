#include "tokenizer/tokenizer_files.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.hpp"
#include "tokenizer/hf_pipeline.hpp"
#include "tokenizer/pipeline_run.hpp"

namespace st {

namespace {

using nlohmann::json;

const char* pattern_text(PreTokenizerPattern p) {
  return p == PreTokenizerPattern::gpt2 ? "gpt2" : p == PreTokenizerPattern::cl100k ? "cl100k" : "custom";
}

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

// GPT-2's or cl100k's pattern when the file's steps are that pattern alone, as GPT-2's and
// Llama 3's files have it (matched by hand, as tiktoken's files are); else its own steps.
PreTokenizerPattern pattern_of(const TextPipeline& p) {
  using Kind = PreTokenizerStep::Kind;
  const auto& steps = p.pre_tokenizer;
  if (!p.normalizer.empty() || steps.empty() || steps.size() > 2) return PreTokenizerPattern::custom;
  const PreTokenizerStep& last = steps.back();
  if (last.kind != Kind::byte_level || last.add_prefix_space) return PreTokenizerPattern::custom;
  if (steps.size() == 1) return last.use_regex ? PreTokenizerPattern::gpt2 : PreTokenizerPattern::custom;
  const PreTokenizerStep& split = steps[0];
  if (last.use_regex || split.kind != Kind::split || split.literal || split.invert ||
      split.behavior != SplitBehavior::isolated)
    return PreTokenizerPattern::custom;
  if (split.pattern == kGpt2Pattern) return PreTokenizerPattern::gpt2;
  if (split.pattern == kCl100kPattern) return PreTokenizerPattern::cl100k;
  return PreTokenizerPattern::custom;
}

// data.tokenizer_pattern's gpt2 or cl100k as the pattern it names.
PreTokenizerPattern named_pattern(TokenizerPattern asked) {
  return asked == TokenizerPattern::cl100k ? PreTokenizerPattern::cl100k : PreTokenizerPattern::gpt2;
}

PreTokenizerPattern chosen_pattern(const BpeVocabulary& v, TokenizerPattern asked, const std::string& file) {
  if (asked == TokenizerPattern::automatic) return v.pattern;
  const PreTokenizerPattern p = named_pattern(asked);
  if (v.pattern == PreTokenizerPattern::custom)
    throw Error("data.tokenizer_pattern = \"" + name_of(asked) + "\" but the tokenizer file '" + file +
                "' has steps of its own (" + v.pipeline.summary() + "); set \"auto\"");
  if (p != v.pattern)
    throw Error("data.tokenizer_pattern = \"" + name_of(asked) + "\" but the tokenizer file '" + file + "' names the " +
                pattern_text(v.pattern) + " pattern; set \"auto\" or \"" + pattern_text(v.pattern) + "\"");
  return p;
}

std::string hex_byte_token(unsigned b) {
  const char* digits = "0123456789ABCDEF";
  return std::string("<0x") + digits[b >> 4] + digits[b & 15] + ">";
}

// model.vocab and model.merges, as Hugging Face's BPE model reads them: a merge joins exactly the
// pair it lists, at its line's rank (a pair listed twice takes the later line, as tokenizers'
// map does).
void read_hf_model(const json& model, const std::string& where, BpeVocabulary& v) {
  const bool bytes = v.symbols == BpeSymbols::bytes;
  std::unordered_map<std::string, std::int32_t> id_of;  // the vocabulary's spelling -> id
  std::string token, why;
  for (const auto& [key, value] : model["vocab"].items()) {
    const std::string here = where + "model.vocab[" + json(key).dump() + "]";
    if (!value.is_number_unsigned() || value.get<std::uint64_t>() >= (1u << 30))
      throw Error(here + " is " + value.dump() + "; ids are integers from 0 to 2^30 - 1");
    const auto id = value.get<std::size_t>();
    if (id >= v.token_bytes.size()) v.token_bytes.resize(id + 1);
    if (!v.token_bytes[id].empty())
      throw Error(here + " has the id " + std::to_string(id) + ", which another token has too");
    if (bytes && !alphabet_bytes(key, token, why)) throw Error(here + " " + why);
    if (!bytes && key.empty()) throw Error(here + " is an empty token");
    v.token_bytes[id] = bytes ? token : key;
    id_of.emplace(key, static_cast<std::int32_t>(id));
    v.whole_tokens.emplace(v.token_bytes[id], static_cast<std::int32_t>(id));
  }
  for (unsigned b = 0; b < 256; ++b) {
    const auto it = bytes ? v.whole_tokens.find(std::string(1, static_cast<char>(b))) : v.whole_tokens.find(hex_byte_token(b));
    if (it == v.whole_tokens.end())
      throw Error(where + "model.vocab lacks " +
                  (bytes ? "the one-byte token of byte " + hex_byte_token(b).substr(1, 4) +
                               "; a byte-level BPE vocabulary holds all 256"
                         : "the byte-fallback token " + hex_byte_token(b) +
                               "; with byte_fallback every byte has one, so any text can be encoded"));
    v.byte_token[b] = it->second;
  }
  const json& merges = model["merges"];
  for (std::size_t k = 0; k < merges.size(); ++k) {
    const json& m = merges[k];
    const std::string key = "model.merges[" + std::to_string(k) + "]";
    std::string parts[2];
    if (m.is_string()) {
      const std::string text = m.get<std::string>();
      const auto space = text.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == text.size() || text.find(' ', space + 1) != std::string::npos)
        throw Error(where + key + " is " + m.dump() + "; expected two tokens separated by one space");
      parts[0] = text.substr(0, space), parts[1] = text.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      parts[0] = m[0].get<std::string>(), parts[1] = m[1].get<std::string>();
    } else {
      throw Error(where + key + " is " + m.dump().substr(0, 200) + "; expected \"a b\" or [\"a\", \"b\"]");
    }
    std::int32_t ids[2];
    for (int p = 0; p < 2; ++p) {
      const auto it = id_of.find(parts[p]);
      if (it == id_of.end()) throw Error(where + key + ": token '" + parts[p] + "' is not in model.vocab");
      ids[p] = it->second;
    }
    const auto merged = id_of.find(parts[0] + parts[1]);
    if (merged == id_of.end())
      throw Error(where + key + ": merging '" + parts[0] + "' and '" + parts[1] + "' gives a token that the "
                  "model.vocab lacks");
    v.pair_merges.insert_or_assign(static_cast<std::uint64_t>(ids[0]) << 32 | static_cast<std::uint32_t>(ids[1]),
                                   BpeMerge{static_cast<std::int32_t>(k), merged->second});
  }
  if (merges.empty()) throw Error(where + "model.merges holds no merges");
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

BpeVocabulary read_hf_tokenizer(const std::string& path, TokenizerPattern pattern) {
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
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(affix) && !model[affix].is_null() && model[affix] != "")
      throw Error(where + "model." + affix + " is " + model[affix].dump() + "; this reader takes BPE without one (null)");
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0)
    throw Error(where + "model.dropout is " + model["dropout"].dump() + "; encoding must be deterministic (null)");
  if (!model.contains("vocab") || !model["vocab"].is_object())
    throw Error(where + "model.vocab is missing or not an object from token strings to ids");
  if (!model.contains("merges") || !model["merges"].is_array())
    throw Error(where + "model.merges is missing or not an array of merges (\"a b\" or [\"a\", \"b\"])");

  BpeVocabulary v;
  v.vocab_path = path;
  v.pipeline = read_hf_text_steps(file, path);
  const bool byte_level = is_byte_level(v.pipeline);
  if (!byte_level && !model.value("byte_fallback", false))
    throw Error(where + "pre_tokenizer has no ByteLevel step (" + v.pipeline.summary() +
                ") and model.byte_fallback is not true; this reader takes byte-level BPE (a ByteLevel pre-tokenizer: "
                "GPT-2, Llama 3, Qwen2, SmolLM) or BPE with byte fallback (<0xAB> tokens: Llama 2, Mistral)");
  v.symbols = byte_level ? BpeSymbols::bytes : BpeSymbols::characters;
  v.pipeline.decoder = read_hf_decoder(file, path, byte_level);
  v.whole_pieces = model.value("ignore_merges", false);
  v.pattern = pattern_of(v.pipeline);
  v.pattern = chosen_pattern(v, pattern, path);
  if (v.pattern == PreTokenizerPattern::custom) {
    const PieceSplitter compiled(v.pipeline, path);  // refuses a regex ICU cannot compile, now rather than later
  }
  read_hf_model(model, where, v);
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

BpeVocabulary read_tiktoken_ranks(const std::string& path, TokenizerPattern pattern) {
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
  } else if (pattern == TokenizerPattern::automatic) {
    throw Error("tiktoken rank file '" + path + "': its name does not say its encoding (cl100k_base.tiktoken, "
                "r50k_base.tiktoken): set data.tokenizer_pattern to \"cl100k\" or \"gpt2\" (it then has no special "
                "tokens)");
  }
  if (pattern != TokenizerPattern::automatic) {
    const PreTokenizerPattern asked = named_pattern(pattern);
    if (!specials.empty() && asked != v.pattern)
      throw Error("data.tokenizer_pattern = \"" + name_of(pattern) + "\" but '" + path + "' is " + stem +
                  ", whose pattern is " + pattern_text(v.pattern) + "; set \"auto\"");
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
