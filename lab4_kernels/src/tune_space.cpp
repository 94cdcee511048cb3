// The SGEMM template's knobs and knob space: text and JSON forms, checks, enumeration, sampling,
// neighbours; problems (shapes with their transposes, beta and leading dimensions) and the plan of
// knobs on one: its pieces, each a kernel the micro-kernel tiles exactly.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "mls/common/error.hpp"
#include "mls/kernels/sgemm.hpp"
#include "mls/kernels/tune.hpp"

namespace mls::kernels::tune {

namespace {

const std::vector<std::string>& parallel_names() {
  static const std::vector<std::string> names = {"none", "m", "n", "mr", "nr"};
  return names;
}
const std::vector<std::string>& orders() {
  static const std::vector<std::string> names = {"nkm", "nmk", "knm", "kmn", "mnk", "mkn"};
  return names;
}

long ceil_div(long a, long b) { return (a + b - 1) / b; }

template <class T>
std::size_t index_of(const std::vector<T>& v, const T& x) {
  return static_cast<std::size_t>(std::find(v.begin(), v.end(), x) - v.begin());
}

/// The value of `v` nearest to `want` (by |log| ratio for numbers).
int nearest(const std::vector<int>& v, int want) {
  int best = v.front();
  for (int x : v)
    if (std::fabs(std::log(static_cast<double>(x) / want)) < std::fabs(std::log(static_cast<double>(best) / want)))
      best = x;
  return best;
}

int cpu_lanes(int lanes) { return lanes != 0 ? lanes : te::resolved_vector_lanes({}); }

/// The instruction set of lab4_packed whose micro-kernel has vectors of `lanes` floats.
const char* packed_isa_of(int lanes) { return lanes >= 16 ? "avx512" : lanes == 8 ? "avx2" : "scalar"; }

}  // namespace

// ---- knobs --------------------------------------------------------------------------------------

std::string to_string(const SgemmKnobs& k) {
  return "mc=" + std::to_string(k.mc) + " kc=" + std::to_string(k.kc) + " nc=" + std::to_string(k.nc) +
         " mr=" + std::to_string(k.mr) + " nr=" + std::to_string(k.nr) + " order=" + k.order +
         " parallel=" + k.parallel + " pack_a=" + (k.pack_a ? "1" : "0") + " pack_b=" + (k.pack_b ? "1" : "0") +
         " unroll=" + std::to_string(k.unroll) + " a_panels=" + (k.a_panels ? "1" : "0") + " balance=" + std::to_string(k.balance) +
         " c_prefetch=" + (k.c_prefetch ? "1" : "0");
}

nlohmann::json to_json(const SgemmKnobs& k) {
  return {{"template", kSgemmTemplate}, {"mc", k.mc}, {"kc", k.kc}, {"nc", k.nc}, {"mr", k.mr},
          {"nr", k.nr}, {"order", k.order}, {"parallel", k.parallel}, {"pack_a", k.pack_a},
          {"pack_b", k.pack_b}, {"unroll", k.unroll}, {"a_panels", k.a_panels}, {"balance", k.balance},
          {"c_prefetch", k.c_prefetch}};
}

SgemmKnobs knobs_from_json(const nlohmann::json& j) {
  MLS_CHECK(j.is_object(), "sgemm knobs: expected a JSON object, got ", j.dump());
  auto field = [&](const char* name) -> const nlohmann::json& {
    MLS_CHECK(j.contains(name), "sgemm knobs: field '", name, "' is missing in ", j.dump());
    return j.at(name);
  };
  const auto& t = field("template");
  MLS_CHECK(t.is_string() && t.get<std::string>() == kSgemmTemplate, "sgemm knobs: template ", t.dump(),
            " is not '", kSgemmTemplate, "'");
  auto integer = [&](const char* name) {
    const auto& v = field(name);
    MLS_CHECK(v.is_number_integer(), "sgemm knobs: field '", name, "' must be an integer, got ", v.dump());
    const auto x = v.get<std::int64_t>();
    MLS_CHECK(x >= -(1 << 30) && x <= (1 << 30), "sgemm knobs: field '", name, "' ", x, " is out of range");
    return static_cast<int>(x);
  };
  auto text = [&](const char* name) {
    const auto& v = field(name);
    MLS_CHECK(v.is_string(), "sgemm knobs: field '", name, "' must be a string, got ", v.dump());
    return v.get<std::string>();
  };
  auto flag = [&](const char* name) {
    const auto& v = field(name);
    MLS_CHECK(v.is_boolean(), "sgemm knobs: field '", name, "' must be true or false, got ", v.dump());
    return v.get<bool>();
  };
  SgemmKnobs k;
  k.mc = integer("mc");
  k.kc = integer("kc");
  k.nc = integer("nc");
  k.mr = integer("mr");
  k.nr = integer("nr");
  k.order = text("order");
  k.parallel = text("parallel");
  k.pack_a = flag("pack_a");
  k.pack_b = flag("pack_b");
  k.unroll = integer("unroll");
  if (j.contains("a_panels")) k.a_panels = flag("a_panels");  // a record from before the knob: rows of KC
  if (j.contains("balance")) k.balance = integer("balance");    // a record from before the knob: 1
  if (j.contains("c_prefetch")) k.c_prefetch = flag("c_prefetch");  // before the knob: C loaded first
  check_knobs(k);
  return k;
}

SgemmKnobs knobs_from_string(std::string_view text, SgemmKnobs k, int lanes) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] == ' ') {
      ++pos;
      continue;
    }
    const std::size_t end = std::min(text.find(' ', pos), text.size());
    const std::string field(text.substr(pos, end - pos));
    pos = end;
    const std::size_t eq = field.find('=');
    MLS_CHECK(eq != std::string::npos && eq > 0, "sgemm knobs: field '", field, "' is not name=value");
    const std::string name = field.substr(0, eq), value = field.substr(eq + 1);
    if (name == "order" || name == "parallel") {
      (name == "order" ? k.order : k.parallel) = value;
      continue;
    }
    int v = 0;
    const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    MLS_CHECK(ec == std::errc() && ptr == value.data() + value.size(), "sgemm knobs: field '", name, "' value '",
              value, "' is not an integer");
    if (name == "pack_a" || name == "pack_b" || name == "a_panels" || name == "c_prefetch") {
      MLS_CHECK(v == 0 || v == 1, "sgemm knobs: field '", name, "' must be 0 or 1, got ", value);
      (name == "pack_a" ? k.pack_a : name == "pack_b" ? k.pack_b : name == "a_panels" ? k.a_panels : k.c_prefetch) = v == 1;
      continue;
    }
    int SgemmKnobs::*const fields[] = {&SgemmKnobs::mc, &SgemmKnobs::kc, &SgemmKnobs::nc, &SgemmKnobs::mr,
                                       &SgemmKnobs::nr, &SgemmKnobs::unroll, &SgemmKnobs::balance};
    const char* const names[] = {"mc", "kc", "nc", "mr", "nr", "unroll", "balance"};
    const auto at = std::find(std::begin(names), std::end(names), name);
    MLS_CHECK(at != std::end(names), "sgemm knobs: unknown field '", name,
              "' (mc, kc, nc, mr, nr, order, parallel, pack_a, pack_b, unroll, a_panels, balance, c_prefetch)");
    k.*fields[at - std::begin(names)] = v;
  }
  check_knobs(k, lanes);
  return k;
}

void check_knobs(const SgemmKnobs& k, int lanes) {
  lanes = cpu_lanes(lanes);
  MLS_CHECK(k.mc >= 1 && k.kc >= 1 && k.nc >= 1, "sgemm knobs: block sizes mc ", k.mc, ", kc ", k.kc, ", nc ", k.nc,
            " must be >= 1");
  MLS_CHECK(k.mr >= 1 && k.mr <= 64, "sgemm knobs: mr ", k.mr, " must be in 1..64");
  MLS_CHECK(k.nr >= lanes && k.nr % lanes == 0 && k.nr <= 16 * lanes, "sgemm knobs: nr ", k.nr,
            " must be a multiple of the ", lanes, " vector lanes (at most ", 16 * lanes, ")");
  std::string sorted = k.order;
  std::sort(sorted.begin(), sorted.end());
  MLS_CHECK(sorted == "kmn", "sgemm knobs: order '", k.order, "' is not a permutation of 'nkm' (n = xc, k = ko, m = yc)");
  MLS_CHECK(index_of(parallel_names(), k.parallel) < parallel_names().size(), "sgemm knobs: parallel '", k.parallel,
            "' is not one of none, m, n, mr, nr");
  MLS_CHECK(k.unroll >= 1 && k.unroll <= 64, "sgemm knobs: unroll ", k.unroll, " must be in 1..64");
  MLS_CHECK(k.balance >= 1 && k.balance <= 1024, "sgemm knobs: balance ", k.balance,
            " must be in 1..1024 (the threads the parallel loop's blocks are balanced for)");
}

// ---- the space ----------------------------------------------------------------------------------

namespace {
/// Vector registers of the CPU: 32 with AVX-512, else 16.
int cpu_registers(int lanes) { return lanes >= 16 ? 32 : 16; }
}  // namespace

KnobSpace KnobSpace::sgemm(int threads, int lanes) {
  MLS_CHECK(threads >= 1, "KnobSpace::sgemm: threads ", threads, " must be >= 1");
  KnobSpace s;
  s.lanes = cpu_lanes(lanes);
  s.vector_registers = cpu_registers(s.lanes);
  // MC up to 768 rows (OpenBLAS's P on Haswell-like cores: an A block of 1.2 MB at KC 384, in L2
  // and L3), for large problems whose B block is reused by many A blocks.
  s.mc = {32, 64, 96, 128, 192, 256, 384, 512, 768};
  s.kc = {64, 128, 192, 256, 384, 512};
  s.nc = {128, 256, 512, 1024, 2048};
  s.mr = {1, 2, 4, 6, 8, 12, 14, 16};
  s.nr = {s.lanes, 2 * s.lanes, 3 * s.lanes, 4 * s.lanes};
  s.order = orders();
  s.parallel = threads == 1 ? std::vector<std::string>{"none"} : std::vector<std::string>{"m", "n", "mr", "nr"};
  s.pack_a = {true, false};
  s.pack_b = {true, false};
  s.unroll = {1, 2, 4, 8};
  s.a_panels = {false, true};
  // The C-prefetching micro-kernel first: the default's (it is lab4_packed's order, and it never
  // measured slower at 2048 x 2048 x 2048 on Zen 5, where the tiles of C come from memory).
  s.c_prefetch = {true, false};
  s.threads = threads;
  // lab4_packed's blocks (packed_knobs) are points of the space.
  const PackedBlocking b = packed_blocking(packed_isa_of(s.lanes));
  auto hold = [](std::vector<int>& list, long v) {
    if (std::find(list.begin(), list.end(), static_cast<int>(v)) == list.end()) list.push_back(static_cast<int>(v));
    std::sort(list.begin(), list.end());
  };
  hold(s.mc, b.mc);
  hold(s.kc, b.kc);
  hold(s.nc, b.nc);
  return s;
}

KnobSpace KnobSpace::small(int threads, int lanes) {
  MLS_CHECK(threads >= 1, "KnobSpace::small: threads ", threads, " must be >= 1");
  KnobSpace s;
  s.lanes = cpu_lanes(lanes);
  s.vector_registers = cpu_registers(s.lanes);
  s.mc = {8, 24};
  s.kc = {8, 32};
  s.nc = {s.lanes, 2 * s.lanes};
  s.mr = {3, 4};
  s.nr = {s.lanes};
  s.order = {"nkm", "mkn", "knm"};
  s.parallel = threads == 1 ? std::vector<std::string>{"none"} : std::vector<std::string>{"m", "nr"};
  s.pack_a = {true, false};
  s.pack_b = {true, false};
  s.unroll = {1, 4};
  s.a_panels = {false, true};
  s.c_prefetch = {true};  // one value (the full space's default): the tests' spaces keep their size
  s.threads = threads;
  return s;
}

std::size_t KnobSpace::cross_size() const {
  return mc.size() * kc.size() * nc.size() * mr.size() * nr.size() * order.size() * parallel.size() *
         pack_a.size() * pack_b.size() * unroll.size() * a_panels.size() * c_prefetch.size();
}

SgemmKnobs KnobSpace::at(std::size_t index) const {
  MLS_CHECK(index < cross_size(), "KnobSpace::at: index ", index, " is past the ", cross_size(), " points");
  SgemmKnobs k;
  auto digit = [&index](std::size_t radix) {
    const std::size_t d = index % radix;
    index /= radix;
    return d;
  };
  k.c_prefetch = c_prefetch[digit(c_prefetch.size())];
  k.a_panels = a_panels[digit(a_panels.size())];
  k.unroll = unroll[digit(unroll.size())];
  k.nc = nc[digit(nc.size())];
  k.kc = kc[digit(kc.size())];
  k.mc = mc[digit(mc.size())];
  k.nr = nr[digit(nr.size())];
  k.mr = mr[digit(mr.size())];
  k.pack_b = pack_b[digit(pack_b.size())];
  k.pack_a = pack_a[digit(pack_a.size())];
  k.parallel = parallel[digit(parallel.size())];
  k.order = order[digit(order.size())];
  k.balance = threads;
  return k;
}

bool KnobSpace::valid(const SgemmKnobs& k) const {
  auto in = [](const auto& list, const auto& x) { return std::find(list.begin(), list.end(), x) != list.end(); };
  if (!(in(mc, k.mc) && in(kc, k.kc) && in(nc, k.nc) && in(mr, k.mr) && in(nr, k.nr) && in(order, k.order) &&
        in(parallel, k.parallel) && in(pack_a, k.pack_a) && in(pack_b, k.pack_b) && in(unroll, k.unroll) &&
        in(a_panels, k.a_panels) && in(c_prefetch, k.c_prefetch)))
    return false;
  if (k.a_panels && !k.pack_a) return false;  // no copy of A to lay out
  const int nv = k.nr / lanes;
  return k.nr % lanes == 0 && k.mr * nv + nv + 1 <= vector_registers;
}

std::vector<SgemmKnobs> KnobSpace::enumerate() const {
  std::vector<SgemmKnobs> out;
  const std::size_t n = cross_size();
  for (std::size_t i = 0; i < n; ++i) {
    SgemmKnobs k = at(i);
    if (valid(k)) out.push_back(std::move(k));
  }
  return out;
}

SgemmKnobs KnobSpace::sample(Rng& rng) const {
  auto pick = [&rng](const auto& list) { return list[static_cast<std::size_t>(rng.randint(0, static_cast<std::int64_t>(list.size())))]; };
  for (int attempt = 0; attempt < 10000; ++attempt) {
    SgemmKnobs k;
    k.mc = pick(mc);
    k.kc = pick(kc);
    k.nc = pick(nc);
    k.mr = pick(mr);
    k.nr = pick(nr);
    k.order = pick(order);
    k.parallel = pick(parallel);
    k.pack_a = pick(pack_a);
    k.pack_b = pick(pack_b);
    k.unroll = pick(unroll);
    k.a_panels = pick(a_panels);
    k.c_prefetch = pick(c_prefetch);
    k.balance = threads;
    if (valid(k)) return k;
  }
  fail("KnobSpace::sample: no valid point found in 10000 draws (mr x nr never fits ", vector_registers,
       " vector registers?)");
}

std::vector<SgemmKnobs> KnobSpace::neighbours(const SgemmKnobs& k) const {
  std::vector<SgemmKnobs> out;
  auto add = [&](SgemmKnobs n) {
    if (!(n == k) && valid(n) && std::find(out.begin(), out.end(), n) == out.end()) out.push_back(std::move(n));
  };
  // A numeric knob moves one step along its list.
  auto step = [&](const std::vector<int>& list, int SgemmKnobs::*field) {
    const std::size_t i = index_of(list, k.*field);
    if (i >= list.size()) return;
    for (std::size_t j : {i - 1, i + 1}) {
      if (j >= list.size()) continue;  // i - 1 wraps around for i = 0
      SgemmKnobs n = k;
      n.*field = list[j];
      add(n);
    }
  };
  step(mc, &SgemmKnobs::mc);
  step(kc, &SgemmKnobs::kc);
  step(nc, &SgemmKnobs::nc);
  step(mr, &SgemmKnobs::mr);
  step(nr, &SgemmKnobs::nr);
  step(unroll, &SgemmKnobs::unroll);
  for (const auto& o : order) {
    SgemmKnobs n = k;
    n.order = o;
    add(n);
  }
  for (const auto& p : parallel) {
    SgemmKnobs n = k;
    n.parallel = p;
    add(n);
  }
  for (bool a : pack_a) {
    SgemmKnobs n = k;
    n.pack_a = a;
    add(n);
  }
  for (bool b : pack_b) {
    SgemmKnobs n = k;
    n.pack_b = b;
    add(n);
  }
  for (bool a : a_panels) {
    SgemmKnobs n = k;
    n.a_panels = a;
    add(n);
  }
  for (bool c : c_prefetch) {
    SgemmKnobs n = k;
    n.c_prefetch = c;
    add(n);
  }
  return out;
}

std::optional<SgemmKnobs> KnobSpace::packed_knobs(const SgemmShape& shape) const {
  const PackedBlocking b = packed_blocking(packed_isa_of(lanes));
  SgemmKnobs k;
  k.mr = static_cast<int>(b.mr);
  k.nr = static_cast<int>(b.nr);
  k.mc = static_cast<int>(b.mc);
  k.kc = static_cast<int>(b.kc);
  k.nc = static_cast<int>(b.nc);
  k.order = "nkm";
  const bool serial = std::find(parallel.begin(), parallel.end(), "none") != parallel.end();
  k.parallel = serial ? "none" : shape.m >= shape.n ? "m" : "n";
  k.pack_b = true;
  k.pack_a = !packed_reads_a_in_place(shape.n, shape.k);
  k.unroll = k.pack_a ? b.unroll_packed : b.unroll_in_place;
  // lab4_packed packs A in MR-row panels (its pack_a), where the space has that layout.
  k.a_panels = k.pack_a && std::find(a_panels.begin(), a_panels.end(), true) != a_panels.end();
  // Its micro-kernels prefetch the tile of C and add it after the k loop.
  k.c_prefetch = std::find(c_prefetch.begin(), c_prefetch.end(), true) != c_prefetch.end();
  k.balance = threads;
  if (!valid(k)) return std::nullopt;
  return k;
}

SgemmKnobs KnobSpace::default_knobs() const {
  check();
  SgemmKnobs k;
  k.mc = nearest(mc, 64);
  k.kc = nearest(kc, 256);
  k.nc = nearest(nc, 512);
  k.mr = nearest(mr, 8);
  k.nr = nearest(nr, 2 * lanes);
  k.order = index_of(order, std::string("nkm")) < order.size() ? "nkm" : order.front();
  k.parallel = index_of(parallel, std::string("m")) < parallel.size() ? "m" : parallel.front();
  k.pack_a = pack_a.front();
  k.pack_b = pack_b.front();
  k.unroll = nearest(unroll, 1);
  k.a_panels = k.pack_a && a_panels.front();
  k.c_prefetch = c_prefetch.front();
  k.balance = threads;
  if (valid(k)) return k;
  // Too many accumulators for the registers: the largest mr below that fits, else any valid point.
  std::vector<int> rows = mr;
  std::sort(rows.rbegin(), rows.rend());
  for (int r : rows) {
    SgemmKnobs n = k;
    n.mr = r;
    if (r <= k.mr && valid(n)) return n;
  }
  return enumerate().front();
}

void KnobSpace::check() const {
  auto nonempty = [](const auto& list, const char* name) {
    MLS_CHECK(!list.empty(), "KnobSpace: knob '", name, "' has no values");
  };
  nonempty(mc, "mc");
  nonempty(kc, "kc");
  nonempty(nc, "nc");
  nonempty(mr, "mr");
  nonempty(nr, "nr");
  nonempty(order, "order");
  nonempty(parallel, "parallel");
  nonempty(pack_a, "pack_a");
  nonempty(pack_b, "pack_b");
  nonempty(unroll, "unroll");
  nonempty(a_panels, "a_panels");
  nonempty(c_prefetch, "c_prefetch");
  MLS_CHECK(lanes == 4 || lanes == 8 || lanes == 16, "KnobSpace: lanes ", lanes, " is not 4, 8 or 16");
  MLS_CHECK(threads >= 1 && threads <= 1024, "KnobSpace: threads ", threads, " must be in 1..1024");
  SgemmKnobs k;
  for (int x : mc) k.mc = x, check_knobs(k, lanes);
  for (int x : kc) k.kc = x, check_knobs(k, lanes);
  for (int x : nc) k.nc = x, check_knobs(k, lanes);
  for (int x : mr) k.mr = x, check_knobs(k, lanes);
  k.mr = 1;
  for (int x : nr) k.nr = x, check_knobs(k, lanes);
  k.nr = lanes;
  for (const auto& x : order) k.order = x, check_knobs(k, lanes);
  for (const auto& x : parallel) k.parallel = x, check_knobs(k, lanes);
  for (int x : unroll) k.unroll = x, check_knobs(k, lanes);
  const int min_mr = *std::min_element(mr.begin(), mr.end()), min_nr = *std::min_element(nr.begin(), nr.end());
  MLS_CHECK(min_mr * (min_nr / lanes) + min_nr / lanes + 1 <= vector_registers, "KnobSpace: no valid point: mr ",
            min_mr, " x nr ", min_nr, " needs more than ", vector_registers, " vector registers");
}

// ---- shapes and plans ---------------------------------------------------------------------------

SgemmShape SgemmShape::canonical() const {
  SgemmShape c = *this;
  c.lda = a_ld() == (trans_a ? m : k) ? 0 : lda;
  c.ldb = b_ld() == (trans_b ? k : n) ? 0 : ldb;
  c.ldc = c_ld() == n ? 0 : ldc;
  return c;
}

SgemmShape SgemmShape::key() const { return {m, n, k, trans_a, trans_b, beta}; }

std::string to_string(const SgemmShape& s) {
  const SgemmShape c = s.canonical();
  std::string t = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
  if (s.trans_a) t += " trans_a";
  if (s.trans_b) t += " trans_b";
  if (s.beta != 0) t += " beta=" + std::to_string(s.beta);
  if (c.lda) t += " lda=" + std::to_string(c.lda);
  if (c.ldb) t += " ldb=" + std::to_string(c.ldb);
  if (c.ldc) t += " ldc=" + std::to_string(c.ldc);
  return t;
}

nlohmann::json to_json(const SgemmShape& s) {
  return {{"m", s.m}, {"n", s.n}, {"k", s.k}, {"trans_a", s.trans_a}, {"trans_b", s.trans_b}, {"beta", s.beta}};
}

SgemmShape shape_from_json(const nlohmann::json& j) {
  MLS_CHECK(j.is_object(), "sgemm shape: expected a JSON object, got ", j.dump());
  SgemmShape s;
  for (auto [name, field] : {std::pair{"m", &SgemmShape::m}, std::pair{"n", &SgemmShape::n}, std::pair{"k", &SgemmShape::k}}) {
    MLS_CHECK(j.contains(name), "sgemm shape: field '", name, "' is missing in ", j.dump());
    const auto& v = j.at(name);
    MLS_CHECK(v.is_number_integer() && v.get<std::int64_t>() >= 1, "sgemm shape: field '", name,
              "' must be an integer >= 1, got ", v.dump());
    s.*field = v.get<long>();
  }
  for (auto [name, field] : {std::pair{"trans_a", &SgemmShape::trans_a}, std::pair{"trans_b", &SgemmShape::trans_b}}) {
    if (!j.contains(name)) continue;  // a record from before the flags: no transposes
    MLS_CHECK(j.at(name).is_boolean(), "sgemm shape: field '", name, "' must be true or false, got ", j.at(name).dump());
    s.*field = j.at(name).get<bool>();
  }
  if (j.contains("beta")) {
    const auto& b = j.at("beta");
    MLS_CHECK(b.is_number_integer() && (b.get<std::int64_t>() == 0 || b.get<std::int64_t>() == 1),
              "sgemm shape: field 'beta' must be 0 or 1, got ", b.dump());
    s.beta = b.get<int>();
  }
  return s;
}

double sgemm_flops(const SgemmShape& s) { return 2.0 * static_cast<double>(s.m) * s.n * s.k; }

std::string to_string(const SgemmPiece& p) {
  return "rows " + std::to_string(p.row0) + ":" + std::to_string(p.row0 + p.shape.m) + " cols " + std::to_string(p.col0) +
         ":" + std::to_string(p.col0 + p.shape.n) + " k " + std::to_string(p.k0) + ":" + std::to_string(p.k0 + p.shape.k) +
         " beta=" + std::to_string(p.shape.beta) + " mr=" + std::to_string(p.knobs.mr) + " nr=" + std::to_string(p.knobs.nr) +
         " mc=" + std::to_string(p.mc) + " nc=" + std::to_string(p.nc) + " kc=" + std::to_string(p.kc);
}

namespace {
/// Panels of `unit` covering `extent` (a whole number of them), grouped in balanced blocks of about
/// `target`: the block size, a multiple of unit (the last block may hold fewer panels: the lowering
/// guards it on the panel loop, outside the micro-kernel's tile).
/// With `threads` > 1 the dimension is the parallel loop's: its blocks (`inner` false: the block
/// loop yc/xc is parallel, parallel_for giving each thread ceil(blocks / threads) blocks in a row)
/// or the panels of each block (`inner`: yr/xr) shared out; from the blocks of about `target` up
/// to 2 threads more, the count whose busiest thread gets the fewest panels (the fewest blocks
/// among equals: the nearest to `target`).
long balanced_block(long extent, long unit, long target, long threads = 1, bool inner = false) {
  const long panels = ceil_div(extent, unit);
  const long per_target = std::max(1L, target / unit);
  const long blocks = ceil_div(panels, per_target);
  auto busiest = [&](long b) {  // panels on the busiest thread with b blocks
    const long size = ceil_div(panels, b), real = ceil_div(panels, size), last = panels - (real - 1) * size;
    if (inner) return (real - 1) * ceil_div(size, threads) + ceil_div(last, threads);
    return std::min(panels, ceil_div(real, threads) * size);
  };
  long best = blocks;
  if (threads > 1)
    for (long b = blocks + 1; b <= std::min(panels, blocks + 2 * threads); ++b)
      if (busiest(b) < busiest(best)) best = b;
  return ceil_div(panels, best) * unit;
}

void check_problem(const SgemmShape& s) {
  MLS_CHECK(s.m >= 1 && s.n >= 1 && s.k >= 1, "plan_sgemm: shape ", to_string(s), " must have every extent >= 1");
  MLS_CHECK(s.beta == 0 || s.beta == 1, "plan_sgemm: beta ", s.beta, " of ", to_string(s),
            " must be 0 (C = op(A)·op(B)) or 1 (C += op(A)·op(B))");
  const long ca = s.trans_a ? s.m : s.k, cb = s.trans_b ? s.k : s.n;
  MLS_CHECK((s.lda == 0 || s.lda >= ca) && (s.ldb == 0 || s.ldb >= cb) && (s.ldc == 0 || s.ldc >= s.n),
            "plan_sgemm: leading dimensions lda ", s.lda, ", ldb ", s.ldb, ", ldc ", s.ldc, " of ", to_string(s),
            " must be 0 (compact) or at least ", ca, ", ", cb, ", ", s.n);
}
}  // namespace

SgemmPlan plan_sgemm(const SgemmKnobs& knobs, const SgemmShape& shape, int lanes) {
  lanes = cpu_lanes(lanes);
  check_knobs(knobs, lanes);
  check_problem(shape);
  SgemmPlan p;
  p.knobs = knobs;
  p.shape = shape;
  p.lanes = lanes;
  const long mr = knobs.mr, nr = knobs.nr, M = shape.m, N = shape.n, K = shape.k;
  // Rows: whole panels of mr, then the rest as one panel. Columns: whole panels of nr, then the
  // rest's whole vectors as one panel, then what is left in vectors of half and a quarter of the
  // lanes (8 and 4 columns with 16 lanes: a register-blocked micro-kernel of narrower vectors),
  // then the rest (narrow: plain loops).
  struct Range {
    long begin, extent, unit;
    int lanes;
  };
  std::vector<Range> rows, cols, ks;
  const long mm = M / mr * mr, nm = N / nr * nr, nv = (N - nm) / lanes * lanes;
  if (mm > 0) rows.push_back({0, mm, mr, lanes});
  if (M > mm) rows.push_back({mm, M - mm, M - mm, lanes});
  if (nm > 0) cols.push_back({0, nm, nr, lanes});
  if (nv > 0) cols.push_back({nm, nv, nv, lanes});
  long at = nm + nv;
  for (int w = lanes / 2; w >= 4; w /= 2)
    if (N - at >= w) {
      cols.push_back({at, w, w, w});
      at += w;
    }
  if (N > at) cols.push_back({at, N - at, N - at, lanes});
  // k: ceil(K / KC) blocks of ceil(K / blocks), as many whole ones as K holds, then the rest (a
  // shorter block, not a sliver: every k range is a pass over C).
  const long kblocks = ceil_div(K, knobs.kc), kc = ceil_div(K, kblocks), km = K / kc * kc;
  ks.push_back({0, km, kc, lanes});
  if (K > km) ks.push_back({km, K - km, K - km, lanes});
  for (std::size_t q = 0; q < ks.size(); ++q) {
    for (const Range& r : rows) {
      for (const Range& c : cols) {
        // An edge (the last rows or columns: one panel) reads each element of the other operand's
        // block once, so it reads that operand in place instead of copying it (a copy would be a
        // second pass over all of B, or A, for a sliver of the flops), and its parallel loop shares
        // out the other dimension (its own has one panel: one thread would do it all).
        const bool row_edge = r.begin > 0, col_edge = c.begin > 0;
        std::string parallel = knobs.parallel;
        if (row_edge && !col_edge && (parallel == "m" || parallel == "mr")) parallel = parallel == "m" ? "n" : "nr";
        if (col_edge && !row_edge && (parallel == "n" || parallel == "nr")) parallel = parallel == "n" ? "m" : "mr";
        // The dimension the parallel loop shares out, its blocks balanced for knobs.balance threads.
        const bool par_rows = parallel == "m" || parallel == "mr";
        const bool par_cols = parallel == "n" || parallel == "nr";
        const bool inner = parallel == "mr" || parallel == "nr";
        SgemmPiece piece;
        piece.row0 = r.begin;
        piece.col0 = c.begin;
        piece.k0 = ks[q].begin;
        piece.shape = shape;
        piece.shape.lda = shape.a_ld();  // the whole problem's rows, whatever the piece's extents
        piece.shape.ldb = shape.b_ld();
        piece.shape.ldc = shape.c_ld();
        piece.shape.m = r.extent;
        piece.shape.n = c.extent;
        piece.shape.k = ks[q].extent;
        if (q > 0) piece.shape.beta = 1;  // adds to what the first k range wrote
        piece.knobs = knobs;
        piece.knobs.mr = static_cast<int>(r.unit);
        piece.knobs.nr = static_cast<int>(c.unit);
        piece.knobs.parallel = parallel;
        if (row_edge) piece.knobs.pack_b = false;
        if (col_edge) piece.knobs.pack_a = piece.knobs.a_panels = false;
        if (shape.trans_b) piece.knobs.pack_b = true;  // the micro-kernel reads B's rows of k: the copy transposes
        piece.mc = balanced_block(r.extent, r.unit, knobs.mc, par_rows ? knobs.balance : 1, inner);
        piece.nc = balanced_block(c.extent, c.unit, knobs.nc, par_cols ? knobs.balance : 1, inner);
        piece.kc = ks[q].unit;
        piece.lanes = c.lanes;
        p.pieces.push_back(piece);
      }
    }
  }
  p.mc = p.pieces.front().mc;
  p.nc = p.pieces.front().nc;
  p.kc = p.pieces.front().kc;
  return p;
}

SgemmShape padded_to_tiles(const SgemmKnobs& knobs, const SgemmShape& shape, int lanes) {
  lanes = cpu_lanes(lanes);
  check_knobs(knobs, lanes);
  check_problem(shape);
  const long kblocks = ceil_div(shape.k, knobs.kc);
  return {ceil_div(shape.m, knobs.mr) * knobs.mr, ceil_div(shape.n, knobs.nr) * knobs.nr,
          kblocks * ceil_div(shape.k, kblocks)};
}

// ---- features of the cost model -----------------------------------------------------------------

std::vector<double> sgemm_features(const SgemmKnobs& k, const SgemmShape& shape, int lanes) {
  const SgemmPlan p = plan_sgemm(k, shape, lanes);
  std::vector<double> f;
  auto lg = [](double x) { return std::log2(std::max(1.0, x)); };
  f.push_back(lg(static_cast<double>(p.mc)));
  f.push_back(lg(static_cast<double>(p.kc)));
  f.push_back(lg(static_cast<double>(p.nc)));
  f.push_back(lg(k.mr));
  f.push_back(lg(k.nr / p.lanes));
  f.push_back(lg(k.unroll));
  for (const auto& o : orders()) f.push_back(k.order == o ? 1.0 : 0.0);
  for (const auto& n : parallel_names()) f.push_back(k.parallel == n ? 1.0 : 0.0);
  f.push_back(k.pack_a ? 1.0 : 0.0);
  f.push_back(k.pack_b ? 1.0 : 0.0);
  f.push_back(k.a_panels ? 1.0 : 0.0);
  f.push_back(k.c_prefetch ? 1.0 : 0.0);
  const double nv = static_cast<double>(k.nr) / p.lanes;
  f.push_back(k.mr * nv + nv + 1);                                      // registers
  f.push_back(1.0 / k.mr + 1.0 / nv);                                   // loads per FMA
  f.push_back(1.0 - sgemm_flops(p.pieces.front().shape) / sgemm_flops(shape));  // the share of the edges
  f.push_back(lg(4.0 * p.mc * p.kc));                                   // A block bytes (L2)
  f.push_back(lg(4.0 * p.kc * p.nc));                                   // B block bytes (L3)
  f.push_back(lg(4.0 * p.kc * k.nr));                                   // B panel bytes (L1)
  const double l1 = lg(4.0 * p.kc * k.nr) - 15, l2 = lg(4.0 * p.mc * p.kc) - 20;
  f.push_back(l1 * l1);
  f.push_back(l2 * l2);
  return f;
}

double sgemm_prior(const SgemmKnobs& k, const SgemmShape& shape, int lanes, int threads) {
  const SgemmPlan p = plan_sgemm(k, shape, lanes);
  const SgemmShape s = shape.key();
  const double L1 = 48 << 10, L2 = 512 << 10, L3 = 8 << 20;  // bytes a block may take (Zen 4/5-like)
  auto over = [](double bytes, double cap) { return bytes > cap ? std::log2(bytes / cap) : 0.0; };
  // Compute: every piece's micro-kernel calls.
  double compute = 0;
  for (const SgemmPiece& q : p.pieces) {
    const double flops = sgemm_flops(q.shape);
    const long mr = q.knobs.mr, nr = q.knobs.nr;
    if (nr % q.lanes != 0) {  // a narrow edge: plain loops, about 4 flops a cycle
      compute += flops / 4;
      continue;
    }
    const double nv = static_cast<double>(nr) / q.lanes;
    const double fma = mr * nv, loads = nv + mr;
    const double per_k = std::max({fma / 2, loads / 2, 4.0});
    const double calls = std::ceil(static_cast<double>(q.shape.m) / mr) * std::ceil(static_cast<double>(q.shape.n) / nr) *
                         std::ceil(static_cast<double>(q.shape.k) / std::max(1L, q.kc));
    double cycles = flops / (2 * mr * nr) * per_k + calls * (2 * fma + 20);  // + C tile in and out per call
    // Blocks that overflow their cache level.
    double slow = 1 + 0.08 * over(4.0 * q.kc * nr, L1) + 0.1 * over(4.0 * q.mc * q.kc, L2) + 0.05 * over(4.0 * q.kc * q.nc, L3);
    // Operands read in place and reused (an edge, one panel, reads them once): strided rows (worse
    // at a multiple of 4 KiB: every row in one cache set).
    if (!q.knobs.pack_b && q.shape.m > mr) slow *= (4 * s.b_ld()) % 4096 == 0 ? 1.4 : 1.15 + 0.05 * over(4.0 * q.kc * s.b_ld(), L2);
    if (!q.knobs.pack_a && q.shape.n > nr) slow *= (4 * s.a_ld()) % 4096 == 0 && s.k > 256 ? 1.2 : 1.02;
    // A's copy in rows of KC: the tile's MR rows are MR streams KC apart (the same few L1 sets when
    // 4 KC is a multiple of 1 KiB); in panels one contiguous run.
    if (q.knobs.pack_a && !q.knobs.a_panels) slow *= (4 * q.kc) % 1024 == 0 ? 1.05 : 1.02;
    compute += cycles * slow;
  }
  // Copies: elements per copy, times the outer block loops that repeat it (not its own dimensions).
  const std::string& o = k.order;
  const double trips[3] = {std::ceil(static_cast<double>(s.n) / std::max(1L, p.nc)),
                           std::ceil(static_cast<double>(s.k) / std::max(1L, p.kc)),
                           std::ceil(static_cast<double>(s.m) / std::max(1L, p.mc))};
  auto trip = [&](char c) { return trips[c == 'n' ? 0 : c == 'k' ? 1 : 2]; };
  auto repeats = [&](char a, char b) {  // the copy sits at the later of its loops a, b
    const std::size_t at = std::max(o.find(a), o.find(b));
    double r = 1;
    for (std::size_t i = 0; i < at; ++i)
      if (o[i] != a && o[i] != b) r *= trip(o[i]);
    return r;
  };
  const double copy_b = k.pack_b || s.trans_b ? s.k * s.n * repeats('n', 'k') * (s.trans_b ? 0.5 : 0.25) : 0;
  const double copy_a = k.pack_a ? s.m * s.k * repeats('m', 'k') * (s.trans_a ? 0.5 : 0.25) : 0;
  if (threads <= 1 || k.parallel == "none") return std::log((compute + copy_a + copy_b) / 3e9);
  // Threads: the parallel loop's trips shared out; a copy outside it runs on one thread.
  const char par = k.parallel == "m" || k.parallel == "mr" ? 'm' : 'n';
  const bool inner = k.parallel == "mr" || k.parallel == "nr";
  double ptrips = inner ? std::ceil((par == 'm' ? p.mc / k.mr : p.nc / k.nr)) : trip(par);
  ptrips = std::max(1.0, ptrips);
  const double share = std::ceil(ptrips / threads) / ptrips;  // of the work on the busiest thread
  const std::size_t ppos = inner ? 3 : o.find(par);           // xr, yr come after the three block loops
  double regions = 1;
  for (std::size_t i = 0; i < std::min<std::size_t>(ppos, 3); ++i) regions *= trip(o[i]);
  auto outside = [&](char a, char b) { return std::max(o.find(a), o.find(b)) < ppos || ppos == 3; };
  const double serial = (outside('n', 'k') ? copy_b : 0) + (outside('m', 'k') ? copy_a : 0);
  const double shared = compute + copy_a + copy_b - serial;
  return std::log((serial + shared * share + regions * 5000) / 3e9);
}

}  // namespace mls::kernels::tune
