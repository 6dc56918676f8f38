#include "train/run_dir.hpp"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_text.hpp"
#include "core/text.hpp"

namespace st {

std::string resolve_out_dir(const Config& config) {
  std::string out = config.run.out_dir;
  const std::string stem = std::filesystem::path(config.deck_path).stem().string();
  for (std::size_t at = out.find("{deck}"); at != std::string::npos; at = out.find("{deck}"))
    out.replace(at, 6, stem);
  return out;
}

RunDirectory::RunDirectory(const Config& config, bool active, bool append)
    : active_(active), path_(resolve_out_dir(config)) {
  if (!active_) return;
  std::error_code ec;
  std::filesystem::create_directories(path_, ec);
  if (ec) throw Error("cannot create run directory '" + path_ + "' (run.out_dir): " + ec.message());
  {
    std::ofstream deck(path_ + "/deck.toml");
    deck << config.deck_text;
    std::ofstream resolved(path_ + "/resolved.toml");
    resolved << "# Every key of the deck after defaults and --set overrides.\n";
    std::string section;
    for (const auto& [key, value] : config.resolved) {
      const std::string s = key.substr(0, key.find('.'));
      if (s != section) resolved << (section.empty() ? "" : "\n") << "[" << (section = s) << "]\n";
      resolved << key.substr(key.find('.') + 1) << " = " << value << "   # " << config.origin.at(key) << "\n";
    }
    if (!deck || !resolved) throw Error("cannot write the deck into run directory '" + path_ + "'");
  }
  const auto mode = append ? std::ios::app : std::ios::trunc;
  log_.open(path_ + "/train.log", mode);
  metrics_.open(path_ + "/metrics.jsonl", mode);
  if (!log_ || !metrics_) throw Error("cannot open train.log / metrics.jsonl in '" + path_ + "'");
}

void RunDirectory::log(const std::string& line) {
  if (!active_) return;
  log_ << line << '\n';
  log_.flush();
}

void RunDirectory::metric(const nlohmann::ordered_json& fields) {
  if (!active_) return;
  ST_REQUIRE(fields.is_object(), "a metrics line is a JSON object");
  // Every line says when it was written: "time" (UTC, ISO 8601) first.
  nlohmann::ordered_json line = {{"time", utc_timestamp()}};
  line.update(fields);
  metrics_ << json_text(line) << '\n';
  metrics_.flush();
}

}  // namespace st
