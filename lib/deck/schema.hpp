#pragma once
// The table of every deck key: its type, default, allowed values and documentation. The parser,
// the settings table, `shardtrain deck-doc` and docs/deck.md all come from this one table.
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "deck/config.hpp"

namespace st {

enum class KeyType { integer, real, boolean, string, choice, string_list, integer_list };

using DeckValue =
    std::variant<std::int64_t, double, bool, std::string, std::vector<std::string>, std::vector<std::int64_t>>;

struct KeySpec {
  std::string section;
  std::string name;
  KeyType type = KeyType::integer;
  std::string default_toml;  // the default as TOML text; empty means the key is required
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;  // for KeyType::choice
  std::string doc;
  std::function<void(Config&, const DeckValue&)> store;

  std::string full_name() const { return section + "." + name; }
  bool required() const { return default_toml.empty(); }
  // "integer in [1, 1e9]", "one of \"ddp\", \"zero1\"", ...: what the key accepts, for messages.
  std::string allowed() const;
};

const std::vector<KeySpec>& deck_schema();
const std::vector<std::string>& deck_sections();
const KeySpec* find_key(const std::string& section, const std::string& name);
// The key that other trainers' name for a setting stands for ("learning_rate": "optimizer.lr",
// "max_steps": "run.steps", "n_embd": "model.d_model"), or "" when the name is none of those.
std::string key_for_other_name(const std::string& name);

// docs/deck.md, generated from the table (`shardtrain deck-doc`; a test checks the file).
std::string deck_reference_markdown();

}  // namespace st
