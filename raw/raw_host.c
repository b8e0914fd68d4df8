/* Raw baseline for the host backends (native, checked): memcpy on the buffer's bytes. */
#include "raw.h"

#include <stdlib.h>
#include <string.h>

struct raw_baseline {
  int unused;
};

static raw_baseline *host_open(ferry_device *dev, char why[256]) {
  (void)dev;
  (void)why;
  return calloc(1, sizeof(raw_baseline));
}

static void host_close(raw_baseline *raw) { free(raw); }

static int host_h2d(raw_baseline *raw, ferry_buffer dst, const void *src, size_t bytes) {
  (void)raw;
  memcpy((void *)ferry_device_ptr(dst), src, bytes);
  return 0;
}

static int host_d2h(raw_baseline *raw, ferry_buffer src, void *dst, size_t bytes) {
  (void)raw;
  memcpy(dst, (const void *)ferry_device_ptr(src), bytes);
  return 0;
}

static int host_d2d(raw_baseline *raw, ferry_buffer src, ferry_buffer dst, size_t bytes) {
  (void)raw;
  memcpy((void *)ferry_device_ptr(dst), (const void *)ferry_device_ptr(src), bytes);
  return 0;
}

static int host_alloc_free(raw_baseline *raw, size_t bytes) {
  (void)raw;
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0) return -1;
  /* Keep the pair from being optimised away. */
  __asm__ volatile("" : : "r"(p) : "memory");
  free(p);
  return 0;
}

static const raw_ops host_raw = {
    .backend = "native",
    .h2d_name = "memcpy",
    .d2h_name = "memcpy",
    .d2d_name = "memcpy",
    .open = host_open,
    .close = host_close,
    .h2d = host_h2d,
    .d2h = host_d2h,
    .d2d = host_d2d,
    .alloc_free = host_alloc_free,
    .alloc_name = "posix_memalign+free",
    .tag = "memcpy",
};

const raw_ops *raw_host_ops(void) { return &host_raw; }
