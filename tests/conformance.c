/*
 * The conformance suite: one set of cases, run on every device present.
 *
 *   ferry_conformance --backend NAME   every case on each device of backend NAME
 *   ferry_conformance --cross          the cross-device cases on every ordered pair of devices
 *   ferry_conformance --backends       list the backends; fail if FERRY_REQUIRE_BACKENDS names one without devices
 *   ferry_conformance --backend fault  the suite on the test-only fault backend (tests/fault_backend.c),
 *                                      whose deferred async transfers exercise the staging pipeline
 *
 * Options, after the mode:
 *   --case PATTERN     only the cases whose name matches PATTERN, an fnmatch(3) glob: an exact
 *                      name ("byte_ranges"), "zero_*", "*host*"; a pattern that matches no case fails
 *   --timeout SECONDS  the time limit of one case (default 300, or FERRY_TEST_CASE_TIMEOUT): a case
 *                      that runs longer stops the run, which fails naming it
 *   --list             print the names of the cases instead of running them
 *
 * Each case prints ok, FAILED, "n/a (why)" when it does not apply to the device,
 * or "FAILED (made no check)". A backend with no device is skipped (exit 77)
 * with the reason, unless FERRY_REQUIRE_BACKENDS names it: then the run fails,
 * naming it.
 */
#include "conformance.h"
#include "fault_backend.h"

#include <stdlib.h>
#include <string.h>

static void usage(void) {
  fprintf(stderr, "usage: ferry_conformance (--backend NAME | --cross | --backends) [--case PATTERN] "
                  "[--timeout SECONDS] [--list]\n");
}

static bool find_backend(const char *name, ferry_backend_info *out) {
  for (size_t i = 0; i < ferry_backend_count(); i++) {
    if (ferry_backend_get(i, out) == FERRY_OK && strcmp(out->name, name) == 0) return true;
  }
  return false;
}

static const conformance_case *const device_lists[] = {conformance_device_cases, conformance_queue_cases, NULL};
static const conformance_pair_case *const pair_lists[] = {conformance_pair_cases, conformance_queue_pair_cases, NULL};

/* How many cases of each list the filter selects. */
static size_t selected_device_cases(void) {
  size_t n = 0;
  for (const conformance_case *const *l = device_lists; *l; l++)
    for (const conformance_case *c = *l; c->name; c++)
      n += harness_case_selected(c->name);
  return n;
}

static size_t selected_pair_cases(void) {
  size_t n = 0;
  for (const conformance_pair_case *const *l = pair_lists; *l; l++)
    for (const conformance_pair_case *c = *l; c->name; c++)
      n += harness_case_selected(c->name);
  return n;
}

static int run_backend(const char *name) {
  ferry_backend_info b;
  char test[64];
  snprintf(test, sizeof test, "conformance.%s", name);
  int present = harness_backend_devices(name, test, &b);
  if (present != 0) return present;
  char context[512];
  for (size_t d = 0; d < b.device_count; d++) {
    ferry_device *dev;
    if (ferry_device_get(b.first_device + d, &dev) != FERRY_OK) {
      fprintf(stderr, "FAIL: device %zu of backend %s: %s\n", d, name, ferry_last_error());
      return 1;
    }
    ferry_device_info info;
    ferry_device_info_get(dev, &info);
    printf("backend %s, device %zu: %s\n", name, info.index, info.name);
    const conformance_backend *traits = conformance_backend_of(name);
    for (const conformance_case *const *l = device_lists; *l; l++)
      for (const conformance_case *c = *l; c->name; c++) {
        if (!harness_case_selected(c->name)) continue;
        snprintf(context, sizeof context, "%s[%zu] %s", name, info.index, c->name);
        harness_case_begin(context);
        const char *why = conformance_skip_reason(traits, c->name);
        if (why)
          harness_not_applicable("%s skips it: %s (tests/conformance_backends.c)", name, why);
        else
          c->run(dev, &info);
        harness_case_end(c->name);
      }
    /* Skips that a device's capabilities imply, said once per device. */
    if (!info.zero_copy) printf("  (zero-copy cases checked the refusal only: device memory is not host memory)\n");
    if (!info.host_ptr) printf("  (host-ptr cases checked the refusal only: the device has no host-pointer buffers)\n");
  }
  return harness_finish(name);
}

static int run_cross(void) {
  size_t n = ferry_device_count();
  if (n < 2) {
    printf("SKIP cross-device cases: %zu device(s)\n", n);
    return HARNESS_SKIP;
  }
  char context[512];
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < n; j++) {
      if (i == j) continue;
      ferry_device *a, *b;
      ferry_device_get(i, &a);
      ferry_device_get(j, &b);
      ferry_device_info ia, ib;
      ferry_device_info_get(a, &ia);
      ferry_device_info_get(b, &ib);
      printf("devices %zu (%s) -> %zu (%s)\n", i, ia.backend, j, ib.backend);
      for (const conformance_pair_case *const *l = pair_lists; *l; l++)
        for (const conformance_pair_case *c = *l; c->name; c++) {
          if (!harness_case_selected(c->name)) continue;
          snprintf(context, sizeof context, "%s[%zu] -> %s[%zu] %s", ia.backend, i, ib.backend, j, c->name);
          harness_case_begin(context);
          c->run(a, &ia, b, &ib);
          harness_case_end(c->name);
        }
    }
  }
  return harness_finish("cross");
}

/* Lists every backend with its devices or the reason it has none. */
static int run_backends(void) {
  int missing = 0;
  for (size_t i = 0; i < ferry_backend_count(); i++) {
    ferry_backend_info b;
    ferry_backend_get(i, &b);
    if (b.device_count)
      printf("%-8s %zu device(s)\n", b.name, b.device_count);
    else
      printf("%-8s skipped: %s\n", b.name, b.status);
    if (!b.device_count && harness_backend_required(b.name)) {
      fprintf(stderr, "FAIL: FERRY_REQUIRE_BACKENDS names %s, but it has no device: %s\n", b.name, b.status);
      missing++;
    }
  }
  /* A required name that is not a backend at all is a typo worth failing on. */
  const char *req = getenv("FERRY_REQUIRE_BACKENDS");
  if (req) {
    char copy[512];
    snprintf(copy, sizeof copy, "%s", req);
    for (char *tok = strtok(copy, ", "); tok; tok = strtok(NULL, ", ")) {
      ferry_backend_info b;
      if (!find_backend(tok, &b)) {
        fprintf(stderr, "FAIL: FERRY_REQUIRE_BACKENDS names %s, which this build does not have\n", tok);
        missing++;
      }
    }
  }
  return missing ? 1 : 0;
}

static void list_cases(bool pairs) {
  if (!pairs)
    for (const conformance_case *const *l = device_lists; *l; l++)
      for (const conformance_case *c = *l; c->name; c++)
        if (harness_case_selected(c->name)) printf("%s\n", c->name);
  if (pairs)
    for (const conformance_pair_case *const *l = pair_lists; *l; l++)
      for (const conformance_pair_case *c = *l; c->name; c++)
        if (harness_case_selected(c->name)) printf("%s\n", c->name);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *mode = NULL, *backend = NULL, *pattern = NULL;
  bool list = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--backend") == 0 && i + 1 < argc && !mode) {
      mode = a;
      backend = argv[++i];
    } else if ((strcmp(a, "--cross") == 0 || strcmp(a, "--backends") == 0) && !mode)
      mode = a;
    else if (strcmp(a, "--case") == 0 && i + 1 < argc)
      pattern = argv[++i];
    else if (strcmp(a, "--timeout") == 0 && i + 1 < argc) {
      char *end;
      double s = strtod(argv[++i], &end);
      if (end == argv[i] || *end || !(s > 0)) {
        fprintf(stderr, "ferry_conformance: --timeout takes a number of seconds above 0, not '%s'\n", argv[i]);
        return 2;
      }
      harness_case_time_limit(s);
    } else if (strcmp(a, "--list") == 0)
      list = true;
    else {
      usage();
      return 2;
    }
  }
  if (!mode) {
    usage();
    return 2;
  }
  harness_case_filter(pattern);
  bool pairs = strcmp(mode, "--cross") == 0;
  if (pattern && strcmp(mode, "--backends") != 0 && (pairs ? selected_pair_cases() : selected_device_cases()) == 0) {
    fprintf(stderr, "FAIL: --case '%s' matches no %s case (ferry_conformance %s --list names them)\n", pattern,
            pairs ? "cross-device" : "device", pairs ? "--cross" : "--backend NAME");
    return 2;
  }
  if (list) {
    list_cases(pairs);
    return 0;
  }
  /* The fault backend is a test backend: registered only when asked for. */
  if (backend && strcmp(backend, "fault") == 0) ferry__register_backend(&fault_backend);
  ferry_status st = ferry_init();
  if (st != FERRY_OK) {
    fprintf(stderr, "FAIL: ferry_init: %s: %s\n", ferry_status_name(st), ferry_last_error());
    return 1;
  }
  int rc;
  if (backend)
    rc = run_backend(backend);
  else if (pairs)
    rc = run_cross();
  else
    rc = run_backends();
  ferry_shutdown();
  return rc;
}
