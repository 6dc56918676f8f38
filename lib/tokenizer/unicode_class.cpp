#include "tokenizer/unicode_class.hpp"

#include <unicode/uchar.h>

namespace st {

const CharClassTable& CharClassTable::get() {
  static const CharClassTable table;
  return table;
}

CharClassTable::CharClassTable() : classes_(0x110000, static_cast<std::uint8_t>(CharClass::other)) {
  for (UChar32 c = 0; c < 0x110000; ++c) {
    CharClass k = CharClass::other;
    if (u_isUWhiteSpace(c)) {
      k = CharClass::space;
    } else {
      switch (u_charType(c)) {
        case U_UPPERCASE_LETTER:
        case U_LOWERCASE_LETTER:
        case U_TITLECASE_LETTER:
        case U_MODIFIER_LETTER:
        case U_OTHER_LETTER:
          k = CharClass::letter;
          break;
        case U_DECIMAL_DIGIT_NUMBER:
        case U_LETTER_NUMBER:
        case U_OTHER_NUMBER:
          k = CharClass::number;
          break;
        default:
          break;
      }
    }
    classes_[static_cast<std::size_t>(c)] = static_cast<std::uint8_t>(k);
  }
}

}  // namespace st
