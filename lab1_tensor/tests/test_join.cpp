// concat / stack / split / chunk, against naive joins and index ranges.
#include "generators.hpp"

using mls::DType;
using mls::Tensor;
using ref::Dims;
using ref::I64;
using ref::Ref;

TEST_CASE("concat of random strided pieces along any axis, promoting dtypes", "[lab1][join]") {
  mls::Rng rng(801, "concat");
  for (int trial = 0; trial < 150; ++trial) {
    Dims shape = ref::random_shape(rng, 1, 4, 4, 0);
    const I64 nd = static_cast<I64>(shape.size()), axis = rng.randint(-nd, nd), ax = axis < 0 ? axis + nd : axis;
    const I64 parts = rng.randint(1, 5);
    std::vector<Tensor> ts;
    std::vector<Ref> rs;
    DType out = DType::Bool;
    std::ostringstream log;
    for (I64 k = 0; k < parts; ++k) {
      shape[static_cast<std::size_t>(ax)] = rng.randint(0, 4);  // pieces of different (even 0) lengths
      const DType t = ref::kAllDTypes[rng.randint(0, 5)];
      out = t > out ? t : out;
      rs.push_back(ref::random_ref(shape, t, rng));
      ts.push_back(gen::any_layout(rs.back(), t, rng));
      log << ' ' << ref::dims_str(shape) << " strides " << ref::dims_str(ts.back().strides());
    }
    INFO("axis " << axis << log.str());
    const Tensor got = mls::concat(ts, axis);
    CHECK(got.dtype() == out);
    CHECK(got.is_contiguous());
    CHECK_SAME(got, ref::concat(rs, ax));
    for (const Tensor& t : ts) CHECK_FALSE(got.shares_storage(t));
  }
  const Tensor a = Tensor::from({1.f, 2.f, 3.f, 4.f}, {2, 2}), b = Tensor::from({5.f, 6.f}, {1, 2});
  CHECK(mls::concat({a, b}).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(mls::concat({a, b.transpose()}, 1).to_vector<float>() == std::vector<float>{1, 2, 5, 3, 4, 6});
  CHECK(mls::concat({a}).shape() == Dims{2, 2});
  CHECK(mls::concat({a, Tensor::from({7, 8}, {1, 2})}).dtype() == DType::Float32);
}

TEST_CASE("stack adds a new axis at any position", "[lab1][join]") {
  mls::Rng rng(802, "stack");
  for (int trial = 0; trial < 100; ++trial) {
    const Dims shape = ref::random_shape(rng, 0, 3, 4, 0);
    const I64 nd = static_cast<I64>(shape.size()) + 1, axis = rng.randint(-nd, nd), ax = axis < 0 ? axis + nd : axis;
    const I64 parts = rng.randint(1, 4);
    const DType t = ref::kAllDTypes[rng.randint(0, 5)];
    std::vector<Tensor> ts;
    std::vector<Ref> rs;
    Dims one = shape;
    one.insert(one.begin() + ax, 1);
    for (I64 k = 0; k < parts; ++k) {
      rs.push_back(ref::random_ref(shape, t, rng));
      ts.push_back(gen::any_layout(rs.back(), t, rng));
      rs.back() = ref::reshape(rs.back(), one);  // the naive stack: unsqueeze then concat
    }
    INFO("shape " << ref::dims_str(shape) << " axis " << axis << " parts " << parts);
    const Tensor got = mls::stack(ts, axis);
    CHECK(got.dtype() == t);
    CHECK_SAME(got, ref::concat(rs, ax));
  }
  const Tensor a = Tensor::from({1, 2}), b = Tensor::from({3, 4});
  CHECK(mls::stack({a, b}).to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 2, 3, 4});
  CHECK(mls::stack({a, b}, 1).to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 3, 2, 4});
  CHECK(mls::stack({a, b}, -1).shape() == Dims{2, 2});
  CHECK(mls::stack({Tensor::scalar(1), Tensor::scalar(2)}).shape() == Dims{2});
}

TEST_CASE("split by sizes and by piece size: views that cover the axis", "[lab1][join]") {
  mls::Rng rng(803, "split");
  for (int trial = 0; trial < 120; ++trial) {
    gen::Pair p = gen::random_input(rng, DType::Float64, 2, 1, 4);
    if (p.r.ndim() == 0) continue;
    const I64 nd = p.r.ndim(), axis = rng.randint(-nd, nd), ax = axis < 0 ? axis + nd : axis;
    const I64 n = p.r.shape[static_cast<std::size_t>(ax)];
    // Random sizes that sum to n (zeros allowed).
    std::vector<I64> sizes;
    I64 left = n;
    while (left > 0) {
      const I64 s = rng.randint(0, left + 1);
      sizes.push_back(s);
      left -= s;
    }
    if (rng.randint(0, 2)) sizes.push_back(0);
    INFO(p.log << " axis " << axis << " sizes " << ref::dims_str(sizes));
    const std::vector<Tensor> parts = mls::split(p.t, sizes, axis);
    REQUIRE(parts.size() == sizes.size());
    I64 at = 0;
    for (std::size_t k = 0; k < parts.size(); ++k) {
      CHECK(parts[k].shares_storage(p.t));
      CHECK_SAME(parts[k], ref::slice(p.r, ax, at, at + sizes[k], 1));
      at += sizes[k];
    }
    // Split by a piece size: equal pieces, the last one possibly shorter.
    const I64 size = rng.randint(1, 5);
    const std::vector<Tensor> eq = mls::split(p.t, size, axis);
    CHECK(static_cast<I64>(eq.size()) == (n + size - 1) / size);
    for (std::size_t k = 0; k < eq.size(); ++k) {
      const I64 b = static_cast<I64>(k) * size;
      CHECK_SAME(eq[k], ref::slice(p.r, ax, b, std::min(n, b + size), 1));
    }
    // Joining the pieces (zero-size ones included) gives the tensor back.
    if (!parts.empty()) CHECK_SAME(mls::concat(parts, axis), p.r);
  }
}

TEST_CASE("chunk splits into at most n near-equal views, like torch.chunk", "[lab1][join]") {
  const Tensor a = Tensor::arange(10, DType::Int32);
  auto sizes = [](const std::vector<Tensor>& v) {
    std::vector<I64> s;
    for (const Tensor& t : v) s.push_back(t.numel());
    return s;
  };
  CHECK(sizes(mls::chunk(a, 3)) == std::vector<I64>{4, 4, 2});
  CHECK(sizes(mls::chunk(a, 5)) == std::vector<I64>{2, 2, 2, 2, 2});
  CHECK(sizes(mls::chunk(a, 4)) == std::vector<I64>{3, 3, 3, 1});
  CHECK(sizes(mls::chunk(a, 1)) == std::vector<I64>{10});
  CHECK(sizes(mls::chunk(a, 20)).size() == 10);
  CHECK(sizes(mls::chunk(Tensor::arange(6), 4)) == std::vector<I64>{2, 2, 2});  // torch gives 3 chunks too
  const auto c = mls::chunk(a, 3);
  CHECK(c[1].to_vector<std::int32_t>() == std::vector<std::int32_t>{4, 5, 6, 7});
  CHECK(c[2].shares_storage(a));
  const Tensor m = Tensor::arange(12).reshape({3, 4});
  const auto cols = mls::chunk(m, 2, -1);
  REQUIRE(cols.size() == 2);
  CHECK(cols[1].to_vector<float>() == std::vector<float>{2, 3, 6, 7, 10, 11});
  mls::Rng rng(804, "chunk");
  for (int trial = 0; trial < 60; ++trial) {
    gen::Pair p = gen::random_input(rng, DType::Int64, 2, 1, 3);
    if (p.r.ndim() == 0) continue;
    const I64 nd = p.r.ndim(), axis = rng.randint(0, nd), n = p.r.shape[static_cast<std::size_t>(axis)];
    const I64 chunks = rng.randint(1, 6);
    INFO(p.log << " axis " << axis << " chunks " << chunks);
    const auto parts = mls::chunk(p.t, chunks, axis);
    CHECK(static_cast<I64>(parts.size()) <= std::max<I64>(chunks, 1));
    if (n > 0) CHECK_SAME(mls::concat(parts, axis), p.r);
  }
}
