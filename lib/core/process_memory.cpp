#include "core/process_memory.hpp"

#include <fstream>
#include <string>

namespace st {
namespace {

// A "Name:   1234 kB" line of a /proc file, in bytes (0 where it is not there).
std::uint64_t kilobytes_field(const char* file, const char* name) {
  std::ifstream in(file);
  const std::string prefix = std::string(name) + ":";
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) return std::stoull(line.substr(prefix.size())) * 1024;
  return 0;
}

}  // namespace

std::uint64_t resident_bytes() { return kilobytes_field("/proc/self/status", "VmRSS"); }
std::uint64_t peak_resident_bytes() { return kilobytes_field("/proc/self/status", "VmHWM"); }
std::uint64_t proportional_bytes() { return kilobytes_field("/proc/self/smaps_rollup", "Pss"); }
std::uint64_t node_memory_bytes() { return kilobytes_field("/proc/meminfo", "MemTotal"); }

bool restart_peak_resident() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";  // 5: reset the peak resident set size (proc(5))
  out.close();
  return static_cast<bool>(out);
}

}  // namespace st
