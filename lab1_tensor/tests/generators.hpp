#pragma once
// Random strided views for property tests. Unlike reference.hpp, this DOES call lab 1's view
// ops: it applies the same random op to a Tensor (lab 1) and to a Ref (the naive reference,
// written independently), so every test that draws an input here also checks the views.
#include <string>

#include "reference.hpp"

namespace gen {

using ref::Dims;
using ref::I64;
using ref::Ref;

/// A tensor and its expected contents, plus a log of the ops that made it (for INFO).
struct Pair {
  mls::Tensor t;
  Ref r;
  std::string log;
};

inline I64 pick(mls::Rng& rng, I64 lo, I64 hi_inclusive) { return rng.randint(lo, hi_inclusive + 1); }

/// Applies one random view op to both sides. Ops that do not apply to the current rank are
/// skipped. Returns false when nothing was applied.
inline bool random_view_step(Pair& p, mls::Rng& rng) {
  const I64 nd = p.r.ndim();
  switch (pick(rng, 0, 8)) {
    case 0: {  // permute
      if (nd < 1) return false;
      Dims perm(static_cast<std::size_t>(nd));
      for (I64 i = 0; i < nd; ++i) perm[static_cast<std::size_t>(i)] = i;
      for (I64 i = nd; i > 1; --i) std::swap(perm[static_cast<std::size_t>(i - 1)], perm[static_cast<std::size_t>(pick(rng, 0, i - 1))]);
      p.t = p.t.permute(perm);
      p.r = ref::permute(p.r, perm);
      p.log += " permute" + ref::dims_str(perm);
      return true;
    }
    case 1: {  // transpose (negative dims allowed)
      if (nd < 1) return false;
      const I64 a = pick(rng, -nd, nd - 1), b = pick(rng, -nd, nd - 1);
      Dims perm(static_cast<std::size_t>(nd));
      for (I64 i = 0; i < nd; ++i) perm[static_cast<std::size_t>(i)] = i;
      std::swap(perm[static_cast<std::size_t>(a < 0 ? a + nd : a)], perm[static_cast<std::size_t>(b < 0 ? b + nd : b)]);
      p.t = p.t.transpose(a, b);
      p.r = ref::permute(p.r, perm);
      p.log += " transpose(" + std::to_string(a) + "," + std::to_string(b) + ")";
      return true;
    }
    case 2:
    case 3: {  // slice with a step, Python-style bounds
      if (nd < 1) return false;
      const I64 d = pick(rng, 0, nd - 1), n = p.r.shape[static_cast<std::size_t>(d)];
      const I64 start = pick(rng, -n - 1, n + 1), stop = pick(rng, -n - 1, n + 1), step = pick(rng, 1, 3);
      const I64 dim_arg = rng.randint(0, 2) ? d : d - nd;
      p.t = p.t.slice(dim_arg, start, stop, step);
      p.r = ref::slice(p.r, d, start, stop, step);
      p.log += " slice(" + std::to_string(dim_arg) + "," + std::to_string(start) + "," + std::to_string(stop) + "," +
               std::to_string(step) + ")";
      return true;
    }
    case 4: {  // select
      if (nd < 2) return false;  // keep at least one dim
      const I64 d = pick(rng, 0, nd - 1), n = p.r.shape[static_cast<std::size_t>(d)];
      if (n == 0) return false;
      const I64 i = pick(rng, -n, n - 1);
      p.t = p.t.select(d, i);
      p.r = ref::select(p.r, d, i);
      p.log += " select(" + std::to_string(d) + "," + std::to_string(i) + ")";
      return true;
    }
    case 5: {  // expand size-1 dims (and maybe a new leading one)
      Dims target = p.r.shape;
      bool any = false;
      for (I64& s : target) {
        if (s == 1 && rng.randint(0, 2)) {
          s = pick(rng, 2, 4);
          any = true;
        }
      }
      if (nd < 4 && rng.randint(0, 3) == 0) {
        target.insert(target.begin(), pick(rng, 1, 3));
        any = true;
      }
      if (!any) return false;
      p.t = p.t.expand(target);
      p.r = ref::expand(p.r, target);
      p.log += " expand" + ref::dims_str(target);
      return true;
    }
    case 6: {  // unsqueeze
      if (nd >= 5) return false;
      const I64 d = pick(rng, -nd - 1, nd);
      const I64 at = d < 0 ? d + nd + 1 : d;
      Dims shape = p.r.shape;
      shape.insert(shape.begin() + at, 1);
      p.t = p.t.unsqueeze(d);
      p.r = ref::reshape(p.r, shape);
      p.log += " unsqueeze(" + std::to_string(d) + ")";
      return true;
    }
    case 7: {  // squeeze one size-1 dim
      for (I64 d = 0; d < nd; ++d) {
        if (p.r.shape[static_cast<std::size_t>(d)] == 1) {
          Dims shape = p.r.shape;
          shape.erase(shape.begin() + d);
          p.t = p.t.squeeze(d);
          p.r = ref::reshape(p.r, shape);
          p.log += " squeeze(" + std::to_string(d) + ")";
          return true;
        }
      }
      return false;
    }
    default: {  // diagonal
      if (nd < 2) return false;
      const I64 a = pick(rng, 0, nd - 1);
      I64 b = pick(rng, 0, nd - 2);
      if (b >= a) ++b;
      const I64 k = pick(rng, -2, 2);
      p.t = p.t.diagonal(k, a, b);
      p.r = ref::diagonal(p.r, k, a, b);
      p.log += " diagonal(" + std::to_string(k) + "," + std::to_string(a) + "," + std::to_string(b) + ")";
      return true;
    }
  }
}

/// `r` in a random layout: dense, strided, or strided with negative strides (zero-size tensors
/// stay dense, see random_input).
inline mls::Tensor any_layout(const Ref& r, mls::DType t, mls::Rng& rng) {
  const I64 layout = rng.randint(0, 3);
  if (layout == 0 || r.numel() == 0) return ref::make(r, t);
  return ref::make_strided(r, t, rng, layout == 2);
}

/// A random input: a random shape, values exact in `t`, a random storage layout (built without
/// lab 1), then up to `steps` random view ops. `min_ndim`/`max_ndim` bound the base shape.
inline Pair random_input(mls::Rng& rng, mls::DType t, int steps = 3, I64 min_ndim = 0, I64 max_ndim = 4,
                         double lo = -2.0, double hi = 2.0) {
  Pair p;
  const Dims shape = ref::random_shape(rng, min_ndim, max_ndim);
  p.r = ref::random_ref(shape, t, rng, lo, hi);
  const I64 layout = rng.randint(0, 3);
  if (layout == 0) {
    p.t = ref::make(p.r, t);
    p.log = "dense" + ref::dims_str(shape);
  } else {
    p.t = ref::make_strided(p.r, t, rng, layout == 2);
    p.log = "strided" + ref::dims_str(shape) + " strides" + ref::dims_str(p.t.strides());
  }
  for (int i = 0; i < steps; ++i) {
    if (rng.randint(0, 2)) random_view_step(p, rng);
  }
  return p;
}

/// A random factorisation of n into a shape of up to `max_ndim` dims (size-1 dims sprinkled in).
inline Dims random_factorisation(I64 n, mls::Rng& rng, I64 max_ndim = 5) {
  Dims primes;
  I64 m = n;
  for (I64 f = 2; f * f <= m; ++f) {
    while (m % f == 0) {
      primes.push_back(f);
      m /= f;
    }
  }
  if (m > 1) primes.push_back(m);
  const I64 nd = std::max<I64>(1, pick(rng, 1, max_ndim));
  Dims shape(static_cast<std::size_t>(nd), 1);
  for (I64 q : primes) shape[static_cast<std::size_t>(rng.randint(0, nd))] *= q;
  return shape;
}

}  // namespace gen
