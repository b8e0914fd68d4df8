/* The fault-injecting test backend; see fault_backend.h. */
/* nanosleep */
#define _POSIX_C_SOURCE 200809L
#include "fault_backend.h"
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const op_names[OP_COUNT] = {[OP_ALLOC] = "alloc",
                                               [OP_FREE] = "free",
                                               [OP_WRITE] = "write",
                                               [OP_READ] = "read",
                                               [OP_COPY] = "copy",
                                               [OP_COPY_PEER] = "copy_peer",
                                               [OP_IMPORT] = "import",
                                               [OP_SYNC] = "host_ptr_sync",
                                               [OP_RELEASE] = "release",
                                               [OP_PIN_ALLOC] = "pin_alloc",
                                               [OP_PIN_REGISTER] = "pin_register",
                                               [OP_SYNCHRONIZE] = "synchronize",
                                               [OP_NATIVE] = "native",
                                               [OP_DMA_WRITE] = "dma_start (to the device)",
                                               [OP_DMA_READ] = "dma_start (to the host)",
                                               [OP_DMA_WAIT] = "dma_wait"};

fault_state fault;

/* The engine calls DMA operations from its copy threads too. */
static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;

/* Fails `op` once with `st` if so armed. */
static ferry_status maybe_fail(ferry_device *dev, fault_op op) {
  pthread_mutex_lock(&fault_lock);
  fault.calls[op]++;
  ferry_status st = fault.fail_with[op];
  if (st != FERRY_OK && fault.fail_after[op] > 0) {
    fault.fail_after[op]--;
    st = FERRY_OK;
  } else if (st != FERRY_OK) {
    fault.fail_with[op] = FERRY_OK;
  }
  pthread_mutex_unlock(&fault_lock);
  if (st == FERRY_OK) return FERRY_OK;
  return ferry__fail(st, "FAULT_DRIVER_ERROR (-99) injected into %s on %s", op_names[op], dev->label);
}

static ferry_status f_alloc(ferry_device *dev, size_t bytes, ferry_mem *out) {
  ferry_status st = maybe_fail(dev, OP_ALLOC);
  if (st != FERRY_OK) return st;
  void *p = malloc(bytes);
  if (!p) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "malloc");
  fault.live_allocs++;
  *out = (ferry_mem){.handle = (uintptr_t)p, .impl = p, .bytes = bytes};
  return FERRY_OK;
}

static ferry_status f_free(ferry_device *dev, ferry_mem *mem) {
  /* A failing free still releases (like a driver with a sticky error): what is
   * checked is that ferry reports it and stays consistent. */
  ferry_status st = maybe_fail(dev, OP_FREE);
  free(mem->impl);
  fault.live_allocs--;
  return st;
}

static ferry_status f_write(ferry_device *dev, ferry_lane *lane, ferry_mem *dst, size_t off, const void *src,
                            size_t n) {
  (void)lane;
  while (atomic_load(&fault.hold_writes)) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  ferry_status st = maybe_fail(dev, OP_WRITE);
  if (st == FERRY_OK) memmove((char *)dst->handle + off, src, n);
  return st;
}

static ferry_status f_read(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t off, void *dst, size_t n) {
  (void)lane;
  ferry_status st = maybe_fail(dev, OP_READ);
  if (st == FERRY_OK) memmove(dst, (const char *)src->handle + off, n);
  return st;
}

static ferry_status f_copy(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t so, ferry_mem *dst,
                           size_t doff, size_t n, ferry_ticket *out) {
  (void)lane;
  if (out) *out = 0;
  ferry_status st = maybe_fail(dev, OP_COPY);
  if (st == FERRY_OK) memmove((char *)dst->handle + doff, (const char *)src->handle + so, n);
  return st;
}

static ferry_status f_copy_peer(ferry_device *lane_dev, ferry_lane *lane, ferry_device *sdev, const ferry_mem *src,
                                size_t so, ferry_device *ddev, ferry_mem *dst, size_t doff, size_t n,
                                ferry_ticket *out) {
  (void)lane_dev;
  (void)lane;
  (void)ddev;
  if (out) *out = 0;
  if (fault.peer_unsupported) return FERRY_ERROR_UNSUPPORTED;
  ferry_status st = maybe_fail(sdev, OP_COPY_PEER);
  if (st == FERRY_OK) memmove((char *)dst->handle + doff, (const char *)src->handle + so, n);
  return st;
}

static ferry_status f_import(ferry_device *dev, void *host, size_t bytes, ferry_mem *out, ferry_refusal *why) {
  ferry_status st = maybe_fail(dev, OP_IMPORT);
  if (st != FERRY_OK) {
    *why = FERRY_REFUSAL_DRIVER;
    return st;
  }
  fault.live_imports++;
  *out = (ferry_mem){.handle = (uintptr_t)host, .bytes = bytes};
  return FERRY_OK;
}

static ferry_status f_sync(ferry_device *dev, ferry_mem *mem, ferry_sync_dir dir) {
  (void)mem;
  (void)dir;
  return maybe_fail(dev, OP_SYNC);
}

static ferry_status f_release(ferry_device *dev, ferry_mem *mem) {
  (void)mem;
  ferry_status st = maybe_fail(dev, OP_RELEASE);
  fault.live_imports--;
  return st;
}

static ferry_status f_pin_alloc(ferry_device *dev, size_t bytes, void **out, uintptr_t *token) {
  ferry_status st = maybe_fail(dev, OP_PIN_ALLOC);
  if (st != FERRY_OK) return st;
  if (bytes > ((size_t)1 << 32))
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "fault: no %zu bytes of host memory", bytes);
  *out = harness_aligned(4096, bytes);
  if (!*out) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "posix_memalign");
  *token = (uintptr_t)*out; /* the block's base: dma_start checks ranges against it */
  fault.live_host_blocks++;
  return FERRY_OK;
}

static ferry_status f_pin_register(ferry_device *dev, void *base, size_t bytes, uintptr_t *token) {
  (void)bytes;
  ferry_status st = maybe_fail(dev, OP_PIN_REGISTER);
  if (st != FERRY_OK) return st;
  *token = (uintptr_t)base;
  fault.live_registrations++;
  return FERRY_OK;
}

static void f_pin_release(ferry_device *dev, void *base, size_t bytes, uintptr_t token, bool allocated) {
  (void)dev;
  (void)bytes;
  (void)token;
  if (allocated) {
    free(base);
    fault.live_host_blocks--;
  } else {
    fault.live_registrations--;
  }
}

static ferry_status f_synchronize(ferry_device *dev) { return maybe_fail(dev, OP_SYNCHRONIZE); }

static ferry_status f_native(const ferry_device *dev, ferry_native *out) {
  ferry_status st = maybe_fail((ferry_device *)dev, OP_NATIVE);
  if (st == FERRY_OK) *out = (ferry_native){.device = 1, .context = 2, .queue = 3};
  return st;
}

/* Deferred DMA: recorded at dma_start, done at the first ticket_wait (or the
 * second ticket_query: the first always says "not ready", so that callers'
 * polling is exercised). A ticket is the entry's index and a serial number, so
 * that a stale, repeated or early release is caught (fault.bad_tickets), and a
 * pinned range given to a second DMA before the first one's wait is refused. */
enum { PENDING_MAX = 1024 };
typedef struct pending {
  uint64_t serial; /* 0: free */
  bool to_device, done, queried;
  char *device_bytes, *host_bytes;
  size_t n;
} pending;
static pending pend[PENDING_MAX];
static uint64_t next_serial = 1;
static pthread_mutex_t pend_lock = PTHREAD_MUTEX_INITIALIZER;

static ferry_status f_dma_start(ferry_device *dev, ferry_lane *lane, ferry_dma_dir dir, ferry_mem *mem, size_t off,
                                const ferry_pinned *host, size_t n, ferry_ticket *out) {
  (void)lane;
  ferry_status st = maybe_fail(dev, dir == FERRY_DMA_TO_DEVICE ? OP_DMA_WRITE : OP_DMA_READ);
  if (st != FERRY_OK) return st;
  if (!out) return ferry__fail(FERRY_ERROR_BACKEND, "fault: a DMA without a ticket on a device without lanes");
  char *h = host->host;
  if ((char *)host->token + host->offset != h)
    return ferry__fail(FERRY_ERROR_BACKEND, "fault: pinned range %p is not its token %p + offset %zu", (void *)h,
                       (void *)host->token, host->offset);
  pthread_mutex_lock(&pend_lock);
  int free_at = -1;
  for (int i = 0; i < PENDING_MAX; i++) {
    pending *p = &pend[i];
    if (!p->serial) {
      if (free_at < 0) free_at = i;
    } else if (!p->done && h < p->host_bytes + p->n && p->host_bytes < h + n) {
      pthread_mutex_unlock(&pend_lock);
      return ferry__fail(FERRY_ERROR_BACKEND, "fault: pinned range %p (%zu bytes) reused before the wait", (void *)h,
                         n);
    }
  }
  if (free_at < 0) {
    pthread_mutex_unlock(&pend_lock);
    return ferry__fail(FERRY_ERROR_BACKEND, "fault: more than %d copies in flight", PENDING_MAX);
  }
  uint64_t serial = next_serial++;
  pend[free_at] = (pending){.serial = serial,
                            .to_device = dir == FERRY_DMA_TO_DEVICE,
                            .device_bytes = (char *)mem->handle + off,
                            .host_bytes = h,
                            .n = n};
  pthread_mutex_unlock(&pend_lock);
  *out = serial << 16 | (uint64_t)free_at;
  return FERRY_OK;
}

/* The entry of a live ticket (pend_lock held); NULL for a stale one. */
static pending *pending_of(ferry_ticket ticket) {
  unsigned at = (unsigned)(ticket & 0xffff);
  return at < PENDING_MAX && pend[at].serial && pend[at].serial == ticket >> 16 ? &pend[at] : NULL;
}

static ferry_status f_ticket_wait(ferry_device *dev, ferry_ticket ticket) {
  pthread_mutex_lock(&pend_lock);
  pending *p = pending_of(ticket);
  bool first = p && !p->done;
  if (p) p->done = true;
  pending copy = p ? *p : (pending){0};
  pthread_mutex_unlock(&pend_lock);
  if (!p)
    return ferry__fail(FERRY_ERROR_BACKEND, "fault: ticket %llu waited for after its release, or never started",
                       (unsigned long long)ticket);
  if (!first) return FERRY_OK;
  /* The copy happens (or is lost, on failure) whatever the wait reports. */
  ferry_status st = maybe_fail(dev, OP_DMA_WAIT);
  if (st == FERRY_OK) {
    if (copy.to_device)
      memcpy(copy.device_bytes, copy.host_bytes, copy.n);
    else
      memcpy(copy.host_bytes, copy.device_bytes, copy.n);
  }
  return st;
}

static ferry_status f_ticket_query(ferry_device *dev, ferry_ticket ticket) {
  pthread_mutex_lock(&pend_lock);
  pending *p = pending_of(ticket);
  bool not_yet = p && !p->done && !p->queried;
  if (not_yet) p->queried = true;
  pthread_mutex_unlock(&pend_lock);
  return not_yet ? FERRY_NOT_READY : f_ticket_wait(dev, ticket);
}

static void f_ticket_release(ferry_device *dev, ferry_ticket ticket) {
  (void)dev;
  pthread_mutex_lock(&pend_lock);
  pending *p = pending_of(ticket);
  if (p && p->done)
    p->serial = 0;
  else
    fault.bad_tickets++;
  pthread_mutex_unlock(&pend_lock);
}

static void f_destroy(ferry_device *dev) {
  (void)dev;
  fault.destroyed++;
  pthread_mutex_lock(&pend_lock);
  for (int i = 0; i < PENDING_MAX; i++)
    if (pend[i].serial) {
      fault.pending_at_destroy++;
      pend[i].serial = 0;
    }
  pthread_mutex_unlock(&pend_lock);
}

static const ferry_device_ops fault_ops = {
    .alloc = f_alloc,
    .free = f_free,
    .write = f_write,
    .read = f_read,
    .copy_start = f_copy,
    .peer_start = f_copy_peer,
    .host_ptr_import = f_import,
    .host_ptr_sync = f_sync,
    .host_ptr_release = f_release,
    .pin_alloc = f_pin_alloc,
    .pin_register = f_pin_register,
    .pin_release = f_pin_release,
    .dma_start = f_dma_start,
    .ticket_wait = f_ticket_wait,
    .ticket_query = f_ticket_query,
    .ticket_release = f_ticket_release,
    .synchronize = f_synchronize,
    .native = f_native,
    .destroy = f_destroy,
};

static ferry_status fault_probe(ferry_probe *probe) {
  for (int i = 0; i < 2; i++) {
    ferry_device_desc desc = {.ops = &fault_ops,
                              .name = i ? "fault device B" : "fault device A",
                              .total_memory = 1u << 30,
                              .max_allocation = 1u << 28,
                              .host_ptr = true,
                              .host_ptr_alignment = 64,
                              .caps = FERRY_CAP_CACHE | FERRY_CAP_STAGE};
    ferry_status st = ferry__device_add(probe, &desc);
    if (st != FERRY_OK) return st;
    fault.devices++;
  }
  return FERRY_OK;
}

static void fault_unload(void) { fault.unloads++; }

const ferry_backend fault_backend = {.name = "fault", .probe = fault_probe, .unload = fault_unload};

/* A backend that adds a device and then fails: it must end with no devices. */
long broken_destroyed;
static void broken_destroy(ferry_device *dev) {
  broken_destroyed++;
  /* A cleanup that fails too: its sentence must not replace the probe's. */
  (void)ferry__fail(FERRY_ERROR_BACKEND, "BROKEN_CLEANUP: %s could not be released", dev->label);
}
static const ferry_device_ops broken_ops = {.alloc = f_alloc,
                                            .free = f_free,
                                            .write = f_write,
                                            .read = f_read,
                                            .copy_start = f_copy,
                                            .destroy = broken_destroy};
static ferry_status broken_probe(ferry_probe *probe) {
  ferry_device_desc desc = {.ops = &broken_ops, .name = "half-started", .total_memory = 1, .max_allocation = 1};
  ferry__device_add(probe, &desc);
  return ferry__fail(FERRY_ERROR_UNSUPPORTED, "BROKEN_DRIVER: initialisation failed after one device");
}
const ferry_backend broken_backend = {.name = "broken", .probe = broken_probe};

void fault_arm(fault_op op, ferry_status st, int after) {
  fault.fail_with[op] = st;
  fault.fail_after[op] = after;
}
