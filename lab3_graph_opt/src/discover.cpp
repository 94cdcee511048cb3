// Student file of lab 3: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Automated discovery of rewrites (after TASO): enumerate, fingerprint, verify, prune; the rules
// as pattern-engine rules; a best-first search over rewrites with a FLOPs + bytes cost model.
#include "mls/graph_opt/discover.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>

namespace mls::graph_opt {

// ---- expressions: construction, text, evaluation ----------------------------------------------------
namespace {
constexpr int kMaxVars = 3;

struct OpInfo {
  TermOp op;
  const char* name;
  int arity;
};
constexpr std::array<OpInfo, 10> kOps{{{TermOp::Var, "var", 0},
                                       {TermOp::Zero, "0", 0},
                                       {TermOp::One, "1", 0},
                                       {TermOp::Neg, "neg", 1},
                                       {TermOp::Transpose, "transpose", 1},
                                       {TermOp::Relu, "relu", 1},
                                       {TermOp::Add, "add", 2},
                                       {TermOp::Sub, "sub", 2},
                                       {TermOp::Mul, "mul", 2},
                                       {TermOp::Matmul, "matmul", 2}}};

const OpInfo& info(TermOp op) { return kOps[static_cast<std::size_t>(op)]; }
/// Asks the op registry (lab 2's add and mul are marked commutative; matmul and sub are not).
bool commutative(TermOp op) {
  static const std::array<bool, kOps.size()> table = [] {
    std::array<bool, kOps.size()> t{};
    for (const OpInfo& o : kOps)
      t[static_cast<std::size_t>(o.op)] = o.arity == 2 && autodiff::op_def(autodiff::op_from_name(o.name)).commutative;
    return t;
  }();
  return table[static_cast<std::size_t>(op)];
}
char var_letter(int i) { return static_cast<char>('A' + i); }

/// out = op(x, y) on n x n row-major matrices (scalars already broadcast to n x n).
void apply_op(TermOp op, const double* x, const double* y, double* out, int n) {
  const int nn = n * n;
  switch (op) {
    case TermOp::Neg:
      for (int i = 0; i < nn; ++i) out[i] = -x[i];
      break;
    case TermOp::Transpose:
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) out[i * n + j] = x[j * n + i];
      break;
    case TermOp::Relu:
      for (int i = 0; i < nn; ++i) out[i] = x[i] > 0 ? x[i] : 0.0;
      break;
    case TermOp::Add:
      for (int i = 0; i < nn; ++i) out[i] = x[i] + y[i];
      break;
    case TermOp::Sub:
      for (int i = 0; i < nn; ++i) out[i] = x[i] - y[i];
      break;
    case TermOp::Mul:
      for (int i = 0; i < nn; ++i) out[i] = x[i] * y[i];
      break;
    case TermOp::Matmul:
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int k = 0; k < n; ++k) s += x[i * n + k] * y[k * n + j];
          out[i * n + j] = s;
        }
      break;
    default:
      fail("eval_term: ", info(op).name, " is a leaf");
  }
}

/// Canonical text of `t` with variables renamed by `perm` and the operands of add/mul sorted.
std::string canon(const TermPtr& t, const std::array<int, kMaxVars>& perm) {
  switch (t->op) {
    case TermOp::Var: return std::string(1, var_letter(perm[static_cast<std::size_t>(t->var)]));
    case TermOp::Zero: return "0";
    case TermOp::One: return "1";
    default: break;
  }
  std::string a = canon(t->a, perm);
  if (info(t->op).arity == 1) return std::string(info(t->op).name) + "(" + a + ")";
  std::string b = canon(t->b, perm);
  if (commutative(t->op) && b < a) std::swap(a, b);
  return std::string(info(t->op).name) + "(" + a + ", " + b + ")";
}

struct Parser {
  std::string_view s;
  std::size_t i = 0;
  void skip() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  }
  TermPtr term() {
    skip();
    MLS_CHECK(i < s.size(), "parse_term: unexpected end of '", s, "'");
    const std::size_t start = i;
    while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) ++i;
    const std::string word(s.substr(start, i - start));
    MLS_CHECK(!word.empty(), "parse_term: unexpected '", s[start], "' at position ", start, " of '", s, "'");
    if (word == "0") return term_op(TermOp::Zero);
    if (word == "1") return term_op(TermOp::One);
    if (word.size() == 1 && word[0] >= 'A' && word[0] < 'A' + kMaxVars) return term_var(word[0] - 'A');
    const OpInfo* op = nullptr;
    for (const OpInfo& o : kOps)
      if (o.arity > 0 && word == o.name) op = &o;
    MLS_CHECK(op != nullptr, "parse_term: unknown op or variable '", word, "' in '", s,
              "' (ops: neg, transpose, relu, add, sub, mul, matmul; variables A, B, C; constants 0, 1)");
    expect('(');
    TermPtr a = term(), b;
    if (op->arity == 2) {
      expect(',');
      b = term();
    }
    expect(')');
    return term_op(op->op, a, b);
  }
  void expect(char c) {
    skip();
    MLS_CHECK(i < s.size() && s[i] == c, "parse_term: expected '", c, "' at position ", i, " of '", s, "'");
    ++i;
  }
};
}  // namespace

TermPtr term_var(int index) {
  MLS_CHECK(index >= 0 && index < kMaxVars, "term_var: index ", index, " is not in [0, ", kMaxVars, ")");
  auto t = std::make_shared<Term>();
  t->op = TermOp::Var;
  t->var = index;
  return t;
}

TermPtr term_op(TermOp op, TermPtr a, TermPtr b) {
  const int arity = info(op).arity;
  MLS_CHECK(op != TermOp::Var, "term_op: use term_var for variables");
  MLS_CHECK((arity >= 1) == (a != nullptr) && (arity == 2) == (b != nullptr), "term_op: ", info(op).name, " takes ",
            arity, " operands");
  auto t = std::make_shared<Term>();
  t->op = op;
  t->a = std::move(a);
  t->b = std::move(b);
  return t;
}

TermPtr parse_term(std::string_view text) {
  Parser p{text};
  TermPtr t = p.term();
  p.skip();
  MLS_CHECK(p.i == text.size(), "parse_term: trailing text '", text.substr(p.i), "' in '", text, "'");
  return t;
}

std::string to_string(const TermPtr& t) { return canon(t, {0, 1, 2}); }

int term_size(const TermPtr& t) {
  if (!t || info(t->op).arity == 0) return 0;
  return 1 + term_size(t->a) + term_size(t->b);
}

unsigned term_vars(const TermPtr& t) {
  if (!t) return 0;
  if (t->op == TermOp::Var) return 1u << t->var;
  return term_vars(t->a) | term_vars(t->b);
}

std::vector<double> eval_term(const TermPtr& t, const std::vector<std::vector<double>>& vars, int n) {
  const auto nn = static_cast<std::size_t>(n * n);
  switch (t->op) {
    case TermOp::Var:
      MLS_CHECK(static_cast<std::size_t>(t->var) < vars.size() && vars[static_cast<std::size_t>(t->var)].size() == nn,
                "eval_term: variable ", var_letter(t->var), " needs ", nn, " values");
      return vars[static_cast<std::size_t>(t->var)];
    case TermOp::Zero: return std::vector<double>(nn, 0.0);
    case TermOp::One: return std::vector<double>(nn, 1.0);
    default: break;
  }
  const std::vector<double> x = eval_term(t->a, vars, n);
  const std::vector<double> y = t->b ? eval_term(t->b, vars, n) : std::vector<double>();
  std::vector<double> out(nn);
  apply_op(t->op, x.data(), y.empty() ? nullptr : y.data(), out.data(), n);
  return out;
}

namespace {
Var build_with(const TermPtr& t, const std::vector<Var>& vars, const Var& like) {
  switch (t->op) {
    case TermOp::Var: {
      const auto i = static_cast<std::size_t>(t->var);
      MLS_CHECK(i < vars.size() && vars[i].defined(), "build_term: variable ", var_letter(t->var), " is not given");
      return vars[i];
    }
    case TermOp::Zero: return autodiff::scalar_like(like, 0.0);
    case TermOp::One: return autodiff::scalar_like(like, 1.0);
    case TermOp::Neg: return autodiff::neg(build_with(t->a, vars, like));
    case TermOp::Transpose: return autodiff::permute(build_with(t->a, vars, like), {1, 0});
    case TermOp::Relu: return autodiff::relu(build_with(t->a, vars, like));
    case TermOp::Add: return autodiff::add(build_with(t->a, vars, like), build_with(t->b, vars, like));
    case TermOp::Sub: return autodiff::sub(build_with(t->a, vars, like), build_with(t->b, vars, like));
    case TermOp::Mul: return autodiff::mul(build_with(t->a, vars, like), build_with(t->b, vars, like));
    case TermOp::Matmul: return autodiff::matmul(build_with(t->a, vars, like), build_with(t->b, vars, like));
  }
  fail("build_term: unknown op");
}
}  // namespace

Var build_term(const TermPtr& t, const std::vector<Var>& vars) {
  Var like;
  for (const Var& v : vars)
    if (v.defined()) {
      like = v;
      break;
    }
  MLS_CHECK(like.defined(), "build_term: no variable given for '", to_string(t), "'");
  return build_with(t, vars, like);
}

Program term_program(const TermPtr& t, std::int64_t n, DType dtype) {
  Program p;
  std::vector<Var> vars;
  for (int i = 0; i < kMaxVars; ++i) vars.push_back(p.input(std::string(1, var_letter(i)), {n, n}, dtype));
  p.output(build_term(t, vars));
  return p;
}

std::string DiscoveredRule::str() const { return to_string(lhs) + " = " + to_string(rhs); }

DiscoveredRule parse_rule(std::string_view text) {
  const auto eq = text.find('=');
  MLS_CHECK(eq != std::string_view::npos && text.find('=', eq + 1) == std::string_view::npos, "parse_rule: '", text,
            "' needs exactly one '=' between its two sides");
  return {parse_term(text.substr(0, eq)), parse_term(text.substr(eq + 1))};
}

std::string rule_key(const DiscoveredRule& r) {
  std::array<int, kMaxVars> perm{0, 1, 2};
  std::string best;
  do {
    const std::string l = canon(r.lhs, perm), rr = canon(r.rhs, perm);
    for (const std::string& k : {l + " = " + rr, rr + " = " + l})
      if (best.empty() || k < best) best = k;
  } while (std::next_permutation(perm.begin(), perm.end()));
  return best;
}

// ---- discovery --------------------------------------------------------------------------------------
namespace {
/// One enumerated expression: op and operand ids (values are computed from the operands').
struct Enumerated {
  TermOp op = TermOp::Var;
  int a = -1, b = -1, var = -1;
  int size = 0, matmuls = 0;
  unsigned vars = 0;
  bool scalar = false;  // the constants 0 and 1
};

/// Values of every enumerated expression on one random input set (n x n each, flat). The inputs
/// are N(0, 4^2): wider than the constants 3 ops can build from 1, so that a rule true only for
/// inputs above -2 (relu(x + 2) = x + 2) meets a counterexample among the n*n values.
[[maybe_unused]] static std::vector<double> evaluate_all(const std::vector<Enumerated>& es, int n, std::uint64_t seed,
                                                         int num_vars) {
  const auto nn = static_cast<std::size_t>(n * n);
  Rng rng(seed, "lab3-discover");
  std::vector<std::vector<double>> inputs(static_cast<std::size_t>(num_vars), std::vector<double>(nn));
  for (auto& m : inputs)
    for (double& v : m) v = rng.normal(0.0, 4.0);  // wide: relu(x + 1 + 1) = x + 1 + 1 must fail
  std::vector<double> vals(es.size() * nn);
  for (std::size_t i = 0; i < es.size(); ++i) {
    const Enumerated& e = es[i];
    double* out = vals.data() + i * nn;
    if (e.op == TermOp::Var) std::copy(inputs[static_cast<std::size_t>(e.var)].begin(), inputs[static_cast<std::size_t>(e.var)].end(), out);
    else if (e.op == TermOp::Zero || e.op == TermOp::One) std::fill(out, out + nn, e.op == TermOp::One ? 1.0 : 0.0);
    else
      apply_op(e.op, vals.data() + static_cast<std::size_t>(e.a) * nn,
               e.b >= 0 ? vals.data() + static_cast<std::size_t>(e.b) * nn : nullptr, out, n);
  }
  return vals;
}

/// |x - y| <= 1024 eps (1 + max|y|) elementwise: float64 roundoff of a few reassociated ops.
[[maybe_unused]] static bool close(const double* x, const double* y, std::size_t nn) {
  double scale = 0;
  for (std::size_t i = 0; i < nn; ++i) scale = std::max(scale, std::abs(y[i]));
  const double tol = 1024 * std::numeric_limits<double>::epsilon() * (1 + scale);
  for (std::size_t i = 0; i < nn; ++i)
    if (!(std::abs(x[i] - y[i]) <= tol)) return false;
  return true;
}
}  // namespace

Discovery discover_rules(const DiscoveryOptions& o) {
  MLS_CHECK(o.max_ops >= 1 && o.max_ops <= 4, "discover_rules: max_ops ", o.max_ops, " is not in [1, 4]");
  MLS_CHECK(o.num_vars >= 1 && o.num_vars <= kMaxVars, "discover_rules: num_vars ", o.num_vars, " is not in [1, 3]");
  MLS_CHECK(o.n >= 2 && o.verify_trials >= 1, "discover_rules: need n >= 2 and verify_trials >= 1");
  Discovery d;
  // BEGIN SOLUTION
  // 1. Enumerate by size: leaves, then op(smaller expressions).
  std::vector<Enumerated> es;
  std::vector<std::vector<int>> by_size(static_cast<std::size_t>(o.max_ops + 1));
  auto push = [&](Enumerated e, int size) {
    e.size = size;
    by_size[static_cast<std::size_t>(size)].push_back(static_cast<int>(es.size()));
    es.push_back(e);
  };
  for (int v = 0; v < o.num_vars; ++v) push(Enumerated{TermOp::Var, -1, -1, v, 0, 0, 1u << v, false}, 0);
  if (o.constants) {
    push(Enumerated{TermOp::Zero, -1, -1, -1, 0, 0, 0, true}, 0);
    push(Enumerated{TermOp::One, -1, -1, -1, 0, 0, 0, true}, 0);
  }
  for (int s = 1; s <= o.max_ops; ++s) {
    for (TermOp op : {TermOp::Neg, TermOp::Transpose, TermOp::Relu})
      for (int i : by_size[static_cast<std::size_t>(s - 1)]) {
        const Enumerated& x = es[static_cast<std::size_t>(i)];
        if (x.scalar) continue;
        push(Enumerated{op, i, -1, -1, 0, x.matmuls, x.vars, false}, s);
      }
    for (int sl = 0; sl <= s - 1; ++sl)
      for (int i : by_size[static_cast<std::size_t>(sl)])
        for (int j : by_size[static_cast<std::size_t>(s - 1 - sl)])
          for (TermOp op : {TermOp::Add, TermOp::Sub, TermOp::Mul, TermOp::Matmul}) {
            const Enumerated &x = es[static_cast<std::size_t>(i)], &y = es[static_cast<std::size_t>(j)];
            if (x.scalar && y.scalar) continue;                         // no variable: constant folding's job
            if (commutative(op) && i > j) continue;                     // operand order: the matcher commutes
            if (op == TermOp::Matmul && (x.scalar || y.scalar)) continue;  // matmul needs matrices
            push(Enumerated{op, i, j, -1, 0, x.matmuls + y.matmuls + (op == TermOp::Matmul), x.vars | y.vars, false}, s);
          }
  }
  d.stats.enumerated = es.size();
  const std::size_t count = es.size();
  std::vector<TermPtr> terms(count);
  for (std::size_t i = 0; i < count; ++i) {
    const Enumerated& e = es[i];
    if (e.op == TermOp::Var) terms[i] = term_var(e.var);
    else
      terms[i] = term_op(e.op, e.a >= 0 ? terms[static_cast<std::size_t>(e.a)] : nullptr,
                         e.b >= 0 ? terms[static_cast<std::size_t>(e.b)] : nullptr);
  }
  // 2. Fingerprint: hash of the rounded values on one random input set; group.
  const auto nn = static_cast<std::size_t>(o.n * o.n);
  {
    const std::vector<double> vals = evaluate_all(es, o.n, o.seed, o.num_vars);
    std::unordered_map<std::uint64_t, std::vector<int>> classes;
    for (std::size_t i = 0; i < count; ++i) {
      if (es[i].scalar) continue;
      std::uint64_t h = 1469598103934665603ull;
      for (std::size_t k = 0; k < nn; ++k) {
        h ^= static_cast<std::uint64_t>(std::llround(std::ldexp(vals[i * nn + k], 20)));
        h *= 1099511628211ull;
      }
      classes[h].push_back(static_cast<int>(i));
    }
    d.stats.classes = classes.size();
    // 3. Normal form of each class; candidate pairs (member, normal form); verify them.
    std::vector<std::string> text(count);
    for (std::size_t i = 0; i < count; ++i) text[i] = to_string(terms[i]);
    auto better = [&](int x, int y) {
      const Enumerated &a = es[static_cast<std::size_t>(x)], &b = es[static_cast<std::size_t>(y)];
      const std::string &ta = text[static_cast<std::size_t>(x)], &tb = text[static_cast<std::size_t>(y)];
      if (a.size != b.size) return a.size < b.size;
      if (a.matmuls != b.matmuls) return a.matmuls < b.matmuls;
      if (ta.size() != tb.size()) return ta.size() < tb.size();
      return ta < tb;
    };
    std::vector<std::pair<int, int>> pairs;
    for (auto& [h, members] : classes) {
      if (members.size() < 2) continue;
      const int nf = *std::min_element(members.begin(), members.end(), better);
      for (int m : members)
        if (m != nf) pairs.emplace_back(m, nf);
    }
    std::sort(pairs.begin(), pairs.end());  // deterministic order (the map's is not)
    d.stats.candidates = pairs.size();
    std::vector<char> ok(pairs.size(), 1);
    for (int t = 1; t <= o.verify_trials; ++t) {
      const int n = t == o.verify_trials ? o.n + 1 : o.n;  // the last trial at another size
      const auto nt = static_cast<std::size_t>(n * n);
      const std::vector<double> v = evaluate_all(es, n, o.seed + 1000 * static_cast<std::uint64_t>(t), o.num_vars);
      for (std::size_t k = 0; k < pairs.size(); ++k)
        if (ok[k])
          ok[k] = close(v.data() + static_cast<std::size_t>(pairs[k].first) * nt,
                        v.data() + static_cast<std::size_t>(pairs[k].second) * nt, nt);
    }
    // 4. Prune: normal forms only inside the left side, no unbound variable, no duplicates.
    std::vector<int> nf_of(count);
    for (std::size_t i = 0; i < count; ++i) nf_of[i] = static_cast<int>(i);
    for (std::size_t k = 0; k < pairs.size(); ++k)
      if (ok[k]) {
        ++d.stats.verified;
        nf_of[static_cast<std::size_t>(pairs[k].first)] = pairs[k].second;
      }
    std::vector<char> all_nf(count, 0);  // the expression and all its subexpressions are normal forms
    for (std::size_t i = 0; i < count; ++i) {
      const Enumerated& e = es[i];
      all_nf[i] = nf_of[i] == static_cast<int>(i) && (e.a < 0 || all_nf[static_cast<std::size_t>(e.a)]) &&
                  (e.b < 0 || all_nf[static_cast<std::size_t>(e.b)]);
    }
    std::unordered_set<std::string> seen;
    for (std::size_t k = 0; k < pairs.size(); ++k) {
      if (!ok[k]) continue;
      const auto [m, nf] = pairs[k];
      const Enumerated &e = es[static_cast<std::size_t>(m)], &f = es[static_cast<std::size_t>(nf)];
      if (e.a >= 0 && !all_nf[static_cast<std::size_t>(e.a)]) continue;
      if (e.b >= 0 && !all_nf[static_cast<std::size_t>(e.b)]) continue;
      if ((f.vars & ~e.vars) != 0) continue;
      DiscoveredRule r{terms[static_cast<std::size_t>(m)], terms[static_cast<std::size_t>(nf)]};
      if (!seen.insert(rule_key(r)).second) continue;
      d.rules.push_back(std::move(r));
    }
  }
  d.stats.kept = d.rules.size();
  // END SOLUTION
  return d;
}

void verify_rule(const DiscoveredRule& r, std::int64_t n, int trials) {
  MLS_CHECK(r.lhs && r.rhs, "verify_rule: a side is empty");
  // BEGIN SOLUTION
  const Program l = term_program(r.lhs, n), rr = term_program(r.rhs, n);
  for (int t = 0; t < trials; ++t) {
    const std::uint64_t seed = 100 + static_cast<std::uint64_t>(t);
    const auto feeds = random_feeds(l, seed);
    const double err = max_rel_error(run(l, feeds), run(rr, feeds));
    MLS_CHECK(err <= 1.0, "discover: rule '", r.str(), "' does not hold: on random ", n, "x", n,
              " float64 inputs (seed ", seed, ") the two sides differ by ", err,
              " times the tolerance (1024 float64 ulp)");
  }
  // END SOLUTION
}

// ---- rules for the engine ---------------------------------------------------------------------------
namespace {
/// True when every element of constant `n` equals `v`.
[[maybe_unused]] static bool constant_is(const Node& n, double v) {
  if (n.op != Op::Constant || !n.value.defined() || n.value.numel() > 4096) return false;
  const auto xs = n.value.to(DType::Float64).compact().to_vector<double>();
  return std::all_of(xs.begin(), xs.end(), [v](double x) { return x == v; });
}

/// The pattern of one side; constant positions are bound as "#0", "#1", ...
[[maybe_unused]] static Pattern side_pattern(const TermPtr& t, std::vector<std::string>& consts) {
  using P = Pattern;
  switch (t->op) {
    case TermOp::Var: return P::any(std::string(1, var_letter(t->var)));
    case TermOp::Zero:
    case TermOp::One: {
      const double v = t->op == TermOp::One ? 1.0 : 0.0;
      consts.push_back("#" + std::to_string(consts.size()));
      P p = P::any(consts.back());
      p.constant().where([v](const Node& n) { return constant_is(n, v); });
      return p;
    }
    case TermOp::Neg: return P::of(Op::Neg, {side_pattern(t->a, consts)});
    case TermOp::Relu: return P::of(Op::Relu, {side_pattern(t->a, consts)});
    case TermOp::Transpose: {
      P p = P::of(Op::Permute, {side_pattern(t->a, consts)});
      p.where([](const Node& n) {  // runs before the op check
        return n.op == Op::Permute && n.attrs.ints("dims") == std::vector<std::int64_t>{1, 0};
      });
      return p;
    }
    default: break;
  }
  const Op op = t->op == TermOp::Add ? Op::Add : t->op == TermOp::Sub ? Op::Sub : t->op == TermOp::Mul ? Op::Mul : Op::Matmul;
  Pattern a = side_pattern(t->a, consts);
  Pattern b = side_pattern(t->b, consts);
  P p = P::of(op, {std::move(a), std::move(b)});
  if (commutative(t->op)) p.commutative();
  return p;
}
}  // namespace

Rule to_rule(const DiscoveredRule& r, bool reverse) {
  MLS_CHECK(r.lhs && r.rhs, "to_rule: a side is empty");
  Rule rule;
  // BEGIN SOLUTION
  const TermPtr from = reverse ? r.rhs : r.lhs, to = reverse ? r.lhs : r.rhs;
  MLS_CHECK(info(from->op).arity > 0, "to_rule: rule '", r.str(), "' ", reverse ? "reversed " : "", "would match '",
            to_string(from), "', a bare leaf that matches every node");
  const unsigned vars = term_vars(from);
  MLS_CHECK((term_vars(to) & ~vars) == 0, "to_rule: rule '", r.str(), "' ", reverse ? "reversed " : "", "builds '",
            to_string(to), "' with a variable that '", to_string(from), "' does not bind");
  std::vector<std::string> consts;
  rule.name = r.str() + (reverse ? " (reversed)" : "");
  rule.pattern = side_pattern(from, consts);
  rule.rewrite = [to, vars, consts](Program&, const Match& m) -> Var {
    const Node& root = *m.root;
    if (root.shape.size() != 2) return Var();
    std::vector<Var> vs(kMaxVars);
    for (int i = 0; i < kMaxVars; ++i) {
      if (!(vars & (1u << i))) continue;
      const Var v = m[std::string(1, var_letter(i))];
      if (v.shape() != root.shape || v.dtype() != root.dtype) return Var();
      vs[static_cast<std::size_t>(i)] = v;
    }
    for (const std::string& c : consts) {
      const Node& n = *m.nodes.at(c);
      if (!(n.shape.empty() || n.shape == root.shape) || n.dtype != root.dtype) return Var();
    }
    try {
      const Var out = build_term(to, vs);
      return out.shape() == root.shape && out.dtype() == root.dtype ? out : Var();
    } catch (const Error&) {
      return Var();  // the other side does not type-check here: decline
    }
  };
  // END SOLUTION
  return rule;
}

// ---- cost model and search --------------------------------------------------------------------------
double search_cost(const Program& p) {
  const ProgramCost c = program_cost(p);
  return c.flops + c.bytes + 64.0 * static_cast<double>(c.nodes);
}

namespace {
/// The program's outputs as one expression string (inputs by index, constants by value), so two
/// programs computing the same expression tree get the same key.
[[maybe_unused]] static std::string program_key(const Program& p) {
  std::unordered_map<const Node*, std::string> memo;
  for (std::size_t i = 0; i < p.inputs.size(); ++i) memo[p.inputs[i].get()] = "in" + std::to_string(i);
  std::string key;
  for (Node* n : p.schedule()) {
    if (memo.count(n)) continue;
    std::string s;
    if (n->op == Op::Constant) {
      s = "c" + shape_str(n->shape);
      if (n->value.defined() && n->value.numel() == 1) s += std::to_string(n->value.to(DType::Float64).compact().to_vector<double>()[0]);
    } else {
      s = std::string(autodiff::op_name(n->op)) + "{" + n->attrs.str() + "}(";
      for (const NodePtr& in : n->inputs) s += memo.at(in.get()) + ",";
      s += ")";
    }
    memo[n] = std::move(s);
  }
  for (const Var& o : p.outputs) key += memo.at(o.get()) + ";";
  return key;
}

/// Applies `rule` at its `site`-th match (in schedule order) in `q`; false when it declines.
[[maybe_unused]] static bool apply_at(Program& q, const Rule& rule, int site) {
  const auto uses = use_counts(q);
  std::unordered_map<const Node*, NodePtr> own;
  for (const NodePtr& c : q.graph->nodes()) own[c.get()] = c;
  int k = 0;
  for (Node* raw : q.schedule()) {
    if (raw->is_leaf()) continue;
    const NodePtr n = own.at(raw);
    std::optional<Match> m = match(rule.pattern, n, uses);
    if (!m || k++ != site) continue;
    const Var out = rule.rewrite(q, *m);
    if (!out.defined() || out.get() == n.get() || out.shape() != n->shape || out.dtype() != n->dtype) return false;
    q.replace(Var(n), out);
    prune(q);
    return true;
  }
  return false;
}

/// Number of places `rule` matches in `p` for each rule, in schedule order (uses and owners once).
[[maybe_unused]] static std::vector<int> count_sites(const Program& p, const std::vector<Rule>& rules) {
  const auto uses = use_counts(p);
  std::unordered_map<const Node*, NodePtr> own;
  for (const NodePtr& c : p.graph->nodes()) own[c.get()] = c;
  const std::vector<Node*> sched = p.schedule();
  std::vector<int> sites(rules.size(), 0);
  for (std::size_t r = 0; r < rules.size(); ++r)
    for (Node* raw : sched)
      if (!raw->is_leaf() && match(rules[r].pattern, own.at(raw), uses)) ++sites[r];
  return sites;
}
}  // namespace

SearchResult search_rewrites(const Program& p, const std::vector<DiscoveredRule>& rules, const SearchOptions& o) {
  verify(p);
  SearchResult res;
  res.cost_before = search_cost(p);
  // BEGIN SOLUTION
  std::vector<Rule> engine;  // both directions where a direction can be applied
  for (const DiscoveredRule& r : rules) {
    engine.push_back(to_rule(r, false));
    if (info(r.rhs->op).arity > 0 && term_vars(r.lhs) == term_vars(r.rhs)) engine.push_back(to_rule(r, true));
  }
  struct State {
    Program prog;
    double cost;
    std::vector<std::string> steps;
  };
  std::vector<State> states;
  states.push_back({clone(p), res.cost_before, {}});
  const std::size_t max_nodes = program_cost(p).nodes + static_cast<std::size_t>(std::max(0, o.max_extra_nodes));
  std::unordered_set<std::string> seen{program_key(p)};
  using Item = std::pair<double, std::size_t>;  // (cost, state), cheapest first, older first on ties
  std::priority_queue<Item, std::vector<Item>, std::greater<>> open;
  open.push({res.cost_before, 0});
  std::size_t best = 0;
  while (!open.empty() && res.expanded < o.max_states) {
    const std::size_t s = open.top().second;
    open.pop();
    ++res.expanded;
    const std::vector<int> sites = count_sites(states[s].prog, engine);
    for (std::size_t ri = 0; ri < engine.size(); ++ri) {
      const Rule& rule = engine[ri];
      for (int k = 0; k < sites[ri]; ++k) {
        Program q = clone(states[s].prog);
        if (!apply_at(q, rule, k)) continue;
        if (program_cost(q).nodes > max_nodes) continue;
        if (!seen.insert(program_key(q)).second) continue;
        const double c = search_cost(q);
        std::vector<std::string> steps = states[s].steps;
        steps.push_back(rule.name);
        states.push_back({std::move(q), c, std::move(steps)});
        open.push({c, states.size() - 1});
        if (c < states[best].cost) best = states.size() - 1;
      }
    }
  }
  res.best = clone(states[best].prog);
  res.cost_after = states[best].cost;
  res.steps = states[best].steps;
  // END SOLUTION
  verify(res.best);
  for (std::uint64_t seed : {21u, 22u}) {
    const auto feeds = random_feeds(p, seed);
    const double err = max_rel_error(run(res.best, feeds), run(p, feeds));
    MLS_CHECK(err <= 1.0, "search_rewrites: the rewritten program differs from the input by ", err,
              " times the tolerance (seed ", seed, ")");
  }
  return res;
}

// ---- rediscovery ------------------------------------------------------------------------------------
std::vector<KnownRewrite> rediscovered(const std::vector<DiscoveredRule>& rules) {
  std::vector<KnownRewrite> known{
      {"simplify (x*1)", "mul(A, 1) = A", false},
      {"simplify (x+0)", "add(A, 0) = A", false},
      {"simplify (x-0)", "sub(A, 0) = A", false},
      {"simplify (permute(permute(x)))", "transpose(transpose(A)) = A", false},
      {"pattern engine example (neg(neg(x)))", "neg(neg(A)) = A", false},
      {"fold-transpose ((AB)^T = B^T A^T)", "transpose(matmul(A, B)) = matmul(transpose(B), transpose(A))", false},
      {"merge-convs (x*W1 + x*W2 = x*(W1+W2))", "add(mul(A, B), mul(A, C)) = mul(A, add(B, C))", false},
      {"merge-matmuls / merge-convs (A@B + A@C = A@(B+C))", "add(matmul(A, B), matmul(A, C)) = matmul(A, add(B, C))",
       false},
  };
  std::unordered_set<std::string> keys;
  for (const DiscoveredRule& r : rules) keys.insert(rule_key(r));
  for (KnownRewrite& k : known) k.found = keys.count(rule_key(parse_rule(k.rule))) > 0;
  return known;
}

}  // namespace mls::graph_opt
