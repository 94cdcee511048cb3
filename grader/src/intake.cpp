#include "mls/grader/intake.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cctype>
#include <map>
#include <set>

#include "mls/grader/util.hpp"

namespace mls::grader {

std::string strip_comments_and_strings(std::string_view s) {
  std::string out(s);
  std::size_t i = 0, n = s.size();
  auto blank = [&](std::size_t a, std::size_t b) {
    for (std::size_t k = a; k < b && k < n; ++k)
      if (out[k] != '\n') out[k] = ' ';
  };
  while (i < n) {
    char c = s[i];
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      std::size_t e = s.find('\n', i);
      if (e == std::string_view::npos) e = n;
      blank(i, e);
      i = e;
    } else if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      std::size_t e = s.find("*/", i + 2);
      e = (e == std::string_view::npos) ? n : e + 2;
      blank(i, e);
      i = e;
    } else if (c == 'R' && i + 1 < n && s[i + 1] == '"' && (i == 0 || !std::isalnum(static_cast<unsigned char>(s[i - 1])))) {
      std::size_t open = s.find('(', i + 2);
      if (open == std::string_view::npos) break;
      std::string delim = ")" + std::string(s.substr(i + 2, open - i - 2)) + "\"";
      std::size_t e = s.find(delim, open);
      e = (e == std::string_view::npos) ? n : e + delim.size();
      blank(i + 1, e);
      i = e;
    } else if (c == '"' || c == '\'') {
      std::size_t k = i + 1;
      while (k < n && s[k] != c && s[k] != '\n') k += (s[k] == '\\') ? 2 : 1;
      blank(i + 1, std::min(k, n));
      i = k + 1;
    } else {
      ++i;
    }
  }
  return out;
}

std::vector<std::string> forbidden_symbols(std::string_view source) {
  std::vector<std::string> why;
  std::set<std::string> seen;
  auto add = [&](const std::string& s) {
    if (seen.insert(s).second) why.push_back(s);
  };
  // Includes first (a quoted include is a string literal, blanked below).
  for (const auto& line : split(source, '\n')) {
    std::string_view l = trim(line);
    if (!starts_with(l, "#")) continue;
    std::string low(l);
    for (auto& ch : low) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (low.find("include") != std::string::npos && low.find("catch") != std::string::npos)
      add("includes Catch2 (" + std::string(l) + "): student files may not use the test framework");
  }
  std::string code = strip_comments_and_strings(source);
  static const std::map<std::string, std::string> banned = {
      {"main", "defines or names `main`: the test program has its own main (rename the function)"},
      {"Catch", "uses the Catch2 namespace"},
      {"TEST_CASE", "defines Catch2 test cases"},
      {"CATCH_REGISTER_LISTENER", "registers a Catch2 listener"},
      {"TestEventListenerBase", "defines a Catch2 listener"},
      {"CATCH_CONFIG_MAIN", "defines the Catch2 main"},
      {"CATCH_CONFIG_RUNNER", "defines a Catch2 runner"},
      {"mls_grader_harness", "uses the grader harness's symbols"},
      {"MLS_GRADER_FD", "uses the grader harness's channel"},
  };
  std::size_t i = 0, n = code.size();
  while (i < n) {
    if (!(std::isalpha(static_cast<unsigned char>(code[i])) || code[i] == '_')) {
      ++i;
      continue;
    }
    std::size_t b = i;
    while (i < n && (std::isalnum(static_cast<unsigned char>(code[i])) || code[i] == '_')) ++i;
    std::string id = code.substr(b, i - b);
    auto it = banned.find(id);
    if (it == banned.end()) continue;
    if (id == "main") {
      // `obj.main` / `p->main` name a member, not the program's main.
      std::size_t k = b;
      while (k > 0 && std::isspace(static_cast<unsigned char>(code[k - 1]))) --k;
      if (k > 0 && (code[k - 1] == '.' || (k > 1 && code[k - 1] == '>' && code[k - 2] == '-'))) continue;
    }
    add(it->second);
  }
  return why;
}

namespace {

/// A folder opened without following symlinks; closed when the object dies.
struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd >= 0) ::close(fd);
      fd = o.fd;
      o.fd = -1;
    }
    return *this;
  }
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

const char* kind_of(mode_t m) {
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISDIR(m)) return "a folder";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}

enum class Found { No, Refused, File };

struct Lookup {
  Found found = Found::No;
  std::string why;   ///< for Refused
  std::string shown; ///< the path, as shown (escaped)
  std::string refused_prefix;  ///< the linked folder, when a folder on the way is a link
  std::string text;
};

/// Looks `rel` up below `root` without following any symlink (every component is checked with
/// fstatat(AT_SYMLINK_NOFOLLOW) and opened with O_NOFOLLOW); reads it only when it is a regular
/// file within the size limit.
Lookup lookup(int root, const std::string& rel) {
  Lookup out;
  out.shown = display_name(rel, 200);
  auto parts = split(rel, '/');
  Fd dir(::fcntl(root, F_DUPFD_CLOEXEC, 3));
  std::string prefix;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    prefix += (prefix.empty() ? "" : "/") + parts[i];
    struct stat st {};
    if (::fstatat(dir.fd, parts[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return out;
    if (S_ISLNK(st.st_mode)) {
      out.found = Found::Refused;
      out.refused_prefix = prefix;
      out.why = "refused " + display_name(prefix, 200) + "/: the folder is a symbolic link (submit the folder itself); "
                "its files count as missing";
      return out;
    }
    if (!S_ISDIR(st.st_mode)) return out;
    Fd next(::openat(dir.fd, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (next.fd < 0) return out;
    dir = std::move(next);
  }
  struct stat st {};
  if (::fstatat(dir.fd, parts.back().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return out;
  out.found = Found::Refused;
  if (S_ISLNK(st.st_mode)) {
    out.why = "refused " + out.shown + ": it is a symbolic link (submit the file itself)";
    return out;
  }
  if (!S_ISREG(st.st_mode)) {
    out.why = "refused " + out.shown + ": " + kind_of(st.st_mode) + ", not a regular file (nothing was read of it)";
    return out;
  }
  if (static_cast<std::size_t>(st.st_size) > kMaxStudentFileBytes) {
    out.why = "refused " + out.shown + ": " + std::to_string(st.st_size) + " bytes is over the limit of " +
              std::to_string(kMaxStudentFileBytes);
    return out;
  }
  Fd f(::openat(dir.fd, parts.back().c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  struct stat fst {};
  if (f.fd < 0 || ::fstat(f.fd, &fst) != 0 || !S_ISREG(fst.st_mode) || fst.st_ino != st.st_ino) {
    out.why = "refused " + out.shown + ": it changed while it was read";
    return out;
  }
  std::string text;
  char buf[65536];
  while (text.size() <= kMaxStudentFileBytes) {
    ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  if (text.size() > kMaxStudentFileBytes) {
    out.why = "refused " + out.shown + ": over the limit of " + std::to_string(kMaxStudentFileBytes) + " bytes";
    return out;
  }
  out.found = Found::File;
  out.text = std::move(text);
  return out;
}

/// Every entry below `dir` other than the taken paths (bounded: entries and depth), for one line
/// of the report. Never follows a symlink, never opens anything but folders.
struct Scan {
  std::size_t count = 0, visited = 0;
  bool truncated = false;
  std::vector<std::string> shown;
};

void scan(int dirfd, const std::string& prefix, int depth, const std::set<std::string>& used, Scan& s) {
  constexpr std::size_t kMaxVisited = 20000;
  constexpr int kMaxDepth = 24;
  int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return;
  }
  while (dirent* e = ::readdir(d)) {
    if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
    if (++s.visited > kMaxVisited) {
      s.truncated = true;
      break;
    }
    std::string rel = prefix.empty() ? e->d_name : prefix + "/" + e->d_name;
    struct stat st {};
    if (::fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (used.count(rel)) continue;  // a refused linked folder is reported already
      if (depth >= kMaxDepth) {
        s.truncated = true;
        continue;
      }
      int sub = ::openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) continue;
      scan(sub, rel, depth + 1, used, s);
      ::close(sub);
      continue;
    }
    if (used.count(rel)) continue;
    ++s.count;
    if (s.shown.size() < 8)
      s.shown.push_back(display_name(rel, 80) + (S_ISREG(st.st_mode) ? "" : std::string(" (") + kind_of(st.st_mode) + ")"));
  }
  ::closedir(d);
}

}  // namespace

IntakeReport intake_submission(const fs::path& submission, const Manifest& m) {
  IntakeReport r;
  Fd root(::open(submission.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (root.fd < 0) {
    r.errors.push_back("the submission '" + display_name(submission.filename().string(), 200) + "' is not a folder");
    return r;
  }
  std::map<std::string, int> base_count;
  for (const auto& f : m.student_files) base_count[fs::path(f).filename().string()]++;
  std::set<std::string> used;  // submission paths taken or refused
  std::set<std::string> linked_folders;
  for (const auto& rel : m.student_files) {
    std::vector<std::string> candidates = {rel};
    std::string base = fs::path(rel).filename().string();
    if (base_count[base] == 1 && base != rel) candidates.push_back(base);
    bool taken = false, seen = false;
    for (const auto& c : candidates) {
      Lookup l = lookup(root.fd, c);
      if (l.found == Found::No) continue;
      seen = true;
      if (!l.refused_prefix.empty()) {
        used.insert(l.refused_prefix);
        if (linked_folders.insert(l.refused_prefix).second) r.notes.push_back(l.why);
        break;
      }
      used.insert(c);
      if (l.found == Found::Refused) {
        r.notes.push_back(l.why);
        break;
      }
      if (l.text.find('\0') != std::string::npos) {
        r.notes.push_back("refused " + l.shown + ": a binary file (object files are not accepted; submit source)");
        break;
      }
      for (const auto& why : forbidden_symbols(l.text)) r.errors.push_back(l.shown + ": " + why);
      r.accepted.push_back({rel, submission / c, std::move(l.text)});
      taken = true;
      break;
    }
    if (!taken) {
      if (!seen) r.notes.push_back("missing " + rel + ": the handout stub is used (its tests score 0)");
      r.missing.push_back(rel);
    }
  }
  // Everything else in the submission is ignored; one line says so (a few names).
  Scan s;
  scan(root.fd, "", 0, used, s);
  if (s.count > 0 || s.truncated) {
    std::string line = "ignored " + std::to_string(s.count) + " file(s) not in the lab's student files:";
    for (const auto& x : s.shown) line += " " + x;
    if (s.count > s.shown.size()) line += " ...";
    if (s.truncated) line += " (the listing stopped: too many entries or folders too deep)";
    r.notes.push_back(line);
  }
  return r;
}

}  // namespace mls::grader
