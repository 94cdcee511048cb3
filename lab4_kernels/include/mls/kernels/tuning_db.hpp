#pragma once
/// Lab 4 part 2 (ML compilation): the tuning database, where an autotuner keeps what it measured.
///
/// One JSON object per line (JSON lines) in one file, default_tuning_db_path(): each line one
/// measured schedule of one operator on one problem shape, on one CPU at one thread count:
///
///   {"cpu_key":"intel-6.143-avx512-5c1d09aa","cpu_model":"Intel(R) Xeon(R) ...","isa":"avx2 fma avx512f",
///    "op":"sgemm","shape":{"m":512,"n":512,"k":512},"threads":1,"schedule":{"mc":96,"nc":1024},
///    "seconds":0.0021,"gflops":127.8,"time":"2026-11-24T17:05:00Z","version":1}
///
/// - append() adds a line with one write(2) under an exclusive flock(2) of the file (opened with
///   O_APPEND), so processes tuning at once never interleave or lose lines; a previous line left
///   unfinished (a crash) is ended first, so only it is lost.
/// - best() reads the file under a shared lock and returns the fastest record of an operator,
///   shape and thread count on a CPU. Records of another CPU (cpu_key) or another record version
///   are skipped; a line that is not a well-formed record is skipped and counted, with one
///   warning per file and process on stderr.
/// Errors are mls::Error starting "tuning_db: ".
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace mls::kernels {

/// The record format this code writes and reads.
inline constexpr int kTuningRecordVersion = 1;

/// One measurement of one schedule.
struct TuningRecord {
  std::string cpu_key;      ///< jit::cpu_key() of the machine that measured it
  std::string cpu_model;    ///< its "model name"
  std::string isa;          ///< jit::CpuInfo::isa(): "avx2 fma avx512f ..."
  std::string op;           ///< the operator: "sgemm", "softmax", ...
  nlohmann::json shape = nlohmann::json::object();     ///< the problem: {"m":512,"n":512,"k":512}
  int threads = 1;
  nlohmann::json schedule = nlohmann::json::object();  ///< the knobs: {"mc":96,"order":"ikj"}
  double seconds = 0;       ///< per run (the best of the tuner's runs)
  double gflops = 0;
  std::string time;         ///< when measured, UTC ISO 8601 ("2026-11-24T17:05:00Z")
  int version = kTuningRecordVersion;
};

/// A record of this machine (jit::cpu_info(): key, model, ISA) measured now (UTC time stamp).
TuningRecord make_tuning_record(std::string op, nlohmann::json shape, int threads, nlohmann::json schedule,
                                double seconds, double gflops);

/// The record as a JSON object (every field, named as above).
nlohmann::json to_json(const TuningRecord& r);
/// The record of a JSON object; mls::Error "tuning_db: record field '<name>' ..." when a field is
/// missing or of the wrong type, or "... expected a JSON object".
TuningRecord tuning_record_from_json(const nlohmann::json& j);
/// Checks a record before it is written: op non-empty, shape and schedule objects, threads >= 1,
/// seconds positive and finite, gflops non-negative and finite, cpu_key non-empty.
void validate_tuning_record(const TuningRecord& r);

/// $MLS_TUNING_DB, else <the lab's cache root>/tuning.jsonl (roofline.hpp's
/// default_peak_cache_dir(): $XDG_CACHE_HOME/mlsys-labs or ~/.cache/mlsys-labs), else
/// $TMPDIR/mlsys-labs-<uid>/tuning.jsonl.
std::filesystem::path default_tuning_db_path();

/// What one read of the file found.
struct TuningScan {
  std::vector<TuningRecord> records;  ///< the well-formed records of this record version
  std::size_t lines = 0;              ///< non-empty lines
  std::size_t malformed = 0;          ///< lines that are not a record (bad JSON, missing fields)
  std::size_t other_version = 0;      ///< records of another record version
  std::string first_problem;          ///< "line 3: <why>" of the first malformed line
};

/// The database in one file (made, with its folder, on the first append).
class TuningDb {
 public:
  explicit TuningDb(std::filesystem::path file = default_tuning_db_path());
  const std::filesystem::path& path() const { return path_; }

  /// Appends `r` as one line (validate_tuning_record first). mls::Error naming the file and
  /// strerror when it cannot be written.
  void append(const TuningRecord& r) const;
  /// Every line read (a missing file reads as empty).
  TuningScan scan() const;
  /// The fastest (smallest seconds) record of `op` on `shape` with `threads` threads measured on
  /// the CPU `cpu_key`; none when there is none. Warns once (stderr) about malformed lines.
  std::optional<TuningRecord> best(std::string_view op, const nlohmann::json& shape, int threads,
                                   std::string_view cpu_key) const;

 private:
  std::filesystem::path path_;
};

}  // namespace mls::kernels
