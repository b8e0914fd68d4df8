/*
 * A fake CUDA driver for testing ferry's cuda backend without a GPU: the driver
 * API functions the backend, its tests and its benchmark call, built as
 * libcuda.so.1 in the build tree and loaded through FERRY_CUDA_LIBRARY.
 *
 * "Device memory" is host memory (a CUdeviceptr is a host address), but the
 * fake keeps the driver's rules where ferry could break them:
 *  - each primary context has a queue worked by a thread of its own: copies
 *    that the real driver runs asynchronously (cuMemcpyDtoD, the *Async calls,
 *    cuMemcpyPeer, a cuMemcpyHtoD from pageable memory into memory without
 *    SYNC_MEMOPS) complete later, after FAKE_CUDA_DELAY_US, so a missing wait
 *    shows up as wrong bytes or as a sanitizer report;
 *  - calls that need a current context fail without one, and memory must
 *    belong to the current context's device;
 *  - pointers are checked against the live allocations and registrations, with
 *    the driver's error codes (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED on an
 *    overlapping cuMemHostRegister, CUDA_ERROR_OUT_OF_MEMORY past FAKE_CUDA_MEM);
 *  - a sticky error (fake_cuda_make_sticky, or an emulated kernel that reads
 *    out of bounds) fails every later call on that context.
 * fake_cuda.h lists the environment variables and the test-only entry points.
 * It is a test double, not a replacement for a run on a GPU.
 */
#include "fake_cuda.h"

#include "backends/cuda/cuda_api.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAKE_API       __attribute__((visibility("default")))
#define MAX_DEVICES    16
#define MAX_INJECTIONS 16
#define CTX_STACK      16

#define FAKE_ERROR_CONTEXT_IS_DESTROYED 709

/* ---- configuration ------------------------------------------------------------- */

static struct {
  int devices;
  unsigned long long mem;
  bool peer;
  int device_base;
  int init_error;
  long delay_us;
  bool kernels, host_misalign, no_sync_memops, strict;
} cfg;

static unsigned long long env_bytes(const char *name, unsigned long long fallback) {
  const char *s = getenv(name);
  if (!s || !*s) return fallback;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return fallback;
  switch (toupper((unsigned char)*end)) {
  case 'K': return v << 10;
  case 'M': return v << 20;
  case 'G': return v << 30;
  default: return v;
  }
}

static long env_long(const char *name, long fallback) {
  const char *s = getenv(name);
  return s && *s ? strtol(s, NULL, 0) : fallback;
}

/* ---- the calls' bookkeeping ------------------------------------------------------ */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* everything below but the queues */
static _Atomic bool initialized;
static fake_cuda_counts counts;

static struct {
  char function[64];
  int result, skip, times;
} injections[MAX_INJECTIONS];
static _Atomic int injection_count;

static void misuse(const char *function, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void misuse(const char *function, const char *fmt, ...) {
  pthread_mutex_lock(&lock);
  counts.misuse++;
  pthread_mutex_unlock(&lock);
  if (!cfg.strict) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fake_cuda: %s: ", function);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* A result injected for this call, or 0. */
static cu_result injected(const char *function) {
  if (atomic_load(&injection_count) == 0) return 0;
  cu_result r = 0;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_INJECTIONS; i++) {
    if (injections[i].times <= 0 || strcmp(injections[i].function, function) != 0) continue;
    if (injections[i].skip > 0) {
      injections[i].skip--;
      continue;
    }
    r = injections[i].result;
    if (--injections[i].times == 0) atomic_fetch_sub(&injection_count, 1);
    break;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

#define INJECT(name)                                                                                                   \
  do {                                                                                                                 \
    cu_result inj_ = injected(name);                                                                                   \
    if (inj_) return inj_;                                                                                             \
  } while (0)

/* ---- contexts and their queues ----------------------------------------------------- */

typedef enum op_kind { OP_COPY, OP_INCREMENT } op_kind;

typedef struct op {
  struct op *next;
  op_kind kind;
  void *dst;
  const void *src;
  size_t n;
  void *owned; /* freed after the operation (a pageable copy's staging) */
  /* OP_INCREMENT */
  int32_t *data;
  unsigned count, grid, block;
  unsigned long long seq;
} op;

typedef struct fake_ctx {
  int ordinal;
  _Atomic int refs;
  _Atomic cu_result sticky;
  bool peer_enabled[MAX_DEVICES];
  unsigned long long used; /* bytes of device memory */
  /* the queue */
  pthread_mutex_t qlock;
  pthread_cond_t qwake, qdone;
  op *head, *tail;
  unsigned long long submitted, completed;
  bool stop;
  _Atomic bool running;
  pthread_t worker;
} fake_ctx;

static fake_ctx contexts[MAX_DEVICES];

static _Thread_local fake_ctx *ctx_stack[CTX_STACK];
static _Thread_local int ctx_depth;

static fake_ctx *current_ctx(void) { return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL; }

static void sleep_us(long us) {
  if (us <= 0) return;
  struct timespec t = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
  nanosleep(&t, NULL);
}

static void run_op(op *o) {
  switch (o->kind) {
  case OP_COPY: memmove(o->dst, o->src, o->n); break;
  case OP_INCREMENT:
    for (unsigned b = 0; b < o->grid; b++)
      for (unsigned t = 0; t < o->block; t++) {
        unsigned long long i = (unsigned long long)b * o->block + t;
        if (i < o->count) o->data[i] += 1;
      }
    break;
  }
  free(o->owned);
}

static void *worker_main(void *arg) {
  fake_ctx *c = arg;
  pthread_mutex_lock(&c->qlock);
  for (;;) {
    while (!c->head && !c->stop)
      pthread_cond_wait(&c->qwake, &c->qlock);
    if (!c->head && c->stop) break;
    op *o = c->head;
    pthread_mutex_unlock(&c->qlock);
    sleep_us(cfg.delay_us);
    run_op(o);
    pthread_mutex_lock(&c->qlock);
    c->head = o->next;
    if (!c->head) c->tail = NULL;
    c->completed = o->seq;
    free(o);
    pthread_cond_broadcast(&c->qdone);
  }
  pthread_mutex_unlock(&c->qlock);
  return NULL;
}

/* Queues an operation; returns its sequence number (0 when out of memory). */
static unsigned long long enqueue(fake_ctx *c, const op *proto) {
  op *o = malloc(sizeof *o);
  if (!o) return 0;
  *o = *proto;
  o->next = NULL;
  pthread_mutex_lock(&c->qlock);
  unsigned long long seq = o->seq = ++c->submitted;
  if (c->tail)
    c->tail->next = o;
  else
    c->head = o;
  c->tail = o;
  pthread_cond_signal(&c->qwake);
  pthread_mutex_unlock(&c->qlock); /* from here on the worker may have freed o */
  return seq;
}

static unsigned long long submitted_now(fake_ctx *c) {
  pthread_mutex_lock(&c->qlock);
  unsigned long long s = c->submitted;
  pthread_mutex_unlock(&c->qlock);
  return s;
}

static void wait_seq(fake_ctx *c, unsigned long long seq) {
  pthread_mutex_lock(&c->qlock);
  while (c->completed < seq)
    pthread_cond_wait(&c->qdone, &c->qlock);
  pthread_mutex_unlock(&c->qlock);
}

static void drain(fake_ctx *c) { wait_seq(c, submitted_now(c)); }

static void drain_all(void) {
  for (int i = 0; i < MAX_DEVICES; i++)
    if (contexts[i].running) drain(&contexts[i]);
}

/* ---- memory regions ---------------------------------------------------------------- */

typedef enum region_kind { R_DEVICE, R_PINNED, R_REGISTERED } region_kind;

typedef struct region {
  region_kind kind;
  uintptr_t start;
  size_t size;
  void *base; /* what to free */
  fake_ctx *ctx;
  bool sync_memops;
} region;

static region *regions;
static size_t region_count, region_capacity;

/* With `lock` held: the region holding [p, p + n), or NULL. */
static region *find_region(uintptr_t p, size_t n) {
  for (size_t i = 0; i < region_count; i++) {
    region *r = &regions[i];
    if (p >= r->start && p - r->start < r->size && n <= r->size - (p - r->start)) return r;
  }
  return NULL;
}

static bool add_region(region r) {
  if (region_count == region_capacity) {
    size_t cap = region_capacity ? region_capacity * 2 : 64;
    region *grown = realloc(regions, cap * sizeof *grown);
    if (!grown) return false;
    regions = grown;
    region_capacity = cap;
  }
  regions[region_count++] = r;
  return true;
}

static void remove_region(region *r) { *r = regions[--region_count]; }

/* ---- common checks ---------------------------------------------------------------------- */

/* The current context, or an error: not initialised, none current, sticky. */
static cu_result need_ctx(const char *function, fake_ctx **out) {
  *out = NULL; /* set on every path, so that callers' compilers see it written */
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  fake_ctx *c = current_ctx();
  if (!c) {
    misuse(function, "no current context");
    return FCU_ERROR_INVALID_CONTEXT;
  }
  if (c->refs == 0) {
    misuse(function, "the current context was destroyed");
    return FAKE_ERROR_CONTEXT_IS_DESTROYED;
  }
  if (c->sticky) return c->sticky;
  *out = c;
  return FCU_SUCCESS;
}

/* Kinds of pointer a copy accepts on each side. */
enum { SIDE_HOST = 1, SIDE_DEVICE = 2 };

/* Checks one side of a copy. Device side: memory of the context `c` (or mapped
 * host memory). Host side: anything but device memory. Sets *pinned when the
 * host range is page-locked, *memops when a device range has SYNC_MEMOPS. */
static cu_result check_side(const char *function, fake_ctx *c, uintptr_t p, size_t n, int side, bool *pinned,
                            bool *memops) {
  pthread_mutex_lock(&lock);
  region *r = find_region(p, n);
  cu_result res = FCU_SUCCESS;
  if (pinned) *pinned = r && r->kind != R_DEVICE;
  if (memops) *memops = r && r->sync_memops;
  if (side == SIDE_DEVICE) {
    if (!r) {
      res = FCU_ERROR_INVALID_VALUE;
      pthread_mutex_unlock(&lock);
      misuse(function, "device range 0x%llx + %zu bytes is not inside one allocation", (unsigned long long)p, n);
      return res;
    }
    if (r->kind == R_DEVICE && r->ctx != c) {
      pthread_mutex_unlock(&lock);
      misuse(function, "device memory of device %d used while device %d's context is current", r->ctx->ordinal,
             c->ordinal);
      return FCU_ERROR_INVALID_VALUE;
    }
  } else if (r && r->kind == R_DEVICE) {
    pthread_mutex_unlock(&lock);
    misuse(function, "host side 0x%llx is device memory", (unsigned long long)p);
    return FCU_ERROR_INVALID_VALUE;
  } else if (p == 0) {
    pthread_mutex_unlock(&lock);
    misuse(function, "NULL host pointer");
    return FCU_ERROR_INVALID_VALUE;
  }
  pthread_mutex_unlock(&lock);
  return res;
}

/* ---- streams, events, modules ------------------------------------------------------------ */

#define STREAM_MAGIC 0x5354524dU
#define EVENT_MAGIC  0x45564e54U
#define MODULE_MAGIC 0x4d4f444cU

struct cu_stream_st {
  unsigned magic;
  fake_ctx *ctx;
};

struct cu_event_st {
  unsigned magic;
  fake_ctx *ctx;
  unsigned long long seq;
};

struct cu_func_st {
  char name[64];
};

struct cu_mod_st {
  unsigned magic;
  fake_ctx *ctx;
  int count;
  struct cu_func_st functions[8];
};

/* The queue a stream argument names, checked against the current context. */
static cu_result stream_ctx(const char *function, fake_ctx *c, cu_stream s, fake_ctx **out) {
  if (s == NULL || s == (cu_stream)(uintptr_t)1 || s == (cu_stream)(uintptr_t)2) {
    *out = c;
    return FCU_SUCCESS;
  }
  if (s->magic != STREAM_MAGIC) {
    misuse(function, "not a live stream");
    return FCU_ERROR_INVALID_HANDLE;
  }
  if (s->ctx != c) {
    misuse(function, "stream of device %d used while device %d's context is current", s->ctx->ordinal, c->ordinal);
    return FCU_ERROR_INVALID_HANDLE;
  }
  *out = c;
  return FCU_SUCCESS;
}

/* ---- error names ------------------------------------------------------------------------- */

static const struct {
  int code;
  const char *name, *text;
} error_names[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {214, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
    {705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access has not been enabled"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {710, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
    {711, "CUDA_ERROR_TOO_MANY_PEERS", "peer mapping resources exhausted"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
    {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

FAKE_API cu_result cuGetErrorName(cu_result error, const char **str) {
  for (size_t i = 0; i < sizeof error_names / sizeof error_names[0]; i++)
    if (error_names[i].code == error) {
      *str = error_names[i].name;
      return FCU_SUCCESS;
    }
  *str = NULL;
  return FCU_ERROR_INVALID_VALUE;
}

FAKE_API cu_result cuGetErrorString(cu_result error, const char **str) {
  for (size_t i = 0; i < sizeof error_names / sizeof error_names[0]; i++)
    if (error_names[i].code == error) {
      *str = error_names[i].text;
      return FCU_SUCCESS;
    }
  *str = NULL;
  return FCU_ERROR_INVALID_VALUE;
}

/* ---- initialisation and devices --------------------------------------------------------------- */

static bool any_context_alive(void) {
  for (int i = 0; i < MAX_DEVICES; i++)
    if (contexts[i].refs > 0) return true;
  return false;
}

FAKE_API cu_result cuInit(unsigned int flags) {
  INJECT("cuInit");
  if (flags != 0) return FCU_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  if (!any_context_alive()) {
    cfg.devices = (int)env_long("FAKE_CUDA_DEVICES", 1);
    if (cfg.devices > MAX_DEVICES) cfg.devices = MAX_DEVICES;
    cfg.mem = env_bytes("FAKE_CUDA_MEM", 1ull << 30);
    cfg.peer = env_long("FAKE_CUDA_PEER", 1) != 0;
    cfg.device_base = (int)env_long("FAKE_CUDA_DEVICE_BASE", 0);
    cfg.init_error = (int)env_long("FAKE_CUDA_INIT_ERROR", 0);
    cfg.delay_us = env_long("FAKE_CUDA_DELAY_US", 0);
    cfg.kernels = env_long("FAKE_CUDA_KERNELS", 0) != 0;
    cfg.host_misalign = env_long("FAKE_CUDA_HOST_MISALIGN", 0) != 0;
    cfg.no_sync_memops = env_long("FAKE_CUDA_NO_SYNC_MEMOPS", 0) != 0;
    cfg.strict = env_long("FAKE_CUDA_STRICT", 0) != 0;
  }
  cu_result r = cfg.init_error ? cfg.init_error : cfg.devices <= 0 ? FCU_ERROR_NO_DEVICE : FCU_SUCCESS;
  initialized = r == FCU_SUCCESS;
  pthread_mutex_unlock(&lock);
  return r;
}

FAKE_API cu_result cuDriverGetVersion(int *version) {
  if (!version) return FCU_ERROR_INVALID_VALUE;
  *version = 13000;
  return FCU_SUCCESS;
}

FAKE_API cu_result cuDeviceGetCount(int *count) {
  INJECT("cuDeviceGetCount");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (!count) return FCU_ERROR_INVALID_VALUE;
  *count = cfg.devices;
  return FCU_SUCCESS;
}

/* The ordinal a CUdevice handle names, or -1. */
static int ordinal_of(cu_device dev) {
  int o = (int)dev - cfg.device_base;
  return o >= 0 && o < cfg.devices ? o : -1;
}

FAKE_API cu_result cuDeviceGet(cu_device *device, int ordinal) {
  INJECT("cuDeviceGet");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (!device || ordinal < 0 || ordinal >= cfg.devices) return FCU_ERROR_INVALID_DEVICE;
  *device = (cu_device)(cfg.device_base + ordinal);
  return FCU_SUCCESS;
}

FAKE_API cu_result cuDeviceGetName(char *name, int len, cu_device dev) {
  INJECT("cuDeviceGetName");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  int o = ordinal_of(dev);
  if (o < 0) return FCU_ERROR_INVALID_DEVICE;
  if (!name || len <= 0) return FCU_ERROR_INVALID_VALUE;
  snprintf(name, (size_t)len, "Fake CUDA GPU %d", o);
  return FCU_SUCCESS;
}

/* A made-up UUID per device: "fakecuda" then the ordinal. */
FAKE_API cu_result cuDeviceGetUuid_v2(cu_uuid *uuid, cu_device dev) {
  INJECT("cuDeviceGetUuid_v2");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  int o = ordinal_of(dev);
  if (o < 0) return FCU_ERROR_INVALID_DEVICE;
  if (!uuid) return FCU_ERROR_INVALID_VALUE;
  memset(uuid->bytes, 0, sizeof uuid->bytes);
  memcpy(uuid->bytes, "fakecuda", 8);
  uuid->bytes[15] = (char)o;
  return FCU_SUCCESS;
}

/* As the driver writes it, uppercase hex, with the bus of the PCI_BUS_ID attribute. */
FAKE_API cu_result cuDeviceGetPCIBusId(char *pci_bus_id, int len, cu_device dev) {
  INJECT("cuDeviceGetPCIBusId");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  int o = ordinal_of(dev);
  if (o < 0) return FCU_ERROR_INVALID_DEVICE;
  if (!pci_bus_id || len < 13) return FCU_ERROR_INVALID_VALUE; /* the driver needs 13 bytes */
  snprintf(pci_bus_id, (size_t)len, "0000:%02X:00.0", 0x10 + o);
  return FCU_SUCCESS;
}

FAKE_API cu_result cuDeviceTotalMem_v2(size_t *bytes, cu_device dev) {
  INJECT("cuDeviceTotalMem_v2");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (ordinal_of(dev) < 0) return FCU_ERROR_INVALID_DEVICE;
  *bytes = (size_t)cfg.mem;
  return FCU_SUCCESS;
}

FAKE_API cu_result cuDeviceGetAttribute(int *value, cu_device_attribute attrib, cu_device dev) {
  INJECT("cuDeviceGetAttribute");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  int o = ordinal_of(dev);
  if (o < 0) return FCU_ERROR_INVALID_DEVICE;
  if (!value) return FCU_ERROR_INVALID_VALUE;
  switch (attrib) {
  case FCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
  case FCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
  case FCU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
  case FCU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
  case FCU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: *value = 1; break;
  case FCU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = 0x10 + o; break;
  default: *value = 0; break;
  }
  return FCU_SUCCESS;
}

FAKE_API cu_result cuDeviceCanAccessPeer(int *can, cu_device dev, cu_device peer) {
  INJECT("cuDeviceCanAccessPeer");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (ordinal_of(dev) < 0 || ordinal_of(peer) < 0) return FCU_ERROR_INVALID_DEVICE;
  if (!can) return FCU_ERROR_INVALID_VALUE;
  *can = cfg.peer && dev != peer;
  return FCU_SUCCESS;
}

static void ctx_destroy(fake_ctx *c);

FAKE_API cu_result cuDevicePrimaryCtxRetain(cu_context *ctx, cu_device dev) {
  INJECT("cuDevicePrimaryCtxRetain");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  int o = ordinal_of(dev);
  if (o < 0) return FCU_ERROR_INVALID_DEVICE;
  if (!ctx) return FCU_ERROR_INVALID_VALUE;
  fake_ctx *c = &contexts[o];
  pthread_mutex_lock(&lock);
  if (c->refs++ == 0) {
    c->ordinal = o;
    c->sticky = 0;
    c->used = 0;
    memset(c->peer_enabled, 0, sizeof c->peer_enabled);
    pthread_mutex_init(&c->qlock, NULL);
    pthread_cond_init(&c->qwake, NULL);
    pthread_cond_init(&c->qdone, NULL);
    c->head = c->tail = NULL;
    c->submitted = c->completed = 0;
    c->stop = false;
    c->running = pthread_create(&c->worker, NULL, worker_main, c) == 0;
    counts.contexts_retained++;
  }
  bool ok = c->running;
  if (!ok) c->refs--;
  pthread_mutex_unlock(&lock);
  if (!ok) return FCU_ERROR_OUT_OF_MEMORY;
  *ctx = (cu_context)(void *)c;
  return FCU_SUCCESS;
}

FAKE_API cu_result cuDevicePrimaryCtxRelease_v2(cu_device dev) {
  INJECT("cuDevicePrimaryCtxRelease_v2");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  int o = ordinal_of(dev);
  if (o < 0) return FCU_ERROR_INVALID_DEVICE;
  fake_ctx *c = &contexts[o];
  pthread_mutex_lock(&lock);
  if (c->refs == 0) {
    pthread_mutex_unlock(&lock);
    misuse("cuDevicePrimaryCtxRelease_v2", "device %d's primary context is not retained", o);
    return FCU_ERROR_INVALID_CONTEXT;
  }
  bool last = --c->refs == 0;
  pthread_mutex_unlock(&lock);
  if (last) ctx_destroy(c);
  return FCU_SUCCESS;
}

/* Converts a CUcontext argument; NULL when it is not one of ours. */
static fake_ctx *as_ctx(cu_context ctx) {
  fake_ctx *c = (fake_ctx *)(void *)ctx;
  return c >= &contexts[0] && c < &contexts[MAX_DEVICES] ? c : NULL;
}

FAKE_API cu_result cuCtxGetCurrent(cu_context *ctx) {
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (!ctx) return FCU_ERROR_INVALID_VALUE;
  *ctx = (cu_context)(void *)current_ctx();
  return FCU_SUCCESS;
}

FAKE_API cu_result cuCtxSetCurrent(cu_context ctx) {
  INJECT("cuCtxSetCurrent");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (ctx == NULL) {
    if (ctx_depth > 0) ctx_depth--;
    return FCU_SUCCESS;
  }
  fake_ctx *c = as_ctx(ctx);
  if (!c || c->refs == 0) return FCU_ERROR_INVALID_CONTEXT;
  if (ctx_depth == 0) ctx_depth = 1;
  ctx_stack[ctx_depth - 1] = c;
  return FCU_SUCCESS;
}

FAKE_API cu_result cuCtxPushCurrent_v2(cu_context ctx) {
  INJECT("cuCtxPushCurrent_v2");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  fake_ctx *c = as_ctx(ctx);
  if (!c || c->refs == 0) return FCU_ERROR_INVALID_CONTEXT;
  if (ctx_depth == CTX_STACK) return FCU_ERROR_INVALID_VALUE;
  ctx_stack[ctx_depth++] = c;
  return FCU_SUCCESS;
}

FAKE_API cu_result cuCtxPopCurrent_v2(cu_context *ctx) {
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (ctx_depth == 0) return FCU_ERROR_INVALID_CONTEXT;
  fake_ctx *c = ctx_stack[--ctx_depth];
  if (ctx) *ctx = (cu_context)(void *)c;
  return FCU_SUCCESS;
}

FAKE_API cu_result cuCtxSynchronize(void) {
  INJECT("cuCtxSynchronize");
  fake_ctx *c;
  cu_result r = need_ctx("cuCtxSynchronize", &c);
  if (r) return r;
  drain(c);
  return c->sticky;
}

FAKE_API cu_result cuCtxEnablePeerAccess(cu_context peer, unsigned int flags) {
  INJECT("cuCtxEnablePeerAccess");
  fake_ctx *c;
  cu_result r = need_ctx("cuCtxEnablePeerAccess", &c);
  if (r) return r;
  fake_ctx *p = as_ctx(peer);
  if (!p || p->refs == 0 || flags != 0) return FCU_ERROR_INVALID_VALUE;
  if (p == c || !cfg.peer) return FCU_ERROR_PEER_ACCESS_UNSUPPORTED;
  pthread_mutex_lock(&lock);
  bool already = c->peer_enabled[p->ordinal];
  c->peer_enabled[p->ordinal] = true;
  pthread_mutex_unlock(&lock);
  return already ? FCU_ERROR_PEER_ACCESS_ALREADY_ENABLED : FCU_SUCCESS;
}

/* ---- device memory ------------------------------------------------------------------------------ */

FAKE_API cu_result cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
  INJECT("cuMemGetInfo_v2");
  fake_ctx *c;
  cu_result r = need_ctx("cuMemGetInfo_v2", &c);
  if (r) return r;
  pthread_mutex_lock(&lock);
  if (free_bytes) *free_bytes = (size_t)(cfg.mem - c->used);
  if (total_bytes) *total_bytes = (size_t)cfg.mem;
  pthread_mutex_unlock(&lock);
  return FCU_SUCCESS;
}

FAKE_API cu_result cuMemAlloc_v2(cu_deviceptr *dptr, size_t bytes) {
  INJECT("cuMemAlloc_v2");
  fake_ctx *c;
  cu_result r = need_ctx("cuMemAlloc_v2", &c);
  if (r) return r;
  if (!dptr || bytes == 0) return FCU_ERROR_INVALID_VALUE;
  size_t rounded = (bytes + 255) & ~(size_t)255;
  pthread_mutex_lock(&lock);
  if (rounded < bytes || rounded > cfg.mem - c->used) {
    pthread_mutex_unlock(&lock);
    return FCU_ERROR_OUT_OF_MEMORY;
  }
  void *p = aligned_alloc(256, rounded);
  if (p) memset(p, 0xA5, rounded); /* fresh device memory is not zero */
  if (!p || !add_region((region){.kind = R_DEVICE, .start = (uintptr_t)p, .size = bytes, .base = p, .ctx = c})) {
    free(p);
    pthread_mutex_unlock(&lock);
    return FCU_ERROR_OUT_OF_MEMORY;
  }
  c->used += rounded;
  counts.device_allocations++;
  pthread_mutex_unlock(&lock);
  *dptr = (cu_deviceptr)(uintptr_t)p;
  return FCU_SUCCESS;
}

FAKE_API cu_result cuMemFree_v2(cu_deviceptr dptr) {
  INJECT("cuMemFree_v2");
  fake_ctx *c;
  cu_result r = need_ctx("cuMemFree_v2", &c);
  if (r) return r;
  drain(c); /* cuMemFree waits for work that may use the memory */
  pthread_mutex_lock(&lock);
  region *reg = find_region((uintptr_t)dptr, 1);
  if (!reg || reg->kind != R_DEVICE || reg->start != (uintptr_t)dptr || reg->ctx != c) {
    pthread_mutex_unlock(&lock);
    misuse("cuMemFree_v2", "0x%llx is not the start of an allocation of the current context", dptr);
    return FCU_ERROR_INVALID_VALUE;
  }
  c->used -= (reg->size + 255) & ~(size_t)255;
  free(reg->base);
  remove_region(reg);
  counts.device_allocations--;
  pthread_mutex_unlock(&lock);
  return FCU_SUCCESS;
}

/* ---- pinned and registered host memory --------------------------------------------------------- */

static cu_result host_alloc(const char *function, void **ptr, size_t bytes) {
  fake_ctx *c;
  cu_result r = need_ctx(function, &c);
  if (r) return r;
  if (!ptr || bytes == 0) return FCU_ERROR_INVALID_VALUE;
  if (bytes > (1ull << 40)) return FCU_ERROR_OUT_OF_MEMORY;
  size_t shift = cfg.host_misalign ? 64 : 0;
  size_t total = ((bytes + shift + 4095) & ~(size_t)4095);
  void *base = aligned_alloc(4096, total);
  if (!base) return FCU_ERROR_OUT_OF_MEMORY;
  void *p = (char *)base + shift;
  pthread_mutex_lock(&lock);
  bool ok = add_region((region){.kind = R_PINNED, .start = (uintptr_t)p, .size = bytes, .base = base, .ctx = c});
  if (ok) counts.pinned_blocks++;
  pthread_mutex_unlock(&lock);
  if (!ok) {
    free(base);
    return FCU_ERROR_OUT_OF_MEMORY;
  }
  *ptr = p;
  return FCU_SUCCESS;
}

FAKE_API cu_result cuMemHostAlloc(void **ptr, size_t bytes, unsigned int flags) {
  INJECT("cuMemHostAlloc");
  if (flags & ~0x7u) return FCU_ERROR_INVALID_VALUE;
  return host_alloc("cuMemHostAlloc", ptr, bytes);
}

FAKE_API cu_result cuMemAllocHost_v2(void **ptr, size_t bytes) {
  INJECT("cuMemAllocHost_v2");
  return host_alloc("cuMemAllocHost_v2", ptr, bytes);
}

FAKE_API cu_result cuMemFreeHost(void *ptr) {
  INJECT("cuMemFreeHost");
  fake_ctx *c;
  cu_result r = need_ctx("cuMemFreeHost", &c);
  if (r) return r;
  drain_all();
  pthread_mutex_lock(&lock);
  region *reg = find_region((uintptr_t)ptr, 1);
  if (!reg || reg->kind != R_PINNED || reg->start != (uintptr_t)ptr) {
    pthread_mutex_unlock(&lock);
    misuse("cuMemFreeHost", "%p is not a block from cuMemHostAlloc", ptr);
    return FCU_ERROR_INVALID_VALUE;
  }
  free(reg->base);
  remove_region(reg);
  counts.pinned_blocks--;
  pthread_mutex_unlock(&lock);
  return FCU_SUCCESS;
}

FAKE_API cu_result cuMemHostRegister_v2(void *ptr, size_t bytes, unsigned int flags) {
  INJECT("cuMemHostRegister_v2");
  fake_ctx *c;
  cu_result r = need_ctx("cuMemHostRegister_v2", &c);
  if (r) return r;
  if (!ptr || bytes == 0 || (flags & ~0xfu)) return FCU_ERROR_INVALID_VALUE;
  uintptr_t start = (uintptr_t)ptr, end = start + bytes;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < region_count; i++) {
    const region *reg = &regions[i];
    if (reg->kind != R_DEVICE && start < reg->start + reg->size && reg->start < end) {
      pthread_mutex_unlock(&lock);
      return FCU_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
  }
  bool ok = add_region((region){.kind = R_REGISTERED, .start = start, .size = bytes, .base = NULL, .ctx = c});
  if (ok) counts.registered_ranges++;
  pthread_mutex_unlock(&lock);
  return ok ? FCU_SUCCESS : FCU_ERROR_OUT_OF_MEMORY;
}

FAKE_API cu_result cuMemHostUnregister(void *ptr) {
  INJECT("cuMemHostUnregister");
  fake_ctx *c;
  cu_result r = need_ctx("cuMemHostUnregister", &c);
  if (r) return r;
  drain_all();
  pthread_mutex_lock(&lock);
  region *reg = find_region((uintptr_t)ptr, 1);
  if (!reg || reg->kind != R_REGISTERED || reg->start != (uintptr_t)ptr) {
    pthread_mutex_unlock(&lock);
    return FCU_ERROR_HOST_MEMORY_NOT_REGISTERED;
  }
  remove_region(reg);
  counts.registered_ranges--;
  counts.unregisters++;
  pthread_mutex_unlock(&lock);
  return FCU_SUCCESS;
}

FAKE_API cu_result cuMemHostGetDevicePointer_v2(cu_deviceptr *dptr, void *ptr, unsigned int flags) {
  INJECT("cuMemHostGetDevicePointer_v2");
  fake_ctx *c;
  cu_result r = need_ctx("cuMemHostGetDevicePointer_v2", &c);
  if (r) return r;
  if (!dptr || flags != 0) return FCU_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  region *reg = find_region((uintptr_t)ptr, 1);
  bool ok = reg && reg->kind != R_DEVICE;
  pthread_mutex_unlock(&lock);
  if (!ok) return FCU_ERROR_INVALID_VALUE;
  *dptr = (cu_deviceptr)(uintptr_t)ptr; /* unified addressing: the same address */
  return FCU_SUCCESS;
}

FAKE_API cu_result cuPointerGetAttribute(void *data, cu_pointer_attribute attribute, cu_deviceptr ptr) {
  INJECT("cuPointerGetAttribute");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (!data) return FCU_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  region *reg = find_region((uintptr_t)ptr, 1);
  region copy = reg ? *reg : (region){0};
  pthread_mutex_unlock(&lock);
  if (!reg) return FCU_ERROR_INVALID_VALUE;
  switch (attribute) {
  case FCU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    *(unsigned int *)data = copy.kind == R_DEVICE ? FCU_MEMORYTYPE_DEVICE : FCU_MEMORYTYPE_HOST;
    return FCU_SUCCESS;
  case FCU_POINTER_ATTRIBUTE_CONTEXT: *(cu_context *)data = (cu_context)(void *)copy.ctx; return FCU_SUCCESS;
  case FCU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(cu_deviceptr *)data = ptr; return FCU_SUCCESS;
  case FCU_POINTER_ATTRIBUTE_HOST_POINTER: *(void **)data = (void *)(uintptr_t)ptr; return FCU_SUCCESS;
  case FCU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(int *)data = copy.sync_memops; return FCU_SUCCESS;
  case FCU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = copy.ctx ? copy.ctx->ordinal : -1; return FCU_SUCCESS;
  case FCU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(cu_deviceptr *)data = copy.start; return FCU_SUCCESS;
  case FCU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = copy.size; return FCU_SUCCESS;
  default: return FCU_ERROR_INVALID_VALUE;
  }
}

FAKE_API cu_result cuPointerGetAttributes(unsigned int count, cu_pointer_attribute *attributes, void **data,
                                          cu_deviceptr ptr) {
  INJECT("cuPointerGetAttributes");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (!attributes || !data) return FCU_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  bool known = find_region((uintptr_t)ptr, 1) != NULL;
  pthread_mutex_unlock(&lock);
  for (unsigned int i = 0; i < count; i++) {
    if (!data[i]) return FCU_ERROR_INVALID_VALUE;
    if (known) {
      cu_result r = cuPointerGetAttribute(data[i], attributes[i], ptr);
      if (r) return r;
      continue;
    }
    /* Memory the driver does not know: default values, and no error. */
    switch (attributes[i]) {
    case FCU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned int *)data[i] = 0; break;
    case FCU_POINTER_ATTRIBUTE_CONTEXT: *(cu_context *)data[i] = NULL; break;
    case FCU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case FCU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(cu_deviceptr *)data[i] = 0; break;
    case FCU_POINTER_ATTRIBUTE_HOST_POINTER: *(void **)data[i] = NULL; break;
    case FCU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(int *)data[i] = 0; break;
    case FCU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data[i] = -1; break;
    case FCU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data[i] = 0; break;
    default: return FCU_ERROR_INVALID_VALUE;
    }
  }
  return FCU_SUCCESS;
}

FAKE_API cu_result cuPointerSetAttribute(const void *value, cu_pointer_attribute attribute, cu_deviceptr ptr) {
  INJECT("cuPointerSetAttribute");
  fake_ctx *c;
  cu_result r = need_ctx("cuPointerSetAttribute", &c);
  if (r) return r;
  if (!value || attribute != FCU_POINTER_ATTRIBUTE_SYNC_MEMOPS) return FCU_ERROR_INVALID_VALUE;
  if (cfg.no_sync_memops) return FCU_ERROR_NOT_SUPPORTED;
  pthread_mutex_lock(&lock);
  region *reg = find_region((uintptr_t)ptr, 1);
  if (reg) {
    reg->sync_memops = *(const unsigned int *)value != 0;
    counts.sync_memops_set++;
  }
  pthread_mutex_unlock(&lock);
  return reg ? FCU_SUCCESS : FCU_ERROR_INVALID_VALUE;
}

/* ---- copies ------------------------------------------------------------------------------------- */

FAKE_API cu_result cuMemcpyHtoD_v2(cu_deviceptr dst, const void *src, size_t bytes) {
  INJECT("cuMemcpyHtoD_v2");
  fake_ctx *c;
  cu_result r = need_ctx("cuMemcpyHtoD_v2", &c);
  if (r) return r;
  if (bytes == 0) return FCU_SUCCESS;
  bool pinned = false, memops = false;
  if ((r = check_side("cuMemcpyHtoD_v2", c, (uintptr_t)dst, bytes, SIDE_DEVICE, NULL, &memops)) ||
      (r = check_side("cuMemcpyHtoD_v2", c, (uintptr_t)src, bytes, SIDE_HOST, &pinned, NULL)))
    return r;
  op o = {.kind = OP_COPY, .dst = (void *)(uintptr_t)dst, .src = src, .n = bytes};
  if (pinned || memops) {
    unsigned long long seq = enqueue(c, &o);
    if (!seq) return FCU_ERROR_OUT_OF_MEMORY;
    wait_seq(c, seq);
    return c->sticky;
  }
  /* From pageable memory: staged at once, landed later. */
  void *staging = malloc(bytes);
  if (!staging) return FCU_ERROR_OUT_OF_MEMORY;
  memcpy(staging, src, bytes);
  o.src = o.owned = staging;
  if (!enqueue(c, &o)) {
    free(staging);
    return FCU_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_lock(&lock);
  counts.pageable_h2d++;
  pthread_mutex_unlock(&lock);
  return FCU_SUCCESS;
}

FAKE_API cu_result cuMemcpyDtoH_v2(void *dst, cu_deviceptr src, size_t bytes) {
  INJECT("cuMemcpyDtoH_v2");
  fake_ctx *c;
  cu_result r = need_ctx("cuMemcpyDtoH_v2", &c);
  if (r) return r;
  if (bytes == 0) return FCU_SUCCESS;
  if ((r = check_side("cuMemcpyDtoH_v2", c, (uintptr_t)src, bytes, SIDE_DEVICE, NULL, NULL)) ||
      (r = check_side("cuMemcpyDtoH_v2", c, (uintptr_t)dst, bytes, SIDE_HOST, NULL, NULL)))
    return r;
  op o = {.kind = OP_COPY, .dst = dst, .src = (const void *)(uintptr_t)src, .n = bytes};
  unsigned long long seq = enqueue(c, &o);
  if (!seq) return FCU_ERROR_OUT_OF_MEMORY;
  wait_seq(c, seq); /* device to host is complete on return */
  return c->sticky;
}

FAKE_API cu_result cuMemcpyDtoD_v2(cu_deviceptr dst, cu_deviceptr src, size_t bytes) {
  INJECT("cuMemcpyDtoD_v2");
  fake_ctx *c;
  cu_result r = need_ctx("cuMemcpyDtoD_v2", &c);
  if (r) return r;
  if (bytes == 0) return FCU_SUCCESS;
  if ((r = check_side("cuMemcpyDtoD_v2", c, (uintptr_t)src, bytes, SIDE_DEVICE, NULL, NULL)) ||
      (r = check_side("cuMemcpyDtoD_v2", c, (uintptr_t)dst, bytes, SIDE_DEVICE, NULL, NULL)))
    return r;
  if (src < dst + bytes && dst < src + bytes && src != dst) {
    misuse("cuMemcpyDtoD_v2", "overlapping ranges (undefined on a GPU)");
    return FCU_ERROR_INVALID_VALUE;
  }
  op o = {.kind = OP_COPY, .dst = (void *)(uintptr_t)dst, .src = (const void *)(uintptr_t)src, .n = bytes};
  return enqueue(c, &o) ? FCU_SUCCESS : FCU_ERROR_OUT_OF_MEMORY; /* returns before the copy is done */
}

FAKE_API cu_result cuMemcpyHtoDAsync_v2(cu_deviceptr dst, const void *src, size_t bytes, cu_stream stream) {
  INJECT("cuMemcpyHtoDAsync_v2");
  fake_ctx *c, *q;
  cu_result r = need_ctx("cuMemcpyHtoDAsync_v2", &c);
  if (r) return r;
  if ((r = stream_ctx("cuMemcpyHtoDAsync_v2", c, stream, &q))) return r;
  if (bytes == 0) return FCU_SUCCESS;
  bool pinned = false;
  if ((r = check_side("cuMemcpyHtoDAsync_v2", c, (uintptr_t)dst, bytes, SIDE_DEVICE, NULL, NULL)) ||
      (r = check_side("cuMemcpyHtoDAsync_v2", c, (uintptr_t)src, bytes, SIDE_HOST, &pinned, NULL)))
    return r;
  op o = {.kind = OP_COPY, .dst = (void *)(uintptr_t)dst, .src = src, .n = bytes};
  if (!pinned) { /* pageable: staged at once, as the driver does */
    void *staging = malloc(bytes);
    if (!staging) return FCU_ERROR_OUT_OF_MEMORY;
    memcpy(staging, src, bytes);
    o.src = o.owned = staging;
  }
  if (!enqueue(q, &o)) {
    free(o.owned);
    return FCU_ERROR_OUT_OF_MEMORY;
  }
  return FCU_SUCCESS;
}

FAKE_API cu_result cuMemcpyDtoHAsync_v2(void *dst, cu_deviceptr src, size_t bytes, cu_stream stream) {
  INJECT("cuMemcpyDtoHAsync_v2");
  fake_ctx *c, *q;
  cu_result r = need_ctx("cuMemcpyDtoHAsync_v2", &c);
  if (r) return r;
  if ((r = stream_ctx("cuMemcpyDtoHAsync_v2", c, stream, &q))) return r;
  if (bytes == 0) return FCU_SUCCESS;
  bool pinned = false;
  if ((r = check_side("cuMemcpyDtoHAsync_v2", c, (uintptr_t)src, bytes, SIDE_DEVICE, NULL, NULL)) ||
      (r = check_side("cuMemcpyDtoHAsync_v2", c, (uintptr_t)dst, bytes, SIDE_HOST, &pinned, NULL)))
    return r;
  op o = {.kind = OP_COPY, .dst = dst, .src = (const void *)(uintptr_t)src, .n = bytes};
  unsigned long long seq = enqueue(q, &o);
  if (!seq) return FCU_ERROR_OUT_OF_MEMORY;
  if (!pinned) wait_seq(q, seq); /* to pageable memory the driver waits */
  return FCU_SUCCESS;
}

FAKE_API cu_result cuMemcpyDtoDAsync_v2(cu_deviceptr dst, cu_deviceptr src, size_t bytes, cu_stream stream) {
  INJECT("cuMemcpyDtoDAsync_v2");
  fake_ctx *c, *q;
  cu_result r = need_ctx("cuMemcpyDtoDAsync_v2", &c);
  if (r) return r;
  if ((r = stream_ctx("cuMemcpyDtoDAsync_v2", c, stream, &q))) return r;
  if (bytes == 0) return FCU_SUCCESS;
  if ((r = check_side("cuMemcpyDtoDAsync_v2", c, (uintptr_t)src, bytes, SIDE_DEVICE, NULL, NULL)) ||
      (r = check_side("cuMemcpyDtoDAsync_v2", c, (uintptr_t)dst, bytes, SIDE_DEVICE, NULL, NULL)))
    return r;
  op o = {.kind = OP_COPY, .dst = (void *)(uintptr_t)dst, .src = (const void *)(uintptr_t)src, .n = bytes};
  return enqueue(q, &o) ? FCU_SUCCESS : FCU_ERROR_OUT_OF_MEMORY;
}

FAKE_API cu_result cuMemcpyPeer(cu_deviceptr dst, cu_context dst_ctx, cu_deviceptr src, cu_context src_ctx,
                                size_t bytes) {
  INJECT("cuMemcpyPeer");
  fake_ctx *c;
  cu_result r = need_ctx("cuMemcpyPeer", &c);
  if (r) return r;
  fake_ctx *dc = as_ctx(dst_ctx), *sc = as_ctx(src_ctx);
  if (!dc || !sc || dc->refs == 0 || sc->refs == 0) return FCU_ERROR_INVALID_CONTEXT;
  if (dc->sticky) return dc->sticky;
  if (sc->sticky) return sc->sticky;
  if (bytes == 0) return FCU_SUCCESS;
  if ((r = check_side("cuMemcpyPeer", sc, (uintptr_t)src, bytes, SIDE_DEVICE, NULL, NULL)) ||
      (r = check_side("cuMemcpyPeer", dc, (uintptr_t)dst, bytes, SIDE_DEVICE, NULL, NULL)))
    return r;
  /* Serialised with the work already queued on both contexts; returns before
   * the copy is done. */
  drain(sc);
  op o = {.kind = OP_COPY, .dst = (void *)(uintptr_t)dst, .src = (const void *)(uintptr_t)src, .n = bytes};
  if (!enqueue(c, &o)) return FCU_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&lock);
  counts.peer_copies++;
  pthread_mutex_unlock(&lock);
  return FCU_SUCCESS;
}

/* ---- streams and events --------------------------------------------------------------------------- */

FAKE_API cu_result cuStreamCreate(cu_stream *stream, unsigned int flags) {
  INJECT("cuStreamCreate");
  fake_ctx *c;
  cu_result r = need_ctx("cuStreamCreate", &c);
  if (r) return r;
  if (!stream || flags > 1) return FCU_ERROR_INVALID_VALUE;
  struct cu_stream_st *s = malloc(sizeof *s);
  if (!s) return FCU_ERROR_OUT_OF_MEMORY;
  s->magic = STREAM_MAGIC;
  s->ctx = c;
  pthread_mutex_lock(&lock);
  counts.streams++;
  pthread_mutex_unlock(&lock);
  *stream = s;
  return FCU_SUCCESS;
}

FAKE_API cu_result cuStreamDestroy_v2(cu_stream stream) {
  INJECT("cuStreamDestroy_v2");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (!stream || stream->magic != STREAM_MAGIC) return FCU_ERROR_INVALID_HANDLE;
  drain(stream->ctx);
  stream->magic = 0;
  free(stream);
  pthread_mutex_lock(&lock);
  counts.streams--;
  pthread_mutex_unlock(&lock);
  return FCU_SUCCESS;
}

FAKE_API cu_result cuStreamSynchronize(cu_stream stream) {
  INJECT("cuStreamSynchronize");
  fake_ctx *c, *q;
  cu_result r = need_ctx("cuStreamSynchronize", &c);
  if (r) return r;
  if ((r = stream_ctx("cuStreamSynchronize", c, stream, &q))) return r;
  drain(q);
  return q->sticky;
}

FAKE_API cu_result cuEventCreate(cu_event *event, unsigned int flags) {
  INJECT("cuEventCreate");
  fake_ctx *c;
  cu_result r = need_ctx("cuEventCreate", &c);
  if (r) return r;
  if (!event || (flags & ~0x7u)) return FCU_ERROR_INVALID_VALUE;
  struct cu_event_st *e = malloc(sizeof *e);
  if (!e) return FCU_ERROR_OUT_OF_MEMORY;
  e->magic = EVENT_MAGIC;
  e->ctx = c;
  e->seq = 0;
  pthread_mutex_lock(&lock);
  counts.events++;
  pthread_mutex_unlock(&lock);
  *event = e;
  return FCU_SUCCESS;
}

FAKE_API cu_result cuEventRecord(cu_event event, cu_stream stream) {
  INJECT("cuEventRecord");
  fake_ctx *c, *q;
  cu_result r = need_ctx("cuEventRecord", &c);
  if (r) return r;
  if (!event || event->magic != EVENT_MAGIC) return FCU_ERROR_INVALID_HANDLE;
  if ((r = stream_ctx("cuEventRecord", c, stream, &q))) return r;
  if (event->ctx != q) {
    misuse("cuEventRecord", "event of device %d recorded on device %d's stream", event->ctx->ordinal, q->ordinal);
    return FCU_ERROR_INVALID_HANDLE;
  }
  pthread_mutex_lock(&q->qlock);
  event->seq = q->submitted;
  pthread_mutex_unlock(&q->qlock);
  return FCU_SUCCESS;
}

FAKE_API cu_result cuEventSynchronize(cu_event event) {
  INJECT("cuEventSynchronize");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (!event || event->magic != EVENT_MAGIC) return FCU_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&event->ctx->qlock);
  unsigned long long seq = event->seq;
  pthread_mutex_unlock(&event->ctx->qlock);
  wait_seq(event->ctx, seq);
  return event->ctx->sticky;
}

FAKE_API cu_result cuEventDestroy_v2(cu_event event) {
  INJECT("cuEventDestroy_v2");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (!event || event->magic != EVENT_MAGIC) return FCU_ERROR_INVALID_HANDLE;
  event->magic = 0;
  free(event);
  pthread_mutex_lock(&lock);
  counts.events--;
  pthread_mutex_unlock(&lock);
  return FCU_SUCCESS;
}

/* ---- modules and the one kernel the fake can run ---------------------------------------------------- */

#define INCREMENT_KERNEL "ferry_increment_i32"

FAKE_API cu_result cuModuleLoadData(cu_module *module, const void *image) {
  INJECT("cuModuleLoadData");
  fake_ctx *c;
  cu_result r = need_ctx("cuModuleLoadData", &c);
  if (r) return r;
  if (!module || !image) return FCU_ERROR_INVALID_VALUE;
  if (!cfg.kernels) return FCU_ERROR_NOT_SUPPORTED; /* the fake cannot compile PTX */
  const char *text = image;
  if (!strstr(text, ".version") || !strstr(text, ".target")) return FCU_ERROR_INVALID_PTX;
  struct cu_mod_st *m = calloc(1, sizeof *m);
  if (!m) return FCU_ERROR_OUT_OF_MEMORY;
  m->magic = MODULE_MAGIC;
  m->ctx = c;
  /* The names of the kernels: ".entry NAME(". */
  for (const char *p = strstr(text, ".entry"); p && m->count < 8; p = strstr(p + 6, ".entry")) {
    const char *name = p + 6;
    while (*name == ' ' || *name == '\t')
      name++;
    size_t len = strcspn(name, " \t\r\n(");
    if (len == 0 || len >= sizeof m->functions[0].name) continue;
    memcpy(m->functions[m->count].name, name, len);
    m->functions[m->count].name[len] = '\0';
    m->count++;
  }
  pthread_mutex_lock(&lock);
  counts.modules++;
  pthread_mutex_unlock(&lock);
  *module = m;
  return FCU_SUCCESS;
}

FAKE_API cu_result cuModuleUnload(cu_module module) {
  INJECT("cuModuleUnload");
  if (!module || module->magic != MODULE_MAGIC) return FCU_ERROR_INVALID_HANDLE;
  drain(module->ctx);
  module->magic = 0;
  free(module);
  pthread_mutex_lock(&lock);
  counts.modules--;
  pthread_mutex_unlock(&lock);
  return FCU_SUCCESS;
}

FAKE_API cu_result cuModuleGetFunction(cu_function *fn, cu_module module, const char *name) {
  INJECT("cuModuleGetFunction");
  if (!fn || !name || !module || module->magic != MODULE_MAGIC) return FCU_ERROR_INVALID_VALUE;
  for (int i = 0; i < module->count; i++)
    if (strcmp(module->functions[i].name, name) == 0) {
      *fn = &module->functions[i];
      return FCU_SUCCESS;
    }
  return FCU_ERROR_NOT_FOUND;
}

FAKE_API cu_result cuLaunchKernel(cu_function fn, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                                  unsigned int block_x, unsigned int block_y, unsigned int block_z,
                                  unsigned int shared_bytes, cu_stream stream, void **params, void **extra) {
  INJECT("cuLaunchKernel");
  fake_ctx *c, *q;
  cu_result r = need_ctx("cuLaunchKernel", &c);
  if (r) return r;
  if ((r = stream_ctx("cuLaunchKernel", c, stream, &q))) return r;
  if (!fn || extra || !params || grid_x == 0 || block_x == 0 || block_x > 1024 || grid_y != 1 || grid_z != 1 ||
      block_y != 1 || block_z != 1 || shared_bytes > 48 * 1024)
    return FCU_ERROR_INVALID_VALUE;
  if (strcmp(fn->name, INCREMENT_KERNEL) != 0) return FCU_ERROR_NOT_SUPPORTED;
  cu_deviceptr data = *(const cu_deviceptr *)params[0];
  unsigned int count = *(const unsigned int *)params[1];
  /* The threads that pass the bounds check touch data[0 .. min(count, threads)). */
  unsigned long long threads = (unsigned long long)grid_x * block_x;
  unsigned long long touched = threads < count ? threads : count;
  if (touched > 0) {
    pthread_mutex_lock(&lock);
    region *reg = find_region((uintptr_t)data, (size_t)touched * 4);
    bool ok = reg && (reg->kind != R_DEVICE || reg->ctx == c);
    pthread_mutex_unlock(&lock);
    if (!ok) { /* the kernel faults: the context is lost */
      c->sticky = FCU_ERROR_ILLEGAL_ADDRESS;
      return FCU_SUCCESS; /* as on a GPU, the fault shows at the next synchronisation */
    }
  }
  op o = {.kind = OP_INCREMENT, .data = (int32_t *)(uintptr_t)data, .count = count, .grid = grid_x, .block = block_x};
  return enqueue(q, &o) ? FCU_SUCCESS : FCU_ERROR_OUT_OF_MEMORY;
}

/* ---- context destruction --------------------------------------------------------------------------- */

static void ctx_destroy(fake_ctx *c) {
  drain(c);
  pthread_mutex_lock(&c->qlock);
  c->stop = true;
  pthread_cond_broadcast(&c->qwake);
  pthread_mutex_unlock(&c->qlock);
  pthread_join(c->worker, NULL);
  c->running = false;
  pthread_mutex_destroy(&c->qlock);
  pthread_cond_destroy(&c->qwake);
  pthread_cond_destroy(&c->qdone);
  /* What the context still owned goes with it, as on a real driver; ferry
   * should have released all of it. */
  long leaked = 0;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < region_count;) {
    region *reg = &regions[i];
    if (reg->ctx == c) {
      leaked++;
      if (cfg.strict)
        fprintf(stderr, "fake_cuda: device %d's context released with a %s of %zu bytes at %p still live\n", c->ordinal,
                reg->kind == R_DEVICE   ? "device allocation"
                : reg->kind == R_PINNED ? "pinned host block"
                                        : "host registration",
                reg->size, (void *)reg->start);
      if (reg->kind == R_DEVICE) counts.device_allocations--;
      if (reg->kind == R_PINNED) counts.pinned_blocks--;
      if (reg->kind == R_REGISTERED) counts.registered_ranges--;
      free(reg->base);
      remove_region(reg);
    } else {
      i++;
    }
  }
  counts.contexts_retained--;
  if (counts.contexts_retained == 0 && region_count == 0) {
    free(regions);
    regions = NULL;
    region_capacity = 0;
  }
  bool abort_now = cfg.strict && leaked > 0;
  pthread_mutex_unlock(&lock);
  if (abort_now) {
    fprintf(stderr, "fake_cuda: FAKE_CUDA_STRICT: %ld resources leaked\n", leaked);
    abort();
  }
}

/* ---- test-only entry points ------------------------------------------------------------------------- */

FAKE_API int fake_cuda_inject(const char *function, int result, int skip, int times) {
  pthread_mutex_lock(&lock);
  int rc = -1;
  if (!function) {
    memset(injections, 0, sizeof injections);
    atomic_store(&injection_count, 0);
    rc = 0;
  } else {
    for (int i = 0; i < MAX_INJECTIONS; i++) {
      if (injections[i].times > 0) continue;
      snprintf(injections[i].function, sizeof injections[i].function, "%s", function);
      injections[i].result = result;
      injections[i].skip = skip;
      injections[i].times = times;
      if (times > 0) atomic_fetch_add(&injection_count, 1);
      rc = 0;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

FAKE_API void fake_cuda_counts_get(fake_cuda_counts *out) {
  pthread_mutex_lock(&lock);
  *out = counts;
  pthread_mutex_unlock(&lock);
}

FAKE_API int fake_cuda_make_sticky(int ordinal, int result) {
  if (ordinal < 0 || ordinal >= MAX_DEVICES || contexts[ordinal].refs == 0) return -1;
  contexts[ordinal].sticky = result;
  return 0;
}
