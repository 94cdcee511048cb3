#pragma once
/// A zip archive writer (stored entries, no compression): what `mls-grader gradescope` uploads.
/// Pure: the same entries give the same bytes (fixed timestamps, entries in the order given).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mls::grader {

/// One file of an archive: its path inside the archive ('/'-separated, relative), its bytes, and
/// whether it is executable (Unix mode 0755, else 0644; unzip restores it).
struct ZipEntry {
  std::string path;
  std::string data;
  bool executable = false;
};

/// The CRC-32 (IEEE 802.3, as zip and gzip use it) of `data`.
std::uint32_t crc32(std::string_view data);

/// The bytes of a zip archive holding `entries` in order, each stored (method 0) with a UTF-8
/// name, a Unix mode and the timestamp 1980-01-01 00:00. An mls::Error names the entry and the
/// rule for: an empty, absolute or non-normal path ("..", ".", empty components, a backslash), a
/// path longer than 65535 bytes, a path given twice, more than 65535 entries, or an archive past
/// 4 GiB (zip64 is not written).
std::string zip_archive(const std::vector<ZipEntry>& entries);

}  // namespace mls::grader
