#include "host_info.h"

#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <gnu/libc-version.h>
#endif

void ferry__host_cpu_name(char *buf, size_t size) {
  snprintf(buf, size, "host CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) != 0) continue;
    const char *colon = strchr(line, ':');
    if (!colon) break;
    colon++;
    while (*colon == ' ' || *colon == '\t')
      colon++;
    size_t n = strcspn(colon, "\n");
    if (n > 0) snprintf(buf, size, "%.*s", (int)n, colon);
    break;
  }
  fclose(f);
}

uint64_t ferry__host_available_memory(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  bool found = false;
  while (!found && fgets(line, sizeof line, f))
    found = sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
  fclose(f);
  return found ? (uint64_t)kib * 1024 : 0;
}

void ferry__host_driver_info(ferry_driver_info *out) {
#ifdef __GLIBC__
  snprintf(out->driver, sizeof out->driver, "glibc");
  snprintf(out->driver_version, sizeof out->driver_version, "%s", gnu_get_libc_version());
#else
  snprintf(out->driver, sizeof out->driver, "libc");
#endif
  struct utsname u;
  if (uname(&u) == 0)
    snprintf(out->api_version, sizeof out->api_version, "%.64s %.128s %.32s", u.sysname, u.release, u.machine);
  out->free_memory = ferry__host_available_memory();
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  out->compute_units = cpus > 0 ? (uint32_t)cpus : 0;
}
