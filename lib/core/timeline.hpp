#pragma once
// A per-rank timeline of what the rank did when (compute phases, each collective, each wait),
// written as Chrome trace / Perfetto JSON so overlap of communication and compute can be seen.
// Off unless asked for: a disabled timeline records nothing.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace st {

class Timeline {
 public:
  // Tracks are rows of the trace ("compute", "comm: group", ...).
  explicit Timeline(bool enabled) : enabled_(enabled), allowed_(enabled), origin_(std::chrono::steady_clock::now()) {}
  bool enabled() const { return enabled_; }
  // Recording can be switched off (after the traced steps) and on again.
  void set_enabled(bool on) { enabled_ = on && allowed_; }

  double now_us() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
  }
  void record(const std::string& track, std::string name, double start_us, double end_us, std::uint64_t bytes = 0);

  // RAII span on one track.
  class Span {
   public:
    Span(Timeline* timeline, const char* track, std::string name, std::uint64_t bytes = 0)
        : timeline_(timeline && timeline->enabled() ? timeline : nullptr), track_(track), bytes_(bytes) {
      if (timeline_) {
        name_ = std::move(name);
        start_ = timeline_->now_us();
      }
    }
    ~Span() {
      if (timeline_) timeline_->record(track_, std::move(name_), start_, timeline_->now_us(), bytes_);
    }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    Timeline* timeline_;
    const char* track_;
    std::string name_;
    double start_ = 0;
    std::uint64_t bytes_;
  };

  // The trace of this rank (pid = rank) as a JSON document.
  std::string json(int rank) const;

 private:
  struct Event {
    int track;
    std::string name;
    double start_us, end_us;
    std::uint64_t bytes;
  };
  std::atomic<bool> enabled_;
  bool allowed_;
  std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<std::string> tracks_;
  std::vector<Event> events_;
};

}  // namespace st
