/*
 * The `ferry` command (tools/ferry.1 is its manual page).
 *
 *   ferry info [--verbose] [--json [FILE]]   every device and every backend without devices, with the reason
 *   ferry bench [...]                        transfer and allocation benchmarks (ferry bench --help)
 *   ferry help [env]                         the commands; every environment variable ferry reads
 *   ferry version, -V, --version             the version and git revision
 */
#include "ferry.h"
#include "tool.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
  fprintf(f, "usage: ferry <command> [options]\n"
             "\n"
             "commands:\n"
             "  info [--verbose] [--json [FILE]]\n"
             "                  every device (backend, name, memory, zero-copy and host-pointer support),\n"
             "                  and every backend without devices, with the reason (ferry info --help)\n"
             "  bench [...]     measure transfers and allocations against the raw driver calls\n"
             "                  (ferry bench --help for its options)\n"
             "  help [env]      this text; 'ferry help env' lists every environment variable ferry reads\n"
             "  version         the version and the git revision it was built from (also -V, --version)\n"
             "\n"
             "environment: FERRY_BACKENDS=opencl,native keeps only these backends, in this order;\n"
             "'ferry help env' lists every variable, with its value now. 'man ferry' has the whole manual.\n");
}

/* ---- ferry help env --------------------------------------------------------------- */

/* `text` after `lead`, wrapped at 100 columns with the lines after the first at `indent`. */
static void wrap(FILE *f, int indent, const char *lead, const char *text) {
  int col = fprintf(f, "%*s%s", indent, "", lead);
  bool first = true;
  for (const char *p = text; *p;) {
    size_t len = strcspn(p, " ");
    if (!first && col + 1 + (int)len > 100) {
      col = fprintf(f, "\n%*s", indent + 2, "") - 1;
    } else if (!first || *lead) {
      fputc(' ', f);
      col++;
    }
    col += fprintf(f, "%.*s", (int)len, p);
    first = false;
    p += len;
    p += strspn(p, " ");
  }
  fputc('\n', f);
}

static void help_env(FILE *f) {
  size_t n = tool_setting_count();
  fprintf(f, "Environment variables ferry reads at ferry_init (ferry_set_option sets the same from code):\n\n");
  for (size_t i = 0; i < n; i++) {
    tool_setting s;
    if (!tool_setting_get(i, &s)) continue;
    fprintf(f, "  %s\n", s.name);
    wrap(f, 6, "", s.description);
    if (s.range && *s.range) wrap(f, 6, "accepts:", s.range);
    fprintf(f, "      now: %s (%s)\n", s.value && *s.value ? s.value : "unset", s.source);
  }
  if (n == 0) fprintf(f, "  (this build of the library lists none)\n");
  fprintf(f, "\nRead by the tests (not by the library):\n"
             "  FERRY_REQUIRE_BACKENDS=a,b\n"
             "      the tests fail instead of skipping when these backends have no device\n"
             "\nRead by the drivers' loaders, and often what decides which devices 'ferry info' lists:\n"
             "  OCL_ICD_VENDORS=DIR                  the OpenCL ICD files (*.icd) to load\n"
             "  VK_DRIVER_FILES=FILE[:FILE]          the Vulkan driver manifests to load (VK_ICD_FILENAMES before\n"
             "                                       Vulkan loader 1.3.207)\n"
             "  CUDA_VISIBLE_DEVICES=0,1             the CUDA GPUs the driver shows\n"
             "\nThe ferry command itself reads no variable of its own.\n");
}

/* ---- ferry info --------------------------------------------------------------------- */

typedef struct info_options {
  bool json, verbose;
  const char *json_path; /* NULL or "-": stdout */
} info_options;

static void info_usage(FILE *f) { fprintf(f, "usage: ferry info [--verbose] [--json [FILE]]\n"); }

static void info_help(FILE *f) {
  fprintf(f, "usage: ferry info [options]\n"
             "\n"
             "Lists every device ferry finds (numbered as ferry_device_get numbers them, backend by backend:\n"
             "cuda, metal, opencl, vulkan, native, checked) and, for every backend without devices, why.\n"
             "\n"
             "options:\n"
             "  -v, --verbose     each device in full: its driver and driver version, API version, PCI address\n"
             "                    and UUID where the driver gives them, free memory, host-pointer alignment;\n"
             "                    and every ferry setting in effect, with where it comes from\n"
             "  --json [FILE]     everything as JSON (with the driver facts and settings too), to FILE or,\n"
             "                    without one or with '-', to stdout; docs/JSON.md describes every field\n"
             "  -h, --help        this text\n"
             "\n"
             "columns:\n"
             "  #                 the device's index: what 'ferry bench --device' and ferry_device_get take\n"
             "  backend, name     the backend and the device's name as its driver gives it\n"
             "  memory            the device's memory (host memory for CPU devices)\n"
             "  max buffer        the largest single buffer\n"
             "  type              gpu, cpu, or debug: the checked backend, the host CPU with guard bytes, poison\n"
             "                    and quarantine to catch a program's own memory bugs; for finding bugs, not\n"
             "                    speed ('ferry bench' leaves it out unless --device or --backend names it)\n"
             "  zero-copy         ferry_alloc_zero_copy works: the device's memory is host memory\n"
             "  host-ptr          ferry_alloc_host_ptr can work, and the alignment it needs of arrays\n"
             "\n"
             "exit status: 0 listed; 1 ferry could not start, or the JSON could not be written; 2 bad arguments\n"
             "or a JSON file that cannot be written.\n"
             "\n"
             "environment: FERRY_BACKENDS=opencl,native keeps only these backends, in this order; 'ferry help\n"
             "env' lists every variable. A backend without devices says why (no driver, no device, left out).\n");
}

static int info_parse(int argc, char **argv, info_options *o) {
  memset(o, 0, sizeof *o);
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      info_help(stdout);
      return 0;
    }
    if (strcmp(a, "--verbose") == 0 || strcmp(a, "-v") == 0) {
      o->verbose = true;
    } else if (strcmp(a, "--json") == 0) {
      o->json = true;
      /* An optional FILE: the next argument, when it is not an option ("-" is stdout). */
      if (i + 1 < argc && (argv[i + 1][0] != '-' || strcmp(argv[i + 1], "-") == 0)) o->json_path = argv[++i];
    } else if (strncmp(a, "--json=", 7) == 0) {
      o->json = true;
      o->json_path = a + 7;
      if (!*o->json_path) {
        fprintf(stderr, "ferry info: --json= needs a file name (or '-' for stdout)\n");
        info_usage(stderr);
        return 2;
      }
    } else {
      if (a[0] == '-')
        fprintf(stderr, "ferry info: unknown option '%s'\n", a);
      else
        fprintf(stderr, "ferry info: unexpected argument '%s' (ferry info takes only options)\n", a);
      info_usage(stderr);
      return 2;
    }
  }
  return -1; /* go on */
}

static const char *device_type(const ferry_device_info *info) {
  return tool_is_debugging(info) ? "debug" : info->is_cpu ? "cpu" : "gpu";
}

static int info_json(FILE *f, const tool_system *sys) {
  fprintf(f, "{\n  \"schema_version\": %d,\n  \"tool\": \"ferry info\",\n", TOOL_SCHEMA_VERSION);
  tool_json_context(f, sys, 2);
  fprintf(f, "  \"devices\": [");
  size_t n = ferry_device_count();
  for (size_t i = 0; i < n; i++) {
    ferry_device *d;
    ferry_device_info info;
    ferry_driver_info driver;
    if (ferry_device_get(i, &d) != FERRY_OK || ferry_device_info_get(d, &info) != FERRY_OK) return 1;
    bool has_driver = ferry_device_driver_info(d, &driver) == FERRY_OK;
    fprintf(f, "%s\n    {\n", i ? "," : "");
    tool_json_device_fields(f, &info, &driver, has_driver, 6);
    fprintf(f, "\n    }");
  }
  fprintf(f, "%s],\n  \"backends\": [", n ? "\n  " : "");
  size_t nb = ferry_backend_count();
  for (size_t i = 0; i < nb; i++) {
    ferry_backend_info b;
    if (ferry_backend_get(i, &b) != FERRY_OK) return 1;
    fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
    tool_json_string(f, b.name);
    fprintf(f, ", \"enabled\": %s, \"devices\": %zu, \"first_device\": ", b.enabled ? "true" : "false", b.device_count);
    if (b.device_count)
      fprintf(f, "%zu", b.first_device);
    else
      fputs("null", f);
    fputs(", \"status\": ", f);
    tool_json_string(f, b.status);
    fprintf(f, "}");
  }
  fprintf(f, "%s]\n}\n", nb ? "\n  " : "");
  return 0;
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

static void info_details(const ferry_device_info *info, ferry_device *d) {
  ferry_driver_info drv;
  bool has = ferry_device_driver_info(d, &drv) == FERRY_OK;
  char a[32], b[32], c[32];
  printf("\ndevice %zu: %s, %s%s\n", info->index, info->backend, info->name,
         tool_is_debugging(info) ? " (a debugging device)" : "");
  if (!has) {
    printf("  driver          (the driver said nothing: %s)\n", ferry_last_error());
  } else {
    printf("  driver          %s%s%s\n", drv.driver[0] ? drv.driver : "-", drv.driver_version[0] ? " " : "",
           drv.driver_version);
    printf("  API             %s\n", drv.api_version[0] ? drv.api_version : "-");
    printf("  PCI address     %s\n", drv.pci_bus_id[0] ? drv.pci_bus_id : "- (the driver does not say)");
    printf("  UUID            %s\n", drv.uuid[0] ? drv.uuid : "- (the driver does not say)");
  }
  printf("  memory          %s", human(info->total_memory, a));
  if (has && drv.free_memory)
    printf(", %s free", human(drv.free_memory, b));
  else
    printf(", free memory unknown");
  printf("; buffers up to %s\n", human(info->max_allocation, c));
  printf("  type            %s%s\n", device_type(info),
         tool_is_debugging(info)
             ? ": guard bytes, poison and quarantine catch a program's own out-of-bounds and after-free writes"
             : "");
  printf("  zero-copy       %s\n", info->zero_copy ? "yes: the device's memory is host memory" : "no");
  if (info->host_ptr)
    printf("  host-ptr        yes: arrays aligned to %zu byte%s, lengths a multiple of it\n", info->host_ptr_alignment,
           info->host_ptr_alignment == 1 ? "" : "s");
  else
    printf("  host-ptr        no\n");
}

static void info_settings(void) {
  size_t n = tool_setting_count();
  printf("\nsettings in effect ('ferry help env' says what each does):\n");
  if (n == 0) printf("  (this build of the library lists none)\n");
  for (size_t i = 0; i < n; i++) {
    tool_setting s;
    if (!tool_setting_get(i, &s)) continue;
    printf("  %-26s %-20s %s\n", s.name, s.value && *s.value ? s.value : "(unset)", s.source);
  }
}

static int info_text(const tool_system *sys, bool verbose) {
  size_t n = ferry_device_count();
  char version[128], mem[32];
  printf("%s: %zu device%s\n", tool_version_text(version), n, n == 1 ? "" : "s");
  printf("on %s, %s (%ld processor%s, %s of memory)\n", sys->os, sys->cpu, sys->cpus, sys->cpus == 1 ? "" : "s",
         human(sys->memory, mem));
  /* Fixed columns, and the name as wide as the widest that still fits 100 columns. */
  const int fixed = 2 + 3 + 1 + 8 + 1 + 2 + 9 + 2 + 10 + 2 + 5 + 2 + 9 + 2 + 11;
  int name_w = 4;
  bool debugging = false;
  for (size_t i = 0; i < n; i++) {
    ferry_device *d;
    ferry_device_info info;
    if (ferry_device_get(i, &d) != FERRY_OK || ferry_device_info_get(d, &info) != FERRY_OK) continue;
    if ((int)strlen(info.name) > name_w) name_w = (int)strlen(info.name);
    debugging = debugging || tool_is_debugging(&info);
  }
  if (name_w > 100 - fixed && !verbose) name_w = 100 - fixed;
  bool cut = false;
  printf("\n  %-3s %-8s %-*s  %9s  %10s  %-5s  %-9s  %s\n", "#", "backend", name_w, "name", "memory", "max buffer",
         "type", "zero-copy", "host-ptr");
  for (size_t i = 0; i < n; i++) {
    ferry_device *d;
    ferry_device_info info;
    if (ferry_device_get(i, &d) != FERRY_OK || ferry_device_info_get(d, &info) != FERRY_OK) {
      fprintf(stderr, "ferry info: %s\n", ferry_last_error());
      return 1;
    }
    char a[32], b[32], align[48], name[512];
    if (info.host_ptr)
      snprintf(align, sizeof align, "yes (%zu B)", info.host_ptr_alignment);
    else
      snprintf(align, sizeof align, "no");
    snprintf(name, sizeof name, "%s", info.name);
    if ((int)strlen(name) > name_w) { /* 'ferry info --verbose' shows it whole */
      snprintf(name + name_w - 3, sizeof name - (size_t)name_w + 3, "...");
      cut = true;
    }
    printf("  %-3zu %-8s %-*s  %9s  %10s  %-5s  %-9s  %s\n", info.index, info.backend, name_w, name,
           human(info.total_memory, a), human(info.max_allocation, b), device_type(&info),
           info.zero_copy ? "yes" : "no", align);
  }
  if (cut) printf("  (long names are cut; 'ferry info --verbose' shows them whole)\n");
  if (debugging)
    printf("  debug: the checked backend, for finding a program's memory bugs, not for speed; 'ferry bench'\n"
           "  leaves it out unless --device or --backend names it\n");
  printf("\nbackends:\n");
  for (size_t i = 0; i < ferry_backend_count(); i++) {
    ferry_backend_info b;
    ferry_backend_get(i, &b);
    if (b.device_count == 1)
      printf("  %-8s 1 device (%zu)\n", b.name, b.first_device);
    else if (b.device_count)
      printf("  %-8s %zu devices (%zu..%zu)\n", b.name, b.device_count, b.first_device,
             b.first_device + b.device_count - 1);
    else
      printf("  %-8s skipped: %s\n", b.name, b.status);
  }
  if (verbose) {
    for (size_t i = 0; i < n; i++) {
      ferry_device *d;
      ferry_device_info info;
      if (ferry_device_get(i, &d) == FERRY_OK && ferry_device_info_get(d, &info) == FERRY_OK) info_details(&info, d);
    }
    info_settings();
  }
  return 0;
}

static int info_main(int argc, char **argv) {
  info_options o;
  int rc = info_parse(argc, argv, &o);
  if (rc >= 0) return rc;
  bool to_file = o.json && o.json_path && strcmp(o.json_path, "-") != 0;
  char why[1200];
  if (to_file && tool_check_output(o.json_path, why, sizeof why) != 0) {
    fprintf(stderr, "ferry info: --json %s: %s\n", o.json_path, why);
    return 2;
  }
  ferry_status st = ferry_init();
  if (st != FERRY_OK) {
    fprintf(stderr, "ferry info: ferry could not start: %s (%s)\n", ferry_last_error(), ferry_status_name(st));
    return 1;
  }
  tool_system sys;
  tool_system_describe(&sys);
  if (o.json) {
    FILE *f = to_file ? fopen(o.json_path, "w") : stdout;
    if (!f) {
      fprintf(stderr, "ferry info: --json %s: cannot write the file\n", o.json_path);
      rc = 1;
    } else {
      rc = info_json(f, &sys);
      if (ferror(f)) rc = 1;
      if (to_file && fclose(f) != 0) rc = 1;
      if (rc) fprintf(stderr, "ferry info: --json %s: writing the JSON failed\n", to_file ? o.json_path : "-");
    }
  } else {
    rc = info_text(&sys, o.verbose);
  }
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
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
    char version[128];
    printf("%s\n", tool_version_text(version));
    return 0;
  }
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    if (argc >= 3 && strcmp(argv[2], "env") == 0) {
      help_env(stdout);
      return 0;
    }
    if (argc >= 3 && (strcmp(argv[2], "info") == 0 || strcmp(argv[2], "bench") == 0)) {
      char *help[] = {"--help", NULL};
      return strcmp(argv[2], "info") == 0 ? info_main(1, help) : ferry_bench_main(1, help);
    }
    if (argc >= 3) {
      fprintf(stderr, "ferry help: no help on '%s'; try 'ferry help', 'ferry help env', 'ferry help bench'\n", argv[2]);
      return 2;
    }
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "ferry: unknown command '%s'\n\n", cmd);
  usage(stderr);
  return 2;
}
