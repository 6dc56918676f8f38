#pragma once
// Where a checkpoint write's time goes: named phases, in order, each with its wall-clock seconds
// on the rank that records them. Every phase of a write ends in a collective or is rank 0's own
// work between collectives, so rank 0's phases add up to the time the whole job spent in it.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/timer.hpp"

namespace st {

class PhaseLog {
 public:
  // Ends the phase running since the last mark (or since the log was made) under `name`.
  void mark(std::string name) {
    const double now = clock_.seconds();
    phases_.emplace_back(std::move(name), now - last_);
    last_ = now;
  }
  // Starts the next phase now without recording the time since the last mark.
  void skip() { last_ = clock_.seconds(); }
  void add(std::string name, double seconds) { phases_.emplace_back(std::move(name), seconds); }
  void append(const PhaseLog& other) { phases_.insert(phases_.end(), other.phases_.begin(), other.phases_.end()); }
  const std::vector<std::pair<std::string, double>>& phases() const { return phases_; }
  double total() const {
    double sum = 0;
    for (const auto& p : phases_) sum += p.second;
    return sum;
  }
  // "layout 0.012 s, checksums 0.204 s, ..."
  std::string text() const {
    std::string s;
    char number[32];
    for (const auto& [name, seconds] : phases_) {
      std::snprintf(number, sizeof number, " %.3f s", seconds);
      s += (s.empty() ? "" : ", ") + name + number;
    }
    return s;
  }
  // {"layout":0.012,...}: each phase's seconds under its name, in the order first marked.
  nlohmann::ordered_json json() const;

 private:
  Stopwatch clock_;
  double last_ = 0;
  std::vector<std::pair<std::string, double>> phases_;
};

}  // namespace st
