#include "ckpt/file_format.hpp"

#include <optional>
#include <sstream>
#include <type_traits>

#include "ckpt/h5.hpp"
#include "core/error.hpp"
#include "model/arch.hpp"

namespace st {
namespace {

// An attribute into a field's value, by its type (booleans are stored as integers, the
// architecture by name).
template <class T>
void read_value(hid_t at, const char* name, T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    value = h5::read_int_attribute(at, name) != 0;
  } else if constexpr (std::is_same_v<T, Arch>) {
    const std::string text = h5::read_string_attribute(at, name);
    const std::optional<Arch> arch = arch_from_name(text);
    if (!arch) throw Error("model architecture '" + text + "' is not one this shardtrain knows (" + arch_names() + ")");
    value = *arch;
  } else if constexpr (std::is_same_v<T, RopeScaling>) {
    const std::string text = h5::read_string_attribute(at, name);
    const std::optional<RopeScaling> scaling = rope_scaling_from_name(text);
    if (!scaling) throw Error("rope scaling '" + text + "' is not one this shardtrain knows (none, llama3)");
    value = *scaling;
  } else {
    h5::read_attribute(at, name, value);
  }
}

}  // namespace

std::vector<std::uint64_t> offsets_of(const std::vector<std::uint64_t>& all, std::size_t k, std::uint64_t chunks) {
  const auto first = all.begin() + static_cast<std::ptrdiff_t>(k * chunks);
  return {first, first + static_cast<std::ptrdiff_t>(chunks)};
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += 'x';
    s += std::to_string(shape[i]);
  }
  return s;
}

std::vector<std::int64_t> parse_shape(const std::string& text) {
  std::vector<std::int64_t> dims;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, 'x')) dims.push_back(std::stoll(part));
  return dims;
}

CheckpointInfo read_info(hid_t file) {
  if (!h5::has_attribute(file, "format_version")) {
    // The one other HDF5 file a user of shardtrain has at hand: an export of a checkpoint.
    if (h5::has_attribute(file, "source") && h5::has_attribute(file, "step")) {
      const std::string source = h5::read_string_attribute(file, "source");
      throw Error("is a parameters file written by `shardtrain ckpt export` (step " +
                  std::to_string(h5::read_int_attribute(file, "step")) +
                  "), not a checkpoint: it holds the parameters only, one dataset per tensor (read it with h5py or "
                  "h5dump); pass the checkpoint it was exported from, " + source);
    }
    throw Error("is an HDF5 file but not a shardtrain checkpoint (no format_version attribute at /)");
  }
  // The version first, on its own: a newer format may lack or change the other fields.
  CheckpointInfo info;
  info.format_version = h5::read_int_attribute(file, "format_version");
  if (info.format_version > kCheckpointFormat)
    throw Error("written in checkpoint format " + std::to_string(info.format_version) + ", newer than the " +
                std::to_string(kCheckpointFormat) + " this shardtrain reads (use the shardtrain that wrote it, or newer)");
  h5::Handle model = h5::open_group(file, "model");
  for (const CheckpointField& field : kCheckpointFields) {
    const hid_t at = field.in_model() ? model.get() : file;
    if (field.optional && !h5::has_attribute(at, field.name)) {
      // Older checkpoints lack the optional fields; a llama checkpoint always has its own keys (the
      // architecture, read before them, says which it records), and defaults in their place would
      // describe another model. A checkpoint without /model/arch is GPT-2's.
      if (field.recorded != Recorded::always && field.recorded != Recorded::named_arch &&
          field_recorded(field, info.shape))
        throw Error(std::string("attribute '/model/") + field.name + "' is missing (a " + arch_name(info.shape.arch) +
                    " checkpoint" +
                    (field.recorded == Recorded::scaled_rope
                         ? std::string(" with rope_scaling ") + rope_scaling_name(info.shape.rope_scaling)
                         : std::string()) +
                    " records it)");
      continue;
    }
    // The scaling's parameters without the scaling (read before them) would be silently unused.
    if (field.recorded == Recorded::scaled_rope && !std::holds_alternative<RopeScaling ModelShape::*>(field.member) &&
        !field_recorded(field, info.shape))
      throw Error(std::string("attribute '/model/rope_scaling' is missing (a llama checkpoint with '/model/") +
                  field.name + "' records it)");
    visit_field(info, field, [&](auto& value) { read_value(at, field.name, value); });
  }
  return info;
}

void write_field(hid_t at, const CheckpointInfo& info, const CheckpointField& field) {
  if (!field_recorded(field, info.shape)) return;
  visit_field(info, field, [&](const auto& value) {
    using T = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<T, double>) h5::write_real_attribute(at, field.name, value);
    else if constexpr (std::is_same_v<T, bool>) h5::write_attribute(at, field.name, std::int64_t{value ? 1 : 0});
    else if constexpr (std::is_same_v<T, Arch>) h5::write_attribute(at, field.name, std::string(arch_name(value)));
    else if constexpr (std::is_same_v<T, RopeScaling>)
      h5::write_attribute(at, field.name, std::string(rope_scaling_name(value)));
    else h5::write_attribute(at, field.name, value);
  });
}

void require_state_datasets(hid_t file, std::uint64_t elements) {
  for (const char* name : kStateDatasets) {
    if (!h5::has_link(file, name)) throw Error(std::string("dataset '/") + name + "' is missing");
    h5::Handle d = h5::open_dataset(file, name);
    const std::uint64_t n = h5::dataset_length(d.get());
    if (n != elements)
      throw Error(std::string("dataset '/") + name + "' holds " + std::to_string(n) + " elements, the model " +
                  std::to_string(elements));
  }
}

}  // namespace st
