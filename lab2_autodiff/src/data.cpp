// Datasets: two spirals, blobs, and the IDX (MNIST) file format.
#include "mls/autodiff/data.hpp"
#include "mls/common/file.hpp"

#include <cmath>
#include <fstream>
#include <sstream>
#include <numbers>
#include <vector>

namespace mls::autodiff::data {

Dataset two_spirals(std::int64_t n_per_class, double noise, Rng& rng) {
  MLS_CHECK(n_per_class > 0 && noise >= 0, "two_spirals: need n_per_class > 0 and noise >= 0, got ", n_per_class, " and ",
            noise);
  const std::int64_t n = 2 * n_per_class;
  Tensor x = Tensor::empty({n, 2}, DType::Float32);
  Tensor y = Tensor::empty({n}, DType::Int64);
  float* px = x.data<float>();
  std::int64_t* py = y.data<std::int64_t>();
  for (std::int64_t c = 0; c < 2; ++c)
    for (std::int64_t i = 0; i < n_per_class; ++i) {
      const double t = 0.25 + 3.0 * std::numbers::pi * static_cast<double>(i) / static_cast<double>(n_per_class);
      const double r = t / (3.0 * std::numbers::pi) * 4.0;
      const double a = t + std::numbers::pi * static_cast<double>(c);
      const std::int64_t k = c * n_per_class + i;
      px[2 * k] = static_cast<float>(r * std::cos(a) + rng.normal(0.0, noise));
      px[2 * k + 1] = static_cast<float>(r * std::sin(a) + rng.normal(0.0, noise));
      py[k] = c;
    }
  return {x, y, 2};
}

Dataset blobs(std::int64_t n_per_class, std::int64_t classes, std::int64_t dim, double stddev, Rng& rng) {
  MLS_CHECK(n_per_class > 0 && classes > 1 && dim >= 2 && stddev >= 0, "blobs: need n_per_class > 0, classes > 1, dim >= 2, stddev >= 0");
  const std::int64_t n = n_per_class * classes;
  Tensor x = Tensor::empty({n, dim}, DType::Float32);
  Tensor y = Tensor::empty({n}, DType::Int64);
  float* px = x.data<float>();
  for (std::int64_t c = 0; c < classes; ++c) {
    const double a = 2.0 * std::numbers::pi * static_cast<double>(c) / static_cast<double>(classes);
    for (std::int64_t i = 0; i < n_per_class; ++i) {
      const std::int64_t k = c * n_per_class + i;
      for (std::int64_t d = 0; d < dim; ++d) {
        const double centre = d == 0 ? 4.0 * std::cos(a) : (d == 1 ? 4.0 * std::sin(a) : 0.0);
        px[k * dim + d] = static_cast<float>(centre + rng.normal(0.0, stddev));
      }
      y.data<std::int64_t>()[k] = c;
    }
  }
  return {x, y, classes};
}

namespace {
std::uint32_t read_be32(std::istream& in, const std::string& path) {
  unsigned char b[4];
  in.read(reinterpret_cast<char*>(b), 4);
  MLS_CHECK(in.gcount() == 4, "read_idx: ", path, " is truncated in its header");
  return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | std::uint32_t{b[3]};
}
void write_be32(std::ostream& out, std::uint32_t v) {
  const unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                              static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  out.write(reinterpret_cast<const char*>(b), 4);
}
}  // namespace

Tensor read_idx(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MLS_CHECK(in.good(), "read_idx: cannot open ", path);
  const std::uint32_t magic = read_be32(in, path);
  const std::uint32_t type = (magic >> 8) & 0xff, ndim = magic & 0xff;
  MLS_CHECK((magic >> 16) == 0 && (type == 0x08 || type == 0x0C || type == 0x0D) && ndim >= 1 && ndim <= 8,
            "read_idx: ", path, " has a bad magic number 0x", std::hex, magic,
            " (expected 0x0000TTNN with type 08 ubyte, 0C int32 or 0D float)");
  Shape shape;
  for (std::uint32_t i = 0; i < ndim; ++i) shape.push_back(static_cast<std::int64_t>(read_be32(in, path)));
  const std::int64_t n = checked_numel(shape, "read_idx");
  const std::size_t item = type == 0x08 ? 1 : 4;
  std::vector<unsigned char> raw(static_cast<std::size_t>(n) * item);
  in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
  MLS_CHECK(static_cast<std::size_t>(in.gcount()) == raw.size(), "read_idx: ", path, " is truncated: expected ",
            raw.size(), " data bytes for shape ", shape_str(shape), ", got ", in.gcount());
  if (type == 0x08) {
    Tensor t = Tensor::empty(shape, DType::Int32);
    std::int32_t* p = t.data<std::int32_t>();
    for (std::int64_t i = 0; i < n; ++i) p[i] = raw[static_cast<std::size_t>(i)];
    return t;
  }
  Tensor t = Tensor::empty(shape, type == 0x0C ? DType::Int32 : DType::Float32);
  auto* p = static_cast<std::uint32_t*>(t.data_ptr());
  for (std::int64_t i = 0; i < n; ++i) {
    const unsigned char* b = &raw[static_cast<std::size_t>(i) * 4];
    p[i] = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | std::uint32_t{b[3]};
  }
  return t;
}

void write_idx(const std::string& path, const Tensor& t) {
  MLS_CHECK(t.dtype() == DType::Int32 || t.dtype() == DType::Float32, "write_idx: need int32 (as ubyte) or float32, got ",
            t.dtype());
  MLS_CHECK(t.ndim() >= 1, "write_idx: need at least 1 dim");
  std::ostringstream out(std::ios::binary);
  const bool bytes = t.dtype() == DType::Int32;
  write_be32(out, (bytes ? 0x08u : 0x0Du) << 8 | static_cast<std::uint32_t>(t.ndim()));
  for (std::int64_t d : t.shape()) write_be32(out, static_cast<std::uint32_t>(d));
  const Tensor c = t.compact();
  if (bytes) {
    for (std::int32_t v : c.to_vector<std::int32_t>()) {
      MLS_CHECK(v >= 0 && v <= 255, "write_idx: ubyte values must be 0..255, got ", v);
      out.put(static_cast<char>(v));
    }
  } else {
    const auto* p = static_cast<const std::uint32_t*>(c.data_ptr());
    for (std::int64_t i = 0; i < c.numel(); ++i) write_be32(out, p[i]);
  }
  write_file_atomic(path, out.str(), "write_idx");
}

Dataset load_mnist(const std::string& dir, bool train) {
  const std::string pre = dir + "/" + (train ? "train" : "t10k");
  const Tensor images = read_idx(pre + "-images-idx3-ubyte");
  const Tensor labels = read_idx(pre + "-labels-idx1-ubyte");
  MLS_CHECK(images.ndim() == 3 && labels.ndim() == 1 && images.shape()[0] == labels.shape()[0],
            "load_mnist: images ", shape_str(images.shape()), " and labels ", shape_str(labels.shape()),
            " in ", dir, " do not match");
  const std::int64_t n = images.shape()[0];
  Dataset d;
  d.x = mls::div(images.reshape({n, images.shape()[1] * images.shape()[2]}).to(DType::Float32), 255.0);
  d.labels = labels.to(DType::Int64);
  d.classes = 10;
  return d;
}

}  // namespace mls::autodiff::data
