// A daemon: double fork, setsid, SIGTERM ignored, in its own user and PID namespace where the
// kernel allows it; it waits for its test to end, then writes files to /tmp and /dev/shm and
// keeps running. Every process a test starts must be dead when its result is recorded: 0, and
// nothing left.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.hpp"
#include "mls/common/error.hpp"

namespace {
void daemonize() {
  pid_t p = ::fork();
  if (p != 0) {
    if (p > 0) ::waitpid(p, nullptr, 0);
    return;
  }
  ::setsid();
  if (::fork() != 0) ::_exit(0);
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  if (::unshare(CLONE_NEWUSER | CLONE_NEWPID) == 0 && ::fork() != 0) ::_exit(0);
  ::sleep(1);
  for (int i = 0; i < 30; ++i) {
    int fd = ::open("/tmp/mls-attack-daemon", O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) ::close(fd);
    fd = ::open("/dev/shm/mls-attack-daemon", O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) ::close(fd);
    ::sleep(1);
  }
  ::_exit(0);
}
}  // namespace

namespace fixture {
int add(int a, int b) {
  daemonize();
  MLS_TODO("lab99: add");
}
int mul(int a, int b) { MLS_TODO("lab99: mul"); }
long sum_to(int n) { MLS_TODO("lab99: sum_to"); }
}  // namespace fixture
