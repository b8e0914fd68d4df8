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
#include <stdarg.h>
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
  /* Every other variable the project reads, by who reads it (tests/help_env/check.sh
   * finds each one the sources read and fails when one is missing here). */
  static const struct {
    const char *name, *what;
  } tests[] = {
      {"FERRY_REQUIRE_BACKENDS=a,b", "fail instead of skipping when these backends have no device (make test)"},
      {"FERRY_REQUIRE_PYTHON=1", "fail instead of skipping the Python tests when no Python can build and test "
                                 "the package"},
      {"FERRY_REQUIRE_OCAML=1", "fail instead of skipping the OCaml tests when dune or ocamlfind is missing"},
      {"FERRY_REQUIRE_MPI=1", "fail instead of skipping the MPI tests when MPI, mpirun or mpi4py is missing"},
      {"FERRY_PYTHON=path", "the interpreter the Python tests use first (else python3, then /usr/bin/python3)"},
      {"FERRY_TEST_CASE_TIMEOUT=seconds", "the time limit of one conformance case (default 300)"},
      {"FERRY_TEST_ITERATIONS=n", "rounds of the thread and shutdown-race tests"},
      {"FERRY_TEST_NO_FAULT=1", "leave out the CUDA kernel test's faulting kernel"},
      {"FERRY_FUZZ_TRACE=1", "the call fuzzer prints the call sequence of each input"},
      {"FERRY_TOOL=path", "the ferry command the command-line test runs"},
      {"FERRY_OCAML_TEST_BACKEND=name", "the backend an OCaml test run is about (skipped without a device of it)"},
      {"FERRY_OCAML_TEST_BIG_MIB=n", "the size of the OCaml test's large transfers (default 256)"},
      {"FERRY_OCAML_TEST_THREADS_SERIAL=1", "the OCaml test's thread case runs its threads one after another"},
      {"FERRY_OCAML_RUNNER=command", "what runs the OCaml test program (valgrind ...)"},
  };
  static const struct {
    const char *name, *what;
  } builds[] = {
      {"FERRY_LIBRARY=path", "the Python package's build: a libferry.a to link instead of building one"},
      {"FERRY_INCLUDE_DIR=dir", "the OCaml binding's build: the folder of ferry.h (else pkg-config)"},
      {"FERRY_LIB_DIR=dir", "the OCaml binding's build: the folder of libferry (else pkg-config)"},
  };
  fprintf(f, "\nRead by the tests (not by the library):\n");
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
    fprintf(f, "  %s\n", tests[i].name);
    wrap(f, 6, "", tests[i].what);
  }
  fprintf(f, "\nRead by the bindings' builds (bindings/python, bindings/ocaml):\n");
  for (size_t i = 0; i < sizeof builds / sizeof builds[0]; i++) {
    fprintf(f, "  %s\n", builds[i].name);
    wrap(f, 6, "", builds[i].what);
  }
  fprintf(f, "\nRead by the drivers' loaders, and often what decides which devices 'ferry info' lists:\n"
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
             "                    and UUID where the driver gives them, free memory (a CPU device's driver\n"
             "                    that says none: the host's, marked so), compute units, clock, largest work\n"
             "                    group and local memory (OpenCL), memory heaps, memory types and queue\n"
             "                    families (Vulkan), host-pointer alignment; and every ferry setting in\n"
             "                    effect, with where it comes from\n"
             "  --json [FILE]     everything as JSON (with the driver facts and settings too), to FILE or,\n"
             "                    without one or with '-', to stdout; JSON.md (below) describes every field\n"
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
  char json[1200];
  fprintf(f, "\ndocumentation ('man ferry' too):\n  %s: every field of --json\n",
          tool_doc_path("JSON.md", json, sizeof json));
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

/* "  label           text", the text wrapped at 100 columns under itself. */
static void detail(const char *label, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void detail(const char *label, const char *fmt, ...) {
  char text[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  int col = printf("  %-15s", label);
  for (const char *p = text; *p;) {
    size_t len = strcspn(p, " ");
    /* A number and its unit ("8.0 GiB") stay on one line. */
    const char *next = p + len + strspn(p + len, " ");
    size_t unit = strcspn(next, " ,;)");
    bool glued =
        *next && (unit == 1 || unit == 3) && (strncmp(next, "B", unit) == 0 || strncmp(next + 1, "iB", 2) == 0);
    int want = (int)len + (glued ? 1 + (int)strcspn(next, " ") : 0);
    if (col > 17 && col + 1 + want > 100) col = printf("\n%17s", "");
    col += printf(" %.*s", (int)len, p);
    p += len;
    p += strspn(p, " ");
  }
  putchar('\n');
}

/* "device-local, host-visible" */
static const char *flag_text(uint32_t flags, const tool_flag_name *names, size_t count, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < count; i++)
    if ((flags & names[i].bit) && used < size)
      used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", names[i].name);
  if (!used) snprintf(buf, size, "none");
  return buf;
}

static void info_details(const ferry_device_info *info, ferry_device *d) {
  ferry_driver_info drv;
  bool has = ferry_device_driver_info(d, &drv) == FERRY_OK;
  char a[32], b[32], c[32];
  char title[600];
  snprintf(title, sizeof title, "device %zu: %s, %s%s", info->index, info->backend, info->name,
           tool_is_debugging(info) ? " (a debugging device)" : "");
  printf("\n");
  wrap(stdout, 0, "", title);
  if (!has) {
    detail("driver", "(the driver said nothing: %s)", ferry_last_error());
  } else {
    detail("driver", "%s%s%s", drv.driver[0] ? drv.driver : "-", drv.driver_version[0] ? " " : "", drv.driver_version);
    detail("API", "%s", drv.api_version[0] ? drv.api_version : "-");
    detail("PCI address", "%s", drv.pci_bus_id[0] ? drv.pci_bus_id : "- (the driver does not say)");
    detail("UUID", "%s", drv.uuid[0] ? drv.uuid : "- (the driver does not say)");
  }
  char free_text[128];
  if (has && drv.free_memory && drv.free_memory_from_host)
    snprintf(free_text, sizeof free_text, "the host has %s free (the driver says nothing of its own)",
             human(drv.free_memory, b));
  else if (has && drv.free_memory)
    snprintf(free_text, sizeof free_text, "%s free", human(drv.free_memory, b));
  else
    snprintf(free_text, sizeof free_text, "free memory unknown");
  detail("memory", "%s, %s; buffers up to %s", human(info->total_memory, a), free_text, human(info->max_allocation, c));
  if (has && (drv.compute_units || drv.clock_mhz || drv.max_work_group_size || drv.local_memory)) {
    char text[400] = "";
    size_t used = 0;
#define ADD(...)                                                                                                       \
  do {                                                                                                                 \
    if (used < sizeof text) used += (size_t)snprintf(text + used, sizeof text - used, __VA_ARGS__);                    \
  } while (0)
    if (drv.compute_units) ADD("%" PRIu32 " compute unit%s", drv.compute_units, drv.compute_units == 1 ? "" : "s");
    if (drv.clock_mhz) ADD("%s%" PRIu32 " MHz", used ? ", " : "", drv.clock_mhz);
    if (drv.max_work_group_size) ADD("%swork groups up to %" PRIu64, used ? "; " : "", drv.max_work_group_size);
    if (drv.local_memory)
      ADD("%s%s of local memory%s", used ? "; " : "", human(drv.local_memory, a),
          drv.local_memory_type == 1   ? " (its own)"
          : drv.local_memory_type == 2 ? " (carved from global memory)"
                                       : "");
#undef ADD
    detail("compute", "%s", text);
  }
  for (uint32_t i = 0; has && i < drv.heap_count; i++) {
    char label[24], flags[200];
    snprintf(label, sizeof label, "heap %" PRIu32, i);
    detail(label, "%s, %s", human(drv.heaps[i].size, a),
           flag_text(drv.heaps[i].flags, tool_heap_flags, 2, flags, sizeof flags));
  }
  for (uint32_t i = 0; has && i < drv.memory_type_count; i++) {
    char label[24], flags[300];
    snprintf(label, sizeof label, "memory type %" PRIu32, i);
    detail(label, "heap %" PRIu32 ": %s", drv.memory_types[i].heap,
           flag_text(drv.memory_types[i].flags, tool_memory_flags, 8, flags, sizeof flags));
  }
  for (uint32_t i = 0; has && i < drv.queue_family_count; i++) {
    char label[24], flags[300];
    snprintf(label, sizeof label, "queue family %" PRIu32, i);
    detail(label, "%" PRIu32 " queue%s: %s", drv.queue_families[i].count, drv.queue_families[i].count == 1 ? "" : "s",
           flag_text(drv.queue_families[i].flags, tool_queue_flags, 7, flags, sizeof flags));
  }
  detail("type", "%s%s", device_type(info),
         tool_is_debugging(info)
             ? ": guard bytes, poison and quarantine catch a program's own out-of-bounds and after-free writes"
             : "");
  detail("zero-copy", "%s", info->zero_copy ? "yes: the device's memory is host memory" : "no");
  if (info->host_ptr)
    detail("host-ptr", "yes: arrays aligned to %zu byte%s, lengths a multiple of it", info->host_ptr_alignment,
           info->host_ptr_alignment == 1 ? "" : "s");
  else
    detail("host-ptr", "no");
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
  /* The kernel's release and the processor's name can be long: the line wraps at 100 columns. */
  char host[600];
  snprintf(host, sizeof host, "on %s, %s (%ld processor%s, %s of memory)", sys->os, sys->cpu, sys->cpus,
           sys->cpus == 1 ? "" : "s", human(sys->memory, mem));
  wrap(stdout, 0, "", host);
  /* Fixed columns, and the name as wide as the widest that still fits 100 columns. */
  const int fixed = 2 + 3 + 1 + 8 + 1 + 2 + 9 + 2 + 10 + 2 + 5 + 2 + 9 + 2 + 13; /* host-ptr: "yes (65536 B)" */
  int name_w = 4;
  bool debugging = false;
  for (size_t i = 0; i < n; i++) {
    ferry_device *d;
    ferry_device_info info;
    if (ferry_device_get(i, &d) != FERRY_OK || ferry_device_info_get(d, &info) != FERRY_OK) continue;
    if ((int)strlen(info.name) > name_w) name_w = (int)strlen(info.name);
    debugging = debugging || tool_is_debugging(&info);
  }
  if (name_w > 100 - fixed) name_w = 100 - fixed;
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
  if (cut && !verbose) printf("  (long names are cut; 'ferry info --verbose' shows them whole)\n");
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
    else {
      char lead[40], line[1200];
      snprintf(lead, sizeof lead, "%-8s", b.name);
      snprintf(line, sizeof line, "skipped: %s", b.status);
      wrap(stdout, 2, lead, line); /* a loader's sentence can be long */
    }
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
  /* The JSON's file is opened before anything else: a bad path fails at once. */
  tool_output out = {0};
  const char *json_path = o.json_path ? o.json_path : "-";
  char why[1200];
  if (o.json && tool_output_open(&out, json_path, why, sizeof why) != 0) {
    fprintf(stderr, "ferry info: --json %s: %s\n", json_path, why);
    return 2;
  }
  ferry_status st = ferry_init();
  if (st != FERRY_OK) {
    fprintf(stderr, "ferry info: ferry could not start: %s (%s)\n", ferry_last_error(), ferry_status_name(st));
    tool_output_abandon(&out);
    return 1;
  }
  tool_system sys;
  tool_system_describe(&sys);
  if (o.json) {
    FILE *f = tool_output_begin(&out);
    rc = f ? info_json(f, &sys) : 1;
    if (tool_output_close(&out) != 0) rc = 1;
    if (rc) fprintf(stderr, "ferry info: --json %s: writing the JSON failed\n", json_path);
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
    if (argc > 2) {
      fprintf(stderr, "ferry %s: unexpected argument '%s' (it takes none)\n", cmd, argv[2]);
      return 2;
    }
    char version[128];
    printf("%s\n", tool_version_text(version));
    return 0;
  }
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    if (argc > 3) {
      fprintf(stderr, "ferry help: unexpected argument '%s' (ferry help takes at most one topic: env, info, bench)\n",
              argv[3]);
      return 2;
    }
    if (argc == 3 && strcmp(argv[2], "env") == 0) {
      help_env(stdout);
      return 0;
    }
    if (argc == 3 && (strcmp(argv[2], "info") == 0 || strcmp(argv[2], "bench") == 0)) {
      char *help[] = {"--help", NULL};
      return strcmp(argv[2], "info") == 0 ? info_main(1, help) : ferry_bench_main(1, help);
    }
    if (argc == 3) {
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
