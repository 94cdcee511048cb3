#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <vector>

#include "helpers.hpp"
#include "mls/grader/sandbox.hpp"

using namespace mls::grader;

namespace {
SandboxResult sh(const std::string& script, double wall = 5, std::optional<std::string> channel = std::nullopt) {
  fs::path scratch = make_temp_dir("mls-grader-test-sb");
  SandboxSpec s;
  s.argv = {"/bin/sh", "-c", script};
  s.cwd = scratch;
  s.env = minimal_env(scratch);
  s.limits.wall_s = wall;
  s.limits.output_cap = 1u << 20;
  s.limits.keep_head = 1000;
  s.limits.keep_tail = 1000;
  s.channel_input = channel;
  SandboxResult r = run_sandboxed(s);
  remove_tree(scratch);
  return r;
}
}  // namespace

TEST_CASE("sandbox: output, exit status, stdin from /dev/null, cleared environment, scratch folder", "[grader][sandbox]") {
  SandboxResult r = sh("echo out; echo err >&2; exit 3");
  CHECK(r.started);
  CHECK(r.exited);
  CHECK(r.exit_code == 3);
  CHECK(r.out == "out\n");
  CHECK(r.err == "err\n");
  r = sh("cat; echo \"[$HOME]\" \"[$SECRET_TOKEN]\"; pwd; env | wc -l");
  CHECK_THAT(r.out, Catch::Contains("[/") && Catch::Contains("[]") && Catch::Contains("mls-grader-test-sb"));
  r = sh("kill -SEGV $$");
  CHECK_FALSE(r.exited);
  CHECK(r.signal == SIGSEGV);
}

TEST_CASE("sandbox: the channel carries the nonce over fds, not argv or environment", "[grader][sandbox]") {
  SandboxResult r = sh("echo \"fds=$MLS_GRADER_FD\"; read n <&3; echo \"$n PASS x\" >&4; env | grep -c secret-nonce", 5,
                       std::string("secret-nonce"));
  CHECK_THAT(r.out, Catch::Contains("fds=3,4") && Catch::Contains("\n0\n"));
  CHECK(r.channel == "secret-nonce PASS x\n");
}

TEST_CASE("sandbox: a timeout kills the whole group, including background children", "[grader][sandbox]") {
  auto t0 = std::chrono::steady_clock::now();
  SandboxResult r = sh("sleep 30 & sleep 30 & (setsid sleep 30 &); sleep 30", 1);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.timed_out);
  CHECK(s < 8);
}

TEST_CASE("sandbox: leftovers of a finished child are killed and the pipes close", "[grader][sandbox]") {
  auto t0 = std::chrono::steady_clock::now();
  SandboxResult r = sh("(setsid sleep 30 &); sleep 30 & echo done", 10);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.exited);
  CHECK(r.exit_code == 0);
  CHECK_FALSE(r.timed_out);
  CHECK(s < 4);
}

TEST_CASE("sandbox: the output cap keeps head and tail and kills the group", "[grader][sandbox]") {
  SandboxResult r = sh("yes abcdefgh", 10);
  CHECK(r.output_limit);
  CHECK_FALSE(r.timed_out);
  CHECK(r.out.size() < 3000);
  CHECK_THAT(r.out, Catch::StartsWith("abcdefgh\n") && Catch::Contains("bytes left out"));
}

TEST_CASE("sandbox: rlimits apply (file size, address space)", "[grader][sandbox]") {
  fs::path scratch = make_temp_dir("mls-grader-test-sb");
  SandboxSpec s;
  s.argv = {"/bin/sh", "-c", "ulimit -f; ulimit -v; ulimit -c; ulimit -n"};
  s.cwd = scratch;
  s.env = minimal_env(scratch);
  s.limits.file_size_mb = 1;
  s.limits.address_space_mb = 512;
  s.limits.open_files = 64;
  SandboxResult r = run_sandboxed(s);
  remove_tree(scratch);
  CHECK(r.out == "2048\n524288\n0\n64\n");
}

TEST_CASE("sandbox: as root, the child runs as an unprivileged uid and cannot write the grader's files",
          "[grader][sandbox]") {
  if (::geteuid() != 0) {
    SUCCEED("not root: privileges are not dropped (documented)");
    return;
  }
  fs::path secret = make_temp_dir("mls-grader-test-secret");
  testing::put(secret, "results.json", "{}");
  ::chmod(secret.c_str(), 0755);
  SandboxResult r = sh("id -u; echo pwned > " + (secret / "results.json").string() + " 2>/dev/null; echo rc=$?");
  CHECK_THAT(r.out, Catch::StartsWith("6") && Catch::Contains("rc=") && !Catch::Contains("rc=0"));
  CHECK(read_file(secret / "results.json") == "{}");
  remove_tree(secret);
}

namespace {
std::vector<int> open_fds() {
  std::vector<int> fds;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) fds.push_back(std::stoi(e.path().filename().string()));
  std::sort(fds.begin(), fds.end());
  return fds;
}
}  // namespace

TEST_CASE("sandbox: a pipe or descriptor that cannot be opened leaks none of the others", "[grader][sandbox]") {
  (void)isolation();  // probed before the limit below
  fs::path scratch = make_temp_dir("mls-grader-test-sb");
  SandboxSpec s;
  s.argv = {"/bin/true"};
  s.cwd = scratch;
  s.env = minimal_env(scratch);
  s.drop_privileges = false;
  s.channel_input = "x";
  struct rlimit old {};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &old) == 0);
  // Room for a few more descriptors (all below 100): some pipes open, then one (or the move of
  // the child's ends to fds >= 100) fails.
  for (int extra : {1, 3, 5, 7}) {
    std::vector<int> before = open_fds();
    struct rlimit low = old;
    int limit = 0;
    for (int free_seen = 0; free_seen < extra; ++limit)
      if (!std::binary_search(before.begin(), before.end(), limit)) ++free_seen;
    REQUIRE(limit < 100);
    low.rlim_cur = static_cast<rlim_t>(limit);
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
    SandboxResult r = run_sandboxed(s);
    ::setrlimit(RLIMIT_NOFILE, &old);
    INFO("limit " << low.rlim_cur << ": " << r.error);
    CHECK_FALSE(r.started);
    CHECK_FALSE(r.error.empty());
    CHECK(open_fds() == before);
  }
  SandboxResult ok = run_sandboxed(s);
  CHECK(ok.exited);
  CHECK(ok.exit_code == 0);
  remove_tree(scratch);
}
