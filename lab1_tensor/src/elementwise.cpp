// Student file of lab 1: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Elementwise operations with NumPy broadcasting and dtype promotion.
// Student file: the bodies between the SOLUTION markers (the strided loops; the math of each op
// is lab 1's scalar functions in mls/tensor/scalar.hpp).
#include <cmath>
#include <numbers>

#include "copy.hpp"
#include "fast_kernels.hpp"
#include "loop.hpp"
#include "mls/tensor/scalar.hpp"
#include "mls/tensor/tensor.hpp"

namespace mls::inline tensor {

const char* op_name(UnaryOp op) {
  static constexpr const char* names[] = {"neg",  "abs",  "exp",     "log",  "sqrt", "rsqrt",
                                          "sin",  "cos",  "tanh",    "sigmoid", "relu", "gelu"};
  return names[static_cast<int>(op)];
}

const char* op_name(BinaryOp op) {
  static constexpr const char* names[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum",
                                          "eq",  "ne",  "lt",  "le",  "gt",  "ge"};
  return names[static_cast<int>(op)];
}

namespace {

constexpr bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }
constexpr bool is_float_only(UnaryOp op) { return op >= UnaryOp::Exp && op != UnaryOp::Relu; }

/// Applies one unary op to one value: lab 1's scalar function (mls/tensor/scalar.hpp, the one
/// definition lab 2's rules and lab 3's fused loops share).
template <UnaryOp OP, class T>
inline T unary_fn(T x) { return scalar::unary<OP, T>(x); }

/// Applies one binary op to two values of the compute type T; comparisons return bool.
template <BinaryOp OP, class T>
inline auto binary_fn(T a, T b) { return scalar::binary<OP, T>(a, b); }

/// out = f(a) over equal shapes (a already broadcast and of dtype In).
/// `dense`, when given, is a SIMD kernel for the case where both sides are dense.
template <class In, class Out, class F>
void map_unary(Tensor& out, const Tensor& a, F f, void (*dense)(const In*, Out*, std::int64_t) = nullptr) {
  // BEGIN SOLUTION
  const std::array<const std::int64_t*, 2> st{out.strides().data(), a.strides().data()};
  impl::for_each_row<2>(out.shape(), st, {sizeof(Out), sizeof(In)},
                          {static_cast<char*>(out.data_ptr()), const_cast<char*>(static_cast<const char*>(a.data_ptr()))},
                          [f, dense](std::array<char*, 2> p, std::array<std::int64_t, 2> s, std::int64_t n) {
                            if (s[0] == sizeof(Out) && s[1] == sizeof(In)) {  // dense: vectorizable
                              Out* o = reinterpret_cast<Out*>(p[0]);
                              const In* x = reinterpret_cast<const In*>(p[1]);
                              if (dense != nullptr) {
                                dense(x, o, n);
                                return;
                              }
                              for (std::int64_t i = 0; i < n; ++i) o[i] = f(x[i]);
                              return;
                            }
                            for (std::int64_t i = 0; i < n; ++i) {
                              *reinterpret_cast<Out*>(p[0] + i * s[0]) = f(*reinterpret_cast<const In*>(p[1] + i * s[1]));
                            }
                          });
  // END SOLUTION
}

/// SIMD kernels for the dense rows of a binary op (any of them may be nullptr): both operands
/// dense, the second a single value (tensor op scalar), the first a single value.
template <class In, class Out>
struct DenseBinary {
  void (*both)(const In* x, const In* y, Out* out, std::int64_t n) = nullptr;
  void (*scalar_right)(const In* x, const In* y, Out* out, std::int64_t n) = nullptr;
  void (*scalar_left)(const In* x, const In* y, Out* out, std::int64_t n) = nullptr;
};

/// out = f(a, b) over equal shapes (a, b already broadcast, both of dtype In).
/// `dense`, when it has a kernel for a row's layout, computes that row instead of `f`.
template <class In, class Out, class F>
void map_binary(Tensor& out, const Tensor& a, const Tensor& b, F f, DenseBinary<In, Out> dense = {}) {
  // BEGIN SOLUTION
  const std::array<const std::int64_t*, 3> st{out.strides().data(), a.strides().data(), b.strides().data()};
  impl::for_each_row<3>(
      out.shape(), st, {sizeof(Out), sizeof(In), sizeof(In)},
      {static_cast<char*>(out.data_ptr()), const_cast<char*>(static_cast<const char*>(a.data_ptr())),
       const_cast<char*>(static_cast<const char*>(b.data_ptr()))},
      [f, dense](std::array<char*, 3> p, std::array<std::int64_t, 3> s, std::int64_t n) {
        Out* o = reinterpret_cast<Out*>(p[0]);
        const In* x = reinterpret_cast<const In*>(p[1]);
        const In* y = reinterpret_cast<const In*>(p[2]);
        if (s[0] == sizeof(Out) && s[1] == sizeof(In) && s[2] == sizeof(In)) {  // dense
          if (dense.both != nullptr) return dense.both(x, y, o, n);
          for (std::int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
        } else if (s[0] == sizeof(Out) && s[1] == sizeof(In) && s[2] == 0) {  // tensor op scalar
          if (dense.scalar_right != nullptr) return dense.scalar_right(x, y, o, n);
          const In c = *y;
          for (std::int64_t i = 0; i < n; ++i) o[i] = f(x[i], c);
        } else if (s[0] == sizeof(Out) && s[1] == 0 && s[2] == sizeof(In)) {  // scalar op tensor
          if (dense.scalar_left != nullptr) return dense.scalar_left(x, y, o, n);
          const In c = *x;
          for (std::int64_t i = 0; i < n; ++i) o[i] = f(c, y[i]);
        } else {
          for (std::int64_t i = 0; i < n; ++i) {
            *reinterpret_cast<Out*>(p[0] + i * s[0]) =
                f(*reinterpret_cast<const In*>(p[1] + i * s[1]), *reinterpret_cast<const In*>(p[2] + i * s[2]));
          }
        }
      });
  // END SOLUTION
}

template <UnaryOp OP>
void run_unary(Tensor& out, const Tensor& a) {
  dispatch(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      void (*dense)(const T*, T*, std::int64_t) = nullptr;
      if constexpr (std::is_same_v<T, float> && OP == UnaryOp::Exp) dense = &impl::exp_f32;
      if constexpr (std::is_same_v<T, float> && OP == UnaryOp::Sigmoid) dense = &impl::sigmoid_f32;
      if constexpr (std::is_same_v<T, float> && OP == UnaryOp::Relu) dense = &impl::relu_f32;
      if constexpr (std::is_same_v<T, float> && OP == UnaryOp::Tanh) dense = &impl::tanh_f32;
      if constexpr (std::is_same_v<T, float> && OP == UnaryOp::Gelu) dense = &impl::gelu_f32;
      map_unary<T, T>(out, a, [](T x) { return unary_fn<OP, T>(x); }, dense);
    }
  });
}

template <BinaryOp OP>
void run_binary(Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_comparison(OP)) {
      map_binary<T, bool>(out, a, b, [](T x, T y) { return binary_fn<OP, T>(x, y); });
    } else if constexpr (!std::is_same_v<T, bool>) {
      DenseBinary<T, T> dense;
      if constexpr (std::is_same_v<T, float> && OP <= BinaryOp::Div) {  // SIMD, streamed stores
        dense = {impl::dense_binary_f32(static_cast<int>(OP)), impl::dense_binary_scalar_f32(static_cast<int>(OP)),
                 impl::dense_scalar_binary_f32(static_cast<int>(OP))};
      }
      map_binary<T, T>(out, a, b, [](T x, T y) { return binary_fn<OP, T>(x, y); }, dense);
    }
  });
}

/// The dtype a binary op computes in, and checks that it may run at all.
DType compute_dtype(BinaryOp op, DType a, DType b) {
  DType t = promote(a, b);
  if (is_comparison(op)) return t;
  MLS_CHECK(t != DType::Bool, op_name(op), ": arithmetic is not defined for bool tensors (dtypes ", a, " and ", b,
            "); convert with .to(DType::Int64) first");
  if (op == BinaryOp::Div && !is_floating(t)) t = DType::Float32;  // true division
  return t;
}

void check_operand(const Tensor& t, const char* op) {
  MLS_CHECK(t.defined(), op, ": tensor is undefined (default-constructed)");
}

}  // namespace

Tensor unary(UnaryOp op, const Tensor& a) {
  check_operand(a, op_name(op));
  MLS_CHECK(a.dtype() != DType::Bool, op_name(op), ": not defined for bool tensors; convert with .to(...) first");
  const DType t = is_float_only(op) && !is_floating(a.dtype()) ? DType::Float32 : a.dtype();
  const Tensor in = a.to(t);
  Tensor out = Tensor::empty(a.shape(), t);
  scalar::with_unary(op, [&](auto c) { run_unary<decltype(c)::value>(out, in); });
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_operand(a, op_name(op));
  check_operand(b, op_name(op));
  const DType t = compute_dtype(op, a.dtype(), b.dtype());
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op_name(op));
  const Tensor x = a.to(t).expand(shape), y = b.to(t).expand(shape);
  Tensor out = Tensor::empty(shape, is_comparison(op) ? DType::Bool : t);
  scalar::with_binary(op, [&](auto c) { run_binary<decltype(c)::value>(out, x, y); });
  return out;
}

namespace {
/// The dtype a Python-style scalar takes next to a tensor of dtype `t`: the tensor's own, except
/// that a fractional (or non-finite) scalar next to integers is float32, and an integral scalar
/// outside the integer type's range widens to int64 (or float64) instead of wrapping.
DType scalar_dtype(DType t, double s) {
  if (is_floating(t)) return t;
  if (!std::isfinite(s) || s != std::floor(s)) return DType::Float32;
  if (t == DType::Bool) t = DType::Int64;
  if (t == DType::Int32 && s >= -2147483648.0 && s <= 2147483647.0) return t;
  if (s >= -9223372036854775808.0 && s < 9223372036854775808.0) return DType::Int64;
  return DType::Float64;
}
}  // namespace

Tensor binary(BinaryOp op, const Tensor& a, double s) {
  check_operand(a, op_name(op));
  return binary(op, a, Tensor::scalar(s, scalar_dtype(a.dtype(), s)));
}

Tensor operator/(double s, const Tensor& a) {
  DType t = is_floating(a.dtype()) ? a.dtype() : DType::Float32;
  return binary(BinaryOp::Div, Tensor::scalar(s, t), a);
}

void binary_(BinaryOp op, Tensor& a, const Tensor& b) {
  check_operand(a, op_name(op));
  check_operand(b, op_name(op));
  MLS_CHECK(!is_comparison(op), op_name(op), ": comparisons have no in-place form");
  const DType t = compute_dtype(op, a.dtype(), b.dtype());
  MLS_CHECK(a.dtype() != DType::Bool, op_name(op), "_: arithmetic is not defined for bool tensors (destination ",
            a.dtype(), ", operand ", b.dtype(), "); convert with .to(DType::Int64) first");
  MLS_CHECK(!(is_floating(t) && !is_floating(a.dtype())), op_name(op), "_: result dtype ", t,
            " cannot be stored in place in a tensor of dtype ", a.dtype());
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op_name(op));
  MLS_CHECK(shape == a.shape(), op_name(op), "_: in-place result of shape ", shape_str(shape),
            " does not fit the destination of shape ", shape_str(a.shape()));
  for (std::size_t d = 0; d < a.shape().size(); ++d) {
    MLS_CHECK(a.strides()[d] != 0 || a.shape()[d] <= 1, op_name(op), "_: the destination of shape ",
              shape_str(a.shape()), " and strides ", shape_str(a.strides()),
              " has overlapping elements (an expanded view); clone() it first");
  }
  // An operand that overlaps the destination is read while the destination is written: unless
  // it addresses exactly the destination's elements (a += a, each element reads only itself), it
  // is copied first, as NumPy does (`a += a[0:1]` must add the original row 0 to every row).
  const Tensor src = b.to(a.dtype());  // a new tensor when the dtype differs: no overlap then
  Tensor y = src.expand(shape);
  if (!y.same_elements(a) && src.may_overlap(a)) y = src.clone().expand(shape);
  scalar::with_binary(op, [&](auto c) { run_binary<decltype(c)::value>(a, a, y); });
}

Tensor& Tensor::operator+=(const Tensor& o) { binary_(BinaryOp::Add, *this, o); return *this; }
Tensor& Tensor::operator-=(const Tensor& o) { binary_(BinaryOp::Sub, *this, o); return *this; }
Tensor& Tensor::operator*=(const Tensor& o) { binary_(BinaryOp::Mul, *this, o); return *this; }
Tensor& Tensor::operator/=(const Tensor& o) { binary_(BinaryOp::Div, *this, o); return *this; }
namespace {
/// In place with a scalar: the scalar must be representable in the tensor's dtype.
void scalar_inplace(BinaryOp op, Tensor& a, double s) {
  check_operand(a, op_name(op));
  const DType t = scalar_dtype(a.dtype(), s);
  MLS_CHECK(t == a.dtype() || is_floating(a.dtype()),
            op_name(op), "_: the scalar ", s, " cannot be applied in place to a tensor of dtype ", a.dtype(),
            " (the result would need ", t, "); compute a new tensor instead");
  binary_(op, a, Tensor::scalar(s, a.dtype()));
}
}  // namespace

Tensor& Tensor::operator+=(double s) { scalar_inplace(BinaryOp::Add, *this, s); return *this; }
Tensor& Tensor::operator-=(double s) { scalar_inplace(BinaryOp::Sub, *this, s); return *this; }
Tensor& Tensor::operator*=(double s) { scalar_inplace(BinaryOp::Mul, *this, s); return *this; }
Tensor& Tensor::operator/=(double s) { scalar_inplace(BinaryOp::Div, *this, s); return *this; }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_operand(cond, "where");
  check_operand(a, "where");
  check_operand(b, "where");
  MLS_CHECK(cond.dtype() == DType::Bool, "where: condition must be bool, got ", cond.dtype());
  const DType t = promote(a.dtype(), b.dtype());
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  const Tensor c = cond.expand(shape), x = a.to(t).expand(shape), y = b.to(t).expand(shape);
  Tensor out = Tensor::empty(shape, t);
  // BEGIN SOLUTION
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    const std::array<const std::int64_t*, 4> st{out.strides().data(), c.strides().data(), x.strides().data(),
                                                y.strides().data()};
    impl::for_each_row<4>(shape, st, {sizeof(T), 1, sizeof(T), sizeof(T)},
                            {static_cast<char*>(out.data_ptr()), const_cast<char*>(static_cast<const char*>(c.data_ptr())),
                             const_cast<char*>(static_cast<const char*>(x.data_ptr())),
                             const_cast<char*>(static_cast<const char*>(y.data_ptr()))},
                            [](std::array<char*, 4> p, std::array<std::int64_t, 4> s, std::int64_t n) {
                              for (std::int64_t i = 0; i < n; ++i) {
                                const bool k = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
                                *reinterpret_cast<T*>(p[0] + i * s[0]) =
                                    *reinterpret_cast<const T*>((k ? p[2] + i * s[2] : p[3] + i * s[3]));
                              }
                            });
  });
  // END SOLUTION
  return out;
}

}  // namespace mls::tensor
