/*
 * Driver failures at every operation: a test-only backend ("fault", two
 * devices over host memory) whose operations fail on demand. Each failure must
 * give an error with the driver's words, change nothing, leak nothing, and leave
 * the library usable. Also: a backend whose probe fails half way, and the
 * allocation cache's release-and-retry on out-of-memory.
 */
#include "fault_backend.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

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

static void arm(fault_op op, ferry_status st) { fault_arm(op, st, 0); }

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
  CHECK_ERROR_HAS("ferry_host_to_device: bytes 0..4000 of buffer");
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
  CHECK_ERROR_HAS("ferry_device_to_device: from bytes 0..4000 of buffer");
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
  /* ... and a backend without a peer path is staged through the host (by DMA, both ways). */
  fault.peer_unsupported = true;
  int reads = fault.calls[OP_DMA_READ], writes = fault.calls[OP_DMA_WRITE];
  CHECK_OK(ferry_device_to_device(buf, far));
  CHECK(fault.calls[OP_DMA_READ] > reads && fault.calls[OP_DMA_WRITE] > writes);
  memset(back, 0, sizeof back);
  CHECK_OK(ferry_device_to_host(far, ferry_array_of(back, 1000, FERRY_FLOAT32)));
  CHECK(memcmp(back, data, sizeof back) == 0);
  arm(OP_DMA_WRITE, FERRY_ERROR_BACKEND);
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
  long blocks = fault.live_host_blocks; /* the staging rings of the copies above */
  arm(OP_PIN_ALLOC, FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_STATUS(ferry_host_alloc(a, 1 << 20, &p), FERRY_ERROR_OUT_OF_MEMORY);
  expect_injected("pin_alloc");
  CHECK(p == (void *)0x1 && fault.live_host_blocks == blocks);
  CHECK_OK(ferry_host_alloc(a, 1 << 20, &p));
  CHECK(fault.live_host_blocks == blocks + 1);
  CHECK_OK(ferry_host_free(p));
  CHECK(fault.live_host_blocks == blocks);
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
    CHECK_MSG(strstr(b.status, "BROKEN_DRIVER") != NULL && strstr(b.status, "BROKEN_CLEANUP") == NULL,
              "the broken backend's status is not its probe's first failure: %s", b.status);
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

/* Large transfers from ordinary memory go through the core's staging ring; the
 * fault backend defers each DMA to its wait, so a piece of the ring reused too
 * early would show up as wrong bytes (or be refused). */
static void pipelined_transfers(void) {
  harness_context = "pipeline";
  ferry_device *a = fault_device(0), *b = fault_device(1);
  size_t n = ((size_t)5 << 20) + 13;
  unsigned char *src = malloc(n), *back = malloc(n);
  fill_pattern(src, n, 7);
  ferry_buffer x = {0}, y = {0};
  CHECK_OK(ferry_alloc(a, n, FERRY_UINT8, &x));
  CHECK_OK(ferry_alloc(b, n, FERRY_UINT8, &y));
  int writes = fault.calls[OP_DMA_WRITE], reads = fault.calls[OP_DMA_READ];
  CHECK_OK(ferry_host_to_device(ferry_array_of(src, n, FERRY_UINT8), x));
  CHECK(fault.calls[OP_DMA_WRITE] - writes == 6); /* 1 MiB pieces */
  memset(back, 0, n);
  CHECK_OK(ferry_device_to_host(x, ferry_array_of(back, n, FERRY_UINT8)));
  CHECK(fault.calls[OP_DMA_READ] - reads == 6);
  CHECK(find_pattern_mismatch(back, n, 7) == SIZE_MAX);
  /* Unaligned ranges. */
  CHECK_OK(ferry_write(x, 12345, src + 99, (3u << 20) + 1));
  memset(back, 0, n);
  CHECK_OK(ferry_read(x, 12345, back, (3u << 20) + 1));
  CHECK(memcmp(back, src + 99, (3u << 20) + 1) == 0);
  CHECK_OK(ferry_host_to_device(ferry_array_of(src, n, FERRY_UINT8), x));
  /* Between the two devices without a peer path: A's DMA into its ring, B's
   * DMA out of it, no host copy. */
  fault.peer_unsupported = true;
  reads = fault.calls[OP_DMA_READ];
  writes = fault.calls[OP_DMA_WRITE];
  uint64_t copied = ferry__engine_host_copied();
  CHECK_OK(ferry_device_to_device(x, y));
  CHECK(fault.calls[OP_DMA_READ] - reads == 6 && fault.calls[OP_DMA_WRITE] - writes == 6);
  CHECK(ferry__engine_host_copied() == copied);
  memset(back, 0, n);
  CHECK_OK(ferry_device_to_host(y, ferry_array_of(back, n, FERRY_UINT8)));
  CHECK(find_pattern_mismatch(back, n, 7) == SIZE_MAX);
  /* Failures part way: an error, no hang, and the next transfer works. */
  fault_arm(OP_DMA_WRITE, FERRY_ERROR_BACKEND, 2);
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(src, n, FERRY_UINT8), x), FERRY_ERROR_BACKEND);
  expect_injected("dma_start (to the device)");
  fault_arm(OP_DMA_WAIT, FERRY_ERROR_BACKEND, 5);
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(src, n, FERRY_UINT8), x), FERRY_ERROR_BACKEND);
  expect_injected("dma_wait");
  fault_arm(OP_DMA_READ, FERRY_ERROR_BACKEND, 4);
  CHECK_STATUS(ferry_device_to_host(x, ferry_array_of(back, n, FERRY_UINT8)), FERRY_ERROR_BACKEND);
  fault_arm(OP_DMA_READ, FERRY_ERROR_BACKEND, 1);
  CHECK_STATUS(ferry_device_to_device(x, y), FERRY_ERROR_BACKEND);
  fault_arm(OP_DMA_WRITE, FERRY_ERROR_BACKEND, 2);
  CHECK_STATUS(ferry_device_to_device(x, y), FERRY_ERROR_BACKEND);
  /* A copy into the middle of a buffer that fails part way (the source's DMA or
   * the destination's) writes nothing outside its range. */
  size_t wide = n + 9000;
  unsigned char *model = malloc(wide), *seen = malloc(wide);
  fill_pattern(model, wide, 9);
  ferry_buffer z = {0};
  CHECK_OK(ferry_alloc(b, wide, FERRY_UINT8, &z));
  for (int way = 0; way < 2; way++) {
    CHECK_OK(ferry_write(z, 0, model, wide));
    fault_arm(way ? OP_DMA_READ : OP_DMA_WRITE, FERRY_ERROR_BACKEND, 3);
    CHECK_STATUS(ferry_copy(x, 0, z, 4000, n), FERRY_ERROR_BACKEND);
    memset(seen, 0, wide);
    CHECK_OK(ferry_read(z, 0, seen, wide));
    CHECK_MSG(memcmp(seen, model, 4000) == 0, "bytes before the failed copy's range changed");
    CHECK_MSG(memcmp(seen + 4000 + n, model + 4000 + n, wide - 4000 - n) == 0,
              "bytes after the failed copy's range changed");
  }
  CHECK_OK(ferry_free(z));
  free(model);
  free(seen);
  fault.peer_unsupported = false;
  CHECK_OK(ferry_host_to_device(ferry_array_of(src, n, FERRY_UINT8), x));
  memset(back, 0, n);
  CHECK_OK(ferry_device_to_host(x, ferry_array_of(back, n, FERRY_UINT8)));
  CHECK(find_pattern_mismatch(back, n, 7) == SIZE_MAX);
  /* Pinned memory skips the pipeline. */
  void *pinned = NULL;
  CHECK_OK(ferry_host_alloc(a, n, &pinned));
  memcpy(pinned, src, n);
  writes = fault.calls[OP_DMA_WRITE];
  copied = ferry__engine_host_copied();
  CHECK_OK(ferry_host_to_device(ferry_array_of(pinned, n, FERRY_UINT8), x));
  CHECK(fault.calls[OP_DMA_WRITE] == writes + 1); /* one DMA from the block itself */
  CHECK(ferry__engine_host_copied() == copied);
  CHECK_OK(ferry_host_free(pinned));
  /* Small transfers skip it too. */
  writes = fault.calls[OP_DMA_WRITE];
  CHECK_OK(ferry_write(x, 0, src, 1000));
  CHECK(fault.calls[OP_DMA_WRITE] == writes);
  CHECK_OK(ferry_free(x));
  CHECK_OK(ferry_free(y));
  free(src);
  free(back);
}

int main(void) {
  setenv("FERRY_STAGE_BYTES", "1M", 1);
  setenv("FERRY_STAGE_MIN", "64K", 1);
  /* Copy threads whatever the machine: staged transfers stream over them
   * (conformance.pipeline runs the engine's one-thread loop). */
  setenv("FERRY_COPY_THREADS", "3", 1);
  CHECK_OK(ferry__register_backend(&fault_backend));
  CHECK_OK(ferry__register_backend(&broken_backend));
  (void)ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "CALLER_SENTENCE"); /* the caller's, which the start keeps */
  CHECK_OK(ferry_init());
  CHECK_MSG(strcmp(ferry_last_error(), "CALLER_SENTENCE") == 0, "the start replaced the caller's sentence: %s",
            ferry_last_error());
  CHECK_STATUS(ferry__register_backend(&fault_backend), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK(fault.devices == 2);
  broken_backend_is_absent();
  each_operation_fails_cleanly();
  pipelined_transfers();
  ferry_shutdown();
  CHECK(fault.destroyed == 2 && fault.unloads == 1);

  /* Again without a cache, so that ferry_free reaches the driver's free. */
  setenv("FERRY_CACHE_LIMIT", "0", 1);
  fault.devices = 0;
  CHECK_OK(ferry_init());
  free_without_cache();
  ferry_shutdown();
  CHECK(fault.live_allocs == 0 && fault.live_imports == 0 && fault.live_host_blocks == 0);
  CHECK(fault.live_registrations == 0 && fault.pending_at_destroy == 0);
  harness_context = "";
  return harness_finish("fault");
}
