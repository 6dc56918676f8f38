#pragma once
// Whole-file reading and writing for the weight formats: every failure names the file and says
// what went wrong (a short read is "truncated", with the sizes).
#include <cstddef>
#include <cstdint>
#include <string>

namespace st {

// A file opened for reading at given offsets; closed when the owner goes.
class InputFile {
 public:
  explicit InputFile(const std::string& path);  // throws Error naming the path
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&&) = delete;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }
  // Reads exactly `bytes` at `offset`; `what` names the part for the message when the file ends
  // first ("the tensor transformer.wte.weight").
  void read(std::uint64_t offset, void* into, std::size_t bytes, const std::string& what) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// A file written through a temporary name and renamed into place when commit() is called, so
// that a failed export leaves no half-written file under the final name.
class OutputFile {
 public:
  explicit OutputFile(const std::string& path);  // throws Error naming the path
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();  // removes the temporary file unless committed

  void write(const void* data, std::size_t bytes);
  void commit();  // flush, close, rename into place

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

// The whole file as text (config.json); throws Error naming the path.
std::string read_text_file(const std::string& path);

}  // namespace st
