#pragma once
/// mls::Tensor — a strided view over shared storage (lecture 002, "Strides format").
///
/// A tensor is four things kept apart, as in PyTorch's TensorImpl:
///   storage  a reference-counted block of bytes on a device, shared by every view of it;
///   offset   where element [0, 0, ...] sits in the storage, in elements;
///   shape    the size of each dimension;
///   strides  how many elements to skip in storage to move one step along each dimension.
/// A view (transpose, slice, expand, ...) makes a new Tensor over the same storage with other
/// offset/shape/strides: no data is copied. `compact()` copies a view into dense row-major order.
///
/// Every misuse throws `mls::Error` naming the operation and the values.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mls/common/dtype.hpp"
#include "mls/common/error.hpp"
#include "mls/common/memory.hpp"
#include "mls/common/rng.hpp"
#include "mls/common/shape.hpp"
#include "mls/tensor/index.hpp"

namespace mls::inline tensor {

/// A block of bytes on a device (64-byte aligned). Owned by shared_ptr: views share it.
/// Counted by the memory tracker (mls/common/memory.hpp) under the tag and rank of the
/// allocating thread's mem::TagScope, and released under the same ones.
class Storage {
 public:
  Storage(std::size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  /// The tag this storage is counted under (meaningful when the tracker was on at allocation).
  mem::Tag mem_tag() const { return mem_.tag; }

 private:
  std::byte* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  mem::Token mem_{};
};

class Tensor {
 public:
  /// An undefined tensor (no storage). Most operations on it throw.
  Tensor() = default;

  // ---- creation -------------------------------------------------------------------------
  /// Uninitialised storage for `shape`, row-major.
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32, Device device = {});
  static Tensor zeros(const Shape& shape, DType dtype = DType::Float32);
  static Tensor ones(const Shape& shape, DType dtype = DType::Float32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::Float32);
  /// [start, stop) in steps of `step` (step != 0), like numpy.arange.
  static Tensor arange(double start, double stop, double step = 1.0, DType dtype = DType::Float32);
  static Tensor arange(std::int64_t n, DType dtype = DType::Float32) {
    return arange(0.0, static_cast<double>(n), 1.0, dtype);
  }
  /// `num` evenly spaced values from start to stop inclusive.
  static Tensor linspace(double start, double stop, std::int64_t num, DType dtype = DType::Float32);
  /// n x m identity (m = n when m < 0).
  static Tensor eye(std::int64_t n, std::int64_t m = -1, DType dtype = DType::Float32);
  /// Uniform in [lo, hi) drawn from `rng` (seeded, reproducible).
  static Tensor rand(const Shape& shape, Rng& rng, double lo = 0.0, double hi = 1.0,
                     DType dtype = DType::Float32);
  /// Normal(mean, stddev) drawn from `rng`.
  static Tensor randn(const Shape& shape, Rng& rng, double mean = 0.0, double stddev = 1.0,
                      DType dtype = DType::Float32);
  /// Copies `values` into a new 1-D tensor; the dtype follows T (float -> float32, ...).
  template <class T>
  static Tensor from_vector(const std::vector<T>& values) {
    return from_vector(values, Shape{static_cast<std::int64_t>(values.size())});
  }
  /// Copies `values` into a new tensor of `shape` (row-major; {} makes a 0-d tensor).
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape);
  /// `Tensor::from({1.f, 2.f, 3.f, 4.f}, {2, 2})`.
  template <class T>
  static Tensor from(std::initializer_list<T> values) { return from_vector(std::vector<T>(values)); }
  template <class T>
  static Tensor from(std::initializer_list<T> values, Shape shape) {
    return from_vector(std::vector<T>(values), std::move(shape));
  }
  /// A 0-d tensor holding `value`.
  static Tensor scalar(double value, DType dtype = DType::Float32);
  /// A tensor viewing existing storage (no copy).
  Tensor(std::shared_ptr<Storage> storage, std::int64_t offset, Shape shape, Strides strides, DType dtype);

  // ---- metadata ---------------------------------------------------------------------------
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  std::int64_t offset() const { return offset_; }
  std::int64_t ndim() const { return static_cast<std::int64_t>(shape_.size()); }
  /// Size of dimension `dim` (negative counts from the end).
  std::int64_t size(std::int64_t dim) const;
  std::int64_t numel() const;
  DType dtype() const { return dtype_; }
  std::size_t itemsize() const { return mls::itemsize(dtype_); }
  Device device() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  /// True when both tensors view the same storage block.
  bool shares_storage(const Tensor& other) const { return storage_ && storage_ == other.storage_; }
  /// True when the two tensors may have an element in common (same storage and overlapping
  /// byte ranges; like numpy.may_share_memory: conservative, never a false "no"). In-place
  /// ops use it to copy an overlapping operand first.
  bool may_overlap(const Tensor& other) const;
  /// True when both tensors address exactly the same elements in the same order (same storage,
  /// offset, dtype, shape and strides on every dimension of size > 1).
  bool same_elements(const Tensor& other) const;
  /// Dense and row-major (see `mls::is_contiguous`).
  bool is_contiguous() const;

  /// Address of element [0, 0, ...] (storage + offset).
  void* data_ptr();
  const void* data_ptr() const;
  /// Typed address of element [0, ...]; throws if T does not match the dtype.
  template <class T> T* data();
  template <class T> const T* data() const;

  // ---- element access (for tests and teaching; slow) --------------------------------------
  /// The element at `index` converted to double. Negative indices count from the end.
  double at(std::span<const std::int64_t> index) const;
  double at(std::initializer_list<std::int64_t> index) const {
    return at(std::span<const std::int64_t>(index.begin(), index.size()));
  }
  /// Writes `value` (converted to the dtype) at `index`.
  void set(std::span<const std::int64_t> index, double value);
  void set(std::initializer_list<std::int64_t> index, double value) {
    set(std::span<const std::int64_t>(index.begin(), index.size()), value);
  }
  /// The value of a one-element tensor.
  double item() const;
  /// All elements in row-major order, converted to T.
  template <class T> std::vector<T> to_vector() const;

  // ---- views (no copy; the result shares storage) -------------------------------------------
  /// The same elements with another shape; one dimension may be -1 (inferred). Throws when the
  /// strides cannot express the new shape (use `reshape`, which copies then).
  Tensor view(const Shape& shape) const;
  /// Like `view` where possible, else a compact copy.
  Tensor reshape(const Shape& shape) const;
  /// Reorders dimensions: result dim i is this tensor's dim `dims[i]`.
  Tensor permute(std::span<const std::int64_t> dims) const;
  Tensor permute(std::initializer_list<std::int64_t> dims) const {
    return permute(std::span<const std::int64_t>(dims.begin(), dims.size()));
  }
  /// Swaps two dimensions (default: the last two).
  Tensor transpose(std::int64_t dim0 = -2, std::int64_t dim1 = -1) const;
  /// Elements start, start+step, ... < stop along `dim` (negative start/stop count from the end
  /// and are clamped like Python slices; step >= 1).
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t stop, std::int64_t step = 1) const;
  /// Removes `dim` by fixing its index (negative counts from the end).
  Tensor select(std::int64_t dim, std::int64_t index) const;
  /// Broadcasts to `shape` with stride 0 on stretched dimensions (-1 keeps a size).
  Tensor expand(const Shape& shape) const;
  Tensor broadcast_to(const Shape& shape) const { return expand(shape); }
  /// Removes dimension `dim`, which must have size 1.
  Tensor squeeze(std::int64_t dim) const;
  /// Removes every dimension of size 1.
  Tensor squeeze() const;
  /// Inserts a dimension of size 1 at `dim` (0 <= dim <= ndim; negative counts from the end).
  Tensor unsqueeze(std::int64_t dim) const;
  /// Merges dims start..end into one (a view when the strides allow, else a copy).
  Tensor flatten(std::int64_t start = 0, std::int64_t end = -1) const;
  /// Any shape/strides/offset over the same storage; checked to stay inside the storage.
  Tensor as_strided(const Shape& shape, const Strides& strides, std::int64_t offset) const;
  /// The diagonal of dims (dim1, dim2) as the last dimension; `k` > 0 above, < 0 below.
  Tensor diagonal(std::int64_t k = 0, std::int64_t dim1 = 0, std::int64_t dim2 = 1) const;

  // ---- copies ----------------------------------------------------------------------------
  /// A dense row-major copy of the elements in logical order; returns *this (no copy) when the
  /// tensor is already contiguous.
  Tensor compact() const;
  Tensor contiguous() const { return compact(); }
  /// Always a new dense copy.
  Tensor clone() const;
  /// Copies `src` (broadcast to this shape and converted to this dtype) into this tensor's
  /// elements, whatever the strides of either. Returns *this.
  Tensor& copy_(const Tensor& src);
  /// A copy converted to `dtype` (returns *this when the dtype already matches).
  Tensor to(DType dtype) const;
  /// Fills every element with `value`.
  Tensor& fill_(double value);

  // ---- in-place arithmetic (result must keep this tensor's shape and dtype) ----------------
  Tensor& operator+=(const Tensor& other);
  Tensor& operator-=(const Tensor& other);
  Tensor& operator*=(const Tensor& other);
  Tensor& operator/=(const Tensor& other);
  Tensor& operator+=(double s);
  Tensor& operator-=(double s);
  Tensor& operator*=(double s);
  Tensor& operator/=(double s);

 private:
  void check_defined(const char* op) const;

  std::shared_ptr<Storage> storage_;
  std::int64_t offset_ = 0;
  Shape shape_;
  Strides strides_;
  DType dtype_ = DType::Float32;
};

// ---- elementwise (NumPy broadcasting, dtype promotion) ---------------------------------------
enum class UnaryOp { Neg, Abs, Exp, Log, Sqrt, Rsqrt, Sin, Cos, Tanh, Sigmoid, Relu, Gelu };
enum class BinaryOp { Add, Sub, Mul, Div, Pow, Maximum, Minimum, Eq, Ne, Lt, Le, Gt, Ge };

const char* op_name(UnaryOp op);
const char* op_name(BinaryOp op);

/// out = op(a): float ops (exp, log, ...) on integer input compute in float32.
Tensor unary(UnaryOp op, const Tensor& a);
/// out = op(a, b) with broadcasting; comparisons return bool.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
/// out = op(a, s): the scalar takes the tensor's dtype (a float scalar with an integer tensor
/// promotes to float32).
Tensor binary(BinaryOp op, const Tensor& a, double s);
/// a = op(a, b) in place; b must broadcast to a's shape and the result dtype must be a's.
void binary_(BinaryOp op, Tensor& a, const Tensor& b);

inline Tensor neg(const Tensor& a) { return unary(UnaryOp::Neg, a); }
inline Tensor abs(const Tensor& a) { return unary(UnaryOp::Abs, a); }
inline Tensor exp(const Tensor& a) { return unary(UnaryOp::Exp, a); }
inline Tensor log(const Tensor& a) { return unary(UnaryOp::Log, a); }
inline Tensor sqrt(const Tensor& a) { return unary(UnaryOp::Sqrt, a); }
inline Tensor rsqrt(const Tensor& a) { return unary(UnaryOp::Rsqrt, a); }
inline Tensor sin(const Tensor& a) { return unary(UnaryOp::Sin, a); }
inline Tensor cos(const Tensor& a) { return unary(UnaryOp::Cos, a); }
inline Tensor tanh(const Tensor& a) { return unary(UnaryOp::Tanh, a); }
inline Tensor sigmoid(const Tensor& a) { return unary(UnaryOp::Sigmoid, a); }
inline Tensor relu(const Tensor& a) { return unary(UnaryOp::Relu, a); }
/// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline Tensor gelu(const Tensor& a) { return unary(UnaryOp::Gelu, a); }

inline Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Add, a, b); }
inline Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Sub, a, b); }
inline Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Mul, a, b); }
/// True division: integer inputs give float32.
inline Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Div, a, b); }
inline Tensor pow(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Pow, a, b); }
inline Tensor maximum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Maximum, a, b); }
inline Tensor minimum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Minimum, a, b); }
inline Tensor eq(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Eq, a, b); }
inline Tensor ne(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Ne, a, b); }
inline Tensor lt(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Lt, a, b); }
inline Tensor le(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Le, a, b); }
inline Tensor gt(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Gt, a, b); }
inline Tensor ge(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Ge, a, b); }
inline Tensor add(const Tensor& a, double s) { return binary(BinaryOp::Add, a, s); }
inline Tensor sub(const Tensor& a, double s) { return binary(BinaryOp::Sub, a, s); }
inline Tensor mul(const Tensor& a, double s) { return binary(BinaryOp::Mul, a, s); }
inline Tensor div(const Tensor& a, double s) { return binary(BinaryOp::Div, a, s); }
inline Tensor pow(const Tensor& a, double s) { return binary(BinaryOp::Pow, a, s); }
inline Tensor maximum(const Tensor& a, double s) { return binary(BinaryOp::Maximum, a, s); }
inline Tensor minimum(const Tensor& a, double s) { return binary(BinaryOp::Minimum, a, s); }
inline Tensor eq(const Tensor& a, double s) { return binary(BinaryOp::Eq, a, s); }
inline Tensor ne(const Tensor& a, double s) { return binary(BinaryOp::Ne, a, s); }
inline Tensor lt(const Tensor& a, double s) { return binary(BinaryOp::Lt, a, s); }
inline Tensor le(const Tensor& a, double s) { return binary(BinaryOp::Le, a, s); }
inline Tensor gt(const Tensor& a, double s) { return binary(BinaryOp::Gt, a, s); }
inline Tensor ge(const Tensor& a, double s) { return binary(BinaryOp::Ge, a, s); }

inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return div(a, s); }
inline Tensor operator+(double s, const Tensor& a) { return add(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
inline Tensor operator-(double s, const Tensor& a) { return add(neg(a), s); }
Tensor operator/(double s, const Tensor& a);

/// Elementwise select: cond ? a : b, all three broadcast together; cond must be bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- reductions -------------------------------------------------------------------------------
/// Reduce over `axes` (empty = all axes); `keepdim` keeps reduced dims with size 1.
/// sum/prod of integers or bools give int64; mean/var of integers give float32 (computed in
/// float64 and rounded once).
Tensor sum(const Tensor& a, std::span<const std::int64_t> axes = {}, bool keepdim = false);
Tensor mean(const Tensor& a, std::span<const std::int64_t> axes = {}, bool keepdim = false);
Tensor prod(const Tensor& a, std::span<const std::int64_t> axes = {}, bool keepdim = false);
/// max/min over a non-empty set of elements (an empty reduction throws); they keep the dtype
/// (bool stays bool), and a max over all -inf is -inf.
Tensor max(const Tensor& a, std::span<const std::int64_t> axes = {}, bool keepdim = false);
Tensor min(const Tensor& a, std::span<const std::int64_t> axes = {}, bool keepdim = false);
/// Variance with `correction` (0: population, 1: sample), two-pass for accuracy.
Tensor var(const Tensor& a, std::span<const std::int64_t> axes = {}, bool keepdim = false,
           std::int64_t correction = 0);
/// Index (int64) of the first maximum / minimum along `axis`.
Tensor argmax(const Tensor& a, std::int64_t axis, bool keepdim = false);
Tensor argmin(const Tensor& a, std::int64_t axis, bool keepdim = false);
/// Numerically stable: exp(x - max) / sum(exp(x - max)) along `axis`.
Tensor softmax(const Tensor& a, std::int64_t axis = -1);
Tensor log_softmax(const Tensor& a, std::int64_t axis = -1);
Tensor logsumexp(const Tensor& a, std::int64_t axis = -1, bool keepdim = false);

/// Convenience overloads with an initializer list of axes: sum(x, {0, 2}).
inline Tensor sum(const Tensor& a, std::initializer_list<std::int64_t> axes, bool keepdim = false) {
  return sum(a, std::span<const std::int64_t>(axes.begin(), axes.size()), keepdim);
}
inline Tensor mean(const Tensor& a, std::initializer_list<std::int64_t> axes, bool keepdim = false) {
  return mean(a, std::span<const std::int64_t>(axes.begin(), axes.size()), keepdim);
}
inline Tensor prod(const Tensor& a, std::initializer_list<std::int64_t> axes, bool keepdim = false) {
  return prod(a, std::span<const std::int64_t>(axes.begin(), axes.size()), keepdim);
}
inline Tensor max(const Tensor& a, std::initializer_list<std::int64_t> axes, bool keepdim = false) {
  return max(a, std::span<const std::int64_t>(axes.begin(), axes.size()), keepdim);
}
inline Tensor min(const Tensor& a, std::initializer_list<std::int64_t> axes, bool keepdim = false) {
  return min(a, std::span<const std::int64_t>(axes.begin(), axes.size()), keepdim);
}
inline Tensor var(const Tensor& a, std::initializer_list<std::int64_t> axes, bool keepdim = false,
                  std::int64_t correction = 0) {
  return var(a, std::span<const std::int64_t>(axes.begin(), axes.size()), keepdim, correction);
}

// ---- linear algebra ---------------------------------------------------------------------------
/// Matrix product with NumPy semantics: 2-D x 2-D; batched [..., M, K] x [..., K, N] with the
/// batch dims broadcast; a 1-D operand is treated as a row (left) or column (right) vector and
/// that dimension is removed from the result. float32 goes through the registered SGEMM kernel
/// (see mls/common/kernels.hpp: MLS_MATMUL selects it); other dtypes use a plain loop.
Tensor matmul(const Tensor& a, const Tensor& b);
/// Registers lab 1's SGEMM kernels ("lab1_reference", and "openblas" when built with OpenBLAS) in the
/// kernel registry; `matmul` calls it, tests call it to list the kernels. Idempotent.
void register_matmul_kernels();

/// How the "openblas" kernel spreads one product over threads. OpenBLAS itself runs on one thread
/// (the calling one); the kernel cuts C into `blocks` pieces of `step` rows (`rows`) or columns,
/// whole 16-wide micro-tiles, and runs one single-threaded cblas_sgemm per piece inside common's
/// `parallel_for`. The cut depends on the shape and `num_threads()` only, never on the calling
/// thread's intra-op budget (`intra_op_threads()`), so a product gives the same bits whether its
/// pieces run on every thread or one after another on one (what lab 3's parallel executor
/// promises), even with an OpenBLAS whose own threads change its results (Debian's 0.3.21 with
/// OPENBLAS_CORETYPE=Haswell on a Zen 5 does); and its threads are the budgeted threads of
/// common's pool, never a second pool of OpenBLAS threads next to them (two tasks of `run_dag`
/// each starting num_threads() OpenBLAS threads oversubscribed the cores).
struct SgemmSplit {
  bool rows = true;  // the pieces are rows of C (M >= N), else columns
  long blocks = 1;   // pieces: at most num_threads(), fewer for a small product
  long step = 0;     // rows (or columns) per piece; the last piece may be shorter
};
/// The split the "openblas" kernel uses for an M x N x K product (see SgemmSplit).
SgemmSplit sgemm_split(long M, long N, long K);
/// OpenBLAS's own thread count (`openblas_get_num_threads`; 1 once the "openblas" kernel has run),
/// 0 in a build without OpenBLAS.
int openblas_threads();

// ---- joining and splitting --------------------------------------------------------------------
/// Joins tensors of equal shape except along `axis`.
Tensor concat(const std::vector<Tensor>& tensors, std::int64_t axis = 0);
/// Joins tensors of equal shape along a new dimension `axis`.
Tensor stack(const std::vector<Tensor>& tensors, std::int64_t axis = 0);
/// Views of consecutive pieces of `sizes` along `axis` (sizes must sum to the dim).
std::vector<Tensor> split(const Tensor& a, const std::vector<std::int64_t>& sizes, std::int64_t axis = 0);
/// Views of pieces of `size` along `axis` (the last may be smaller).
std::vector<Tensor> split(const Tensor& a, std::int64_t size, std::int64_t axis = 0);
/// `chunks` views as equal as possible along `axis` (like torch.chunk).
std::vector<Tensor> chunk(const Tensor& a, std::int64_t chunks, std::int64_t axis = 0);

// ---- comparison, printing, files --------------------------------------------------------------
/// Same shape and |a - b| <= atol + rtol * |b| everywhere (NaNs compare unequal).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
/// Same shape, dtype and values.
bool equal(const Tensor& a, const Tensor& b);
/// NumPy-like text: "tensor([[1., 2.],\n        [3., 4.]], shape=[2, 2], dtype=float32)".
std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Tensor& t);
/// .npy I/O (NumPy can read what we write and the other way round; Fortran order is honoured).
void save(const std::string& path, const Tensor& t);
Tensor load(const std::string& path);

// ---- template definitions ---------------------------------------------------------------------
template <class T>
T* Tensor::data() {
  check_defined("data");
  MLS_CHECK(dtype_v<T> == dtype_, "data: tensor has dtype ", dtype_, ", requested ", dtype_v<T>);
  return static_cast<T*>(data_ptr());
}
template <class T>
const T* Tensor::data() const {
  check_defined("data");
  MLS_CHECK(dtype_v<T> == dtype_, "data: tensor has dtype ", dtype_, ", requested ", dtype_v<T>);
  return static_cast<const T*>(data_ptr());
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, Shape shape) {
  const std::int64_t n = checked_numel(shape, "from_vector");
  MLS_CHECK(n == static_cast<std::int64_t>(values.size()), "from_vector: ", values.size(),
            " values do not fill shape ", shape_str(shape), " (", n, " elements)");
  using S = std::conditional_t<std::is_same_v<T, int>, std::int32_t,
                               std::conditional_t<std::is_same_v<T, long long>, std::int64_t, T>>;
  Tensor t = empty(shape, dtype_v<S>);
  S* p = t.data<S>();
  for (std::size_t i = 0; i < values.size(); ++i) p[i] = static_cast<S>(values[i]);
  return t;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  const Tensor c = to(dtype_v<T>).compact();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}

}  // namespace mls::tensor
