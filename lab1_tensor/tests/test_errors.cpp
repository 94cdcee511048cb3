// Bad input: every misuse throws mls::Error with a message naming the op and the values.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "generators.hpp"
#include "mls/common/kernels.hpp"
#include "mls/testing.hpp"

using mls::DType;
using mls::Tensor;
using ref::Dims;
using ref::I64;

/// The expression throws mls::Error and its message contains `text`.
#define CHECK_MLS_ERROR(expr, text)                      \
  do {                                                   \
    CHECK_THROWS_AS(expr, mls::Error);                   \
    CHECK_THROWS_WITH(expr, Catch::Contains(text));      \
    if (::mls::testing::observing()) {                   \
      std::string seen_ = "no mls::Error";               \
      try {                                              \
        (void)(expr);                                    \
      } catch (const mls::Error& e_) {                   \
        seen_ = ::mls::testing::error_observation(e_.what(), std::string(text)); \
      } catch (...) {                                    \
      }                                                  \
      ::mls::testing::observe("mls::Error naming '" + ::mls::testing::without_temp_dir(std::string(text)) + "'", seen_); \
    }                                                    \
  } while (0)

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("errors: broadcasting mismatches name the op and both shapes", "[lab1][errors]") {
  const Tensor a = Tensor::ones({2, 3}), b = Tensor::ones({4});
  CHECK_THROWS_AS(mls::add(a, b), mls::Error);
  CHECK_THROWS_WITH(mls::add(a, b), "add: cannot broadcast shapes [2, 3] and [4]");
  CHECK_THROWS_WITH(a + b, "add: cannot broadcast shapes [2, 3] and [4]");
  CHECK_MLS_ERROR(mls::mul(b, a), "mul: cannot broadcast shapes [4] and [2, 3]");
  // Every binary op names itself.
  for (auto op : {mls::BinaryOp::Add, mls::BinaryOp::Sub, mls::BinaryOp::Mul, mls::BinaryOp::Div, mls::BinaryOp::Pow,
                  mls::BinaryOp::Maximum, mls::BinaryOp::Minimum, mls::BinaryOp::Eq, mls::BinaryOp::Ne,
                  mls::BinaryOp::Lt, mls::BinaryOp::Le, mls::BinaryOp::Gt, mls::BinaryOp::Ge}) {
    INFO(mls::op_name(op));
    CHECK_THROWS_WITH(mls::binary(op, a, b), std::string(mls::op_name(op)) + ": cannot broadcast shapes [2, 3] and [4]");
  }
  CHECK_MLS_ERROR(mls::lt(a, Tensor::ones({3, 3})), "lt: cannot broadcast shapes [2, 3] and [3, 3]");
  CHECK_MLS_ERROR(mls::where(mls::gt(a, 0.0), a, b), "where: cannot broadcast shapes [2, 3] and [4]");
  CHECK_MLS_ERROR(mls::broadcast_shapes(Dims{5, 2}, Dims{3, 1}, "myop"), "myop: cannot broadcast shapes [5, 2] and [3, 1]");
  CHECK_MLS_ERROR(mls::broadcast_strides(Dims{2}, Dims{1}, Dims{3}, "myop"), "myop: cannot broadcast shape [2] to [3]");
  CHECK_MLS_ERROR(mls::broadcast_strides(Dims{2, 1}, Dims{1, 1}, Dims{2}, "myop"), "myop: cannot broadcast shape [2, 1] to [2]");
  Tensor c = Tensor::ones({3});
  CHECK_MLS_ERROR(c += a, "add_: in-place result of shape [2, 3] does not fit the destination of shape [3]");
  CHECK_MLS_ERROR(c.copy_(Tensor::ones({2})), "cannot broadcast shape [2] to [3]");
  CHECK_MLS_ERROR(c.copy_(Tensor::ones({2, 3})), "cannot broadcast shape [2, 3] to [3] (fewer dimensions)");
  CHECK_MLS_ERROR(mls::matmul(Tensor::ones({2, 3, 4}), Tensor::ones({3, 4, 5})), "matmul: cannot broadcast shapes [2] and [3]");
}

TEST_CASE("errors: out-of-range indices and axes", "[lab1][errors]") {
  Tensor m = Tensor::zeros({2, 3});
  CHECK_MLS_ERROR(m.at({0, 3}), "at: index 3 is out of range for dimension 1 of size 3");
  CHECK_MLS_ERROR(m.at({-3, 0}), "at: index -3 is out of range for dimension 0 of size 2");
  CHECK_MLS_ERROR(m.at({0}), "at: index [0] has 1 entries, expected 2");
  CHECK_MLS_ERROR(m.set({2, 0}, 1.0), "index 2 is out of range for dimension 0 of size 2");
  CHECK_MLS_ERROR(mls::index_to_offset(Dims{0, 5}, Dims{2, 3}, Dims{3, 1}, 0), "index 5 is out of range");
  CHECK_MLS_ERROR(m.size(2), "size: axis 2 is out of range for a tensor with 2 dimensions (expected -2 <= axis < 2)");
  CHECK_MLS_ERROR(m.size(-3), "size: axis -3 is out of range");
  CHECK_MLS_ERROR(mls::sum(m, {2}), "sum: axis 2 is out of range for a tensor with 2 dimensions");
  CHECK_MLS_ERROR(mls::sum(m, {1, -1}), "sum: axis -1 appears more than once in [1, -1]");
  CHECK_MLS_ERROR(mls::max(m, {-5}), "max: axis -5 is out of range");
  CHECK_MLS_ERROR(mls::mean(m, {3}), "mean: axis 3 is out of range");
  CHECK_MLS_ERROR(mls::argmax(m, 2), "argmax: axis 2 is out of range");
  CHECK_MLS_ERROR(mls::argmin(Tensor::scalar(1), 0), "argmin: axis 0 is out of range for a 0-d tensor");
  CHECK_MLS_ERROR(mls::sum(Tensor::scalar(1), {0}), "sum: axis 0 is out of range for a 0-d tensor");
  CHECK_MLS_ERROR(mls::softmax(m, 2), "softmax: axis 2 is out of range");
  CHECK_MLS_ERROR(mls::softmax(Tensor::scalar(1)), "softmax: axis -1 is out of range for a 0-d tensor");
  CHECK_MLS_ERROR(mls::logsumexp(m, -3), "logsumexp: axis -3 is out of range");
  CHECK_MLS_ERROR(m.transpose(0, 2), "transpose: axis 2 is out of range");
  CHECK_MLS_ERROR(m.unsqueeze(3), "unsqueeze: dim 3 is out of range for a tensor with 2 dimensions");
  CHECK_MLS_ERROR(m.unsqueeze(-4), "unsqueeze: dim -4 is out of range");
  CHECK_MLS_ERROR(m.flatten(0, 2), "flatten: axis 2 is out of range");
  CHECK_MLS_ERROR(m.flatten(1, 0), "flatten: start dim 1 comes after end dim 0");
  CHECK_MLS_ERROR(mls::concat({m, m}, 2), "concat: axis 2 is out of range");
  CHECK_MLS_ERROR(mls::stack({m, m}, 3), "stack: axis 3 is out of range for the result with 3 dimensions");
  CHECK_MLS_ERROR(mls::split(m, 1, 2), "axis 2 is out of range");
}

TEST_CASE("errors: views the strides cannot express and bad view arguments", "[lab1][errors]") {
  const Tensor m = Tensor::arange(6).reshape({2, 3});
  CHECK_MLS_ERROR(m.transpose().view({-1}),
                  "view: a tensor of shape [3, 2] and strides [1, 3] cannot be viewed as [6] without a copy");
  CHECK_MLS_ERROR(m.reshape({4, 2}), "reshape: shape [4, 2] has 8 elements, but the tensor of shape [2, 3] has 6");
  CHECK_MLS_ERROR(m.view({7}), "view: shape [7] has 7 elements, but the tensor of shape [2, 3] has 6");
  CHECK_MLS_ERROR(m.view({}), "view: shape [] has 1 elements");
  CHECK_MLS_ERROR(m.reshape({-1, -1}), "reshape: only one dimension can be -1, got [-1, -1]");
  CHECK_MLS_ERROR(m.view({-1, 4}), "view: cannot infer -1 in shape [-1, 4] for a tensor of shape [2, 3] (6 elements)");
  CHECK_MLS_ERROR(m.reshape({-2, 3}), "reshape: invalid size -2 in shape [-2, 3]");
  CHECK_MLS_ERROR(Tensor::zeros({0, 3}).reshape({-1, 0}), "reshape: cannot infer -1");
  CHECK_MLS_ERROR(m.permute({0, 0}), "permute: dims [0, 0] is not a permutation (0 repeats)");
  CHECK_MLS_ERROR(m.permute({1, -1}), "is not a permutation");
  CHECK_MLS_ERROR(m.permute({0}), "permute: got 1 dims [0] for a tensor with 2 dimensions");
  CHECK_MLS_ERROR(m.permute({0, 2}), "permute: axis 2 is out of range");
  CHECK_MLS_ERROR(m.slice(0, 0, 2, 0), "slice: step must be >= 1, got 0");
  CHECK_MLS_ERROR(m.slice(0, 2, 0, -1), "slice: step must be >= 1, got -1");
  CHECK_MLS_ERROR(m.slice(2, 0, 1), "slice: axis 2 is out of range");
  CHECK_MLS_ERROR(Tensor::scalar(1).slice(0, 0, 1), "slice: cannot slice a 0-d tensor");
  CHECK_MLS_ERROR(m.select(0, 2), "select: index 2 is out of range for dimension 0 of size 2");
  CHECK_MLS_ERROR(m.select(1, -4), "select: index -4 is out of range for dimension 1 of size 3");
  CHECK_MLS_ERROR(Tensor::scalar(1).select(0, 0), "select: cannot index a 0-d tensor");
  CHECK_MLS_ERROR(m.squeeze(1), "squeeze: dimension 1 has size 3, expected 1 (shape [2, 3])");
  CHECK_MLS_ERROR(Tensor::scalar(1).squeeze(0), "squeeze: axis 0 is out of range for a 0-d tensor");
  CHECK_MLS_ERROR(m.expand({2, 4}), "expand: cannot broadcast shape [2, 3] to [2, 4]");
  CHECK_MLS_ERROR(m.expand({3}), "expand: cannot broadcast shape [2, 3] to [3] (fewer dimensions)");
  CHECK_MLS_ERROR(m.expand({-1, 2, 3}), "expand: -1 is not allowed for the new leading dimension 0");
  CHECK_MLS_ERROR(m.expand({2, -2}), "expand: invalid size -2");
  CHECK_MLS_ERROR(m.as_strided({4}, {2}, 0), "as_strided: shape [4] with strides [2] and offset 0 reaches elements [0, 6], outside the storage of 6 elements");
  CHECK_MLS_ERROR(m.as_strided({3}, {-1}, 1), "reaches elements [-1, 1]");
  CHECK_MLS_ERROR(m.as_strided({2}, {1}, 5), "outside the storage of 6 elements");
  CHECK_MLS_ERROR(m.as_strided({2}, {1}, -1), "as_strided: offset must be >= 0, got -1");
  CHECK_MLS_ERROR(m.as_strided({2, 2}, {1}, 0), "as_strided: shape [2, 2] and strides [1] have different lengths");
  CHECK_MLS_ERROR(m.as_strided({-2}, {1}, 0), "as_strided: negative dimension -2");
  CHECK_MLS_ERROR(m.diagonal(0, 1, 1), "diagonal: dim1 and dim2 must differ, both are 1");
  CHECK_MLS_ERROR(m.diagonal(0, 0, -2), "diagonal: dim1 and dim2 must differ, both are 0");
  CHECK_MLS_ERROR(Tensor::ones({3}).diagonal(), "diagonal: needs a tensor with at least 2 dimensions, got shape [3]");
  CHECK_MLS_ERROR(m.diagonal(0, 0, 2), "diagonal: axis 2 is out of range");
  CHECK_MLS_ERROR(Tensor(m.storage(), 0, {2}, {1, 1}, DType::Float32), "Tensor: shape [2] and strides [1, 1] have different lengths");
}

TEST_CASE("errors: dtypes that do not promote or do not fit", "[lab1][errors]") {
  const Tensor b = Tensor::from({true, false}), f = Tensor::from({1.f, 2.f}), i = Tensor::from({1, 2});
  CHECK_MLS_ERROR(mls::add(b, b), "add: arithmetic is not defined for bool tensors (dtypes bool and bool)");
  CHECK_MLS_ERROR(b * b, "mul: arithmetic is not defined for bool tensors");
  CHECK_MLS_ERROR(mls::maximum(b, b), "maximum: arithmetic is not defined for bool tensors");
  CHECK_MLS_ERROR(mls::neg(b), "neg: not defined for bool tensors");
  CHECK_MLS_ERROR(mls::exp(b), "exp: not defined for bool tensors");
  CHECK_MLS_ERROR(-b, "neg: not defined for bool tensors");
  Tensor bb = b.clone();
  CHECK_MLS_ERROR(bb += b, "add: arithmetic is not defined for bool tensors");
  Tensor ii = i.clone();
  CHECK_MLS_ERROR(ii += f, "add_: result dtype float32 cannot be stored in place in a tensor of dtype int32");
  CHECK_MLS_ERROR(ii /= i, "div_: result dtype float32 cannot be stored in place in a tensor of dtype int32");
  CHECK_MLS_ERROR(ii /= 2.0, "div_: result dtype float32 cannot be stored in place");
  CHECK_MLS_ERROR(ii *= Tensor::from({1.0, 2.0}), "mul_: result dtype float64 cannot be stored in place in a tensor of dtype int32");
  CHECK(ii.to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 2});  // nothing was written
  Tensor ff = f.clone();
  CHECK_MLS_ERROR(mls::binary_(mls::BinaryOp::Lt, ff, f), "lt: comparisons have no in-place form");
  CHECK_MLS_ERROR(mls::where(f, f, f), "where: condition must be bool, got float32");
  CHECK_MLS_ERROR(mls::matmul(Tensor::ones({2, 2}, DType::Bool), Tensor::ones({2, 2}, DType::Bool)),
                  "matmul: not defined for bool tensors");
  CHECK_MLS_ERROR(mls::softmax(i), "softmax: needs a float tensor, got int32");
  CHECK_MLS_ERROR(mls::log_softmax(b), "log_softmax: needs a float tensor, got bool");
  CHECK_MLS_ERROR(mls::logsumexp(i), "logsumexp: needs a float tensor, got int32");
  mls::Rng rng(1);
  CHECK_MLS_ERROR(Tensor::rand({2}, rng, 0, 1, DType::Int32), "rand: dtype must be float32 or float64, got int32");
  CHECK_MLS_ERROR(Tensor::randn({2}, rng, 0, 1, DType::Bool), "randn: dtype must be float32 or float64, got bool");
  CHECK_MLS_ERROR(f.data<std::int32_t>(), "data: tensor has dtype float32, requested int32");
  CHECK_MLS_ERROR(i.data<double>(), "data: tensor has dtype int32, requested float64");
}

TEST_CASE("errors: negative and overflowing sizes, bad creation arguments", "[lab1][errors]") {
  // Valid sizes work (this also makes the stripped handout fail here with "not implemented":
  // a fresh tensor needs contiguous_strides).
  CHECK(Tensor::zeros({2, 0, 3}).strides().size() == 3);
  CHECK(Tensor::empty({I64{1} << 20}, DType::Bool).numel() == I64{1} << 20);
  CHECK_MLS_ERROR(Tensor::empty({-1}), "empty: negative dimension -1 in shape [-1]");
  CHECK_MLS_ERROR(Tensor::zeros({2, -3}), "negative dimension -3 in shape [2, -3]");
  CHECK_MLS_ERROR(Tensor::ones({-2}, DType::Int64), "negative dimension -2");
  CHECK_MLS_ERROR(Tensor::full({4, -1}, 1.0), "negative dimension -1");
  const I64 big = I64{1} << 40;
  CHECK_MLS_ERROR(Tensor::empty({big, big}), "empty: shape [1099511627776, 1099511627776] has more than 2^63 elements");
  CHECK_MLS_ERROR(Tensor::empty({I64{1} << 62}, DType::Float64), "empty: shape [4611686018427387904] of float64 needs more than 2^63 bytes");
  CHECK_MLS_ERROR(Tensor::arange(0, 10, 0), "arange: step must be finite and non-zero, got 0");
  CHECK_MLS_ERROR(Tensor::arange(0, 10, NAN), "arange: step must be finite and non-zero");
  CHECK_MLS_ERROR(Tensor::arange(0, INFINITY, 1), "arange: start 0 and stop inf must be finite");
  CHECK_MLS_ERROR(Tensor::arange(0, 1e300, 1e-300), "is too many elements");
  CHECK_MLS_ERROR(Tensor::linspace(0, 1, -1), "linspace: num must be >= 0, got -1");
  CHECK_MLS_ERROR(Tensor::eye(-2), "eye: size must be >= 0, got -2");
  mls::Rng rng(2);
  CHECK_MLS_ERROR(Tensor::rand({2}, rng, 2.0, 1.0), "rand: empty range [2, 1)");
  CHECK_MLS_ERROR(Tensor::randn({2}, rng, 0.0, -1.0), "randn: stddev must be >= 0, got -1");
  CHECK_MLS_ERROR(Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5}, Dims{2, 3}),
                  "from_vector: 5 values do not fill shape [2, 3] (6 elements)");
  CHECK_MLS_ERROR(Tensor::from_vector(std::vector<float>{1}, Dims{-1}), "from_vector: negative dimension -1");
  CHECK_MLS_ERROR(Tensor::empty({2}, DType::Float32, mls::Device{mls::DeviceType::CUDA, 0}), "Storage: cannot allocate on cuda:0");
}

TEST_CASE("errors: reductions over nothing, item of many", "[lab1][errors]") {
  CHECK_MLS_ERROR(Tensor::ones({2}).item(), "item: tensor of shape [2] has 2 elements, expected exactly 1");
  CHECK_MLS_ERROR(Tensor::ones({0}).item(), "item: tensor of shape [0] has 0 elements");
  CHECK_MLS_ERROR(mls::argmax(Tensor::zeros({3, 0}), 1), "argmax: cannot take the max of an empty dimension 1 (shape [3, 0])");
  CHECK_MLS_ERROR(mls::argmin(Tensor::zeros({0, 2}), 0), "argmin: cannot take the min of an empty dimension 0 (shape [0, 2])");
  CHECK_MLS_ERROR(mls::max(Tensor::zeros({0})), "max: cannot reduce over an empty set of elements (shape [0], axes [0])");
  CHECK_MLS_ERROR(mls::min(Tensor::zeros({2, 0}), {1}), "min: cannot reduce over an empty set of elements (shape [2, 0], axes [1])");
  CHECK_MLS_ERROR(mls::mean(Tensor::zeros({0, 3})), "mean: cannot average an empty set of elements (shape [0, 3])");
  CHECK_MLS_ERROR(mls::var(Tensor::ones({1}), {}, false, 1), "var: 1 elements with correction 1 leave no degrees of freedom");
  CHECK_MLS_ERROR(mls::var(Tensor::ones({3}), {}, false, -1), "var: correction must be >= 0, got -1");
}

TEST_CASE("errors: matmul shapes", "[lab1][errors]") {
  CHECK_MLS_ERROR(mls::matmul(Tensor::ones({2, 3}), Tensor::ones({4, 5})),
                  "matmul: shapes [2, 3] and [4, 5] are not aligned: 3 (last dim of a) != 4 (second to last dim of b)");
  CHECK_MLS_ERROR(mls::matmul(Tensor::ones({2, 3}), Tensor::ones({4})),
                  "matmul: shapes [2, 3] and [4] are not aligned: 3 (last dim of a) != 4 (dim 0 of b)");
  CHECK_MLS_ERROR(mls::matmul(Tensor::ones({3}), Tensor::ones({2, 3})), "are not aligned: 3 (last dim of a) != 2");
  CHECK_MLS_ERROR(mls::matmul(Tensor::scalar(2), Tensor::ones({3})),
                  "matmul: operands must have at least 1 dimension, got shapes [] and [3]");
  CHECK_MLS_ERROR(mls::matmul(Tensor::ones({3, 3}), Tensor::scalar(2)), "got shapes [3, 3] and []");
  // An unknown kernel name is reported with the registered ones.
  struct Restore {
    ~Restore() { mls::set_sgemm_kernel(""); }
  } restore;
  mls::register_matmul_kernels();
  mls::set_sgemm_kernel("no-such-kernel");
  CHECK_MLS_ERROR(mls::matmul(Tensor::ones({2, 2}), Tensor::ones({2, 2})), "matmul: unknown kernel 'no-such-kernel'");
  CHECK_THROWS_WITH(mls::matmul(Tensor::ones({2, 2}), Tensor::ones({2, 2})), Catch::Contains("lab1_reference"));
  mls::set_sgemm_kernel("");
  CHECK_NOTHROW(mls::matmul(Tensor::ones({2, 2}), Tensor::ones({2, 2})));
}

TEST_CASE("errors: concat, stack, split, chunk arguments", "[lab1][errors]") {
  const Tensor a = Tensor::ones({2, 3}), b = Tensor::ones({2, 4});
  CHECK_MLS_ERROR(mls::concat({a, b}, 0), "concat: tensor 1 has shape [2, 4], expected [2, 3] except along axis 0");
  CHECK_NOTHROW(mls::concat({a, b}, 1));
  CHECK_MLS_ERROR(mls::concat({a, Tensor::ones({2, 3, 1})}, 1), "concat: tensor 1 has shape [2, 3, 1], expected [2, 3]");
  CHECK_MLS_ERROR(mls::concat({}, 0), "concat: needs at least one tensor");
  CHECK_MLS_ERROR(mls::concat({Tensor::scalar(1), Tensor::scalar(2)}), "concat: cannot concatenate 0-d tensors (use stack)");
  CHECK_MLS_ERROR(mls::stack({a, b}), "stack: tensor 1 has shape [2, 4], expected [2, 3]");
  CHECK_MLS_ERROR(mls::stack({}), "stack: needs at least one tensor");
  CHECK_MLS_ERROR(mls::split(Tensor::ones({3}), std::vector<I64>{1, 1}), "split: sizes [1, 1] sum to 2, expected 3 (dimension 0 of shape [3])");
  CHECK_MLS_ERROR(mls::split(Tensor::ones({3}), std::vector<I64>{4, -1}), "split: sizes [4, -1] contain a negative size");
  CHECK_MLS_ERROR(mls::split(Tensor::ones({3}), I64{0}), "split: piece size must be >= 1, got 0");
  CHECK_MLS_ERROR(mls::chunk(Tensor::ones({3}), 0), "chunk: number of chunks must be >= 1, got 0");
  CHECK_MLS_ERROR(mls::chunk(Tensor::ones({3}), 2, 1), "axis 1 is out of range");
}

TEST_CASE("errors: split and chunk name themselves when the axis is out of range",
          "[lab1][errors]") {
  // The message must name the op the user called; today the check inside Tensor::size()
  // reports "size: axis 2 is out of range ..." for split(x, 1, 2) and chunk(x, 2, 2).
  const Tensor m = Tensor::ones({2, 3});
  CHECK_MLS_ERROR(mls::split(m, I64{1}, 2), "split: axis 2 is out of range");
  CHECK_MLS_ERROR(mls::chunk(m, 2, 2), "chunk: axis 2 is out of range");
}

TEST_CASE("errors: .npy files that are missing, truncated, corrupt or unsupported", "[lab1][errors]") {
  const std::string missing = mls::testing::fresh_temp_path("missing.npy");
  CHECK_MLS_ERROR(mls::load(missing), "npy: cannot open '" + missing + "'");
  CHECK_MLS_ERROR(mls::save("/nonexistent-dir/x.npy", Tensor::ones({2})), "npy: cannot write '/nonexistent-dir/x.npy'");
  const std::string path = mls::testing::fresh_temp_path("x.npy");
  mls::save(path, Tensor::arange(10, DType::Int64));
  const std::string good = read_all(path);
  REQUIRE(good.size() > 80);
  // Data cut short.
  write_all(path, good.substr(0, good.size() - 3));
  CHECK_MLS_ERROR(mls::load(path), "npy: '" + path + "'");
  CHECK_MLS_ERROR(mls::load(path), "truncated file: header says 80 bytes of data, found 77");
  // Cut inside the header, inside the length field, inside the magic string.
  write_all(path, good.substr(0, 20));
  CHECK_MLS_ERROR(mls::load(path), "truncated header");
  write_all(path, good.substr(0, 9));
  CHECK_MLS_ERROR(mls::load(path), "truncated file");
  write_all(path, good.substr(0, 3));
  CHECK_MLS_ERROR(mls::load(path), "truncated file");
  write_all(path, "");
  CHECK_MLS_ERROR(mls::load(path), "truncated file");
  // Extra bytes after the data.
  write_all(path, good + "xy");
  CHECK_MLS_ERROR(mls::load(path), "2 trailing bytes after the data");
  // Not a .npy file at all.
  write_all(path, "hello, world: this is plain text and not an array");
  CHECK_MLS_ERROR(mls::load(path), "bad magic string (not a .npy file)");
  // A corrupt version, dtype, header and a huge header length.
  std::string bad = good;
  bad[6] = '\x07';
  write_all(path, bad);
  CHECK_MLS_ERROR(mls::load(path), "unsupported format version 7.0");
  bad = good;
  const auto at = bad.find("<i8");
  REQUIRE(at != std::string::npos);
  bad.replace(at, 3, "<u2");
  write_all(path, bad);
  CHECK_MLS_ERROR(mls::load(path), "unsupported dtype '<u2'");
  bad.replace(at, 3, ">f4");
  write_all(path, bad);
  CHECK_MLS_ERROR(mls::load(path), "big-endian");
  bad = good;
  bad[8] = '\xff';
  bad[9] = '\xff';  // header length 65535: longer than the file
  write_all(path, bad);
  CHECK_MLS_ERROR(mls::load(path), "truncated header");
  bad = good;
  bad[6] = '\x02';  // version 2.0: a 4-byte header length, here 0x0f'ffff'.. (over the limit)
  bad[8] = '\xff';
  bad[9] = '\xff';
  bad[10] = '\x0f';
  bad[11] = '\x00';
  write_all(path, bad);
  CHECK_MLS_ERROR(mls::load(path), "exceeds the limit of 65536");
  bad = good;
  const auto shape_at = bad.find("(10,)");
  REQUIRE(shape_at != std::string::npos);
  bad.replace(shape_at, 5, "(-1,)");
  write_all(path, bad);
  CHECK_THROWS_AS(mls::load(path), mls::Error);
  // A bool array whose bytes are not 0 or 1.
  mls::save(path, Tensor::from({true, false}));
  bad = read_all(path);
  bad.back() = '\x05';
  write_all(path, bad);
  CHECK_MLS_ERROR(mls::load(path), "bool array has byte value 5 at element 1");
  std::filesystem::remove(path);
}

TEST_CASE("errors: an undefined (default-constructed) tensor is refused by every op", "[lab1][errors]") {
  Tensor u;
  const Tensor x = Tensor::ones({2});
  CHECK_MLS_ERROR(u.compact(), "compact: tensor is undefined (default-constructed)");
  CHECK_MLS_ERROR(u.clone(), "clone: tensor is undefined");
  CHECK_MLS_ERROR(u.to(DType::Float64), "to: tensor is undefined");
  CHECK_MLS_ERROR(u.fill_(1), "fill_: tensor is undefined");
  CHECK_MLS_ERROR(u.copy_(x), "copy_: tensor is undefined");
  Tensor y = x.clone();
  CHECK_MLS_ERROR(y.copy_(u), "copy_: tensor is undefined");
  CHECK_MLS_ERROR(u.item(), "item: tensor is undefined");
  CHECK_MLS_ERROR(u.at({}), "at: tensor is undefined");
  CHECK_MLS_ERROR(u.set({}, 1.0), "set: tensor is undefined");
  CHECK_MLS_ERROR(u.data_ptr(), "data_ptr: tensor is undefined");
  CHECK_MLS_ERROR(u.data<float>(), "data: tensor is undefined");
  CHECK_MLS_ERROR(u.to_vector<float>(), "to: tensor is undefined");
  CHECK_MLS_ERROR(u.view({1}), "view: tensor is undefined");
  CHECK_MLS_ERROR(u.reshape({1}), "reshape: tensor is undefined");
  CHECK_MLS_ERROR(u.permute(std::span<const I64>{}), "permute: tensor is undefined");
  CHECK_MLS_ERROR(u.transpose(), "transpose: tensor is undefined");
  CHECK_MLS_ERROR(u.slice(0, 0, 1), "slice: tensor is undefined");
  CHECK_MLS_ERROR(u.select(0, 0), "select: tensor is undefined");
  CHECK_MLS_ERROR(u.expand({2}), "expand: tensor is undefined");
  CHECK_MLS_ERROR(u.squeeze(), "squeeze: tensor is undefined");
  CHECK_MLS_ERROR(u.unsqueeze(0), "unsqueeze: tensor is undefined");
  CHECK_MLS_ERROR(u.flatten(), "flatten: tensor is undefined");
  CHECK_MLS_ERROR(u.as_strided({1}, {1}, 0), "as_strided: tensor is undefined");
  CHECK_MLS_ERROR(u.diagonal(), "diagonal: tensor is undefined");
  CHECK_MLS_ERROR(mls::add(u, x), "add: tensor is undefined");
  CHECK_MLS_ERROR(x * u, "mul: tensor is undefined");
  CHECK_MLS_ERROR(mls::exp(u), "exp: tensor is undefined");
  CHECK_MLS_ERROR(u + 1.0, "add: tensor is undefined");
  CHECK_MLS_ERROR(y += u, "add: tensor is undefined");
  CHECK_MLS_ERROR(mls::where(u, x, x), "where: tensor is undefined");
  CHECK_MLS_ERROR(mls::sum(u), "sum: tensor is undefined");
  CHECK_MLS_ERROR(mls::mean(u), "mean: tensor is undefined");
  CHECK_MLS_ERROR(mls::var(u), "var: tensor is undefined");
  CHECK_MLS_ERROR(mls::max(u), "max: tensor is undefined");
  CHECK_MLS_ERROR(mls::argmax(u, 0), "argmax: tensor is undefined");
  CHECK_MLS_ERROR(mls::softmax(u), "softmax: tensor is undefined");
  CHECK_MLS_ERROR(mls::log_softmax(u), "log_softmax: tensor is undefined");
  CHECK_MLS_ERROR(mls::logsumexp(u), "logsumexp: tensor is undefined");
  CHECK_MLS_ERROR(mls::matmul(u, x), "matmul: tensor is undefined");
  CHECK_MLS_ERROR(mls::concat({x, u}), "concat: tensor 1 is undefined");
  CHECK_MLS_ERROR(mls::stack({u}), "stack: tensor 0 is undefined");
  CHECK_MLS_ERROR(mls::split(u, I64{1}), "split: tensor is undefined");
  CHECK_MLS_ERROR(mls::chunk(u, 2), "chunk: tensor is undefined");
  CHECK_MLS_ERROR(mls::allclose(u, x), "allclose: tensor is undefined");
  CHECK_MLS_ERROR(mls::equal(x, u), "equal: tensor is undefined");
  CHECK_MLS_ERROR(mls::save(mls::testing::fresh_temp_path("x.npy"), u), "save: tensor is undefined");
  CHECK(mls::to_string(u) == "tensor(undefined)");  // printing is allowed, and says so
}

TEST_CASE("errors: in place into an expanded view would write one element many times", "[lab1][errors]") {
  Tensor t = Tensor::ones({1});
  Tensor e = t.expand({3});
  CHECK_THROWS_WITH(e += 1.0, Catch::Contains("add_") && Catch::Contains("overlapping") && Catch::Contains("[3]"));
  MLS_OBSERVE_VALUES(t);  // untouched by the refused write
  CHECK(t.item() == 1.0);  // nothing was written
  Tensor x = Tensor::ones({2, 3});
  CHECK_NOTHROW(x += Tensor::ones({3}));  // broadcasting the source is fine
  MLS_OBSERVE_VALUES(x);
}
