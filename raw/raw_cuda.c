/*
 * Raw CUDA baseline: the driver calls a user without ferry would make, on the
 * very same ferry buffers (ferry_device_ptr is the CUdeviceptr), in the
 * device's primary context (ferry_device_native), through a driver table of its
 * own (raw_cuda.h) on the libcuda that ferry loaded.
 *
 *   h2d         cuMemcpyHtoD_v2 + cuStreamSynchronize of the legacy stream
 *   d2h         cuMemcpyDtoH_v2
 *   d2d         cuMemcpyDtoD_v2 + cuCtxSynchronize
 *   host_alloc  cuMemAllocHost_v2 (cuMemFreeHost)
 *   alloc_free  cuMemAlloc_v2 + cuMemFree_v2
 *   peer        cuMemcpyPeer + cuCtxSynchronize, in the destination's context
 *   h2d_async   cuMemcpyHtoDAsync_v2 on the legacy stream; finish: cuStreamSynchronize of it
 *   both        cuMemcpyHtoDAsync_v2 and cuMemcpyDtoHAsync_v2 on two non-blocking streams of
 *               the baseline's own, then cuStreamSynchronize of each
 *   elapsed     cuEventRecord, cuMemcpyHtoDAsync_v2, cuEventRecord on a non-blocking stream of
 *               the baseline's own, cuEventSynchronize, cuEventElapsedTime_v2
 */
#include "raw_cuda.h"
#include "raw.h"

#include <stdio.h>
#include <stdlib.h>

struct raw_baseline {
  const raw_cuda_driver *api;
  cu_context ctx;
  cu_stream up, down; /* both's streams, made at its first call; elapsed's stream is up */
  cu_result streams_error;
  cu_event start, stop; /* elapsed's, made at its first call */
  cu_result events_error;
};

const raw_cuda_driver *raw_cuda_driver_load(char why[256]) {
  static raw_cuda_driver table;
  static bool loaded;
  if (loaded) return &table;
  void *lib = raw_library_open("FERRY_CUDA_LIBRARY", "libcuda.so.1", why);
  if (!lib) return NULL;
  raw_cuda_driver t;
  char missing[256];
#define RAW_CUDA_LOOKUP(member, symbol, required, ret, params)                                                         \
  if (!raw_library_symbol(lib, symbol, &t.member, sizeof t.member, missing)) {                                         \
    t.member = NULL;                                                                                                   \
    if (required) {                                                                                                    \
      snprintf(why, 256, "%s", missing);                                                                               \
      return NULL;                                                                                                     \
    }                                                                                                                  \
  }
  RAW_CUDA_FUNCTIONS(RAW_CUDA_LOOKUP)
#undef RAW_CUDA_LOOKUP
  table = t;
  loaded = true;
  return &table;
}

/* The primary context must be current on the calling thread, as a raw user
 * would have made it; a cuCtxGetCurrent when it already is. */
static int current(raw_baseline *raw) {
  cu_context now = NULL;
  if (raw->api->cuCtxGetCurrent(&now) != FCU_SUCCESS) return -1;
  if (now == raw->ctx) return 0;
  return raw->api->cuCtxSetCurrent(raw->ctx) == FCU_SUCCESS ? 0 : -1;
}

static raw_baseline *cuda_open(ferry_device *dev, char why[256]) {
  const raw_cuda_driver *api = raw_cuda_driver_load(why);
  ferry_native nat;
  if (!api) return NULL;
  if (ferry_device_native(dev, &nat) != FERRY_OK || nat.context == 0) {
    snprintf(why, 256, "not a cuda device: %s", ferry_last_error());
    return NULL;
  }
  raw_baseline *raw = calloc(1, sizeof *raw);
  if (!raw) {
    snprintf(why, 256, "no host memory");
    return NULL;
  }
  raw->api = api;
  raw->ctx = (cu_context)nat.context;
  if (current(raw) != 0) {
    snprintf(why, 256, "cuCtxSetCurrent of the primary context failed");
    free(raw);
    return NULL;
  }
  return raw;
}

static void cuda_close(raw_baseline *raw) {
  if (current(raw) == 0) {
    if (raw->start) (void)raw->api->cuEventDestroy(raw->start);
    if (raw->stop) (void)raw->api->cuEventDestroy(raw->stop);
    if (raw->up) (void)raw->api->cuStreamDestroy(raw->up);
    if (raw->down) (void)raw->api->cuStreamDestroy(raw->down);
  }
  free(raw);
}

static int cuda_h2d(raw_baseline *raw, ferry_buffer dst, const void *src, size_t bytes) {
  if (current(raw)) return -1;
  /* From pageable memory cuMemcpyHtoD returns once the bytes are staged, before
   * they land; the legacy stream's synchronisation makes the call complete on
   * return, as ferry_write is (and as the next reader, on another stream, needs). */
  if (raw->api->cuMemcpyHtoD((cu_deviceptr)ferry_device_ptr(dst), src, bytes) != FCU_SUCCESS) return -1;
  return raw->api->cuStreamSynchronize(NULL) == FCU_SUCCESS ? 0 : -1;
}

static int cuda_d2h(raw_baseline *raw, ferry_buffer src, void *dst, size_t bytes) {
  if (current(raw)) return -1;
  return raw->api->cuMemcpyDtoH(dst, (cu_deviceptr)ferry_device_ptr(src), bytes) == FCU_SUCCESS ? 0 : -1;
}

static int cuda_d2d(raw_baseline *raw, ferry_buffer src, ferry_buffer dst, size_t bytes) {
  if (current(raw)) return -1;
  if (raw->api->cuMemcpyDtoD((cu_deviceptr)ferry_device_ptr(dst), (cu_deviceptr)ferry_device_ptr(src), bytes) !=
      FCU_SUCCESS)
    return -1;
  return raw->api->cuCtxSynchronize() == FCU_SUCCESS ? 0 : -1;
}

/* The legacy (NULL) stream, which every program has without creating one. From
 * pageable memory the driver may copy the source out before returning, which is
 * part of what a submission costs. */
static int cuda_h2d_async(raw_baseline *raw, ferry_buffer dst, const void *src, size_t bytes) {
  if (current(raw)) return -1;
  cu_result r = raw->api->cuMemcpyHtoDAsync((cu_deviceptr)ferry_device_ptr(dst), src, bytes, NULL);
  return r == FCU_SUCCESS ? 0 : (int)r;
}

static int cuda_finish(raw_baseline *raw) {
  if (current(raw)) return -1;
  cu_result r = raw->api->cuStreamSynchronize(NULL);
  return r == FCU_SUCCESS ? 0 : (int)r;
}

/* Both directions at once, as a program with two streams would write it: each
 * copy on a non-blocking stream of its own (CU_STREAM_NON_BLOCKING: neither waits
 * for the legacy stream), then each stream synchronised. From pageable memory
 * the driver stages the bytes itself, as it does for one direction. */
/* The baseline's two non-blocking streams, made at the first call that needs them. */
static cu_result streams(raw_baseline *raw) {
  if (!raw->up && !raw->streams_error) {
    raw->streams_error = raw->api->cuStreamCreate(&raw->up, FCU_STREAM_NON_BLOCKING);
    if (!raw->streams_error) raw->streams_error = raw->api->cuStreamCreate(&raw->down, FCU_STREAM_NON_BLOCKING);
  }
  return raw->streams_error;
}

static int cuda_both(raw_baseline *raw, ferry_buffer dst_buf, const void *src, ferry_buffer src_buf, void *dst,
                     size_t bytes) {
  if (current(raw)) return -1;
  if (streams(raw)) return (int)raw->streams_error;
  cu_result r = raw->api->cuMemcpyHtoDAsync((cu_deviceptr)ferry_device_ptr(dst_buf), src, bytes, raw->up);
  if (r == FCU_SUCCESS) r = raw->api->cuMemcpyDtoHAsync(dst, (cu_deviceptr)ferry_device_ptr(src_buf), bytes, raw->down);
  cu_result first = raw->api->cuStreamSynchronize(raw->up), second = raw->api->cuStreamSynchronize(raw->down);
  if (r == FCU_SUCCESS) r = first != FCU_SUCCESS ? first : second;
  return r == FCU_SUCCESS ? 0 : (int)r;
}

/* One copy between two events on a stream of the baseline's own, timed by the
 * device (cuEventElapsedTime): what a program timing its copy would write. */
static int cuda_h2d_elapsed(raw_baseline *raw, ferry_buffer dst, const void *src, size_t bytes, double *out_seconds) {
  if (current(raw)) return -1;
  if (!raw->api->cuEventCreate || !raw->api->cuEventRecord || !raw->api->cuEventSynchronize ||
      !raw->api->cuEventElapsedTime || !raw->api->cuEventDestroy)
    return -1;
  if (streams(raw)) return (int)raw->streams_error;
  if (!raw->start && !raw->events_error) {
    raw->events_error = raw->api->cuEventCreate(&raw->start, 0);
    if (!raw->events_error) raw->events_error = raw->api->cuEventCreate(&raw->stop, 0);
  }
  if (raw->events_error) return (int)raw->events_error;
  float ms = 0;
  cu_result r = raw->api->cuEventRecord(raw->start, raw->up);
  if (r == FCU_SUCCESS) r = raw->api->cuMemcpyHtoDAsync((cu_deviceptr)ferry_device_ptr(dst), src, bytes, raw->up);
  if (r == FCU_SUCCESS) r = raw->api->cuEventRecord(raw->stop, raw->up);
  if (r == FCU_SUCCESS) r = raw->api->cuEventSynchronize(raw->stop);
  if (r == FCU_SUCCESS) r = raw->api->cuEventElapsedTime(&ms, raw->start, raw->stop);
  if (r != FCU_SUCCESS) return (int)r;
  *out_seconds = (double)ms * 1e-3;
  return 0;
}

static void *cuda_host_alloc(raw_baseline *raw, size_t bytes) {
  void *p = NULL;
  if (current(raw) || !raw->api->cuMemAllocHost) return NULL;
  return raw->api->cuMemAllocHost(&p, bytes) == FCU_SUCCESS ? p : NULL;
}

static void cuda_host_free(raw_baseline *raw, void *ptr) {
  if (current(raw) == 0) (void)raw->api->cuMemFreeHost(ptr);
}

static int cuda_alloc_free(raw_baseline *raw, size_t bytes) {
  cu_deviceptr p = 0;
  if (current(raw)) return -1;
  if (raw->api->cuMemAlloc(&p, bytes ? bytes : 1) != FCU_SUCCESS) return -1;
  return raw->api->cuMemFree(p) == FCU_SUCCESS ? 0 : -1;
}

/* As a program copying between two GPUs would: the destination's context current,
 * cuMemcpyPeer, and a cuCtxSynchronize so that the copy is complete on return. */
static int cuda_peer(raw_baseline *src_raw, ferry_buffer src, raw_baseline *dst_raw, ferry_buffer dst, size_t bytes) {
  if (current(dst_raw)) return -1;
  if (dst_raw->api->cuMemcpyPeer((cu_deviceptr)ferry_device_ptr(dst), dst_raw->ctx, (cu_deviceptr)ferry_device_ptr(src),
                                 src_raw->ctx, bytes) != FCU_SUCCESS)
    return -1;
  return dst_raw->api->cuCtxSynchronize() == FCU_SUCCESS ? 0 : -1;
}

static const raw_ops cuda_raw = {
    .backend = "cuda",
    .h2d_name = "cuMemcpyHtoD + cuStreamSynchronize",
    .d2h_name = "cuMemcpyDtoH",
    .d2d_name = "cuMemcpyDtoD + cuCtxSynchronize",
    .open = cuda_open,
    .close = cuda_close,
    .h2d = cuda_h2d,
    .d2h = cuda_d2h,
    .d2d = cuda_d2d,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .alloc_free = cuda_alloc_free,
    .alloc_name = "cuMemAlloc+cuMemFree",
    .tag = "cuMemcpy",
    .peer_name = "cuMemcpyPeer + cuCtxSynchronize",
    .peer = cuda_peer,
    .h2d_async_name = "cuMemcpyHtoDAsync (legacy stream)",
    .h2d_async = cuda_h2d_async,
    .finish_name = "cuStreamSynchronize",
    .finish = cuda_finish,
    .both_name = "cuMemcpyHtoDAsync + cuMemcpyDtoHAsync on two non-blocking streams + cuStreamSynchronize (both)",
    .both = cuda_both,
    .h2d_elapsed_name = "cuEventRecord + cuMemcpyHtoDAsync + cuEventRecord + cuEventSynchronize, timed by "
                        "cuEventElapsedTime",
    .h2d_elapsed = cuda_h2d_elapsed,
};

const raw_ops *raw_cuda_ops(void) { return &cuda_raw; }
