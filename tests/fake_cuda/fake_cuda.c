/*
 * A fake CUDA driver for testing ferry's cuda backend without a GPU: the driver
 * API functions the backend, its tests and its benchmark call, built as
 * libcuda.so.1 in the build tree and loaded through FERRY_CUDA_LIBRARY.
 *
 * "Device memory" is host memory (a CUdeviceptr is a host address), but the
 * fake keeps the driver's rules where ferry could break them:
 *  - every stream, and the legacy stream of each primary context, is a queue
 *    worked in order by a thread of its own (fake_cuda_streams.c), with CUDA's
 *    ordering between streams, events and waits; work completes late, after
 *    FAKE_CUDA_DELAY_US (and FAKE_CUDA_JITTER_US), so a missing wait shows up
 *    as wrong bytes or as a sanitizer report;
 *  - calls that need a current context fail without one, and memory must
 *    belong to the current context's device;
 *  - pointers are checked against the live allocations and registrations, with
 *    the driver's error codes (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED on an
 *    overlapping cuMemHostRegister, CUDA_ERROR_OUT_OF_MEMORY past FAKE_CUDA_MEM);
 *  - a sticky error (fake_cuda_make_sticky, an emulated kernel that reads out
 *    of bounds, queued work whose memory is gone when it runs) fails every
 *    later call on that context.
 * This file has the devices, contexts, memory, modules and the test-only entry
 * points; fake_cuda_streams.c the streams, events and the calls that queue
 * work. fake_cuda.h lists the environment variables and the test-only entry
 * points. It is a test double, not a replacement for a run on a GPU.
 */
#include "fake_cuda_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_INJECTIONS 16
#define CTX_STACK      16

/* Device attributes the fake answers that cuda_api.h does not name
 * (check_cuda_h.c checks the numbers). */
#define FAKE_ATTR_CAN_USE_64_BIT_STREAM_MEM_OPS 122
#define FAKE_ATTR_CAN_USE_STREAM_WAIT_VALUE_NOR 123

/* ---- configuration ------------------------------------------------------------- */

FAKE_INTERNAL fake_config cfg;

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

FAKE_INTERNAL pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* everything below but the queues */
FAKE_INTERNAL _Atomic bool initialized;
FAKE_INTERNAL fake_cuda_counts counts;

static struct {
  char function[64];
  int result, skip, times;
} injections[MAX_INJECTIONS];
static _Atomic int injection_count;

FAKE_INTERNAL void misuse(const char *function, const char *fmt, ...) {
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
/* A result injected for this call, or 0. */
FAKE_INTERNAL cu_result injected(const char *function) {
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

/* ---- contexts ----------------------------------------------------------------------- */

static fake_ctx contexts[MAX_DEVICES];

static _Thread_local fake_ctx *ctx_stack[CTX_STACK];
static _Thread_local int ctx_depth;

static fake_ctx *current_ctx(void) { return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL; }

FAKE_INTERNAL void sleep_us(long us) {
  if (us <= 0) return;
  struct timespec t = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
  nanosleep(&t, NULL);
}

FAKE_INTERNAL void drain_all(void) {
  for (int i = 0; i < MAX_DEVICES; i++)
    if (contexts[i].running) fake_drain_ctx(&contexts[i]);
}

/* ---- memory regions ---------------------------------------------------------------- */

static region *regions;
static size_t region_count, region_capacity;

FAKE_INTERNAL region *find_region(uintptr_t p, size_t n) {
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

FAKE_INTERNAL _Thread_local bool fake_in_host_fn;

FAKE_INTERNAL cu_result need_ctx(const char *function, fake_ctx **out) {
  *out = NULL; /* set on every path, so that callers' compilers see it written */
  if (fake_in_host_fn) {
    misuse(function, "called from a host function of cuLaunchHostFunc (CUDA forbids it: it may deadlock)");
    return FCU_ERROR_NOT_PERMITTED;
  }
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

FAKE_INTERNAL cu_result check_side(const char *function, fake_ctx *c, uintptr_t p, size_t n, int side, bool *pinned,
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

/* ---- modules ----------------------------------------------------------------------------------- */

#define MODULE_MAGIC 0x4d4f444cU

struct cu_func_st {
  char name[64];
};

struct cu_mod_st {
  unsigned magic;
  fake_ctx *ctx;
  int count;
  struct cu_func_st functions[8];
};

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
    cfg.jitter_us = env_long("FAKE_CUDA_JITTER_US", 0);
    cfg.connections = (int)env_long("FAKE_CUDA_CONNECTIONS", 0);
    if (cfg.connections < 0) cfg.connections = 0;
    if (cfg.connections > MAX_CONNECTIONS) cfg.connections = MAX_CONNECTIONS;
    cfg.no_wait_value = env_long("FAKE_CUDA_NO_WAIT_VALUE", 0) != 0;
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
  /* cuStreamWaitValue32 with CU_STREAM_WAIT_VALUE_GEQ, EQ and AND only */
  case FAKE_ATTR_CAN_USE_64_BIT_STREAM_MEM_OPS:
  case FAKE_ATTR_CAN_USE_STREAM_WAIT_VALUE_NOR: *value = 0; break;
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
    c->running = fake_streams_start(c);
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

FAKE_INTERNAL fake_ctx *as_ctx(cu_context ctx) {
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
  fake_drain_ctx(c); /* every stream of the context */
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
  fake_drain_ctx(c); /* cuMemFree waits for the context's work, which may use the memory */
  fake_memory_lock();
  pthread_mutex_lock(&lock);
  region *reg = find_region((uintptr_t)dptr, 1);
  if (!reg || reg->kind != R_DEVICE || reg->start != (uintptr_t)dptr || reg->ctx != c) {
    pthread_mutex_unlock(&lock);
    fake_memory_unlock();
    misuse("cuMemFree_v2", "0x%llx is not the start of an allocation of the current context", dptr);
    return FCU_ERROR_INVALID_VALUE;
  }
  c->used -= (reg->size + 255) & ~(size_t)255;
  free(reg->base);
  remove_region(reg);
  counts.device_allocations--;
  pthread_mutex_unlock(&lock);
  fake_memory_unlock();
  return FCU_SUCCESS;
}

/* ---- pinned and registered host memory --------------------------------------------------------- */

static cu_result host_alloc(const char *function, void **ptr, size_t bytes, bool devicemap) {
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
  bool ok = add_region(
      (region){.kind = R_PINNED, .start = (uintptr_t)p, .size = bytes, .base = base, .ctx = c, .devicemap = devicemap});
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
  return host_alloc("cuMemHostAlloc", ptr, bytes, (flags & FCU_MEMHOSTALLOC_DEVICEMAP) != 0);
}

FAKE_API cu_result cuMemAllocHost_v2(void **ptr, size_t bytes) {
  INJECT("cuMemAllocHost_v2");
  return host_alloc("cuMemAllocHost_v2", ptr, bytes, false);
}

FAKE_API cu_result cuMemFreeHost(void *ptr) {
  INJECT("cuMemFreeHost");
  fake_ctx *c;
  cu_result r = need_ctx("cuMemFreeHost", &c);
  if (r) return r;
  drain_all();
  fake_memory_lock();
  pthread_mutex_lock(&lock);
  region *reg = find_region((uintptr_t)ptr, 1);
  if (!reg || reg->kind != R_PINNED || reg->start != (uintptr_t)ptr) {
    pthread_mutex_unlock(&lock);
    fake_memory_unlock();
    misuse("cuMemFreeHost", "%p is not a block from cuMemHostAlloc", ptr);
    return FCU_ERROR_INVALID_VALUE;
  }
  free(reg->base);
  remove_region(reg);
  counts.pinned_blocks--;
  pthread_mutex_unlock(&lock);
  fake_memory_unlock();
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
  bool ok = add_region((region){.kind = R_REGISTERED,
                                .start = start,
                                .size = bytes,
                                .base = NULL,
                                .ctx = c,
                                .devicemap = (flags & FCU_MEMHOSTREGISTER_DEVICEMAP) != 0});
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
  fake_memory_lock();
  pthread_mutex_lock(&lock);
  region *reg = find_region((uintptr_t)ptr, 1);
  if (!reg || reg->kind != R_REGISTERED || reg->start != (uintptr_t)ptr) {
    pthread_mutex_unlock(&lock);
    fake_memory_unlock();
    return FCU_ERROR_HOST_MEMORY_NOT_REGISTERED;
  }
  remove_region(reg);
  counts.registered_ranges--;
  counts.unregisters++;
  pthread_mutex_unlock(&lock);
  fake_memory_unlock();
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
  if (ok && reg->devicemap) reg->device_pointer = true; /* what cuStreamWaitValue32 asks of its word */
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
  fake_drain_ctx(module->ctx);
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
  fake_ctx *c;
  cu_result r = need_ctx("cuLaunchKernel", &c);
  if (r) return r;
  if (!fn || extra || !params || grid_x == 0 || block_x == 0 || block_x > 1024 || grid_y != 1 || grid_z != 1 ||
      block_y != 1 || block_z != 1 || shared_bytes > 48 * 1024)
    return FCU_ERROR_INVALID_VALUE;
  if (strcmp(fn->name, INCREMENT_KERNEL) != 0) return FCU_ERROR_NOT_SUPPORTED;
  cu_deviceptr data = *(const cu_deviceptr *)params[0];
  unsigned int count = *(const unsigned int *)params[1];
  /* The threads that pass the bounds check touch data[0 .. min(count, threads)). */
  unsigned long long threads = (unsigned long long)grid_x * block_x;
  unsigned long long touched = threads < count ? threads : count;
  bool fault = false;
  if (touched > 0) {
    pthread_mutex_lock(&lock);
    region *reg = find_region((uintptr_t)data, (size_t)touched * 4);
    fault = !reg || (reg->kind == R_DEVICE && reg->ctx != c);
    pthread_mutex_unlock(&lock);
  }
  /* A kernel that faults loses the context when it runs: as on a GPU, the
   * launch succeeds and the fault shows at a later call. */
  return fake_launch_increment("cuLaunchKernel", c, stream, (int32_t *)(uintptr_t)data, count, grid_x, block_x,
                               (size_t)touched * 4, fault);
}

/* ---- context destruction --------------------------------------------------------------------------- */

static void ctx_destroy(fake_ctx *c) {
  /* What the context still owned goes with it, as on a real driver; ferry
   * should have released all of it. */
  long leaked = fake_streams_stop(c);
  c->running = false;
  fake_memory_lock();
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
  bool abort_now = cfg.strict && leaked > 0, last = counts.contexts_retained == 0;
  pthread_mutex_unlock(&lock);
  fake_memory_unlock();
  if (last) fake_streams_release_handles();
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
