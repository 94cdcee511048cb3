#include <sys/resource.h>
#include "mls/grader/util.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "mls/common/error.hpp"
#include "mls/common/rng.hpp"

#ifndef MLS_GRADER_SOURCE_DIR
#define MLS_GRADER_SOURCE_DIR ""
#endif

namespace mls::grader {

double grader_peak_mb() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

namespace {

/// Decodes one strictly valid UTF-8 sequence at `i` (no overlong forms, no surrogates, at most
/// U+10FFFF); returns its length, 0 if invalid.
std::size_t utf8_decode(std::string_view t, std::size_t i, char32_t& cp) {
  unsigned char c = static_cast<unsigned char>(t[i]);
  std::size_t len;
  char32_t min;
  if (c < 0x80) {
    cp = c;
    return 1;
  } else if ((c >> 5) == 0x6) {
    len = 2, cp = c & 0x1F, min = 0x80;
  } else if ((c >> 4) == 0xE) {
    len = 3, cp = c & 0x0F, min = 0x800;
  } else if ((c >> 3) == 0x1E) {
    len = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > t.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    unsigned char cc = static_cast<unsigned char>(t[i + k]);
    if ((cc >> 6) != 0x2) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

/// Code points a terminal may act on: C0/C1 controls, DEL, bidirectional embeddings and
/// overrides, line/paragraph separators.
bool is_control(char32_t cp) {
  return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x200E || cp == 0x200F || cp == 0x061C;
}

}  // namespace

std::string sanitize_text(std::string_view text, std::size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 64);
  std::size_t i = 0;
  while (i < text.size() && out.size() < max_bytes) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n' || c == '\t') {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c == '\r') {
      ++i;
      continue;
    }
    char32_t cp = 0;
    std::size_t len = utf8_decode(text, i, cp);
    if (len == 0 || is_control(cp)) {
      out += '?';
      i += len ? len : 1;
      continue;
    }
    if (out.size() + len > max_bytes) break;
    out.append(text.substr(i, len));
    i += len;
  }
  if (i < text.size()) out += "\n[... " + std::to_string(text.size() - i) + " more bytes cut]\n";
  return out;
}

std::string display_name(std::string_view name, std::size_t max_bytes) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  std::size_t i = 0;
  while (i < name.size()) {
    char32_t cp = 0;
    std::size_t len = utf8_decode(name, i, cp);
    std::string piece;
    if (len == 0 || is_control(cp) || cp == '\\') {
      std::size_t n = len ? len : 1;
      for (std::size_t k = 0; k < n; ++k) {
        unsigned char b = static_cast<unsigned char>(name[i + k]);
        piece += "\\x";
        piece += hex[b >> 4];
        piece += hex[b & 15];
      }
      i += n;
    } else {
      piece.assign(name.substr(i, len));
      i += len;
    }
    if (out.size() + piece.size() > max_bytes) {
      out += "...";
      break;
    }
    out += piece;
  }
  return out;
}

std::string redact(std::string text, const std::vector<std::pair<std::string, std::string>>& pairs) {
  auto sorted = pairs;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  for (const auto& [from, to] : sorted) {
    if (from.empty()) continue;
    std::string out;
    std::size_t pos = 0;
    while (true) {
      std::size_t k = text.find(from, pos);
      if (k == std::string::npos) break;
      out.append(text, pos, k - pos);
      out += to;
      pos = k + from.size();
    }
    out.append(text, pos, std::string::npos);
    text = std::move(out);
  }
  return text;
}

std::string head_tail(std::string_view text, std::size_t head, std::size_t tail) {
  if (text.size() <= head + tail) return std::string(text);
  std::string out(text.substr(0, head));
  out += "\n[... " + std::to_string(text.size() - head - tail) + " bytes left out ...]\n";
  out += text.substr(text.size() - tail);
  return out;
}

std::string fnv1a_hex(std::string_view data) {
  const std::uint64_t h = mls::fnv1a64(data);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string random_hex(std::size_t n) {
  std::string bytes(n, '\0');
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  MLS_CHECK(fd >= 0, "random_hex: cannot open /dev/urandom");
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, bytes.data() + got, n - got);
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  ::close(fd);
  MLS_CHECK(got == n, "random_hex: short read from /dev/urandom");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    std::size_t p = text.find(sep, start);
    if (p == std::string_view::npos) {
      out.emplace_back(text.substr(start));
      return out;
    }
    out.emplace_back(text.substr(start, p - start));
    start = p + 1;
  }
}

std::string_view trim(std::string_view s) {
  std::size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t' || s[a] == '\r' || s[a] == '\n')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\r' || s[b - 1] == '\n')) --b;
  return s.substr(a, b - a);
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

fs::path make_temp_dir(std::string_view prefix) {
  const char* t = std::getenv("TMPDIR");
  fs::path base = (t && *t) ? fs::path(t) : fs::path("/tmp");
  std::string tmpl = (base / (std::string(prefix) + "-XXXXXX")).string();
  char* p = ::mkdtemp(tmpl.data());
  MLS_CHECK(p != nullptr, "make_temp_dir: cannot create a folder in '", base.string(), "'");
  ::chmod(p, 0755);
  return fs::path(p);
}

namespace {
/// Removes `name` in `dirfd` and, for a folder, everything in it, descending by file
/// descriptor (paths longer than PATH_MAX are fine) and never following a symlink.
void remove_at(int dirfd, const char* name, int depth) {
  struct stat st {};
  if (::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
  if (!S_ISDIR(st.st_mode)) {
    ::unlinkat(dirfd, name, 0);
    return;
  }
  if (depth < 4096) {
    int fd = ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      if (DIR* d = ::fdopendir(fd)) {
        std::vector<std::string> names;
        while (dirent* e = ::readdir(d))
          if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
        for (const auto& n : names) remove_at(fd, n.c_str(), depth + 1);
        ::closedir(d);
      } else {
        ::close(fd);
      }
    }
  }
  ::unlinkat(dirfd, name, AT_REMOVEDIR);
}
}  // namespace

void remove_tree(const fs::path& p) noexcept {
  try {
    remove_at(AT_FDCWD, p.c_str(), 0);
  } catch (...) {
  }
}

void copy_file_readable(const fs::path& from, const fs::path& to) {
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  const bool exec = (fs::status(from).permissions() & fs::perms::owner_exec) != fs::perms::none;
  fs::permissions(to, fs::perms(exec ? 0755 : 0644));
}

void copy_tree(const fs::path& from, const fs::path& to, const std::vector<std::string>& skip_names) {
  fs::create_directories(to);
  fs::permissions(to, fs::perms(0755));
  for (const auto& e : fs::directory_iterator(from)) {
    std::string name = e.path().filename().string();
    bool skip = false;
    for (const auto& s : skip_names) skip = skip || s == name;
    if (skip) continue;
    auto st = e.symlink_status();
    if (fs::is_symlink(st)) continue;
    if (fs::is_directory(st)) {
      copy_tree(e.path(), to / name, skip_names);
    } else if (fs::is_regular_file(st)) {
      copy_file_readable(e.path(), to / name);
    }
  }
}

fs::path find_repo_root(const std::optional<fs::path>& hint) {
  if (hint) {
    MLS_CHECK(fs::exists(*hint / "common"), "find_repo_root: '", hint->string(),
              "' is not the mlsys-labs repository (no common/ folder)");
    return fs::absolute(*hint).lexically_normal();
  }
  std::error_code ec;
  for (fs::path p = fs::current_path(ec); !p.empty(); p = p.parent_path()) {
    if (fs::exists(p / "CMakePresets.json") && fs::exists(p / "common")) return p;
    if (p == p.root_path()) break;
  }
  fs::path compiled = MLS_GRADER_SOURCE_DIR;
  MLS_CHECK(!compiled.empty() && fs::exists(compiled / "common"),
            "find_repo_root: not inside the mlsys-labs repository; pass --root");
  return compiled;
}

}  // namespace mls::grader
