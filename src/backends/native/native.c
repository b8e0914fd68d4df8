/*
 * native: the host CPU, whose device memory is host memory.
 *
 * Allocations are 64-byte aligned (a cache line, and the widest vector loads)
 * and plain host memory (ferry_mem.host), so the core moves their bytes itself,
 * on its copy threads; the backend only allocates.
 */
#include "../../core/backend.h"
#include "../../core/host_info.h"

#include <stdlib.h>
#include <string.h>

#define NATIVE_ALIGN 64

static ferry_status native_alloc(ferry_device *dev, size_t bytes, ferry_mem *out) {
  size_t rounded = (bytes + NATIVE_ALIGN - 1) & ~(size_t)(NATIVE_ALIGN - 1);
  void *p = NULL;
  if (rounded < bytes || posix_memalign(&p, NATIVE_ALIGN, rounded) != 0) {
    char text[64];
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "posix_memalign could not give %s on %s",
                       ferry__bytes_text(bytes, text), dev->label);
  }
  *out = (ferry_mem){.handle = (uintptr_t)p, .host = p, .bytes = rounded};
  return FERRY_OK;
}

static ferry_status native_free(ferry_device *dev, ferry_mem *mem) {
  (void)dev;
  free(mem->host);
  return FERRY_OK;
}

/* The core copies ferry_mem.host memory itself; this is for completeness of the
 * table. No lanes: the copy is done on return. */
static ferry_status native_copy(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t so, ferry_mem *dst,
                                size_t doff, size_t n, ferry_ticket *out) {
  (void)dev;
  (void)lane;
  ferry__plain_move((char *)dst->host + doff, (const char *)src->host + so, n);
  if (out) *out = 0;
  return FERRY_OK;
}

static ferry_status native_driver_info(ferry_device *dev, ferry_driver_info *out) {
  (void)dev;
  ferry__host_driver_info(out);
  return FERRY_OK;
}

static const ferry_device_ops native_ops = {
    .alloc = native_alloc,
    .free = native_free,
    .copy_start = native_copy,
    .driver_info = native_driver_info,
};

static char native_name[256];

static ferry_status native_probe(ferry_probe *probe) {
  ferry__host_cpu_name(native_name, sizeof native_name);
  uint64_t memory = ferry__host_ram();
  ferry_device_desc desc = {
      .ops = &native_ops,
      .name = native_name,
      .total_memory = memory,
      .max_allocation = memory,
      .is_cpu = true,
      .zero_copy = true,
      .host_ptr = true,
      .host_ptr_alignment = 1,
      .caps = FERRY_CAP_OVERLAP_COPY,
  };
  return ferry__device_add(probe, &desc);
}

const ferry_backend ferry_backend_native = {.name = "native", .probe = native_probe, .fork_safe = true};
