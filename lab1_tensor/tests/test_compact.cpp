// compact / contiguous / clone / copy_ / to / fill_: copies between arbitrary strided layouts.
#include "generators.hpp"
#include "mls/common/parallel.hpp"

using mls::DType;
using mls::Tensor;
using ref::Dims;
using ref::I64;
using ref::Ref;

namespace {

/// Every storage element that `t` does not view, by position, read raw.
std::vector<std::pair<I64, double>> outside(const Tensor& t) {
  const I64 cap = static_cast<I64>(t.storage()->nbytes() / t.itemsize());
  std::vector<bool> inside(static_cast<std::size_t>(cap), false);
  for (I64 i = 0; i < t.numel(); ++i) inside[static_cast<std::size_t>(ref::raw_position(t, ref::unravel(i, t.shape())))] = true;
  std::vector<std::pair<I64, double>> out;
  for (I64 p = 0; p < cap; ++p) {
    if (!inside[static_cast<std::size_t>(p)]) out.emplace_back(p, ref::read_elem(t.storage()->data(), t.dtype(), p));
  }
  return out;
}

}  // namespace

TEST_CASE("slides 002: compact() of a permuted view yields the expected order", "[lab1][compact]") {
  const Tensor a = Tensor::arange(24).reshape({1, 2, 3, 4});
  const Tensor p = a.permute({0, 2, 3, 1});  // [1, 3, 4, 2]: element [0, k, l, j] = 12 j + 4 k + l
  CHECK(p.shape() == Dims{1, 3, 4, 2});
  CHECK(p.strides() == Dims{24, 4, 1, 12});
  CHECK_FALSE(p.is_contiguous());
  const Tensor c = p.compact();
  MLS_OBSERVE(p);
  MLS_OBSERVE(c);
  CHECK(c.is_contiguous());
  CHECK(c.strides() == Dims{24, 8, 2, 1});
  CHECK_FALSE(c.shares_storage(a));
  CHECK(c.to_vector<float>() == std::vector<float>{0, 12, 1, 13, 2,  14, 3,  15, 4,  16, 5,  17,
                                                   6, 18, 7, 19, 8, 20, 9, 21, 10, 22, 11, 23});
}

TEST_CASE("compact of random strided layouts, every dtype", "[lab1][compact]") {
  mls::Rng rng(401, "compact");
  for (int trial = 0; trial < 200; ++trial) {
    const DType t = ref::kAllDTypes[trial % 5];
    gen::Pair p = gen::random_input(rng, t, 3);
    INFO(p.log << " " << t);
    const Tensor c = p.t.compact();
    CHECK(c.is_contiguous());
    CHECK(c.dtype() == t);
    CHECK_SAME(c, p.r);
    if (p.t.is_contiguous()) {
      CHECK(c.storage() == p.t.storage());  // already dense: no copy
      CHECK(c.offset() == p.t.offset());
    } else {
      CHECK_FALSE(c.shares_storage(p.t));
      CHECK(c.offset() == 0);
      CHECK(c.strides() == mls::contiguous_strides(c.shape()));
    }
    CHECK_SAME(p.t.contiguous(), p.r);
  }
}

TEST_CASE("compact of big transposed and permuted tensors, 1 and 2 threads", "[lab1][compact]") {
  mls::Rng rng(402, "compact-big");
  const Ref r2 = ref::random_ref({600, 500}, DType::Float32, rng);
  const Ref r4 = ref::random_ref({10, 20, 30, 50}, DType::Float64, rng);
  const Ref r3 = ref::random_ref({70, 70, 70}, DType::Int32, rng);
  const Tensor t2 = ref::make(r2, DType::Float32), t4 = ref::make(r4, DType::Float64), t3 = ref::make(r3, DType::Int32);
  const Ref w2 = ref::permute(r2, {1, 0}), w4 = ref::permute(r4, {0, 2, 3, 1}), w3 = ref::permute(r3, {2, 1, 0});
  const Ref w3s = ref::slice(r3, 1, 3, 70, 2);
  for (int threads : {1, 2}) {
    INFO("threads " << threads);
    mls::ThreadCountGuard guard(threads);
    CHECK_SAME(t2.transpose().compact(), w2);
    CHECK_SAME(t4.permute({0, 2, 3, 1}).compact(), w4);
    CHECK_SAME(t3.permute({2, 1, 0}).compact(), w3);
    CHECK_SAME(t3.slice(1, 3, 70, 2).compact(), w3s);
    // Converting copies of strided views.
    CHECK_SAME(t2.transpose().to(DType::Float64), w2);
    CHECK_SAME(t3.permute({2, 1, 0}).to(DType::Int64), w3);
    Tensor dst = Tensor::empty({500, 600}, DType::Float64);
    dst.copy_(t2.transpose());
    CHECK_SAME(dst, w2);
  }
}

TEST_CASE("clone always copies and the copy is independent", "[lab1][compact]") {
  mls::Rng rng(403, "clone");
  for (int trial = 0; trial < 60; ++trial) {
    const DType t = ref::kAllDTypes[trial % 5];
    gen::Pair p = gen::random_input(rng, t, 3);
    INFO(p.log << " " << t);
    Tensor c = p.t.clone();
    CHECK_FALSE(c.shares_storage(p.t));
    CHECK(c.is_contiguous());
    CHECK(c.dtype() == t);
    CHECK_SAME(c, p.r);
    if (c.numel() > 0) {
      c.fill_(0);
      CHECK_SAME(p.t, p.r);  // the source is untouched
    }
  }
}

TEST_CASE("copy_ between strided tensors with broadcasting and dtype conversion", "[lab1][compact]") {
  mls::Rng rng(404, "copy");
  for (int trial = 0; trial < 200; ++trial) {
    const DType td = ref::kAllDTypes[rng.randint(0, 5)], ts = ref::kAllDTypes[rng.randint(0, 5)];
    const Dims shape = ref::random_shape(rng);
    const Ref dst0 = ref::random_ref(shape, td, rng);
    Tensor dst = rng.randint(0, 2) ? ref::make_strided(dst0, td, rng) : ref::make(dst0, td);
    const Dims sshape = ref::broadcastable_to(shape, rng);
    const Ref src = ref::random_ref(sshape, ts, rng, -3.0, 3.0);
    const Tensor s = rng.randint(0, 2) ? ref::make_strided(src, ts, rng) : ref::make(src, ts);
    INFO(ref::dims_str(sshape) << " " << ts << " into " << ref::dims_str(shape) << " strides "
                               << ref::dims_str(dst.strides()) << " " << td);
    const auto gaps = outside(dst);
    const void* where = dst.data_ptr();
    Tensor& r = dst.copy_(s);
    CHECK(&r == &dst);
    CHECK(dst.data_ptr() == where);  // in place
    CHECK_SAME(dst, ref::map(ref::expand(src, shape), [td](double x) { return ref::round_to(td, x); }));
    CHECK(outside(dst) == gaps);  // storage the view does not cover is untouched
  }
}

TEST_CASE("copy_ with overlapping source and destination behaves like a copy through a temporary",
          "[lab1][compact]") {
  Tensor a = Tensor::arange(10, DType::Int64);
  a.slice(0, 1, 10).copy_(a.slice(0, 0, 9));  // shift right by one
  MLS_OBSERVE_VALUES(a);
  CHECK(a.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0, 1, 2, 3, 4, 5, 6, 7, 8});
  Tensor b = Tensor::arange(10, DType::Int64);
  b.slice(0, 0, 9).copy_(b.slice(0, 1, 10));  // shift left by one
  MLS_OBSERVE_VALUES(b);
  CHECK(b.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 9});
  Tensor m = ref::make(Ref({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}), DType::Float32);
  m.copy_(m.transpose());  // in-place transpose
  MLS_OBSERVE_VALUES(m);
  CHECK(m.to_vector<float>() == std::vector<float>{1, 4, 7, 2, 5, 8, 3, 6, 9});
  Tensor r = Tensor::arange(6, DType::Int32);
  r.copy_(r.as_strided({6}, {-1}, 5));  // reverse in place
  MLS_OBSERVE_VALUES(r);
  CHECK(r.to_vector<std::int32_t>() == std::vector<std::int32_t>{5, 4, 3, 2, 1, 0});
}

TEST_CASE("to(dtype): every pair of dtypes converts like static_cast", "[lab1][compact]") {
  const Ref vals({2, 4}, {-2.75, -1.0, -0.5, 0.0, 0.25, 1.0, 3.5, 100.0});
  for (DType from : ref::kAllDTypes) {
    const Ref src = ref::map(vals, [from](double x) { return ref::round_to(from, x); });
    mls::Rng rng(405, "to");
    const Tensor x = ref::make_strided(src, from, rng);
    for (DType to : ref::kAllDTypes) {
      INFO(from << " -> " << to);
      const Tensor y = x.to(to);
      CHECK(y.dtype() == to);
      CHECK_SAME(y, ref::map(src, [to](double v) { return ref::round_to(to, v); }));
      if (from == to) CHECK(y.storage() == x.storage());  // same dtype: no copy
      else CHECK_FALSE(y.shares_storage(x));
    }
  }
  // Large int64 values survive a round trip through float64 when they fit in 53 bits.
  const Tensor big = Tensor::from_vector(std::vector<std::int64_t>{(1LL << 52) + 1, -(1LL << 50)});
  CHECK(big.to(DType::Float64).to(DType::Int64).to_vector<std::int64_t>() == big.to_vector<std::int64_t>());
}

TEST_CASE("fill_ writes only the elements of a view", "[lab1][compact]") {
  mls::Rng rng(406, "fill");
  for (int trial = 0; trial < 100; ++trial) {
    const DType t = ref::kAllDTypes[trial % 5];
    gen::Pair p = gen::random_input(rng, t, 2);
    // fill_ through an expanded view writes the same element several times: still fine.
    INFO(p.log << " " << t);
    const auto gaps = outside(p.t);
    Tensor& r = p.t.fill_(-3.0);
    CHECK(&r == &p.t);
    CHECK_SAME(p.t, Ref(p.r.shape, ref::round_to(t, -3.0)));
    CHECK(outside(p.t) == gaps);
  }
  Tensor z = Tensor::zeros({4, 4});
  z.slice(0, 1, 3).slice(1, 1, 3).fill_(1);
  CHECK(z.to_vector<float>() == std::vector<float>{0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0});
  Tensor big = Tensor::empty({700, 500}, DType::Float64);
  {
    mls::ThreadCountGuard g(2);
    big.transpose().fill_(2.5);
  }
  CHECK_SAME(big, Ref({700, 500}, 2.5));
}

// A zero-size dim outside the transposed plane once made copy_elements divide by zero and copy
// a whole plane out of bounds.
TEST_CASE("copy_ into an empty strided view writes nothing", "[lab1][compact]") {
  // dst has no elements but views a live storage with a row-major inner dim; src is transposed.
  // The tiled-transpose path of the copy must not run a plane when another dim is 0.
  Tensor storage = Tensor::zeros({9});
  Tensor dst = storage.as_strided({0, 3, 3}, {9, 3, 1}, 0);
  const Tensor other = Tensor::arange(9);
  const Tensor src = other.as_strided({0, 3, 3}, {9, 1, 3}, 0);
  dst.copy_(src);
  CHECK(storage.to_vector<float>() == std::vector<float>(9, 0.0f));
  MLS_OBSERVE_VALUES(storage);
  MLS_OBSERVE(src.clone().shape());
  MLS_OBSERVE(src.compact().shape());
  // The same through clone() and compact(): the results are empty, correctly shaped tensors.
  CHECK(src.clone().shape() == Dims{0, 3, 3});
  CHECK(src.compact().shape() == Dims{0, 3, 3});
}

TEST_CASE("compact of a 1M+ float permute with odd sizes (tiled, streamed through a buffer)", "[lab1][compact]") {
  mls::Rng rng(404, "compact-stream");
  const Ref r = ref::random_ref({3, 62, 66, 97}, DType::Float32, rng);
  const Tensor t = ref::make(r, DType::Float32);
  for (int threads : {1, 2}) {
    INFO("threads " << threads);
    mls::ThreadCountGuard guard(threads);
    CHECK_SAME(t.permute({0, 2, 3, 1}).compact(), ref::permute(r, {0, 2, 3, 1}));
    CHECK_SAME(t.permute({3, 1, 2, 0}).compact(), ref::permute(r, {3, 1, 2, 0}));
  }
}
