#pragma once
/// The index arithmetic of strided tensors, as small pure functions (lecture 002, "Strides
/// format"). Every view, loop and broadcast in lab 1 is built from these.
///
/// Worked example from the slides: a contiguous tensor of shape [1, 2, 3, 4] has strides
/// (24, 12, 4, 1); stored column-major (Fortran order) its strides are (1, 1, 2, 6).
#include <cstdint>
#include <span>

#include "mls/common/shape.hpp"

namespace mls::inline tensor {

/// Row-major (C order) strides in elements: the last dimension has stride 1 and each earlier
/// one skips a whole row of the dimensions after it. [1, 2, 3, 4] -> (24, 12, 4, 1).
/// Hint: walk the dimensions from last to first, multiplying a running product.
Strides contiguous_strides(std::span<const std::int64_t> shape);

/// Column-major (Fortran order) strides in elements: the first dimension has stride 1.
/// [1, 2, 3, 4] -> (1, 1, 2, 6).
Strides fortran_strides(std::span<const std::int64_t> shape);

/// True when `strides` are the row-major strides of `shape`, ignoring dimensions of size 1
/// (whose stride never matters) — i.e. the elements are dense and in row-major order.
bool is_contiguous(std::span<const std::int64_t> shape, std::span<const std::int64_t> strides);

/// Position of element `index` in storage: offset + sum_i index[i] * strides[i].
/// Throws `mls::Error` when `index` has the wrong length or an entry is out of range
/// (negative indices count from the end, as in Python).
std::int64_t index_to_offset(std::span<const std::int64_t> index, std::span<const std::int64_t> shape,
                             std::span<const std::int64_t> strides, std::int64_t offset);

/// The multi-index of the `linear`-th element in row-major order: the inverse of counting
/// through `shape` with the last index fastest. Writes ndim entries into `index`.
void unravel_index(std::int64_t linear, std::span<const std::int64_t> shape,
                   std::span<std::int64_t> index);

/// NumPy broadcasting of two shapes: align at the right; each pair of sizes must be equal or
/// one of them 1. [2, 3] and [3] -> [2, 3]; [4, 1] and [1, 5] -> [4, 5].
/// Throws `mls::Error` "<op>: cannot broadcast shapes [2, 3] and [4]" otherwise.
Shape broadcast_shapes(std::span<const std::int64_t> a, std::span<const std::int64_t> b,
                       const char* op = "broadcast");

/// Strides that read a tensor of (`shape`, `strides`) as if it had shape `target`: missing
/// leading dimensions and dimensions of size 1 that are stretched get stride 0.
/// Throws `mls::Error` naming `op` when `shape` cannot be broadcast to `target`.
Strides broadcast_strides(std::span<const std::int64_t> shape, std::span<const std::int64_t> strides,
                          std::span<const std::int64_t> target, const char* op = "broadcast_to");

/// Strides for viewing a tensor of (`shape`, `strides`) as `new_shape` without copying, or an
/// empty optional-like result (returns false) when the strides cannot express it. Both shapes
/// must have the same number of elements. Example: a transposed [3, 2] view cannot be viewed
/// as [6]; a contiguous one can.
bool view_strides(std::span<const std::int64_t> shape, std::span<const std::int64_t> strides,
                  std::span<const std::int64_t> new_shape, Strides& out);

}  // namespace mls::tensor
