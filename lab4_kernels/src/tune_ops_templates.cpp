// The operator templates (mls/kernels/tune_ops.hpp): each a tensor expression and a schedule whose
// primitives the knobs choose, lowered, and compiled through te::compile like any schedule.
//
// Row reductions vectorize through lane-wise partial results (row_reduce): the partials P(i, l) of
// W = acc * lanes lanes are a local tile (set_scope) computed at the reduction's row, their loop over
// the row's W-wide steps (jo) outside the vectorized lanes (l), optionally unrolled; the row's result
// adds up P(i, :) and reduces the row's last cols % W values in a scalar loop of its own. A row
// operator's output loop runs over rows (parallel at more than one thread) and vectorizes its
// columns; with `fuse` every row statistic is computed at that row loop (compute_at: the row is read
// from memory once and from cache after), with `hold` an intermediate row is a local tile computed
// once at the row loop and read by everything after it there.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "mls/common/error.hpp"
#include "mls/kernels/tune_ops.hpp"

namespace mls::kernels::tune {

namespace {

using te::Expr;
using te::IterVar;
using te::Tensor;
using te::Var;
using ExprFn = std::function<Expr(const Expr& i, const Expr& j)>;

/// A row reduction written to vectorize (see the top of the file).
struct RowReduce {
  Tensor partial;  ///< (rows, W) lane-wise partial results; undefined: one scalar loop
  Tensor part_sum; ///< (rows,) the reduction of the partials
  Tensor tail;     ///< (rows,) the reduction of the row's last cols % W values; undefined when none
  Tensor total;    ///< (rows,) the row's result: part_sum, or part_sum combined with tail
  IterVar jo;      ///< the partials' loop over the W-wide steps of the row
  long steps = 0;  ///< cols / W
};

RowReduce row_reduce(const std::string& name, long rows, long cols, long width, te::BinaryOp op, const ExprFn& f) {
  const te::Combiner comb{op, op == te::BinaryOp::Add ? 0.0f : -std::numeric_limits<float>::infinity()};
  RowReduce r;
  if (width < 2 || cols / width < 1) {
    const IterVar j = te::reduce_axis(cols, "j");
    r.total = r.part_sum = te::compute(
        name, {rows}, [&](Var i) { return te::reduce(comb, f(i, j), {j}); }, {"i"});
    return r;
  }
  r.steps = cols / width;
  const long rest = cols % width, start = r.steps * width;
  r.jo = te::reduce_axis(r.steps, "jo");
  r.partial = te::compute(
      name + "_lanes", {rows, width},
      [&](Var i, Var l) { return te::reduce(comb, f(i, Expr(r.jo) * Expr(width) + l), {r.jo}); }, {"i", "l"});
  const IterVar u = te::reduce_axis(width, "u");
  r.part_sum = te::compute(
      rest ? name + "_main" : name, {rows}, [&](Var i) { return te::reduce(comb, r.partial(i, u), {u}); }, {"i"});
  r.total = r.part_sum;
  if (rest) {
    const IterVar t = te::reduce_axis(rest, "t");
    r.tail = te::compute(
        name + "_tail", {rows}, [&](Var i) { return te::reduce(comb, f(i, Expr(t) + Expr(start)), {t}); }, {"i"});
    r.total = te::compute(
        name, {rows},
        [&](Var i) {
          return op == te::BinaryOp::Add ? r.part_sum(i) + r.tail(i) : te::max(r.part_sum(i), r.tail(i));
        },
        {"i"});
  }
  return r;
}

/// The schedule of a row reduction's own stages (its total is placed by the caller): the partials a
/// local tile computed at their sum's row (unless `attach` is false: the caller places them), jo
/// (split by `unroll`, the inner part unrolled) outside the vectorized lanes; the main part and the
/// tail computed at the total's row.
void schedule_row_reduce(te::Schedule& s, const RowReduce& r, int unroll, bool attach = true) {
  if (!r.partial.defined()) return;
  te::Stage p = s[r.partial];
  p.set_scope(te::Scope::Local);
  const IterVar i = r.partial.axis(0), l = r.partial.axis(1);
  if (unroll > 1 && r.steps > 1) {
    auto [outer, inner] = p.split(r.jo, unroll);
    p.reorder({i, outer, inner, l});
    p.unroll(inner);
  } else {
    p.reorder({i, r.jo, l});
  }
  p.vectorize(l);
  if (attach) p.compute_at(s[r.part_sum], r.part_sum.axis(0));
  if (r.tail.defined()) {
    s[r.part_sum].compute_at(s[r.total], r.total.axis(0));
    s[r.tail].compute_at(s[r.total], r.total.axis(0));
  }
}

/// Two row sums of one row in one pass (knob onepass): the lane-wise partials of both, PA and PB,
/// are local tiles computed at the row of one stage of both results, `both`(i, w) = the sum of the
/// partials of w (0: A, 1: B) plus its tail (the row's last cols % W values, in a scalar loop of its
/// own), and PB shares every loop of PA (compute_with): each W-wide step of the row reads the row
/// once and updates both.
struct RowReduce2 {
  Tensor pa, pb;          ///< (rows, W) the partials
  Tensor tail_a, tail_b;  ///< (rows,) undefined when cols % W == 0
  Tensor sum;             ///< (rows, 2) the sums of the partials
  Tensor both;            ///< (rows, 2) the two results: sum, plus the tails when there are any
  IterVar ja, jb;         ///< the partials' loops over the W-wide steps of the row
  long steps = 0;
};

RowReduce2 row_reduce2(const std::string& name, long rows, long cols, long width, const ExprFn& fa,
                       const ExprFn& fb) {
  RowReduce2 r;
  r.steps = cols / width;
  const long rest = cols % width, start = r.steps * width;
  r.ja = te::reduce_axis(r.steps, "jo");
  r.jb = te::reduce_axis(r.steps, "jo");
  r.pa = te::compute(
      name + "_a_lanes", {rows, width},
      [&](Var i, Var l) { return te::sum(fa(i, Expr(r.ja) * Expr(width) + l), {r.ja}); }, {"i", "l"});
  r.pb = te::compute(
      name + "_b_lanes", {rows, width},
      [&](Var i, Var l) { return te::sum(fb(i, Expr(r.jb) * Expr(width) + l), {r.jb}); }, {"i", "l"});
  if (rest) {
    const IterVar ta = te::reduce_axis(rest, "t"), tb = te::reduce_axis(rest, "t");
    r.tail_a = te::compute(
        name + "_a_tail", {rows}, [&](Var i) { return te::sum(fa(i, Expr(ta) + Expr(start)), {ta}); }, {"i"});
    r.tail_b = te::compute(
        name + "_b_tail", {rows}, [&](Var i) { return te::sum(fb(i, Expr(tb) + Expr(start)), {tb}); }, {"i"});
  }
  const IterVar u = te::reduce_axis(width, "u");
  r.both = r.sum = te::compute(
      rest ? name + "_main" : name, {rows, 2},
      [&](Var i, Var w) { return te::sum(te::select(te::eq(w, 0), r.pa(i, u), r.pb(i, u)), {u}); }, {"i", "w"});
  if (rest)  // the tails added after the partials' sum
    r.both = te::compute(
        name, {rows, 2},
        [&](Var i, Var w) { return r.sum(i, w) + te::select(te::eq(w, 0), r.tail_a(i), r.tail_b(i)); }, {"i", "w"});
  return r;
}

/// The schedule of row_reduce2's stages (`both` placed by the caller): the partials local tiles at
/// the row of the partials' sum, their loops as schedule_row_reduce's, PB computed with PA; the
/// tails and the partials' sum at the row of `both`.
void schedule_row_reduce2(te::Schedule& s, const RowReduce2& r, int unroll) {
  const Tensor& sum = r.sum;
  for (const Tensor& p : {r.pa, r.pb}) {
    te::Stage st = s[p];
    st.set_scope(te::Scope::Local);
    const IterVar i = p.axis(0), l = p.axis(1), jo = st.leaf_axes()[2];
    if (unroll > 1 && r.steps > 1) {
      auto [outer, inner] = st.split(jo, unroll);
      st.reorder({i, outer, inner, l});
      st.unroll(inner);
    } else {
      st.reorder({i, jo, l});
    }
    st.vectorize(l);
    st.compute_at(s[sum], sum.axis(0));
  }
  s[r.pb].compute_with(s[r.pa], r.pa.axis(1));
  if (r.tail_a.defined()) {
    s[sum].compute_at(s[r.both], r.both.axis(0));
    s[r.tail_a].compute_at(s[r.both], r.both.axis(0));
    s[r.tail_b].compute_at(s[r.both], r.both.axis(0));
  }
}

/// The output of a row operator: rows parallel (knob parallel), columns vectorized.
void schedule_rows_out(te::Stage st, const Tensor& t, int parallel) {
  if (parallel) st.parallel(t.axis(0));
  st.vectorize(t.axis(1));
}

/// A row tile (hold): computed at the output's row loop, local, vectorized.
void schedule_tile(te::Schedule& s, const Tensor& tile, const Tensor& out) {
  s[tile].compute_at(s[out], out.axis(0));
  s[tile].set_scope(te::Scope::Local);
  s[tile].vectorize(tile.axis(1));
}

/// A row statistic of its own pass over all rows (fuse 0): rows parallel (knob parallel).
void schedule_own_pass(te::Schedule& s, const Tensor& t, int parallel) {
  if (parallel) s[t].parallel(t.axis(0));
}

struct Knobs {
  int lanes, acc, fuse, hold, unroll, parallel;
  long width;
};
Knobs row_knobs(const OpKnobs& k) {
  Knobs o{k.at("lanes"), k.at("acc"), k.at("fuse"), k.at("hold"), k.at("unroll"), k.at("parallel"), 0};
  o.width = static_cast<long>(o.acc) * o.lanes;
  return o;
}

/// A held row tile and a row reduction of it in one pass (softmax's expsum, layernorm_fwd's sqsum):
/// the tile split as the reduction's partials are (jo, l; jo's inner part unrolled as theirs), the
/// partials computed with it (compute_with at l), the tile local, computed at the output's row.
void schedule_split_tile(te::Schedule& s, const Tensor& tile, const RowReduce& r, const Tensor& out, const Knobs& kn) {
  te::Stage e = s[tile];
  auto [jo, l] = e.split(tile.axis(1), kn.width, "jo", "l");
  if (kn.unroll > 1 && r.steps > 1) {
    auto [outer, inner] = e.split(jo, kn.unroll);
    e.unroll(inner);
  }
  e.vectorize(l);
  s[r.partial].compute_with(e, l);
  e.compute_at(s[out], out.axis(0));
  e.set_scope(te::Scope::Local);
}

// ---- softmax -------------------------------------------------------------------------------------

te::Schedule softmax(const OpProblem& p, const OpKnobs& k, std::vector<Tensor>& args) {
  const Knobs kn = row_knobs(k);
  const long R = p.rows, C = p.cols;
  const Tensor X = te::placeholder("x", {R, C});
  const RowReduce M = row_reduce("row_max", R, C, kn.width, te::BinaryOp::Max, [&](const Expr& i, const Expr& j) {
    return X(i, j);
  });
  Tensor E;
  if (kn.hold)
    E = te::compute("e", {R, C}, [&](Var i, Var j) { return te::exp(X(i, j) - M.total(i)); }, {"i", "j"});
  auto e = [&](const Expr& i, const Expr& j) { return kn.hold ? E(i, j) : te::exp(X(i, j) - M.total(i)); };
  const RowReduce S = row_reduce("row_sum", R, C, kn.width, te::BinaryOp::Add, e);
  const Tensor Rinv = te::compute("rinv", {R}, [&](Var i) { return 1.0f / S.total(i); }, {"i"});
  const Tensor Y = te::compute("y", {R, C}, [&](Var i, Var j) { return e(i, j) * Rinv(i); }, {"i", "j"});
  te::Schedule s({Y});
  schedule_rows_out(s[Y], Y, kn.parallel);
  s[Rinv].compute_at(s[Y], Y.axis(0));
  s[S.total].compute_at(s[Rinv], Rinv.axis(0));
  // expsum: the sum's partials computed with the held row's exp (compute_with), which is split as
  // they are: one pass writes exp(x - max) and adds it up (op_plan: hold, partials, no tail).
  const bool expsum = k.at("expsum") && kn.hold && S.partial.defined() && !S.tail.defined();
  schedule_row_reduce(s, S, kn.unroll, !expsum);
  if (expsum) {
    schedule_split_tile(s, E, S, Y, kn);
  } else if (kn.hold) {
    schedule_tile(s, E, Y);
  }
  if (kn.fuse)  // its readers are all computed inside the row loop by now
    s[M.total].compute_at(kn.hold ? s[E] : s[Y], kn.hold ? E.axis(0) : Y.axis(0));
  else
    schedule_own_pass(s, M.total, kn.parallel);
  schedule_row_reduce(s, M, kn.unroll);
  args = {X, Y};
  return s;
}

// ---- layernorm forward -------------------------------------------------------------------------

te::Schedule layernorm_fwd(const OpProblem& p, const OpKnobs& k, std::vector<Tensor>& args) {
  const Knobs kn = row_knobs(k);
  const bool hold = kn.hold && kn.fuse;
  const long R = p.rows, C = p.cols;
  const float inv = 1.0f / static_cast<float>(C);
  const Tensor X = te::placeholder("x", {R, C}), W = te::placeholder("weight", {C}), B = te::placeholder("bias", {C});
  const RowReduce Sum = row_reduce("row_sum", R, C, kn.width, te::BinaryOp::Add, [&](const Expr& i, const Expr& j) {
    return X(i, j);
  });
  const Tensor Mean = te::compute("mean", {R}, [&](Var i) { return Sum.total(i) * inv; }, {"i"});
  Tensor D;
  if (hold) D = te::compute("xc", {R, C}, [&](Var i, Var j) { return X(i, j) - Mean(i); }, {"i", "j"});
  auto d = [&](const Expr& i, const Expr& j) { return hold ? D(i, j) : X(i, j) - Mean(i); };
  const RowReduce SS = row_reduce("row_sumsq", R, C, kn.width, te::BinaryOp::Add, [&](const Expr& i, const Expr& j) {
    const Expr v = d(i, j);
    return v * v;
  });
  const Tensor Rstd = te::compute("rstd", {R}, [&](Var i) { return te::rsqrt(SS.total(i) * inv + p.eps); }, {"i"});
  const Tensor Y = te::compute(
      "out", {R, C}, [&](Var i, Var j) { return d(i, j) * Rstd(i) * W(j) + B(j); }, {"i", "j"});
  te::Schedule s({Y, Mean, Rstd});
  schedule_rows_out(s[Y], Y, kn.parallel);
  if (kn.fuse) {
    s[Rstd].compute_at(s[Y], Y.axis(0));
    s[SS.total].compute_at(s[Rstd], Rstd.axis(0));
    // sqsum: the squares' partials computed with the held row x - mean (compute_with), which is
    // split as they are: one pass writes the centered row and adds up its squares (op_plan: hold,
    // partials, no tail), as softmax's expsum.
    const bool sqsum = k.at("sqsum") && hold && SS.partial.defined() && !SS.tail.defined();
    schedule_row_reduce(s, SS, kn.unroll, !sqsum);
    if (sqsum)
      schedule_split_tile(s, D, SS, Y, kn);
    else if (hold)
      schedule_tile(s, D, Y);
    // An output: every row's mean is computed at its row, inside its one reader there.
    s[Mean].compute_at(hold ? s[D] : s[Y], hold ? D.axis(0) : Y.axis(0));
  } else {
    schedule_own_pass(s, Mean, kn.parallel);
    schedule_own_pass(s, Rstd, kn.parallel);
    s[SS.total].compute_at(s[Rstd], Rstd.axis(0));
    schedule_row_reduce(s, SS, kn.unroll);
  }
  s[Sum.total].compute_at(s[Mean], Mean.axis(0));
  schedule_row_reduce(s, Sum, kn.unroll);
  args = {X, W, B, Y, Mean, Rstd};
  return s;
}

// ---- layernorm backward ------------------------------------------------------------------------

/// The row blocks of the dweight/dbias partial sums: `blocks` blocks of rb rows (the last one
/// shorter when rb does not divide the rows).
struct RowBlocks {
  long rb = 1, blocks = 1;
};
RowBlocks row_blocks(const OpProblem& p, int blocks) {
  RowBlocks b;
  const long want = std::min<long>(blocks, p.rows);
  b.rb = (p.rows + want - 1) / want;
  b.blocks = (p.rows + b.rb - 1) / b.rb;
  return b;
}

/// dweight and dbias: partial column sums over blocks of rows, GW(b, j) of dout * xhat and GB(b, j)
/// of dout (rows past the last are 0), each with its loops (b, rr, j), then the sums over the blocks.
void layernorm_bwd_columns(const OpProblem& p, const OpKnobs& k, const std::vector<Tensor>& in, Tensor& dW,
                           Tensor& dB, std::vector<Tensor>& outs) {
  const long R = p.rows, C = p.cols;
  const Tensor &dw_in = in[1], &db_in = in[2], &dout = in[3], &X = in[4], &Mean = in[6], &Rstd = in[7];
  const RowBlocks bl = row_blocks(p, k.at("blocks"));
  const long rb = bl.rb, blocks = bl.blocks;
  auto part = [&](const char* name, bool xhat) {
    const IterVar rr = te::reduce_axis(rb, "rr");
    return te::compute(
        name, {blocks, C},
        [&](Var b, Var j) {
          const Expr r = Expr(b) * Expr(rb) + rr;
          Expr v = xhat ? dout(r, j) * ((X(r, j) - Mean(r)) * Rstd(r)) : dout(r, j);
          if (blocks * rb != R) v = te::select(r < Expr(R), v, Expr(0.0f));
          return te::sum(v, {rr});
        },
        {"b", "j"});
  };
  const Tensor GW = part("dweight_part", true), GB = part("dbias_part", false);
  const IterVar b1 = te::reduce_axis(blocks, "b"), b0 = te::reduce_axis(blocks, "b");
  const Tensor WS = te::compute("dweight_sum", {C}, [&](Var j) { return te::sum(GW(b1, j), {b1}); }, {"j"});
  const Tensor BS = te::compute("dbias_sum", {C}, [&](Var j) { return te::sum(GB(b0, j), {b0}); }, {"j"});
  dW = te::compute("dweight", {C}, [&](Var j) { return dw_in(j) + WS(j); }, {"j"});
  dB = te::compute("dbias", {C}, [&](Var j) { return db_in(j) + BS(j); }, {"j"});
  outs = {GW, GB, WS, BS};
}

te::Schedule layernorm_bwd(const OpProblem& p, const OpKnobs& k, std::vector<Tensor>& args) {
  const Knobs kn = row_knobs(k);
  const bool hold = kn.hold && kn.fuse;
  const bool onepass = k.at("onepass") && kn.width >= 2 && p.cols / kn.width >= 1;
  const bool colfuse = k.at("colfuse");  // op_plan: only where the row blocks divide the rows
  const long R = p.rows, C = p.cols;
  const float inv = 1.0f / static_cast<float>(C);
  const std::vector<Tensor> in = {
      te::placeholder("dinp_in", {R, C}), te::placeholder("dweight_in", {C}), te::placeholder("dbias_in", {C}),
      te::placeholder("dout", {R, C}),    te::placeholder("x", {R, C}),       te::placeholder("weight", {C}),
      te::placeholder("mean", {R}),       te::placeholder("rstd", {R})};
  const Tensor &dinp_in = in[0], &dout = in[3], &X = in[4], &W = in[5], &Mean = in[6], &Rstd = in[7];
  Tensor N, G;
  if (hold) {
    N = te::compute("xhat", {R, C}, [&](Var i, Var j) { return (X(i, j) - Mean(i)) * Rstd(i); }, {"i", "j"});
    G = te::compute("dnorm", {R, C}, [&](Var i, Var j) { return W(j) * dout(i, j); }, {"i", "j"});
  }
  auto xh = [&](const Expr& i, const Expr& j) { return hold ? N(i, j) : (X(i, j) - Mean(i)) * Rstd(i); };
  auto dn = [&](const Expr& i, const Expr& j) { return hold ? G(i, j) : W(j) * dout(i, j); };
  auto dnxh = [&](const Expr& i, const Expr& j) { return dn(i, j) * xh(i, j); };
  // The row means of dnorm and dnorm * xhat: two row reductions, or one of both (onepass).
  RowReduce SA, SB;
  RowReduce2 S2;
  std::vector<Tensor> means;  // what the output reads per row: CA, CB or CM
  Tensor CA, CB, CM;
  if (onepass) {
    S2 = row_reduce2("sums_dnorm", R, C, kn.width, dn, dnxh);
    CM = te::compute("means_dnorm", {R, 2}, [&](Var i, Var w) { return S2.both(i, w) * inv; }, {"i", "w"});
    means = {CM};
  } else {
    SA = row_reduce("sum_dnorm", R, C, kn.width, te::BinaryOp::Add, dn);
    SB = row_reduce("sum_dnorm_xhat", R, C, kn.width, te::BinaryOp::Add, dnxh);
    CA = te::compute("mean_dnorm", {R}, [&](Var i) { return SA.total(i) * inv; }, {"i"});
    CB = te::compute("mean_dnorm_xhat", {R}, [&](Var i) { return SB.total(i) * inv; }, {"i"});
    means = {CA, CB};
  }
  auto ca = [&](const Expr& i) { return onepass ? CM(i, 0) : CA(i); };
  auto cb = [&](const Expr& i) { return onepass ? CM(i, 1) : CB(i); };
  const Tensor dX = te::compute(
      "dinp", {R, C},
      [&](Var i, Var j) { return dinp_in(i, j) + Rstd(i) * (dn(i, j) - ca(i) - xh(i, j) * cb(i)); }, {"i", "j"});
  Tensor dW, dB;
  std::vector<Tensor> col;
  layernorm_bwd_columns(p, k, in, dW, dB, col);
  const Tensor &GW = col[0], &GB = col[1];
  te::Schedule s({dX, dW, dB});
  // The output's rows: one loop (row), or blocks of the column partials' rows (colfuse: io, row).
  te::Stage out = s[dX];
  IterVar row = dX.axis(0);
  if (colfuse) {
    IterVar io;
    std::tie(io, row) = out.split(dX.axis(0), row_blocks(p, k.at("blocks")).rb, "io", "i");
    if (kn.parallel) out.parallel(io);
  } else if (kn.parallel) {
    out.parallel(row);
  }
  out.vectorize(dX.axis(1));
  for (const Tensor& c : means) {
    if (kn.fuse)
      s[c].compute_at(out, row);
    else
      schedule_own_pass(s, c, kn.parallel);
  }
  if (onepass) {
    s[S2.both].compute_at(s[CM], CM.axis(0));
    schedule_row_reduce2(s, S2, kn.unroll);
  } else {
    s[SA.total].compute_at(s[CA], CA.axis(0));
    s[SB.total].compute_at(s[CB], CB.axis(0));
    schedule_row_reduce(s, SA, kn.unroll);
    schedule_row_reduce(s, SB, kn.unroll);
  }
  if (hold) {
    for (const Tensor& t : {N, G}) {
      s[t].compute_at(out, row);
      s[t].set_scope(te::Scope::Local);
      s[t].vectorize(t.axis(1));
    }
  }
  // The column partials: rows of a block in order, the columns vectorized inside each row; inside
  // the output's row loop (colfuse: the row read once for both), else a pass of their own (blocks
  // parallel), dbias's computed with dweight's.
  for (const Tensor& g : {GW, GB}) {
    te::Stage st = s[g];
    st.reorder({g.axis(0), st.leaf_axes().back(), g.axis(1)});
    st.vectorize(g.axis(1));
  }
  if (colfuse) {
    s[GW].compute_with(out, dX.axis(1));
    s[GB].compute_with(out, dX.axis(1));
  } else {
    if (kn.parallel) s[GW].parallel(GW.axis(0));
    s[GB].compute_with(s[GW], GW.axis(1));
  }
  for (const auto& [o, sum] : {std::pair{dW, col[2]}, std::pair{dB, col[3]}}) {
    s[o].vectorize(o.axis(0));
    s[sum].compute_at(s[o], o.axis(0));
  }
  args = in;
  args.insert(args.end(), {dX, dW, dB});
  return s;
}

// ---- E = D + (A + B) * C -------------------------------------------------------------------------

te::Schedule add_mul_add(const OpProblem& p, const OpKnobs& k, std::vector<Tensor>& args) {
  const long n = p.n;
  const Tensor A = te::placeholder("a", {n}), B = te::placeholder("b", {n}), C = te::placeholder("c", {n}),
               D = te::placeholder("d", {n});
  const Tensor E = te::compute("e", {n}, [&](Var i) { return D(i) + (A(i) + B(i)) * C(i); }, {"i"});
  te::Schedule s({E});
  te::Stage st = s[E];
  const long block = std::min<long>(k.at("block"), n), vec = static_cast<long>(k.at("lanes")) * k.at("unroll");
  auto [o, r] = st.split(E.axis(0), block);
  if (k.at("parallel")) st.parallel(o);
  if (vec < block) {
    auto [r1, r2] = st.split(r, vec);
    st.vectorize(r2);
  } else {
    st.vectorize(r);
  }
  args = {A, B, C, D, E};
  return s;
}

// ---- conv2d ----------------------------------------------------------------------------------------

te::Schedule conv2d(const OpProblem& p, const OpKnobs& k, std::vector<Tensor>& args) {
  const long pad = p.pad, s_ = p.stride, hp = p.h + 2 * pad, wp = p.w + 2 * pad;
  const bool copy = k.at("pad_copy") && pad > 0;
  const Tensor X = te::placeholder("x", {p.n, p.c, p.h, p.w}), W = te::placeholder("w", {p.k, p.c, p.kh, p.kh});
  Tensor XP;
  auto padded = [&](const Expr& b, const Expr& c, const Expr& y, const Expr& x) {  // x[b, c, y - pad, x - pad] or 0
    if (pad == 0) return X(b, c, y, x);
    return te::select(y >= Expr(pad) && y < Expr(p.h + pad) && x >= Expr(pad) && x < Expr(p.w + pad),
                      X(b, c, y - Expr(pad), x - Expr(pad)), Expr(0.0f));
  };
  if (copy)
    XP = te::compute(
        "xpad", {p.n, p.c, hp, wp}, [&](Var b, Var c, Var y, Var x) { return padded(b, c, y, x); },
        {"b", "c", "y", "x"});
  const IterVar rc = te::reduce_axis(p.c, "rc"), ry = te::reduce_axis(p.kh, "ry"), rx = te::reduce_axis(p.kh, "rx");
  const Tensor Y = te::compute(
      "y", {p.n, p.k, p.oh(), p.ow()},
      [&](Var b, Var o, Var y, Var x) {
        const Expr iy = Expr(y) * Expr(s_) + ry, ix = Expr(x) * Expr(s_) + rx;
        return te::sum((copy ? XP(b, rc, iy, ix) : padded(b, rc, iy, ix)) * W(o, rc, ry, rx), {rc, ry, rx});
      },
      {"b", "o", "oy", "ox"});
  te::Schedule s({Y});
  te::Stage st = s[Y];
  const long ob = std::min<long>(k.at("ob"), p.k);
  IterVar oo = Y.axis(1), oi;
  if (ob > 1) std::tie(oo, oi) = st.split(Y.axis(1), ob);
  std::vector<IterVar> order = {Y.axis(0), oo};
  if (k.at("order") == 1) {
    order.insert(order.end(), {Y.axis(2), rc, ry, rx});
    if (ob > 1) order.push_back(oi);
    order.push_back(Y.axis(3));
    st.reorder(order);
    st.vectorize(Y.axis(3));
  } else {
    if (ob > 1) order.push_back(oi);
    order.insert(order.end(), {Y.axis(2), Y.axis(3), rc, ry, rx});
    st.reorder(order);
  }
  if (k.at("parallel")) st.parallel(oo);
  if (copy) {
    if (k.at("parallel")) s[XP].parallel(XP.axis(1));
    s[XP].vectorize(XP.axis(3));
  }
  args = {X, W, Y};
  return s;
}

}  // namespace

OpInstance instantiate_op(const OpProblem& p, const OpKnobs& k, std::string name) {
  check_problem(p);
  check_op_knobs(p, k);
  const OpKnobs plan = op_plan(p, k);
  std::vector<Tensor> args;
  auto build = [&]() -> te::Schedule {
    switch (p.kind) {
      case OpKind::Softmax: return softmax(p, plan, args);
      case OpKind::LayerNormFwd: return layernorm_fwd(p, plan, args);
      case OpKind::LayerNormBwd: return layernorm_bwd(p, plan, args);
      case OpKind::AddMulAdd: return add_mul_add(p, plan, args);
      case OpKind::Conv2d: break;
    }
    return conv2d(p, plan, args);
  };
  te::Schedule s = build();
  if (name.empty()) {
    name = op_name(p.kind) + "_" + to_string(p);
    for (const auto& [knob, v] : plan) name += "_" + knob.substr(0, 2) + std::to_string(v);
  }
  te::LoweredFunc f = te::lower(s, name);
  te::CodegenOptions cg;
  cg.vector_lanes = k.at("lanes");
  cg.fast_exp = true;
  cg.fast_exp2 = plan.count("exp2") && plan.at("exp2");  // softmax: the hand-written kernels' exp2 polynomial
  cg.fast_reduce = true;  // the partials' sums in lanes and trees, max in one vmaxps (codegen.hpp)
  cg.reduce_chains = 4;   // acc 0's row loop (and the partials' sum): 4 accumulators, not one chain
  if (plan.count("prefetch") && plan.at("prefetch") > 0)  // the rows `prefetch` rows ahead, into L1
    for (const auto& a : op_args(p))
      if (!a.output && a.shape.size() == 2)
        cg.prefetch.emplace_back(a.name, static_cast<std::int64_t>(plan.at("prefetch")) * p.cols);
  if (plan.count("spread"))  // each later pass over a row prefetches `spread` rows further
    cg.prefetch_pass_step = static_cast<std::int64_t>(plan.at("spread")) * p.cols;
  if (plan.count("pcache")) cg.prefetch_level = plan.at("pcache");  // into L1 or L2
  if (plan.count("stream") && plan.at("stream"))  // the big output (y, out, dinp, e): written once
    for (const auto& a : op_args(p))
      if (a.output) {
        cg.stream_stores = {a.name};
        break;
      }
  return OpInstance{p, k, std::move(args), std::move(s), std::move(f), cg};
}

}  // namespace mls::kernels::tune
