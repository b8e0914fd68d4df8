/*
 * metal_faults: the metal backend when Metal says no, on the fake
 * (tests/fake_metal), which fails calls on purpose.
 *
 * Every failure must come back as a status and a sentence that names the call
 * and the numbers: a buffer Metal will not make is FERRY_ERROR_OUT_OF_MEMORY with
 * the size, the storage and the device's currentAllocatedSize; a command buffer
 * that ends in error is FERRY_ERROR_BACKEND with the NSError's description,
 * domain and code; a host array Metal will not wrap is a refusal that says so.
 * Pinned memory Metal will not make is FERRY_ERROR_OUT_OF_MEMORY too. A failed
 * call changes nothing and leaves nothing held; nothing is held after
 * ferry_shutdown.
 *
 *   test_metal_faults         the cases above, on every fake device (unified and discrete)
 *   test_metal_faults --env   one write and one copy under FAKE_METAL_FAIL from the environment;
 *                             prints the sentences (ctest matches them)
 *
 * Skips (exit 77) on Apple's Metal: it cannot be made to fail on purpose.
 */
#if !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif
#include "backends/metal/metal_objc.h"
#include "fake_metal/fake_metal.h"
#include "harness.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static fake_metal_inject_fn inject;
static fake_metal_counts_fn counts_get;
static fake_metal_report_fn report;

static bool find_fake(void) {
  const char *path = getenv("FERRY_METAL_LIBRARY");
  void *lib = path && *path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  void *a = lib ? dlsym(lib, "fake_metal_inject") : NULL, *b = lib ? dlsym(lib, "fake_metal_counts_get") : NULL,
       *c = lib ? dlsym(lib, "fake_metal_report") : NULL;
  memcpy(&inject, &a, sizeof inject);
  memcpy(&counts_get, &b, sizeof counts_get);
  memcpy(&report, &c, sizeof report);
  return inject && counts_get && report;
}

static long live(void) {
  fake_metal_counts c;
  counts_get(&c);
  return c.live_objects;
}

static void section(const char *name) {
  harness_context = name;
  printf("  %s\n", name);
}

/* ---- buffers Metal will not make ------------------------------------------------------------- */

static void no_buffer(ferry_device *dev, bool unified) {
  section("newBufferWithLength:options: returns nil");
  CHECK_OK(ferry_device_trim(dev));
  long before = live();
  ferry_buffer b = {0x5e5e};
  inject("new-buffer", 0, 100);
  CHECK_STATUS(ferry_alloc(dev, 1000, FERRY_FLOAT32, &b), FERRY_ERROR_OUT_OF_MEMORY);
  inject(NULL, 0, 0);
  CHECK(b.id == 0x5e5e);
  CHECK_ERROR_HAS("ferry_alloc");
  CHECK_ERROR_HAS("newBufferWithLength:options: of 3.906 KiB (4000 bytes)");
  CHECK_ERROR_HAS(unified ? "shared storage" : "private storage");
  CHECK_ERROR_HAS("returned nil");
  CHECK_ERROR_HAS("(currentAllocatedSize)");
  CHECK_ERROR_HAS("recommended working set of 64 MiB");
  CHECK(live() == before);

  /* For real: the fake's 64 MiB fill up. The cache is released and the
   * allocation tried again before ferry gives up. */
  ferry_buffer x = FERRY_NULL_BUFFER, y = FERRY_NULL_BUFFER, z = FERRY_NULL_BUFFER;
  size_t big = (size_t)24 << 20;
  CHECK_OK(ferry_alloc(dev, big, FERRY_UINT8, &x));
  CHECK_OK(ferry_alloc(dev, big, FERRY_UINT8, &y));
  CHECK_STATUS(ferry_alloc(dev, big, FERRY_UINT8, &z), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_ERROR_HAS("24 MiB (25165824 bytes)");
  ferry_native nat;
  ferry_device_native(dev, &nat);
  char expect[128], amount[64];
  snprintf(expect, sizeof expect, "the device has %s allocated (currentAllocatedSize)",
           ferry__bytes_text(mtl_current_allocated_size((mtl_id)nat.device), amount));
  CHECK_ERROR_HAS(expect);
  CHECK_OK(ferry_free(y));
  CHECK_OK(ferry_alloc(dev, big, FERRY_UINT8, &z)); /* y's memory, from the cache */
  CHECK_OK(ferry_free(x));
  CHECK_OK(ferry_free(z));
  CHECK_OK(ferry_device_trim(dev));
  CHECK(live() == before);
}

/* ---- command buffers that end in error --------------------------------------------------------- */

static void command_buffer_error(ferry_device *dev, bool unified) {
  section("a command buffer ends in error");
  unsigned char data[256], back[256];
  fill_pattern(data, sizeof data, 1);
  ferry_buffer a = FERRY_NULL_BUFFER, b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, sizeof data, FERRY_UINT8, &a));
  CHECK_OK(ferry_alloc(dev, sizeof data, FERRY_UINT8, &b));
  CHECK_OK(ferry_write(a, 0, data, sizeof data));
  CHECK_OK(ferry_write(b, 0, data, sizeof data));
  long before = live();

  if (unified) {
    /* The core copies shared memory itself: no command buffer, nothing to fail. */
    inject("command-buffer", 0, 1);
    CHECK_OK(ferry_copy(a, 0, b, 16, 128));
    inject(NULL, 0, 0);
    CHECK_OK(ferry_write(b, 0, data, sizeof data));
  } else {
    /* A copy within a discrete GPU is a blit. */
    inject("command-buffer", 0, 1);
    CHECK_STATUS(ferry_copy(a, 0, b, 16, 128), FERRY_ERROR_BACKEND);
    CHECK_ERROR_HAS("ferry_copy");
    CHECK_ERROR_HAS("a blit of 128 bytes from buffer offset 0 to buffer offset 16");
    CHECK_ERROR_HAS("the command buffer ended in error: Caused GPU Address Fault Error");
    CHECK_ERROR_HAS("(MTLCommandBufferErrorDomain, code 3)");
  }

  inject("command-buffer", 0, 1);
  CHECK_STATUS(ferry_device_synchronize(dev), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("ferry_device_synchronize");
  CHECK_ERROR_HAS("an empty command buffer");
  CHECK_ERROR_HAS("code 3");
  CHECK_MSG(live() == before, "a failed command buffer left %ld objects held", live() - before);
  CHECK_OK(ferry_read(b, 0, back, sizeof back));
  CHECK_MSG(memcmp(back, data, sizeof data) == 0, "the failed copy changed the destination");

  if (!unified) {
    /* Small transfers are the backend's own (a temporary shared buffer and a
     * blit); the partly covered words first. */
    inject("command-buffer", 0, 1);
    unsigned char one = 0xEE;
    CHECK_STATUS(ferry_write(a, 5, &one, 1), FERRY_ERROR_BACKEND);
    CHECK_ERROR_HAS("ferry_write");
    CHECK_ERROR_HAS("partly written words of bytes 4..8");
    inject("command-buffer", 1, 1);
    CHECK_STATUS(ferry_write(a, 5, &one, 1), FERRY_ERROR_BACKEND);
    CHECK_ERROR_HAS("a blit of 4 bytes from a temporary buffer to device buffer bytes 4..8");
    inject("command-buffer", 0, 1);
    CHECK_STATUS(ferry_read(a, 0, back, sizeof back), FERRY_ERROR_BACKEND);
    CHECK_ERROR_HAS("ferry_read");
    CHECK_ERROR_HAS("to a temporary buffer");
    CHECK_MSG(live() == before, "failed transfers left %ld objects held", live() - before);
    /* No temporary to be had. */
    inject("new-buffer", 0, 1);
    CHECK_STATUS(ferry_write(a, 5, &one, 1), FERRY_ERROR_OUT_OF_MEMORY);
    CHECK_ERROR_HAS("newBufferWithLength:options: of 4 bytes (shared storage, a temporary for bytes a blit cannot "
                    "move in place)");
    inject(NULL, 0, 0);
    CHECK_OK(ferry_read(a, 0, back, sizeof back));
    CHECK_MSG(memcmp(back, data, sizeof data) == 0, "the failed writes changed the buffer");
    /* A fill's blit (fillBuffer:range:value:) that fails: the sentence names it. */
    inject("command-buffer", 0, 1);
    CHECK_STATUS(ferry_fill(a, 4, 8, &one, 1), FERRY_ERROR_BACKEND);
    CHECK_ERROR_HAS("ferry_fill");
    CHECK_ERROR_HAS("a fill of 8 bytes of 0xee at device buffer offset 4");
    inject(NULL, 0, 0);
    CHECK_OK(ferry_write(a, 0, data, sizeof data));

    /* Large transfers go through the engine's ring by DMA (blits): a blit that
     * fails in the middle fails the transfer, and the others are waited for. */
    size_t bytes = (size_t)40 << 20;
    unsigned char *big = malloc(bytes);
    ferry_buffer c = FERRY_NULL_BUFFER;
    CHECK_OK(ferry_alloc(dev, bytes, FERRY_UINT8, &c));
    fill_pattern(big, bytes, 2);
    inject("command-buffer", 1, 1);
    CHECK_STATUS(ferry_write(c, 0, big, bytes), FERRY_ERROR_BACKEND);
    CHECK_ERROR_HAS("ferry_write");
    CHECK_ERROR_HAS("from pinned host memory to device buffer offset");
    inject("command-buffer", 2, 1);
    CHECK_STATUS(ferry_read(c, 0, big, bytes), FERRY_ERROR_BACKEND);
    CHECK_ERROR_HAS("ferry_read");
    CHECK_ERROR_HAS("to pinned host memory");
    inject(NULL, 0, 0);
    CHECK_OK(ferry_write(c, 0, big, bytes));
    memset(big, 0, bytes);
    CHECK_OK(ferry_read(c, 0, big, bytes));
    CHECK(find_pattern_mismatch(big, bytes, 2) == SIZE_MAX);
    CHECK_OK(ferry_free(c));
    free(big);
  }
  inject(NULL, 0, 0);
  CHECK_OK(ferry_free(a));
  CHECK_OK(ferry_free(b));
}

/* ---- host memory Metal will not wrap ------------------------------------------------------------- */

static void no_copy_refused(ferry_device *dev) {
  section("newBufferWithBytesNoCopy returns nil");
  size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = 4 * page;
  unsigned char *array = harness_aligned(page, bytes);
  ferry_buffer b = {0x5e5e};
  ferry_refusal why = FERRY_REFUSAL_NONE;
  long before = live();
  inject("no-copy-buffer", 0, 1);
  CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(array, bytes, FERRY_UINT8), &b, &why), FERRY_ERROR_REFUSED);
  CHECK(why == FERRY_REFUSAL_DRIVER);
  CHECK(b.id == 0x5e5e);
  CHECK_ERROR_HAS("ferry_alloc_host_ptr");
  CHECK_ERROR_HAS("newBufferWithBytesNoCopy:length:options:deallocator: over");
  CHECK_ERROR_HAS("returned nil");
  char text[64];
  snprintf(text, sizeof text, "(page size %zu)", page);
  CHECK_ERROR_HAS(text);
  /* The range is free again: the same array is accepted next. */
  CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(array, bytes, FERRY_UINT8), &b, &why));
  CHECK_OK(ferry_free(b));
  /* Not on pages: refused by the page size, before Metal is asked. */
  CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(array + 64, page, FERRY_UINT8), &b, &why), FERRY_ERROR_REFUSED);
  CHECK(why == FERRY_REFUSAL_MISALIGNED);
  CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(array, page + 4, FERRY_UINT8), &b, &why), FERRY_ERROR_REFUSED);
  CHECK(why == FERRY_REFUSAL_BAD_LENGTH);
  inject(NULL, 0, 0);
  CHECK(live() == before);
  free(array);
}

/* Pinned memory on a discrete GPU is a shared buffer (newBufferWithLength:options:). */
static void no_pinned_memory(ferry_device *dev, bool unified) {
  if (unified) return;
  section("no pinned memory");
  long before = live();
  void *p = (void *)0x1;
  inject("new-buffer", 0, 1);
  CHECK_STATUS(ferry_host_alloc(dev, 1000, &p), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK(p == (void *)0x1);
  CHECK_ERROR_HAS("ferry_host_alloc");
  CHECK_ERROR_HAS("(shared storage, pinned host memory)");
  inject(NULL, 0, 0);
  /* Larger than Metal makes a buffer (the fake's maxBufferLength is 512 MiB). */
  CHECK_STATUS(ferry_host_alloc(dev, (size_t)600 << 20, &p), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_ERROR_HAS("more than the largest buffer, 512 MiB (536870912 bytes) (maxBufferLength)");
  CHECK(p == (void *)0x1);
  CHECK(live() == before);
}

/* The engine's ring cannot be pinned (in a session of its own: the engine then
 * keeps to the backend's own transfers until ferry_shutdown). */
static void no_ring(ferry_device *dev, bool unified) {
  if (unified) return;
  section("no ring: transfers through the backend's own path");
  size_t bytes = (size_t)4 << 20;
  unsigned char *data = malloc(bytes), *back = malloc(bytes);
  fill_pattern(data, bytes, 3);
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, bytes, FERRY_UINT8, &b));
  inject("new-buffer", 0, 1000);
  CHECK_STATUS(ferry_write(b, 0, data, bytes), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_ERROR_HAS("a temporary for bytes a blit cannot move in place");
  inject(NULL, 0, 0);
  CHECK_OK(ferry_write(b, 0, data, bytes));
  CHECK_OK(ferry_read(b, 0, back, bytes));
  CHECK(memcmp(back, data, bytes) == 0);
  CHECK_OK(ferry_free(b));
  free(data);
  free(back);
}

static int run_env(void) {
  /* FAKE_METAL_FAIL=command-buffer:0:N from the environment: the first blits fail. */
  ferry_backend_info info;
  int rc = harness_start_backend("metal", "metal_faults --env", &info);
  if (rc != 0) return rc;
  ferry_device *dev;
  ferry_device_get(info.first_device, &dev);
  ferry_buffer a = FERRY_NULL_BUFFER, b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, 64, FERRY_UINT8, &a));
  CHECK_OK(ferry_alloc(dev, 64, FERRY_UINT8, &b));
  CHECK_STATUS(ferry_copy(a, 0, b, 0, 64), FERRY_ERROR_BACKEND);
  printf("ferry_copy: %s: %s\n", ferry_status_name(FERRY_ERROR_BACKEND), ferry_last_error());
  CHECK_STATUS(ferry_device_synchronize(dev), FERRY_ERROR_BACKEND);
  printf("ferry_device_synchronize: %s\n", ferry_last_error());
  CHECK_OK(ferry_free(a));
  CHECK_OK(ferry_free(b));
  ferry_shutdown();
  CHECK(live() == 0);
  return harness_finish("metal_faults --env");
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!find_fake()) {
    printf("SKIP metal_faults: FERRY_METAL_LIBRARY is not the fake (tests/fake_metal): Apple's Metal cannot be made "
           "to fail on purpose\n");
    return HARNESS_SKIP;
  }
  if (argc == 2 && strcmp(argv[1], "--env") == 0) return run_env();
  /* Session 1: every case but no_ring; session 2: no_ring first, before any
   * transfer has made the device's ring. */
  for (int session = 0; session < 2; session++) {
    ferry_backend_info info;
    int rc = harness_start_backend("metal", "metal_faults", &info);
    if (rc != 0) return rc;
    for (size_t i = 0; i < info.device_count; i++) {
      ferry_device *dev;
      CHECK_OK(ferry_device_get(info.first_device + i, &dev));
      ferry_native nat;
      ferry_device_native(dev, &nat);
      void *pool = ferry__metal_rt.pool_push();
      bool unified = mtl_has_unified_memory((mtl_id)nat.device);
      ferry__metal_rt.pool_pop(pool);
      printf("device %zu (%s memory), session %d\n", info.first_device + i, unified ? "unified" : "discrete",
             session + 1);
      if (session == 1) {
        no_ring(dev, unified);
        continue;
      }
      no_buffer(dev, unified);
      command_buffer_error(dev, unified);
      no_copy_refused(dev);
      no_pinned_memory(dev, unified);
    }
    ferry_shutdown();
    harness_context = "after ferry_shutdown";
    long left = live();
    CHECK_MSG(left == 0, "%ld Metal objects still held after ferry_shutdown (session %d)", left, session + 1);
    if (left) report();
  }
  harness_context = "";
  return harness_finish("metal_faults");
}
