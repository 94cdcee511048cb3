// Whole files in and out: write_file_atomic (temporary file, fsync, rename, folder fsync) and
// read_file. See mls/common/file.hpp for the guarantees.
#include "mls/common/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "mls/common/error.hpp"

namespace mls {

std::string errno_text(int err) {
  std::string s = std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) s += " (the disk is full)";
  return s;
}

namespace {

/// The temporary file of one write: created unique (O_EXCL) beside the target, removed by the
/// destructor unless it was renamed into place.
struct TempFile {
  std::string name;
  int fd = -1;
  bool renamed = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!renamed && !name.empty()) ::unlink(name.c_str());
  }
};

/// Writes all of `bytes` to `fd` (chunks of 16 MiB, EINTR retried); returns 0 or the errno of the
/// failure, with `done` the bytes written before it.
int write_all(int fd, std::string_view bytes, const WriteFn& write_fn, std::size_t& done) {
  done = 0;
  while (done < bytes.size()) {
    const std::size_t chunk = std::min<std::size_t>(bytes.size() - done, std::size_t{1} << 24);
    errno = 0;
    const long n = write_fn ? write_fn(fd, bytes.data() + done, chunk) : ::write(fd, bytes.data() + done, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n == 0 && errno == 0 ? ENOSPC : errno;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

}  // namespace

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes, std::string_view op,
                       const WriteFn& write_fn) {
  namespace fs = std::filesystem;
  MLS_CHECK(!path.empty(), op, ": cannot write a file: the path is empty");
  const std::string where = path.string();
  MLS_CHECK(path.has_filename(), op, ": cannot write '", where, "': the path names a folder, expected a file");
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  // ".<name>.tmp.XXXXXX", the name cut so the temporary stays under NAME_MAX (255 bytes).
  std::string leaf = path.filename().string().substr(0, 200);
  TempFile tmp;
  tmp.name = (dir / ("." + leaf + ".tmp.XXXXXX")).string();
  tmp.fd = ::mkostemp(tmp.name.data(), O_CLOEXEC);
  if (tmp.fd < 0) {
    const int err = errno;
    const std::string name = tmp.name;
    tmp.name.clear();  // nothing was created
    fail(op, ": cannot write '", where, "': cannot create the temporary file '", name, "': ", errno_text(err));
  }
  auto give_up = [&](const std::string& what, int err) {
    fail(op, ": cannot write '", where, "': ", what, ": ", errno_text(err), "; '", where, "' is left as it was");
  };
  std::size_t done = 0;
  if (const int err = write_all(tmp.fd, bytes, write_fn, done))
    give_up("writing the temporary file failed after " + std::to_string(done) + " of " + std::to_string(bytes.size()) +
                " bytes",
            err);
  // mkostemp creates the file 0600; the grader's sandboxed uid and other readers need 0644.
  if (::fchmod(tmp.fd, 0644) != 0) give_up("setting the mode of the temporary file failed", errno);
  // EINVAL/EROFS: a file system without fsync (e.g. some special ones): nothing more to do.
  if (::fsync(tmp.fd) != 0 && errno != EINVAL && errno != EROFS) give_up("fsync of the temporary file failed", errno);
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) give_up("closing the temporary file failed", errno);
  // rename() replaces a symlink at `path` by the new file instead of writing through it.
  if (::rename(tmp.name.c_str(), where.c_str()) != 0)
    give_up("renaming '" + tmp.name + "' over it failed", errno);
  tmp.renamed = true;
  // Make the rename itself durable. A folder we may not open (mode -wx) is left unsynced.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    const int rc = ::fsync(dfd);
    const int err = errno;
    ::close(dfd);
    MLS_CHECK(rc == 0 || err == EINVAL || err == EROFS, op, ": wrote '", where, "', but fsync of its folder '",
              dir.string(), "' failed: ", errno_text(err));
  }
}

std::string read_file(const std::filesystem::path& path, std::string_view op) {
  const std::string where = path.string();
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
  const int fd = ::open(where.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  MLS_CHECK(fd >= 0, op, ": cannot open '", where, "': ", errno_text(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  MLS_CHECK(::fstat(fd, &st) == 0, op, ": cannot stat '", where, "': ", errno_text(errno));
  if (!S_ISREG(st.st_mode))
    fail(op, ": '", where, "' is not a regular file (it is ",
         S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket", ")");
  // Read to the end, not to st_size: files in /proc report 0, and a file may grow meanwhile.
  std::string out(static_cast<std::size_t>(std::max<off_t>(st.st_size, 0)) + 1, '\0');
  std::size_t got = 0;
  for (;;) {
    if (got == out.size()) out.resize(std::max<std::size_t>(2 * out.size(), 1 << 16));
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    MLS_CHECK(n >= 0, op, ": cannot read '", where, "': ", errno_text(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

}  // namespace mls
