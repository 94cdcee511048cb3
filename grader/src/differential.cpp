#include "mls/grader/differential.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mls::grader {

bool is_strong(const Observation& o) { return o.kind != "bool"; }

int strong_count(const Stream& s) {
  return static_cast<int>(std::count_if(s.begin(), s.end(), [](const Observation& o) { return is_strong(o); }));
}

namespace {

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string ints(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

bool same_value(double got, double want, double rtol, double atol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (rtol == 0 && atol == 0) return got == want;
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

/// The position of value `k` of `o`: a multi-index for an unthinned tensor, else "[k]".
std::string position(const Observation& o, std::size_t k) {
  const bool thinned = o.count > static_cast<std::int64_t>(o.values.size());
  if (thinned) {
    std::size_t step = (static_cast<std::size_t>(o.count) + o.values.size() - 1) / std::max<std::size_t>(1, o.values.size());
    return "value " + std::to_string(k * step) + " (of a sample of every " + std::to_string(step) + "th)";
  }
  if (o.kind != "tensor" || o.shape.size() < 2) return "value [" + std::to_string(k) + "]";
  std::vector<std::int64_t> idx(o.shape.size());
  std::int64_t rest = static_cast<std::int64_t>(k);
  for (std::size_t d = o.shape.size(); d-- > 0;) {
    std::int64_t n = std::max<std::int64_t>(1, o.shape[d]);
    idx[d] = rest % n;
    rest /= n;
  }
  std::string s = "element [";
  for (std::size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

std::string tolerance(const Observation& o) {
  if (o.rtol == 0 && o.atol == 0) return "exact";
  return "tolerance rtol " + num(o.rtol) + ", atol " + num(o.atol);
}

}  // namespace

std::string describe(const Observation& o) {
  std::string s = "'" + o.label + "' (" + o.kind;
  if (o.kind == "tensor") s += " " + o.text + " " + ints(o.shape);
  else if (o.kind == "text") {
    std::string t = o.text.size() > 80 ? o.text.substr(0, 80) + "..." : o.text;
    s += " \"" + t + "\"";
  } else if (!o.values.empty()) {
    s += " " + num(o.values[0]);
    if (o.values.size() > 1) s += ", ... (" + std::to_string(o.count) + " values)";
  }
  return s + ")";
}

std::optional<ReferenceStream> merge_reference_runs(const Stream& a, const Stream& b, std::string& problem) {
  if (a.size() != b.size()) {
    problem = "two reference runs with the same salt made " + std::to_string(a.size()) + " and " +
              std::to_string(b.size()) + " observations: the test's observations depend on more than the salt";
    return std::nullopt;
  }
  ReferenceStream r;
  r.stream = a;
  r.unstable.assign(a.size(), false);
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Observation &x = a[i], &y = b[i];
    if (x.label != y.label || x.kind != y.kind) {
      problem = "two reference runs with the same salt differ at observation " + std::to_string(i + 1) + ": " +
                describe(x) + " vs " + describe(y);
      return std::nullopt;
    }
    bool layout_same = x.text == y.text && x.shape == y.shape && x.strides == y.strides && x.offset == y.offset &&
                       x.count == y.count && x.values.size() == y.values.size();
    if (!layout_same || x.kind == "text") {
      if (!layout_same) {
        r.unstable[i] = true;
        ++r.nondeterministic;
      }
      continue;
    }
    double spread = 0;
    bool differs = false;
    for (std::size_t k = 0; k < x.values.size(); ++k) {
      double u = x.values[k], v = y.values[k];
      if (u == v || (std::isnan(u) && std::isnan(v))) continue;
      differs = true;
      if (std::isfinite(u) && std::isfinite(v)) spread = std::max(spread, std::fabs(u - v));
      else r.unstable[i] = true;
    }
    if (differs) {
      ++r.nondeterministic;
      r.stream[i].atol = std::max(r.stream[i].atol, 2 * spread);
    }
  }
  return r;
}

std::string compare_streams(const ReferenceStream& ref, const Stream& got) {
  const Stream& want = ref.stream;
  const std::string of = " of " + std::to_string(want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const Observation& w = want[i];
    const std::string at = "observation " + std::to_string(i + 1) + of + ", ";
    if (i >= got.size())
      return at + describe(w) + ": missing (the test stopped after " + std::to_string(got.size()) +
             " observation(s); the reference made " + std::to_string(want.size()) + ")";
    const Observation& g = got[i];
    if (g.label != w.label || g.kind != w.kind)
      return at + "expected " + describe(w) + ", got " + describe(g) + " (the test took another path)";
    if (ref.unstable[i]) continue;  // nondeterministic in the reference: label and kind only
    const std::string head = at + describe(w) + ": ";
    if (w.kind == "text" && g.text != w.text)
      return head + "expected \"" + w.text.substr(0, 200) + "\", got \"" + g.text.substr(0, 200) + "\"";
    if (w.kind == "tensor") {
      if (g.text != w.text) return head + "dtype: expected " + w.text + ", got " + g.text;
      if (g.shape != w.shape) return head + "shape: expected " + ints(w.shape) + ", got " + ints(g.shape);
      if (g.strides != w.strides) return head + "strides: expected " + ints(w.strides) + ", got " + ints(g.strides);
      if (g.offset != w.offset)
        return head + "offset: expected " + std::to_string(w.offset) + ", got " + std::to_string(g.offset);
    }
    if (g.count != w.count || g.values.size() != w.values.size())
      return head + "expected " + std::to_string(w.count) + " value(s), got " + std::to_string(g.count);
    for (std::size_t k = 0; k < w.values.size(); ++k)
      if (!same_value(g.values[k], w.values[k], w.rtol, w.atol))
        return head + position(w, k) + ": expected " + num(w.values[k]) + ", got " + num(g.values[k]) + " (" +
               tolerance(w) + ")";
  }
  if (got.size() > want.size())
    return "observation " + std::to_string(want.size() + 1) + ": unexpected " + describe(got[want.size()]) +
           " (the reference made " + std::to_string(want.size()) + ")";
  return "";
}

}  // namespace mls::grader
