/*
 * Reading memory that may not be there, without a fault: for handles that a
 * program hands ferry and that ferry must vouch for before a driver reads them
 * (a cl_mem in a DLPack tensor may be any number). The bytes go through a pipe:
 * write(2) copies them in the kernel, which says EFAULT where there is no
 * readable memory instead of faulting, and read(2) gives them back.
 */
#include "backend.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

bool ferry__read_safely(const void *addr, void *out, size_t n) {
  if (n == 0) return true;
  if (n > 512 || (uintptr_t)addr > UINTPTR_MAX - n) return false; /* far below a pipe's capacity: one write */
  int fds[2];
  if (pipe(fds) != 0) return false;
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);
  ssize_t w;
  do {
    w = write(fds[1], addr, n);
  } while (w < 0 && errno == EINTR);
  bool ok = w == (ssize_t)n;
  size_t got = 0;
  while (ok && got < n) {
    ssize_t r = read(fds[0], (char *)out + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      ok = false;
    else
      got += (size_t)r;
  }
  close(fds[0]);
  close(fds[1]);
  return ok;
}
