#pragma once
/// The result model: what one test case did, and what a lab scored.
#include <string>
#include <string_view>
#include <vector>

#include "mls/common/grader_protocol.hpp"
#include "mls/grader/manifest.hpp"
#include "mls/grader/sandbox.hpp"

namespace mls::grader {

/// SKIPPED: a GPU test on a machine without a GPU (it reported "SKIPPED: no GPU", or its test
/// program is not configured there, e.g. no CUDA). It scores 0 and its points are left out of
/// the run's maximum; nothing else is ever skipped.
enum class Outcome { Pass, Fail, Crash, Timeout, Memory, OutputLimit, NoResult, NotImplemented, Skipped };
const char* to_string(Outcome o);
Outcome outcome_from_string(std::string_view s);  ///< inverse of to_string; throws on unknown

struct TestResult {
  std::string name;
  std::string group;
  Visibility visibility = Visibility::Visible;
  Outcome outcome = Outcome::NoResult;
  double score = 0, max_score = 0;
  double wall_s = 0;
  std::string message;   ///< why (assertion text, signal, ...), sanitized and capped
};

struct LeaderboardEntry {
  std::string name;
  double value = 0;
  std::string order = "desc";
};

struct LabResult {
  int lab = 0;
  std::string title;
  std::string submission;        ///< name of the submission (folder name) or "reference"
  bool built = false;
  std::string output;            ///< top-level message: build errors, intake notes
  std::string isolation;         ///< the sandbox's isolation level (`isolation_line()`), first in every report
  std::vector<TestResult> tests;
  std::vector<LeaderboardEntry> leaderboard;
  double execution_time_s = 0;
  double score() const;
  double max_score() const;        ///< without the points of SKIPPED tests
  double skipped_points() const;   ///< points of SKIPPED tests (left out of max_score)
  int count(Outcome o) const;
};

// ---- Catch2 XML (what the child printed: parsed, never trusted alone) -------------------------

struct CatchXmlCase {
  std::string name;
  bool has_result = false;       ///< an <OverallResult> was seen
  bool success = false;
  std::vector<std::string> failures;  ///< assertion/exception texts
  std::vector<std::string> warnings;  ///< WARN(...) texts
};
struct CatchXml {
  bool complete = false;         ///< the closing </Catch> was seen
  std::vector<CatchXmlCase> cases;
};
/// Tolerant parse of Catch2's `-r xml` output (entities decoded; unknown text skipped).
CatchXml parse_catch_xml(std::string_view text);

/// What the harness listener reported over the channel, keeping only lines with our nonce.
struct ChannelReport {
  std::vector<std::string> passed, failed, listed, exited;
  bool ended = false;
  /// The OBS lines, in order (protocol: mls/common/grader_protocol.hpp).
  std::vector<grader_protocol::ObservationRecord> observations;
  int malformed = 0;  ///< OBS lines that did not decode
};
ChannelReport parse_channel(std::string_view text, std::string_view nonce);

/// What a GPU test prints (Catch2 `WARN`) when it finds no GPU and returns.
inline constexpr std::string_view kGpuSkipMarker = "SKIPPED: no GPU";

/// How `classify` treats a test that passed after printing `kGpuSkipMarker`.
enum class SkipPolicy {
  Ignore,  ///< not a GPU test: the text means nothing, a pass is a pass
  Allow,   ///< a GPU test on a machine without a GPU: SKIPPED
  Refuse,  ///< a GPU test on a machine with a GPU: FAIL (a GPU test must run where it can)
};

/// Decides the outcome of one test case from everything the run produced. A PASS needs all of:
/// normal exit 0, a complete XML saying success for exactly `test_name`, and the nonce-stamped
/// PASS line for `test_name` followed by the end-of-run line on the channel. A would-be PASS whose
/// XML carries a warning with `kGpuSkipMarker` is then decided by `skip`.
TestResult classify(const SandboxResult& run, std::string_view test_name, std::string_view nonce,
                    SkipPolicy skip = SkipPolicy::Ignore);

/// Whether this machine has an NVIDIA GPU the tests could use (a /dev/nvidiaN device node).
/// `MLS_GRADER_GPU=0|1` in the grader's environment overrides the probe.
bool machine_has_gpu();
/// Is `mpirun` on the PATH? (`MLS_GRADER_MPI=0|1` overrides.)
bool machine_has_mpirun();

/// Catch2 test-spec escaping of a literal test name (backslash before , [ ] " ~ \).
std::string escape_test_name(std::string_view name);

/// Human name of a signal, e.g. "SIGSEGV".
std::string signal_name(int sig);

}  // namespace mls::grader
