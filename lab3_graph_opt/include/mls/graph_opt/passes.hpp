#pragma once
/// The classic graph passes (slides 001-003) and the pass manager that runs them.
///
/// Every pass rewrites a Program in place and returns how many rewrites it made. Each one keeps
/// the program's outputs equal (up to floating-point rounding) on every input.
///
///   PassManager pm;
///   pm.add_pipeline("simplify,cse,fold,conv-bn,fuse-elementwise,dce");
///   PassReport r = pm.run(prog);   // verifies after each pass; r.stats has nodes/time per pass
#include <functional>
#include <string>
#include <vector>

#include "mls/graph_opt/pattern.hpp"

namespace mls::graph_opt {

/// Dead-code elimination: drops every node no output depends on. Returns how many went.
int dead_code_elimination(Program& p);
/// Common-subexpression elimination: two nodes with the same op, attributes and inputs (and
/// constants with equal values) become one. Returns how many nodes were replaced.
int common_subexpression_elimination(Program& p);
/// Constant folding: a non-leaf node whose inputs are all constants is computed once and
/// replaced by a constant. Variables are not folded (their value may change). Returns how many.
int constant_folding(Program& p);
/// The rules of algebraic simplification: x*1, 1*x, x/1, x+0, 0+x, x-0 -> x (when the constant
/// does not broadcast x to a bigger shape or change its dtype); permute(permute(x)) -> one
/// permute, or x when the composition is the identity; reshape(reshape(x)) -> reshape(x);
/// reshape to x's own shape -> x.
std::vector<Rule> algebraic_rules();
/// Runs `algebraic_rules()` to a fixpoint. Returns how many rewrites.
int algebraic_simplification(Program& p);
/// Inference conv+BN folding (slides 001): batch_norm(conv2d(x, W) [+ B], gamma, beta, mean, var)
/// with training=0 and constant W, B, gamma, beta, mean, var becomes conv2d(x, W2) + B2 (one
/// `kConvBias` node: the bias added as the conv computes each tile) with
/// R = gamma / sqrt(var + eps), P = beta - mean * R, W2 = W * R (per output channel),
/// B2 = B * R + P. Returns how many batch norms were folded.
int fold_conv_batchnorm(Program& p);
/// conv2d(x, W1) + conv2d(x, W2) with the same x, stride, padding and weight shape, and
/// constant weights, becomes conv2d(x, W1 + W2) (slides 001). Returns how many merges.
int merge_parallel_convs(Program& p);
/// Matmuls x @ W1, x @ W2, ... of the same x with constant 2-D weights (the Q, K, V
/// projections) become one x @ concat(W1, W2, ...) and a slice per original (slides 002).
/// Returns how many matmuls were merged away (groups of k save k-1).
int merge_shared_matmuls(Program& p);
/// matmul(permute(a) [swap of the last two dims], b) and matmul(a, permute(b)) become a gemm
/// node with trans_a / trans_b set (no transposed copy). Returns how many permutes were folded.
int fold_transpose_into_matmul(Program& p);
/// Epilogue fusion: relu/gelu(matmul(a, b) + bias) (also without the activation or the bias,
/// and over gemm nodes) becomes one gemm node with bias and act, when bias broadcasts along the
/// last dim only. Returns how many nodes were absorbed.
int fuse_matmul_epilogue(Program& p);
/// The backward's reductions over the batch, done by the GEMM (what compile needs for training
/// graphs): sum_like(x, like) to x's own (known) shape becomes x; sum_like(gemm(a, g, trans_a),
/// W) that sums a_b^T g_b over the batch dims (a: [batch..., T, K], g: [batch..., T, N], W:
/// [K, N], the weight gradient of x @ W) becomes one gemm of reshape(a, [B T, K])^T
/// reshape(g, [B T, N]): the batch folded into the reduction, no [batch..., K, N] products
/// materialised and summed. Returns how many rewrites.
int fold_batch_reduction(Program& p);
/// Shape specialisation for training graphs (what compile's static shapes allow):
/// reshape_like(x, like) with both shapes known becomes reshape(x, like's shape), which the
/// planners treat as a view (no buffer, no copy) where its input is compact. Returns how many.
int specialize_reshape_like(Program& p);
/// The gradient of a value sliced into pieces (attention's q|k|v, the layers of a stacked
/// parameter) as one concat: a tree of adds (inner adds used once) whose leaves are single-use
/// slice_backward(g_i, x, dim, start_i, stop_i, step 1) of one dim, shape and dtype with disjoint
/// ranges becomes concat(pieces in order, zero constants in the gaps) along that dim. Exact (it
/// only drops additions of zeros). Returns how many add-trees were rewritten.
int concat_slice_gradients(Program& p);
/// layer_norm -> lab 3's fused_layer_norm (ir.hpp): the same values, computed in one pass per
/// row, and a gradient of two fused row kernels where lab 2's rule recomputes the normalisation
/// with Var ops. Run it BEFORE the backward is built (compile's pre-gradient pipeline): on a
/// graph whose gradients exist it only changes the forward. Float inputs of one dtype. Returns how many.
int fuse_layer_norm(Program& p);
/// matmul(softmax(matmul(q, transpose(k)) * s + mask, last dim), v) with a scalar constant s, a
/// constant mask [T, T], q, k, v of one shape [..., T, D] and one float dtype, and single-use
/// intermediates -> lab 3's fused_attention (ir.hpp), whose gradient is one fused kernel. Run it
/// BEFORE the backward is built (compile's pre-gradient pipeline). Returns how many.
int fuse_attention(Program& p);
/// gelu(x + b) with b [N] (or [1, ..., N]) along the last dim of x and the add used once ->
/// lab 3's bias_gelu(x, b) (ir.hpp); any other float gelu(x) -> bias_gelu(x). Its gradient is one
/// fused kernel (lab 2's rule: a tanh node and seven Var ops). Run it BEFORE the backward is built
/// (compile's pre-gradient pipeline). Returns how many.
int fuse_gelu(Program& p);
/// softmax(x * s + mask) along the last dim, with s a one-element constant (either operand of the
/// mul), mask a constant whose shape is x's trailing dims (either operand of the add), the mul
/// and the add used once (either may be missing) -> lab 3's scaled_softmax(x [, mask]; scale)
/// (ir.hpp); any other float softmax along the last dim -> scaled_softmax(x; scale 1). One pass
/// per row in its planned buffer, and a gradient of one row kernel (lab 2's rule: a mul, a sum
/// and a loop over three broadcast inputs). Run it BEFORE the backward is built (compile's
/// pre-gradient pipeline). Returns how many.
int fuse_softmax(Program& p);
/// Elementwise fusion (slides 002): each maximal tree of float elementwise ops whose inner
/// values have a single use becomes one fused_elementwise node evaluated in one loop. Returns
/// how many ops were absorbed (ops in fused groups minus the fused nodes made).
int fuse_elementwise(Program& p);

/// One named pass.
struct PassInfo {
  std::string name;
  std::string help;
  std::function<int(Program&)> run;
};
/// Every pass by name: dce, cse, fold, simplify, conv-bn, merge-convs, merge-matmuls,
/// fold-transpose, batch-reduce, epilogue, fuse-elementwise, reshape-like, concat-slices, fused-layernorm, fuse-gelu,
/// fuse-softmax, fuse-attention.
const std::vector<PassInfo>& all_passes();
/// The pass called `name`; throws `mls::Error` listing the known names otherwise.
const PassInfo& find_pass(const std::string& name);
/// The default inference pipeline, in order.
std::string default_pipeline();
/// compile()'s pipeline for a traced forward + backward graph: "reshape-like,concat-slices," then
/// the default pipeline.
std::string compile_pipeline();
/// compile()'s passes on the traced forward graph, before the backward is built from it:
/// "fused-layernorm,fuse-gelu,fuse-softmax" (rewrites to ops whose gradient rules are fused kernels).
/// "fuse-attention" is not in it: at lab 6's nano and small shapes (T 32 and 64, the block sizes)
/// its row-at-a-time kernels did not beat the batched matmuls and softmax they replace (CPU time
/// of a step, busy machine: 25% slower at T 32, 10% at T 64; `mls-compile-bench --pre-grad-passes
/// fused-layernorm,fuse-gelu,fuse-attention,fuse-softmax` to try it: fuse-attention before
/// fuse-softmax, which would otherwise take the attention's softmax first).
std::string compile_pre_grad_pipeline();

/// What one pass did.
struct PassStat {
  std::string name;
  std::size_t nodes_before = 0, nodes_after = 0;
  int rewrites = 0;
  double millis = 0;
};
struct PassReport {
  std::vector<PassStat> stats;
  /// Sub-graphs of cond / while_loop nodes the passes ran inside (see PassManager::run).
  int subgraphs = 0;
  /// A table: pass, nodes before, nodes after, rewrites, time.
  std::string table() const;
};

/// Runs passes in order, verifying the program after each; when the verifier fails, throws
/// `mls::Error` "pass '<name>' broke the graph: <verifier message>".
class PassManager {
 public:
  /// Appends a pass.
  PassManager& add(PassInfo pass);
  /// Appends registered passes from a comma-separated list ("dce,cse"); throws for unknown names.
  PassManager& add_pipeline(const std::string& names);
  /// After the pass `name` runs, writes its DOT drawing to `path`.
  PassManager& dump_after(std::string name, std::string path);
  /// Verifies the input, then runs every pass: first inside the sub-graphs of the program's cond and
  /// while_loop nodes (each sub-graph as a program of its own, `subgraph_program`, recursively for
  /// nested control flow; the optimised sub-graphs are published as a new control flow,
  /// `autodiff::publish_control_flow`, whose id the control nodes then hold), then on the program.
  /// A control node whose gradient exists is left as it is (a loop that saves its states, or one
  /// a cond_grad / while_grad node of the program reads: lab 2 builds its backward from the
  /// sub-graphs as traced), and so is a sub-graph holding variables or assignments. Build
  /// gradients before optimising: lab 3's gemm and fused nodes have no gradient rule.
  PassReport run(Program& p) const;
  std::size_t size() const { return passes_.size(); }

 private:
  int optimise_subgraphs(Program& p) const;
  std::vector<PassInfo> passes_;
  std::vector<std::pair<std::string, std::string>> dumps_;
};

}  // namespace mls::graph_opt
