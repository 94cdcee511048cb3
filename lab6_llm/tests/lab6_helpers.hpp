#pragma once
// Shared helpers of the lab 6 tests.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mls/common/rng.hpp"
#include "mls/llm/config.hpp"
#include "mls/observe.hpp"
#include "mls/testing.hpp"

namespace llm_test {

using mls::testing::require_error;
namespace fs = std::filesystem;

/// Records a config's five sizes.
inline void observe_config(const std::string& label, const mls::llm::GPTConfig& c) {
  mls::testing::observe(label, std::vector<std::int64_t>{c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size});
}

/// Pairs (e.g. BPE merges) flattened to one list, for an observation.
inline std::vector<std::int32_t> flat_pairs(const std::vector<std::pair<std::int32_t, std::int32_t>>& v) {
  std::vector<std::int32_t> out;
  for (const auto& [a, b] : v) {
    out.push_back(a);
    out.push_back(b);
  }
  return out;
}

/// `n` random bytes (every value 0..255 possible).
inline std::string random_bytes(std::size_t n, std::uint64_t seed) {
  mls::Rng rng(seed, "lab6-test-bytes");
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng.next_u32() & 0xFF);
  return s;
}

/// `n` random code points as UTF-8: ASCII, 2-, 3- and 4-byte characters (no surrogates).
inline std::string random_utf8(std::size_t n, std::uint64_t seed) {
  mls::Rng rng(seed, "lab6-test-utf8");
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    char32_t cp = 0;
    switch (rng.randint(0, 4)) {
      case 0: cp = static_cast<char32_t>(rng.randint(0, 0x80)); break;
      case 1: cp = static_cast<char32_t>(rng.randint(0x80, 0x800)); break;
      case 2: cp = static_cast<char32_t>(rng.randint(0x800, 0xD800)); break;
      default: cp = static_cast<char32_t>(rng.randint(0x10000, 0x110000)); break;
    }
    // Independent encoder (not the library's utf8_append).
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return s;
}

/// English-like text: words from a small list, spaces, newlines.
inline std::string random_words(std::size_t n_words, std::uint64_t seed) {
  static const char* words[] = {"the", "cat", "sat", "on", "mat", "and", "then", "it", "ran", "to",
                                "a", "dog", "that", "was", "there", "hat", "in", "sun"};
  mls::Rng rng(seed, "lab6-test-words");
  std::string s;
  for (std::size_t i = 0; i < n_words; ++i) {
    s += words[rng.randint(0, 18)];
    s += rng.randint(0, 10) == 0 ? '\n' : ' ';
  }
  return s;
}

/// A fresh empty folder in the test process's own folder, removed at the end of the test; paths
/// in it read the same in every run once written through mls::testing::without_temp_dir.
using mls::testing::TempDir;

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace llm_test
