/*
 * Raw driver calls that ferry's figures are compared against.
 *
 * Each backend has a file raw/raw_<backend>.c that performs the transfer a
 * program written directly against the device would make (memcpy; cuMemcpyHtoD;
 * clEnqueueWriteBuffer; memcpy into a staging buffer + vkCmdCopyBuffer + fence),
 * on the very same ferry buffers (through ferry_device_ptr and
 * ferry_device_native), so that ferry / raw is measured in one run on one set of
 * memory.
 *
 * Where such a program has two ways to move the bytes (on devices whose memory is
 * the host's: OpenCL's map + memcpy + unmap beside clEnqueueWriteBuffer, Vulkan's
 * memcpy into mapped memory beside a staging copy), the backend offers the second
 * as the "alt" way, and `ferry bench` measures both and shows the faster.
 *
 * The baselines are ferry's users, not part of it: each has a small driver table of
 * its own (the few functions it calls), looked up in the very library ferry's backend
 * loaded (the FERRY_*_LIBRARY setting in effect, else the driver's usual name)
 * through the core's one loader (src/core/library.h: ferry__library_open, which
 * knows when a program cannot load libraries). They take the driver's types and
 * constants from ferry's declarations (src/backends/<name>/<name>_api.h, checked
 * against the vendors' headers by ctest), never a backend's state. The `ferry`
 * command (tools/) and the benchmark programs (bench/) both link them (ferry_raw).
 */
#ifndef FERRY_BENCH_RAW_H
#define FERRY_BENCH_RAW_H

#include "ferry.h"

#include <stdbool.h>
#include <stddef.h>

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
  const char *alloc_name; /* "cuMemAlloc+cuMemFree"; NULL: "driver alloc+free" */

  /* Everything below is optional (NULL / false when a backend does not have it). */

  /* A short name of the first way, for a table column: "enqueue", "staging"; NULL: "raw". */
  const char *tag;
  /* The second way (see the top of this file): available on this device when
   * alt_available says so; its short name and its calls. d2d_alt may be NULL. */
  bool (*alt_available)(raw_baseline *raw);
  const char *alt_tag; /* "map", "mapped" */
  const char *h2d_alt_name, *d2h_alt_name, *d2d_alt_name;
  int (*h2d_alt)(raw_baseline *raw, ferry_buffer dst, const void *src, size_t bytes);
  int (*d2h_alt)(raw_baseline *raw, ferry_buffer src, void *dst, size_t bytes);
  int (*d2d_alt)(raw_baseline *raw, ferry_buffer src, ferry_buffer dst, size_t bytes);
  /* The second way works on memory of the baseline's own, one block per ferry
   * buffer it stands for (Vulkan: a mapped buffer of the same size; a mapping of
   * ferry's buffer is ferry's), so its bytes are checked by round trips through
   * it (h2d_alt then d2h_alt), not by reading ferry's buffer. */
  bool alt_own_memory;
  /* A copy between buffers on two devices of this backend, complete on return
   * (cuMemcpyPeer + cuCtxSynchronize). */
  const char *peer_name;
  int (*peer)(raw_baseline *src_raw, ferry_buffer src, raw_baseline *dst_raw, ferry_buffer dst, size_t bytes);
  /* Asynchronous calls, for the rows of ferry's queues. h2d_async submits one copy
   * of `bytes` from ordinary host memory into `dst` and returns once it is enqueued
   * (clEnqueueWriteBuffer with CL_FALSE; cuMemcpyHtoDAsync), leaving `src` in use
   * until finish, which waits for everything h2d_async submitted (clFinish;
   * cuStreamSynchronize). Both or neither. */
  const char *h2d_async_name; /* the submission: "cuMemcpyHtoDAsync (legacy stream)" */
  const char *finish_name;    /* "cuStreamSynchronize" */
  int (*h2d_async)(raw_baseline *raw, ferry_buffer dst, const void *src, size_t bytes);
  int (*finish)(raw_baseline *raw);
  /* Both directions at once on two queues of the device: `bytes` from `src` into
   * `dst_buf` on one, `bytes` of `src_buf` into `dst` on the other, complete on
   * return. */
  const char *both_name;
  int (*both)(raw_baseline *raw, ferry_buffer dst_buf, const void *src, ferry_buffer src_buf, void *dst, size_t bytes);
  /* One copy of `bytes` from `src` (pinned memory) into `dst` between two of the
   * driver's events on a queue of the baseline's own, complete on return;
   * *out_seconds the time between the events by the driver's clock
   * (cuEventElapsedTime). */
  const char *h2d_elapsed_name;
  int (*h2d_elapsed)(raw_baseline *raw, ferry_buffer dst, const void *src, size_t bytes, double *out_seconds);
} raw_ops;

/* The raw calls for a backend by name ("native", "cuda", ...); NULL if none. */
const raw_ops *raw_ops_for(const char *backend);

/* ---- for the baselines' own driver tables (raw.c) ---- */

/* The driver library a backend loaded: the setting `option` in effect
 * (ferry_option_get; "FERRY_CUDA_LIBRARY"), else `fallback` ("libcuda.so.1"),
 * opened through the core's loader. NULL with a sentence in why[256]. After ferry_init. */
void *raw_library_open(const char *option, const char *fallback, char why[256]);
/* Looks `name` up in `library` into the function pointer at `slot` (of `size`
 * bytes); false, with a sentence in why[256], when the library has no such symbol. */
bool raw_library_symbol(void *library, const char *name, void *slot, size_t size, char why[256]);

#endif
