/*
 * Raw OpenCL baseline: the calls a user without ferry would make, on ferry's own
 * buffers (the cl_mem from ferry_device_ptr, the queue from ferry_device_native),
 * through a table of its own (below) on the OpenCL library ferry loaded
 * (FERRY_OPENCL_LIBRARY, else libOpenCL.so.1).
 *
 *   h2d: clEnqueueWriteBuffer, blocking, + clFinish (a blocking write may return
 *        before the bytes are on the device)
 *   d2h: clEnqueueReadBuffer, blocking
 *   d2d: clEnqueueCopyBuffer + clFinish
 *   pinned host memory: a CL_MEM_ALLOC_HOST_PTR buffer, mapped (the vendors' advice)
 *   allocation: clCreateBuffer + clReleaseMemObject
 *   h2d_async: clEnqueueWriteBuffer, non-blocking, on ferry's in-order device queue;
 *        finish: clFinish
 *   both: a non-blocking clEnqueueWriteBuffer on that queue and a non-blocking
 *        clEnqueueReadBuffer on a second in-order queue of the baseline's own, each
 *        flushed, then clFinish of both
 *   h2d_elapsed: a non-blocking clEnqueueWriteBuffer with an event on a profiling
 *        queue of the baseline's own, clWaitForEvents, the event's profiling times
 *
 * On devices whose memory is the host's (CPU devices, and any device that says
 * CL_DEVICE_HOST_UNIFIED_MEMORY), a program may as well map the buffer and copy
 * with memcpy; that is the second way ("map"), on the same buffers:
 *   h2d: clEnqueueMapBuffer(CL_MAP_WRITE_INVALIDATE_REGION) + memcpy + clEnqueueUnmapMemObject + clFinish
 *   d2h: clEnqueueMapBuffer(CL_MAP_READ) + memcpy + clEnqueueUnmapMemObject + clFinish
 *   d2d: both buffers mapped + memcpy + both unmapped + clFinish
 */
#include "raw_opencl.h"
#include "raw.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mapped_block {
  struct mapped_block *next;
  void *ptr;
  cl_mem mem;
} mapped_block;

const raw_cl_driver *raw_cl_driver_load(char why[256]) {
  static raw_cl_driver table;
  static bool loaded;
  if (loaded) return &table;
  void *lib = raw_library_open("FERRY_OPENCL_LIBRARY", "libOpenCL.so.1", why);
  if (!lib) return NULL;
  raw_cl_driver t;
#define RAW_CL_LOOKUP(member, ret, params)                                                                             \
  if (!raw_library_symbol(lib, #member, &t.member, sizeof t.member, why)) return NULL;
  RAW_CL_FUNCTIONS(RAW_CL_LOOKUP)
#undef RAW_CL_LOOKUP
  char missing[256];
#define RAW_CL_OPTIONAL_LOOKUP(member, ret, params)                                                                    \
  if (!raw_library_symbol(lib, #member, &t.member, sizeof t.member, missing)) t.member = NULL;
  RAW_CL_OPTIONAL(RAW_CL_OPTIONAL_LOOKUP)
#undef RAW_CL_OPTIONAL_LOOKUP
  table = t;
  loaded = true;
  return &table;
}

struct raw_baseline {
  const raw_cl_driver *api;
  cl_context context;
  cl_device_id device;
  cl_command_queue queue;
  cl_command_queue second; /* the baseline's own in-order queue, for `both`; NULL when it could not be made */
  cl_int second_error;     /* why not: what the creating call returned */
  cl_command_queue timed;  /* elapsed's in-order queue with profiling, made at its first call */
  cl_int timed_error;
  bool unified; /* the device's memory is the host's: the map way exists */
  pthread_mutex_t lock;
  mapped_block *blocks;
};

cl_command_queue raw_cl_queue_create(const raw_cl_driver *api, cl_context context, cl_device_id id, bool profiling,
                                     cl_int *err) {
  char version[128] = "";
  int major = 1, minor = 0;
  if (api->clGetDeviceInfo(id, CL_DEVICE_VERSION, sizeof version - 1, version, NULL) == CL_SUCCESS)
    (void)sscanf(version, "OpenCL %d.%d", &major, &minor);
  *err = CL_INVALID_OPERATION; /* no call to make one */
  cl_command_queue q = NULL;
  const cl_queue_properties props[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
  if (major >= 2 && api->clCreateCommandQueueWithProperties)
    q = api->clCreateCommandQueueWithProperties(context, id, profiling ? props : NULL, err);
  else if (api->clCreateCommandQueue)
    q = api->clCreateCommandQueue(context, id, profiling ? CL_QUEUE_PROFILING_ENABLE : 0, err);
  if (!q && *err == CL_SUCCESS) *err = CL_INVALID_OPERATION;
  return q;
}

static raw_baseline *cl_open(ferry_device *dev, char why[256]) {
  const raw_cl_driver *api = raw_cl_driver_load(why);
  ferry_native nat;
  if (!api) return NULL;
  if (ferry_device_native(dev, &nat) != FERRY_OK || !nat.queue) {
    snprintf(why, 256, "no OpenCL queue for the device: %s", ferry_last_error());
    return NULL;
  }
  raw_baseline *raw = calloc(1, sizeof *raw);
  if (!raw) {
    snprintf(why, 256, "out of host memory");
    return NULL;
  }
  raw->api = api;
  raw->context = (cl_context)nat.context;
  raw->queue = (cl_command_queue)nat.queue;
  cl_device_type type = 0;
  cl_bool unified = CL_FALSE;
  cl_device_id id = (cl_device_id)nat.device;
  if (api->clGetDeviceInfo(id, CL_DEVICE_TYPE, sizeof type, &type, NULL) != CL_SUCCESS) type = 0;
  if (api->clGetDeviceInfo(id, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL) != CL_SUCCESS)
    unified = CL_FALSE;
  raw->unified = (type & CL_DEVICE_TYPE_CPU) || unified;
  raw->device = id;
  raw->second = raw_cl_queue_create(api, raw->context, id, false, &raw->second_error);
  pthread_mutex_init(&raw->lock, NULL);
  return raw;
}

static void cl_host_free_raw(raw_baseline *raw, void *ptr);

static void cl_close(raw_baseline *raw) {
  while (raw->blocks)
    cl_host_free_raw(raw, raw->blocks->ptr);
  if (raw->second) {
    raw->api->clFinish(raw->second);
    raw->api->clReleaseCommandQueue(raw->second);
  }
  if (raw->timed) {
    raw->api->clFinish(raw->timed);
    raw->api->clReleaseCommandQueue(raw->timed);
  }
  pthread_mutex_destroy(&raw->lock);
  free(raw);
}

/* A blocking write may return before the bytes are on the device (NVIDIA's
 * does, once the source was copied out); clFinish makes it complete, as raw.h
 * asks, and keeps its tail out of the next measurement. */
static int cl_h2d(raw_baseline *raw, ferry_buffer dst, const void *src, size_t bytes) {
  cl_mem mem = (cl_mem)ferry_device_ptr(dst);
  if (raw->api->clEnqueueWriteBuffer(raw->queue, mem, CL_TRUE, 0, bytes, src, 0, NULL, NULL) != CL_SUCCESS) return -1;
  return raw->api->clFinish(raw->queue) == CL_SUCCESS ? 0 : -1;
}

static int cl_d2h(raw_baseline *raw, ferry_buffer src, void *dst, size_t bytes) {
  cl_mem mem = (cl_mem)ferry_device_ptr(src);
  return raw->api->clEnqueueReadBuffer(raw->queue, mem, CL_TRUE, 0, bytes, dst, 0, NULL, NULL) == CL_SUCCESS ? 0 : -1;
}

static int cl_d2d(raw_baseline *raw, ferry_buffer src, ferry_buffer dst, size_t bytes) {
  cl_mem s = (cl_mem)ferry_device_ptr(src), d = (cl_mem)ferry_device_ptr(dst);
  if (raw->api->clEnqueueCopyBuffer(raw->queue, s, d, 0, 0, bytes, 0, NULL, NULL) != CL_SUCCESS) return -1;
  return raw->api->clFinish(raw->queue) == CL_SUCCESS ? 0 : -1;
}

static void *cl_host_alloc_raw(raw_baseline *raw, size_t bytes) {
  mapped_block *b = malloc(sizeof *b);
  if (!b) return NULL;
  cl_int err = CL_SUCCESS;
  b->mem = raw->api->clCreateBuffer(raw->context, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &err);
  if (err != CL_SUCCESS || !b->mem) {
    free(b);
    return NULL;
  }
  b->ptr = raw->api->clEnqueueMapBuffer(raw->queue, b->mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, NULL,
                                        NULL, &err);
  if (err != CL_SUCCESS || !b->ptr) {
    raw->api->clReleaseMemObject(b->mem);
    free(b);
    return NULL;
  }
  pthread_mutex_lock(&raw->lock);
  b->next = raw->blocks;
  raw->blocks = b;
  pthread_mutex_unlock(&raw->lock);
  return b->ptr;
}

static void cl_host_free_raw(raw_baseline *raw, void *ptr) {
  mapped_block *found = NULL;
  pthread_mutex_lock(&raw->lock);
  for (mapped_block **link = &raw->blocks; *link; link = &(*link)->next) {
    if ((*link)->ptr == ptr) {
      found = *link;
      *link = found->next;
      break;
    }
  }
  pthread_mutex_unlock(&raw->lock);
  if (!found) return;
  raw->api->clEnqueueUnmapMemObject(raw->queue, found->mem, found->ptr, 0, NULL, NULL);
  raw->api->clFinish(raw->queue);
  raw->api->clReleaseMemObject(found->mem);
  free(found);
}

static int cl_alloc_free(raw_baseline *raw, size_t bytes) {
  cl_int err = CL_SUCCESS;
  cl_mem mem = raw->api->clCreateBuffer(raw->context, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &err);
  if (err != CL_SUCCESS || !mem) return -1;
  return raw->api->clReleaseMemObject(mem) == CL_SUCCESS ? 0 : -1;
}

/* ---- asynchronous calls ------------------------------------------------------- */

/* Only the enqueue: no clFlush, as a program that queues a burst of writes and then
 * waits need not flush each one. The bytes of `src` are the driver's until cl_finish. */
static int cl_h2d_async(raw_baseline *raw, ferry_buffer dst, const void *src, size_t bytes) {
  cl_mem mem = (cl_mem)ferry_device_ptr(dst);
  cl_int err = raw->api->clEnqueueWriteBuffer(raw->queue, mem, CL_FALSE, 0, bytes, src, 0, NULL, NULL);
  return err == CL_SUCCESS ? 0 : (int)err;
}

static int cl_finish(raw_baseline *raw) {
  cl_int err = raw->api->clFinish(raw->queue);
  return err == CL_SUCCESS ? 0 : (int)err;
}

/* Each queue is flushed once its command is in, so that the second starts while the
 * first runs rather than when clFinish gets to it. Both queues are finished even
 * when a call failed, so that no command still uses the host memory on return;
 * the first failure's code is returned. */
static int cl_both(raw_baseline *raw, ferry_buffer dst_buf, const void *src, ferry_buffer src_buf, void *dst,
                   size_t bytes) {
  if (!raw->second) return (int)raw->second_error;
  const raw_cl_driver *api = raw->api;
  cl_int err =
      api->clEnqueueWriteBuffer(raw->queue, (cl_mem)ferry_device_ptr(dst_buf), CL_FALSE, 0, bytes, src, 0, NULL, NULL);
  if (err == CL_SUCCESS) err = api->clFlush(raw->queue);
  if (err == CL_SUCCESS)
    err = api->clEnqueueReadBuffer(raw->second, (cl_mem)ferry_device_ptr(src_buf), CL_FALSE, 0, bytes, dst, 0, NULL,
                                   NULL);
  if (err == CL_SUCCESS) err = api->clFlush(raw->second);
  cl_int first = api->clFinish(raw->queue), second = api->clFinish(raw->second);
  if (err == CL_SUCCESS) err = first != CL_SUCCESS ? first : second;
  return err == CL_SUCCESS ? 0 : (int)err;
}

/* One write timed by the device's clock, as a program timing its copy would: a
 * non-blocking clEnqueueWriteBuffer with an event on a profiling queue of the
 * baseline's own, clWaitForEvents, then CL_PROFILING_COMMAND_END minus
 * CL_PROFILING_COMMAND_START of the event. */
static int cl_h2d_elapsed(raw_baseline *raw, ferry_buffer dst, const void *src, size_t bytes, double *out_seconds) {
  const raw_cl_driver *api = raw->api;
  if (!api->clWaitForEvents || !api->clReleaseEvent || !api->clGetEventProfilingInfo) return CL_INVALID_OPERATION;
  if (!raw->timed && !raw->timed_error)
    raw->timed = raw_cl_queue_create(api, raw->context, raw->device, true, &raw->timed_error);
  if (!raw->timed) return (int)raw->timed_error;
  cl_event ev = NULL;
  cl_ulong start = 0, end = 0;
  cl_int err =
      api->clEnqueueWriteBuffer(raw->timed, (cl_mem)ferry_device_ptr(dst), CL_FALSE, 0, bytes, src, 0, NULL, &ev);
  if (err == CL_SUCCESS) err = api->clWaitForEvents(1, &ev);
  if (err == CL_SUCCESS) err = api->clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof start, &start, NULL);
  if (err == CL_SUCCESS) err = api->clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL);
  if (ev) api->clReleaseEvent(ev);
  if (err != CL_SUCCESS) {
    api->clFinish(raw->timed);
    return (int)err;
  }
  *out_seconds = end > start ? (double)(end - start) * 1e-9 : 0;
  return 0;
}

/* ---- the map way -------------------------------------------------------------- */

static bool cl_alt_available(raw_baseline *raw) { return raw->unified; }

static void *map(raw_baseline *raw, cl_mem mem, cl_map_flags flags, size_t bytes) {
  cl_int err = CL_SUCCESS;
  void *p = raw->api->clEnqueueMapBuffer(raw->queue, mem, CL_TRUE, flags, 0, bytes, 0, NULL, NULL, &err);
  return err == CL_SUCCESS ? p : NULL;
}

static int unmap(raw_baseline *raw, cl_mem mem, void *p) {
  return raw->api->clEnqueueUnmapMemObject(raw->queue, mem, p, 0, NULL, NULL) == CL_SUCCESS ? 0 : -1;
}

static int cl_h2d_map(raw_baseline *raw, ferry_buffer dst, const void *src, size_t bytes) {
  cl_mem mem = (cl_mem)ferry_device_ptr(dst);
  void *p = map(raw, mem, CL_MAP_WRITE_INVALIDATE_REGION, bytes);
  if (!p) return -1;
  memcpy(p, src, bytes);
  if (unmap(raw, mem, p)) return -1;
  return raw->api->clFinish(raw->queue) == CL_SUCCESS ? 0 : -1;
}

static int cl_d2h_map(raw_baseline *raw, ferry_buffer src, void *dst, size_t bytes) {
  cl_mem mem = (cl_mem)ferry_device_ptr(src);
  void *p = map(raw, mem, CL_MAP_READ, bytes);
  if (!p) return -1;
  memcpy(dst, p, bytes);
  if (unmap(raw, mem, p)) return -1;
  return raw->api->clFinish(raw->queue) == CL_SUCCESS ? 0 : -1;
}

static int cl_d2d_map(raw_baseline *raw, ferry_buffer src, ferry_buffer dst, size_t bytes) {
  cl_mem s = (cl_mem)ferry_device_ptr(src), d = (cl_mem)ferry_device_ptr(dst);
  void *ps = map(raw, s, CL_MAP_READ, bytes);
  if (!ps) return -1;
  void *pd = map(raw, d, CL_MAP_WRITE_INVALIDATE_REGION, bytes);
  if (pd) memcpy(pd, ps, bytes);
  int rc = pd ? unmap(raw, d, pd) : -1;
  if (unmap(raw, s, ps)) rc = -1;
  if (raw->api->clFinish(raw->queue) != CL_SUCCESS) rc = -1;
  return rc;
}

static const raw_ops opencl_raw = {
    .backend = "opencl",
    .h2d_name = "clEnqueueWriteBuffer+clFinish",
    .d2h_name = "clEnqueueReadBuffer",
    .d2d_name = "clEnqueueCopyBuffer+clFinish",
    .open = cl_open,
    .close = cl_close,
    .h2d = cl_h2d,
    .d2h = cl_d2h,
    .d2d = cl_d2d,
    .host_alloc = cl_host_alloc_raw,
    .host_free = cl_host_free_raw,
    .alloc_free = cl_alloc_free,
    .alloc_name = "clCreateBuffer+clReleaseMemObject",
    .tag = "enqueue",
    .alt_available = cl_alt_available,
    .alt_tag = "map",
    .h2d_alt_name = "clEnqueueMapBuffer+memcpy+clEnqueueUnmapMemObject+clFinish",
    .d2h_alt_name = "clEnqueueMapBuffer+memcpy+clEnqueueUnmapMemObject+clFinish",
    .d2d_alt_name = "clEnqueueMapBuffer (both)+memcpy+clEnqueueUnmapMemObject (both)+clFinish",
    .h2d_alt = cl_h2d_map,
    .d2h_alt = cl_d2h_map,
    .d2d_alt = cl_d2d_map,
    .h2d_async_name = "clEnqueueWriteBuffer (non-blocking)",
    .h2d_async = cl_h2d_async,
    .finish_name = "clFinish",
    .finish = cl_finish,
    .both_name = "clEnqueueWriteBuffer + clEnqueueReadBuffer (non-blocking, flushed) on two queues + clFinish (both)",
    .both = cl_both,
    .h2d_elapsed_name = "clEnqueueWriteBuffer (non-blocking, with an event, on a profiling queue) + clWaitForEvents, "
                        "timed by CL_PROFILING_COMMAND_END - START",
    .h2d_elapsed = cl_h2d_elapsed,
};

const raw_ops *raw_opencl_ops(void) { return &opencl_raw; }
