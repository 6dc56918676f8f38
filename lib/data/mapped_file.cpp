#include "data/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.hpp"
#include "core/input_file.hpp"

namespace st {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  // A directory, a device or an empty file cannot be mapped: say which it is.
  if (const std::string problem = input_file_message("data file", path); !problem.empty()) throw Error(problem);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open data file '" + path + "': " + std::strerror(errno));
  struct stat info{};
  if (::fstat(fd, &info) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error("cannot stat data file '" + path + "': " + std::strerror(e));
  }
  size_ = static_cast<std::size_t>(info.st_size);
  if (size_ == 0) {
    ::close(fd);
    throw Error("data file '" + path + "' is empty");
  }
  data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);  // the mapping keeps the file open
  if (data_ == MAP_FAILED) {
    data_ = nullptr;
    throw Error("cannot map data file '" + path + "': " + std::strerror(e));
  }
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(data_, size_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace st
