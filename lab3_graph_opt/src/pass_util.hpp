// Small helpers shared by lab 3's pass implementations (not a student file).
#pragma once

#include <algorithm>
#include <cstdint>

#include "mls/graph_opt/passes.hpp"

namespace mls::graph_opt::detail {

/// True when no size of `s` is -1 (a shape known when the graph was traced).
inline bool known(const Shape& s) {
  return std::none_of(s.begin(), s.end(), [](std::int64_t d) { return d < 0; });
}

}  // namespace mls::graph_opt::detail
