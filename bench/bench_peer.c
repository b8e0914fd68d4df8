/*
 * bench_peer: copies between two CUDA GPUs (issue 8), for every ordered pair.
 *
 *   1. ferry_device_to_device where the GPUs can reach each other: ferry's peer
 *      copy against the raw cuMemcpyPeer + cuCtxSynchronize on the same buffers.
 *   2. The same with peer access turned off (FERRY_CUDA_PEER=0, a new ferry
 *      session): the core's staged copy through pinned slots, against the pinned
 *      host-to-device bandwidth of the destination (cuMemcpyHtoD from
 *      cuMemHostAlloc memory), measured in the same run.
 *
 * usage: bench_peer [--quick] [--size BYTES]
 * Exit status 77 (skipped) with fewer than two CUDA devices.
 */
#include "backends/cuda/cuda_api.h"
#include "ferry.h"
#include "timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_GPUS = 16 };

/* The CUDA devices of the session, in order. */
static size_t cuda_devices(ferry_device **out) {
  size_t n = 0;
  for (size_t i = 0; i < ferry_device_count() && n < MAX_GPUS; i++) {
    ferry_device *d;
    ferry_device_info info;
    ferry_device_get(i, &d);
    ferry_device_info_get(d, &info);
    if (strcmp(info.backend, "cuda") == 0) out[n++] = d;
  }
  return n;
}

static int fail(const char *what) {
  fprintf(stderr, "bench_peer: %s: %s\n", what, ferry_last_error());
  return 1;
}

/* Median GB/s of ferry_device_to_device(a, b), and of the raw copy if `raw_peer`. */
static int measure_pair(ferry_device *sa, ferry_device *sb, size_t bytes, int repeats, bool raw_peer, double *out_ferry,
                        double *out_raw) {
  ferry_buffer a, b;
  if (ferry_alloc(sa, bytes, FERRY_UINT8, &a) != FERRY_OK) return fail("ferry_alloc on the source");
  if (ferry_alloc(sb, bytes, FERRY_UINT8, &b) != FERRY_OK) return fail("ferry_alloc on the destination");
  unsigned char *h = malloc(bytes);
  for (size_t i = 0; i < bytes; i++)
    h[i] = (unsigned char)(i * 131 + 7);
  int rc = 0;
  if (ferry_host_to_device(ferry_array_of(h, bytes, FERRY_UINT8), a) != FERRY_OK) rc = fail("filling the source");
  /* Check the bytes once, then time. */
  if (!rc && ferry_device_to_device(a, b) != FERRY_OK) rc = fail("ferry_device_to_device");
  if (!rc) {
    memset(h, 0, bytes);
    if (ferry_device_to_host(b, ferry_array_of(h, bytes, FERRY_UINT8)) != FERRY_OK) rc = fail("reading back");
    for (size_t i = 0; !rc && i < bytes; i++)
      if (h[i] != (unsigned char)(i * 131 + 7)) {
        fprintf(stderr, "bench_peer: byte %zu differs after the copy\n", i);
        rc = 1;
      }
  }
  const ferry_cuda_api *api = ferry__cuda_api();
  ferry_native na, nb;
  ferry_device_native(sa, &na);
  ferry_device_native(sb, &nb);
  double tf[64], tr[64];
  for (int r = 0; !rc && r < repeats; r++) {
    double t0 = bench_seconds();
    if (ferry_device_to_device(a, b) != FERRY_OK) rc = fail("ferry_device_to_device");
    double t1 = bench_seconds();
    tf[r] = (double)bytes / (t1 - t0) / 1e9;
    if (raw_peer && !rc) {
      api->cuCtxSetCurrent((cu_context)nb.context);
      double t2 = bench_seconds();
      cu_result e = api->cuMemcpyPeer((cu_deviceptr)ferry_device_ptr(b), (cu_context)nb.context,
                                      (cu_deviceptr)ferry_device_ptr(a), (cu_context)na.context, bytes);
      if (e == 0) e = api->cuCtxSynchronize();
      double t3 = bench_seconds();
      if (e != 0) {
        fprintf(stderr, "bench_peer: cuMemcpyPeer failed: %d\n", (int)e);
        rc = 1;
      }
      tr[r] = (double)bytes / (t3 - t2) / 1e9;
    }
  }
  if (!rc) {
    *out_ferry = bench_median(tf, repeats);
    *out_raw = raw_peer ? bench_median(tr, repeats) : 0;
  }
  free(h);
  ferry_free(a);
  ferry_free(b);
  return rc;
}

/* Median GB/s of cuMemcpyHtoD from pinned (cuMemHostAlloc) memory into `dev`. */
static int pinned_h2d(ferry_device *dev, size_t bytes, int repeats, double *out) {
  const ferry_cuda_api *api = ferry__cuda_api();
  ferry_native n;
  ferry_device_native(dev, &n);
  api->cuCtxSetCurrent((cu_context)n.context);
  ferry_buffer b;
  void *p = NULL;
  if (ferry_alloc(dev, bytes, FERRY_UINT8, &b) != FERRY_OK) return fail("ferry_alloc");
  if (api->cuMemHostAlloc(&p, bytes, 0) != 0) {
    ferry_free(b);
    fprintf(stderr, "bench_peer: cuMemHostAlloc failed\n");
    return 1;
  }
  memset(p, 1, bytes);
  double t[64];
  for (int r = 0; r < repeats; r++) {
    double t0 = bench_seconds();
    api->cuMemcpyHtoD((cu_deviceptr)ferry_device_ptr(b), p, bytes);
    t[r] = (double)bytes / (bench_seconds() - t0) / 1e9;
  }
  *out = bench_median(t, repeats);
  api->cuMemFreeHost(p);
  ferry_free(b);
  return 0;
}

int main(int argc, char **argv) {
  size_t bytes = (size_t)1 << 30;
  int repeats = 9;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      bytes = (size_t)64 << 20;
      repeats = 3;
    } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
      bytes = strtoull(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "usage: bench_peer [--quick] [--size BYTES]\n");
      return 2;
    }
  }
  ferry_device *gpus[MAX_GPUS];
  size_t n = cuda_devices(gpus);
  if (n < 2) {
    printf("SKIP bench_peer: %zu CUDA device(s); peer and staged copies need two\n", n);
    return 77;
  }
  printf("%zu CUDA devices, %zu MiB copies, median of %d\n\n", n, bytes >> 20, repeats);
  printf("%-8s %-34s %12s %12s %8s  %s\n", "pair", "path", "ferry GB/s", "raw GB/s", "ratio", "raw call");
  double peer[MAX_GPUS][MAX_GPUS] = {{0}}, raw[MAX_GPUS][MAX_GPUS] = {{0}};
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++)
      if (i != j && measure_pair(gpus[i], gpus[j], bytes, repeats, true, &peer[i][j], &raw[i][j]) == 0)
        printf("%zu -> %zu   %-34s %12.2f %12.2f %7.3fx  cuMemcpyPeer + cuCtxSynchronize\n", i, j,
               "ferry_device_to_device (peer)", peer[i][j], raw[i][j], peer[i][j] / raw[i][j]);
  double pinned[MAX_GPUS];
  for (size_t j = 0; j < n; j++)
    if (pinned_h2d(gpus[j], bytes, repeats, &pinned[j]) != 0) return 1;
  /* A new session with peer access off: copies go through the core's staging. */
  ferry_shutdown();
  setenv("FERRY_CUDA_PEER", "0", 1);
  n = cuda_devices(gpus);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) {
      double staged, unused;
      if (i != j && measure_pair(gpus[i], gpus[j], bytes, repeats, false, &staged, &unused) == 0)
        printf("%zu -> %zu   %-34s %12.2f %12.2f %7.3fx  cuMemcpyHtoD from cuMemHostAlloc memory\n", i, j,
               "ferry_device_to_device (staged)", staged, pinned[j], staged / pinned[j]);
    }
  ferry_shutdown();
  return 0;
}
