/*
 * A page size other than this machine's, for the metal backend's tests: linked
 * into a test program, this sysconf answers _SC_PAGESIZE with FAKE_METAL_PAGE
 * (16384, the page of Apple silicon, where Linux has 4096) and passes every other
 * question to the C library's. ferry asks sysconf for the page size; the fake
 * Metal checks newBufferWithBytesNoCopy against FAKE_METAL_PAGE; so the suite
 * runs as on a Mac with 16 KiB pages, and any place that assumed 4 KiB fails.
 */
#if !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

long sysconf(int name) {
  if (name == _SC_PAGESIZE) {
    const char *page = getenv("FAKE_METAL_PAGE");
    if (page && *page) return strtol(page, NULL, 0);
  }
  void *sym = dlsym(RTLD_NEXT, "sysconf");
  long (*real)(int);
  memcpy(&real, &sym, sizeof real);
  return real ? real(name) : -1;
}
