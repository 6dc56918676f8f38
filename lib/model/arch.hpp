#pragma once
// The architecture table: one row (ArchSpec) per model family, each family's row and the code it
// points to in a file of its own (model/arch_gpt2.cpp, model/arch_llama.cpp). Whatever differs
// between families in the model's terms is asked of the row: the shape's own deck keys, the
// parameter layout, activation sizes, FLOPs, and which Model class to build. Code that is the
// same for every family reads the row instead of asking "is this a llama?", so that a third
// family is its Arch and word (core/choices.hpp), its model class, its arch_*.cpp and one line in
// architectures().
//
// The layers above keep their family rows beside their own code, keyed by the same Arch, since
// model/ cannot see them: the weights files other tools write (weights/weight_formats.hpp). The
// checkpoint reads the traits below (which keys a family records) rather than keeping a row.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "exec/kernel_scratch.hpp"
#include "model/activations.hpp"
#include "model/layout.hpp"

namespace st {

class Exec;
struct ModelConfig;
struct TensorGroup;
template <class Real, class S>
class Model;

// Builds a family's model in one precision (model/model.hpp make_model; a row's are
// make_family_model's).
template <class Real, class S = Real>
using ModelFactory = std::unique_ptr<Model<Real, S>> (*)(const ModelShape& shape, int max_batch, Exec& exec,
                                                         Recompute recompute, TensorGroup tensor, ModelPart part);

struct ArchSpec {
  Arch arch;  // its word (model.arch's value, a checkpoint's /model/arch) is arch_name's

  // The shape.
  // Sets the keys this family has beyond the six every family has (n_layer, d_model, n_head,
  // seq_len, vocab_size and the padding), from the deck's [model] table.
  void (*shape_from_deck)(const ModelConfig& model, ModelShape& shape);
  // Whether the shape has Llama's keys (n_kv_head, ffn_dim, norm_eps, rope_theta,
  // tie_embeddings, rope scaling): set by the deck, recorded in checkpoints, compared with
  // weights files. GPT-2 fixes them; its checkpoints record none, so their bytes stay those of
  // the versions before Llama.
  bool llama_keys;
  // Whether checkpoints name the family at /model/arch. A checkpoint without it is GPT-2's (the
  // only family before the attribute).
  bool checkpoint_names_arch;
  // Positions are rotary: no table of them, so a context shorter than a weights file's runs on
  // its weights, and rope scaling applies.
  bool rotary_positions;
  // The MLP's up projections stacked in one matmul (Llama's gate and up: 2); the block's widest
  // linear layer is this many times the MLP width.
  std::int64_t mlp_up_projections;
  // model_summary's words for the family: before "n_layer" ("llama, "), and after "n_head" (the
  // shape's own keys).
  const char* summary_prefix;
  std::string (*summary_keys)(const ModelShape& shape);

  // The parameters (model/layout.hpp make_layout, after the tensor split is checked).
  ParamLayout (*layout)(const ModelShape& shape, TensorSplit split);

  // Memory and compute (model/activations.hpp activation_sizes; model/layout.hpp matmul_params;
  // recompute_flops_per_token).
  ActivationSizes (*activation_sizes)(const ModelShape& shape, int max_batch, Recompute recompute, int heads_at_once,
                                      bool device, int tensor, bool sequence_parallel, bool flash, bool bf16_logits);
  std::int64_t (*matmul_params)(const ModelShape& shape);
  // A block's forward matmul FLOPs per token, less the attention's output projection's: what full
  // recomputation does again besides attention.
  double (*recomputed_matmul_flops)(const ModelShape& shape);
  // The linear products of a block on a rank of a `tensor`-way split, then the LM head's (last):
  // what the GPU kernels' scratch is sized from (model/activations.hpp kernel_workload).
  std::vector<LinearProduct> (*linear_products)(const ModelShape& shape, int tensor);
  // Parameter vectors of one norm: LayerNorm's weight and bias, RMSNorm's weight.
  int norm_parameter_vectors;

  // The model.
  ModelFactory<float> make_float;
  ModelFactory<double> make_double;
  ModelFactory<float, Bf16> make_bf16;  // bf16 storage (Model<float, Bf16>)
};

// The rows, each defined in its family's file.
const ArchSpec& gpt2_arch();   // model/arch_gpt2.cpp
const ArchSpec& llama_arch();  // model/arch_llama.cpp

// Every family, in the order the deck reference lists them.
std::span<const ArchSpec* const> architectures();
const ArchSpec& arch_spec(Arch arch);
// "gpt2, llama": the families' names, for messages that list the choices.
std::string arch_names();

}  // namespace st
