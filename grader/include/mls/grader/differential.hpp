#pragma once
/// Differential verdicts: the observation stream of a student run compared, in the grader's own
/// process, with the stream the reference build produced for the same test and the same salt.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mls/common/grader_protocol.hpp"
#include "mls/grader/result.hpp"

namespace mls::grader {

using Observation = grader_protocol::ObservationRecord;
using Stream = std::vector<Observation>;

/// True for an observation that cannot be forged by writing "true": anything but a truth value.
bool is_strong(const Observation& o);
/// Number of strong observations of a stream.
int strong_count(const Stream& s);

/// The reference stream of one test, from two reference runs with the same salt. Where the two
/// agree it is the first run. Where a value differs between them (threads, timing, addresses) the
/// observation is nondeterministic: a number's tolerance widens to cover twice the spread seen; a
/// text (or a tensor's layout) is marked `unstable` and only its label and kind are compared.
/// Streams that differ in length, labels or kinds: std::nullopt and `problem` says where (a test
/// bug: its observations must not depend on anything but the salt).
struct ReferenceStream {
  Stream stream;               ///< each observation's values: those `sample` keeps
  ValueSample sample;          ///< which values were kept, and are compared
  std::vector<bool> unstable;  ///< per observation
  int nondeterministic = 0;    ///< observations whose values differed between the two runs
  /// What differed between the two runs, one line per nondeterministic observation (the first
  /// kMaxDifferences of them), e.g. `observation 3 of 7, 'path' (text): "<tmp>/a_81" vs
  /// "<tmp>/a_94" (from character 8)`: what `mls-grader audit` prints, so a test's
  /// nondeterminism can be traced to its source (a pid, a path, an address, a time, threads).
  std::vector<std::string> differences;
  static constexpr std::size_t kMaxDifferences = 5;
};
/// Hands a whole, already decoded stream to a consumer, as the channel decoder would (a stream
/// with every value: not one a sampling recorder kept).
void feed(ObservationConsumer& c, const Stream& s);

std::optional<ReferenceStream> merge_reference_runs(const Stream& a, const Stream& b, std::string& problem);

/// The same merge with the second run streamed in (an `ObservationConsumer`): the first run's
/// stream is moved in and becomes the result; the second is never held.
class ReferenceMerger : public ObservationConsumer {
 public:
  /// `first`: the first run, recorded with `sample` (StreamRecorder).
  explicit ReferenceMerger(Stream first, ValueSample sample = {});
  void begin(const Observation& head) override;
  void value(double v) override;
  void end(bool ok) override;
  void malformed() override;
  /// After the second run: the merged stream, or std::nullopt and why.
  std::optional<ReferenceStream> result(std::string& problem);

 private:
  void fail(std::string why);
  void nondeterministic(std::size_t i, const std::string& what);
  ReferenceStream r_;
  std::size_t seen_ = 0, k_ = 0;
  std::int64_t pos_ = 0;   ///< position of the next value of the current observation
  std::int64_t cur_ = -1;  ///< the observation whose values arrive (-1: none compared)
  double spread_ = 0;
  bool differs_ = false;
  std::string first_diff_;  ///< the current observation's first differing value, both runs'
  std::string problem_;
};

/// Compares a student stream with the reference as it arrives (an `ObservationConsumer` for the
/// channel decoder: nothing of the student's stream is kept): same number of observations, same
/// labels and kinds in order, texts and layouts exactly, every value within the reference's
/// tolerance (|got - want| <= atol + rtol * |want|; exact when both are 0; NaN matches NaN): of
/// a large observation, the values at the reference's secret positions (ValueSample).
class StreamComparator : public ObservationConsumer {
 public:
  explicit StreamComparator(const ReferenceStream& ref);  ///< `ref` must outlive the comparator
  StreamComparator(ReferenceStream&&) = delete;
  void begin(const Observation& head) override;
  void value(double v) override;
  void end(bool ok) override;
  void malformed() override;
  /// "" when the stream matched, else the first difference and how many more observations
  /// differ, e.g.
  ///   observation 3 of 5, 'softmax' (tensor float32 [2, 3]): element [1, 2]: expected 0.25,
  ///   got 0.5 (tolerance rtol 1e-06, atol 1e-07) (and 3 more of its 6 values)
  std::string verdict() const;
  int differing() const { return differing_; }

 private:
  void differ(std::string message);
  std::string at(std::size_t i) const;
  const ReferenceStream& ref_;
  std::size_t seen_ = 0, cur_index_ = 0, k_ = 0;
  std::int64_t pos_ = 0, compared_ = 0;  ///< position of the next value; values compared
  const Observation* cur_ = nullptr;  ///< the reference observation whose values arrive
  std::int64_t bad_values_ = 0;
  std::string first_bad_, first_;
  int differing_ = 0;
};

/// The same comparison of a whole stream: "" when it matches, else `StreamComparator::verdict`.
std::string compare_streams(const ReferenceStream& ref, const Stream& got);

/// One observation in a line, for messages and the audit (values cut to a few).
std::string describe(const Observation& o);

}  // namespace mls::grader
