// Leaves files behind: 200 in /dev/shm (shm_open), 100 in /tmp, 20 in /var/tmp. Each test has
// its own /tmp, /var/tmp and /dev/shm (or, at the uid level, every file of the sandbox uid
// there is removed): nothing may outlive the grading. The functions stay stubs: 0.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "fixture.hpp"
#include "mls/common/error.hpp"

namespace {
void litter() {
  for (int i = 0; i < 200; ++i) {
    int fd = ::shm_open(("/mls-attack-shm-" + std::to_string(::getpid()) + "-" + std::to_string(i)).c_str(),
                        O_CREAT | O_RDWR, 0644);
    if (fd >= 0) ::close(fd);
  }
  for (int i = 0; i < 100; ++i) {
    int fd = ::open(("/tmp/mls-attack-tmp-" + std::to_string(::getpid()) + "-" + std::to_string(i)).c_str(),
                    O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) ::close(fd);
  }
  for (int i = 0; i < 20; ++i) {
    int fd = ::open(("/var/tmp/mls-attack-vartmp-" + std::to_string(::getpid()) + "-" + std::to_string(i)).c_str(),
                    O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) ::close(fd);
  }
}
}  // namespace

namespace fixture {
int add(int a, int b) {
  litter();
  MLS_TODO("lab99: add");
}
int mul(int a, int b) {
  litter();
  MLS_TODO("lab99: mul");
}
long sum_to(int n) { MLS_TODO("lab99: sum_to"); }
}  // namespace fixture
