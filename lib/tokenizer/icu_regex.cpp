#include "tokenizer/icu_regex.hpp"

#include <unicode/regex.h>
#include <unicode/utext.h>

#include "core/error.hpp"

namespace st {

std::string icu_pattern(const std::string& oniguruma, const std::string& where) {
  std::string out;
  int class_depth = 0;  // inside [...] (sets nest)
  for (std::size_t i = 0; i < oniguruma.size(); ++i) {
    const char c = oniguruma[i];
    if (c == '\\' && i + 1 < oniguruma.size()) {
      const char e = oniguruma[++i];
      if (e == 's') out += "\\p{White_Space}";
      else if (e == 'S') out += "\\P{White_Space}";
      else if (e == 'h') out += class_depth ? "0-9A-Fa-f" : "[0-9A-Fa-f]";
      else if (e == 'H' && !class_depth) out += "[^0-9A-Fa-f]";
      else if (e == 'H')
        throw Error(where + " uses \\H inside a character class, which this reader cannot give ICU; write the "
                    "class without it");
      else out += c, out += e;
      continue;
    }
    if (c == '[') ++class_depth;
    else if (c == ']' && class_depth) --class_depth;
    out += c;
  }
  return out;
}

struct IcuRegex::Impl {
  std::unique_ptr<icu::RegexPattern> pattern;
  std::unique_ptr<icu::RegexMatcher> matcher;
};

IcuRegex::IcuRegex(const std::string& oniguruma, const std::string& where) : impl_(std::make_unique<Impl>()) {
  const std::string rewritten = icu_pattern(oniguruma, where);
  UErrorCode status = U_ZERO_ERROR;
  UParseError parse{};
  impl_->pattern.reset(icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(rewritten),
                                                  UREGEX_MULTILINE | UREGEX_UNIX_LINES, parse, status));
  if (U_SUCCESS(status)) impl_->matcher.reset(impl_->pattern->matcher(status));
  if (U_FAILURE(status))
    throw Error(where + " is a regex ICU cannot compile (" + u_errorName(status) + " at character " +
                std::to_string(parse.offset) + " of " + rewritten + ")");
}

IcuRegex::~IcuRegex() = default;

void IcuRegex::find_all(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& matches) {
  UErrorCode status = U_ZERO_ERROR;
  UText input = UTEXT_INITIALIZER;
  utext_openUTF8(&input, text.data(), static_cast<int64_t>(text.size()), &status);
  impl_->matcher->reset(&input);
  while (U_SUCCESS(status) && impl_->matcher->find(status)) {
    const int64_t start = impl_->matcher->start64(status), end = impl_->matcher->end64(status);
    matches.emplace_back(static_cast<std::size_t>(start), static_cast<std::size_t>(end));
  }
  impl_->matcher->reset(icu::UnicodeString());  // drop the reference to `input` before closing it
  utext_close(&input);
  if (U_FAILURE(status)) throw Error(std::string("ICU regex search failed: ") + u_errorName(status));
}

}  // namespace st
