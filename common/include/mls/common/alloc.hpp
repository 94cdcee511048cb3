#pragma once
/// The CPU allocator behind every tensor's storage: 64-byte aligned blocks, with a bounded cache
/// of large freed blocks so that a loop that allocates the same big tensor over and over (a
/// training step, `c = a + b` in a benchmark) reuses memory the kernel has already mapped
/// instead of paying a page fault per 4 KiB on every iteration.
///
/// Blocks of 64 KiB and more are cached. `MLS_ALLOC_CACHE_MB` sets the cache limit (default 1024; 0 turns caching off).
#include <cstddef>

namespace mls {

/// Allocates at least `nbytes` bytes (64-byte aligned). Throws `mls::Error` when out of memory.
void* cpu_alloc(std::size_t nbytes);
/// Returns a block from `cpu_alloc` of the same `nbytes`.
void cpu_free(void* p, std::size_t nbytes);
/// Bytes currently held in the cache (not in use by any tensor).
std::size_t cpu_cache_bytes();
/// Releases every cached block to the system.
void cpu_cache_clear();

/// Copies `bytes` bytes from `src` to `dst` (not overlapping) with non-temporal stores for the
/// whole 64-byte lines of `dst` (AVX2; plain memcpy elsewhere and below 256 bytes). For results
/// written once and read much later: the store skips the read-for-ownership of each line and
/// leaves the caches to data that is used again. With `fence` false the stores may still be in
/// flight on return: call `stream_fence()` once after the last of a series of copies (and before
/// another thread reads the data), which saves a full drain of the write-combining buffers per copy.
void stream_copy(void* dst, const void* src, std::size_t bytes, bool fence = true);
/// Orders the non-temporal stores issued so far by this thread before any later store (sfence).
void stream_fence();

}  // namespace mls
