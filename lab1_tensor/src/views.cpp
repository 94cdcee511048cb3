// Student file of lab 1: write the bodies between the SOLUTION markers (mls-grader grades this file).
// View operations: new shape/strides/offset over the same storage, never a copy (except
// `reshape` and `flatten`, which copy when no view can express the result).
// Student file: the bodies between the SOLUTION markers.
#include <algorithm>
#include <numeric>

#include "mls/tensor/tensor.hpp"

namespace mls::inline tensor {
namespace {

/// Resolves one -1 entry of `shape` so that the product equals `numel`.
[[maybe_unused]] Shape infer_shape(const Shape& shape, std::int64_t numel, const char* op, const Shape& from) {
  Shape out = shape;
  std::int64_t known = 1;
  std::int64_t infer_at = -1;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      MLS_CHECK(infer_at < 0, op, ": only one dimension can be -1, got ", shape_str(shape));
      infer_at = static_cast<std::int64_t>(i);
    } else {
      MLS_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in shape ", shape_str(shape));
      known *= out[i];
    }
  }
  if (infer_at >= 0) {
    MLS_CHECK(known != 0 && numel % known == 0, op, ": cannot infer -1 in shape ", shape_str(shape),
              " for a tensor of shape ", shape_str(from), " (", numel, " elements)");
    out[static_cast<std::size_t>(infer_at)] = numel / known;
    known *= out[static_cast<std::size_t>(infer_at)];
  }
  MLS_CHECK(known == numel, op, ": shape ", shape_str(shape), " has ", known, " elements, but the tensor of shape ",
            shape_str(from), " has ", numel);
  return out;
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  check_defined("view");
  // BEGIN SOLUTION
  const Shape target = infer_shape(shape, numel(), "view", shape_);
  Strides strides;
  MLS_CHECK(view_strides(shape_, strides_, target, strides), "view: a tensor of shape ", shape_str(shape_),
            " and strides ", shape_str(strides_), " cannot be viewed as ", shape_str(target),
            " without a copy (use reshape, or compact() first)");
  return Tensor(storage_, offset_, target, strides, dtype_);
  // END SOLUTION
}

Tensor Tensor::reshape(const Shape& shape) const {
  check_defined("reshape");
  // BEGIN SOLUTION
  const Shape target = infer_shape(shape, numel(), "reshape", shape_);
  Strides strides;
  if (view_strides(shape_, strides_, target, strides)) return Tensor(storage_, offset_, target, strides, dtype_);
  return compact().view(target);
  // END SOLUTION
}

Tensor Tensor::permute(std::span<const std::int64_t> dims) const {
  check_defined("permute");
  MLS_CHECK(static_cast<std::int64_t>(dims.size()) == ndim(), "permute: got ", dims.size(), " dims ",
            shape_str(dims), " for a tensor with ", ndim(), " dimensions");
  // BEGIN SOLUTION
  Shape shape(dims.size());
  Strides strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const auto d = static_cast<std::size_t>(normalize_axis(dims[i], ndim(), "permute"));
    MLS_CHECK(!seen[d], "permute: dims ", shape_str(dims), " is not a permutation (", dims[i], " repeats)");
    seen[d] = true;
    shape[i] = shape_[d];
    strides[i] = strides_[d];
  }
  return Tensor(storage_, offset_, shape, strides, dtype_);
  // END SOLUTION
}

Tensor Tensor::transpose(std::int64_t dim0, std::int64_t dim1) const {
  check_defined("transpose");
  // BEGIN SOLUTION
  const auto a = static_cast<std::size_t>(normalize_axis(dim0, ndim(), "transpose"));
  const auto b = static_cast<std::size_t>(normalize_axis(dim1, ndim(), "transpose"));
  Shape shape = shape_;
  Strides strides = strides_;
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  return Tensor(storage_, offset_, shape, strides, dtype_);
  // END SOLUTION
}

Tensor Tensor::slice(std::int64_t dim, std::int64_t start, std::int64_t stop, std::int64_t step) const {
  check_defined("slice");
  MLS_CHECK(ndim() >= 1, "slice: cannot slice a 0-d tensor");
  MLS_CHECK(step >= 1, "slice: step must be >= 1, got ", step);
  // BEGIN SOLUTION
  const auto d = static_cast<std::size_t>(normalize_axis(dim, ndim(), "slice"));
  const std::int64_t n = shape_[d];
  auto clamp = [n](std::int64_t i) {
    if (i < 0) i += n;
    return std::clamp<std::int64_t>(i, 0, n);
  };
  const std::int64_t b = clamp(start), e = clamp(stop);
  const std::int64_t len = e > b ? (e - b + step - 1) / step : 0;
  Shape shape = shape_;
  Strides strides = strides_;
  shape[d] = len;
  strides[d] = strides_[d] * step;
  return Tensor(storage_, offset_ + (len > 0 ? b * strides_[d] : 0), shape, strides, dtype_);
  // END SOLUTION
}

Tensor Tensor::select(std::int64_t dim, std::int64_t index) const {
  check_defined("select");
  MLS_CHECK(ndim() >= 1, "select: cannot index a 0-d tensor");
  // BEGIN SOLUTION
  const auto d = static_cast<std::size_t>(normalize_axis(dim, ndim(), "select"));
  const std::int64_t n = shape_[d];
  MLS_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dimension ", d, " of size ",
            n, " (shape ", shape_str(shape_), ")");
  if (index < 0) index += n;
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(d));
  strides.erase(strides.begin() + static_cast<std::ptrdiff_t>(d));
  return Tensor(storage_, offset_ + index * strides_[d], shape, strides, dtype_);
  // END SOLUTION
}

Tensor Tensor::expand(const Shape& shape) const {
  check_defined("expand");
  // BEGIN SOLUTION
  MLS_CHECK(shape.size() >= shape_.size(), "expand: cannot broadcast shape ", shape_str(shape_), " to ",
            shape_str(shape), " (fewer dimensions)");
  Shape target = shape;
  const std::size_t lead = shape.size() - shape_.size();
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      MLS_CHECK(i >= lead, "expand: -1 is not allowed for the new leading dimension ", i, " in ",
                shape_str(shape));
      target[i] = shape_[i - lead];
    }
    MLS_CHECK(target[i] >= 0, "expand: invalid size ", target[i], " in ", shape_str(shape));
  }
  Strides strides = broadcast_strides(shape_, strides_, target, "expand");
  return Tensor(storage_, offset_, target, strides, dtype_);
  // END SOLUTION
}

Tensor Tensor::squeeze(std::int64_t dim) const {
  check_defined("squeeze");
  // BEGIN SOLUTION
  const auto d = static_cast<std::size_t>(normalize_axis(dim, ndim(), "squeeze"));
  MLS_CHECK(ndim() >= 1 && shape_[d] == 1, "squeeze: dimension ", dim, " has size ",
            ndim() >= 1 ? shape_[d] : 0, ", expected 1 (shape ", shape_str(shape_), ")");
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(d));
  strides.erase(strides.begin() + static_cast<std::ptrdiff_t>(d));
  return Tensor(storage_, offset_, shape, strides, dtype_);
  // END SOLUTION
}

Tensor Tensor::squeeze() const {
  check_defined("squeeze");
  // BEGIN SOLUTION
  Shape shape;
  Strides strides;
  for (std::size_t i = 0; i < shape_.size(); ++i) {
    if (shape_[i] == 1) continue;
    shape.push_back(shape_[i]);
    strides.push_back(strides_[i]);
  }
  return Tensor(storage_, offset_, shape, strides, dtype_);
  // END SOLUTION
}

Tensor Tensor::unsqueeze(std::int64_t dim) const {
  check_defined("unsqueeze");
  // BEGIN SOLUTION
  const std::int64_t n = ndim() + 1;
  MLS_CHECK(dim >= -n && dim < n, "unsqueeze: dim ", dim, " is out of range for a tensor with ", ndim(),
            " dimensions (expected ", -n, " <= dim < ", n, ")");
  const auto d = static_cast<std::size_t>(dim < 0 ? dim + n : dim);
  Shape shape = shape_;
  Strides strides = strides_;
  // The new dim's stride does not matter for indexing; use the one that keeps contiguity.
  const std::int64_t stride = d < shape_.size() ? strides_[d] * shape_[d] : 1;
  shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(d), 1);
  strides.insert(strides.begin() + static_cast<std::ptrdiff_t>(d), stride);
  return Tensor(storage_, offset_, shape, strides, dtype_);
  // END SOLUTION
}

Tensor Tensor::flatten(std::int64_t start, std::int64_t end) const {
  check_defined("flatten");
  if (ndim() == 0) return reshape({1});
  // BEGIN SOLUTION
  const auto s = static_cast<std::size_t>(normalize_axis(start, ndim(), "flatten"));
  const auto e = static_cast<std::size_t>(normalize_axis(end, ndim(), "flatten"));
  MLS_CHECK(s <= e, "flatten: start dim ", start, " comes after end dim ", end);
  Shape shape(shape_.begin(), shape_.begin() + static_cast<std::ptrdiff_t>(s));
  std::int64_t merged = 1;
  for (std::size_t i = s; i <= e; ++i) merged *= shape_[i];
  shape.push_back(merged);
  shape.insert(shape.end(), shape_.begin() + static_cast<std::ptrdiff_t>(e) + 1, shape_.end());
  return reshape(shape);
  // END SOLUTION
}

Tensor Tensor::as_strided(const Shape& shape, const Strides& strides, std::int64_t offset) const {
  check_defined("as_strided");
  MLS_CHECK(shape.size() == strides.size(), "as_strided: shape ", shape_str(shape), " and strides ",
            shape_str(strides), " have different lengths");
  MLS_CHECK(offset >= 0, "as_strided: offset must be >= 0, got ", offset);
  // BEGIN SOLUTION
  const std::int64_t n = checked_numel(shape, "as_strided");
  const auto capacity = static_cast<std::int64_t>(storage_->nbytes() / itemsize());
  if (n > 0) {
    std::int64_t lo = offset, hi = offset;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      const std::int64_t reach = (shape[i] - 1) * strides[i];
      (reach < 0 ? lo : hi) += reach;
    }
    MLS_CHECK(lo >= 0 && hi < capacity, "as_strided: shape ", shape_str(shape), " with strides ",
              shape_str(strides), " and offset ", offset, " reaches elements [", lo, ", ", hi,
              "], outside the storage of ", capacity, " elements");
  }
  return Tensor(storage_, offset, shape, strides, dtype_);
  // END SOLUTION
}

Tensor Tensor::diagonal(std::int64_t k, std::int64_t dim1, std::int64_t dim2) const {
  check_defined("diagonal");
  MLS_CHECK(ndim() >= 2, "diagonal: needs a tensor with at least 2 dimensions, got shape ", shape_str(shape_));
  // BEGIN SOLUTION
  const auto a = static_cast<std::size_t>(normalize_axis(dim1, ndim(), "diagonal"));
  const auto b = static_cast<std::size_t>(normalize_axis(dim2, ndim(), "diagonal"));
  MLS_CHECK(a != b, "diagonal: dim1 and dim2 must differ, both are ", a);
  std::int64_t len = 0, off = offset_;
  if (k >= 0) {
    len = std::max<std::int64_t>(0, std::min(shape_[a], shape_[b] - k));
    if (len > 0) off += k * strides_[b];
  } else {
    len = std::max<std::int64_t>(0, std::min(shape_[a] + k, shape_[b]));
    if (len > 0) off -= k * strides_[a];
  }
  Shape shape;
  Strides strides;
  for (std::size_t i = 0; i < shape_.size(); ++i) {
    if (i == a || i == b) continue;
    shape.push_back(shape_[i]);
    strides.push_back(strides_[i]);
  }
  shape.push_back(len);
  strides.push_back(strides_[a] + strides_[b]);
  return Tensor(storage_, off, shape, strides, dtype_);
  // END SOLUTION
}

}  // namespace mls::tensor
