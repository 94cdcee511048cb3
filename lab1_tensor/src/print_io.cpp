// Printing (NumPy-like), comparison, and .npy files.
#include <cmath>
#include <cstring>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "mls/common/npy.hpp"
#include "mls/tensor/tensor.hpp"

namespace mls::inline tensor {
namespace {

constexpr std::int64_t kSummarizeAbove = 1000;  // elements; then show 3 at each end per dim
constexpr std::int64_t kEdge = 3;

std::string format_value(const Tensor& t, double v, bool all_integral_floats) {
  std::ostringstream os;
  if (t.dtype() == DType::Bool) return v != 0 ? "True" : "False";
  if (!is_floating(t.dtype())) {
    os << static_cast<long long>(v);
    return os.str();
  }
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (all_integral_floats) {
    os << static_cast<long long>(v) << '.';
  } else if (v != 0 && (std::fabs(v) >= 1e6 || std::fabs(v) < 1e-4)) {
    os << std::scientific << std::setprecision(4) << v;
  } else {
    os << std::fixed << std::setprecision(4) << v;
  }
  return os.str();
}

void print_rec(std::ostream& os, const Tensor& t, std::vector<std::int64_t>& idx, std::size_t dim, bool summarize,
               bool integral, std::size_t width, int indent) {
  const std::int64_t n = t.shape()[dim];
  os << '[';
  for (std::int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdge && i == kEdge) {
      os << "...";
      i = n - kEdge - 1;
      if (dim + 1 < t.shape().size()) {
        os << ",\n" << std::string(static_cast<std::size_t>(indent) + dim + 1, ' ');
      } else {
        os << ", ";
      }
      continue;
    }
    idx[dim] = i;
    if (dim + 1 == t.shape().size()) {
      const std::string s = format_value(t, t.at(idx), integral);
      os << std::string(width > s.size() ? width - s.size() : 0, ' ') << s;
    } else {
      print_rec(os, t, idx, dim + 1, summarize, integral, width, indent);
    }
    if (i + 1 < n) {
      if (dim + 1 == t.shape().size()) {
        os << ", ";
      } else {
        os << ',' << std::string(t.shape().size() - dim - 1, '\n') << std::string(static_cast<std::size_t>(indent) + dim + 1, ' ');
      }
    }
  }
  os << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  const bool summarize = t.numel() > kSummarizeAbove;
  // Width and style from all printed values, so that columns line up.
  const Tensor flat = t.compact().reshape({-1});
  bool integral = is_floating(t.dtype());
  std::size_t width = 0;
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    if (summarize && i == kSummarizeAbove) break;
    const double v = flat.at({i});
    if (!std::isfinite(v) || v != std::floor(v) || std::fabs(v) >= 1e6) integral = false;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    if (summarize && i == kSummarizeAbove) break;
    width = std::max(width, format_value(t, flat.at({i}), integral).size());
  }
  os << "tensor(";
  if (t.ndim() == 0) {
    os << format_value(t, t.item(), integral);
  } else {
    std::vector<std::int64_t> idx(t.shape().size(), 0);
    print_rec(os, t, idx, 0, summarize, integral, width, 7);
  }
  return os << ", shape=" << shape_str(t.shape()) << ", dtype=" << t.dtype() << ')';
}

std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  MLS_CHECK(a.defined() && b.defined(), "allclose: tensor is undefined");
  if (a.shape() != b.shape()) return false;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] == y[i]) continue;                              // also equal infinities
    if (std::isinf(x[i]) || std::isinf(y[i])) return false;  // inf is close only to itself
    if (!(std::fabs(x[i] - y[i]) <= atol + rtol * std::fabs(y[i]))) return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  MLS_CHECK(a.defined() && b.defined(), "equal: tensor is undefined");
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  return a.to_vector<double>() == b.to_vector<double>();
}

void save(const std::string& path, const Tensor& t) {
  MLS_CHECK(t.defined(), "save: tensor is undefined");
  const Tensor c = t.compact();
  NpyArray arr;
  arr.dtype = c.dtype();
  arr.shape = c.shape();
  arr.fortran_order = false;
  const std::size_t nbytes = static_cast<std::size_t>(c.numel()) * c.itemsize();
  arr.data.resize(nbytes);
  if (nbytes) std::memcpy(arr.data.data(), c.data_ptr(), nbytes);
  write_npy(path, arr);
}

Tensor load(const std::string& path) {
  const NpyArray arr = read_npy(path);
  if (!arr.fortran_order) {
    Tensor t = Tensor::empty(arr.shape, arr.dtype);
    if (!arr.data.empty()) std::memcpy(t.data_ptr(), arr.data.data(), arr.data.size());
    return t;
  }
  // Fortran order: the bytes are the column-major layout of `shape`; view them with Fortran
  // strides, then make the result row-major.
  Tensor raw = Tensor::empty({checked_numel(arr.shape, "load")}, arr.dtype);
  if (!arr.data.empty()) std::memcpy(raw.data_ptr(), arr.data.data(), arr.data.size());
  return raw.as_strided(arr.shape, fortran_strides(arr.shape), 0).compact();
}

}  // namespace mls::tensor
