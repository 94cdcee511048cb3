// A terminal progress bar: redrawn in place on a terminal, a few plain lines in a log.
#include "mls/common/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "mls/common/error.hpp"

namespace mls {
namespace {

constexpr int kBarWidth = 20;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// "m:ss", or "h:mm:ss" from an hour on.
std::string format_duration(double seconds) {
  if (!(seconds >= 0)) seconds = 0;               // also catches NaN
  if (seconds > 360000.0 * 24) return ">10000h";  // keeps the cast below in range
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  }
  return buf;
}

/// floor(done * scale / total) without overflow; `scale` when total is 0 (nothing to do is done).
std::int64_t fraction_of(std::int64_t done, std::int64_t total, std::int64_t scale) {
  if (total <= 0) return scale;
  return static_cast<std::int64_t>(static_cast<__int128>(done) * scale / total);
}

}  // namespace

ProgressBar::ProgressBar(std::int64_t total, std::string label, std::ostream* out, int is_tty)
    : total_(total), label_(std::move(label)), out_(out ? out : &std::cerr), start_(now_seconds()) {
  MLS_CHECK(total >= 0, "ProgressBar: total ", total, " must be >= 0");
  if (is_tty == -1) {
    // Only stderr (the default) and stdout are known to be attached to a file descriptor.
    if (out_ == &std::cerr || out_ == &std::clog) {
      tty_ = ::isatty(STDERR_FILENO) == 1;
    } else if (out_ == &std::cout) {
      tty_ = ::isatty(STDOUT_FILENO) == 1;
    } else {
      tty_ = false;
    }
  } else {
    tty_ = is_tty != 0;
  }
}

std::string ProgressBar::render(std::int64_t done, const std::string& status) const {
  done = std::clamp<std::int64_t>(done, 0, total_);
  const std::int64_t filled = fraction_of(done, total_, kBarWidth);
  const std::int64_t percent = fraction_of(done, total_, 100);
  std::string s = label_;
  if (!s.empty()) s += ' ';
  s += '[';
  s.append(static_cast<std::size_t>(filled), '#');
  s.append(static_cast<std::size_t>(kBarWidth - filled), ' ');
  s += "] ";
  s += detail::cat(percent, "% ", done, "/", total_);
  const double elapsed = now_seconds() - start_;
  s += ' ';
  s += format_duration(elapsed);
  if (done >= total_) {
    s += " elapsed";
  } else if (done == 0) {
    s += " elapsed, eta ?";
  } else {
    const double eta = elapsed * static_cast<double>(total_ - done) / static_cast<double>(done);
    s += " elapsed, eta ";
    s += format_duration(eta);
  }
  if (!status.empty()) {
    s += " | ";
    s += status;
  }
  return s;
}

void ProgressBar::update(std::int64_t done, const std::string& status) {
  if (finished_) return;
  done = std::clamp<std::int64_t>(done, 0, total_);
  if (tty_) {
    // On a terminal `last_decile_` holds the last drawn per-mille: redraw at most 1001 times.
    const auto permille = static_cast<int>(fraction_of(done, total_, 1000));
    if (permille == last_decile_) return;
    last_decile_ = permille;
    *out_ << '\r' << render(done, status) << "\x1b[K" << std::flush;
  } else {
    const auto decile = static_cast<int>(fraction_of(done, total_, 10));
    if (decile <= last_decile_) return;
    last_decile_ = decile;
    *out_ << render(done, status) << '\n' << std::flush;
  }
}

void ProgressBar::finish(const std::string& status) {
  if (finished_) return;
  finished_ = true;
  if (tty_) {
    *out_ << '\r' << render(total_, status) << "\x1b[K\n" << std::flush;
  } else if (last_decile_ < 10 || !status.empty()) {
    // In a log the 100% line is printed once (again only to show a final status).
    *out_ << render(total_, status) << '\n' << std::flush;
  }
}

}  // namespace mls
