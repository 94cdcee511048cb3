#pragma once
/// Reading and writing NumPy `.npy` files (format 1.0, 2.0 and 3.0; little-endian; C or
/// Fortran order), so arrays move between this toolkit and NumPy.
///
/// Supported dtypes: '|b1' (bool), '<i4', '<i8', '<f4', '<f8'. Anything else (big-endian,
/// unsigned, complex, object, structured) is refused with a clear `mls::Error`, as are truncated
/// or corrupt files and headers larger than `kMaxNpyHeader`.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mls/common/dtype.hpp"
#include "mls/common/shape.hpp"

namespace mls {

/// Largest header accepted (NumPy's own default limit is 10000 bytes).
inline constexpr std::size_t kMaxNpyHeader = 64 * 1024;

/// An array as stored in a .npy file: raw little-endian bytes in the file's order.
struct NpyArray {
  DType dtype = DType::Float32;
  Shape shape;
  bool fortran_order = false;
  std::vector<std::byte> data;  // numel * itemsize bytes
};

/// Parses a whole .npy file held in memory. Throws `mls::Error` ("npy: ...") on bad input.
NpyArray parse_npy(std::span<const std::byte> bytes);
/// Reads a .npy file. Throws `mls::Error` naming the path on I/O errors or bad content.
NpyArray read_npy(const std::string& path);
/// Serialises (format 1.0 when the header fits, else 2.0).
std::vector<std::byte> serialize_npy(const NpyArray& array);
/// Writes a .npy file atomically (mls::write_file_atomic: temporary file, fsync, rename).
void write_npy(const std::string& path, const NpyArray& array);

}  // namespace mls
