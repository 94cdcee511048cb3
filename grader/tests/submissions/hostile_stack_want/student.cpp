// Hostile (issue 25, cause 2): mul computes nothing; it looks for the test's expected value on
// the callers' stack frames (the oracle's "MLS_WANT" marker, then the value) and answers it, else
// 0 like its control (hostile_stack_control). Against tests that hold their expected values in
// the submission's process it scores; linked with the oracle-free tests there is nothing to find.
#include <pthread.h>

#include <cstdint>
#include <cstring>

#include "fixture.hpp"
#include "mls/common/error.hpp"
namespace fixture {
int add(int a, int b) { return a + b; }
int mul(int, int) {
  pthread_attr_t attr;
  void* stack = nullptr;
  std::size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return 0;
  pthread_attr_getstack(&attr, &stack, &size);
  pthread_attr_destroy(&attr);
  const auto top = reinterpret_cast<std::uintptr_t>(stack) + size;
  const auto from = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)) & ~std::uintptr_t{7};
  for (std::uintptr_t at = from; at + 16 <= top && at < from + (1u << 16); at += 8) {
    std::int64_t w[2];
    std::memcpy(w, reinterpret_cast<const void*>(at), sizeof w);
    if (w[0] == 0x4d4c535f57414e54) return static_cast<int>(w[1]);
  }
  return 0;
}
long sum_to(int) { MLS_TODO("lab97: sum_to"); }
}  // namespace fixture
