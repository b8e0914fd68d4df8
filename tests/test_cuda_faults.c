/*
 * cuda_faults: the cuda backend when the driver says no, on the fake driver
 * (tests/fake_cuda), which can fail any call on purpose.
 *
 * Every failure must come back as a status and a sentence that names the call,
 * the CUresult by name and number, the sizes and the device; out of memory with
 * the bytes asked and the device's free memory; a refused registration with its
 * reason; a failed call must leave nothing allocated or registered. Also: the
 * engine's operations (pin_alloc, pin_register, dma_start, dma_wait), the pinned
 * check, peer copies and their fallback, and, at the end, that ferry left
 * nothing behind in the driver.
 *
 * Skips (exit 77) on a real driver: it cannot be made to fail on purpose.
 */
#if !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif
#include "backends/cuda/cuda_api.h"
#include "core/companion.h"
#include "core/internal.h"
#include "fake_cuda/fake_cuda.h"
#include "harness.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static fake_cuda_inject_fn inject;
static void (*counts_get)(fake_cuda_counts *);
static fake_cuda_make_sticky_fn make_sticky;
static const ferry_cuda_api *api;
static ferry_device *dev0, *dev1;

static fake_cuda_counts counts(void) {
  fake_cuda_counts c;
  counts_get(&c);
  return c;
}

static void section(const char *name) {
  harness_context = name;
  printf("  %s\n", name);
}

/* The cuda devices of a fresh session. */
static bool start(void) {
  if (ferry_init() != FERRY_OK) return false;
  dev0 = dev1 = NULL;
  for (size_t i = 0; i < ferry_backend_count(); i++) {
    ferry_backend_info b;
    if (ferry_backend_get(i, &b) == FERRY_OK && strcmp(b.name, "cuda") == 0 && b.device_count > 0) {
      ferry_device_get(b.first_device, &dev0);
      if (b.device_count > 1) ferry_device_get(b.first_device + 1, &dev1);
    }
  }
  api = ferry__cuda_api();
  return dev0 && api;
}

static cu_context ctx_of(ferry_device *dev) {
  ferry_native nat;
  ferry_device_native(dev, &nat);
  return (cu_context)nat.context;
}

/* ---- device info -------------------------------------------------------------------- */

static void device_facts(void) {
  section("device info and native handles");
  ferry_device_info info;
  CHECK_OK(ferry_device_info_get(dev0, &info));
  CHECK(strcmp(info.name, "Fake CUDA GPU 0 (sm_90)") == 0);
  CHECK(strcmp(info.backend, "cuda") == 0);
  CHECK(info.total_memory == (1ull << 30) && info.max_allocation == info.total_memory);
  CHECK(!info.is_cpu && !info.zero_copy && info.host_ptr);
  CHECK(info.host_ptr_alignment == (size_t)sysconf(_SC_PAGESIZE));
  ferry_native nat;
  CHECK_OK(ferry_device_native(dev0, &nat));
  cu_device d = -1;
  CHECK(api->cuDeviceGet(&d, 0) == FCU_SUCCESS);
  CHECK(nat.device == (uintptr_t)d);
  cu_context primary = NULL;
  CHECK(api->cuDevicePrimaryCtxRetain(&primary, d) == FCU_SUCCESS);
  CHECK(nat.context == (uintptr_t)primary);
  CHECK(api->cuDevicePrimaryCtxRelease(d) == FCU_SUCCESS);
  CHECK(nat.queue == 0 && nat.queue_family == 0);
  /* free_memory is the driver's. */
  size_t free_bytes = 0, total = 0;
  CHECK(api->cuCtxPushCurrent(primary) == FCU_SUCCESS);
  CHECK(api->cuMemGetInfo(&free_bytes, &total) == FCU_SUCCESS);
  cu_context popped;
  CHECK(api->cuCtxPopCurrent(&popped) == FCU_SUCCESS);
  CHECK(dev0->ops->free_memory(dev0) == free_bytes);
}

/* ---- device memory -------------------------------------------------------------------- */

static void device_memory(void) {
  section("allocations: SYNC_MEMOPS, out of memory, driver errors");
  CHECK_OK(ferry_device_trim(dev0));
  fake_cuda_counts before = counts();
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev0, 12345, FERRY_UINT8, &b));
  CHECK(counts().sync_memops_set == before.sync_memops_set + 1);
  CHECK_OK(ferry_free(b));
  CHECK_OK(ferry_device_trim(dev0));

  /* Out of memory, for real: 1 GiB, two buffers of 400 MiB fit, a third does not. */
  ferry_buffer x = FERRY_NULL_BUFFER, y = FERRY_NULL_BUFFER, z = FERRY_NULL_BUFFER;
  size_t big = (size_t)400 << 20;
  CHECK_OK(ferry_alloc(dev0, big, FERRY_UINT8, &x));
  CHECK_OK(ferry_alloc(dev0, big, FERRY_UINT8, &y));
  before = counts();
  CHECK_STATUS(ferry_alloc(dev0, big, FERRY_UINT8, &z), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_ERROR_HAS("ferry_alloc");
  CHECK_ERROR_HAS("cuMemAlloc_v2");
  CHECK_ERROR_HAS("CUDA_ERROR_OUT_OF_MEMORY (2)");
  CHECK_ERROR_HAS("419430400"); /* the bytes asked */
  CHECK_ERROR_HAS("free of 1 GiB");
  CHECK_ERROR_HAS("Fake CUDA GPU 0 (sm_90)");
  CHECK(counts().device_allocations == before.device_allocations);
  CHECK_OK(ferry_free(x));
  CHECK_OK(ferry_free(y));
  CHECK_OK(ferry_device_trim(dev0));

  /* Injected: out of memory on every try. */
  before = counts();
  CHECK(inject("cuMemAlloc_v2", FCU_ERROR_OUT_OF_MEMORY, 0, 10) == 0);
  CHECK_STATUS(ferry_alloc(dev0, 1000, FERRY_FLOAT32, &z), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_ERROR_HAS("free of");
  inject(NULL, 0, 0, 0);
  /* Other failures are FERRY_ERROR_BACKEND with the code. */
  CHECK(inject("cuMemAlloc_v2", FCU_ERROR_UNKNOWN, 0, 1) == 0);
  CHECK_STATUS(ferry_alloc(dev0, 1000, FERRY_FLOAT32, &z), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("CUDA_ERROR_UNKNOWN (999)");
  CHECK(inject("cuMemAlloc_v2", 12345, 0, 1) == 0);
  CHECK_STATUS(ferry_alloc(dev0, 1000, FERRY_FLOAT32, &z), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("CUresult 12345");
  CHECK(z.id == 0);
  CHECK(counts().device_allocations == before.device_allocations);
  inject(NULL, 0, 0, 0);
}

/* ---- transfers ---------------------------------------------------------------------------- */

static void transfer_errors(void) {
  section("transfer errors name the call, the code and the sizes");
  unsigned char h[4096];
  fill_pattern(h, sizeof h, 5);
  ferry_buffer b = FERRY_NULL_BUFFER, c = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev0, sizeof h, FERRY_UINT8, &b));
  CHECK_OK(ferry_alloc(dev0, sizeof h, FERRY_UINT8, &c));
  /* (FERRY_CUDA_H2D=memops: a small write is one cuMemcpyHtoD into memory marked SYNC_MEMOPS.) */
  CHECK(inject("cuMemcpyHtoD_v2", FCU_ERROR_ILLEGAL_ADDRESS, 0, 1) == 0);
  CHECK_STATUS(ferry_write(b, 100, h, 64), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("ferry_write");
  CHECK_ERROR_HAS("cuMemcpyHtoD_v2 of 64 bytes");
  CHECK_ERROR_HAS("offset 100");
  CHECK_ERROR_HAS("CUDA_ERROR_ILLEGAL_ADDRESS (700)");
  CHECK_ERROR_HAS("sticky");
  CHECK_ERROR_HAS("device 0 (cuda: Fake CUDA GPU 0 (sm_90))");
  CHECK(inject("cuMemcpyDtoHAsync_v2", FCU_ERROR_INVALID_VALUE, 0, 1) == 0);
  CHECK_STATUS(ferry_read(b, 0, h, sizeof h), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("cuMemcpyDtoHAsync_v2 of 4096 bytes");
  CHECK_ERROR_HAS("CUDA_ERROR_INVALID_VALUE (1)");
  CHECK_OK(ferry_write(b, 0, h, sizeof h));
  CHECK(inject("cuEventSynchronize", FCU_ERROR_LAUNCH_FAILED, 0, 1) == 0);
  CHECK_STATUS(ferry_copy(b, 0, c, 0, 1000), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("ferry_copy: from bytes 0..1000 of buffer");
  CHECK_ERROR_HAS("cuEventSynchronize (waiting for the stream's work)");
  CHECK_ERROR_HAS("CUDA_ERROR_LAUNCH_FAILED (719)");
  /* The wait failed but the copy did not: it has finished when the call returns, so nothing
     writes c (or reads b) behind the caller's back. The fake's device memory is host memory. */
  CHECK_MSG(memcmp((const void *)ferry_device_ptr(c), h, 1000) == 0,
            "ferry_copy returned its failed wait while the copy was still running");
  /* The same calls work again. */
  CHECK_OK(ferry_write(b, 0, h, sizeof h));
  CHECK_OK(ferry_copy(b, 0, c, 0, sizeof h));
  unsigned char back[4096];
  CHECK_OK(ferry_read(c, 0, back, sizeof back));
  CHECK(memcmp(h, back, sizeof h) == 0);

  /* A sticky error (a kernel faulted): every call says so. */
  CHECK(make_sticky(0, FCU_ERROR_ILLEGAL_ADDRESS) == 0);
  CHECK_STATUS(ferry_write(b, 0, h, 8), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("sticky");
  CHECK_STATUS(ferry_device_synchronize(dev0), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("cuCtxSynchronize");
  CHECK_ERROR_HAS("compute-sanitizer");
  ferry_buffer d = FERRY_NULL_BUFFER;
  CHECK_STATUS(ferry_alloc(dev0, 1 << 20, FERRY_UINT8, &d), FERRY_ERROR_BACKEND);
  CHECK(make_sticky(0, 0) == 0); /* the fake can recover; a GPU cannot */
  CHECK_OK(ferry_device_synchronize(dev0));
  CHECK_OK(ferry_free(b));
  CHECK_OK(ferry_free(c));
}

/* An operation from a thread with no current context. */
static void *fresh_thread_write(void *arg) {
  ferry_buffer *b = arg;
  int word = 7;
  static char message[1024];
  ferry_status st = ferry_write(*b, 0, &word, sizeof word);
  snprintf(message, sizeof message, "%s", ferry_last_error());
  return st == FERRY_ERROR_BACKEND && strstr(message, "cuCtxSetCurrent") ? (void *)1 : NULL;
}

static void context_errors(void) {
  section("making the context current fails");
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev0, 64, FERRY_UINT8, &b));
  CHECK(inject("cuCtxSetCurrent", FCU_ERROR_INVALID_CONTEXT, 0, 1) == 0);
  pthread_t t;
  void *ok = NULL;
  CHECK(pthread_create(&t, NULL, fresh_thread_write, &b) == 0);
  pthread_join(t, &ok);
  CHECK_MSG(ok != NULL, "a write from a fresh thread with cuCtxSetCurrent failing did not report it");
  inject(NULL, 0, 0, 0);
  if (dev1) {
    /* Another context current: pushed and popped, and it stays current. */
    cu_context other = ctx_of(dev1);
    CHECK(api->cuCtxPushCurrent(other) == FCU_SUCCESS);
    CHECK(inject("cuCtxPushCurrent_v2", FCU_ERROR_INVALID_CONTEXT, 0, 1) == 0);
    int word = 1;
    CHECK_STATUS(ferry_write(b, 0, &word, sizeof word), FERRY_ERROR_BACKEND);
    CHECK_ERROR_HAS("cuCtxPushCurrent_v2");
    CHECK_OK(ferry_write(b, 0, &word, sizeof word));
    cu_context now = NULL;
    CHECK(api->cuCtxGetCurrent(&now) == FCU_SUCCESS && now == other);
    cu_context popped;
    CHECK(api->cuCtxPopCurrent(&popped) == FCU_SUCCESS);
  }
  CHECK_OK(ferry_free(b));
}

/* ---- host-pointer buffers --------------------------------------------------------------------- */

static void host_ptr_refusals(void) {
  section("host-pointer buffers: refusals and unregistering");
  size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = page * 4;
  unsigned char *array = harness_aligned(page, bytes);
  fill_pattern(array, bytes, 9);
  ferry_array a = ferry_array_of(array, bytes, FERRY_UINT8);
  ferry_buffer h = FERRY_NULL_BUFFER;
  ferry_refusal why = FERRY_REFUSAL_NONE;
  fake_cuda_counts before = counts();

  CHECK(inject("cuMemHostRegister_v2", FCU_ERROR_HOST_MEMORY_ALREADY_REGISTERED, 0, 1) == 0);
  CHECK_STATUS(ferry_alloc_host_ptr(dev0, a, &h, &why), FERRY_ERROR_REFUSED);
  CHECK(why == FERRY_REFUSAL_OVERLAP);
  CHECK_ERROR_HAS("CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED (712)");
  CHECK_ERROR_HAS("already registered with CUDA");
  CHECK(inject("cuMemHostRegister_v2", FCU_ERROR_INVALID_VALUE, 0, 1) == 0);
  CHECK_STATUS(ferry_alloc_host_ptr(dev0, a, &h, &why), FERRY_ERROR_REFUSED);
  CHECK(why == FERRY_REFUSAL_DRIVER);
  CHECK_ERROR_HAS("cuMemHostRegister_v2");
  CHECK_ERROR_HAS("CUDA_ERROR_INVALID_VALUE (1)");
  CHECK(inject("cuMemHostRegister_v2", FCU_ERROR_OUT_OF_MEMORY, 0, 1) == 0);
  CHECK_STATUS(ferry_alloc_host_ptr(dev0, a, &h, &why), FERRY_ERROR_REFUSED);
  CHECK(why == FERRY_REFUSAL_DRIVER);
  CHECK(inject("cuMemHostGetDevicePointer_v2", FCU_ERROR_INVALID_VALUE, 0, 1) == 0);
  CHECK_STATUS(ferry_alloc_host_ptr(dev0, a, &h, &why), FERRY_ERROR_REFUSED);
  CHECK(why == FERRY_REFUSAL_DRIVER);
  CHECK_ERROR_HAS("cuMemHostGetDevicePointer_v2");
  CHECK(counts().registered_ranges == before.registered_ranges); /* unregistered again */

  /* Memory the program registered itself: the driver refuses, ferry says overlap. */
  cu_context ctx = ctx_of(dev0);
  cu_context popped;
  CHECK(api->cuCtxPushCurrent(ctx) == FCU_SUCCESS);
  CHECK(api->cuMemHostRegister(array + page, page, 0) == FCU_SUCCESS);
  CHECK_STATUS(ferry_alloc_host_ptr(dev0, a, &h, &why), FERRY_ERROR_REFUSED);
  CHECK(why == FERRY_REFUSAL_OVERLAP);
  CHECK_ERROR_HAS("by the program itself or by another library");
  CHECK(api->cuMemHostUnregister(array + page) == FCU_SUCCESS);
  CHECK(api->cuCtxPopCurrent(&popped) == FCU_SUCCESS);
  CHECK(h.id == 0);

  /* Free always unregisters; a failing unregister is reported. */
  before = counts();
  CHECK_OK(ferry_alloc_host_ptr(dev0, a, &h, &why));
  CHECK(counts().registered_ranges == before.registered_ranges + 1);
  CHECK_OK(ferry_free(h));
  CHECK(counts().registered_ranges == before.registered_ranges);
  CHECK(counts().unregisters == before.unregisters + 1);
  CHECK_OK(ferry_alloc_host_ptr(dev0, a, &h, &why));
  CHECK(inject("cuMemHostUnregister", FCU_ERROR_INVALID_VALUE, 0, 1) == 0);
  CHECK_STATUS(ferry_free(h), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("released, but");
  CHECK_ERROR_HAS("cuMemHostUnregister");
  CHECK(api->cuCtxPushCurrent(ctx) == FCU_SUCCESS); /* tidy up what the fault left */
  CHECK(api->cuMemHostUnregister(array) == FCU_SUCCESS);
  CHECK(api->cuCtxPopCurrent(&popped) == FCU_SUCCESS);
  CHECK(find_pattern_mismatch(array, bytes, 9) == SIZE_MAX);
  free(array);
}

/* ---- pinned memory and DMA for the core's engine ------------------------------------------------ */

static void dma_ops(void) {
  section("pin_alloc, pin_register, pin_release, dma_start, dma_wait, host_pinned");
  const ferry_device_ops *ops = dev0->ops;
  CHECK(ops->pin_alloc && ops->pin_register && ops->pin_release && ops->dma_start && ops->ticket_wait &&
        ops->host_pinned);
  if (!ops->dma_start) return;
  enum { BLOCKS = 4 };
  size_t block_bytes = 1 << 16, total = block_bytes * BLOCKS * 3;
  ferry_mem mem;
  CHECK_OK(ops->alloc(dev0, total, &mem));
  unsigned char *blocks[BLOCKS], *model = malloc(total), *back = malloc(total);
  ferry_pinned pins[BLOCKS];
  ferry_ticket tickets[BLOCKS];
  bool busy[BLOCKS] = {false};
  fill_pattern(model, total, 77);
  for (unsigned s = 0; s < BLOCKS; s++) {
    CHECK_OK(ferry_host_alloc(dev0, block_bytes, (void **)&blocks[s]));
    CHECK(ferry__pinned_find(dev0, blocks[s], block_bytes, &pins[s]));
  }
  /* Three rounds over the blocks, each block's copy waited for before it is refilled. */
  for (size_t off = 0, i = 0; off < total; off += block_bytes, i++) {
    unsigned s = (unsigned)(i % BLOCKS);
    if (busy[s]) CHECK_OK(ferry__ticket_finish(dev0, tickets[s]));
    memcpy(blocks[s], model + off, block_bytes);
    CHECK_OK(ops->dma_start(dev0, NULL, FERRY_DMA_TO_DEVICE, &mem, off, &pins[s], block_bytes, &tickets[s]));
    busy[s] = true;
  }
  for (unsigned s = 0; s < BLOCKS; s++)
    CHECK_OK(ferry__ticket_finish(dev0, tickets[s]));
  CHECK_OK(ops->read(dev0, NULL, &mem, 0, back, total));
  CHECK(memcmp(model, back, total) == 0);
  /* And back out. */
  memset(back, 0, total);
  for (size_t off = 0, i = 0; off < total; off += block_bytes, i++) {
    unsigned s = (unsigned)(i % BLOCKS);
    if (i >= BLOCKS) {
      CHECK_OK(ferry__ticket_finish(dev0, tickets[s]));
      memcpy(back + off - BLOCKS * block_bytes, blocks[s], block_bytes);
    }
    CHECK_OK(ops->dma_start(dev0, NULL, FERRY_DMA_TO_HOST, &mem, off, &pins[s], block_bytes, &tickets[s]));
  }
  for (size_t i = total / block_bytes - BLOCKS; i < total / block_bytes; i++) {
    unsigned s = (unsigned)(i % BLOCKS);
    CHECK_OK(ferry__ticket_finish(dev0, tickets[s]));
    memcpy(back + i * block_bytes, blocks[s], block_bytes);
  }
  CHECK(memcmp(model, back, total) == 0);
  /* Failures name the call, the bytes and the memory; a failed wait still ends the ticket. */
  ferry_ticket t = 0;
  CHECK(inject("cuMemcpyHtoDAsync_v2", FCU_ERROR_INVALID_VALUE, 0, 1) == 0);
  CHECK_STATUS(ops->dma_start(dev0, NULL, FERRY_DMA_TO_DEVICE, &mem, 0, &pins[2], 100, &t), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("cuMemcpyHtoDAsync_v2 of 100 bytes from pinned host memory");
  CHECK_OK(ops->dma_start(dev0, NULL, FERRY_DMA_TO_HOST, &mem, 0, &pins[1], 100, &t));
  CHECK(inject("cuEventSynchronize", FCU_ERROR_LAUNCH_FAILED, 0, 1) == 0);
  CHECK_STATUS(ferry__ticket_finish(dev0, t), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("cuEventSynchronize (waiting for the stream's work)");

  /* Pinned or not. */
  CHECK(!ops->host_pinned(dev0, model, total));
  CHECK(ops->host_pinned(dev0, blocks[0], block_bytes));
  CHECK(ops->host_pinned(dev0, blocks[0] + 10, block_bytes - 10));
  CHECK(!ops->host_pinned(dev0, blocks[0] + 10, block_bytes));
  CHECK(!ops->host_pinned(dev0, blocks[0], 0));
  cu_context ctx = ctx_of(dev0), popped;
  void *raw = NULL;
  CHECK(api->cuCtxPushCurrent(ctx) == FCU_SUCCESS);
  CHECK(api->cuMemAllocHost(&raw, 10000) == FCU_SUCCESS);
  CHECK(ops->host_pinned(dev0, raw, 10000));
  CHECK(api->cuMemFreeHost(raw) == FCU_SUCCESS);
  CHECK(api->cuCtxPopCurrent(&popped) == FCU_SUCCESS);
  /* pin_register pins page-aligned memory of another allocator until pin_release; a
   * block the driver pinned already needs nothing. */
  unsigned char *plain = harness_aligned(4096, block_bytes);
  uintptr_t token = 0;
  CHECK_OK(ops->pin_register(dev0, plain, block_bytes, &token));
  CHECK(ops->host_pinned(dev0, plain, block_bytes));
  memcpy(plain, model, block_bytes);
  ferry_pinned pin = {.host = plain, .token = token, .offset = 0};
  CHECK_OK(ops->dma_start(dev0, NULL, FERRY_DMA_TO_DEVICE, &mem, 0, &pin, block_bytes, &t));
  CHECK_OK(ferry__ticket_finish(dev0, t));
  ops->pin_release(dev0, plain, block_bytes, token, false);
  CHECK(!ops->host_pinned(dev0, plain, block_bytes));
  CHECK(inject("cuMemHostRegister_v2", FCU_ERROR_OUT_OF_MEMORY, 0, 1) == 0);
  CHECK_STATUS(ops->pin_register(dev0, plain, block_bytes, &token), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_ERROR_HAS("cuMemHostRegister_v2");
  CHECK_OK(ops->pin_register(dev0, blocks[0], block_bytes, &token));
  ops->pin_release(dev0, blocks[0], block_bytes, token, false);
  CHECK(ops->host_pinned(dev0, blocks[0], block_bytes));
  free(plain);
  for (unsigned s = 0; s < BLOCKS; s++)
    CHECK_OK(ferry_host_free(blocks[s]));
  CHECK_OK(ops->free(dev0, &mem));
  free(model);
  free(back);
}

/* ---- peer copies ----------------------------------------------------------------------------------- */

static void cross_copy(size_t n, uint32_t seed) {
  unsigned char *h = malloc(n), *back = malloc(n);
  fill_pattern(h, n, seed);
  ferry_buffer a = FERRY_NULL_BUFFER, b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev0, n, FERRY_UINT8, &a));
  CHECK_OK(ferry_alloc(dev1, n, FERRY_UINT8, &b));
  CHECK_OK(ferry_host_ptr_to_device(h, n, a));
  CHECK_OK(ferry_device_to_device(a, b));
  CHECK_OK(ferry_device_to_host_ptr(b, back, n));
  CHECK(memcmp(h, back, n) == 0);
  CHECK_OK(ferry_free(a));
  CHECK_OK(ferry_free(b));
  free(h);
  free(back);
}

static void peer_copies(void) {
  if (!dev1) return;
  section("peer copies, and staging when peer access cannot be enabled");
  /* Enabling fails: the pair is staged by the core, correctly. */
  long peer_before = counts().peer_copies;
  CHECK(inject("cuCtxEnablePeerAccess", FCU_ERROR_TOO_MANY_PEERS, 0, 1) == 0);
  cross_copy(100000, 1);
  CHECK(counts().peer_copies == peer_before);
  inject(NULL, 0, 0, 0);
  ferry_shutdown();
  CHECK(start());
  /* The program enabled one direction itself: ferry copes. */
  cu_context popped;
  CHECK(api->cuCtxPushCurrent(ctx_of(dev1)) == FCU_SUCCESS);
  CHECK(api->cuCtxEnablePeerAccess(ctx_of(dev0), 0) == FCU_SUCCESS);
  CHECK(api->cuCtxPopCurrent(&popped) == FCU_SUCCESS);
  peer_before = counts().peer_copies;
  cross_copy(100000, 2);
  cross_copy(3, 3);
  CHECK(counts().peer_copies == peer_before + 2);
  CHECK(inject("cuMemcpyPeerAsync", FCU_ERROR_INVALID_VALUE, 0, 1) == 0);
  ferry_buffer a = FERRY_NULL_BUFFER, b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev0, 4096, FERRY_UINT8, &a));
  CHECK_OK(ferry_alloc(dev1, 4096, FERRY_UINT8, &b));
  CHECK_STATUS(ferry_device_to_device(a, b), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("cuMemcpyPeerAsync of 4096 bytes from device 0 (cuda: Fake CUDA GPU 0 (sm_90))");
  CHECK_ERROR_HAS("to device 1 (cuda: Fake CUDA GPU 1 (sm_90))");
  CHECK_OK(ferry_free(a));
  CHECK_OK(ferry_free(b));
  /* FERRY_CUDA_PEER=0: always staged. */
  ferry_shutdown();
  setenv("FERRY_CUDA_PEER", "0", 1);
  CHECK(start());
  peer_before = counts().peer_copies;
  cross_copy(100000, 4);
  CHECK(counts().peer_copies == peer_before);
  unsetenv("FERRY_CUDA_PEER");
}

/* ---- pinned blocks the driver does not page-align ------------------------------------------------- */

static void misaligned_pinned(void) {
  section("ferry_host_alloc when the driver's blocks are not page-aligned");
  ferry_shutdown();
  setenv("FAKE_CUDA_HOST_MISALIGN", "1", 1);
  CHECK(start());
  long blocks = counts().pinned_blocks;
  void *p = NULL, *q = NULL;
  CHECK_OK(ferry_host_alloc(dev0, 10000, &p));
  CHECK_OK(ferry_host_alloc(dev0, 1, &q));
  CHECK(((uintptr_t)p % 4096) == 0 && ((uintptr_t)q % 4096) == 0);
  CHECK(counts().pinned_blocks == blocks + 2);
  fill_pattern(p, 10000, 12);
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev0, 10000, FERRY_UINT8, &b));
  CHECK_OK(ferry_write(b, 0, p, 10000));
  memset(p, 0, 10000);
  CHECK_OK(ferry_read(b, 0, p, 10000));
  CHECK(find_pattern_mismatch(p, 10000, 12) == SIZE_MAX);
  CHECK_OK(ferry_free(b));
  CHECK_OK(ferry_host_free(p));
  CHECK(counts().pinned_blocks == blocks + 1);
  /* q is left for ferry_shutdown to release. */
  ferry_shutdown();
  unsetenv("FAKE_CUDA_HOST_MISALIGN");
  CHECK(start());
}

/* ---- host memory a companion library lends (libferry_mpi's staging) --------------------------------- */

static void lent_memory(void) {
  section("memory lent to the pinned registry by a companion library");
  const size_t bytes = (size_t)3 << 20;
  void *mem = NULL;
  CHECK(posix_memalign(&mem, 4096, bytes) == 0);
  char *p = mem;
  uint64_t session = 0;
  CHECK_STATUS(ferry__companion_lend(p + 1, 4096, &session), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("page-aligned");
  CHECK_STATUS(ferry__companion_lend(p, 0, &session), FERRY_ERROR_INVALID_ARGUMENT);
  /* A last page only partly the lender's would be pinned under the next heap block. */
  CHECK_STATUS(ferry__companion_lend(p, 4097, &session), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("whole pages");
  CHECK(session == 0);
  fake_cuda_counts before = counts();
  CHECK_OK(ferry__companion_lend(p, bytes, &session));
  CHECK(session == ferry__companion_session());
  CHECK_STATUS(ferry__companion_lend(p + 4096, 4096, &session), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("overlap");
  CHECK(counts().registered_ranges == before.registered_ranges); /* registered at the first transfer only */
  ferry_pinned pin;
  CHECK(ferry__pinned_find(dev0, p + 4096, 4096, &pin));
  CHECK(counts().registered_ranges == before.registered_ranges + 1);
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev0, bytes, FERRY_UINT8, &b));
  fill_pattern(p, bytes, 21);
  CHECK_OK(ferry_write(b, 0, p, bytes));
  memset(p, 0, bytes);
  CHECK_OK(ferry_read(b, 0, p, bytes));
  CHECK(find_pattern_mismatch(p, bytes, 21) == SIZE_MAX);
  CHECK(ferry_host_free(p) == FERRY_ERROR_INVALID_ARGUMENT); /* never the user's to free through ferry */
  ferry__companion_take_back(p, session);
  CHECK(counts().registered_ranges == before.registered_ranges);
  CHECK(!ferry__pinned_find(dev0, p, 4096, &pin));
  ferry__companion_take_back(p, session); /* twice: nothing */

  /* ferry_shutdown unregisters lent memory and leaves it to its owner; a take-back
   * of the old session afterwards does nothing and does not start ferry again. */
  CHECK_OK(ferry__companion_lend(p, bytes, &session));
  CHECK(ferry__pinned_find(dev0, p, bytes, &pin));
  CHECK_OK(ferry_free(b));
  ferry_shutdown();
  CHECK(counts().registered_ranges == 0);
  memset(p, 7, bytes); /* still the owner's (ASan: not freed) */
  ferry__companion_take_back(p, session);
  CHECK(ferry__companion_session() != session);
  CHECK(start());
  CHECK(!ferry__pinned_find(dev0, p, 4096, &pin));
  free(mem);
}

/* A word of pinned memory mapped for the device, 0, that streams can wait on
 * (cuStreamWaitValue32 on the address returned); they read it atomically, so
 * the test writes it with __atomic_store_n. Freed with cuMemFreeHost(*host). */
static cu_deviceptr gate_new(void **host) {
  cu_deviceptr gate = 0;
  CHECK(api->cuMemHostAlloc(host, 4096, FCU_MEMHOSTALLOC_PORTABLE | FCU_MEMHOSTALLOC_DEVICEMAP) == FCU_SUCCESS);
  CHECK(api->cuMemHostGetDevicePointer(&gate, *host, 0) == FCU_SUCCESS);
  if (*host) __atomic_store_n((uint32_t *)*host, 0, __ATOMIC_RELEASE);
  return gate;
}

/* ---- staging belongs to operations ------------------------------------------------------ */

typedef struct other_side {
  ferry_queue q;
  ferry_buffer buf;
  unsigned char *host, *back;
  size_t bytes;
  _Atomic int done;
  ferry_status st;
  char error[1024];
} other_side;

/* A read staged on a second queue, then a synchronous write and read of another
 * thread's: each takes a ring of its own. */
static void *other_side_run(void *arg) {
  other_side *o = arg;
  ferry_status st = ferry_read_async(o->q, o->buf, 0, o->back, o->bytes);
  if (st == FERRY_OK) st = ferry_queue_synchronize(o->q);
  if (st == FERRY_OK && (st = ferry_write(o->buf, 0, o->host, o->bytes)) == FERRY_OK)
    st = ferry_read(o->buf, 0, o->back, o->bytes);
  o->st = st;
  if (st != FERRY_OK) snprintf(o->error, sizeof o->error, "%s", ferry_last_error());
  atomic_store(&o->done, 1);
  return NULL;
}

static void staging_per_operation(void) {
  section("a staged transfer held on one queue does not hold back another queue's or thread's");
  CHECK(api->cuCtxSetCurrent(ctx_of(dev0)) == FCU_SUCCESS);
  void *gate_host = NULL;
  cu_deviceptr gate = gate_new(&gate_host);
  uint32_t *word = gate_host;
  const size_t bytes = (size_t)64 << 20; /* many pieces: more than a ring holds */
  ferry_queue held = FERRY_NULL_QUEUE;
  other_side o = {.bytes = bytes};
  unsigned char *src = malloc(bytes);
  o.host = malloc(bytes);
  o.back = malloc(bytes);
  ferry_buffer a = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev0, bytes, FERRY_UINT8, &a));
  CHECK_OK(ferry_alloc(dev0, bytes, FERRY_UINT8, &o.buf));
  fill_pattern(src, bytes, 41);
  fill_pattern(o.host, bytes, 42);
  CHECK_OK(ferry_write(o.buf, 0, o.host, bytes));
  CHECK_OK(ferry_queue_create(dev0, &held));
  CHECK_OK(ferry_queue_create(dev0, &o.q));
  /* The held queue's stream waits for the word: its staged write fills its ring
   * and stops there, holding it. */
  ferry_native qn;
  CHECK_OK(ferry_queue_native(held, &qn));
  CHECK(api->cuStreamWaitValue32((cu_stream)qn.queue, gate, 1, FCU_STREAM_WAIT_VALUE_GEQ) == FCU_SUCCESS);
  CHECK_OK(ferry_write_async(held, a, 0, src, bytes));
  pthread_t t;
  CHECK(pthread_create(&t, NULL, other_side_run, &o) == 0);
  for (int i = 0; i < 1000 && !atomic_load(&o.done); i++)
    usleep(10000);
  CHECK_MSG(atomic_load(&o.done), "a staged transfer on a second queue, or another thread's, waited for the held one");
  CHECK_STATUS(ferry_queue_query(held), FERRY_NOT_READY); /* still held */
  __atomic_store_n(word, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  CHECK_MSG(o.st == FERRY_OK, "the other queue's and thread's transfers: %s", o.error);
  CHECK(find_pattern_mismatch(o.back, bytes, 42) == SIZE_MAX);
  CHECK_OK(ferry_queue_synchronize(held));
  memset(o.back, 0, bytes);
  CHECK_OK(ferry_read(a, 0, o.back, bytes));
  CHECK(find_pattern_mismatch(o.back, bytes, 41) == SIZE_MAX);
  CHECK_OK(ferry_queue_destroy(held));
  CHECK_OK(ferry_queue_destroy(o.q));
  CHECK_OK(ferry_free(a));
  CHECK_OK(ferry_free(o.buf));
  CHECK(api->cuMemFreeHost(gate_host) == FCU_SUCCESS);
  free(src);
  free(o.host);
  free(o.back);
}

/* ---- ferry waits only for its own work ------------------------------------------------ */

typedef struct own_work {
  ferry_buffer a, b;
  unsigned char *host, *back;
  size_t small, large;
  _Atomic int done; /* 1: every call returned */
  ferry_status st;
  char error[1024];
} own_work;

/* Every synchronous call, and a queue of ferry's, while the program's streams wait. */
static void *own_work_run(void *arg) {
  own_work *w = arg;
  ferry_status st = FERRY_OK;
  ferry_queue q = FERRY_NULL_QUEUE;
  unsigned char seven = 7;
  const size_t sizes[2] = {w->small, w->large};
  for (int i = 0; i < 2 && st == FERRY_OK; i++) {
    size_t n = sizes[i];
    if ((st = ferry_write(w->a, 0, w->host, n)) == FERRY_OK && (st = ferry_read(w->a, 0, w->back, n)) == FERRY_OK &&
        (st = ferry_copy(w->a, 0, w->b, 0, n)) == FERRY_OK)
      st = ferry_fill(w->b, 0, n, &seven, 1);
  }
  if (st == FERRY_OK && (st = ferry_queue_create(dev0, &q)) == FERRY_OK) {
    if ((st = ferry_write_async(q, w->a, 0, w->host, w->large)) == FERRY_OK &&
        (st = ferry_copy_async(q, w->a, 0, w->b, 0, w->large)) == FERRY_OK)
      st = ferry_read_async(q, w->b, 0, w->back, w->large);
    ferry_status end = ferry_queue_destroy(q);
    if (st == FERRY_OK) st = end;
  }
  w->st = st;
  if (st != FERRY_OK) snprintf(w->error, sizeof w->error, "%s", ferry_last_error());
  atomic_store(&w->done, 1);
  return NULL;
}

static void blocked_user_streams(void) {
  section("the program's streams blocked forever do not delay ferry's calls");
  /* The default way of completing pageable writes: FERRY_CUDA_H2D=memops (the
   * rest of this program's mode) goes through the legacy stream by design. */
  ferry_shutdown();
  CHECK_OK(ferry_set_option("FERRY_CUDA_H2D", "stream"));
  CHECK(start());
  cu_context ctx = ctx_of(dev0);
  CHECK(api->cuCtxSetCurrent(ctx) == FCU_SUCCESS);
  /* A gate word the streams wait for, in pinned memory mapped for the device. */
  void *gate_host = NULL;
  cu_deviceptr gate = gate_new(&gate_host);
  uint32_t *word = gate_host;
  cu_stream blocking = NULL, nonblocking = NULL;
  CHECK(api->cuStreamCreate(&blocking, FCU_STREAM_DEFAULT) == FCU_SUCCESS);
  CHECK(api->cuStreamCreate(&nonblocking, FCU_STREAM_NON_BLOCKING) == FCU_SUCCESS);
  /* The legacy stream, a blocking stream (which the legacy stream waits for) and
   * a non-blocking one, each held until the word is raised. */
  CHECK(api->cuStreamWaitValue32(NULL, gate, 1, FCU_STREAM_WAIT_VALUE_GEQ) == FCU_SUCCESS);
  CHECK(api->cuStreamWaitValue32(blocking, gate, 1, FCU_STREAM_WAIT_VALUE_GEQ) == FCU_SUCCESS);
  CHECK(api->cuStreamWaitValue32(nonblocking, gate, 1, FCU_STREAM_WAIT_VALUE_GEQ) == FCU_SUCCESS);
  own_work w = {.small = 64, .large = (size_t)8 << 20};
  w.host = malloc(w.large);
  w.back = malloc(w.large);
  CHECK_OK(ferry_alloc(dev0, w.large, FERRY_UINT8, &w.a));
  CHECK_OK(ferry_alloc(dev0, w.large, FERRY_UINT8, &w.b));
  fill_pattern(w.host, w.large, 31);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, own_work_run, &w) == 0);
  /* Ten seconds for what takes milliseconds; the gate is raised either way, so a
   * failure here never hangs the test. */
  for (int i = 0; i < 1000 && !atomic_load(&w.done); i++)
    usleep(10000);
  CHECK_MSG(atomic_load(&w.done), "ferry's synchronous calls or queue waited for the program's blocked streams");
  __atomic_store_n(word, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  CHECK_MSG(w.st == FERRY_OK, "ferry's calls under blocked streams: %s", w.error);
  CHECK(find_pattern_mismatch(w.back, w.large, 31) == SIZE_MAX);
  CHECK(api->cuStreamSynchronize(blocking) == FCU_SUCCESS && api->cuStreamSynchronize(nonblocking) == FCU_SUCCESS &&
        api->cuStreamSynchronize(NULL) == FCU_SUCCESS);
  CHECK(api->cuStreamDestroy(blocking) == FCU_SUCCESS && api->cuStreamDestroy(nonblocking) == FCU_SUCCESS);
  CHECK(api->cuMemFreeHost(gate_host) == FCU_SUCCESS);
  CHECK_OK(ferry_free(w.a));
  CHECK_OK(ferry_free(w.b));
  free(w.host);
  free(w.back);
}

/* ---- the program's own work on a queue's stream ------------------------------------------- */

/* A host part of ferry's (a queued write into a host-pointer buffer: a copy by
 * the host) waits for what the program pushed on the queue's stream before it,
 * even when ferry itself has pushed nothing there yet. */
static void native_work_before_host_part(void) {
  section("the program's work on a queue's stream comes before a later host part of ferry's");
  CHECK(api->cuCtxSetCurrent(ctx_of(dev0)) == FCU_SUCCESS);
  void *gate_host = NULL;
  cu_deviceptr gate = gate_new(&gate_host);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  unsigned char *array = harness_aligned(page, page);
  memset(array, 0, page);
  ferry_buffer h = FERRY_NULL_BUFFER;
  ferry_refusal why = FERRY_REFUSAL_NONE;
  CHECK_OK(ferry_alloc_host_ptr(dev0, ferry_array_of(array, page, FERRY_UINT8), &h, &why));
  ferry_queue q = FERRY_NULL_QUEUE;
  CHECK_OK(ferry_queue_create(dev0, &q));
  ferry_native qn;
  CHECK_OK(ferry_queue_native(q, &qn));
  CHECK(api->cuStreamWaitValue32((cu_stream)qn.queue, gate, 1, FCU_STREAM_WAIT_VALUE_GEQ) == FCU_SUCCESS);
  unsigned char src[64];
  memset(src, 0x77, sizeof src);
  CHECK_OK(ferry_write_async(q, h, 0, src, sizeof src));
  usleep(50000);
  CHECK_MSG(array[0] == 0 && array[63] == 0,
            "a queued write into a host-pointer buffer ran before the program's work pushed on the queue's stream");
  CHECK_STATUS(ferry_queue_query(q), FERRY_NOT_READY);
  __atomic_store_n((uint32_t *)gate_host, 1, __ATOMIC_RELEASE);
  CHECK_OK(ferry_queue_synchronize(q));
  CHECK(array[0] == 0x77 && array[63] == 0x77 && array[64] == 0);
  CHECK_OK(ferry_queue_destroy(q));
  CHECK_OK(ferry_free(h));
  CHECK(api->cuMemFreeHost(gate_host) == FCU_SUCCESS);
  free(array);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *lib = getenv("FERRY_CUDA_LIBRARY");
  void *handle = lib && *lib ? dlopen(lib, RTLD_NOW) : NULL;
  if (handle) {
    *(void **)&inject = dlsym(handle, "fake_cuda_inject");
    *(void **)&counts_get = dlsym(handle, "fake_cuda_counts_get");
    *(void **)&make_sticky = dlsym(handle, "fake_cuda_make_sticky");
  }
  if (!inject || !counts_get || !make_sticky) {
    printf(
        "SKIP cuda_faults: needs the fake CUDA driver (FERRY_CUDA_LIBRARY=<build>/tests/fake_cuda/lib/libcuda.so.1): "
        "a real driver cannot be made to fail on purpose\n");
    if (handle) dlclose(handle);
    return HARNESS_SKIP;
  }
  /* The mode that marks allocations with SYNC_MEMOPS (device_memory checks the mark). */
  setenv("FERRY_CUDA_H2D", "memops", 1);
  if (!start()) {
    fprintf(stderr, "FAIL: the fake driver is loaded but ferry has no cuda device: %s\n", ferry_last_error());
    return 1;
  }
  printf("cuda_faults on the fake driver, %s\n", dev1 ? "two devices" : "one device");
  device_facts();
  device_memory();
  transfer_errors();
  context_errors();
  host_ptr_refusals();
  dma_ops();
  peer_copies();
  misaligned_pinned();
  lent_memory();
  blocked_user_streams();
  native_work_before_host_part();
  staging_per_operation();
  harness_context = "";
  ferry_shutdown();
  /* Nothing left behind in the driver, and no misuse of its API. */
  fake_cuda_counts end = counts();
  CHECK_MSG(end.device_allocations == 0 && end.pinned_blocks == 0 && end.registered_ranges == 0 && end.streams == 0 &&
                end.events == 0 && end.modules == 0 && end.contexts_retained == 0,
            "left in the driver after ferry_shutdown: %ld allocations, %ld pinned blocks, %ld registrations, %ld "
            "streams, %ld events, %ld modules, %ld contexts",
            end.device_allocations, end.pinned_blocks, end.registered_ranges, end.streams, end.events, end.modules,
            end.contexts_retained);
  CHECK_MSG(end.misuse == 0, "%ld calls misused the driver API (run with FAKE_CUDA_STRICT=1 to see them)", end.misuse);
  dlclose(handle);
  return harness_finish("cuda_faults");
}
