// Tests of the whole-file helpers (common/src/file.cpp): write_file_atomic and read_file.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/common/file.hpp"
#include "mls/testing.hpp"

namespace fs = std::filesystem;
using mls::testing::observe;
using mls::testing::require_error;

namespace {

/// A fresh folder (mls::testing::TempDir), removed with everything in it.
struct Folder : mls::testing::TempDir {
  Folder() : TempDir("file") {}
  /// The names in the folder, sorted ("a b c").
  std::string names() const {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(path)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    std::string s;
    for (const auto& n : v) s += (s.empty() ? "" : " ") + n;
    return s;
  }
};

}  // namespace

TEST_CASE("file: write then read round-trips any bytes, overwrite replaces", "[common][file]") {
  Folder dir;
  const std::string path = dir.file("data.bin");
  std::string bytes;
  for (int i = 0; i < 70000; ++i) bytes += static_cast<char>(i * 7 % 256);  // NULs and high bytes
  mls::write_file_atomic(path, bytes, "test");
  const std::string back = mls::read_file(path);
  observe("read back size", back.size());
  CHECK(back == bytes);
  // Mode 0644 whatever the umask, so a sandboxed reader can read it.
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  observe("mode", static_cast<int>(st.st_mode & 07777));
  CHECK((st.st_mode & 07777) == 0644);
  mls::write_file_atomic(path, "short");
  observe("overwritten", mls::read_file(path));
  CHECK(mls::read_file(path) == "short");
  mls::write_file_atomic(path, "");
  CHECK(mls::read_file(path).empty());
  observe("folder after writes", dir.names());
  CHECK(dir.names() == "data.bin");  // no temporary left behind
}

TEST_CASE("file: a symlink at the destination is replaced, never written through", "[common][file]") {
  Folder dir;
  const std::string target = dir.file("precious.txt"), link = dir.file("out.txt");
  mls::write_file_atomic(target, "keep me");
  REQUIRE(::symlink(target.c_str(), link.c_str()) == 0);
  mls::write_file_atomic(link, "new");
  observe("target", mls::read_file(target));
  CHECK(mls::read_file(target) == "keep me");
  CHECK_FALSE(fs::is_symlink(link));
  CHECK(mls::read_file(link) == "new");
  // A dangling link pointing out of the folder is replaced too.
  const std::string dangling = dir.file("dangling.txt");
  REQUIRE(::symlink((dir.path / "nowhere" / "x").c_str(), dangling.c_str()) == 0);
  mls::write_file_atomic(dangling, "here");
  CHECK(mls::read_file(dangling) == "here");
  CHECK_FALSE(fs::exists(dir.path / "nowhere"));
  observe("folder", dir.names());
  CHECK(dir.names() == "dangling.txt out.txt precious.txt");
}

TEST_CASE("file: failed writes name the operation and the path and leave nothing behind", "[common][file]") {
  Folder dir;
  SECTION("a missing folder") {
    const std::string path = dir.file("no/such/folder/x.txt");
    require_error([&] { mls::write_file_atomic(path, "x", "save_thing"); },
                  "save_thing: cannot write '" + path + "': cannot create the temporary file");
    require_error([&] { mls::write_file_atomic(path, "x"); }, "No such file or directory");
  }
  SECTION("a parent that is a file") {
    mls::write_file_atomic(dir.file("plain"), "x");
    const std::string path = dir.file("plain/x.txt");
    require_error([&] { mls::write_file_atomic(path, "x"); }, "write_file_atomic: cannot write '" + path + "'");
    require_error([&] { mls::write_file_atomic(path, "x"); }, "Not a directory");
    CHECK(dir.names() == "plain");
  }
  SECTION("a destination that is a folder: the temporary is removed") {
    fs::create_directory(dir.path / "sub");
    require_error([&] { mls::write_file_atomic(dir.file("sub"), "x"); }, "renaming");
    observe("folder", dir.names());
    CHECK(dir.names() == "sub");
  }
  SECTION("a full disk half way: the old file stays, the temporary is removed") {
    const std::string path = dir.file("f.txt");
    mls::write_file_atomic(path, "old");
    int calls = 0;
    const mls::WriteFn half = [&](int fd, const void* data, std::size_t n) -> long {
      if (calls++ == 0) return ::write(fd, data, std::min<std::size_t>(n, 2));
      errno = ENOSPC;
      return -1;
    };
    require_error([&] { mls::write_file_atomic(path, "new content", "op", half); },
                  "op: cannot write '" + path + "': writing the temporary file failed after 2 of 11 bytes");
    require_error([&] { mls::write_file_atomic(path, "new content", "op", half); }, "(the disk is full)");
    CHECK(mls::read_file(path) == "old");
    observe("folder", dir.names());
    CHECK(dir.names() == "f.txt");
  }
  SECTION("a read-only folder") {
    if (::geteuid() == 0) {
      WARN("running as root: permission checks do not apply, the read-only folder case is skipped");
      return;
    }
    const fs::path ro = dir.path / "ro";
    fs::create_directory(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    require_error([&] { mls::write_file_atomic(ro / "x.txt", "x"); }, "Permission denied");
    fs::permissions(ro, fs::perms::owner_all);
    CHECK(fs::is_empty(ro));
  }
  SECTION("an empty path") { require_error([] { mls::write_file_atomic("", "x"); }, "the path is empty"); }
}

TEST_CASE("file: read_file errors name the path", "[common][file]") {
  Folder dir;
  const std::string missing = dir.file("missing.txt");
  require_error([&] { mls::read_file(missing, "load"); }, "load: cannot open '" + missing + "': No such file");
  require_error([&] { mls::read_file(dir.path); }, "is not a regular file (it is a directory)");
  const std::string fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  require_error([&] { mls::read_file(fifo); }, "'" + fifo + "' is not a regular file (it is a FIFO)");  // no hang
  // A file whose size the system does not know ahead (st_size 0) is read to its end.
  const std::string status = mls::read_file("/proc/self/status");
  observe("proc read is not empty", !status.empty());
  CHECK(status.find("Name:") != std::string::npos);
}
