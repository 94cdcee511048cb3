// Two passes for the backward of training graphs (issue 29: compile's GPT step), and concat's
// forward into a buffer. Not a student file.
//   "reshape-like": reshape_like(x, like) with like's shape known -> reshape(x, shape): the
//     planners see a view (no buffer, no copy) where lab 2's shape-generic op was a new value.
//   "concat-slices": a sum of slice_backward nodes (the gradient of a value sliced into pieces:
//     attention's q|k|v, the layers of a stacked parameter) -> one concat of the pieces, with
//     zeros only in the gaps; each slice_backward was a zero buffer of the full shape, a copy into
//     its slice and an add.
// concat's forward into a planned buffer: each piece copied into its slice.
#include <algorithm>
#include <unordered_set>

#include "mls/graph_opt/passes.hpp"
#include "pass_util.hpp"

namespace mls::graph_opt {

namespace {
using detail::known;

/// One piece of a sum of slice_backward nodes: its gradient and where it lies along the dim.
struct Piece {
  Var grad;
  std::int64_t start = 0, len = 0;
};

/// The [start, start + len) a step-1 slice covers along a dim of size n (negative bounds count
/// from the end, both are clamped, as lab 2's slice does); false for a step other than 1.
bool slice_range(const Node& sb, std::int64_t n, std::int64_t& start, std::int64_t& len) {
  if (sb.attrs.i("step") != 1) return false;
  std::int64_t a = sb.attrs.i("start"), b = sb.attrs.i("stop");
  if (a < 0) a += n;
  if (b < 0) b += n;
  a = std::clamp<std::int64_t>(a, 0, n);
  b = std::clamp<std::int64_t>(b, 0, n);
  start = a;
  len = std::max<std::int64_t>(b - a, 0);
  return true;
}

/// The leaves of the add-tree rooted at `root` (adds of one shape and dtype whose inner adds have
/// one use), and its adds in `adds`.
void add_leaves(const Node* root, const std::unordered_map<const Node*, int>& uses, std::vector<const Node*>& leaves,
                std::vector<const Node*>& adds, bool is_root) {
  const bool inner = root->op == Op::Add && root->inputs.size() == 2 &&
                     (is_root || uses.at(root) == 1) && root->inputs[0]->shape == root->shape &&
                     root->inputs[1]->shape == root->shape && root->inputs[0]->dtype == root->dtype &&
                     root->inputs[1]->dtype == root->dtype;
  if (!inner) {
    leaves.push_back(root);
    return;
  }
  adds.push_back(root);
  for (const NodePtr& in : root->inputs) add_leaves(in.get(), uses, leaves, adds, false);
}
}  // namespace

int specialize_reshape_like(Program& p) {
  int rewrites = 0;
  auto own = detail::owners(p);
  for (Node* n : p.schedule()) {
    if (n->op != Op::ReshapeLike || !known(n->inputs[1]->shape) || !known(n->inputs[0]->shape)) continue;
    p.replace(Var(own.at(n)), autodiff::reshape(Var(n->inputs[0]), n->inputs[1]->shape));
    ++rewrites;
  }
  prune(p);
  return rewrites;
}

int concat_slice_gradients(Program& p) {
  int rewrites = 0;
  const auto uses = use_counts(p);
  auto own = detail::owners(p);
  std::unordered_set<const Node*> absorbed;  // adds already inside a rewritten tree
  const std::vector<Node*> order = p.schedule();
  // Roots first (a tree's root comes after its inner adds in the schedule).
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    if (n->op != Op::Add || absorbed.count(n) || !known(n->shape)) continue;
    std::vector<const Node*> leaves, adds;
    add_leaves(n, uses, leaves, adds, true);
    if (leaves.size() < 2) continue;
    // Every leaf: a single-use slice_backward of this shape and dtype along one dim, step 1.
    std::int64_t dim = -1;
    std::vector<Piece> pieces;
    bool ok = true;
    for (const Node* l : leaves) {
      ok = l->op == Op::SliceBackward && uses.at(l) == 1 && l->shape == n->shape && l->dtype == n->dtype &&
           l->inputs[0]->dtype == n->dtype && known(l->inputs[0]->shape);
      if (!ok) break;
      const std::int64_t d = l->attrs.i("dim");
      ok = d >= 0 && d < static_cast<std::int64_t>(n->shape.size()) && (dim < 0 || d == dim);
      if (!ok) break;
      dim = d;
      Piece piece{Var(l->inputs[0]), 0, 0};
      ok = slice_range(*l, n->shape[static_cast<std::size_t>(d)], piece.start, piece.len) &&
           piece.len == l->inputs[0]->shape[static_cast<std::size_t>(d)];
      if (!ok) break;
      pieces.push_back(piece);
    }
    if (!ok) continue;
    std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.start < b.start; });
    for (std::size_t k = 1; ok && k < pieces.size(); ++k) ok = pieces[k - 1].start + pieces[k - 1].len <= pieces[k].start;
    if (!ok) continue;  // overlapping pieces add up: not a concat
    // The concat: the pieces in order, zeros in the gaps.
    std::vector<Var> parts;
    std::int64_t at = 0;
    const std::int64_t size = n->shape[static_cast<std::size_t>(dim)];
    auto zeros = [&](std::int64_t len) {
      Shape s = n->shape;
      s[static_cast<std::size_t>(dim)] = len;
      parts.push_back(p.constant(Tensor::zeros(s, n->dtype), "0"));
    };
    for (const Piece& piece : pieces) {
      if (piece.len == 0) continue;
      if (piece.start > at) zeros(piece.start - at);
      parts.push_back(piece.grad);
      at = piece.start + piece.len;
    }
    if (at < size) zeros(size - at);
    absorbed.insert(adds.begin(), adds.end());  // the inner adds die with the root
    const Var cat = parts.size() == 1 ? parts[0]
                                      : p.make(Op::Concat, parts, autodiff::Attrs().set("axis", dim));
    p.replace(Var(own.at(n)), cat);
    ++rewrites;
  }
  prune(p);
  return rewrites;
}

namespace {
/// concat into a compact buffer: each input copied into its slice of `out` (same dtype only).
bool concat_into(std::span<const Tensor> in, const autodiff::Attrs& a, Tensor& out) {
  const std::int64_t axis = a.i("axis") < 0 ? a.i("axis") + out.ndim() : a.i("axis");
  std::int64_t at = 0;
  for (const Tensor& x : in)
    if (x.dtype() != out.dtype() || x.ndim() != out.ndim()) return false;
  for (const Tensor& x : in) {
    const std::int64_t n = x.shape()[static_cast<std::size_t>(axis)];
    out.slice(axis, at, at + n).copy_(x);
    at += n;
  }
  return true;
}
/// A reshape the planners give a buffer (its input's layout cannot be re-split without a copy:
/// a transposed value flattened, attention's heads merged back) copied straight into it: `out`
/// viewed with the input's shape takes the input's elements in one strided copy (lab 2's forward
/// compacts into a new tensor, which the executor then copies into the buffer).
bool reshape_into(std::span<const Tensor> in, const autodiff::Attrs&, Tensor& out) {
  if (in.size() != 1 || in[0].dtype() != out.dtype() || in[0].numel() != out.numel() || !out.is_contiguous() ||
      in[0].shares_storage(out))
    return false;
  Tensor dst = out.reshape(in[0].shape());  // out is compact: a view of it
  dst.copy_(in[0]);
  return true;
}
[[maybe_unused]] const bool into_registered = [] {
  register_forward_into(Op::Reshape, reshape_into);
  register_forward_into(Op::Concat, concat_into);
  return true;
}();
}  // namespace

}  // namespace mls::graph_opt
