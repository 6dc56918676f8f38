#include "ckpt/phase_log.hpp"

#include <nlohmann/json.hpp>

namespace st {

nlohmann::ordered_json PhaseLog::json() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  // A name marked twice holds the sum of its times: the object's values still add up to total().
  for (const auto& [name, seconds] : phases_) out[name] = out.value(name, 0.0) + seconds;
  return out;
}

}  // namespace st
