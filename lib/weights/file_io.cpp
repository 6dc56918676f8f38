#include "weights/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "core/error.hpp"

namespace st {

InputFile::InputFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat info{};
  if (::fstat(fd_, &info) != 0) {
    const int e = errno;
    ::close(fd_);
    throw Error(path + ": cannot stat: " + std::strerror(e));
  }
  if (S_ISDIR(info.st_mode)) {
    ::close(fd_);
    throw Error(path + ": is a directory, not a file");
  }
  size_ = static_cast<std::uint64_t>(info.st_size);
}

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read(std::uint64_t offset, void* into, std::size_t bytes, const std::string& what) const {
  if (offset + bytes > size_)
    throw Error(path_ + ": truncated: " + what + " needs bytes " + std::to_string(offset) + " to " +
                std::to_string(offset + bytes) + ", but the file has " + std::to_string(size_) + " bytes");
  auto* at = static_cast<char*>(into);
  std::size_t done = 0;
  while (done < bytes) {
    // pread moves at most about 2 GiB a call on Linux: large tensors take several.
    const ssize_t n = ::pread(fd_, at + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(path_ + ": cannot read " + what + ": " + std::strerror(errno));
    if (n == 0)
      throw Error(path_ + ": truncated while reading " + what + " (the file shrank while it was read)");
    done += static_cast<std::size_t>(n);
  }
}

OutputFile::OutputFile(const std::string& path) : path_(path), tmp_(path + ".tmp") {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(path + ": cannot create " + tmp_ + ": " + std::strerror(errno));
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void OutputFile::write(const void* data, std::size_t bytes) {
  const auto* at = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::write(fd_, at + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(path_ + ": cannot write: " + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
}

void OutputFile::commit() {
  if (::fsync(fd_) != 0) throw Error(path_ + ": cannot flush: " + std::strerror(errno));
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    ::unlink(tmp_.c_str());
    throw Error(path_ + ": cannot close: " + std::strerror(errno));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp_.c_str());
    throw Error(path_ + ": cannot rename " + tmp_ + " into place: " + std::strerror(e));
  }
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(path + ": cannot read");
  return text.str();
}

}  // namespace st
