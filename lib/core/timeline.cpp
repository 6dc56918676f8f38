#include "core/timeline.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/json_text.hpp"

namespace st {

void Timeline::record(const std::string& track, std::string name, double start_us, double end_us, std::uint64_t bytes) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  int id = 0;
  while (id < static_cast<int>(tracks_.size()) && tracks_[static_cast<std::size_t>(id)] != track) ++id;
  if (id == static_cast<int>(tracks_.size())) tracks_.push_back(track);
  events_.push_back({id, std::move(name), start_us, end_us, bytes});
}

std::string Timeline::json(int rank) const {
  using Json = nlohmann::ordered_json;
  // Tenths of a microsecond: finer than anything recorded here needs, and a small file.
  const auto tenths = [](double us) { return std::round(us * 10.0) / 10.0; };
  std::lock_guard<std::mutex> lock(mutex_);
  // Metadata ("M") events name the process (the rank) and each thread (a track); "X" events are spans.
  Json events = Json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
  for (std::size_t t = 0; t < tracks_.size(); ++t)
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", t}, {"args", {{"name", tracks_[t]}}}});
  for (const Event& e : events_) {
    Json span = {{"ph", "X"}, {"pid", rank}, {"tid", e.track}, {"ts", tenths(e.start_us)},
                 {"dur", tenths(e.end_us - e.start_us)}, {"name", e.name}};
    if (e.bytes) span["args"] = {{"bytes", e.bytes}};
    events.push_back(std::move(span));
  }
  return json_text({{"displayTimeUnit", "ms"}, {"traceEvents", std::move(events)}}) + "\n";
}

}  // namespace st
