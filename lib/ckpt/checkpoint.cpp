#include "ckpt/checkpoint.hpp"

#include "core/text.hpp"
#include "model/arch.hpp"

namespace st {

bool field_recorded(const CheckpointField& field, const ModelShape& shape) {
  const ArchSpec& arch = arch_spec(shape.arch);
  switch (field.recorded) {
    case Recorded::always: return true;
    case Recorded::named_arch: return arch.checkpoint_names_arch;
    case Recorded::llama_keys: return arch.llama_keys;
    case Recorded::scaled_rope: return arch.llama_keys && shape.rope_scaling != RopeScaling::none;
  }
  return true;
}

std::vector<ModelKey> model_keys(const ModelShape& file, const ModelShape& run) {
  using std::to_string;
  std::vector<ModelKey> keys{{"model.n_layer", to_string(file.n_layer), to_string(run.n_layer)},
                             {"model.d_model", to_string(file.d_model), to_string(run.d_model)},
                             {"model.n_head", to_string(file.n_head), to_string(run.n_head)},
                             {"model.seq_len", to_string(file.seq_len), to_string(run.seq_len)},
                             {"model.vocab_size", to_string(file.vocab_size), to_string(run.vocab_size)}};
  if (file.arch != run.arch) keys.push_back({"model.arch", arch_name(file.arch), arch_name(run.arch)});
  // A checkpoint with Llama's keys names all of them whatever the deck's architecture, so that the
  // --set suggestions (ckpt/locate.cpp) give the whole model; a GPT-2 deck's side shows Llama's
  // defaults.
  if (arch_spec(file.arch).llama_keys) {
    auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
    keys.push_back({"model.n_kv_head", to_string(file.kv_heads()), to_string(run.kv_heads())});
    keys.push_back({"model.ffn_dim", to_string(file.hidden()), to_string(run.hidden())});
    keys.push_back({"model.norm_eps", format_shortest(file.norm_eps), format_shortest(run.norm_eps)});
    keys.push_back({"model.rope_theta", format_shortest(file.rope_theta), format_shortest(run.rope_theta)});
    keys.push_back({"model.tie_embeddings", flag(file.tie_embeddings), flag(run.tie_embeddings)});
    if (file.rope_scaling != RopeScaling::none || run.rope_scaling != RopeScaling::none)
      keys.push_back(
          {"model.rope_scaling", rope_scaling_name(file.rope_scaling), rope_scaling_name(run.rope_scaling)});
    if (file.rope_scaling == RopeScaling::llama3) {
      keys.push_back({"model.rope_factor", format_shortest(file.rope_factor), format_shortest(run.rope_factor)});
      keys.push_back({"model.rope_low_freq_factor", format_shortest(file.rope_low_freq_factor),
                      format_shortest(run.rope_low_freq_factor)});
      keys.push_back({"model.rope_high_freq_factor", format_shortest(file.rope_high_freq_factor),
                      format_shortest(run.rope_high_freq_factor)});
      keys.push_back({"model.rope_original_positions", to_string(file.rope_original_positions),
                      to_string(run.rope_original_positions)});
    }
  }
  return keys;
}

std::string model_differences(const ModelShape& file, const ModelShape& run) {
  std::vector<ModelKey> keys = model_keys(file, run);
  keys.push_back({"padded vocabulary (model.vocab_pad_to)", std::to_string(file.padded_vocab),
                  std::to_string(run.padded_vocab)});
  std::vector<std::string> diffs;
  for (const ModelKey& k : keys)
    if (k.file != k.deck) diffs.push_back(std::string(k.key) + " = " + k.file + " in the checkpoint, " + k.deck + " in the deck");
  return join(diffs, "; ");
}

}  // namespace st
