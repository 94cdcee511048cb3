// Printing, allclose/equal, and .npy save/load (C and Fortran order).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "generators.hpp"
#include "mls/common/npy.hpp"
#include "mls/testing.hpp"

using mls::DType;
using mls::Tensor;
using ref::Dims;
using ref::I64;
using ref::Ref;

namespace {

/// A fresh path in this process's test folder (mls::testing::fresh_temp_path); removed at scope exit.
struct TempPath {
  std::filesystem::path path = mls::testing::fresh_temp_path("io.npy");
  ~TempPath() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  std::string str() const { return path.string(); }
};

std::string printed(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

/// Bytes of a .npy version 1.0 file, written by hand: magic, version, header length, header
/// (padded with spaces to a multiple of 64 and ended by a newline), then the data.
std::string npy_bytes(const std::string& dict, const std::string& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

}  // namespace

TEST_CASE("printing a 2x2 float tensor, NumPy style", "[lab1][io]") {
  const Tensor t = Tensor::from({1.f, 2.f, 3.f, 4.f}, {2, 2});
  MLS_OBSERVE(printed(t));
  MLS_OBSERVE(printed(Tensor::arange(6).reshape({2, 3}).transpose()));
  CHECK(printed(t) == "tensor([[1., 2.],\n        [3., 4.]], shape=[2, 2], dtype=float32)");
  CHECK(mls::to_string(t) == printed(t));
  // A view prints its logical order.
  CHECK(printed(Tensor::arange(6).reshape({2, 3}).transpose()) ==
        "tensor([[0., 3.],\n        [1., 4.],\n        [2., 5.]], shape=[3, 2], dtype=float32)");
}

TEST_CASE("printing: fractions, ints, bools, 0-d, 3-D, empty, special values", "[lab1][io]") {
  for (const Tensor& t : {Tensor::from({1.5f, -2.25f}), Tensor::from({1, -20, 300}), Tensor::from({std::int64_t{7}}),
                         Tensor::from({true, false}), Tensor::scalar(2.5), Tensor::scalar(3), Tensor::scalar(3, DType::Int64),
                         Tensor::scalar(1, DType::Bool), Tensor::arange(8).reshape({2, 2, 2}), Tensor::zeros({0}),
                         Tensor::from({NAN, INFINITY, -INFINITY, 1.5f}), Tensor::from({1e-5, 1.0}), Tensor()}) {
    mls::testing::observe("printed", printed(t));
  }
  CHECK(printed(Tensor::from({1.5f, -2.25f})) == "tensor([ 1.5000, -2.2500], shape=[2], dtype=float32)");
  CHECK(printed(Tensor::from({1, -20, 300})) == "tensor([  1, -20, 300], shape=[3], dtype=int32)");
  CHECK(printed(Tensor::from({std::int64_t{7}})) == "tensor([7], shape=[1], dtype=int64)");
  CHECK(printed(Tensor::from({true, false})) == "tensor([ True, False], shape=[2], dtype=bool)");
  CHECK(printed(Tensor::scalar(2.5)) == "tensor(2.5000, shape=[], dtype=float32)");
  CHECK(printed(Tensor::scalar(3)) == "tensor(3., shape=[], dtype=float32)");
  CHECK(printed(Tensor::scalar(3, DType::Int64)) == "tensor(3, shape=[], dtype=int64)");
  CHECK(printed(Tensor::scalar(1, DType::Bool)) == "tensor(True, shape=[], dtype=bool)");
  CHECK(printed(Tensor::arange(8).reshape({2, 2, 2})) ==
        "tensor([[[0., 1.],\n         [2., 3.]],\n\n        [[4., 5.],\n         [6., 7.]]], shape=[2, 2, 2], "
        "dtype=float32)");
  CHECK(printed(Tensor::zeros({0})) == "tensor([], shape=[0], dtype=float32)");
  CHECK(printed(Tensor::from({NAN, INFINITY, -INFINITY, 1.5f})) ==
        "tensor([   nan,    inf,   -inf, 1.5000], shape=[4], dtype=float32)");
  CHECK(printed(Tensor::from({1e-5, 1.0})) == "tensor([1.0000e-05,     1.0000], shape=[2], dtype=float64)");
  CHECK(printed(Tensor()) == "tensor(undefined)");
}

TEST_CASE("printing a big tensor summarises it with ...", "[lab1][io]") {
  const std::string s = printed(Tensor::arange(2000));
  MLS_OBSERVE(s);
  CHECK(s.find("...") != std::string::npos);
  CHECK(s.find("1999.") != std::string::npos);
  CHECK(s.find(" 2.,") != std::string::npos);
  CHECK(s.find("1000.") == std::string::npos);  // the middle is left out
  CHECK(s.size() < 200);
  CHECK(s.find("shape=[2000], dtype=float32)") != std::string::npos);
  const std::string m = printed(Tensor::zeros({100, 100}, DType::Int32));
  MLS_OBSERVE(m);
  CHECK(m.find("...") != std::string::npos);
  CHECK(m.size() < 1000);
  CHECK(printed(Tensor::arange(1000)).find("...") == std::string::npos);  // at the limit: printed in full
}

TEST_CASE("allclose: rtol and atol, NaN, infinities, shapes", "[lab1][io]") {
  const Tensor a = Tensor::from({1.0, 100.0, -3.0});
  CHECK(mls::allclose(a, a));
  // The answers of the fixed cases below, as one pattern of 0/1.
  mls::testing::observe("allclose answers", std::vector<int>{
      mls::allclose(a, a), mls::allclose(a, Tensor::from({1.0 + 5e-6, 100.0, -3.0})),
      mls::allclose(a, Tensor::from({1.0 + 5e-5, 100.0, -3.0})), mls::allclose(a, Tensor::from({1.0 + 5e-5, 100.0, -3.0}), 1e-4),
      mls::allclose(Tensor::from({0.0}), Tensor::from({1e-9})), mls::allclose(Tensor::from({0.0}), Tensor::from({1e-7})),
      mls::allclose(Tensor::from({0.0}), Tensor::from({1e-7}), 0.0, 1e-6), mls::allclose(Tensor::from({NAN}), Tensor::from({NAN})),
      mls::allclose(Tensor::from({INFINITY}), Tensor::from({INFINITY})), mls::allclose(Tensor::from({INFINITY}), Tensor::from({1.f})),
      mls::allclose(Tensor::ones({2, 3}), Tensor::ones({3, 2})), mls::allclose(Tensor::ones({3}), Tensor::ones({1, 3})),
      mls::allclose(Tensor::ones({3}, DType::Int32), Tensor::ones({3})), mls::allclose(Tensor::from({1.0}), Tensor::from({1.1}), 0.1, 0.0),
      mls::allclose(Tensor::from({1.1}), Tensor::from({1.0}), 0.095, 0.0)});
  CHECK(mls::allclose(a, Tensor::from({1.0 + 5e-6, 100.0, -3.0})));
  CHECK_FALSE(mls::allclose(a, Tensor::from({1.0 + 5e-5, 100.0, -3.0})));
  CHECK(mls::allclose(a, Tensor::from({1.0 + 5e-5, 100.0, -3.0}), 1e-4));
  CHECK(mls::allclose(Tensor::from({0.0}), Tensor::from({1e-9})));
  CHECK_FALSE(mls::allclose(Tensor::from({0.0}), Tensor::from({1e-7})));
  CHECK(mls::allclose(Tensor::from({0.0}), Tensor::from({1e-7}), 0.0, 1e-6));
  CHECK_FALSE(mls::allclose(Tensor::from({NAN}), Tensor::from({NAN})));
  CHECK(mls::allclose(Tensor::from({INFINITY}), Tensor::from({INFINITY})));
  CHECK(mls::allclose(Tensor::from({-INFINITY, 1.f}), Tensor::from({-INFINITY, 1.f})));
  CHECK_FALSE(mls::allclose(Tensor::from({INFINITY}), Tensor::from({1.f})));
  CHECK_FALSE(mls::allclose(Tensor::ones({2, 3}), Tensor::ones({3, 2})));
  CHECK_FALSE(mls::allclose(Tensor::ones({3}), Tensor::ones({1, 3})));    // no broadcasting
  CHECK(mls::allclose(Tensor::ones({3}, DType::Int32), Tensor::ones({3})));  // across dtypes
  // The tolerance is relative to the second argument: |a - b| <= atol + rtol |b|.
  CHECK(mls::allclose(Tensor::from({1.0}), Tensor::from({1.1}), 0.1, 0.0));
  CHECK_FALSE(mls::allclose(Tensor::from({1.1}), Tensor::from({1.0}), 0.095, 0.0));
  mls::Rng rng(901, "allclose");
  for (int trial = 0; trial < 50; ++trial) {
    gen::Pair p = gen::random_input(rng, DType::Float64, 3);
    const Tensor same = ref::make(p.r, DType::Float64);
    INFO(p.log);
    CHECK(mls::allclose(p.t, same));
    CHECK(mls::equal(p.t, same));
  }
}

TEST_CASE("allclose: an infinity is close only to the same infinity", "[lab1][io]") {
  // NumPy's isclose: inf matches inf only. With b infinite, atol + rtol * |b| is infinite, so
  // the plain |a - b| <= atol + rtol * |b| test accepts any a: infinities need their own check.
  mls::testing::observe("allclose answers", std::vector<int>{
      mls::allclose(Tensor::from({INFINITY}), Tensor::from({-INFINITY})), mls::allclose(Tensor::from({1.0}), Tensor::from({INFINITY})),
      mls::allclose(Tensor::from({-5.0}), Tensor::from({-INFINITY})), mls::allclose(Tensor::from({NAN}), Tensor::from({INFINITY})),
      mls::allclose(Tensor::from({INFINITY}), Tensor::from({INFINITY}))});
  CHECK_FALSE(mls::allclose(Tensor::from({INFINITY}), Tensor::from({-INFINITY})));
  CHECK_FALSE(mls::allclose(Tensor::from({1.0}), Tensor::from({INFINITY})));
  CHECK_FALSE(mls::allclose(Tensor::from({-5.0}), Tensor::from({-INFINITY})));
  CHECK_FALSE(mls::allclose(Tensor::from({NAN}), Tensor::from({INFINITY})));
}

TEST_CASE("equal: same shape, dtype and values", "[lab1][io]") {
  const Tensor a = Tensor::from({1, 2, 3});
  mls::testing::observe("equal answers", std::vector<int>{
      mls::equal(a, Tensor::from({1, 2, 3})), mls::equal(a, Tensor::from({1, 2, 4})), mls::equal(a, Tensor::from({1.f, 2.f, 3.f})),
      mls::equal(a, Tensor::from({1, 2, 3}, {3, 1})),
      mls::equal(Tensor::arange(6).reshape({2, 3}).transpose(), Tensor::from({0.f, 3.f, 1.f, 4.f, 2.f, 5.f}, {3, 2})),
      mls::equal(Tensor::from({NAN}), Tensor::from({NAN})), mls::equal(Tensor::zeros({0, 2}), Tensor::zeros({0, 2})),
      mls::equal(Tensor::scalar(1), Tensor::ones({}))});
  CHECK(mls::equal(a, Tensor::from({1, 2, 3})));
  CHECK_FALSE(mls::equal(a, Tensor::from({1, 2, 4})));
  CHECK_FALSE(mls::equal(a, Tensor::from({1.f, 2.f, 3.f})));  // dtypes differ
  CHECK_FALSE(mls::equal(a, Tensor::from({1, 2, 3}, {3, 1})));
  CHECK(mls::equal(Tensor::arange(6).reshape({2, 3}).transpose(), Tensor::from({0.f, 3.f, 1.f, 4.f, 2.f, 5.f}, {3, 2})));
  CHECK_FALSE(mls::equal(Tensor::from({NAN}), Tensor::from({NAN})));
  CHECK(mls::equal(Tensor::zeros({0, 2}), Tensor::zeros({0, 2})));
  CHECK(mls::equal(Tensor::scalar(1), Tensor::ones({})));
}

TEST_CASE("save and load round trip: every dtype, shapes, strided views", "[lab1][io]") {
  mls::Rng rng(902, "npy");
  for (int trial = 0; trial < 60; ++trial) {
    const DType t = ref::kAllDTypes[trial % 5];
    gen::Pair p = gen::random_input(rng, t, 3);
    INFO(p.log << " " << t);
    TempPath f;
    mls::save(f.str(), p.t);
    const Tensor back = mls::load(f.str());
    CHECK(back.dtype() == t);
    CHECK(back.is_contiguous());
    CHECK_SAME(back, p.r);
    // The file holds the row-major bytes NumPy expects.
    const mls::NpyArray arr = mls::read_npy(f.str());
    CHECK(arr.dtype == t);
    MLS_CHECK_EQ(arr.shape, p.r.shape);
    CHECK_FALSE(arr.fortran_order);
    REQUIRE(arr.data.size() == static_cast<std::size_t>(p.r.numel()) * mls::itemsize(t));
    const Tensor c = p.t.compact();
    CHECK((arr.data.empty() || std::memcmp(arr.data.data(), c.data_ptr(), arr.data.size()) == 0));
  }
  // Exact bit patterns survive: extremes, negative zero, NaN payloads.
  const std::vector<double> special{-0.0, std::numeric_limits<double>::max(), std::numeric_limits<double>::denorm_min(),
                                    -std::numeric_limits<double>::infinity()};
  TempPath f;
  mls::save(f.str(), Tensor::from_vector(special));
  const auto back = mls::load(f.str()).to_vector<double>();
  CHECK(std::memcmp(back.data(), special.data(), special.size() * sizeof(double)) == 0);
  // Saving over an existing file replaces it.
  mls::save(f.str(), Tensor::from({std::int64_t{-5}, std::int64_t{1} << 40}));
  CHECK(mls::load(f.str()).to_vector<std::int64_t>() == std::vector<std::int64_t>{-5, std::int64_t{1} << 40});
}

TEST_CASE("load honours Fortran order (written by write_npy and by hand)", "[lab1][io]") {
  // A [2, 3] array stored column-major: the bytes are 1 4 2 5 3 6 for [[1, 2, 3], [4, 5, 6]].
  mls::NpyArray arr;
  arr.dtype = DType::Float32;
  arr.shape = {2, 3};
  arr.fortran_order = true;
  const std::vector<float> colmajor{1, 4, 2, 5, 3, 6};
  arr.data.resize(colmajor.size() * 4);
  std::memcpy(arr.data.data(), colmajor.data(), arr.data.size());
  TempPath f;
  mls::write_npy(f.str(), arr);
  const Tensor t = mls::load(f.str());
  CHECK(t.shape() == Dims{2, 3});
  CHECK(t.is_contiguous());
  CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});

  // Hand-made files, as NumPy writes them: a 3-D int64 and a 1-D bool.
  TempPath g;
  std::vector<std::int64_t> f3(24);
  for (I64 i = 0; i < 2; ++i) {
    for (I64 j = 0; j < 3; ++j) {
      for (I64 k = 0; k < 4; ++k) f3[static_cast<std::size_t>(i + 2 * j + 6 * k)] = 100 * i + 10 * j + k;  // Fortran strides (1, 2, 6)
    }
  }
  write_file(g.str(), npy_bytes("{'descr': '<i8', 'fortran_order': True, 'shape': (2, 3, 4), }", raw(f3)));
  const Tensor u = mls::load(g.str());
  CHECK(u.dtype() == DType::Int64);
  MLS_ORACLE(Ref want({2, 3, 4}); for (I64 i = 0; i < 2; ++i) {
    for (I64 j = 0; j < 3; ++j) {
      for (I64 k = 0; k < 4; ++k) want({i, j, k}) = static_cast<double>(100 * i + 10 * j + k);
    }
  })
  CHECK_SAME(u, want);
  TempPath h;
  write_file(h.str(), npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\x01\x00\x01", 3)));
  CHECK(mls::load(h.str()).to_vector<bool>() == std::vector<bool>{true, false, true});
  TempPath s;
  write_file(s.str(), npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", raw(std::vector<double>{2.5})));
  const Tensor sc = mls::load(s.str());
  CHECK(sc.ndim() == 0);
  CHECK(sc.item() == 2.5);
}
