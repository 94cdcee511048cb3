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

/// The position of value `k` of `o`: a multi-index for a tensor, else "[k]".
std::string position(const Observation& o, std::size_t k) {
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

/// `s` from `from`, at most `n` characters, line breaks and tabs escaped, "..." where cut.
std::string excerpt(const std::string& s, std::size_t from, std::size_t n) {
  std::string out = from > 0 ? "..." : "";
  for (std::size_t i = from; i < s.size() && i < from + n; ++i) {
    if (s[i] == '\n') out += "\\n";
    else if (s[i] == '\t') out += "\\t";
    else out += s[i];
  }
  if (s.size() > from + n) out += "...";
  return out;
}

/// Two texts side by side from a little before their first difference.
std::string text_difference(const std::string& a, const std::string& b) {
  std::size_t p = 0;
  while (p < a.size() && p < b.size() && a[p] == b[p]) ++p;
  const std::size_t from = p > 24 ? p - 24 : 0;
  return "\"" + excerpt(a, from, 72) + "\" vs \"" + excerpt(b, from, 72) + "\" (from character " + std::to_string(p + 1) + ")";
}

/// What differs between two observations with the same label and kind but another layout or text.
std::string layout_difference(const Observation& x, const Observation& y) {
  if (x.text != y.text) return (x.kind == "tensor" ? "dtype " : "") + text_difference(x.text, y.text);
  if (x.shape != y.shape) return "shape " + ints(x.shape) + " vs " + ints(y.shape);
  if (x.strides != y.strides) return "strides " + ints(x.strides) + " vs " + ints(y.strides);
  if (x.offset != y.offset) return "offset " + std::to_string(x.offset) + " vs " + std::to_string(y.offset);
  return std::to_string(x.count) + " vs " + std::to_string(y.count) + " values";
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

ReferenceMerger::ReferenceMerger(Stream first, ValueSample sample) {
  r_.stream = std::move(first);
  r_.sample = sample;
  r_.unstable.assign(r_.stream.size(), false);
}

void ReferenceMerger::fail(std::string why) {
  if (problem_.empty()) problem_ = std::move(why);
}

void ReferenceMerger::nondeterministic(std::size_t i, const std::string& what) {
  ++r_.nondeterministic;
  if (r_.differences.size() >= ReferenceStream::kMaxDifferences) return;
  const Observation& x = r_.stream[i];
  r_.differences.push_back("observation " + std::to_string(i + 1) + " of " + std::to_string(r_.stream.size()) + ", '" +
                           excerpt(x.label, 0, 160) + "' (" + x.kind + "): " + what);
}

void ReferenceMerger::begin(const Observation& y) {
  const std::size_t i = seen_++;
  cur_ = -1;
  if (i >= r_.stream.size()) return;  // counted in result()
  const Observation& x = r_.stream[i];
  if (x.label != y.label || x.kind != y.kind)
    return fail("two reference runs with the same salt differ at observation " + std::to_string(i + 1) + ": " + describe(x) +
                " vs " + describe(y));
  const bool layout_same = x.text == y.text && x.shape == y.shape && x.strides == y.strides && x.offset == y.offset &&
                           x.count == y.count;
  if (!layout_same) {
    r_.unstable[i] = true;
    nondeterministic(i, layout_difference(x, y));
    return;
  }
  if (x.kind == "text") return;
  cur_ = static_cast<std::int64_t>(i);
  k_ = 0;
  pos_ = 0;
  spread_ = 0;
  differs_ = false;
  first_diff_.clear();
}

void ReferenceMerger::value(double v) {
  if (cur_ < 0) return;
  const Observation& x = r_.stream[static_cast<std::size_t>(cur_)];
  if (!r_.sample.keep(static_cast<std::size_t>(cur_), x.count, pos_++) || k_ >= x.values.size()) return;
  const double u = x.values[k_++];
  if (u == v || (std::isnan(u) && std::isnan(v))) return;
  if (!differs_) first_diff_ = position(x, static_cast<std::size_t>(pos_ - 1)) + ": " + num(u) + " vs " + num(v);
  differs_ = true;
  if (std::isfinite(u) && std::isfinite(v)) spread_ = std::max(spread_, std::fabs(u - v));
  else r_.unstable[static_cast<std::size_t>(cur_)] = true;
}

void ReferenceMerger::end(bool ok) {
  if (!ok) fail("a reference run wrote a malformed observation record");
  if (cur_ < 0) return;
  if (differs_) {
    const auto i = static_cast<std::size_t>(cur_);
    Observation& x = r_.stream[i];
    x.atol = std::max(x.atol, 2 * spread_);
    nondeterministic(i, first_diff_ + (r_.unstable[i] ? " (not finite: compared by label and kind only)"
                                                      : " (tolerance widened to atol " + num(x.atol) + ")"));
  }
  cur_ = -1;
}

void ReferenceMerger::malformed() {
  ++seen_;
  fail("a reference run wrote a malformed observation record");
}

std::optional<ReferenceStream> ReferenceMerger::result(std::string& problem) {
  if (problem_.empty() && seen_ != r_.stream.size())
    problem_ = "two reference runs with the same salt made " + std::to_string(r_.stream.size()) + " and " +
               std::to_string(seen_) + " observations: the test's observations depend on more than the salt";
  if (!problem_.empty()) {
    problem = problem_;
    return std::nullopt;
  }
  return std::move(r_);
}

void feed(ObservationConsumer& c, const Stream& s) {
  for (const Observation& o : s) {
    c.begin(o);
    for (double v : o.values) c.value(v);
    c.end(o.count == static_cast<std::int64_t>(o.values.size()));
  }
}

std::optional<ReferenceStream> merge_reference_runs(const Stream& a, const Stream& b, std::string& problem) {
  ReferenceMerger m(a);
  feed(m, b);
  return m.result(problem);
}

StreamComparator::StreamComparator(const ReferenceStream& ref) : ref_(ref) {}

void StreamComparator::differ(std::string message) {
  if (++differing_ == 1) first_ = std::move(message);
}

std::string StreamComparator::at(std::size_t i) const {
  return "observation " + std::to_string(i + 1) + " of " + std::to_string(ref_.stream.size()) + ", ";
}

void StreamComparator::begin(const Observation& g) {
  const std::size_t i = seen_++;
  cur_ = nullptr;
  const Stream& want = ref_.stream;
  if (i >= want.size()) {
    if (i == want.size())
      differ("observation " + std::to_string(want.size() + 1) + ": unexpected " + describe(g) + " (the reference made " +
             std::to_string(want.size()) + ")");
    return;
  }
  const Observation& w = want[i];
  if (g.label != w.label || g.kind != w.kind) {
    differ(at(i) + "expected " + describe(w) + ", got " + describe(g) + " (the test took another path)");
    return;
  }
  if (ref_.unstable[i]) return;  // nondeterministic in the reference: label and kind only
  const std::string head = at(i) + describe(w) + ": ";
  if (w.kind == "text" && g.text != w.text)
    return differ(head + "expected \"" + w.text.substr(0, 200) + "\", got \"" + g.text.substr(0, 200) + "\"");
  if (w.kind == "tensor") {
    if (g.text != w.text) return differ(head + "dtype: expected " + w.text + ", got " + g.text);
    if (g.shape != w.shape) return differ(head + "shape: expected " + ints(w.shape) + ", got " + ints(g.shape));
    if (g.strides != w.strides) return differ(head + "strides: expected " + ints(w.strides) + ", got " + ints(g.strides));
    if (g.offset != w.offset)
      return differ(head + "offset: expected " + std::to_string(w.offset) + ", got " + std::to_string(g.offset));
  }
  if (g.count != w.count)
    return differ(head + "expected " + std::to_string(w.count) + " value(s), got " + std::to_string(g.count));
  cur_ = &w;
  cur_index_ = i;
  k_ = 0;
  pos_ = 0;
  compared_ = 0;
  bad_values_ = 0;
  first_bad_.clear();
}

void StreamComparator::value(double v) {
  if (!cur_) return;
  const std::int64_t p = pos_++;
  if (!ref_.sample.keep(cur_index_, cur_->count, p)) return;
  const std::size_t k = k_++;
  ++compared_;
  if (k >= cur_->values.size() || same_value(v, cur_->values[k], cur_->rtol, cur_->atol)) return;
  if (bad_values_++ == 0)
    first_bad_ = position(*cur_, static_cast<std::size_t>(p)) + ": expected " + num(cur_->values[k]) + ", got " + num(v) +
                 " (" + tolerance(*cur_) + ")";
}

void StreamComparator::end(bool ok) {
  if (!cur_) return;
  const Observation& w = *cur_;
  cur_ = nullptr;
  const std::string head = at(cur_index_) + describe(w) + ": ";
  if (!ok) return differ(head + "the submission's record of it did not decode (malformed)");
  if (bad_values_ == 0) return;
  std::string more;
  if (bad_values_ > 1)
    more = " (and " + std::to_string(bad_values_ - 1) + " more of its " +
           (compared_ < w.count ? std::to_string(compared_) + " compared of " : std::string()) + std::to_string(w.count) +
           " values)";
  differ(head + first_bad_ + more);
}

void StreamComparator::malformed() {
  const std::size_t i = seen_++;
  differ(i < ref_.stream.size() ? at(i) + describe(ref_.stream[i]) + ": the submission's record did not decode (malformed)"
                                : "observation " + std::to_string(i + 1) + ": a malformed record");
}

std::string StreamComparator::verdict() const {
  std::string v = first_;
  const Stream& want = ref_.stream;
  if (v.empty() && seen_ < want.size())
    v = at(seen_) + describe(want[seen_]) + ": missing (the test stopped after " + std::to_string(seen_) +
        " observation(s); the reference made " + std::to_string(want.size()) + ")";
  if (!v.empty() && differing_ > 1) v += "; " + std::to_string(differing_ - 1) + " more observation(s) differ";
  return v;
}

std::string compare_streams(const ReferenceStream& ref, const Stream& got) {
  StreamComparator c(ref);
  feed(c, got);
  return c.verdict();
}

}  // namespace mls::grader
