#pragma once
#include <cstddef>
#include <string>

namespace st {

// A read-only memory map of a whole file; unmapped when the owner goes.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws Error naming the path
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const unsigned char* data() const { return static_cast<const unsigned char*>(data_); }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace st
