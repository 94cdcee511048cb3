// Tests of the common core: errors, dtypes, shapes, the Philox RNG, the thread pool and the
// kernel registry.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <type_traits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "mls/common/dtype.hpp"
#include "mls/common/error.hpp"
#include "mls/common/interleaved_timing.hpp"
#include "mls/common/kernels.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/rng.hpp"
#include "mls/common/shape.hpp"

using Catch::Contains;

// ---- error.hpp ---------------------------------------------------------------------------------

TEST_CASE("error: MLS_CHECK, fail and MLS_TODO", "[common][error]") {
  CHECK_NOTHROW([] { MLS_CHECK(1 + 1 == 2, "never thrown"); }());
  const int x = 3;
  CHECK_THROWS_AS([&] { MLS_CHECK(x < 2, "op: x is ", x, ", expected < ", 2.5, " [", 'c', "]"); }(),
                  mls::Error);
  CHECK_THROWS_WITH(
      [&] { MLS_CHECK(x < 2, "op: x is ", x, ", expected < ", 2.5, " [", 'c', "]"); }(),
      "op: x is 3, expected < 2.5 [c]");
  CHECK_THROWS_WITH(mls::fail("add: cannot broadcast shapes ", mls::shape_str(mls::Shape{2, 3}),
                              " and ", mls::shape_str(mls::Shape{4})),
                    "add: cannot broadcast shapes [2, 3] and [4]");
  // mls::Error is a std::runtime_error; NotImplemented is deliberately not an mls::Error, so a
  // test that expects a bad-input error never passes on a stub.
  CHECK_THROWS_AS(mls::fail("x"), std::runtime_error);
  CHECK_THROWS_AS(MLS_TODO("lab1: Tensor::permute"), mls::NotImplemented);
  CHECK_THROWS_AS(MLS_TODO("lab1: Tensor::permute"), std::runtime_error);
  CHECK_FALSE(std::is_base_of_v<mls::Error, mls::NotImplemented>);
  CHECK_THROWS_WITH(MLS_TODO("lab1: Tensor::permute"), "not implemented: lab1: Tensor::permute");
  CHECK(mls::detail::cat("a", 1, '-', 2.5) == "a1-2.5");
}

// ---- dtype.hpp ---------------------------------------------------------------------------------

TEST_CASE("dtype: itemsize, names, promotion, parsing and dispatch", "[common][dtype]") {
  using mls::DType;
  CHECK(mls::itemsize(DType::Bool) == 1);
  CHECK(mls::itemsize(DType::Int32) == 4);
  CHECK(mls::itemsize(DType::Int64) == 8);
  CHECK(mls::itemsize(DType::Float32) == 4);
  CHECK(mls::itemsize(DType::Float64) == 8);
  CHECK(mls::dtype_name(DType::Bool) == "bool");
  CHECK(mls::dtype_name(DType::Int32) == "int32");
  CHECK(mls::dtype_name(DType::Int64) == "int64");
  CHECK(mls::dtype_name(DType::Float32) == "float32");
  CHECK(mls::dtype_name(DType::Float64) == "float64");
  std::ostringstream os;
  os << DType::Float32 << " " << mls::Device{} << " " << mls::Device{mls::DeviceType::CUDA, 1};
  CHECK(os.str() == "float32 cpu cuda:1");
  CHECK(mls::Device{} == mls::Device{mls::DeviceType::CPU, 0});

  CHECK(mls::is_floating(DType::Float32));
  CHECK_FALSE(mls::is_floating(DType::Int64));
  CHECK(mls::is_integral(DType::Int32));
  CHECK_FALSE(mls::is_integral(DType::Bool));

  CHECK(mls::promote(DType::Bool, DType::Int32) == DType::Int32);
  CHECK(mls::promote(DType::Int64, DType::Int32) == DType::Int64);
  CHECK(mls::promote(DType::Int64, DType::Float32) == DType::Float32);
  CHECK(mls::promote(DType::Float64, DType::Float32) == DType::Float64);
  CHECK(mls::promote(DType::Bool, DType::Bool) == DType::Bool);
  static_assert(mls::dtype_v<float> == DType::Float32);
  static_assert(mls::dtype_v<std::int64_t> == DType::Int64);

  const std::vector<std::pair<const char*, DType>> names = {
      {"bool", DType::Bool},       {"b1", DType::Bool},     {"int32", DType::Int32},
      {"i32", DType::Int32},       {"i4", DType::Int32},    {"int64", DType::Int64},
      {"i64", DType::Int64},       {"i8", DType::Int64},    {"float32", DType::Float32},
      {"f32", DType::Float32},     {"f4", DType::Float32},  {"float", DType::Float32},
      {"float64", DType::Float64}, {"f64", DType::Float64}, {"double", DType::Float64}};
  for (const auto& [name, t] : names) {
    INFO(name);
    CHECK(mls::parse_dtype(name) == t);
  }
  CHECK_THROWS_WITH(mls::parse_dtype("float16"),
                    Contains("parse_dtype: unknown dtype 'float16'") &&
                        Contains("expected one of bool, int32, int64, float32, float64"));
  CHECK_THROWS_AS(mls::parse_dtype(""), mls::Error);

  for (DType t : {DType::Bool, DType::Int32, DType::Int64, DType::Float32, DType::Float64}) {
    const std::size_t size = mls::dispatch(t, [](auto tag) { return sizeof(tag); });
    CHECK(size == mls::itemsize(t));
    const DType back = mls::dispatch(t, [](auto tag) { return mls::dtype_v<decltype(tag)>; });
    CHECK(back == t);
  }
  CHECK_THROWS_WITH(mls::dispatch(static_cast<DType>(42), [](auto tag) { return sizeof(tag); }),
                    "dispatch: unknown dtype 42");
}

// ---- shape.hpp ---------------------------------------------------------------------------------

TEST_CASE("shape: shape_str and checked_numel", "[common][shape]") {
  CHECK(mls::shape_str(mls::Shape{}) == "[]");
  CHECK(mls::shape_str(mls::Shape{5}) == "[5]");
  CHECK(mls::shape_str(mls::Shape{2, 3, 4}) == "[2, 3, 4]");

  CHECK(mls::checked_numel(mls::Shape{}) == 1);
  CHECK(mls::checked_numel(mls::Shape{2, 3, 4}) == 24);
  CHECK(mls::checked_numel(mls::Shape{2, 0, 4}) == 0);
  const std::int64_t big = std::int64_t{1} << 62;
  CHECK(mls::checked_numel(mls::Shape{big, 0, big}) == 0);
  CHECK(mls::checked_numel(mls::Shape{big, 1}) == big);
  CHECK_THROWS_WITH(mls::checked_numel(mls::Shape{2, -1}, "reshape"),
                    "reshape: negative dimension -1 in shape [2, -1]");
  CHECK_THROWS_WITH(mls::checked_numel(mls::Shape{big, 2}, "zeros"),
                    "zeros: shape [4611686018427387904, 2] has more than 2^63 elements");
  CHECK_THROWS_WITH(mls::checked_numel(mls::Shape{3037000500, 3037000500}),
                    Contains("shape: shape [3037000500, 3037000500] has more than 2^63 elements"));
}

TEST_CASE("shape: normalize_axis and normalize_axes", "[common][shape]") {
  CHECK(mls::normalize_axis(0, 3, "sum") == 0);
  CHECK(mls::normalize_axis(2, 3, "sum") == 2);
  CHECK(mls::normalize_axis(-1, 3, "sum") == 2);
  CHECK(mls::normalize_axis(-3, 3, "sum") == 0);
  // A 0-d tensor has no axis at all.
  CHECK_THROWS_WITH(mls::normalize_axis(0, 0, "sum"),
                    "sum: axis 0 is out of range for a 0-d tensor (it has no dimensions)");
  CHECK_THROWS_WITH(mls::normalize_axis(-1, 0, "sum"),
                    Contains("sum: axis -1 is out of range for a 0-d tensor"));
  CHECK_THROWS_WITH(
      mls::normalize_axis(3, 3, "sum"),
      "sum: axis 3 is out of range for a tensor with 3 dimensions (expected -3 <= axis < 3)");
  CHECK_THROWS_WITH(
      mls::normalize_axis(-2, 1, "softmax"),
      "softmax: axis -2 is out of range for a tensor with 1 dimension (expected -1 <= axis < 1)");

  CHECK(mls::normalize_axes(mls::Shape{}, 3, "sum") == std::vector<std::int64_t>{0, 1, 2});
  CHECK(mls::normalize_axes(mls::Shape{}, 0, "sum").empty());
  CHECK(mls::normalize_axes(mls::Shape{-1, 0}, 3, "sum") == std::vector<std::int64_t>{0, 2});
  CHECK_THROWS_WITH(mls::normalize_axes(mls::Shape{1, -2}, 3, "mean"),
                    "mean: axis -2 appears more than once in [1, -2]");
  CHECK_THROWS_WITH(mls::normalize_axes(mls::Shape{0, 5}, 3, "mean"),
                    Contains("mean: axis 5 is out of range"));
}

// ---- rng.hpp -----------------------------------------------------------------------------------

TEST_CASE("rng: Philox4x32-10 known-answer vectors (Random123 kat_vectors)", "[common][rng]") {
  using A4 = std::array<std::uint32_t, 4>;
  using A2 = std::array<std::uint32_t, 2>;
  CHECK(mls::philox4x32(A4{0, 0, 0, 0}, A2{0, 0}) ==
        A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(mls::philox4x32(A4{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                        A2{0xffffffff, 0xffffffff}) ==
        A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(mls::philox4x32(A4{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                        A2{0xa4093822, 0x299f31d0}) ==
        A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("rng: streams are reproducible and independent", "[common][rng]") {
  mls::Rng a(42, "rank0"), b(42, "rank0"), c(42, "rank1"), d(43, "rank0");
  std::vector<std::uint32_t> va, vb, vc, vd;
  for (int i = 0; i < 64; ++i) {
    va.push_back(a.next_u32());
    vb.push_back(b.next_u32());
    vc.push_back(c.next_u32());
    vd.push_back(d.next_u32());
  }
  CHECK(va == vb);
  CHECK(va != vc);
  CHECK(va != vd);
  CHECK(a.seed() == 42);
  // stream() keeps the seed and changes the stream.
  mls::Rng e = mls::Rng(42, "default").stream("rank1");
  CHECK(e.seed() == 42);
  for (int i = 0; i < 64; ++i) CHECK(e.next_u32() == vc[static_cast<std::size_t>(i)]);
  // The stream hash is FNV-1a 64 (stable across platforms).
  CHECK(mls::stream_hash("") == 0xcbf29ce484222325ull);
  CHECK(mls::stream_hash("a") == 0xaf63dc4c8601ec8cull);
  CHECK(mls::stream_hash("rank0") != mls::stream_hash("rank1"));
  // next_u64 is two 32-bit draws, high word first.
  mls::Rng f(7), g(7);
  const std::uint64_t hi = g.next_u32(), lo = g.next_u32();
  CHECK(f.next_u64() == ((hi << 32) | lo));
}

TEST_CASE("rng: skip(n) equals n draws", "[common][rng]") {
  for (std::uint64_t pre : {0, 1, 3, 4, 5}) {
    for (std::uint64_t n : {0, 1, 2, 3, 4, 5, 7, 8, 1000, 1001}) {
      mls::Rng a(9, "s"), b(9, "s");
      for (std::uint64_t i = 0; i < pre; ++i) {
        a.next_u32();
        b.next_u32();
      }
      for (std::uint64_t i = 0; i < n; ++i) a.next_u32();
      b.skip(n);
      INFO("pre " << pre << " n " << n);
      for (int i = 0; i < 9; ++i) CHECK(a.next_u32() == b.next_u32());
    }
  }
}

TEST_CASE("rng: uniform, normal and randint distributions", "[common][rng]") {
  constexpr int kN = 100000;
  // Tolerances are 5 standard errors of the estimate: sd / sqrt(n).
  const double se = 1.0 / std::sqrt(double{kN});
  mls::Rng rng(2024, "dist");

  double sum_f = 0, sum_d = 0, sum_u = 0;
  int out_of_range = 0;
  for (int i = 0; i < kN; ++i) {
    const float f = rng.uniform_float();
    const double d = rng.uniform_double();
    const double u = rng.uniform(-2.0, 3.0);
    out_of_range += !(f >= 0.0f && f < 1.0f) + !(d >= 0.0 && d < 1.0) + !(u >= -2.0 && u < 3.0);
    sum_f += f;
    sum_d += d;
    sum_u += u;
  }
  CHECK(out_of_range == 0);
  const double sd_unit = std::sqrt(1.0 / 12.0);
  CHECK(std::abs(sum_f / kN - 0.5) < 5 * sd_unit * se);
  CHECK(std::abs(sum_d / kN - 0.5) < 5 * sd_unit * se);
  CHECK(std::abs(sum_u / kN - 0.5) < 5 * 5 * sd_unit * se);

  double s1 = 0, s2 = 0;
  for (int i = 0; i < kN; ++i) {
    const double z = rng.normal();
    s1 += z;
    s2 += z * z;
  }
  const double mean = s1 / kN, var = s2 / kN - mean * mean;
  CHECK(std::abs(mean) < 5 * se);
  CHECK(std::abs(std::sqrt(var) - 1.0) < 5 * se / std::sqrt(2.0));  // se of the sd: 1/sqrt(2n)
  double t1 = 0;
  for (int i = 0; i < kN; ++i) t1 += rng.normal(10.0, 3.0);
  CHECK(std::abs(t1 / kN - 10.0) < 5 * 3.0 * se);

  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) {
    const std::int64_t r = rng.randint(-3, 4);
    if (r >= -3 && r < 4) {
      ++counts[static_cast<std::size_t>(r + 3)];
    } else {
      ++out_of_range;
    }
  }
  CHECK(out_of_range == 0);
  // Each count is Binomial(70000, 1/7): mean 10000, sd ~ 90.
  for (int c : counts) CHECK(std::abs(c - 10000) < 5 * 90.4);
  CHECK(rng.randint(5, 6) == 5);
  const std::int64_t wide = rng.randint(std::numeric_limits<std::int64_t>::min(),
                                        std::numeric_limits<std::int64_t>::max());
  CHECK(wide < std::numeric_limits<std::int64_t>::max());
  CHECK_THROWS_WITH(rng.randint(3, 3), "randint: empty range [3, 3): expected hi > lo");
  CHECK_THROWS_WITH(rng.randint(5, -1), Contains("randint: empty range [5, -1)"));
}

// ---- parallel.hpp ------------------------------------------------------------------------------

TEST_CASE("parallel: parallel_for covers each index exactly once", "[common][parallel]") {
  for (int threads : {1, 2, 3, 4, 8}) {
    mls::ThreadCountGuard guard(threads);
    for (std::int64_t n : {0, 1, 2, 7, 64, 1000, 4099}) {
      for (std::int64_t grain : {0, 1, 3, 100, 5000}) {
        INFO("threads " << threads << " n " << n << " grain " << grain);
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n) + 10);
        std::atomic<int> chunks{0};
        std::atomic<bool> bad_chunk{false};
        const std::int64_t begin = 10;
        mls::parallel_for(begin, begin + n, grain, [&](std::int64_t b, std::int64_t e) {
          ++chunks;
          if (!(b < e) || b < begin || e > begin + n) bad_chunk = true;
          for (std::int64_t i = b; i < e; ++i) ++hits[static_cast<std::size_t>(i - begin)];
        });
        CHECK_FALSE(bad_chunk);
        CHECK(chunks <= threads);
        std::int64_t wrong = 0;
        for (std::size_t i = 0; i < hits.size(); ++i)
          wrong += hits[i] != (i < static_cast<std::size_t>(n) ? 1 : 0);
        CHECK(wrong == 0);
      }
    }
  }
  // An empty or reversed range calls nothing.
  bool called = false;
  mls::parallel_for(5, 5, 1, [&](std::int64_t, std::int64_t) { called = true; });
  mls::parallel_for(5, 2, 1, [&](std::int64_t, std::int64_t) { called = true; });
  CHECK_FALSE(called);
}

TEST_CASE("parallel: exceptions propagate, nesting works, thread counts are checked",
          "[common][parallel]") {
  mls::ThreadCountGuard guard(4);
  SECTION("an exception in a chunk is rethrown") {
    CHECK_THROWS_WITH(mls::parallel_for(0, 1000, 1,
                                        [](std::int64_t b, std::int64_t) {
                                          if (b > 0) throw mls::Error("chunk failed");
                                        }),
                      "chunk failed");
    // The pool still works afterwards.
    std::atomic<std::int64_t> sum{0};
    mls::parallel_for(0, 1000, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) sum += i;
    });
    CHECK(sum == 999 * 1000 / 2);
  }
  SECTION("nested parallel_for runs and does not deadlock") {
    std::vector<std::atomic<int>> hits(64 * 64);
    mls::parallel_for(0, 64, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        mls::parallel_for(0, 64, 1, [&](std::int64_t bb, std::int64_t ee) {
          for (std::int64_t j = bb; j < ee; ++j) ++hits[static_cast<std::size_t>(i * 64 + j)];
        });
      }
    });
    CHECK(std::all_of(hits.begin(), hits.end(), [](const std::atomic<int>& h) { return h == 1; }));
  }
  SECTION("set_num_threads and ThreadCountGuard") {
    CHECK(mls::num_threads() == 4);
    CHECK_THROWS_WITH(mls::set_num_threads(0), "set_num_threads: got 0, expected a count >= 1");
    CHECK_THROWS_WITH(mls::set_num_threads(-2), Contains("got -2"));
    CHECK(mls::num_threads() == 4);
    {
      mls::ThreadCountGuard inner(2);
      CHECK(mls::num_threads() == 2);
    }
    CHECK(mls::num_threads() == 4);
    CHECK_THROWS_AS(mls::ThreadCountGuard(0), mls::Error);
    CHECK(mls::num_threads() == 4);
  }
}

// ---- kernels.hpp -------------------------------------------------------------------------------

namespace {
int g_last_kernel = 0;
void fake_a(bool, bool, long, long, long, float, const float*, long, const float*, long, float,
            float*, long) {
  g_last_kernel = 1;
}
void fake_b(bool, bool, long, long, long, float, const float*, long, const float*, long, float,
            float*, long) {
  g_last_kernel = 2;
}
void fake_c(bool, bool, long, long, long, float, const float*, long, const float*, long, float,
            float*, long) {
  g_last_kernel = 3;
}
}  // namespace

TEST_CASE("kernels: register, replace, priority order and selection by name", "[common][kernels]") {
  // Kernels registered by other labs may already be present: use priorities above theirs.
  mls::register_sgemm({"test_low", fake_a, 1000000, "low"});
  mls::register_sgemm({"test_high", fake_b, 1000002, "high"});
  mls::register_sgemm({"test_mid", fake_c, 1000001, "mid"});
  auto ks = mls::sgemm_kernels();
  REQUIRE(ks.size() >= 3);
  CHECK(std::is_sorted(ks.begin(), ks.end(),
                       [](const mls::SgemmKernel& a, const mls::SgemmKernel& b) {
                         return a.priority > b.priority;
                       }));
  CHECK(ks[0].name == "test_high");
  CHECK(ks[1].name == "test_mid");
  CHECK(ks[2].name == "test_low");
  mls::set_sgemm_kernel("");
  CHECK(mls::sgemm_kernel().name == "test_high");

  // Replacing by name keeps one entry and re-sorts.
  mls::register_sgemm({"test_low", fake_a, 1000003, "low, now the highest"});
  ks = mls::sgemm_kernels();
  CHECK(std::count_if(ks.begin(), ks.end(),
                      [](const mls::SgemmKernel& k) { return k.name == "test_low"; }) == 1);
  CHECK(ks[0].name == "test_low");
  CHECK(ks[0].description == "low, now the highest");
  CHECK(mls::sgemm_kernel().name == "test_low");

  mls::set_sgemm_kernel("test_mid");
  const auto k = mls::sgemm_kernel();
  CHECK(k.name == "test_mid");
  k.fn(false, false, 0, 0, 0, 1.0f, nullptr, 0, nullptr, 0, 0.0f, nullptr, 0);
  CHECK(g_last_kernel == 3);

  mls::set_sgemm_kernel("no_such_kernel");
  CHECK_THROWS_WITH(mls::sgemm_kernel(), Contains("matmul: unknown kernel 'no_such_kernel'") &&
                                             Contains("registered: test_low, test_high, test_mid"));
  CHECK_THROWS_WITH(mls::register_sgemm({"", fake_a, 0, ""}),
                    Contains("register_sgemm: a kernel needs a name"));
  CHECK_THROWS_WITH(mls::register_sgemm({"null", nullptr, 0, ""}),
                    Contains("register_sgemm: a kernel needs a name"));

  // Back to the default choice; push the test kernels below any real one.
  mls::set_sgemm_kernel("");
  for (const char* name : {"test_low", "test_mid", "test_high"}) {
    mls::register_sgemm({name, fake_a, -1000000, "test kernel (unused)"});
  }
}

namespace {
int g_last_conv = 0;
void fake_conv_a(const mls::Conv2dProblem&, const float*, const float*, const float*, float*) { g_last_conv = 1; }
void fake_conv_b(const mls::Conv2dProblem&, const float*, const float*, const float*, float*) { g_last_conv = 2; }
bool has_conv(const std::string& name) {
  const auto ks = mls::conv2d_kernels();
  return std::any_of(ks.begin(), ks.end(), [&](const mls::Conv2dKernel& k) { return k.name == name; });
}
}  // namespace

namespace {
int g_last_rowop = 0;
void fake_softmax(float*, const float*, long, long) { g_last_rowop = 1; }
void fake_ln_fwd(float*, float*, float*, const float*, const float*, const float*, long, long, float) { g_last_rowop = 2; }
}  // namespace

TEST_CASE("kernels: row operator registry: the caller's own path by default, choose by name, errors", "[common][kernels]") {
  mls::set_rowops_kernel("");
  CHECK(mls::rowops_kernel().name == mls::kRowOpsFallback);  // nothing chosen: the caller's own path
  CHECK(mls::rowops_kernel().softmax == nullptr);
  mls::register_rowops({"test_rowops", fake_softmax, fake_ln_fwd, nullptr, 5, "test"});
  CHECK(mls::rowops_kernel().name == "fused");  // registering chooses nothing
  mls::set_rowops_kernel("test_rowops");
  const mls::RowOpsKernel k = mls::rowops_kernel();
  CHECK(k.name == "test_rowops");
  k.softmax(nullptr, nullptr, 0, 0);
  CHECK(g_last_rowop == 1);
  k.layernorm_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 1e-5f);
  CHECK(g_last_rowop == 2);
  CHECK(k.layernorm_backward == nullptr);  // the caller's own path for this one
  mls::set_rowops_kernel(mls::kRowOpsFallback);
  CHECK(mls::rowops_kernel().layernorm_forward == nullptr);
  mls::set_rowops_kernel("no_such_rowops");
  CHECK_THROWS_WITH(mls::rowops_kernel(), Contains("rowops: unknown kernel 'no_such_rowops' (from MLS_ROWOPS or "
                                                   "set_rowops_kernel)") && Contains("test_rowops") &&
                                              Contains("'fused' for the hand-written kernels"));
  CHECK_THROWS_WITH(mls::register_rowops({"", fake_softmax, nullptr, nullptr, 0, ""}),
                    Contains("register_rowops: a kernel needs a name and at least one function, got name ''"));
  CHECK_THROWS_WITH(mls::register_rowops({"empty_rowops", nullptr, nullptr, nullptr, 0, ""}),
                    Contains("got name 'empty_rowops'"));
  CHECK_THROWS_WITH(mls::register_rowops({"fused", fake_softmax, nullptr, nullptr, 0, ""}),
                    Contains("register_rowops: the name 'fused' is reserved for the caller's own path (MLS_ROWOPS=fused)"));
  mls::set_rowops_kernel("");
}

TEST_CASE("kernels: conv2d registry: register, unregister, choose by name, force the fallback", "[common][kernels]") {
  // Kernels of labs linked into this program may be present: use priorities above theirs.
  mls::set_conv2d_kernel("");
  mls::register_conv2d({"test_conv_low", fake_conv_a, 1000000, "low"});
  mls::register_conv2d({"test_conv_high", fake_conv_b, 1000001, "high"});
  auto ks = mls::conv2d_kernels();
  REQUIRE(ks.size() >= 2);
  CHECK(ks[0].name == "test_conv_high");
  CHECK(ks[1].name == "test_conv_low");
  CHECK(mls::conv2d_kernel().name == "test_conv_high");
  mls::conv2d_kernel().fn({}, nullptr, nullptr, nullptr, nullptr);
  CHECK(g_last_conv == 2);

  // By name, below the highest priority.
  mls::set_conv2d_kernel("test_conv_low");
  mls::conv2d_kernel().fn({}, nullptr, nullptr, nullptr, nullptr);
  CHECK(g_last_conv == 1);

  // The fallback: no function, the caller runs its own path.
  mls::set_conv2d_kernel(mls::kConv2dFallback);
  CHECK(mls::conv2d_kernel().name == "im2col");
  CHECK(mls::conv2d_kernel().fn == nullptr);

  // Unknown names, bad registrations.
  mls::set_conv2d_kernel("no_such_conv");
  CHECK_THROWS_WITH(mls::conv2d_kernel(), Contains("conv2d: unknown kernel 'no_such_conv' (from MLS_CONV2D or set_conv2d_kernel)") &&
                                              Contains("test_conv_high, test_conv_low") && Contains("'im2col' for lab 2's own path"));
  CHECK_THROWS_WITH(mls::register_conv2d({"", fake_conv_a, 0, ""}),
                    Contains("register_conv2d: a kernel needs a name and a function, got name ''"));
  CHECK_THROWS_WITH(mls::register_conv2d({"null_conv", nullptr, 0, ""}),
                    Contains("register_conv2d: a kernel needs a name and a function, got name 'null_conv' and no function"));
  CHECK_THROWS_WITH(mls::register_conv2d({"im2col", fake_conv_a, 0, ""}),
                    Contains("register_conv2d: the name 'im2col' is reserved"));

  // Unregister: gone from the list and from the choice; a second time says there was none.
  mls::set_conv2d_kernel("");
  CHECK(mls::unregister_conv2d("test_conv_high"));
  CHECK_FALSE(mls::unregister_conv2d("test_conv_high"));
  CHECK_FALSE(has_conv("test_conv_high"));
  CHECK(mls::conv2d_kernel().name == "test_conv_low");
  CHECK(mls::unregister_conv2d("test_conv_low"));
  CHECK_FALSE(has_conv("test_conv_low"));
  // Common alone registers no conv kernel: the default is the fallback again.
  if (mls::conv2d_kernels().empty()) CHECK(mls::conv2d_kernel().fn == nullptr);
}

TEST_CASE("interleaved timing: interleaved_best times both programs in alternating batches, keeps each one's best, stops when they settle",
          "[common][timing]") {
  // Counts, not times (no timing assertions): each program runs once to size the batches, then
  // `repeat` batches of the same number of calls; the order alternates (a first in even rounds).
  std::vector<char> order;
  int a_calls = 0, b_calls = 0;
  auto a = [&] {
    ++a_calls;
    order.push_back('a');
  };
  auto b = [&] {
    ++b_calls;
    order.push_back('b');
  };
  const mls::bench::BestPair best = mls::bench::interleaved_best(a, b, 4, 0.0, 4);  // batches of one call, 4 rounds
  CHECK(a_calls == 5);
  CHECK(b_calls == 5);
  CHECK(best.rounds == 4);
  CHECK(std::string(order.begin(), order.end()) == "ababbaabba");
  // More rounds while a best still improves, never more than max_rounds nor fewer than repeat.
  for (int max_rounds : {0, 2, 6, 13}) {
    a_calls = b_calls = 0;
    const mls::bench::BestPair r = mls::bench::interleaved_best(a, b, 3, 0.0, max_rounds);
    const int most = max_rounds > 0 ? std::max(3, max_rounds) : 12;
    INFO("max_rounds " << max_rounds << ": " << r.rounds << " rounds");
    CHECK(r.rounds >= 3);
    CHECK(r.rounds <= most);
    CHECK(a_calls == r.rounds + 1);
    CHECK(b_calls == r.rounds + 1);
  }
  CHECK(best.a >= 0);
  CHECK(best.b >= 0);
  CHECK(best.a < 1e300);
  CHECK(best.b < 1e300);
}
