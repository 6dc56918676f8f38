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
  for (const ArchSpec* row : architectures()) names += (names.empty() ? "" : ", ") + std::string(row->name);
  return names;
}

const char* arch_name(Arch arch) { return arch_spec(arch).name; }

std::optional<Arch> arch_from_name(std::string_view name) {
  for (const ArchSpec* row : architectures())
    if (name == row->name) return row->arch;
  return std::nullopt;
}

}  // namespace st
