#pragma once
/// What run.cpp, reference.cpp and grade.cpp share (not a public interface): the limits of the
/// result channel, the heads of results, the salt, and one isolated run of one test case.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "build_internal.hpp"
#include "mls/grader/build.hpp"
#include "mls/grader/differential.hpp"
#include "mls/grader/result.hpp"
#include "mls/grader/run.hpp"
#include "mls/grader/sandbox.hpp"

namespace mls::grader::detail {

/// Bytes a trusted run (the reference build's, or `mls-grader test` of one's own tree) may write
/// to the result channel. The grader never holds them: the channel is decoded as it arrives.
inline constexpr std::size_t kTrustedChannelLimit = std::size_t{1} << 30;
/// Bytes a submission's run of a test may write to the result channel: three times what the
/// reference build wrote for the same test (a value's text may be longer than the reference's),
/// plus 1 MiB, at least 4 MiB: a flood is an OUTPUT_LIMIT after a few MiB for most tests.
inline std::size_t student_channel_limit(std::size_t reference_bytes) {
  return std::min(kTrustedChannelLimit, std::max<std::size_t>(4u << 20, 3 * reference_bytes + (1u << 20)));
}

/// A result with every group NO_RESULT: each entry says `why` in a line ("the submission did not
/// build"); `headline` (the compiler's first errors, the intake's refusals) is the result's
/// `headline`, said once at the top of the report, never per entry.
LabResult zero_result(const Manifest& m, const std::string& why, const std::string& headline, double t);
/// The head of a run's result: the lab, built, the isolation line.
LabResult built_result(const Manifest& m);
/// A fresh, secret, nonzero salt.
std::uint64_t fresh_salt();

/// Runs `n` tasks on up to `threads` threads.
void for_each_parallel(std::size_t n, int threads, const std::function<void(std::size_t)>& task);

/// One isolated run of one test case with the given salt: its outcome (the student process's
/// own view, `classify`) and what it wrote on the channel.
struct CaseRun {
  TestResult result;
  ChannelReport channel;
  std::size_t channel_bytes = 0;  ///< what the program wrote to the channel
};
/// At the uid level the test programs must be reachable by the sandbox uid wherever the
/// checkout lives (e.g. under a mode-700 home): they run from copies in a temporary folder,
/// removed with this object. The namespace levels expose each program, read-only, at its path.
struct ReachablePrograms {
  std::map<std::string, fs::path> built;
  fs::path copies;
  bool gpu_here = false, mpi_here = false;
  std::map<std::string, bool> sanitized;  ///< per program: links a sanitizer runtime
  explicit ReachablePrograms(const TestPrograms& p, const RunOptions& opt, const std::string& tag = "");
  ReachablePrograms(const ReachablePrograms&) = delete;
  ReachablePrograms& operator=(const ReachablePrograms&) = delete;
  ~ReachablePrograms();
  /// Runs `job` from its program, isolated, with `salt`; its observations go to `consumer`
  /// (none: counted, not kept).
  CaseRun run(const TestJob& job, const Manifest& m, std::uint64_t salt, ObservationConsumer* consumer = nullptr,
              std::size_t channel_limit = kTrustedChannelLimit) const;
  /// The same, keeping every observation in `CaseRun::channel.observations` (trusted runs: the
  /// reference build's), of each the values `sample` keeps.
  CaseRun record(const TestJob& job, const Manifest& m, std::uint64_t salt, ValueSample sample = {}) const;
  /// The reference's two runs of `job`: the first recorded, the second merged into it as it
  /// arrives (`merger` holds the result, see ReferenceMerger::result); large observations sampled
  /// at this grader process's secret positions (grading_sample).
  void record_twice(const TestJob& job, const Manifest& m, std::uint64_t salt, CaseRun& a, CaseRun& b,
                    std::optional<ReferenceMerger>& merger) const;
};

/// The secret positions this grader process compares of large observations, drawn once.
const ValueSample& grading_sample();

}  // namespace mls::grader::detail
