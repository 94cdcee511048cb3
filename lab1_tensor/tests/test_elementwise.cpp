// Elementwise ops: unary, binary with broadcasting, scalar variants, operators, in-place,
// where, and dtype promotion, against naive double-precision formulas.
#include <cmath>
#include <numbers>

#include "generators.hpp"
#include "mls/common/parallel.hpp"

using mls::BinaryOp;
using mls::DType;
using mls::Tensor;
using mls::UnaryOp;
using ref::Dims;
using ref::I64;
using ref::Ref;

namespace {

constexpr UnaryOp kUnary[] = {UnaryOp::Neg,  UnaryOp::Abs,  UnaryOp::Exp,     UnaryOp::Log,
                              UnaryOp::Sqrt, UnaryOp::Rsqrt, UnaryOp::Sin,    UnaryOp::Cos,
                              UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Relu, UnaryOp::Gelu};
constexpr BinaryOp kBinary[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Pow,
                                BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Eq, BinaryOp::Ne,
                                BinaryOp::Lt, BinaryOp::Le, BinaryOp::Gt, BinaryOp::Ge};

bool is_cmp(BinaryOp op) { return op >= BinaryOp::Eq; }

/// The naive formula of each unary op, in double.
double unary_ref(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Abs: return std::fabs(x);
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Rsqrt: return 1.0 / std::sqrt(x);
    case UnaryOp::Sin: return std::sin(x);
    case UnaryOp::Cos: return std::cos(x);
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::Relu: return x > 0 ? x : 0.0;
    case UnaryOp::Gelu: {
      const double k = std::sqrt(2.0 / std::numbers::pi);
      return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    }
  }
  return 0;
}

/// Error bound of a unary op computed in a dtype with epsilon `eps`, at input x with exact
/// result y: a few ulps of y, plus for the composed ops (sigmoid, tanh, gelu) the error carried
/// through their inner terms, which scales with |x|.
double unary_tol(UnaryOp op, double x, double y, double eps) {
  const double tiny = std::numeric_limits<double>::denorm_min();
  switch (op) {
    case UnaryOp::Neg:
    case UnaryOp::Abs:
    case UnaryOp::Relu: return 0.0;
    case UnaryOp::Sigmoid:
    case UnaryOp::Tanh: return 4 * eps * std::fabs(y) + 4 * eps * std::fabs(x) * std::fabs(y) + tiny;
    case UnaryOp::Gelu: return 8 * eps * (std::fabs(y) + std::fabs(x)) + tiny;
    default: return 4 * eps * std::fabs(y) + tiny;
  }
}

bool needs_positive(UnaryOp op) { return op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt; }

/// Integer power with the documented rule for negative exponents (0 except bases 1 and -1).
double int_pow(double a, double b) {
  const auto x = static_cast<I64>(a), e = static_cast<I64>(b);
  if (e < 0) return x == 1 ? 1.0 : (x == -1 ? (e % 2 ? -1.0 : 1.0) : 0.0);
  I64 r = 1;
  for (I64 i = 0; i < e; ++i) r *= x;
  return static_cast<double>(r);
}

/// The naive formula of each binary op, in double (`integral`: the compute dtype is an integer).
double binary_ref(BinaryOp op, double a, double b, bool integral) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Pow: return integral ? int_pow(a, b) : std::pow(a, b);
    case BinaryOp::Maximum: return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
    case BinaryOp::Minimum: return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
  }
  return 0;
}

/// The dtype promotion rules of elementwise.cpp, written out as a table.
DType expected_dtype(BinaryOp op, DType a, DType b) {
  if (is_cmp(op)) return DType::Bool;
  const DType t = a > b ? a : b;  // bool < int32 < int64 < float32 < float64
  if (op == BinaryOp::Div && !mls::is_floating(t)) return DType::Float32;
  return t;
}

/// Compares op(a, b) with the reference for one pair of inputs.
void check_binary(BinaryOp op, const Tensor& a, const Ref& ra, const Tensor& b, const Ref& rb) {
  const DType out = expected_dtype(op, a.dtype(), b.dtype());
  const DType compute = is_cmp(op) ? (a.dtype() > b.dtype() ? a.dtype() : b.dtype()) : out;
  const bool integral = !mls::is_floating(compute);
  const Tensor got = mls::binary(op, a, b);
  CHECK(got.dtype() == out);
  // The inputs hold values exact in the compute dtype, and +, -, *, / of two floats rounded
  // once to float32 equal the float32 operation (53 >= 2 * 24 + 2), so those are exact.
  MLS_ORACLE(const Ref want = ref::zip(ra, rb, [&](double x, double y) {
    return ref::round_to(out, binary_ref(op, ref::round_to(compute, x), ref::round_to(compute, y), integral));
  });)
  if (op == BinaryOp::Pow && !integral) {
    const double eps = ref::eps_of(compute);
    CHECK_CLOSE(got, want, [&](I64 i) { return 4 * eps * std::fabs(want.v[static_cast<std::size_t>(i)]); });
  } else {
    CHECK_SAME(got, want);
  }
}

}  // namespace

TEST_CASE("unary ops on float tensors match the naive formulas", "[lab1][elementwise]") {
  mls::Rng rng(501, "unary");
  for (UnaryOp op : kUnary) {
    for (DType t : ref::kFloatDTypes) {
      for (int trial = 0; trial < 15; ++trial) {
        const double lo = needs_positive(op) ? 0.01 : -6.0, hi = needs_positive(op) ? 9.0 : 6.0;
        gen::Pair p = gen::random_input(rng, t, 3, 0, 4, lo, hi);
        INFO(mls::op_name(op) << " " << t << " " << p.log);
        const Tensor got = mls::unary(op, p.t);
        CHECK(got.dtype() == t);
        MLS_ORACLE(const Ref want = ref::map(p.r, [op](double x) { return unary_ref(op, x); });)
        const double eps = ref::eps_of(t);
        CHECK_CLOSE(got, want, [&](I64 i) {
          return unary_tol(op, p.r.v[static_cast<std::size_t>(i)], want.v[static_cast<std::size_t>(i)], eps);
        });
      }
    }
  }
}

TEST_CASE("unary ops on integer tensors: neg/abs/relu keep the dtype, the rest give float32",
          "[lab1][elementwise]") {
  mls::Rng rng(502, "unary-int");
  for (UnaryOp op : kUnary) {
    for (DType t : {DType::Int32, DType::Int64}) {
      for (int trial = 0; trial < 8; ++trial) {
        gen::Pair p = gen::random_input(rng, t, 2, 0, 4, needs_positive(op) ? 1 : -9, 10);
        INFO(mls::op_name(op) << " " << t << " " << p.log);
        const Tensor got = mls::unary(op, p.t);
        const bool keeps = op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu;
        CHECK(got.dtype() == (keeps ? t : DType::Float32));
        MLS_ORACLE(const Ref want = ref::map(p.r, [&](double x) { return ref::round_to(got.dtype(), unary_ref(op, x)); });)
        const double eps = ref::eps_of(DType::Float32);
        CHECK_CLOSE(got, want, [&](I64 i) {
          return keeps ? 0.0 : unary_tol(op, p.r.v[static_cast<std::size_t>(i)], want.v[static_cast<std::size_t>(i)], eps);
        });
      }
    }
  }
}

TEST_CASE("unary ops at special values: inf, nan, zero, large magnitudes", "[lab1][elementwise]") {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType t : ref::kFloatDTypes) {
    INFO(t);
    const Tensor x = ref::make(Ref({6}, {0.0, -1.0, inf, -inf, 1000.0, -1000.0}), t);
    const auto v = [](const Tensor& y) { return ref::to_ref(y).v; };
    CHECK(v(mls::exp(x))[0] == 1.0);
    CHECK(v(mls::exp(x))[3] == 0.0);
    CHECK(v(mls::exp(x))[4] == inf);
    CHECK(v(mls::log(x))[0] == -inf);
    CHECK(std::isnan(v(mls::log(x))[1]));
    CHECK(std::isnan(v(mls::sqrt(x))[1]));
    CHECK(v(mls::rsqrt(x))[0] == inf);
    CHECK(v(mls::rsqrt(x))[2] == 0.0);
    CHECK(v(mls::tanh(x))[2] == 1.0);
    CHECK(v(mls::tanh(x))[3] == -1.0);
    // The stable sigmoid never overflows: exactly 1 and 0 (not NaN) far out.
    const auto s = v(mls::sigmoid(x));
    CHECK(s[0] == 0.5);
    CHECK(s[2] == 1.0);
    CHECK(s[3] == 0.0);
    CHECK(s[4] == 1.0);
    CHECK(s[5] == 0.0);
    CHECK(v(mls::relu(x)) == std::vector<double>{0, 0, inf, 0, 1000, 0});
    CHECK(v(mls::abs(x)) == std::vector<double>{0, 1, inf, inf, 1000, 1000});
    CHECK(v(mls::gelu(x))[4] == 1000.0);
    CHECK(v(mls::gelu(x))[5] == 0.0);
    CHECK(v(mls::gelu(x))[0] == 0.0);
    // The values checked above, as produced (NaN equals NaN in an observation).
    mls::testing::observe("special values", std::vector<double>{
        v(mls::exp(x))[0], v(mls::exp(x))[3], v(mls::exp(x))[4], v(mls::log(x))[0], v(mls::log(x))[1],
        v(mls::sqrt(x))[1], v(mls::rsqrt(x))[0], v(mls::rsqrt(x))[2], v(mls::tanh(x))[2], v(mls::tanh(x))[3],
        s[0], s[2], s[3], s[4], s[5], v(mls::gelu(x))[4], v(mls::gelu(x))[5], v(mls::gelu(x))[0]});
    MLS_OBSERVE_VALUES(mls::relu(x));
    MLS_OBSERVE_VALUES(mls::abs(x));
  }
  // sigmoid(-80) in float32 is a tiny positive number, not 0 or NaN.
  const double s = mls::sigmoid(Tensor::scalar(-80)).item();
  CHECK(s > 0.0);
  MLS_OBSERVE(s, {2e-5, 0.0});  // Approx(...).epsilon(1e-5), on both sides
  CHECK(s == Approx(std::exp(-80.0)).epsilon(1e-5));
}

TEST_CASE("binary ops with broadcasting, every op and dtype pair", "[lab1][elementwise]") {
  mls::Rng rng(503, "binary");
  for (BinaryOp op : kBinary) {
    for (DType ta : ref::kAllDTypes) {
      for (DType tb : ref::kAllDTypes) {
        if (!is_cmp(op) && ta == DType::Bool && tb == DType::Bool) continue;  // an error: see [errors]
        for (int trial = 0; trial < 3; ++trial) {
          const Dims out = ref::random_shape(rng);
          Dims sa = ref::broadcastable_to(out, rng), sb = ref::broadcastable_to(out, rng);
          if (rng.randint(0, 2)) std::swap(sa, sb);
          // Exponents stay small and non-negative for integer pow (no overflow, no 0 ** -1).
          const bool int_pow_case = op == BinaryOp::Pow && !mls::is_floating(ta > tb ? ta : tb);
          const Ref ra = ref::random_ref(sa, ta, rng, -3, 3);
          const Ref rb = ref::random_ref(sb, tb, rng, int_pow_case ? 0 : -3, 3);
          const Tensor a = gen::any_layout(ra, ta, rng), b = gen::any_layout(rb, tb, rng);
          INFO(mls::op_name(op) << " " << ta << ref::dims_str(sa) << " strides " << ref::dims_str(a.strides())
                                << " with " << tb << ref::dims_str(sb) << " strides " << ref::dims_str(b.strides()));
          check_binary(op, a, ra, b, rb);
        }
      }
    }
  }
}

TEST_CASE("binary ops on random strided views (permuted, sliced, expanded)", "[lab1][elementwise]") {
  mls::Rng rng(504, "binary-views");
  for (int trial = 0; trial < 150; ++trial) {
    const BinaryOp op = kBinary[rng.randint(0, 13)];
    const DType t = ref::kNumericDTypes[rng.randint(0, 4)];
    gen::Pair x = gen::random_input(rng, t, 4, 0, 4, 1, 3);
    // The second operand: same shape, or a broadcastable one, each in its own layout.
    const Dims sb = rng.randint(0, 2) ? x.r.shape : ref::broadcastable_to(x.r.shape, rng);
    const Ref rb = ref::random_ref(sb, t, rng, op == BinaryOp::Pow ? 0 : -3, 3);
    const Tensor b = gen::any_layout(rb, t, rng);
    INFO(mls::op_name(op) << " " << t << " " << x.log << " with " << ref::dims_str(sb));
    if (rng.randint(0, 2)) check_binary(op, x.t, x.r, b, rb);
    else check_binary(op, b, rb, x.t, x.r);
  }
}

TEST_CASE("integer pow by squaring, negative exponents and int64 range", "[lab1][elementwise]") {
  const Tensor base = Tensor::from({2, -3, 1, -1, 0, 5, 2, -1, 1, 7});
  const Tensor expo = Tensor::from({10, 3, -4, -3, 0, 0, -1, -2, 100, 2});
  const Tensor got = mls::pow(base, expo);
  CHECK(got.dtype() == DType::Int32);
  MLS_OBSERVE_VALUES(mls::pow(base, expo));  // int32 base and exponent
  CHECK(got.to_vector<std::int32_t>() == std::vector<std::int32_t>{1024, -27, 1, -1, 1, 1, 0, 1, 1, 49});
  const Tensor big = mls::pow(Tensor::from({std::int64_t{3}}), Tensor::from({std::int64_t{31}}));
  MLS_OBSERVE_VALUES(big);
  CHECK(big.to_vector<std::int64_t>() == std::vector<std::int64_t>{617673396283947LL});
  // float pow: fractional exponents, negative bases with integer exponents, NaN otherwise.
  const Tensor f = mls::pow(Tensor::from({4.0, -2.0, -2.0, 0.0}), Tensor::from({0.5, 3.0, 0.5, -1.0}));
  const std::vector<double> fv = f.to_vector<double>();
  MLS_OBSERVE_VALUES(f);
  CHECK(fv[0] == 2.0);
  CHECK(fv[1] == -8.0);
  CHECK(std::isnan(fv[2]));
  CHECK(fv[3] == std::numeric_limits<double>::infinity());
}

// Squaring the base once more after the last exponent bit once overflowed (signed overflow is
// undefined behaviour) even where the result fits.
TEST_CASE("integer pow does not overflow internally when the result fits",
          "[lab1][elementwise]") {
  // Exponentiation by squaring squares the base once more after the last bit of the exponent:
  // 3 ** 39 fits in int64 but the loop computes 3 ** 64; 2 ** 30 fits in int32 but the loop
  // computes 2 ** 32. Squaring only while bits remain avoids it.
  MLS_OBSERVE_VALUES(mls::pow(Tensor::from({std::int64_t{3}}), Tensor::from({std::int64_t{39}})));
  MLS_OBSERVE_VALUES(mls::pow(Tensor::from({2}), Tensor::from({30})));
  CHECK(mls::pow(Tensor::from({std::int64_t{3}}), Tensor::from({std::int64_t{39}})).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{4052555153018976267LL});
  CHECK(mls::pow(Tensor::from({2}), Tensor::from({30})).to_vector<std::int32_t>() == std::vector<std::int32_t>{1 << 30});
}

TEST_CASE("maximum and minimum propagate NaN from either side", "[lab1][elementwise]") {
  for (DType t : ref::kFloatDTypes) {
    const Tensor a = ref::make(Ref({4}, {NAN, 1.0, 2.0, NAN}), t);
    const Tensor b = ref::make(Ref({4}, {1.0, NAN, 3.0, NAN}), t);
    for (const Tensor& r : {mls::maximum(a, b), mls::minimum(a, b), mls::maximum(b, a), mls::minimum(b, a)}) {
      MLS_OBSERVE_VALUES(r);
      const auto v = r.to_vector<double>();
      CHECK(std::isnan(v[0]));
      CHECK(std::isnan(v[1]));
      CHECK_FALSE(std::isnan(v[2]));
      CHECK(std::isnan(v[3]));
    }
    CHECK(mls::maximum(a, b).to_vector<double>()[2] == 3.0);
    CHECK(mls::minimum(a, b).to_vector<double>()[2] == 2.0);
    // NaN compares unequal to everything, itself included.
    CHECK(mls::eq(a, a).to_vector<bool>() == std::vector<bool>{false, true, true, false});
    CHECK(mls::ne(a, a).to_vector<bool>() == std::vector<bool>{true, false, false, true});
    MLS_OBSERVE_VALUES(mls::eq(a, a));
    MLS_OBSERVE_VALUES(mls::ne(a, a));
  }
}

TEST_CASE("dtype promotion table of binary ops", "[lab1][elementwise]") {
  for (BinaryOp op : kBinary) {
    for (DType ta : ref::kAllDTypes) {
      for (DType tb : ref::kAllDTypes) {
        INFO(mls::op_name(op) << " " << ta << " " << tb);
        const Tensor a = Tensor::ones({2}, ta), b = Tensor::ones({2}, tb);
        if (!is_cmp(op) && ta == DType::Bool && tb == DType::Bool) {
          CHECK_THROWS_AS(mls::binary(op, a, b), mls::Error);
        } else {
          mls::testing::observe("dtype", std::string(mls::dtype_name(mls::binary(op, a, b).dtype())));
          CHECK(mls::binary(op, a, b).dtype() == expected_dtype(op, ta, tb));
        }
      }
    }
  }
  // A few spelled out.
  CHECK(mls::add(Tensor::ones({1}, DType::Int32), Tensor::ones({1}, DType::Int64)).dtype() == DType::Int64);
  CHECK(mls::add(Tensor::ones({1}, DType::Int64), Tensor::ones({1}, DType::Float32)).dtype() == DType::Float32);
  CHECK(mls::add(Tensor::ones({1}, DType::Bool), Tensor::ones({1}, DType::Int32)).dtype() == DType::Int32);
  CHECK(mls::div(Tensor::from({7}), Tensor::from({2})).dtype() == DType::Float32);
  CHECK(mls::div(Tensor::from({7}), Tensor::from({2})).item() == 3.5);
  MLS_OBSERVE_VALUES(mls::div(Tensor::from({7}), Tensor::from({2})));
  CHECK(mls::div(Tensor::from({7LL}), Tensor::from({2.0})).dtype() == DType::Float64);
  CHECK(mls::lt(Tensor::from({1.0}), Tensor::from({2})).dtype() == DType::Bool);
  CHECK(mls::eq(Tensor::from({true, false}), Tensor::from({true, true})).to_vector<bool>() ==
        std::vector<bool>{true, false});
}

TEST_CASE("scalar variants: the scalar takes the tensor's dtype, fractional scalars promote ints",
          "[lab1][elementwise]") {
  mls::Rng rng(505, "scalar");
  for (BinaryOp op : kBinary) {
    for (DType t : ref::kNumericDTypes) {
      for (double s : {2.0, -1.0, 0.5, -2.25}) {
        if (op == BinaryOp::Pow && s < 0 && !mls::is_floating(t) && s == std::floor(s)) continue;
        gen::Pair p = gen::random_input(rng, t, 2, 0, 3, op == BinaryOp::Pow ? 0.25 : -3, 3);
        INFO(mls::op_name(op) << " " << t << " scalar " << s << " " << p.log);
        const bool integral_scalar = s == std::floor(s);
        const DType compute = mls::is_floating(t) || integral_scalar ? t : DType::Float32;
        const DType out = expected_dtype(op, compute, compute);
        const Tensor got = mls::binary(op, p.t, s);
        CHECK(got.dtype() == out);
        const DType math = is_cmp(op) ? compute : out;
        MLS_ORACLE(const Ref want = ref::map(p.r, [&](double x) {
          return ref::round_to(out, binary_ref(op, ref::round_to(math, x), ref::round_to(math, s), !mls::is_floating(math)));
        });)
        const double eps = ref::eps_of(math);
        CHECK_CLOSE(got, want, [&](I64 i) {
          return op == BinaryOp::Pow ? 4 * eps * std::fabs(want.v[static_cast<std::size_t>(i)]) : 0.0;
        });
      }
    }
  }
  // Comparisons of a bool tensor with a number.
  CHECK(mls::eq(Tensor::from({true, false}), 1.0).to_vector<bool>() == std::vector<bool>{true, false});
  CHECK(mls::add(Tensor::from({1, 2}), 0.5).dtype() == DType::Float32);
  CHECK(mls::add(Tensor::from({1, 2}), 3.0).dtype() == DType::Int32);
  CHECK(mls::mul(Tensor::from({1.0, 2.0}), 3.0).dtype() == DType::Float64);
}

TEST_CASE("operators: unary minus, + - * / with tensors and scalars on both sides", "[lab1][elementwise]") {
  const Tensor a = Tensor::from({1.f, -2.f, 4.f}), b = Tensor::from({2.f, 8.f, -0.5f});
  const auto v = [](const Tensor& t) { return t.to_vector<float>(); };
  MLS_OBSERVE_VALUES(-a);
  MLS_OBSERVE_VALUES(a + b);
  MLS_OBSERVE_VALUES(a - b);
  MLS_OBSERVE_VALUES(a * b);
  MLS_OBSERVE_VALUES(a / b);
  MLS_OBSERVE_VALUES(1.0 - a);
  MLS_OBSERVE_VALUES(8.0 / a);
  CHECK(v(-a) == std::vector<float>{-1, 2, -4});
  CHECK(v(a + b) == std::vector<float>{3, 6, 3.5f});
  CHECK(v(a - b) == std::vector<float>{-1, -10, 4.5f});
  CHECK(v(a * b) == std::vector<float>{2, -16, -2});
  CHECK(v(a / b) == std::vector<float>{0.5f, -0.25f, -8});
  CHECK(v(a + 1.0) == std::vector<float>{2, -1, 5});
  CHECK(v(1.0 + a) == std::vector<float>{2, -1, 5});
  CHECK(v(a - 1.0) == std::vector<float>{0, -3, 3});
  CHECK(v(1.0 - a) == std::vector<float>{0, 3, -3});
  CHECK(v(a * 2.0) == std::vector<float>{2, -4, 8});
  CHECK(v(2.0 * a) == std::vector<float>{2, -4, 8});
  CHECK(v(a / 2.0) == std::vector<float>{0.5f, -1, 2});
  CHECK(v(8.0 / a) == std::vector<float>{8, -4, 2});
  CHECK((8.0 / a).dtype() == DType::Float32);
  const Tensor i = Tensor::from({1, 2, 4});
  CHECK((1.0 / i).dtype() == DType::Float32);
  CHECK((1.0 / i).to_vector<float>() == std::vector<float>{1, 0.5f, 0.25f});
  CHECK((3.0 - i).to_vector<std::int32_t>() == std::vector<std::int32_t>{2, 1, -1});
  CHECK((1.0 / Tensor::from({4.0})).dtype() == DType::Float64);
  // Broadcasting through the operators: a column minus a row.
  const Tensor col = Tensor::from({1.f, 2.f}, {2, 1}), row = Tensor::from({10.f, 20.f, 30.f});
  MLS_OBSERVE_VALUES(col - row);
  MLS_OBSERVE_VALUES(3.0 - i);
  MLS_OBSERVE_VALUES(1.0 / i);
  CHECK((col - row).shape() == Dims{2, 3});
  CHECK(v(col - row) == std::vector<float>{-9, -19, -29, -8, -18, -28});
}

TEST_CASE("in-place ops on strided destinations with broadcasting", "[lab1][elementwise]") {
  mls::Rng rng(506, "inplace");
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div};
  for (int trial = 0; trial < 200; ++trial) {
    const BinaryOp op = ops[rng.randint(0, 4)];
    const DType ta = ref::kNumericDTypes[rng.randint(0, 4)];
    const DType tb = ref::kAllDTypes[rng.randint(0, 5)];
    const DType compute = expected_dtype(op, ta, tb);
    if (mls::is_floating(compute) && !mls::is_floating(ta)) continue;  // an error: see [errors]
    const Dims shape = ref::random_shape(rng);
    const Ref ra = ref::random_ref(shape, ta, rng, -3, 3);
    const Dims sb = ref::broadcastable_to(shape, rng);
    Ref rb = ref::random_ref(sb, tb, rng, -3, 3);
    if (op == BinaryOp::Div) rb = ref::map(rb, [](double y) { return y == 0 ? 1.0 : y; });
    Tensor a = gen::any_layout(ra, ta, rng);
    const Tensor b = gen::any_layout(rb, tb, rng);
    INFO(mls::op_name(op) << "_ " << ta << ref::dims_str(shape) << " strides " << ref::dims_str(a.strides()) << " with "
                          << tb << ref::dims_str(sb));
    const void* where = a.data_ptr();
    Tensor& r = op == BinaryOp::Add   ? (a += b)
                : op == BinaryOp::Sub ? (a -= b)
                : op == BinaryOp::Mul ? (a *= b)
                                      : (a /= b);
    CHECK(&r == &a);
    CHECK(a.data_ptr() == where);
    CHECK(a.dtype() == ta);
    CHECK(a.shape() == shape);
    // b is first converted to a's dtype, then the op runs in a's dtype.
    MLS_ORACLE(const Ref want = ref::zip(ra, rb, [&](double x, double y) {
      return ref::round_to(ta, binary_ref(op, x, ref::round_to(ta, y), !mls::is_floating(ta)));
    });)
    CHECK_SAME(a, want);
  }
}

TEST_CASE("in-place scalar ops and aliasing operands", "[lab1][elementwise]") {
  Tensor a = Tensor::from({1.f, 2.f, 3.f, 4.f}, {2, 2});
  a += 1.0;
  a *= 2.0;
  a -= 0.5;
  a /= 0.5;
  MLS_OBSERVE_VALUES(a);
  CHECK(a.to_vector<float>() == std::vector<float>{7, 11, 15, 19});
  Tensor i = Tensor::from({1, 2, 3});
  i += 2.0;
  i *= 3.0;
  i -= 1.0;
  MLS_OBSERVE_VALUES(i);
  CHECK(i.to_vector<std::int32_t>() == std::vector<std::int32_t>{8, 11, 14});
  CHECK(i.dtype() == DType::Int32);
  // The operand aliases the destination: the result is as if b were read first.
  Tensor m = ref::make(Ref({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}), DType::Float32);
  m += m.transpose();
  MLS_OBSERVE_VALUES(m);
  CHECK(m.to_vector<float>() == std::vector<float>{2, 6, 10, 6, 10, 14, 10, 14, 18});
  Tensor s = Tensor::from({1.f, 2.f, 3.f});
  s *= s;
  MLS_OBSERVE_VALUES(s);
  CHECK(s.to_vector<float>() == std::vector<float>{1, 4, 9});
  Tensor r = Tensor::arange(5);
  r += r.as_strided({5}, {-1}, 4);  // reversed view of itself
  MLS_OBSERVE_VALUES(r);
  CHECK(r.to_vector<float>() == std::vector<float>{4, 4, 4, 4, 4});
  Tensor row = Tensor::arange(6).reshape({2, 3});
  row -= row.select(0, 0);  // broadcast of its own first row
  MLS_OBSERVE_VALUES(row);
  CHECK(row.to_vector<float>() == std::vector<float>{0, 0, 0, 3, 3, 3});
  // Writing through a view changes the base.
  Tensor base = Tensor::zeros({3, 4});
  Tensor col = base.select(1, 2);
  col += 5.0;
  MLS_OBSERVE_VALUES(base);
  CHECK(base.at({1, 2}) == 5.0);
  CHECK(base.at({1, 1}) == 0.0);
}

TEST_CASE("in-place scalar with a fractional value on an integer tensor does not truncate silently",
          "[lab1][elementwise]") {
  // binary(op, int_tensor, 0.5) promotes to float32 (see the scalar variants), so the in-place
  // form must refuse, as `int_tensor *= float_tensor` does, rather than truncate 0.5 to 0 and
  // multiply by zero.
  Tensor i = Tensor::from({2, 4, 6});
  CHECK_THROWS_AS(i *= 0.5, mls::Error);
  Tensor j = Tensor::from({2, 4, 6});
  CHECK_THROWS_AS(j += 2.5, mls::Error);
  MLS_OBSERVE_VALUES(j);
  CHECK(j.to_vector<std::int32_t>() == std::vector<std::int32_t>{2, 4, 6});
}

TEST_CASE("scalar ops: an integral scalar outside an int32 tensor's range is not wrapped",
          "[lab1][elementwise]") {
  // binary(op, int32_tensor, 1e10) converts 1e10 to int32 (undefined behaviour; on x86 it
  // becomes -2147483648), so 5 < 1e10 comes out false and 5 + 3e9 wraps. Either compute in a
  // dtype that holds the scalar or throw mls::Error; never a silently wrong answer.
  const Tensor i = Tensor::from({5});
  try {
    const Tensor r = mls::lt(i, 1e10);
    CHECK(r.item() == 1.0);
  } catch (const mls::Error&) {
    SUCCEED("refused with mls::Error");
  }
  try {
    const Tensor r = mls::add(i, 3e9);
    CHECK(r.item() == 3000000005.0);
  } catch (const mls::Error&) {
    SUCCEED("refused with mls::Error");
  }
}

TEST_CASE("where selects with broadcasting and promotes a and b", "[lab1][elementwise]") {
  mls::Rng rng(507, "where");
  for (int trial = 0; trial < 120; ++trial) {
    const Dims out = ref::random_shape(rng);
    const Dims sc = ref::broadcastable_to(out, rng), sa = ref::broadcastable_to(out, rng), sb = ref::broadcastable_to(out, rng);
    const DType ta = ref::kAllDTypes[rng.randint(0, 5)], tb = ref::kAllDTypes[rng.randint(0, 5)];
    const Ref rc = ref::random_ref(sc, DType::Bool, rng), ra = ref::random_ref(sa, ta, rng), rb = ref::random_ref(sb, tb, rng);
    const Tensor c = gen::any_layout(rc, DType::Bool, rng), a = gen::any_layout(ra, ta, rng), b = gen::any_layout(rb, tb, rng);
    INFO("cond " << ref::dims_str(sc) << " a " << ta << ref::dims_str(sa) << " b " << tb << ref::dims_str(sb));
    const Tensor got = mls::where(c, a, b);
    const DType t = ta > tb ? ta : tb;
    CHECK(got.dtype() == t);
    CHECK_SAME(got, ref::zip3(rc, ra, rb, [t](double k, double x, double y) { return ref::round_to(t, k != 0 ? x : y); }));
  }
  const Tensor x = Tensor::from({-1.f, 2.f, -3.f});
  CHECK(mls::where(mls::gt(x, 0.0), x, Tensor::scalar(0)).to_vector<float>() == std::vector<float>{0, 2, 0});
}

TEST_CASE("elementwise on 300k elements: 1 and 2 threads agree with the reference", "[lab1][elementwise]") {
  mls::Rng rng(508, "threads");
  const Ref ra = ref::random_ref({600, 500}, DType::Float32, rng);
  const Ref rb = ref::random_ref({500}, DType::Float32, rng);
  const Ref rc = ref::random_ref({600, 1}, DType::Float32, rng);
  const Tensor a = ref::make_strided(ra, DType::Float32, rng, false), b = ref::make(rb, DType::Float32);
  const Tensor c = ref::make(rc, DType::Float32);
  const Tensor at = ref::make(ref::permute(ra, {1, 0}), DType::Float32).transpose();  // same values, column-major
  MLS_ORACLE(const Ref sum_ab = ref::zip(ra, rb, [](double x, double y) { return ref::round_to(DType::Float32, x + y); });)
  MLS_ORACLE(const Ref prod_ac = ref::zip(ra, rc, [](double x, double y) { return ref::round_to(DType::Float32, x * y); });)
  MLS_ORACLE(const Ref e = ref::map(ra, [](double x) { return std::exp(x); });)
  const double eps = ref::eps_of(DType::Float32);
  std::vector<Tensor> results;
  for (int threads : {1, 2}) {
    INFO("threads " << threads);
    mls::ThreadCountGuard guard(threads);
    const Tensor s = a + b;
    CHECK_SAME(s, sum_ab);
    CHECK_SAME(at + b, sum_ab);
    CHECK_SAME(c * a, prod_ac);
    const Tensor ex = mls::exp(at);
    CHECK_CLOSE(ex, e, [&](I64 i) { return 4 * eps * e.v[static_cast<std::size_t>(i)]; });
    Tensor d = a.clone();
    d += b;
    CHECK_SAME(d, sum_ab);
    results.push_back(ex);
  }
  CHECK(mls::equal(results[0], results[1]));  // elementwise work is deterministic
}

TEST_CASE("add, sub, mul, div on 1M+ dense floats (the SIMD kernels, streamed stores), scalar on either side",
          "[lab1][elementwise]") {
  mls::Rng rng(509, "dense-simd");
  const I64 n = (I64{1} << 20) + 37;  // past the streaming threshold, with a tail
  const Ref ra = ref::random_ref({n}, DType::Float32, rng);
  const Ref rb = ref::random_ref({n}, DType::Float32, rng, 0.5, 2.0);  // no division by zero
  const Tensor a = ref::make(ra, DType::Float32), b = ref::make(rb, DType::Float32);
  const double s = 1.5;
  auto f32 = [](double v) { return ref::round_to(DType::Float32, v); };
  CHECK_SAME(a + b, ref::zip(ra, rb, [&](double x, double y) { return f32(x + y); }));
  CHECK_SAME(a - b, ref::zip(ra, rb, [&](double x, double y) { return f32(x - y); }));
  CHECK_SAME(a * b, ref::zip(ra, rb, [&](double x, double y) { return f32(x * y); }));
  CHECK_SAME(a / b, ref::zip(ra, rb, [&](double x, double y) { return f32(x / y); }));
  CHECK_SAME(a * s, ref::map(ra, [&](double x) { return f32(x * s); }));
  CHECK_SAME(a - s, ref::map(ra, [&](double x) { return f32(x - s); }));
  CHECK_SAME(s / b, ref::map(rb, [&](double y) { return f32(s / y); }));
  CHECK_SAME(s - a, ref::map(ra, [&](double x) { return f32(s - x); }));
  // A destination that starts 4 bytes past a cache line (an offset view), in place.
  Tensor big = Tensor::zeros({n + 1});
  Tensor view = big.slice(0, 1, n + 1);
  view.copy_(a);
  view /= b;
  CHECK_SAME(view, ref::zip(ra, rb, [&](double x, double y) { return f32(x / y); }));
  CHECK(big.at({0}) == 0.0);  // nothing written before the view
  // 2 threads: each thread streams its half.
  mls::ThreadCountGuard guard(2);
  CHECK_SAME(a + b, ref::zip(ra, rb, [&](double x, double y) { return f32(x + y); }));
}
