/*
 * Raw driver calls that ferry's figures are compared against.
 *
 * Each backend has a file tools/raw/raw_<backend>.c that performs the transfer a
 * user without ferry would write (memcpy; cuMemcpyHtoD; clEnqueueWriteBuffer;
 * memcpy into a staging buffer + vkCmdCopyBuffer + fence), on the very same
 * ferry buffers (through ferry_device_ptr and ferry_device_native), so that
 * ferry / raw is measured in one run on one set of memory.
 */
#ifndef FERRY_BENCH_RAW_H
#define FERRY_BENCH_RAW_H

#include "ferry.h"

typedef struct raw_baseline raw_baseline; /* a backend's own state for one device */

typedef struct raw_ops {
  const char *backend;  /* "cuda" */
  const char *h2d_name; /* the call measured: "cuMemcpyHtoD" */
  const char *d2h_name;
  const char *d2d_name;
  /* Prepares the raw calls for `dev`; NULL (with a sentence in why[256]) when it cannot. */
  raw_baseline *(*open)(ferry_device *dev, char why[256]);
  void (*close)(raw_baseline *raw);
  /* One synchronous transfer of `bytes` bytes, complete on return; 0 on success. */
  int (*h2d)(raw_baseline *raw, ferry_buffer dst, const void *src, size_t bytes);
  int (*d2h)(raw_baseline *raw, ferry_buffer src, void *dst, size_t bytes);
  int (*d2d)(raw_baseline *raw, ferry_buffer src, ferry_buffer dst, size_t bytes);
  /* Optional (NULL if the driver has no such call): the driver's pinned host
   * memory (cuMemAllocHost) for the pinned baseline, and one raw allocation +
   * free of `bytes` (cuMemAlloc + cuMemFree) for the allocation baseline. */
  void *(*host_alloc)(raw_baseline *raw, size_t bytes);
  void (*host_free)(raw_baseline *raw, void *ptr);
  int (*alloc_free)(raw_baseline *raw, size_t bytes);
} raw_ops;

/* The raw calls for a backend by name ("native", "cuda", ...); NULL if none. */
const raw_ops *raw_ops_for(const char *backend);

#endif
