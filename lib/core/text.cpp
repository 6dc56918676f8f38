#include "core/text.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <numeric>

namespace st {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> previous(b.size() + 1), current(b.size() + 1);
  std::iota(previous.begin(), previous.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  // Allow about one edit per three characters, at least two: "setps" -> "steps", "lr_" -> "lr".
  const auto limit = [](std::string_view w) { return std::max<std::size_t>(2, w.size() / 3); };
  const auto tail = [](std::string_view w) {  // the part after the section: "optimizer.lr" -> "lr"
    const std::size_t dot = w.rfind('.');
    return dot == std::string_view::npos ? w : w.substr(dot + 1);
  };
  std::string best;
  // The section names take no part in the allowance: "optimizer.warmup" is not near "optimizer.lr".
  std::size_t best_distance = limit(tail(word)) + 1;
  for (const auto& candidate : candidates) {
    const std::size_t d = edit_distance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  if (!best.empty()) return best;
  // A shortened name ("optimizer.warmup" for "optimizer.warmup_steps"), or the right name under
  // another section ("model.lr" for "optimizer.lr"): the shortest such candidate.
  const std::string_view word_tail = tail(word);
  for (const auto& candidate : candidates) {
    const std::string_view candidate_tail = tail(candidate);
    const bool shortened = word.size() >= 3 && std::string_view(candidate).starts_with(word);
    const bool shortened_tail = word_tail.size() >= 3 && candidate_tail.starts_with(word_tail);
    const bool near_tail = word_tail != word && edit_distance(word_tail, candidate_tail) < limit(word_tail);
    if ((shortened || shortened_tail || near_tail) && (best.empty() || candidate.size() < best.size())) best = candidate;
  }
  return best;
}

std::string format_bytes(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", bytes, units[unit]);
  return text;
}

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += separator;
    out += parts[i];
  }
  return out;
}

std::string format_fixed(double x, int digits) {
  if (std::isnan(x)) return "nan";  // whatever its sign bit (printf writes "-nan" for some)
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, x);
  return text;
}

std::string utc_timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[80];  // room for any int the fields could hold, so GCC sees no truncation
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(millis));
  return text;
}

std::string format_duration(double seconds) {
  const long long s = seconds > 0 ? static_cast<long long>(seconds + 0.5) : 0;
  char text[40];
  if (s < 60) std::snprintf(text, sizeof text, "%llds", s);
  else if (s < 3600) std::snprintf(text, sizeof text, "%lldm %02llds", s / 60, s % 60);
  else if (s < 86400) std::snprintf(text, sizeof text, "%lldh %02lldm", s / 3600, s % 3600 / 60);
  else std::snprintf(text, sizeof text, "%lldd %02lldh", s / 86400, s % 86400 / 3600);
  return text;
}

std::string format_shortest(double x) {
  char text[32];  // the longest double, "-2.2250738585072014e-308", is 24 characters
  const auto end = std::to_chars(text, text + sizeof text, x).ptr;
  return std::string(text, end);
}

Utf8Sequence utf8_sequence_at(std::string_view s, std::size_t at) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[at + k]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return {1, lead};
  // The lead byte fixes the length and the smallest code point (anything less is overlong).
  std::size_t length = 0;
  std::uint32_t code = 0, least = 0;
  if (lead >= 0xc2 && lead <= 0xdf) length = 2, code = lead & 0x1fu, least = 0x80;
  else if (lead >= 0xe0 && lead <= 0xef) length = 3, code = lead & 0x0fu, least = 0x800;
  else if (lead >= 0xf0 && lead <= 0xf4) length = 4, code = lead & 0x07u, least = 0x10000;
  else return {};  // a continuation byte, 0xc0/0xc1 (always overlong) or 0xf5-0xff
  if (at + length > s.size()) return {};
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(k) & 0xc0u) != 0x80u) return {};
    code = code << 6 | (byte(k) & 0x3fu);
  }
  if (code < least || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return {};
  return {length, code};
}

std::string printable_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  auto escape = [&out](std::string_view raw) {
    for (unsigned char c : raw) {
      char escaped[16];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    }
  };
  for (std::size_t at = 0; at < bytes.size();) {
    const Utf8Sequence seq = utf8_sequence_at(bytes, at);
    const std::size_t length = seq.length == 0 ? 1 : seq.length;
    const std::uint32_t c = seq.code_point;
    const bool control = (c < 0x20 && c != '\n' && c != '\t') || (c >= 0x7f && c <= 0x9f);
    if (seq.length == 0 || control) escape(bytes.substr(at, length));
    else out.append(bytes.substr(at, length));
    at += length;
  }
  return out;
}

}  // namespace st
