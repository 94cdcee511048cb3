#pragma once
/// The one definition of every elementwise scalar function: lab 1's kernels apply them to each
/// element, lab 2's gradient rules use their constants, lab 3's fused loops call them, so the
/// numerics cannot diverge (float32 exp and sigmoid go through `fast_expf`).
///
///   float y = scalar::unary<UnaryOp::Gelu>(x);           // compile-time op
///   double z = scalar::unary(UnaryOp::Sigmoid, 0.5);     // run-time op
#include <cmath>
#include <type_traits>

#include "mls/common/fastmath.hpp"
#include "mls/tensor/tensor.hpp"

namespace mls::inline tensor::scalar {

/// GELU's tanh approximation 0.5 x (1 + tanh(k (x + c x^3))): the constants are common's
/// (`mls/common/fastmath.hpp`), the one spelling shared with lab 4's CPU and CUDA kernels.
using ::mls::kGeluC;
using ::mls::kGeluK;

/// exp; float32 through the vectorizable `fast_expf` (within 1 ulp).
template <class T>
inline T exp(T x) {
  if constexpr (std::is_same_v<T, float>) return fast_expf(x);
  else return std::exp(x);
}
/// 1 / (1 + e^-x), stable for large |x| (never exponentiates a large positive number).
template <class T>
inline T sigmoid(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return 1.0f / (1.0f + fast_expf(-x));  // exp overflows to inf for x << 0: gives 0, as it should
  } else {
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    const T e = std::exp(x);
    return e / (T(1) + e);
  }
}
/// GELU (tanh approximation) computed as x sigmoid(2u), u = k (x + c x^3): the same function as
/// 0.5 x (1 + tanh u) without the cancellation in 1 + tanh u for x << 0.
template <class T>
inline T gelu(T x) {
  const T u = static_cast<T>(kGeluK) * (x + static_cast<T>(kGeluC) * x * x * x);
  return x / (T(1) + scalar::exp(T(-2) * u));  // float32: fast_expf, so loops over it vectorize
}
/// max(x, 0).
template <class T>
inline T relu(T x) { return x > T(0) ? x : T(0); }

/// One unary op on one value (T: float or double for the transcendental ops).
template <UnaryOp OP, class T>
inline T unary(T x) {
  if constexpr (OP == UnaryOp::Neg) return -x;
  else if constexpr (OP == UnaryOp::Abs) {
    if constexpr (std::is_floating_point_v<T>) return std::fabs(x);  // clears the sign: abs(-0.0) = +0.0
    else return x < T(0) ? -x : x;
  }
  else if constexpr (OP == UnaryOp::Exp) return scalar::exp(x);
  else if constexpr (OP == UnaryOp::Log) return std::log(x);
  else if constexpr (OP == UnaryOp::Sqrt) return std::sqrt(x);
  else if constexpr (OP == UnaryOp::Rsqrt) return T(1) / std::sqrt(x);
  else if constexpr (OP == UnaryOp::Sin) return std::sin(x);
  else if constexpr (OP == UnaryOp::Cos) return std::cos(x);
  else if constexpr (OP == UnaryOp::Tanh) {
    if constexpr (std::is_same_v<T, float>) return fast_tanhf(x);  // vectorizable (mls/common/fastmath.hpp)
    else return std::tanh(x);
  }
  else if constexpr (OP == UnaryOp::Sigmoid) return scalar::sigmoid(x);
  else if constexpr (OP == UnaryOp::Relu) return scalar::relu(x);
  else return scalar::gelu(x);
}
/// GELU's derivative (the tanh form): 0.5 (1 + t) + 0.5 k x (1 - t^2) (1 + 3 c x^2),
/// t = tanh(k (x + c x^3)); float32 through fast_tanhf, so loops over it vectorize.
template <class T>
inline T gelu_grad(T x) {
  const T k = static_cast<T>(kGeluK), c = static_cast<T>(kGeluC);
  const T x2 = x * x;
  const T t = unary<UnaryOp::Tanh>(k * (x + c * x2 * x));
  return T(0.5) * (T(1) + t) + T(0.5) * k * x * (T(1) - t * t) * (T(1) + T(3) * c * x2);
}

/// One binary op on two values of the compute type T; comparisons return bool.
template <BinaryOp OP, class T>
inline auto binary(T a, T b) {
  if constexpr (OP == BinaryOp::Add) return static_cast<T>(a + b);
  else if constexpr (OP == BinaryOp::Sub) return static_cast<T>(a - b);
  else if constexpr (OP == BinaryOp::Mul) return static_cast<T>(a * b);
  else if constexpr (OP == BinaryOp::Div) return static_cast<T>(a / b);
  else if constexpr (OP == BinaryOp::Pow) {
    if constexpr (std::is_integral_v<T>) {
      // Integer power by squaring; a negative exponent gives 0 except for bases 1 and -1.
      // Unsigned arithmetic: a result too big for T wraps (as in NumPy) instead of being UB.
      if (b < 0) return static_cast<T>(a == 1 ? 1 : (a == -1 ? (b % 2 ? -1 : 1) : 0));
      using U = std::make_unsigned_t<T>;
      U r = 1, base = static_cast<U>(a);
      for (T e = b; e > 0;) {
        if (e & 1) r = static_cast<U>(r * base);
        e >>= 1;
        if (e > 0) base = static_cast<U>(base * base);  // only when another bit follows
      }
      return static_cast<T>(r);
    } else {
      return static_cast<T>(std::pow(a, b));
    }
  } else if constexpr (OP == BinaryOp::Maximum) return (a != a || a > b) ? a : b;  // NaN propagates
  else if constexpr (OP == BinaryOp::Minimum) return (a != a || a < b) ? a : b;
  else if constexpr (OP == BinaryOp::Eq) return a == b;
  else if constexpr (OP == BinaryOp::Ne) return a != b;
  else if constexpr (OP == BinaryOp::Lt) return a < b;
  else if constexpr (OP == BinaryOp::Le) return a <= b;
  else if constexpr (OP == BinaryOp::Gt) return a > b;
  else return a >= b;
}

/// Calls f(std::integral_constant<UnaryOp, op>{}): turns a run-time op into a compile-time one.
template <class F>
inline decltype(auto) with_unary(UnaryOp op, F&& f) {
  switch (op) {
    case UnaryOp::Neg: return f(std::integral_constant<UnaryOp, UnaryOp::Neg>{});
    case UnaryOp::Abs: return f(std::integral_constant<UnaryOp, UnaryOp::Abs>{});
    case UnaryOp::Exp: return f(std::integral_constant<UnaryOp, UnaryOp::Exp>{});
    case UnaryOp::Log: return f(std::integral_constant<UnaryOp, UnaryOp::Log>{});
    case UnaryOp::Sqrt: return f(std::integral_constant<UnaryOp, UnaryOp::Sqrt>{});
    case UnaryOp::Rsqrt: return f(std::integral_constant<UnaryOp, UnaryOp::Rsqrt>{});
    case UnaryOp::Sin: return f(std::integral_constant<UnaryOp, UnaryOp::Sin>{});
    case UnaryOp::Cos: return f(std::integral_constant<UnaryOp, UnaryOp::Cos>{});
    case UnaryOp::Tanh: return f(std::integral_constant<UnaryOp, UnaryOp::Tanh>{});
    case UnaryOp::Sigmoid: return f(std::integral_constant<UnaryOp, UnaryOp::Sigmoid>{});
    case UnaryOp::Relu: return f(std::integral_constant<UnaryOp, UnaryOp::Relu>{});
    case UnaryOp::Gelu: break;
  }
  return f(std::integral_constant<UnaryOp, UnaryOp::Gelu>{});
}
/// The same for binary ops.
template <class F>
inline decltype(auto) with_binary(BinaryOp op, F&& f) {
  switch (op) {
    case BinaryOp::Add: return f(std::integral_constant<BinaryOp, BinaryOp::Add>{});
    case BinaryOp::Sub: return f(std::integral_constant<BinaryOp, BinaryOp::Sub>{});
    case BinaryOp::Mul: return f(std::integral_constant<BinaryOp, BinaryOp::Mul>{});
    case BinaryOp::Div: return f(std::integral_constant<BinaryOp, BinaryOp::Div>{});
    case BinaryOp::Pow: return f(std::integral_constant<BinaryOp, BinaryOp::Pow>{});
    case BinaryOp::Maximum: return f(std::integral_constant<BinaryOp, BinaryOp::Maximum>{});
    case BinaryOp::Minimum: return f(std::integral_constant<BinaryOp, BinaryOp::Minimum>{});
    case BinaryOp::Eq: return f(std::integral_constant<BinaryOp, BinaryOp::Eq>{});
    case BinaryOp::Ne: return f(std::integral_constant<BinaryOp, BinaryOp::Ne>{});
    case BinaryOp::Lt: return f(std::integral_constant<BinaryOp, BinaryOp::Lt>{});
    case BinaryOp::Le: return f(std::integral_constant<BinaryOp, BinaryOp::Le>{});
    case BinaryOp::Gt: return f(std::integral_constant<BinaryOp, BinaryOp::Gt>{});
    case BinaryOp::Ge: break;
  }
  return f(std::integral_constant<BinaryOp, BinaryOp::Ge>{});
}

/// One unary op chosen at run time (a switch; prefer the template in loops).
template <class T>
inline T unary(UnaryOp op, T x) {
  return with_unary(op, [x](auto c) { return unary<decltype(c)::value, T>(x); });
}

}  // namespace mls::tensor::scalar
