// Student file of lab 1: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Reductions over any set of axes, argmax/argmin, and the numerically stable softmax family.
// Student file: the bodies between the SOLUTION markers.
#include <cmath>
#include <limits>
#include <numeric>

#include "loop.hpp"
#include "fast_kernels.hpp"
#include "mls/tensor/tensor.hpp"

namespace mls::inline tensor {
namespace {

enum class ReduceOp { Sum, Prod, Max, Min };

template <ReduceOp OP, class T>
constexpr T identity() {
  if constexpr (OP == ReduceOp::Sum) return T(0);
  else if constexpr (OP == ReduceOp::Prod) return T(1);
  // Floats start from -inf / +inf (not lowest()/max()), so a max over all -inf is -inf.
  else if constexpr (OP == ReduceOp::Max) {
    if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  } else {
    if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::max();
  }
}

/// Combines an accumulator with one value. max/min propagate NaN, as NumPy does.
template <ReduceOp OP, class T>
inline T combine(T acc, T x) {
  // BEGIN SOLUTION
  if constexpr (OP == ReduceOp::Sum) return static_cast<T>(acc + x);
  else if constexpr (OP == ReduceOp::Prod) return static_cast<T>(acc * x);
  else if constexpr (OP == ReduceOp::Max) return (x > acc || x != x) ? x : acc;
  else return (x < acc || x != x) ? x : acc;
  // END SOLUTION
}

/// Reduces n contiguous values. Sums run in 16 independent lanes (so the compiler can use SIMD
/// and the rounding error grows slowly), folded into a wider accumulator every block.
template <ReduceOp OP, class T, class Acc>
Acc reduce_row(const T* x, std::int64_t n) {
  // BEGIN SOLUTION
  if constexpr (std::is_same_v<T, float>) {  // multiversioned SIMD kernels
    if constexpr (OP == ReduceOp::Sum) return static_cast<Acc>(impl::sum_f32(x, n));
    if constexpr (OP == ReduceOp::Max) return static_cast<Acc>(n > 0 ? impl::max_f32(x, n) : identity<OP, T>());
    if constexpr (OP == ReduceOp::Min) return static_cast<Acc>(n > 0 ? impl::min_f32(x, n) : identity<OP, T>());
  }
  constexpr int kLanes = 16;
  constexpr std::int64_t kBlock = 4096;
  Acc total = identity<OP, Acc>();
  for (std::int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const std::int64_t b1 = std::min(n, b0 + kBlock);
    T lanes[kLanes];
    for (T& l : lanes) l = identity<OP, T>();
    std::int64_t i = b0;
    for (; i + kLanes <= b1; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) lanes[j] = combine<OP, T>(lanes[j], x[i + j]);
    }
    for (; i < b1; ++i) lanes[0] = combine<OP, T>(lanes[0], x[i]);
    for (T l : lanes) total = combine<OP, Acc>(total, static_cast<Acc>(l));
  }
  return total;
  // END SOLUTION
}

/// out[o, i] = reduce_r x[o, r, i] for a dense [O, R, I] block with I > 1: whole rows of I
/// values are combined at once, which reads memory in order.
template <ReduceOp OP, class T>
void reduce_middle(const T* x, T* out, std::int64_t O, std::int64_t R, std::int64_t I) {
  // BEGIN SOLUTION
  auto body = [&](std::int64_t o, std::int64_t i0, std::int64_t i1) {
    T* acc = out + o * I;
    if constexpr (OP == ReduceOp::Sum && std::is_same_v<T, float>) {  // multiversioned SIMD kernel
      impl::sum_columns_f32(x + o * R * I, acc, R, I, i0, i1);
      return;
    }
    for (std::int64_t i = i0; i < i1; ++i) acc[i] = identity<OP, T>();
    std::int64_t r = 0;
    for (; r + 4 <= R; r += 4) {  // four rows per sweep: a quarter of the accumulator traffic
      const T* r0 = x + (o * R + r) * I;
      const T* r1 = r0 + I;
      const T* r2 = r1 + I;
      const T* r3 = r2 + I;
      for (std::int64_t i = i0; i < i1; ++i) {
        acc[i] = combine<OP, T>(combine<OP, T>(acc[i], r0[i]), combine<OP, T>(combine<OP, T>(r1[i], r2[i]), r3[i]));
      }
    }
    for (; r < R; ++r) {
      const T* row = x + (o * R + r) * I;
      for (std::int64_t i = i0; i < i1; ++i) acc[i] = combine<OP, T>(acc[i], row[i]);
    }
  };
  if (O >= num_threads() || O * R * I < 2 * impl::kParallelGrain) {
    parallel_for(0, O, std::max<std::int64_t>(1, impl::kParallelGrain / std::max<std::int64_t>(1, R * I)),
                 [&](std::int64_t b, std::int64_t e) {
                   for (std::int64_t o = b; o < e; ++o) body(o, 0, I);
                 });
  } else {
    for (std::int64_t o = 0; o < O; ++o) {
      parallel_for(0, I, 256, [&](std::int64_t b, std::int64_t e) { body(o, b, e); });
    }
  }
  // END SOLUTION
}

/// out[o] = reduce_r x[o, r] for a dense [O, R] block.
template <ReduceOp OP, class T, class Acc>
void reduce_rows(const T* x, T* out, std::int64_t O, std::int64_t R) {
  // BEGIN SOLUTION
  if (O == 1 && R >= 2 * impl::kParallelGrain && num_threads() > 1) {
    // One long row: each thread reduces a piece, then the pieces are combined.
    const int parts = num_threads();
    std::vector<Acc> partial(static_cast<std::size_t>(parts), identity<OP, Acc>());
    const std::int64_t step = (R + parts - 1) / parts;
    parallel_for(0, parts, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t p = b; p < e; ++p) {
        const std::int64_t lo = p * step, hi = std::min(R, lo + step);
        if (lo < hi) partial[static_cast<std::size_t>(p)] = reduce_row<OP, T, Acc>(x + lo, hi - lo);
      }
    });
    Acc total = identity<OP, Acc>();
    for (Acc v : partial) total = combine<OP, Acc>(total, v);
    out[0] = static_cast<T>(total);
    return;
  }
  parallel_for(0, O, std::max<std::int64_t>(1, impl::kParallelGrain / std::max<std::int64_t>(1, R)),
               [&](std::int64_t b, std::int64_t e) {
                 for (std::int64_t o = b; o < e; ++o) out[o] = static_cast<T>(reduce_row<OP, T, Acc>(x + o * R, R));
               });
  // END SOLUTION
}

const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "reduce";
}

/// Shape of the result: reduced axes removed, or kept with size 1.
Shape reduced_shape(const Shape& shape, const std::vector<std::int64_t>& axes, bool keepdim) {
  Shape out;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(shape.size()); ++d) {
    const bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!reduced) out.push_back(shape[static_cast<std::size_t>(d)]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

template <ReduceOp OP>
Tensor reduce(const Tensor& a, std::span<const std::int64_t> axes_in, bool keepdim) {
  const char* name = reduce_name(OP);
  MLS_CHECK(a.defined(), name, ": tensor is undefined (default-constructed)");
  const std::vector<std::int64_t> axes =
      a.ndim() == 0 && axes_in.empty() ? std::vector<std::int64_t>{} : normalize_axes(axes_in, a.ndim(), name);
  const Shape out_shape = reduced_shape(a.shape(), axes, keepdim);
  std::int64_t R = 1;
  for (std::int64_t ax : axes) R *= a.shape()[static_cast<std::size_t>(ax)];
  if constexpr (OP == ReduceOp::Max || OP == ReduceOp::Min) {
    MLS_CHECK(R > 0, name, ": cannot reduce over an empty set of elements (shape ", shape_str(a.shape()), ", axes ",
              shape_str(axes), ")");
  }
  // Integer sums and products accumulate in int64, like NumPy.
  DType t = a.dtype();
  if ((OP == ReduceOp::Sum || OP == ReduceOp::Prod) && !is_floating(t)) t = DType::Int64;
  if constexpr (OP == ReduceOp::Max || OP == ReduceOp::Min) {
    // max/min of bools stay bool (as in NumPy and PyTorch): reduce 0/1 as int32, convert back.
    if (t == DType::Bool) return reduce<OP>(a.to(DType::Int32), axes_in, keepdim).to(DType::Bool);
  }
  if (t == DType::Bool) t = DType::Int64;
  const Tensor x0 = a.to(t);

  // Layout: if the tensor is dense and the reduced axes are one consecutive block, view it as
  // [O, R, I] without copying. Otherwise copy it with the kept axes first: [O, R, 1].
  std::int64_t O = 1, I = 1;
  Tensor x;
  const bool block = !axes.empty() && axes.back() - axes.front() + 1 == static_cast<std::int64_t>(axes.size());
  if (x0.is_contiguous() && block) {
    x = x0;
    for (std::int64_t d = 0; d < axes.front(); ++d) O *= x.shape()[static_cast<std::size_t>(d)];
    for (std::int64_t d = axes.back() + 1; d < x.ndim(); ++d) I *= x.shape()[static_cast<std::size_t>(d)];
  } else {
    std::vector<std::int64_t> perm;
    for (std::int64_t d = 0; d < x0.ndim(); ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) perm.push_back(d);
    }
    for (std::int64_t d : axes) perm.push_back(d);
    x = x0.permute(perm).compact();
    O = checked_numel(reduced_shape(a.shape(), axes, false));
  }
  Tensor out = Tensor::empty(out_shape, t);
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
      T* o = out.data<T>();
      if (R == 0) {
        for (std::int64_t i = 0; i < out.numel(); ++i) o[i] = identity<OP, T>();
      } else if (I == 1) {
        reduce_rows<OP, T, Acc>(x.data<T>(), o, O, R);
      } else {
        reduce_middle<OP, T>(x.data<T>(), o, O, R, I);
      }
    }
  });
  return out;
}

/// Index of the first max (or min) along the last axis of a dense [O, R] block.
template <bool IsMax, class T>
void arg_rows(const T* x, std::int64_t* out, std::int64_t O, std::int64_t R) {
  // BEGIN SOLUTION
  parallel_for(0, O, std::max<std::int64_t>(1, impl::kParallelGrain / std::max<std::int64_t>(1, R)),
               [&](std::int64_t b, std::int64_t e) {
                 for (std::int64_t o = b; o < e; ++o) {
                   const T* row = x + o * R;
                   std::int64_t best = 0;
                   for (std::int64_t r = 1; r < R; ++r) {
                     if (row[best] != row[best]) break;  // NaN wins, first one
                     const bool better = IsMax ? (row[r] > row[best]) : (row[r] < row[best]);
                     if (better || row[r] != row[r]) best = r;
                   }
                   out[o] = best;
                 }
               });
  // END SOLUTION
}

template <bool IsMax>
Tensor arg_reduce(const Tensor& a, std::int64_t axis, bool keepdim) {
  const char* name = IsMax ? "argmax" : "argmin";
  MLS_CHECK(a.defined(), name, ": tensor is undefined (default-constructed)");
  const std::int64_t ax = normalize_axis(axis, a.ndim(), name);
  const std::int64_t R = a.shape()[static_cast<std::size_t>(ax)];
  MLS_CHECK(R > 0, name, ": cannot take the ", IsMax ? "max" : "min", " of an empty dimension ", axis, " (shape ",
            shape_str(a.shape()), ")");
  const Tensor x = a.dtype() == DType::Bool ? a.to(DType::Int32) : a;
  const Tensor rows = x.transpose(ax, -1).compact();  // [..., R] with the axis last
  const std::vector<std::int64_t> axes{ax};
  Tensor out = Tensor::empty(reduced_shape(a.shape(), axes, keepdim), DType::Int64);
  const std::int64_t O = rows.numel() / R;
  // Rows of `rows` are ordered like the kept dims with the last one swapped in at position ax:
  // compute in that order, then permute back.
  Tensor tmp = Tensor::empty({O}, DType::Int64);
  dispatch(rows.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) arg_rows<IsMax, T>(rows.data<T>(), tmp.data<std::int64_t>(), O, R);
  });
  Shape tshape = rows.shape();
  tshape.back() = 1;
  Tensor back = tmp.view(tshape).transpose(ax, -1);  // undo the swap
  out.copy_(keepdim ? back : back.squeeze(ax));
  return out;
}

}  // namespace

Tensor sum(const Tensor& a, std::span<const std::int64_t> axes, bool keepdim) {
  return reduce<ReduceOp::Sum>(a, axes, keepdim);
}
Tensor prod(const Tensor& a, std::span<const std::int64_t> axes, bool keepdim) {
  return reduce<ReduceOp::Prod>(a, axes, keepdim);
}
Tensor max(const Tensor& a, std::span<const std::int64_t> axes, bool keepdim) {
  return reduce<ReduceOp::Max>(a, axes, keepdim);
}
Tensor min(const Tensor& a, std::span<const std::int64_t> axes, bool keepdim) {
  return reduce<ReduceOp::Min>(a, axes, keepdim);
}

Tensor mean(const Tensor& a, std::span<const std::int64_t> axes, bool keepdim) {
  MLS_CHECK(a.defined(), "mean: tensor is undefined (default-constructed)");
  // Integers and bools: computed in float64 and rounded once to the float32 result (converting
  // int64 values above 2^24 to float32 first would round each of them).
  if (!is_floating(a.dtype())) return mean(a.to(DType::Float64), axes, keepdim).to(DType::Float32);
  const Tensor& x = a;
  const std::vector<std::int64_t> ax = a.ndim() == 0 && axes.empty() ? std::vector<std::int64_t>{} : normalize_axes(axes, a.ndim(), "mean");
  std::int64_t n = 1;
  for (std::int64_t d : ax) n *= a.shape()[static_cast<std::size_t>(d)];
  MLS_CHECK(n > 0, "mean: cannot average an empty set of elements (shape ", shape_str(a.shape()), ")");
  Tensor s = sum(x, ax, keepdim);
  s /= static_cast<double>(n);
  return s;
}

Tensor var(const Tensor& a, std::span<const std::int64_t> axes, bool keepdim, std::int64_t correction) {
  MLS_CHECK(a.defined(), "var: tensor is undefined (default-constructed)");
  MLS_CHECK(correction >= 0, "var: correction must be >= 0, got ", correction);
  // Integers and bools: computed in float64 and rounded once to the float32 result, as mean.
  if (!is_floating(a.dtype())) return var(a.to(DType::Float64), axes, keepdim, correction).to(DType::Float32);
  const Tensor& x = a;
  const std::vector<std::int64_t> ax = a.ndim() == 0 && axes.empty() ? std::vector<std::int64_t>{} : normalize_axes(axes, a.ndim(), "var");
  std::int64_t n = 1;
  for (std::int64_t d : ax) n *= a.shape()[static_cast<std::size_t>(d)];
  MLS_CHECK(n - correction > 0, "var: ", n, " elements with correction ", correction, " leave no degrees of freedom");
  // Two passes: subtract the mean first so that large offsets do not cancel catastrophically.
  const Tensor d = x - mean(x, ax, true);
  Tensor s = sum(d * d, ax, keepdim);
  s /= static_cast<double>(n - correction);
  return s;
}

Tensor argmax(const Tensor& a, std::int64_t axis, bool keepdim) { return arg_reduce<true>(a, axis, keepdim); }
Tensor argmin(const Tensor& a, std::int64_t axis, bool keepdim) { return arg_reduce<false>(a, axis, keepdim); }

Tensor logsumexp(const Tensor& a, std::int64_t axis, bool keepdim) {
  MLS_CHECK(a.defined(), "logsumexp: tensor is undefined (default-constructed)");
  MLS_CHECK(is_floating(a.dtype()), "logsumexp: needs a float tensor, got ", a.dtype());
  // BEGIN SOLUTION
  const std::int64_t ax = normalize_axis(axis, a.ndim(), "logsumexp");
  const std::vector<std::int64_t> axes{ax};
  if (a.shape()[static_cast<std::size_t>(ax)] == 0) {  // log of an empty sum: -inf (as PyTorch, SciPy)
    Shape s = a.shape();
    s[static_cast<std::size_t>(ax)] = 1;
    Tensor out = Tensor::full(s, -std::numeric_limits<double>::infinity(), a.dtype());
    return keepdim ? out : out.squeeze(ax);
  }
  Tensor m = max(a, axes, true);
  // An infinite max (a row of -inf, or a +inf entry) would give inf - inf = NaN: shift by 0
  // instead, which gives the right -inf or +inf.
  m = where(eq(abs(m), std::numeric_limits<double>::infinity()), Tensor::scalar(0.0, a.dtype()), m);
  Tensor out = log(sum(exp(a - m), axes, true)) + m;
  return keepdim ? out : out.squeeze(ax);
  // END SOLUTION
}

Tensor log_softmax(const Tensor& a, std::int64_t axis) {
  MLS_CHECK(a.defined(), "log_softmax: tensor is undefined (default-constructed)");
  MLS_CHECK(is_floating(a.dtype()), "log_softmax: needs a float tensor, got ", a.dtype());
  // BEGIN SOLUTION
  return a - logsumexp(a, axis, true);
  // END SOLUTION
}

Tensor softmax(const Tensor& a, std::int64_t axis) {
  MLS_CHECK(a.defined(), "softmax: tensor is undefined (default-constructed)");
  MLS_CHECK(is_floating(a.dtype()), "softmax: needs a float tensor, got ", a.dtype());
  // BEGIN SOLUTION
  const std::int64_t ax = normalize_axis(axis, a.ndim(), "softmax");
  if (a.dtype() == DType::Float32 && ax == a.ndim() - 1 && a.is_contiguous() && a.numel() > 0) {
    // Fused: one pass for the max, one for exp and the sum, one to scale — per row.
    const std::int64_t R = a.shape().back(), O = a.numel() / R;
    Tensor out = Tensor::empty(a.shape(), DType::Float32);
    const float* x = a.data<float>();
    float* y = out.data<float>();
    parallel_for(0, O, std::max<std::int64_t>(1, impl::kParallelGrain / R), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t o = b; o < e; ++o) impl::softmax_row_f32(x + o * R, y + o * R, R);
    });
    return out;
  }
  const std::vector<std::int64_t> axes{ax};
  if (a.numel() == 0) return Tensor::empty(a.shape(), a.dtype());  // nothing to normalise
  Tensor e = exp(a - max(a, axes, true));
  Tensor s = sum(e, axes, true);
  e /= s;
  return e;
  // END SOLUTION
}

}  // namespace mls::tensor
