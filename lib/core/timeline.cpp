#include "core/timeline.hpp"

#include <cstdio>

#include "core/text.hpp"

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
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  char line[256];
  std::snprintf(line, sizeof line, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}", rank,
                rank);
  out += line;
  for (std::size_t t = 0; t < tracks_.size(); ++t) {
    std::snprintf(line, sizeof line, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%zu,\"args\":{\"name\":",
                  rank, t);
    out += line + json_string(tracks_[t]) + "}}";
  }
  for (const Event& e : events_) {
    std::snprintf(line, sizeof line, ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.1f,\"dur\":%.1f,\"name\":", rank, e.track,
                  e.start_us, e.end_us - e.start_us);
    out += line + json_string(e.name);
    if (e.bytes) out += ",\"args\":{\"bytes\":" + std::to_string(e.bytes) + "}";
    out += "}";
  }
  out += "\n]}\n";
  return out;
}

}  // namespace st
