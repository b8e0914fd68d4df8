/*
 * opencl: every device of every OpenCL platform, through the ICD loader
 * (libOpenCL.so.1) loaded at run time.
 *
 * Each device gets its own context and an in-order command queue of its own
 * (ferry_device_native's: memory ferry allocates, pinned blocks, host-pointer
 * handovers, and the program's own work). OpenCL 1.2 is the least a device must
 * have: its markers, barriers and fills with wait lists are what lanes are made of.
 *
 * Lanes are in-order command queues of the device's context, with profiling
 * where the device has it (clCreateCommandQueueWithProperties on 2.0+ devices,
 * else clCreateCommandQueue); every command pushed on one is flushed at once,
 * because OpenCL may keep commands on the host until a flush. Tickets are the
 * commands' cl_events (none is asked for when the core wants no ticket); a
 * marker is clEnqueueMarkerWithWaitList, a wait on another lane's ticket a
 * barrier with that event (events of this device's context only: another
 * device's context cannot wait for it, and the core then waits on the host).
 * Gates are user events: pushing value v on a lane makes a user event for v (or
 * takes the gate's one for v) and a barrier waiting for it; raising the gate to
 * w completes every user event of the gate with a value up to w. So a lane
 * waiting for the host is a driver-side wait, never a blocked thread.
 *
 * Buffers: clCreateBuffer, then a 1-byte write, because drivers (NVIDIA's among
 * them) reserve the memory only on first use and would report an out-of-memory
 * at the first transfer instead of at ferry_alloc. On CPU devices ferry allocates
 * the memory itself and hands it over with CL_MEM_USE_HOST_PTR (PoCL aborts the
 * process when its own deferred allocation fails; see cl_alloc_owned).
 *
 * Host-pointer buffers: CL_MEM_USE_HOST_PTR over the user's array, and never
 * mapped. The spec leaves a command on a mapped buffer undefined, and commands
 * are pushed on lanes at submission, before the host parts of the same queue
 * that come first run: a buffer mapped by such a host part would be mapped under
 * commands that were already queued. So the buffer's content is always the
 * driver's (what every command reads and writes, on any lane), and the array is
 * a view of it that the two handovers synchronise, with the commands OpenCL
 * defines for a CL_MEM_USE_HOST_PTR buffer and its own host_ptr:
 *  - ferry_device_to_host to the own array (the host takes it):
 *    clEnqueueReadBuffer into the array itself, blocking, every time: the array
 *    then holds the buffer's content;
 *  - ferry_host_to_device from the own array (the host hands it back):
 *    clEnqueueWriteBuffer from the array itself, once per taking (a second one
 *    in a row moves nothing: the host did not have the array in between);
 *  - ferry_free: the array gets the buffer's content (a last read), then the
 *    buffer is released.
 * PoCL moves nothing for either (its buffer memory is the array); a GPU driver
 * copies between the array and the device. Every other operation on the buffer
 * is an ordinary command on the driver's copy, whatever the host holds, so no
 * command's meaning depends on when a host part runs. The host's own writes to
 * the array reach the buffer only through ferry_host_to_device.
 *
 * Pinned memory for the core's engine (ferry_host_alloc, staging rings): a
 * mapped CL_MEM_ALLOC_HOST_PTR buffer (pin_alloc), or a CL_MEM_USE_HOST_PTR
 * buffer over a block another allocator made (pin_register); those buffers are
 * never given to a command, only their host memory is. DMA is a non-blocking
 * clEnqueueWriteBuffer / ReadBuffer from the pinned range on the lane. Devices
 * with memory of their own (GPUs) stage (FERRY_CAP_STAGE): large transfers from
 * ordinary memory then run at pinned speed; on CPU devices staging would only
 * add a copy, and a queue's transfers from ordinary memory are the driver's
 * non-blocking writes and reads (write_start, read_start), which PoCL makes on
 * its own threads without blocking the caller.
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

/* A lane: an in-order queue of the device's context, without profiling; and,
 * from its first timing marker on, a second queue with profiling, the lane's
 * clock, with a word of device memory that the clock's commands fill. A queue
 * with profiling costs every command: on NVIDIA's OpenCL a 64-byte
 * non-blocking write took 8.2 us on one against 2.7 us without, so only timing
 * markers pay for the device's clock. */
typedef struct cl_lane {
  cl_command_queue queue;
  cl_command_queue clock; /* NULL until the first timing marker; made under the device's lanes_lock */
  cl_mem clock_word;      /* 4 bytes, made with the clock */
  struct cl_lane *next;   /* in the device's list, for synchronize */
} cl_lane;

typedef struct cl_device {
  cl_platform_id platform;
  cl_device_id id;
  cl_context context;
  cl_command_queue queue;                       /* ferry_device_native's */
  int version;                                  /* the device's OpenCL version, major * 100 + minor */
  cl_command_queue_properties clock_properties; /* CL_QUEUE_PROFILING_ENABLE where the device has it */
  bool is_cpu;
  bool amd_free_memory; /* cl_amd_device_attribute_query: free memory can be asked */
  size_t base_align;    /* CL_DEVICE_MEM_BASE_ADDR_ALIGN in bytes: what ferry's own memory for buffers is aligned to */
  bool stage;           /* the core stages pageable transfers through pinned memory */
  bool unified;         /* CL_DEVICE_HOST_UNIFIED_MEMORY: a CPU device's map is the buffer's own memory */
  uint64_t total_memory, max_allocation;
  pthread_mutex_t lanes_lock;
  cl_lane *lanes;
  char name[256];
} cl_device;

/* A host-pointer buffer: the user's array, and whether the host has taken it
 * since it last handed it back. */
typedef struct host_buf {
  pthread_mutex_t lock; /* handovers of one buffer from several threads */
  char *host;
  size_t bytes;
  bool host_owned;
} host_buf;

static cl_device *device_of(const ferry_device *dev) { return dev->impl; }
static cl_mem mem_of(const ferry_mem *m) { return (cl_mem)m->handle; }
/* A host-pointer buffer's state; NULL for ferry's own buffers (whose impl, on
 * CPU devices, is the host memory ferry allocated for them). */
static host_buf *host_buf_of(const ferry_mem *m) { return (m->flags & FERRY_MEM_HOST_PTR) ? m->impl : NULL; }
/* The queue a command goes to: the lane's, or the device's own where the core
 * passes no lane (the engine's tests drive the operations without one). */
static cl_command_queue queue_of(const ferry_device *dev, ferry_lane *lane) {
  return lane ? ((cl_lane *)lane)->queue : device_of(dev)->queue;
}
static cl_event event_of(ferry_ticket t) { return (cl_event)(uintptr_t)t; }

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

/* The command's own failure where an event says it failed: a negative
 * execution status is the command's error code, which says more than
 * CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST from clWaitForEvents. */
static cl_int command_status(cl_event ev, cl_int err) {
  cl_int status = 0;
  if (API->clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL) == CL_SUCCESS &&
      status < 0)
    return status;
  return err;
}

/* Waits for an event; the command's failure, if any. Some drivers return
 * CL_SUCCESS from clWaitForEvents for a command that failed, so the status is
 * asked after a success too. */
static cl_int wait_for(cl_event ev) { return command_status(ev, API->clWaitForEvents(1, &ev)); }

/* Waits for an event and releases it. */
static cl_int wait_event(cl_event ev) {
  cl_int err = wait_for(ev);
  API->clReleaseEvent(ev);
  return err;
}

/* ---- host memory helpers ------------------------------------------------- */

static bool ranges_overlap(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + bn && y < x + an;
}

/* Does [p, p + n) lie (in part) in the array of a host-pointer buffer? The
 * driver's memory for such a buffer may be the array itself (PoCL's is), so a
 * command between the two would copy between overlapping bytes. */
static bool in_own_array(const ferry_mem *m, const void *p, size_t n) {
  host_buf *hb = host_buf_of(m);
  return hb && ranges_overlap(p, n, hb->host, hb->bytes);
}

/* ---- commands ------------------------------------------------------------ */

/* Commands that move fewer bytes than this and have no ticket are not flushed
 * on their own: they go to the device with the next command that is (one that
 * moves more, has a ticket, a marker, a barrier) or with the program's own
 * flush or wait on the queue. Nothing waits for a command without a ticket
 * but through a later ticket, and every ticket's command is flushed with
 * everything enqueued before it, so whatever ferry or the program waits for
 * has reached the device. A small command may start later; its submission
 * no longer pays a flush (0.8 us on NVIDIA, several with a busy queue). */
#define FLUSH_AT_BYTES ((size_t)256 << 10)

/* A command was enqueued: flush it, so that the device starts it now and not
 * at the next blocking call (OpenCL may hold commands on the host until then),
 * and hand its event over as the ticket (where one was asked for). `bytes`:
 * what the command moves, 0 for commands that move nothing (always flushed). */
static ferry_status pushed(ferry_device *dev, cl_command_queue q, cl_event ev, ferry_ticket *out, size_t bytes,
                           const char *what) {
  if (!out && bytes > 0 && bytes < FLUSH_AT_BYTES) return FERRY_OK;
  cl_int err = API->clFlush(q);
  if (err != CL_SUCCESS) {
    if (ev) API->clReleaseEvent(ev);
    return cl_failed(dev, err, "clFlush", false, "after %s", what);
  }
  if (out) *out = (ferry_ticket)(uintptr_t)ev;
  return FERRY_OK;
}

/* A blocking write returns once the source was copied out, which on NVIDIA's
 * driver is before the bytes are on the device: ferry waits for the command
 * itself, so that a write is complete for every queue when it returns. */
static ferry_status enqueue_write(ferry_device *dev, cl_command_queue q, cl_mem mem, size_t off, const void *src,
                                  size_t n) {
  cl_event ev = NULL;
  cl_int err = API->clEnqueueWriteBuffer(q, mem, CL_TRUE, off, n, src, 0, NULL, &ev);
  if (err == CL_SUCCESS) err = wait_event(ev);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clEnqueueWriteBuffer", false, "%zu bytes at offset %zu from host memory at %p", n, off,
                     src);
  return FERRY_OK;
}

static ferry_status enqueue_read(ferry_device *dev, cl_command_queue q, cl_mem mem, size_t off, void *dst, size_t n) {
  cl_event ev = NULL;
  cl_int err = API->clEnqueueReadBuffer(q, mem, CL_TRUE, off, n, dst, 0, NULL, &ev);
  if (err == CL_SUCCESS) err = wait_event(ev);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clEnqueueReadBuffer", false, "%zu bytes at offset %zu to host memory at %p", n, off,
                     dst);
  return FERRY_OK;
}

/* ---- lanes, tickets and gates --------------------------------------------- */

/* An in-order queue of the device's context with `props`; the call that made
 * it (or failed) in *call. */
static cl_command_queue make_queue(cl_device *cd, cl_command_queue_properties props, cl_int *err, const char **call) {
  if (cd->version >= 200 && API->clCreateCommandQueueWithProperties) {
    /* clCreateCommandQueue is deprecated from 2.0 on; a 3.0 driver may drop it. */
    cl_queue_properties list[] = {CL_QUEUE_PROPERTIES, props, 0};
    *call = "clCreateCommandQueueWithProperties";
    return API->clCreateCommandQueueWithProperties(cd->context, cd->id, props ? list : NULL, err);
  }
  *call = "clCreateCommandQueue";
  return API->clCreateCommandQueue(cd->context, cd->id, props, err);
}

static ferry_status cl_lane_create(ferry_device *dev, ferry_lane **out) {
  cl_device *cd = device_of(dev);
  cl_lane *l = calloc(1, sizeof *l);
  if (!l) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for a command queue of %s", dev->label);
  cl_int err = CL_SUCCESS;
  const char *call = "";
  l->queue = make_queue(cd, 0, &err, &call);
  if (err != CL_SUCCESS || !l->queue) {
    if (l->queue) API->clReleaseCommandQueue(l->queue);
    free(l);
    return cl_failed(dev, err != CL_SUCCESS ? err : CL_OUT_OF_RESOURCES, call, true, "an in-order queue");
  }
  pthread_mutex_lock(&cd->lanes_lock);
  l->next = cd->lanes;
  cd->lanes = l;
  pthread_mutex_unlock(&cd->lanes_lock);
  *out = (ferry_lane *)l;
  return FERRY_OK;
}

static void cl_lane_destroy(ferry_device *dev, ferry_lane *lane) {
  cl_device *cd = device_of(dev);
  cl_lane *l = (cl_lane *)lane;
  pthread_mutex_lock(&cd->lanes_lock);
  for (cl_lane **p = &cd->lanes; *p; p = &(*p)->next)
    if (*p == l) {
      *p = l->next;
      break;
    }
  pthread_mutex_unlock(&cd->lanes_lock);
  /* The core's work on it has completed; the program's own (ferry_queue_native)
   * finishes first, as clReleaseCommandQueue would make it. */
  API->clFinish(l->queue);
  API->clReleaseCommandQueue(l->queue);
  if (l->clock) {
    API->clFinish(l->clock);
    API->clReleaseCommandQueue(l->clock);
    API->clReleaseMemObject(l->clock_word);
  }
  free(l);
}

static ferry_status cl_lane_native(ferry_device *dev, ferry_lane *lane, ferry_native *out) {
  out->queue = (uintptr_t)queue_of(dev, lane);
  out->queue_family = 0;
  return FERRY_OK;
}

/* The lane's clock (made at its first use); NULL where the device has no
 * profiling, or with *err where making it failed. */
static cl_command_queue lane_clock(ferry_device *dev, cl_lane *l, cl_int *err, const char **call) {
  cl_device *cd = device_of(dev);
  *err = CL_SUCCESS;
  if (!cd->clock_properties) return NULL;
  pthread_mutex_lock(&cd->lanes_lock);
  if (!l->clock) {
    cl_command_queue q = make_queue(cd, cd->clock_properties, err, call);
    cl_mem word = NULL;
    if (*err == CL_SUCCESS && q) {
      word = API->clCreateBuffer(cd->context, CL_MEM_READ_WRITE, 4, NULL, err);
      *call = "clCreateBuffer";
    }
    if (*err == CL_SUCCESS && q && word) {
      l->clock = q;
      l->clock_word = word;
    } else {
      if (word) API->clReleaseMemObject(word);
      if (q) API->clReleaseCommandQueue(q);
      if (*err == CL_SUCCESS) *err = CL_OUT_OF_RESOURCES;
    }
  }
  cl_command_queue clock = l->clock;
  pthread_mutex_unlock(&cd->lanes_lock);
  return clock;
}

/* A marker of everything pushed on the lane so far. With `timing` (and a
 * lane), a fill of the clock's word on the lane's clock waits for it, and its
 * event is the ticket: its CL_PROFILING_COMMAND_END is when the lane's work
 * before it completed, on the device's clock. Not a marker there: on NVIDIA's
 * OpenCL a marker that waits for another queue's event does not carry the
 * waited-for time in its profiling (two such markers around a 19.5 ms write
 * were -20.7 ms apart), while a command that moves bytes runs once the wait is
 * over. */
static ferry_status cl_marker(ferry_device *dev, ferry_lane *lane, bool timing, ferry_ticket *out) {
  if (!out) return FERRY_OK;
  *out = 0;
  cl_command_queue q = queue_of(dev, lane);
  cl_event ev = NULL;
  cl_int err = API->clEnqueueMarkerWithWaitList(q, 0, NULL, &ev);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clEnqueueMarkerWithWaitList", false, "a marker of the queue's work");
  const char *call = "";
  cl_lane *l = (cl_lane *)lane;
  cl_command_queue clock = timing && lane ? lane_clock(dev, l, &err, &call) : NULL;
  if (err != CL_SUCCESS) {
    API->clReleaseEvent(ev);
    return cl_failed(dev, err, call, true, "an in-order queue with profiling and its word (a queue's clock)");
  }
  if (!clock) return pushed(dev, q, ev, out, 0, "a marker");
  ferry_status st = pushed(dev, q, NULL, NULL, 0, "a marker");
  cl_event timed = NULL;
  static const cl_uint zero = 0;
  if (st == FERRY_OK && (err = API->clEnqueueFillBuffer(clock, l->clock_word, &zero, sizeof zero, 0, sizeof zero, 1,
                                                        &ev, &timed)) != CL_SUCCESS)
    st = cl_failed(dev, err, "clEnqueueFillBuffer", false, "a fill of a queue's clock word");
  API->clReleaseEvent(ev);
  return st == FERRY_OK ? pushed(dev, clock, timed, out, 0, "a fill on a queue's clock") : st;
}

/* A barrier on the lane waiting for `ticket`. Only an event of this device's
 * own context can be waited for by its queues (CL_INVALID_CONTEXT otherwise);
 * another device's is FERRY_ERROR_UNSUPPORTED, and the core waits on the host. */
static ferry_status cl_lane_wait(ferry_device *dev, ferry_lane *lane, ferry_device *ticket_dev, ferry_ticket ticket) {
  if (ticket_dev->backend != dev->backend) return FERRY_ERROR_UNSUPPORTED;
  if (ticket == 0) return FERRY_OK;
  cl_event ev = event_of(ticket);
  cl_context context = NULL;
  cl_int err = API->clGetEventInfo(ev, CL_EVENT_CONTEXT, sizeof context, &context, NULL);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clGetEventInfo(CL_EVENT_CONTEXT)", false, "the context of an event of %s",
                     ticket_dev->label);
  if (context != device_of(dev)->context) return FERRY_ERROR_UNSUPPORTED;
  cl_command_queue q = queue_of(dev, lane);
  err = API->clEnqueueBarrierWithWaitList(q, 1, &ev, NULL);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clEnqueueBarrierWithWaitList", false, "a wait for an event of %s", ticket_dev->label);
  return pushed(dev, q, NULL, NULL, 0, "a wait for another queue's event");
}

static ferry_status cl_ticket_query(ferry_device *dev, ferry_ticket ticket) {
  cl_int status = CL_QUEUED;
  cl_int err = API->clGetEventInfo(event_of(ticket), CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clGetEventInfo(CL_EVENT_COMMAND_EXECUTION_STATUS)", false, "asking after a command");
  if (status == CL_COMPLETE) return FERRY_OK;
  if (status > 0) return FERRY_NOT_READY;
  return cl_failed(dev, status, "a command's execution status (CL_EVENT_COMMAND_EXECUTION_STATUS)", false,
                   "a command ferry queued failed as it ran");
}

static ferry_status cl_ticket_wait(ferry_device *dev, ferry_ticket ticket) {
  cl_int err = wait_for(event_of(ticket));
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clWaitForEvents", false, "waiting for a command ferry queued (its execution status)");
  return FERRY_OK;
}

static void cl_ticket_release(ferry_device *dev, ferry_ticket ticket) {
  (void)dev;
  API->clReleaseEvent(event_of(ticket));
}

/* From the commands' CL_PROFILING_COMMAND_END: both markers end when the work
 * before them has, on the device's clock. FERRY_ERROR_UNSUPPORTED where the
 * driver keeps no profiling for markers (or the lane has none). */
static ferry_status cl_ticket_elapsed(ferry_device *dev, ferry_ticket start, ferry_ticket stop, double *out_ms) {
  cl_ulong t[2] = {0, 0};
  ferry_ticket which[2] = {start, stop};
  for (int i = 0; i < 2; i++) {
    cl_int err = API->clGetEventProfilingInfo(event_of(which[i]), CL_PROFILING_COMMAND_END, sizeof t[i], &t[i], NULL);
    if (err == CL_PROFILING_INFO_NOT_AVAILABLE) return FERRY_ERROR_UNSUPPORTED;
    if (err != CL_SUCCESS)
      return cl_failed(dev, err, "clGetEventProfilingInfo(CL_PROFILING_COMMAND_END)", false, "the %s marker",
                       i ? "stop" : "start");
  }
  *out_ms = (double)(int64_t)(t[1] - t[0]) / 1e6;
  return FERRY_OK;
}

/* A gate: the user events lanes wait for, one per value pushed and not yet
 * raised, in the order pushed (values the core pushes on a gate only grow, but
 * two lanes may push values in any order). */
typedef struct gate_wait {
  uint64_t value;
  cl_event event; /* a user event of the device's context */
} gate_wait;

typedef struct cl_gate {
  pthread_mutex_t lock;
  uint64_t raised; /* every value up to this one is open */
  gate_wait *waits;
  size_t count, capacity;
} cl_gate;

static ferry_status cl_gate_create(ferry_device *dev, ferry_gate **out) {
  cl_gate *g = calloc(1, sizeof *g);
  if (!g) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for a gate on %s", dev->label);
  pthread_mutex_init(&g->lock, NULL);
  *out = (ferry_gate *)g;
  return FERRY_OK;
}

/* The user event for `value` (the gate's lock held): the one pushed already, or
 * a new one (*fresh). NULL with *err on failure. */
static cl_event gate_event(ferry_device *dev, cl_gate *g, uint64_t value, cl_int *err, bool *fresh) {
  *fresh = false;
  for (size_t i = 0; i < g->count; i++)
    if (g->waits[i].value == value) return g->waits[i].event;
  *fresh = true;
  if (g->count == g->capacity) {
    size_t cap = g->capacity ? g->capacity * 2 : 4;
    gate_wait *grown = realloc(g->waits, cap * sizeof *grown);
    if (!grown) {
      *err = CL_OUT_OF_HOST_MEMORY;
      return NULL;
    }
    g->waits = grown;
    g->capacity = cap;
  }
  cl_event ev = API->clCreateUserEvent(device_of(dev)->context, err);
  if (*err != CL_SUCCESS || !ev) {
    if (*err == CL_SUCCESS) *err = CL_OUT_OF_RESOURCES;
    return NULL;
  }
  g->waits[g->count++] = (gate_wait){.value = value, .event = ev};
  return ev;
}

/* Takes the user event for `value` out of the gate (the lock held). */
static void gate_forget(cl_gate *g, cl_event ev) {
  for (size_t i = 0; i < g->count; i++)
    if (g->waits[i].event == ev) {
      g->waits[i] = g->waits[--g->count];
      return;
    }
}

/* The lock is held across the barrier's enqueue: a raise meanwhile would
 * complete and release the user event the barrier is being made to wait for. */
static ferry_status cl_gate_push(ferry_device *dev, ferry_lane *lane, ferry_gate *gate, uint64_t value) {
  cl_gate *g = (cl_gate *)gate;
  cl_command_queue q = queue_of(dev, lane);
  pthread_mutex_lock(&g->lock);
  if (value <= g->raised) { /* open already: nothing to wait for */
    pthread_mutex_unlock(&g->lock);
    return FERRY_OK;
  }
  cl_int err = CL_SUCCESS;
  bool fresh = false;
  cl_event ev = gate_event(dev, g, value, &err, &fresh);
  const char *call = "clCreateUserEvent";
  if (ev) {
    call = "clEnqueueBarrierWithWaitList";
    err = API->clEnqueueBarrierWithWaitList(q, 1, &ev, NULL);
    if (err != CL_SUCCESS && fresh) {
      gate_forget(g, ev);
      API->clReleaseEvent(ev);
    }
  }
  pthread_mutex_unlock(&g->lock);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, call, false, "a queue waiting for the host (a gate at %llu)", (unsigned long long)value);
  return pushed(dev, q, NULL, NULL, 0, "a wait for the host");
}

/* Completes the user events of every value up to `value`: the lanes waiting
 * for them go on. */
static ferry_status cl_gate_raise(ferry_device *dev, ferry_gate *gate, uint64_t value) {
  cl_gate *g = (cl_gate *)gate;
  ferry_status st = FERRY_OK;
  pthread_mutex_lock(&g->lock);
  if (value > g->raised) g->raised = value;
  for (size_t i = 0; i < g->count;) {
    if (g->waits[i].value > value) {
      i++;
      continue;
    }
    cl_event ev = g->waits[i].event;
    g->waits[i] = g->waits[--g->count];
    cl_int err = API->clSetUserEventStatus(ev, CL_COMPLETE);
    if (err != CL_SUCCESS && st == FERRY_OK)
      st = cl_failed(dev, err, "clSetUserEventStatus(CL_COMPLETE)", false, "opening a gate at %llu",
                     (unsigned long long)value);
    API->clReleaseEvent(ev);
  }
  pthread_mutex_unlock(&g->lock);
  return st;
}

/* The core destroys a gate once it raised every value pushed on it; a user
 * event left (a push the core gave up on) is completed, so that no queue waits
 * for it forever. */
static void cl_gate_destroy(ferry_device *dev, ferry_gate *gate) {
  cl_gate *g = (cl_gate *)gate;
  ferry_error_scope quiet = ferry__first_failure_begin(true); /* nobody to report to: keep the thread's sentence */
  (void)cl_gate_raise(dev, gate, UINT64_MAX);
  ferry__first_failure_end(quiet);
  free(g->waits);
  pthread_mutex_destroy(&g->lock);
  free(g);
}

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

/* ---- transfers and commands on lanes ----------------------------------------- */

/* The synchronous transfers, on the lane, complete on return. FERRY_ERROR_UNSUPPORTED
 * (no message) for host memory inside a host-pointer buffer's own array (not
 * the buffer's own range: the core synchronises that itself): the core moves
 * it through a copy of the whole range. */
static ferry_status cl_write(ferry_device *dev, ferry_lane *lane, ferry_mem *dst, size_t off, const void *src,
                             size_t n) {
  if (in_own_array(dst, src, n)) return FERRY_ERROR_UNSUPPORTED;
  return enqueue_write(dev, queue_of(dev, lane), mem_of(dst), off, src, n);
}

static ferry_status cl_read(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t off, void *dst,
                            size_t n) {
  if (in_own_array(src, dst, n)) return FERRY_ERROR_UNSUPPORTED;
  return enqueue_read(dev, queue_of(dev, lane), mem_of(src), off, dst, n);
}

/* Non-blocking transfers from and to pageable memory, for the queues of CPU
 * devices that do not stage: PoCL returns at once and its own threads copy
 * when the command runs. Not offered on GPUs, where a driver's non-blocking
 * write from pageable memory may block the caller while it stages the bytes
 * (the core stages through pinned memory there instead). */
static ferry_status transfer_start(ferry_device *dev, ferry_lane *lane, bool write, ferry_mem *mem, size_t off,
                                   void *host, size_t n, ferry_ticket *out, const char *kind) {
  cl_command_queue q = queue_of(dev, lane);
  cl_event ev = NULL, *evp = out ? &ev : NULL;
  if (out) *out = 0;
  cl_int err = write ? API->clEnqueueWriteBuffer(q, mem_of(mem), CL_FALSE, off, n, host, 0, NULL, evp)
                     : API->clEnqueueReadBuffer(q, mem_of(mem), CL_FALSE, off, n, host, 0, NULL, evp);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, write ? "clEnqueueWriteBuffer" : "clEnqueueReadBuffer", false,
                     "%zu bytes at offset %zu %s %s host memory at %p, not blocking", n, off, write ? "from" : "to",
                     kind, host);
  return pushed(dev, q, ev, out, n, write ? "a write" : "a read");
}

static ferry_status cl_write_start(ferry_device *dev, ferry_lane *lane, ferry_mem *dst, size_t off, const void *src,
                                   size_t n, ferry_ticket *out) {
  if (in_own_array(dst, src, n)) return FERRY_ERROR_UNSUPPORTED;
  return transfer_start(dev, lane, true, dst, off, (void *)(uintptr_t)src, n, out, "ordinary");
}

static ferry_status cl_read_start(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t off, void *dst,
                                  size_t n, ferry_ticket *out) {
  if (in_own_array(src, dst, n)) return FERRY_ERROR_UNSUPPORTED;
  /* The driver reads from the buffer without changing it; one pointer serves both ways. */
  return transfer_start(dev, lane, false, (ferry_mem *)(uintptr_t)src, off, dst, n, out, "ordinary");
}

/* A non-blocking write or read from the pinned range; its event is the ticket. */
static ferry_status cl_dma_start(ferry_device *dev, ferry_lane *lane, ferry_dma_dir dir, ferry_mem *mem, size_t off,
                                 const ferry_pinned *host, size_t n, ferry_ticket *out) {
  if (out) *out = 0;
  if (in_own_array(mem, host->host, n))
    return ferry__fail(
        FERRY_ERROR_BACKEND,
        "pinned memory at %p lies in the array of the host-pointer buffer it is to be copied with, on %s", host->host,
        dev->label);
  return transfer_start(dev, lane, dir == FERRY_DMA_TO_DEVICE, mem, off, host->host, n, out, "pinned");
}

static ferry_status cl_copy_start(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t so, ferry_mem *dst,
                                  size_t doff, size_t n, ferry_ticket *out) {
  cl_command_queue q = queue_of(dev, lane);
  cl_event ev = NULL;
  if (out) *out = 0;
  cl_int err = API->clEnqueueCopyBuffer(q, mem_of(src), mem_of(dst), so, doff, n, 0, NULL, out ? &ev : NULL);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clEnqueueCopyBuffer", false, "%zu bytes from offset %zu to offset %zu", n, so, doff);
  return pushed(dev, q, ev, out, n, "a copy");
}

/* clEnqueueFillBuffer takes patterns of 1 to 128 bytes, at offsets and sizes
 * that are multiples of the pattern's: every fill the core asks for. */
static ferry_status cl_fill_start(ferry_device *dev, ferry_lane *lane, ferry_mem *mem, size_t off, size_t n,
                                  uint32_t pattern, unsigned pattern_size, ferry_ticket *out) {
  cl_command_queue q = queue_of(dev, lane);
  unsigned char bytes[4];
  memcpy(bytes, &pattern, sizeof bytes); /* the pattern as it lies in memory */
  cl_event ev = NULL;
  if (out) *out = 0;
  cl_int err = API->clEnqueueFillBuffer(q, mem_of(mem), bytes, pattern_size, off, n, 0, NULL, out ? &ev : NULL);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clEnqueueFillBuffer", false, "a %u-byte pattern over %zu bytes at offset %zu",
                     pattern_size, n, off);
  return pushed(dev, q, ev, out, n, "a fill");
}

/* ---- host-pointer buffers -------------------------------------------------- */

/* The array gets the buffer's content: a read into the buffer's own host_ptr,
 * which OpenCL defines for CL_MEM_USE_HOST_PTR buffers (the work on the buffer
 * before it complete, none during it: the core's order gives both). */
static ferry_status array_take(ferry_device *dev, cl_mem mem, host_buf *hb) {
  cl_event ev = NULL;
  cl_int err = API->clEnqueueReadBuffer(device_of(dev)->queue, mem, CL_TRUE, 0, hb->bytes, hb->host, 0, NULL, &ev);
  if (err == CL_SUCCESS) err = wait_event(ev);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clEnqueueReadBuffer", false,
                     "giving the %zu-byte array at %p the buffer's content (a read into the array itself)", hb->bytes,
                     (void *)hb->host);
  return FERRY_OK;
}

/* The buffer gets the array's content: a write from the buffer's own host_ptr. */
static ferry_status array_give(ferry_device *dev, cl_mem mem, host_buf *hb) {
  cl_event ev = NULL;
  cl_int err = API->clEnqueueWriteBuffer(device_of(dev)->queue, mem, CL_TRUE, 0, hb->bytes, hb->host, 0, NULL, &ev);
  if (err == CL_SUCCESS) err = wait_event(ev);
  if (err != CL_SUCCESS)
    return cl_failed(dev, err, "clEnqueueWriteBuffer", false,
                     "handing the %zu-byte array at %p to the device (a write from the array itself)", hb->bytes,
                     (void *)hb->host);
  return FERRY_OK;
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
  /* The buffer starts with the array's content, and the host holds the array. */
  *hb = (host_buf){.host = host, .bytes = bytes, .host_owned = true};
  pthread_mutex_init(&hb->lock, NULL);
  *out = (ferry_mem){.handle = (uintptr_t)mem, .impl = hb, .bytes = bytes, .flags = FERRY_MEM_HOST_PTR};
  *out_refusal = FERRY_REFUSAL_NONE;
  return FERRY_OK;
}

/* To the host: always the buffer's content (commands may have written it
 * since, on any lane). To the device: the array's content, where the host had
 * taken it; a second handover in a row would overwrite the device's writes with
 * an array the host did not have. */
static ferry_status cl_host_ptr_sync(ferry_device *dev, ferry_mem *mem, ferry_sync_dir dir) {
  host_buf *hb = mem->impl;
  ferry_status st = FERRY_OK;
  pthread_mutex_lock(&hb->lock);
  if (dir == FERRY_SYNC_TO_HOST) {
    if ((st = array_take(dev, mem_of(mem), hb)) == FERRY_OK) hb->host_owned = true;
  } else if (hb->host_owned) {
    if ((st = array_give(dev, mem_of(mem), hb)) == FERRY_OK) hb->host_owned = false;
  }
  pthread_mutex_unlock(&hb->lock);
  return st;
}

/* The array keeps the buffer's last content, as ferry_device_to_host would
 * give it; then the buffer goes. */
static ferry_status cl_host_ptr_release(ferry_device *dev, ferry_mem *mem) {
  host_buf *hb = mem->impl;
  pthread_mutex_lock(&hb->lock);
  ferry_status st = array_take(dev, mem_of(mem), hb);
  cl_int err = API->clReleaseMemObject(mem_of(mem)); /* whatever the read did: the first failure is the one told */
  if (err != CL_SUCCESS && st == FERRY_OK)
    st = cl_failed(dev, err, "clReleaseMemObject", false, "releasing the %zu-byte buffer over the array at %p",
                   hb->bytes, (void *)hb->host);
  pthread_mutex_unlock(&hb->lock);
  pthread_mutex_destroy(&hb->lock);
  free(hb);
  return st;
}

/* Is `handle` an object of the driver behind this device's context, as far as
 * can be told without a fault? Under the ICD loader every OpenCL object begins
 * with its platform's dispatch table, the same for all objects of one driver,
 * and the loader calls through it: a handle that is not an object (a host
 * address, a small number) crashes the first driver call. So the handle's first
 * word must be readable and equal the context's. */
static bool cl_object_of_driver(const cl_device *cd, uintptr_t handle) {
  void *theirs = NULL, *ours = NULL;
  return ferry__read_safely((const void *)handle, &theirs, sizeof theirs) &&
         ferry__read_safely((const void *)cd->context, &ours, sizeof ours) && theirs == ours;
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
  *out_refusal = FERRY_REFUSAL_DEVICE;
  if (!cl_object_of_driver(cd, data))
    return ferry__fail(FERRY_ERROR_REFUSED,
                       "%p is not a cl_mem of %s's driver: it does not begin with the driver's dispatch table, as "
                       "every OpenCL object does (a host address, or a number that is no handle?), and the driver "
                       "would crash on it",
                       (void *)mem, dev->label);
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

/* Waits for the device: its own queue (the program's work through
 * ferry_device_native) and every lane (the program's through
 * ferry_queue_native, and the synchronous calls of other threads). */
static ferry_status cl_synchronize(ferry_device *dev) {
  cl_device *cd = device_of(dev);
  cl_int err = API->clFinish(cd->queue);
  if (err != CL_SUCCESS) return cl_failed(dev, err, "clFinish", false, "waiting for the device's queue");
  pthread_mutex_lock(&cd->lanes_lock);
  size_t n = 0;
  for (cl_lane *l = cd->lanes; l; l = l->next)
    n++;
  cl_command_queue *queues = n ? malloc(n * sizeof *queues) : NULL;
  size_t got = 0;
  if (queues)
    for (cl_lane *l = cd->lanes; l; l = l->next)
      if (API->clRetainCommandQueue(l->queue) == CL_SUCCESS) queues[got++] = l->queue; /* a lane may go meanwhile */
  pthread_mutex_unlock(&cd->lanes_lock);
  if (n && !queues)
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory to list the queues of %s", dev->label);
  ferry_status st = FERRY_OK;
  for (size_t i = 0; i < got; i++) {
    err = API->clFinish(queues[i]);
    if (err != CL_SUCCESS && st == FERRY_OK)
      st = cl_failed(dev, err, "clFinish", false, "waiting for one of the device's %zu command queues", got);
    API->clReleaseCommandQueue(queues[i]);
  }
  free(queues);
  return st;
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

/* What clinfo shows first (OpenCL 1.0 names, values from CL/cl.h). */
#define INFO_MAX_WORK_GROUP_SIZE 0x1004
#define INFO_MAX_CLOCK_FREQUENCY 0x100C
#define INFO_LOCAL_MEM_TYPE      0x1022
#define INFO_LOCAL_MEM_SIZE      0x1023

static ferry_status cl_driver_info(ferry_device *dev, ferry_driver_info *out) {
  cl_device *cd = device_of(dev);
  cl_uint units = 0, clock = 0, local_type = 0;
  size_t group = 0;
  cl_ulong local = 0;
  if (API->clGetDeviceInfo(cd->id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL) == CL_SUCCESS)
    out->compute_units = units;
  if (API->clGetDeviceInfo(cd->id, INFO_MAX_CLOCK_FREQUENCY, sizeof clock, &clock, NULL) == CL_SUCCESS)
    out->clock_mhz = clock;
  if (API->clGetDeviceInfo(cd->id, INFO_MAX_WORK_GROUP_SIZE, sizeof group, &group, NULL) == CL_SUCCESS)
    out->max_work_group_size = group;
  if (API->clGetDeviceInfo(cd->id, INFO_LOCAL_MEM_SIZE, sizeof local, &local, NULL) == CL_SUCCESS)
    out->local_memory = local;
  if (API->clGetDeviceInfo(cd->id, INFO_LOCAL_MEM_TYPE, sizeof local_type, &local_type, NULL) == CL_SUCCESS &&
      (local_type == 1 || local_type == 2)) /* CL_LOCAL, CL_GLOBAL */
    out->local_memory_type = local_type;
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
  pthread_mutex_destroy(&cd->lanes_lock);
  free(cd);
}

/* Every device's operations; CPU devices that do not stage add the driver's
 * non-blocking transfers from pageable memory (CL_OPS_DIRECT). */
#define CL_OPS_COMMON                                                                                                  \
  .alloc = cl_alloc, .free = cl_free, .write = cl_write, .read = cl_read, .copy_start = cl_copy_start,                 \
  .fill_start = cl_fill_start, .pin_alloc = cl_pin_alloc, .pin_register = cl_pin_register,                             \
  .pin_release = cl_pin_release, .dma_start = cl_dma_start, .lane_create = cl_lane_create,                             \
  .lane_destroy = cl_lane_destroy, .lane_native = cl_lane_native, .marker = cl_marker, .lane_wait = cl_lane_wait,      \
  .gate_create = cl_gate_create, .gate_push = cl_gate_push, .gate_raise = cl_gate_raise,                               \
  .gate_destroy = cl_gate_destroy, .ticket_query = cl_ticket_query, .ticket_wait = cl_ticket_wait,                     \
  .ticket_release = cl_ticket_release, .ticket_elapsed = cl_ticket_elapsed, .host_ptr_import = cl_host_ptr_import,     \
  .host_ptr_sync = cl_host_ptr_sync, .host_ptr_release = cl_host_ptr_release, .synchronize = cl_synchronize,           \
  .native = cl_native, .free_memory = cl_free_memory, .driver_info = cl_driver_info,                                   \
  .foreign_import = cl_foreign_import, .destroy = cl_destroy

/* A map on a CPU device with host-unified memory is the buffer's own memory (PoCL:
 * 26 us to map and 75 us to unmap 64 MiB, against 3.8 ms to read it); elsewhere
 * a map may be a copy, which ferry does better itself. */
static ferry_status cl_map(ferry_device *dev, ferry_mem *mem, size_t off, size_t n, bool write, void **out) {
  cl_device *cd = device_of(dev);
  if (!cd->is_cpu || !cd->unified)
    return ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s: mapping would copy (not a CPU with host-unified memory)",
                       dev->label);
  cl_int err = CL_SUCCESS;
  void *p = API->clEnqueueMapBuffer(cd->queue, mem_of(mem), CL_TRUE, write ? CL_MAP_READ | CL_MAP_WRITE : CL_MAP_READ,
                                    off, n, 0, NULL, NULL, &err);
  if (err != CL_SUCCESS || !p)
    return cl_failed(dev, err != CL_SUCCESS ? err : CL_INVALID_VALUE, "clEnqueueMapBuffer", false,
                     "%zu bytes at offset %zu", n, off);
  *out = p;
  return FERRY_OK;
}

static ferry_status cl_unmap(ferry_device *dev, ferry_mem *mem, void *ptr) {
  cl_event ev = NULL;
  cl_int err = API->clEnqueueUnmapMemObject(device_of(dev)->queue, mem_of(mem), ptr, 0, NULL, &ev);
  if (err == CL_SUCCESS) err = wait_event(ev);
  if (err != CL_SUCCESS) return cl_failed(dev, err, "clEnqueueUnmapMemObject", false, "the map at %p", ptr);
  return FERRY_OK;
}

static const ferry_device_ops cl_ops = {CL_OPS_COMMON};
static const ferry_device_ops cl_ops_direct = {CL_OPS_COMMON, .write_start = cl_write_start,
                                               .read_start = cl_read_start, .map = cl_map, .unmap = cl_unmap};

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
  cl_bool unified = CL_FALSE;
  cd->unified = API->clGetDeviceInfo(id, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL) == CL_SUCCESS &&
                unified == CL_TRUE;
  cd->total_memory = global;
  cd->max_allocation = max_alloc;
  char *name = device_string(id, CL_DEVICE_NAME);
  snprintf(cd->name, sizeof cd->name, "%s (%s)", name && *name ? name : "unnamed OpenCL device", platform_name);
  free(name);
  /* "OpenCL <major>.<minor> <vendor's words>"; lanes are made of 1.2's markers,
   * barriers and fills with wait lists. */
  char *version = device_string(id, CL_DEVICE_VERSION);
  int major = 0, minor = 0;
  if (!version || sscanf(version, "OpenCL %d.%d", &major, &minor) != 2) major = minor = 0;
  cd->version = major * 100 + minor;
  if (cd->version < 102) {
    ferry__fail(FERRY_ERROR_UNSUPPORTED,
                "%s says \"%s\": ferry needs OpenCL 1.2 or later (markers, barriers and fills)", cd->name,
                version ? version : "no CL_DEVICE_VERSION");
    free(version);
    free(cd);
    return FERRY_ERROR_UNSUPPORTED;
  }
  free(version);
  /* Profiling where the device has it (every conformant one does), on the
   * lanes' clocks only. */
  cl_command_queue_properties queue_props = 0;
  if (API->clGetDeviceInfo(id, CL_DEVICE_QUEUE_PROPERTIES, sizeof queue_props, &queue_props, NULL) != CL_SUCCESS)
    queue_props = 0;
  cd->clock_properties = queue_props & CL_QUEUE_PROFILING_ENABLE;
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
  const char *call = "";
  cd->queue = make_queue(cd, 0, &err, &call);
  if (err != CL_SUCCESS || !cd->queue) {
    ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s (%d) from %s for %s", ferry__opencl_error_name(err), (int)err, call,
                cd->name);
    API->clReleaseContext(cd->context);
    free(cd);
    return FERRY_ERROR_UNSUPPORTED;
  }
  pthread_mutex_init(&cd->lanes_lock, NULL);
  size_t align = align_bits >= 8 ? align_bits / 8 : 1;
  if (align & (align - 1)) { /* not a power of two: the next one up */
    size_t p = 1;
    while (p < align)
      p <<= 1;
    align = p;
  }
  cd->base_align = align < 64 ? 64 : align;
  ferry_device_desc desc = {
      .ops = cd->is_cpu && !cd->stage ? &cl_ops_direct : &cl_ops,
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
    ferry_error_scope cleanup = ferry__first_failure_begin(true); /* the sentence of the failed add stays */
    API->clReleaseCommandQueue(cd->queue);
    API->clReleaseContext(cd->context);
    pthread_mutex_destroy(&cd->lanes_lock);
    free(cd);
    ferry__first_failure_end(cleanup);
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
