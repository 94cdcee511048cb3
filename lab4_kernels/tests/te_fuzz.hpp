#pragma once
// The generator of random legal schedules shared by the tensor-expression fuzz tests: the
// interpreter against the naive evaluation (test_te_schedule.cpp) and compiled code against the
// interpreter (test_codegen_fuzz.cpp). A case is a random problem (matmul, elementwise chain,
// softmax rows, layernorm rows, 2-D convolution) on sizes with 1 and primes, and a random legal
// sequence of primitives: cache_write or rfactor first, then split/reorder/fuse/unroll/vectorize/
// parallel on every stage, then compute_at of a producer and cache_read of an input.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "mls/common/rng.hpp"
#include "mls/kernels/schedule.hpp"

namespace kernels_test::fuzz {

using namespace mls::kernels::te;  // NOLINT: the generator reads as the schedules it writes

/// One random test problem: its inputs, outputs, the reduction size that bounds its rounding,
/// and the (producer, consumer) pairs where the producer has that single consumer.
struct Problem {
  std::vector<Tensor> inputs, outputs;
  std::int64_t reduce = 1;
  std::vector<std::pair<Tensor, Tensor>> single;
  std::string what;
};

inline std::int64_t pick(mls::Rng& rng, std::int64_t n) { return static_cast<std::int64_t>(rng.uniform(0.0, static_cast<double>(n))) % n; }

inline Problem make_problem(mls::Rng& rng) {
  static const std::int64_t kSizes[] = {1, 2, 3, 5, 7, 8, 11, 13, 16};
  auto size = [&] { return kSizes[pick(rng, 9)]; };
  Problem p;
  switch (pick(rng, 5)) {
    case 0: {
      const std::int64_t m = size(), n = size(), kk = size();
      Tensor A = placeholder("A", {m, kk}), B = placeholder("B", {kk, n});
      IterVar k = reduce_axis(kk, "k");
      Tensor C = compute("C", {m, n}, [&](Var y, Var x) { return sum(A(y, k) * B(k, x), {k}); }, {"y", "x"});
      p = {{A, B}, {C}, kk, {}, "matmul " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(kk)};
      break;
    }
    case 1: {
      const std::int64_t m = size(), n = size();
      Tensor A = placeholder("A", {m, n}), B = placeholder("B", {m, n}), C = placeholder("C", {n});
      Tensor T = compute("T", {m, n}, [&](Var i, Var j) { return A(i, j) + B(i, j); });
      Tensor E = compute("E", {m, n}, [&](Var i, Var j) { return T(i, j) * C(j) + A(i, j); });
      p = {{A, B, C}, {E}, 1, {{T, E}}, "chain " + std::to_string(m) + "x" + std::to_string(n)};
      break;
    }
    case 2: {
      const std::int64_t rows = size(), cols = size();
      Tensor X = placeholder("X", {rows, cols});
      IterVar j1 = reduce_axis(cols, "j1"), j2 = reduce_axis(cols, "j2");
      Tensor M = compute("M", {rows}, [&](Var i) { return max_reduce(X(i, j1), {j1}); });
      Tensor S = compute("S", {rows}, [&](Var i) { return sum(exp(X(i, j2) - M(i)), {j2}); });
      Tensor Y = compute("Y", {rows, cols}, [&](Var i, Var j) { return exp(X(i, j) - M(i)) / S(i); });
      p = {{X}, {Y}, cols, {{S, Y}}, "softmax " + std::to_string(rows) + "x" + std::to_string(cols)};
      break;
    }
    case 3: {
      const std::int64_t c = 1 + pick(rng, 3), h = 3 + pick(rng, 7), o = 1 + pick(rng, 3), kh = 1 + pick(rng, 3);
      const std::int64_t stride = 1 + pick(rng, 2), pad = pick(rng, 2);
      const std::int64_t oh = (h + 2 * pad - kh) / stride + 1;
      Tensor X = placeholder("X", {c, h, h}), W = placeholder("W", {o, c, kh, kh});
      IterVar rc = reduce_axis(c, "rc"), ry = reduce_axis(kh, "ry"), rx = reduce_axis(kh, "rx");
      Tensor Y = compute("Y", {o, oh, oh}, [&](Var oo, Var y, Var x) {
        Expr iy = y * stride + ry - pad, ix = x * stride + rx - pad;
        return sum(select(iy >= 0 && iy < h && ix >= 0 && ix < h, X(rc, iy, ix), 0.0f) * W(oo, rc, ry, rx), {rc, ry, rx});
      }, {"o", "y", "x"});
      p = {{X, W}, {Y}, c * kh * kh, {}, "conv h " + std::to_string(h) + " stride " + std::to_string(stride)};
      break;
    }
    default: {
      const std::int64_t rows = size(), cols = size();
      Tensor X = placeholder("X", {rows, cols});
      IterVar c1 = reduce_axis(cols, "c1"), c2 = reduce_axis(cols, "c2");
      const float inv = 1.0f / static_cast<float>(cols);
      Tensor Mean = compute("Mean", {rows}, [&](Var r) { return sum(X(r, c1) * inv, {c1}); });
      Tensor V = compute("V", {rows}, [&](Var r) { Expr d = X(r, c2) - Mean(r); return sum(d * d * inv, {c2}); });
      Tensor Y = compute("Y", {rows, cols}, [&](Var r, Var c) { return (X(r, c) - Mean(r)) * rsqrt(V(r) + 0.5f); });
      p = {{X}, {Y}, cols, {{V, Y}}, "layernorm " + std::to_string(rows) + "x" + std::to_string(cols)};
    }
  }
  return p;
}

/// Every computed tensor of a problem, producers first.
inline std::vector<Tensor> computes(const Problem& p) {
  std::vector<Tensor> out;
  for (const auto& t : topo_order(p.outputs))
    if (t.op()) out.push_back(t);
  return out;
}

/// Random loop transformations of one stage (all legal by construction); `log` records them.
inline void transform(Stage st, mls::Rng& rng, int steps, std::ostringstream& log) {
  for (int s = 0; s < steps; ++s) {
    const std::vector<IterVar> leaves = st.leaf_axes();
    const IterVar a = leaves[static_cast<std::size_t>(pick(rng, static_cast<std::int64_t>(leaves.size())))];
    switch (pick(rng, 6)) {
      case 0:
      case 1: {
        const std::int64_t f = 1 + pick(rng, a.extent() + 2);
        log << st.name() << ".split(" << a.name() << ", " << f << ") ";
        st.split(a, f);
        break;
      }
      case 2: {
        std::vector<IterVar> perm = leaves;
        for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[static_cast<std::size_t>(pick(rng, static_cast<std::int64_t>(i)))]);
        log << st.name() << ".reorder(";
        for (const auto& x : perm) log << x.name() << " ";
        log << ") ";
        st.reorder(perm);
        break;
      }
      case 3: {
        const std::size_t i = static_cast<std::size_t>(pick(rng, static_cast<std::int64_t>(leaves.size())));
        if (i + 1 < leaves.size() && leaves[i].kind() == leaves[i + 1].kind()) {
          log << st.name() << ".fuse(" << leaves[i].name() << ", " << leaves[i + 1].name() << ") ";
          st.fuse(leaves[i], leaves[i + 1]);
        }
        break;
      }
      case 4:
        log << st.name() << ".unroll(" << a.name() << ") ";
        st.unroll(a);
        break;
      default:
        if (a.kind() == IterKind::DataPar) {
          const bool vec = pick(rng, 2) != 0;
          log << st.name() << (vec ? ".vectorize(" : ".parallel(") << a.name() << ") ";
          vec ? st.vectorize(a) : st.parallel(a);
        }
    }
  }
}

/// One random case: its problem, its schedule and the log of the primitives applied.
struct Case {
  Problem p;
  Schedule s;
  std::string log;
};

/// The next random case from `rng` (legal by construction).
inline Case random_case(mls::Rng& rng) {
  Problem p = make_problem(rng);
  Schedule s(p.outputs);
  std::ostringstream log;
  log << p.what << ": ";
  // Phase 1: cache_write and rfactor, which need an unscheduled stage.
  std::vector<Tensor> comps = computes(p);
  const Tensor victim = comps[static_cast<std::size_t>(pick(rng, static_cast<std::int64_t>(comps.size())))];
  const int first = static_cast<int>(pick(rng, 4));
  bool rewritten = false;  // victim's stage no longer reads what its definition reads
  if (first == 0) {
    rewritten = true;
    log << "cache_write(" << victim.name() << ") ";
    comps.push_back(s.cache_write(victim));
  } else if (first == 1 && victim.op()->body.as<Reduce>()) {
    const IterVar r = victim.reduce_axis(0);
    Tensor rf;
    if (pick(rng, 2)) {
      const std::int64_t f = 1 + pick(rng, r.extent() + 1);
      auto [ro, ri] = s[victim].split(r, f);
      rf = s.rfactor(victim, pick(rng, 2) ? ri : ro);
      log << "split(" << r.name() << ", " << f << ") ";
    } else {
      rf = s.rfactor(victim, r);
    }
    log << "rfactor(" << victim.name() << ") ";
    rewritten = true;
    s[rf].parallel(s[rf].leaf_axes()[0]);
    comps.push_back(rf);
  }
  // Phase 2: loop transformations of every stage.
  for (const auto& t : comps) transform(s[t], rng, static_cast<int>(pick(rng, 4)), log);
  // Phase 3: computing a producer inside its consumer, caching an input, then transforming them.
  const bool out_rewritten = rewritten && victim.same_as(p.outputs[0]);
  if (!p.single.empty() && pick(rng, 2) && !(rewritten && victim.same_as(p.single[0].second))) {
    const auto& [prod, cons] = p.single[0];
    const auto axes = s[cons].leaf_axes();
    const IterVar at = axes[static_cast<std::size_t>(pick(rng, static_cast<std::int64_t>(axes.size())))];
    log << prod.name() << ".compute_at(" << cons.name() << ", " << at.name() << ") ";
    s[prod].compute_at(s[cons], at);
    transform(s[prod], rng, static_cast<int>(pick(rng, 3)), log);
  }
  if (pick(rng, 2) && !out_rewritten) {
    const Tensor cons = p.outputs[0];
    const Tensor in = p.inputs[0];
    const auto axes = s[cons].leaf_axes();
    const IterVar at = axes[static_cast<std::size_t>(pick(rng, static_cast<std::int64_t>(axes.size())))];
    bool reads = false;
    for_each_expr(cons.op()->body, [&](const Expr& e) {
      if (const auto* l = e.as<Load>()) reads = reads || l->buffer == in.buffer();
    });
    if (reads) {
      // Half of them stored in panels (cache_read's panel: [last / w][...][w]), the copy's dimensions
      // reversed half of those: drawn from a generator of their own (keyed by the case so far), so
      // the cases the main stream draws stay those the coverage checks were written for.
      mls::Rng side(rng.seed() + std::hash<std::string>{}(log.str()), "te_fuzz_panel");
      const std::int64_t panel = pick(side, 2) ? 1 + pick(side, 5) : 0;
      std::vector<int> layout;
      for (std::size_t d = 0; d < in.ndim(); ++d) layout.push_back(static_cast<int>(d));
      if (panel > 0 && pick(side, 2)) std::reverse(layout.begin(), layout.end());
      log << "cache_read(" << in.name() << ", " << cons.name() << ", " << at.name();
      if (panel > 0) {
        log << ", layout [";
        for (std::size_t d = 0; d < layout.size(); ++d) log << (d ? ", " : "") << layout[d];
        log << "], panel " << panel;
      }
      log << ") ";
      const Tensor copy = s.cache_read(in, s[cons], at, Scope::Local, layout, panel);
      transform(s[copy], rng, static_cast<int>(pick(rng, 3)), log);
    }
  }
  return {p, s, log.str()};
}

/// A random case of compute_with (loop nests fused), legal by construction, on sizes with 1 and
/// primes: either two row reductions of one input (a sum and a sum of squares or a max), split
/// alike (tails included) or not, the guest sharing the row loop, or the row and the column loops;
/// or column sums over blocks of rows (G(b, j) = sum over the block's rows) inside an elementwise
/// output's row loop split into the blocks, sharing its block loop, its row loop or its column
/// loop; the host's loops parallel, vectorized or unrolled at random.
inline Case random_with_case(mls::Rng& rng) {
  static const std::int64_t kSizes[] = {1, 2, 3, 5, 7, 8, 11, 13, 16};
  const std::int64_t R = kSizes[pick(rng, 9)], C = kSizes[pick(rng, 9)];
  Problem p;
  p.inputs = {placeholder("A", {R, C})};
  const Tensor A = p.inputs[0];
  std::ostringstream log;
  if (pick(rng, 2) == 0) {
    const IterVar ja = reduce_axis(C, "ja"), jb = reduce_axis(C, "jb");
    const bool max = pick(rng, 2);
    const Tensor SA = compute("SA", {R}, [&](Var i) { return sum(A(i, ja), {ja}); }, {"i"});
    const Tensor SB = compute("SB", {R}, [&](Var i) {
      return max ? max_reduce(A(i, jb), {jb}) : sum(A(i, jb) * A(i, jb), {jb});
    }, {"i"});
    p.outputs = {SA, SB};
    p.reduce = C;
    p.what = "row sum and row " + std::string(max ? "max" : "sum of squares") + " " + std::to_string(R) + "x" +
             std::to_string(C);
    Schedule s(p.outputs);
    std::vector<IterVar> share = {SA.axis(0), ja};
    if (pick(rng, 2)) {
      const std::int64_t f = 1 + pick(rng, C + 1);
      auto [ao, ai] = s[SA].split(ja, f);
      auto [bo, bi] = s[SB].split(jb, f);
      log << "SA, SB.split(j, " << f << ") ";
      share = {SA.axis(0), ao, ai};
      if (pick(rng, 2)) {
        s[SA].unroll(ai);
        log << "SA.unroll(jai) ";
      }
    }
    if (pick(rng, 2)) {
      s[SA].parallel(SA.axis(0));
      log << "SA.parallel(i) ";
    }
    const IterVar at = share[static_cast<std::size_t>(pick(rng, static_cast<std::int64_t>(share.size())))];
    log << "SB.compute_with(SA, " << at.name() << ")";
    s[SB].compute_with(s[SA], at);
    return {p, s, log.str()};
  }
  std::vector<std::int64_t> divisors;
  for (std::int64_t d = 1; d <= R; ++d)
    if (R % d == 0) divisors.push_back(d);
  const std::int64_t rb = divisors[static_cast<std::size_t>(pick(rng, static_cast<std::int64_t>(divisors.size())))];
  const Tensor Y = compute("Y", {R, C}, [&](Var i, Var j) { return A(i, j) * 2.0f + 1.0f; }, {"i", "j"});
  const IterVar rr = reduce_axis(rb, "rr");
  const Tensor G = compute("G", {R / rb, C}, [&](Var b, Var j) { return sum(A(Expr(b) * Expr(rb) + rr, j), {rr}); },
                           {"b", "j"});
  p.outputs = {Y, G};
  p.reduce = rb;
  p.what = "column sums of " + std::to_string(rb) + "-row blocks in the row loop, " + std::to_string(R) + "x" +
           std::to_string(C);
  Schedule s(p.outputs);
  auto [io, ii] = s[Y].split(Y.axis(0), rb);
  log << "Y.split(i, " << rb << ") ";
  if (pick(rng, 2)) {
    s[Y].parallel(io);
    log << "Y.parallel(io) ";
  }
  if (pick(rng, 2)) {
    s[Y].vectorize(Y.axis(1));
    log << "Y.vectorize(j) ";
  }
  s[G].reorder({G.axis(0), rr, G.axis(1)});
  const std::vector<IterVar> share = {io, ii, Y.axis(1)};
  const IterVar at = share[static_cast<std::size_t>(pick(rng, 3))];
  log << "G.compute_with(Y, " << at.name() << ")";
  s[G].compute_with(s[Y], at);
  return {p, s, log.str()};
}

}  // namespace kernels_test::fuzz
