// Creation, metadata and element access.
#include <cmath>

#include "generators.hpp"

using mls::DType;
using mls::Tensor;
using ref::Dims;
using ref::I64;
using ref::Ref;

TEST_CASE("empty: metadata of a fresh tensor for every dtype", "[lab1][create]") {
  for (DType t : ref::kAllDTypes) {
    INFO("dtype " << t);
    const Tensor x = Tensor::empty({2, 3, 4}, t);
    mls::testing::observe("empty shape", x.shape());
    mls::testing::observe("empty strides", x.strides());
    mls::testing::observe("empty offset", x.offset());
    mls::testing::observe("empty dtype", std::string(mls::dtype_name(x.dtype())));
    CHECK(x.defined());
    CHECK(x.shape() == Dims{2, 3, 4});
    CHECK(x.strides() == Dims{12, 4, 1});
    CHECK(x.offset() == 0);
    CHECK(x.ndim() == 3);
    CHECK(x.numel() == 24);
    CHECK(x.size(0) == 2);
    CHECK(x.size(-1) == 4);
    CHECK(x.dtype() == t);
    CHECK(x.itemsize() == mls::itemsize(t));
    CHECK(x.device() == mls::Device{});
    CHECK(x.is_contiguous());
    CHECK(x.storage()->nbytes() >= 24 * mls::itemsize(t));
    CHECK(reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 64 == 0);  // 64-byte aligned storage
  }
  const Tensor z = Tensor::empty({});
  CHECK(z.ndim() == 0);
  CHECK(z.numel() == 1);
  const Tensor e = Tensor::empty({3, 0});
  MLS_OBSERVE(z.shape());
  MLS_OBSERVE(e.shape());
  CHECK(e.numel() == 0);
  CHECK(e.defined());
  CHECK_FALSE(Tensor().defined());
  CHECK(Tensor().device() == mls::Device{});
}

TEST_CASE("zeros, ones, full for every dtype and shape", "[lab1][create]") {
  mls::Rng rng(201, "fill");
  for (int trial = 0; trial < 60; ++trial) {
    const Dims shape = ref::random_shape(rng);
    for (DType t : ref::kAllDTypes) {
      INFO("shape " << ref::dims_str(shape) << " dtype " << t);
      const Tensor z = Tensor::zeros(shape, t), o = Tensor::ones(shape, t);
      CHECK(z.dtype() == t);
      CHECK(o.dtype() == t);
      CHECK_SAME(z, Ref(shape, 0.0));
      CHECK_SAME(o, Ref(shape, 1.0));
      const double v = mls::is_floating(t) ? -2.5 : 7.0;
      CHECK_SAME(Tensor::full(shape, v, t), Ref(shape, ref::round_to(t, v)));
    }
  }
  // Conversions follow static_cast: float -> int truncates toward zero, nonzero -> true.
  CHECK(Tensor::full({2}, 3.9, DType::Int32).to_vector<std::int32_t>() == std::vector<std::int32_t>{3, 3});
  CHECK(Tensor::full({2}, -3.9, DType::Int64).to_vector<std::int64_t>() == std::vector<std::int64_t>{-3, -3});
  CHECK(Tensor::full({1}, 0.5, DType::Bool).item() == 1.0);
  CHECK(Tensor::full({1}, 0.1, DType::Float32).item() == static_cast<double>(0.1f));
}

TEST_CASE("arange matches numpy's count and values", "[lab1][create]") {
  struct Case { double start, stop, step; };
  const Case cases[] = {{0, 10, 1},  {2, 3, 0.25}, {5, 0, -1},   {0, 1, 0.1}, {-3, 3, 2},
                        {1, 1, 1},   {3, 1, 1},    {0, -1, -0.3}, {0.5, 4, 1}, {10, 0, -3}};
  for (const Case& c : cases) {
    for (DType t : {DType::Float32, DType::Float64, DType::Int64}) {
      INFO("arange(" << c.start << ", " << c.stop << ", " << c.step << ") " << t);
      const I64 n = std::max<I64>(0, static_cast<I64>(std::ceil((c.stop - c.start) / c.step)));
      MLS_ORACLE(Ref want(Dims{n});)
      MLS_ORACLE(for (I64 i = 0; i < n; ++i) want.v[static_cast<std::size_t>(i)] = ref::round_to(t, c.start + static_cast<double>(i) * c.step);)
      const Tensor x = Tensor::arange(c.start, c.stop, c.step, t);
      CHECK(x.dtype() == t);
      CHECK_SAME(x, want);
    }
  }
  const Tensor a = Tensor::arange(5);
  CHECK(a.dtype() == DType::Float32);
  CHECK(a.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4});
  CHECK(Tensor::arange(4, DType::Int32).to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 1, 2, 3});
  CHECK(Tensor::arange(0).numel() == 0);
}

TEST_CASE("linspace includes both ends and spaces evenly", "[lab1][create]") {
  for (DType t : ref::kFloatDTypes) {
    for (I64 num : {0, 1, 2, 5, 11, 100}) {
      INFO("num " << num << " dtype " << t);
      const double lo = -1.5, hi = 2.0;
      const Tensor x = Tensor::linspace(lo, hi, num, t);
      REQUIRE(x.shape() == Dims{num});
      MLS_ORACLE(Ref want(Dims{num});)
      MLS_ORACLE(for (I64 i = 0; i < num; ++i) {
        want.v[static_cast<std::size_t>(i)] = num == 1 ? lo : lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(num - 1);
      })
      const double eps = ref::eps_of(t);
      CHECK_CLOSE(x, want, [&](I64) { return 4 * eps * 2.0; });
      if (num >= 1) CHECK(x.at({0}) == lo);
      if (num >= 2) CHECK(x.at({-1}) == hi);
    }
  }
  CHECK(Tensor::linspace(0, 10, 6, DType::Int64).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{0, 2, 4, 6, 8, 10});
}

TEST_CASE("eye: square, rectangular, every dtype", "[lab1][create]") {
  for (DType t : ref::kAllDTypes) {
    for (auto [n, m] : {std::pair<I64, I64>{3, -1}, {2, 4}, {4, 2}, {0, -1}, {1, 1}, {3, 0}}) {
      INFO("eye(" << n << ", " << m << ") " << t);
      const I64 cols = m < 0 ? n : m;
      MLS_ORACLE(Ref want(Dims{n, cols});)
      MLS_ORACLE(for (I64 i = 0; i < std::min(n, cols); ++i) want({i, i}) = 1.0;)
      const Tensor x = Tensor::eye(n, m, t);
      CHECK(x.dtype() == t);
      CHECK_SAME(x, want);
    }
  }
}

TEST_CASE("rand and randn are seeded, reproducible and have the right moments", "[lab1][create]") {
  for (DType t : ref::kFloatDTypes) {
    INFO("dtype " << t);
    mls::Rng r1(42, "a"), r2(42, "a"), r3(42, "b");
    const Tensor a = Tensor::rand({1000}, r1, -3.0, 5.0, t);
    const Tensor b = Tensor::rand({1000}, r2, -3.0, 5.0, t);
    const Tensor c = Tensor::rand({1000}, r3, -3.0, 5.0, t);
    CHECK(a.dtype() == t);
    CHECK(mls::equal(a, b));       // same seed and stream: same numbers
    CHECK_FALSE(mls::equal(a, c));  // another stream: other numbers
    const Ref ra = ref::to_ref(a);
    double sum = 0;
    bool in_range = true;
    for (double x : ra.v) {
      in_range = in_range && x >= -3.0 && x < 5.0;
      sum += x;
    }
    CHECK(in_range);
    // Mean of U(-3, 5) is 1, stddev 8/sqrt(12); allow 6 standard errors.
    CHECK(std::fabs(sum / 1000 - 1.0) < 6 * (8 / std::sqrt(12.0)) / std::sqrt(1000.0));
    // The sample mean, within the test's allowance on both sides (the student's stream may differ).
    mls::testing::observe("mean of rand", sum / 1000, {0.0, 12 * (8 / std::sqrt(12.0)) / std::sqrt(1000.0)});

    mls::Rng g(7, "normal");
    const I64 n = 20000;
    const Tensor z = Tensor::randn({n}, g, 2.0, 3.0, t);
    const Ref rz = ref::to_ref(z);
    double s = 0, s2 = 0;
    for (double x : rz.v) s += x;
    const double m = s / static_cast<double>(n);
    for (double x : rz.v) s2 += (x - m) * (x - m);
    const double sd = std::sqrt(s2 / static_cast<double>(n - 1));
    CHECK(std::fabs(m - 2.0) < 6 * 3.0 / std::sqrt(static_cast<double>(n)));
    CHECK(std::fabs(sd - 3.0) < 6 * 3.0 / std::sqrt(2.0 * static_cast<double>(n)));
    mls::testing::observe("mean of randn", m, {0.0, 12 * 3.0 / std::sqrt(static_cast<double>(n))});
    mls::testing::observe("sd of randn", sd, {0.0, 12 * 3.0 / std::sqrt(2.0 * static_cast<double>(n))});
  }
  mls::Rng r(1);
  const Tensor e = Tensor::rand({0, 3}, r);
  CHECK(e.shape() == Dims{0, 3});
  const Tensor s = Tensor::randn({}, r);
  CHECK(s.ndim() == 0);
  CHECK(std::isfinite(s.item()));
}

TEST_CASE("rand never returns the upper bound", "[lab1][create]") {
  // Find the draw of the stream where uniform_float() gives its largest value 1 - 2^-24, then
  // ask rand for [1, 2): 1 + (1 - 2^-24) rounds to 2.0f in float arithmetic, which is outside
  // the documented half-open range [lo, hi).
  mls::Rng scan(7, "rand-edge");
  std::uint64_t at = 0;
  while ((scan.next_u32() >> 8) != 0xFFFFFFu) ++at;
  mls::Rng rng(7, "rand-edge");
  rng.skip(at);
  const Tensor x = Tensor::rand({1}, rng, 1.0, 2.0, DType::Float32);
  MLS_OBSERVE(x.shape());
  MLS_OBSERVE(x.dtype() == DType::Float32);
  INFO("value " << x.item());
  CHECK(x.item() < 2.0);
}

TEST_CASE("from_vector and from: dtype follows the C++ type, row-major fill", "[lab1][create]") {
  const Tensor f = Tensor::from({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  MLS_OBSERVE(f);
  CHECK(f.dtype() == DType::Float32);
  CHECK(f.shape() == Dims{2, 3});
  CHECK(f.at({1, 0}) == 4.0);
  CHECK(f.at({0, 2}) == 3.0);
  CHECK(Tensor::from({1.0, 2.0}).dtype() == DType::Float64);
  CHECK(Tensor::from({1, 2}).dtype() == DType::Int32);
  CHECK(Tensor::from({std::int64_t{1}, std::int64_t{2}}).dtype() == DType::Int64);
  CHECK(Tensor::from({1LL, 2LL}).dtype() == DType::Int64);
  const Tensor b = Tensor::from({true, false, true});
  MLS_OBSERVE(b);
  CHECK(b.dtype() == DType::Bool);
  CHECK(b.to_vector<bool>() == std::vector<bool>{true, false, true});
  const Tensor s = Tensor::from_vector(std::vector<double>{2.5}, Dims{});
  CHECK(s.ndim() == 0);
  CHECK(s.item() == 2.5);
  const Tensor e = Tensor::from_vector(std::vector<float>{}, Dims{0, 4});
  CHECK(e.shape() == Dims{0, 4});
  const Tensor big = Tensor::from_vector(std::vector<std::int64_t>{1LL << 40, -(1LL << 40)});
  MLS_OBSERVE(big);
  CHECK(big.to_vector<std::int64_t>() == std::vector<std::int64_t>{1LL << 40, -(1LL << 40)});
  // The tensor owns a copy: changing the vector later changes nothing.
  std::vector<float> v{1, 2, 3};
  const Tensor c = Tensor::from_vector(v);
  v[0] = 99;
  MLS_OBSERVE(c);
  CHECK(c.at({0}) == 1.0);
}

TEST_CASE("scalar: a 0-d tensor for every dtype", "[lab1][create]") {
  for (DType t : ref::kAllDTypes) {
    INFO("dtype " << t);
    const Tensor s = Tensor::scalar(3.0, t);
    MLS_OBSERVE(s);
    CHECK(s.ndim() == 0);
    CHECK(s.shape().empty());
    CHECK(s.strides().empty());
    CHECK(s.numel() == 1);
    CHECK(s.dtype() == t);
    MLS_ORACLE_CHECK(CHECK(s.item() == ref::round_to(t, 3.0)));
    CHECK(s.at({}) == s.item());
    CHECK(s.is_contiguous());
  }
  CHECK(Tensor::scalar(-1.75, DType::Float64).item() == -1.75);
}

TEST_CASE("at and set on strided views, negative indices, dtype conversion", "[lab1][create]") {
  mls::Rng rng(202, "at");
  for (int trial = 0; trial < 60; ++trial) {
    for (DType t : ref::kAllDTypes) {
      gen::Pair p = gen::random_input(rng, t, 3);
      INFO(p.log << " " << t);
      if (p.r.numel() == 0) continue;
      // Read every element through at(), with a random mix of positive and negative indices.
      std::vector<double> read;
      for (I64 i = 0; i < p.r.numel(); ++i) {
        Dims idx = ref::unravel(i, p.r.shape);
        Dims arg = idx;
        for (std::size_t d = 0; d < arg.size(); ++d) {
          if (rng.randint(0, 2)) arg[d] -= p.r.shape[d];
        }
        read.push_back(p.t.at(arg));
      }
      mls::testing::observe("at() of every element, in row-major order", read);
      MLS_ORACLE_CHECK(CHECK(read == p.r.v));
      // set() writes where at() reads; values are converted like static_cast.
      const I64 i = rng.randint(0, p.r.numel());
      const Dims idx = ref::unravel(i, p.r.shape);
      Tensor dst = p.t.clone();
      dst.set(idx, -1.5);
      MLS_ORACLE(Ref want = p.r;)
      MLS_ORACLE(want.v[static_cast<std::size_t>(i)] = ref::round_to(t, -1.5);)
      CHECK_SAME(dst, want);
    }
  }
  Tensor x = Tensor::zeros({2, 3}, DType::Int32);
  x.set({-1, -1}, 7.9);
  CHECK(x.at({1, 2}) == 7.0);
}

TEST_CASE("item and to_vector convert to the requested type", "[lab1][create]") {
  const Tensor f = Tensor::from({1.5f, -2.5f, 0.f, 3.f}, {2, 2});
  MLS_OBSERVE(f.to_vector<double>());
  MLS_OBSERVE(f.to_vector<std::int32_t>());
  MLS_OBSERVE(f.transpose().to_vector<float>());
  MLS_OBSERVE(Tensor::from({4.f, 5.f}).slice(0, 1, 2).item());
  CHECK(f.to_vector<double>() == std::vector<double>{1.5, -2.5, 0, 3});
  CHECK(f.to_vector<std::int32_t>() == std::vector<std::int32_t>{1, -2, 0, 3});
  CHECK(f.to_vector<bool>() == std::vector<bool>{true, true, false, true});
  // to_vector walks logical order, not storage order.
  CHECK(f.transpose().to_vector<float>() == std::vector<float>{1.5f, 0.f, -2.5f, 3.f});
  CHECK(Tensor::from({7}).item() == 7.0);
  CHECK(Tensor::ones({1, 1, 1}, DType::Int64).item() == 1.0);
  CHECK(Tensor::from({4.f, 5.f}).slice(0, 1, 2).item() == 5.0);
  mls::Rng rng(203, "tovec");
  for (int trial = 0; trial < 50; ++trial) {
    gen::Pair p = gen::random_input(rng, DType::Float64, 4);
    INFO(p.log);
    MLS_OBSERVE(p.t.to_vector<double>());
    MLS_ORACLE_CHECK(CHECK(p.t.to_vector<double>() == p.r.v));
  }
}

TEST_CASE("typed data pointers and the view constructor", "[lab1][create]") {
  Tensor x = Tensor::arange(6, DType::Int64);
  std::int64_t* p = x.data<std::int64_t>();
  p[2] = 40;
  CHECK(x.at({2}) == 40.0);
  const Tensor s = x.slice(0, 3, 6);
  CHECK(s.data<std::int64_t>() == p + 3);  // data() points at element [0] of the view
  CHECK(static_cast<const std::byte*>(s.data_ptr()) == x.storage()->data() + 3 * 8);
  // A hand-built view: every other element, starting at 1.
  const Tensor v(x.storage(), 1, {3}, {2}, DType::Int64);
  MLS_OBSERVE(x);
  MLS_OBSERVE(s);
  MLS_OBSERVE(v);
  CHECK(v.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 3, 5});
  CHECK(v.shares_storage(x));
  CHECK_FALSE(v.shares_storage(x.clone()));
  CHECK_FALSE(Tensor().shares_storage(Tensor()));
}
