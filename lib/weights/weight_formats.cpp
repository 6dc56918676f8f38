#include "weights/weight_formats.hpp"

#include "core/error.hpp"

namespace st {

const WeightFormats& weight_formats(Arch arch) {
  // A new family adds its row here, after its weights file.
  static const WeightFormats* const rows[] = {&gpt2_weight_formats(), &llama_weight_formats()};
  for (const WeightFormats* row : rows)
    if (row->arch == arch) return *row;
  throw Error(std::string("no weights formats for model.arch = \"") + arch_name(arch) + "\"");
}

void require_llmc_holds(const ModelShape& shape) {
  if (!weight_formats(shape.arch).llmc)
    throw Error(std::string("llm.c files hold GPT-2 models; this one is model.arch = \"") + arch_name(shape.arch) +
                "\" (export it with --format safetensors or hdf5)");
}

}  // namespace st
