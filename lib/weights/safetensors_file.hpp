#pragma once
// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON (an object:
// for each tensor {"dtype", "shape", "data_offsets": [begin, end]} with offsets into the data
// that follows, and an optional "__metadata__" object of strings), padded with spaces, then the
// tensors' bytes, little-endian, row-major, back to back. Nothing here knows about GPT-2.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weights/file_io.hpp"
#include "weights/weight_dtype.hpp"

namespace st {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", ...
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // byte offsets into the data part
  std::uint64_t elements() const;
};

// Reads the header with a JSON parser (nlohmann-json) and checks it against the file: every
// tensor's offsets inside the data, its byte count equal to shape x dtype size, the tensors
// covering the data without gaps or overlaps, nothing after the last. Throws Error naming the
// file and the problem.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // In the order of their data.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;  // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor's values as fp32: F32 as stored, BF16 and F16 widened exactly; any other dtype is
  // refused, naming it.
  void read_f32(const SafetensorsTensor& tensor, float* into) const;

 private:
  InputFile file_;
  std::uint64_t data_start_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct SafetensorsOutput {
  std::string name;
  std::vector<std::int64_t> shape;
  std::span<const float> values;  // row-major, elements of shape
};

// Writes the tensors as the safetensors library lays out a file of one dtype: sorted by name,
// the compact JSON header with "__metadata__" first and each tensor's dtype, shape and
// data_offsets in that order, padded with spaces to a multiple of 8 bytes.
void write_safetensors(const std::string& path, std::vector<SafetensorsOutput> tensors, WeightDtype dtype,
                       const std::vector<std::pair<std::string, std::string>>& metadata);

}  // namespace st
