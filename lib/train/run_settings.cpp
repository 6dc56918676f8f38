#include "train/run_settings.hpp"

#include "core/error.hpp"
#include "core/text.hpp"
#include "exec/attention_probs.hpp"
#include "model/deck_shape.hpp"

namespace st {

SettingsRows derived_rows(const DerivedSettings& s) {
  auto b = [](std::uint64_t x) { return format_bytes(static_cast<double>(x)); };
  const MemoryReport& m = s.model_state;
  return {
      {"world size", std::to_string(s.world_size) + " ranks" + s.world_note},
      {"device", s.device},
      {"micro-batches per step", std::to_string(s.batches.accum_steps) + " x " + std::to_string(s.batches.micro_batch) +
                                     " sequences per rank"},
      {"tokens per step", std::to_string(s.batches.global_batch * s.batches.seq_len)},
      {"parameters", std::to_string(s.parameters) + " (" + std::to_string(s.segments) + " segments)"},
      {"strategy", s.strategy},
      {"model state per rank", b(m.model_state()) + " (params " + b(m.params) + ", grads " + b(m.grads) +
                                   ", optimizer " + b(m.optimizer) +
                                   (s.model_state_note.empty() ? "" : "; " + s.model_state_note) + ")"},
      {"activations per rank", b(s.activations) + " (" + (s.bf16_activations ? "bf16; " : "") +
                                   "model.recompute = " + recompute_name(s.recompute) + ")"},
      {"attention", s.attention},
      {"classifier", s.classifier},
      {"data", s.data + (s.sequential_data ? " (sequential)" : "")},
      {"tokenizer", s.tokenizer},
      {"run directory", s.run_directory},
  };
}

std::string describe_attention(bool gpu, Precision precision, AttentionChoice attention, int head_dim) {
  const bool bf16 = precision == Precision::bf16, automatic = attention == AttentionChoice::automatic;
  if (attention_uses_flash(gpu && bf16 && automatic, head_dim))
    return "flash (bf16 tiles on the tensor cores; a log-sum-exp per row kept, no T x T probabilities)";
  const std::string exact = "exact, T x T probabilities";
  if (!gpu) return exact + " (the CPU's)";
  if (!bf16) return exact + " (fp32 keeps the exact path; flash attention is bf16's)";
  if (!automatic) return exact + " (parallel.attention = \"exact\")";
  return exact + " (flash attention has no kernel for head width " + std::to_string(head_dim) + ": 32, 64, 128)";
}

void refuse_gpu_bf16_activations(const Config& config) {
  if (!config.parallel.stores_bf16_activations()) return;
  const std::string key = config.deck_path + ": parallel.activations = \"bf16\": on a GPU, attention with bf16 "
                                             "activations is flash attention, ";
  if (config.parallel.attention != AttentionChoice::automatic)
    throw Error(key + "which parallel.attention = \"exact\" turns off; leave parallel.attention at \"auto\" (or "
                      "set parallel.activations = \"fp32\")",
                ErrorScope::all_ranks);
  const auto head_dim = static_cast<int>(model_shape(config.model).head_dim());
  if (!flash_attention_head_dim(head_dim))
    throw Error(key + "which has no kernel for heads " + std::to_string(head_dim) +
                    " wide (model.d_model / model.n_head; 32, 64 and 128 have one); set parallel.activations = "
                    "\"fp32\"",
                ErrorScope::all_ranks);
}

std::string describe_classifier(bool gpu, const ParallelConfig& parallel) {
  const bool bf16 = parallel.precision == Precision::bf16, automatic = parallel.classifier == ClassifierChoice::automatic;
  if (parallel.stores_bf16_activations() || (gpu && bf16 && automatic))
    return "fused (bf16 logits; loss and d(logits) in one kernel per row)";
  const std::string unfused = "unfused, fp32 logits";
  if (!gpu) return unfused + " (the CPU's)";
  if (!bf16) return unfused + " (fp32 keeps them; the fused classifier is bf16's)";
  return unfused + " (parallel.classifier = \"unfused\")";
}

}  // namespace st
