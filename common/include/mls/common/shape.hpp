#pragma once
/// Shapes and strides as plain vectors of int64 (in elements), and the checks every op needs.
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace mls {

using Shape = std::vector<std::int64_t>;
using Strides = std::vector<std::int64_t>;

/// "[2, 3]"; "[]" for a 0-d shape.
std::string shape_str(std::span<const std::int64_t> shape);

/// Number of elements; throws `mls::Error` naming `op` on a negative size or on overflow.
std::int64_t checked_numel(std::span<const std::int64_t> shape, const char* op = "shape");

/// Maps a possibly negative axis into [0, ndim); throws naming `op` when out of range
/// (a 0-d tensor has no axis at all, so every axis is out of range for ndim == 0).
std::int64_t normalize_axis(std::int64_t axis, std::int64_t ndim, const char* op);

/// Normalises a list of axes, checks they are distinct; an empty list means "all axes".
std::vector<std::int64_t> normalize_axes(std::span<const std::int64_t> axes, std::int64_t ndim,
                                         const char* op);

}  // namespace mls
