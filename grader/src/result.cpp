#include "mls/grader/result.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "mls/common/error.hpp"
#include "mls/grader/util.hpp"

namespace mls::grader {

const char* to_string(Outcome o) {
  switch (o) {
    case Outcome::Pass: return "PASS";
    case Outcome::Fail: return "FAIL";
    case Outcome::Crash: return "CRASH";
    case Outcome::Timeout: return "TIMEOUT";
    case Outcome::Memory: return "MEMORY";
    case Outcome::OutputLimit: return "OUTPUT_LIMIT";
    case Outcome::NoResult: return "NO_RESULT";
    case Outcome::NotImplemented: return "NOT_IMPLEMENTED";
    case Outcome::Skipped: return "SKIPPED";
  }
  return "NO_RESULT";
}

Outcome outcome_from_string(std::string_view s) {
  for (Outcome o : {Outcome::Pass, Outcome::Fail, Outcome::Crash, Outcome::Timeout, Outcome::Memory,
                    Outcome::OutputLimit, Outcome::NoResult, Outcome::NotImplemented, Outcome::Skipped})
    if (s == to_string(o)) return o;
  mls::fail("unknown outcome '", s, "'");
}

double LabResult::score() const {
  double s = 0;
  for (const auto& t : tests)
    if (t.counts()) s += t.score;
  return round_points(s);
}
double LabResult::max_score() const {
  double s = 0;
  for (const auto& t : tests)
    if (t.counts()) s += t.max_score;
  return round_points(s);
}
double LabResult::uncounted_points() const {
  double s = 0;
  for (const auto& t : tests)
    if (!t.counts()) s += t.max_score;
  return round_points(s);
}
int LabResult::count(Outcome o) const {
  return static_cast<int>(std::count_if(tests.begin(), tests.end(), [o](const TestResult& t) { return t.outcome == o; }));
}

// ---- XML ---------------------------------------------------------------------------------------

namespace {

std::string decode_entities(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    std::size_t semi = s.find(';', i);
    if (semi == std::string_view::npos || semi - i > 10) {
      out += '&';
      continue;
    }
    std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "lt") out += '<';
    else if (ent == "gt") out += '>';
    else if (ent == "amp") out += '&';
    else if (ent == "quot") out += '"';
    else if (ent == "apos") out += '\'';
    else if (!ent.empty() && ent[0] == '#') {
      unsigned long v = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X')
                            ? std::strtoul(std::string(ent.substr(2)).c_str(), nullptr, 16)
                            : std::strtoul(std::string(ent.substr(1)).c_str(), nullptr, 10);
      out += (v > 0 && v < 128) ? static_cast<char>(v) : '?';
    } else {
      out += '&';
      continue;
    }
    i = semi;
  }
  return out;
}

struct Tag {
  std::string name;
  bool closing = false, self_closing = false;
  std::vector<std::pair<std::string, std::string>> attrs;
  std::string attr(const std::string& k) const {
    for (const auto& [a, v] : attrs)
      if (a == k) return v;
    return "";
  }
};

Tag parse_tag(std::string_view body) {
  Tag t;
  std::size_t i = 0;
  if (!body.empty() && body[0] == '/') {
    t.closing = true;
    i = 1;
  }
  if (!body.empty() && body.back() == '/') {
    t.self_closing = true;
    body.remove_suffix(1);
  }
  std::size_t e = i;
  while (e < body.size() && !std::isspace(static_cast<unsigned char>(body[e]))) ++e;
  t.name = std::string(body.substr(i, e - i));
  i = e;
  while (i < body.size()) {
    while (i < body.size() && std::isspace(static_cast<unsigned char>(body[i]))) ++i;
    std::size_t eq = body.find('=', i);
    if (eq == std::string_view::npos) break;
    std::string key(trim(body.substr(i, eq - i)));
    std::size_t q = eq + 1;
    if (q >= body.size() || (body[q] != '"' && body[q] != '\'')) break;
    char quote = body[q];
    std::size_t end = body.find(quote, q + 1);
    if (end == std::string_view::npos) break;
    t.attrs.emplace_back(key, decode_entities(body.substr(q + 1, end - q - 1)));
    i = end + 1;
  }
  return t;
}

}  // namespace

CatchXml parse_catch_xml(std::string_view text) {
  CatchXml x;
  std::vector<std::string> stack;
  CatchXmlCase* current = nullptr;
  bool expr_failed = false;
  std::string capture;           // text of the element whose content we keep
  std::string capture_what;
  std::string pending_original;
  // The INFO(...) messages Catch2 prints (as <Info>) before the failed assertion they explain,
  // e.g. lab 1's "sum N=2 ...: element 0: got 1.293907, want 2.255238" before `CHECK(ok_)`.
  std::vector<std::string> pending_info;
  auto with_info = [&](std::string s) {
    std::string info;
    for (const auto& m : pending_info) info += (info.empty() ? "" : "; ") + m;
    pending_info.clear();
    return info.empty() ? s : info + (s.empty() ? "" : ": " + s);
  };
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t lt = text.find('<', i);
    std::string_view chunk = text.substr(i, (lt == std::string_view::npos ? text.size() : lt) - i);
    if (!capture_what.empty()) capture += decode_entities(chunk);
    if (lt == std::string_view::npos) break;
    if (text.substr(lt, 4) == "<!--") {
      std::size_t end = text.find("-->", lt);
      i = end == std::string_view::npos ? text.size() : end + 3;
      continue;
    }
    if (text.substr(lt, 2) == "<?" || text.substr(lt, 2) == "<!") {
      std::size_t end = text.find('>', lt);
      i = end == std::string_view::npos ? text.size() : end + 1;
      continue;
    }
    std::size_t gt = text.find('>', lt);
    if (gt == std::string_view::npos) break;
    Tag t = parse_tag(text.substr(lt + 1, gt - lt - 1));
    i = gt + 1;
    if (t.name.empty()) continue;
    if (!t.closing) {
      if (t.name == "TestCase") {
        x.cases.push_back({});
        current = &x.cases.back();
        current->name = t.attr("name");
      } else if (t.name == "OverallResult" && current) {
        current->has_result = true;
        current->success = t.attr("success") == "true";
      } else if (t.name == "Expression" && current) {
        expr_failed = t.attr("success") == "false";
        pending_original.clear();
      } else if (current && ((expr_failed && (t.name == "Original" || t.name == "Expanded")) ||
                             t.name == "Exception" || t.name == "FatalErrorCondition" || t.name == "Failure" ||
                             t.name == "Warning" || t.name == "Info")) {
        capture_what = t.name;
        capture.clear();
      }
      if (t.self_closing) {
        if (!capture_what.empty() && capture_what == t.name) capture_what.clear();
        continue;
      }
      stack.push_back(t.name);
    } else {
      if (!capture_what.empty() && t.name == capture_what) {
        std::string s(trim(capture));
        if (capture_what == "Original") {
          pending_original = s;
        } else if (capture_what == "Info") {
          if (pending_info.size() < 8) pending_info.push_back(s.substr(0, 2000));
        } else if (capture_what == "Warning" && current) {
          current->warnings.push_back(s);
        } else if (capture_what == "Expanded" && current) {
          // With an INFO message, the message says what differed; an expansion that is only a
          // truth value (`CHECK(ok_)` expands to "false") adds nothing to it.
          if (!pending_info.empty() && (s == "false" || s == "true" || s == pending_original))
            current->failures.push_back(with_info(""));
          else
            current->failures.push_back(
                with_info(pending_original + (s != pending_original ? "  with expansion: " + s : "")));
        } else if (current) {
          current->failures.push_back(with_info(capture_what + ": " + s));
        }
        capture_what.clear();
      }
      if (t.name == "Expression") {
        expr_failed = false;
        pending_info.clear();
      }
      if (t.name == "TestCase") current = nullptr;
      if (t.name == "Catch") x.complete = true;
      while (!stack.empty()) {
        bool match = stack.back() == t.name;
        stack.pop_back();
        if (match) break;
      }
    }
  }
  return x;
}

// ---- the result channel, decoded as it arrives ---------------------------------------------------

namespace gp = grader_protocol;

bool ValueSample::keep(std::size_t index, std::int64_t count, std::int64_t k) const {
  if (secret == 0 || count <= kWhole || k < kEdge || k >= count - kEdge) return true;
  // splitmix64's finaliser over the secret, the observation and the position.
  std::uint64_t z = secret ^ (static_cast<std::uint64_t>(index) * 0x9E3779B97F4A7C15ull) ^
                    (static_cast<std::uint64_t>(k) * 0xD1B54A32D192ED03ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z % kRate == 0;
}

std::size_t ValueSample::capacity(std::int64_t count) {
  if (count <= kWhole) return static_cast<std::size_t>(std::max<std::int64_t>(count, 0));
  return static_cast<std::size_t>(2 * kEdge + count / static_cast<std::int64_t>(kRate) + 4096);
}

ValueSample ValueSample::drawn() {
  std::uint64_t s = std::strtoull(random_hex(8).c_str(), nullptr, 16);
  return ValueSample{s == 0 ? 1 : s};
}

void StreamRecorder::begin(const gp::ObservationRecord& head) {
  stream.push_back(head);
  stream.back().values.clear();  // a header carries none (feed() hands over whole records)
  // As many as announced, or sampled (up to 16M: a header's count is only a claim), so a large
  // observation is held once, not in a vector that doubles.
  stream.back().values.reserve(std::min<std::size_t>(ValueSample::capacity(head.count), std::size_t{1} << 24));
  open_ = true;
  k_ = 0;
  ++index_;
}
void StreamRecorder::value(double v) {
  if (!open_) return;
  gp::ObservationRecord& o = stream.back();
  if (sample_.keep(index_ - 1, o.count, k_++)) o.values.push_back(v);
}
void StreamRecorder::end(bool ok) {
  if (open_ && !ok) {
    stream.pop_back();
    ++bad;
  }
  open_ = false;
}

ChannelDecoder::ChannelDecoder(std::string nonce, ObservationConsumer* consumer, std::size_t max_header)
    : nonce_(std::move(nonce)), consumer_(consumer), max_header_(max_header) {}

void ChannelDecoder::feed(std::string_view bytes) {
  for (char c : bytes) byte(c);
}

void ChannelDecoder::finish() {
  if (mode_ != Mode::Head || !head_.empty()) end_line();
}

namespace {
/// The longest head a line can have: "<nonce> <VERB>" with the longest verb.
constexpr std::size_t kMaxVerb = 8;
/// The longest payload of a non-OBS line kept (a test name).
constexpr std::size_t kMaxShort = 64u << 10;
/// The longest value token ("%.17g" needs 24).
constexpr std::size_t kMaxToken = 40;
}  // namespace

void ChannelDecoder::byte(char c) {
  if (c == '\n') {
    end_line();
    return;
  }
  switch (mode_) {
    case Mode::Skip: return;
    case Mode::Head:
      if (c == ' ' && head_.size() > nonce_.size()) {
        head_done(false);
        return;
      }
      head_ += c;
      if (head_.size() > nonce_.size() + 1 + kMaxVerb) {
        ++report_.dropped;
        mode_ = Mode::Skip;
      }
      return;
    case Mode::Short:
      if (payload_.size() < kMaxShort) payload_ += c;
      else {
        ++report_.dropped;
        mode_ = Mode::Skip;
      }
      return;
    case Mode::Obs:
      // The line's own escaping undone here; the record's fields keep theirs.
      if (esc_) {
        esc_ = false;
        obs_char(c == 't' ? '\t' : c == 'n' ? '\n' : c == 'r' ? '\r' : c);
      } else if (c == '\\') {
        esc_ = true;
      } else {
        obs_char(c);
      }
      return;
  }
}

/// "<nonce> <VERB>" is complete (a space or the line's end follows): choose how to read the rest.
void ChannelDecoder::head_done(bool at_end) {
  const bool ours = !nonce_.empty() && head_.size() > nonce_.size() + 1 && head_.compare(0, nonce_.size(), nonce_) == 0 &&
                    head_[nonce_.size()] == ' ';
  if (!ours) {
    mode_ = Mode::Skip;
    return;
  }
  const std::string_view verb = std::string_view(head_).substr(nonce_.size() + 1);
  if (verb == gp::kObs && !at_end) {
    mode_ = Mode::Obs;
    esc_ = bad_ = begun_ = space_ = false;
    field_ = 0;
    header_bytes_ = 0;
    for (auto& f : fields_) f.clear();
    token_.clear();
    announced_ = seen_ = 0;
    ++report_.records;
    return;
  }
  mode_ = Mode::Short;
  payload_.clear();
}

void ChannelDecoder::obs_char(char u) {
  if (bad_) return;
  if (field_ < 9) {
    if (u == '\t') {
      if (++field_ == 9) header_done();
      return;
    }
    fields_[field_] += u;
    if (++header_bytes_ > max_header_) {
      bad_ = true;
      ++report_.malformed;
      if (consumer_) consumer_->malformed();
    }
    return;
  }
  // The values: single spaces between tokens.
  if (u == ' ') {
    if (token_.empty()) bad_ = true;
    else flush_value();
    space_ = true;
    return;
  }
  if (u == '\t' || token_.size() >= kMaxToken) {
    bad_ = true;
    return;
  }
  space_ = false;
  token_ += u;
}

void ChannelDecoder::header_done() {
  gp::ObservationRecord h;
  h.label = gp::unescape(fields_[0]);
  h.kind = gp::unescape(fields_[1]);
  h.text = gp::unescape(fields_[2]);
  using namespace gp::detail;
  if (!parse_ints(fields_[3], h.shape) || !parse_ints(fields_[4], h.strides) || !parse_int(fields_[5], h.offset) ||
      !parse_double(fields_[6], h.rtol) || !parse_double(fields_[7], h.atol) || !parse_int(fields_[8], h.count) ||
      h.count < 0) {
    bad_ = true;
    ++report_.malformed;
    if (consumer_) consumer_->malformed();
    return;
  }
  for (auto& f : fields_) std::string().swap(f);
  announced_ = h.count;
  begun_ = true;
  if (consumer_) consumer_->begin(h);
}

void ChannelDecoder::flush_value() {
  ++seen_;
  if (consumer_) {  // without a consumer a value is only counted
    double v;
    if (!gp::detail::parse_double(token_, v)) {
      bad_ = true;
      return;
    }
    consumer_->value(v);
  }
  token_.clear();
}

void ChannelDecoder::end_line() {
  switch (mode_) {
    case Mode::Head:
      if (!head_.empty()) head_done(true);
      if (mode_ != Mode::Short) break;
      [[fallthrough]];
    case Mode::Short: {
      const std::string verb = head_.substr(nonce_.size() + 1);
      std::string name = gp::unescape(payload_);
      auto keep = [&](std::vector<std::string>& v) {
        if (v.size() < ChannelReport::kMaxNames) v.push_back(std::move(name));
        else ++report_.dropped;
      };
      if (verb == gp::kPass) keep(report_.passed);
      else if (verb == gp::kFail) keep(report_.failed);
      else if (verb == gp::kName) keep(report_.listed);
      else if (verb == gp::kExit) keep(report_.exited);
      else if (verb == gp::kEnd) report_.ended = true;
      break;
    }
    case Mode::Obs:
      if (esc_ && !bad_) obs_char('\\');  // a lone backslash at the end stays one
      if (!bad_ && field_ == 9 && !token_.empty()) flush_value();
      if (!bad_ && space_) bad_ = true;  // a trailing space
      if (begun_) {
        if (consumer_) consumer_->end(!bad_ && seen_ == announced_);
        if (bad_ || seen_ != announced_) ++report_.malformed;
      } else if (!bad_) {  // the header never ended
        ++report_.malformed;
        if (consumer_) consumer_->malformed();
      }
      break;
    case Mode::Skip: break;
  }
  mode_ = Mode::Head;
  head_.clear();
  payload_.clear();
}

ChannelReport parse_channel(std::string_view text, std::string_view nonce) {
  StreamRecorder rec;
  ChannelDecoder d{std::string(nonce), &rec};
  d.feed(text);
  d.finish();
  ChannelReport r = std::move(d.report());
  r.observations = std::move(rec.stream);
  return r;
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (segmentation fault)";
    case SIGABRT: return "SIGABRT (abort)";
    case SIGFPE: return "SIGFPE (arithmetic error)";
    case SIGBUS: return "SIGBUS (bus error)";
    case SIGILL: return "SIGILL (illegal instruction)";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU (CPU time limit)";
    case SIGXFSZ: return "SIGXFSZ (file size limit)";
    case SIGPIPE: return "SIGPIPE";
    case SIGTRAP: return "SIGTRAP";
    default: return "signal " + std::to_string(sig);
  }
}

std::string escape_test_name(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == ',' || c == '[' || c == ']' || c == '"' || c == '~' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

namespace {
bool contains(std::string_view hay, std::string_view needle) { return hay.find(needle) != std::string_view::npos; }
bool has_memory_marker(std::string_view s) {
  return contains(s, "std::bad_alloc") || contains(s, "bad_alloc") || contains(s, "out of memory") ||
         contains(s, "allocation-size-too-big") || contains(s, "requested allocation size") ||
         contains(s, "Cannot allocate memory") || contains(s, "allocator is out of memory");
}
std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : std::string(sep)) + s;
  return out;
}
}  // namespace

bool machine_has_gpu() {
  if (const char* e = std::getenv("MLS_GRADER_GPU"); e && *e) return std::string_view(e) != "0";
  for (int i = 0; i < 16; ++i)
    if (::access(("/dev/nvidia" + std::to_string(i)).c_str(), F_OK) == 0) return true;
  return false;
}

bool machine_has_mpirun() {
  if (const char* e = std::getenv("MLS_GRADER_MPI"); e && *e) return std::string_view(e) != "0";
  const char* path = std::getenv("PATH");
  for (const auto& dir : split(path ? path : "/usr/bin:/bin", ':'))
    if (!dir.empty() && ::access((dir + "/mpirun").c_str(), X_OK) == 0) return true;
  return false;
}

TestResult classify(const SandboxResult& run, std::string_view test_name, std::string_view nonce, SkipPolicy skip) {
  return classify(run, test_name, parse_channel(run.channel, nonce), skip);
}

TestResult classify(const SandboxResult& run, std::string_view test_name, const ChannelReport& ch, SkipPolicy skip) {
  TestResult t;
  t.name = std::string(test_name);
  t.wall_s = run.wall_s;
  CatchXml xml = parse_catch_xml(run.out);
  // The report of exactly one test case, ours: a second one of the same name (printed by the
  // code under test) makes the XML say nothing.
  const CatchXmlCase* xc = nullptr;
  int same_name = 0;
  for (const auto& c : xml.cases)
    if (c.name == test_name) {
      xc = &c;
      ++same_name;
    }
  if (same_name > 1 || xml.cases.size() > 1) xc = nullptr;
  std::string failures = xc ? join(xc->failures, "\n") : "";
  std::string tail = sanitize_text(head_tail(run.err, 1500, 1500), 4000);
  auto with_stderr = [&](std::string msg) {
    if (!trim(run.err).empty()) msg += "\nstderr:\n" + tail;
    return msg;
  };
  bool listed_pass = std::count(ch.passed.begin(), ch.passed.end(), std::string(test_name)) == 1 &&
                     ch.passed.size() == 1 && ch.failed.empty();
  bool listed_fail = std::find(ch.failed.begin(), ch.failed.end(), std::string(test_name)) != ch.failed.end();

  if (!run.started) {
    t.outcome = Outcome::NoResult;
    t.message = "the test could not be started: " + run.error;
  } else if (run.channel_limit) {
    t.outcome = Outcome::OutputLimit;
    t.message = "wrote more than the result channel's limit (" + std::to_string(run.channel_bytes >> 20) +
                " MiB seen); the process group was killed";
  } else if (run.output_limit || run.signal == SIGXFSZ) {
    t.outcome = Outcome::OutputLimit;
    t.message = run.output_limit ? "printed more than the output limit (" + std::to_string(run.stdout_bytes + run.stderr_bytes) +
                                       " bytes seen); the process group was killed"
                                 : "wrote a file over the file size limit (SIGXFSZ)";
  } else if (run.timed_out || run.signal == SIGXCPU) {
    t.outcome = Outcome::Timeout;
    t.message = run.timed_out ? "did not finish within the time limit; the process group was killed"
                              : "used more CPU time than allowed (SIGXCPU)";
  } else if (listed_pass && ch.ended && run.exited && run.exit_code == 0 && xml.complete && xc && xc->has_result &&
             xc->success) {
    t.outcome = Outcome::Pass;
    std::string said;
    for (const auto& w : xc->warnings)
      if (contains(w, kGpuSkipMarker)) said = w;
    // What the test said after the marker, e.g. "(cudaGetDeviceCount: no CUDA-capable device)".
    // The marker itself is not repeated: CTest reads "SKIPPED:" in any output as a skip.
    std::string detail(said.empty() ? "" : trim(said.substr(said.find(kGpuSkipMarker) + kGpuSkipMarker.size())));
    if (!detail.empty()) detail = " " + detail;
    if (!said.empty() && skip == SkipPolicy::Allow) {
      t.outcome = Outcome::Skipped;
      t.message = "skipped: no GPU on this machine" + detail + "; it scores 0 and its points are left out of this "
                  "run's maximum";
    } else if (!said.empty() && skip == SkipPolicy::Refuse) {
      t.outcome = Outcome::Fail;
      t.message = "the test reported no GPU" + detail + ", but this machine has a GPU: a GPU test must run where a GPU is";
    }
  } else if (has_memory_marker(failures) || has_memory_marker(run.err) ||
             (!listed_fail && has_memory_marker(run.out))) {
    t.outcome = Outcome::Memory;
    t.message = with_stderr("ran out of memory (the address-space limit was reached)" +
                            (failures.empty() ? std::string() : "\n" + failures));
  } else if (contains(failures, "not implemented:") || (!xc && contains(run.err, "not implemented:"))) {
    t.outcome = Outcome::NotImplemented;
    t.message = failures.empty() ? "not implemented" : failures;
  } else if (!ch.exited.empty()) {
    t.outcome = Outcome::NoResult;
    t.message = "exit() was called while the test was running (exit status " + std::to_string(run.exit_code) +
                "); a test passes only when its body returns";
  } else if (run.signal != 0) {
    t.outcome = Outcome::Crash;
    t.message = with_stderr("crashed: killed by " + signal_name(run.signal) +
                            (failures.empty() ? std::string() : "\n" + failures));
  } else if (listed_fail) {
    t.outcome = Outcome::Fail;
    t.message = failures.empty() ? "the test failed (no assertion text)" : failures;
  } else if (listed_pass) {
    t.outcome = Outcome::NoResult;
    t.message = "the test reported success, but the process " +
                std::string(run.exit_code != 0 ? "exited with code " + std::to_string(run.exit_code)
                                               : "did not finish the run (no complete report)") +
                " after it; a pass needs a clean exit";
  } else {
    t.outcome = Outcome::NoResult;
    t.message = with_stderr("the test did not report back: the process ended (exit code " + std::to_string(run.exit_code) +
                            ") before the test case finished, e.g. exit() or _exit() in student code. "
                            "Output claiming success is not trusted.");
  }
  t.message = sanitize_text(t.message, 4000);
  return t;
}

}  // namespace mls::grader
