// Measuring candidates: the operands and reference of one tuning problem, a candidate's first run
// in a forked child (a crash or a hang kills only the child), the checked first run here, and the
// interleaved timing against the hand-written packed kernel (the anchor).
//
// Why fork: a generated kernel is code nobody has run yet. A schedule the template cannot build is
// an mls::Error, and a compile error is one too (the JIT's), but a bad kernel can also crash the
// process (an out-of-bounds store in a micro-kernel) or never end. The child runs it once on the
// real operands with one thread (after fork only the calling thread exists: the child never
// touches common's pool), checks the result against the reference and reports through a pipe; the
// parent kills it after MeasureOptions::timeout_s. Only a candidate that passed runs in this
// process, first once at the tuner's thread count (checked again: threads must not change the
// result), then in the interleaved rounds.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "mls/common/error.hpp"
#include "mls/common/interleaved_timing.hpp"
#include "mls/common/parallel.hpp"
#include "mls/kernels/sgemm.hpp"
#include "mls/kernels/tune.hpp"

namespace mls::kernels::tune {

std::string to_string(TrialStatus s) {
  switch (s) {
    case TrialStatus::Ok: return "ok";
    case TrialStatus::CompileError: return "compile-error";
    case TrialStatus::Crashed: return "crashed";
    case TrialStatus::TimedOut: return "timed-out";
    case TrialStatus::Wrong: return "wrong";
    case TrialStatus::Failed: return "failed";
  }
  return "?";
}

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Trial run_guarded(const std::function<bool(std::string& message)>& fn, double timeout_s) {
  MLS_CHECK(timeout_s > 0, "run_guarded: timeout_s ", timeout_s, " must be > 0");
  Trial t;
  int fds[2];
  MLS_CHECK(::pipe(fds) == 0, "run_guarded: pipe failed: ", std::strerror(errno));
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    fail("run_guarded: fork failed: ", std::strerror(err));
  }
  if (pid == 0) {
    ::close(fds[0]);
    // The parent's handlers (a test framework's, a tool's) must not run here: a crash is reported
    // by the signal it dies of.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS}) ::signal(sig, SIG_DFL);
    std::string message;
    int code = 2;
    try {
      code = fn(message) ? 0 : 1;
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
      message = "an exception that is not a std::exception";
    }
    const char* p = message.data();
    std::size_t left = std::min<std::size_t>(message.size(), 4096);
    while (left > 0) {
      const ssize_t w = ::write(fds[1], p, left);
      if (w <= 0) break;
      p += w;
      left -= static_cast<std::size_t>(w);
    }
    ::_exit(code);
  }
  ::close(fds[1]);
  std::string message;
  const double deadline = now_seconds() + timeout_s;
  bool timed_out = false;
  for (;;) {
    const double left = deadline - now_seconds();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min(left * 1000 + 1, 1000.0)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[512];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) {
      message.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EOF: the child has exited (or closed the pipe)
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    t.status = TrialStatus::TimedOut;
    t.message = "its first run did not end within " + std::to_string(timeout_s) + " s (killed)";
  } else if (WIFSIGNALED(status)) {
    t.status = TrialStatus::Crashed;
    t.message = std::string("its first run crashed: signal ") + std::to_string(WTERMSIG(status)) + " (" +
                strsignal(WTERMSIG(status)) + ")";
  } else {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    t.status = code == 0 ? TrialStatus::Ok : code == 1 ? TrialStatus::Wrong : TrialStatus::Failed;
    t.message = short_message(message);
  }
  return t;
}

// ---- the problem of one tuning run -----------------------------------------------------------------

namespace {
const char* anchor_name(int threads) { return threads > 1 ? "lab4_packed_mt" : "lab4_packed"; }
}  // namespace

Bench::Bench(const SgemmShape& shape, int threads, std::uint64_t seed) : shape_(shape.key()), threads_(threads) {
  MLS_CHECK(shape.m >= 1 && shape.n >= 1 && shape.k >= 1, "tune: shape ", to_string(shape),
            " must have every extent >= 1");
  MLS_CHECK(shape.beta == 0 || shape.beta == 1, "tune: beta ", shape.beta, " of ", to_string(shape), " must be 0 or 1");
  MLS_CHECK(threads >= 1, "tune: threads ", threads, " must be >= 1");
  Rng rng(seed, "tune_operands");
  // Compact operands in the problem's layout (A K x M with trans_a, B N x K with trans_b).
  a_.resize(static_cast<std::size_t>(shape.m * shape.k));
  b_.resize(static_cast<std::size_t>(shape.k * shape.n));
  for (auto& x : a_) x = static_cast<float>(rng.uniform(-1, 1));
  for (auto& x : b_) x = static_cast<float>(rng.uniform(-1, 1));
  c0_.assign(static_cast<std::size_t>(shape.m * shape.n), 0.0f);
  if (shape_.beta == 1)  // C += A·B starts from these
    for (auto& x : c0_) x = static_cast<float>(rng.uniform(-1, 1));
  c_ = c0_;
  ref_ = c0_;
  anchor_c_ = c0_;
  ThreadCountGuard guard(threads_);
  sgemm(anchor_name(threads_), shape_.trans_a, shape_.trans_b, shape_.m, shape_.n, shape_.k, 1.0f, a_.data(),
        shape_.a_ld(), b_.data(), shape_.b_ld(), static_cast<float>(shape_.beta), ref_.data(), shape_.n);
  float amax = 0, bmax = 0, cmax = 0;
  for (float x : a_) amax = std::max(amax, std::fabs(x));
  for (float x : b_) bmax = std::max(bmax, std::fabs(x));
  for (float x : c0_) cmax = std::max(cmax, std::fabs(x));
  // Both sides round each of K products and sums, and the sum onto C: 4 K eps |a| |b| + 4 eps |c| bounds their difference.
  const double eps = std::numeric_limits<float>::epsilon();
  tolerance_ = 4.0 * static_cast<double>(shape.k) * eps * amax * bmax + 4.0 * eps * cmax + 1e-30;
  anchor_seconds_ = median_batch_seconds([&] { run_anchor(); });
}

void Bench::run_anchor() {
  ThreadCountGuard guard(threads_);
  sgemm(anchor_name(threads_), shape_.trans_a, shape_.trans_b, shape_.m, shape_.n, shape_.k, 1.0f, a_.data(),
        shape_.a_ld(), b_.data(), shape_.b_ld(), static_cast<float>(shape_.beta), anchor_c_.data(), shape_.n);
}

void Bench::reset_c(std::vector<float>& c) const {
  if (shape_.beta == 1)
    c = c0_;
  else
    std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());  // every element must be written
}

double Bench::error_of(const std::vector<float>& got) const {
  if (got.size() != ref_.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - ref_[i]);
    if (!(d <= tolerance_ * 1e30)) return std::numeric_limits<double>::infinity();  // NaN or inf
    worst = std::max(worst, d / tolerance_);
  }
  return worst;
}

std::string short_message(const std::string& what, int lines) {
  std::string s;
  std::size_t pos = 0;
  for (int i = 0; i < lines && pos < what.size();) {
    const std::size_t end = what.find('\n', pos);
    const std::string line = what.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (!line.empty()) {
      s += (s.empty() ? "" : " | ") + line;
      ++i;
    }
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  if (s.size() > 400) s = s.substr(0, 400) + "...";
  return s;
}

double median_batch_seconds(const std::function<void()>& fn) {
  fn();  // warm
  const double once = bench::seconds_of(fn);
  const int calls = static_cast<int>(std::clamp(10e-3 / std::max(once, 1e-9), 1.0, 10000.0));
  std::vector<double> times;
  for (int i = 0; i < 5; ++i)
    times.push_back(bench::seconds_of([&] {
                      for (int c = 0; c < calls; ++c) fn();
                    }) /
                    calls);
  std::sort(times.begin(), times.end());
  return times[2];
}

CandidateResult measure_candidate(const CandidateChecks& c, const MeasureOptions& options, double anchor_seconds,
                                  int threads) {
  CandidateResult r;
  auto wrong = [&](double err) {
    return "result differs from " + c.peer + ": largest error " + std::to_string(err) + " x the tolerance";
  };
  if (options.fork_guard) {
    const Trial g = run_guarded(
        [&](std::string& message) {
          c.run(1);
          const double err = c.error();
          if (err <= 1) return true;
          message = wrong(err);
          return false;
        },
        options.timeout_s);
    if (g.status != TrialStatus::Ok) {
      r.status = g.status;
      r.message = g.message;
      return r;
    }
  }
  ThreadCountGuard guard(threads);
  try {
    const double first = bench::seconds_of([&] { c.run(0); });
    if (const double err = c.error(); !(err <= 1)) {
      r.status = TrialStatus::Wrong;
      r.message = wrong(err) + " (at " + std::to_string(threads) + " threads)";
      return r;
    }
    if (first > options.slow_factor * std::max(anchor_seconds, 1e-6) && first > 1e-3) {
      r.status = TrialStatus::TimedOut;
      r.message = "its first run took " + std::to_string(first) + " s, over " + std::to_string(options.slow_factor) +
                  " x " + c.anchor + "'s " + std::to_string(anchor_seconds) + " s";
      return r;
    }
    r.seconds = c.time();
  } catch (const std::exception& e) {
    r.status = TrialStatus::Failed;
    r.message = short_message(e.what());
    return r;
  }
  r.status = TrialStatus::Ok;
  return r;
}

Trial Bench::measure(const SgemmKnobs& knobs, const CandidateBuilder& build, const MeasureOptions& options) {
  Trial t;
  t.knobs = knobs;
  CandidateFn fn;
  const double t0 = now_seconds();
  try {
    fn = build(knobs, shape_);
    MLS_CHECK(static_cast<bool>(fn), "tune: the builder returned no function for ", to_string(knobs));
  } catch (const std::exception& e) {
    t.status = TrialStatus::CompileError;
    t.message = short_message(e.what());
    return t;
  }
  t.compile_seconds = now_seconds() - t0;
  std::vector<float>& c = c_;
  CandidateChecks checks;
  checks.run = [&](int threads) {
    reset_c(c);
    fn(a_.data(), b_.data(), c.data(), threads);
  };
  checks.error = [&] { return error_of(c); };
  checks.time = [&] { return time(fn, options.repeat, options.batch_seconds); };
  checks.peer = "lab4_packed";
  checks.anchor = "the anchor";
  const CandidateResult r = measure_candidate(checks, options, anchor_seconds_, threads_);
  t.status = r.status;
  t.message = r.message;
  if (r.status != TrialStatus::Ok) return t;
  t.seconds = r.seconds;
  t.gflops = sgemm_flops(shape_) / t.seconds * 1e-9;
  return t;
}

double Bench::time(const CandidateFn& fn, int repeat, double batch_seconds) {
  ThreadCountGuard guard(threads_);
  const double ratio = bench::interleaved_ratio([&] { run_anchor(); }, [&] { fn(a_.data(), b_.data(), c_.data(), 0); },
                                                repeat, batch_seconds);
  return ratio * anchor_seconds_;
}

}  // namespace mls::kernels::tune
