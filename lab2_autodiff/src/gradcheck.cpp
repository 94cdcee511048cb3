// gradcheck: analytic (eager and graph reverse mode) against central differences in float64.
#include "mls/autodiff/gradcheck.hpp"

#include <cmath>
#include <limits>
#include <sstream>

#include "mls/autodiff/graph.hpp"

namespace mls::autodiff {

namespace {
double weighted_sum(const GradFn& f, const std::vector<Tensor>& inputs, const Tensor& weight) {
  NoGradGuard ng;
  std::vector<Var> vs;
  for (const Tensor& t : inputs) vs.emplace_back(t, false);
  const Var out = f(vs);
  return mls::sum(mls::mul(out.value().to(DType::Float64), weight)).item();
}
}  // namespace

Tensor numeric_gradient(const GradFn& f, const std::vector<Tensor>& inputs, std::size_t which, const Tensor& weight,
                        double step) {
  MLS_CHECK(which < inputs.size(), "numeric_gradient: input ", which, " of ", inputs.size());
  std::vector<Tensor> xs;
  for (const Tensor& t : inputs) xs.push_back(t.clone());
  Tensor& x = xs[which];
  Tensor grad = Tensor::zeros(x.shape(), DType::Float64);
  double* g = grad.data<double>();
  double* p = x.data<double>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double orig = p[i];
    p[i] = orig + step;
    const double up = weighted_sum(f, xs, weight);
    p[i] = orig - step;
    const double down = weighted_sum(f, xs, weight);
    p[i] = orig;
    g[i] = (up - down) / (2.0 * step);
  }
  return grad;
}

GradcheckResult gradcheck(const GradFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    MLS_CHECK(inputs[i].defined(), "gradcheck: input ", i, " is undefined");
    MLS_CHECK(!is_floating(inputs[i].dtype()) || inputs[i].dtype() == DType::Float64, "gradcheck: input ", i, " is ",
              inputs[i].dtype(), "; use float64 (central differences in float32 are too noisy)");
  }
  const double eps = std::numeric_limits<double>::epsilon();
  const double step = opt.step > 0 ? opt.step : std::cbrt(eps);
  // Eager forward and the output weights.
  Var out;
  std::vector<Var> leaves;
  for (const Tensor& t : inputs) leaves.emplace_back(t.clone(), is_floating(t.dtype()));
  out = f(leaves);
  Rng rng(opt.seed, "gradcheck");
  const Tensor w = Tensor::rand(out.value().shape(), rng, 0.5, 1.5, DType::Float64);
  const double scale = 1.0 + mls::sum(mls::mul(mls::abs(out.value().to(DType::Float64)), w)).item();
  const double tol = opt.tol > 0 ? opt.tol : std::max(1e-7, 50.0 * std::cbrt(eps * eps) * scale);

  std::vector<Tensor> eager(inputs.size()), graph(inputs.size());
  if (opt.mode != CheckMode::Graph) {
    MLS_CHECK(out.requires_grad(), "gradcheck: the output does not depend on any floating input");
    const Var loss = mls::autodiff::sum(out * Var(w));
    loss.backward();
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (is_floating(inputs[i].dtype()))
        eager[i] = leaves[i].grad().defined() ? leaves[i].grad().value() : Tensor::zeros(inputs[i].shape(), DType::Float64);
  }
  if (opt.mode != CheckMode::Eager) {
    Graph g;
    std::vector<Var> ph;
    Feeds feeds;
    std::vector<Var> wrt;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      ph.push_back(g.placeholder("x" + std::to_string(i), inputs[i].shape(), inputs[i].dtype()));
      feeds.emplace_back(ph.back(), inputs[i]);
      if (is_floating(inputs[i].dtype())) wrt.push_back(ph.back());
    }
    const Var gout = f(ph);
    const Var loss = mls::autodiff::sum(gout * g.constant(w, "w"));
    const std::vector<Var> grads = gradients(loss, wrt);
    std::vector<Var> fetch{gout};
    fetch.insert(fetch.end(), grads.begin(), grads.end());
    const std::vector<Tensor> vals = Executor(g).run(fetch, feeds);
    MLS_CHECK(allclose(vals[0].to(DType::Float64), out.value().to(DType::Float64), 1e-12, 1e-12),
              "gradcheck: graph mode computes another forward value than eager mode");
    std::size_t k = 1;
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (is_floating(inputs[i].dtype())) graph[i] = vals[k++];
  }
  GradcheckResult r;
  r.ok = true;
  std::ostringstream rep;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!is_floating(inputs[i].dtype())) continue;
    const Tensor num = numeric_gradient(f, inputs, i, w, step);
    for (const auto& [mode, ana] : {std::pair<const char*, const Tensor*>{"eager", &eager[i]}, {"graph", &graph[i]}}) {
      if (!ana->defined()) continue;
      MLS_CHECK(ana->shape() == num.shape(), "gradcheck: ", mode, " gradient of input ", i, " has shape ",
                shape_str(ana->shape()), ", expected ", shape_str(num.shape()));
      const auto a = ana->to_vector<double>();
      const auto n = num.to_vector<double>();
      for (std::size_t e = 0; e < a.size(); ++e) {
        const double err = std::abs(a[e] - n[e]) / (1.0 + std::abs(n[e]));
        if (!(err <= r.max_error)) {
          r.max_error = std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
          rep.str("");
          rep << "worst: input " << i << " element " << e << " (" << mode << "): analytic " << a[e] << ", numeric "
              << n[e] << ", error " << err << " (tolerance " << tol << ")";
        }
      }
    }
  }
  r.ok = r.max_error <= tol;
  r.report = rep.str();
  return r;
}

}  // namespace mls::autodiff
