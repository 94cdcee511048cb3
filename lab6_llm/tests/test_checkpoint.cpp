// Lab 6 checkpoints: bit-exact round trips, atomic writes (the previous file survives an
// unwritable path or a full disk), and every kind of bad file as a clear mls::Error.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <limits>

#include "lab6_helpers.hpp"
#include "mls/common/rng.hpp"
#include "mls/llm/checkpoint.hpp"
#include "mls/llm/llmc.hpp"

using namespace mls::llm;
using llm_test::require_error;

namespace {

std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
  mls::Rng rng(seed, "lab6-test-floats");
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

Checkpoint sample_checkpoint(std::uint64_t seed = 1) {
  Checkpoint ck;
  ck.config = GPTConfig{2, 2, 8, 16, 11};
  ck.tokenizer = std::string("mls-tokenizer 1 char\nabcdefghijk");
  ck.step = 1234;
  ck.counters["data_position"] = 0xDEADBEEFCAFEull;
  ck.counters["seed"] = seed;
  ck.settings["lr"] = "0.001";
  ck.settings["batch"] = "8";
  const auto n = static_cast<std::size_t>(num_params(ck.config));
  std::vector<float> w = random_floats(n, seed);
  w[3] = std::numeric_limits<float>::quiet_NaN();
  w[4] = -0.0f;
  w[5] = std::numeric_limits<float>::infinity();
  w[6] = std::numeric_limits<float>::denorm_min();
  add_params(ck, "", w);
  add_params(ck, "m/", random_floats(n, seed + 1));
  add_params(ck, "v/", random_floats(n, seed + 2));
  ck.add("scalar", {}, {42.0f});
  ck.add("empty", {0, 3}, {});
  return ck;
}

/// Records a checkpoint's step, tokenizer and arrays (names, shapes, values, bit-exact).
void observe_checkpoint(const Checkpoint& c) {
  if (!mls::testing::observing()) return;
  mls::testing::observe("step", c.step);
  mls::testing::observe("tokenizer", c.tokenizer);
  for (const auto& a : c.arrays) {
    mls::testing::observe("array " + a.name + " shape", a.shape);
    mls::testing::observe("array " + a.name, a.data);
  }
}

void check_same(const Checkpoint& a, const Checkpoint& b) {
  observe_checkpoint(a);
  observe_checkpoint(b);
  CHECK(a.config == b.config);
  CHECK(a.tokenizer == b.tokenizer);
  CHECK(a.step == b.step);
  CHECK(a.counters == b.counters);
  CHECK(a.settings == b.settings);
  REQUIRE(a.arrays.size() == b.arrays.size());
  for (std::size_t i = 0; i < a.arrays.size(); ++i) {
    CHECK(a.arrays[i].name == b.arrays[i].name);
    CHECK(a.arrays[i].shape == b.arrays[i].shape);
    CHECK(bit_equal(a.arrays[i].data, b.arrays[i].data));
  }
}

bool no_temp_files(const llm_test::TempDir& dir) {
  for (const auto& e : llm_test::fs::directory_iterator(dir.path))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return false;
  return true;
}

}  // namespace

TEST_CASE("checkpoint: round trip is bit-exact", "[lab6][checkpoint]") {
  llm_test::TempDir dir("ckpt");
  const Checkpoint ck = sample_checkpoint();
  const std::string path = dir.file("run.ckpt");
  save_checkpoint(path, ck);
  const Checkpoint back = load_checkpoint(path);
  check_same(ck, back);
  CHECK(bit_equal(get_params(back, ""), get_params(ck, "")));
  CHECK(bit_equal(get_params(back, "v/"), get_params(ck, "v/")));
  MLS_CHECK_EQ(back.counter("data_position"), 0xDEADBEEFCAFEull);
  CHECK(back.get("scalar").data == std::vector<float>{42.0f});
  // Saving again replaces the file; no temporary file is left behind.
  const Checkpoint ck2 = sample_checkpoint(7);
  save_checkpoint(path, ck2);
  check_same(ck2, load_checkpoint(path));
  CHECK(no_temp_files(dir));
  // The bytes are deterministic.
  CHECK(serialize_checkpoint(ck2) == llm_test::slurp(path));
}

TEST_CASE("checkpoint: layout of the header", "[lab6][checkpoint]") {
  const std::string bytes = serialize_checkpoint(sample_checkpoint());
  MLS_CHECK_EQ(bytes.substr(0, 8), std::string("MLSGPTCK"));
  std::uint32_t version = 0;
  std::uint64_t size = 0, sum = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&size, bytes.data() + 16, 8);
  std::memcpy(&sum, bytes.data() + 24, 8);
  MLS_OBSERVE(version);
  MLS_OBSERVE(size);
  MLS_OBSERVE(sum);
  CHECK(version == kCheckpointVersion);
  CHECK(size == bytes.size() - 32);
  // The oracle: 64-bit FNV-1a of the payload, computed here independently, after the code ran.
  MLS_ORACLE(std::uint64_t h = 0xcbf29ce484222325ull;
             for (std::size_t i = 32; i < bytes.size(); ++i) {
               h ^= static_cast<unsigned char>(bytes[i]);
               h *= 0x100000001b3ull;
             })
  MLS_ORACLE_CHECK(CHECK(sum == h));
}

TEST_CASE("checkpoint: a flipped byte anywhere is detected", "[lab6][checkpoint]") {
  llm_test::TempDir dir("ckpt");
  const std::string good = serialize_checkpoint(sample_checkpoint());
  MLS_OBSERVE(good.size());
  mls::Rng rng(3, "flip");
  for (int trial = 0; trial < 20; ++trial) {
    std::string bad = good;
    const auto at = static_cast<std::size_t>(rng.randint(32, static_cast<std::int64_t>(bad.size())));
    bad[at] = static_cast<char>(bad[at] ^ (1 << rng.randint(0, 8)));
    llm_test::write_file(dir.file("bad.ckpt"), bad);
    require_error([&] { load_checkpoint(dir.file("bad.ckpt")); }, "is corrupt: checksum mismatch");
  }
  std::string bad = good;
  bad[8] = 9;  // version
  require_error([&] { parse_checkpoint(bad, "x.ckpt"); }, "'x.ckpt' has format version 9, this build reads version 1");
  bad = good;
  bad[0] = 'X';
  require_error([&] { parse_checkpoint(bad, "x.ckpt"); }, "is not an mls-gpt checkpoint");
  bad = good;
  bad[12] = 16;
  require_error([&] { parse_checkpoint(bad, "x.ckpt"); }, "header of 16 bytes, expected 32");
  require_error([&] { parse_checkpoint(good + "x", "x.ckpt"); }, "1 bytes after the payload");
}

TEST_CASE("checkpoint: truncated files", "[lab6][checkpoint]") {
  const std::string good = serialize_checkpoint(sample_checkpoint());
  MLS_OBSERVE(good.size());
  for (std::size_t len : {std::size_t{4}, std::size_t{8}, std::size_t{20}, std::size_t{31}, std::size_t{32},
                          std::size_t{100}, good.size() / 2, good.size() - 1}) {
    INFO("length " << len);
    require_error([&] { parse_checkpoint(good.substr(0, len), "t.ckpt"); }, "'t.ckpt' is truncated");
  }
  require_error([&] { parse_checkpoint("", "t.ckpt"); }, "is not an mls-gpt checkpoint");
}

TEST_CASE("checkpoint: foreign files", "[lab6][checkpoint]") {
  llm_test::TempDir dir("ckpt");
  llm_test::write_file(dir.file("notes.txt"), "just some text, long enough to hold a header of 32 bytes");
  require_error([&] { load_checkpoint(dir.file("notes.txt")); }, "notes.txt' is not an mls-gpt checkpoint");
  const Checkpoint ck = sample_checkpoint();
  write_llmc(dir.file("gpt2.bin"), ck.config, get_params(ck, ""));
  MLS_OBSERVE(llm_test::slurp(dir.file("gpt2.bin")).size());
  require_error([&] { load_checkpoint(dir.file("gpt2.bin")); }, "is an llm.c model file");
  require_error([&] { load_checkpoint(dir.file("missing.ckpt")); }, "load_checkpoint: cannot open");
  require_error([&] { load_checkpoint(dir.path.string()); }, "is a directory");
}

TEST_CASE("checkpoint: a corrupt payload with a valid checksum", "[lab6][checkpoint]") {
  // Build a file whose payload is well framed but says nonsense, with the right checksum.
  auto frame = [](const std::string& payload) {
    std::string f = "MLSGPTCK";
    const std::uint32_t v = 1, hs = 32;
    const std::uint64_t n = payload.size(), sum = mls::stream_hash(payload);
    f.append(reinterpret_cast<const char*>(&v), 4);
    f.append(reinterpret_cast<const char*>(&hs), 4);
    f.append(reinterpret_cast<const char*>(&n), 8);
    f.append(reinterpret_cast<const char*>(&sum), 8);
    return f + payload;
  };
  const std::string good = serialize_checkpoint(sample_checkpoint());
  std::string payload = good.substr(32);
  CHECK_NOTHROW(parse_checkpoint(frame(payload), "p.ckpt"));
  MLS_OBSERVE(parse_checkpoint(frame(payload), "p.ckpt").step);
  std::string bad = payload;
  const std::int64_t heads = 3;  // n_embd 8 is not divisible by 3
  std::memcpy(bad.data() + 8, &heads, 8);
  require_error([&] { parse_checkpoint(frame(bad), "p.ckpt"); }, "holds an invalid config: GPTConfig: n_embd = 8 is not divisible by n_head = 3");
  require_error([&] { parse_checkpoint(frame(payload.substr(0, 60)), "p.ckpt"); }, "'p.ckpt' is corrupt: tokenizer needs");
  require_error([&] { parse_checkpoint(frame(payload + "zz"), "p.ckpt"); }, "2 unread payload bytes");
}

TEST_CASE("checkpoint: an unwritable path leaves the previous checkpoint", "[lab6][checkpoint]") {
  llm_test::TempDir dir("ckpt");
  const std::string path = dir.file("run.ckpt");
  const Checkpoint old = sample_checkpoint(1);
  save_checkpoint(path, old);
  const std::string before = llm_test::slurp(path);
  // Creating the temporary file fails: no file descriptor is left (the temporary's name is unique,
  // so it cannot be taken ahead; the open-file limit is lowered to the lowest free descriptor).
  const Checkpoint next = sample_checkpoint(2);
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  const int lowest = ::dup(0);
  REQUIRE(lowest >= 0);
  ::close(lowest);
  rlimit none = saved;
  none.rlim_cur = static_cast<rlim_t>(lowest);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &none) == 0);
  // The error is looked at after the limit is restored: with no descriptor left, UBSan's check of
  // a member call (it probes memory through a pipe) cannot run and reports an invalid vptr.
  std::exception_ptr failure;
  try {
    save_checkpoint(path, next);
  } catch (...) {
    failure = std::current_exception();
  }
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &saved) == 0);
  require_error([&] { if (failure) std::rethrow_exception(failure); }, "cannot create the temporary file");
  CHECK(llm_test::slurp(path) == before);
  check_same(load_checkpoint(path), old);
  // A folder that does not exist.
  require_error([&] { save_checkpoint(dir.file("nope/run.ckpt"), old); }, "No such file or directory");
  // A path whose parent is a file.
  require_error([&] { save_checkpoint(path + "/x.ckpt", old); }, "Not a directory");
  // A read-only folder (root may write anyway: then only check that the save worked).
  const std::string ro = dir.file("ro");
  llm_test::fs::create_directory(ro);
  save_checkpoint(ro + "/run.ckpt", old);
  llm_test::fs::permissions(ro, llm_test::fs::perms::owner_read | llm_test::fs::perms::owner_exec);
  if (::geteuid() != 0) {
    require_error([&] { save_checkpoint(ro + "/run.ckpt", sample_checkpoint(3)); }, "Permission denied");
    check_same(load_checkpoint(ro + "/run.ckpt"), old);
  }
  llm_test::fs::permissions(ro, llm_test::fs::perms::owner_all);
  CHECK(no_temp_files(dir));
}

TEST_CASE("checkpoint: a full disk leaves the previous checkpoint", "[lab6][checkpoint]") {
  llm_test::TempDir dir("ckpt");
  const std::string path = dir.file("run.ckpt");
  save_checkpoint(path, sample_checkpoint(1));
  const std::string before = llm_test::slurp(path);
  const std::string bytes = serialize_checkpoint(sample_checkpoint(2));
  MLS_OBSERVE(before.size());
  MLS_OBSERVE(bytes.size());
  // An injected failure half way: the first write succeeds, the next one finds the disk full.
  int calls = 0;
  const WriteFn half = [&](int fd, const void* data, std::size_t n) -> long {
    if (calls++ == 0) return ::write(fd, data, std::min<std::size_t>(n, 100));
    errno = ENOSPC;
    return -1;
  };
  require_error([&] { write_file_atomic(path, bytes, "save_checkpoint", half); },
                "failed after 100 of");
  CHECK(llm_test::slurp(path) == before);
  CHECK(no_temp_files(dir));
  // The real thing where the system has it: /dev/full answers every write with ENOSPC.
  const int full = ::open("/dev/full", O_WRONLY);
  if (full >= 0) {
    const WriteFn to_dev_full = [&](int, const void* data, std::size_t n) -> long { return ::write(full, data, n); };
    require_error([&] { write_file_atomic(path, bytes, "save_checkpoint", to_dev_full); }, "(the disk is full)");
    ::close(full);
    CHECK(llm_test::slurp(path) == before);
    CHECK(no_temp_files(dir));
  }
  // A writer that makes no progress is a failure too, not a hang.
  const WriteFn stuck = [](int, const void*, std::size_t) -> long { return 0; };
  require_error([&] { write_file_atomic(path, bytes, "save_checkpoint", stuck); }, "is left as it was");
  CHECK(llm_test::slurp(path) == before);
}

TEST_CASE("checkpoint: resume compatibility names the field", "[lab6][checkpoint]") {
  const GPTConfig a{2, 2, 8, 16, 11};
  CHECK_NOTHROW(check_resume_compatible(a, a));
  GPTConfig b = a;
  b.n_embd = 16;
  require_error([&] { check_resume_compatible(a, b); }, "resume: the checkpoint has n_embd = 8, the run asks for n_embd = 16");
  b = a, b.block_size = 32;
  require_error([&] { check_resume_compatible(a, b); }, "block_size = 16");
  b = a, b.vocab_size = 12;
  require_error([&] { check_resume_compatible(a, b); }, "vocab_size = 11");
  Checkpoint x = sample_checkpoint(), y = sample_checkpoint();
  CHECK_NOTHROW(check_resume_compatible(x, y));
  y.tokenizer += "l";
  require_error([&] { check_resume_compatible(x, y); }, "tokenizer differs");
  y = sample_checkpoint(), y.config.n_layer = 3;
  require_error([&] { check_resume_compatible(x, y); }, "n_layer = 2");
}

TEST_CASE("checkpoint: arrays and counters errors", "[lab6][checkpoint]") {
  Checkpoint ck = sample_checkpoint();
  MLS_OBSERVE(ck.get("wte").shape);
  MLS_OBSERVE(ck.counter("seed"));
  require_error([&] { ck.add("wte", {1}, {0.0f}); }, "an array named 'wte' is already present");
  require_error([&] { ck.add("x", {2, 3}, {0.0f}); }, "array 'x' of shape [2, 3] needs 6 values, got 1");
  require_error([&] { ck.get("adam"); }, "no array named 'adam' (present: wte, wpe");
  require_error([&] { ck.counter("epoch"); }, "no counter named 'epoch'");
  require_error([&] { get_params(ck, "w/"); }, "no array named 'w/wte'");
  require_error([&] { add_params(ck, "z/", {1.0f}); }, "'z/' has 1 values, the config has");
  Checkpoint other;
  other.config = GPTConfig{2, 2, 8, 16, 11};
  other.add("wte", {11, 4}, std::vector<float>(44));
  require_error([&] { get_params(other, ""); }, "array 'wte' has shape [11, 4], the config needs [11, 8]");
  Checkpoint invalid = sample_checkpoint();
  invalid.config.n_head = 3;
  llm_test::TempDir dir("ckpt");
  require_error([&] { save_checkpoint(dir.file("i.ckpt"), invalid); }, "not divisible");
  CHECK_FALSE(llm_test::fs::exists(dir.file("i.ckpt")));
}
