// Attack (issue 25, cause 5): mul and sum_to are the stubs; add finds the run's nonce in its own
// memory (every 32-hex-digit string in its writable mappings) and writes, for each candidate, an
// observation record of 1 GiB of values to the result channel's fd (4): a record the grader
// used to decode whole, a value per string, twice. The grader now decodes it streaming (no value
// kept) and stops at the channel's limit: OUTPUT_LIMIT within seconds, bounded memory.
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "fixture.hpp"
#include "mls/common/error.hpp"

namespace {
std::set<std::string> candidates() {
  std::set<std::string> out;
  FILE* maps = std::fopen("/proc/self/maps", "r");
  if (!maps) return out;
  char line[512];
  while (std::fgets(line, sizeof line, maps) && out.size() < 8) {
    unsigned long lo = 0, hi = 0;
    char perms[8] = {};
    if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r' || perms[1] != 'w') continue;
    const char* p = reinterpret_cast<const char*>(lo);
    int run = 0;
    for (unsigned long k = 0; k < hi - lo && out.size() < 8; ++k) {
      const char c = p[k];
      if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
        ++run;
        continue;
      }
      if (run == 32) out.insert(std::string(p + k - 32, 32));
      run = 0;
    }
  }
  std::fclose(maps);
  return out;
}
}  // namespace

namespace fixture {
int add(int a, int b) {
  std::string zeros;
  for (int i = 0; i < (1 << 19); ++i) zeros += "0 ";
  for (const auto& nonce : candidates()) {
    std::string head = nonce + " OBS fixture::add(a, b)\\tf64\\t\\t\\t\\t0\\t0\\t0\\t99999999999\\t";
    if (::write(4, head.data(), head.size()) < 0) break;
    for (int i = 0; i < 1024; ++i)
      if (::write(4, zeros.data(), zeros.size()) < 0) break;
    if (::write(4, "0\n", 2) < 0) break;
  }
  return a + b;
}
int mul(int, int) { MLS_TODO("lab97: mul"); }
long sum_to(int) { MLS_TODO("lab97: sum_to"); }
}  // namespace fixture
