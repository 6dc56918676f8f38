#include "core/text.hpp"

#include <algorithm>
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
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  std::string best;
  std::size_t best_distance = limit + 1;
  for (const auto& candidate : candidates) {
    const std::size_t d = edit_distance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
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

std::string json_string(const std::string& s) {
  std::string out = "\"";
  auto unicode = [&out](std::uint32_t unit) {
    char escaped[16];
    std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(unit));
    out += escaped;
  };
  for (std::size_t at = 0; at < s.size();) {
    const Utf8Sequence seq = utf8_sequence_at(s, at);
    const auto c = static_cast<unsigned char>(s[at]);
    if (seq.length == 0) {  // not UTF-8: the byte's value as a character
      unicode(c);
      ++at;
      continue;
    }
    at += seq.length;
    const std::uint32_t code = seq.code_point;
    switch (code) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (code >= 0x20 && code < 0x7f) out += static_cast<char>(code);
        else if (code < 0x10000) unicode(code);
        else unicode(0xd800 + ((code - 0x10000) >> 10)), unicode(0xdc00 + ((code - 0x10000) & 0x3ff));
    }
  }
  return out + "\"";
}

}  // namespace st
