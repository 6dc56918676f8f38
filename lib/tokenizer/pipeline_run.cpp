#include "tokenizer/pipeline_run.hpp"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include <algorithm>
#include <utility>

#include "core/error.hpp"
#include "tokenizer/icu_regex.hpp"
#include "tokenizer/pretokenize.hpp"
#include "tokenizer/pretokenize_cl100k.hpp"
#include "tokenizer/unicode_class.hpp"

namespace st {
namespace {

using Spans = std::vector<std::pair<std::size_t, std::size_t>>;

// A part of a piece: a match of the step's pattern or the text between two matches.
struct Segment {
  std::size_t start, end;
  bool match;
};

// tokenizers' Pattern::find_matches: the matches and the gaps between them, in order (an empty
// text is one empty gap).
void segments_of(std::size_t size, const Spans& matches, std::vector<Segment>& out) {
  out.clear();
  if (size == 0) {
    out.push_back({0, 0, false});
    return;
  }
  std::size_t previous = 0;
  for (const auto& [start, end] : matches) {
    if (previous != start) out.push_back({previous, start, false});
    out.push_back({start, end, true});
    previous = end;
  }
  if (previous != size) out.push_back({previous, size, false});
}

// tokenizers' NormalizedString::split: the segments a behaviour keeps, as [start, end) spans
// (removed ones dropped; empty ones are dropped by the caller).
void apply_behavior(SplitBehavior behavior, const std::vector<Segment>& segments, Spans& out) {
  out.clear();
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::isolated:
      for (const Segment& s : segments) out.emplace_back(s.start, s.end);
      return;
    case SplitBehavior::removed:
      for (const Segment& s : segments)
        if (!s.match) out.emplace_back(s.start, s.end);
      return;
    case SplitBehavior::contiguous:
      for (const Segment& s : segments) {
        if (s.match == previous_match && !out.empty()) out.back().second = s.end;
        else out.emplace_back(s.start, s.end);
        previous_match = s.match;
      }
      return;
    case SplitBehavior::merged_with_previous:
      for (const Segment& s : segments) {
        if (s.match && !previous_match && !out.empty()) out.back().second = s.end;
        else out.emplace_back(s.start, s.end);
        previous_match = s.match;
      }
      return;
    case SplitBehavior::merged_with_next:
      // From the end: a match joins the segment after it, unless that one is a match too.
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->match && !previous_match && !out.empty()) out.back().first = it->start;
        else out.emplace_back(it->start, it->end);
        previous_match = it->match;
      }
      std::reverse(out.begin(), out.end());
      return;
  }
}

// Each number character (\p{N}, Rust's char::is_numeric) is a match.
void number_matches(std::string_view text, Spans& out) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const CharClassTable& classes = CharClassTable::get();
  for (std::size_t i = 0; i < text.size();) {
    const Utf8Char c = decode_utf8(s + i, text.size() - i);
    if (c.code_point != kInvalidUtf8 && classes.of(c.code_point) == CharClass::number) out.emplace_back(i, i + c.length);
    i += c.length;
  }
}

void literal_matches(std::string_view text, std::string_view literal, Spans& out) {
  for (std::size_t at = text.find(literal); at != std::string_view::npos; at = text.find(literal, at + literal.size()))
    out.emplace_back(at, at + literal.size());
}

std::string replaced(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  std::size_t previous = 0;
  for (std::size_t at = text.find(from); at != std::string_view::npos; at = text.find(from, at + from.size())) {
    out.append(text.substr(previous, at - previous)).append(to);
    previous = at + from.size();
  }
  return out.append(text.substr(previous));
}

std::string nfc(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) throw Error(std::string("ICU's NFC normalizer is unavailable: ") + u_errorName(status));
  std::string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t i = 0;
  while (i < text.size()) {
    // A run of UTF-8 characters (ASCII runs need nothing), then the bytes that are not UTF-8.
    const std::size_t run = i;
    bool ascii = true;
    while (i < text.size()) {
      const Utf8Char c = decode_utf8(s + i, text.size() - i);
      if (c.code_point == kInvalidUtf8) break;
      ascii = ascii && c.code_point < 0x80;
      i += c.length;
    }
    const std::string_view valid = text.substr(run, i - run);
    if (ascii) {
      out.append(valid);
    } else {
      icu::StringByteSink<std::string> sink(&out);
      normalizer->normalizeUTF8(0, icu::StringPiece(valid.data(), static_cast<int32_t>(valid.size())), sink, nullptr,
                                status);
      if (U_FAILURE(status)) throw Error(std::string("ICU's NFC normalization failed: ") + u_errorName(status));
    }
    while (i < text.size() && decode_utf8(s + i, text.size() - i).code_point == kInvalidUtf8) out += text[i++];
  }
  return out;
}

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

}  // namespace

struct PieceSplitter::Step {
  PreTokenizerStep spec;
  enum class Matcher { gpt2, cl100k, icu, numbers, literal, none } matcher = Matcher::none;
  std::unique_ptr<IcuRegex> regex;
  Gpt2PreTokenizer gpt2;
  Cl100kPreTokenizer cl100k;
  // Scratch reused at this step's depth: each call finishes with it before the next one.
  Spans matches, kept;
  std::vector<Segment> segments;

  void find(std::string_view text) {
    matches.clear();
    auto add = [&](std::size_t offset, std::size_t length) { matches.emplace_back(offset, offset + length); };
    switch (matcher) {
      case Matcher::gpt2: gpt2.split(text, add); break;
      case Matcher::cl100k: cl100k.split(text, add); break;
      case Matcher::icu: regex->find_all(text, matches); break;
      case Matcher::numbers: number_matches(text, matches); break;
      case Matcher::literal: literal_matches(text, spec.kind == PreTokenizerStep::Kind::metaspace ? spec.replacement
                                                                                              : spec.pattern, matches);
        break;
      case Matcher::none: break;
    }
  }
};

PieceSplitter::PieceSplitter(const TextPipeline& pipeline, const std::string& file) : normalizer_(pipeline.normalizer) {
  for (const PreTokenizerStep& spec : pipeline.pre_tokenizer) {
    auto step = std::make_unique<Step>();
    step->spec = spec;
    using Kind = PreTokenizerStep::Kind;
    if (spec.kind == Kind::byte_level) {
      step->matcher = spec.use_regex ? Step::Matcher::gpt2 : Step::Matcher::none;
    } else if (spec.kind == Kind::digits) {
      step->matcher = Step::Matcher::numbers;
      step->spec.behavior = spec.individual_digits ? SplitBehavior::isolated : SplitBehavior::contiguous;
    } else if (spec.kind == Kind::metaspace) {
      step->matcher = spec.split ? Step::Matcher::literal : Step::Matcher::none;
      step->spec.behavior = SplitBehavior::merged_with_next;
    } else if (spec.literal) {
      step->matcher = Step::Matcher::literal;
    } else if (spec.pattern == kGpt2Pattern) {
      step->matcher = Step::Matcher::gpt2;
    } else if (spec.pattern == kCl100kPattern) {
      step->matcher = Step::Matcher::cl100k;
    } else {
      step->matcher = Step::Matcher::icu;
      step->regex = std::make_unique<IcuRegex>(spec.pattern, "tokenizer file '" + file + "': " + spec.key + ".pattern.Regex");
    }
    steps_.push_back(std::move(step));
  }
}

PieceSplitter::~PieceSplitter() = default;

void PieceSplitter::split(std::string_view text, const std::function<void(std::string_view)>& on_piece) {
  if (text.empty()) return;
  if (!normalizer_.empty()) {
    normalized_ = normalize_text(normalizer_, text);
    text = normalized_;
  }
  run(0, text, true, on_piece);
}

void PieceSplitter::run(std::size_t k, std::string_view piece, bool at_text_start,
                        const std::function<void(std::string_view)>& on_piece) {
  if (piece.empty()) return;
  if (k == steps_.size()) {
    on_piece(piece);
    return;
  }
  Step& step = *steps_[k];
  const PreTokenizerStep& spec = step.spec;
  std::string changed;  // the piece with a prefix or replacements, when the step makes one
  if (spec.kind == PreTokenizerStep::Kind::byte_level && spec.add_prefix_space && piece[0] != ' ') {
    changed = " ";
    changed += piece;
    piece = changed;
  } else if (spec.kind == PreTokenizerStep::Kind::metaspace) {
    changed = replaced(piece, " ", spec.replacement);
    const bool prepend = spec.prepend == PrependScheme::always || (spec.prepend == PrependScheme::first && at_text_start);
    if (prepend && !starts_with(changed, spec.replacement)) changed.insert(0, spec.replacement);
    piece = changed;
  }
  if (step.matcher == Step::Matcher::none) {
    run(k + 1, piece, at_text_start, on_piece);
    return;
  }
  step.find(piece);
  segments_of(piece.size(), step.matches, step.segments);
  if (spec.invert)
    for (Segment& s : step.segments) s.match = !s.match;
  apply_behavior(spec.kind == PreTokenizerStep::Kind::byte_level ? SplitBehavior::isolated : spec.behavior,
                 step.segments, step.kept);
  // run() below reuses deeper steps' scratch only: this step's `kept` stays as it is.
  for (std::size_t i = 0; i < step.kept.size(); ++i) {
    const auto [start, end] = step.kept[i];
    run(k + 1, piece.substr(start, end - start), at_text_start && start == 0, on_piece);
  }
}

std::string normalize_text(const std::vector<NormalizerStep>& steps, std::string_view text) {
  std::string out(text);
  for (const NormalizerStep& step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::nfc: out = nfc(out); break;
      case NormalizerStep::Kind::prepend:
        if (!out.empty()) out.insert(0, step.text);
        break;
      case NormalizerStep::Kind::replace: out = replaced(out, step.text, step.content); break;
    }
  }
  return out;
}

std::string decode_token_strings(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens) {
  if (steps.empty()) {  // no decoder: tokenizers joins the token strings with spaces
    std::string out;
    for (std::size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const DecoderStep& step : steps) {
    using Kind = DecoderStep::Kind;
    switch (step.kind) {
      case Kind::byte_level:
        throw Error("decode_token_strings: a ByteLevel decoder decodes bytes, not token strings");
      case Kind::replace:
        for (std::string& t : tokens) t = replaced(t, step.text, step.content);
        break;
      case Kind::fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Kind::strip:
        for (std::string& t : tokens) {
          std::size_t begin = 0, end = t.size();
          for (std::size_t n = 0; n < step.start && starts_with(std::string_view(t).substr(begin), step.text); ++n)
            begin += step.text.size();
          for (std::size_t n = 0; n < step.stop && end >= begin + step.text.size() &&
                                  std::string_view(t).substr(end - step.text.size(), step.text.size()) == step.text;
               ++n)
            end -= step.text.size();
          t = t.substr(begin, end - begin);
        }
        break;
      case Kind::metaspace:
        for (std::size_t i = 0; i < tokens.size(); ++i)
          tokens[i] = replaced(tokens[i], step.text, i == 0 && step.prepend != PrependScheme::never ? "" : " ");
        break;
      case Kind::byte_fallback: {
        std::vector<std::string> out;
        std::string bytes;
        auto flush = [&] {
          if (bytes.empty()) return;
          bool valid = true;
          const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
          for (std::size_t i = 0; i < bytes.size() && valid;) {
            const Utf8Char c = decode_utf8(s + i, bytes.size() - i);
            valid = c.code_point != kInvalidUtf8;
            i += c.length;
          }
          if (valid) out.push_back(bytes);
          else out.insert(out.end(), bytes.size(), "\xEF\xBF\xBD");  // U+FFFD for each byte
          bytes.clear();
        };
        auto hex = [](char c) {
          return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        };
        for (std::string& t : tokens) {
          const bool is_byte = t.size() == 6 && starts_with(t, "<0x") && t[5] == '>' && hex(t[3]) >= 0 && hex(t[4]) >= 0;
          if (is_byte) {
            bytes += static_cast<char>(hex(t[3]) * 16 + hex(t[4]));
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace st
