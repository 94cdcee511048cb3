// Lab 4 part 2: the tuning database, JSON lines under flock (see mls/kernels/tuning_db.hpp).
#include "mls/kernels/tuning_db.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <mutex>
#include <set>

#include "mls/common/error.hpp"
#include "mls/common/file.hpp"
#include "mls/kernels/jit.hpp"
#include "mls/kernels/roofline.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace mls::kernels {

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// An open file descriptor, closed (and so unlocked) at the end of its scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

/// flock(fd, how), EINTR retried; 0 or errno.
int lock_file(int fd, int how) {
  while (::flock(fd, how) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

}  // namespace

TuningRecord make_tuning_record(std::string op, json shape, int threads, json schedule, double seconds,
                                double gflops) {
  const jit::CpuInfo& cpu = jit::cpu_info();
  TuningRecord r;
  r.cpu_key = jit::cpu_key();
  r.cpu_model = cpu.model;
  r.isa = cpu.isa();
  r.op = std::move(op);
  r.shape = std::move(shape);
  r.threads = threads;
  r.schedule = std::move(schedule);
  r.seconds = seconds;
  r.gflops = gflops;
  r.time = utc_now();
  return r;
}

json to_json(const TuningRecord& r) {
  return json{{"cpu_key", r.cpu_key}, {"cpu_model", r.cpu_model}, {"isa", r.isa},
              {"op", r.op},           {"shape", r.shape},         {"threads", r.threads},
              {"schedule", r.schedule}, {"seconds", r.seconds},   {"gflops", r.gflops},
              {"time", r.time},       {"version", r.version}};
}

namespace {
/// The field `name` of `j`, required to be of the kind `is` checks ("a string", ...).
const json& field(const json& j, const char* name, bool (json::*is)() const noexcept, const char* kind) {
  const auto it = j.find(name);
  MLS_CHECK(it != j.end(), "tuning_db: record field '", name, "' is missing");
  MLS_CHECK(((*it).*is)(), "tuning_db: record field '", name, "' is ", it->type_name(), ", expected ", kind);
  return *it;
}
}  // namespace

TuningRecord tuning_record_from_json(const json& j) {
  MLS_CHECK(j.is_object(), "tuning_db: a record is ", j.type_name(), ", expected a JSON object");
  TuningRecord r;
  r.cpu_key = field(j, "cpu_key", &json::is_string, "a string").get<std::string>();
  r.cpu_model = field(j, "cpu_model", &json::is_string, "a string").get<std::string>();
  r.isa = field(j, "isa", &json::is_string, "a string").get<std::string>();
  r.op = field(j, "op", &json::is_string, "a string").get<std::string>();
  r.shape = field(j, "shape", &json::is_object, "an object");
  r.threads = field(j, "threads", &json::is_number_integer, "an integer").get<int>();
  r.schedule = field(j, "schedule", &json::is_object, "an object");
  r.seconds = field(j, "seconds", &json::is_number, "a number").get<double>();
  r.gflops = field(j, "gflops", &json::is_number, "a number").get<double>();
  r.time = field(j, "time", &json::is_string, "a string").get<std::string>();
  r.version = field(j, "version", &json::is_number_integer, "an integer").get<int>();
  return r;
}

void validate_tuning_record(const TuningRecord& r) {
  MLS_CHECK(!r.op.empty(), "tuning_db: append: the record's op is empty, expected an operator name such as \"sgemm\"");
  MLS_CHECK(!r.cpu_key.empty(), "tuning_db: append: record of '", r.op, "' has an empty cpu_key (make_tuning_record fills it)");
  MLS_CHECK(r.shape.is_object(), "tuning_db: append: record of '", r.op, "' has shape ", r.shape.dump(), ", expected a JSON object");
  MLS_CHECK(r.schedule.is_object(), "tuning_db: append: record of '", r.op, "' has schedule ", r.schedule.dump(),
            ", expected a JSON object");
  MLS_CHECK(r.threads >= 1, "tuning_db: append: record of '", r.op, "' has threads = ", r.threads, ", expected >= 1");
  MLS_CHECK(std::isfinite(r.seconds) && r.seconds > 0, "tuning_db: append: record of '", r.op, "' has seconds = ",
            r.seconds, ", expected a positive finite number");
  MLS_CHECK(std::isfinite(r.gflops) && r.gflops >= 0, "tuning_db: append: record of '", r.op, "' has gflops = ",
            r.gflops, ", expected a finite number >= 0");
}

fs::path default_tuning_db_path() {
  if (const char* env = std::getenv("MLS_TUNING_DB"); env && *env) return env;
  const fs::path root = default_peak_cache_dir();
  if (!root.empty()) return root / "tuning.jsonl";
  std::error_code ec;
  const fs::path tmp = fs::temp_directory_path(ec);
  return (ec ? fs::path("/tmp") : tmp) / ("mlsys-labs-" + std::to_string(::getuid())) / "tuning.jsonl";
}

TuningDb::TuningDb(fs::path file) : path_(std::move(file)) {
  MLS_CHECK(!path_.empty(), "tuning_db: the database path is empty, expected a file path");
}

void TuningDb::append(const TuningRecord& r) const {
  validate_tuning_record(r);
  std::string line = to_json(r).dump() + "\n";  // dump() escapes newlines: one line
  if (path_.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(path_.parent_path(), ec);
    MLS_CHECK(!ec, "tuning_db: cannot create the folder of '", path_.string(), "': ", ec.message());
  }
  Fd f{::open(path_.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644)};
  MLS_CHECK(f.fd >= 0, "tuning_db: cannot open '", path_.string(), "' to append: ", mls::errno_text(errno));
  if (const int err = lock_file(f.fd, LOCK_EX))
    mls::fail("tuning_db: cannot lock '", path_.string(), "': ", mls::errno_text(err));
  // A line a crashed writer left unfinished is ended, so this record starts a line of its own.
  struct stat st {};
  if (::fstat(f.fd, &st) == 0 && st.st_size > 0) {
    char last = '\n';
    if (::pread(f.fd, &last, 1, st.st_size - 1) == 1 && last != '\n') line.insert(line.begin(), '\n');
  }
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(f.fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    MLS_CHECK(n > 0, "tuning_db: cannot append to '", path_.string(), "': ", mls::errno_text(n < 0 ? errno : ENOSPC));
    done += static_cast<std::size_t>(n);
  }
}

TuningScan TuningDb::scan() const {
  TuningScan s;
  Fd f{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) {
    MLS_CHECK(errno == ENOENT, "tuning_db: cannot open '", path_.string(), "': ", mls::errno_text(errno));
    return s;  // no file yet: no records
  }
  if (const int err = lock_file(f.fd, LOCK_SH))
    mls::fail("tuning_db: cannot lock '", path_.string(), "': ", mls::errno_text(err));
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    MLS_CHECK(n >= 0, "tuning_db: cannot read '", path_.string(), "': ", mls::errno_text(errno));
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  std::size_t at = 0, number = 0;
  while (at < text.size()) {
    const std::size_t nl = std::min(text.find('\n', at), text.size());
    const std::string_view line(text.data() + at, nl - at);
    at = nl + 1;
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    ++s.lines;
    try {
      const json j = json::parse(line);
      TuningRecord r = tuning_record_from_json(j);
      if (r.version != kTuningRecordVersion) {
        ++s.other_version;
        continue;
      }
      s.records.push_back(std::move(r));
    } catch (const std::exception& e) {  // json::parse_error or mls::Error
      if (s.malformed++ == 0) s.first_problem = "line " + std::to_string(number) + ": " + e.what();
    }
  }
  return s;
}

std::optional<TuningRecord> TuningDb::best(std::string_view op, const json& shape, int threads,
                                           std::string_view cpu_key) const {
  TuningScan s = scan();
  if (s.malformed > 0) {
    static std::mutex mu;
    static std::set<std::string> warned;
    std::lock_guard lock(mu);
    if (warned.insert(path_.string()).second)
      std::cerr << "mls tuning_db: warning: skipped " << s.malformed << " malformed line(s) in '" << path_.string()
                << "' (first: " << s.first_problem << ")\n";
  }
  std::optional<TuningRecord> best;
  for (TuningRecord& r : s.records) {
    if (r.op != op || r.cpu_key != cpu_key || r.threads != threads || r.shape != shape) continue;
    if (!best || r.seconds < best->seconds) best = std::move(r);
  }
  return best;
}

}  // namespace mls::kernels
