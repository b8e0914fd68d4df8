/* The conformance suite's cases: each runs on one device (or one ordered pair). */
#ifndef FERRY_TESTS_CONFORMANCE_H
#define FERRY_TESTS_CONFORMANCE_H

#include "harness.h"

#include <string.h>

typedef struct conformance_case {
  const char *name;
  void (*run)(ferry_device *dev, const ferry_device_info *info);
} conformance_case;

typedef struct conformance_pair_case {
  const char *name;
  void (*run)(ferry_device *a, const ferry_device_info *ia, ferry_device *b, const ferry_device_info *ib);
} conformance_pair_case;

/* Every list ends with an entry whose name is NULL. The runner runs the device
 * lists in this order on each device, the pair lists on each ordered pair. */
extern const conformance_case conformance_device_cases[]; /* conformance_cases.c */
extern const conformance_case conformance_queue_cases[];  /* conformance_queues.c */
extern const conformance_pair_case conformance_pair_cases[];
extern const conformance_pair_case conformance_queue_pair_cases[];

/* ---- what each backend offers, and skips (conformance_backends.c) ---- */

/* Which fields of ferry_device_native a backend fills (the others are 0). */
enum { CONF_NATIVE_DEVICE = 1, CONF_NATIVE_CONTEXT = 2, CONF_NATIVE_QUEUE = 4 };

typedef struct conformance_skip {
  const char *cases; /* an fnmatch(3) glob of case names */
  const char *why;
} conformance_skip;

/* What ferry_queue_native gives for a queue of the backend's devices. */
typedef enum conformance_queue_native {
  CONF_QUEUE_NATIVE_GIVEN,   /* FERRY_OK: the queue's own native queue (0 on the host backends) */
  CONF_QUEUE_NATIVE_REFUSED, /* FERRY_ERROR_UNSUPPORTED: the queues run on ferry's thread, on no native queue */
  CONF_QUEUE_NATIVE_EITHER,  /* given or refused, by how the device runs (a driver feature, a setting) */
} conformance_queue_native;

typedef struct conformance_backend {
  const char *name;
  unsigned native_fields; /* CONF_NATIVE_* */
  conformance_queue_native queue_native;
  const conformance_skip *skips; /* ends with {NULL, NULL} */
} conformance_backend;

/* The backend's entry (defaults for one the table does not list). */
const conformance_backend *conformance_backend_of(const char *name);
/* Why the backend skips the case, or NULL when it runs it. */
const char *conformance_skip_reason(const conformance_backend *b, const char *case_name);

/* Shared by the cases' files. */
#define CONF_SENTINEL_ID 0x5e5e5e5e5e5e5e5eULL
/* A handle that never names a buffer, to check that failed calls leave out-parameters alone. */
ferry_buffer conf_sentinel(void);
/* A buffer of n bytes (uint8) holding fill_pattern(seed). */
ferry_buffer conf_patterned(ferry_device *dev, size_t n, uint32_t seed);
/* The buffer's bytes must be fill_pattern(seed). */
void conf_expect_pattern(ferry_buffer b, size_t n, uint32_t seed, const char *what);

#endif
