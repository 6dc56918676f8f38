#include "weights/safetensors_file.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/bf16.hpp"
#include "core/error.hpp"

namespace st {
namespace {

using Json = nlohmann::json;

// The safetensors library refuses headers over 100 MB; a length past that is not a header.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// Bytes per element of every dtype the format defines (0: not one of them).
std::uint64_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, std::uint64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// IEEE half to float: every half is a float exactly (subnormal halves become normal floats).
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  std::uint32_t mantissa = h & 0x3FFu;
  std::uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);  // inf, NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // signed zero
  } else {
    int e = -1;  // normalise the subnormal
    do {
      ++e;
      mantissa <<= 1;
    } while ((mantissa & 0x400u) == 0);
    bits = sign | (static_cast<std::uint32_t>(112 - e) << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::uint64_t unsigned_field(const Json& value, const std::string& what, const std::string& path) {
  if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<std::int64_t>() >= 0))
    throw Error(path + ": bad header: " + what + " is " + value.dump() + ", expected a non-negative integer");
  return value.get<std::uint64_t>();
}

SafetensorsTensor parse_entry(const std::string& name, const Json& entry, const std::string& path) {
  const std::string where = "tensor '" + name + "'";
  if (!entry.is_object()) throw Error(path + ": bad header: " + where + " is " + entry.dump() + ", expected an object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key)) throw Error(path + ": bad header: " + where + " has no \"" + key + "\"");
  SafetensorsTensor t;
  t.name = name;
  if (!entry["dtype"].is_string()) throw Error(path + ": bad header: " + where + ": dtype is not a string");
  t.dtype = entry["dtype"].get<std::string>();
  if (dtype_bytes(t.dtype) == 0)
    throw Error(path + ": bad header: " + where + " has dtype \"" + t.dtype + "\", which safetensors does not define");
  if (!entry["shape"].is_array()) throw Error(path + ": bad header: " + where + ": shape is not an array");
  for (const Json& dim : entry["shape"])
    t.shape.push_back(static_cast<std::int64_t>(unsigned_field(dim, where + "'s shape", path)));
  const Json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    throw Error(path + ": bad header: " + where + ": data_offsets is " + offsets.dump() + ", expected [begin, end]");
  t.begin = unsigned_field(offsets[0], where + "'s data_offsets", path);
  t.end = unsigned_field(offsets[1], where + "'s data_offsets", path);
  if (t.end < t.begin) throw Error(path + ": bad header: " + where + ": data_offsets end before they begin");
  const std::uint64_t needed = t.elements() * dtype_bytes(t.dtype);
  if (t.end - t.begin != needed)
    throw Error(path + ": bad header: " + where + ": data_offsets span " + std::to_string(t.end - t.begin) +
                " bytes, its shape and dtype " + t.dtype + " need " + std::to_string(needed));
  return t;
}

}  // namespace

std::uint64_t SafetensorsTensor::elements() const {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : file_(path) {
  if (file_.size() < 8)
    throw Error(path + ": truncated: a safetensors file starts with an 8-byte header length, the file has " +
                std::to_string(file_.size()) + " bytes");
  std::uint64_t header_bytes = 0;
  file_.read(0, &header_bytes, 8, "the header length");  // little-endian, as this machine
  if (header_bytes > kMaxHeaderBytes)
    throw Error(path + ": bad header: header length " + std::to_string(header_bytes) +
                " is over 100 MB: not a safetensors file");
  if (8 + header_bytes > file_.size())
    throw Error(path + ": truncated: the JSON header is " + std::to_string(header_bytes) + " bytes, the file has " +
                std::to_string(file_.size() - 8) + " after the length");
  std::string text(header_bytes, '\0');
  file_.read(8, text.data(), header_bytes, "the JSON header");
  data_start_ = 8 + header_bytes;

  Json header;
  try {
    header = Json::parse(text);
  } catch (const Json::exception& e) {
    throw Error(path + ": bad header: the JSON header does not parse: " + e.what());
  }
  if (!header.is_object()) throw Error(path + ": bad header: the JSON header is not an object");
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) throw Error(path + ": bad header: __metadata__ is not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) throw Error(path + ": bad header: __metadata__." + k + " is not a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    tensors_.push_back(parse_entry(key, value, path));
  }
  // The data must be the tensors back to back, as the format's reference reader requires.
  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  const std::uint64_t data_bytes = file_.size() - data_start_;
  std::uint64_t expected = 0;
  for (const auto& t : tensors_) {
    if (t.begin != expected)
      throw Error(path + ": bad header: tensor '" + t.name + "' starts at byte " + std::to_string(t.begin) +
                  " of the data, where " + (t.begin < expected ? "another tensor's bytes are" : "nothing ends") +
                  " (the previous tensor ends at " + std::to_string(expected) + ")");
    if (t.end > data_bytes)
      throw Error(path + ": truncated: tensor '" + t.name + "' needs data bytes " + std::to_string(t.begin) + " to " +
                  std::to_string(t.end) + ", the file holds " + std::to_string(data_bytes) + " after its header");
    expected = t.end;
  }
  if (expected != data_bytes)
    throw Error(path + ": " + std::to_string(data_bytes - expected) +
                " bytes follow the last tensor's data: the header does not describe the whole file");
}

const SafetensorsTensor* SafetensorsReader::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void SafetensorsReader::read_f32(const SafetensorsTensor& t, float* into) const {
  const std::string what = "tensor '" + t.name + "'";
  const std::uint64_t n = t.elements();
  if (t.dtype == "F32") {
    file_.read(data_start_ + t.begin, into, n * sizeof(float), what);
    return;
  }
  if (t.dtype != "BF16" && t.dtype != "F16")
    throw Error(file_.path() + ": " + what + " has dtype " + t.dtype +
                ", which shardtrain does not read (it reads F32, BF16 and F16, each exactly as fp32)");
  std::vector<std::uint16_t> narrow(n);
  file_.read(data_start_ + t.begin, narrow.data(), n * 2, what);
  if (t.dtype == "BF16")
    for (std::uint64_t i = 0; i < n; ++i) into[i] = to_float(Bf16{narrow[i]});
  else
    for (std::uint64_t i = 0; i < n; ++i) into[i] = half_to_float(narrow[i]);
}

void write_safetensors(const std::string& path, std::vector<SafetensorsOutput> tensors, WeightDtype dtype,
                       const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  const std::uint64_t bytes = dtype == WeightDtype::bf16 ? 2 : 4;
  // ordered_json keeps the keys in the order given: the safetensors library's order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    std::uint64_t n = 1;
    for (std::int64_t d : t.shape) n *= static_cast<std::uint64_t>(d);
    ST_REQUIRE(n == t.values.size(), "safetensors output: shape and values disagree for " + t.name);
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = safetensors_dtype_name(dtype);
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + n * bytes};
    header[t.name] = entry;
    offset += n * bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const std::uint64_t length = text.size();
  OutputFile out(path);
  out.write(&length, 8);
  out.write(text.data(), text.size());
  std::vector<Bf16> narrow;
  for (const auto& t : tensors) {
    if (dtype == WeightDtype::fp32) {
      out.write(t.values.data(), t.values.size_bytes());
      continue;
    }
    narrow.resize(t.values.size());
    std::transform(t.values.begin(), t.values.end(), narrow.begin(), to_bf16);
    out.write(narrow.data(), narrow.size() * sizeof(Bf16));
  }
  out.commit();
}

}  // namespace st
