/*
 * bench_queues: ferry's queues on each device against the driver's own
 * asynchronous calls, in more detail than `ferry bench`'s write_async and
 * h2d+d2h 2q rows (docs/BENCH.md) and with the figures those rows do not give:
 *
 *   submit     one ferry_write_async of 64 bytes from pinned memory: the time the
 *              call takes to return, beside cuMemcpyHtoDAsync on a stream (CUDA)
 *   pageable   ferry_write_async of N bytes from ordinary memory: the time to
 *              return and to complete, beside the synchronous pageable write and
 *              the pinned one
 *   bidir      N bytes to the device on one queue and N back on another at once,
 *              from pinned and from ordinary memory, beside the raw two streams
 *              (CUDA) and one direction alone
 *   elapsed    ferry_event_elapsed over a copy within the device, beside
 *              cuEventElapsedTime of events on the queue's own stream (CUDA)
 *   idle       ferry_queue_synchronize of a queue with nothing pending
 *   sync64     ferry_write of 64 bytes from ordinary memory, beside cuMemcpyHtoD +
 *              cuCtxSynchronize (a raw call that completes)
 *
 *   bench_queues [--device N] [--bytes N] [--repeat N]   every device, or one
 *   bench_queues --pair A,B [--bytes N] [--repeat N]      a write on device A's queue
 *       and a read on device B's at once, against one after the other (PoCL and
 *       lavapipe here: two backends' queues overlapping)
 *   bench_queues --fresh [--device N] [--bytes N]         one line: a fresh
 *       process's first pageable writes against its pinned write (run it in a
 *       loop: a cold first measurement must not be kept)
 *
 * Figures are medians of --repeat samples (default 7), ferry and raw measured in
 * turn in one run. Bytes moved are checked once per figure.
 */
#include "ferry.h"
#include "raw.h"
#include "timing.h"

#include "backends/cuda/cuda_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int repeat = 7;

#define FAIL(...)                                                                                                      \
  do {                                                                                                                 \
    fprintf(stderr, "bench_queues: " __VA_ARGS__);                                                                     \
    fprintf(stderr, ": %s\n", ferry_last_error());                                                                     \
    exit(1);                                                                                                           \
  } while (0)
#define OK(call)                                                                                                       \
  do {                                                                                                                 \
    if ((call) != FERRY_OK) FAIL("%s", #call);                                                                         \
  } while (0)

/* ---- the raw CUDA calls this program compares against ------------------------------------------- */

typedef struct raw_streams {
  cu_result (*ctx_set)(cu_context);
  cu_result (*ctx_sync)(void);
  cu_result (*stream_create)(cu_stream *, unsigned int);
  cu_result (*stream_destroy)(cu_stream);
  cu_result (*stream_sync)(cu_stream);
  cu_result (*h2d_async)(cu_deviceptr, const void *, size_t, cu_stream);
  cu_result (*d2h_async)(void *, cu_deviceptr, size_t, cu_stream);
  cu_result (*h2d)(cu_deviceptr, const void *, size_t);
  cu_result (*event_create)(cu_event *, unsigned int);
  cu_result (*event_record)(cu_event, cu_stream);
  cu_result (*event_sync)(cu_event);
  cu_result (*event_elapsed)(float *, cu_event, cu_event);
  cu_result (*event_destroy)(cu_event);
  cu_result (*host_alloc)(void **, size_t);
  cu_result (*host_free)(void *);
} raw_streams;

static bool raw_cuda(raw_streams *r) {
  char why[256];
  void *lib = raw_library_open("FERRY_CUDA_LIBRARY", "libcuda.so.1", why);
  if (!lib) return false;
  bool ok = raw_library_symbol(lib, "cuCtxSetCurrent", &r->ctx_set, sizeof r->ctx_set, why) &&
            raw_library_symbol(lib, "cuCtxSynchronize", &r->ctx_sync, sizeof r->ctx_sync, why) &&
            raw_library_symbol(lib, "cuStreamCreate", &r->stream_create, sizeof r->stream_create, why) &&
            raw_library_symbol(lib, "cuStreamDestroy_v2", &r->stream_destroy, sizeof r->stream_destroy, why) &&
            raw_library_symbol(lib, "cuStreamSynchronize", &r->stream_sync, sizeof r->stream_sync, why) &&
            raw_library_symbol(lib, "cuMemcpyHtoDAsync_v2", &r->h2d_async, sizeof r->h2d_async, why) &&
            raw_library_symbol(lib, "cuMemcpyDtoHAsync_v2", &r->d2h_async, sizeof r->d2h_async, why) &&
            raw_library_symbol(lib, "cuMemcpyHtoD_v2", &r->h2d, sizeof r->h2d, why) &&
            raw_library_symbol(lib, "cuEventCreate", &r->event_create, sizeof r->event_create, why) &&
            raw_library_symbol(lib, "cuEventRecord", &r->event_record, sizeof r->event_record, why) &&
            raw_library_symbol(lib, "cuEventSynchronize", &r->event_sync, sizeof r->event_sync, why) &&
            raw_library_symbol(lib, "cuEventElapsedTime_v2", &r->event_elapsed, sizeof r->event_elapsed, why) &&
            raw_library_symbol(lib, "cuEventDestroy_v2", &r->event_destroy, sizeof r->event_destroy, why) &&
            raw_library_symbol(lib, "cuMemAllocHost_v2", &r->host_alloc, sizeof r->host_alloc, why) &&
            raw_library_symbol(lib, "cuMemFreeHost", &r->host_free, sizeof r->host_free, why);
  if (!ok) fprintf(stderr, "bench_queues: no raw CUDA baseline: %s\n", why);
  return ok;
}

#define CU(call)                                                                                                       \
  do {                                                                                                                 \
    cu_result r_ = (call);                                                                                             \
    if (r_ != FCU_SUCCESS) {                                                                                           \
      fprintf(stderr, "bench_queues: %s failed: CUresult %d\n", #call, (int)r_);                                       \
      exit(1);                                                                                                         \
    }                                                                                                                  \
  } while (0)

/* ---- helpers ------------------------------------------------------------------------------------- */

static void check_buffer(ferry_buffer b, const unsigned char *want, size_t n, const char *what) {
  unsigned char *got = malloc(n);
  OK(ferry_read(b, 0, got, n));
  if (memcmp(got, want, n) != 0) {
    fprintf(stderr, "bench_queues: %s: the bytes on the device are wrong\n", what);
    exit(1);
  }
  free(got);
}

static double gbps(size_t bytes, double s) { return (double)bytes / s / 1e9; }

static void pattern(unsigned char *p, size_t n, unsigned seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i += 64) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    p[i] = (unsigned char)x;
  }
}

/* ---- the figures ---------------------------------------------------------------------------------- */

typedef struct device_run {
  ferry_device *dev;
  ferry_device_info info;
  ferry_native nat;
  bool cuda;
  raw_streams raw;
  size_t bytes;
} device_run;

static void submit_cost(device_run *d) {
  enum { CALLS = 2000 };
  ferry_queue q;
  ferry_buffer b;
  void *pinned;
  OK(ferry_queue_create(d->dev, &q));
  OK(ferry_alloc(d->dev, 64 * 16, FERRY_UINT8, &b));
  OK(ferry_host_alloc(d->dev, 4096, &pinned));
  memset(pinned, 7, 4096);
  double f[64], r[64];
  for (int s = 0; s < repeat; s++) {
    double t0 = bench_seconds();
    for (int i = 0; i < CALLS; i++)
      OK(ferry_write_async(q, b, (size_t)(i % 16) * 64, pinned, 64));
    f[s] = (bench_seconds() - t0) / CALLS;
    OK(ferry_queue_synchronize(q));
    r[s] = 0;
    if (d->cuda) {
      ferry_native qn;
      OK(ferry_queue_native(q, &qn));
      void *raw_pinned;
      CU(d->raw.host_alloc(&raw_pinned, 4096));
      memset(raw_pinned, 7, 4096); /* the same bytes as ferry's: the check below reads what was written last */
      cu_stream st = (cu_stream)qn.queue;
      t0 = bench_seconds();
      for (int i = 0; i < CALLS; i++)
        CU(d->raw.h2d_async((cu_deviceptr)ferry_device_ptr(b) + (size_t)(i % 16) * 64, raw_pinned, 64, st));
      r[s] = (bench_seconds() - t0) / CALLS;
      CU(d->raw.stream_sync(st));
      CU(d->raw.host_free(raw_pinned));
    }
  }
  unsigned char want[64];
  memset(want, 7, sizeof want);
  check_buffer(b, want, 64, "submit");
  double fm = bench_median(f, repeat) * 1e6, rm = bench_median(r, repeat) * 1e6;
  if (d->cuda)
    printf("  submit 64 B pinned     ferry %.3f us   cuMemcpyHtoDAsync %.3f us   +%.3f us\n", fm, rm, fm - rm);
  else
    printf("  submit 64 B pinned     ferry %.3f us\n", fm);
  OK(ferry_host_free(pinned));
  OK(ferry_free(b));
  OK(ferry_queue_destroy(q));
}

static void pageable_async(device_run *d) {
  size_t n = d->bytes;
  ferry_queue q;
  ferry_buffer b;
  OK(ferry_queue_create(d->dev, &q));
  OK(ferry_alloc(d->dev, n, FERRY_UINT8, &b));
  unsigned char *src = malloc(n);
  void *pinned;
  OK(ferry_host_alloc(d->dev, n, &pinned));
  pattern(src, n, 3);
  memcpy(pinned, src, n);
  double ret[64], done[64], sync[64], pin[64];
  for (int s = 0; s < repeat; s++) {
    double t0 = bench_seconds();
    OK(ferry_write_async(q, b, 0, src, n));
    ret[s] = bench_seconds() - t0;
    OK(ferry_queue_synchronize(q));
    done[s] = bench_seconds() - t0;
    t0 = bench_seconds();
    OK(ferry_write(b, 0, src, n));
    sync[s] = bench_seconds() - t0;
    t0 = bench_seconds();
    OK(ferry_write(b, 0, pinned, n));
    pin[s] = bench_seconds() - t0;
  }
  check_buffer(b, src, n, "pageable");
  double r = bench_median(ret, repeat), c = bench_median(done, repeat), sy = bench_median(sync, repeat),
         p = bench_median(pin, repeat);
  printf("  write_async %zu MiB pageable: returns in %.1f us, completes at %.2f GB/s = %.3fx of the synchronous "
         "pageable write (%.2f GB/s), %.3fx of pinned (%.2f GB/s)\n",
         n >> 20, r * 1e6, gbps(n, c), sy / c, gbps(n, sy), p / c, gbps(n, p));
  printf("  synchronous pageable write: %.3fx of pinned\n", p / sy);
  free(src);
  OK(ferry_host_free(pinned));
  OK(ferry_free(b));
  OK(ferry_queue_destroy(q));
}

static void bidir(device_run *d, bool pinned_memory) {
  size_t n = d->bytes;
  ferry_queue up, down;
  ferry_buffer a, b;
  OK(ferry_queue_create(d->dev, &up));
  OK(ferry_queue_create(d->dev, &down));
  OK(ferry_alloc(d->dev, n, FERRY_UINT8, &a));
  OK(ferry_alloc(d->dev, n, FERRY_UINT8, &b));
  unsigned char *src, *dst;
  if (pinned_memory) {
    OK(ferry_host_alloc(d->dev, n, (void **)&src));
    OK(ferry_host_alloc(d->dev, n, (void **)&dst));
  } else {
    src = malloc(n);
    dst = malloc(n);
  }
  pattern(src, n, 5);
  memset(dst, 0, n);
  OK(ferry_write(b, 0, src, n));
  double both[64], one_up[64], one_down[64], raw_both[64];
  void *rs = NULL, *rd = NULL;
  cu_stream s1 = NULL, s2 = NULL;
  if (d->cuda && pinned_memory) {
    CU(d->raw.ctx_set((cu_context)d->nat.context));
    CU(d->raw.host_alloc(&rs, n));
    CU(d->raw.host_alloc(&rd, n));
    CU(d->raw.stream_create(&s1, FCU_STREAM_NON_BLOCKING));
    CU(d->raw.stream_create(&s2, FCU_STREAM_NON_BLOCKING));
  }
  for (int s = 0; s < repeat; s++) {
    double t0 = bench_seconds();
    OK(ferry_write_async(up, a, 0, src, n));
    OK(ferry_read_async(down, b, 0, dst, n));
    OK(ferry_queue_synchronize(up));
    OK(ferry_queue_synchronize(down));
    both[s] = bench_seconds() - t0;
    t0 = bench_seconds();
    OK(ferry_write_async(up, a, 0, src, n));
    OK(ferry_queue_synchronize(up));
    one_up[s] = bench_seconds() - t0;
    t0 = bench_seconds();
    OK(ferry_read_async(down, b, 0, dst, n));
    OK(ferry_queue_synchronize(down));
    one_down[s] = bench_seconds() - t0;
    raw_both[s] = 0;
    if (s1) {
      t0 = bench_seconds();
      CU(d->raw.h2d_async((cu_deviceptr)ferry_device_ptr(a), rs, n, s1));
      CU(d->raw.d2h_async(rd, (cu_deviceptr)ferry_device_ptr(b), n, s2));
      CU(d->raw.stream_sync(s1));
      CU(d->raw.stream_sync(s2));
      raw_both[s] = bench_seconds() - t0;
    }
  }
  if (memcmp(dst, src, n) != 0) {
    fprintf(stderr, "bench_queues: bidir: the bytes read back are wrong\n");
    exit(1);
  }
  OK(ferry_write_async(up, a, 0, src, n));
  OK(ferry_queue_synchronize(up));
  check_buffer(a, src, n, "bidir");
  double bt = bench_median(both, repeat), u = bench_median(one_up, repeat), dn = bench_median(one_down, repeat);
  const char *kind = pinned_memory ? "pinned" : "pageable";
  printf("  bidir %zu MiB %-8s  ferry both ways %.2f GB/s; one way alone: h2d %.2f, d2h %.2f GB/s; both / the "
         "faster one: %.3fx",
         n >> 20, kind, gbps(2 * n, bt), gbps(n, u), gbps(n, dn), (u < dn ? u : dn) * 2 / bt);
  if (s1) {
    double rb = bench_median(raw_both, repeat);
    printf("; raw two streams %.2f GB/s, ferry/raw %.3fx", gbps(2 * n, rb), rb / bt);
  }
  printf("\n");
  if (s1) {
    CU(d->raw.stream_destroy(s1));
    CU(d->raw.stream_destroy(s2));
    CU(d->raw.host_free(rs));
    CU(d->raw.host_free(rd));
  }
  if (pinned_memory) {
    OK(ferry_host_free(src));
    OK(ferry_host_free(dst));
  } else {
    free(src);
    free(dst);
  }
  OK(ferry_free(a));
  OK(ferry_free(b));
  OK(ferry_queue_destroy(up));
  OK(ferry_queue_destroy(down));
}

static void elapsed(device_run *d) {
  size_t n = d->bytes;
  ferry_queue q;
  ferry_buffer a, b;
  ferry_event e0, e1;
  OK(ferry_queue_create(d->dev, &q));
  OK(ferry_alloc(d->dev, n, FERRY_UINT8, &a));
  OK(ferry_alloc(d->dev, n, FERRY_UINT8, &b));
  OK(ferry_event_create(&e0));
  OK(ferry_event_create(&e1));
  ferry_native qn;
  OK(ferry_queue_native(q, &qn));
  cu_event c0 = NULL, c1 = NULL;
  if (d->cuda) {
    CU(d->raw.ctx_set((cu_context)d->nat.context));
    CU(d->raw.event_create(&c0, 0));
    CU(d->raw.event_create(&c1, 0));
  }
  double worst = 0, fm[64], rm[64];
  for (int s = 0; s < repeat; s++) {
    OK(ferry_event_record(e0, q));
    if (c0) CU(d->raw.event_record(c0, (cu_stream)qn.queue));
    OK(ferry_copy_async(q, a, 0, b, 0, n));
    if (c1) CU(d->raw.event_record(c1, (cu_stream)qn.queue));
    OK(ferry_event_record(e1, q));
    OK(ferry_event_synchronize(e1));
    double ms = 0;
    OK(ferry_event_elapsed(e0, e1, &ms));
    fm[s] = ms;
    rm[s] = 0;
    if (c1) {
      float raw_ms = 0;
      CU(d->raw.event_sync(c1));
      CU(d->raw.event_elapsed(&raw_ms, c0, c1));
      rm[s] = raw_ms;
      double diff = ms > raw_ms ? ms - raw_ms : raw_ms - ms;
      if (raw_ms > 0 && diff / raw_ms > worst) worst = diff / raw_ms;
    }
  }
  double f = bench_median(fm, repeat);
  if (c0)
    printf("  event_elapsed over a %zu MiB copy: ferry %.4f ms, cuEventElapsedTime %.4f ms: median %.2f%% apart, "
           "worst %.2f%%\n",
           n >> 20, f, bench_median(rm, repeat), 100 * (f - bench_median(rm, repeat)) / bench_median(rm, repeat),
           100 * worst);
  else
    printf("  event_elapsed over a %zu MiB copy: %.4f ms (%.2f GB/s read + write)\n", n >> 20, f, gbps(2 * n, f / 1e3));
  if (c0) {
    CU(d->raw.event_destroy(c0));
    CU(d->raw.event_destroy(c1));
  }
  OK(ferry_event_destroy(e0));
  OK(ferry_event_destroy(e1));
  OK(ferry_free(a));
  OK(ferry_free(b));
  OK(ferry_queue_destroy(q));
}

/* ferry_queue_synchronize of a queue with nothing pending (it has run work
 * before, so its thread exists): what a program pays to make sure. */
static void idle_sync(device_run *d) {
  enum { CALLS = 20000 };
  ferry_queue q;
  ferry_buffer b;
  unsigned char src[64] = {0};
  OK(ferry_queue_create(d->dev, &q));
  OK(ferry_alloc(d->dev, 64, FERRY_UINT8, &b));
  OK(ferry_write_async(q, b, 0, src, sizeof src));
  OK(ferry_queue_synchronize(q));
  double f[64];
  for (int s = 0; s < repeat; s++) {
    double t0 = bench_seconds();
    for (int i = 0; i < CALLS; i++)
      OK(ferry_queue_synchronize(q));
    f[s] = (bench_seconds() - t0) / CALLS;
  }
  printf("  idle queue_synchronize ferry %.3f us\n", bench_median(f, repeat) * 1e6);
  OK(ferry_free(b));
  OK(ferry_queue_destroy(q));
}

static void sync64(device_run *d) {
  enum { CALLS = 2000 };
  ferry_buffer b;
  OK(ferry_alloc(d->dev, 64, FERRY_UINT8, &b));
  unsigned char src[64];
  memset(src, 9, sizeof src);
  double f[64], r[64];
  for (int s = 0; s < repeat; s++) {
    double t0 = bench_seconds();
    for (int i = 0; i < CALLS; i++)
      OK(ferry_write(b, 0, src, 64));
    f[s] = (bench_seconds() - t0) / CALLS;
    r[s] = 0;
    if (d->cuda) {
      CU(d->raw.ctx_set((cu_context)d->nat.context));
      t0 = bench_seconds();
      for (int i = 0; i < CALLS; i++) {
        CU(d->raw.h2d((cu_deviceptr)ferry_device_ptr(b), src, 64));
        CU(d->raw.ctx_sync());
      }
      r[s] = (bench_seconds() - t0) / CALLS;
    }
  }
  check_buffer(b, src, 64, "sync64");
  double fm = bench_median(f, repeat) * 1e6, rm = bench_median(r, repeat) * 1e6;
  if (d->cuda)
    printf("  ferry_write 64 B       ferry %.3f us   cuMemcpyHtoD + cuCtxSynchronize %.3f us   %.3fx\n", fm, rm,
           fm / rm);
  else
    printf("  ferry_write 64 B       ferry %.3f us\n", fm);
  OK(ferry_free(b));
}

/* A fresh process: its first pageable writes against its pinned write, one line. */
static void fresh(device_run *d) {
  size_t n = d->bytes;
  ferry_buffer b;
  OK(ferry_alloc(d->dev, n, FERRY_UINT8, &b));
  unsigned char *src = malloc(n);
  void *pinned;
  OK(ferry_host_alloc(d->dev, n, &pinned));
  pattern(src, n, 7);
  memcpy(pinned, src, n);
  double pin[8], page[8];
  for (int s = 0; s < 5; s++) {
    double t0 = bench_seconds();
    OK(ferry_write(b, 0, src, n));
    page[s] = bench_seconds() - t0;
    t0 = bench_seconds();
    OK(ferry_write(b, 0, pinned, n));
    pin[s] = bench_seconds() - t0;
  }
  check_buffer(b, src, n, "fresh");
  double pm = bench_median(pin, 5);
  printf("fresh %s: %zu MiB pageable h2d, writes 1-5 / pinned:", d->info.name, n >> 20);
  double worst = 10;
  for (int s = 0; s < 5; s++) {
    printf(" %.3f", pm / page[s]);
    if (s >= 3 && pm / page[s] < worst) worst = pm / page[s]; /* once measured: the 4th and 5th */
  }
  printf("; the 4th and 5th at least %.3fx\n", worst);
  free(src);
  OK(ferry_host_free(pinned));
  OK(ferry_free(b));
}

/* A write of `bytes` from ordinary memory on a queue of device a and a read of
 * `bytes` into ordinary memory on a queue of device b, submitted together (then
 * both queues synchronised), against the same two one after the other; the
 * rounds alternate the two ways so that drift hits both alike. */
static void pair(size_t ia, size_t ib, size_t bytes) {
  ferry_device *da, *db;
  ferry_device_info a, b;
  OK(ferry_device_get(ia, &da));
  OK(ferry_device_get(ib, &db));
  OK(ferry_device_info_get(da, &a));
  OK(ferry_device_info_get(db, &b));
  ferry_queue qa, qb;
  ferry_buffer ba, bb;
  OK(ferry_queue_create(da, &qa));
  OK(ferry_queue_create(db, &qb));
  OK(ferry_alloc(da, bytes, FERRY_UINT8, &ba));
  OK(ferry_alloc(db, bytes, FERRY_UINT8, &bb));
  unsigned char *src = malloc(bytes), *dst = malloc(bytes), *want = malloc(bytes);
  if (!src || !dst || !want) FAIL("no host memory for three blocks of %zu bytes", bytes);
  memset(want, 0x5a, bytes);
  OK(ferry_write(bb, 0, want, bytes));
  memset(src, 0xa5, bytes);
  memset(dst, 0, bytes);
  double apart[64], together[64];
  for (int s = -1; s < repeat; s++) { /* round -1 warms both paths up */
    double t0 = bench_seconds();
    OK(ferry_write_async(qa, ba, 0, src, bytes));
    OK(ferry_queue_synchronize(qa));
    OK(ferry_read_async(qb, bb, 0, dst, bytes));
    OK(ferry_queue_synchronize(qb));
    double t1 = bench_seconds();
    OK(ferry_write_async(qa, ba, 0, src, bytes));
    OK(ferry_read_async(qb, bb, 0, dst, bytes));
    OK(ferry_queue_synchronize(qa));
    OK(ferry_queue_synchronize(qb));
    double t2 = bench_seconds();
    if (s >= 0) apart[s] = t1 - t0, together[s] = t2 - t1;
  }
  if (memcmp(dst, want, bytes) != 0) FAIL("pair: the read's bytes are wrong");
  check_buffer(ba, src, bytes, "pair");
  double x = bench_median(apart, repeat), y = bench_median(together, repeat);
  printf("pair: write %zu MiB to device %zu (%s: %s) on one queue, read %zu MiB from device %zu (%s: %s) on "
         "another, medians of %d\n",
         bytes >> 20, ia, a.backend, a.name, bytes >> 20, ib, b.backend, b.name, repeat);
  printf("  one after the other %.3f ms, together %.3f ms: together / apart %.3fx\n", x * 1e3, y * 1e3, y / x);
  free(src), free(dst), free(want);
  OK(ferry_free(ba));
  OK(ferry_free(bb));
  OK(ferry_queue_destroy(qa));
  OK(ferry_queue_destroy(qb));
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  long device = -1;
  size_t bytes = (size_t)256 << 20;
  bool fresh_mode = false, pair_mode = false;
  size_t pair_a = 0, pair_b = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
      device = atol(argv[++i]);
    else if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
      bytes = (size_t)strtoull(argv[++i], NULL, 0);
    else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
      repeat = atoi(argv[++i]);
    else if (strcmp(argv[i], "--fresh") == 0)
      fresh_mode = true;
    else if (strcmp(argv[i], "--pair") == 0 && i + 1 < argc && sscanf(argv[++i], "%zu,%zu", &pair_a, &pair_b) == 2)
      pair_mode = true;
    else {
      fprintf(stderr, "usage: bench_queues [--device N] [--bytes N] [--repeat N] [--fresh] [--pair A,B]\n");
      return 2;
    }
  }
  if (repeat < 1 || repeat > 64) repeat = 7;
  OK(ferry_init());
  size_t count = ferry_device_count();
  if (pair_mode) {
    if (pair_a >= count || pair_b >= count || pair_a == pair_b)
      FAIL("--pair %zu,%zu: two different devices of the %zu present", pair_a, pair_b, count);
    pair(pair_a, pair_b, bytes);
    ferry_shutdown();
    return 0;
  }
  for (size_t i = 0; i < count; i++) {
    if (device >= 0 && (size_t)device != i) continue;
    device_run d = {.bytes = bytes};
    OK(ferry_device_get(i, &d.dev));
    OK(ferry_device_info_get(d.dev, &d.info));
    OK(ferry_device_native(d.dev, &d.nat));
    if (d.bytes > d.info.max_allocation / 2) d.bytes = (size_t)(d.info.max_allocation / 2) & ~(size_t)4095;
    d.cuda = strcmp(d.info.backend, "cuda") == 0 && raw_cuda(&d.raw);
    if (d.cuda) d.raw.ctx_set((cu_context)d.nat.context);
    if (fresh_mode) {
      fresh(&d);
      continue;
    }
    printf("device %zu (%s: %s), %zu MiB, medians of %d\n", i, d.info.backend, d.info.name, d.bytes >> 20, repeat);
    submit_cost(&d);
    idle_sync(&d);
    sync64(&d);
    pageable_async(&d);
    bidir(&d, true);
    bidir(&d, false);
    elapsed(&d);
  }
  ferry_shutdown();
  return 0;
}
