#pragma once
/// Helpers shared by the test programs of every lab (linked through mls_catch_main).
#include <catch2/catch.hpp>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include <sys/types.h>
#include <unistd.h>

#include "mls/common/error.hpp"
#include "mls/observe.hpp"

namespace mls::testing {

namespace detail {

/// Removes the folder `path` with everything in it, folders a test made read-only included
/// (opened up first); errors are ignored (a test's cleanup).
inline void remove_tree(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec)) fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
  fs::remove_all(path, ec);
}

/// The folder test_temp_dir() made, and the process that made it ("" and 0 before its first use).
struct TestTempDir {
  std::string path;
  pid_t owner = 0;
  ~TestTempDir() {
    if (!path.empty() && owner == ::getpid()) remove_tree(path);  // a forked child leaves its parent's folder alone
  }
};
inline TestTempDir& test_temp_dir_state() {
  static TestTempDir dir;
  return dir;
}

/// The temporary folder (TMPDIR, else /tmp) without a trailing '/'; "" when there is none.
inline std::string system_temp_dir() {
  std::error_code ec;
  std::string tmp = std::filesystem::temp_directory_path(ec).string();
  while (!ec && tmp.size() > 1 && tmp.back() == '/') tmp.pop_back();
  return ec || tmp.size() <= 1 ? std::string() : tmp;
}

/// Every `from` in `text` replaced by `to`.
inline void replace_all(std::string& text, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

}  // namespace detail

/// This process's folder for the files its tests make: `$TMPDIR/mls-test-XXXXXX` (mkdtemp), made
/// on first use and removed, with everything in it, when the process exits. Each process has its
/// own (tests run side by side, MPI ranks), so the names inside need no pid, time or address, and
/// without_temp_dir() writes the folder as "<tmp>": a path a test makes here reads the same in every
/// run of the test, wherever and under whatever pid it runs (mls-grader compares two runs of the
/// reference, each with its own TMPDIR, and at its `uid` level each with another pid).
inline const std::string& test_temp_dir() {
  static const std::string& dir = []() -> const std::string& {
    detail::TestTempDir& d = detail::test_temp_dir_state();
    const std::string base = detail::system_temp_dir();
    std::string tmpl = (base.empty() ? std::string("/tmp") : base) + "/mls-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw mls::Error("test_temp_dir: cannot make a folder from '" + tmpl + "': " + std::strerror(errno));
    d.owner = ::getpid();
    d.path = tmpl;
    return d.path;
  }();
  return dir;
}

/// A path named `name` in test_temp_dir() (nothing is created): choose names that differ within
/// a test; fresh_temp_path() numbers them for you.
inline std::string temp_path(std::string_view name) { return test_temp_dir() + "/" + std::string(name); }

/// A path in test_temp_dir() that no earlier call of this process returned: `name` after a count
/// ("3-x.npy"). The count is the process's, so call it from the test's own thread (not from
/// threads whose order varies): mls-grader runs each test case in a process of its own, where the
/// same test makes the same names in every run.
inline std::string fresh_temp_path(std::string_view name) {
  static std::atomic<long> count{0};
  return temp_path(std::to_string(++count) + "-" + std::string(name));
}

/// A fresh, empty folder in test_temp_dir() (named by fresh_temp_path(tag)), removed with
/// everything in it at the end of its scope.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(std::string_view tag = "dir") : path(fresh_temp_path(tag)) { std::filesystem::create_directories(path); }
  ~TempDir() { detail::remove_tree(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  /// The path of `name` in the folder (nothing is created).
  std::string file(std::string_view name) const { return (path / name).string(); }
};

/// `text` with test_temp_dir()'s path and the temporary folder's path each replaced by "<tmp>":
/// an observation label or value that names a file a test made reads the same in every run
/// (mls-grader gives each run its own TMPDIR).
inline std::string without_temp_dir(std::string text) {
  detail::replace_all(text, detail::test_temp_dir_state().path, "<tmp>");
  detail::replace_all(text, detail::system_temp_dir(), "<tmp>");
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
