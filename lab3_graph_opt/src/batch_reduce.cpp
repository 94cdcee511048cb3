// The "batch-reduce" pass: what a training graph's backward reduces over the batch, done by the
// GEMM itself (issue 29: compile's GPT step). Not a student file.
#include "mls/graph_opt/passes.hpp"
#include "pass_util.hpp"

namespace mls::graph_opt {

namespace {
using detail::known;
/// A plain a^T g product: gemm with trans_a only (no bias, no activation) or a matmul of a
/// swapped-last-two permute; sets `a` and `g` to the stored operands.
bool transposed_product(const Node& n, Var& a, Var& g) {
  if (n.op == kGemm) {
    if (n.inputs.size() != 2 || n.attrs.i("act") != 0 || n.attrs.i("trans_a") != 1 || n.attrs.i("trans_b") != 0) return false;
    a = Var(n.inputs[0]);
    g = Var(n.inputs[1]);
    return true;
  }
  return false;
}
}  // namespace

int fold_batch_reduction(Program& p) {
  int rewrites = 0;
  const auto uses = use_counts(p);
  auto own = detail::owners(p);
  for (Node* n : p.schedule()) {
    if (n->op != Op::SumLike) continue;
    const Node& x = *n->inputs[0];
    if (!known(x.shape) || !known(n->shape)) continue;
    // sum_like to x's own shape reduces nothing.
    if (x.shape == n->shape && x.dtype == n->dtype) {
      p.replace(Var(own.at(n)), Var(n->inputs[0]));
      ++rewrites;
      continue;
    }
    // sum over the batch dims of a_b^T g_b (a: [batch..., T, K], g: [batch..., T, N]) to [K, N]:
    // one gemm of [B T, K]^T [B T, N], the batch folded into the reduction.
    Var a, g;
    auto u = uses.find(&x);
    if (u == uses.end() || u->second != 1 || !transposed_product(x, a, g)) continue;
    const Shape& sa = a.shape();
    const Shape& sg = g.shape();
    if (n->shape.size() != 2 || sa.size() < 3 || sa.size() != sg.size() || !known(sa) || !known(sg) ||
        a.dtype() != g.dtype() || a.dtype() != n->dtype)
      continue;
    bool same_batch = true;
    std::int64_t rows = 1;
    for (std::size_t d = 0; d + 1 < sa.size(); ++d) {
      same_batch = same_batch && (d + 2 >= sa.size() ? true : sa[d] == sg[d]);
      rows *= sa[d];
    }
    if (!same_batch || sa[sa.size() - 2] != sg[sg.size() - 2] || n->shape[0] != sa.back() || n->shape[1] != sg.back()) continue;
    const Var a2 = autodiff::reshape(a, {rows, sa.back()});
    const Var g2 = autodiff::reshape(g, {rows, sg.back()});
    const Var y = p.make(kGemm, {a2, g2}, autodiff::Attrs().set("trans_a", std::int64_t{1}).set("trans_b", std::int64_t{0}).set("act", std::int64_t{0}));
    p.replace(Var(own.at(n)), y);
    ++rewrites;
  }
  prune(p);
  return rewrites;
}

}  // namespace mls::graph_opt
