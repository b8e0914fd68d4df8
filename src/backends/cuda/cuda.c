/*
 * cuda: every CUDA GPU, through the driver API loaded at run time.
 *
 * libcuda.so.1 (or FERRY_CUDA_LIBRARY) is dlopen'd and the functions of
 * cuda_api.h are looked up by their versioned names; no CUDA toolkit is needed
 * to build, and a machine without the driver has no cuda devices. Each GPU is
 * used through its primary context (the one the CUDA runtime uses too), retained
 * at probe and released at shutdown; every operation makes it current on the
 * calling thread (a cuCtxGetCurrent, nothing more when it already is).
 *
 * Lanes are non-blocking streams of ferry's own (never ordered with the legacy
 * stream, so ferry never waits for work it did not submit); tickets are events
 * from a per-device pool, recorded after the work; gates are 32-bit words of
 * mapped pinned memory that cuStreamWaitValue32 makes a stream wait for and the
 * host raises with a plain store.
 *
 * Memory: cuMemAlloc. A cuMemcpyHtoDAsync from pageable memory may return once
 * the bytes are staged, before the DMA lands; ferry's synchronous writes are
 * complete on return, through a synchronisation of their stream (or,
 * FERRY_CUDA_H2D, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, or the core's bounce
 * through pinned memory).
 * Host-pointer buffers: cuMemHostRegister (PORTABLE | DEVICEMAP) over the
 * user's array, which stays plain coherent host memory (ferry_mem.host).
 * Pinned memory for the core's engine: cuMemHostAlloc(PORTABLE), or
 * cuMemHostRegister(PORTABLE) of a block another allocator made; DMA is
 * cuMemcpyHtoDAsync / cuMemcpyDtoHAsync on the lane's stream.
 * docs/backends/cuda.md has the whole mapping and the reasons.
 */
#include "cuda_api.h"

#include "../../core/backend.h"
#include "../../core/library.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CUDA_MAX_DEVICES 64
#define BOUNCE_BYTES     ((size_t)64 << 10) /* FERRY_CUDA_H2D=bounce: writes the core bounces */

/* How a synchronous write from pageable memory is made complete on return. */
typedef enum h2d_mode {
  H2D_STREAM, /* cuMemcpyHtoD, then cuStreamSynchronize of the legacy stream (default: the fastest) */
  H2D_MEMOPS, /* the allocation carries SYNC_MEMOPS: cuMemcpyHtoD itself waits */
  H2D_BOUNCE, /* small writes through the core's pinned memory, larger ones as H2D_STREAM */
} h2d_mode;

static const char *const h2d_mode_names[] = {"stream", "memops", "bounce"};

/* Tokens of pinned blocks (the core hands them back with each range). */
enum {
  PIN_DRIVER = 0,     /* memory the driver had pinned already: nothing to release */
  PIN_REGISTERED = 1, /* cuMemHostRegister'd by pin_register: unregister at release */
};

typedef struct cuda_device {
  int index;   /* among this backend's devices */
  int ordinal; /* CUDA's (cuDeviceGet), DLPack's device id */
  cu_device device;
  cu_context ctx; /* the primary context, retained */
  int cc_major, cc_minor;
  h2d_mode mode;
  bool peer_enabled; /* FERRY_CUDA_PEER != 0 */
  pthread_mutex_t events_lock;
  /* Idle events, for tickets: [0] without timing, [1] with (markers that
   * ferry_event_elapsed may measure). */
  cu_event *events[2];
  size_t event_count[2], event_capacity[2];
  /* Gates: pages of mapped pinned memory, 32-bit words handed out one per gate. */
  pthread_mutex_t gates_lock;
  struct cuda_gate_page *gate_pages;
  struct cuda_gate *free_gates;
  _Atomic int peer[CUDA_MAX_DEVICES]; /* 0 not yet asked, 1 peer copies, -1 staged */
  char name[300];
} cuda_device;

static struct {
  void *lib;
  ferry_cuda_api api;
  _Atomic bool loaded;
  char path[256];
  int driver_version;
  pthread_mutex_t peer_lock;
} g = {.peer_lock = PTHREAD_MUTEX_INITIALIZER};

#define API (g.api)

/* Marks an allocation that carries CU_POINTER_ATTRIBUTE_SYNC_MEMOPS (ferry_mem.impl). */
static char memops_tag;
#define MEMOPS_TAG ((void *)&memops_tag)

const ferry_cuda_api *ferry__cuda_api(void) { return atomic_load(&g.loaded) ? &g.api : NULL; }

/* ---- errors ------------------------------------------------------------------ */

static bool is_sticky(cu_result r) {
  switch (r) {
  case FCU_ERROR_ILLEGAL_ADDRESS:
  case FCU_ERROR_LAUNCH_TIMEOUT:
  case FCU_ERROR_ASSERT:
  case FCU_ERROR_HARDWARE_STACK_ERROR:
  case FCU_ERROR_ILLEGAL_INSTRUCTION:
  case FCU_ERROR_MISALIGNED_ADDRESS:
  case FCU_ERROR_INVALID_ADDRESS_SPACE:
  case FCU_ERROR_INVALID_PC:
  case FCU_ERROR_LAUNCH_FAILED:
  case FCU_ERROR_TENSOR_MEMORY_LEAK:
  case FCU_ERROR_ECC_UNCORRECTABLE:
  case FCU_ERROR_NVLINK_UNCORRECTABLE:
  case FCU_ERROR_CONTAINED: return true;
  default: return false;
  }
}

const char *ferry__cuda_error_text(cu_result r, char *buf, size_t size) {
  const char *name = NULL, *text = NULL;
  if (atomic_load(&g.loaded)) {
    if (API.cuGetErrorName(r, &name) != FCU_SUCCESS) name = NULL;
    if (API.cuGetErrorString(r, &text) != FCU_SUCCESS) text = NULL;
  }
  if (name)
    snprintf(buf, size, "%s (%d)%s%s", name, (int)r, text ? ": " : "", text ? text : "");
  else
    snprintf(buf, size, "CUresult %d (a code this driver has no name for)", (int)r);
  if (is_sticky(r)) {
    size_t used = strlen(buf);
    snprintf(buf + used, size - used,
             "; this error is sticky: a kernel on this GPU faulted earlier (an out-of-bounds access through "
             "ferry_device_ptr, say), and the device's CUDA context stays unusable until the process exits (run the "
             "program under compute-sanitizer to find the kernel)");
  } else if (r == FCU_ERROR_DEINITIALIZED) {
    size_t used = strlen(buf);
    snprintf(buf + used, size - used, "; the CUDA driver is shutting down (a ferry call during exit?)");
  }
  return buf;
}

static ferry_status status_of(cu_result r) {
  return r == FCU_ERROR_OUT_OF_MEMORY ? FERRY_ERROR_OUT_OF_MEMORY : FERRY_ERROR_BACKEND;
}

/* "<what> on <label> failed: <CUresult name (number): text>". */
static ferry_status cu_fail(const ferry_device *dev, cu_result r, const char *fmt, ...) FERRY_PRINTF(3, 4);
static ferry_status cu_fail(const ferry_device *dev, cu_result r, const char *fmt, ...) {
  char what[512], err[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return ferry__fail(status_of(r), "%s on %s failed: %s", what, dev->label, ferry__cuda_error_text(r, err, sizeof err));
}

/* ---- the current context ------------------------------------------------------ */

typedef struct ctx_scope {
  bool pushed;
} ctx_scope;

/* Makes the device's primary context current on this thread. A thread with no
 * context keeps it afterwards (the next call then costs one cuCtxGetCurrent); a
 * thread that had another context current gets it back in ctx_leave. */
static ferry_status ctx_enter(const ferry_device *dev, ctx_scope *scope) {
  const cuda_device *cd = dev->impl;
  cu_context current = NULL;
  scope->pushed = false;
  cu_result r = API.cuCtxGetCurrent(&current);
  if (r != FCU_SUCCESS) return cu_fail(dev, r, "cuCtxGetCurrent");
  if (current == cd->ctx) return FERRY_OK;
  if (current == NULL) {
    r = API.cuCtxSetCurrent(cd->ctx);
    if (r != FCU_SUCCESS) return cu_fail(dev, r, "cuCtxSetCurrent (making the primary context current)");
    return FERRY_OK;
  }
  r = API.cuCtxPushCurrent(cd->ctx);
  if (r != FCU_SUCCESS) return cu_fail(dev, r, "cuCtxPushCurrent_v2 (making the primary context current)");
  scope->pushed = true;
  return FERRY_OK;
}

static void ctx_leave(const ctx_scope *scope) {
  if (scope->pushed) {
    cu_context popped;
    (void)API.cuCtxPopCurrent(&popped);
  }
}

/* ---- host memory helpers -------------------------------------------------------- */

static size_t page_size(void) {
  long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? (size_t)page : 4096;
}

/* ---- device memory ---------------------------------------------------------------- */

static uint64_t cuda_free_memory(ferry_device *dev) {
  ctx_scope scope;
  if (ctx_enter(dev, &scope) != FERRY_OK) return 0;
  size_t free_bytes = 0, total = 0;
  if (API.cuMemGetInfo(&free_bytes, &total) != FCU_SUCCESS) free_bytes = 0;
  ctx_leave(&scope);
  return free_bytes;
}

static ferry_status cuda_alloc(ferry_device *dev, size_t bytes, ferry_mem *out) {
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  cu_deviceptr p = 0;
  cu_result r = API.cuMemAlloc(&p, bytes);
  if (r == FCU_ERROR_OUT_OF_MEMORY) {
    size_t free_bytes = 0, total = 0;
    char asked[64], free_text[64], total_text[64], err[768];
    if (API.cuMemGetInfo(&free_bytes, &total) == FCU_SUCCESS)
      st = ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "cuMemAlloc_v2 of %s on %s failed: %s; the device has %s free of %s",
                       ferry__bytes_text(bytes, asked), dev->label, ferry__cuda_error_text(r, err, sizeof err),
                       ferry__bytes_text(free_bytes, free_text), ferry__bytes_text(total, total_text));
    else
      st = ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "cuMemAlloc_v2 of %s on %s failed: %s (its free memory is unknown)",
                       ferry__bytes_text(bytes, asked), dev->label, ferry__cuda_error_text(r, err, sizeof err));
  } else if (r != FCU_SUCCESS) {
    char asked[64];
    st = cu_fail(dev, r, "cuMemAlloc_v2 of %s", ferry__bytes_text(bytes, asked));
  } else {
    /* FERRY_CUDA_H2D=memops: synchronous copies into this memory complete before
     * they return, also from pageable memory. Without the mark (other modes, or
     * a driver that refuses it), writes end with a stream synchronisation. */
    unsigned int one = 1;
    cuda_device *cd = dev->impl;
    bool memops =
        cd->mode == H2D_MEMOPS && API.cuPointerSetAttribute(&one, FCU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p) == FCU_SUCCESS;
    *out = (ferry_mem){.handle = (uintptr_t)p, .host = NULL, .impl = memops ? MEMOPS_TAG : NULL, .bytes = bytes};
  }
  ctx_leave(&scope);
  return st;
}

static ferry_status cuda_free(ferry_device *dev, ferry_mem *mem) {
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  cu_result r = API.cuMemFree((cu_deviceptr)mem->handle);
  if (r != FCU_SUCCESS) {
    char size[64];
    st = cu_fail(dev, r, "cuMemFree_v2 of 0x%llx (%s)", (unsigned long long)mem->handle,
                 ferry__bytes_text(mem->bytes, size));
  }
  ctx_leave(&scope);
  return st;
}

/* ---- lanes, tickets and gates ----------------------------------------------------------- */

/* A lane: a non-blocking stream of the device's primary context. */
typedef struct cuda_lane {
  cu_stream stream;
} cuda_lane;

static cu_stream stream_of(ferry_lane *lane) { return lane ? ((cuda_lane *)lane)->stream : NULL; }

/* Tickets are events; the low bit says which pool one goes back to (with timing). */
#define TICKET_TIMING 1u

static cu_event event_of(ferry_ticket t) { return (cu_event)(uintptr_t)(t & ~(ferry_ticket)TICKET_TIMING); }

/* An idle event for a ticket (made when none is idle); with the context current. */
static cu_result event_take(cuda_device *cd, bool timing, cu_event *out) {
  int pool = timing ? 1 : 0;
  pthread_mutex_lock(&cd->events_lock);
  bool have = cd->event_count[pool] > 0;
  if (have) *out = cd->events[pool][--cd->event_count[pool]];
  pthread_mutex_unlock(&cd->events_lock);
  return have ? FCU_SUCCESS : API.cuEventCreate(out, timing ? 0 : FCU_EVENT_DISABLE_TIMING);
}

static void event_give(cuda_device *cd, bool timing, cu_event ev) {
  int pool = timing ? 1 : 0;
  pthread_mutex_lock(&cd->events_lock);
  if (cd->event_count[pool] == cd->event_capacity[pool]) {
    size_t cap = cd->event_capacity[pool] ? cd->event_capacity[pool] * 2 : 16;
    cu_event *grown = realloc(cd->events[pool], cap * sizeof *grown);
    if (grown) {
      cd->events[pool] = grown;
      cd->event_capacity[pool] = cap;
    }
  }
  bool kept = cd->event_count[pool] < cd->event_capacity[pool];
  if (kept) cd->events[pool][cd->event_count[pool]++] = ev;
  pthread_mutex_unlock(&cd->events_lock);
  if (!kept) (void)API.cuEventDestroy(ev);
}

/* Records a ticket for the work pushed on `stream` so far (out NULL: none). */
static cu_result ticket_record(cuda_device *cd, cu_stream stream, bool timing, ferry_ticket *out) {
  if (!out) return FCU_SUCCESS;
  cu_event ev = NULL;
  cu_result r = event_take(cd, timing, &ev);
  if (r == FCU_SUCCESS && (r = API.cuEventRecord(ev, stream)) != FCU_SUCCESS) event_give(cd, timing, ev);
  if (r == FCU_SUCCESS) *out = (ferry_ticket)(uintptr_t)ev | (timing ? TICKET_TIMING : 0);
  return r;
}

static ferry_status cuda_lane_create(ferry_device *dev, ferry_lane **out) {
  cuda_lane *l = calloc(1, sizeof *l);
  if (!l) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for a stream of %s", dev->label);
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st == FERRY_OK) {
    cu_result r = API.cuStreamCreate(&l->stream, FCU_STREAM_NON_BLOCKING);
    if (r != FCU_SUCCESS) st = cu_fail(dev, r, "cuStreamCreate (NON_BLOCKING)");
    ctx_leave(&scope);
  }
  if (st != FERRY_OK) {
    free(l);
    return st;
  }
  *out = (ferry_lane *)l;
  return FERRY_OK;
}

static void cuda_lane_destroy(ferry_device *dev, ferry_lane *lane) {
  cuda_lane *l = (cuda_lane *)lane;
  ctx_scope scope;
  if (ctx_enter(dev, &scope) == FERRY_OK) {
    (void)API.cuStreamDestroy(l->stream);
    ctx_leave(&scope);
  }
  free(l);
}

static ferry_status cuda_lane_native(ferry_device *dev, ferry_lane *lane, ferry_native *out) {
  (void)dev;
  out->queue = (uintptr_t)stream_of(lane);
  out->queue_family = 0;
  return FERRY_OK;
}

static ferry_status cuda_marker(ferry_device *dev, ferry_lane *lane, bool timing, ferry_ticket *out) {
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  cu_result r = ticket_record(dev->impl, stream_of(lane), timing, out);
  if (r != FCU_SUCCESS) st = cu_fail(dev, r, "cuEventRecord (a marker of the stream's work)");
  ctx_leave(&scope);
  return st;
}

static ferry_status cuda_lane_wait(ferry_device *dev, ferry_lane *lane, ferry_device *ticket_dev, ferry_ticket ticket) {
  if (ticket_dev->backend != dev->backend) return FERRY_ERROR_UNSUPPORTED;
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  /* An event of another device's context is fine for cuStreamWaitEvent. */
  cu_result r = API.cuStreamWaitEvent(stream_of(lane), event_of(ticket), 0);
  if (r != FCU_SUCCESS) st = cu_fail(dev, r, "cuStreamWaitEvent (waiting for an event of %s)", ticket_dev->label);
  ctx_leave(&scope);
  return st;
}

/* The program's stream waits for a ticket (an event) of ferry's: DLPack's stream
 * protocol, where the consumer's stream must wait for the producer's work. */
static ferry_status cuda_native_wait(ferry_device *dev, ferry_ticket ticket, uintptr_t native_queue) {
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  cu_result r = API.cuStreamWaitEvent((cu_stream)native_queue, event_of(ticket), 0);
  if (r != FCU_SUCCESS)
    st = cu_fail(dev, r, "cuStreamWaitEvent (the program's stream %p waiting for ferry's queued work)",
                 (void *)native_queue);
  ctx_leave(&scope);
  return st;
}

static ferry_status cuda_ticket_query(ferry_device *dev, ferry_ticket ticket) {
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  cu_result r = API.cuEventQuery(event_of(ticket));
  if (r == FCU_ERROR_NOT_READY)
    st = FERRY_NOT_READY;
  else if (r != FCU_SUCCESS)
    st = cu_fail(dev, r, "cuEventQuery (the stream's work failed)");
  ctx_leave(&scope);
  return st;
}

static ferry_status cuda_ticket_wait(ferry_device *dev, ferry_ticket ticket) {
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  cu_result r = API.cuEventSynchronize(event_of(ticket));
  if (r != FCU_SUCCESS) {
    st = cu_fail(dev, r, "cuEventSynchronize (waiting for the stream's work)");
    /* A wait that failed without the work failing (a transient error) leaves the work running:
       the caller would then reuse its buffers under it. Wait by polling until the event is done
       or failed, so the failure returns with nothing still in flight. */
    long pause_ns = 1000;
    while (API.cuEventQuery(event_of(ticket)) == FCU_ERROR_NOT_READY) {
      struct timespec t = {0, pause_ns};
      nanosleep(&t, NULL);
      if (pause_ns < 1000000) pause_ns *= 2;
    }
  }
  ctx_leave(&scope);
  return st;
}

static void cuda_ticket_release(ferry_device *dev, ferry_ticket ticket) {
  event_give(dev->impl, (ticket & TICKET_TIMING) != 0, event_of(ticket));
}

static ferry_status cuda_ticket_elapsed(ferry_device *dev, ferry_ticket start, ferry_ticket stop, double *out_ms) {
  if (!(start & TICKET_TIMING) || !(stop & TICKET_TIMING)) return FERRY_ERROR_UNSUPPORTED;
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  float ms = 0;
  cu_result r = API.cuEventElapsedTime(&ms, event_of(start), event_of(stop));
  if (r != FCU_SUCCESS)
    st = cu_fail(dev, r, "cuEventElapsedTime");
  else
    *out_ms = ms;
  ctx_leave(&scope);
  return st;
}

/* A gate: one word of a page of mapped pinned memory. Its value only grows
 * (cyclically); a gate starts at the word's value when it is taken. */
#define GATE_WORDS 1024
typedef struct cuda_gate {
  struct cuda_gate *next; /* in the free list */
  volatile uint32_t *word;
  cu_deviceptr device_word;
  uint32_t base;
} cuda_gate;

typedef struct cuda_gate_page {
  struct cuda_gate_page *next;
  void *host;
  cuda_gate gates[GATE_WORDS];
} cuda_gate_page;

/* A new page of gates (gates_lock held, context current). */
static cu_result gate_page_add(cuda_device *cd) {
  cuda_gate_page *page = calloc(1, sizeof *page);
  if (!page) return FCU_ERROR_OUT_OF_MEMORY;
  cu_result r = API.cuMemHostAlloc(&page->host, GATE_WORDS * sizeof(uint32_t),
                                   FCU_MEMHOSTALLOC_PORTABLE | FCU_MEMHOSTALLOC_DEVICEMAP);
  cu_deviceptr dptr = 0;
  if (r == FCU_SUCCESS && (r = API.cuMemHostGetDevicePointer(&dptr, page->host, 0)) != FCU_SUCCESS)
    (void)API.cuMemFreeHost(page->host);
  if (r != FCU_SUCCESS) {
    free(page);
    return r;
  }
  memset(page->host, 0, GATE_WORDS * sizeof(uint32_t));
  for (int i = 0; i < GATE_WORDS; i++) {
    cuda_gate *gt = &page->gates[i];
    gt->word = (volatile uint32_t *)page->host + i;
    gt->device_word = dptr + (cu_deviceptr)i * sizeof(uint32_t);
    gt->next = cd->free_gates;
    cd->free_gates = gt;
  }
  page->next = cd->gate_pages;
  cd->gate_pages = page;
  return FCU_SUCCESS;
}

static ferry_status cuda_gate_create(ferry_device *dev, ferry_gate **out) {
  cuda_device *cd = dev->impl;
  pthread_mutex_lock(&cd->gates_lock);
  cu_result r = FCU_SUCCESS;
  if (!cd->free_gates) {
    ctx_scope scope;
    ferry_status st = ctx_enter(dev, &scope);
    if (st != FERRY_OK) {
      pthread_mutex_unlock(&cd->gates_lock);
      return st;
    }
    r = gate_page_add(cd);
    ctx_leave(&scope);
  }
  cuda_gate *gt = cd->free_gates;
  if (gt) cd->free_gates = gt->next;
  pthread_mutex_unlock(&cd->gates_lock);
  if (!gt) return cu_fail(dev, r, "cuMemHostAlloc (DEVICEMAP) of a page of gates");
  gt->base = __atomic_load_n(gt->word, __ATOMIC_ACQUIRE);
  *out = (ferry_gate *)gt;
  return FERRY_OK;
}

static ferry_status cuda_gate_push(ferry_device *dev, ferry_lane *lane, ferry_gate *gate, uint64_t value) {
  cuda_gate *gt = (cuda_gate *)gate;
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  cu_result r =
      API.cuStreamWaitValue32(stream_of(lane), gt->device_word, gt->base + (uint32_t)value, FCU_STREAM_WAIT_VALUE_GEQ);
  if (r != FCU_SUCCESS) st = cu_fail(dev, r, "cuStreamWaitValue32 (a stream waiting for the host)");
  ctx_leave(&scope);
  return st;
}

static ferry_status cuda_gate_raise(ferry_device *dev, ferry_gate *gate, uint64_t value) {
  (void)dev;
  cuda_gate *gt = (cuda_gate *)gate;
  uint32_t want = gt->base + (uint32_t)value, now = __atomic_load_n(gt->word, __ATOMIC_RELAXED);
  /* Never lower it. A sequentially consistent store (a full barrier on x86):
   * the bytes written before the raise are visible before the device reads
   * the word, and the word leaves the processor's store buffer at once. */
  if ((int32_t)(want - now) > 0) __atomic_store_n(gt->word, want, __ATOMIC_SEQ_CST);
  return FERRY_OK;
}

static void cuda_gate_destroy(ferry_device *dev, ferry_gate *gate) {
  cuda_device *cd = dev->impl;
  cuda_gate *gt = (cuda_gate *)gate;
  pthread_mutex_lock(&cd->gates_lock);
  gt->next = cd->free_gates;
  cd->free_gates = gt;
  pthread_mutex_unlock(&cd->gates_lock);
}

/* Can this device's streams wait for a word of mapped memory? Tried once at
 * start: a wait that is satisfied already, on a stream of its own. */
static bool gates_work(ferry_device *dev) {
  if (!API.cuStreamWaitValue32) return false;
  ferry_lane *lane = NULL;
  ferry_gate *gate = NULL;
  bool ok = false;
  ferry_error_scope scope = ferry__first_failure_begin(true);
  if (cuda_lane_create(dev, &lane) == FERRY_OK) {
    if (cuda_gate_create(dev, &gate) == FERRY_OK) {
      ctx_scope cs;
      if (cuda_gate_raise(dev, gate, 1) == FERRY_OK && cuda_gate_push(dev, lane, gate, 1) == FERRY_OK &&
          ctx_enter(dev, &cs) == FERRY_OK) {
        ok = API.cuStreamSynchronize(stream_of(lane)) == FCU_SUCCESS;
        ctx_leave(&cs);
      }
      cuda_gate_destroy(dev, gate);
    }
    cuda_lane_destroy(dev, lane);
  }
  ferry__first_failure_end(scope);
  return ok;
}

/* ---- transfers ------------------------------------------------------------------------ */

/* From pageable memory (the core sends pinned memory by DMA), complete on return. */
static ferry_status cuda_write(ferry_device *dev, ferry_lane *lane, ferry_mem *dst, size_t off, const void *src,
                               size_t n) {
  cuda_device *cd = dev->impl;
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  cu_deviceptr to = (cu_deviceptr)dst->handle + off;
  const char *call;
  cu_result r;
  if (cd->mode == H2D_MEMOPS && dst->impl == MEMOPS_TAG) {
    call = "cuMemcpyHtoD_v2";
    r = API.cuMemcpyHtoD(to, src, n); /* the memory's attribute makes it complete on return */
  } else {
    call = "cuMemcpyHtoDAsync_v2";
    r = API.cuMemcpyHtoDAsync(to, src, n, stream_of(lane));
    if (r == FCU_SUCCESS) {
      /* Complete on return: from pageable memory the DMA may still be under way. */
      r = API.cuStreamSynchronize(stream_of(lane));
      call = "cuStreamSynchronize (after cuMemcpyHtoDAsync_v2)";
    }
  }
  if (r != FCU_SUCCESS)
    st = cu_fail(dev, r, "%s of %zu bytes from host %p to device 0x%llx (offset %zu of a %zu-byte allocation)", call, n,
                 src, (unsigned long long)to, off, dst->bytes);
  ctx_leave(&scope);
  return st;
}

static ferry_status cuda_read(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t off, void *dst,
                              size_t n) {
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  cu_deviceptr from = (cu_deviceptr)src->handle + off;
  const char *call = "cuMemcpyDtoHAsync_v2";
  cu_result r = API.cuMemcpyDtoHAsync(dst, from, n, stream_of(lane));
  if (r == FCU_SUCCESS) {
    /* Into pageable memory the call returns once done; into pinned memory it does not. */
    r = API.cuStreamSynchronize(stream_of(lane));
    call = "cuStreamSynchronize (after cuMemcpyDtoHAsync_v2)";
  }
  if (r != FCU_SUCCESS)
    st = cu_fail(dev, r, "%s of %zu bytes from device 0x%llx (offset %zu of a %zu-byte allocation) to host %p", call, n,
                 (unsigned long long)from, off, src->bytes, dst);
  ctx_leave(&scope);
  return st;
}

/* Between two allocations of device memory (the core copies host-pointer buffers' bytes itself). */
static ferry_status cuda_copy_start(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t so,
                                    ferry_mem *dst, size_t doff, size_t n, ferry_ticket *out) {
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  cu_deviceptr from = (cu_deviceptr)src->handle + so, to = (cu_deviceptr)dst->handle + doff;
  const char *call = "cuMemcpyDtoDAsync_v2";
  cu_result r = API.cuMemcpyDtoDAsync(to, from, n, stream_of(lane));
  if (r == FCU_SUCCESS && (r = ticket_record(dev->impl, stream_of(lane), false, out)) != FCU_SUCCESS)
    call = "cuEventRecord (after cuMemcpyDtoDAsync_v2)";
  if (r != FCU_SUCCESS)
    st = cu_fail(dev, r, "%s of %zu bytes from device 0x%llx (offset %zu) to device 0x%llx (offset %zu)", call, n,
                 (unsigned long long)from, so, (unsigned long long)to, doff);
  ctx_leave(&scope);
  return st;
}

static ferry_status cuda_fill_start(ferry_device *dev, ferry_lane *lane, ferry_mem *mem, size_t off, size_t n,
                                    uint32_t pattern, unsigned pattern_size, ferry_ticket *out) {
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  cu_deviceptr at = (cu_deviceptr)mem->handle + off;
  cu_stream stream = stream_of(lane);
  const char *call;
  cu_result r;
  /* The pattern's bytes are the first pattern_size bytes of `pattern` as it lies in memory. */
  if (pattern_size == 1) {
    unsigned char v;
    memcpy(&v, &pattern, 1);
    call = "cuMemsetD8Async";
    r = API.cuMemsetD8Async(at, v, n, stream);
  } else if (pattern_size == 2) {
    unsigned short v;
    memcpy(&v, &pattern, 2);
    call = "cuMemsetD16Async";
    r = API.cuMemsetD16Async(at, v, n / 2, stream);
  } else {
    call = "cuMemsetD32Async";
    r = API.cuMemsetD32Async(at, pattern, n / 4, stream);
  }
  if (r == FCU_SUCCESS && (r = ticket_record(dev->impl, stream, false, out)) != FCU_SUCCESS)
    call = "cuEventRecord (after a fill)";
  if (r != FCU_SUCCESS)
    st = cu_fail(dev, r, "%s of %zu bytes at device 0x%llx (offset %zu), a %u-byte pattern", call, n,
                 (unsigned long long)at, off, pattern_size);
  ctx_leave(&scope);
  return st;
}

/* Lets `ctx` reach `peer`'s memory; true when it can (or already could). */
static bool enable_peer(cu_context ctx, cu_context peer) {
  if (API.cuCtxPushCurrent(ctx) != FCU_SUCCESS) return false;
  cu_result r = API.cuCtxEnablePeerAccess(peer, 0);
  cu_context popped;
  (void)API.cuCtxPopCurrent(&popped);
  return r == FCU_SUCCESS || r == FCU_ERROR_PEER_ACCESS_ALREADY_ENABLED;
}

/* Decides once per pair of GPUs whether copies between them go peer to peer. */
static bool peer_ready(cuda_device *s, cuda_device *d) {
  int state = atomic_load(&s->peer[d->index]);
  if (state) return state > 0;
  pthread_mutex_lock(&g.peer_lock);
  state = atomic_load(&s->peer[d->index]);
  if (!state) {
    int a = 0, b = 0;
    bool ok = s->peer_enabled && d->peer_enabled && API.cuDeviceCanAccessPeer(&a, d->device, s->device) == 0 && a &&
              API.cuDeviceCanAccessPeer(&b, s->device, d->device) == 0 && b;
    if (ok) ok = enable_peer(d->ctx, s->ctx) && enable_peer(s->ctx, d->ctx);
    state = ok ? 1 : -1;
    atomic_store(&s->peer[d->index], state);
    atomic_store(&d->peer[s->index], state);
  }
  pthread_mutex_unlock(&g.peer_lock);
  return state > 0;
}

static ferry_status cuda_peer_start(ferry_device *lane_dev, ferry_lane *lane, ferry_device *sdev, const ferry_mem *src,
                                    size_t so, ferry_device *ddev, ferry_mem *dst, size_t doff, size_t n,
                                    ferry_ticket *out) {
  cuda_device *s = sdev->impl, *d = ddev->impl;
  /* Host memory on either side: the core reads or writes it directly. */
  if (src->host || dst->host || !peer_ready(s, d)) return FERRY_ERROR_UNSUPPORTED;
  ctx_scope scope;
  ferry_status st = ctx_enter(lane_dev, &scope);
  if (st != FERRY_OK) return st;
  cu_deviceptr from = (cu_deviceptr)src->handle + so, to = (cu_deviceptr)dst->handle + doff;
  const char *call = "cuMemcpyPeerAsync";
  cu_result r = API.cuMemcpyPeerAsync(to, d->ctx, from, s->ctx, n, stream_of(lane));
  if (r == FCU_SUCCESS && (r = ticket_record(lane_dev->impl, stream_of(lane), false, out)) != FCU_SUCCESS)
    call = "cuEventRecord (after cuMemcpyPeerAsync)";
  if (r != FCU_SUCCESS) {
    char err[768];
    st = ferry__fail(status_of(r), "%s of %zu bytes from %s (0x%llx) to %s (0x%llx) failed: %s", call, n, sdev->label,
                     (unsigned long long)from, ddev->label, (unsigned long long)to,
                     ferry__cuda_error_text(r, err, sizeof err));
  }
  ctx_leave(&scope);
  return st;
}

/* ---- host-pointer buffers ---------------------------------------------------------------- */

static ferry_status cuda_host_ptr_import(ferry_device *dev, void *host, size_t bytes, ferry_mem *out,
                                         ferry_refusal *out_refusal) {
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) {
    *out_refusal = FERRY_REFUSAL_DRIVER;
    return st;
  }
  char size[64], err[768];
  cu_result r = API.cuMemHostRegister(host, bytes, FCU_MEMHOSTREGISTER_PORTABLE | FCU_MEMHOSTREGISTER_DEVICEMAP);
  if (r == FCU_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
    *out_refusal = FERRY_REFUSAL_OVERLAP;
    st = ferry__fail(FERRY_ERROR_REFUSED,
                     "cuMemHostRegister_v2(%p, %s, PORTABLE | DEVICEMAP) on %s failed: %s; part of this memory is "
                     "already registered with CUDA (by the program itself or by another library)",
                     host, ferry__bytes_text(bytes, size), dev->label, ferry__cuda_error_text(r, err, sizeof err));
  } else if (r != FCU_SUCCESS) {
    *out_refusal = FERRY_REFUSAL_DRIVER;
    st = ferry__fail(FERRY_ERROR_REFUSED, "cuMemHostRegister_v2(%p, %s, PORTABLE | DEVICEMAP) on %s failed: %s", host,
                     ferry__bytes_text(bytes, size), dev->label, ferry__cuda_error_text(r, err, sizeof err));
  } else {
    cu_deviceptr dptr = 0;
    r = API.cuMemHostGetDevicePointer(&dptr, host, 0);
    if (r != FCU_SUCCESS) {
      *out_refusal = FERRY_REFUSAL_DRIVER;
      st = ferry__fail(FERRY_ERROR_REFUSED, "cuMemHostGetDevicePointer_v2(%p) on %s failed after registering %s: %s",
                       host, dev->label, ferry__bytes_text(bytes, size), ferry__cuda_error_text(r, err, sizeof err));
      (void)API.cuMemHostUnregister(host);
    } else {
      *out = (ferry_mem){.handle = (uintptr_t)dptr, .host = host, .impl = NULL, .bytes = bytes};
    }
  }
  ctx_leave(&scope);
  return st;
}

static ferry_status cuda_host_ptr_sync(ferry_device *dev, ferry_mem *mem, ferry_sync_dir dir) {
  (void)mem;
  /* The memory is coherent: handing it to the device needs nothing. Taking it
   * back waits for kernels the program launched on the legacy stream (or on
   * blocking streams), which may still write to it; ferry's own streams are
   * non-blocking and its work on the buffer is done already, so this never
   * waits for a stream that waits for the calling thread. */
  if (dir == FERRY_SYNC_TO_DEVICE) return FERRY_OK;
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  cu_result r = API.cuStreamSynchronize(NULL);
  if (r != FCU_SUCCESS)
    st = cu_fail(dev, r, "cuStreamSynchronize (legacy stream, handing a host-pointer buffer's array back)");
  ctx_leave(&scope);
  return st;
}

static ferry_status cuda_host_ptr_release(ferry_device *dev, ferry_mem *mem) {
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  cu_result sync = FCU_SUCCESS;
  if (st == FERRY_OK) sync = API.cuCtxSynchronize(); /* no kernel may still use the pages */
  /* Unregistered always, whatever the synchronisation said. */
  cu_result r = API.cuMemHostUnregister(mem->host);
  char size[64];
  if (r != FCU_SUCCESS)
    st = cu_fail(dev, r, "cuMemHostUnregister(%p, %s)", mem->host, ferry__bytes_text(mem->bytes, size));
  else if (sync != FCU_SUCCESS)
    st = cu_fail(dev, sync, "cuCtxSynchronize (before unregistering %p, %s)", mem->host,
                 ferry__bytes_text(mem->bytes, size));
  ctx_leave(&scope);
  return st;
}

/* ---- DLPack: memory allocated outside ferry ------------------------------------------------------ */

/* A CUdeviceptr from another library (a DLPack import): the driver must know it
 * as this GPU's memory, and the tensor must lie inside one allocation. */
static ferry_status cuda_foreign_import(ferry_device *dev, uintptr_t data, uint64_t byte_offset, size_t bytes,
                                        ferry_mem *out, ferry_refusal *out_refusal) {
  cuda_device *cd = dev->impl;
  cu_deviceptr p = (cu_deviceptr)data + byte_offset;
  *out_refusal = FERRY_REFUSAL_DRIVER;
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  unsigned int type = 0;
  int ordinal = -1;
  cu_deviceptr start = 0;
  size_t size = 0;
  cu_pointer_attribute attrs[4] = {FCU_POINTER_ATTRIBUTE_MEMORY_TYPE, FCU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   FCU_POINTER_ATTRIBUTE_RANGE_START_ADDR, FCU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void *values[4] = {&type, &ordinal, &start, &size};
  cu_result r = API.cuPointerGetAttributes(4, attrs, values, p);
  ctx_leave(&scope);
  char size_text[64];
  ferry__bytes_text(bytes, size_text);
  if (r != FCU_SUCCESS) {
    char err[768];
    return ferry__fail(FERRY_ERROR_REFUSED, "cuPointerGetAttributes(0x%llx) on %s failed: %s", (unsigned long long)p,
                       dev->label, ferry__cuda_error_text(r, err, sizeof err));
  }
  *out_refusal = FERRY_REFUSAL_DEVICE;
  if (type == 0)
    return ferry__fail(FERRY_ERROR_REFUSED, "the CUDA driver does not know 0x%llx as memory (on %s)",
                       (unsigned long long)p, dev->label);
  if (type != FCU_MEMORYTYPE_DEVICE && type != FCU_MEMORYTYPE_UNIFIED)
    return ferry__fail(FERRY_ERROR_REFUSED,
                       "0x%llx is host memory registered with CUDA, not device memory (DLPack calls it kDLCUDAHost)",
                       (unsigned long long)p);
  if (ordinal != cd->ordinal)
    return ferry__fail(FERRY_ERROR_REFUSED, "0x%llx is memory of CUDA device %d, not of %s (CUDA device %d)",
                       (unsigned long long)p, ordinal, dev->label, cd->ordinal);
  if (size > 0 && !(p >= start && p - start <= size && bytes <= size - (p - start)))
    return ferry__fail(FERRY_ERROR_REFUSED,
                       "%s at 0x%llx run past the end of the allocation they lie in (0x%llx, %zu bytes) on %s",
                       size_text, (unsigned long long)p, (unsigned long long)start, size, dev->label);
  *out_refusal = FERRY_REFUSAL_NONE;
  *out = (ferry_mem){.handle = (uintptr_t)p, .host = NULL, .impl = NULL, .bytes = bytes};
  return FERRY_OK;
}

static ferry_dl_device cuda_dlpack_device(const ferry_device *dev) {
  const cuda_device *cd = dev->impl;
  return (ferry_dl_device){FERRY_DL_CUDA, cd->ordinal};
}

/* ---- pinned host memory ---------------------------------------------------------------------- */

static ferry_status cuda_pin_alloc(ferry_device *dev, size_t bytes, void **out, uintptr_t *token) {
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  void *p = NULL;
  cu_result r = API.cuMemHostAlloc(&p, bytes, FCU_MEMHOSTALLOC_PORTABLE);
  if (r != FCU_SUCCESS) {
    char size[64];
    st = cu_fail(dev, r, "cuMemHostAlloc(%s, PORTABLE)", ferry__bytes_text(bytes, size));
  } else {
    *out = p;
    *token = PIN_DRIVER;
  }
  ctx_leave(&scope);
  return st;
}

static unsigned int memory_type(cu_deviceptr p);

/* A block another allocator made: pinned for every context (PORTABLE). Memory
 * the driver pinned already (another GPU's block) needs nothing. */
static ferry_status cuda_pin_register(ferry_device *dev, void *base, size_t bytes, uintptr_t *token) {
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  *token = PIN_DRIVER;
  if (memory_type((cu_deviceptr)(uintptr_t)base) != FCU_MEMORYTYPE_HOST) {
    cu_result r = API.cuMemHostRegister(base, bytes, FCU_MEMHOSTREGISTER_PORTABLE);
    if (r == FCU_SUCCESS) {
      *token = PIN_REGISTERED;
    } else if (r != FCU_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
      char size[64];
      st = cu_fail(dev, r, "cuMemHostRegister_v2(%p, %s, PORTABLE)", base, ferry__bytes_text(bytes, size));
    }
  }
  ctx_leave(&scope);
  return st;
}

static void cuda_pin_release(ferry_device *dev, void *base, size_t bytes, uintptr_t token, bool allocated) {
  (void)bytes;
  if (!allocated && token != PIN_REGISTERED) return;
  ctx_scope scope;
  if (ctx_enter(dev, &scope) != FERRY_OK) return; /* the context is gone; so is the memory */
  if (allocated)
    (void)API.cuMemFreeHost(base);
  else
    (void)API.cuMemHostUnregister(base);
  ctx_leave(&scope);
}

/* The memory type of `p` (FCU_MEMORYTYPE_*), 0 for memory the driver does not
 * know. cuPointerGetAttributes, unlike cuPointerGetAttribute, answers for
 * ordinary memory without an error (which compute-sanitizer would report). */
static unsigned int memory_type(cu_deviceptr p) {
  unsigned int type = 0;
  cu_pointer_attribute attr = FCU_POINTER_ATTRIBUTE_MEMORY_TYPE;
  void *data[1] = {&type};
  return API.cuPointerGetAttributes(1, &attr, data, p) == FCU_SUCCESS ? type : 0;
}

/* Is the range page-locked memory the driver knows (the user's own cuMemAllocHost
 * or cuMemHostRegister memory)? Blocks of ferry's registry the core knows itself. */
static bool cuda_host_pinned(ferry_device *dev, const void *ptr, size_t bytes) {
  if (bytes == 0) return false;
  ctx_scope scope;
  if (ctx_enter(dev, &scope) != FERRY_OK) return false;
  cu_deviceptr p = (cu_deviceptr)(uintptr_t)ptr;
  bool pinned = memory_type(p) == FCU_MEMORYTYPE_HOST && memory_type(p + bytes - 1) == FCU_MEMORYTYPE_HOST;
  if (pinned) {
    /* Both ends pinned; where the driver says which allocation, it must be one. */
    cu_deviceptr start = 0;
    size_t size = 0;
    cu_pointer_attribute attrs[2] = {FCU_POINTER_ATTRIBUTE_RANGE_START_ADDR, FCU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *data[2] = {&start, &size};
    if (API.cuPointerGetAttributes(2, attrs, data, p) == FCU_SUCCESS && size > 0)
      pinned = p >= start && p - start <= size && bytes <= size - (p - start);
  }
  ctx_leave(&scope);
  return pinned;
}

/* ---- DMA for the core's engine --------------------------------------------------------------- */

static ferry_status cuda_dma_start(ferry_device *dev, ferry_lane *lane, ferry_dma_dir dir, ferry_mem *mem, size_t off,
                                   const ferry_pinned *host, size_t n, ferry_ticket *out) {
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  cu_deviceptr at = (cu_deviceptr)mem->handle + off;
  cu_stream stream = stream_of(lane);
  const char *call = dir == FERRY_DMA_TO_DEVICE ? "cuMemcpyHtoDAsync_v2" : "cuMemcpyDtoHAsync_v2";
  cu_result r = dir == FERRY_DMA_TO_DEVICE ? API.cuMemcpyHtoDAsync(at, host->host, n, stream)
                                           : API.cuMemcpyDtoHAsync(host->host, at, n, stream);
  if (r == FCU_SUCCESS && (r = ticket_record(dev->impl, stream, false, out)) != FCU_SUCCESS) call = "cuEventRecord";
  if (r != FCU_SUCCESS)
    st = dir == FERRY_DMA_TO_DEVICE
             ? cu_fail(dev, r, "%s of %zu bytes from pinned host memory %p to device 0x%llx (offset %zu)", call, n,
                       host->host, (unsigned long long)at, off)
             : cu_fail(dev, r, "%s of %zu bytes from device 0x%llx (offset %zu) to pinned host memory %p", call, n,
                       (unsigned long long)at, off, host->host);
  ctx_leave(&scope);
  return st;
}

/* ---- device-wide operations ------------------------------------------------------------------- */

static ferry_status cuda_synchronize(ferry_device *dev) {
  ctx_scope scope;
  ferry_status st = ctx_enter(dev, &scope);
  if (st != FERRY_OK) return st;
  cu_result r = API.cuCtxSynchronize();
  if (r != FCU_SUCCESS) st = cu_fail(dev, r, "cuCtxSynchronize");
  ctx_leave(&scope);
  return st;
}

static ferry_status cuda_native(const ferry_device *dev, ferry_native *out) {
  const cuda_device *cd = dev->impl;
  *out = (ferry_native){.device = (uintptr_t)cd->device, .context = (uintptr_t)cd->ctx, .queue = 0, .queue_family = 0};
  return FERRY_OK;
}

/* NVIDIA's kernel driver version from /proc/driver/nvidia/version ("NVRM version:
 * NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..."): the first word
 * after "Module" that starts with a digit. False where there is no such file. */
static bool nvidia_driver_version(char *out, size_t size) {
  FILE *f = fopen("/proc/driver/nvidia/version", "r");
  if (!f) return false;
  char line[512];
  bool found = false;
  if (fgets(line, sizeof line, f)) {
    const char *p = strstr(line, "Module");
    while (p && *p && !found) {
      p += strcspn(p, " \t\n");
      p += strspn(p, " \t");
      size_t n = strcspn(p, " \t\n");
      if (n && p[0] >= '0' && p[0] <= '9') {
        snprintf(out, size, "%.*s", (int)n, p);
        found = true;
      }
    }
  }
  fclose(f);
  return found;
}

static ferry_status cuda_driver_info(ferry_device *dev, ferry_driver_info *out) {
  const cuda_device *cd = dev->impl;
  if (nvidia_driver_version(out->driver_version, sizeof out->driver_version)) {
    snprintf(out->driver, sizeof out->driver, "NVIDIA");
  } else {
    const char *base = strrchr(g.path, '/');
    snprintf(out->driver, sizeof out->driver, "%.255s", base ? base + 1 : g.path);
  }
  if (g.driver_version > 0)
    snprintf(out->api_version, sizeof out->api_version, "CUDA %d.%d", g.driver_version / 1000,
             g.driver_version % 1000 / 10);
  char bus[32] = "";
  if (API.cuDeviceGetPCIBusId && API.cuDeviceGetPCIBusId(bus, (int)sizeof bus, cd->device) == FCU_SUCCESS) {
    bus[sizeof bus - 1] = '\0';
    for (size_t i = 0; bus[i] && i + 1 < sizeof out->pci_bus_id; i++) /* lspci's lowercase */
      out->pci_bus_id[i] = (char)(bus[i] >= 'A' && bus[i] <= 'F' ? bus[i] - 'A' + 'a' : bus[i]);
  }
  cu_uuid uuid;
  if (API.cuDeviceGetUuid && API.cuDeviceGetUuid(&uuid, cd->device) == FCU_SUCCESS)
    ferry__uuid_text((const unsigned char *)uuid.bytes, out->uuid);
  return FERRY_OK;
}

/* Releases what device_setup made; the context is made current for it. */
static void device_teardown(cuda_device *cd) {
  if (cd->ctx) {
    if (API.cuCtxPushCurrent(cd->ctx) == FCU_SUCCESS) {
      for (int p = 0; p < 2; p++)
        for (size_t i = 0; i < cd->event_count[p]; i++)
          (void)API.cuEventDestroy(cd->events[p][i]);
      while (cd->gate_pages) {
        cuda_gate_page *page = cd->gate_pages;
        cd->gate_pages = page->next;
        (void)API.cuMemFreeHost(page->host);
        free(page);
      }
      cu_context popped;
      (void)API.cuCtxPopCurrent(&popped);
    }
    (void)API.cuDevicePrimaryCtxRelease(cd->device);
  }
  pthread_mutex_destroy(&cd->events_lock);
  pthread_mutex_destroy(&cd->gates_lock);
  free(cd->events[0]);
  free(cd->events[1]);
  free(cd);
}

static void cuda_destroy(ferry_device *dev) { device_teardown(dev->impl); }

static const ferry_device_ops cuda_ops = {
    .alloc = cuda_alloc,
    .free = cuda_free,
    .write = cuda_write,
    .read = cuda_read,
    .copy_start = cuda_copy_start,
    .fill_start = cuda_fill_start,
    .peer_start = cuda_peer_start,
    .host_ptr_import = cuda_host_ptr_import,
    .host_ptr_sync = cuda_host_ptr_sync,
    .host_ptr_release = cuda_host_ptr_release,
    .pin_alloc = cuda_pin_alloc,
    .pin_register = cuda_pin_register,
    .pin_release = cuda_pin_release,
    .host_pinned = cuda_host_pinned,
    .dma_start = cuda_dma_start,
    .lane_create = cuda_lane_create,
    .lane_destroy = cuda_lane_destroy,
    .lane_native = cuda_lane_native,
    .native_wait = cuda_native_wait,
    .marker = cuda_marker,
    .lane_wait = cuda_lane_wait,
    .gate_create = cuda_gate_create,
    .gate_push = cuda_gate_push,
    .gate_raise = cuda_gate_raise,
    .gate_destroy = cuda_gate_destroy,
    .ticket_query = cuda_ticket_query,
    .ticket_wait = cuda_ticket_wait,
    .ticket_release = cuda_ticket_release,
    .ticket_elapsed = cuda_ticket_elapsed,
    .synchronize = cuda_synchronize,
    .native = cuda_native,
    .free_memory = cuda_free_memory,
    .driver_info = cuda_driver_info,
    .foreign_import = cuda_foreign_import,
    .dlpack_device = cuda_dlpack_device,
    .destroy = cuda_destroy,
};

/* The same for devices whose streams cannot wait for the host (no stream memory
 * operations): the core pushes their queued work as it becomes ready. */
static ferry_device_ops cuda_ops_without_gates;

/* ---- loading and probing ---------------------------------------------------------------------- */

static void unload_library(void) {
  atomic_store(&g.loaded, false);
  ferry__library_close(g.lib);
  g.lib = NULL;
  memset(&g.api, 0, sizeof g.api);
}

static ferry_status load_library(void) {
  const char *env = ferry__option_text("FERRY_CUDA_LIBRARY");
  snprintf(g.path, sizeof g.path, "%s", env && *env ? env : "libcuda.so.1");
  char why[512];
  bool keep_loaded = true; /* the driver keeps threads and handlers: never unmap it */
  g.lib = ferry__library_open(g.path, keep_loaded, why, sizeof why);
  if (!g.lib) return ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s", why);
  const char *missing = NULL;
#define LOOKUP(required, member, symbol, ret, params)                                                                  \
  {                                                                                                                    \
    void *sym = ferry__library_symbol(g.lib, symbol);                                                                  \
    memcpy(&g.api.member, &sym, sizeof sym);                                                                           \
    if (!sym && required && !missing) missing = symbol;                                                                \
  }
  FERRY_CUDA_FUNCTIONS(LOOKUP)
#undef LOOKUP
  if (missing) {
    ferry__fail(FERRY_ERROR_UNSUPPORTED,
                "%s has no %s: the CUDA driver is too old for ferry (it needs CUDA 11 or later)", g.path, missing);
    unload_library();
    return FERRY_ERROR_UNSUPPORTED;
  }
  atomic_store(&g.loaded, true);
  return FERRY_OK;
}

static h2d_mode mode_from_env(void) {
  const char *env = ferry__option_text("FERRY_CUDA_H2D"); /* one of the names, checked at ferry_init */
  if (env)
    for (int m = 0; m < 3; m++)
      if (strcmp(env, h2d_mode_names[m]) == 0) return (h2d_mode)m;
  return H2D_STREAM;
}

/* Fills in one GPU: its properties, primary context, streams. On failure sets
 * the sentence; the caller tears down. */
static ferry_status device_setup(cuda_device *cd, int ordinal, ferry_device_desc *desc) {
  char err[768];
  cu_result r = API.cuDeviceGet(&cd->device, ordinal);
  if (r != FCU_SUCCESS)
    return ferry__fail(FERRY_ERROR_BACKEND, "cuDeviceGet(%d) failed: %s", ordinal,
                       ferry__cuda_error_text(r, err, sizeof err));
  char raw_name[256] = "";
  size_t total = 0;
  int uva = 0, map_host = 0;
  if ((r = API.cuDeviceGetName(raw_name, (int)sizeof raw_name - 1, cd->device)) != FCU_SUCCESS ||
      (r = API.cuDeviceTotalMem(&total, cd->device)) != FCU_SUCCESS ||
      (r = API.cuDeviceGetAttribute(&cd->cc_major, FCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cd->device)) !=
          FCU_SUCCESS ||
      (r = API.cuDeviceGetAttribute(&cd->cc_minor, FCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cd->device)) !=
          FCU_SUCCESS ||
      (r = API.cuDeviceGetAttribute(&uva, FCU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, cd->device)) != FCU_SUCCESS ||
      (r = API.cuDeviceGetAttribute(&map_host, FCU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, cd->device)) != FCU_SUCCESS)
    return ferry__fail(FERRY_ERROR_BACKEND, "reading the properties of CUDA device %d failed: %s", ordinal,
                       ferry__cuda_error_text(r, err, sizeof err));
  raw_name[sizeof raw_name - 1] = '\0';
  snprintf(cd->name, sizeof cd->name, "%s (sm_%d%d)", raw_name[0] ? raw_name : "CUDA device", cd->cc_major,
           cd->cc_minor);
  cu_context ctx = NULL;
  if ((r = API.cuDevicePrimaryCtxRetain(&ctx, cd->device)) != FCU_SUCCESS)
    return ferry__fail(FERRY_ERROR_BACKEND, "cuDevicePrimaryCtxRetain for CUDA device %d (%s) failed: %s", ordinal,
                       cd->name, ferry__cuda_error_text(r, err, sizeof err));
  cd->ctx = ctx;
  *desc = (ferry_device_desc){
      .ops = &cuda_ops, /* without gates if they do not work: see cuda_probe */
      .impl = cd,
      .name = cd->name,
      .total_memory = total,
      .max_allocation = total,
      .is_cpu = false,
      .zero_copy = false,
      .host_ptr = uva && map_host,
      .host_ptr_alignment = page_size(), /* registration pins whole pages */
      .caps = FERRY_CAP_CACHE | FERRY_CAP_STAGE,
      .bounce_max = cd->mode == H2D_BOUNCE ? BOUNCE_BYTES : 0,
  };
  return FERRY_OK;
}

static ferry_status cuda_probe(ferry_probe *probe) {
  ferry_status st = load_library();
  if (st != FERRY_OK) return st;
  char err[768];
  cu_result r = API.cuInit(0);
  if (r != FCU_SUCCESS)
    return ferry__fail(FERRY_ERROR_UNSUPPORTED, "cuInit(0) in %s failed: %s", g.path,
                       ferry__cuda_error_text(r, err, sizeof err));
  if (API.cuDriverGetVersion(&g.driver_version) != FCU_SUCCESS) g.driver_version = 0;
  int count = 0;
  if ((r = API.cuDeviceGetCount(&count)) != FCU_SUCCESS)
    return ferry__fail(FERRY_ERROR_UNSUPPORTED, "cuDeviceGetCount in %s failed: %s", g.path,
                       ferry__cuda_error_text(r, err, sizeof err));
  if (count <= 0) return ferry__fail(FERRY_ERROR_UNSUPPORTED, "the CUDA driver (%s) reports no devices", g.path);
  if (count > CUDA_MAX_DEVICES) count = CUDA_MAX_DEVICES;
  h2d_mode mode = mode_from_env();
  uint64_t peer_set;
  bool peer = !ferry__option_number("FERRY_CUDA_PEER", &peer_set) || peer_set == 1;
  int added = 0;
  char first_failure[1024] = "";
  for (int ordinal = 0; ordinal < count; ordinal++) {
    cuda_device *cd = calloc(1, sizeof *cd);
    if (!cd) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for CUDA device %d", ordinal);
    pthread_mutex_init(&cd->events_lock, NULL);
    pthread_mutex_init(&cd->gates_lock, NULL);
    cd->index = added;
    cd->ordinal = ordinal;
    cd->mode = mode;
    cd->peer_enabled = peer;
    ferry_device_desc desc;
    st = device_setup(cd, ordinal, &desc);
    if (st != FERRY_OK) {
      /* A GPU that cannot be used (taken in exclusive mode, broken) is left out. */
      if (!first_failure[0]) snprintf(first_failure, sizeof first_failure, "%s", ferry__error_text());
      device_teardown(cd);
      continue;
    }
    /* Gates need stream memory operations: tried on the device itself. */
    ferry_device trial = {.impl = cd};
    snprintf(trial.label, sizeof trial.label, "CUDA device %d (%.200s)", ordinal, cd->name);
    if (!gates_work(&trial)) {
      cuda_ops_without_gates = cuda_ops;
      cuda_ops_without_gates.gate_create = NULL;
      cuda_ops_without_gates.gate_push = NULL;
      cuda_ops_without_gates.gate_raise = NULL;
      cuda_ops_without_gates.gate_destroy = NULL;
      desc.ops = &cuda_ops_without_gates;
    }
    st = ferry__device_add(probe, &desc);
    if (st != FERRY_OK) {
      device_teardown(cd);
      return st;
    }
    added++;
  }
  if (added == 0) return ferry__fail(FERRY_ERROR_UNSUPPORTED, "no CUDA device could be used: %s", first_failure);
  return FERRY_OK;
}

static void cuda_unload(void) { unload_library(); }

static const ferry_option_def cuda_options[] = {
    {.name = "FERRY_CUDA_LIBRARY",
     .type = FERRY_OPTION_TEXT,
     .default_value = "libcuda.so.1",
     .range = "a library name or path for dlopen",
     .description = "the CUDA driver library to load"},
    {.name = "FERRY_CUDA_H2D",
     .type = FERRY_OPTION_CHOICE,
     .words = "stream,memops,bounce",
     .default_value = "stream",
     .range = "stream, memops or bounce",
     .description = "how a write from pageable memory is made complete (docs/backends/cuda.md)"},
    {.name = "FERRY_CUDA_PEER",
     .type = FERRY_OPTION_SWITCH,
     .default_value = "1",
     .range = "0 or 1",
     .description = "0: never copy peer to peer between GPUs (copies are staged through host memory)"},
    {.name = NULL},
};

const ferry_backend ferry_backend_cuda = {
    .name = "cuda", .options = cuda_options, .probe = cuda_probe, .unload = cuda_unload};
