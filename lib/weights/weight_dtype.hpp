#pragma once
// The element type a weights file is written in: fp32, or bf16 rounded to nearest even
// (core/bf16.hpp). Reading widens either to fp32 exactly.
namespace st {

enum class WeightDtype { fp32, bf16 };

inline const char* dtype_name(WeightDtype dtype) { return dtype == WeightDtype::bf16 ? "bf16" : "fp32"; }
// The same as a safetensors header names it.
inline const char* safetensors_dtype_name(WeightDtype dtype) { return dtype == WeightDtype::bf16 ? "BF16" : "F32"; }

}  // namespace st
