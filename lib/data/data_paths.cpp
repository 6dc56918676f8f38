#include "data/data_paths.hpp"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "comm/agree.hpp"
#include "comm/group.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"

namespace st {
namespace {

// glob(3)'s results, freed when it goes.
class GlobMatches {
 public:
  GlobMatches() = default;
  GlobMatches(const GlobMatches&) = delete;
  GlobMatches& operator=(const GlobMatches&) = delete;
  ~GlobMatches() { globfree(&matches_); }
  glob_t* get() { return &matches_; }

 private:
  glob_t matches_{};
};

// " (relative to the working directory /home/me/run)" for a relative path, else "".
std::string where_relative(const std::string& path) {
  if (path.empty() || path.front() == '/') return "";
  std::error_code ec;
  return " (relative to the working directory " + std::filesystem::current_path(ec).string() + ")";
}

// The directory part of a glob that does not exist ("" when it exists or has no pattern-free part).
std::string missing_directory(const std::string& entry) {
  const std::string fixed = entry.substr(0, entry.find_first_of("*?["));
  const std::string dir = std::filesystem::path(fixed).parent_path().string();
  std::error_code ec;
  return dir.empty() || std::filesystem::is_directory(dir, ec) ? "" : dir;
}

}  // namespace

std::vector<std::string> expand_data_paths(const std::vector<std::string>& entries, const std::string& key) {
  std::vector<std::string> files;
  for (const std::string& entry : entries) {
    if (entry.find_first_of("*?[") == std::string::npos) {
      std::error_code ec;
      if (!std::filesystem::exists(entry, ec))
        throw Error(key + ": '" + entry + "': No such file or directory" + where_relative(entry), ErrorScope::all_ranks);
      files.push_back(entry);
      continue;
    }
    if (const std::string dir = missing_directory(entry); !dir.empty())
      throw Error(key + ": '" + entry + "' matches no file: the directory '" + dir + "' does not exist" +
                      where_relative(dir),
                  ErrorScope::all_ranks);
    GlobMatches matches;
    // GLOB_MARK: directories end in '/', so a glob that reaches one is refused, not mapped.
    const int status = glob(entry.c_str(), GLOB_MARK | GLOB_ERR, nullptr, matches.get());
    if (status == GLOB_NOMATCH)
      throw Error(key + ": '" + entry + "' matches no file" + where_relative(entry), ErrorScope::all_ranks);
    if (status != 0)
      throw Error(key + ": cannot expand '" + entry + "' (" + (status == GLOB_ABORTED ? "a directory could not be read" : "out of memory") + ")",
                  ErrorScope::all_ranks);
    std::vector<std::string> found(matches.get()->gl_pathv, matches.get()->gl_pathv + matches.get()->gl_pathc);
    std::sort(found.begin(), found.end());  // byte order, whatever the locale
    for (const std::string& f : found) {
      if (!f.empty() && f.back() == '/')
        throw Error(key + ": '" + entry + "' matches the directory '" + f + "'; a data set is made of files",
                    ErrorScope::all_ranks);
      files.push_back(f);
    }
  }
  std::set<std::string> seen;
  for (const std::string& f : files)
    if (!seen.insert(f).second) throw Error(key + " names '" + f + "' twice", ErrorScope::all_ranks);
  return files;
}

std::vector<std::string> expand_data_paths(const std::vector<std::string>& entries, const std::string& key,
                                           MPI_Comm comm) {
  const int rank = group_rank(comm);
  std::vector<std::string> files;
  std::string problem;
  if (rank == 0) {
    try {
      files = expand_data_paths(entries, key);
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  agree_or_throw(comm, problem);
  std::vector<std::uint64_t> count{files.size()};
  broadcast(count, 0, comm);
  files.resize(count[0]);
  for (std::string& f : files) broadcast(f, 0, comm);
  return files;
}

}  // namespace st
