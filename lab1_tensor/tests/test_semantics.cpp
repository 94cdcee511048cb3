// Regression tests for disagreements with NumPy found by differential testing (the lab 1 oracle,
// tests/oracle/): in-place writes whose operand overlaps the destination, bool arithmetic in
// place, the dtype of max/min of bools, and max/min over infinities. Each expected value is what
// NumPy 1.24 gives for the same program.
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "generators.hpp"
#include "mls/testing.hpp"

using mls::DType;
using mls::Tensor;
using mls::testing::require_error;

namespace {

Tensor f64(std::initializer_list<double> v, mls::Shape s) { return Tensor::from(v, std::move(s)); }

/// The values of `t` (any dtype) as doubles, row-major.
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace

TEST_CASE("in place: an operand that is a row of the destination is read before it is written",
          "[lab1][elementwise]") {
  // a = [[1,2],[3,4],[5,6]]; a += a[0:1] adds the ORIGINAL row 0 to every row (NumPy buffers it).
  Tensor a = Tensor::from({1, 2, 3, 4, 5, 6}, {3, 2});
  a += a.slice(0, 0, 1);
  MLS_OBSERVE_VALUES(a);
  CHECK(values(a) == std::vector<double>{2, 4, 4, 6, 6, 8});
  CHECK(a.dtype() == DType::Int32);
}

TEST_CASE("in place: the diagonal of a permuted view added into its own tensor", "[lab1][elementwise]") {
  Tensor x = Tensor::arange(9, DType::Float64).view({3, 3});
  x += x.permute({1, 0}).diagonal();  // diag = [0, 4, 8] of the original, broadcast over rows
  MLS_OBSERVE_VALUES(x);
  CHECK(values(x) == std::vector<double>{0, 5, 10, 3, 8, 13, 6, 11, 16});
}

TEST_CASE("in place: a scaled tensor updated through a shifted slice of an earlier view", "[lab1][elementwise]") {
  Tensor t = Tensor::arange(6, DType::Float32).view({2, 3});
  const Tensor v = t.slice(1, 1, 3);  // an earlier view: columns 1..2
  t /= 2.0;
  Tensor w = t.slice(1, 0, 2);  // columns 0..1: overlaps v shifted by one column
  w -= v;
  // t = [[0, .5, 1], [1.5, 2, 2.5]] after /=; then t[:, 0:2] -= t[:, 1:3] (original values).
  MLS_OBSERVE_VALUES(t);
  CHECK(values(t) == std::vector<double>{-0.5, -0.5, 1.0, -0.5, -0.5, 2.5});
}

TEST_CASE("in place: float64 chunks of a reshaped tensor overlapping a shifted slice", "[lab1][elementwise]") {
  Tensor x = Tensor::arange(12, DType::Float64);
  const Tensor m = x.view({3, 4});
  std::vector<Tensor> c = mls::chunk(m, 2, 1);  // columns 0..1 and 2..3
  c[1] *= m.slice(1, 1, 3) * 1000.0;            // a new tensor: no overlap
  c[1] += m.slice(1, 1, 3);                     // overlaps: x[r,3] += original x[r,2]
  // row r: x[r,2] = 1000 x1 x2 + x1 and x[r,3] = 1000 x2 x3 + (1000 x1 x2), the value column 2
  // held before this statement; without the copy it would also add x1.
  MLS_OBSERVE_VALUES(m);
  for (std::int64_t r = 0; r < 3; ++r) {
    const double x1 = 4.0 * r + 1, x2 = 4.0 * r + 2, x3 = 4.0 * r + 3;
    const double y2 = 1000.0 * x1 * x2, y3 = 1000.0 * x2 * x3;
    CHECK(m.at({r, 2}) == y2 + x1);
    CHECK(m.at({r, 3}) == y3 + y2);
  }
}

TEST_CASE("in place: an operand equal to the destination needs no copy and gives 2a", "[lab1][elementwise]") {
  Tensor a = Tensor::arange(6, DType::Int64).view({2, 3});
  Tensor t = a.transpose();
  t += a.transpose();  // the same elements in the same order
  MLS_OBSERVE_VALUES(a);
  CHECK(values(a) == std::vector<double>{0, 2, 4, 6, 8, 10});
  t *= t;
  MLS_OBSERVE_VALUES(a);
  CHECK(values(a) == std::vector<double>{0, 4, 16, 36, 64, 100});
}

TEST_CASE("in place: copy_ from an overlapping reversed or shifted view", "[lab1][elementwise]") {
  Tensor x = Tensor::arange(5, DType::Float32);
  x.slice(0, 1, 5).copy_(x.slice(0, 0, 4));  // shift right by one: [0, 0, 1, 2, 3]
  MLS_OBSERVE_VALUES(x);
  CHECK(values(x) == std::vector<double>{0, 0, 1, 2, 3});
  Tensor y = Tensor::arange(6, DType::Int32).view({2, 3});
  y.copy_(y.transpose().reshape({2, 3}));  // a copy (reshape of a transpose): no overlap
  MLS_OBSERVE_VALUES(y);
  CHECK(values(y) == std::vector<double>{0, 3, 1, 4, 2, 5});
  Tensor z = Tensor::arange(4, DType::Float64).view({2, 2});
  z.copy_(z.transpose());  // overlapping, transposed: must read the original
  MLS_OBSERVE_VALUES(z);
  CHECK(values(z) == std::vector<double>{0, 2, 1, 3});
  z.copy_(z);  // itself: a no-op
  MLS_OBSERVE_VALUES(z);
  CHECK(values(z) == std::vector<double>{0, 2, 1, 3});
}

TEST_CASE("may_overlap and same_elements follow the byte ranges of views", "[lab1][views]") {
  const Tensor x = Tensor::arange(12, DType::Float32).view({3, 4});
  // The nine answers below, as one pattern of 0/1 (neither all true nor all false).
  mls::testing::observe("may_overlap / same_elements answers", std::vector<int>{
      x.may_overlap(x), x.same_elements(x), x.slice(0, 0, 1).may_overlap(x.slice(0, 1, 3)),
      x.slice(1, 0, 2).may_overlap(x.slice(1, 2, 4)), x.transpose().may_overlap(x), x.transpose().same_elements(x),
      x.may_overlap(x.clone()), x.slice(0, 0, 0).may_overlap(x), x.slice(0, 1, 2).expand({5, 4}).may_overlap(x.select(0, 1))});
  CHECK(x.may_overlap(x));
  CHECK(x.same_elements(x));
  CHECK_FALSE(x.slice(0, 0, 1).may_overlap(x.slice(0, 1, 3)));  // disjoint rows
  CHECK(x.slice(1, 0, 2).may_overlap(x.slice(1, 2, 4)));         // interleaved ranges: conservative
  CHECK(x.transpose().may_overlap(x));
  CHECK_FALSE(x.transpose().same_elements(x));
  CHECK_FALSE(x.may_overlap(x.clone()));
  CHECK_FALSE(x.slice(0, 0, 0).may_overlap(x));  // empty
  CHECK(x.slice(0, 1, 2).expand({5, 4}).may_overlap(x.select(0, 1)));
}

TEST_CASE("in place: arithmetic into a bool tensor is refused, as out of place", "[lab1][errors]") {
  Tensor b = Tensor::zeros({3}, DType::Bool);
  b.set({1}, 1.0);
  require_error([&] { b += Tensor::from({1, 1, 1}); }, "add_: arithmetic is not defined for bool tensors");
  require_error([&] { b *= Tensor::ones({3}, DType::Bool); }, "mul: arithmetic is not defined for bool");
  require_error([&] { b -= Tensor::from({1.5, 0.5, 2.0}); }, "sub_: arithmetic is not defined for bool tensors");
  require_error([&] { b -= 1.0; }, "sub_");
  MLS_OBSERVE_VALUES(b);
  CHECK(values(b) == std::vector<double>{0, 1, 0});  // untouched
}

TEST_CASE("max and min of bool tensors stay bool", "[lab1][reduce]") {
  Tensor b = Tensor::zeros({2, 3}, DType::Bool);
  b.set({0, 1}, 1.0);
  const Tensor mx = mls::max(b);
  MLS_OBSERVE_VALUES(mx);
  MLS_OBSERVE_VALUES(mls::min(b));
  MLS_OBSERVE_VALUES(mls::max(b, {1}, true));
  MLS_OBSERVE_VALUES(mls::min(b.transpose(), {0}));
  MLS_OBSERVE_VALUES(mls::sum(b));
  CHECK(mx.dtype() == DType::Bool);
  CHECK(mx.item() == 1.0);
  CHECK(mls::min(b).dtype() == DType::Bool);
  CHECK(mls::min(b).item() == 0.0);
  const Tensor r = mls::max(b, {1}, true);
  CHECK(r.dtype() == DType::Bool);
  CHECK(r.shape() == mls::Shape{2, 1});
  CHECK(values(r) == std::vector<double>{1, 0});
  CHECK(values(mls::min(b.transpose(), {0})) == std::vector<double>{0, 0});
  // sum and prod of bools still count in int64.
  CHECK(mls::sum(b).dtype() == DType::Int64);
}

TEST_CASE("max over all -inf is -inf and min over all +inf is +inf, every float path", "[lab1][reduce]") {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType t : {DType::Float32, DType::Float64}) {
    INFO("dtype " << t);
    const Tensor ninf = Tensor::full({3, 2}, -inf, t), pinf = Tensor::full({3, 2}, inf, t);
    MLS_OBSERVE_VALUES(mls::max(ninf));
    MLS_OBSERVE_VALUES(mls::min(pinf));
    MLS_OBSERVE_VALUES(mls::max(ninf, {0}));
    MLS_OBSERVE_VALUES(mls::min(pinf, {1}));
    MLS_OBSERVE_VALUES(mls::max(ninf.transpose(), {1}));
    CHECK(mls::max(ninf).item() == -inf);
    CHECK(mls::min(pinf).item() == inf);
    for (std::int64_t ax : {0, 1}) {
      for (double v : values(mls::max(ninf, {ax}))) CHECK(v == -inf);
      for (double v : values(mls::min(pinf, {ax}))) CHECK(v == inf);
      for (double v : values(mls::max(ninf.transpose(), {ax}))) CHECK(v == -inf);
    }
    // A single -inf among finite values is not the max; NaN still wins.
    const Tensor mixed = f64({-inf, -3.0, std::nan("")}, {3}).to(t);
    MLS_OBSERVE_VALUES(mls::max(mixed));
    MLS_OBSERVE_VALUES(mls::max(mixed.slice(0, 0, 2)));
    CHECK(std::isnan(mls::max(mixed).item()));
    CHECK(mls::max(mixed.slice(0, 0, 2)).item() == -3.0);
  }
}

TEST_CASE("softmax family over an empty axis: empty results and a logsumexp of -inf", "[lab1][reduce]") {
  // Found by the oracle (campaign seed 2): these threw "max: cannot reduce over an empty set".
  const double inf = std::numeric_limits<double>::infinity();
  for (DType t : {DType::Float32, DType::Float64}) {
    const Tensor x = Tensor::zeros({2, 0}, t);
    MLS_OBSERVE_VALUES(mls::softmax(x, 1));
    MLS_OBSERVE_VALUES(mls::log_softmax(x, 1));
    MLS_OBSERVE_VALUES(mls::softmax(x, 0));
    MLS_OBSERVE_VALUES(mls::logsumexp(x, 1));
    MLS_OBSERVE_VALUES(mls::logsumexp(x, 1, true));
    MLS_OBSERVE_VALUES(mls::logsumexp(x, 0));
    CHECK(mls::softmax(x, 1).shape() == mls::Shape{2, 0});
    CHECK(mls::log_softmax(x, 1).shape() == mls::Shape{2, 0});
    CHECK(mls::softmax(x, 0).shape() == mls::Shape{2, 0});
    const Tensor l = mls::logsumexp(x, 1);
    CHECK(l.shape() == mls::Shape{2});
    CHECK(l.dtype() == t);
    CHECK(values(l) == std::vector<double>{-inf, -inf});
    CHECK(mls::logsumexp(x, 1, true).shape() == mls::Shape{2, 1});
    CHECK(mls::logsumexp(x, 0).shape() == mls::Shape{0});
  }
}

TEST_CASE("gelu in float32 keeps its relative accuracy for large negative inputs", "[lab1][elementwise]") {
  // Found by the oracle (campaign seed 9): 0.5 x (1 + tanh u) cancels for x << 0 and lost three
  // digits of a float32 result at x = -4; x sigmoid(2u) is the same function without the loss.
  for (double x : {-3.0, -4.0, -5.0, -6.0, 0.5, 2.0}) {
    const long double xl = x, u = 0.7978845608028654L * (xl + 0.044715L * xl * xl * xl);
    const double got = mls::gelu(Tensor::scalar(x, DType::Float32)).item();
    INFO("x = " << x);
    // A few ulps, plus exp's condition number 2|u| for the rounding of its argument.
    const double rtol = (4.0 + 2.0 * std::abs(static_cast<double>(u))) * 1.2e-7;
    std::ostringstream label;
    label << "gelu(x = " << x << ", float32)";
    mls::testing::observe(label.str(), got, {2 * rtol, 0.0});
    MLS_ORACLE(const auto want = static_cast<double>(0.5L * xl * (1.0L + std::tanh(u)));)  // 64-bit mantissa: ample here
    MLS_ORACLE_CHECK(CHECK(std::abs(got - want) <= rtol * std::abs(want)));
  }
}

TEST_CASE("abs of -0.0 is +0.0", "[lab1][elementwise]") {
  // Found by the oracle (campaign seed 12): x * 0 with x < 0 gives -0.0, abs kept the sign, and
  // rsqrt(abs(.)) then gave -inf where NumPy gives +inf.
  for (DType t : {DType::Float32, DType::Float64}) {
    const Tensor z = mls::abs(Tensor::from({-0.0, 0.0, -2.0}).to(t));
    MLS_OBSERVE_VALUES(z);
    MLS_OBSERVE_VALUES(mls::rsqrt(z));
    CHECK_FALSE(std::signbit(z.at({0})));
    CHECK(mls::rsqrt(z).at({0}) == std::numeric_limits<double>::infinity());
    CHECK(z.at({2}) == 2.0);
  }
}
