#pragma once
// JSON as the program writes it (metrics lines, timelines): nlohmann-json's text, on one line.
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace st {

// `value` as one line of JSON in ASCII (\uXXXX beyond it, so a reader in any locale reads it).
// Numbers read back as the same double; NaN and the infinities, which JSON cannot hold, are null.
// A byte of a string that is no part of valid UTF-8 (a path may hold any bytes) becomes U+FFFD
// instead of an exception: no text a run holds can stop it from writing its metrics.
std::string json_text(const nlohmann::ordered_json& value);

}  // namespace st
