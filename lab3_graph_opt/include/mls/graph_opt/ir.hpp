#pragma once
/// Lab 3's IR is lab 2's define-then-run graph (one `autodiff::Node` type, one op registry), plus:
///   - a `Program`: a graph with its designated inputs (placeholders) and outputs, because a
///     pass must know which values are observable before it may delete or rewrite anything;
///   - three ops lab 3 registers with lab 2's registry (`autodiff::register_op`): fused elementwise
///     loops, a GEMM with transpose flags, bias and activation epilogue, and a conv2d with its
///     bias added per output tile (what conv+BN folding leaves). They are ordinary
///     ops: `autodiff::op_def`, `autodiff::apply` and lab 2's `Executor` handle them like any other;
///   - a verifier, a text printer, a Graphviz drawing and a JSON file format.
///
///   Program p;
///   Var x = p.input("x", {4, 8});
///   p.output(relu(x * 2.0 + 1.0));
///   verify(p);                          // throws mls::Error naming the first problem
///   std::cout << print(p);              // "%3 = mul(%1, %2)  float32 [4, 8]" ...
///   save_json(p, "g.json"); Program q = load_json_file("g.json");
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mls/autodiff/graph.hpp"

namespace mls::graph_opt {

using autodiff::Graph;
using autodiff::Node;
using autodiff::NodePtr;
using autodiff::Op;
using autodiff::Var;

/// Fused elementwise loop (slides 002): inputs are the external values of a fused chain or
/// tree, attribute "code" a list of instructions "<op> <a> [<b>]" (`fused_instruction`), e.g.
/// {"add 0 1", "exp 2"}: op names an `Op` by its registered name (files store names, never op
/// numbers) whose registry entry is `elementwise`, evaluated with its lab 1 scalar function; a, b
/// are slot indices, 0..n_inputs-1 the inputs, n_inputs+k the result of instruction k; b only for
/// binary ops. The last instruction is the node's value. Evaluated in one pass over the output, a
/// tile of a few vectors at a time with the running value kept in registers (big results streamed
/// out with non-temporal stores). Registered by lab 3 at
/// static initialisation (its identifier is not a constant: files store the name).
extern const Op kFusedElementwise;
/// matmul(op_a(A), op_b(B)) [+ bias] [then act]: attributes trans_a, trans_b (0/1: op = swap the
/// last two dims), act (0 none, 1 relu, 2 gelu); inputs A, B and optionally a bias that
/// broadcasts to the output's last dim. The transposes are views and the epilogue runs in one
/// pass over the product, so no intermediate tensor is materialised. Registered by lab 3.
extern const Op kGemm;
/// conv2d(x, w, stride, pad) + bias: inputs x [N, C, H, W], w [O, C, kh, kw] and a bias of O
/// values (any shape, e.g. [O] or [1, O, 1, 1]); attributes stride, pad. The bias is added as
/// each output tile is computed (float32: im2col packed straight into the GEMM panels), so
/// neither the columns nor the unbiased result are materialised. Registered by lab 3; conv+BN
/// folding makes it. Its float32 kernel is also registered in common's conv2d registry
/// (mls/common/kernels.hpp, as "lab3_conv2d_bias") in every program linked with lab 3, so lab 2's
/// float32 conv2d runs on it too (with no bias): a program and its conv+BN-folded version run
/// the same conv kernel. `mls::set_conv2d_kernel("im2col")` (or MLS_CONV2D=im2col) gives lab 2's
/// conv2d its own im2col + matmul path back.
extern const Op kConvBias;
/// Layer norm as fused row kernels (compile's "fused-layernorm" pass makes them): fused_layer_norm
/// (x [..., C], gamma [C], beta [C]; attribute eps) is lab 2's layer_norm computed in one pass
/// per row, and its gradient rule emits layer_norm_dx (x, gamma, g -> dx: rstd (dxhat -
/// mean(dxhat) - xhat mean(dxhat xhat)), dxhat = g gamma, one pass per row), layer_norm_dgamma
/// (x, g -> [C]: the sum over rows of g xhat) and lab 2's sum_like(g, beta); the two have no
/// gradient. Float32 and float64; all inputs of one dtype. Registered by lab 3.
extern const Op kFusedLayerNorm;
extern const Op kLayerNormDx;
extern const Op kLayerNormDgamma;
/// Attention as one node (compile's "fuse-attention" pass makes it): fused_attention (q, k, v
/// [..., T, D], one shape; mask [T, T], a constant; attribute scale) is softmax(scale q k^T +
/// mask) v computed one row of scores at a time (the [..., T, T] scores are never stored); its
/// gradient rule emits attention_backward (q, k, v, mask, dy -> [3, ..., T, D]: dq, dk, dv
/// packed, each row's probabilities recomputed), which has no gradient. Float32 and float64.
extern const Op kFusedAttention;
extern const Op kAttentionBackward;
/// Bias + GELU as one node (compile's "fuse-gelu" pass makes it): bias_gelu (x [..., N] and
/// optionally bias [N]) is gelu(x + bias) (lab 1's tanh-form GELU) in one pass; its gradient rule
/// emits bias_gelu_backward (x, [bias,] g -> g gelu'(x + bias), x's shape, one pass: the
/// pre-activation recomputed, the tanh never stored) and, with a bias, lab 2's sum_like of it to
/// the bias; bias_gelu_backward has no gradient. Float32 and float64; all inputs of one dtype.
extern const Op kBiasGelu;
extern const Op kBiasGeluBackward;
/// Scale + mask + softmax as one node (compile's "fuse-softmax" pass makes it): scaled_softmax
/// (x [..., N] and optionally a mask whose shape is x's trailing dims, e.g. [T, T] for attention's
/// scores [B, H, T, T]; attribute scale) is softmax(scale x + mask) along the last dim, one pass
/// per row computed in its planned buffer; its gradient rule emits scaled_softmax_backward (y, g
/// -> scale y (g - sum(g y)), one pass per row; attribute scale) and, for the mask, lab 2's
/// sum_like of the same with scale 1; scaled_softmax_backward has no gradient. Float32 and float64.
extern const Op kScaledSoftmax;
extern const Op kScaledSoftmaxBackward;
/// An op's forward writing into memory the caller gives: `out` is compact, of the node's shape and
/// dtype, and may be the memory of an input of the same shape when the op is elementwise (a
/// memory plan's in-place update). Returns false when it does not handle this case (the caller
/// then runs the ordinary forward and copies). Lab 3's executors use it so that a planned value
/// is computed in its buffer, not computed elsewhere and copied there.
using ForwardIntoFn = bool (*)(std::span<const Tensor> inputs, const autodiff::Attrs& attrs, Tensor& out);
/// Registers `fn` as `op`'s forward into a buffer (lab 3 registers gemm's, fused_elementwise's,
/// matmul's and the float add, sub, mul and div's). Thread-safe; a second registration replaces the first.
void register_forward_into(Op op, ForwardIntoFn fn);
/// `op`'s forward into a buffer, nullptr when it has none.
ForwardIntoFn forward_into(Op op);

/// The build conv2d_bias's float32 kernel runs on this CPU: "avx512", "avx2" (with FMA) or
/// "baseline" (portable vector code; also every build by another compiler than GCC, or with
/// AddressSanitizer). The baseline build is some 50 times slower where the CPU has AVX-512.
std::string conv2d_bias_isa();

/// A graph with its inputs and outputs. Owns the graph (which is neither copyable nor movable,
/// so it sits behind a unique_ptr and the Program itself moves).
struct Program {
  Program();
  std::unique_ptr<Graph> graph;
  std::vector<Var> inputs;   // placeholders, in feed order
  std::vector<Var> outputs;  // observable values, in fetch order

  /// Adds a placeholder and records it as an input.
  Var input(std::string name, Shape shape, DType dtype = DType::Float32);
  /// A constant of the graph.
  Var constant(Tensor value, std::string name = "");
  /// Records `v` as an output; returns it.
  Var output(const Var& v);
  /// Rewriting: every use of `from` (as an input edge or a program output) now uses `to`.
  /// Returns the number of edges and outputs moved.
  std::size_t replace(const Var& from, const Var& to);
  /// Adds a node of `op` over `inputs` (nodes of this graph) with `attrs`, inferring its shape
  /// and dtype: `autodiff::apply` for any registered op, lab 3's included.
  Var make(Op op, std::vector<Var> inputs, autodiff::Attrs attrs = {});
  /// Nodes reachable from the outputs, inputs before users (throws on a cycle).
  std::vector<Node*> schedule() const;
  /// Number of nodes in the graph.
  std::size_t size() const { return graph->size(); }
};

/// How many nodes of the graph use each node as an input (an edge counts once per use), plus
/// one per appearance among the program's outputs.
std::unordered_map<const Node*, int> use_counts(const Program& p);
/// Drops every node that no output depends on, keeping the program's inputs (lab 2's
/// `Graph::prune` with outputs and inputs kept). Returns how many nodes went.
std::size_t prune(Program& p);
/// Number of graph nodes whose op is `op`.
std::size_t count_op(const Program& p, Op op);

/// Checks the program: every node's op is registered, its input count matches the op, every input
/// is a node of the same graph, the graph has no cycle, each non-leaf node's stored shape and
/// dtype equal what the op's shape inference gives from its inputs, constants and variables hold a value of their
/// shape and dtype, and the inputs and outputs are nodes of the graph (inputs: placeholders).
/// Throws `mls::Error` starting "verify: " and naming the node.
void verify(const Program& p);

/// One line per node, in creation order: "%7 = add(%3, %6) {attrs}  float32 [2, 3]  name",
/// then "outputs: %7". Constants show their shape (and the value when it has one element).
std::string print(const Program& p);
/// The name of a node in printouts: "%<index>" where index is its position in the graph.
std::string node_ref(const Program& p, const Node* n);

/// Graphviz drawing in the style of lab 2's `to_dot` (same colours and labels), with gemm and fused
/// nodes labelled by what they compute (a fused node shows its expression) and the outputs
/// drawn with a double border.
DotGraph to_dot(const Program& p, const std::string& title = "graph");

/// The expression a fused elementwise node computes, e.g. "add(in2, mul(add(in0, in1), in3))".
std::string fused_expression(const Node& n);
/// One instruction of a fused_elementwise node's "code": "<op name> <a>" for a unary op,
/// "<op name> <a> <b>" for a binary one (b < 0: none), e.g. fused_instruction(Op::Add, 0, 1) ==
/// "add 0 1".
std::string fused_instruction(Op op, std::int64_t a, std::int64_t b = -1);

/// Serialises the program to JSON text (format "mls-graph", version 1): nodes in graph order
/// with op, name, inputs (indices), attributes, shape, dtype, and the values of constants and
/// variables; then the input and output indices.
std::string to_json(const Program& p);
/// Parses JSON text written by `to_json` and verifies the result. Throws `mls::Error` starting
/// "load: " for malformed text, a missing field, an unknown op or dtype, an input index out of
/// range; the verifier's errors (cycle, shape mismatch) pass through.
Program from_json(const std::string& text);
/// Writes `to_json(p)` to `path`.
void save_json(const Program& p, const std::string& path);
/// Reads a file written by `save_json`.
Program load_json_file(const std::string& path);

/// Cost of one node: floating-point operations, bytes read from and written to memory (inputs
/// and output once each; views and leaves move nothing).
struct NodeCost {
  double flops = 0;
  double bytes_read = 0;
  double bytes_written = 0;
  /// flops / elements moved: the slides' arithmetic intensity (E = D + (A+B)*C: 3/5 fused).
  double intensity(double itemsize) const {
    const double moved = (bytes_read + bytes_written) / itemsize;
    return moved > 0 ? flops / moved : 0.0;
  }
};
/// Cost of `n` (shapes must be known).
NodeCost node_cost(const Node& n);
/// Totals over the scheduled nodes of a program.
struct ProgramCost {
  std::size_t nodes = 0;    // scheduled non-leaf nodes
  double flops = 0;
  double bytes = 0;         // read + written
};
ProgramCost program_cost(const Program& p);

/// Runs the program on `feeds` (one tensor per input, in order) with lab 2's `Executor` and
/// returns the outputs. Every needed node is evaluated once; values are dropped after their
/// last use. (Float32 conv2d nodes run on conv2d_bias's kernel: see `kConvBias`.)
std::vector<Tensor> run(const Program& p, const std::vector<Tensor>& feeds);
/// Random feeds for the program's inputs (normal, seeded), shapes from the placeholders
/// (unknown sizes become `unknown_size`).
std::vector<Tensor> random_feeds(const Program& p, std::uint64_t seed, std::int64_t unknown_size = 2);
/// Largest |a - b| / (atol + rtol |b|) over two lists of tensors, tolerances from the dtype;
/// <= 1 means close. Throws `mls::Error` when the lists differ in length, shape or dtype.
double max_rel_error(const std::vector<Tensor>& a, const std::vector<Tensor>& b);
/// True when `p` and `q` give close outputs on `trials` random feeds.
bool equivalent(const Program& p, const Program& q, int trials = 2, std::uint64_t seed = 7);
/// A deep copy (new graph, new nodes; constant values shared, they are never written).
Program clone(const Program& p);

}  // namespace mls::graph_opt
