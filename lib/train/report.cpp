#include "train/report.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/text.hpp"

namespace st {

std::string settings_table(const Config& config, const std::vector<std::pair<std::string, std::string>>& derived) {
  std::size_t key_width = 10, value_width = 5;
  for (const auto& [key, value] : config.resolved) {
    key_width = std::max(key_width, key.size());
    value_width = std::max(value_width, std::min<std::size_t>(value.size(), 48));
  }
  for (const auto& [key, value] : derived) {
    key_width = std::max(key_width, key.size());
    value_width = std::max(value_width, std::min<std::size_t>(value.size(), 72));
  }
  std::ostringstream os;
  auto rule = [&] { os << "+" << std::string(key_width + 2, '-') << "+" << std::string(value_width + 2, '-') << "+\n"; };
  auto row = [&](const std::string& k, const std::string& v, const std::string& note) {
    char line[512];
    std::snprintf(line, sizeof line, "| %-*s | %-*s |", static_cast<int>(key_width), k.c_str(),
                  static_cast<int>(value_width), v.c_str());
    os << line << (note.empty() ? "" : " " + note) << "\n";
  };
  rule();
  row("setting", "value", "(from)");
  rule();
  for (const auto& [key, value] : config.resolved) row(key, value, config.origin.at(key));
  rule();
  for (const auto& [key, value] : derived) row(key, value, "");
  rule();
  return os.str();
}

std::string step_line(const StepRecord& r) {
  char gemm[48] = "";
  if (r.mfu_of_measured_gemm > 0)
    std::snprintf(gemm, sizeof gemm, " (%.1f%% of measured GEMM)", r.mfu_of_measured_gemm * 100.0);
  // Under tensor parallelism, the group's share: per-layer activations, often most of the bytes.
  const std::string tensor =
      r.comm_tensor_bytes > 0 ? "tensor group " + format_bytes(static_cast<double>(r.comm_tensor_bytes)) + ", " : "";
  char line[560];
  std::snprintf(line, sizeof line,
                "step %6lld/%lld | loss %.4f | lr %.3e | grad norm %.4f | %8.1f ms | %9.0f tok/s | MFU %5.1f%%%s | "
                "mem %s | comm %s (%sinter-node %s), exposed %.1f ms | %s elapsed, ETA %s",
                static_cast<long long>(r.step), static_cast<long long>(r.steps), r.loss, r.lr, r.grad_norm,
                r.seconds * 1e3, r.tokens_per_second, r.mfu * 100.0, gemm,
                format_bytes(static_cast<double>(r.memory_bytes)).c_str(),
                format_bytes(static_cast<double>(r.comm_intra_bytes + r.comm_inter_bytes)).c_str(), tensor.c_str(),
                format_bytes(static_cast<double>(r.comm_inter_bytes)).c_str(), r.exposed_comm_seconds * 1e3,
                format_duration(r.elapsed_seconds).c_str(), format_duration(r.eta_seconds).c_str());
  return line;
}

nlohmann::ordered_json step_metrics(const StepRecord& r) {
  nlohmann::ordered_json j = {{"kind", "train"},
                               {"step", r.step},
                               {"loss", r.loss},
                               {"lr", r.lr},
                               {"grad_norm", r.grad_norm},
                               {"ms", r.seconds * 1e3},
                               {"tokens_per_s", r.tokens_per_second},
                               {"mfu", r.mfu},
                               {"memory_bytes", r.memory_bytes},
                               {"comm_bytes", r.comm_intra_bytes + r.comm_inter_bytes},
                               {"comm_intra_bytes", r.comm_intra_bytes},
                               {"comm_inter_bytes", r.comm_inter_bytes},
                               {"comm_tensor_bytes", r.comm_tensor_bytes},
                               {"exposed_comm_ms", r.exposed_comm_seconds * 1e3},
                               {"elapsed_s", r.elapsed_seconds},
                               {"eta_s", r.eta_seconds}};
  if (r.mfu_of_measured_gemm > 0) j["mfu_of_measured_gemm"] = r.mfu_of_measured_gemm;
  return j;
}

}  // namespace st
