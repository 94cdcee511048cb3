// Small helpers shared by lab 3's pass implementations (not a student file).
#pragma once

#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "mls/graph_opt/passes.hpp"

namespace mls::graph_opt::detail {

/// True when no size of `s` is -1 (a shape known when the graph was traced).
inline bool known(const Shape& s) {
  return std::none_of(s.begin(), s.end(), [](std::int64_t d) { return d < 0; });
}

/// The owning pointers of a program's nodes, by address (a schedule holds raw pointers).
inline std::unordered_map<const Node*, NodePtr> owners(const Program& p) {
  std::unordered_map<const Node*, NodePtr> m;
  for (const NodePtr& n : p.graph->nodes()) m[n.get()] = n;
  return m;
}

/// Registers the forwards into a buffer of lab 2's embedding and embedding_backward
/// (embedding_into.cpp); called where gemm's is registered (gemm.cpp), so that every program
/// linked with lab 3 has them.
void register_embedding_into();

}  // namespace mls::graph_opt::detail
