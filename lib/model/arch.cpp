#include "model/arch.hpp"

#include <string>

#include "core/error.hpp"

namespace st {

std::span<const ArchSpec* const> architectures() {
  // A new family adds its row here, after its arch_*.cpp.
  static const ArchSpec* const rows[] = {&gpt2_arch(), &llama_arch()};
  return rows;
}

const ArchSpec& arch_spec(Arch arch) {
  for (const ArchSpec* row : architectures())
    if (row->arch == arch) return *row;
  throw Error("no row in the architecture table for architecture " + std::to_string(static_cast<int>(arch)));
}

std::string arch_names() {
  std::string names;
  for (const ArchSpec* row : architectures()) names += (names.empty() ? "" : ", ") + std::string(arch_name(row->arch));
  return names;
}

}  // namespace st
