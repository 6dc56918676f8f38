#pragma once
// This process's resident memory, as the kernel counts it (/proc/self/status): what the
// accounted buffers (model state, workspace, activations) are checked against.
#include <cstdint>

namespace st {

// Resident set now (VmRSS) and its high-water mark (VmHWM), in bytes; 0 where the kernel does
// not say (not Linux).
std::uint64_t resident_bytes();
std::uint64_t peak_resident_bytes();
// The proportional set size now (Pss, /proc/self/smaps_rollup): the resident set with each page
// shared with other processes (another rank's shared-memory window this one reads) divided
// between the processes that map it, so that the ranks of a host add up to what they hold
// together. 0 where the kernel does not say.
std::uint64_t proportional_bytes();
// The node's memory (MemTotal, /proc/meminfo), in bytes; 0 where the kernel does not say.
std::uint64_t node_memory_bytes();
// Starts the high-water mark again from the resident set now (Linux: /proc/self/clear_refs),
// so that a peak measured later belongs to what ran after this call. False where it cannot.
bool restart_peak_resident();

}  // namespace st
