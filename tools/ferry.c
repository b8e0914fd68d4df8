/*
 * The `ferry` command.
 *
 *   ferry info [--json]     every device, with backend, name, memory and capabilities,
 *                           and every backend that has none, with the reason
 *   ferry bench [...]       transfer and allocation benchmarks (ferry bench --help)
 */
#include "ferry.h"
#include "tool.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
  fprintf(f, "usage: ferry <command> [options]\n"
             "\n"
             "commands:\n"
             "  info [--json]   list every device (backend, name, memory, zero-copy and host-pointer support)\n"
             "                  and every backend without devices, with the reason\n"
             "  bench [...]     measure transfers and allocations against the raw driver calls\n"
             "                  (ferry bench --help for its options)\n"
             "  version         print the library's version\n"
             "  help            this text\n"
             "\n"
             "environment:\n"
             "  FERRY_BACKENDS=opencl,native   keep only these backends, in this order\n"
             "  FERRY_DEBUG=leaks              list buffers still live at ferry_shutdown()\n");
}

/* "23.5 GiB" */
static const char *human(uint64_t bytes, char buf[32]) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, 32, "%" PRIu64 " B", bytes);
  else
    snprintf(buf, 32, "%.1f %s", v, units[u]);
  return buf;
}

void tool_json_string(FILE *f, const char *s) {
  if (!s) {
    fputs("null", f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static int info_json(void) {
  FILE *f = stdout;
  fprintf(f, "{\n  \"version\": ");
  tool_json_string(f, ferry_version());
  fprintf(f, ",\n  \"devices\": [");
  size_t n = ferry_device_count();
  for (size_t i = 0; i < n; i++) {
    ferry_device *d;
    ferry_device_info info;
    if (ferry_device_get(i, &d) != FERRY_OK || ferry_device_info_get(d, &info) != FERRY_OK) return 1;
    fprintf(f, "%s\n    {\"index\": %zu, \"backend\": ", i ? "," : "", info.index);
    tool_json_string(f, info.backend);
    fprintf(f, ", \"backend_index\": %zu, \"name\": ", info.backend_index);
    tool_json_string(f, info.name);
    fprintf(f,
            ", \"total_memory\": %" PRIu64 ", \"max_allocation\": %" PRIu64
            ", \"is_cpu\": %s, \"zero_copy\": %s, \"host_ptr\": %s, \"host_ptr_alignment\": %zu}",
            info.total_memory, info.max_allocation, info.is_cpu ? "true" : "false", info.zero_copy ? "true" : "false",
            info.host_ptr ? "true" : "false", info.host_ptr_alignment);
  }
  fprintf(f, "\n  ],\n  \"backends\": [");
  for (size_t i = 0; i < ferry_backend_count(); i++) {
    ferry_backend_info b;
    if (ferry_backend_get(i, &b) != FERRY_OK) return 1;
    fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
    tool_json_string(f, b.name);
    fprintf(f, ", \"enabled\": %s, \"devices\": %zu, \"status\": ", b.enabled ? "true" : "false", b.device_count);
    tool_json_string(f, b.status);
    fprintf(f, "}");
  }
  fprintf(f, "\n  ]\n}\n");
  return 0;
}

static int info_text(void) {
  size_t n = ferry_device_count();
  printf("ferry %s: %zu device%s\n\n", ferry_version(), n, n == 1 ? "" : "s");
  /* Column widths from the content, so long device names stay aligned. */
  int name_w = 4;
  for (size_t i = 0; i < n; i++) {
    ferry_device *d;
    ferry_device_info info;
    ferry_device_get(i, &d);
    ferry_device_info_get(d, &info);
    if ((int)strlen(info.name) > name_w) name_w = (int)strlen(info.name);
  }
  printf("  %-3s %-8s %-*s  %10s  %10s  %-4s  %-9s  %s\n", "#", "backend", name_w, "name", "memory", "max buffer",
         "cpu", "zero-copy", "host-ptr (alignment)");
  for (size_t i = 0; i < n; i++) {
    ferry_device *d;
    ferry_device_info info;
    if (ferry_device_get(i, &d) != FERRY_OK || ferry_device_info_get(d, &info) != FERRY_OK) {
      fprintf(stderr, "ferry info: %s\n", ferry_last_error());
      return 1;
    }
    char mem[32], max[32], align[48];
    if (info.host_ptr)
      snprintf(align, sizeof align, "yes (%zu B)", info.host_ptr_alignment);
    else
      snprintf(align, sizeof align, "no");
    printf("  %-3zu %-8s %-*s  %10s  %10s  %-4s  %-9s  %s\n", info.index, info.backend, name_w, info.name,
           human(info.total_memory, mem), human(info.max_allocation, max), info.is_cpu ? "yes" : "no",
           info.zero_copy ? "yes" : "no", align);
  }
  printf("\nbackends:\n");
  for (size_t i = 0; i < ferry_backend_count(); i++) {
    ferry_backend_info b;
    ferry_backend_get(i, &b);
    if (b.device_count)
      printf("  %-8s %zu device%s (%zu..%zu)\n", b.name, b.device_count, b.device_count == 1 ? "" : "s", b.first_device,
             b.first_device + b.device_count - 1);
    else
      printf("  %-8s skipped: %s\n", b.name, b.status);
  }
  return 0;
}

static int info_main(int argc, char **argv) {
  bool json = false;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0)
      json = true;
    else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: ferry info [--json]\n");
      return 0;
    } else {
      fprintf(stderr, "ferry info: unknown option '%s'\nusage: ferry info [--json]\n", argv[i]);
      return 2;
    }
  }
  ferry_status st = ferry_init();
  if (st != FERRY_OK) {
    fprintf(stderr, "ferry info: %s: %s\n", ferry_status_name(st), ferry_last_error());
    return 1;
  }
  int rc = json ? info_json() : info_text();
  ferry_shutdown();
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "info") == 0) return info_main(argc - 2, argv + 2);
  if (strcmp(cmd, "bench") == 0) return ferry_bench_main(argc - 2, argv + 2);
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
    printf("ferry %s\n", ferry_version());
    return 0;
  }
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "ferry: unknown command '%s'\n\n", cmd);
  usage(stderr);
  return 2;
}
