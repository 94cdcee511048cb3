#include "mls/common/alloc.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <mutex>
#include <string>

#include "mls/common/error.hpp"

namespace mls {
namespace {

constexpr std::size_t kCacheFrom = 64 << 10;  // blocks of 64 KiB and more are cached

constexpr std::size_t kHugeFrom = 4 << 20;  // blocks of 4 MiB and more ask for 2 MiB pages
constexpr std::size_t kHugePage = 2 << 20;

/// Large sizes are rounded up to a multiple of 64 KiB (2 MiB from kHugeFrom) so that similar
/// sizes share blocks.
std::size_t rounded(std::size_t nbytes) {
  if (nbytes < kCacheFrom) return (std::max<std::size_t>(nbytes, 1) + 63) / 64 * 64;
  const std::size_t step = nbytes >= kHugeFrom ? kHugePage : (64 << 10);
  return (nbytes + step - 1) / step * step;
}

/// A new block. From kHugeFrom it is 2 MiB aligned and advised to use transparent huge pages
/// (as NumPy does for its arrays): a stream over it then takes one TLB entry per 2 MiB and the
/// hardware prefetchers are not stopped at every 4 KiB page boundary (a 1-thread `a + b` over
/// 64 MiB arrays runs ~1.4x faster). Where THP is off the advice is ignored.
void* new_block(std::size_t size) {
  if (size < kHugeFrom) return std::aligned_alloc(64, size);
  void* p = std::aligned_alloc(kHugePage, size);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (p != nullptr) (void)madvise(p, size, MADV_HUGEPAGE);
#endif
  return p;
}

struct Cache {
  std::mutex mutex;
  std::multimap<std::size_t, void*> blocks;  // size -> block
  std::size_t bytes = 0;
  std::size_t limit;
  Cache() {
    const char* env = std::getenv("MLS_ALLOC_CACHE_MB");
    limit = (env ? std::strtoull(env, nullptr, 10) : 1024ull) << 20;
  }
  ~Cache() {
    for (auto& [size, p] : blocks) std::free(p);
  }
};

Cache& cache() {
  static Cache c;
  return c;
}

}  // namespace

void* cpu_alloc(std::size_t nbytes) {
  const std::size_t size = rounded(nbytes);
  if (size >= kCacheFrom) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.blocks.find(size);
    if (it != c.blocks.end()) {
      void* p = it->second;
      c.blocks.erase(it);
      c.bytes -= size;
      return p;
    }
  }
  void* p = new_block(size);
  if (p == nullptr) {
    cpu_cache_clear();  // give cached memory back and try once more
    p = new_block(size);
  }
  MLS_CHECK(p != nullptr, "alloc: out of memory allocating ", nbytes, " bytes");
  return p;
}

void cpu_free(void* p, std::size_t nbytes) {
  if (p == nullptr) return;
  const std::size_t size = rounded(nbytes);
  if (size >= kCacheFrom) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.bytes + size <= c.limit) {
      c.blocks.emplace(size, p);
      c.bytes += size;
      return;
    }
  }
  std::free(p);
}

std::size_t cpu_cache_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.bytes;
}

void cpu_cache_clear() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto& [size, p] : c.blocks) std::free(p);
  c.blocks.clear();
  c.bytes = 0;
}

namespace {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target("avx2"))) void stream_copy_avx2(char* d, const char* s, std::size_t bytes, bool fence) {
  const std::size_t head = (64 - (reinterpret_cast<std::uintptr_t>(d) & 63)) & 63;
  std::memcpy(d, s, head);
  std::size_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
  }
  if (fence) _mm_sfence();
  std::memcpy(d + i, s + i, bytes - i);
}
#define MLS_HAVE_STREAM_COPY 1
#endif
}  // namespace

void stream_copy(void* dst, const void* src, std::size_t bytes, bool fence) {
#ifdef MLS_HAVE_STREAM_COPY
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && bytes >= 256) {
    stream_copy_avx2(static_cast<char*>(dst), static_cast<const char*>(src), bytes, fence);
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

void stream_fence() {
#ifdef MLS_HAVE_STREAM_COPY
  _mm_sfence();
#endif
}

}  // namespace mls
