/* A focused study beside `ferry bench`: the byte-range call ferry_write (ferry bench times ferry_host_to_device)
 * against memcpy of the same 64 bytes, in nanoseconds per call: what ferry's checks cost. */
/*
 * bench_native: what ferry's checks cost on the native device, against memcpy
 * measured in the same run on the same memory.
 *
 *   1. ferry_write of 64 bytes vs memcpy of 64 bytes: handle lookup + argument
 *      checks + dispatch, per call (median of repeated timed loops).
 *   2. ferry_host_to_device between two different 256 MiB arrays vs memcpy.
 *   3. ferry_host_to_device from a zero-copy buffer's own array: synchronisation
 *      only, so its time must not depend on the size.
 *
 * usage: bench_native [--quick]
 */
#include "ferry.h"
#include "timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Keeps the compiler from dropping or merging the copies being timed. */
static void clobber(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

static void die(const char *what) {
  fprintf(stderr, "bench_native: %s: %s\n", what, ferry_last_error());
  exit(1);
}

int main(int argc, char **argv) {
  bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  ferry_device *dev = NULL;
  for (size_t i = 0; i < ferry_device_count(); i++) {
    ferry_device_info info;
    ferry_device_get(i, &dev);
    ferry_device_info_get(dev, &info);
    if (strcmp(info.backend, "native") == 0) break;
    dev = NULL;
  }
  if (!dev) die("no native device");

  /* 1. 64-byte writes. */
  enum { SMALL = 64 };
  const int loops = quick ? 100000 : 1000000, repeats = quick ? 5 : 21;
  unsigned char src[SMALL];
  memset(src, 7, sizeof src);
  ferry_buffer small;
  if (ferry_alloc(dev, 4096, FERRY_UINT8, &small) != FERRY_OK) die("ferry_alloc");
  unsigned char *dst = (unsigned char *)ferry_device_ptr(small);
  double t_ferry[64], t_raw[64];
  for (int r = 0; r < repeats; r++) {
    double t0 = (bench_seconds() * 1e9);
    for (int i = 0; i < loops; i++) {
      clobber(src);
      ferry_write(small, (size_t)(i & 63) * SMALL, src, SMALL);
    }
    double t1 = (bench_seconds() * 1e9);
    for (int i = 0; i < loops; i++) {
      clobber(src);
      memcpy(dst + (size_t)(i & 63) * SMALL, src, SMALL);
      clobber(dst);
    }
    double t2 = (bench_seconds() * 1e9);
    t_ferry[r] = (t1 - t0) / loops;
    t_raw[r] = (t2 - t1) / loops;
  }
  double f64 = bench_median(t_ferry, repeats), m64 = bench_median(t_raw, repeats);
  printf("%-58s %10s %10s %8s %10s\n", "measure (median)", "ferry", "memcpy", "ratio", "difference");
  printf("%-58s %7.1f ns %7.1f ns %7.2fx %+7.1f ns\n", "ferry_write 64 B vs memcpy 64 B (per call)", f64, m64,
         f64 / m64, f64 - m64);
  ferry_free(small);

  /* 2. 256 MiB between two different arrays. */
  size_t big = quick ? ((size_t)32 << 20) : ((size_t)256 << 20);
  int big_repeats = quick ? 3 : 9;
  unsigned char *a = malloc(big);
  if (!a) die("malloc");
  memset(a, 1, big);
  ferry_buffer buf;
  if (ferry_alloc(dev, big, FERRY_UINT8, &buf) != FERRY_OK) die("ferry_alloc 256 MiB");
  unsigned char *bytes = (unsigned char *)ferry_device_ptr(buf);
  memset(bytes, 2, big);
  double g_ferry[16], g_raw[16];
  for (int r = 0; r < big_repeats; r++) {
    double t0 = (bench_seconds() * 1e9);
    if (ferry_host_to_device(ferry_array_of(a, big, FERRY_UINT8), buf) != FERRY_OK) die("ferry_host_to_device");
    double t1 = (bench_seconds() * 1e9);
    memcpy(bytes, a, big);
    clobber(bytes);
    double t2 = (bench_seconds() * 1e9);
    g_ferry[r] = (double)big / (t1 - t0);
    g_raw[r] = (double)big / (t2 - t1);
  }
  double gf = bench_median(g_ferry, big_repeats), gr = bench_median(g_raw, big_repeats);
  char label[128];
  snprintf(label, sizeof label, "ferry_host_to_device %zu MiB vs memcpy (GB/s)", big >> 20);
  printf("%-58s %7.2f    %7.2f    %7.2fx\n", label, gf, gr, gf / gr);
  ferry_free(buf);

  /* 3. From a zero-copy buffer's own array: time against size. */
  const size_t sizes[] = {4096, (size_t)1 << 20, big};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    ferry_buffer z;
    if (ferry_alloc_zero_copy(dev, ferry_array_of(a, sizes[s], FERRY_UINT8), &z) != FERRY_OK) die("zero copy");
    double t[64];
    for (int r = 0; r < repeats; r++) {
      double t0 = (bench_seconds() * 1e9);
      for (int i = 0; i < 1000; i++)
        ferry_host_to_device(ferry_array_of(a, sizes[s], FERRY_UINT8), z);
      t[r] = ((bench_seconds() * 1e9) - t0) / 1000;
    }
    snprintf(label, sizeof label, "ferry_host_to_device own array, zero-copy, %zu KiB", sizes[s] >> 10);
    printf("%-58s %7.1f ns %10s\n", label, bench_median(t, repeats), "-");
    ferry_free(z);
  }
  free(a);
  ferry_shutdown();
  return 0;
}
