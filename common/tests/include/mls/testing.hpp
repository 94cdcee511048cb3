#pragma once
/// Helpers shared by the test programs of every lab (linked through mls_catch_main).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <system_error>

#include <unistd.h>

#include "mls/common/error.hpp"
#include "mls/observe.hpp"

namespace mls::testing {

/// `text` with the temporary folder's path replaced by "<tmp>", and this process's id inside such
/// a path by "<pid>": an observation label that names a file the test made there is the same in
/// every run (mls-grader gives each run its own TMPDIR; without a PID namespace, at the `uid`
/// isolation level, each run also has another pid).
inline std::string without_temp_dir(std::string text) {
  std::error_code ec;
  std::string tmp = std::filesystem::temp_directory_path(ec).string();
  while (!ec && tmp.size() > 1 && tmp.back() == '/') tmp.pop_back();
  if (ec || tmp.size() <= 1) return text;
  for (std::size_t at = text.find(tmp); at != std::string::npos; at = text.find(tmp, at + 5)) text.replace(at, tmp.size(), "<tmp>");
  const std::string pid = std::to_string(::getpid());
  auto digit = [&](std::size_t i) { return i < text.size() && text[i] >= '0' && text[i] <= '9'; };
  for (std::size_t at = text.find("<tmp>/"); at != std::string::npos; at = text.find("<tmp>/", at + 1)) {
    std::size_t end = text.find_first_of(" '\"\n", at);
    if (end == std::string::npos) end = text.size();
    for (std::size_t p = text.find(pid, at); p != std::string::npos && p < end; p = text.find(pid, p + 1)) {
      if (digit(p - 1) || digit(p + pid.size())) continue;  // part of a longer number
      text.replace(p, pid.size(), "<pid>");
      end = end + 5 - pid.size();
    }
  }
  return text;
}

/// What an error check observes: the part of the message the check is about, a text (a strong
/// observation: the value the code produced, not a truth about it). "names '<needle>'" when the
/// message contains the needle, else the message itself (temporary paths as <tmp>), which then
/// differs from the reference build's and says what the submission wrote.
inline std::string error_observation(const std::string& message, const std::string& needle) {
  if (message.find(needle) != std::string::npos) return "names '" + without_temp_dir(needle) + "'";
  return "does not name it: " + without_temp_dir(message);
}

/// Runs `f` and requires an mls::Error whose message contains `needle`. A student function not
/// written yet throws mls::NotImplemented, which is not an mls::Error: it passes through, so the
/// test fails with "not implemented".
template <class F>
void require_error(F&& f, const std::string& needle) {
  const std::string label = "mls::Error naming '" + without_temp_dir(needle) + "'";
  try {
    f();
  } catch (const mls::Error& e) {
    INFO("message: " << e.what());
    const bool named = std::string(e.what()).find(needle) != std::string::npos;
    observe(label, error_observation(e.what(), needle));
    CHECK(named);
    return;
  }
  observe(label, std::string_view("no mls::Error"));
  FAIL("expected an mls::Error containing '" << needle << "'");
}

}  // namespace mls::testing

/// Oracles and the grading build. A test's oracle is its own computation of what the code under
/// test should produce (lab 1's `ref::`, a hand-written expected value). mls-grader links a
/// submission with a second build of the tests, `<program>_graded`, compiled with
/// MLS_GRADED_BUILD (labs whose lab.json says "oracle_free": true): there every oracle is compiled
/// out, so the submission's process never holds an expected value it could hand back as its own.
/// Its verdict comes only from comparing its observations with the reference's (run from the
/// ordinary build, oracles and all). Wrap the oracle's code in MLS_ORACLE(...) and a check
/// against it in MLS_ORACLE_CHECK(...); observe what the code produced outside both:
///
///     const Tensor got = mls::matmul(a, b);
///     mls::testing::observe_values("matmul(a, b), " + case_name, got);  // names the function and the case
///     MLS_ORACLE(const Ref want = ref::matmul(ra, rb).first;)
///     MLS_ORACLE_CHECK(CHECK(ref::same_values(got, want)));
///
/// Observations made inside MLS_ORACLE_CHECK (its Catch2 assertions) are not recorded, so both
/// builds record the same stream. Students' local builds keep every oracle and its got/want
/// messages.
///
/// MLS_ORACLE takes statements (a declaration too: what it declares stays in scope), each ended
/// by its `;` or `}`; while they run, no observation is recorded (the oracle's own REQUIREs are
/// not in the grading build's stream either). Use it as a statement of its own, never as the
/// body of an unbraced if/for.
#ifdef MLS_GRADED_BUILD
#define MLS_ORACLE(...)
#else
#define MLS_ORACLE(...)                \
  ++::mls::testing::oracle_depth();    \
  __VA_ARGS__                          \
  --::mls::testing::oracle_depth();
#endif

/// A check against an oracle: compiled out of the grading build; elsewhere its assertions are
/// not observations (an mls::testing::OracleScope is open while it runs).
#ifdef MLS_GRADED_BUILD
#define MLS_ORACLE_CHECK(...) \
  do {                        \
  } while (0)
#else
#define MLS_ORACLE_CHECK(...) \
  do {                        \
    const ::mls::testing::OracleScope mls_oracle_scope_; \
    __VA_ARGS__;              \
  } while (0)
#endif

/// Observes `got` (labelled with its spelling) and, outside the grading build, checks with
/// Catch2's `assertion` (CHECK or REQUIRE) that it equals `want`, an oracle's value that the
/// grading build never computes.
#define MLS_ASSERT_EQ_(assertion, got, want)                              \
  do {                                                                    \
    const auto& mls_got_ = (got);                                         \
    ::mls::testing::observe(#got, mls_got_);                              \
    MLS_ORACLE_CHECK(INFO(#got " == " #want); assertion(mls_got_ == (want))); \
  } while (0)
/// MLS_ASSERT_EQ_ with CHECK (the test goes on after a mismatch).
#define MLS_CHECK_EQ(got, want) MLS_ASSERT_EQ_(CHECK, got, want)
/// MLS_ASSERT_EQ_ with REQUIRE (a mismatch ends the test: what follows depends on it).
#define MLS_REQUIRE_EQ(got, want) MLS_ASSERT_EQ_(REQUIRE, got, want)

/// Ends a GPU test early, loudly, where there is no GPU: `available(&why)` is the lab's check
/// (`cu::available`, `nccl_gpu_available`, ...). CTest's skip regex reads "SKIPPED: no GPU" and
/// reports the test as skipped; the grader leaves it out.
#define MLS_REQUIRE_GPU(available)                \
  do {                                            \
    std::string why_;                             \
    if (!(available)(&why_)) {                    \
      WARN("SKIPPED: no GPU (" << why_ << ")");   \
      return;                                     \
    }                                             \
  } while (0)
