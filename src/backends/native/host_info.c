#include "host_info.h"

#include <stdio.h>
#include <string.h>

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
