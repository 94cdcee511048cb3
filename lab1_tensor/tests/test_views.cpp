// View ops: new shape/strides/offset over the same storage, checked against naive index maps.
#include "generators.hpp"

using mls::DType;
using mls::Tensor;
using ref::Dims;
using ref::I64;
using ref::Ref;

namespace {

Ref arange_ref(const Dims& shape) {
  Ref r(shape);
  for (std::size_t i = 0; i < r.v.size(); ++i) r.v[i] = static_cast<double>(i);
  return r;
}

Tensor arange_tensor(const Dims& shape, DType t = DType::Float32) { return ref::make(arange_ref(shape), t); }

}  // namespace

TEST_CASE("slides 002: a transpose shares storage with its source", "[lab1][views]") {
  const Tensor a = Tensor::arange(24).reshape({1, 2, 3, 4});
  const Tensor t = a.transpose(1, 3);
  CHECK(t.shares_storage(a));
  CHECK(t.shape() == Dims{1, 4, 3, 2});
  CHECK(t.strides() == Dims{24, 1, 4, 12});
  CHECK(t.offset() == a.offset());
  CHECK(t.data_ptr() == a.data_ptr());
  CHECK_FALSE(t.is_contiguous());
  CHECK_SAME(t, ref::permute(arange_ref({1, 2, 3, 4}), {0, 3, 2, 1}));
  // Writing through the view is visible in the source: they are the same bytes.
  Tensor w = a.transpose();
  w.set({0, 1, 3, 2}, -5);
  CHECK(a.at({0, 1, 2, 3}) == -5.0);
  // The default transpose swaps the last two dims.
  CHECK(Tensor::zeros({2, 3, 5}).transpose().shape() == Dims{2, 5, 3});
}

TEST_CASE("random chains of view ops match the naive index maps", "[lab1][views]") {
  mls::Rng rng(301, "chains");
  for (int trial = 0; trial < 200; ++trial) {
    const DType t = ref::kAllDTypes[trial % 5];
    gen::Pair p = gen::random_input(rng, t, 0);
    const auto storage = p.t.storage();
    for (int step = 0; step < 6; ++step) {
      gen::random_view_step(p, rng);
      INFO(p.log << " " << t);
      CHECK(p.t.storage() == storage);  // every op here is a view
      CHECK(p.t.dtype() == t);
      CHECK(p.t.strides().size() == p.t.shape().size());
      CHECK_SAME(p.t, p.r);
    }
  }
}

TEST_CASE("view and reshape: same elements, -1 inferred, a view when the strides allow", "[lab1][views]") {
  mls::Rng rng(302, "reshape");
  int copies = 0, views = 0;
  for (int trial = 0; trial < 200; ++trial) {
    gen::Pair p = gen::random_input(rng, DType::Float32, 3, 0, 4);
    Dims ns = gen::random_factorisation(p.r.numel() == 0 ? 1 : p.r.numel(), rng);
    if (p.r.numel() == 0) ns.push_back(0);
    Dims arg = ns;
    if (rng.randint(0, 2) && !ns.empty() && p.r.numel() > 0) arg[static_cast<std::size_t>(rng.randint(0, static_cast<I64>(ns.size())))] = -1;
    INFO(p.log << " -> " << ref::dims_str(arg));
    const Tensor r = p.t.reshape(arg);
    CHECK_SAME(r, ref::reshape(p.r, ns));
    if (r.shares_storage(p.t)) {
      ++views;
      CHECK(p.t.view(arg).strides() == r.strides());
    } else {
      ++copies;
      CHECK(r.is_contiguous());
      CHECK_THROWS_AS(p.t.view(arg), mls::Error);  // reshape copied, so view must refuse
    }
  }
  CHECK(views > 50);
  CHECK(copies > 10);
  // Contiguous tensors always view; -1 in any position.
  const Tensor a = arange_tensor({2, 3, 4});
  CHECK(a.view({4, -1}).shape() == Dims{4, 6});
  CHECK(a.view({-1}).shares_storage(a));
  CHECK(a.view({-1, 2, 2}).shape() == Dims{6, 2, 2});
  CHECK(Tensor::scalar(5).reshape({1, 1}).shape() == Dims{1, 1});
  CHECK(Tensor::ones({1, 1}).view({}).ndim() == 0);
  CHECK(Tensor::zeros({0, 3}).reshape({3, -1, 2}).shape() == Dims{3, 0, 2});
}

TEST_CASE("permute reorders shape and strides, negative dims allowed", "[lab1][views]") {
  const Tensor a = arange_tensor({2, 3, 4});
  const Tensor p = a.permute({2, 0, 1});
  CHECK(p.shape() == Dims{4, 2, 3});
  CHECK(p.strides() == Dims{1, 12, 4});
  CHECK(p.shares_storage(a));
  CHECK_SAME(p, ref::permute(arange_ref({2, 3, 4}), {2, 0, 1}));
  CHECK(a.permute({-1, -3, -2}).strides() == Dims{1, 12, 4});
  CHECK(Tensor::scalar(1).permute(std::span<const I64>{}).ndim() == 0);
  mls::Rng rng(303, "permute");
  for (int trial = 0; trial < 50; ++trial) {
    gen::Pair x = gen::random_input(rng, DType::Int32, 2, 1, 4);
    Dims perm(static_cast<std::size_t>(x.r.ndim()));
    for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<I64>(i);
    for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[static_cast<std::size_t>(rng.randint(0, static_cast<I64>(i)))]);
    INFO(x.log << " permute " << ref::dims_str(perm));
    CHECK_SAME(x.t.permute(perm), ref::permute(x.r, perm));
    // Permuting back with the inverse permutation gives the original layout.
    Dims inv(perm.size());
    for (std::size_t i = 0; i < perm.size(); ++i) inv[static_cast<std::size_t>(perm[i])] = static_cast<I64>(i);
    const Tensor back = x.t.permute(perm).permute(inv);
    CHECK(back.strides() == x.t.strides());
    CHECK(back.shape() == x.t.shape());
  }
}

TEST_CASE("slice: Python bounds, clamping, steps, negative dims", "[lab1][views]") {
  const Tensor a = arange_tensor({10});
  auto vals = [](const Tensor& t) { return t.to_vector<float>(); };
  CHECK(vals(a.slice(0, 2, 5)) == std::vector<float>{2, 3, 4});
  CHECK(vals(a.slice(0, -3, 10)) == std::vector<float>{7, 8, 9});
  CHECK(vals(a.slice(0, 1, -1, 3)) == std::vector<float>{1, 4, 7});
  CHECK(vals(a.slice(0, -100, 2)) == std::vector<float>{0, 1});
  CHECK(vals(a.slice(0, 8, 100)) == std::vector<float>{8, 9});
  CHECK(a.slice(0, 5, 5).numel() == 0);
  CHECK(a.slice(0, 7, 3).numel() == 0);
  CHECK(a.slice(0, 20, 30).numel() == 0);
  CHECK(vals(a.slice(0, 0, 10, 4)) == std::vector<float>{0, 4, 8});
  const Tensor s = a.slice(0, 3, 9, 2);
  CHECK(s.offset() == 3);
  CHECK(s.strides() == Dims{2});
  CHECK(s.shares_storage(a));
  const Tensor m = arange_tensor({3, 4});
  CHECK_SAME(m.slice(-1, 1, 4, 2), ref::slice(arange_ref({3, 4}), 1, 1, 4, 2));
  CHECK_SAME(m.slice(0, -2, 3), ref::slice(arange_ref({3, 4}), 0, -2, 3, 1));
  mls::Rng rng(304, "slice");
  for (int trial = 0; trial < 100; ++trial) {
    gen::Pair x = gen::random_input(rng, DType::Float64, 2, 1, 4);
    if (x.r.ndim() == 0) continue;  // a view step may have squeezed the last dim away
    const I64 d = rng.randint(0, x.r.ndim()), n = x.r.shape[static_cast<std::size_t>(d)];
    const I64 b = rng.randint(-n - 2, n + 3), e = rng.randint(-n - 2, n + 3), st = rng.randint(1, 5);
    INFO(x.log << " slice(" << d << ", " << b << ", " << e << ", " << st << ")");
    CHECK_SAME(x.t.slice(d, b, e, st), ref::slice(x.r, d, b, e, st));
  }
}

TEST_CASE("select removes a dim at an index, negative index from the end", "[lab1][views]") {
  const Tensor m = arange_tensor({3, 4});
  CHECK(m.select(0, 1).to_vector<float>() == std::vector<float>{4, 5, 6, 7});
  CHECK(m.select(1, -1).to_vector<float>() == std::vector<float>{3, 7, 11});
  CHECK(m.select(-1, 0).strides() == Dims{4});
  CHECK(m.select(0, 2).offset() == 8);
  const Tensor v = Tensor::from({1.f, 2.f, 3.f});
  const Tensor e = v.select(0, 1);
  CHECK(e.ndim() == 0);
  CHECK(e.item() == 2.0);
  CHECK(e.shares_storage(v));
  mls::Rng rng(305, "select");
  for (int trial = 0; trial < 80; ++trial) {
    gen::Pair x = gen::random_input(rng, DType::Int64, 2, 1, 4);
    if (x.r.ndim() == 0) continue;
    const I64 d = rng.randint(0, x.r.ndim()), n = x.r.shape[static_cast<std::size_t>(d)];
    if (n == 0) continue;
    const I64 i = rng.randint(-n, n);
    INFO(x.log << " select(" << d << ", " << i << ")");
    CHECK_SAME(x.t.select(d, i), ref::select(x.r, d, i));
  }
}

TEST_CASE("expand and broadcast_to use stride 0 and never copy", "[lab1][views]") {
  const Tensor c = Tensor::from({1.f, 2.f, 3.f}, {3, 1});
  const Tensor e = c.expand({2, 3, 4});
  CHECK(e.shape() == Dims{2, 3, 4});
  CHECK(e.strides() == Dims{0, 1, 0});
  CHECK(e.shares_storage(c));
  CHECK_SAME(e, ref::expand(ref::to_ref(c), {2, 3, 4}));
  CHECK(c.expand({-1, 5}).shape() == Dims{3, 5});
  CHECK(c.broadcast_to({3, 2}).strides() == Dims{1, 0});
  CHECK(c.expand({3, 1}).strides()[0] == 1);
  CHECK(Tensor::scalar(4).expand({2, 2}).to_vector<float>() == std::vector<float>{4, 4, 4, 4});
  CHECK(Tensor::ones({1}).expand({0}).numel() == 0);
  mls::Rng rng(306, "expand");
  for (int trial = 0; trial < 100; ++trial) {
    gen::Pair x = gen::random_input(rng, DType::Float32, 2, 0, 3);
    Dims target = x.r.shape;
    for (I64& s : target) {
      if (s == 1) s = rng.randint(1, 4);
    }
    while (static_cast<I64>(target.size()) < 4 && rng.randint(0, 2)) target.insert(target.begin(), rng.randint(1, 3));
    INFO(x.log << " expand " << ref::dims_str(target));
    const Tensor y = x.t.expand(target);
    CHECK(y.shares_storage(x.t));
    CHECK_SAME(y, ref::expand(x.r, target));
  }
}

TEST_CASE("squeeze and unsqueeze add and remove size-1 dims", "[lab1][views]") {
  const Tensor a = arange_tensor({1, 3, 1, 2});
  CHECK(a.squeeze().shape() == Dims{3, 2});
  CHECK(a.squeeze(0).shape() == Dims{3, 1, 2});
  CHECK(a.squeeze(-2).shape() == Dims{1, 3, 2});
  CHECK(a.squeeze().shares_storage(a));
  CHECK_SAME(a.squeeze(), arange_ref({3, 2}));
  CHECK(Tensor::ones({1, 1}).squeeze().ndim() == 0);
  CHECK(Tensor::ones({2, 3}).squeeze().shape() == Dims{2, 3});
  const Tensor b = arange_tensor({2, 3});
  CHECK(b.unsqueeze(0).shape() == Dims{1, 2, 3});
  CHECK(b.unsqueeze(1).shape() == Dims{2, 1, 3});
  CHECK(b.unsqueeze(2).shape() == Dims{2, 3, 1});
  CHECK(b.unsqueeze(-1).shape() == Dims{2, 3, 1});
  CHECK(b.unsqueeze(-3).shape() == Dims{1, 2, 3});
  CHECK(b.unsqueeze(1).is_contiguous());
  CHECK(b.unsqueeze(0).unsqueeze(-1).squeeze().strides() == b.strides());
  CHECK(Tensor::scalar(2).unsqueeze(0).shape() == Dims{1});
  CHECK_SAME(b.unsqueeze(1), ref::reshape(arange_ref({2, 3}), {2, 1, 3}));
}

TEST_CASE("flatten merges a range of dims, viewing when possible", "[lab1][views]") {
  const Tensor a = arange_tensor({2, 3, 4, 5});
  CHECK(a.flatten().shape() == Dims{120});
  CHECK(a.flatten(1).shape() == Dims{2, 60});
  CHECK(a.flatten(1, 2).shape() == Dims{2, 12, 5});
  CHECK(a.flatten(-2, -1).shape() == Dims{2, 3, 20});
  CHECK(a.flatten(2, 2).shape() == Dims{2, 3, 4, 5});
  CHECK(a.flatten().shares_storage(a));
  CHECK(Tensor::scalar(3).flatten().shape() == Dims{1});
  const Tensor t = a.transpose(0, 3);  // [5, 3, 4, 2]
  const Tensor f = t.flatten();
  CHECK_FALSE(f.shares_storage(a));  // cannot be a view: copied
  CHECK_SAME(f, ref::reshape(ref::permute(arange_ref({2, 3, 4, 5}), {3, 1, 2, 0}), {120}));
  const Tensor g = t.flatten(1, 2);  // dims 1, 2 of t are still contiguous with each other
  CHECK(g.shares_storage(a));
  CHECK_SAME(g, ref::reshape(ref::permute(arange_ref({2, 3, 4, 5}), {3, 1, 2, 0}), {5, 12, 2}));
}

TEST_CASE("as_strided: windows, reversal and offset over the same storage", "[lab1][views]") {
  const Tensor a = Tensor::arange(10, DType::Int32);
  // Sliding windows of 3 with step 1: rows overlap.
  const Tensor w = a.as_strided({8, 3}, {1, 1}, 0);
  CHECK(w.shares_storage(a));
  MLS_ORACLE(Ref want(Dims{8, 3}); for (I64 i = 0; i < 8; ++i) {
    for (I64 j = 0; j < 3; ++j) want({i, j}) = static_cast<double>(i + j);
  })
  CHECK_SAME(w, want);
  // A negative stride walks backwards from the offset.
  const Tensor r = a.as_strided({10}, {-1}, 9);
  CHECK(r.to_vector<std::int32_t>() == std::vector<std::int32_t>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
  CHECK(a.as_strided({2, 2}, {3, 1}, 4).to_vector<std::int32_t>() == std::vector<std::int32_t>{4, 5, 7, 8});
  CHECK(a.as_strided({0, 50}, {100, 100}, 0).numel() == 0);  // nothing is read: no bound to check
  // as_strided on a view reinterprets the whole storage (offset is absolute).
  CHECK(a.slice(0, 5, 10).as_strided({2}, {1}, 0).to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 1});
  CHECK(a.as_strided({3}, {0}, 7).to_vector<std::int32_t>() == std::vector<std::int32_t>{7, 7, 7});
}

TEST_CASE("diagonal: offsets k, any two dims, batched", "[lab1][views]") {
  const Tensor m = arange_tensor({3, 4});
  CHECK(m.diagonal().to_vector<float>() == std::vector<float>{0, 5, 10});
  CHECK(m.diagonal(1).to_vector<float>() == std::vector<float>{1, 6, 11});
  CHECK(m.diagonal(3).to_vector<float>() == std::vector<float>{3});
  CHECK(m.diagonal(-1).to_vector<float>() == std::vector<float>{4, 9});
  CHECK(m.diagonal(5).numel() == 0);
  CHECK(m.diagonal(-4).numel() == 0);
  CHECK(m.diagonal(0, 1, 0).to_vector<float>() == std::vector<float>{0, 5, 10});
  CHECK(m.diagonal(1, 1, 0).to_vector<float>() == std::vector<float>{4, 9});  // k moves along dim2
  CHECK(m.diagonal().shares_storage(m));
  CHECK(m.diagonal().strides() == Dims{5});
  const Tensor b = arange_tensor({2, 3, 3});
  CHECK_SAME(b.diagonal(0, 1, 2), ref::diagonal(arange_ref({2, 3, 3}), 0, 1, 2));
  CHECK_SAME(b.diagonal(-1, -1, 0), ref::diagonal(arange_ref({2, 3, 3}), -1, 2, 0));
  // Writing the diagonal of a zero matrix makes an identity.
  Tensor z = Tensor::zeros({3, 3});
  Tensor d = z.diagonal();
  d.fill_(1);
  CHECK(mls::equal(z, Tensor::eye(3)));
}

TEST_CASE("views of views keep one storage and compact never aliases a non-contiguous source",
          "[lab1][views]") {
  const Tensor base = arange_tensor({4, 5, 6});
  const Tensor v = base.permute({2, 0, 1}).slice(1, 1, 4, 2).select(2, -1).unsqueeze(0).expand({3, 6, 2});
  CHECK(v.shares_storage(base));
  MLS_ORACLE(const Ref want = ref::expand(
      ref::reshape(ref::select(ref::slice(ref::permute(arange_ref({4, 5, 6}), {2, 0, 1}), 1, 1, 4, 2), 2, 4), {1, 6, 2}),
      {3, 6, 2});)
  CHECK_SAME(v, want);
  // A view outliving its source keeps the storage alive.
  Tensor keep;
  {
    const Tensor tmp = arange_tensor({100});
    keep = tmp.slice(0, 90, 100);
  }
  CHECK(keep.to_vector<float>().front() == 90.0f);
  CHECK(keep.storage().use_count() == 1);
}
