#include "core/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

namespace st {

FileCheck check_input_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    const int e = errno;
    // ENOENT, or ENOTDIR for a path through a file: either way there is no such file. Anything
    // else (EACCES on a directory on the way, ELOOP, ...) is the system's to say.
    const bool missing = e == ENOENT || e == ENOTDIR;
    return {missing ? FileProblem::missing : FileProblem::unreadable, std::strerror(e)};
  }
  if (S_ISDIR(info.st_mode)) return {FileProblem::directory, "is a directory, not a file"};
  if (!S_ISREG(info.st_mode)) {
    const char* kind = S_ISFIFO(info.st_mode)  ? "a pipe"
                       : S_ISCHR(info.st_mode) ? "a character device"
                       : S_ISBLK(info.st_mode) ? "a block device"
                       : S_ISSOCK(info.st_mode) ? "a socket"
                                                : "not a file";
    return {FileProblem::not_regular, std::string("is not a regular file (") + kind + ")"};
  }
  // Permission bits say too little (root reads anything; ACLs, read-only mounts): try it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {FileProblem::unreadable, std::strerror(errno)};
  ::close(fd);
  if (info.st_size == 0) return {FileProblem::empty, "is empty"};
  return {};
}

std::string input_file_message(const std::string& what, const std::string& path, const FileCheck& check) {
  switch (check.problem) {
    case FileProblem::none: return "";
    case FileProblem::missing:
    case FileProblem::unreadable: return "cannot open " + what + " '" + path + "': " + check.reason;
    default: return what + " '" + path + "' " + check.reason;
  }
}

std::string input_file_message(const std::string& what, const std::string& path) {
  return input_file_message(what, path, check_input_file(path));
}

std::string writable_directory_problem(const std::string& dir) {
  namespace fs = std::filesystem;
  // The directories this check creates, deepest first: removed again (only if still empty).
  std::vector<fs::path> created;
  std::error_code ec;
  for (fs::path p = fs::absolute(dir, ec); !ec && !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    created.push_back(p);
    if (p == p.parent_path()) break;
  }
  struct Tidy {
    std::vector<fs::path>& dirs;
    ~Tidy() {
      std::error_code ignored;
      for (const auto& d : dirs) fs::remove(d, ignored);
    }
  } tidy{created};
  fs::create_directories(dir, ec);
  if (ec) return ec.message();
  if (!fs::is_directory(dir, ec)) return "is not a directory";
  // Creating a file is what a run does first; permission bits do not tell (root, read-only
  // mounts, immutable directories, quotas).
  const std::string probe = dir + "/.write_test." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

}  // namespace st
