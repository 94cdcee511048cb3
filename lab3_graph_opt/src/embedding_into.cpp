// Lab 2's embedding and embedding_backward computed in their planned buffers (issue 29: compile's
// GPT step). Not a student file. The computation is lab 2's own (`autodiff::embedding_into`,
// `autodiff::embedding_backward_into`: one row copy or row add per index); this only says when a
// planned buffer can take it.
#include "mls/autodiff/var.hpp"
#include "mls/graph_opt/ir.hpp"
#include "pass_util.hpp"

namespace mls::graph_opt {

namespace {
using Ins = std::span<const Tensor>;

/// embedding(w [V, D], idx [...]) -> [..., D].
bool embedding_into(Ins in, const autodiff::Attrs&, Tensor& out) {
  if (in.size() != 2 || in[0].ndim() != 2 || in[0].dtype() != out.dtype() || !out.is_contiguous()) return false;
  autodiff::embedding_into(in[0], in[1], out);
  return true;
}
/// embedding_backward(g [..., D], idx [...], like [V, D]) -> [V, D].
bool embedding_backward_into(Ins in, const autodiff::Attrs&, Tensor& out) {
  if (in.size() != 3 || out.ndim() != 2 || in[0].dtype() != out.dtype() || !out.is_contiguous()) return false;
  if (in[0].storage() == out.storage()) return false;  // zeroing out first would clobber g
  autodiff::embedding_backward_into(in[0], in[1], out);
  return true;
}
}  // namespace

void detail::register_embedding_into() {
  register_forward_into(Op::Embedding, embedding_into);
  register_forward_into(Op::EmbeddingBackward, embedding_backward_into);
}

}  // namespace mls::graph_opt
