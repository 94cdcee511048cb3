#pragma once
/// The result model: what one test case did, and what a lab scored.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mls/common/grader_protocol.hpp"
#include "mls/grader/manifest.hpp"
#include "mls/grader/sandbox.hpp"

namespace mls::grader {

/// SKIPPED: a GPU test on a machine without a GPU (it reported "SKIPPED: no GPU", or its test
/// program is not configured there, e.g. no CUDA). It scores 0 and its points are left out of
/// the run's maximum (it is in a group the machine does not count: `TestResult::counted`);
/// nothing else is ever skipped.
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
  /// Whether its points are in the maximum: false for every test of a group this machine cannot
  /// run (a GPU or MPI group without a GPU or mpirun, or whose program is not configured;
  /// `count_points`, run.hpp), whatever the test did, so that the maximum depends only on the
  /// manifest and the machine. A test that does not count scores 0.
  bool counted = true;
  /// Counted, and not SKIPPED (a SKIPPED test never counts).
  bool counts() const { return counted && outcome != Outcome::Skipped; }
};

struct LeaderboardEntry {
  std::string name;
  double value = 0;
  std::string order = "desc";
  std::string how;  ///< how the figure was measured (shown with the leaderboard)
};

struct LabResult {
  int lab = 0;
  std::string title;
  std::string submission;        ///< name of the submission (folder name) or "reference"
  bool built = false;
  /// What a student must read first, said once at the top of every report (the score table,
  /// results.json's output): the compiler's first errors of a submission that did not build,
  /// why a submission was rejected. Each test entry then says only that it was not run.
  std::string headline;
  std::string output;            ///< top-level message: intake notes, timings, notes of the run
  std::string isolation;         ///< the sandbox's isolation level (`isolation_line()`), first in every report
  std::vector<TestResult> tests;
  std::vector<LeaderboardEntry> leaderboard;
  double execution_time_s = 0;
  double score() const;            ///< of the tests that count, in hundredths
  /// The points of the tests that count (`TestResult::counts`), in hundredths: the same for every
  /// submission of a lab graded on one machine.
  double max_score() const;
  double uncounted_points() const;  ///< the points of the tests that do not count (left out of max_score)
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
  /// The names of the PASS, FAIL, NAME and EXIT lines, in order (at most kMaxNames of each: a
  /// flood of lines is counted in `dropped`, not kept).
  std::vector<std::string> passed, failed, listed, exited;
  bool ended = false;
  /// The OBS records, in order (protocol: mls/common/grader_protocol.hpp), when the decoder was
  /// given a `StreamRecorder` (`parse_channel` does); a differential run compares them as they
  /// arrive instead and keeps none.
  std::vector<grader_protocol::ObservationRecord> observations;
  std::int64_t records = 0;  ///< OBS records seen
  int malformed = 0;         ///< OBS records that did not decode
  std::int64_t dropped = 0;  ///< names beyond kMaxNames, and over-long lines, not kept
  static constexpr std::size_t kMaxNames = 4096;
};

/// Receives a channel's observations as the decoder reads them, one value at a time, so that a
/// record of any size is checked without being held.
struct ObservationConsumer {
  virtual ~ObservationConsumer() = default;
  /// A record's header: every field but its values (`count` says how many it announces).
  virtual void begin(const grader_protocol::ObservationRecord& head) = 0;
  virtual void value(double v) = 0;
  /// The record's line ended: `ok` is false when a value did not decode or the number of values
  /// differs from `count`.
  virtual void end(bool ok) = 0;
  /// A record whose header did not decode (no `begin` for it).
  virtual void malformed() = 0;
};

/// Which values of an observation the grader compares: every value of one of up to `kWhole`
/// values; of a larger one, its first and last `kEdge` values (where a loop's remainder goes
/// wrong) and, between them, the positions a keyed hash of (secret, observation, position)
/// picks, about one in `kRate`. The secret is drawn in the grader's process (`drawn`) and never
/// leaves it, so a test process cannot know which of its middle values will be compared: a
/// result computed only in part fails. The reference's runs and every submission's comparison
/// use the same one. A zero secret compares every value.
struct ValueSample {
  static constexpr std::int64_t kWhole = std::int64_t{1} << 17;
  static constexpr std::int64_t kEdge = std::int64_t{1} << 15;
  static constexpr std::uint64_t kRate = 32;
  std::uint64_t secret = 0;
  /// Whether value `k` of observation `index` (counted from 0 in its test's stream), which
  /// announces `count` values, is compared.
  bool keep(std::size_t index, std::int64_t count, std::int64_t k) const;
  /// How many values of an observation of `count` values are kept, at most (a reservation).
  static std::size_t capacity(std::int64_t count);
  /// A fresh secret from the system's random source.
  static ValueSample drawn();
};

/// Keeps every observation (the reference build's runs, and `parse_channel`): of each, the
/// values `sample` keeps (all of them by default).
class StreamRecorder : public ObservationConsumer {
 public:
  explicit StreamRecorder(ValueSample sample = {}) : sample_(sample) {}
  void begin(const grader_protocol::ObservationRecord& head) override;
  void value(double v) override;
  void end(bool ok) override;
  void malformed() override {
    ++bad;
    ++index_;
  }
  std::vector<grader_protocol::ObservationRecord> stream;
  int bad = 0;  ///< records that did not decode (left out of `stream`)

 private:
  ValueSample sample_;
  bool open_ = false;
  std::size_t index_ = 0;  ///< records begun, malformed ones included
  std::int64_t k_ = 0;     ///< position of the next value in the open record
};

/// Decodes the result channel as it arrives, in bounded memory whatever the child writes: a
/// line's head and a short payload (a test name) are kept up to fixed sizes, an OBS record's
/// header up to `max_header` bytes; its values are parsed one by one and handed to the consumer
/// (none is kept here). Lines without the nonce cost nothing but reading them.
class ChannelDecoder {
 public:
  explicit ChannelDecoder(std::string nonce, ObservationConsumer* consumer = nullptr,
                          std::size_t max_header = 16u << 20);
  void feed(std::string_view bytes);
  /// The end of the channel: a last line without its newline is decoded too.
  void finish();
  ChannelReport& report() { return report_; }

 private:
  enum class Mode { Head, Short, Obs, Skip };
  void byte(char c);
  void end_line();
  void head_done(bool at_end);
  void obs_char(char u);
  void flush_value();
  void header_done();
  std::string nonce_;
  ObservationConsumer* consumer_;
  std::size_t max_header_;
  ChannelReport report_;
  Mode mode_ = Mode::Head;
  std::string head_, payload_;
  // An OBS record in progress.
  bool esc_ = false, bad_ = false, begun_ = false, space_ = false;
  int field_ = 0;
  std::size_t header_bytes_ = 0;
  std::string fields_[9], token_;
  std::int64_t announced_ = 0, seen_ = 0;
};

/// The whole of a channel's text decoded at once (observations kept): for tests and tools.
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
/// The same, from a channel already decoded (a run whose channel went to a `ChannelDecoder`).
TestResult classify(const SandboxResult& run, std::string_view test_name, const ChannelReport& channel,
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
