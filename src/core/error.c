/* Status names, the thread's error sentence, element kinds. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FERRY_STR2(x) #x
#define FERRY_STR(x)  FERRY_STR2(x)

const char *ferry_version(void) {
  return FERRY_STR(FERRY_VERSION_MAJOR) "." FERRY_STR(FERRY_VERSION_MINOR) "." FERRY_STR(FERRY_VERSION_PATCH);
}

const char *ferry_status_name(ferry_status s) {
  switch (s) {
  case FERRY_OK: return "FERRY_OK";
  case FERRY_ERROR_INVALID_ARGUMENT: return "FERRY_ERROR_INVALID_ARGUMENT";
  case FERRY_ERROR_OVERFLOW: return "FERRY_ERROR_OVERFLOW";
  case FERRY_ERROR_SIZE_MISMATCH: return "FERRY_ERROR_SIZE_MISMATCH";
  case FERRY_ERROR_KIND_MISMATCH: return "FERRY_ERROR_KIND_MISMATCH";
  case FERRY_ERROR_OUT_OF_RANGE: return "FERRY_ERROR_OUT_OF_RANGE";
  case FERRY_ERROR_STALE_BUFFER: return "FERRY_ERROR_STALE_BUFFER";
  case FERRY_ERROR_UNSUPPORTED: return "FERRY_ERROR_UNSUPPORTED";
  case FERRY_ERROR_REFUSED: return "FERRY_ERROR_REFUSED";
  case FERRY_ERROR_OUT_OF_MEMORY: return "FERRY_ERROR_OUT_OF_MEMORY";
  case FERRY_ERROR_NO_DEVICE: return "FERRY_ERROR_NO_DEVICE";
  case FERRY_ERROR_BACKEND: return "FERRY_ERROR_BACKEND";
  case FERRY_NOT_READY: return "FERRY_NOT_READY";
  case FERRY_ERROR_STALE_HANDLE: return "FERRY_ERROR_STALE_HANDLE";
  case FERRY_ERROR_CANCELLED: return "FERRY_ERROR_CANCELLED";
  }
  return "FERRY_STATUS_UNKNOWN";
}

const char *ferry_refusal_name(ferry_refusal r) {
  switch (r) {
  case FERRY_REFUSAL_NONE: return "FERRY_REFUSAL_NONE";
  case FERRY_REFUSAL_UNSUPPORTED: return "FERRY_REFUSAL_UNSUPPORTED";
  case FERRY_REFUSAL_MISALIGNED: return "FERRY_REFUSAL_MISALIGNED";
  case FERRY_REFUSAL_BAD_LENGTH: return "FERRY_REFUSAL_BAD_LENGTH";
  case FERRY_REFUSAL_OVERLAP: return "FERRY_REFUSAL_OVERLAP";
  case FERRY_REFUSAL_DRIVER: return "FERRY_REFUSAL_DRIVER";
  case FERRY_REFUSAL_STRIDED: return "FERRY_REFUSAL_STRIDED";
  case FERRY_REFUSAL_DTYPE: return "FERRY_REFUSAL_DTYPE";
  case FERRY_REFUSAL_DEVICE: return "FERRY_REFUSAL_DEVICE";
  case FERRY_REFUSAL_READ_ONLY: return "FERRY_REFUSAL_READ_ONLY";
  case FERRY_REFUSAL_VERSION: return "FERRY_REFUSAL_VERSION";
  }
  return "FERRY_REFUSAL_UNKNOWN";
}

/* ---- the thread's sentence --------------------------------------------- */

static _Thread_local char error_text[1024] = "no error";

/* The thread's first-failure section (ferry__first_failure_begin): while
 * `failed`, a failure writes no sentence; `wrote`: one was written inside. */
static _Thread_local struct { bool active, failed, wrote; } section;

ferry_error_scope ferry__first_failure_begin(bool failed) {
  ferry_error_scope outer = {.active = section.active, .failed = section.failed, .wrote = section.wrote};
  section.active = true;
  section.failed = failed;
  section.wrote = false;
  return outer;
}

void ferry__first_failure_end(ferry_error_scope outer) {
  bool wrote = section.wrote;
  section.active = outer.active;
  section.failed = outer.failed || wrote;
  section.wrote = outer.wrote || wrote;
}

/* Where the thread's failures write while ferry__error_redirect is in force:
 * NULL for the thread's sentence. */
static _Thread_local struct {
  char *buf;
  size_t size;
} redirect;

ferry_error_target ferry__error_redirect(char *buf, size_t size) {
  ferry_error_target outer = {redirect.buf, redirect.size};
  redirect.buf = buf;
  redirect.size = size;
  if (buf && size) buf[0] = '\0';
  return outer;
}

void ferry__error_redirect_end(ferry_error_target outer) {
  redirect.buf = outer.buf;
  redirect.size = outer.size;
}

static char *target(size_t *size) {
  if (redirect.buf && redirect.size) {
    *size = redirect.size;
    return redirect.buf;
  }
  *size = sizeof error_text;
  return error_text;
}

ferry_status ferry__failv(ferry_status status, const char *fmt, va_list ap) {
  if (section.active) {
    if (section.failed) return status; /* an earlier failure's sentence stands */
    if (status != FERRY_OK) section.failed = section.wrote = true;
  }
  /* Format into a scratch buffer first: fmt's arguments may point into error_text
   * (a backend extending the previous sentence). */
  char scratch[sizeof error_text];
  vsnprintf(scratch, sizeof scratch, fmt, ap);
  size_t size;
  char *out = target(&size);
  snprintf(out, size, "%s", scratch);
  return status;
}

ferry_status ferry__fail(ferry_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ferry__failv(status, fmt, ap);
  va_end(ap);
  return status;
}

const char *ferry__error_text(void) {
  size_t size;
  return target(&size);
}

const char *ferry_last_error(void) { return error_text; }

const char *ferry__bytes_text(uint64_t bytes, char buf[64]) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) {
    snprintf(buf, 64, "%llu bytes", (unsigned long long)bytes);
    return buf;
  }
  double v = (double)bytes;
  int u = -1;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    u++;
  }
  snprintf(buf, 64, "%.4g %s (%llu bytes)", v, units[u], (unsigned long long)bytes);
  return buf;
}

/* ---- the core's own host allocations ---------------------------------- */

static _Atomic unsigned failing_allocs;

void *ferry__core_alloc(void *old, size_t bytes) {
  unsigned n = atomic_load_explicit(&failing_allocs, memory_order_relaxed);
  while (n && !atomic_compare_exchange_weak(&failing_allocs, &n, n - 1)) {
  }
  return n ? NULL : realloc(old, bytes);
}

void ferry__fail_core_allocs(unsigned count) { atomic_store(&failing_allocs, count); }

/* ---- kinds ------------------------------------------------------------- */

static const struct {
  const char *name;
  size_t size;
} kinds[] = {
    [FERRY_FLOAT16] = {"float16", 2},
    [FERRY_BFLOAT16] = {"bfloat16", 2},
    [FERRY_FLOAT32] = {"float32", 4},
    [FERRY_FLOAT64] = {"float64", 8},
    [FERRY_INT8] = {"int8", 1},
    [FERRY_UINT8] = {"uint8", 1},
    [FERRY_INT16] = {"int16", 2},
    [FERRY_UINT16] = {"uint16", 2},
    [FERRY_INT32] = {"int32", 4},
    [FERRY_UINT32] = {"uint32", 4},
    [FERRY_INT64] = {"int64", 8},
    [FERRY_UINT64] = {"uint64", 8},
    [FERRY_NATIVEINT] = {"nativeint", sizeof(intptr_t)},
    [FERRY_COMPLEX32] = {"complex32", 8},
    [FERRY_COMPLEX64] = {"complex64", 16},
    [FERRY_CHAR] = {"char", 1},
    [FERRY_CUSTOM] = {"custom", 0},
};

/* The enum's values are compared as unsigned so that a negative value cast into
 * ferry_kind is out of range too. */
static bool kind_known(ferry_kind k) { return (unsigned)k <= (unsigned)FERRY_CUSTOM; }

size_t ferry_kind_size(ferry_kind k) { return kind_known(k) ? kinds[k].size : 0; }

const char *ferry_kind_name(ferry_kind k) { return kind_known(k) ? kinds[k].name : "unknown"; }

ferry_array ferry_array_of(void *data, size_t length, ferry_kind kind) {
  return (ferry_array){.data = data, .length = length, .kind = kind};
}
