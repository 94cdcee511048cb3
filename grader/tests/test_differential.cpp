// Differential verdicts: the result-channel protocol, the stream comparison, and the adversarial
// cases of issue 15 — each attack is the MLS_TODO stubs plus a way to forge the student process's
// own report. Each is graded twice: with the old verdict (the student process's report, for the
// table in handouts/README.md) and with the differential one, which must score it 0.
#include <catch2/catch.hpp>
#include <cstdio>

#include "helpers.hpp"
#include "mls/common/grader_protocol.hpp"
#include "mls/common/rng.hpp"
#include "mls/grader/differential.hpp"
#include "mls/grader/report.hpp"

using namespace mls::grader;
namespace gp = mls::grader_protocol;

namespace {
Observation obs(const std::string& label, std::vector<double> v, double rtol = 0, double atol = 0) {
  Observation o;
  o.label = label;
  o.kind = "f64";
  o.values = std::move(v);
  o.count = static_cast<std::int64_t>(o.values.size());
  o.rtol = rtol;
  o.atol = atol;
  return o;
}
ReferenceStream ref_of(Stream s) {
  ReferenceStream r;
  r.unstable.assign(s.size(), false);
  r.stream = std::move(s);
  return r;
}
}  // namespace

TEST_CASE("protocol: an observation survives the channel exactly", "[grader]") {
  Observation o;
  o.label = "softmax\tof\nx \\ y";
  o.kind = "tensor";
  o.text = "float32";
  o.shape = {2, 3};
  o.strides = {3, 1};
  o.offset = 4;
  o.values = {0.1, -0.0, 1e-300, std::nan(""), INFINITY, 1.0 / 3.0};
  o.count = 6;
  o.rtol = 1e-6;
  o.atol = 1e-7;
  std::string line = gp::line("abc", gp::kObs, gp::encode_observation(o));
  CHECK(line.find('\n') == line.size() - 1);
  ChannelReport ch = parse_channel(line + "zzz OBS forged\n", "abc");
  REQUIRE(ch.observations.size() == 1);
  const Observation& g = ch.observations[0];
  CHECK(g.label == o.label);
  CHECK(g.shape == o.shape);
  CHECK(g.strides == o.strides);
  CHECK(g.offset == 4);
  CHECK(g.values[2] == 1e-300);
  CHECK(std::isnan(g.values[3]));
  CHECK(g.values[5] == 1.0 / 3.0);
  CHECK(compare_streams(ref_of({o}), {g}).empty());
  std::string nonce;
  std::uint64_t salt = 0;
  gp::parse_channel_input(gp::channel_input("n0nce", 0x1234abcdull) + "\n", nonce, salt);
  CHECK(nonce == "n0nce");
  CHECK(salt == 0x1234abcdull);
}

TEST_CASE("protocol: the salt changes every Rng stream, 0 changes nothing", "[grader]") {
  const std::uint32_t plain = mls::Rng(7, "x").next_u32();
  mls::set_rng_salt(42);
  const std::uint32_t salted = mls::Rng(7, "x").next_u32();
  mls::set_rng_salt(0);
  CHECK(salted != plain);
  CHECK(mls::Rng(7, "x").next_u32() == plain);
}

TEST_CASE("differential: the first differing observation is named with expected and got", "[grader]") {
  ReferenceStream want = ref_of({obs("loss", {1.0}, 1e-3), obs("grad", {1, 2, 3})});
  CHECK(compare_streams(want, {obs("loss", {1.0005}), obs("grad", {1, 2, 3})}).empty());
  CHECK_THAT(compare_streams(want, {obs("loss", {1.01}), obs("grad", {1, 2, 3})}),
             Catch::Contains("observation 1 of 2, 'loss'") && Catch::Contains("expected 1, got 1.01"));
  CHECK_THAT(compare_streams(want, {obs("loss", {1.0}), obs("grad", {1, 2, 4})}),
             Catch::Contains("value [2]: expected 3, got 4 (exact)"));
  CHECK_THAT(compare_streams(want, {obs("loss", {1.0})}), Catch::Contains("missing"));
  CHECK_THAT(compare_streams(want, {obs("loss", {1.0}), obs("other", {1, 2, 3})}), Catch::Contains("another path"));
  // The student's own tolerance is ignored: only the reference's counts.
  CHECK_FALSE(compare_streams(want, {obs("loss", {1.0}), obs("grad", {1, 2, 3.5}, 1, 1)}).empty());
  // Nondeterminism between two reference runs widens the tolerance to twice the spread.
  std::string problem;
  auto merged = merge_reference_runs({obs("t", {10.0})}, {obs("t", {10.5})}, problem);
  REQUIRE(merged);
  CHECK(merged->nondeterministic == 1);
  CHECK(compare_streams(*merged, {obs("t", {10.9})}).empty());
  CHECK_FALSE(compare_streams(*merged, {obs("t", {11.1})}).empty());
  CHECK_FALSE(merge_reference_runs({obs("t", {1})}, {}, problem));
}

namespace {
struct Scores {
  double before = 0, after = 0, max = 0;
};
/// Grades `name` with the old verdict and with the differential one; prints a table row.
Scores grade_both(const std::string& name) {
  Manifest m = testing::fixture_manifest();
  testing::ScopedTmpdir tmp;
  GradeOptions go = testing::fixture_grade_options();
  go.differential = false;
  LabResult before = grade_submission(m, testing::submission(name), go);
  go.differential = true;
  LabResult after = grade_submission(m, testing::submission(name), go);
  INFO(format_table(after, m, false) << format_failures(after) << after.output);
  std::printf("[adversarial table] %-28s before %5.1f%%  after %5.1f%%\n", name.c_str(),
              100 * before.score() / before.max_score(), 100 * after.score() / after.max_score());
  // Built and failing every test, or rejected by the link audit before it was linked.
  if (!after.built) CHECK_THAT(after.headline, Catch::Contains("error: link audit:"));
  CHECK(after.count(Outcome::Pass) == 0);
  CHECK(testing::processes_mentioning(tmp.dir.string()) == 0);
  return {before.score(), after.score(), after.max_score()};
}
}  // namespace

TEST_CASE("adversarial: a static constructor that steals the nonce and writes PASS to every fd scores 0",
          "[grader][adversarial]") {
  CHECK(grade_both("attack_static_ctor").after == 0);
}
TEST_CASE("adversarial: a strong definition of the listener's inline send, with a forging static destructor, scores 0",
          "[grader][adversarial]") {
  CHECK(grade_both("attack_inline_override").after == 0);
}
TEST_CASE("adversarial: replacing every registered test body with a no-op scores 0", "[grader][adversarial]") {
  CHECK(grade_both("attack_registry_noop").after == 0);
}
TEST_CASE("adversarial: extra test cases in the lab's groups are ignored, the stubs score 0", "[grader][adversarial]") {
  CHECK(grade_both("attack_extra_tests").after == 0);
}
TEST_CASE("adversarial: interposing write() and an atexit exit(0) scores 0", "[grader][adversarial]") {
  CHECK(grade_both("attack_write_interpose").after == 0);
}
TEST_CASE("adversarial: forged observation records, PASS and END written to every fd 0..1023 before main score 0",
          "[grader][adversarial]") {
  CHECK(grade_both("attack_every_fd").after == 0);
}
TEST_CASE("adversarial: hijacking observe.hpp's sink and strongly defining its observe() to loosen every tolerance "
          "scores 0", "[grader][adversarial]") {
  CHECK(grade_both("attack_observe_sink").after == 0);
}
TEST_CASE("adversarial: answers hardcoded for the checks' inputs score 0 (salted inputs)", "[grader][adversarial]") {
  CHECK(grade_both("attack_hardcoded").after == 0);
}

TEST_CASE("adversarial: the reference scores 100% differentially, and a batch reuses one reference", "[grader][adversarial]") {
  Manifest m = testing::fixture_manifest();
  testing::ScopedTmpdir tmp;
  GradeOptions go = testing::fixture_grade_options();
  auto ref = prepare_reference(m, go);
  REQUIRE(ref->cases.size() == 7);
  int strong = 0;
  for (const auto& c : ref->cases)
    if (c.ok) strong += strong_count(c.stream.stream) > 0;
  CHECK(strong == 6);  // the GPU-style test is SKIPPED
  go.reference = ref;
  LabResult r = grade_submission(m, testing::submission("correct"), go);
  INFO(format_table(r, m, false) << format_failures(r) << r.output);
  CHECK(r.score() == r.max_score());
  CHECK(r.score() == 10);
  LabResult p = grade_submission(m, testing::submission("partial"), go);
  CHECK(p.score() == 4);
}

TEST_CASE("channel decoder: bounded, streaming, every value, malformed records counted", "[grader]") {
  Observation o = obs("x", {1, 2, 3});
  const std::string good = gp::line("N", gp::kObs, gp::encode_observation(o));
  // Fed one byte at a time, with foreign lines, an over-long head and a line without the nonce.
  std::string text = "zz OBS x\n" + std::string(100, 'q') + " PASS t\n" + good + "N PASS t\nN END";
  StreamRecorder rec;
  ChannelDecoder d("N", &rec);
  for (char c : text) d.feed(std::string_view(&c, 1));
  d.finish();
  REQUIRE(rec.stream.size() == 1);
  CHECK(rec.stream[0].values == std::vector<double>{1, 2, 3});
  CHECK(d.report().passed == std::vector<std::string>{"t"});
  CHECK(d.report().ended);
  // A count that lies, a bad value, a missing field: malformed, never a match.
  for (const std::string& bad : {std::string("N OBS x\\tf64\\t\\t\\t\\t0\\t0\\t0\\t5\\t1 2\n"),
                                 std::string("N OBS x\\tf64\\t\\t\\t\\t0\\t0\\t0\\t2\\t1 zz\n"),
                                 std::string("N OBS x\\tf64\\t\\t\\t0\\t0\\t0\\t2\n")}) {
    ChannelReport r = parse_channel(bad, "N");
    CHECK(r.observations.empty());
    CHECK(r.malformed == 1);
    const ReferenceStream want = ref_of({obs("x", {1, 2})});
    StreamComparator cmp(want);
    ChannelDecoder dc("N", &cmp);
    dc.feed(bad);
    dc.finish();
    CHECK_THAT(cmp.verdict(), Catch::Contains("malformed") || Catch::Contains("expected 2 value(s)"));
  }
  // A header over the bound is dropped without being held.
  ChannelDecoder big("N", nullptr, 1024);
  big.feed("N OBS " + std::string(1u << 20, 'a') + "\n");
  big.finish();
  CHECK(big.report().malformed == 1);
  // Thousands of PASS lines: counted, not kept.
  std::string many;
  for (int i = 0; i < 5000; ++i) many += "N PASS t\n";
  CHECK(parse_channel(many, "N").passed.size() == ChannelReport::kMaxNames);
}

TEST_CASE("stream comparator: every value, the first difference and how many more", "[grader]") {
  std::vector<double> want(200000, 1.0), got = want;
  got[199999] = 2;
  got[7] = 3;
  CHECK(compare_streams(ref_of({obs("v", want)}), {obs("v", want)}).empty());
  std::string d = compare_streams(ref_of({obs("v", want)}), {obs("v", got)});
  CHECK_THAT(d, Catch::Contains("value [7]: expected 1, got 3 (exact) (and 1 more of its 200000 values)"));
  std::string two = compare_streams(ref_of({obs("a", {1}), obs("b", {2})}), {obs("a", {0}), obs("b", {0})});
  CHECK_THAT(two, Catch::Contains("'a'") && Catch::Contains("1 more observation(s) differ"));
}

TEST_CASE("reference merger: the second run streamed in widens tolerances like the batch merge", "[grader]") {
  std::string problem;
  ReferenceMerger m({obs("t", {10.0, 1.0})});
  m.begin(obs("t", {10.5, 1.0}));
  m.value(10.5);
  m.value(1.0);
  m.end(true);
  auto r = m.result(problem);
  REQUIRE(r);
  CHECK(r->stream[0].atol == 1.0);
  CHECK(r->nondeterministic == 1);
  ReferenceMerger short_run({obs("t", {1})});
  CHECK_FALSE(short_run.result(problem));
  CHECK_THAT(problem, Catch::Contains("made 1 and 0 observations"));
}

TEST_CASE("reference merger: each nondeterministic observation says what differed between the two runs", "[grader]") {
  auto text = [](const std::string& label, const std::string& t) {
    Observation o;
    o.label = label;
    o.kind = "text";
    o.text = t;
    return o;
  };
  std::string problem;
  const std::string head = "cannot open '/tmp/mls-grader-run-abcdef/mls_lab1_err_";
  auto merged = merge_reference_runs(
      {obs("loss", {1.0, 2.0, 3.0}), text("path", head + "4242_0.npy'"), obs("same", {7})},
      {obs("loss", {1.0, 2.5, 3.0}), text("path", head + "5151_0.npy'"), obs("same", {7})}, problem);
  REQUIRE(merged);
  CHECK(merged->nondeterministic == 2);
  REQUIRE(merged->differences.size() == 2);
  CHECK(merged->differences[0] == "observation 1 of 3, 'loss' (f64): value [1]: 2 vs 2.5 (tolerance widened to atol 1)");
  // A text: both runs from a little before the first difference.
  CHECK(merged->differences[1] ==
        "observation 2 of 3, 'path' (text): \"...run-abcdef/mls_lab1_err_4242_0.npy'\" vs "
        "\"...run-abcdef/mls_lab1_err_5151_0.npy'\" (from character 54)");
  // At most kMaxDifferences lines, however many observations differ.
  Stream a, b;
  for (int i = 0; i < 9; ++i) {
    a.push_back(obs("v", {double(i)}));
    b.push_back(obs("v", {double(i) + 1}));
  }
  auto many = merge_reference_runs(a, b, problem);
  REQUIRE(many);
  CHECK(many->nondeterministic == 9);
  CHECK(many->differences.size() == ReferenceStream::kMaxDifferences);
}

namespace {
/// The reference of `run` as the grader keeps it: recorded with `sample`, the same run merged in.
ReferenceStream sampled_reference(const Stream& run, ValueSample sample) {
  StreamRecorder rec(sample);
  feed(rec, run);
  ReferenceMerger m(std::move(rec.stream), sample);
  feed(m, run);
  std::string problem;
  auto r = m.result(problem);
  REQUIRE(r);
  return std::move(*r);
}

std::string compare_sampled(const ReferenceStream& ref, const Stream& got) {
  StreamComparator c(ref);
  feed(c, got);
  return c.verdict();
}
}  // namespace

TEST_CASE("value sample: small observations whole, large ones at secret positions", "[grader]") {
  const ValueSample none{}, s{0x1234567887654321ull}, t{0x1111222233334444ull};
  const std::int64_t big = 8 * ValueSample::kWhole, edge = ValueSample::kEdge;
  std::int64_t kept_s = 0, same = 0;
  for (std::int64_t k = 0; k < ValueSample::kWhole; ++k) CHECK((s.keep(3, ValueSample::kWhole, k) && none.keep(3, big, k)));
  for (std::int64_t k = 0; k < edge; ++k) CHECK((s.keep(1, big, k) && s.keep(1, big, big - 1 - k)));  // both ends whole
  for (std::int64_t k = edge; k < big - edge; ++k) {
    kept_s += s.keep(0, big, k);
    same += s.keep(0, big, k) && t.keep(0, big, k);
  }
  // About one in kRate of the middle kept; another secret keeps other positions (~1/kRate^2).
  const double rate = static_cast<double>(kept_s) / static_cast<double>(big - 2 * edge);
  CHECK(rate > 0.8 / ValueSample::kRate);
  CHECK(rate < 1.2 / ValueSample::kRate);
  CHECK(same < kept_s / 8);
  CHECK(ValueSample::capacity(big) >= static_cast<std::size_t>(kept_s + 2 * edge));
  CHECK(ValueSample::drawn().secret != ValueSample::drawn().secret);
}

TEST_CASE("value sample: the grader keeps only sampled values, and a result wrong anywhere it cannot predict fails",
          "[grader]") {
  const ValueSample sample = ValueSample::drawn();
  const std::int64_t n = 1 << 22;
  std::vector<double> want(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) want[static_cast<std::size_t>(i)] = static_cast<double>(i % 1000) * 0.5;
  const ReferenceStream ref = sampled_reference({obs("y", want)}, sample);
  CHECK(ref.stream[0].count == n);
  CHECK(ref.stream[0].values.size() < static_cast<std::size_t>(n / 16));  // bounded memory
  CHECK(compare_sampled(ref, {obs("y", want)}).empty());
  // A submission right at both ends and at every 4099th value only (the old fixed sample) is caught.
  std::vector<double> lazy(static_cast<std::size_t>(n), 0.0);
  for (std::int64_t i = 0; i < n; ++i)
    if (i < ValueSample::kEdge || i >= n - ValueSample::kEdge || i % 4099 == 0)
      lazy[static_cast<std::size_t>(i)] = want[static_cast<std::size_t>(i)];
  CHECK_THAT(compare_sampled(ref, {obs("y", lazy)}), Catch::Contains("compared of 4194304 values"));
  // So is one wrong in 1% of the middle; the first difference is named at its real position.
  std::vector<double> few = want;
  for (std::int64_t i = ValueSample::kEdge + 5; i < n - ValueSample::kEdge; i += 100) few[static_cast<std::size_t>(i)] += 1;
  const std::string d = compare_sampled(ref, {obs("y", few)});
  CHECK_THAT(d, Catch::Contains("value ["));
  CHECK_THAT(d, Catch::Contains("got"));
  // And one wrong in the last value (a loop's remainder).
  std::vector<double> tail = want;
  tail.back() += 1;
  CHECK_THAT(compare_sampled(ref, {obs("y", tail)}), Catch::Contains("value [4194303]"));
  // Counts are compared as announced, not as kept.
  CHECK_THAT(compare_sampled(ref, {obs("y", std::vector<double>(static_cast<std::size_t>(n - 1), 0.0))}),
             Catch::Contains("expected 4194304 value(s), got 4194303"));
}
