#pragma once
// Small text helpers shared by the deck, the logs and the command line.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace st {

// Levenshtein distance; used to suggest the key a user probably meant.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The closest candidate within a distance that scales with the word's length, or "".
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

// x with `digits` decimals: format_fixed(3.14159, 2) == "3.14".
std::string format_fixed(double x, int digits);

// "1.50 GiB", "12.0 MiB", "512 B".
std::string format_bytes(double bytes);

// Joins with a separator: join({"a","b"}, ", ") == "a, b".
std::string join(const std::vector<std::string>& parts, std::string_view separator);

// Now in UTC, ISO 8601 with milliseconds: "2026-12-03T13:05:25.123Z".
std::string utc_timestamp();
// A duration for people: "45s", "12m 05s", "3h 02m", "2d 04h".
std::string format_duration(double seconds);

// The shortest text that reads back as the same double: format_shortest(0.1) == "0.1",
// format_shortest(6e-4) == "6e-04".
std::string format_shortest(double x);

// The length of the valid UTF-8 sequence that starts at s[at] (1 to 4 bytes) and its code point,
// or length 0 where none starts there: a stray continuation byte, a truncated sequence, an
// overlong encoding, a surrogate (U+D800-U+DFFF) or a value above U+10FFFF (RFC 3629).
struct Utf8Sequence {
  std::size_t length = 0;
  std::uint32_t code_point = 0;
};
Utf8Sequence utf8_sequence_at(std::string_view s, std::size_t at);

// `bytes` as text safe for a terminal and a log, and valid UTF-8 whatever the bytes: valid UTF-8
// sequences pass through; every other byte, and every control character but newline and tab
// (C0, DEL, and C1 U+0080-U+009F, which terminals may act on), is written as \xNN, byte by byte.
std::string printable_utf8(std::string_view bytes);

}  // namespace st
