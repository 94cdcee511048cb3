// Fused elementwise loops on random graphs: the fused program, the unfused one (lab 2's executor
// and lab 1's kernels) and a naive double-precision interpreter of this file must agree, over
// sizes that exercise the register tiles, the tail blocks and the streamed (big) results.
#include <cmath>
#include <functional>
#include <sstream>
#include <unordered_map>

#include "helpers.hpp"
#include "mls/common/rng.hpp"

using namespace graph_opt_test;

namespace {

#ifndef MLS_GRADED_BUILD  // oracles: compiled out of the grading build (mls/testing.hpp)
/// One elementwise op in double, written out independently of lab 1's scalar functions.
double naive_op(Op op, double a, double b) {
  switch (op) {
    case Op::Neg: return -a;
    case Op::Abs: return std::fabs(a);
    case Op::Exp: return std::exp(a);
    case Op::Sqrt: return std::sqrt(a);
    case Op::Tanh: return std::tanh(a);
    case Op::Sigmoid: return 1.0 / (1.0 + std::exp(-a));
    case Op::Relu: return a > 0 ? a : 0.0;
    case Op::Gelu: return 0.5 * a * (1.0 + std::tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)));
    case Op::Add: return a + b;
    case Op::Sub: return a - b;
    case Op::Mul: return a * b;
    case Op::Div: return a / b;
    case Op::Maximum: return std::isnan(a) || a > b ? a : b;
    case Op::Minimum: return std::isnan(a) || a < b ? a : b;
    default: FAIL("naive_op: op " << autodiff::op_name(op) << " is not in this test's interpreter"); return 0;
  }
}

/// Runs p node by node over doubles; a value of one element broadcasts over the others.
std::vector<std::vector<double>> naive_run(const Program& p, const std::vector<Tensor>& feeds) {
  std::unordered_map<const Node*, std::vector<double>> val;
  for (std::size_t i = 0; i < p.inputs.size(); ++i)
    val[p.inputs[i].get()] = feeds[i].to(DType::Float64).compact().to_vector<double>();
  auto at = [](const std::vector<double>& v, std::size_t j) { return v.size() == 1 ? v[0] : v[j]; };
  for (Node* n : p.schedule()) {
    if (val.count(n)) continue;
    if (n->op == Op::Constant) {
      val[n] = n->value.to(DType::Float64).compact().to_vector<double>();
      continue;
    }
    std::size_t size = 1;
    for (const NodePtr& in : n->inputs) size = std::max(size, val.at(in.get()).size());
    std::vector<double> out(size);
    if (n->op == kFusedElementwise) {
      // "code": one instruction "<op> <a> [<b>]" per entry, the op by name
      struct Step {
        Op op;
        std::size_t a;
        long b;
      };
      std::vector<Step> steps;
      for (const std::string& text : n->attrs.strs("code")) {
        std::istringstream is(text);
        std::string name;
        std::size_t a = 0;
        long b = -1;
        is >> name >> a >> b;
        steps.push_back({autodiff::op_from_name(name), a, b});
      }
      std::vector<double> slot;
      for (std::size_t j = 0; j < size; ++j) {
        slot.clear();
        for (const NodePtr& in : n->inputs) slot.push_back(at(val.at(in.get()), j));
        for (const Step& k : steps)
          slot.push_back(naive_op(k.op, slot[k.a], k.b < 0 ? 0.0 : slot[static_cast<std::size_t>(k.b)]));
        out[j] = slot.back();
      }
    } else {
      const std::vector<double>& a = val.at(n->inputs[0].get());
      const std::vector<double>* b = n->inputs.size() > 1 ? &val.at(n->inputs[1].get()) : nullptr;
      for (std::size_t j = 0; j < size; ++j) out[j] = naive_op(n->op, at(a, j), b ? at(*b, j) : 0.0);
    }
    val[n] = std::move(out);
  }
  std::vector<std::vector<double>> outs;
  for (const Var& o : p.outputs) outs.push_back(val.at(o.get()));
  return outs;
}

/// Largest |got - want| / (tol + tol |want|) over the outputs.
double naive_error(const std::vector<Tensor>& got, const std::vector<std::vector<double>>& want, double tol) {
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto g = got[i].to(DType::Float64).compact().to_vector<double>();
    REQUIRE(g.size() == want[i].size());
    for (std::size_t j = 0; j < g.size(); ++j) worst = std::max(worst, std::abs(g[j] - want[i][j]) / (tol + tol * std::abs(want[i][j])));
  }
  return worst;
}
#endif  // MLS_GRADED_BUILD

/// A random elementwise program over `inputs` dense inputs of n elements: `ops` steps, each
/// applying a random op (or a short compound that keeps values bounded: tanh(v) * w, exp(tanh v),
/// sqrt(|v|), v / (|w| + 1)) to
/// values picked from everything made so far, so some values are used several times; one or
/// two outputs.
Program random_elementwise(Rng& rng, std::int64_t n, int inputs, int ops, DType dt) {
  Program p;
  std::vector<Var> pool;
  for (int i = 0; i < inputs; ++i) pool.push_back(p.input("x" + std::to_string(i), {n}, dt));
  auto pick = [&] { return pool[static_cast<std::size_t>(rng.randint(0, static_cast<std::int64_t>(pool.size())))]; };
  auto recent = [&] { return pool.back(); };
  for (int k = 0; k < ops; ++k) {
    const Var a = rng.uniform_double() < 0.6 ? recent() : pick(), b = pick();
    const double c = std::round(rng.uniform_double() * 8 - 4) / 4 + 0.125;
    Var v;
    switch (rng.randint(0, 14)) {
      case 0: v = a + b; break;
      case 1: v = a - b; break;
      case 2: v = autodiff::tanh(a) * b; break;  // bounded: no overflow after many steps
      case 3: v = a / (autodiff::abs(b) + 1.0); break;
      case 4: v = autodiff::maximum(a, b); break;
      case 5: v = autodiff::minimum(a, b); break;
      case 6: v = -a; break;
      case 7: v = autodiff::abs(a) * c; break;
      case 8: v = autodiff::relu(a) + c; break;
      case 9: v = autodiff::exp(autodiff::tanh(a)); break;
      case 10: v = autodiff::sigmoid(a) - c; break;
      case 11: v = autodiff::sqrt(autodiff::abs(a)); break;
      case 12: v = autodiff::gelu(a); break;
      default: v = a * c + b; break;
    }
    pool.push_back(v);
  }
  p.output(pool.back());
  if (rng.uniform_double() < 0.5) p.output(pool[pool.size() - 2] * 2.0);
  return p;
}

/// Runs p fused and observes the outputs; outside the grading build, also requires them to agree
/// with p unfused and with both programs run naively (all computed after the fused run).
void check_three_ways(const Program& p, const std::string& label) {
  auto [q, absorbed] = apply_checked(p, fuse_elementwise);  // fused vs unfused, 1024 ulp
  const auto feeds = random_feeds(p, 21);
  const std::vector<Tensor> fused = run(q, feeds);
  observe_outputs(label, fused);
  const double tol = p.inputs[0].dtype() == DType::Float64 ? 1e-12 : 1e-4;
  INFO(label << "\n" << print(q));
  MLS_ORACLE_CHECK(CHECK(naive_error(fused, naive_run(p, feeds), tol) <= 1.0);   // the unfused program, naively
                   CHECK(naive_error(fused, naive_run(q, feeds), tol) <= 1.0);   // the fused program's code, naively
                   CHECK(error_against(fused, p, feeds) <= 1.0));
  MLS_OBSERVE(absorbed);
}

}  // namespace

TEST_CASE("random elementwise graphs: fused, unfused and a naive interpreter agree", "[lab3][passes]") {
  Rng rng(7, "lab3-random-fused");
  // Sizes: one element, less than a tile, whole register tiles, a tail block, and (float32)
  // a result big enough to be streamed with non-temporal stores.
  for (std::int64_t n : {1, 45, 512, 1000, 4096 + 17}) {
    for (DType dt : {DType::Float32, DType::Float64}) {
      for (int trial = 0; trial < 3; ++trial) {
        const int inputs = 1 + trial % 3;
        const Program p = random_elementwise(rng, n, inputs, 6 + 2 * trial, dt);
        check_three_ways(p, "n=" + std::to_string(n) + " " + std::string(dtype_name(dt)) + " trial " + std::to_string(trial));
      }
    }
  }
  for (DType dt : {DType::Float32, DType::Float64}) {
    const Program p = random_elementwise(rng, (1 << 20) + 100, 2, 8, dt);
    check_three_ways(p, std::string("streamed ") + std::string(dtype_name(dt)));
  }
}

TEST_CASE("fused code that reads a value twice, reuses an older result and combines two constants", "[lab3][passes]") {
  // Hand-written fused programs (the fusion pass only makes single-use chains): they exercise the
  // register evaluator's saved tiles and a running value read as both operands.
  for (std::int64_t n : {7, 512, 777, (1 << 20) + 64}) {
    for (DType dt : {DType::Float32, DType::Float64}) {
      INFO("n = " << n << " " << dt);
      Program p;
      const Var x = p.input("x", {n}, dt), y = p.input("y", {n}, dt);
      const Var c1 = p.constant(Tensor::full({}, 0.5, dt)), c2 = p.constant(Tensor::full({1}, -2.0, dt));
      // slots: 0 x, 1 y, 2 c1, 3 c2, then one per instruction
      const std::vector<std::string> c = {
          "mul 2 3",      // 4: c1 * c2 (two constants)
          "add 0 4",      // 5: x + 4
          "mul 5 5",      // 6: 5 * 5 (the running value twice)
          "tanh 6",       // 7: tanh 6 (through lab 1's loops)
          "sub 1 7",      // 8: y - 7
          "maximum 8 5",  // 9: max(8, 5): 5 again, saved since instruction 1
          "div 9 4",      // 10: 9 / 4
          "abs 10",       // 11
          "add 11 6",     // 12: 11 + 6 (saved)
      };
      p.output(p.make(kFusedElementwise, {x, y, c1, c2}, autodiff::Attrs().set("code", c)));
      verify(p);
      const auto feeds = random_feeds(p, 5);
      const std::vector<Tensor> got = run(p, feeds);
      observe_outputs("hand-written fused code", got);
      MLS_ORACLE_CHECK(CHECK(naive_error(got, naive_run(p, feeds), dt == DType::Float64 ? 1e-12 : 1e-4) <= 1.0));
    }
  }
}
