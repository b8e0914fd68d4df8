/*
 * engine: copies between devices of different backends through the core's
 * transfer engine. Between two devices that stage (FERRY_CAP_STAGE) the source
 * reads by DMA into a pinned ring the destination writes from by DMA: the bytes
 * arrive, at odd offsets and sizes, and no byte goes through a host copy. Between
 * other pairs the bytes arrive all the same.
 *
 * The pairs come from the environment: ctest runs it with PoCL and lavapipe made
 * to stage (FERRY_OPENCL_PIPELINE=1, FERRY_VULKAN_DEBUG=staging), and with the
 * fake CUDA driver beside PoCL (tests/fake_cuda). Skips (77) when no two devices
 * of different backends stage. Then, on every device that stages: a large
 * staged write's host copies cap the plan's copy rate.
 */
#include "core/internal.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

/* A copy of `n` bytes from offset so of a buffer on a to offset doff of one on b. */
static void one_copy(ferry_device *a, ferry_device *b, size_t n, size_t so, size_t doff, bool staged_both) {
  size_t sa = so + n + 100, sb = doff + n + 77;
  unsigned char *src = malloc(sa), *model = malloc(sb), *back = malloc(sb);
  fill_pattern(src, sa, 31);
  fill_pattern(model, sb, 32);
  ferry_buffer x = FERRY_NULL_BUFFER, y = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(a, sa, FERRY_UINT8, &x));
  CHECK_OK(ferry_alloc(b, sb, FERRY_UINT8, &y));
  CHECK_OK(ferry_write(x, 0, src, sa));
  CHECK_OK(ferry_write(y, 0, model, sb));
  uint64_t copied = ferry__engine_host_copied();
  CHECK_OK(ferry_copy(x, so, y, doff, n));
  if (staged_both)
    CHECK_MSG(ferry__engine_host_copied() == copied, "%llu bytes went through a host copy",
              (unsigned long long)(ferry__engine_host_copied() - copied));
  memcpy(model + doff, src + so, n);
  memset(back, 0, sb);
  CHECK_OK(ferry_read(y, 0, back, sb));
  size_t at = SIZE_MAX;
  for (size_t i = 0; i < sb && at == SIZE_MAX; i++)
    if (back[i] != model[i]) at = i;
  CHECK_MSG(at == SIZE_MAX, "byte %zu of the destination differs (copy of %zu bytes to offset %zu)", at, n, doff);
  CHECK_OK(ferry_free(x));
  CHECK_OK(ferry_free(y));
  free(src);
  free(model);
  free(back);
}

/* A large staged transfer tells the plan what its host copies reached: the
 * plan's copy rate is at most that from then on. */
static void copy_rate_seen(ferry_device *dev) {
  harness_context = dev->label;
  const size_t n = (size_t)64 << 20;
  unsigned char *src = malloc(n), *back = malloc(n);
  fill_pattern(src, n, 51);
  ferry_buffer x = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &x));
  for (int round = 0; round < 4; round++) /* the first rounds measure the device */
    CHECK_OK(ferry_write(x, 0, src, n));
  CHECK_OK(ferry_read(x, 0, back, n));
  CHECK(memcmp(src, back, n) == 0);
  struct ferry_engine *e = &dev->state->engine;
  pthread_mutex_lock(&e->figures_lock);
  double seen = e->copy_seen[FERRY_DMA_TO_DEVICE], measured = e->figures[FERRY_DMA_TO_DEVICE].copy_rate;
  pthread_mutex_unlock(&e->figures_lock);
  ferry_figures f = ferry__engine_figures(dev, FERRY_DMA_TO_DEVICE);
  printf("%s: host copies measured at %.2f GB/s, a 64 MiB write's reached %.2f GB/s; the plan takes %.2f GB/s\n",
         dev->label, measured / 1e9, seen / 1e9, f.copy_rate / 1e9);
  CHECK_MSG(seen > 0, "no staged write of 64 MiB told the plan its copy rate");
  CHECK(f.copy_rate <= seen && f.copy_rate > 0);
  CHECK_OK(ferry_free(x));
  free(src);
  free(back);
}

int main(void) {
  if (ferry_init() != FERRY_OK) {
    fprintf(stderr, "FAIL: ferry_init: %s\n", ferry_last_error());
    return 1;
  }
  size_t n = ferry_device_count(), pairs = 0;
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < n; j++) {
      ferry_device *a, *b;
      ferry_device_get(i, &a);
      ferry_device_get(j, &b);
      if (i == j || a->backend == b->backend) continue;
      bool staged = (a->caps & FERRY_CAP_STAGE) && (b->caps & FERRY_CAP_STAGE) && a->ops->dma_start &&
                    b->ops->dma_start && !(a->info.zero_copy || b->info.zero_copy);
      if (staged) pairs++;
      char context[700];
      snprintf(context, sizeof context, "%s -> %s%s", a->label, b->label, staged ? " (DMA both ways)" : "");
      harness_context = context;
      printf("%s\n", context);
      one_copy(a, b, ((size_t)9 << 20) + 3, 4097, 123, staged);
      one_copy(a, b, 1000, 5, 4096, staged);
      one_copy(a, b, ((size_t)1 << 20), 0, 0, staged);
    }
  }
  harness_context = "";
  ferry_shutdown();
  /* Staged from 64 KiB on, so that the large writes go through the ring. */
  if (ferry_set_option("FERRY_STAGE_MIN", "65536") == FERRY_OK && ferry_init() == FERRY_OK) {
    for (size_t i = 0; i < ferry_device_count(); i++) {
      ferry_device *d;
      ferry_device_get(i, &d);
      if ((d->caps & FERRY_CAP_STAGE) && d->ops->dma_start && !d->info.zero_copy) copy_rate_seen(d);
    }
    harness_context = "";
    ferry_shutdown();
  }
  if (pairs == 0) {
    printf("SKIP engine: no two devices of different backends stage through pinned memory\n");
    return harness_failures ? 1 : HARNESS_SKIP;
  }
  return harness_finish("engine");
}
