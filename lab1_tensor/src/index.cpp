// Student file of lab 1: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Index arithmetic of strided tensors. Student file: the bodies between the SOLUTION markers.
#include "mls/tensor/index.hpp"

#include <algorithm>

#include "mls/common/error.hpp"

namespace mls::inline tensor {

Strides contiguous_strides(std::span<const std::int64_t> shape) {
  // BEGIN SOLUTION
  Strides strides(shape.size());
  std::int64_t running = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = running;
    running *= std::max<std::int64_t>(shape[i], 1);
  }
  return strides;
  // END SOLUTION
}

Strides fortran_strides(std::span<const std::int64_t> shape) {
  // BEGIN SOLUTION
  Strides strides(shape.size());
  std::int64_t running = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    strides[i] = running;
    running *= std::max<std::int64_t>(shape[i], 1);
  }
  return strides;
  // END SOLUTION
}

bool is_contiguous(std::span<const std::int64_t> shape, std::span<const std::int64_t> strides) {
  // BEGIN SOLUTION
  for (std::int64_t d : shape) {
    if (d == 0) return true;  // no element can be out of place: an empty tensor is dense
  }
  std::int64_t expected = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
  // END SOLUTION
}

std::int64_t index_to_offset(std::span<const std::int64_t> index, std::span<const std::int64_t> shape,
                             std::span<const std::int64_t> strides, std::int64_t offset) {
  MLS_CHECK(index.size() == shape.size(), "at: index ", shape_str(index), " has ", index.size(),
            " entries, expected ", shape.size(), " for a tensor of shape ", shape_str(shape));
  // BEGIN SOLUTION
  std::int64_t pos = offset;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    std::int64_t i = index[d];
    MLS_CHECK(i >= -shape[d] && i < shape[d], "at: index ", i, " is out of range for dimension ", d,
              " of size ", shape[d], " (shape ", shape_str(shape), ")");
    if (i < 0) i += shape[d];
    pos += i * strides[d];
  }
  return pos;
  // END SOLUTION
}

void unravel_index(std::int64_t linear, std::span<const std::int64_t> shape,
                   std::span<std::int64_t> index) {
  // BEGIN SOLUTION
  for (std::size_t d = shape.size(); d-- > 0;) {
    const std::int64_t n = std::max<std::int64_t>(shape[d], 1);
    index[d] = linear % n;
    linear /= n;
  }
  // END SOLUTION
}

Shape broadcast_shapes(std::span<const std::int64_t> a, std::span<const std::int64_t> b, const char* op) {
  // BEGIN SOLUTION
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    // i counts from the right
    const std::int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const std::int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    MLS_CHECK(da == db || da == 1 || db == 1, op, ": cannot broadcast shapes ", shape_str(a), " and ",
              shape_str(b));
    out[n - 1 - i] = da == 1 ? db : da;
  }
  return out;
  // END SOLUTION
}

Strides broadcast_strides(std::span<const std::int64_t> shape, std::span<const std::int64_t> strides,
                          std::span<const std::int64_t> target, const char* op) {
  // BEGIN SOLUTION
  MLS_CHECK(shape.size() <= target.size(), op, ": cannot broadcast shape ", shape_str(shape), " to ",
            shape_str(target), " (target has fewer dimensions)");
  Strides out(target.size(), 0);
  const std::size_t lead = target.size() - shape.size();
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::int64_t d = shape[i], t = target[lead + i];
    if (d == t) {
      out[lead + i] = strides[i];
    } else {
      MLS_CHECK(d == 1, op, ": cannot broadcast shape ", shape_str(shape), " to ", shape_str(target),
                " (dimension ", i, " has size ", d, ", expected 1 or ", t, ")");
      out[lead + i] = 0;
    }
  }
  return out;
  // END SOLUTION
}

bool view_strides(std::span<const std::int64_t> shape, std::span<const std::int64_t> strides,
                  std::span<const std::int64_t> new_shape, Strides& out) {
  // BEGIN SOLUTION
  // Group the old dimensions into runs that are contiguous with each other (stride[i] ==
  // stride[i+1] * shape[i+1]); each run can be re-split freely into new dimensions whose sizes
  // multiply to the run's size. This is the algorithm of PyTorch's computeStride.
  out.assign(new_shape.size(), 0);
  std::int64_t numel = 1;
  for (std::int64_t d : shape) numel *= d;
  if (numel == 0 || shape.empty()) {
    out = contiguous_strides(new_shape);
    return true;
  }
  std::int64_t view_d = static_cast<std::int64_t>(new_shape.size()) - 1;
  std::int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  std::int64_t tensor_numel = 1, view_numel = 1;
  for (std::int64_t tensor_d = static_cast<std::int64_t>(shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= shape[tensor_d];
    // A run ends at the first dimension or where the next-outer dim is not contiguous with it.
    if (tensor_d == 0 ||
        (shape[tensor_d - 1] != 1 && strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (tensor_d > 0) {
        chunk_base_stride = strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
  // END SOLUTION
}

}  // namespace mls::tensor
