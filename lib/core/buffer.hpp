#pragma once
// Typed views of memory and the blocks they are carved from: what the execution backends
// (exec/) compute on and the communicators (comm/) move. Neither layer owns these types; both
// read them from here.
#include <cstddef>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>

#include "core/bf16.hpp"

namespace st {

// Element types the collectives move. Reductions of bf16 add in fp32 and round the result.
enum class DataType { f32, f64, bf16 };
inline std::size_t size_of(DataType t) { return t == DataType::f64 ? 8 : t == DataType::f32 ? 4 : 2; }
template <class T>
constexpr DataType data_type_of();
template <>
constexpr DataType data_type_of<float>() { return DataType::f32; }
template <>
constexpr DataType data_type_of<double>() { return DataType::f64; }
template <>
constexpr DataType data_type_of<Bf16>() { return DataType::bf16; }

// A typed view of a buffer: what every backend receives. `ready`, when set, marks the work that
// writes the buffer on a device (an event of the execution backend, exec/exec.hpp): a device
// backend orders the collective after it; unset, after all work queued so far.
struct Buffer {
  Buffer() = default;
  Buffer(void* data_, std::size_t count_, DataType type_, const void* ready_ = nullptr)
      : data(data_), count(count_), type(type_), ready(ready_) {}
  void* data = nullptr;
  std::size_t count = 0;
  DataType type = DataType::f32;
  const void* ready = nullptr;
  std::size_t bytes() const { return count * size_of(type); }
  template <class T>
  static Buffer of(std::span<T> s, const void* ready = nullptr) {
    return {const_cast<std::remove_const_t<T>*>(s.data()), s.size(), data_type_of<std::remove_const_t<T>>(), ready};
  }
};

// Where a buffer lives: process (host) memory, or the memory of the rank's GPU.
enum class MemorySpace { host, device };

// A block of memory that buffers are carved from: host memory for buffers a communicator works
// on again and again (gradients, parameter shards), from Communicator::allocate, or device
// memory from an execution backend (exec/exec.hpp). Zeroed; freed when the last copy of the
// handle goes.
class Memory {
 public:
  Memory() = default;
  Memory(std::shared_ptr<void> owner, void* data, std::size_t bytes, MemorySpace space = MemorySpace::host)
      : owner_(std::move(owner)), data_(data), bytes_(bytes), space_(space) {}
  template <class T>
  std::span<T> as() const { return {static_cast<T*>(data_), bytes_ / sizeof(T)}; }
  std::size_t bytes() const { return bytes_; }
  void* data() const { return data_; }
  MemorySpace space() const { return space_; }
  // Plain process memory (what backends without a shared-memory path hand out).
  static Memory private_memory(std::size_t bytes);

 private:
  std::shared_ptr<void> owner_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  MemorySpace space_ = MemorySpace::host;
};

}  // namespace st
