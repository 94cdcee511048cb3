#include "mls/common/shape.hpp"

#include <algorithm>
#include <limits>

#include "mls/common/error.hpp"

namespace mls {

std::string shape_str(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::int64_t checked_numel(std::span<const std::int64_t> shape, const char* op) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    MLS_CHECK(d >= 0, op, ": negative dimension ", d, " in shape ", shape_str(shape));
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d) {
      fail(op, ": shape ", shape_str(shape), " has more than 2^63 elements");
    }
    n *= d;
  }
  return n;
}

std::int64_t normalize_axis(std::int64_t axis, std::int64_t ndim, const char* op) {
  const std::int64_t n = ndim;
  MLS_CHECK(n > 0, op, ": axis ", axis, " is out of range for a 0-d tensor (it has no dimensions)");
  MLS_CHECK(axis >= -n && axis < n, op, ": axis ", axis, " is out of range for a tensor with ", ndim,
            " dimension", ndim == 1 ? "" : "s", " (expected ", -n, " <= axis < ", n, ")");
  return axis < 0 ? axis + n : axis;
}

std::vector<std::int64_t> normalize_axes(std::span<const std::int64_t> axes, std::int64_t ndim,
                                         const char* op) {
  std::vector<std::int64_t> out;
  if (axes.empty()) {
    for (std::int64_t i = 0; i < ndim; ++i) out.push_back(i);
    return out;
  }
  for (std::int64_t a : axes) {
    const std::int64_t ax = normalize_axis(a, ndim, op);
    MLS_CHECK(std::find(out.begin(), out.end(), ax) == out.end(), op, ": axis ", a,
              " appears more than once in ", shape_str(axes));
    out.push_back(ax);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace mls
