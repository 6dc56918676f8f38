#include "ckpt/export.hpp"

#include <filesystem>

#include "ckpt/catalogue.hpp"
#include "ckpt/file_format.hpp"
#include "ckpt/h5.hpp"
#include "core/error.hpp"

namespace st {

namespace fs = std::filesystem;

CheckpointParams read_checkpoint_params(const std::string& path) {
  try {
    if (!fs::exists(path)) throw Error("no such file");
    h5::Handle file = h5::open_file_serial(path);
    CheckpointParams out;
    out.info = read_info(file.get());
    const std::uint64_t elements = make_layout(out.info.shape).total();
    require_state_datasets(file.get(), elements);
    out.params.resize(elements);
    h5::read_ranges(h5::open_dataset(file.get(), "params").get(), {{0, elements}}, out.params.data());
    file.close("closing " + path);
    return out;
  } catch (const Error& e) {
    throw Error("checkpoint " + path + ": " + e.what(), ErrorScope::all_ranks);
  }
}

void export_checkpoint(const std::string& path, const std::string& out) {
  try {
    if (const std::string problem = checkpoint_path_problem(path, false); !problem.empty()) throw Error(problem);
    h5::Handle file = h5::open_file_serial(path);
    const CheckpointInfo info = read_info(file.get());
    const std::uint64_t elements = make_layout(info.shape).total();
    require_state_datasets(file.get(), elements);
    h5::Handle table = h5::open_group(file.get(), "layout");
    const auto names = h5::read_strings(table.get(), "names");
    const auto shapes = h5::read_strings(table.get(), "shapes");
    const auto offsets = h5::read_int_dataset(table.get(), "offsets");
    std::vector<float> params(elements);
    h5::read_ranges(h5::open_dataset(file.get(), "params").get(), {{0, elements}}, params.data());

    h5::Handle target = h5::create_file_serial(out);
    h5::write_attribute(target.get(), "source", path);
    h5::write_attribute(target.get(), "step", info.step);
    for (const CheckpointField& field : kCheckpointFields)
      if (field.in_model()) write_field(target.get(), info, field);
    for (std::size_t i = 0; i < names.size(); ++i) {
      const auto dims = parse_shape(shapes[i]);
      std::vector<hsize_t> h5dims(dims.begin(), dims.end());
      h5::Handle space(H5Screate_simple(static_cast<int>(h5dims.size()), h5dims.data(), nullptr), H5Sclose, "dataspace");
      h5::Handle d(H5Dcreate2(target.get(), names[i].c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                              H5P_DEFAULT),
                   H5Dclose, "dataset " + names[i]);
      h5::check(H5Dwrite(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                         params.data() + offsets[i]),
                "writing " + names[i]);
    }
    target.close("closing " + out);
  } catch (const Error& e) {
    throw Error("checkpoint " + path + ": " + e.what(), ErrorScope::all_ranks);
  }
}

}  // namespace st
