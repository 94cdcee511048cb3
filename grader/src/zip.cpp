// The zip writer of `mls-grader gradescope` (PKWARE APPNOTE 6.3: local file headers, the central
// directory, the end-of-central-directory record; stored entries only).
#include "mls/grader/zip.hpp"

#include <array>
#include <limits>
#include <set>

#include "mls/common/error.hpp"

namespace mls::grader {

namespace {

std::array<std::uint32_t, 256> crc_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}

void put16(std::string& out, std::uint32_t v) {
  out.push_back(static_cast<char>(v & 0xFF));
  out.push_back(static_cast<char>((v >> 8) & 0xFF));
}
void put32(std::string& out, std::uint32_t v) {
  put16(out, v & 0xFFFF);
  put16(out, v >> 16);
}

/// Why `path` cannot name an archive entry ("" when it can).
std::string path_problem(const std::string& path) {
  if (path.empty()) return "the path is empty";
  if (path.size() > 0xFFFF) return "the path is longer than 65535 bytes";
  if (path.front() == '/') return "the path is absolute";
  if (path.find('\\') != std::string::npos) return "the path holds a backslash";
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string_view part(path.data() + start, end - start);
    if (part.empty() || part == "." || part == "..") return "the path has an empty, '.' or '..' component";
    start = end + 1;
  }
  return "";
}

constexpr std::uint32_t kDosTime = 0;                          // 00:00:00
constexpr std::uint32_t kDosDate = (0u << 9) | (1u << 5) | 1u; // 1980-01-01
constexpr std::uint32_t kUtf8Names = 1u << 11;
constexpr std::uint32_t kVersionNeeded = 10;                   // 1.0: stored entries
constexpr std::uint32_t kMadeByUnix = (3u << 8) | 20u;         // Unix, spec 2.0

}  // namespace

std::uint32_t crc32(std::string_view data) {
  static const auto table = crc_table();
  std::uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::string zip_archive(const std::vector<ZipEntry>& entries) {
  if (entries.size() > 0xFFFF)
    throw mls::Error("zip_archive: " + std::to_string(entries.size()) + " entries, at most 65535 fit (zip64 is not written)");
  std::set<std::string> seen;
  std::string out;
  std::string central;
  constexpr std::uint64_t kLimit = std::numeric_limits<std::uint32_t>::max();
  for (const auto& e : entries) {
    const std::string problem = path_problem(e.path);
    if (!problem.empty()) throw mls::Error("zip_archive: entry '" + e.path.substr(0, 200) + "': " + problem);
    if (!seen.insert(e.path).second) throw mls::Error("zip_archive: entry '" + e.path + "' is given twice");
    if (out.size() + e.data.size() + e.path.size() + 30 > kLimit)
      throw mls::Error("zip_archive: the archive passes 4 GiB at entry '" + e.path + "' (zip64 is not written)");
    const std::uint32_t crc = crc32(e.data);
    const auto size = static_cast<std::uint32_t>(e.data.size());
    const auto offset = static_cast<std::uint32_t>(out.size());
    put32(out, 0x04034b50);
    put16(out, kVersionNeeded);
    put16(out, kUtf8Names);
    put16(out, 0);  // stored
    put16(out, kDosTime);
    put16(out, kDosDate);
    put32(out, crc);
    put32(out, size);
    put32(out, size);
    put16(out, static_cast<std::uint32_t>(e.path.size()));
    put16(out, 0);
    out += e.path;
    out += e.data;
    const std::uint32_t mode = 0100000u | (e.executable ? 0755u : 0644u);  // S_IFREG | permissions
    put32(central, 0x02014b50);
    put16(central, kMadeByUnix);
    put16(central, kVersionNeeded);
    put16(central, kUtf8Names);
    put16(central, 0);
    put16(central, kDosTime);
    put16(central, kDosDate);
    put32(central, crc);
    put32(central, size);
    put32(central, size);
    put16(central, static_cast<std::uint32_t>(e.path.size()));
    put16(central, 0);  // extra
    put16(central, 0);  // comment
    put16(central, 0);  // disk
    put16(central, 0);  // internal attributes
    put32(central, mode << 16);
    put32(central, offset);
    central += e.path;
  }
  if (out.size() + central.size() + 22 > kLimit)
    throw mls::Error("zip_archive: the archive passes 4 GiB in its central directory (zip64 is not written)");
  const auto cd_offset = static_cast<std::uint32_t>(out.size());
  out += central;
  put32(out, 0x06054b50);
  put16(out, 0);
  put16(out, 0);
  put16(out, static_cast<std::uint32_t>(entries.size()));
  put16(out, static_cast<std::uint32_t>(entries.size()));
  put32(out, static_cast<std::uint32_t>(central.size()));
  put32(out, cd_offset);
  put16(out, 0);
  return out;
}

}  // namespace mls::grader
