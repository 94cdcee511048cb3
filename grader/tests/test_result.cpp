#include <signal.h>

#include <catch2/catch.hpp>

#include "mls/grader/result.hpp"
#include "mls/grader/util.hpp"

using namespace mls::grader;

namespace {
const char* kXmlPass =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Catch name=\"t\">\n  <Group name=\"t\">\n"
    "    <TestCase name=\"a &amp; b\" tags=\"[x]\" filename=\"f.cpp\" line=\"3\">\n"
    "      <OverallResult success=\"true\"/>\n    </TestCase>\n"
    "    <OverallResults successes=\"1\" failures=\"0\" expectedFailures=\"0\"/>\n  </Group>\n"
    "  <OverallResults successes=\"1\" failures=\"0\" expectedFailures=\"0\"/>\n</Catch>\n";
const char* kXmlFail =
    "<Catch name=\"t\"><Group name=\"t\"><TestCase name=\"m\" tags=\"[x]\">\n"
    "<Expression success=\"false\" type=\"REQUIRE\" filename=\"f.cpp\" line=\"9\">\n"
    "  <Original>\n    mul(3, 4) == 12\n  </Original>\n  <Expanded>\n    7 == 12\n  </Expanded>\n</Expression>\n"
    "<OverallResult success=\"false\"/></TestCase></Group></Catch>\n";
SandboxResult ran(std::string out, std::string channel, int code = 0) {
  SandboxResult r;
  r.started = true;
  r.exited = true;
  r.exit_code = code;
  r.out = std::move(out);
  r.channel = std::move(channel);
  return r;
}
}  // namespace

TEST_CASE("xml: Catch2 reports are parsed, entities decoded, assertion text kept", "[grader][result]") {
  CatchXml x = parse_catch_xml(kXmlPass);
  CHECK(x.complete);
  REQUIRE(x.cases.size() == 1);
  CHECK(x.cases[0].name == "a & b");
  CHECK(x.cases[0].success);
  CatchXml f = parse_catch_xml(kXmlFail);
  REQUIRE(f.cases.size() == 1);
  CHECK_FALSE(f.cases[0].success);
  REQUIRE(f.cases[0].failures.size() == 1);
  CHECK(f.cases[0].failures[0] == "mul(3, 4) == 12  with expansion: 7 == 12");
  CHECK_FALSE(parse_catch_xml("<Catch><Group><TestCase name=\"x\">").complete);
}

TEST_CASE("channel: only lines with the nonce count", "[grader][result]") {
  ChannelReport c = parse_channel("n1 PASS a b\nzz PASS c\nn1 FAIL d\nn1 NAME e\nn1 EXIT f\nn1 END\n", "n1");
  CHECK(c.passed == std::vector<std::string>{"a b"});
  CHECK(c.failed == std::vector<std::string>{"d"});
  CHECK(c.listed == std::vector<std::string>{"e"});
  CHECK(c.exited == std::vector<std::string>{"f"});
  CHECK(c.ended);
  CHECK_FALSE(parse_channel("n1 END\n", "").ended);
}

TEST_CASE("classify: a pass needs exit 0, complete XML and the nonce-stamped report", "[grader][result]") {
  CHECK(classify(ran(kXmlPass, "N PASS a & b\nN END\n"), "a & b", "N").outcome == Outcome::Pass);
  // Forged: XML says success but the channel is silent or has the wrong nonce.
  CHECK(classify(ran(kXmlPass, ""), "a & b", "N").outcome == Outcome::NoResult);
  CHECK(classify(ran(kXmlPass, "X PASS a & b\nX END\n"), "a & b", "N").outcome == Outcome::NoResult);
  // Passed, then a non-zero exit or no end of run.
  CHECK(classify(ran(kXmlPass, "N PASS a & b\nN END\n", 3), "a & b", "N").outcome == Outcome::NoResult);
  CHECK(classify(ran(kXmlPass, "N PASS a & b\n"), "a & b", "N").outcome == Outcome::NoResult);
  // Passed a different test.
  CHECK(classify(ran(kXmlPass, "N PASS other\nN END\n"), "a & b", "N").outcome == Outcome::NoResult);
  TestResult f = classify(ran(kXmlFail, "N FAIL m\nN END\n", 1), "m", "N");
  CHECK(f.outcome == Outcome::Fail);
  CHECK_THAT(f.message, Catch::Contains("7 == 12"));
  SandboxResult crash = ran("", "");
  crash.exited = false;
  crash.signal = SIGSEGV;
  CHECK(classify(crash, "m", "N").outcome == Outcome::Crash);
  SandboxResult slow = ran("", "");
  slow.timed_out = true;
  CHECK(classify(slow, "m", "N").outcome == Outcome::Timeout);
  SandboxResult loud = ran(kXmlPass, "N PASS a & b\nN END\n");
  loud.output_limit = true;
  CHECK(classify(loud, "a & b", "N").outcome == Outcome::OutputLimit);
  std::string ni = "<Catch><TestCase name=\"m\"><Exception filename=\"f\">not implemented: lab1: f</Exception>"
                   "<OverallResult success=\"false\"/></TestCase></Catch>";
  CHECK(classify(ran(ni, "N FAIL m\nN END\n", 1), "m", "N").outcome == Outcome::NotImplemented);
  std::string oom = "<Catch><TestCase name=\"m\"><Exception filename=\"f\">std::bad_alloc</Exception>"
                    "<OverallResult success=\"false\"/></TestCase></Catch>";
  CHECK(classify(ran(oom, "N FAIL m\nN END\n", 1), "m", "N").outcome == Outcome::Memory);
  CHECK(classify(ran("", "N EXIT m\n"), "m", "N").outcome == Outcome::NoResult);
  SandboxResult never;
  never.error = "boom";
  CHECK(classify(never, "m", "N").outcome == Outcome::NoResult);
}

TEST_CASE("names, outcomes and text helpers", "[grader][result]") {
  CHECK(escape_test_name("sum, with [brackets] and \"quotes\"") == "sum\\, with \\[brackets\\] and \\\"quotes\\\"");
  CHECK(escape_test_name("plain name") == "plain name");
  for (Outcome o : {Outcome::Pass, Outcome::Fail, Outcome::Crash, Outcome::Timeout, Outcome::Memory, Outcome::OutputLimit,
                    Outcome::NoResult, Outcome::NotImplemented})
    CHECK(outcome_from_string(to_string(o)) == o);
  CHECK(sanitize_text("a\x01" "b\tc\n\xff", 100) == "a?b\tc\n?");
  CHECK_THAT(sanitize_text(std::string(100, 'x'), 10), Catch::StartsWith("xxxxxxxxxx\n[... 90 more bytes cut]"));
  CHECK(head_tail("abcdefghij", 2, 2) == "ab\n[... 6 bytes left out ...]\nij");
  CHECK(head_tail("abc", 2, 2) == "abc");
  CHECK(signal_name(SIGSEGV) == "SIGSEGV (segmentation fault)");
  CHECK(fnv1a_hex("") == "cbf29ce484222325");
  CHECK(random_hex(16).size() == 32);
  CHECK(random_hex(16) != random_hex(16));
}
