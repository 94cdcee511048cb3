// The eager examples compile() is shown on (mls-opt compile, the benchmark, the tests) and the
// report of `mls-opt compile`.
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "mls/autodiff/examples.hpp"
#include "mls/autodiff/nn.hpp"
#include "mls/common/rng.hpp"
#include "mls/graph_opt/compile.hpp"

namespace mls::graph_opt {

namespace {
namespace nn = autodiff::nn;

EagerExample mlp_example(std::uint64_t seed) {
  Rng rng(seed, "compile-mlp");
  auto net = nn::mlp({784, 256, 256, 10}, rng);
  EagerExample ex;
  ex.name = "mlp";
  ex.params = net->parameters();
  ex.keep = net;
  ex.fn = [net](const std::vector<Var>& in) -> std::vector<Var> {
    return {autodiff::softmax_cross_entropy((*net)(in.at(0)), in.at(1))};
  };
  Tensor y = Tensor::empty({128}, DType::Int64);
  for (std::int64_t i = 0; i < 128; ++i) y.set({i}, static_cast<double>(rng.randint(0, 10)));
  ex.inputs = {Var(Tensor::randn({128, 784}, rng)).set_name("x"), Var(y).set_name("labels")};
  return ex;
}

EagerExample attention_example(std::uint64_t seed) {
  constexpr std::int64_t t = 64, d = 64;
  Rng rng(seed, "compile-attention");
  const double s = 1.0 / std::sqrt(static_cast<double>(d));
  auto W = [&](const char* name, std::int64_t r, std::int64_t c) {
    return nn::parameter(Tensor::randn({r, c}, rng, 0.0, s)).set_name(name);
  };
  auto b = [&](const char* name, std::int64_t c) { return nn::parameter(Tensor::randn({c}, rng, 0.0, 0.1)).set_name(name); };
  EagerExample ex;
  ex.name = "attention";
  ex.params = {W("Wq", d, d), W("Wk", d, d), W("Wv", d, d), W("Wo", d, d), W("W1", d, 4 * d), b("b1", 4 * d),
               W("W2", 4 * d, d), b("b2", d)};
  const std::vector<Var> P = ex.params;
  ex.fn = [P, s](const std::vector<Var>& in) -> std::vector<Var> {
    using namespace autodiff;
    const Var& x = in.at(0);
    const Var q = matmul(x, P[0]), k = matmul(x, P[1]), v = matmul(x, P[2]);
    const Var att = softmax(matmul(q, transpose(k)) * s, -1);
    const Var h = x + matmul(matmul(att, v), P[3]);
    const Var f = matmul(gelu(matmul(h, P[4]) + P[5]), P[6]) + P[7];
    return {mse_loss(h + f, in.at(1))};
  };
  ex.inputs = {Var(Tensor::randn({t, d}, rng)).set_name("x"), Var(Tensor::randn({t, d}, rng)).set_name("target")};
  return ex;
}

EagerExample slides_example(std::uint64_t seed) {
  Rng rng(seed, "compile-slides");
  EagerExample ex;
  ex.name = "slides";
  ex.fn = [](const std::vector<Var>& in) -> std::vector<Var> {
    return {autodiff::sum(autodiff::examples::slide_function(in.at(0), in.at(1)))};
  };
  ex.inputs = {Var(Tensor::rand({16}, rng, 0.5, 2.0), true).set_name("x1"), Var(Tensor::rand({16}, rng, 0.5, 2.0), true).set_name("x2")};
  return ex;
}

/// The gradients of the example's parameters and inputs that require grad, after `loss.backward()`.
std::vector<Tensor> grads_of(const EagerExample& ex) {
  std::vector<Tensor> g;
  for (const Var& v : ex.inputs)
    if (v.requires_grad()) g.push_back(v.grad().value());
  for (const Var& p : ex.params) g.push_back(p.grad().value());
  return g;
}
void zero_grads(EagerExample& ex) {
  for (Var& v : ex.inputs)
    if (v.requires_grad()) v.zero_grad();
  for (Var& p : ex.params) p.zero_grad();
}

std::string write_drawing(const Program& p, const std::string& title, const std::string& dir, const std::string& file) {
  const std::string dot = (std::filesystem::path(dir) / (file + ".dot")).string();
  to_dot(p, title).write(dot);
  const std::string svg = (std::filesystem::path(dir) / (file + ".svg")).string();
  return render_svg(dot, svg) ? dot + ", " + svg : dot + " (no Graphviz 'dot': no SVG)";
}
}  // namespace

EagerExample eager_example(const std::string& name, std::uint64_t seed) {
  if (name == "mlp") return mlp_example(seed);
  if (name == "attention") return attention_example(seed);
  if (name == "slides") return slides_example(seed);
  fail("eager_example: unknown model '", name, "' (known: mlp, attention, slides)");
}

std::string compile_report(const std::string& name, const std::string& svg_dir) {
  EagerExample ex = eager_example(name);
  CompiledFunction cf(ex.fn, {.name = name});
  zero_grads(ex);
  const Tensor loss = cf(ex.inputs).at(0).value();
  const std::vector<Var> out = cf(ex.inputs);  // the second call: a cache hit (and the retrace check)
  out.at(0).backward();
  const std::vector<Tensor> got = grads_of(ex);
  zero_grads(ex);
  const Var eager = ex.fn(ex.inputs).at(0);
  eager.backward();
  const std::vector<Tensor> want = grads_of(ex);
  const CompiledVersion& v = cf.version(0);
  std::size_t params = 0;
  for (const Capture& c : v.captures) params += c.as_input;
  std::ostringstream os;
  os << "== compile " << name << " ==\n";
  os << "signature: " << v.signature.str() << "\n";
  os << "captured graph: " << v.traced.size() << " nodes (" << v.traced.graph->num_backward() << " of them backward), "
     << v.captures.size() << " captured tensors (" << params << " parameters fed as inputs, " << v.captures.size() - params
     << " frozen constants)\n";
  os << "guards:\n" << cf.guards(0);
  os << "passes (" << (cf.options().pre_grad_passes.empty() ? std::string("none") : cf.options().pre_grad_passes)
     << " on the traced forward before the backward is built, the others on the joint forward + backward graph):\n"
     << v.report.table();
  os << "after the passes: " << v.optimised_nodes << " nodes; forward program " << v.forward.size() << " nodes, backward program "
     << v.backward.size() << " nodes\n";
  std::size_t saved_bytes = 0;
  os << "saved for the backward:";
  for (std::size_t k = v.num_outputs; k < v.forward.outputs.size(); ++k) {
    const Node& n = *v.forward.outputs[k].get();
    os << " " << autodiff::op_name(n.op) << shape_str(n.shape);
    saved_bytes += static_cast<std::size_t>(autodiff::shape_numel(n.shape)) * itemsize(n.dtype);
  }
  os << " (" << saved_bytes << " bytes)\n";
  os << "memory, forward:  " << v.forward_exec->plan().summary() << "\n";
  if (v.backward_exec) os << "memory, backward: " << v.backward_exec->plan().summary() << "\n";
  os << "compile time: " << std::fixed << std::setprecision(2) << cf.stats().compile_ms << " ms; calls: "
     << cf.stats().compiles << " compile, " << cf.stats().cache_hits << " cache hit\n";
  os << "compiled vs eager: loss " << std::setprecision(6) << loss.item() << " vs " << eager.value().item()
     << ", max error / tolerance " << std::setprecision(3)
     << std::max(max_rel_error({loss}, {eager.value()}), max_rel_error(got, want)) << " over the loss and "
     << got.size() << " gradients\n";
  if (!svg_dir.empty()) {
    std::filesystem::create_directories(svg_dir);
    os << "drawings:\n  traced:   " << write_drawing(v.traced, name + " traced (forward + backward)", svg_dir, name + ".traced")
       << "\n  forward:  " << write_drawing(v.forward, name + " compiled forward", svg_dir, name + ".forward") << "\n";
    if (v.has_backward)
      os << "  backward: " << write_drawing(v.backward, name + " compiled backward", svg_dir, name + ".backward") << "\n";
  }
  return os.str();
}

}  // namespace mls::graph_opt
