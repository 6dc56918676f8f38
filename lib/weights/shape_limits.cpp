#include "weights/shape_limits.hpp"

#include "deck/schema.hpp"

namespace st {

std::string shape_outside_deck_limits(const ModelShape& s, const ShapeFieldNames& f) {
  const std::pair<const char*, std::pair<std::int64_t, const std::string*>> dims[] = {
      {"n_layer", {s.n_layer, &f.n_layer}},
      {"d_model", {s.d_model, &f.d_model}},
      {"n_head", {s.n_head, &f.n_head}},
      {"seq_len", {s.seq_len, &f.seq_len}},
      {"vocab_size", {s.vocab_size, &f.vocab_size}},
  };
  for (const auto& [key, value] : dims) {
    const KeySpec* spec = find_key("model", key);
    const auto v = static_cast<double>(value.first);
    if (spec && (v < spec->min || v > spec->max))
      return *value.second + " = " + std::to_string(value.first) + " is outside the deck's range for model." + key +
             ", " + spec->allowed();
  }
  return "";
}

}  // namespace st
