/*
 * bench_dlpack: what a DLPack exchange costs, on every device present, at three
 * buffer sizes (it must not depend on the size: no byte moves).
 *
 *   export + import: ferry_dlpack_export_versioned of a buffer, then
 *     ferry_dlpack_import_versioned of that tensor (ferry's own tensor: a second
 *     buffer over the same memory), per pair; the imported buffers are freed
 *     outside the timed loop (their free runs the tensors' deleters);
 *   foreign import (host devices): ferry_dlpack_import of a tensor made here
 *     over malloc'd memory, as NumPy's would be;
 *   reference: ferry_alloc_zero_copy + ferry_free of the same memory, the cost
 *     of making and dropping a handle, measured in the same run.
 *
 * Every figure is the median of repeated timed loops.
 * usage: bench_dlpack [--quick]
 */
#include "ferry.h"
#include "timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 256

static void die(const char *what) {
  fprintf(stderr, "bench_dlpack: %s: %s\n", what, ferry_last_error());
  exit(1);
}

static void no_deleter(ferry_dl_managed_tensor *self) { (void)self; }

/* Median seconds per export + import pair, over `repeats` batches. */
static double export_import(ferry_buffer b, int repeats) {
  double t[64];
  ferry_buffer back[BATCH];
  for (int r = 0; r < repeats; r++) {
    double t0 = bench_seconds();
    for (int i = 0; i < BATCH; i++) {
      ferry_dl_managed_tensor_versioned *tensor;
      if (ferry_dlpack_export_versioned(b, &tensor) != FERRY_OK) die("ferry_dlpack_export_versioned");
      if (ferry_dlpack_import_versioned(tensor, NULL, &back[i], NULL) != FERRY_OK) die("ferry_dlpack_import_versioned");
    }
    t[r] = (bench_seconds() - t0) / BATCH;
    for (int i = 0; i < BATCH; i++)
      ferry_free(back[i]);
  }
  return bench_median(t, repeats);
}

/* Median seconds per import of a host tensor made outside ferry. */
static double foreign_import(ferry_device *dev, void *data, int64_t *shape, int repeats) {
  double t[64];
  ferry_buffer back[BATCH];
  static ferry_dl_managed_tensor tensors[BATCH];
  for (int i = 0; i < BATCH; i++)
    tensors[i] = (ferry_dl_managed_tensor){
        .dl_tensor =
            {.data = data, .device = {FERRY_DL_CPU, 0}, .ndim = 1, .dtype = {FERRY_DL_UINT, 8, 1}, .shape = shape},
        .deleter = no_deleter,
    };
  for (int r = 0; r < repeats; r++) {
    double t0 = bench_seconds();
    for (int i = 0; i < BATCH; i++)
      if (ferry_dlpack_import(&tensors[i], dev, &back[i], NULL) != FERRY_OK) die("ferry_dlpack_import");
    t[r] = (bench_seconds() - t0) / BATCH;
    for (int i = 0; i < BATCH; i++)
      ferry_free(back[i]);
  }
  return bench_median(t, repeats);
}

/* Median seconds per ferry_alloc_zero_copy + ferry_free. */
static double zero_copy_handle(ferry_device *dev, void *data, size_t bytes, int repeats) {
  double t[64];
  for (int r = 0; r < repeats; r++) {
    double t0 = bench_seconds();
    for (int i = 0; i < BATCH; i++) {
      ferry_buffer b;
      if (ferry_alloc_zero_copy(dev, ferry_array_of(data, bytes, FERRY_UINT8), &b) != FERRY_OK)
        die("ferry_alloc_zero_copy");
      ferry_free(b);
    }
    t[r] = (bench_seconds() - t0) / BATCH;
  }
  return bench_median(t, repeats);
}

int main(int argc, char **argv) {
  bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  int repeats = quick ? 5 : 41;
  static const size_t sizes[] = {64, (size_t)1 << 20, (size_t)256 << 20};
  if (ferry_init() != FERRY_OK) die("ferry_init");
  printf("%-44s %10s %14s %14s %14s\n", "device", "bytes", "export+import", "foreign imp.", "zero-copy ref.");
  for (size_t d = 0; d < ferry_device_count(); d++) {
    ferry_device *dev;
    ferry_device_info info;
    ferry_device_get(d, &dev);
    ferry_device_info_get(dev, &info);
    ferry_dl_device dl;
    if (ferry_dlpack_device(dev, &dl) != FERRY_OK) continue;
    char label[64];
    snprintf(label, sizeof label, "%s: %.36s", info.backend, info.name);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      size_t bytes = sizes[s];
      if (quick && bytes > ((size_t)1 << 20)) continue;
      ferry_buffer b;
      if (ferry_alloc(dev, bytes, FERRY_UINT8, &b) != FERRY_OK) {
        printf("%-44s %10zu %14s\n", label, bytes, "(no memory)");
        continue;
      }
      double pair = export_import(b, repeats);
      ferry_free(b);
      if (info.zero_copy) {
        void *host = malloc(bytes);
        memset(host, 1, bytes);
        int64_t shape[1] = {(int64_t)bytes};
        double foreign = foreign_import(dev, host, shape, repeats);
        double reference = zero_copy_handle(dev, host, bytes, repeats);
        printf("%-44s %10zu %11.0f ns %11.0f ns %11.0f ns\n", label, bytes, pair * 1e9, foreign * 1e9, reference * 1e9);
        free(host);
      } else {
        printf("%-44s %10zu %11.0f ns %14s %14s\n", label, bytes, pair * 1e9, "-", "-");
      }
    }
  }
  ferry_shutdown();
  return 0;
}
