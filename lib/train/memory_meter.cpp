#include "train/memory_meter.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/process_memory.hpp"
#include "core/text.hpp"
#include "exec/host_bf16_kernels.hpp"

namespace st {

MemoryMeter::MemoryMeter() : resident_before_(resident_bytes()), proportional_before_(proportional_bytes()) {}

void MemoryMeter::buffers_ready() { peak_restarted_ = restart_peak_resident(); }

std::string MemoryMeter::line(const std::string& when, ShardedModel& net, std::uint64_t checkpoint_copy,
                              RunDirectory* metrics) const {
  const MemoryReport m = net.strategy().memory();
  const std::uint64_t activations = net.activation_bytes();
  // A CPU rank with bf16 activations: the host reference kernels' widening slots, which `check`
  // counts as the kernels' scratch (a GPU's is reported below, from the device).
  std::uint64_t reference_scratch = 0;
  if (net.parallel_plan().stores_bf16() && !net.execution().choice().cuda)
    if (const auto* k = dynamic_cast<const HostBf16LayerKernels*>(net.execution().exec().bf16_layer_kernels()))
      reference_scratch = k->held_bytes();
  const std::uint64_t total = m.model_state() + m.workspace + activations + checkpoint_copy;
  const std::uint64_t largest = net.agreements().max_over_ranks(total, "world (memory)");
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
    if (reference_scratch > 0) fields["kernels_scratch"] = reference_scratch;
    if (net.execution().choice().cuda) {
      fields["device_buffers_peak"] = net.execution().device_peak_bytes();
      fields["device_scratch_peak"] = net.execution().device_scratch_peak_bytes();
      fields["device_scratch_grown"] = net.execution().device_scratch_grown();
    }
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
  // The accounted buffers on rank 0, then what was measured: the metrics row has every figure.
  std::string text = "memory " + when + " (rank 0): params " + b(m.params) + ", grads " + b(m.grads) + ", optimizer " +
                     b(m.optimizer);
  if (m.workspace > 0) text += ", workspace " + b(m.workspace);
  text += ", activations " + b(activations);
  if (checkpoint_copy > 0) text += ", checkpoint copy " + b(checkpoint_copy);
  text += " = " + b(total) + " (largest rank " + b(largest) + ")";
  if (reference_scratch > 0) text += "; the bf16 reference kernels' scratch " + b(reference_scratch);
  const Execution& e = net.execution();
  if (e.choice().cuda) {
    const int sharing = e.choice().ranks_on_device;
    return text + "; GPU " + b(e.device_used_bytes()) + " of " + b(e.device_total_bytes()) + " in use (" +
           b(e.device_bytes()) + " of it this rank's buffers, at most " + b(e.device_scratch_peak_bytes()) +
           " its kernels' scratch" +
           (sharing > 1 ? "; the GPU is shared by " + std::to_string(sharing) + " ranks" : std::string()) + ")";
  }
  if (!peak_restarted_) return text;
  const double grown = static_cast<double>(peak_resident_bytes()) - static_cast<double>(resident_before_);
  return text + "; measured peak " + b(peak_resident_bytes()) + ", +" + format_bytes(std::max(0.0, grown)) +
         " in the run";
}

}  // namespace st
