#pragma once
// Thin RAII over the HDF5 C API: every handle closes itself, every call is checked, and a
// failing call throws st::Error with HDF5's own innermost message and what we were doing.
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace st::h5 {

// Turns off HDF5's printing of its error stack (we report errors ourselves). Idempotent.
void quiet_errors();

// Throws Error("<what>: <HDF5's message>") when code < 0; returns code otherwise.
template <class Code>
Code check(Code code, const std::string& what);

class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer, const std::string& what);
  Handle(Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle();
  hid_t get() const { return id_; }
  // Close now and report a failure (a file's close flushes: its errors matter).
  void close(const std::string& what);

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Files on one process. (Checkpoints are laid out by one rank, skeleton_file.hpp, and their
// bulk data moves by each rank on its own, chunk_io.hpp.)
Handle open_file_serial(const std::string& path);
Handle create_file_serial(const std::string& path);

// Attributes on a file or group.
void write_attribute(hid_t object, const std::string& name, std::int64_t value);
void write_attribute(hid_t object, const std::string& name, const std::string& value);
std::int64_t read_int_attribute(hid_t object, const std::string& name);
std::string read_string_attribute(hid_t object, const std::string& name);
// Into `value`, by its type: the read_*_attribute above, overloaded as write_attribute is.
void read_attribute(hid_t object, const std::string& name, std::int64_t& value);
void read_attribute(hid_t object, const std::string& name, std::string& value);
// A 64-bit float attribute (named apart from write_attribute, so an int argument stays an int).
void write_real_attribute(hid_t object, const std::string& name, double value);
void read_attribute(hid_t object, const std::string& name, double& value);
bool has_attribute(hid_t object, const std::string& name);

Handle create_group(hid_t parent, const std::string& name);
Handle open_group(hid_t parent, const std::string& name);

// A 1-D float32 dataset of n elements, chunked, with Fletcher32 checksums; its chunks are
// allocated when it is created.
Handle create_float_dataset(hid_t parent, const std::string& name, std::uint64_t n, std::uint64_t chunk);
Handle open_dataset(hid_t parent, const std::string& name);
bool has_link(hid_t parent, const std::string& name);
// Whether the file carries HDF5's signature (at offset 0, or after a user block): an HDF5 file,
// whole or not.
bool has_hdf5_signature(const std::string& path);
std::uint64_t dataset_length(hid_t dataset);  // elements of a 1-D dataset

// Elements [offset, offset + count) of a 1-D dataset, several at once.
struct Range {
  std::uint64_t offset = 0, count = 0;
};
// Reads ranges into `data` (their elements, in order) through HDF5's filters.
void read_ranges(hid_t dataset, const std::vector<Range>& ranges, float* data);

// Small contiguous datasets for metadata.
void write_int_dataset(hid_t parent, const std::string& name, const std::vector<std::int64_t>& values);
std::vector<std::int64_t> read_int_dataset(hid_t parent, const std::string& name);
void write_strings(hid_t parent, const std::string& name, const std::vector<std::string>& values);
std::vector<std::string> read_strings(hid_t parent, const std::string& name);

}  // namespace st::h5
