/*
 * Driver failures at every operation: a test-only backend ("fault", two
 * devices over host memory) whose operations fail on demand. Each failure must
 * give an error with the driver's words, change nothing, leak nothing, and leave
 * the library usable. Also: a backend whose probe fails half way, and the
 * allocation cache's release-and-retry on out-of-memory.
 */
#include "core/internal.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

typedef enum fault_op {
  OP_ALLOC,
  OP_FREE,
  OP_WRITE,
  OP_READ,
  OP_COPY,
  OP_COPY_PEER,
  OP_IMPORT,
  OP_SYNC,
  OP_RELEASE,
  OP_HOST_ALLOC,
  OP_SYNCHRONIZE,
  OP_NATIVE,
  OP_COUNT
} fault_op;

static const char *const op_names[OP_COUNT] = {"alloc",   "free",       "write",       "read",
                                               "copy",    "copy_peer",  "import",      "host_ptr_sync",
                                               "release", "host_alloc", "synchronize", "native"};

static struct {
  ferry_status fail_with[OP_COUNT]; /* FERRY_OK: succeed */
  int calls[OP_COUNT];
  long live_allocs, live_imports, live_host_blocks, devices, destroyed, unloads;
  bool peer_unsupported;
} fault;

/* Fails `op` once with `st` if so armed. */
static ferry_status maybe_fail(ferry_device *dev, fault_op op) {
  fault.calls[op]++;
  ferry_status st = fault.fail_with[op];
  if (st == FERRY_OK) return FERRY_OK;
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

static const ferry_backend fault_backend = {.name = "fault", .probe = fault_probe, .unload = fault_unload};

/* A backend that adds a device and then fails: it must end with no devices. */
static long broken_destroyed;
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
static const ferry_backend broken_backend = {.name = "broken", .probe = broken_probe};

static ferry_device *fault_device(int which) {
  for (size_t i = 0; i < ferry_device_count(); i++) {
    ferry_device *d;
    ferry_device_info info;
    ferry_device_get(i, &d);
    ferry_device_info_get(d, &info);
    if (strcmp(info.backend, "fault") == 0 && info.backend_index == (size_t)which) return d;
  }
  return NULL;
}

static void arm(fault_op op, ferry_status st) { fault.fail_with[op] = st; }

static void expect_injected(const char *op) {
  CHECK_ERROR_HAS("FAULT_DRIVER_ERROR (-99)");
  CHECK_ERROR_HAS(op);
}

static void each_operation_fails_cleanly(void) {
  harness_context = "operations";
  ferry_device *a = fault_device(0), *b = fault_device(1);
  CHECK(a && b);
  if (!a || !b) return;
  ferry_stats before, after;
  CHECK_OK(ferry_device_stats(a, &before));

  /* alloc: no handle, nothing live. */
  ferry_buffer buf = {0x77};
  arm(OP_ALLOC, FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_alloc(a, 1000, FERRY_FLOAT32, &buf), FERRY_ERROR_BACKEND);
  expect_injected("alloc");
  CHECK_ERROR_HAS("ferry_alloc");
  CHECK_ERROR_HAS("4000 bytes");
  CHECK(buf.id == 0x77);
  CHECK_OK(ferry_device_stats(a, &after));
  CHECK(after.live_buffers == before.live_buffers && after.bytes_in_use == before.bytes_in_use);
  CHECK(fault.live_allocs == 0);

  /* The library is usable: a buffer with known content. */
  float data[1000], back[1000], other[1000];
  fill_pattern(data, sizeof data, 1);
  CHECK_OK(ferry_alloc(a, 1000, FERRY_FLOAT32, &buf));
  CHECK_OK(ferry_host_to_device(ferry_array_of(data, 1000, FERRY_FLOAT32), buf));

  /* write, read, copy: an error naming the buffer; nothing changed. */
  fill_pattern(other, sizeof other, 2);
  arm(OP_WRITE, FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(other, 1000, FERRY_FLOAT32), buf), FERRY_ERROR_BACKEND);
  expect_injected("write");
  CHECK_ERROR_HAS("ferry_host_to_device: buffer");
  arm(OP_WRITE, FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_write(buf, 4, other, 8), FERRY_ERROR_BACKEND);
  memcpy(back, other, sizeof back);
  arm(OP_READ, FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_device_to_host(buf, ferry_array_of(back, 1000, FERRY_FLOAT32)), FERRY_ERROR_BACKEND);
  expect_injected("read");
  CHECK(memcmp(back, other, sizeof back) == 0);
  CHECK_OK(ferry_device_to_host(buf, ferry_array_of(back, 1000, FERRY_FLOAT32)));
  CHECK(memcmp(back, data, sizeof back) == 0);

  ferry_buffer twin = {0}, far = {0};
  CHECK_OK(ferry_alloc(a, 1000, FERRY_FLOAT32, &twin));
  CHECK_OK(ferry_alloc(b, 1000, FERRY_FLOAT32, &far));
  arm(OP_COPY, FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_device_to_device(buf, twin), FERRY_ERROR_BACKEND);
  expect_injected("copy");
  CHECK_ERROR_HAS("ferry_device_to_device: from buffer");
  /* Overlapping copy within a buffer goes through a temporary: a failure there leaks nothing. */
  CHECK_OK(ferry_device_trim(a));
  long allocs = fault.live_allocs;
  arm(OP_COPY, FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_copy(buf, 0, buf, 8, 256), FERRY_ERROR_BACKEND);
  CHECK_OK(ferry_device_trim(a));
  CHECK(fault.live_allocs == allocs);
  /* 256 bytes is a size class of its own, so the failed allocation is not retried smaller. */
  arm(OP_ALLOC, FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_STATUS(ferry_copy(buf, 0, buf, 8, 256), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_OK(ferry_device_to_host(buf, ferry_array_of(back, 1000, FERRY_FLOAT32)));
  CHECK(memcmp(back, data, sizeof back) == 0);

  /* Between two devices of the backend: the peer copy's failure is reported ... */
  arm(OP_COPY_PEER, FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_device_to_device(buf, far), FERRY_ERROR_BACKEND);
  expect_injected("copy_peer");
  /* ... and a backend without a peer path is staged through the host. */
  fault.peer_unsupported = true;
  int reads = fault.calls[OP_READ], writes = fault.calls[OP_WRITE];
  CHECK_OK(ferry_device_to_device(buf, far));
  CHECK(fault.calls[OP_READ] > reads && fault.calls[OP_WRITE] > writes);
  memset(back, 0, sizeof back);
  CHECK_OK(ferry_device_to_host(far, ferry_array_of(back, 1000, FERRY_FLOAT32)));
  CHECK(memcmp(back, data, sizeof back) == 0);
  arm(OP_WRITE, FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_device_to_device(buf, far), FERRY_ERROR_BACKEND);
  fault.peer_unsupported = false;

  /* host-pointer buffers: import, sync and release. */
  float *array = harness_aligned(64, 4096);
  fill_pattern(array, 4096, 3);
  ferry_buffer hp = {0x55};
  ferry_refusal why = FERRY_REFUSAL_NONE;
  arm(OP_IMPORT, FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_alloc_host_ptr(a, ferry_array_of(array, 1024, FERRY_FLOAT32), &hp, &why), FERRY_ERROR_REFUSED);
  CHECK(why == FERRY_REFUSAL_DRIVER);
  expect_injected("import");
  CHECK(hp.id == 0x55 && fault.live_imports == 0);
  /* The range was given back: the same array imports now. */
  CHECK_OK(ferry_alloc_host_ptr(a, ferry_array_of(array, 1024, FERRY_FLOAT32), &hp, &why));
  CHECK(why == FERRY_REFUSAL_NONE);
  arm(OP_SYNC, FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(array, 1024, FERRY_FLOAT32), hp), FERRY_ERROR_BACKEND);
  expect_injected("host_ptr_sync");
  arm(OP_SYNC, FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_device_to_host(hp, ferry_array_of(array, 1024, FERRY_FLOAT32)), FERRY_ERROR_BACKEND);
  CHECK(find_pattern_mismatch(array, 4096, 3) == SIZE_MAX);
  arm(OP_RELEASE, FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_free(hp), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("released");
  CHECK(fault.live_imports == 0);
  CHECK_STATUS(ferry_free(hp), FERRY_ERROR_STALE_BUFFER);
  CHECK_OK(ferry_alloc_host_ptr(a, ferry_array_of(array, 1024, FERRY_FLOAT32), &hp, NULL));
  CHECK_OK(ferry_free(hp));
  free(array);

  /* Pinned host memory, synchronize, native handles. */
  void *p = (void *)0x1;
  arm(OP_HOST_ALLOC, FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_STATUS(ferry_host_alloc(a, 1 << 20, &p), FERRY_ERROR_OUT_OF_MEMORY);
  expect_injected("host_alloc");
  CHECK(p == (void *)0x1 && fault.live_host_blocks == 0);
  CHECK_OK(ferry_host_alloc(a, 1 << 20, &p));
  CHECK(fault.live_host_blocks == 1);
  CHECK_OK(ferry_host_free(p));
  CHECK(fault.live_host_blocks == 0);
  arm(OP_SYNCHRONIZE, FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_device_synchronize(a), FERRY_ERROR_BACKEND);
  expect_injected("synchronize");
  CHECK_OK(ferry_device_synchronize(a));
  ferry_native nat = {.device = 9};
  arm(OP_NATIVE, FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_device_native(a, &nat), FERRY_ERROR_BACKEND);
  CHECK(nat.device == 9);
  CHECK_OK(ferry_device_native(a, &nat));
  CHECK(nat.device == 1 && nat.queue == 3);

  /* free: through the cache no driver call is made; a failing driver free shows
   * up when the cache is trimmed. */
  CHECK_OK(ferry_free(twin));
  CHECK_OK(ferry_free(far));
  arm(OP_FREE, FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_device_trim(a), FERRY_ERROR_BACKEND);
  expect_injected("free");
  CHECK_ERROR_HAS("ferry_device_trim");
  CHECK_OK(ferry_device_stats(a, &after));
  CHECK(after.bytes_cached == 0);
  CHECK_OK(ferry_device_trim(b));

  /* Out of memory with a full cache: the cache is released and the allocation tried again. */
  ferry_buffer big = {0};
  CHECK_OK(ferry_alloc(a, 1 << 20, FERRY_UINT8, &big));
  CHECK_OK(ferry_free(big));
  CHECK_OK(ferry_device_stats(a, &after));
  CHECK(after.bytes_cached > 0);
  arm(OP_ALLOC, FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_OK(ferry_alloc(a, 3 << 20, FERRY_UINT8, &big)); /* another class: not served from the cache */
  CHECK_OK(ferry_device_stats(a, &after));
  CHECK(after.bytes_cached == 0);
  CHECK_OK(ferry_free(big));

  CHECK_OK(ferry_device_to_host(buf, ferry_array_of(back, 1000, FERRY_FLOAT32)));
  CHECK(memcmp(back, data, sizeof back) == 0);
  CHECK_OK(ferry_free(buf));
  CHECK_OK(ferry_device_trim(a));
  CHECK_OK(ferry_device_stats(a, &after));
  CHECK(after.live_buffers == before.live_buffers && after.bytes_in_use == before.bytes_in_use);
  CHECK(fault.live_allocs == 0);
}

static void free_without_cache(void) {
  harness_context = "free without cache";
  ferry_device *a = fault_device(0);
  ferry_buffer buf = {0};
  CHECK_OK(ferry_alloc(a, 100, FERRY_UINT8, &buf));
  arm(OP_FREE, FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_free(buf), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("released");
  expect_injected("free");
  CHECK_STATUS(ferry_free(buf), FERRY_ERROR_STALE_BUFFER);
  ferry_stats s;
  CHECK_OK(ferry_device_stats(a, &s));
  CHECK(s.live_buffers == 0 && s.bytes_in_use == 0 && s.bytes_cached == 0);
  CHECK(fault.live_allocs == 0);
}

static void broken_backend_is_absent(void) {
  harness_context = "broken backend";
  bool seen = false;
  for (size_t i = 0; i < ferry_backend_count(); i++) {
    ferry_backend_info b;
    CHECK_OK(ferry_backend_get(i, &b));
    if (strcmp(b.name, "broken") != 0) continue;
    seen = true;
    CHECK(b.device_count == 0);
    CHECK(strstr(b.status, "BROKEN_DRIVER") != NULL);
  }
  CHECK(seen);
  CHECK(broken_destroyed == 1);
  for (size_t i = 0; i < ferry_device_count(); i++) {
    ferry_device *d;
    ferry_device_info info;
    CHECK_OK(ferry_device_get(i, &d));
    CHECK_OK(ferry_device_info_get(d, &info));
    CHECK(strcmp(info.backend, "broken") != 0);
    CHECK(info.index == i);
  }
}

int main(void) {
  CHECK_OK(ferry__register_backend(&fault_backend));
  CHECK_OK(ferry__register_backend(&broken_backend));
  CHECK_OK(ferry_init());
  CHECK_STATUS(ferry__register_backend(&fault_backend), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK(fault.devices == 2);
  broken_backend_is_absent();
  each_operation_fails_cleanly();
  ferry_shutdown();
  CHECK(fault.destroyed == 2 && fault.unloads == 1);

  /* Again without a cache, so that ferry_free reaches the driver's free. */
  setenv("FERRY_CACHE_LIMIT", "0", 1);
  fault.devices = 0;
  CHECK_OK(ferry_init());
  free_without_cache();
  ferry_shutdown();
  CHECK(fault.live_allocs == 0 && fault.live_imports == 0 && fault.live_host_blocks == 0);
  harness_context = "";
  return harness_finish("fault");
}
