/*
 * A page size other than this machine's, for the metal backend's tests: linked
 * into a test program, this sysconf answers _SC_PAGESIZE with FAKE_METAL_PAGE
 * (16384, the page of Apple silicon, where Linux has 4096) and passes every other
 * question to the C library's. ferry asks sysconf for the page size; the fake
 * Metal checks newBufferWithBytesNoCopy against FAKE_METAL_PAGE; so the suite
 * runs as on a Mac with 16 KiB pages, and any place that assumed 4 KiB fails.
 *
 * Only from the program's constructors on: the sanitizers' runtimes, which start
 * before, size their own pages with the machine's answer. FAKE_METAL_PAGE must be
 * a plain number of bytes here.
 */
#if !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool started;

__attribute__((constructor)) static void start(void) { started = true; }

#if defined(__GLIBC__)
extern long __sysconf(int name); /* glibc's own, under its other exported name */
static long libc_sysconf(int name) { return __sysconf(name); }
#else
static long libc_sysconf(int name) {
  void *sym = dlsym(RTLD_NEXT, "sysconf");
  long (*real)(int);
  memcpy(&real, &sym, sizeof real);
  return real ? real(name) : -1;
}
#endif

long sysconf(int name) {
  if (started && name == _SC_PAGESIZE) {
    const char *page = getenv("FAKE_METAL_PAGE");
    if (page && *page) return strtol(page, NULL, 0);
  }
  return libc_sysconf(name);
}
