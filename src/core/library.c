/*
 * Loading the vendor drivers' libraries. Every backend opens its driver here,
 * so that one place decides whether this process can load a library at all,
 * and says why not in one sentence.
 *
 * A fully static executable (gcc -static) has no dynamic loader. glibc still
 * links dlopen into it, but a driver loaded that way brings its own copy of
 * libc, and the process crashes inside the first driver call (seen with
 * glibc 2.36: a segfault while PoCL's ICD loader starts). ferry therefore never
 * calls dlopen in such a program: the backends that need a driver report
 * themselves unavailable with the reason, and native and checked work.
 */
#if !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* dl_iterate_phdr */
#endif

#include "library.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>

#if defined(__APPLE__)
/* macOS has no ELF program headers (no link.h, no dl_iterate_phdr), and no fully
 * static programs: Apple links every program against libSystem dynamically. */
bool ferry__program_is_static(void) { return false; }
#else
#include <link.h>

/* The first object dl_iterate_phdr visits is the program itself. A dynamically
 * linked program names its loader in a PT_INTERP segment; a static one (static
 * PIE included) has none. Unlike getauxval(AT_BASE), this also holds for a
 * program started through an explicit loader ("ld.so ./program"), where
 * loading libraries works. */
static int program_has_loader(struct dl_phdr_info *info, size_t size, void *found) {
  (void)size;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_INTERP) *(bool *)found = true;
  return 1; /* the program only */
}

bool ferry__program_is_static(void) {
  static atomic_int answer; /* 0 unknown, 1 static, 2 dynamic */
  int a = atomic_load_explicit(&answer, memory_order_relaxed);
  if (a == 0) {
    bool dynamic = false;
    dl_iterate_phdr(program_has_loader, &dynamic);
    a = dynamic ? 2 : 1;
    atomic_store_explicit(&answer, a, memory_order_relaxed);
  }
  return a == 1;
}
#endif /* __APPLE__ */

void *ferry__library_open(const char *path, bool keep_loaded, char *why, size_t why_size) {
  if (ferry__program_is_static()) {
    snprintf(why, why_size,
             "this program is statically linked; glibc cannot load driver libraries into it: link ferry into a "
             "dynamically linked program (%s was not loaded)",
             path);
    return NULL;
  }
  int flags = RTLD_NOW | RTLD_LOCAL;
  if (keep_loaded) flags |= RTLD_NODELETE;
  dlerror(); /* forget an earlier failure's sentence */
  void *library = dlopen(path, flags);
  if (!library) {
    const char *err = dlerror();
    if (err)
      snprintf(why, why_size, "%s", err);
    else
      snprintf(why, why_size, "%s: cannot be loaded", path);
  }
  return library;
}

void *ferry__library_symbol(void *library, const char *name) { return library ? dlsym(library, name) : NULL; }

void ferry__library_close(void *library) {
  if (library) dlclose(library);
}
