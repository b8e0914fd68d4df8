/*
 * CPU devices hold at most their total_memory in live buffers. Their memory is
 * the host's, and their drivers (PoCL, lavapipe) promise far more than there is,
 * as the host's allocator does: a thousand times total_memory was accepted, to
 * fail later when touched. ferry refuses past total_memory with
 * FERRY_ERROR_OUT_OF_MEMORY, counting the live buffers with memory of their own
 * (not zero-copy or host-pointer buffers, whose memory is the caller's), and
 * accepts again once buffers are freed.
 *
 * native, PoCL and lavapipe at their real total_memory (buffers nobody touches
 * cost no memory); checked, which poisons every byte it hands out, with a lower
 * total_memory set through the test hook ferry__device_set_total_memory.
 */
#include "harness.h"

#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

#define MAX_PIECES 64

static void within_total(ferry_device *dev, const char *backend) {
  harness_context = backend;
  ferry_device_info info;
  CHECK_OK(ferry_device_info_get(dev, &info));
  CHECK(info.is_cpu);
  uint64_t piece = info.total_memory / 4;
  if (piece > info.max_allocation) piece = info.max_allocation;
  piece &= ~(uint64_t)4095;
  /* Zero-copy buffers do not count (several may share one array). */
  static unsigned char array[4096];
  ferry_buffer views[3];
  int nviews = 0;
  if (info.zero_copy)
    for (; nviews < 3; nviews++)
      CHECK_OK(ferry_alloc_zero_copy(dev, ferry_array_of(array, sizeof array, FERRY_UINT8), &views[nviews]));
  ferry_buffer pieces[MAX_PIECES];
  int n = 0;
  uint64_t held = 0;
  ferry_status st = FERRY_OK;
  for (; n < MAX_PIECES; n++) {
    st = ferry_alloc(dev, (size_t)piece, FERRY_UINT8, &pieces[n]);
    if (st != FERRY_OK) break;
    held += piece;
  }
  CHECK_STATUS(st, FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_MSG(held <= info.total_memory, "%s holds %llu bytes of buffers, more than its %llu", backend,
            (unsigned long long)held, (unsigned long long)info.total_memory);
  CHECK_MSG(held + piece > info.total_memory, "%s refused at %llu of %llu bytes", backend, (unsigned long long)held,
            (unsigned long long)info.total_memory);
  CHECK_ERROR_HAS("live buffers already hold");
  char total[32];
  snprintf(total, sizeof total, "%llu bytes)", (unsigned long long)info.total_memory);
  CHECK_ERROR_HAS(total);
  printf("%s: %d buffers of %llu MiB within %llu MiB, the next one refused\n", backend, n,
         (unsigned long long)(piece >> 20), (unsigned long long)(info.total_memory >> 20));
  /* Freeing makes room again; a failed allocation took nothing. */
  if (n > 0) {
    CHECK_OK(ferry_free(pieces[--n]));
    CHECK_OK(ferry_alloc(dev, (size_t)piece, FERRY_UINT8, &pieces[n++]));
    ferry_buffer one_more;
    CHECK_STATUS(ferry_alloc(dev, (size_t)piece, FERRY_UINT8, &one_more), FERRY_ERROR_OUT_OF_MEMORY);
  }
  for (int i = 0; i < n; i++)
    CHECK_OK(ferry_free(pieces[i]));
  for (int i = 0; i < nviews; i++)
    CHECK_OK(ferry_free(views[i]));
  CHECK_OK(ferry_device_trim(dev));
  /* All of it again: nothing was left counted. */
  int again = 0;
  for (; again < MAX_PIECES; again++)
    if (ferry_alloc(dev, (size_t)piece, FERRY_UINT8, &pieces[again]) != FERRY_OK) break;
  CHECK_MSG(again == n, "%d buffers the first time, %d the second", n, again);
  for (int i = 0; i < again; i++)
    CHECK_OK(ferry_free(pieces[i]));
  CHECK_OK(ferry_device_trim(dev));
}

int main(void) {
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", "native,checked,opencl,vulkan"));
  CHECK_OK(ferry_init());
  const char *backends[] = {"native", "opencl", "vulkan"};
  for (int i = 0; i < 3; i++) {
    ferry_device *dev = harness_device_of(backends[i]);
    ferry_device_info info;
    if (dev && ferry_device_info_get(dev, &info) == FERRY_OK && info.is_cpu) {
      within_total(dev, backends[i]);
    } else {
      ferry_backend_info b;
      if (harness_backend_devices(backends[i], "device_memory", &b) == 1) harness_failures++;
    }
  }
  ferry_device *checked = harness_device_of("checked");
  CHECK(checked != NULL);
  if (checked) {
    ferry__device_set_total_memory(checked, (uint64_t)64 << 20);
    within_total(checked, "checked (total_memory set to 64 MiB)");
  }
  ferry_shutdown();
  ferry_set_option("FERRY_BACKENDS", NULL);
  harness_context = "";
  return harness_finish("device_memory");
}
