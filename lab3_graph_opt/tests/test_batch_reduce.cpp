// The batch-reduce pass, gemm's forward into a given buffer (batch dims folded into M), and the
// planned executor computing values in their buffers and handing its outputs out (issue 29:
// compile's GPT step).
#include "helpers.hpp"

#include "mls/common/rng.hpp"

using namespace graph_opt_test;

TEST_CASE("batch-reduce folds a weight gradient's sum over the batch into one gemm", "[lab3][passes]") {
  Program p;
  const Var x = p.input("x", {3, 4, 8, 6}), g = p.input("g", {3, 4, 8, 5}), w = p.input("w", {6, 5});
  const Var y = p.input("y", {3, 4, 8, 5});
  // The backward of x @ w for w (lab 2's matmul rule), and a sum_like to a value's own shape.
  p.output(autodiff::sum_like(autodiff::matmul(autodiff::transpose(x), g), w));
  p.output(p.make(Op::SumLike, {autodiff::exp(y), g}) * 2.0);  // (lab 2's sum_like(a, like) makes none)
  Program q = clone(p);
  REQUIRE(fold_transpose_into_matmul(q) == 1);  // the gemm with trans_a that batch-reduce looks for
  auto [r, n] = apply_checked(q, fold_batch_reduction);
  MLS_CHECK_EQ(n, 2);
  MLS_CHECK_EQ(count_op(r, Op::SumLike), 0);
  MLS_CHECK_EQ(count_op(r, kGemm), 1);
  for (const NodePtr& node : r.graph->nodes())
    if (node->op == kGemm) {
      MLS_CHECK_EQ(shape_str(node->inputs[0]->shape), "[96, 6]");  // B T rows: the batch in the reduction
      MLS_CHECK_EQ(shape_str(node->inputs[1]->shape), "[96, 5]");
    }
  // Left alone: a broadcast batch (g shared by every batch), a product with a bias, a 3-D target.
  Program s;
  const Var a = s.input("a", {2, 8, 6}), b = s.input("b", {8, 5}), bias = s.input("bias", {5});
  const Var l = s.input("l", {6, 5}), l3 = s.input("l3", {1, 6, 5});
  s.output(autodiff::sum_like(s.make(kGemm, {a, b}, autodiff::Attrs().set("trans_a", std::int64_t{1}).set("trans_b", std::int64_t{0}).set("act", std::int64_t{0})), l));
  s.output(autodiff::sum_like(s.make(kGemm, {a, autodiff::expand(b, {2, 8, 5}), bias}, autodiff::Attrs().set("trans_a", std::int64_t{1}).set("trans_b", std::int64_t{0}).set("act", std::int64_t{0})), l));
  s.output(autodiff::sum_like(s.make(kGemm, {a, autodiff::expand(b, {2, 8, 5})}, autodiff::Attrs().set("trans_a", std::int64_t{1}).set("trans_b", std::int64_t{0}).set("act", std::int64_t{0})), l3));
  auto [t, m] = apply_checked(s, fold_batch_reduction);
  MLS_CHECK_EQ(m, 0);
  MLS_CHECK_EQ(count_op(t, Op::SumLike), 3);
}

TEST_CASE("gemm folds a shared weight's batch into M and reads transposes where they lie, on random shapes", "[lab3][passes]") {
  Rng rng(29, "gemm-into");
  for (int trial = 0; trial < 12; ++trial) {
    INFO("trial " << trial);
    const std::int64_t B = rng.randint(1, 4), T = rng.randint(1, 9), K = rng.randint(1, 17), N = rng.randint(1, 13);
    const bool ta = trial % 2, tb = (trial / 2) % 2, shared = (trial / 4) % 2, bias = trial % 3 == 0;
    const std::int64_t act = trial % 3;
    // matmul of transposed views [+ bias] [relu / gelu]: fold-transpose and epilogue make it one
    // gemm node (trans flags, bias, activation), which both executors then run.
    Program p;
    const Var a = p.input("a", ta ? Shape{B, 2, K, T} : Shape{B, 2, T, K});
    const Var b = p.input("b", shared ? (tb ? Shape{N, K} : Shape{K, N}) : (tb ? Shape{B, 2, N, K} : Shape{B, 2, K, N}));
    Var y = autodiff::matmul(ta ? autodiff::transpose(a) : a, tb ? autodiff::transpose(b) : b);
    if (bias) y = y + p.input("bias", {N});
    if (act == 1) y = autodiff::relu(y);
    if (act == 2) y = autodiff::gelu(y);
    p.output(y);
    const Program ref = clone(p);
    PassManager().add_pipeline("fold-transpose,epilogue").run(p);
    const auto feeds = random_feeds(ref, 100 + static_cast<std::uint64_t>(trial));
    const std::vector<Tensor> got = run(p, feeds);
    PlannedExecutor ex(p, plan_memory(p));
    const std::vector<Tensor> planned = ex.run(feeds);
    observe_outputs("gemm", got);
    observe_outputs("gemm in its planned buffer", planned);
    MLS_OBSERVE(count_op(p, kGemm));
    // Reference: lab 1's matmul on the transposed views, then the bias and the activation.
    Tensor want = mls::matmul(ta ? feeds[0].transpose(-2, -1) : feeds[0], tb ? feeds[1].transpose(-2, -1) : feeds[1]);
    if (bias) want = want + feeds[2];
    if (act == 1) want = mls::relu(want);
    if (act == 2) want = mls::gelu(want);
    MLS_ORACLE_CHECK(CHECK(count_op(p, kGemm) == static_cast<std::size_t>(ta || tb || bias || act != 0));
                     CHECK(max_rel_error(got, {want}) <= 1.0); CHECK(max_rel_error(planned, {want}) <= 1.0));
  }
}

TEST_CASE("gemm's batched products of attention's heads (strided views of one qkv value, T up to 65) equal lab 1's matmul", "[lab3][passes]") {
  Rng rng(29, "gemm-heads");
  for (int trial = 0; trial < 8; ++trial) {
    INFO("trial " << trial);
    // q, k, v heads as lab 6 makes them: slices of one [B, T, 3 H D] value, viewed [B, H, T, D].
    const std::int64_t B = rng.randint(1, 3), H = rng.randint(1, 4), T = trial < 6 ? rng.randint(1, 65) : 65,
                       D = trial % 2 ? 64 : rng.randint(1, 33);
    Program p;
    const Var x = p.input("x", {B, T, 3 * H * D});
    auto head = [&](std::int64_t which) {
      return autodiff::permute(autodiff::reshape(autodiff::slice(x * 1.0, 2, which * H * D, (which + 1) * H * D), {B, T, H, D}),
                               {0, 2, 1, 3});
    };
    const Var s = autodiff::matmul(head(0), autodiff::transpose(head(1)));        // [B, H, T, T]: k transposed where it lies
    const Var y = autodiff::matmul(autodiff::tanh(s), head(2));                  // [B, H, T, D]
    const Var d = autodiff::matmul(autodiff::transpose(head(0)), autodiff::tanh(y));  // [B, H, D, D]: A^T
    p.output(s);
    p.output(y);
    p.output(d);
    const Program ref = clone(p);
    PassManager().add_pipeline("fold-transpose").run(p);
    const auto feeds = random_feeds(ref, 500 + static_cast<std::uint64_t>(trial));
    PlannedExecutor ex(p, plan_memory(p));
    const std::vector<Tensor> planned = ex.run(feeds);
    observe_outputs("batched gemm in planned buffers", planned);
    MLS_OBSERVE(count_op(p, kGemm));
    // Reference: lab 1's ops on the fed tensor (its own matmul kernel, the heads as views).
    const Tensor xs = feeds[0] * 1.0;
    auto h = [&](std::int64_t which) {
      return xs.slice(2, which * H * D, (which + 1) * H * D).reshape({B, T, H, D}).permute(std::vector<std::int64_t>{0, 2, 1, 3});
    };
    const Tensor ws = mls::matmul(h(0), h(1).transpose(-2, -1)), wy = mls::matmul(mls::tanh(ws), h(2)),
                 wd = mls::matmul(h(0).transpose(-2, -1), mls::tanh(wy));
    MLS_ORACLE_CHECK(CHECK(max_rel_error(planned, {ws, wy, wd}) <= 1.0));
  }
}

TEST_CASE("the planned executor computes in its buffers and hands out outputs later runs do not overwrite", "[lab3][memory]") {
  Program p;
  const Var x = p.input("x", {16, 24}), w = p.input("w", {24, 8});
  const Var h = autodiff::relu(autodiff::matmul(x, w) * 2.0 + 1.0);
  p.output(autodiff::exp(h) + h);
  p.output(autodiff::reshape(h, {8, 16}));  // a view of a planned value
  p.output(x);                              // an input: copied
  PassManager().add_pipeline(default_pipeline()).run(p);
  const MemoryPlan plan = plan_memory(p);
  PlannedExecutor ex(p, plan);
  const auto f1 = random_feeds(p, 1), f2 = random_feeds(p, 2);
  const std::vector<Tensor> first = ex.run(f1);
  std::vector<Tensor> kept;
  for (const Tensor& t : first) kept.push_back(t.clone());
  const std::vector<Tensor> second = ex.run(f2);
  observe_outputs("first run", first, true);
  observe_outputs("second run", second, true);
  MLS_OBSERVE(ex.measured_peak_bytes());
  MLS_ORACLE_CHECK(CHECK(max_rel_error(first, kept) == 0.0);   // the second run left the first's outputs alone
                   CHECK(max_rel_error(second, run(p, f2)) == 0.0);  // bit-identical to lab 2's executor
                   CHECK(first[2].storage() != f1[0].storage());
                   CHECK(ex.measured_peak_bytes() == plan.peak_bytes));
}
