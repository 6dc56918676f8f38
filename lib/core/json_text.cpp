#include "core/json_text.hpp"

#include <nlohmann/json.hpp>

namespace st {

std::string json_text(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace st
