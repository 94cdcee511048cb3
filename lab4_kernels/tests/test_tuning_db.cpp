// Lab 4 part 2: the tuning database (mls/kernels/tuning_db.hpp), in files of the test's own folder.
#include <catch2/catch.hpp>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "jit_test_util.hpp"
#include "mls/common/file.hpp"
#include "mls/kernels/jit.hpp"
#include "mls/kernels/tuning_db.hpp"
#include "mls/testing.hpp"

namespace fs = std::filesystem;
using mls::kernels::TuningDb;
using mls::kernels::TuningRecord;
using kernels_test::EnvGuard;
using kernels_test::run_in_processes;
using nlohmann::json;

namespace {

/// A record of CPU `cpu` for sgemm m = n = k = `n`.
TuningRecord sgemm_record(const std::string& cpu, long n, int threads, double seconds, int mc) {
  TuningRecord r;
  r.cpu_key = cpu;
  r.cpu_model = "Test CPU " + cpu;
  r.isa = "avx2 fma";
  r.op = "sgemm";
  r.shape = {{"m", n}, {"n", n}, {"k", n}};
  r.threads = threads;
  r.schedule = {{"mc", mc}, {"order", "ikj"}};
  r.seconds = seconds;
  r.gflops = 2.0 * n * n * n / seconds * 1e-9;
  r.time = "2026-11-24T17:05:00Z";
  return r;
}

json sgemm_shape(long n) { return {{"m", n}, {"n", n}, {"k", n}}; }

/// Whether `t` reads "YYYY-MM-DDTHH:MM:SSZ" (digits where the pattern has letters). (Not std::regex:
/// GCC 12 warns inside it at -O1 with the sanitizers.)
bool is_utc_stamp(const std::string& t) {
  const std::string pattern = "dddd-dd-ddTdd:dd:ddZ";
  if (t.size() != pattern.size()) return false;
  for (std::size_t i = 0; i < t.size(); ++i)
    if (pattern[i] == 'd' ? !std::isdigit(static_cast<unsigned char>(t[i])) : t[i] != pattern[i]) return false;
  return true;
}

}  // namespace

TEST_CASE("tuning_db: a record round-trips through JSON, and a bad one names its field", "[lab4][tuning_db]") {
  const TuningRecord r = sgemm_record("cpu-a", 97, 2, 0.25, 48);
  const json j = mls::kernels::to_json(r);
  CHECK(j.at("op") == "sgemm");
  CHECK(j.at("shape") == sgemm_shape(97));
  CHECK(j.at("version") == mls::kernels::kTuningRecordVersion);
  CHECK(j.size() == 11);
  const TuningRecord back = mls::kernels::tuning_record_from_json(j);
  CHECK(mls::kernels::to_json(back) == j);
  CHECK(back.seconds == r.seconds);
  json missing = j;
  missing.erase("threads");
  mls::testing::require_error([&] { mls::kernels::tuning_record_from_json(missing); },
                              "tuning_db: record field 'threads' is missing");
  json wrong = j;
  wrong["shape"] = "97x97";
  mls::testing::require_error([&] { mls::kernels::tuning_record_from_json(wrong); },
                              "tuning_db: record field 'shape' is string, expected an object");
  wrong = j;
  wrong["threads"] = 1.5;
  mls::testing::require_error([&] { mls::kernels::tuning_record_from_json(wrong); },
                              "tuning_db: record field 'threads' is number, expected an integer");
  mls::testing::require_error([&] { mls::kernels::tuning_record_from_json(json::array()); },
                              "tuning_db: a record is array, expected a JSON object");
}

TEST_CASE("tuning_db: append refuses a record that is not whole", "[lab4][tuning_db]") {
  mls::testing::TempDir dir("tuning_bad");
  const TuningDb db(dir.file("t.jsonl"));
  auto bad = [&](auto edit, const std::string& needle) {
    TuningRecord r = sgemm_record("cpu-a", 8, 1, 0.5, 8);
    edit(r);
    mls::testing::require_error([&] { db.append(r); }, needle);
  };
  bad([](TuningRecord& r) { r.op.clear(); }, "tuning_db: append: the record's op is empty");
  bad([](TuningRecord& r) { r.cpu_key.clear(); }, "has an empty cpu_key");
  bad([](TuningRecord& r) { r.threads = 0; }, "record of 'sgemm' has threads = 0, expected >= 1");
  bad([](TuningRecord& r) { r.seconds = 0; }, "record of 'sgemm' has seconds = 0, expected a positive finite number");
  bad([](TuningRecord& r) { r.seconds = std::nan(""); }, "has seconds = nan");
  bad([](TuningRecord& r) { r.gflops = -1; }, "has gflops = -1, expected a finite number >= 0");
  bad([](TuningRecord& r) { r.shape = json::array({8, 8}); }, "has shape [8,8], expected a JSON object");
  bad([](TuningRecord& r) { r.schedule = 3; }, "has schedule 3, expected a JSON object");
  CHECK_FALSE(fs::exists(dir.file("t.jsonl")));
  mls::testing::require_error([] { TuningDb(""); }, "tuning_db: the database path is empty");
  // A file that cannot be made: under a regular file.
  mls::write_file_atomic(dir.file("plain"), "x");
  const TuningDb nowhere(dir.path / "plain" / "t.jsonl");
  mls::testing::require_error([&] { nowhere.append(sgemm_record("cpu-a", 8, 1, 0.5, 8)); },
                              "tuning_db: cannot create the folder of '");
}

TEST_CASE("tuning_db: best is the fastest record of this op, shape, thread count and CPU", "[lab4][tuning_db]") {
  mls::testing::TempDir dir("tuning_best");
  const TuningDb db(dir.path / "sub" / "tuning.jsonl");  // the folder is made on first append
  CHECK_FALSE(db.best("sgemm", sgemm_shape(64), 1, "cpu-a"));  // no file yet
  db.append(sgemm_record("cpu-a", 64, 1, 0.30, 16));
  db.append(sgemm_record("cpu-a", 64, 1, 0.10, 32));  // the fastest here
  db.append(sgemm_record("cpu-a", 64, 1, 0.20, 64));
  db.append(sgemm_record("cpu-b", 64, 1, 0.01, 128));  // faster, but another CPU
  db.append(sgemm_record("cpu-a", 64, 2, 0.05, 256));  // another thread count
  db.append(sgemm_record("cpu-a", 65, 1, 0.02, 512));  // another shape
  TuningRecord softmax = sgemm_record("cpu-a", 64, 1, 0.001, 1024);
  softmax.op = "softmax";
  db.append(softmax);
  const auto best = db.best("sgemm", sgemm_shape(64), 1, "cpu-a");
  REQUIRE(best);
  CHECK(best->schedule.at("mc") == 32);
  CHECK(best->seconds == 0.10);
  CHECK(db.best("sgemm", sgemm_shape(64), 1, "cpu-b")->schedule.at("mc") == 128);
  CHECK(db.best("sgemm", sgemm_shape(64), 2, "cpu-a")->schedule.at("mc") == 256);
  CHECK(db.best("softmax", sgemm_shape(64), 1, "cpu-a")->schedule.at("mc") == 1024);
  CHECK_FALSE(db.best("sgemm", sgemm_shape(64), 4, "cpu-a"));
  CHECK_FALSE(db.best("sgemm", sgemm_shape(64), 1, "cpu-c"));
  // The key order of a shape does not matter.
  CHECK(db.best("sgemm", json::parse(R"({"k":64,"n":64,"m":64})"), 1, "cpu-a"));
  CHECK(db.scan().records.size() == 7);
  CHECK(db.scan().malformed == 0);
}

TEST_CASE("tuning_db: malformed lines and other record versions are skipped and counted", "[lab4][tuning_db]") {
  mls::testing::TempDir dir("tuning_malformed");
  const fs::path file = dir.path / "tuning.jsonl";
  json other_version = mls::kernels::to_json(sgemm_record("cpu-a", 8, 1, 0.001, 1));
  other_version["version"] = 99;
  json wrong_type = mls::kernels::to_json(sgemm_record("cpu-a", 8, 1, 0.002, 2));
  wrong_type["seconds"] = "fast";
  mls::write_file_atomic(file, mls::kernels::to_json(sgemm_record("cpu-a", 8, 1, 0.5, 3)).dump() + "\n" +
                                   "not json at all\n\n" + wrong_type.dump() + "\n" + other_version.dump() + "\n" +
                                   "[1, 2, 3]\n" + R"({"op": "sgemm", "seconds": 0.0001)" + "\n");
  const TuningDb db(file);
  const auto scan = db.scan();
  CHECK(scan.lines == 6);
  CHECK(scan.records.size() == 1);
  CHECK(scan.malformed == 4);
  CHECK(scan.other_version == 1);
  CHECK_THAT(scan.first_problem, Catch::StartsWith("line 2: "));
  const auto best = db.best("sgemm", sgemm_shape(8), 1, "cpu-a");
  REQUIRE(best);
  CHECK(best->schedule.at("mc") == 3);
  // A line a crashed writer left unfinished: the next record still gets a line of its own.
  mls::write_file_atomic(file, mls::kernels::to_json(sgemm_record("cpu-a", 8, 1, 0.5, 3)).dump() + "\n{\"op\": \"sg");
  db.append(sgemm_record("cpu-a", 8, 1, 0.25, 4));
  CHECK(db.scan().records.size() == 2);
  CHECK(db.scan().malformed == 1);
  CHECK(db.best("sgemm", sgemm_shape(8), 1, "cpu-a")->schedule.at("mc") == 4);
}

TEST_CASE("tuning_db: processes appending at once leave every line whole", "[lab4][tuning_db]") {
  mls::testing::TempDir dir("tuning_concurrent");
  const TuningDb db(dir.path / "tuning.jsonl");
  constexpr int kProcesses = 4, kEach = 40;
  // Lines longer than PIPE_BUF (4 KiB): atomic only because append writes under its lock.
  const std::string padding(6000, 'p');
  const std::vector<int> codes = run_in_processes(kProcesses, [&](int p) {
    for (int i = 0; i < kEach; ++i) {
      TuningRecord r = sgemm_record("cpu-a", 128, 1, 0.001 * (1 + p * kEach + i), i);
      r.schedule["writer"] = p;
      r.schedule["padding"] = padding;
      db.append(r);
    }
    return true;
  });
  CHECK(codes == std::vector<int>(kProcesses, 0));
  const auto scan = db.scan();
  CHECK(scan.malformed == 0);
  CHECK(scan.lines == static_cast<std::size_t>(kProcesses * kEach));
  std::set<std::pair<int, int>> seen;
  for (const auto& r : scan.records) {
    CHECK(r.schedule.at("padding") == padding);
    seen.emplace(r.schedule.at("writer").get<int>(), r.schedule.at("mc").get<int>());
  }
  CHECK(seen.size() == static_cast<std::size_t>(kProcesses * kEach));
  CHECK(db.best("sgemm", sgemm_shape(128), 1, "cpu-a")->schedule.at("writer") == 0);
}

TEST_CASE("tuning_db: records of this machine, and where the file lives", "[lab4][tuning_db]") {
  const TuningRecord r = mls::kernels::make_tuning_record("sgemm", sgemm_shape(16), 2, {{"mc", 8}}, 1e-4, 81.92);
  CHECK(r.cpu_key == mls::kernels::jit::cpu_key());
  CHECK(r.cpu_model == mls::kernels::jit::cpu_info().model);
  CHECK(r.isa == mls::kernels::jit::cpu_info().isa());
  CHECK(r.version == mls::kernels::kTuningRecordVersion);
  CHECK(is_utc_stamp(r.time));
  CHECK_FALSE(is_utc_stamp("2026-11-24 17:05:00Z"));
  mls::testing::TempDir dir("tuning_env");
  {
    EnvGuard a("MLS_TUNING_DB", dir.file("mine.jsonl"));
    CHECK(mls::kernels::default_tuning_db_path() == dir.file("mine.jsonl"));
    const TuningDb db;
    CHECK(db.path() == dir.file("mine.jsonl"));
    db.append(r);
    CHECK(db.best("sgemm", sgemm_shape(16), 2, mls::kernels::jit::cpu_key())->gflops == 81.92);
  }
  EnvGuard a("MLS_TUNING_DB", std::nullopt), b("XDG_CACHE_HOME", "/x/cache"), c("HOME", "/h");
  CHECK(mls::kernels::default_tuning_db_path() == "/x/cache/mlsys-labs/tuning.jsonl");
  EnvGuard d("XDG_CACHE_HOME", std::nullopt);
  CHECK(mls::kernels::default_tuning_db_path() == "/h/.cache/mlsys-labs/tuning.jsonl");
  EnvGuard e("HOME", std::nullopt);
  CHECK_THAT(mls::kernels::default_tuning_db_path().string(), Catch::EndsWith("/tuning.jsonl") &&
                                                                  Catch::Contains("/mlsys-labs-"));
}
