// Tensor: storage, creation, metadata, element access and conversions.
#include "mls/tensor/tensor.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "copy.hpp"
#include "mls/common/alloc.hpp"

namespace mls::inline tensor {

// ---- storage ------------------------------------------------------------------------------------

Storage::Storage(std::size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  MLS_CHECK(device.type == DeviceType::CPU, "Storage: cannot allocate on ", device,
            " (lab 1 tensors live on the CPU; GPU buffers are managed by the kernels of lab 4)");
  data_ = static_cast<std::byte*>(cpu_alloc(nbytes));
  mem_ = mem::on_alloc(static_cast<std::int64_t>(nbytes));
}

Storage::~Storage() {
  mem::on_release(mem_, static_cast<std::int64_t>(nbytes_));
  cpu_free(data_, nbytes_);
}

// ---- creation -----------------------------------------------------------------------------------

Tensor::Tensor(std::shared_ptr<Storage> storage, std::int64_t offset, Shape shape, Strides strides,
               DType dtype)
    : storage_(std::move(storage)), offset_(offset), shape_(std::move(shape)), strides_(std::move(strides)),
      dtype_(dtype) {
  MLS_CHECK(shape_.size() == strides_.size(), "Tensor: shape ", shape_str(shape_), " and strides ",
            shape_str(strides_), " have different lengths");
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  const std::int64_t n = checked_numel(shape, "empty");
  MLS_CHECK(n <= std::numeric_limits<std::int64_t>::max() / static_cast<std::int64_t>(mls::itemsize(dtype)),
            "empty: shape ", shape_str(shape), " of ", dtype, " needs more than 2^63 bytes");
  auto storage = std::make_shared<Storage>(static_cast<std::size_t>(n) * mls::itemsize(dtype), device);
  return Tensor(std::move(storage), 0, shape, contiguous_strides(shape), dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.data_ptr(), 0, static_cast<std::size_t>(t.numel()) * t.itemsize());
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill_(value);
  return t;
}

Tensor Tensor::scalar(double value, DType dtype) { return full({}, value, dtype); }

Tensor Tensor::arange(double start, double stop, double step, DType dtype) {
  MLS_CHECK(step != 0.0 && std::isfinite(step), "arange: step must be finite and non-zero, got ", step);
  MLS_CHECK(std::isfinite(start) && std::isfinite(stop), "arange: start ", start, " and stop ", stop,
            " must be finite");
  const double count = std::ceil((stop - start) / step);
  MLS_CHECK(count < 9.0e18, "arange: [", start, ", ", stop, ") in steps of ", step, " is too many elements");
  const std::int64_t n = std::max<std::int64_t>(0, static_cast<std::int64_t>(count));
  Tensor t = empty({n}, dtype);
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + static_cast<double>(i) * step);
  });
  return t;
}

Tensor Tensor::linspace(double start, double stop, std::int64_t num, DType dtype) {
  MLS_CHECK(num >= 0, "linspace: num must be >= 0, got ", num);
  Tensor t = empty({num}, dtype);
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    const double step = num > 1 ? (stop - start) / static_cast<double>(num - 1) : 0.0;
    for (std::int64_t i = 0; i < num; ++i) {
      p[i] = static_cast<T>(i == num - 1 && num > 1 ? stop : start + static_cast<double>(i) * step);
    }
  });
  return t;
}

Tensor Tensor::eye(std::int64_t n, std::int64_t m, DType dtype) {
  if (m < 0) m = n;
  MLS_CHECK(n >= 0, "eye: size must be >= 0, got ", n);
  Tensor t = zeros({n, m}, dtype);
  for (std::int64_t i = 0; i < std::min(n, m); ++i) t.set({i, i}, 1.0);
  return t;
}

Tensor Tensor::rand(const Shape& shape, Rng& rng, double lo, double hi, DType dtype) {
  MLS_CHECK(lo <= hi, "rand: empty range [", lo, ", ", hi, ")");
  MLS_CHECK(is_floating(dtype), "rand: dtype must be float32 or float64, got ", dtype);
  Tensor t = empty(shape, dtype);
  const std::int64_t n = t.numel();
  if (dtype == DType::Float32) {
    // Rounding can carry lo + w * u up to hi itself: such draws are pulled back below hi.
    float* p = t.data<float>();
    const float a = static_cast<float>(lo), w = static_cast<float>(hi - lo), top = static_cast<float>(hi);
    const float below = std::nextafter(top, -std::numeric_limits<float>::infinity());
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = a + w * rng.uniform_float();
      p[i] = v < top || lo == hi ? v : below;
    }
  } else {
    double* p = t.data<double>();
    const double below = std::nextafter(hi, -std::numeric_limits<double>::infinity());
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = rng.uniform(lo, hi);
      p[i] = v < hi || lo == hi ? v : below;
    }
  }
  return t;
}

Tensor Tensor::randn(const Shape& shape, Rng& rng, double mean, double stddev, DType dtype) {
  MLS_CHECK(stddev >= 0, "randn: stddev must be >= 0, got ", stddev);
  MLS_CHECK(is_floating(dtype), "randn: dtype must be float32 or float64, got ", dtype);
  Tensor t = empty(shape, dtype);
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(rng.normal(mean, stddev));
  });
  return t;
}

// ---- metadata -----------------------------------------------------------------------------------

void Tensor::check_defined(const char* op) const {
  MLS_CHECK(storage_ != nullptr, op, ": tensor is undefined (default-constructed)");
}

std::int64_t Tensor::size(std::int64_t dim) const {
  return shape_[static_cast<std::size_t>(normalize_axis(dim, ndim(), "size"))];
}

std::int64_t Tensor::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape_) n *= d;
  return n;
}

Device Tensor::device() const { return storage_ ? storage_->device() : Device{}; }

bool Tensor::is_contiguous() const { return mls::is_contiguous(shape_, strides_); }

void* Tensor::data_ptr() {
  check_defined("data_ptr");
  return storage_->data() + offset_ * static_cast<std::int64_t>(itemsize());
}

const void* Tensor::data_ptr() const {
  check_defined("data_ptr");
  return storage_->data() + offset_ * static_cast<std::int64_t>(itemsize());
}

// ---- element access -----------------------------------------------------------------------------

double Tensor::at(std::span<const std::int64_t> index) const {
  check_defined("at");
  const std::int64_t pos = index_to_offset(index, shape_, strides_, offset_);
  return dispatch(dtype_, [&](auto tag) {
    using T = decltype(tag);
    return static_cast<double>(reinterpret_cast<const T*>(storage_->data())[pos]);
  });
}

void Tensor::set(std::span<const std::int64_t> index, double value) {
  check_defined("set");
  const std::int64_t pos = index_to_offset(index, shape_, strides_, offset_);
  dispatch(dtype_, [&](auto tag) {
    using T = decltype(tag);
    reinterpret_cast<T*>(storage_->data())[pos] = static_cast<T>(value);
  });
}

double Tensor::item() const {
  check_defined("item");
  MLS_CHECK(numel() == 1, "item: tensor of shape ", shape_str(shape_), " has ", numel(),
            " elements, expected exactly 1");
  const std::vector<std::int64_t> zero(shape_.size(), 0);
  return at(zero);
}

// ---- copies -------------------------------------------------------------------------------------

Tensor Tensor::clone() const {
  check_defined("clone");
  Tensor out = empty(shape_, dtype_);
  impl::copy_elements(out, *this);
  return out;
}

namespace {
/// [lo, hi) byte range of storage a tensor touches (empty when it has no elements).
std::pair<std::int64_t, std::int64_t> byte_range(const Tensor& t) {
  const auto item = static_cast<std::int64_t>(t.itemsize());
  std::int64_t lo = t.offset(), hi = t.offset();
  for (std::size_t d = 0; d < t.shape().size(); ++d) {
    const std::int64_t n = t.shape()[d], s = t.strides()[d];
    if (n == 0) return {0, 0};
    if (s < 0) lo += (n - 1) * s;
    else hi += (n - 1) * s;
  }
  return {lo * item, (hi + 1) * item};
}
}  // namespace

bool Tensor::may_overlap(const Tensor& other) const {
  if (!shares_storage(other)) return false;
  const auto [a0, a1] = byte_range(*this);
  const auto [b0, b1] = byte_range(other);
  if (a0 == a1 || b0 == b1) return false;
  return a0 < b1 && b0 < a1;
}

bool Tensor::same_elements(const Tensor& other) const {
  if (!shares_storage(other) || dtype_ != other.dtype_ || shape_ != other.shape_) return false;
  if (numel() == 0) return true;
  if (offset_ != other.offset_) return false;
  for (std::size_t d = 0; d < shape_.size(); ++d) {
    if (shape_[d] > 1 && strides_[d] != other.strides_[d]) return false;
  }
  return true;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_defined("copy_");
  src.check_defined("copy_");
  const Tensor b = src.expand(shape_);  // throws "copy_: cannot broadcast ..." style errors
  if (b.same_elements(*this)) return *this;  // x.copy_(x): nothing to do
  if (may_overlap(src)) {
    // Overlapping source and destination: copy through a temporary (only then: the fast path
    // stays a single pass).
    impl::copy_elements(*this, src.clone().expand(shape_));
  } else {
    impl::copy_elements(*this, b);
  }
  return *this;
}

Tensor Tensor::to(DType dtype) const {
  check_defined("to");
  if (dtype == dtype_) return *this;
  Tensor out = empty(shape_, dtype);
  impl::copy_elements(out, *this);
  return out;
}

Tensor& Tensor::fill_(double value) {
  check_defined("fill_");
  dispatch(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const T v = static_cast<T>(value);
    std::array<const std::int64_t*, 1> st{strides_.data()};
    impl::for_each_row<1>(shape_, st, {static_cast<std::int64_t>(sizeof(T))},
                            {static_cast<char*>(data_ptr())},
                            [v](std::array<char*, 1> p, std::array<std::int64_t, 1> s, std::int64_t n) {
                              char* q = p[0];
                              for (std::int64_t i = 0; i < n; ++i, q += s[0]) *reinterpret_cast<T*>(q) = v;
                            });
  });
  return *this;
}

}  // namespace mls::tensor
