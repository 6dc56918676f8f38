#pragma once
// The model sizes a weights file may declare: those the deck accepts (deck/schema.cpp), checked
// before a header's numbers are multiplied into byte counts.
#include <string>

#include "model/layout.hpp"

namespace st {

// "" if every dimension is within the deck's range for its key, else which is not:
// "n_layer (header[4]) = 100000 is outside the deck's range for model.n_layer, integer in [1, 4096]".
// `fields` names where each value came from: n_layer, d_model, n_head, seq_len, vocab_size.
struct ShapeFieldNames {
  std::string n_layer, d_model, n_head, seq_len, vocab_size;
};
std::string shape_outside_deck_limits(const ModelShape& shape, const ShapeFieldNames& fields);

}  // namespace st
