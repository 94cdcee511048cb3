// Reductions over any set of axes, argmax/argmin and the softmax family, against naive loops.
// Float tolerances follow the error bound of a sum of n terms: n * eps * sum|x|.
#include <cmath>

#include "generators.hpp"
#include "mls/common/parallel.hpp"

using mls::DType;
using mls::Tensor;
using ref::Dims;
using ref::I64;
using ref::Ref;

namespace {

/// A random set of axes of an ndim-`nd` tensor, each given as d or d - nd; {} means all.
Dims random_axes(I64 nd, mls::Rng& rng) {
  Dims axes;
  for (I64 d = 0; d < nd; ++d) {
    if (rng.randint(0, 2)) axes.push_back(rng.randint(0, 2) ? d : d - nd);
  }
  for (std::size_t i = axes.size(); i > 1; --i) std::swap(axes[i - 1], axes[static_cast<std::size_t>(rng.randint(0, static_cast<I64>(i)))]);
  return axes;
}

#ifndef MLS_GRADED_BUILD  // oracles: compiled out of the grading build (mls/testing.hpp)
/// Per output slot: sum of squared deviations from the exact mean.
Ref sq_dev(const Ref& a, const Dims& axes_in, bool keepdim) {
  const Dims axes = ref::norm_axes(axes_in, a.ndim());
  const I64 n = ref::reduce_count(a.shape, axes_in);
  Ref mean = ref::sum(a, axes_in, keepdim);
  for (double& m : mean.v) m /= static_cast<double>(n);
  Ref out(mean.shape);
  for (I64 i = 0; i < a.numel(); ++i) {
    const Dims o = ref::out_index(ref::unravel(i, a.shape), axes, keepdim);
    const double d = a.v[static_cast<std::size_t>(i)] - mean(o);
    out(o) += d * d;
  }
  return out;
}
#endif  // MLS_GRADED_BUILD

double max_abs(const Ref& r) {
  double m = 0;
  for (double x : r.v) m = std::max(m, std::fabs(x));
  return m;
}

std::string axes_str(const Dims& axes) { return ref::dims_str(axes); }

#ifndef MLS_GRADED_BUILD  // oracles: compiled out of the grading build (mls/testing.hpp)
/// Softmax-family reference along one axis: returns (lse with keepdim, softmax, log_softmax).
struct SoftmaxRef {
  Ref lse, sm, lsm;
};
SoftmaxRef softmax_ref(const Ref& a, I64 axis) {
  const Dims axes{axis};
  const Ref m = ref::reduce(a, axes, true, -INFINITY, [](double s, double x) { return std::max(s, x); });
  Ref s(m.shape);
  for (I64 i = 0; i < a.numel(); ++i) {
    const Dims o = ref::out_index(ref::unravel(i, a.shape), axes, true);
    s(o) += std::exp(a.v[static_cast<std::size_t>(i)] - m(o));
  }
  SoftmaxRef r{Ref(m.shape), Ref(a.shape), Ref(a.shape)};
  for (std::size_t i = 0; i < m.v.size(); ++i) r.lse.v[i] = m.v[i] + std::log(s.v[i]);
  for (I64 i = 0; i < a.numel(); ++i) {
    const Dims o = ref::out_index(ref::unravel(i, a.shape), axes, true);
    const double x = a.v[static_cast<std::size_t>(i)];
    r.sm.v[static_cast<std::size_t>(i)] = std::exp(x - m(o)) / s(o);
    r.lsm.v[static_cast<std::size_t>(i)] = x - r.lse(o);
  }
  return r;
}
#endif  // MLS_GRADED_BUILD

}  // namespace

TEST_CASE("sum over random axes with keepdim, every dtype and layout", "[lab1][reduce]") {
  mls::Rng rng(601, "sum");
  for (int trial = 0; trial < 250; ++trial) {
    const DType t = ref::kAllDTypes[trial % 5];
    gen::Pair p = gen::random_input(rng, t, 3, 0, 4, -5, 5);
    const Dims axes = random_axes(p.r.ndim(), rng);
    const bool keep = rng.randint(0, 2);
    INFO(p.log << " " << t << " axes " << axes_str(axes) << " keepdim " << keep);
    const Tensor got = mls::sum(p.t, axes, keep);
    CHECK(got.dtype() == (mls::is_floating(t) ? t : DType::Int64));
    MLS_ORACLE(const Ref want = ref::sum(p.r, axes, keep);)
    MLS_ORACLE(const Ref scale = ref::abs_sum(p.r, axes, keep);)
    const double n = static_cast<double>(ref::reduce_count(p.r.shape, axes)), eps = ref::eps_of(t);
    CHECK_CLOSE(got, want, [&](I64 i) { return n * eps * scale.v[static_cast<std::size_t>(i)]; });
  }
  // Whole-tensor sums and the documented dtypes.
  CHECK(mls::sum(Tensor::from({true, true, false, true})).item() == 3.0);
  CHECK(mls::sum(Tensor::from({true, true})).dtype() == DType::Int64);
  CHECK(mls::sum(Tensor::from({1, 2, 3})).dtype() == DType::Int64);
  CHECK(mls::sum(Tensor::from({1, 2, 3})).ndim() == 0);
  CHECK(mls::sum(Tensor::scalar(4)).item() == 4.0);
  CHECK(mls::sum(Tensor::zeros({2, 0, 3}), {1}).to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(mls::sum(Tensor::zeros({0})).item() == 0.0);
  CHECK(mls::sum(Tensor::ones({2, 3}), {0, 1}, true).shape() == Dims{1, 1});
  // int32 sums accumulate in int64: no wrap-around past 2^31.
  const std::int32_t big = std::numeric_limits<std::int32_t>::max();
  CHECK(mls::sum(Tensor::from({big, big, big})).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{3 * static_cast<std::int64_t>(big)});
}

TEST_CASE("mean over random axes: float32 for integers", "[lab1][reduce]") {
  mls::Rng rng(602, "mean");
  for (int trial = 0; trial < 200; ++trial) {
    const DType t = ref::kNumericDTypes[trial % 4];
    gen::Pair p = gen::random_input(rng, t, 3, 0, 4, -5, 5);
    const Dims axes = random_axes(p.r.ndim(), rng);
    const I64 n = ref::reduce_count(p.r.shape, axes);
    const bool keep = rng.randint(0, 2);
    INFO(p.log << " " << t << " axes " << axes_str(axes) << " keepdim " << keep);
    if (n == 0) {  // the mean of nothing is an error (tested with the other bad inputs)
      CHECK_THROWS_AS(mls::mean(p.t, axes, keep), mls::Error);
      continue;
    }
    const Tensor got = mls::mean(p.t, axes, keep);
    const DType out = mls::is_floating(t) ? t : DType::Float32;
    CHECK(got.dtype() == out);
    MLS_ORACLE(Ref want = ref::sum(p.r, axes, keep);)
    MLS_ORACLE(for (double& x : want.v) x /= static_cast<double>(n);)
    MLS_ORACLE(const Ref scale = ref::abs_sum(p.r, axes, keep);)
    const double eps = ref::eps_of(out);
    CHECK_CLOSE(got, want, [&](I64 i) {
      return eps * (scale.v[static_cast<std::size_t>(i)] + 2 * std::fabs(want.v[static_cast<std::size_t>(i)]));
    });
  }
  CHECK(mls::mean(Tensor::from({1, 2})).item() == 1.5);
  CHECK(mls::mean(Tensor::from({1, 2})).dtype() == DType::Float32);
  CHECK(mls::mean(Tensor::from({true, false, false, false})).item() == 0.25);
}

TEST_CASE("prod over random axes", "[lab1][reduce]") {
  mls::Rng rng(603, "prod");
  for (int trial = 0; trial < 150; ++trial) {
    const DType t = ref::kAllDTypes[trial % 5];
    // Magnitudes near 1 keep float products far from overflow; integer shapes stay small.
    gen::Pair p = mls::is_floating(t) ? gen::random_input(rng, t, 3, 0, 4, 0.5, 1.5)
                                      : gen::random_input(rng, t, 2, 0, 3, -1, 1);  // {-1, 0, 1}: no overflow
    if (mls::is_floating(t)) {  // random signs
      for (double& x : p.r.v) x = rng.randint(0, 2) ? x : -x;
      p.t = gen::any_layout(p.r, t, rng);
    }
    const Dims axes = random_axes(p.r.ndim(), rng);
    const bool keep = rng.randint(0, 2);
    INFO(p.log << " " << t << " axes " << axes_str(axes) << " keepdim " << keep);
    const Tensor got = mls::prod(p.t, axes, keep);
    CHECK(got.dtype() == (mls::is_floating(t) ? t : DType::Int64));
    MLS_ORACLE(const Ref want = ref::reduce(p.r, axes, keep, 1.0, [](double s, double x) { return s * x; });)
    const double n = static_cast<double>(ref::reduce_count(p.r.shape, axes)), eps = ref::eps_of(t);
    CHECK_CLOSE(got, want, [&](I64 i) { return 2 * n * eps * std::fabs(want.v[static_cast<std::size_t>(i)]); });
  }
  CHECK(mls::prod(Tensor::zeros({0})).item() == 1.0);
  CHECK(mls::prod(Tensor::from({2, 3, 4}, {3})).item() == 24.0);
  CHECK(mls::prod(Tensor::from({std::int64_t{1} << 31, std::int64_t{4}})).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{std::int64_t{1} << 33});
}

TEST_CASE("max and min over random axes keep the dtype and are exact", "[lab1][reduce]") {
  mls::Rng rng(604, "maxmin");
  for (int trial = 0; trial < 200; ++trial) {
    const DType t = ref::kNumericDTypes[trial % 4];
    gen::Pair p = gen::random_input(rng, t, 3, 0, 4, -5, 5);
    const Dims axes = random_axes(p.r.ndim(), rng);
    const bool keep = rng.randint(0, 2);
    INFO(p.log << " " << t << " axes " << axes_str(axes) << " keepdim " << keep);
    if (ref::reduce_count(p.r.shape, axes) == 0) {  // max/min of nothing is an error
      CHECK_THROWS_AS(mls::max(p.t, axes, keep), mls::Error);
      continue;
    }
    const Tensor mx = mls::max(p.t, axes, keep), mn = mls::min(p.t, axes, keep);
    CHECK(mx.dtype() == t);
    CHECK(mn.dtype() == t);
    CHECK_SAME(mx, ref::reduce(p.r, axes, keep, -INFINITY, [](double s, double x) { return std::max(s, x); }));
    CHECK_SAME(mn, ref::reduce(p.r, axes, keep, INFINITY, [](double s, double x) { return std::min(s, x); }));
  }
  // Extremes of the dtype are found (the identity must not leak into the result).
  const std::int64_t lo = std::numeric_limits<std::int64_t>::min(), hi = std::numeric_limits<std::int64_t>::max();
  CHECK(mls::max(Tensor::from({lo, lo})).to_vector<std::int64_t>() == std::vector<std::int64_t>{lo});
  CHECK(mls::min(Tensor::from({hi, hi})).to_vector<std::int64_t>() == std::vector<std::int64_t>{hi});
  CHECK(mls::max(Tensor::from({-INFINITY, -INFINITY})).item() == -INFINITY);
  CHECK(mls::max(Tensor::from({true, false})).item() == 1.0);
  CHECK(mls::min(Tensor::from({true, false})).item() == 0.0);
}

TEST_CASE("reductions of zero-size tensors: identities, empty results, shapes", "[lab1][reduce]") {
  // Fixed cases; the property tests above also draw zero-size inputs, e.g.
  // mean(zeros({3, 0, 2, 4}, int32), {0, 2}), which once copied out of bounds.
  const Tensor z = Tensor::zeros({2, 0, 3});
  MLS_OBSERVE_VALUES(mls::sum(z));
  MLS_OBSERVE_VALUES(mls::prod(z));
  MLS_OBSERVE_VALUES(mls::sum(z, {1}, true));
  MLS_OBSERVE_VALUES(mls::prod(z, {1}));
  MLS_OBSERVE_VALUES(mls::max(z, {2}));
  MLS_OBSERVE_VALUES(mls::argmax(z, 2));
  MLS_OBSERVE_VALUES(mls::mean(z, {0}, true));
  MLS_OBSERVE_VALUES(mls::sum(Tensor::zeros({0}, DType::Int32)));
  MLS_OBSERVE_VALUES(mls::softmax(z, 2));
  CHECK(mls::sum(z).item() == 0.0);
  CHECK(mls::prod(z).item() == 1.0);
  CHECK(mls::sum(z, {1}).to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(mls::sum(z, {1}, true).shape() == Dims{2, 1, 3});
  CHECK(mls::prod(z, {1}).to_vector<float>() == std::vector<float>(6, 1.0f));
  CHECK(mls::sum(z, {0}).shape() == Dims{0, 3});
  CHECK(mls::max(z, {2}).shape() == Dims{2, 0});      // non-empty reduction, empty result
  CHECK(mls::argmax(z, 2).shape() == Dims{2, 0});
  CHECK(mls::mean(z, {0}, true).shape() == Dims{1, 0, 3});
  CHECK(mls::sum(Tensor::zeros({0}, DType::Int32)).dtype() == DType::Int64);
  CHECK(mls::softmax(z, 2).shape() == Dims{2, 0, 3});
}

TEST_CASE("max and min propagate NaN, argmax/argmin pick the first NaN", "[lab1][reduce]") {
  for (DType t : ref::kFloatDTypes) {
    INFO(t);
    const Tensor x = ref::make(Ref({2, 4}, {1, NAN, 3, 2, 5, 4, 3, NAN}), t);
    MLS_OBSERVE_VALUES(mls::max(x, {1}));
    MLS_OBSERVE_VALUES(mls::max(x, {0}));
    MLS_OBSERVE_VALUES(mls::min(x));
    MLS_OBSERVE_VALUES(mls::argmax(x, 1));
    MLS_OBSERVE_VALUES(mls::argmin(x, 1));
    MLS_OBSERVE_VALUES(mls::argmax(x, 0));
    const auto mx = mls::max(x, {1}).to_vector<double>();
    CHECK(std::isnan(mx[0]));
    CHECK(std::isnan(mx[1]));
    CHECK(std::isnan(mls::min(x).item()));
    CHECK(mls::max(x, {0}).to_vector<double>()[2] == 3.0);
    CHECK(std::isnan(mls::max(x, {0}).to_vector<double>()[1]));
    CHECK(mls::argmax(x, 1).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 3});
    CHECK(mls::argmin(x, 1).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 3});
    CHECK(mls::argmax(x, 0).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0, 0, 1});
  }
}

TEST_CASE("var with correction 0 and 1: two-pass accuracy", "[lab1][reduce]") {
  mls::Rng rng(605, "var");
  for (int trial = 0; trial < 200; ++trial) {
    const DType t = ref::kNumericDTypes[trial % 4];
    // Every fourth float case sits on a large offset, where a one-pass formula cancels badly.
    const double offset = mls::is_floating(t) && trial % 8 < 2 ? 1000.0 : 0.0;
    gen::Pair p = gen::random_input(rng, t, 3, 0, 4, offset - 1, offset + 1);
    const Dims axes = random_axes(p.r.ndim(), rng);
    const I64 n = ref::reduce_count(p.r.shape, axes);
    const I64 c = rng.randint(0, 2);
    if (n - c <= 0) continue;  // an error: see [errors]
    const bool keep = rng.randint(0, 2);
    INFO(p.log << " " << t << " axes " << axes_str(axes) << " keepdim " << keep << " correction " << c);
    const Tensor got = mls::var(p.t, axes, keep, c);
    const DType out = mls::is_floating(t) ? t : DType::Float32;
    CHECK(got.dtype() == out);
    MLS_ORACLE(const Ref S = sq_dev(p.r, axes, keep);)
    const double eps = ref::eps_of(out), dn = static_cast<double>(n), dof = static_cast<double>(n - c);
    // Rounding of the deviations, squares and sum, plus the (second-order) effect of the
    // rounding error delta of the mean.
    const double delta = (dn + 2) * eps * max_abs(p.r);
    CHECK_CLOSE(got, ref::map(S, [dof](double s) { return s / dof; }), [&](I64 i) {
      return ((dn + 4) * eps * S.v[static_cast<std::size_t>(i)] + dn * delta * delta) / dof + 1e-300;
    });
  }
  CHECK(mls::var(Tensor::from({1.0, 2.0, 3.0, 4.0})).item() == 1.25);
  CHECK(mls::var(Tensor::from({1.0, 2.0, 3.0, 4.0}), {}, false, 1).item() == Approx(5.0 / 3.0).epsilon(1e-15));
  CHECK(mls::var(Tensor::from({2, 4, 4, 4, 5, 5, 7, 9})).item() == 4.0);
  CHECK(mls::var(Tensor::from({2, 4, 4, 4, 5, 5, 7, 9})).dtype() == DType::Float32);
}

TEST_CASE("mean and var of integers and bools: computed in float64, rounded once to float32", "[lab1][reduce]") {
  // 16777217 and 16777219 round to 16777216 and 16777220 in float32: a float32 pass gives var 4.
  const Tensor big = Tensor::from({16777217, 16777219});
  CHECK(mls::var(big).item() == 1.0);
  CHECK(mls::var(big).dtype() == DType::Float32);
  CHECK(mls::mean(Tensor::from<std::int64_t>({(1LL << 40) + 1, (1LL << 40) + 3})).item() ==
        static_cast<double>(static_cast<float>((1LL << 40) + 2)));
  // The random-program oracle's case: var of 3 trues in 9 with correction 1 is exactly 0.25.
  const Tensor b = Tensor::from({false, true, false, false, false, false, true, true, false}, {3, 3});
  const std::int64_t both[] = {-2, -1};
  const Tensor v = mls::var(b, both, true, 1);
  CHECK(v.dtype() == DType::Float32);
  CHECK(v.shape() == mls::Shape{1, 1});
  CHECK(v.item() == 0.25);
  CHECK(mls::mean(b).item() == static_cast<double>(3.0f / 9.0f));
}

TEST_CASE("argmax and argmin: first index of the extreme along any axis", "[lab1][reduce]") {
  mls::Rng rng(606, "argmax");
  for (int trial = 0; trial < 200; ++trial) {
    const DType t = ref::kAllDTypes[trial % 5];
    gen::Pair p = gen::random_input(rng, t, 3, 1, 4, -2, 2);  // few distinct values: many ties
    if (p.r.ndim() == 0 || p.r.numel() == 0) continue;
    const I64 nd = p.r.ndim(), axis = rng.randint(-nd, nd);
    if (p.r.shape[static_cast<std::size_t>(axis < 0 ? axis + nd : axis)] == 0) continue;  // an error
    const bool keep = rng.randint(0, 2);
    INFO(p.log << " " << t << " axis " << axis << " keepdim " << keep);
    const Tensor amax = mls::argmax(p.t, axis, keep), amin = mls::argmin(p.t, axis, keep);
    CHECK(amax.dtype() == DType::Int64);
    CHECK(amin.dtype() == DType::Int64);
    CHECK_SAME(amax, ref::arg(p.r, axis, keep, true));
    CHECK_SAME(amin, ref::arg(p.r, axis, keep, false));
  }
  const Tensor m = Tensor::from({3.f, 1.f, 3.f, 0.f, 5.f, 5.f}, {2, 3});
  CHECK(mls::argmax(m, 1).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1});
  CHECK(mls::argmin(m, -1).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0});
  CHECK(mls::argmax(m, 0, true).shape() == Dims{1, 3});
  CHECK(mls::argmax(m, 0).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 1});
}

TEST_CASE("softmax, log_softmax, logsumexp along any axis, stable for large inputs", "[lab1][reduce]") {
  mls::Rng rng(607, "softmax");
  for (int trial = 0; trial < 150; ++trial) {
    const DType t = ref::kFloatDTypes[trial % 2];
    const double offset = trial % 3 == 0 ? 1000.0 : 0.0;  // exp(1000) overflows: only a stable form works
    gen::Pair p = gen::random_input(rng, t, 3, 1, 4, offset - 5, offset + 5);
    if (p.r.ndim() == 0 || p.r.numel() == 0) continue;
    const I64 nd = p.r.ndim(), axis = rng.randint(-nd, nd);
    const I64 ax = axis < 0 ? axis + nd : axis;
    const I64 n = p.r.shape[static_cast<std::size_t>(ax)];
    if (n == 0) continue;
    const bool keep = rng.randint(0, 2);
    INFO(p.log << " " << t << " axis " << axis << " keepdim " << keep);
    MLS_ORACLE(const SoftmaxRef want = softmax_ref(p.r, ax);)
    const double eps = ref::eps_of(t), dn = static_cast<double>(n);
    const Tensor sm = mls::softmax(p.t, axis);
    CHECK(sm.dtype() == t);
    // x - max is rounded by up to eps * |x - max| <= 10 eps before exp: relative error of exp.
    CHECK_CLOSE(sm, want.sm, [&](I64 i) { return (dn + 14) * eps * want.sm.v[static_cast<std::size_t>(i)] + 1e-300; });
    const Tensor lsm = mls::log_softmax(p.t, axis);
    CHECK_CLOSE(lsm, want.lsm, [&](I64 i) {
      return (dn + 12) * eps * (6 + offset + std::log(dn) + std::fabs(want.lsm.v[static_cast<std::size_t>(i)]));
    });
    const Tensor lse = mls::logsumexp(p.t, axis, keep);
    MLS_ORACLE(const Ref lse_want = keep ? want.lse : ref::reshape(want.lse, ref::reduced_shape(p.r.shape, {ax}, false));)
    CHECK_CLOSE(lse, lse_want, [&](I64 i) {
      return (dn + 12) * eps * (1 + std::fabs(lse_want.v[static_cast<std::size_t>(i)]));
    });
    // Each softmax slice sums to 1.
    MLS_ORACLE_CHECK(const Ref ones = ref::sum(ref::to_ref(sm), {ax}, false); bool all_one = true;
                     for (double s : ones.v) all_one = all_one && std::fabs(s - 1.0) <= 2 * (dn + 14) * eps;
                     CHECK(all_one));
  }
}

TEST_CASE("softmax family with -inf entries (masking)", "[lab1][reduce]") {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType t : ref::kFloatDTypes) {
    INFO(t);
    const Tensor x = ref::make(Ref({2, 3}, {0.0, -inf, 0.0, -inf, -inf, -inf}), t);
    const mls::testing::Tolerance tol{8 * ref::eps_of(t), 0.0};  // Approx(...).epsilon(4 eps), on both sides
    MLS_OBSERVE_VALUES(mls::softmax(x.slice(0, 0, 1)), tol);
    MLS_OBSERVE_VALUES(mls::logsumexp(x, 1), tol);
    MLS_OBSERVE_VALUES(mls::log_softmax(x.slice(0, 0, 1)), tol);
    const auto sm = mls::softmax(x.slice(0, 0, 1)).to_vector<double>();
    CHECK(sm == std::vector<double>{0.5, 0.0, 0.5});
    const auto lse = mls::logsumexp(x, 1).to_vector<double>();
    CHECK(lse[0] == Approx(std::log(2.0)).epsilon(4 * ref::eps_of(t)));
    CHECK(lse[1] == -inf);  // an all -inf row: log(0), not NaN
    const auto lsm = mls::log_softmax(x.slice(0, 0, 1)).to_vector<double>();
    CHECK(lsm[1] == -inf);
    CHECK(lsm[0] == Approx(-std::log(2.0)).epsilon(4 * ref::eps_of(t)));
  }
}

TEST_CASE("logsumexp of a slice holding +inf is +inf", "[lab1][reduce]") {
  // log(exp(inf) + exp(1)) = inf (NumPy/SciPy and PyTorch agree). Shifting by the max gives
  // inf - inf = NaN unless an infinite max is treated like the all -inf case.
  const double inf = std::numeric_limits<double>::infinity();
  for (DType t : ref::kFloatDTypes) {
    INFO(t);
    const Tensor x = ref::make(Ref({2}, {inf, 1.0}), t);
    MLS_OBSERVE_VALUES(mls::logsumexp(x, 0));
    CHECK(mls::logsumexp(x, 0).item() == inf);
  }
}

TEST_CASE("reductions on 300k elements: 1 and 2 threads agree with the reference", "[lab1][reduce]") {
  mls::Rng rng(608, "reduce-threads");
  const Ref rf = ref::random_ref({600, 500}, DType::Float32, rng);
  const Ref ri = ref::random_ref({600, 500}, DType::Int32, rng, -1000, 1000);
  const Tensor f = ref::make(rf, DType::Float32), i = ref::make(ri, DType::Int32);
  const Tensor flong = f.view({-1});  // one long row: split across threads, then combined
  const double eps = ref::eps_of(DType::Float32);
  for (int threads : {1, 2}) {
    INFO("threads " << threads);
    mls::ThreadCountGuard guard(threads);
    for (const Dims& axes : {Dims{}, Dims{0}, Dims{1}, Dims{-1, 0}}) {
      INFO("axes " << axes_str(axes));
      MLS_ORACLE(const Ref want = ref::sum(rf, axes, false), scale = ref::abs_sum(rf, axes, false);)
      const double n = static_cast<double>(ref::reduce_count(rf.shape, axes));
      CHECK_CLOSE(mls::sum(f, axes), want, [&](I64 k) { return n * eps * scale.v[static_cast<std::size_t>(k)]; });
      CHECK_SAME(mls::sum(i, axes), ref::sum(ri, axes, false));
      CHECK_SAME(mls::max(f, axes), ref::reduce(rf, axes, false, -INFINITY, [](double s, double x) { return std::max(s, x); }));
      CHECK_SAME(mls::min(i.transpose(), axes),
                 ref::reduce(ref::permute(ri, {1, 0}), axes, false, INFINITY, [](double s, double x) { return std::min(s, x); }));
    }
    MLS_ORACLE(const Ref whole = ref::sum(rf, {}, false), wscale = ref::abs_sum(rf, {}, false);)
    CHECK_CLOSE(mls::sum(flong), whole, [&](I64) { return 300000 * eps * wscale.v[0]; });
    CHECK_SAME(mls::argmax(i, 1), ref::arg(ri, 1, false, true));
    CHECK_SAME(mls::argmin(i, 0), ref::arg(ri, 0, false, false));
    CHECK_SAME(mls::sum(i.view({-1})), ref::sum(ri, {}, false));
  }
}
