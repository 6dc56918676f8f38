#include "data/dataset.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.hpp"

namespace st {

TokenDataset TokenDataset::open(const std::string& path, const std::string& format) {
  TokenDataset data{MappedFile(path)};
  const auto& file = data.file_;
  std::int32_t header[3] = {};
  if (file.size() >= sizeof header) std::memcpy(header, file.data(), sizeof header);
  const bool has_magic = header[0] == kTokenFileMagic;
  const bool as_tokens = format == "tokens" || (format == "auto" && has_magic);
  if (!as_tokens) {
    data.bytes_ = file.data();
    data.count_ = file.size();
    data.max_token_ = *std::max_element(file.data(), file.data() + file.size());
    return data;
  }
  const std::size_t header_bytes = kTokenFileHeaderInts * sizeof(std::int32_t);
  if (file.size() < header_bytes || header[0] != kTokenFileMagic)
    throw Error("data file '" + path + "' is not a token file: it does not start with the magic " +
                std::to_string(kTokenFileMagic) + " (use data.format = \"text\" for text)");
  if (header[1] != kTokenFileVersion)
    throw Error("token file '" + path + "' has version " + std::to_string(header[1]) + "; this build reads version " +
                std::to_string(kTokenFileVersion) + " (uint16 tokens)");
  if (header[2] <= 0) throw Error("token file '" + path + "' declares " + std::to_string(header[2]) + " tokens");
  const std::size_t count = static_cast<std::size_t>(header[2]);
  if (file.size() != header_bytes + count * sizeof(std::uint16_t))
    throw Error("token file '" + path + "' declares " + std::to_string(count) + " tokens (" +
                std::to_string(header_bytes + count * 2) + " bytes with the header) but has " +
                std::to_string(file.size()) + " bytes: truncated or not a token file");
  data.wide_ = reinterpret_cast<const std::uint16_t*>(file.data() + header_bytes);
  data.count_ = count;
  data.max_token_ = *std::max_element(data.wide_, data.wide_ + count);
  return data;
}

double TokenDataset::unigram_entropy(std::size_t begin, std::size_t end) const {
  std::vector<double> counts(static_cast<std::size_t>(max_token_) + 1, 0.0);
  for (std::size_t i = begin; i < end; ++i) counts[static_cast<std::size_t>((*this)[i])] += 1;
  const double n = static_cast<double>(end - begin);
  double h = 0;
  for (double c : counts)
    if (c > 0) h -= c / n * std::log(c / n);
  return h;
}

void write_token_file(const std::string& path, const std::uint16_t* tokens, std::size_t count) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error("cannot write token file '" + path + "'");
  std::int32_t header[kTokenFileHeaderInts] = {};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<std::int32_t>(count);
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  out.write(reinterpret_cast<const char*>(tokens), static_cast<std::streamsize>(count * sizeof(std::uint16_t)));
  if (!out) throw Error("failed writing token file '" + path + "'");
}

}  // namespace st
