// The conv2d kernel seam (mls/common/kernels.hpp): lab 2's float32 conv2d forward runs a
// registered kernel (later labs register theirs; lab 3 its conv2d_bias kernel), and its own
// im2col + matmul path when none is registered or the fallback is forced; float64 never asks;
// gradients do not depend on which kernel ran the forward.
#include "helpers.hpp"
#include "mls/common/kernels.hpp"

#include <string>
#include <vector>

using namespace mls;
using namespace mls::autodiff;
using autodiff_test::require_error;

namespace {

/// A naive kernel (double sums) that counts its calls.
int g_calls = 0;
void naive_kernel(const Conv2dProblem& p, const float* x, const float* w, const float* bias, float* y) {
  ++g_calls;
  for (long n = 0; n < p.n; ++n)
    for (long o = 0; o < p.o; ++o)
      for (long oy = 0; oy < p.oh; ++oy)
        for (long ox = 0; ox < p.ow; ++ox) {
          double acc = bias ? bias[o] : 0.0;
          for (long c = 0; c < p.c; ++c)
            for (long i = 0; i < p.kh; ++i)
              for (long j = 0; j < p.kw; ++j) {
                const long iy = oy * p.stride - p.pad + i, ix = ox * p.stride - p.pad + j;
                if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w) continue;
                acc += static_cast<double>(x[((n * p.c + c) * p.h + iy) * p.w + ix]) *
                       static_cast<double>(w[((o * p.c + c) * p.kh + i) * p.kw + j]);
              }
          y[((n * p.o + o) * p.oh + oy) * p.ow + ox] = static_cast<float>(acc);
        }
}

/// Registers the naive kernel for one scope and chooses it (by name, so kernels of other labs
/// linked into this program do not interfere); unregisters it and returns to the default after.
struct NaiveKernelScope {
  NaiveKernelScope() {
    register_conv2d({"lab2_test_naive", &naive_kernel, -1000, "naive loops (test)"});
    set_conv2d_kernel("lab2_test_naive");
    g_calls = 0;
  }
  ~NaiveKernelScope() {
    set_conv2d_kernel("");
    unregister_conv2d("lab2_test_naive");
  }
  NaiveKernelScope(const NaiveKernelScope&) = delete;
  NaiveKernelScope& operator=(const NaiveKernelScope&) = delete;
};

std::vector<double> values(const Tensor& t) { return t.to(DType::Float64).compact().to_vector<double>(); }
#ifndef MLS_GRADED_BUILD  // oracles: compiled out of the grading build (mls/testing.hpp)
double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto u = values(a), v = values(b);
  REQUIRE(u.size() == v.size());
  double d = 0;
  for (std::size_t i = 0; i < u.size(); ++i) d = std::max(d, std::abs(u[i] - v[i]));
  return d;
}
#endif  // MLS_GRADED_BUILD

}  // namespace

TEST_CASE("conv2d kernel seam: a registered float32 kernel runs the forward, im2col when forced, gradients unchanged",
          "[lab2][opgrad]") {
  // Lab 2 alone registers no conv kernel: its conv2d runs im2col + matmul.
  for (const Conv2dKernel& k : conv2d_kernels()) CHECK(k.name.rfind("lab", 0) != 0);  // no lab's kernel in this program
  Rng rng(31, "lab2-conv-kernel");
  const Tensor x = Tensor::randn({2, 3, 7, 9}, rng), w = Tensor::randn({4, 3, 3, 2}, rng), r = Tensor::randn({2, 4, 4, 5}, rng);
  const NaiveKernelScope scope;
  // Eager and graph, stride 2, pad 1 (x is a transposed view: the kernel gets compact copies).
  const Tensor xt = x.transpose(2, 3).compact().transpose(2, 3);
  Var xv(xt, true), wv(w, true);
  const Var y = conv2d(xv, wv, 2, 1);
  const int eager_calls = g_calls;
  autodiff_test::observe_var("conv2d on the registered kernel", y);
  MLS_OBSERVE(eager_calls);
  MLS_ORACLE_CHECK(CHECK(eager_calls == 1); REQUIRE(y.shape() == Shape{2, 4, 4, 5}));
  Tensor own;
  {
    set_conv2d_kernel(kConv2dFallback);  // lab 2's own path
    own = conv2d(Var(x), Var(w), 2, 1).value();
    set_conv2d_kernel("lab2_test_naive");
  }
  mls::testing::observe_values("conv2d on im2col + matmul", own, {0.0, 2e-5});
  MLS_OBSERVE(g_calls);
  // The naive kernel's result is the oracle of lab 2's own path.
  MLS_ORACLE_CHECK(CHECK(g_calls == 1); CHECK(max_abs_diff(y.value(), own) <= 1e-5));
  Graph g;
  const Var gx = g.placeholder("x", {2, 3, 7, 9});
  const Var gy = conv2d(gx, g.variable("w", w), 2, 1);
  const Tensor graph_y = Executor(g).run({gy}, {{gx, x}})[0];
  MLS_OBSERVE(g_calls);
  MLS_ORACLE_CHECK(CHECK(g_calls == 2));
  CHECK(values(graph_y) == values(y.value()));  // the same kernel, bit for bit

  // Gradients come from lab 2's rule (im2col, matmul, col2im), not the forward kernel: the same
  // with the kernel and without.
  sum(y * Var(r)).backward();
  const Tensor dx = xv.grad().value(), dw = wv.grad().value();
  autodiff_test::observe_var("d/dx", xv.grad());
  autodiff_test::observe_var("d/dw", wv.grad());
  set_conv2d_kernel(kConv2dFallback);
  Var xo(x, true), wo(w, true);
  sum(conv2d(xo, wo, 2, 1) * Var(r)).backward();
  CHECK(values(xo.grad().value()) == values(dx));
  CHECK(values(wo.grad().value()) == values(dw));
  set_conv2d_kernel("lab2_test_naive");

  // Float64 and mixed dtypes never ask the registry.
  const int before = g_calls;
  const Tensor y64 = conv2d(Var(x.to(DType::Float64)), Var(w.to(DType::Float64)), 2, 1).value();
  const Tensor ymix = conv2d(Var(x), Var(w.to(DType::Float64)), 2, 1).value();
  CHECK(g_calls == before);
  mls::testing::observe_values("y64", y64, {1e-9, 1e-12});
  mls::testing::observe_values("ymix", ymix, {1e-9, 1e-12});
  MLS_ORACLE_CHECK(CHECK(y64.dtype() == DType::Float64); CHECK(ymix.dtype() == DType::Float64);
                   CHECK(max_abs_diff(y64, y.value()) <= 1e-5));

  // An unknown kernel name is an error of the conv2d that asks for it.
  set_conv2d_kernel("no_such_conv");
  require_error([&] { (void)conv2d(Var(x), Var(w), 2, 1); },
                "conv2d: unknown kernel 'no_such_conv' (from MLS_CONV2D or set_conv2d_kernel)");
}
