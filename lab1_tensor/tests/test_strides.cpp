// index.hpp: stride computation, contiguity, index <-> offset, broadcasting, view strides.
// Each pure function is checked against a naive definition written from scratch.
#include "generators.hpp"
#include "mls/tensor/index.hpp"

using ref::Dims;
using ref::I64;

namespace {

/// Naive row-major strides: product of the sizes after each dim (all sizes > 0).
Dims naive_c_strides(const Dims& shape) {
  Dims s(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    I64 p = 1;
    for (std::size_t e = d + 1; e < shape.size(); ++e) p *= shape[e];
    s[d] = p;
  }
  return s;
}

Dims naive_f_strides(const Dims& shape) {
  Dims s(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    I64 p = 1;
    for (std::size_t e = 0; e < d; ++e) p *= shape[e];
    s[d] = p;
  }
  return s;
}

/// Storage position of every element in row-major order, by brute force.
std::vector<I64> positions(const Dims& shape, const Dims& strides, I64 offset = 0) {
  std::vector<I64> out;
  for (I64 i = 0; i < ref::count(shape); ++i) {
    const Dims idx = ref::unravel(i, shape);
    I64 p = offset;
    for (std::size_t d = 0; d < shape.size(); ++d) p += idx[d] * strides[d];
    out.push_back(p);
  }
  return out;
}

/// Dense and row-major, by definition: element i sits at position i (from the first element).
bool naive_is_contiguous(const Dims& shape, const Dims& strides) {
  const std::vector<I64> pos = positions(shape, strides);
  for (std::size_t i = 0; i < pos.size(); ++i) {
    if (pos[i] != static_cast<I64>(i)) return false;
  }
  return true;
}

/// Whether some strides make `new_shape` read the same positions as (shape, strides), by
/// brute force: each new dim's stride is forced by stepping it once from the origin.
bool naive_viewable(const Dims& shape, const Dims& strides, const Dims& new_shape) {
  const std::vector<I64> want = positions(shape, strides);
  if (want.empty()) return true;
  Dims cand(new_shape.size(), 0);
  for (std::size_t d = 0; d < new_shape.size(); ++d) {
    if (new_shape[d] == 1) continue;
    Dims idx(new_shape.size(), 0);
    idx[d] = 1;
    cand[d] = want[static_cast<std::size_t>(ref::ravel(idx, new_shape))] - want[0];
  }
  return positions(new_shape, cand, want[0]) == want;
}

/// Random strides for `shape`: contiguous ones perturbed in various ways.
Dims random_strides(const Dims& shape, mls::Rng& rng) {
  Dims s = naive_c_strides(shape);
  switch (rng.randint(0, 5)) {
    case 0: break;  // contiguous
    case 1:         // padded rows
      for (std::size_t d = 0; d + 1 < s.size(); ++d) s[d] *= 2;
      break;
    case 2:  // reversed dim order
      s = naive_f_strides(shape);
      break;
    case 3:  // size-1 dims get junk strides
      for (std::size_t d = 0; d < s.size(); ++d) {
        if (shape[d] == 1) s[d] = rng.randint(-9, 10);
      }
      break;
    default:  // fully random (possibly zero or negative)
      for (I64& x : s) x = rng.randint(-6, 7);
      break;
  }
  return s;
}

}  // namespace

TEST_CASE("slides 002: row-major and Fortran-order strides of [1, 2, 3, 4]", "[lab1][strides]") {
  const Dims shape{1, 2, 3, 4};
  MLS_OBSERVE(mls::contiguous_strides(shape));
  MLS_OBSERVE(mls::fortran_strides(shape));
  CHECK(mls::contiguous_strides(shape) == Dims{24, 12, 4, 1});
  CHECK(mls::fortran_strides(shape) == Dims{1, 1, 2, 6});
  CHECK(mls::is_contiguous(shape, Dims{24, 12, 4, 1}));
  CHECK_FALSE(mls::is_contiguous(shape, Dims{1, 1, 2, 6}));
  // The tensor made by empty() carries exactly those strides.
  const mls::Tensor t = mls::Tensor::empty(shape);
  CHECK(t.strides() == Dims{24, 12, 4, 1});
  CHECK(t.is_contiguous());
  // A Fortran-ordered view of the same storage: element [0, j, k, l] lives at j + 2k + 6l.
  const mls::Tensor f = t.as_strided(shape, mls::fortran_strides(shape), 0);
  CHECK_FALSE(f.is_contiguous());
  CHECK(f.shares_storage(t));
}

TEST_CASE("contiguous_strides and fortran_strides match the product formula", "[lab1][strides]") {
  mls::Rng rng(101, "strides");
  for (int trial = 0; trial < 200; ++trial) {
    const Dims shape = ref::random_shape(rng, 0, 5, 6, 0);
    INFO("shape " << ref::dims_str(shape));
    MLS_OBSERVE(mls::contiguous_strides(shape));
    MLS_OBSERVE(mls::fortran_strides(shape));
    MLS_CHECK_EQ(mls::contiguous_strides(shape), naive_c_strides(shape));
    MLS_CHECK_EQ(mls::fortran_strides(shape), naive_f_strides(shape));
  }
  CHECK(mls::contiguous_strides(Dims{}).empty());
  CHECK(mls::fortran_strides(Dims{}).empty());
  // Shapes with a zero-size dim still get strides that a tensor can use (one per dim).
  CHECK(mls::contiguous_strides(Dims{2, 0, 3}).size() == 3);
  CHECK(mls::contiguous_strides(Dims{2, 0, 3}).back() == 1);
}

TEST_CASE("is_contiguous agrees with the brute-force definition", "[lab1][strides]") {
  mls::Rng rng(102, "contig");
  int yes = 0, no = 0;
  std::vector<int> answers;  // is_contiguous over the trials: a random pattern of 0/1
  for (int trial = 0; trial < 300; ++trial) {
    const Dims shape = ref::random_shape(rng, 0, 4, 4, 0);
    const Dims strides = random_strides(shape, rng);
    INFO("shape " << ref::dims_str(shape) << " strides " << ref::dims_str(strides));
    const bool got = mls::is_contiguous(shape, strides);
    answers.push_back(got);
    MLS_ORACLE(const bool want = naive_is_contiguous(shape, strides); (want ? yes : no)++;)
    MLS_ORACLE_CHECK(CHECK(got == want));
  }
  MLS_OBSERVE(answers);
  MLS_ORACLE_CHECK(CHECK(yes > 20); CHECK(no > 20));  // the generator covers both answers
  // Empty and 0-d tensors are trivially dense.
  CHECK(mls::is_contiguous(Dims{3, 0, 2}, Dims{5, 7, 1}));
  CHECK(mls::is_contiguous(Dims{}, Dims{}));
}

TEST_CASE("index_to_offset adds index times stride, with negative indices", "[lab1][strides]") {
  mls::Rng rng(103, "offset");
  for (int trial = 0; trial < 200; ++trial) {
    const Dims shape = ref::random_shape(rng, 0, 4, 5, 0);
    const Dims strides = random_strides(shape, rng);
    const I64 offset = rng.randint(0, 50);
    Dims idx(shape.size()), pos_idx(shape.size());
    for (std::size_t d = 0; d < shape.size(); ++d) {
      idx[d] = rng.randint(-shape[d], shape[d]);
      pos_idx[d] = idx[d] < 0 ? idx[d] + shape[d] : idx[d];
    }
    INFO("shape " << ref::dims_str(shape) << " strides " << ref::dims_str(strides) << " index "
                  << ref::dims_str(idx));
    const I64 got = mls::index_to_offset(idx, shape, strides, offset);
    mls::testing::observe("index_to_offset", got);
    MLS_ORACLE(I64 want = offset; for (std::size_t d = 0; d < shape.size(); ++d) want += pos_idx[d] * strides[d];)
    MLS_ORACLE_CHECK(CHECK(got == want));
  }
}

TEST_CASE("unravel_index inverts row-major counting", "[lab1][strides]") {
  mls::Rng rng(104, "unravel");
  for (int trial = 0; trial < 100; ++trial) {
    const Dims shape = ref::random_shape(rng, 0, 4, 5, 0);
    Dims idx(shape.size());
    MLS_ORACLE(bool ok = true;)
    for (I64 i = 0; i < ref::count(shape); ++i) {
      mls::unravel_index(i, shape, idx);
      MLS_ORACLE(ok = ok && idx == ref::unravel(i, shape) && ref::ravel(idx, shape) == i;)
      if (i == ref::count(shape) - 1) MLS_OBSERVE(idx);  // the last index of each shape
    }
    INFO("shape " << ref::dims_str(shape));
    MLS_ORACLE_CHECK(CHECK(ok));
  }
  Dims idx(4);
  mls::unravel_index(23, Dims{1, 2, 3, 4}, idx);
  MLS_OBSERVE(idx);
  CHECK(idx == Dims{0, 1, 2, 3});
  mls::unravel_index(13, Dims{1, 2, 3, 4}, idx);
  MLS_OBSERVE(idx);
  CHECK(idx == Dims{0, 1, 0, 1});
}

TEST_CASE("broadcast_shapes follows NumPy's rule and names the op on failure", "[lab1][strides]") {
  CHECK(mls::broadcast_shapes(Dims{2, 3}, Dims{3}) == Dims{2, 3});
  CHECK(mls::broadcast_shapes(Dims{4, 1}, Dims{1, 5}) == Dims{4, 5});
  CHECK(mls::broadcast_shapes(Dims{}, Dims{2, 1}) == Dims{2, 1});
  CHECK(mls::broadcast_shapes(Dims{0}, Dims{1}) == Dims{0});
  CHECK(mls::broadcast_shapes(Dims{3, 1, 0}, Dims{7, 1}) == Dims{3, 7, 0});
  MLS_OBSERVE(mls::broadcast_shapes(Dims{3, 1, 0}, Dims{7, 1}));
  mls::Rng rng(105, "bshape");
  int compatible = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const Dims a = ref::random_shape(rng, 0, 4, 3, 20);
    const Dims b = rng.randint(0, 2) ? ref::broadcastable_to(a, rng) : ref::random_shape(rng, 0, 4, 3, 20);
    INFO(ref::dims_str(a) << " with " << ref::dims_str(b));
    // The shape, or that an mls::Error said no, both ways round (the rule is symmetric).
    auto outcome = [](const Dims& x, const Dims& y) {
      try {
        return ref::dims_str(mls::broadcast_shapes(x, y, "t"));
      } catch (const mls::Error&) {
        return std::string("mls::Error");
      }
    };
    const std::string got = outcome(a, b), swapped = outcome(b, a);
    mls::testing::observe("broadcast_shapes(" + ref::dims_str(a) + ", " + ref::dims_str(b) + ")", got);
    mls::testing::observe("broadcast_shapes(" + ref::dims_str(b) + ", " + ref::dims_str(a) + ")", swapped);
    MLS_ORACLE(const auto want = ref::broadcast(a, b); compatible += want.has_value();)
    MLS_ORACLE_CHECK(CHECK(got == (want ? ref::dims_str(*want) : "mls::Error")); CHECK(swapped == got));
  }
  MLS_ORACLE_CHECK(CHECK(compatible > 100));
}

TEST_CASE("broadcast_strides reads a strided tensor as its broadcast", "[lab1][strides]") {
  mls::Rng rng(106, "bstrides");
  for (int trial = 0; trial < 150; ++trial) {
    const Dims target = ref::random_shape(rng, 0, 4, 4, 0);
    const Dims shape = ref::broadcastable_to(target, rng);
    const ref::Ref r = ref::random_ref(shape, mls::DType::Float32, rng);
    const mls::Tensor t = ref::make_strided(r, mls::DType::Float32, rng);
    const Dims bs = mls::broadcast_strides(t.shape(), t.strides(), target);
    INFO("shape " << ref::dims_str(shape) << " strides " << ref::dims_str(t.strides()) << " -> "
                  << ref::dims_str(target) << " got strides " << ref::dims_str(bs));
    REQUIRE(bs.size() == target.size());
    // Stretched and new leading dims have stride 0; the others keep theirs.
    const std::size_t lead = target.size() - shape.size();
    for (std::size_t d = 0; d < target.size(); ++d) {
      if (d < lead || (shape[d - lead] == 1 && target[d] != 1)) CHECK(bs[d] == 0);
      else CHECK(bs[d] == t.strides()[d - lead]);
    }
    const mls::Tensor view(t.storage(), t.offset(), target, bs, t.dtype());
    CHECK_SAME(view, ref::expand(r, target));
  }
}

TEST_CASE("view_strides succeeds exactly when a view is possible, and reads the right elements",
          "[lab1][strides]") {
  mls::Rng rng(107, "viewstrides");
  std::vector<int> answers;  // view_strides over the trials: a random pattern of 0/1
  int possible = 0, impossible = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const Dims shape = ref::random_shape(rng, 1, 4, 4, 0);
    Dims strides;
    if (rng.randint(0, 3) == 0) {
      strides = random_strides(shape, rng);
    } else {  // a layout that real views produce: permuted, padded, flipped or size-1 junk
      const ref::Ref r(shape);
      strides = ref::make_strided(r, mls::DType::Float32, rng, rng.randint(0, 2) == 0).strides();
      if (rng.randint(0, 3) == 0) {  // an expanded dim
        const auto d = static_cast<std::size_t>(rng.randint(0, static_cast<I64>(shape.size())));
        strides[d] = 0;
      }
    }
    const Dims new_shape = gen::random_factorisation(ref::count(shape), rng);
    Dims out;
    const bool got = mls::view_strides(shape, strides, new_shape, out);
    MLS_ORACLE(const bool want = naive_viewable(shape, strides, new_shape);)
    INFO("shape " << ref::dims_str(shape) << " strides " << ref::dims_str(strides) << " as "
                  << ref::dims_str(new_shape) << " -> " << got << " " << ref::dims_str(out));
    answers.push_back(got);
    MLS_ORACLE_CHECK(CHECK(got == want));
    if (got) {
      ++possible;
      REQUIRE(out.size() == new_shape.size());
      MLS_OBSERVE(positions(new_shape, out));  // the elements the view reads (strides of size-1 dims are free)
      MLS_ORACLE_CHECK(CHECK(positions(new_shape, out) == positions(shape, strides)));
    } else {
      ++impossible;
    }
  }
  MLS_OBSERVE(answers);
  MLS_ORACLE_CHECK(CHECK(possible > 50); CHECK(impossible > 50));  // the generator covers both answers
}

TEST_CASE("view_strides: contiguous always views, a transpose cannot flatten", "[lab1][strides]") {
  Dims out;
  CHECK(mls::view_strides(Dims{3, 2}, Dims{2, 1}, Dims{6}, out));
  CHECK(out == Dims{1});
  CHECK_FALSE(mls::view_strides(Dims{3, 2}, Dims{1, 3}, Dims{6}, out));  // transposed [2, 3]
  CHECK(mls::view_strides(Dims{3, 2}, Dims{1, 3}, Dims{3, 1, 2}, out));  // adding a 1 is fine
  CHECK(positions(Dims{3, 1, 2}, out) == positions(Dims{3, 2}, Dims{1, 3}));
  CHECK(mls::view_strides(Dims{2, 0, 3}, Dims{0, 3, 1}, Dims{0, 6}, out));  // empty: anything
  CHECK(mls::view_strides(Dims{}, Dims{}, Dims{1, 1}, out));                 // 0-d to [1, 1]
  mls::Rng rng(108, "contigview");
  for (int trial = 0; trial < 100; ++trial) {
    const Dims shape = ref::random_shape(rng, 0, 4, 5, 0);
    const Dims ns = gen::random_factorisation(ref::count(shape), rng);
    INFO(ref::dims_str(shape) << " -> " << ref::dims_str(ns));
    REQUIRE(mls::view_strides(shape, naive_c_strides(shape), ns, out));
    MLS_OBSERVE(positions(ns, out));
    MLS_CHECK_EQ(out, naive_c_strides(ns));
  }
}

TEST_CASE("is_contiguous: every zero-size tensor is trivially dense, whatever its strides",
          "[lab1][strides]") {
  // A tensor with no elements is dense and row-major by definition (no element is out of
  // place), so the answer must not depend on where the zero-size dim sits.
  CHECK(mls::is_contiguous(Dims{0, 3}, Dims{1, 5}));
  CHECK(mls::is_contiguous(Dims{2, 0, 5, 5}, Dims{5, 100, 1, 10}));
  CHECK(mls::is_contiguous(Dims{3, 0}, Dims{1, 7}));
  mls::Rng rng(109, "contig-empty");
  // The answers, zero-size and not: the same strides with the empty dim given 2 elements are
  // dense only sometimes, so the answers the code gave are observed (an "always true" is wrong).
  std::vector<std::int64_t> answers;
  for (int trial = 0; trial < 100; ++trial) {
    Dims shape = ref::random_shape(rng, 1, 4, 4, 0);
    const auto at = static_cast<std::size_t>(rng.randint(0, static_cast<I64>(shape.size())));
    shape[at] = 0;
    const Dims strides = random_strides(shape, rng);
    INFO("shape " << ref::dims_str(shape) << " strides " << ref::dims_str(strides));
    const bool empty_dense = mls::is_contiguous(shape, strides);
    CHECK(empty_dense);
    Dims full = shape;
    full[at] = 2;
    answers.push_back(empty_dense);
    answers.push_back(mls::is_contiguous(full, strides));
  }
  mls::testing::observe("is_contiguous of each shape, then of it with the empty dim made 2", answers);
}
