#pragma once
/// Element types and devices. float32 is the default; float64 is used for gradient checks.
#include <cstdint>
#include <ostream>
#include <string_view>

#include "mls/common/error.hpp"

namespace mls {

enum class DType : std::uint8_t { Bool, Int32, Int64, Float32, Float64 };

/// Bytes per element.
constexpr std::size_t itemsize(DType t) {
  switch (t) {
    case DType::Bool: return 1;
    case DType::Int32: return 4;
    case DType::Int64: return 8;
    case DType::Float32: return 4;
    case DType::Float64: return 8;
  }
  return 0;
}

/// "float32", "int64", ...
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
  }
  return "?";
}
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

constexpr bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }
constexpr bool is_integral(DType t) { return t == DType::Int32 || t == DType::Int64; }

/// NumPy/PyTorch-style promotion on the lattice bool < int32 < int64 < float32 < float64.
constexpr DType promote(DType a, DType b) { return a > b ? a : b; }

/// Parses "float32", "f32", "int64", ... ; throws `mls::Error` on an unknown name.
DType parse_dtype(std::string_view name);

template <class T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::Int32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;

/// Calls `f(T{})` with T the C++ type of `t`: `dispatch(t, [&](auto tag) { using T = decltype(tag); ... })`.
template <class F>
decltype(auto) dispatch(DType t, F&& f) {
  switch (t) {
    case DType::Bool: return f(bool{});
    case DType::Int32: return f(std::int32_t{});
    case DType::Int64: return f(std::int64_t{});
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
  }
  fail("dispatch: unknown dtype ", static_cast<int>(t));
}

/// Where a tensor's storage lives. Only CPU storage is allocated by lab 1; CUDA is reserved
/// for the labs that run kernels on a GPU.
enum class DeviceType : std::uint8_t { CPU, CUDA };
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  friend bool operator==(const Device&, const Device&) = default;
};
inline std::ostream& operator<<(std::ostream& os, Device d) {
  if (d.type == DeviceType::CPU) return os << "cpu";
  return os << "cuda:" << d.index;
}

}  // namespace mls
