#pragma once
/// Small datasets for the demos: seeded two spirals and Gaussian blobs, and an IDX (MNIST file
/// format) reader and writer.
#include <cstdint>
#include <string>

#include "mls/tensor/tensor.hpp"

namespace mls::autodiff::data {

/// Features and integer labels.
struct Dataset {
  Tensor x;       // [N, D] float32
  Tensor labels;  // [N] int64
  std::int64_t classes = 0;
};

/// Two interleaved spirals in 2-D, `n_per_class` points each, with Gaussian `noise`.
Dataset two_spirals(std::int64_t n_per_class, double noise, Rng& rng);
/// `classes` Gaussian blobs in `dim` dimensions with centres on a circle of radius 4.
Dataset blobs(std::int64_t n_per_class, std::int64_t classes, std::int64_t dim, double stddev, Rng& rng);

/// Reads an IDX file (the MNIST format: big-endian magic 0x00000800 | type << 8 | ndim, then
/// ndim big-endian int32 sizes, then the data). Types: ubyte (0x08) -> uint8 values as int32,
/// int32 (0x0C) -> int32, float (0x0D) -> float32. Throws `mls::Error` naming the file on a
/// bad magic, a truncated file, or a missing file.
Tensor read_idx(const std::string& path);
/// Writes an int32 tensor as ubyte IDX (values must be 0..255) or a float32 tensor as float IDX.
void write_idx(const std::string& path, const Tensor& t);

/// MNIST from `dir` (train-images-idx3-ubyte, train-labels-idx1-ubyte, or t10k-... when
/// `train` is false): images flattened to [N, 784] float32 in [0, 1], labels int64.
Dataset load_mnist(const std::string& dir, bool train = true);

}  // namespace mls::autodiff::data
