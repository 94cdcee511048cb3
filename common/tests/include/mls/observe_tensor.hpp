#pragma once
/// Observing an mls::Tensor (lab 1's tensor type) for the grader's differential verdict: its dtype,
/// shape, strides, offset and values. For the test programs of lab 1 and every later lab.
#include <cstring>
#include <limits>

#include "mls/observe.hpp"
#include "mls/tensor/tensor.hpp"

namespace mls::testing {

namespace detail {
/// The elements of `t` in row-major order, read straight from its storage through its shape,
/// strides and offset: no lab 1 function (the student's code in lab 1) is on this path.
inline std::vector<double> read_strided(const mls::Tensor& t) {
  std::vector<double> out;
  if (!t.defined() || t.storage()->device().type != mls::DeviceType::CPU) return out;
  std::int64_t n = 1;
  for (std::int64_t d : t.shape()) n *= d;
  if (n <= 0) return out;
  out.reserve(static_cast<std::size_t>(n));
  const std::byte* base = t.storage()->data();
  const std::size_t item = mls::itemsize(t.dtype());
  const std::int64_t nbytes = static_cast<std::int64_t>(t.storage()->nbytes());
  const std::size_t nd = t.shape().size();
  std::vector<std::int64_t> idx(nd, 0);
  for (std::int64_t k = 0; k < n; ++k) {
    std::int64_t e = t.offset();
    for (std::size_t d = 0; d < nd; ++d) e += idx[d] * t.strides()[d];
    const std::int64_t at = e * static_cast<std::int64_t>(item);
    double v = std::numeric_limits<double>::quiet_NaN();  // outside the storage: never a real value
    if (at >= 0 && at + static_cast<std::int64_t>(item) <= nbytes) {
      const std::byte* p = base + at;
      switch (t.dtype()) {
        case mls::DType::Bool: { bool b; std::memcpy(&b, p, sizeof b); v = b ? 1.0 : 0.0; break; }
        case mls::DType::Int32: { std::int32_t x; std::memcpy(&x, p, sizeof x); v = x; break; }
        case mls::DType::Int64: { std::int64_t x; std::memcpy(&x, p, sizeof x); v = static_cast<double>(x); break; }
        case mls::DType::Float32: { float x; std::memcpy(&x, p, sizeof x); v = x; break; }
        case mls::DType::Float64: { std::memcpy(&v, p, sizeof v); break; }
      }
    }
    out.push_back(v);
    for (std::size_t d = nd; d-- > 0;) {
      if (++idx[d] < t.shape()[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}
}  // namespace detail

/// Records a tensor: dtype, shape, strides and offset exactly, values within `tol` (exact for
/// integer and bool tensors). A student tensor that is a different view of the same numbers (other
/// strides) differs from the reference; record `t.compact()` where only the values matter.
inline void observe(std::string_view label, const mls::Tensor& t, Tolerance tol = {}) {
  if (!observing()) return;
  Observation o;
  o.label = std::string(label);
  o.kind = "tensor";
  o.text = std::string(mls::dtype_name(t.dtype()));
  o.shape.assign(t.shape().begin(), t.shape().end());
  o.strides.assign(t.strides().begin(), t.strides().end());
  o.offset = t.offset();
  o.values = detail::read_strided(t);
  o.tol = mls::is_floating(t.dtype()) ? tol : Tolerance{};
  observe(std::move(o));
}

/// The observation `observe_values` records, built now (the values read at once) and recorded
/// later: a check reads what the code produced before its oracle computes what is expected, so
/// the expected values do not exist in the process while the produced ones can still change.
inline Observation values_observation(std::string_view label, const mls::Tensor& t) {
  Observation o;
  o.label = std::string(label);
  o.kind = "tensor";
  if (!t.defined()) {
    o.text = "undefined";
    return o;
  }
  o.text = std::string(mls::dtype_name(t.dtype()));
  o.shape.assign(t.shape().begin(), t.shape().end());
  o.values = detail::read_strided(t);
  return o;
}

/// Records a tensor's dtype, shape and values (within `tol`; exact for integer and bool tensors),
/// read straight from its storage, but not its layout: strides and offset are recorded as empty
/// and 0, so any layout holding the same numbers matches. For results whose strides the lab does
/// not pin (a student may return a fresh dense tensor or a view).
inline void observe_values(std::string_view label, const mls::Tensor& t, Tolerance tol = {}) {
  if (!observing()) return;
  Observation o = values_observation(label, t);
  if (t.defined() && mls::is_floating(t.dtype())) o.tol = tol;
  observe(std::move(o));
}

}  // namespace mls::testing

/// Records tensor `expr` under its own spelling with observe_values (dtype, shape, values; not
/// the layout), e.g. MLS_OBSERVE_VALUES(mls::matmul(a, b)) or MLS_OBSERVE_VALUES(c, {1e-6, 1e-7}); for
/// a bare variable ("got") prefer observe_values(label, value) with a label naming the function and case.
#define MLS_OBSERVE_VALUES(expr, ...) ::mls::testing::observe_values(#expr, (expr) __VA_OPT__(, ) __VA_ARGS__)
