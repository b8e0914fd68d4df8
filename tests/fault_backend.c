/* The fault-injecting test backend; see fault_backend.h. */
#include "fault_backend.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

static const char *const op_names[OP_COUNT] = {[OP_ALLOC] = "alloc",
                                               [OP_FREE] = "free",
                                               [OP_WRITE] = "write",
                                               [OP_READ] = "read",
                                               [OP_COPY] = "copy",
                                               [OP_COPY_PEER] = "copy_peer",
                                               [OP_IMPORT] = "import",
                                               [OP_SYNC] = "host_ptr_sync",
                                               [OP_RELEASE] = "release",
                                               [OP_HOST_ALLOC] = "host_alloc",
                                               [OP_SYNCHRONIZE] = "synchronize",
                                               [OP_NATIVE] = "native",
                                               [OP_WRITE_ASYNC] = "write_async",
                                               [OP_READ_ASYNC] = "read_async",
                                               [OP_WAIT] = "wait_slot"};

fault_state fault;

/* Fails `op` once with `st` if so armed. */
static ferry_status maybe_fail(ferry_device *dev, fault_op op) {
  fault.calls[op]++;
  ferry_status st = fault.fail_with[op];
  if (st == FERRY_OK) return FERRY_OK;
  if (fault.fail_after[op] > 0) {
    fault.fail_after[op]--;
    return FERRY_OK;
  }
  fault.fail_with[op] = FERRY_OK;
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

static ferry_status f_write(ferry_device *dev, ferry_mem *dst, size_t off, const void *src, size_t n) {
  ferry_status st = maybe_fail(dev, OP_WRITE);
  if (st == FERRY_OK) memmove((char *)dst->handle + off, src, n);
  return st;
}

static ferry_status f_read(ferry_device *dev, const ferry_mem *src, size_t off, void *dst, size_t n) {
  ferry_status st = maybe_fail(dev, OP_READ);
  if (st == FERRY_OK) memmove(dst, (const char *)src->handle + off, n);
  return st;
}

static ferry_status f_copy(ferry_device *dev, const ferry_mem *src, size_t so, ferry_mem *dst, size_t doff, size_t n) {
  ferry_status st = maybe_fail(dev, OP_COPY);
  if (st == FERRY_OK) memmove((char *)dst->handle + doff, (const char *)src->handle + so, n);
  return st;
}

static ferry_status f_copy_peer(ferry_device *sdev, const ferry_mem *src, size_t so, ferry_device *ddev, ferry_mem *dst,
                                size_t doff, size_t n) {
  (void)ddev;
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

static ferry_status f_host_alloc(ferry_device *dev, size_t bytes, void **out) {
  ferry_status st = maybe_fail(dev, OP_HOST_ALLOC);
  if (st != FERRY_OK) return st;
  if (bytes > ((size_t)1 << 32))
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "fault: no %zu bytes of host memory", bytes);
  *out = harness_aligned(4096, bytes);
  if (!*out) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "posix_memalign");
  fault.live_host_blocks++;
  return FERRY_OK;
}

static void f_host_free(ferry_device *dev, void *ptr, size_t bytes) {
  (void)dev;
  (void)bytes;
  free(ptr);
  fault.live_host_blocks--;
}

static ferry_status f_synchronize(ferry_device *dev) { return maybe_fail(dev, OP_SYNCHRONIZE); }

static ferry_status f_native(const ferry_device *dev, ferry_native *out) {
  ferry_status st = maybe_fail((ferry_device *)dev, OP_NATIVE);
  if (st == FERRY_OK) *out = (ferry_native){.device = 1, .context = 2, .queue = 3};
  return st;
}

/* Deferred transfers: recorded at write_async/read_async, done at wait_slot. */
typedef struct pending {
  bool busy;
  bool to_device;
  char *device_bytes;
  char *host_bytes;
  size_t n;
} pending;
static pending slots[2][FERRY_STAGE_SLOTS];

static pending *slot_of(ferry_device *dev, unsigned slot) { return &slots[dev->info.backend_index % 2][slot]; }

static ferry_status f_write_async(ferry_device *dev, ferry_mem *dst, size_t off, const void *src, size_t n,
                                  unsigned slot) {
  ferry_status st = maybe_fail(dev, OP_WRITE_ASYNC);
  if (st != FERRY_OK) return st;
  pending *p = slot_of(dev, slot);
  if (p->busy) return ferry__fail(FERRY_ERROR_BACKEND, "fault: slot %u reused before wait_slot", slot);
  *p = (pending){true, true, (char *)dst->handle + off, (char *)src, n};
  return FERRY_OK;
}

static ferry_status f_read_async(ferry_device *dev, const ferry_mem *src, size_t off, void *dst, size_t n,
                                 unsigned slot) {
  ferry_status st = maybe_fail(dev, OP_READ_ASYNC);
  if (st != FERRY_OK) return st;
  pending *p = slot_of(dev, slot);
  if (p->busy) return ferry__fail(FERRY_ERROR_BACKEND, "fault: slot %u reused before wait_slot", slot);
  *p = (pending){true, false, (char *)src->handle + off, dst, n};
  return FERRY_OK;
}

static ferry_status f_wait_slot(ferry_device *dev, unsigned slot) {
  pending *p = slot_of(dev, slot);
  ferry_status st = maybe_fail(dev, OP_WAIT);
  if (p->busy) {
    /* The transfer happens (or is lost, on failure) whatever wait reports. */
    if (st == FERRY_OK) {
      if (p->to_device)
        memcpy(p->device_bytes, p->host_bytes, p->n);
      else
        memcpy(p->host_bytes, p->device_bytes, p->n);
    }
    p->busy = false;
  }
  return st;
}

static void f_destroy(ferry_device *dev) {
  (void)dev;
  fault.destroyed++;
}

static const ferry_device_ops fault_ops = {
    .alloc = f_alloc,
    .free = f_free,
    .write = f_write,
    .read = f_read,
    .copy = f_copy,
    .copy_peer = f_copy_peer,
    .host_ptr_import = f_import,
    .host_ptr_sync = f_sync,
    .host_ptr_release = f_release,
    .host_alloc = f_host_alloc,
    .host_free = f_host_free,
    .synchronize = f_synchronize,
    .native = f_native,
    .write_async = f_write_async,
    .read_async = f_read_async,
    .wait_slot = f_wait_slot,
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
                              .caps = FERRY_CAP_CACHE};
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
  (void)dev;
  broken_destroyed++;
}
static const ferry_device_ops broken_ops = {
    .alloc = f_alloc, .free = f_free, .write = f_write, .read = f_read, .copy = f_copy, .destroy = broken_destroy};
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
