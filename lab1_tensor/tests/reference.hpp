#pragma once
// An independent, naive reference for lab 1's tests.
//
// `Ref` is a dense row-major array of doubles with a shape. Everything here is written from
// scratch with plain index arithmetic: it never calls a lab 1 function (no views, no copies, no
// ops, no index.hpp). The only contact with mls::Tensor is through its raw metadata (storage
// bytes, offset, shape, strides, dtype) to read and build tensors, so a bug in lab 1 cannot
// hide in the reference as well.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "mls/common/rng.hpp"
#include "mls/observe_tensor.hpp"
#include "mls/testing.hpp"  // MLS_ORACLE
#include "mls/tensor/tensor.hpp"

namespace ref {

using I64 = std::int64_t;
using Dims = std::vector<I64>;
using mls::DType;

inline constexpr DType kAllDTypes[] = {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::Bool};
inline constexpr DType kNumericDTypes[] = {DType::Float32, DType::Float64, DType::Int32, DType::Int64};
inline constexpr DType kFloatDTypes[] = {DType::Float32, DType::Float64};

inline std::string dims_str(const Dims& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

inline I64 count(const Dims& shape) {
  I64 n = 1;
  for (I64 d : shape) n *= d;
  return n;
}

/// Row-major multi-index of the `lin`-th element (every dim > 0).
inline Dims unravel(I64 lin, const Dims& shape) {
  Dims idx(shape.size(), 0);
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = lin % shape[d];
    lin /= shape[d];
  }
  return idx;
}

inline I64 ravel(const Dims& idx, const Dims& shape) {
  I64 lin = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) lin = lin * shape[d] + idx[d];
  return lin;
}

/// Machine epsilon of a dtype (0 for exact integer and bool arithmetic).
inline double eps_of(DType t) {
  if (t == DType::Float32) return std::numeric_limits<float>::epsilon();
  if (t == DType::Float64) return std::numeric_limits<double>::epsilon();
  return 0.0;
}

/// Rounds a double to what a tensor of dtype `t` stores.
inline double round_to(DType t, double x) {
  switch (t) {
    case DType::Float32: return static_cast<double>(static_cast<float>(x));
    case DType::Float64: return x;
    case DType::Int32: return static_cast<double>(static_cast<std::int32_t>(x));
    case DType::Int64: return static_cast<double>(static_cast<std::int64_t>(x));
    case DType::Bool: return x != 0.0 ? 1.0 : 0.0;
  }
  return x;
}

struct Ref {
  Dims shape;
  std::vector<double> v;  // row-major

  Ref() = default;
  explicit Ref(Dims s, double fill = 0.0) : shape(std::move(s)), v(static_cast<std::size_t>(count(shape)), fill) {}
  Ref(Dims s, std::vector<double> values) : shape(std::move(s)), v(std::move(values)) {
    REQUIRE(static_cast<I64>(v.size()) == count(shape));
  }
  I64 numel() const { return static_cast<I64>(v.size()); }
  I64 ndim() const { return static_cast<I64>(shape.size()); }
  double& operator()(const Dims& idx) { return v[static_cast<std::size_t>(ravel(idx, shape))]; }
  double operator()(const Dims& idx) const { return v[static_cast<std::size_t>(ravel(idx, shape))]; }
};

// ---- reading and building tensors through raw bytes ---------------------------------------------

inline double read_elem(const std::byte* base, DType t, I64 pos) {
  const std::byte* p = base + pos * static_cast<I64>(mls::itemsize(t));
  switch (t) {
    case DType::Float32: { float x; std::memcpy(&x, p, 4); return x; }
    case DType::Float64: { double x; std::memcpy(&x, p, 8); return x; }
    case DType::Int32: { std::int32_t x; std::memcpy(&x, p, 4); return static_cast<double>(x); }
    case DType::Int64: { std::int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case DType::Bool: { unsigned char x; std::memcpy(&x, p, 1); return x ? 1.0 : 0.0; }
  }
  return 0.0;
}

inline void write_elem(std::byte* base, DType t, I64 pos, double value) {
  std::byte* p = base + pos * static_cast<I64>(mls::itemsize(t));
  switch (t) {
    case DType::Float32: { const float x = static_cast<float>(value); std::memcpy(p, &x, 4); return; }
    case DType::Float64: { std::memcpy(p, &value, 8); return; }
    case DType::Int32: { const auto x = static_cast<std::int32_t>(value); std::memcpy(p, &x, 4); return; }
    case DType::Int64: { const auto x = static_cast<std::int64_t>(value); std::memcpy(p, &x, 8); return; }
    case DType::Bool: { const unsigned char x = value != 0.0; std::memcpy(p, &x, 1); return; }
  }
}

/// Storage position (in elements) of multi-index `idx` of `t`, from its raw metadata.
inline I64 raw_position(const mls::Tensor& t, const Dims& idx) {
  I64 pos = t.offset();
  for (std::size_t d = 0; d < idx.size(); ++d) pos += idx[d] * t.strides()[d];
  return pos;
}

/// Every element of `t`, in logical row-major order, read straight from its storage. Checks
/// that each element read lies inside the storage (a bad view fails here, not in a crash).
inline Ref to_ref(const mls::Tensor& t) {
  REQUIRE(t.defined());
  REQUIRE(t.shape().size() == t.strides().size());
  Ref r(t.shape());
  const I64 cap = static_cast<I64>(t.storage()->nbytes() / t.itemsize());
  for (I64 i = 0; i < r.numel(); ++i) {
    const Dims idx = unravel(i, r.shape);
    const I64 pos = raw_position(t, idx);
    if (pos < 0 || pos >= cap) {
      FAIL("element " << dims_str(idx) << " of a tensor of shape " << dims_str(t.shape()) << " strides "
                      << dims_str(t.strides()) << " offset " << t.offset() << " is at " << pos
                      << ", outside the storage of " << cap << " elements");
    }
    r.v[static_cast<std::size_t>(i)] = read_elem(t.storage()->data(), t.dtype(), pos);
  }
  return r;
}

/// A new dense row-major tensor holding `r` (values converted to `t`), built without lab 1.
inline mls::Tensor make(const Ref& r, DType t) {
  const I64 n = r.numel();
  auto storage = std::make_shared<mls::Storage>(static_cast<std::size_t>(std::max<I64>(n, 1)) * mls::itemsize(t),
                                                mls::Device{});
  Dims strides(r.shape.size(), 1);
  I64 run = 1;
  for (std::size_t d = r.shape.size(); d-- > 0;) {
    strides[d] = run;
    run *= std::max<I64>(r.shape[d], 1);
  }
  for (I64 i = 0; i < n; ++i) write_elem(storage->data(), t, i, r.v[static_cast<std::size_t>(i)]);
  if (n == 0) write_elem(storage->data(), t, 0, 0.0);  // the one spare element is initialised too
  return mls::Tensor(storage, 0, r.shape, strides, t);
}

/// A tensor holding `r` with a random non-contiguous layout, built without lab 1: dims stored
/// in a random order, gaps between rows, a random offset, arbitrary strides on size-1 dims and
/// (when `negative`) some dims stored back to front (negative strides).
inline mls::Tensor make_strided(const Ref& r, DType t, mls::Rng& rng, bool negative = true) {
  const std::size_t nd = r.shape.size();
  Dims order(nd);
  for (std::size_t i = 0; i < nd; ++i) order[i] = static_cast<I64>(i);
  for (std::size_t i = nd; i > 1; --i) std::swap(order[i - 1], order[static_cast<std::size_t>(rng.randint(0, static_cast<I64>(i)))]);
  // order[0] is the outermost stored dim, order[nd-1] the innermost.
  Dims strides(nd, 0);
  I64 run = 1;
  for (std::size_t k = nd; k-- > 0;) {
    const auto d = static_cast<std::size_t>(order[k]);
    const I64 gap = rng.randint(0, 3) == 0 ? rng.randint(1, 3) : 1;  // sometimes a padded stride
    strides[d] = run * gap;
    run = strides[d] * std::max<I64>(r.shape[d], 1);
  }
  const I64 pad = rng.randint(0, 4);
  const I64 span = run + pad;
  I64 offset = pad;
  std::vector<bool> flipped(nd, false);
  for (std::size_t d = 0; d < nd; ++d) {
    if (r.shape[d] == 1 && rng.randint(0, 2) == 0) strides[d] = rng.randint(-7, 8);  // never used
    if (negative && r.shape[d] > 1 && rng.randint(0, 4) == 0) {
      offset += (r.shape[d] - 1) * strides[d];
      strides[d] = -strides[d];
      flipped[d] = true;
    }
  }
  auto storage = std::make_shared<mls::Storage>(static_cast<std::size_t>(span + 1) * mls::itemsize(t), mls::Device{});
  // Poison the whole block so that reading a gap shows up.
  for (I64 i = 0; i <= span; ++i) write_elem(storage->data(), t, i, t == DType::Bool ? 1.0 : 77.0);
  mls::Tensor out(storage, offset, r.shape, strides, t);
  for (I64 i = 0; i < r.numel(); ++i) {
    const Dims idx = unravel(i, r.shape);
    write_elem(storage->data(), t, raw_position(out, idx), r.v[static_cast<std::size_t>(i)]);
  }
  return out;
}

// ---- random inputs ------------------------------------------------------------------------------

/// ndim in [min_ndim, max_ndim], dims in [1, max_dim]; with probability 1/zero_one_in a dim is 0.
inline Dims random_shape(mls::Rng& rng, I64 min_ndim = 0, I64 max_ndim = 4, I64 max_dim = 5, I64 zero_one_in = 25) {
  const I64 nd = rng.randint(min_ndim, max_ndim + 1);
  Dims s(static_cast<std::size_t>(nd));
  for (I64& d : s) {
    d = rng.randint(1, max_dim + 1);
    if (zero_one_in > 0 && rng.randint(0, zero_one_in) == 0) d = 0;
  }
  return s;
}

/// Values that dtype `t` holds exactly: floats in [lo, hi) rounded to the dtype, integers in
/// [lo, hi), bools 0/1.
inline Ref random_ref(const Dims& shape, DType t, mls::Rng& rng, double lo = -2.0, double hi = 2.0) {
  Ref r(shape);
  for (double& x : r.v) {
    if (t == DType::Bool) x = static_cast<double>(rng.randint(0, 2));
    else if (mls::is_floating(t)) x = round_to(t, rng.uniform(lo, hi));
    else x = static_cast<double>(rng.randint(static_cast<I64>(std::floor(lo)), static_cast<I64>(std::ceil(hi))));
  }
  return r;
}

/// A shape that broadcasts to `target`: some leading dims dropped, some dims set to 1.
inline Dims broadcastable_to(const Dims& target, mls::Rng& rng) {
  const I64 drop = rng.randint(0, static_cast<I64>(target.size()) + 1);
  Dims s(target.begin() + drop, target.end());
  for (I64& d : s) {
    if (rng.randint(0, 3) == 0) d = 1;
  }
  return s;
}

// ---- naive broadcasting and elementwise ---------------------------------------------------------

/// NumPy broadcasting of two shapes, or nothing when they do not broadcast.
inline std::optional<Dims> broadcast(const Dims& a, const Dims& b) {
  const std::size_t n = std::max(a.size(), b.size());
  Dims out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const I64 da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const I64 db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

/// The value of `a` seen at index `idx` of a broadcast result of rank idx.size().
inline double bget(const Ref& a, const Dims& idx) {
  const std::size_t lead = idx.size() - a.shape.size();
  I64 lin = 0;
  for (std::size_t d = 0; d < a.shape.size(); ++d) {
    const I64 i = a.shape[d] == 1 ? 0 : idx[lead + d];
    lin = lin * a.shape[d] + i;
  }
  return a.v[static_cast<std::size_t>(lin)];
}

/// f applied to every element (also how tests prepare inputs; an expected value computed with
/// it belongs in MLS_ORACLE).
inline Ref map(const Ref& a, const std::function<double(double)>& f) {
  Ref out(a.shape);
  for (std::size_t i = 0; i < a.v.size(); ++i) out.v[i] = f(a.v[i]);
  return out;
}

#ifndef MLS_GRADED_BUILD  // oracles: compiled out of the grading build (mls/testing.hpp)
inline Ref zip(const Ref& a, const Ref& b, const std::function<double(double, double)>& f) {
  const auto s = broadcast(a.shape, b.shape);
  REQUIRE(s.has_value());
  Ref out(*s);
  for (I64 i = 0; i < out.numel(); ++i) {
    const Dims idx = unravel(i, out.shape);
    out.v[static_cast<std::size_t>(i)] = f(bget(a, idx), bget(b, idx));
  }
  return out;
}

inline Ref zip3(const Ref& c, const Ref& a, const Ref& b, const std::function<double(double, double, double)>& f) {
  const auto s1 = broadcast(c.shape, a.shape);
  REQUIRE(s1.has_value());
  const auto s = broadcast(*s1, b.shape);
  REQUIRE(s.has_value());
  Ref out(*s);
  for (I64 i = 0; i < out.numel(); ++i) {
    const Dims idx = unravel(i, out.shape);
    out.v[static_cast<std::size_t>(i)] = f(bget(c, idx), bget(a, idx), bget(b, idx));
  }
  return out;
}

#endif  // MLS_GRADED_BUILD

/// `a` stretched to `target` (which it must broadcast to).
inline Ref expand(const Ref& a, const Dims& target) {
  Ref out(target);
  for (I64 i = 0; i < out.numel(); ++i) out.v[static_cast<std::size_t>(i)] = bget(a, unravel(i, target));
  return out;
}

// ---- naive views --------------------------------------------------------------------------------

inline Ref permute(const Ref& a, const Dims& perm) {
  Dims shape(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) shape[i] = a.shape[static_cast<std::size_t>(perm[i])];
  Ref out(shape);
  for (I64 i = 0; i < out.numel(); ++i) {
    const Dims idx = unravel(i, shape);
    Dims src(perm.size());
    for (std::size_t k = 0; k < perm.size(); ++k) src[static_cast<std::size_t>(perm[k])] = idx[k];
    out.v[static_cast<std::size_t>(i)] = a(src);
  }
  return out;
}

/// Python slice a[start:stop:step] along `dim` (step >= 1; negative start/stop count from the end).
inline Ref slice(const Ref& a, I64 dim, I64 start, I64 stop, I64 step) {
  const I64 n = a.shape[static_cast<std::size_t>(dim)];
  auto fix = [n](I64 i) {
    if (i < 0) i += n;
    return std::min(std::max<I64>(i, 0), n);
  };
  std::vector<I64> picks;
  for (I64 i = fix(start); i < fix(stop); i += step) picks.push_back(i);
  Dims shape = a.shape;
  shape[static_cast<std::size_t>(dim)] = static_cast<I64>(picks.size());
  Ref out(shape);
  for (I64 i = 0; i < out.numel(); ++i) {
    Dims idx = unravel(i, shape);
    idx[static_cast<std::size_t>(dim)] = picks[static_cast<std::size_t>(idx[static_cast<std::size_t>(dim)])];
    out.v[static_cast<std::size_t>(i)] = a(idx);
  }
  return out;
}

inline Ref select(const Ref& a, I64 dim, I64 index) {
  if (index < 0) index += a.shape[static_cast<std::size_t>(dim)];
  Dims shape = a.shape;
  shape.erase(shape.begin() + dim);
  Ref out(shape);
  for (I64 i = 0; i < out.numel(); ++i) {
    Dims idx = unravel(i, shape);
    idx.insert(idx.begin() + dim, index);
    out.v[static_cast<std::size_t>(i)] = a(idx);
  }
  return out;
}

/// Same values, another shape (row-major order is unchanged).
inline Ref reshape(const Ref& a, const Dims& shape) {
  REQUIRE(count(shape) == a.numel());
  return Ref(shape, a.v);
}

inline Ref diagonal(const Ref& a, I64 k, I64 d1, I64 d2) {
  const I64 n1 = a.shape[static_cast<std::size_t>(d1)], n2 = a.shape[static_cast<std::size_t>(d2)];
  I64 len = 0;
  while (true) {
    const I64 i = k >= 0 ? len : len - k, j = k >= 0 ? len + k : len;
    if (i >= n1 || j >= n2) break;
    ++len;
  }
  Dims shape;
  for (std::size_t d = 0; d < a.shape.size(); ++d) {
    if (static_cast<I64>(d) != d1 && static_cast<I64>(d) != d2) shape.push_back(a.shape[d]);
  }
  shape.push_back(len);
  Ref out(shape);
  for (I64 lin = 0; lin < out.numel(); ++lin) {
    const Dims idx = unravel(lin, shape);
    Dims src(a.shape.size());
    std::size_t q = 0;
    for (std::size_t d = 0; d < a.shape.size(); ++d) {
      if (static_cast<I64>(d) != d1 && static_cast<I64>(d) != d2) src[d] = idx[q++];
    }
    const I64 t = idx.back();
    src[static_cast<std::size_t>(d1)] = k >= 0 ? t : t - k;
    src[static_cast<std::size_t>(d2)] = k >= 0 ? t + k : t;
    out.v[static_cast<std::size_t>(lin)] = a(src);
  }
  return out;
}

inline Ref concat(const std::vector<Ref>& parts, I64 axis) {
  Dims shape = parts.front().shape;
  shape[static_cast<std::size_t>(axis)] = 0;
  for (const Ref& p : parts) shape[static_cast<std::size_t>(axis)] += p.shape[static_cast<std::size_t>(axis)];
  Ref out(shape);
  for (I64 i = 0; i < out.numel(); ++i) {
    Dims idx = unravel(i, shape);
    I64 at = idx[static_cast<std::size_t>(axis)];
    for (const Ref& p : parts) {
      const I64 n = p.shape[static_cast<std::size_t>(axis)];
      if (at < n) {
        idx[static_cast<std::size_t>(axis)] = at;
        out.v[static_cast<std::size_t>(i)] = p(idx);
        break;
      }
      at -= n;
    }
  }
  return out;
}

// ---- naive reductions ---------------------------------------------------------------------------

/// Normalised, sorted axes (empty = all), written from scratch.
inline Dims norm_axes(const Dims& axes, I64 ndim) {
  Dims out;
  if (axes.empty()) {
    for (I64 i = 0; i < ndim; ++i) out.push_back(i);
    return out;
  }
  for (I64 a : axes) out.push_back(a < 0 ? a + ndim : a);
  std::sort(out.begin(), out.end());
  return out;
}

inline bool has(const Dims& axes, I64 d) { return std::find(axes.begin(), axes.end(), d) != axes.end(); }

inline Dims reduced_shape(const Dims& shape, const Dims& axes, bool keepdim) {
  Dims out;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (!has(axes, static_cast<I64>(d))) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

/// Output index of input index `idx` when reducing `axes`.
inline Dims out_index(const Dims& idx, const Dims& axes, bool keepdim) {
  Dims o;
  for (std::size_t d = 0; d < idx.size(); ++d) {
    if (!has(axes, static_cast<I64>(d))) o.push_back(idx[d]);
    else if (keepdim) o.push_back(0);
  }
  return o;
}

/// How many elements fold into each output slot.
inline I64 reduce_count(const Dims& shape, const Dims& axes_in) {
  I64 n = 1;
  for (I64 d : norm_axes(axes_in, static_cast<I64>(shape.size()))) n *= shape[static_cast<std::size_t>(d)];
  return n;
}

#ifndef MLS_GRADED_BUILD  // oracles: compiled out of the grading build (mls/testing.hpp)
/// Folds every element into its output slot with f(acc, x), starting from init.
inline Ref reduce(const Ref& a, const Dims& axes_in, bool keepdim, double init,
                  const std::function<double(double, double)>& f) {
  const Dims axes = norm_axes(axes_in, a.ndim());
  Ref out(reduced_shape(a.shape, axes, keepdim), init);
  for (I64 i = 0; i < a.numel(); ++i) {
    const Dims idx = unravel(i, a.shape);
    double& acc = out(out_index(idx, axes, keepdim));
    acc = f(acc, a.v[static_cast<std::size_t>(i)]);
  }
  return out;
}

/// Sum of |x| per output slot: the scale of the rounding error of a sum.
inline Ref abs_sum(const Ref& a, const Dims& axes, bool keepdim) {
  return reduce(a, axes, keepdim, 0.0, [](double s, double x) { return s + std::fabs(x); });
}

inline Ref sum(const Ref& a, const Dims& axes, bool keepdim) {
  return reduce(a, axes, keepdim, 0.0, [](double s, double x) { return s + x; });
}

/// Index of the first max (IsMax) or min along `axis`.
inline Ref arg(const Ref& a, I64 axis, bool keepdim, bool is_max) {
  if (axis < 0) axis += a.ndim();
  const Dims axes{axis};
  Ref best(reduced_shape(a.shape, axes, keepdim), 0.0);
  Ref where(reduced_shape(a.shape, axes, keepdim), -1.0);
  for (I64 i = 0; i < a.numel(); ++i) {
    const Dims idx = unravel(i, a.shape);
    const Dims o = out_index(idx, axes, keepdim);
    const double x = a.v[static_cast<std::size_t>(i)];
    if (where(o) < 0 || (is_max ? x > best(o) : x < best(o))) {
      best(o) = x;
      where(o) = static_cast<double>(idx[static_cast<std::size_t>(axis)]);
    }
  }
  return where;
}

// ---- naive matmul -------------------------------------------------------------------------------

/// NumPy matmul: 1-D operands become a row / a column and that dim is dropped; batch dims
/// broadcast. Also returns, per output element, sum_k |a_ik * b_kj| (the error scale).
inline std::pair<Ref, Ref> matmul(const Ref& a_in, const Ref& b_in) {
  Ref a = a_in, b = b_in;
  if (a.ndim() == 1) a.shape.insert(a.shape.begin(), 1);
  if (b.ndim() == 1) b.shape.push_back(1);
  const I64 M = a.shape[a.shape.size() - 2], K = a.shape.back(), N = b.shape.back();
  REQUIRE(b.shape[b.shape.size() - 2] == K);
  const Dims ab(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
  const auto batch = broadcast(ab, bb);
  REQUIRE(batch.has_value());
  const I64 nbatch = count(*batch);
  Dims shape = *batch;
  shape.push_back(M);
  shape.push_back(N);
  Ref out(shape), scale(shape);
  for (I64 bi = 0; bi < nbatch; ++bi) {
    // Which matrix of a and of b this batch entry reads: align at the right, size-1 dims at 0.
    const Dims bidx = unravel(bi, *batch);
    I64 ma = 0, mb = 0;
    for (std::size_t d = 0; d < ab.size(); ++d) ma = ma * ab[d] + (ab[d] == 1 ? 0 : bidx[bidx.size() - ab.size() + d]);
    for (std::size_t d = 0; d < bb.size(); ++d) mb = mb * bb[d] + (bb[d] == 1 ? 0 : bidx[bidx.size() - bb.size() + d]);
    const double* pa = a.v.data() + ma * M * K;
    const double* pb = b.v.data() + mb * K * N;
    double* pc = out.v.data() + bi * M * N;
    double* ps = scale.v.data() + bi * M * N;
    for (I64 i = 0; i < M; ++i) {
      for (I64 j = 0; j < N; ++j) {
        double s = 0, sa = 0;
        for (I64 k = 0; k < K; ++k) {
          const double x = pa[i * K + k] * pb[k * N + j];
          s += x;
          sa += std::fabs(x);
        }
        pc[i * N + j] = s;
        ps[i * N + j] = sa;
      }
    }
  }
  Dims final_shape = *batch;
  if (a_in.ndim() > 1) final_shape.push_back(M);
  if (b_in.ndim() > 1) final_shape.push_back(N);
  out.shape = final_shape;
  scale.shape = final_shape;
  return {out, scale};
}

// ---- comparisons --------------------------------------------------------------------------------

/// True when `got` has `want`'s shape and every element equals it exactly (NaN matches NaN).
/// On a mismatch, explains the first one through `why`.
inline bool same_values(const mls::Tensor& got, const Ref& want, std::string* why = nullptr) {
  std::ostringstream os;
  if (got.shape() != want.shape) {
    os << "shape " << dims_str(got.shape()) << " != expected " << dims_str(want.shape);
    if (why) *why = os.str();
    return false;
  }
  const Ref g = to_ref(got);
  for (I64 i = 0; i < g.numel(); ++i) {
    const double x = g.v[static_cast<std::size_t>(i)], y = want.v[static_cast<std::size_t>(i)];
    if (x == y || (std::isnan(x) && std::isnan(y))) continue;
    os << "element " << dims_str(unravel(i, g.shape)) << ": got " << x << ", expected " << y;
    if (why) *why = os.str();
    return false;
  }
  return true;
}

/// True when `got` has `want`'s shape and |got - want| <= tol(i) everywhere (NaN matches NaN,
/// equal infinities match).
inline bool close_values(const mls::Tensor& got, const Ref& want, const std::function<double(I64)>& tol,
                         std::string* why = nullptr) {
  std::ostringstream os;
  os.precision(17);
  if (got.shape() != want.shape) {
    os << "shape " << dims_str(got.shape()) << " != expected " << dims_str(want.shape);
    if (why) *why = os.str();
    return false;
  }
  const Ref g = to_ref(got);
  for (I64 i = 0; i < g.numel(); ++i) {
    const double x = g.v[static_cast<std::size_t>(i)], y = want.v[static_cast<std::size_t>(i)];
    if (x == y || (std::isnan(x) && std::isnan(y))) continue;
    const double t = tol(i);
    if (std::fabs(x - y) <= t) continue;
    os << "element " << dims_str(unravel(i, g.shape)) << ": got " << x << ", expected " << y << " (|diff| "
       << std::fabs(x - y) << " > tol " << t << ")";
    if (why) *why = os.str();
    return false;
  }
  return true;
}

/// The largest of tol(i) over `want`'s elements: the tolerance an observation of the produced
/// tensor carries (the grader compares it with the reference build's tensor within it).
inline double max_tol(const Ref& want, const std::function<double(I64)>& tol) {
  double m = 0.0;
  for (I64 i = 0; i < want.numel(); ++i) m = std::max(m, tol(i));
  return m;
}

#endif  // MLS_GRADED_BUILD

/// Gives an observation an absolute tolerance (the macros below cannot name the member `tol`:
/// it is their parameter's name).
inline void set_abs_tolerance(mls::testing::Observation& o, double atol) { o.tol = {0.0, atol}; }

}  // namespace ref

/// CHECK that tensor `got` equals Ref `want` exactly, explaining the first mismatch. Records
/// `got` (dtype, shape, values; not its layout) as an exact observation. In the grading build
/// (mls/testing.hpp) only the observation remains: `want` is never computed there.
#define CHECK_SAME(got, want)                                         \
  do {                                                                \
    const mls::Tensor& got_ = (got);                                  \
    ::mls::testing::observe_values(#got, got_);                       \
    MLS_ORACLE_CHECK(std::string why_; const bool ok_ = ref::same_values(got_, want, &why_); \
                     INFO(why_); CHECK(ok_));                         \
  } while (0)

/// CHECK that tensor `got` is within tol(i) of Ref `want` everywhere. Records `got` (dtype,
/// shape, values) with twice the largest tol(i) as its absolute tolerance (the student's tensor
/// and the reference build's may each be tol(i) from `want`). The values are read before `want`
/// is evaluated; in the grading build `want` and `tol` are never evaluated (only the reference's
/// tolerance counts: the grader compares with the reference build's stream).
#define CHECK_CLOSE(got, want, tol)                                   \
  do {                                                                \
    const mls::Tensor& got_ = (got);                                  \
    if (::mls::testing::observing()) {                                \
      auto seen_ = ::mls::testing::values_observation(#got, got_);     \
      MLS_ORACLE(if (got_.defined() && mls::is_floating(got_.dtype())) \
                   ref::set_abs_tolerance(seen_, 2 * ref::max_tol(want, tol));) \
      ::mls::testing::observe(std::move(seen_));                      \
    }                                                                 \
    MLS_ORACLE_CHECK(std::string why_; const bool ok_ = ref::close_values(got_, want, tol, &why_); \
                     INFO(why_); CHECK(ok_));                         \
  } while (0)
