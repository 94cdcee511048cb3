#pragma once
/// What a student reads about one test that did not pass: what differed first, a few lines
/// more, and the command that runs the test locally with its full output.
#include <cstddef>
#include <string>
#include <string_view>

#include "mls/grader/manifest.hpp"
#include "mls/grader/result.hpp"

namespace mls::grader {

struct FeedbackLimits {
  std::size_t lines = 5;       ///< lines of the message, before the command line
  std::size_t line_bytes = 300;  ///< each line is cut there
  std::size_t bytes = 2048;    ///< the whole feedback (command line included)
};

/// Builds a test's feedback from its message (what the grader found, first line first; e.g.
/// "differs from the reference build: ..." or the failed checks, one per line) and `rerun` (the
/// command that runs the test locally; may be empty). Identical lines are said once, with how
/// many times they came ("(x116)"); then at most `lim.lines` lines, "(K more lines: run it
/// locally)" when some are left out, and "run it locally: <rerun>". Pure: no I/O.
std::string format_feedback(std::string_view message, std::string_view rerun, FeedbackLimits lim = {});

/// The command that runs one test case of group `group` of lab `m` in a student's own build, as
/// the handouts write it: `build/<preset>/<lab dir>/<program> "<escaped test name>"` (the ordinary
/// program, whose checks print got/want), after the group's `run_with` where it has one (lab 5's
/// MPI tests: `lab5_parallel/tests/run_mpi.sh 2 build/...`, every rank's output in full).
std::string rerun_command(const Manifest& m, std::string_view group, std::string_view program,
                          std::string_view test_name, std::string_view preset = "release");

/// A test that failed, crashed, ran out of memory or of time gets `format_feedback` of its
/// message with `rerun`; any other outcome is left as it is.
void add_feedback(TestResult& t, std::string_view rerun, FeedbackLimits lim = {});

}  // namespace mls::grader
