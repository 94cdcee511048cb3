// Lab 2's embedding and embedding_backward computed in their planned buffers (issue 29: compile's
// GPT step). Not a student file. Lab 2's forwards copy or add one row at a time through lab 1's
// select and copy_/+= (a tensor op per row); here each is one loop over the indices with a row
// memcpy or a row add. The same values: embedding copies the rows, embedding_backward adds g's
// rows into zeros in index order (the same additions in the same order as lab 2's).
#include <algorithm>
#include <cstring>
#include <vector>

#include "mls/graph_opt/ir.hpp"
#include "pass_util.hpp"

namespace mls::graph_opt {

namespace {
using Ins = std::span<const Tensor>;

/// The indices as int64 when every one is in [0, rows); false otherwise (the caller then runs
/// lab 2's forward, which names the bad index).
bool indices(const Tensor& idx, std::int64_t rows, std::vector<std::int64_t>& ids) {
  if (!is_integral(idx.dtype())) return false;
  ids = idx.to_vector<std::int64_t>();
  for (std::int64_t i : ids)
    if (i < 0 || i >= rows) return false;
  return true;
}

template <class T>
void gather_rows(const T* w, const std::int64_t* ids, std::size_t n, std::int64_t dim, T* out) {
  for (std::size_t i = 0; i < n; ++i) std::memcpy(out + static_cast<std::int64_t>(i) * dim, w + ids[i] * dim, sizeof(T) * static_cast<std::size_t>(dim));
}
template <class T>
void scatter_add_rows(const T* g, const std::int64_t* ids, std::size_t n, std::int64_t dim, T* out, std::int64_t rows) {
  std::fill(out, out + rows * dim, T(0));
  for (std::size_t i = 0; i < n; ++i) {
    T* __restrict o = out + ids[i] * dim;
    const T* __restrict r = g + static_cast<std::int64_t>(i) * dim;
    for (std::int64_t j = 0; j < dim; ++j) o[j] += r[j];
  }
}

/// embedding(w [V, D], idx [...]) -> [..., D].
bool embedding_into(Ins in, const autodiff::Attrs&, Tensor& out) {
  if (in.size() != 2 || in[0].ndim() != 2 || in[0].dtype() != out.dtype() || !out.is_contiguous()) return false;
  if (out.dtype() != DType::Float32 && out.dtype() != DType::Float64) return false;
  const std::int64_t v = in[0].shape()[0], dim = in[0].shape()[1];
  std::vector<std::int64_t> ids;
  if (!indices(in[1], v, ids) || out.numel() != static_cast<std::int64_t>(ids.size()) * dim) return false;
  const Tensor w = in[0].compact();
  if (out.dtype() == DType::Float32) gather_rows(w.data<float>(), ids.data(), ids.size(), dim, out.data<float>());
  else gather_rows(w.data<double>(), ids.data(), ids.size(), dim, out.data<double>());
  return true;
}
/// embedding_backward(g [..., D], idx [...], like [V, D]) -> [V, D].
bool embedding_backward_into(Ins in, const autodiff::Attrs&, Tensor& out) {
  if (in.size() != 3 || out.ndim() != 2 || in[0].dtype() != out.dtype() || !out.is_contiguous()) return false;
  if (out.dtype() != DType::Float32 && out.dtype() != DType::Float64) return false;
  const std::int64_t v = out.shape()[0], dim = out.shape()[1];
  std::vector<std::int64_t> ids;
  if (!indices(in[1], v, ids) || in[0].numel() != static_cast<std::int64_t>(ids.size()) * dim) return false;
  const Tensor g = in[0].compact();
  if (g.storage() == out.storage()) return false;  // zeroing out first would clobber g
  if (out.dtype() == DType::Float32) scatter_add_rows(g.data<float>(), ids.data(), ids.size(), dim, out.data<float>(), v);
  else scatter_add_rows(g.data<double>(), ids.data(), ids.size(), dim, out.data<double>(), v);
  return true;
}

}  // namespace

void detail::register_embedding_into() {
  register_forward_into(Op::Embedding, embedding_into);
  register_forward_into(Op::EmbeddingBackward, embedding_backward_into);
}

}  // namespace mls::graph_opt
