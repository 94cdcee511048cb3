// Joining (concat, stack) and splitting (split, chunk) along an axis.
#include "mls/tensor/tensor.hpp"

namespace mls::inline tensor {

Tensor concat(const std::vector<Tensor>& tensors, std::int64_t axis) {
  MLS_CHECK(!tensors.empty(), "concat: needs at least one tensor");
  const Tensor& first = tensors.front();
  MLS_CHECK(first.defined(), "concat: tensor 0 is undefined");
  MLS_CHECK(first.ndim() >= 1, "concat: cannot concatenate 0-d tensors (use stack)");
  const auto ax = static_cast<std::size_t>(normalize_axis(axis, first.ndim(), "concat"));
  Shape shape = first.shape();
  DType t = first.dtype();
  shape[ax] = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& x = tensors[i];
    MLS_CHECK(x.defined(), "concat: tensor ", i, " is undefined");
    bool same = x.ndim() == first.ndim();
    for (std::size_t d = 0; same && d < shape.size(); ++d) same = d == ax || x.shape()[d] == first.shape()[d];
    MLS_CHECK(same, "concat: tensor ", i, " has shape ", shape_str(x.shape()), ", expected ",
              shape_str(first.shape()), " except along axis ", axis);
    shape[ax] += x.shape()[ax];
    t = promote(t, x.dtype());
  }
  Tensor out = Tensor::empty(shape, t);
  std::int64_t at = 0;
  for (const Tensor& x : tensors) {
    const std::int64_t n = x.shape()[ax];
    out.slice(static_cast<std::int64_t>(ax), at, at + n).copy_(x);
    at += n;
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, std::int64_t axis) {
  MLS_CHECK(!tensors.empty(), "stack: needs at least one tensor");
  MLS_CHECK(tensors.front().defined(), "stack: tensor 0 is undefined");
  const std::int64_t nd = tensors.front().ndim() + 1;
  MLS_CHECK(axis >= -nd && axis < nd, "stack: axis ", axis, " is out of range for the result with ", nd,
            " dimensions");
  std::vector<Tensor> parts;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    MLS_CHECK(tensors[i].defined(), "stack: tensor ", i, " is undefined");
    MLS_CHECK(tensors[i].shape() == tensors.front().shape(), "stack: tensor ", i, " has shape ",
              shape_str(tensors[i].shape()), ", expected ", shape_str(tensors.front().shape()));
    parts.push_back(tensors[i].unsqueeze(axis));
  }
  return concat(parts, axis);
}

std::vector<Tensor> split(const Tensor& a, const std::vector<std::int64_t>& sizes, std::int64_t axis) {
  MLS_CHECK(a.defined(), "split: tensor is undefined");
  const std::int64_t ax = normalize_axis(axis, a.ndim(), "split");
  std::int64_t total = 0;
  for (std::int64_t s : sizes) {
    MLS_CHECK(s >= 0, "split: sizes ", shape_str(sizes), " contain a negative size");
    total += s;
  }
  MLS_CHECK(total == a.shape()[static_cast<std::size_t>(ax)], "split: sizes ", shape_str(sizes), " sum to ", total,
            ", expected ", a.shape()[static_cast<std::size_t>(ax)], " (dimension ", axis, " of shape ",
            shape_str(a.shape()), ")");
  std::vector<Tensor> out;
  std::int64_t at = 0;
  for (std::int64_t s : sizes) {
    out.push_back(a.slice(ax, at, at + s));
    at += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& a, std::int64_t size, std::int64_t axis) {
  MLS_CHECK(a.defined(), "split: tensor is undefined");
  MLS_CHECK(size >= 1, "split: piece size must be >= 1, got ", size);
  const std::int64_t n = a.shape()[static_cast<std::size_t>(normalize_axis(axis, a.ndim(), "split"))];
  std::vector<std::int64_t> sizes;
  for (std::int64_t at = 0; at < n; at += size) sizes.push_back(std::min(size, n - at));
  return split(a, sizes, axis);
}

std::vector<Tensor> chunk(const Tensor& a, std::int64_t chunks, std::int64_t axis) {
  MLS_CHECK(a.defined(), "chunk: tensor is undefined");
  MLS_CHECK(chunks >= 1, "chunk: number of chunks must be >= 1, got ", chunks);
  const std::int64_t n = a.shape()[static_cast<std::size_t>(normalize_axis(axis, a.ndim(), "chunk"))];
  const std::int64_t size = std::max<std::int64_t>(1, (n + chunks - 1) / chunks);
  if (n == 0) return {a};
  return split(a, size, axis);
}

}  // namespace mls::tensor
