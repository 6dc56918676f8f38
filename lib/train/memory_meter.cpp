#include "train/memory_meter.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/process_memory.hpp"
#include "core/text.hpp"

namespace st {

MemoryMeter::MemoryMeter() : resident_before_(resident_bytes()), proportional_before_(proportional_bytes()) {}

void MemoryMeter::buffers_ready() { peak_restarted_ = restart_peak_resident(); }

std::string MemoryMeter::line(const std::string& when, ShardedModel& net, std::uint64_t checkpoint_copy,
                              RunDirectory* metrics) const {
  const MemoryReport m = net.strategy().memory();
  const std::uint64_t activations = net.model().activation_bytes();
  const std::uint64_t total = m.model_state() + m.workspace + activations + checkpoint_copy;
  const std::uint64_t largest = net.comms().max_over_ranks(total, "world (memory)");
  auto b = [](std::uint64_t x) { return format_bytes(static_cast<double>(x)); };
  if (metrics) {
    nlohmann::ordered_json fields = {{"kind", "memory"},
                                     {"when", when},
                                     {"params", m.params},
                                     {"grads", m.grads},
                                     {"optimizer", m.optimizer},
                                     {"workspace", m.workspace},
                                     {"activations", activations},
                                     {"checkpoint_copy", checkpoint_copy},
                                     {"total", total},
                                     {"largest_rank_total", largest}};
    if (peak_restarted_) {
      fields["resident_before"] = resident_before_;
      fields["resident_peak"] = peak_resident_bytes();
    }
    if (proportional_before_ > 0) {
      fields["proportional_before"] = proportional_before_;
      fields["proportional_now"] = proportional_bytes();
    }
    metrics->metric(fields);
  }
  const std::string where =
      net.execution().choice.cuda
          ? " (GPU memory; shardtrain's buffers on the device " + b(net.execution().device_bytes()) + ", at most " +
                b(net.execution().device_peak_bytes()) + "; the device has " +
                b(net.execution().device_used_bytes()) + " of " + b(net.execution().device_total_bytes()) +
                " in use, with the CUDA context, cuBLAS and NCCL)"
          : std::string();
  return "memory per rank " + when + where + ": params " + b(m.params) + ", grads " + b(m.grads) +
         ", optimizer " + b(m.optimizer) + ", workspace " + b(m.workspace) + ", activations " + b(activations) +
         (checkpoint_copy > 0 ? ", checkpoint copy " + b(checkpoint_copy) : std::string()) + " = " + b(total) +
         " on rank 0 (largest rank " + b(largest) + ")" + measured_on_host(net);
}

std::string MemoryMeter::measured_on_host(const ShardedModel& net) const {
  if (!peak_restarted_ || net.execution().choice.cuda) return "";
  const std::uint64_t peak = peak_resident_bytes();
  const double grown = static_cast<double>(peak) - static_cast<double>(resident_before_);
  std::string text = "; measured on rank 0: peak resident " + format_bytes(static_cast<double>(peak)) + ", " +
                     format_bytes(std::max(0.0, grown)) + " above the " +
                     format_bytes(static_cast<double>(resident_before_)) + " before the run's buffers";
  // The resident set counts the pages of other ranks' shared-memory windows this rank reads; the
  // proportional set splits them between the ranks, so the ranks' own memory shows.
  if (proportional_before_ > 0) {
    const double now = static_cast<double>(proportional_bytes()) - static_cast<double>(proportional_before_);
    text += "; proportional set now " + format_bytes(std::max(0.0, now)) + " above";
  }
  return text;
}

}  // namespace st
