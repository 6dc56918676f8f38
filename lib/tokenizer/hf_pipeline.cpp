#include "tokenizer/hf_pipeline.hpp"

#include <tuple>

#include "core/error.hpp"
#include "tokenizer/unicode_class.hpp"

namespace st {
namespace {

using nlohmann::json;

// Reads the steps of one part of the file, each refusal naming the file and the step's key.
class StepReader {
 public:
  explicit StepReader(std::string path) : where_("tokenizer file '" + std::move(path) + "': ") {}

  [[noreturn]] void refuse(const std::string& key, const std::string& what, const std::string& allowed) const {
    throw Error(where_ + key + " " + what + "; " + allowed);
  }
  static std::string type_of(const json& step) {
    return step.is_object() && step.contains("type") && step["type"].is_string() ? step["type"].get<std::string>()
                                                                                 : std::string();
  }
  static std::string shown(const json& value) {
    const std::string text = value.dump();
    return text.size() > 200 ? text.substr(0, 200) + "..." : text;
  }

  bool boolean(const json& step, const std::string& key, const char* name, bool fallback) const {
    if (!step.contains(name) || step[name].is_null()) return fallback;
    if (!step[name].is_boolean()) refuse(key + "." + name, "is " + shown(step[name]), "expected true or false");
    return step[name].get<bool>();
  }
  std::string text(const json& step, const std::string& key, const char* name) const {
    if (!step.contains(name) || !step[name].is_string())
      refuse(key + "." + name, "is " + (step.contains(name) ? shown(step[name]) : std::string("missing")),
             "expected a string");
    return step[name].get<std::string>();
  }
  std::size_t count(const json& step, const std::string& key, const char* name) const {
    if (!step.contains(name) || step[name].is_null()) return 0;
    if (!step[name].is_number_unsigned()) refuse(key + "." + name, "is " + shown(step[name]), "expected a count");
    return step[name].get<std::size_t>();
  }
  // One character (Metaspace's replacement, Strip's content).
  std::string character(const json& step, const std::string& key, const char* name) const {
    const std::string c = text(step, key, name);
    const Utf8Char decoded =
        c.empty() ? Utf8Char{kInvalidUtf8, 0} : decode_utf8(reinterpret_cast<const unsigned char*>(c.data()), c.size());
    if (decoded.code_point == kInvalidUtf8 || decoded.length != c.size())
      refuse(key + "." + name, "is " + shown(step[name]), "expected one character");
    return c;
  }
  // pattern: {"String": text}; a regex only where `regex_allowed` (Split).
  std::pair<std::string, bool> pattern(const json& step, const std::string& key, bool regex_allowed) const {
    const json* p = step.contains("pattern") ? &step["pattern"] : nullptr;
    const std::string expected =
        regex_allowed ? "expected {\"Regex\": pattern} or {\"String\": text}" : "expected {\"String\": text}";
    if (p && p->is_object() && p->size() == 1 && p->contains("String") && (*p)["String"].is_string()) {
      if ((*p)["String"].get<std::string>().empty()) refuse(key + ".pattern.String", "is empty", expected);
      return {(*p)["String"].get<std::string>(), true};
    }
    if (regex_allowed && p && p->is_object() && p->size() == 1 && p->contains("Regex") && (*p)["Regex"].is_string())
      return {(*p)["Regex"].get<std::string>(), false};
    refuse(key + ".pattern", "is " + (p ? shown(*p) : std::string("missing")), expected);
  }
  // Metaspace's prepend_scheme, or from the older add_prefix_space (true: always, false: never).
  PrependScheme prepend(const json& step, const std::string& key) const {
    const bool add_prefix_space = boolean(step, key, "add_prefix_space", true);
    if (!step.contains("prepend_scheme") || step["prepend_scheme"].is_null())
      return add_prefix_space ? PrependScheme::always : PrependScheme::never;
    const std::string scheme = text(step, key, "prepend_scheme");
    const PrependScheme p = scheme == "always"  ? PrependScheme::always
                            : scheme == "first" ? PrependScheme::first
                            : scheme == "never" ? PrependScheme::never
                                                : (refuse(key + ".prepend_scheme", "is \"" + scheme + "\"",
                                                          "expected \"always\", \"first\" or \"never\""),
                                                   PrependScheme::never);
    if (!add_prefix_space && p != PrependScheme::never)
      refuse(key + ".add_prefix_space", "is false but prepend_scheme is \"" + scheme + "\"",
             "they must agree (Hugging Face's tokenizers refuses this too)");
    return p;
  }

 private:
  std::string where_;
};

const char* const kNormalizers =
    "this reader takes the normalizers of byte-level and SentencePiece-style BPE models: null, NFC, Prepend, "
    "Replace of a string, and a Sequence of them";
const char* const kPreTokenizers =
    "this reader takes the pre-tokenizers ByteLevel, Split, Digits, Metaspace and a Sequence of them (or null)";

void read_normalizer(const StepReader& r, const json& step, const std::string& key, std::vector<NormalizerStep>& out) {
  if (step.is_null()) return;
  const std::string type = StepReader::type_of(step);
  if (type == "Sequence") {
    if (!step.contains("normalizers") || !step["normalizers"].is_array())
      r.refuse(key + ".normalizers", "is missing or not an array", kNormalizers);
    for (std::size_t k = 0; k < step["normalizers"].size(); ++k)
      read_normalizer(r, step["normalizers"][k], key + ".normalizers[" + std::to_string(k) + "]", out);
  } else if (type == "NFC") {
    out.push_back({NormalizerStep::Kind::nfc, "", ""});
  } else if (type == "Prepend") {
    out.push_back({NormalizerStep::Kind::prepend, r.text(step, key, "prepend"), ""});
  } else if (type == "Replace") {
    out.push_back({NormalizerStep::Kind::replace, r.pattern(step, key, false).first, r.text(step, key, "content")});
  } else {
    r.refuse(key, "is " + (type.empty() ? StepReader::shown(step) : "a " + type + " normalizer"), kNormalizers);
  }
}

void read_pre_tokenizer(const StepReader& r, const json& step, const std::string& key,
                        std::vector<PreTokenizerStep>& out) {
  if (step.is_null()) return;
  const std::string type = StepReader::type_of(step);
  PreTokenizerStep s{};
  s.key = key;
  if (type == "Sequence") {
    if (!step.contains("pretokenizers") || !step["pretokenizers"].is_array())
      r.refuse(key + ".pretokenizers", "is missing or not an array", kPreTokenizers);
    for (std::size_t k = 0; k < step["pretokenizers"].size(); ++k)
      read_pre_tokenizer(r, step["pretokenizers"][k], key + ".pretokenizers[" + std::to_string(k) + "]", out);
    return;
  }
  if (type == "ByteLevel") {
    s.kind = PreTokenizerStep::Kind::byte_level;
    s.add_prefix_space = r.boolean(step, key, "add_prefix_space", false);
    s.use_regex = r.boolean(step, key, "use_regex", true);
  } else if (type == "Split") {
    s.kind = PreTokenizerStep::Kind::split;
    std::tie(s.pattern, s.literal) = r.pattern(step, key, true);
    s.invert = r.boolean(step, key, "invert", false);
    const std::string behavior = step.contains("behavior") ? r.text(step, key, "behavior") : "Isolated";
    if (behavior == "Isolated") s.behavior = SplitBehavior::isolated;
    else if (behavior == "Removed") s.behavior = SplitBehavior::removed;
    else if (behavior == "MergedWithPrevious") s.behavior = SplitBehavior::merged_with_previous;
    else if (behavior == "MergedWithNext") s.behavior = SplitBehavior::merged_with_next;
    else if (behavior == "Contiguous") s.behavior = SplitBehavior::contiguous;
    else
      r.refuse(key + ".behavior", "is \"" + behavior + "\"",
               "expected Isolated, Removed, MergedWithPrevious, MergedWithNext or Contiguous");
  } else if (type == "Digits") {
    s.kind = PreTokenizerStep::Kind::digits;
    s.individual_digits = r.boolean(step, key, "individual_digits", false);
  } else if (type == "Metaspace") {
    s.kind = PreTokenizerStep::Kind::metaspace;
    s.replacement = r.character(step, key, "replacement");
    s.prepend = r.prepend(step, key);
    s.split = r.boolean(step, key, "split", true);
  } else {
    r.refuse(key, "is " + (type.empty() ? StepReader::shown(step) : "a " + type + " pre-tokenizer"), kPreTokenizers);
  }
  out.push_back(std::move(s));
}

void read_decoder(const StepReader& r, const json& step, const std::string& key, bool byte_level,
                  std::vector<DecoderStep>& out) {
  const std::string type = StepReader::type_of(step);
  const std::string allowed =
      byte_level ? "a byte-level tokenizer takes the decoder ByteLevel (or null)"
                 : "a tokenizer with byte fallback takes the decoders Replace (of a string), ByteFallback, Fuse, Strip, "
                   "Metaspace and a Sequence of them (or null)";
  DecoderStep d{};
  if (type == "Sequence") {
    if (!step.contains("decoders") || !step["decoders"].is_array())
      r.refuse(key + ".decoders", "is missing or not an array", allowed);
    for (std::size_t k = 0; k < step["decoders"].size(); ++k)
      read_decoder(r, step["decoders"][k], key + ".decoders[" + std::to_string(k) + "]", byte_level, out);
    return;
  }
  if (byte_level && type == "ByteLevel") {
    d.kind = DecoderStep::Kind::byte_level;
  } else if (!byte_level && type == "Replace") {
    d.kind = DecoderStep::Kind::replace;
    d.text = r.pattern(step, key, false).first;
    d.content = r.text(step, key, "content");
  } else if (!byte_level && type == "ByteFallback") {
    d.kind = DecoderStep::Kind::byte_fallback;
  } else if (!byte_level && type == "Fuse") {
    d.kind = DecoderStep::Kind::fuse;
  } else if (!byte_level && type == "Strip") {
    d.kind = DecoderStep::Kind::strip;
    d.text = r.character(step, key, "content");
    d.start = r.count(step, key, "start");
    d.stop = r.count(step, key, "stop");
  } else if (!byte_level && type == "Metaspace") {
    d.kind = DecoderStep::Kind::metaspace;
    d.text = r.character(step, key, "replacement");
    d.prepend = r.prepend(step, key);
  } else {
    r.refuse(key, "is " + (type.empty() ? StepReader::shown(step) : "a " + type + " decoder"), allowed);
  }
  out.push_back(std::move(d));
}

}  // namespace

TextPipeline read_hf_text_steps(const json& file, const std::string& path) {
  const StepReader r(path);
  TextPipeline p;
  if (file.contains("normalizer")) read_normalizer(r, file["normalizer"], "normalizer", p.normalizer);
  if (file.contains("pre_tokenizer")) read_pre_tokenizer(r, file["pre_tokenizer"], "pre_tokenizer", p.pre_tokenizer);
  return p;
}

bool is_byte_level(const TextPipeline& pipeline) {
  for (const PreTokenizerStep& s : pipeline.pre_tokenizer)
    if (s.kind == PreTokenizerStep::Kind::byte_level) return true;
  return false;
}

std::vector<DecoderStep> read_hf_decoder(const json& file, const std::string& path, bool byte_level) {
  std::vector<DecoderStep> steps;
  if (file.contains("decoder") && !file["decoder"].is_null())
    read_decoder(StepReader(path), file["decoder"], "decoder", byte_level, steps);
  return steps;
}

}  // namespace st
