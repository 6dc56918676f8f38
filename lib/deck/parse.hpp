#pragma once
#include <string>
#include <vector>

#include "deck/config.hpp"
#include "deck/schema.hpp"

namespace st {

// Parses and validates a deck. `text` is the file's content (read once by rank 0 and broadcast,
// so every rank parses the same bytes); `path` names it in messages; each override is
// "section.key=value" from --set and wins over the file. Throws Error (scope: all ranks) that
// lists every problem found, each with file:line or the --set that caused it.
Config parse_deck(const std::string& text, const std::string& path, const std::vector<std::string>& overrides);

// The deck that gives this run again: every key after defaults, --set overrides and values taken
// from a weights file, by section, each with where it came from; keys at their defaults are
// commented out, so parse_deck of the text gives the same settings (a deck that names
// data.val_path, say, would otherwise also set data.val_fraction). This is resolved.toml in the
// run directory and the settings each checkpoint stores.
std::string resolved_deck_text(const Config& config);

// Sets one key of a parsed deck as a command decides it (the planner's choice for "auto"): its
// field through the schema, as the parser stores a value, its resolved text (resolved.toml, the
// settings table) and where it came from. `key` is "section.name" of a key in the schema; the
// value is the caller's, of the key's type, and is not range-checked.
void set_key(Config& config, const std::string& key, const DeckValue& value, const std::string& origin);

// `text` as a TOML basic string, quotes included, for a deck or a --set value the program makes
// (a path given on the command line). Throws Error (scope: all ranks) naming `what` when `text`
// is not valid UTF-8, which a TOML document cannot hold.
std::string toml_string(const std::string& text, const std::string& what);

}  // namespace st
