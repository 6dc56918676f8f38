#include "ckpt/h5.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace st::h5 {
namespace {

// The innermost (most specific) message of HDF5's error stack.
herr_t keep_innermost(unsigned n, const H5E_error2_t* e, void* out) {
  if (n == 0 && e->desc) *static_cast<std::string*>(out) = e->desc;
  if (n == 0 && e->func_name) *static_cast<std::string*>(out) += std::string(" (in ") + e->func_name + ")";
  return 0;
}

std::string hdf5_message() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, keep_innermost, &text);
  H5Eclear2(H5E_DEFAULT);
  return text.empty() ? "unknown HDF5 error" : text;
}

Handle property_list(hid_t cls, const std::string& what) { return Handle(H5Pcreate(cls), H5Pclose, what); }

Handle string_type(std::size_t length) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "string type");
  check(H5Tset_size(type.get(), std::max<std::size_t>(length, 1)), "string type size");
  check(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), "string type padding");
  return type;
}

Handle scalar_space() { return Handle(H5Screate(H5S_SCALAR), H5Sclose, "scalar dataspace"); }

Handle simple_space(std::uint64_t n) {
  const hsize_t dims[1] = {n};
  return Handle(H5Screate_simple(1, dims, nullptr), H5Sclose, "dataspace");
}

// The file selection of `ranges` and a memory space of their total length.
std::pair<Handle, Handle> select(hid_t dataset, const std::vector<Range>& ranges) {
  Handle file_space(H5Dget_space(dataset), H5Sclose, "dataset space");
  std::uint64_t total = 0;
  bool first = true;
  for (const Range& r : ranges) {
    if (r.count == 0) continue;
    const hsize_t start[1] = {r.offset}, count[1] = {r.count};
    check(H5Sselect_hyperslab(file_space.get(), first ? H5S_SELECT_SET : H5S_SELECT_OR, start, nullptr, count, nullptr),
          "hyperslab selection");
    first = false;
    total += r.count;
  }
  if (first) check(H5Sselect_none(file_space.get()), "empty selection");
  Handle memory_space = simple_space(std::max<std::uint64_t>(total, 1));
  if (total == 0) check(H5Sselect_none(memory_space.get()), "empty selection");
  return {std::move(file_space), std::move(memory_space)};
}

}  // namespace

void quiet_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

template <class Code>
Code check(Code code, const std::string& what) {
  if (code < 0) throw Error(what + ": " + hdf5_message());
  return code;
}
template herr_t check<herr_t>(herr_t, const std::string&);
template hid_t check<hid_t>(hid_t, const std::string&);
template hssize_t check<hssize_t>(hssize_t, const std::string&);

Handle::Handle(hid_t id, Closer closer, const std::string& what) : id_(check(id, what)), closer_(closer) {}

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = o.id_;
    closer_ = o.closer_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}

Handle::~Handle() {
  if (id_ >= 0 && closer_) closer_(id_);
}

void Handle::close(const std::string& what) {
  if (id_ < 0) return;
  const hid_t id = id_;
  id_ = H5I_INVALID_HID;
  check(closer_(id), what);
}

Handle open_file_serial(const std::string& path) {
  quiet_errors();
  return Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose,
                "not a readable HDF5 file (truncated or damaged?)");
}

Handle create_file_serial(const std::string& path) {
  quiet_errors();
  return Handle(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose, "cannot create " + path);
}

void write_attribute(hid_t object, const std::string& name, std::int64_t value) {
  Handle space = scalar_space();
  Handle a(H5Acreate2(object, name.c_str(), H5T_NATIVE_INT64, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
           "attribute " + name);
  check(H5Awrite(a.get(), H5T_NATIVE_INT64, &value), "attribute " + name);
}

void write_attribute(hid_t object, const std::string& name, const std::string& value) {
  Handle space = scalar_space();
  Handle type = string_type(value.size());
  Handle a(H5Acreate2(object, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
           "attribute " + name);
  std::vector<char> text(std::max<std::size_t>(value.size(), 1), '\0');
  std::memcpy(text.data(), value.data(), value.size());
  check(H5Awrite(a.get(), type.get(), text.data()), "attribute " + name);
}

std::int64_t read_int_attribute(hid_t object, const std::string& name) {
  Handle a(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose, "missing attribute '" + name + "'");
  std::int64_t value = 0;
  check(H5Aread(a.get(), H5T_NATIVE_INT64, &value), "attribute '" + name + "'");
  return value;
}

std::string read_string_attribute(hid_t object, const std::string& name) {
  Handle a(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose, "missing attribute '" + name + "'");
  Handle type(H5Aget_type(a.get()), H5Tclose, "attribute '" + name + "'");
  if (H5Tget_class(type.get()) != H5T_STRING) throw Error("attribute '" + name + "' is not a string");
  const std::size_t size = H5Tget_size(type.get());
  Handle memory = string_type(size);
  std::vector<char> text(size + 1, '\0');
  check(H5Aread(a.get(), memory.get(), text.data()), "attribute '" + name + "'");
  return std::string(text.data(), strnlen(text.data(), size));
}

void read_attribute(hid_t object, const std::string& name, std::int64_t& value) {
  value = read_int_attribute(object, name);
}

void read_attribute(hid_t object, const std::string& name, std::string& value) {
  value = read_string_attribute(object, name);
}

void write_real_attribute(hid_t object, const std::string& name, double value) {
  Handle space = scalar_space();
  Handle a(H5Acreate2(object, name.c_str(), H5T_NATIVE_DOUBLE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
           "attribute " + name);
  check(H5Awrite(a.get(), H5T_NATIVE_DOUBLE, &value), "attribute " + name);
}

void read_attribute(hid_t object, const std::string& name, double& value) {
  Handle a(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose, "missing attribute '" + name + "'");
  check(H5Aread(a.get(), H5T_NATIVE_DOUBLE, &value), "attribute '" + name + "'");
}

Handle create_group(hid_t parent, const std::string& name) {
  return Handle(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose, "group " + name);
}

Handle open_group(hid_t parent, const std::string& name) {
  return Handle(H5Gopen2(parent, name.c_str(), H5P_DEFAULT), H5Gclose, "missing group '" + name + "'");
}

Handle create_float_dataset(hid_t parent, const std::string& name, std::uint64_t n, std::uint64_t chunk) {
  Handle space = simple_space(n);
  Handle dcpl = property_list(H5P_DATASET_CREATE, "dataset creation property list");
  const hsize_t chunk_dims[1] = {std::max<std::uint64_t>(1, std::min(chunk, n))};
  check(H5Pset_chunk(dcpl.get(), 1, chunk_dims), "chunking of " + name);
  check(H5Pset_fletcher32(dcpl.get()), "Fletcher32 checksums of " + name);
  check(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), "allocation time of " + name);
  return Handle(H5Dcreate2(parent, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                H5Dclose, "dataset " + name);
}

Handle open_dataset(hid_t parent, const std::string& name) {
  // A chunk cache that holds a few chunks: a rank's slices start and end inside chunks, and
  // HDF5's default 1 MiB cache would read and checksum such a chunk once per slice.
  Handle dapl = property_list(H5P_DATASET_ACCESS, "dataset access property list");
  check(H5Pset_chunk_cache(dapl.get(), 521, std::size_t{64} << 20, 1.0), "chunk cache of " + name);
  return Handle(H5Dopen2(parent, name.c_str(), dapl.get()), H5Dclose, "missing dataset '" + name + "'");
}

bool has_attribute(hid_t object, const std::string& name) {
  return check(H5Aexists(object, name.c_str()), "attribute " + name) > 0;
}

bool has_link(hid_t parent, const std::string& name) {
  return check(H5Lexists(parent, name.c_str(), H5P_DEFAULT), "link " + name) > 0;
}

bool has_hdf5_signature(const std::string& path) {
  quiet_errors();
  return H5Fis_hdf5(path.c_str()) > 0;
}

std::uint64_t dataset_length(hid_t dataset) {
  Handle space(H5Dget_space(dataset), H5Sclose, "dataset space");
  const int rank = check(H5Sget_simple_extent_ndims(space.get()), "dataset rank");
  if (rank != 1) throw Error("dataset is not one-dimensional");
  hsize_t dims[1] = {0};
  check(H5Sget_simple_extent_dims(space.get(), dims, nullptr), "dataset extent");
  return dims[0];
}

void read_ranges(hid_t dataset, const std::vector<Range>& ranges, float* data) {
  auto [file_space, memory_space] = select(dataset, ranges);
  float none = 0;
  check(H5Dread(dataset, H5T_NATIVE_FLOAT, memory_space.get(), file_space.get(), H5P_DEFAULT, data ? data : &none),
        "read (checksum mismatch or damaged data?)");
}

void write_int_dataset(hid_t parent, const std::string& name, const std::vector<std::int64_t>& values) {
  Handle space = simple_space(std::max<std::size_t>(values.size(), 1));
  Handle d(H5Dcreate2(parent, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose,
           "dataset " + name);
  if (!values.empty())
    check(H5Dwrite(d.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), "dataset " + name);
}

std::vector<std::int64_t> read_int_dataset(hid_t parent, const std::string& name) {
  Handle d = open_dataset(parent, name);
  std::vector<std::int64_t> values(dataset_length(d.get()));
  check(H5Dread(d.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), "dataset " + name);
  return values;
}

void write_strings(hid_t parent, const std::string& name, const std::vector<std::string>& values) {
  std::size_t width = 1;
  for (const auto& v : values) width = std::max(width, v.size());
  Handle type = string_type(width);
  Handle space = simple_space(std::max<std::size_t>(values.size(), 1));
  Handle d(H5Dcreate2(parent, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose,
           "dataset " + name);
  if (values.empty()) return;
  std::vector<char> packed(values.size() * width, '\0');
  for (std::size_t i = 0; i < values.size(); ++i) std::memcpy(packed.data() + i * width, values[i].data(), values[i].size());
  check(H5Dwrite(d.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, packed.data()), "dataset " + name);
}

std::vector<std::string> read_strings(hid_t parent, const std::string& name) {
  Handle d = open_dataset(parent, name);
  Handle type(H5Dget_type(d.get()), H5Tclose, "type of " + name);
  const std::size_t width = H5Tget_size(type.get());
  const std::uint64_t n = dataset_length(d.get());
  Handle memory = string_type(width);
  std::vector<char> packed(n * width + 1, '\0');
  check(H5Dread(d.get(), memory.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, packed.data()), "dataset " + name);
  std::vector<std::string> out;
  for (std::uint64_t i = 0; i < n; ++i) out.emplace_back(packed.data() + i * width, strnlen(packed.data() + i * width, width));
  return out;
}

}  // namespace st::h5
