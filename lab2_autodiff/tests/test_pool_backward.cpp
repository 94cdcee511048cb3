// The pooling adjoints, a lab 2 task (ops_pool.cpp: max_backward_fwd, avg_backward_fwd): each
// against a naive loop on random inputs (overlapping windows, padding, awkward sizes, float32 and
// float64), the slides' 2x2 max-pool example, and gradcheck in float64 of the pools they serve.
#include <cmath>
#include <limits>

#include "helpers.hpp"
#include "mls/autodiff/workload.hpp"

using namespace mls;
using namespace mls::autodiff;
using autodiff_test::check_grad;
using autodiff_test::observe_var;
using autodiff_test::randn;
using V = std::vector<Var>;

namespace {

struct Win {
  std::int64_t n, c, h, w, k, stride, pad;
  std::int64_t s() const { return stride ? stride : k; }
  std::int64_t oh() const { return (h + 2 * pad - k) / s() + 1; }
  std::int64_t ow() const { return (w + 2 * pad - k) / s() + 1; }
};

/// Naive adjoints in float64: for every window, its in-range positions in row-major order.
Tensor naive_max_backward(const Tensor& g, const Tensor& x, const Win& p) {
  Tensor dx = Tensor::zeros(x.shape(), DType::Float64);
  for (std::int64_t n = 0; n < p.n; ++n)
    for (std::int64_t c = 0; c < p.c; ++c)
      for (std::int64_t oy = 0; oy < p.oh(); ++oy)
        for (std::int64_t ox = 0; ox < p.ow(); ++ox) {
          double best = -std::numeric_limits<double>::infinity();
          std::int64_t by = -1, bx = -1;
          for (std::int64_t i = 0; i < p.k; ++i)
            for (std::int64_t j = 0; j < p.k; ++j) {
              const std::int64_t yy = oy * p.s() - p.pad + i, xx = ox * p.s() - p.pad + j;
              if (yy < 0 || yy >= p.h || xx < 0 || xx >= p.w || !(x.at({n, c, yy, xx}) > best)) continue;
              best = x.at({n, c, yy, xx});
              by = yy;
              bx = xx;
            }
          dx.set({n, c, by, bx}, dx.at({n, c, by, bx}) + g.at({n, c, oy, ox}));
        }
  return dx;
}
Tensor naive_avg_backward(const Tensor& g, const Win& p, bool include_pad) {
  Tensor dx = Tensor::zeros({p.n, p.c, p.h, p.w}, DType::Float64);
  for (std::int64_t n = 0; n < p.n; ++n)
    for (std::int64_t c = 0; c < p.c; ++c)
      for (std::int64_t oy = 0; oy < p.oh(); ++oy)
        for (std::int64_t ox = 0; ox < p.ow(); ++ox) {
          std::vector<std::pair<std::int64_t, std::int64_t>> in;
          for (std::int64_t i = 0; i < p.k; ++i)
            for (std::int64_t j = 0; j < p.k; ++j) {
              const std::int64_t yy = oy * p.s() - p.pad + i, xx = ox * p.s() - p.pad + j;
              if (yy >= 0 && yy < p.h && xx >= 0 && xx < p.w) in.emplace_back(yy, xx);
            }
          const double div = include_pad ? static_cast<double>(p.k * p.k) : static_cast<double>(in.size());
          for (auto [yy, xx] : in) dx.set({n, c, yy, xx}, dx.at({n, c, yy, xx}) + g.at({n, c, oy, ox}) / div);
        }
  return dx;
}

const Win kWindows[] = {{2, 3, 7, 5, 3, 2, 1}, {1, 2, 4, 4, 2, 0, 0}, {1, 1, 1, 1, 1, 1, 0},
                        {3, 1, 11, 13, 5, 3, 2}, {2, 2, 6, 6, 2, 1, 1}, {1, 2, 9, 4, 3, 1, 0}};

}  // namespace

TEST_CASE("max_pool2d_backward sends each g to its window's argmax, overlapping windows add up", "[lab2][pool]") {
  // The slides' 2x2 max pool of a 4x4 ramp: each window's maximum is its bottom-right element.
  std::vector<double> ramp(16);
  for (std::size_t i = 0; i < 16; ++i) ramp[i] = static_cast<double>(i + 1);
  const Tensor x4 = Tensor::from_vector(ramp, {1, 1, 4, 4});
  const Tensor g2 = Tensor::from_vector(std::vector<double>{1, 2, 3, 4}, {1, 1, 2, 2});
  const Var dx4 = max_pool2d_backward(Var(g2), Var(x4), 2, 2, 2, 0);
  observe_var("slides 2x2 max pool: dx", dx4);
  MLS_ORACLE_CHECK(CHECK(dx4.value().to_vector<double>() ==
                         std::vector<double>{0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4}));
  std::uint64_t seed = 700;
  for (const Win& p : kWindows) {
    INFO("x [" << p.n << ", " << p.c << ", " << p.h << ", " << p.w << "] kernel " << p.k << " stride " << p.s()
               << " pad " << p.pad);
    const Tensor x = randn({p.n, p.c, p.h, p.w}, seed++), g = randn({p.n, p.c, p.oh(), p.ow()}, seed++);
    for (DType dt : {DType::Float64, DType::Float32}) {
      const Var dx = max_pool2d_backward(Var(g.to(dt)), Var(x.to(dt)), p.k, p.k, p.stride, p.pad);
      observe_var("max_pool2d_backward", dx);
      MLS_ORACLE_CHECK(CHECK(dx.dtype() == dt);
                       CHECK(allclose(dx.value().to(DType::Float64), naive_max_backward(g.to(dt).to(DType::Float64),
                                                                                         x.to(dt).to(DType::Float64), p),
                                      dt == DType::Float64 ? 1e-14 : 1e-6, 1e-6)));
    }
    // The pool's gradient is this adjoint: gradcheck in float64.
    check_grad([&](const V& v) { return max_pool2d(v[0], p.k, p.k, p.stride, p.pad); }, {x});
  }
}

TEST_CASE("avg_pool2d_backward spreads each g over its window with the forward's divisor", "[lab2][pool]") {
  std::uint64_t seed = 800;
  for (const Win& p : kWindows) {
    INFO("x [" << p.n << ", " << p.c << ", " << p.h << ", " << p.w << "] kernel " << p.k << " stride " << p.s()
               << " pad " << p.pad);
    const Tensor like = randn({p.n, p.c, p.h, p.w}, seed++), g = randn({p.n, p.c, p.oh(), p.ow()}, seed++);
    for (bool include : {true, false}) {
      INFO("count_include_pad " << include);
      const Var dx = avg_pool2d_backward(Var(g), Var(like), p.k, p.k, p.stride, p.pad, include);
      observe_var("avg_pool2d_backward", dx);
      MLS_ORACLE_CHECK(CHECK(allclose(dx.value(), naive_avg_backward(g, p, include), 1e-14, 1e-14)));
      check_grad([&](const V& v) { return avg_pool2d(v[0], p.k, p.k, p.stride, p.pad, include); }, {like});
    }
  }
}
