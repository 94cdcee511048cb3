#pragma once
// Internal: element copies between arbitrary strided tensors.
#include "loop.hpp"
#include "mls/tensor/tensor.hpp"

namespace mls::inline tensor::impl {

/// dst[i] = (dst dtype) src[i] for every multi-index i. `src` must already have dst's shape
/// (broadcast with stride 0 where needed); the two must not overlap in memory.
void copy_elements(Tensor& dst, const Tensor& src);

}  // namespace mls::tensor::impl
