#include "harness.h"

#include <errno.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

double harness_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void harness_sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

/* ---- running cases ------------------------------------------------------------------- */

static const char *case_pattern;
static int cases_run, cases_not_applicable;
static int case_checks_before, case_failures_before;
static char not_applicable_why[256];

void harness_case_filter(const char *pattern) { case_pattern = pattern && *pattern ? pattern : NULL; }

bool harness_case_selected(const char *name) { return !case_pattern || fnmatch(case_pattern, name, 0) == 0; }

/* The watchdog: a thread that waits for the running case's deadline. */
static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watch_cond;
static pthread_t watch_thread;
static bool watch_started, watch_armed, watch_stop;
static struct timespec watch_deadline;
static double watch_limit;
static char watch_context[512];

static double default_time_limit(void) {
  const char *env = getenv("FERRY_TEST_CASE_TIMEOUT");
  char *end;
  double s = env ? strtod(env, &end) : 0;
  return env && end != env && *end == '\0' && s > 0 ? s : 300;
}

void harness_case_time_limit(double seconds) { watch_limit = seconds; }

static void *watchdog(void *arg) {
  (void)arg;
  pthread_mutex_lock(&watch_lock);
  while (!watch_stop) {
    if (!watch_armed) {
      pthread_cond_wait(&watch_cond, &watch_lock);
      continue;
    }
    if (pthread_cond_timedwait(&watch_cond, &watch_lock, &watch_deadline) != ETIMEDOUT || !watch_armed) continue;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec < watch_deadline.tv_sec ||
        (now.tv_sec == watch_deadline.tv_sec && now.tv_nsec < watch_deadline.tv_nsec))
      continue;
    /* The case's own thread may hold stdio's locks: write(2) only, then stop the program. */
    char msg[700];
    int n = snprintf(msg, sizeof msg,
                     "FAIL %s: did not finish within %g s (hung?); stopping the run (FERRY_TEST_CASE_TIMEOUT sets "
                     "the limit)\n",
                     watch_context, watch_limit);
    if (n > 0) {
      ssize_t written = write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
      (void)written; /* nothing better to do when stderr is gone */
    }
    _exit(1);
  }
  pthread_mutex_unlock(&watch_lock);
  return NULL;
}

static void watchdog_stop(void) {
  if (!watch_started) return;
  pthread_mutex_lock(&watch_lock);
  watch_stop = true;
  pthread_cond_signal(&watch_cond);
  pthread_mutex_unlock(&watch_lock);
  pthread_join(watch_thread, NULL);
  pthread_cond_destroy(&watch_cond);
  watch_started = false;
}

void harness_case_begin(const char *context) {
  harness_context = context;
  case_checks_before = harness_checks;
  case_failures_before = harness_failures;
  not_applicable_why[0] = '\0';
  fflush(stdout);
  pthread_mutex_lock(&watch_lock);
  if (!watch_started) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&watch_cond, &attr);
    pthread_condattr_destroy(&attr);
    watch_stop = false;
    if (pthread_create(&watch_thread, NULL, watchdog, NULL) == 0)
      watch_started = true;
    else
      fprintf(stderr, "(no watchdog thread: a hung case will not be named)\n");
  }
  if (watch_limit <= 0) watch_limit = default_time_limit();
  snprintf(watch_context, sizeof watch_context, "%s", context);
  clock_gettime(CLOCK_MONOTONIC, &watch_deadline);
  double whole = (double)(time_t)watch_limit;
  watch_deadline.tv_sec += (time_t)watch_limit;
  watch_deadline.tv_nsec += (long)((watch_limit - whole) * 1e9);
  if (watch_deadline.tv_nsec >= 1000000000L) {
    watch_deadline.tv_sec++;
    watch_deadline.tv_nsec -= 1000000000L;
  }
  watch_armed = true;
  pthread_cond_signal(&watch_cond);
  pthread_mutex_unlock(&watch_lock);
}

bool harness_case_end(const char *name) {
  pthread_mutex_lock(&watch_lock);
  watch_armed = false;
  pthread_cond_signal(&watch_cond);
  pthread_mutex_unlock(&watch_lock);
  cases_run++;
  bool failed = harness_failures != case_failures_before;
  bool checked = harness_checks != case_checks_before;
  bool passed = !failed;
  if (failed)
    printf("  %-32s FAILED\n", name);
  else if (not_applicable_why[0]) {
    cases_not_applicable++;
    printf("  %-32s n/a (%s)\n", name, not_applicable_why);
  } else if (!checked) {
    harness_fail(__FILE__, __LINE__, "the case made no check and did not say it does not apply");
    printf("  %-32s FAILED (made no check)\n", name);
    passed = false;
  } else
    printf("  %-32s ok\n", name);
  fflush(stdout);
  harness_context = "";
  return passed;
}

void harness_not_applicable(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(not_applicable_why, sizeof not_applicable_why, fmt, ap);
  va_end(ap);
}

int harness_finish(const char *program) {
  watchdog_stop();
  char cases[96] = "";
  if (cases_run) snprintf(cases, sizeof cases, " (%d cases, %d not applicable)", cases_run, cases_not_applicable);
  if (harness_failures) {
    fprintf(stderr, "%s: %d of %d checks FAILED%s\n", program, harness_failures, harness_checks, cases);
    return 1;
  }
  printf("%s: all %d checks passed%s\n", program, harness_checks, cases);
  return 0;
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HARNESS_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define HARNESS_ASAN 1
#endif
#ifdef HARNESS_ASAN
/* LeakSanitizer reads this hook at exit. PoCL's kernel compiler (LLVM) keeps
 * objects it never frees when it compiles a kernel, which happens only with a
 * cold cache (POCL_CACHE_DIR empty): those are the driver's, not ferry's. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libpocl.so\nleak:libLLVM\n"; }
#endif
