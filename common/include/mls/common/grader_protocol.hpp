#pragma once
/// The result channel between a test program and `mls-grader`, defined once: the harness
/// listener (common/tests/mls_grader_listener.hpp, inside every test program) writes it, the
/// grader (grader/src/result.cpp) reads it. Header-only and free of test code, so the grader
/// includes it without linking anything a submission can touch.
///
/// Setup. The grader hands the program two inherited pipe fds and sets
/// `MLS_GRADER_FD="<in>,<out>"` (the fd numbers only). On <in> it writes
///     <nonce>\n
///     salt <16 hex digits>\n          (optional: the per-run secret mixed into every mls::Rng seed)
/// and closes it. The listener reads <in> to its end, closes it and removes the variable.
///
/// Lines on <out>, one per event, each `<nonce> <VERB>[ <payload>]\n` (newlines in a payload
/// are escaped, see `escape`):
///     NAME <test>   the listing (MLS_GRADER_LIST=1): one per matching test case, then END
///     OBS <record>  an observation of the test case running (`encode_observation`)
///     PASS <test>   the test case ended and its own checks passed (the student process's view:
///     FAIL <test>   never enough for a PASS of the grader, see handouts/README.md)
///     EXIT <test>   exit() was called while the test case ran
///     END           the run ended normally
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace mls::grader_protocol {

inline constexpr const char* kFdEnv = "MLS_GRADER_FD";      ///< "<in>,<out>"
inline constexpr const char* kListEnv = "MLS_GRADER_LIST";  ///< "1": list, do not run
inline constexpr std::string_view kSaltPrefix = "salt ";

inline constexpr std::string_view kName = "NAME", kObs = "OBS", kPass = "PASS", kFail = "FAIL",
                                  kExit = "EXIT", kEnd = "END";

/// One observation as it travels (the fields of mls::testing::Observation, observe.hpp).
struct ObservationRecord {
  std::string label;
  std::string kind;  ///< "f64", "i64", "bool", "text", "tensor"
  std::string text;
  std::vector<std::int64_t> shape, strides;
  std::int64_t offset = 0;
  std::vector<double> values;
  double rtol = 0, atol = 0;
  /// How many values follow: every value travels (the grader compares them all, streaming, and
  /// bounds the channel's size instead: a larger stream is an OUTPUT_LIMIT).
  std::int64_t count = 0;
};

/// Escapes '\\', '\t', '\n', '\r' (so a field never holds a separator or a line break).
inline std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      default: out += c;
    }
  }
  return out;
}
inline std::string unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    char c = s[++i];
    out += c == 't' ? '\t' : c == 'n' ? '\n' : c == 'r' ? '\r' : c;
  }
  return out;
}

/// A line of the channel.
inline std::string line(std::string_view nonce, std::string_view verb, std::string_view payload = {}) {
  std::string l;
  l.reserve(nonce.size() + verb.size() + payload.size() + 3);
  l.append(nonce).append(" ").append(verb);
  if (!payload.empty()) l.append(" ").append(escape(payload));
  l += '\n';
  return l;
}

/// Splits one channel line (without its '\n'); false unless it carries `nonce`.
inline bool parse_line(std::string_view l, std::string_view nonce, std::string& verb, std::string& payload) {
  if (nonce.empty() || l.size() < nonce.size() + 2 || l.substr(0, nonce.size()) != nonce || l[nonce.size()] != ' ')
    return false;
  l.remove_prefix(nonce.size() + 1);
  std::size_t sp = l.find(' ');
  verb = std::string(l.substr(0, sp));
  payload = sp == std::string_view::npos ? "" : unescape(l.substr(sp + 1));
  return true;
}

namespace detail {
/// Appends `v` in the shortest text that reads back to the same double (std::to_chars): exact,
/// and several times faster and shorter than "%.17g" (an observation may hold millions).
inline void append_num(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "nan";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "inf" : "-inf";
    return;
  }
  char buf[40];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}
inline std::string num(double v) {
  std::string s;
  append_num(s, v);
  return s;
}
inline std::string ints(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}
inline std::vector<std::string_view> fields(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t b = 0;
  while (true) {
    std::size_t e = s.find(sep, b);
    out.push_back(s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) return out;
    b = e + 1;
  }
}
inline bool parse_int(std::string_view s, std::int64_t& v) {
  std::string t(s);
  char* end = nullptr;
  v = std::strtoll(t.c_str(), &end, 10);
  return !t.empty() && end && *end == '\0';
}
inline bool parse_double(std::string_view s, double& v) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);  // exact, no locale, no allocation
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}
inline bool parse_ints(std::string_view s, std::vector<std::int64_t>& out) {
  out.clear();
  if (s.empty()) return true;
  for (auto f : fields(s, ',')) {
    std::int64_t v;
    if (!parse_int(f, v)) return false;
    out.push_back(v);
  }
  return true;
}
}  // namespace detail

/// The OBS payload: tab-separated label, kind, text (both escaped), shape, strides, offset,
/// rtol, atol, count, then the values (space-separated, the shortest exact text: std::to_chars).
inline std::string encode_observation(const ObservationRecord& o) {
  std::string s;
  s.reserve(64 + o.label.size() + o.text.size() + 24 * o.values.size());
  s += escape(o.label) + '\t' + escape(o.kind) + '\t' + escape(o.text) + '\t' + detail::ints(o.shape) + '\t' +
                  detail::ints(o.strides) + '\t' + std::to_string(o.offset) + '\t' + detail::num(o.rtol) + '\t' +
                  detail::num(o.atol) + '\t' + std::to_string(o.values.size()) + '\t';
  for (std::size_t i = 0; i < o.values.size(); ++i) {
    if (i) s += ' ';
    detail::append_num(s, o.values[i]);
  }
  return s;
}

/// Inverse of `encode_observation`; false for a malformed record.
inline bool decode_observation(std::string_view s, ObservationRecord& o) {
  auto f = detail::fields(s, '\t');
  if (f.size() != 10) return false;
  o = ObservationRecord{};
  o.label = unescape(f[0]);
  o.kind = unescape(f[1]);
  o.text = unescape(f[2]);
  if (!detail::parse_ints(f[3], o.shape) || !detail::parse_ints(f[4], o.strides) || !detail::parse_int(f[5], o.offset) ||
      !detail::parse_double(f[6], o.rtol) || !detail::parse_double(f[7], o.atol) || !detail::parse_int(f[8], o.count))
    return false;
  if (!f[9].empty())
    for (auto v : detail::fields(f[9], ' ')) {
      double d;
      if (!detail::parse_double(v, d)) return false;
      o.values.push_back(d);
    }
  return true;
}

/// The grader's channel input: the nonce line, then the salt line when `salt` is not 0.
inline std::string channel_input(std::string_view nonce, std::uint64_t salt) {
  std::string s(nonce);
  if (salt != 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(salt));
    s += "\n" + std::string(kSaltPrefix) + buf;
  }
  return s;
}

/// Parses what the listener read from <in>: nonce (first line) and salt (0 when absent).
inline void parse_channel_input(std::string_view in, std::string& nonce, std::uint64_t& salt) {
  salt = 0;
  auto lines = detail::fields(in, '\n');
  nonce = lines.empty() ? "" : std::string(lines[0]);
  for (std::size_t i = 1; i < lines.size(); ++i)
    if (lines[i].substr(0, kSaltPrefix.size()) == kSaltPrefix)
      salt = std::strtoull(std::string(lines[i].substr(kSaltPrefix.size())).c_str(), nullptr, 16);
}

}  // namespace mls::grader_protocol
