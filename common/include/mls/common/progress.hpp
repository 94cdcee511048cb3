#pragma once
/// A terminal progress bar for long work (training loops, grading).
///
///   ProgressBar bar(steps, "train");
///   for (...) { ...; bar.update(i + 1, "loss 0.42"); }
///   bar.finish("done");
/// On a terminal it redraws one line in place ("\r"); otherwise (a log file, CI) it prints a
/// plain line at most every 10% so logs stay short.
#include <cstdint>
#include <iosfwd>
#include <string>

namespace mls {

class ProgressBar {
 public:
  /// `out` defaults to stderr; `is_tty` defaults to whether `out` is a terminal.
  ProgressBar(std::int64_t total, std::string label, std::ostream* out = nullptr, int is_tty = -1);
  /// Sets progress to `done` (0..total) with an optional status text (e.g. "loss 0.42").
  void update(std::int64_t done, const std::string& status = "");
  /// Completes the bar and ends the line.
  void finish(const std::string& status = "");
  /// The bar as text for `done`, without control characters, e.g. "train [#####     ] 50% 5/10".
  std::string render(std::int64_t done, const std::string& status) const;

 private:
  std::int64_t total_;
  std::string label_;
  std::ostream* out_;
  bool tty_;
  int last_decile_ = -1;
  bool finished_ = false;
  double start_;
};

}  // namespace mls
