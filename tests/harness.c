#include "harness.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int harness_failures;
int harness_checks;
const char *harness_context = "";

void harness_fail(const char *file, int line, const char *fmt, ...) {
  harness_failures++;
  fprintf(stderr, "FAIL %s%s%s:%d: ", harness_context, *harness_context ? " at " : "", file, line);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

void fill_pattern(void *p, size_t n, uint32_t seed) {
  unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    b[i] = (unsigned char)(mix((uint32_t)(i / 4) * 2654435761u ^ seed) >> (8 * (i % 4))) | 1u;
}

size_t find_pattern_mismatch(const void *p, size_t n, uint32_t seed) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != ((unsigned char)(mix((uint32_t)(i / 4) * 2654435761u ^ seed) >> (8 * (i % 4))) | 1u)) return i;
  return SIZE_MAX;
}

bool harness_backend_required(const char *backend) {
  const char *env = getenv("FERRY_REQUIRE_BACKENDS");
  if (!env) return false;
  size_t len = strlen(backend);
  for (const char *p = env; *p;) {
    while (*p == ',' || *p == ' ')
      p++;
    const char *start = p;
    while (*p && *p != ',')
      p++;
    const char *end = p;
    while (end > start && end[-1] == ' ')
      end--;
    if ((size_t)(end - start) == len && memcmp(start, backend, len) == 0) return true;
  }
  return false;
}

int harness_backend_devices(const char *backend, const char *test, ferry_backend_info *out) {
  ferry_backend_info b = {0};
  bool found = false;
  for (size_t i = 0; i < ferry_backend_count() && !found; i++)
    found = ferry_backend_get(i, &b) == FERRY_OK && strcmp(b.name, backend) == 0;
  if (found && b.device_count > 0) {
    *out = b;
    return 0;
  }
  const char *why = found ? b.status : "not in this build";
  if (harness_backend_required(backend)) {
    fprintf(stderr, "FAIL: FERRY_REQUIRE_BACKENDS names %s, but it has no device: %s\n", backend, why);
    return 1;
  }
  printf("SKIP %s: no %s device: %s\n", test, backend, why);
  return HARNESS_SKIP;
}

int harness_start_backend(const char *backend, const char *test, ferry_backend_info *out) {
  if (ferry_init() != FERRY_OK) {
    fprintf(stderr, "FAIL: ferry_init: %s\n", ferry_last_error());
    return 1;
  }
  int present = harness_backend_devices(backend, test, out);
  if (present != 0) ferry_shutdown();
  return present;
}

ferry_device *harness_device_of(const char *backend) {
  for (size_t i = 0; i < ferry_device_count(); i++) {
    ferry_device *d;
    ferry_device_info info;
    if (ferry_device_get(i, &d) == FERRY_OK && ferry_device_info_get(d, &info) == FERRY_OK &&
        strcmp(info.backend, backend) == 0)
      return d;
  }
  return NULL;
}

void *harness_aligned(size_t align, size_t bytes) {
  void *p = NULL;
  if (align < sizeof(void *)) align = sizeof(void *);
  if (posix_memalign(&p, align, bytes ? bytes : 1) != 0) return NULL;
  return p;
}

int harness_finish(const char *program) {
  if (harness_failures) {
    fprintf(stderr, "%s: %d of %d checks FAILED\n", program, harness_failures, harness_checks);
    return 1;
  }
  printf("%s: all %d checks passed\n", program, harness_checks);
  return 0;
}
