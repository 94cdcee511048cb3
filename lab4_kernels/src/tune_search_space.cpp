// A template's knob space as the search sees it (SearchSpace: points are one value index per knob),
// and the SGEMM space in that form (sgemm_search_space). The strategies themselves are in
// tune_search.cpp; the operators' spaces in tune_ops_space.cpp.
#include <algorithm>
#include <tuple>
#include <utility>

#include "mls/common/error.hpp"
#include "mls/kernels/tune.hpp"

namespace mls::kernels::tune {

// ---- the generic space -------------------------------------------------------------------------------

std::size_t SearchSpace::cross_size() const {
  std::size_t n = 1;
  for (const auto& d : dims) n *= static_cast<std::size_t>(std::max(d.size, 0));
  return n;
}

Point SearchSpace::at(std::size_t index) const {
  MLS_CHECK(index < cross_size(), "SearchSpace::at: index ", index, " is past the ", cross_size(), " points");
  Point p(dims.size());
  for (std::size_t d = dims.size(); d-- > 0;) {
    const auto radix = static_cast<std::size_t>(dims[d].size);
    p[d] = static_cast<int>(index % radix);
    index /= radix;
  }
  return p;
}

bool SearchSpace::is_valid(const Point& p) const {
  if (p.size() != dims.size()) return false;
  for (std::size_t d = 0; d < dims.size(); ++d)
    if (p[d] < 0 || p[d] >= dims[d].size) return false;
  return !valid || valid(p);
}

std::vector<Point> SearchSpace::enumerate() const {
  std::vector<Point> out;
  const std::size_t n = cross_size();
  for (std::size_t i = 0; i < n; ++i) {
    Point p = at(i);
    if (is_valid(p)) out.push_back(std::move(p));
  }
  return out;
}

Point SearchSpace::sample(Rng& rng) const {
  if (sample_fn) return sample_fn(rng);
  for (int attempt = 0; attempt < 10000; ++attempt) {
    Point p(dims.size());
    for (std::size_t d = 0; d < dims.size(); ++d) p[d] = static_cast<int>(rng.randint(0, dims[d].size));
    if (is_valid(p)) return p;
  }
  fail("SearchSpace::sample: no valid point found in 10000 draws");
}

std::vector<Point> SearchSpace::neighbours(const Point& p) const {
  if (neighbours_fn) return neighbours_fn(p);
  std::vector<Point> out;
  auto add = [&](Point n) {
    if (n != p && is_valid(n) && std::find(out.begin(), out.end(), n) == out.end()) out.push_back(std::move(n));
  };
  for (std::size_t d = 0; d < dims.size() && d < p.size(); ++d) {
    for (int v = 0; v < dims[d].size; ++v) {
      if (dims[d].ordered && v != p[d] - 1 && v != p[d] + 1) continue;
      Point n = p;
      n[d] = v;
      add(std::move(n));
    }
  }
  return out;
}

std::vector<double> SearchSpace::features_of(const Point& p) const {
  if (features) return features(p);
  std::vector<double> f;
  for (std::size_t d = 0; d < dims.size(); ++d)
    for (int v = 0; v < dims[d].size; ++v) f.push_back(d < p.size() && p[d] == v ? 1.0 : 0.0);
  return f;
}

std::string SearchSpace::key_of(const Point& p) const {
  if (key) return key(p);
  std::string s;
  for (std::size_t d = 0; d < p.size(); ++d) s += (d ? "," : "") + std::to_string(p[d]);
  return s;
}

void SearchSpace::check() const {
  MLS_CHECK(!dims.empty(), "SearchSpace: no knobs");
  for (const auto& d : dims) MLS_CHECK(d.size >= 1, "SearchSpace: knob '", d.name, "' has no values");
  MLS_CHECK(is_valid(default_point), "SearchSpace: the default point (", key_of(default_point),
            ") is not a valid point of the space");
}

// ---- the SGEMM space as a SearchSpace ---------------------------------------------------------------

namespace {
template <class T>
int index_in(const std::vector<T>& list, const T& x, const char* name) {
  const auto it = std::find(list.begin(), list.end(), x);
  MLS_CHECK(it != list.end(), "KnobSpace: knob '", name, "' has no value ", x, " in this space");
  return static_cast<int>(it - list.begin());
}
template <class T>
T value_at(const std::vector<T>& list, int i, const char* name) {
  MLS_CHECK(i >= 0 && static_cast<std::size_t>(i) < list.size(), "KnobSpace: index ", i, " of knob '", name,
            "' is not in 0..", list.size() - 1);
  return list[static_cast<std::size_t>(i)];
}
}  // namespace

SgemmKnobs sgemm_knobs_at(const KnobSpace& s, const Point& p) {
  MLS_CHECK(p.size() == 12, "KnobSpace: a point of the SGEMM space has 12 indices, got ", p.size());
  SgemmKnobs k;
  k.order = value_at(s.order, p[0], "order");
  k.parallel = value_at(s.parallel, p[1], "parallel");
  k.pack_a = value_at(s.pack_a, p[2], "pack_a");
  k.pack_b = value_at(s.pack_b, p[3], "pack_b");
  k.mr = value_at(s.mr, p[4], "mr");
  k.nr = value_at(s.nr, p[5], "nr");
  k.mc = value_at(s.mc, p[6], "mc");
  k.kc = value_at(s.kc, p[7], "kc");
  k.nc = value_at(s.nc, p[8], "nc");
  k.unroll = value_at(s.unroll, p[9], "unroll");
  k.a_panels = value_at(s.a_panels, p[10], "a_panels");
  k.c_prefetch = value_at(s.c_prefetch, p[11], "c_prefetch");
  k.balance = s.threads;
  return k;
}

Point sgemm_point_of(const KnobSpace& s, const SgemmKnobs& k) {
  return {index_in(s.order, k.order, "order"), index_in(s.parallel, k.parallel, "parallel"),
          index_in(s.pack_a, k.pack_a, "pack_a"), index_in(s.pack_b, k.pack_b, "pack_b"),
          index_in(s.mr, k.mr, "mr"),          index_in(s.nr, k.nr, "nr"),
          index_in(s.mc, k.mc, "mc"),          index_in(s.kc, k.kc, "kc"),
          index_in(s.nc, k.nc, "nc"),          index_in(s.unroll, k.unroll, "unroll"),
          index_in(s.a_panels, k.a_panels, "a_panels"), index_in(s.c_prefetch, k.c_prefetch, "c_prefetch")};
}

SearchSpace sgemm_search_space(const KnobSpace& space, const SgemmShape& shape, int threads) {
  if (threads <= 0)
    threads = std::find(space.parallel.begin(), space.parallel.end(), "none") != space.parallel.end() ? 1 : 2;
  space.check();
  auto size = [](const auto& list) { return static_cast<int>(list.size()); };
  SearchSpace s;
  s.dims = {{"order", size(space.order), false},  {"parallel", size(space.parallel), false},
            {"pack_a", size(space.pack_a), false}, {"pack_b", size(space.pack_b), false},
            {"mr", size(space.mr), true},          {"nr", size(space.nr), true},
            {"mc", size(space.mc), true},          {"kc", size(space.kc), true},
            {"nc", size(space.nc), true},          {"unroll", size(space.unroll), true},
            {"a_panels", size(space.a_panels), false}, {"c_prefetch", size(space.c_prefetch), false}};
  // KnobSpace's own validity, sampling and neighbours: the same points in the same order as before
  // the search served other templates (a seed proposes what it proposed then).
  s.valid = [space](const Point& p) { return space.valid(sgemm_knobs_at(space, p)); };
  s.sample_fn = [space](Rng& rng) { return sgemm_point_of(space, space.sample(rng)); };
  s.neighbours_fn = [space](const Point& p) {
    std::vector<Point> out;
    for (const auto& k : space.neighbours(sgemm_knobs_at(space, p))) out.push_back(sgemm_point_of(space, k));
    return out;
  };
  s.features = [space, shape](const Point& p) { return sgemm_features(sgemm_knobs_at(space, p), shape, space.lanes); };
  s.key = [space, shape](const Point& p) { return plan_key(sgemm_knobs_at(space, p), shape, space.lanes); };
  s.prior = [space, shape, threads](const Point& p) {
    return sgemm_prior(sgemm_knobs_at(space, p), shape, space.lanes, threads);
  };
  s.default_point = sgemm_point_of(space, space.default_knobs());
  if (const auto packed = space.packed_knobs(shape)) {
    s.seeds.push_back(sgemm_point_of(space, *packed));
    SgemmKnobs lean = *packed;
    std::tie(lean.mr, lean.nr) = lean_tile(space);
    if (!(lean == *packed) && space.valid(lean)) s.seeds.push_back(sgemm_point_of(space, lean));
  }
  return s;
}

std::pair<int, int> lean_tile(const KnobSpace& space) {
  space.check();
  std::pair<int, int> best{0, 0};
  int best_acc = 0;
  double best_loads = 0;
  for (int mr : space.mr)
    for (int nr : space.nr) {
      const int nv = nr / space.lanes;
      if (nr % space.lanes != 0 || mr * nv + nv + 1 > space.vector_registers) continue;
      const int acc = mr * nv;
      const double loads = 1.0 / mr + 1.0 / nv;
      const bool better = best_acc == 0 || loads < best_loads - 1e-12 ||
                          (loads < best_loads + 1e-12 && (acc > best_acc || (acc == best_acc && mr > best.first)));
      if (better) best = {mr, nr}, best_acc = acc, best_loads = loads;
    }
  return best;
}

}  // namespace mls::kernels::tune
