#pragma once
// Shared by the op files (ops_*.cpp): the signatures' short names, small shape helpers, and
// `OpTable`, through which each file registers its ops with the registry (registry.cpp).
#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "mls/autodiff/var.hpp"

namespace mls::autodiff::ops {

using Ins = std::span<const Tensor>;
using InNodes = std::span<const Node* const>;
using Grads = std::vector<Var>;
using Needs = std::vector<bool>;

/// The built-in entries, filled by the register_*_ops functions below before the registry opens.
struct OpTable {
  std::vector<std::pair<Op, OpDef>> defs;
  void add(Op op, OpDef def) { defs.emplace_back(op, std::move(def)); }
};
void register_elementwise_ops(OpTable& t);  // ops_elementwise.cpp
void register_reduce_ops(OpTable& t);       // ops_reduce.cpp
void register_shape_ops(OpTable& t);        // ops_shape.cpp
void register_nn_ops(OpTable& t);           // ops_nn.cpp
void register_loss_ops(OpTable& t);         // ops_loss.cpp
void register_pool_ops(OpTable& t);         // ops_pool.cpp (pooling, conv_transpose2d)
void register_sparse_ops(OpTable& t);       // ops_graph.cpp (spmm family, dropout)
void register_control_ops(OpTable& t);      // control_flow.cpp (cond, while_loop and their adjoints)

/// True when no size is -1.
inline bool known(const Shape& s) {
  return std::none_of(s.begin(), s.end(), [](std::int64_t d) { return d < 0; });
}

/// All axes 0..ndim-1 when `axes` is empty, else `axes`.
inline std::vector<std::int64_t> full_axes(const std::vector<std::int64_t>& axes, std::int64_t ndim) {
  if (!axes.empty()) return axes;
  std::vector<std::int64_t> r(static_cast<std::size_t>(ndim));
  for (std::int64_t i = 0; i < ndim; ++i) r[static_cast<std::size_t>(i)] = i;
  return r;
}

/// Sums `x` down to `target` (the adjoint of broadcasting `target` to x's shape).
inline Tensor reduce_to(const Tensor& x, const Shape& target) {
  const std::int64_t lead = x.ndim() - static_cast<std::int64_t>(target.size());
  MLS_CHECK(lead >= 0, "sum_like: cannot reduce shape ", shape_str(x.shape()), " to ", shape_str(target));
  std::vector<std::int64_t> axes;
  for (std::int64_t i = 0; i < lead; ++i) axes.push_back(i);
  for (std::size_t i = 0; i < target.size(); ++i) {
    const std::int64_t xd = x.shape()[i + static_cast<std::size_t>(lead)];
    if (target[i] == 1 && xd != 1) axes.push_back(static_cast<std::int64_t>(i) + lead);
    else MLS_CHECK(target[i] == xd, "sum_like: cannot reduce shape ", shape_str(x.shape()), " to ", shape_str(target));
  }
  if (axes.empty()) return x.reshape(target);
  return mls::sum(x, axes, true).reshape(target);
}

/// The dtype of a floating result: `t` when floating, else float32.
inline DType float_of(DType t) { return is_floating(t) ? t : DType::Float32; }

/// Output size of a convolution along one dim (-1 when the input size is unknown).
inline std::int64_t conv_out(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t pad) {
  if (in < 0) return -1;
  return (in + 2 * pad - k) / stride + 1;
}

/// The "keepdim" attribute of a reduction.
inline bool keep(const Attrs& a) { return a.i("keepdim") != 0; }

/// Shape inference of ops whose result has the shape of input 1 and the dtype of input 0.
inline void like_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  s = in[1]->shape;
  d = in[0]->dtype;
}

/// cond as 0/1 in like's dtype (for gradient rules).
inline Var mask(const Var& cond, const Var& like) { return cast(cond, like.dtype()); }
/// Input `i` of the node `out` as a Var (for gradient rules).
inline Var in(const Var& out, std::size_t i) { return Var(out.node()->inputs.at(i)); }

/// The JVP of an op linear in each of its first two inputs (conv_transpose2d, spmm, spmm_t,
/// sddmm): f(t0, x1) + f(x0, t1), each term through the op's own forward (an undefined tangent
/// drops its term).
inline Tensor bilinear_jvp(const Node& n, const std::vector<Tensor>& x, const std::vector<Tensor>& t,
                           const Tensor&) {
  Tensor r;
  for (std::size_t k = 0; k < 2; ++k) {
    if (!t[k].defined()) continue;
    std::vector<Tensor> v = x;
    v[k] = t[k];
    const Tensor s = op_def(n.op).forward(v, n.attrs);
    r = r.defined() ? mls::add(r, s) : s;
  }
  return r;
}

}  // namespace mls::autodiff::ops
