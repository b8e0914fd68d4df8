/*
 * The test harness: checks that record a failure and go on, a pass/fail count,
 * and exit code 77 for "skipped" (ctest's SKIP_RETURN_CODE).
 */
#ifndef FERRY_TESTS_HARNESS_H
#define FERRY_TESTS_HARNESS_H

#include "ferry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define HARNESS_SKIP 77

extern int harness_failures;
extern int harness_checks;
extern const char *harness_context; /* printed with each failure: "native: zero_length" */

void harness_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define CHECK(cond)                                                                                                    \
  do {                                                                                                                 \
    harness_checks++;                                                                                                  \
    if (!(cond)) harness_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond);                                          \
  } while (0)

#define CHECK_MSG(cond, ...)                                                                                           \
  do {                                                                                                                 \
    harness_checks++;                                                                                                  \
    if (!(cond)) harness_fail(__FILE__, __LINE__, __VA_ARGS__);                                                        \
  } while (0)

/* The call must return `want`; on a mismatch the failure shows both and the error sentence. */
#define CHECK_STATUS(expr, want)                                                                                       \
  do {                                                                                                                 \
    harness_checks++;                                                                                                  \
    ferry_status got_ = (expr);                                                                                        \
    if (got_ != (want))                                                                                                \
      harness_fail(__FILE__, __LINE__, "%s returned %s, expected %s (last error: %s)", #expr, ferry_status_name(got_), \
                   ferry_status_name(want), ferry_last_error());                                                       \
  } while (0)

#define CHECK_OK(expr) CHECK_STATUS(expr, FERRY_OK)

/* The last error sentence must contain `needle`. */
#define CHECK_ERROR_HAS(needle)                                                                                        \
  do {                                                                                                                 \
    harness_checks++;                                                                                                  \
    if (!strstr(ferry_last_error(), (needle)))                                                                         \
      harness_fail(__FILE__, __LINE__, "last error lacks \"%s\": %s", (needle), ferry_last_error());                   \
  } while (0)

/* Deterministic bytes that differ with offset and seed, never all zero. */
void fill_pattern(void *p, size_t n, uint32_t seed);
/* Index of the first byte that differs from fill_pattern(n, seed), or SIZE_MAX. */
size_t find_pattern_mismatch(const void *p, size_t n, uint32_t seed);

/* Is `backend` named in FERRY_REQUIRE_BACKENDS (comma list)? */
bool harness_backend_required(const char *backend);

/* Finds `backend` in the running session (ferry initialised). With devices: fills
 * *out and returns 0. Without: prints "SKIP <test>: no <backend> device: <why>"
 * and returns HARNESS_SKIP, or, when FERRY_REQUIRE_BACKENDS names the backend,
 * prints a failure and returns 1. */
int harness_backend_devices(const char *backend, const char *test, ferry_backend_info *out);

/* A backend test's start: ferry_init, then harness_backend_devices. Returns 0 with
 * ferry initialised and *out filled; else the exit status (1 when ferry_init
 * fails, saying why), with ferry shut down again. */
int harness_start_backend(const char *backend, const char *test, ferry_backend_info *out);

/* The first device of `backend` in the running session; NULL when it has none. */
ferry_device *harness_device_of(const char *backend);

/* Memory aligned to `align` (a power of two), at least `bytes` long; free with free(). */
void *harness_aligned(size_t align, size_t bytes);

/* Seconds on the monotonic clock. */
double harness_now_s(void);
/* Sleeps `ms` milliseconds, the whole of them even where a signal interrupts. */
void harness_sleep_ms(long ms);

/* ---- running cases (the conformance suite's runner, tests that reuse its cases) ----
 *
 * A case runs between harness_case_begin and harness_case_end, which prints one
 * line for it: "ok", "FAILED", "n/a (why)", or "FAILED (made no check)": a case
 * that checked nothing and did not say it does not apply is a failure, never ok.
 * A watchdog ends the program when a case runs longer than the time limit,
 * naming the case: a hang fails the run instead of stalling it. */

/* Which cases run: an fnmatch(3) glob on the case name ("byte_ranges",
 * "zero_*", "*host*"); NULL or "" runs every case. */
void harness_case_filter(const char *pattern);
/* Does the filter select this case? */
bool harness_case_selected(const char *name);

/* The time limit of one case, in seconds (default 300, or FERRY_TEST_CASE_TIMEOUT). */
void harness_case_time_limit(double seconds);

/* `context` names the case in failures and in the watchdog's message
 * ("opencl[0] byte_ranges"); `name` is the case's own name, for its line. */
void harness_case_begin(const char *context);
/* Ends the case and prints its line; returns true when it passed or did not apply. */
bool harness_case_end(const char *name);

/* Said by a case that does not apply to this device or pair (no host-pointer
 * buffers, ...): the runner prints "n/a (why)" for it. A case that says so may
 * still check what does apply (that the device refuses, say). */
void harness_not_applicable(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints the summary line and returns the exit code (0 or 1). */
int harness_finish(const char *program);

#endif
