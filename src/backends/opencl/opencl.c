/*
 * opencl: every device of every OpenCL platform, through the ICD loader
 * (libOpenCL.so.1) loaded at run time.
 *
 * Each device gets its own context and one in-order command queue; every ferry
 * operation is a command on that queue that ferry waits for (its event), so it
 * is complete when it returns, for every queue. OpenCL 1.1+ makes these calls
 * thread-safe; the state ferry adds (host-pointer buffers, pinned blocks) is
 * guarded by mutexes.
 *
 * Buffers: clCreateBuffer, then a 1-byte write, because drivers (NVIDIA's among
 * them) reserve the memory only on first use and would report an out-of-memory
 * at the first transfer instead of at ferry_alloc. On CPU devices ferry allocates
 * the memory itself and hands it over with CL_MEM_USE_HOST_PTR (PoCL aborts the
 * process when its own deferred allocation fails; see cl_alloc_owned).
 *
 * Host-pointer buffers: CL_MEM_USE_HOST_PTR over the user's array. The array is
 * either the host's (mapped) or the device's (unmapped). ferry_host_to_device
 * from the array unmaps, ferry_device_to_host to it maps (blocking): they move
 * nothing themselves (PoCL's mapped pointer is the array, no copy at all; a GPU
 * driver copies between the array and its device copy as the spec lets it).
 * Every other operation is correct in either state: while mapped, the array is
 * the buffer's content and ferry reads and writes it directly; while unmapped,
 * the driver's commands move the bytes (clEnqueueCopyBuffer never sees a mapped
 * buffer, which the spec leaves undefined).
 *
 * Pinned memory for the core's engine (ferry_host_alloc, staging rings): a
 * mapped CL_MEM_ALLOC_HOST_PTR buffer (pin_alloc), or a CL_MEM_USE_HOST_PTR
 * buffer over a block another allocator made (pin_register). DMA is a
 * non-blocking clEnqueueWriteBuffer / ReadBuffer from the pinned range, its
 * event the ticket. Devices with memory of their own (GPUs) stage
 * (FERRY_CAP_STAGE): large transfers from ordinary memory then run at pinned
 * speed; on CPU devices staging would only add a copy.
 *
 * Copies between devices of this backend go through host memory (the core
 * stages them): each device has a context of its own.
 *
 * Docs: docs/backends/opencl.md.
 */
/* sigaltstack (XSI), beside the POSIX.1-2008 interfaces the build asks for. */
#define _XOPEN_SOURCE 700

#include "../../core/backend.h"
#include "opencl_api.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- backend-wide state -------------------------------------------------- */

static struct {
  ferry_cl_api api;
  void *handle;
  _Atomic bool loaded;
} cl;

#define API (&cl.api)

const ferry_cl_api *ferry__opencl_api(void) {
  if (ferry_init() != FERRY_OK) return NULL;
  return atomic_load(&cl.loaded) ? &cl.api : NULL;
}

/* ---- per-device and per-buffer state ------------------------------------- */

/* A pinned block: a buffer over the host memory (the token). */
typedef struct pinned_block {
  cl_mem mem;
  void *mapped; /* pin_alloc: what clEnqueueMapBuffer returned; NULL for pin_register */
} pinned_block;

typedef struct cl_device {
  cl_platform_id platform;
  cl_device_id id;
  cl_context context;
  cl_command_queue queue;
  bool is_cpu;
  bool amd_free_memory; /* cl_amd_device_attribute_query: free memory can be asked */
  size_t base_align;    /* CL_DEVICE_MEM_BASE_ADDR_ALIGN in bytes: what ferry's own memory for buffers is aligned to */
  bool stage;           /* the core stages pageable transfers through pinned memory */
  uint64_t total_memory, max_allocation;
  char name[256];
} cl_device;

/* A host-pointer buffer: the user's array and who holds it. */
typedef struct host_buf {
  pthread_mutex_t lock;
  char *host;
  size_t bytes;
  bool mapped; /* true: the host owns the array (mapped); false: the device does */
} host_buf;

static cl_device *device_of(const ferry_device *dev) { return dev->impl; }
static cl_mem mem_of(const ferry_mem *m) { return (cl_mem)m->handle; }
/* A host-pointer buffer's state; NULL for ferry's own buffers (whose impl, on
 * CPU devices, is the host memory ferry allocated for them). */
static host_buf *host_buf_of(const ferry_mem *m) { return (m->flags & FERRY_MEM_HOST_PTR) ? m->impl : NULL; }

/* ---- errors -------------------------------------------------------------- */

static bool is_out_of_memory(cl_int err, bool allocating) {
  return err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY ||
         (allocating && err == CL_OUT_OF_RESOURCES);
}

static uint64_t cl_free_memory(ferry_device *dev);

/* Sets the sentence "CL_X (-n) from clCall, <details> on <device label>" and
 * returns the status the code maps to: FERRY_ERROR_OUT_OF_MEMORY for the
 * allocation failures (CL_OUT_OF_RESOURCES too when `allocating`), else
 * FERRY_ERROR_BACKEND. */
static ferry_status cl_failed(ferry_device *dev, cl_int err, const char *call, bool allocating, const char *fmt, ...)
    FERRY_PRINTF(5, 6);

static ferry_status cl_failed(ferry_device *dev, cl_int err, const char *call, bool allocating, const char *fmt, ...) {
  char details[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(details, sizeof details, fmt, ap);
  va_end(ap);
  ferry_status st = is_out_of_memory(err, allocating) ? FERRY_ERROR_OUT_OF_MEMORY : FERRY_ERROR_BACKEND;
  char memory[192] = "";
  if (st == FERRY_ERROR_OUT_OF_MEMORY) {
    char a[64], b[64];
    uint64_t free_bytes = cl_free_memory(dev);
    if (free_bytes)
      snprintf(memory, sizeof memory, " (%s free of %s)", ferry__bytes_text(free_bytes, a),
               ferry__bytes_text(device_of(dev)->total_memory, b));
    else
      snprintf(memory, sizeof memory, " (the device has %s in all; OpenCL does not say how much is free)",
               ferry__bytes_text(device_of(dev)->total_memory, a));
  }
  return ferry__fail(st, "%s (%d) from %s, %s on %s%s", ferry__opencl_error_name(err), (int)err, call, details,
                     dev->label, memory);
}

/* Waits for an event and releases it; the command's failure, if any. */
static cl_int wait_event(cl_event ev) {
  cl_int err = API->clWaitForEvents(1, &ev);
  if (err != CL_SUCCESS) {
    cl_int status = 0;
    if (API->clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL) == CL_SUCCESS &&
        status < 0)
      err = status; /* the command's own error code says more */
  }
  API->clReleaseEvent(ev);
  return err;
}

/* ---- host memory helpers ------------------------------------------------- */

static bool ranges_overlap(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + bn && y < x + an;
}

/* ---- commands ------------------------------------------------------------ */

/* A blocking write returns once the source was copied out, which on NVIDIA's
 * driver is before the bytes are on the device: ferry waits for the command
 * itself, so that a write is complete for every queue when it returns. */
static ferry_status enqueue_write(ferry_device *dev, cl_mem mem, size_t off, const void *src, size_t n) {
  cl_event ev = NULL;
  cl_int err = API->clEnqueueWriteBuffer(device_of(dev)->queue, mem, CL_TRUE, off, n, src, 0, NULL, &ev);
  if (err == CL_SUCCESS) err = wait_event(ev);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clEnqueueWriteBuffer", false, "%zu bytes at offset %zu from host memory at %p", n, off,
                     src);
  return FERRY_OK;
}

static ferry_status enqueue_read(ferry_device *dev, cl_mem mem, size_t off, void *dst, size_t n) {
  cl_int err = API->clEnqueueReadBuffer(device_of(dev)->queue, mem, CL_TRUE, off, n, dst, 0, NULL, NULL);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clEnqueueReadBuffer", false, "%zu bytes at offset %zu to host memory at %p", n, off,
                     dst);
  return FERRY_OK;
}

static ferry_status enqueue_copy(ferry_device *dev, cl_mem src, size_t so, cl_mem dst, size_t doff, size_t n) {
  cl_event ev = NULL;
  cl_int err = API->clEnqueueCopyBuffer(device_of(dev)->queue, src, dst, so, doff, n, 0, NULL, &ev);
  if (err == CL_SUCCESS) err = wait_event(ev);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clEnqueueCopyBuffer", false, "%zu bytes from offset %zu to offset %zu", n, so, doff);
  return FERRY_OK;
}

/* Maps the whole host-pointer buffer for the host (blocking); the driver must
 * hand back the array itself. */
static ferry_status map_array(ferry_device *dev, cl_mem mem, host_buf *hb) {
  cl_int err = CL_SUCCESS;
  void *p = API->clEnqueueMapBuffer(device_of(dev)->queue, mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, hb->bytes, 0,
                                    NULL, NULL, &err);
  if (err != CL_SUCCESS || !p)
    return cl_failed(dev, err != CL_SUCCESS ? err : CL_MAP_FAILURE, "clEnqueueMapBuffer", false,
                     "mapping the %zu-byte array at %p for the host", hb->bytes, (void *)hb->host);
  if (p != hb->host) {
    cl_event ev = NULL;
    if (API->clEnqueueUnmapMemObject(device_of(dev)->queue, mem, p, 0, NULL, &ev) == CL_SUCCESS) wait_event(ev);
    return ferry__fail(FERRY_ERROR_BACKEND,
                       "clEnqueueMapBuffer mapped the CL_MEM_USE_HOST_PTR buffer over the array at %p at %p instead, "
                       "on %s: the driver does not use the array",
                       (void *)hb->host, p, dev->label);
  }
  hb->mapped = true;
  return FERRY_OK;
}

/* Unmaps the array: the device owns it again once the unmap completed. */
static ferry_status unmap_array(ferry_device *dev, cl_mem mem, host_buf *hb) {
  cl_event ev = NULL;
  cl_int err = API->clEnqueueUnmapMemObject(device_of(dev)->queue, mem, hb->host, 0, NULL, &ev);
  if (err == CL_SUCCESS) err = wait_event(ev);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clEnqueueUnmapMemObject", false, "handing the %zu-byte array at %p to the device",
                     hb->bytes, (void *)hb->host);
  hb->mapped = false;
  return FERRY_OK;
}

/* Locks the host-pointer state of one or two buffers, in address order. */
static void lock_pair(host_buf *a, host_buf *b) {
  if (a && b && a != b) {
    host_buf *first = (uintptr_t)a < (uintptr_t)b ? a : b, *second = first == a ? b : a;
    pthread_mutex_lock(&first->lock);
    pthread_mutex_lock(&second->lock);
  } else if (a || b) {
    pthread_mutex_lock(&(a ? a : b)->lock);
  }
}

static void unlock_pair(host_buf *a, host_buf *b) {
  if (a) pthread_mutex_unlock(&a->lock);
  if (b && b != a) pthread_mutex_unlock(&b->lock);
}

/* ---- operations ---------------------------------------------------------- */

/* The destructor callback of a buffer over ferry's own memory: the driver is done
 * with it (the user may have retained the cl_mem past ferry_free). */
static void free_owned(cl_mem mem, void *host) {
  (void)mem;
  free(host);
}

/* A buffer on a CPU device, over host memory ferry allocates itself. PoCL (and
 * CPU drivers like it) allocate a buffer's memory only at its first use, and
 * abort the process when that allocation fails (an assertion in PoCL 3.1 under an
 * address-space limit); with memory of ferry's own, running out is an ordinary
 * FERRY_ERROR_OUT_OF_MEMORY here, and the driver works on that memory directly
 * (CL_MEM_USE_HOST_PTR on an aligned pointer: the device's memory IS the host's on
 * a CPU device, so nothing is copied). */
static ferry_status cl_alloc_owned(ferry_device *dev, size_t bytes, ferry_mem *out) {
  cl_device *cd = device_of(dev);
  void *host = NULL;
  if (posix_memalign(&host, cd->base_align, bytes) != 0) {
    char text[64];
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY,
                       "posix_memalign could not give %s for a buffer on %s (a CPU device's buffers are host memory)",
                       ferry__bytes_text(bytes, text), dev->label);
  }
  cl_int err = CL_SUCCESS;
  cl_mem mem = API->clCreateBuffer(cd->context, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, host, &err);
  if (err == CL_SUCCESS && mem && API->clSetMemObjectDestructorCallback)
    err = API->clSetMemObjectDestructorCallback(mem, free_owned, host);
  if (err != CL_SUCCESS || !mem) {
    if (mem) API->clReleaseMemObject(mem);
    free(host);
    return cl_failed(dev, err != CL_SUCCESS ? err : CL_MEM_OBJECT_ALLOCATION_FAILURE,
                     "clCreateBuffer(CL_MEM_USE_HOST_PTR)", true, "%zu bytes", bytes);
  }
  /* Without destructor callbacks (an OpenCL 1.0 loader) cl_free frees it. */
  *out = (ferry_mem){
      .handle = (uintptr_t)mem, .impl = API->clSetMemObjectDestructorCallback ? NULL : host, .bytes = bytes};
  return FERRY_OK;
}

static ferry_status cl_alloc(ferry_device *dev, size_t bytes, ferry_mem *out) {
  cl_device *cd = device_of(dev);
  if (cd->is_cpu) return cl_alloc_owned(dev, bytes, out);
  cl_int err = CL_SUCCESS;
  cl_mem mem = API->clCreateBuffer(cd->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS || !mem) {
    if (mem) API->clReleaseMemObject(mem);
    return cl_failed(dev, err != CL_SUCCESS ? err : CL_MEM_OBJECT_ALLOCATION_FAILURE, "clCreateBuffer", true,
                     "%zu bytes", bytes);
  }
  /* Make the driver back the buffer now, so that out-of-memory shows here. */
  static const unsigned char zero = 0;
  cl_event ev = NULL;
  err = API->clEnqueueWriteBuffer(cd->queue, mem, CL_TRUE, 0, 1, &zero, 0, NULL, &ev);
  if (err == CL_SUCCESS) err = wait_event(ev);
  if (err != CL_SUCCESS) {
    API->clReleaseMemObject(mem);
    return cl_failed(dev, err, "clEnqueueWriteBuffer", true, "the first write to a new buffer of %zu bytes", bytes);
  }
  *out = (ferry_mem){.handle = (uintptr_t)mem, .bytes = bytes};
  return FERRY_OK;
}

static ferry_status cl_free(ferry_device *dev, ferry_mem *mem) {
  cl_int err = API->clReleaseMemObject(mem_of(mem));
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clReleaseMemObject", false, "releasing a %zu-byte buffer", mem->bytes);
  free(mem->impl); /* ferry's own memory under the buffer, where no destructor callback frees it */
  return FERRY_OK;
}

/* FERRY_ERROR_UNSUPPORTED (no message) for a source inside the buffer's own
 * unmapped array: the driver would copy between overlapping ranges (PoCL's
 * device memory for the buffer is the array itself), so the core bounces it. */
static ferry_status cl_write(ferry_device *dev, ferry_mem *dst, size_t off, const void *src, size_t n) {
  host_buf *hb = host_buf_of(dst);
  if (!hb) return enqueue_write(dev, mem_of(dst), off, src, n);
  ferry_status st = FERRY_OK;
  pthread_mutex_lock(&hb->lock);
  if (hb->mapped)
    ferry__host_move(hb->host + off, src, n); /* the array is the buffer's content */
  else if (ranges_overlap(src, n, hb->host, hb->bytes))
    st = FERRY_ERROR_UNSUPPORTED;
  else
    st = enqueue_write(dev, mem_of(dst), off, src, n);
  pthread_mutex_unlock(&hb->lock);
  return st;
}

static ferry_status cl_read(ferry_device *dev, const ferry_mem *src, size_t off, void *dst, size_t n) {
  host_buf *hb = host_buf_of(src);
  if (!hb) return enqueue_read(dev, mem_of(src), off, dst, n);
  ferry_status st = FERRY_OK;
  pthread_mutex_lock(&hb->lock);
  if (hb->mapped)
    ferry__host_move(dst, hb->host + off, n);
  else if (ranges_overlap(dst, n, hb->host, hb->bytes))
    st = FERRY_ERROR_UNSUPPORTED; /* into its own unmapped array: the core bounces it */
  else
    st = enqueue_read(dev, mem_of(src), off, dst, n);
  pthread_mutex_unlock(&hb->lock);
  return st;
}

static ferry_status cl_copy(ferry_device *dev, const ferry_mem *src, size_t so, ferry_mem *dst, size_t doff, size_t n) {
  host_buf *hs = host_buf_of(src), *hd = host_buf_of(dst);
  lock_pair(hs, hd);
  char *sh = hs && hs->mapped ? hs->host : NULL;
  char *dh = hd && hd->mapped ? hd->host : NULL;
  ferry_status st = FERRY_OK;
  if (sh && dh)
    ferry__host_move(dh + doff, sh + so, n);
  else if (sh) /* the source's bytes are in its array; the destination is the device's */
    st = enqueue_write(dev, mem_of(dst), doff, sh + so, n);
  else if (dh)
    st = enqueue_read(dev, mem_of(src), so, dh + doff, n);
  else
    st = enqueue_copy(dev, mem_of(src), so, mem_of(dst), doff, n);
  unlock_pair(hs, hd);
  return st;
}

static ferry_status cl_host_ptr_import(ferry_device *dev, void *host, size_t bytes, ferry_mem *out,
                                       ferry_refusal *out_refusal) {
  cl_device *cd = device_of(dev);
  *out_refusal = FERRY_REFUSAL_DRIVER;
  host_buf *hb = calloc(1, sizeof *hb);
  if (!hb) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for a host-pointer buffer on %s", dev->label);
  cl_int err = CL_SUCCESS;
  cl_mem mem = API->clCreateBuffer(cd->context, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, host, &err);
  if (err != CL_SUCCESS || !mem) {
    if (mem) API->clReleaseMemObject(mem);
    free(hb);
    return cl_failed(dev, err != CL_SUCCESS ? err : CL_MEM_OBJECT_ALLOCATION_FAILURE,
                     "clCreateBuffer(CL_MEM_USE_HOST_PTR)", true, "%zu bytes over the array at %p", bytes, host);
  }
  hb->host = host;
  hb->bytes = bytes;
  hb->mapped = false;
  /* The host owns the array from the start: map it. */
  ferry_status st = map_array(dev, mem, hb);
  if (st != FERRY_OK) {
    API->clReleaseMemObject(mem);
    free(hb);
    return st;
  }
  pthread_mutex_init(&hb->lock, NULL);
  *out = (ferry_mem){.handle = (uintptr_t)mem, .impl = hb, .bytes = bytes, .flags = FERRY_MEM_HOST_PTR};
  *out_refusal = FERRY_REFUSAL_NONE;
  return FERRY_OK;
}

static ferry_status cl_host_ptr_sync(ferry_device *dev, ferry_mem *mem, ferry_sync_dir dir) {
  host_buf *hb = mem->impl;
  ferry_status st = FERRY_OK;
  pthread_mutex_lock(&hb->lock);
  if (dir == FERRY_SYNC_TO_DEVICE && hb->mapped)
    st = unmap_array(dev, mem_of(mem), hb);
  else if (dir == FERRY_SYNC_TO_HOST && !hb->mapped)
    st = map_array(dev, mem_of(mem), hb);
  pthread_mutex_unlock(&hb->lock);
  return st;
}

static ferry_status cl_host_ptr_release(ferry_device *dev, ferry_mem *mem) {
  host_buf *hb = mem->impl;
  pthread_mutex_lock(&hb->lock);
  /* Bring the device's bytes back into the array (map), then unmap: a buffer is
   * released unmapped, and the array keeps the latest content. */
  ferry_status st = FERRY_OK;
  char saved[1024] = "";
  if (!hb->mapped && (st = map_array(dev, mem_of(mem), hb)) != FERRY_OK)
    snprintf(saved, sizeof saved, "%s", ferry__error_text());
  if (hb->mapped) {
    ferry_status unmapped = unmap_array(dev, mem_of(mem), hb);
    if (st == FERRY_OK && unmapped != FERRY_OK) {
      st = unmapped;
      snprintf(saved, sizeof saved, "%s", ferry__error_text());
    }
  }
  cl_int err = API->clReleaseMemObject(mem_of(mem));
  if (st == FERRY_OK && err != CL_SUCCESS) {
    st = cl_failed(dev, err, "clReleaseMemObject", false, "releasing the %zu-byte buffer over the array at %p",
                   hb->bytes, (void *)hb->host);
    snprintf(saved, sizeof saved, "%s", ferry__error_text());
  }
  pthread_mutex_unlock(&hb->lock);
  pthread_mutex_destroy(&hb->lock);
  free(hb);
  if (st != FERRY_OK) ferry__fail(st, "%s", saved);
  return st;
}

/* A cl_mem that ferry did not create (a DLPack import): a buffer object of this
 * device's own context (each ferry device has a context of its own, and a cl_mem
 * is usable only in its context), large enough for the tensor. */
static ferry_status cl_foreign_import(ferry_device *dev, uintptr_t data, uint64_t byte_offset, size_t bytes,
                                      ferry_mem *out, ferry_refusal *out_refusal) {
  cl_device *cd = device_of(dev);
  cl_mem mem = (cl_mem)data;
  *out_refusal = FERRY_REFUSAL_UNSUPPORTED;
  if (byte_offset != 0)
    return ferry__fail(FERRY_ERROR_REFUSED,
                       "byte_offset %llu into a cl_mem: ferry addresses OpenCL buffers from their start (%s)",
                       (unsigned long long)byte_offset, dev->label);
  cl_context context = NULL;
  cl_uint type = 0;
  size_t size = 0;
  cl_int err = API->clGetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof context, &context, NULL);
  if (err == CL_SUCCESS) err = API->clGetMemObjectInfo(mem, CL_MEM_TYPE, sizeof type, &type, NULL);
  if (err == CL_SUCCESS) err = API->clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, NULL);
  *out_refusal = FERRY_REFUSAL_DEVICE;
  if (err != CL_SUCCESS)
    return ferry__fail(FERRY_ERROR_REFUSED, "%s (%d) from clGetMemObjectInfo: %p is not a cl_mem %s can use",
                       ferry__opencl_error_name(err), (int)err, (void *)mem, dev->label);
  if (context != cd->context)
    return ferry__fail(FERRY_ERROR_REFUSED,
                       "the cl_mem %p belongs to another OpenCL context than %s's, and a cl_mem is usable only in its "
                       "own context (make it in the context ferry_device_native gives)",
                       (void *)mem, dev->label);
  if (type != CL_MEM_OBJECT_BUFFER)
    return ferry__fail(FERRY_ERROR_REFUSED, "the cl_mem %p is an image (type 0x%x), not a buffer", (void *)mem,
                       (unsigned)type);
  if (size < bytes)
    return ferry__fail(FERRY_ERROR_REFUSED, "the tensor has %zu bytes, its cl_mem %p only %zu", bytes, (void *)mem,
                       size);
  *out_refusal = FERRY_REFUSAL_NONE;
  *out = (ferry_mem){.handle = data, .bytes = bytes};
  return FERRY_OK;
}

/* ---- pinned memory and DMA for the core's engine ---------------------------- */

/* A mapped CL_MEM_ALLOC_HOST_PTR buffer: NVIDIA's OpenCL pins it, and transfers
 * from it run at full speed. */
static ferry_status cl_pin_alloc(ferry_device *dev, size_t bytes, void **out, uintptr_t *token) {
  cl_device *cd = device_of(dev);
  pinned_block *block = malloc(sizeof *block);
  if (!block) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory to track a pinned block on %s", dev->label);
  cl_int err = CL_SUCCESS;
  cl_mem mem = API->clCreateBuffer(cd->context, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &err);
  void *mapped = NULL;
  const char *call = "clCreateBuffer(CL_MEM_ALLOC_HOST_PTR)";
  if (mem && err == CL_SUCCESS) {
    call = "clEnqueueMapBuffer";
    mapped =
        API->clEnqueueMapBuffer(cd->queue, mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, NULL, NULL, &err);
  }
  if (!mapped || err != CL_SUCCESS) {
    if (mem) API->clReleaseMemObject(mem);
    free(block);
    return cl_failed(dev, err != CL_SUCCESS ? err : CL_MEM_OBJECT_ALLOCATION_FAILURE, call, true,
                     "%zu bytes of pinned host memory", bytes);
  }
  *block = (pinned_block){.mem = mem, .mapped = mapped};
  *out = mapped;
  *token = (uintptr_t)block;
  return FERRY_OK;
}

/* A CL_MEM_USE_HOST_PTR buffer over the block, which the driver may pin. */
static ferry_status cl_pin_register(ferry_device *dev, void *base, size_t bytes, uintptr_t *token) {
  cl_device *cd = device_of(dev);
  pinned_block *block = malloc(sizeof *block);
  if (!block) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory to track a pinned block on %s", dev->label);
  cl_int err = CL_SUCCESS;
  cl_mem mem = API->clCreateBuffer(cd->context, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, base, &err);
  if (!mem || err != CL_SUCCESS) {
    if (mem) API->clReleaseMemObject(mem);
    free(block);
    return cl_failed(dev, err != CL_SUCCESS ? err : CL_MEM_OBJECT_ALLOCATION_FAILURE,
                     "clCreateBuffer(CL_MEM_USE_HOST_PTR)", true, "%zu bytes over host memory at %p", bytes, base);
  }
  *block = (pinned_block){.mem = mem, .mapped = NULL};
  *token = (uintptr_t)block;
  return FERRY_OK;
}

static void cl_pin_release(ferry_device *dev, void *base, size_t bytes, uintptr_t token, bool allocated) {
  (void)base;
  (void)bytes;
  (void)allocated;
  pinned_block *block = (pinned_block *)token;
  if (!block) return;
  if (block->mapped) {
    cl_event ev = NULL;
    if (API->clEnqueueUnmapMemObject(device_of(dev)->queue, block->mem, block->mapped, 0, NULL, &ev) == CL_SUCCESS)
      wait_event(ev);
  }
  API->clReleaseMemObject(block->mem);
  free(block);
}

/* A non-blocking write or read from the pinned range; its event is the ticket
 * (0: done already, for host-pointer buffers, whose state decides the path). */
static ferry_status cl_dma_start(ferry_device *dev, ferry_dma_dir dir, ferry_mem *mem, size_t off,
                                 const ferry_pinned *host, size_t n, ferry_ticket *out) {
  if (host_buf_of(mem)) {
    *out = 0;
    ferry_status st =
        dir == FERRY_DMA_TO_DEVICE ? cl_write(dev, mem, off, host->host, n) : cl_read(dev, mem, off, host->host, n);
    if (st == FERRY_ERROR_UNSUPPORTED)
      st = ferry__fail(FERRY_ERROR_BACKEND, "pinned memory at %p lies in the array of the host-pointer buffer on %s",
                       host->host, dev->label);
    return st;
  }
  cl_device *cd = device_of(dev);
  cl_event ev = NULL;
  bool write = dir == FERRY_DMA_TO_DEVICE;
  cl_int err = write ? API->clEnqueueWriteBuffer(cd->queue, mem_of(mem), CL_FALSE, off, n, host->host, 0, NULL, &ev)
                     : API->clEnqueueReadBuffer(cd->queue, mem_of(mem), CL_FALSE, off, n, host->host, 0, NULL, &ev);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, write ? "clEnqueueWriteBuffer" : "clEnqueueReadBuffer", false,
                     "%zu bytes at offset %zu %s pinned host memory at %p, not blocking", n, off, write ? "from" : "to",
                     host->host);
  API->clFlush(cd->queue); /* start it now, not at the next blocking call */
  *out = (ferry_ticket)(uintptr_t)ev;
  return FERRY_OK;
}

static ferry_status cl_dma_wait(ferry_device *dev, ferry_ticket ticket) {
  if (!ticket) return FERRY_OK;
  cl_int err = wait_event((cl_event)(uintptr_t)ticket);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clWaitForEvents", false, "for a copy between pinned host memory and the device");
  return FERRY_OK;
}

static ferry_status cl_synchronize(ferry_device *dev) {
  cl_int err = API->clFinish(device_of(dev)->queue);
  if (err != CL_SUCCESS) return cl_failed(dev, err, "clFinish", false, "waiting for the queue");
  return FERRY_OK;
}

static ferry_status cl_native(const ferry_device *dev, ferry_native *out) {
  const cl_device *cd = dev->impl;
  *out = (ferry_native){
      .device = (uintptr_t)cd->id, .context = (uintptr_t)cd->context, .queue = (uintptr_t)cd->queue, .queue_family = 0};
  return FERRY_OK;
}

static uint64_t cl_free_memory(ferry_device *dev) {
  cl_device *cd = device_of(dev);
  if (!cd->amd_free_memory) return 0;
  size_t kib[2] = {0, 0};
  size_t got = 0;
  if (API->clGetDeviceInfo(cd->id, CL_DEVICE_GLOBAL_FREE_MEMORY_AMD, sizeof kib, kib, &got) != CL_SUCCESS ||
      got < sizeof kib[0])
    return 0;
  return (uint64_t)kib[0] * 1024;
}

static void platform_string(cl_platform_id p, cl_platform_info what, char *buf, size_t size);
static char *device_string(cl_device_id d, cl_device_info what);
static bool has_extension(const char *list, const char *name);

static ferry_status cl_driver_info(ferry_device *dev, ferry_driver_info *out) {
  cl_device *cd = device_of(dev);
  platform_string(cd->platform, CL_PLATFORM_NAME, out->driver, sizeof out->driver);
  platform_string(cd->platform, CL_PLATFORM_VERSION, out->api_version, sizeof out->api_version);
  char *version = device_string(cd->id, CL_DRIVER_VERSION);
  if (version) snprintf(out->driver_version, sizeof out->driver_version, "%s", version);
  free(version);
  char *extensions = device_string(cd->id, CL_DEVICE_EXTENSIONS);
  cl_device_pci_bus_info_khr pci;
  if (has_extension(extensions, "cl_khr_pci_bus_info") &&
      API->clGetDeviceInfo(cd->id, CL_DEVICE_PCI_BUS_INFO_KHR, sizeof pci, &pci, NULL) == CL_SUCCESS)
    ferry__pci_text(pci.pci_domain, pci.pci_bus, pci.pci_device, pci.pci_function, out->pci_bus_id);
  unsigned char uuid[CL_UUID_SIZE_KHR];
  if (has_extension(extensions, "cl_khr_device_uuid") &&
      API->clGetDeviceInfo(cd->id, CL_DEVICE_UUID_KHR, sizeof uuid, uuid, NULL) == CL_SUCCESS)
    ferry__uuid_text(uuid, out->uuid);
  free(extensions);
  return FERRY_OK;
}

static void cl_destroy(ferry_device *dev) {
  cl_device *cd = device_of(dev);
  API->clFinish(cd->queue);
  API->clReleaseCommandQueue(cd->queue);
  API->clReleaseContext(cd->context);
  free(cd);
}

static const ferry_device_ops cl_ops = {
    .alloc = cl_alloc,
    .free = cl_free,
    .write = cl_write,
    .read = cl_read,
    .copy = cl_copy,
    .pin_alloc = cl_pin_alloc,
    .pin_register = cl_pin_register,
    .pin_release = cl_pin_release,
    .dma_start = cl_dma_start,
    .dma_wait = cl_dma_wait,
    .host_ptr_import = cl_host_ptr_import,
    .host_ptr_sync = cl_host_ptr_sync,
    .host_ptr_release = cl_host_ptr_release,
    .synchronize = cl_synchronize,
    .native = cl_native,
    .free_memory = cl_free_memory,
    .driver_info = cl_driver_info,
    .foreign_import = cl_foreign_import,
    .destroy = cl_destroy,
};

/* FERRY_OPENCL_PIPELINE=1 stages on every device, CPUs included, =0 on none;
 * unset: on the devices that are not CPUs. */
static bool wants_staging(bool is_cpu) {
  uint64_t set;
  if (ferry__option_number("FERRY_OPENCL_PIPELINE", &set)) return set == 1;
  return !is_cpu;
}

/* ---- probing -------------------------------------------------------------- */

/* A string property into buf (truncated to fit), without trailing blanks; "" on failure. */
static void platform_string(cl_platform_id p, cl_platform_info what, char *buf, size_t size) {
  size_t need = 0;
  buf[0] = '\0';
  if (API->clGetPlatformInfo(p, what, 0, NULL, &need) != CL_SUCCESS || need == 0) return;
  char *tmp = calloc(1, need + 1);
  if (tmp && API->clGetPlatformInfo(p, what, need, tmp, NULL) == CL_SUCCESS) snprintf(buf, size, "%s", tmp);
  free(tmp);
  for (size_t n = strlen(buf); n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\n'); n--)
    buf[n - 1] = '\0';
}

/* A device string property, whole; NULL on failure. Free it. */
static char *device_string(cl_device_id d, cl_device_info what) {
  size_t need = 0;
  if (API->clGetDeviceInfo(d, what, 0, NULL, &need) != CL_SUCCESS || need == 0) return NULL;
  char *tmp = calloc(1, need + 1);
  if (tmp && API->clGetDeviceInfo(d, what, need, tmp, NULL) != CL_SUCCESS) {
    free(tmp);
    return NULL;
  }
  if (tmp)
    for (size_t n = strlen(tmp); n > 0 && (tmp[n - 1] == ' ' || tmp[n - 1] == '\n'); n--)
      tmp[n - 1] = '\0';
  return tmp;
}

static bool has_extension(const char *list, const char *name) {
  size_t len = strlen(name);
  for (const char *p = list; p && (p = strstr(p, name)) != NULL; p += len)
    if ((p == list || p[-1] == ' ') && (p[len] == '\0' || p[len] == ' ')) return true;
  return false;
}

/* Sets up one device (context, queue, info) and adds it. FERRY_ERROR_UNSUPPORTED
 * (with a sentence) for a device that cannot be used; other statuses come from
 * the core and end the probe. */
static ferry_status add_device(ferry_probe *probe, cl_platform_id platform, const char *platform_name,
                               cl_device_id id) {
  cl_bool available = CL_TRUE;
  if (API->clGetDeviceInfo(id, CL_DEVICE_AVAILABLE, sizeof available, &available, NULL) == CL_SUCCESS && !available)
    return ferry__fail(FERRY_ERROR_UNSUPPORTED, "an OpenCL device of %s is not available", platform_name);
  cl_device_type type = 0;
  cl_ulong global = 0, max_alloc = 0;
  cl_uint align_bits = 0;
  cl_int err;
  if ((err = API->clGetDeviceInfo(id, CL_DEVICE_TYPE, sizeof type, &type, NULL)) != CL_SUCCESS ||
      (err = API->clGetDeviceInfo(id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL)) != CL_SUCCESS ||
      (err = API->clGetDeviceInfo(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL)) !=
          CL_SUCCESS ||
      (err = API->clGetDeviceInfo(id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, NULL)) !=
          CL_SUCCESS)
    return ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s (%d) from clGetDeviceInfo on a device of %s",
                       ferry__opencl_error_name(err), (int)err, platform_name);

  cl_device *cd = calloc(1, sizeof *cd);
  if (!cd) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for an OpenCL device");
  cd->platform = platform;
  cd->id = id;
  cd->is_cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
  cd->stage = wants_staging(cd->is_cpu);
  cd->total_memory = global;
  cd->max_allocation = max_alloc;
  char *name = device_string(id, CL_DEVICE_NAME);
  snprintf(cd->name, sizeof cd->name, "%s (%s)", name && *name ? name : "unnamed OpenCL device", platform_name);
  free(name);
  char *extensions = device_string(id, CL_DEVICE_EXTENSIONS);
  cd->amd_free_memory = has_extension(extensions, "cl_amd_device_attribute_query");
  free(extensions);

  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0};
  err = CL_SUCCESS;
  cd->context = API->clCreateContext(props, 1, &id, NULL, NULL, &err);
  if (err != CL_SUCCESS || !cd->context) {
    ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s (%d) from clCreateContext for %s", ferry__opencl_error_name(err), (int)err,
                cd->name);
    free(cd);
    return FERRY_ERROR_UNSUPPORTED;
  }
  cd->queue = API->clCreateCommandQueue(cd->context, id, 0, &err);
  if (err != CL_SUCCESS || !cd->queue) {
    ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s (%d) from clCreateCommandQueue for %s", ferry__opencl_error_name(err),
                (int)err, cd->name);
    API->clReleaseContext(cd->context);
    free(cd);
    return FERRY_ERROR_UNSUPPORTED;
  }
  size_t align = align_bits >= 8 ? align_bits / 8 : 1;
  if (align & (align - 1)) { /* not a power of two: the next one up */
    size_t p = 1;
    while (p < align)
      p <<= 1;
    align = p;
  }
  cd->base_align = align < 64 ? 64 : align;
  ferry_device_desc desc = {
      .ops = &cl_ops,
      .impl = cd,
      .name = cd->name,
      .total_memory = global,
      .max_allocation = max_alloc,
      .is_cpu = cd->is_cpu,
      .zero_copy = false, /* an OpenCL buffer's memory is the runtime's, never the array */
      .host_ptr = true,
      .host_ptr_alignment = align,
      /* no FERRY_CAP_OVERLAP_COPY: clEnqueueCopyBuffer refuses overlapping ranges */
      .caps = FERRY_CAP_CACHE | (cd->stage ? FERRY_CAP_STAGE : 0u),
  };
  ferry_status st = ferry__device_add(probe, &desc);
  if (st != FERRY_OK) {
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", ferry__error_text());
    API->clReleaseCommandQueue(cd->queue);
    API->clReleaseContext(cd->context);
    free(cd);
    ferry__fail(st, "%s", saved);
    if (st == FERRY_ERROR_UNSUPPORTED) st = FERRY_ERROR_BACKEND; /* not the device's fault: end the probe */
  }
  return st;
}

static void opencl_unload(void) {
  atomic_store(&cl.loaded, false);
  ferry__opencl_unload(cl.handle);
  cl.handle = NULL;
  memset(&cl.api, 0, sizeof cl.api);
}

static ferry_status probe_platforms(ferry_probe *probe);

/* Drivers may change the calling thread's alternate signal stack while they
 * start: PoCL starts LLVM, which installs a malloc'd one (a sanitizer then
 * fails at that thread's exit, unmapping what it takes for its own). The probe
 * leaves the thread as it found it. */
static ferry_status opencl_probe(ferry_probe *probe) {
  stack_t before;
  bool saved = sigaltstack(NULL, &before) == 0;
  ferry_status st = probe_platforms(probe);
  stack_t after;
  if (saved && sigaltstack(NULL, &after) == 0 &&
      (after.ss_sp != before.ss_sp || after.ss_size != before.ss_size ||
       (after.ss_flags & SS_DISABLE) != (before.ss_flags & SS_DISABLE))) {
    before.ss_flags &= SS_DISABLE;
    sigaltstack(&before, NULL);
  }
  return st;
}

static ferry_status probe_platforms(ferry_probe *probe) {
  char why[512];
  if (ferry__opencl_load(&cl.api, &cl.handle, why, sizeof why) != 0)
    return ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s", why);
  atomic_store(&cl.loaded, true);
  cl_uint count = 0;
  cl_int err = API->clGetPlatformIDs(0, NULL, &count);
  if (err == CL_PLATFORM_NOT_FOUND_KHR || (err == CL_SUCCESS && count == 0)) {
    const char *vendors = getenv("OCL_ICD_VENDORS");
    return ferry__fail(FERRY_ERROR_UNSUPPORTED,
                       "the OpenCL ICD loader found no platform: no ICD file in %s%s names a driver that loads",
                       vendors && *vendors ? vendors : "/etc/OpenCL/vendors",
                       vendors && *vendors ? " (OCL_ICD_VENDORS)" : "");
  }
  if (err != CL_SUCCESS)
    return ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s (%d) from clGetPlatformIDs", ferry__opencl_error_name(err),
                       (int)err);
  cl_platform_id *platforms = calloc(count, sizeof *platforms);
  if (!platforms) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for %u OpenCL platforms", count);
  err = API->clGetPlatformIDs(count, platforms, NULL);
  if (err != CL_SUCCESS) {
    free(platforms);
    return ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s (%d) from clGetPlatformIDs", ferry__opencl_error_name(err),
                       (int)err);
  }
  size_t added = 0;
  char last_problem[1024] = "";
  ferry_status st = FERRY_OK;
  for (cl_uint p = 0; p < count && st == FERRY_OK; p++) {
    char pname[200];
    platform_string(platforms[p], CL_PLATFORM_NAME, pname, sizeof pname);
    if (!pname[0]) snprintf(pname, sizeof pname, "OpenCL platform %u", p);
    cl_uint ndev = 0;
    err = API->clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, NULL, &ndev);
    if (err != CL_SUCCESS || ndev == 0) {
      snprintf(last_problem, sizeof last_problem, "%s has no devices (%s (%d) from clGetDeviceIDs)", pname,
               ferry__opencl_error_name(err), (int)err);
      continue;
    }
    cl_device_id *ids = calloc(ndev, sizeof *ids);
    if (!ids) {
      st = ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for %u OpenCL devices", ndev);
      break;
    }
    err = API->clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, ndev, ids, NULL);
    if (err != CL_SUCCESS) {
      snprintf(last_problem, sizeof last_problem, "%s (%d) from clGetDeviceIDs on %s", ferry__opencl_error_name(err),
               (int)err, pname);
      free(ids);
      continue;
    }
    for (cl_uint d = 0; d < ndev && st == FERRY_OK; d++) {
      ferry_status one = add_device(probe, platforms[p], pname, ids[d]);
      if (one == FERRY_OK)
        added++;
      else if (one == FERRY_ERROR_UNSUPPORTED) /* this device only: the others go on */
        snprintf(last_problem, sizeof last_problem, "%s", ferry__error_text());
      else
        st = one;
    }
    free(ids);
  }
  free(platforms);
  if (st != FERRY_OK) return st;
  if (added == 0)
    return ferry__fail(FERRY_ERROR_UNSUPPORTED, "no usable OpenCL device on %u platform(s): %s", count, last_problem);
  return FERRY_OK;
}

static const ferry_option_def opencl_options[] = {
    {.name = "FERRY_OPENCL_LIBRARY",
     .type = FERRY_OPTION_TEXT,
     .default_value = "libOpenCL.so.1",
     .range = "a library name or path for dlopen",
     .description = "the OpenCL ICD loader to load"},
    {.name = "FERRY_OPENCL_PIPELINE",
     .type = FERRY_OPTION_SWITCH,
     .range = "0 or 1",
     .description = "1: large transfers staged through pinned host memory on every device, 0: on none (default: "
                    "on devices that are not CPUs)"},
    {.name = NULL},
};

const ferry_backend ferry_backend_opencl = {
    .name = "opencl", .options = opencl_options, .probe = opencl_probe, .unload = opencl_unload};
