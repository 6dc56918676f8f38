#include "train/report.hpp"

#include <algorithm>
#include <cmath>
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

namespace {
// A value of the step line: "nan" whatever its sign bit, else printf's form.
std::string number(const char* format, double x) {
  if (std::isnan(x)) return "nan";
  char text[48];
  std::snprintf(text, sizeof text, format, x);
  return text;
}

// Three significant digits: "7.07 MiB", "61.2 GiB", "942 MiB" (metrics.jsonl has the bytes).
std::string short_bytes(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  for (; bytes >= 1024.0 && unit < 4; ++unit) bytes /= 1024.0;
  const char* format = unit == 0 || bytes >= 99.95 ? "%.0f %s" : bytes >= 9.995 ? "%.1f %s" : "%.2f %s";
  char text[32];
  std::snprintf(text, sizeof text, format, bytes, units[unit]);
  return text;
}

// "512.3 ms", "123 ms", "12.35 s".
std::string short_seconds(double seconds) {
  if (seconds >= 1) return number("%.2f s", seconds);
  return number(seconds >= 0.1 ? "%.0f ms" : "%.1f ms", seconds * 1e3);
}
}  // namespace

std::string step_line(const StepRecord& r) {
  std::string line = "step " + std::to_string(r.step) + "/" + std::to_string(r.steps) + " | loss " +
                     number("%.4f", r.loss) + " | lr " + number("%.1e", r.lr) + " | norm " + number("%.3g", r.grad_norm) +
                     " | " + number("%.1f ms", r.seconds * 1e3) + " | " +
                     (r.tokens_per_second >= 1e6 ? number("%.2fM", r.tokens_per_second / 1e6)
                                                 : number("%.0f", r.tokens_per_second)) +
                     " tok/s | MFU " + number("%.1f", r.mfu * 100.0) + "%";
  if (r.mfu_of_measured_gemm > 0) line += " (" + number("%.0f", r.mfu_of_measured_gemm * 100.0) + "% of GEMM)";
  if (r.largest_peak_bytes > 0)
    line += " | mem " + short_bytes(static_cast<double>(r.largest_peak_bytes)) +
            (r.peak_share > 0 ? " " + number("%.0f", r.peak_share * 100.0) + "%" : std::string());
  // The bytes this rank sent; under tensor parallelism and across nodes, their share of them.
  std::vector<std::string> parts;
  if (r.comm_tensor_bytes > 0) parts.push_back("tensor " + short_bytes(static_cast<double>(r.comm_tensor_bytes)));
  if (r.comm_inter_bytes > 0) parts.push_back("inter-node " + short_bytes(static_cast<double>(r.comm_inter_bytes)));
  if (r.comm_pipeline_bytes > 0) parts.push_back("pipeline " + short_bytes(static_cast<double>(r.comm_pipeline_bytes)));
  line += " | comm " + short_bytes(static_cast<double>(r.comm_intra_bytes + r.comm_inter_bytes + r.comm_pipeline_bytes)) +
          (parts.empty() ? std::string() : " (" + join(parts, ", ") + ")") + ", " +
          short_seconds(r.exposed_comm_seconds) + " exposed | ETA " + format_duration(r.eta_seconds);
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
                               {"comm_bytes", r.comm_intra_bytes + r.comm_inter_bytes + r.comm_pipeline_bytes},
                               {"comm_intra_bytes", r.comm_intra_bytes},
                               {"comm_inter_bytes", r.comm_inter_bytes},
                               {"comm_tensor_bytes", r.comm_tensor_bytes},
                               {"comm_pipeline_bytes", r.comm_pipeline_bytes},
                               {"exposed_comm_ms", r.exposed_comm_seconds * 1e3},
                               {"elapsed_s", r.elapsed_seconds},
                               {"eta_s", r.eta_seconds},
                               {"tokens", r.tokens_seen},
                               {"peak_bytes", r.peak_bytes}};
  if (r.mfu_of_measured_gemm > 0) j["mfu_of_measured_gemm"] = r.mfu_of_measured_gemm;
  return j;
}

}  // namespace st
