/* A focused study beside `ferry bench`: ferry's CUDA speed targets (pass or miss), ferry from pageable memory against
 * cuMemcpy from pinned memory, 64-byte latency on a plain cuMemAlloc buffer, each FERRY_CUDA_H2D way, and (--sweep)
 * the staging pipeline under other FERRY_STAGE_BYTES and FERRY_COPY_THREADS: none of which ferry bench measures. */
/*
 * bench_cuda: ferry's cuda backend against the raw driver calls, on each CUDA
 * device, in one run on one set of memory (the figures of ferry's CUDA speed targets).
 *
 *   bench_cuda [--quick] [--targets] [--csv FILE] [--device N] [--sweep]
 *
 * Each figure is the median of repeats (9; 5 for 1 GiB transfers; 3 with
 * --quick; ferry's and the raw call's repeats alternate, each after one untimed
 * call), the raw call measured in the same run, and the ratio:
 *  - h2d / d2h of 1 GiB from malloc'd memory: ferry vs cuMemcpy from the same
 *    pageable memory, and vs cuMemcpy from cuMemAllocHost memory (target: at
 *    least 0.95x of pinned);
 *  - h2d / d2h of 4, 16, 64 MiB from malloc'd memory vs cuMemcpy from
 *    cuMemAllocHost memory of the same size (targets: 0.5x, 0.7x, 0.85x);
 *  - h2d / d2h of 1 GiB from ferry_host_alloc memory vs cuMemcpy from
 *    cuMemAllocHost memory (target: at least 0.98x);
 *  - d2d of 1 GiB vs cuMemcpyDtoD + cuCtxSynchronize (target: at least 0.98x);
 *  - ferry_alloc + ferry_free pairs of 256 B, 64 KiB, 16 MiB vs cuMemAlloc +
 *    cuMemFree (target: at most 0.2 us a pair);
 *  - 64-byte h2d latency vs a raw call that completes (cuMemcpyHtoD +
 *    cuCtxSynchronize; target: at most 1.05x), d2h vs cuMemcpyDtoH (at most
 *    1.1x), and, for information, each FERRY_CUDA_H2D way;
 *  - a bandwidth table from 4 KiB to 1 GiB (powers of 4) for every path.
 * --quick uses sizes up to 4 MiB (for the fake driver in CI); --targets stops
 * after the rows with targets (no table, no FERRY_CUDA_H2D ways). --sweep adds the
 * engine's staging at 4, 16 and 64 MiB under forced piece sizes and copy-thread
 * counts. The results go to stdout as a table, and with --csv to FILE, one
 * line per row.
 */
#include "raw.h"
#include "raw_cuda.h"
#include "timing.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SAMPLES 64

static bool quick, sweep, targets_only;
static FILE *csv;
/* The raw baseline's driver table (raw/raw_cuda.h), for the plain cuMemAlloc buffer's calls. */
static const raw_cuda_driver *api;

static const raw_cuda_driver *driver(void) {
  char why[256];
  return raw_cuda_driver_load(why);
}
static const raw_ops *raw_calls;

/* ---- timing --------------------------------------------------------------------- */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "bench_cuda: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

/* ---- what is measured ------------------------------------------------------------- */

typedef enum job_kind {
  FERRY_WRITE,
  FERRY_READ,
  FERRY_COPY,
  FERRY_ALLOC_FREE,
  RAW_H2D,
  RAW_D2H,
  RAW_D2D,
  RAW_ALLOC_FREE,
  PLAIN_H2D,      /* cuMemcpyHtoD into a plain cuMemAlloc buffer (no SYNC_MEMOPS) */
  PLAIN_D2H,      /* cuMemcpyDtoH from it */
  PLAIN_H2D_SYNC, /* the same, then cuStreamSynchronize of the legacy stream */
  PLAIN_H2D_CTX,  /* the same, then cuCtxSynchronize */
} job_kind;

typedef struct job {
  job_kind kind;
  ferry_device *dev;
  raw_baseline *raw;
  ferry_buffer a, b;
  cu_deviceptr plain;
  void *host;
  size_t bytes;
} job;

static void run(const job *j) {
  ferry_status st = FERRY_OK;
  int rc = 0;
  switch (j->kind) {
  case FERRY_WRITE: st = ferry_write(j->a, 0, j->host, j->bytes); break;
  case FERRY_READ: st = ferry_read(j->a, 0, j->host, j->bytes); break;
  case FERRY_COPY: st = ferry_copy(j->a, 0, j->b, 0, j->bytes); break;
  case FERRY_ALLOC_FREE: {
    ferry_buffer t;
    st = ferry_alloc(j->dev, j->bytes, FERRY_UINT8, &t);
    if (st == FERRY_OK) st = ferry_free(t);
    break;
  }
  case RAW_H2D: rc = raw_calls->h2d(j->raw, j->a, j->host, j->bytes); break;
  case RAW_D2H: rc = raw_calls->d2h(j->raw, j->a, j->host, j->bytes); break;
  case RAW_D2D: rc = raw_calls->d2d(j->raw, j->a, j->b, j->bytes); break;
  case RAW_ALLOC_FREE: rc = raw_calls->alloc_free(j->raw, j->bytes); break;
  case PLAIN_H2D: rc = api->cuMemcpyHtoD(j->plain, j->host, j->bytes) != FCU_SUCCESS; break;
  case PLAIN_D2H: rc = api->cuMemcpyDtoH(j->host, j->plain, j->bytes) != FCU_SUCCESS; break;
  case PLAIN_H2D_SYNC:
    rc = api->cuMemcpyHtoD(j->plain, j->host, j->bytes) != FCU_SUCCESS || api->cuStreamSynchronize(NULL) != FCU_SUCCESS;
    break;
  case PLAIN_H2D_CTX:
    rc = api->cuMemcpyHtoD(j->plain, j->host, j->bytes) != FCU_SUCCESS || api->cuCtxSynchronize() != FCU_SUCCESS;
    break;
  }
  if (st != FERRY_OK) die("%s: %s", ferry_status_name(st), ferry_last_error());
  if (rc != 0) die("a raw driver call (job kind %d, %zu bytes) failed", (int)j->kind, j->bytes);
}

static void run_once(job j) { run(&j); }

/* Seconds per operation over `iters` operations, after one untimed operation. */
static double time_job(const job *j, int iters) {
  run(j);
  double t0 = bench_seconds();
  for (int i = 0; i < iters; i++)
    run(j);
  return (bench_seconds() - t0) / iters;
}

/* ---- output ------------------------------------------------------------------------- */

typedef enum target_kind { NO_TARGET, MIN_GBS, MIN_RATIO, MAX_RATIO, MAX_US } target_kind;

typedef struct row {
  const char *test;
  size_t bytes;
  double ferry, raw; /* GB/s or us */
  const char *unit;  /* "GB/s" or "us" */
  const char *raw_call;
  target_kind target;
  double limit;
  int reps;
} row;

static size_t device_index;
static const char *device_name;
static int failed_targets;

static const char *size_text(size_t bytes, char *buf, size_t size) {
  if (bytes >= (1u << 30) && bytes % (1u << 30) == 0)
    snprintf(buf, size, "%zu GiB", bytes >> 30);
  else if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
    snprintf(buf, size, "%zu MiB", bytes >> 20);
  else if (bytes >= 1024 && bytes % 1024 == 0)
    snprintf(buf, size, "%zu KiB", bytes >> 10);
  else
    snprintf(buf, size, "%zu B", bytes);
  return buf;
}

static void print_header(void) {
  printf("%-44s %8s %11s %11s  %-46s %7s  %-13s %s\n", "test", "size", "ferry", "raw", "raw call", "ratio", "target",
         "verdict");
}

static void emit(const row *r) {
  bool bandwidth = strcmp(r->unit, "GB/s") == 0;
  /* ratio: how ferry compares, >1 is faster for bandwidth, slower for time. */
  double ratio = r->raw > 0 ? r->ferry / r->raw : 0;
  char target[32] = "", verdict[16] = "";
  bool pass = true;
  switch (r->target) {
  case NO_TARGET: break;
  case MIN_GBS:
    snprintf(target, sizeof target, ">= %.0f GB/s", r->limit);
    pass = r->ferry >= r->limit;
    break;
  case MIN_RATIO:
    snprintf(target, sizeof target, ">= %.2fx raw", r->limit);
    pass = ratio >= r->limit;
    break;
  case MAX_RATIO:
    snprintf(target, sizeof target, "<= %.2fx raw", r->limit);
    pass = ratio <= r->limit;
    break;
  case MAX_US:
    snprintf(target, sizeof target, "<= %.2f us", r->limit);
    pass = r->ferry <= r->limit;
    break;
  }
  if (r->target != NO_TARGET) {
    snprintf(verdict, sizeof verdict, "%s", pass ? "ok" : "MISSED");
    if (!pass) failed_targets++;
  }
  char size[32], ferry_text[32], raw_text[32];
  size_text(r->bytes, size, sizeof size);
  snprintf(ferry_text, sizeof ferry_text, bandwidth ? "%.2f GB/s" : "%.3f us", r->ferry);
  snprintf(raw_text, sizeof raw_text, bandwidth ? "%.2f GB/s" : "%.3f us", r->raw);
  printf("%-44s %8s %11s %11s  %-46s %6.3fx  %-13s %s\n", r->test, size, ferry_text, r->raw > 0 ? raw_text : "-",
         r->raw_call, ratio, target, verdict);
  if (csv)
    fprintf(csv, "%zu,\"%s\",\"%s\",%zu,%.6g,%.6g,%s,\"%s\",%.4f,\"%s\",%s,%d\n", device_index, device_name, r->test,
            r->bytes, r->ferry, r->raw, r->unit, r->raw_call, ratio, target, verdict, r->reps);
}

static double gbs(size_t bytes, double seconds) { return seconds > 0 ? (double)bytes / seconds / 1e9 : 0; }

/* Repeats and operations per sample for a transfer of `bytes`. */
static int reps_for(size_t bytes) { return quick ? 3 : bytes >= ((size_t)1 << 30) ? 5 : 9; }
static int iters_for(size_t bytes) {
  size_t budget = quick ? ((size_t)1 << 20) : ((size_t)64 << 20);
  size_t n = budget / bytes;
  return n < 1 ? 1 : n > 200 ? 200 : (int)n;
}

/* Median seconds per call of f and of r, their repeats alternating: the GPU's
 * clocks drift (after the idle alloc+free rows, say), and timing all of one
 * before the other charged that to whichever went first (64-byte d2h: 1.19x in
 * one run, 1.01x in another). */
static void time_pair(const job *f, const job *r, int reps, int iters, double *tf, double *tr) {
  double sf[MAX_SAMPLES], sr[MAX_SAMPLES];
  if (reps > MAX_SAMPLES) reps = MAX_SAMPLES;
  for (int k = 0; k < reps; k++) {
    sf[k] = time_job(f, iters);
    sr[k] = time_job(r, iters);
  }
  *tf = bench_median(sf, reps);
  *tr = bench_median(sr, reps);
}

static void bandwidth_row(const char *test, job f, job r, const char *raw_call, target_kind target, double limit) {
  int reps = reps_for(f.bytes), iters = iters_for(f.bytes);
  double tf, tr;
  time_pair(&f, &r, reps, iters, &tf, &tr);
  row out = {test, f.bytes, gbs(f.bytes, tf), gbs(r.bytes, tr), "GB/s", raw_call, target, limit, reps};
  emit(&out);
}

static void latency_row(const char *test, job f, job r, const char *raw_call, target_kind target, double limit,
                        int iters) {
  int reps = quick ? 3 : 9;
  double tf, tr;
  time_pair(&f, &r, reps, iters, &tf, &tr);
  row out = {test, f.bytes, tf * 1e6, tr * 1e6, "us", raw_call, target, limit, reps};
  emit(&out);
}

/* ---- one device ------------------------------------------------------------------------- */

static void *must_malloc(size_t bytes) {
  void *p = malloc(bytes);
  if (!p) die("no host memory for %zu bytes", bytes);
  memset(p, 0x5a, bytes); /* touch every page before timing */
  return p;
}

static void bench_device(ferry_device *dev) {
  ferry_device_info info;
  ferry_device_info_get(dev, &info);
  device_index = info.index;
  device_name = info.name;
  char why[256] = "";
  raw_baseline *raw = raw_calls->open(dev, why);
  if (!raw) die("raw baseline for %s: %s", info.name, why);
  size_t big = quick ? ((size_t)4 << 20) : ((size_t)1 << 30);
  char big_text[32];
  size_text(big, big_text, sizeof big_text);
  printf("\ndevice %zu: %s, %.1f GiB\n", info.index, info.name, (double)info.total_memory / (1u << 30));

  unsigned char *pageable_src = must_malloc(big), *pageable_dst = must_malloc(big);
  void *ferry_pinned = NULL;
  if (ferry_host_alloc(dev, big, &ferry_pinned) != FERRY_OK) die("ferry_host_alloc: %s", ferry_last_error());
  void *raw_pinned = raw_calls->host_alloc(raw, big);
  if (!raw_pinned) die("cuMemAllocHost of %zu bytes failed", big);
  memset(ferry_pinned, 0x33, big);
  memset(raw_pinned, 0x44, big);
  for (size_t i = 0; i < big; i++)
    pageable_src[i] = (unsigned char)(i * 131 + 7);
  ferry_buffer a, b;
  if (ferry_alloc(dev, big, FERRY_UINT8, &a) != FERRY_OK || ferry_alloc(dev, big, FERRY_UINT8, &b) != FERRY_OK)
    die("ferry_alloc of 2 x %zu bytes: %s", big, ferry_last_error());
  cu_deviceptr plain = 0;
  if (api->cuMemAlloc(&plain, 4096) != FCU_SUCCESS) die("cuMemAlloc of a plain 4 KiB buffer failed");

#define JOB(kind_, host_, bytes_)                                                                                      \
  ((job){.kind = (kind_), .dev = dev, .raw = raw, .a = a, .b = b, .plain = plain, .host = (host_), .bytes = (bytes_)})

  /* The bytes arrive intact (a check, not a figure). */
  run_once(JOB(FERRY_WRITE, pageable_src, big));
  memset(pageable_dst, 0, big);
  run_once(JOB(FERRY_READ, pageable_dst, big));
  if (memcmp(pageable_src, pageable_dst, big) != 0) die("the %s round trip through ferry differs", big_text);
  run_once(JOB(RAW_D2H, pageable_dst, big));
  if (memcmp(pageable_src, pageable_dst, big) != 0) die("cuMemcpyDtoH after ferry_write differs");
  printf("%s round trip from malloc'd memory verified byte for byte\n\n", big_text);

  print_header();
  char name[96];
  snprintf(name, sizeof name, "h2d %s from malloc'd memory", big_text);
  bandwidth_row(name, JOB(FERRY_WRITE, pageable_src, big), JOB(RAW_H2D, raw_pinned, big),
                "cuMemcpyHtoD from cuMemAllocHost memory", MIN_RATIO, 0.95);
  bandwidth_row(name, JOB(FERRY_WRITE, pageable_src, big), JOB(RAW_H2D, pageable_src, big),
                "cuMemcpyHtoD from the same malloc'd memory", NO_TARGET, 0);
  snprintf(name, sizeof name, "d2h %s to malloc'd memory", big_text);
  bandwidth_row(name, JOB(FERRY_READ, pageable_dst, big), JOB(RAW_D2H, raw_pinned, big),
                "cuMemcpyDtoH to cuMemAllocHost memory", MIN_RATIO, 0.95);
  bandwidth_row(name, JOB(FERRY_READ, pageable_dst, big), JOB(RAW_D2H, pageable_dst, big),
                "cuMemcpyDtoH to the same malloc'd memory", NO_TARGET, 0);
  /* Mid sizes from pageable memory against pinned: where the choice of path and piece shows. */
  const size_t mid_sizes[] = {(size_t)4 << 20, (size_t)16 << 20, (size_t)64 << 20};
  const double mid_targets[] = {0.5, 0.7, 0.85};
  for (size_t i = 0; i < 3 && mid_sizes[i] <= big; i++) {
    char mid[32];
    size_text(mid_sizes[i], mid, sizeof mid);
    snprintf(name, sizeof name, "h2d %s from malloc'd memory", mid);
    bandwidth_row(name, JOB(FERRY_WRITE, pageable_src, mid_sizes[i]), JOB(RAW_H2D, raw_pinned, mid_sizes[i]),
                  "cuMemcpyHtoD from cuMemAllocHost memory", MIN_RATIO, mid_targets[i]);
    snprintf(name, sizeof name, "d2h %s to malloc'd memory", mid);
    bandwidth_row(name, JOB(FERRY_READ, pageable_dst, mid_sizes[i]), JOB(RAW_D2H, raw_pinned, mid_sizes[i]),
                  "cuMemcpyDtoH to cuMemAllocHost memory", MIN_RATIO, mid_targets[i]);
  }
  snprintf(name, sizeof name, "h2d %s from ferry_host_alloc memory", big_text);
  bandwidth_row(name, JOB(FERRY_WRITE, ferry_pinned, big), JOB(RAW_H2D, raw_pinned, big),
                "cuMemcpyHtoD from cuMemAllocHost memory", MIN_RATIO, 0.98);
  snprintf(name, sizeof name, "d2h %s to ferry_host_alloc memory", big_text);
  bandwidth_row(name, JOB(FERRY_READ, ferry_pinned, big), JOB(RAW_D2H, raw_pinned, big),
                "cuMemcpyDtoH to cuMemAllocHost memory", MIN_RATIO, 0.98);
  snprintf(name, sizeof name, "d2d %s", big_text);
  bandwidth_row(name, JOB(FERRY_COPY, NULL, big), JOB(RAW_D2D, NULL, big), "cuMemcpyDtoD + cuCtxSynchronize", MIN_RATIO,
                0.98);

  /* Allocation pairs: ferry's come from its cache after the first. */
  const size_t alloc_sizes[] = {256, (size_t)64 << 10, (size_t)16 << 20};
  for (size_t i = 0; i < sizeof alloc_sizes / sizeof alloc_sizes[0]; i++) {
    latency_row("ferry_alloc + ferry_free (a pair)", JOB(FERRY_ALLOC_FREE, NULL, alloc_sizes[i]),
                JOB(RAW_ALLOC_FREE, NULL, alloc_sizes[i]), "cuMemAlloc + cuMemFree", MAX_US, 0.2, quick ? 50 : 200);
  }

  /* 64-byte latency. */
  unsigned char *small = must_malloc(4096);
  int small_iters = quick ? 100 : 2000;
  latency_row("h2d 64 B from malloc'd memory", JOB(FERRY_WRITE, small, 64), JOB(PLAIN_H2D_CTX, small, 64),
              "cuMemcpyHtoD + cuCtxSynchronize, plain", MAX_RATIO, 1.05, small_iters);
  latency_row("h2d 64 B from malloc'd memory", JOB(FERRY_WRITE, small, 64), JOB(PLAIN_H2D, small, 64),
              "cuMemcpyHtoD, plain cuMemAlloc buffer", NO_TARGET, 0, small_iters);
  latency_row("h2d 64 B from malloc'd memory", JOB(FERRY_WRITE, small, 64), JOB(RAW_H2D, small, 64),
              "cuMemcpyHtoD into the same ferry buffer", NO_TARGET, 0, small_iters);
  latency_row("h2d 64 B from malloc'd memory", JOB(FERRY_WRITE, small, 64), JOB(PLAIN_H2D_SYNC, small, 64),
              "cuMemcpyHtoD + cuStreamSynchronize, plain", NO_TARGET, 0, small_iters);
  latency_row("h2d 64 B from malloc'd memory", JOB(FERRY_WRITE, small, 64), JOB(PLAIN_H2D, raw_pinned, 64),
              "cuMemcpyHtoD from cuMemAllocHost, plain", NO_TARGET, 0, small_iters);
  latency_row("d2h 64 B to malloc'd memory", JOB(FERRY_READ, small, 64), JOB(PLAIN_D2H, small, 64),
              "cuMemcpyDtoH, plain cuMemAlloc buffer", MAX_RATIO, 1.1, small_iters);
  latency_row("h2d 4 KiB from malloc'd memory", JOB(FERRY_WRITE, small, 4096), JOB(PLAIN_H2D, small, 4096),
              "cuMemcpyHtoD, plain cuMemAlloc buffer", NO_TARGET, 0, small_iters);

  /* The bandwidth table: every path, 4 KiB to the big size, powers of 4. */
  if (!targets_only) printf("\nbandwidth by size (ferry vs the raw call in the same run)\n");
  if (!targets_only) print_header();
  for (size_t size = 4096; size <= big && !targets_only; size *= 4) {
    bandwidth_row("table: h2d from malloc'd memory", JOB(FERRY_WRITE, pageable_src, size),
                  JOB(RAW_H2D, pageable_src, size), "cuMemcpyHtoD from the same memory", NO_TARGET, 0);
    bandwidth_row("table: d2h to malloc'd memory", JOB(FERRY_READ, pageable_dst, size),
                  JOB(RAW_D2H, pageable_dst, size), "cuMemcpyDtoH to the same memory", NO_TARGET, 0);
    bandwidth_row("table: h2d from pinned memory", JOB(FERRY_WRITE, ferry_pinned, size), JOB(RAW_H2D, raw_pinned, size),
                  "cuMemcpyHtoD from cuMemAllocHost memory", NO_TARGET, 0);
    bandwidth_row("table: d2h to pinned memory", JOB(FERRY_READ, ferry_pinned, size), JOB(RAW_D2H, raw_pinned, size),
                  "cuMemcpyDtoH to cuMemAllocHost memory", NO_TARGET, 0);
    bandwidth_row("table: d2d", JOB(FERRY_COPY, NULL, size), JOB(RAW_D2D, NULL, size),
                  "cuMemcpyDtoD + cuCtxSynchronize", NO_TARGET, 0);
  }
#undef JOB
  api->cuMemFree(plain);
  free(small);
  ferry_free(a);
  ferry_free(b);
  ferry_host_free(ferry_pinned);
  raw_calls->host_free(raw, raw_pinned);
  raw_calls->close(raw);
  free(pageable_src);
  free(pageable_dst);
  ferry_device_trim(dev);
}

/* 64-byte writes under each FERRY_CUDA_H2D way (a fresh session each). */
static void h2d_modes(size_t index) {
  static const char *const modes[] = {"stream", "memops", "bounce"};
  printf("\nwrites from malloc'd memory by FERRY_CUDA_H2D, the ways of making them complete on return (device %zu)\n",
         index);
  print_header();
  const char *saved = getenv("FERRY_CUDA_H2D");
  char *keep = saved ? strdup(saved) : NULL;
  for (size_t m = 0; m < 3; m++) {
    ferry_shutdown();
    setenv("FERRY_CUDA_H2D", modes[m], 1);
    ferry_device *dev;
    if (ferry_init() != FERRY_OK || ferry_device_get(index, &dev) != FERRY_OK)
      die("ferry_init for FERRY_CUDA_H2D=%s: %s", modes[m], ferry_last_error());
    ferry_device_info info;
    ferry_device_info_get(dev, &info);
    device_index = info.index;
    device_name = info.name; /* the old session's strings are gone */
    api = driver();
    char why[256];
    raw_baseline *raw = raw_calls->open(dev, why);
    if (!raw) die("raw baseline: %s", why);
    size_t bytes = (size_t)256 << 10;
    ferry_buffer a;
    if (ferry_alloc(dev, bytes, FERRY_UINT8, &a) != FERRY_OK) die("ferry_alloc: %s", ferry_last_error());
    cu_deviceptr plain = 0;
    if (api->cuMemAlloc(&plain, bytes) != FCU_SUCCESS) die("cuMemAlloc failed");
    unsigned char *host = must_malloc(bytes);
    char name[96];
    snprintf(name, sizeof name, "h2d 64 B, FERRY_CUDA_H2D=%s", modes[m]);
    job f = {.kind = FERRY_WRITE, .dev = dev, .raw = raw, .a = a, .host = host, .bytes = 64, .plain = plain};
    job r = f;
    r.kind = PLAIN_H2D;
    latency_row(name, f, r, "cuMemcpyHtoD, plain cuMemAlloc buffer", NO_TARGET, 0, quick ? 100 : 2000);
    r.kind = PLAIN_H2D_SYNC;
    latency_row(name, f, r, "cuMemcpyHtoD + cuStreamSynchronize, plain", NO_TARGET, 0, quick ? 100 : 2000);
    snprintf(name, sizeof name, "h2d 4 KiB, FERRY_CUDA_H2D=%s", modes[m]);
    f.bytes = r.bytes = 4096;
    r.kind = PLAIN_H2D;
    latency_row(name, f, r, "cuMemcpyHtoD, plain cuMemAlloc buffer", NO_TARGET, 0, quick ? 100 : 2000);
    snprintf(name, sizeof name, "h2d 256 KiB, FERRY_CUDA_H2D=%s", modes[m]);
    f.bytes = r.bytes = bytes;
    r.kind = PLAIN_H2D_SYNC;
    bandwidth_row(name, f, r, "cuMemcpyHtoD + cuStreamSynchronize, plain", NO_TARGET, 0);
    api->cuMemFree(plain);
    free(host);
    ferry_free(a);
    raw_calls->close(raw);
  }
  ferry_shutdown();
  if (keep) {
    setenv("FERRY_CUDA_H2D", keep, 1);
    free(keep);
  } else {
    unsetenv("FERRY_CUDA_H2D");
  }
}

/* --sweep: the engine's staging under forced piece sizes and copy-thread counts
 * (FERRY_STAGE_BYTES with FERRY_STAGE_MIN=64K, FERRY_COPY_THREADS), and under
 * its own plan with other thread counts, at 4, 16 and 64 MiB: for checking the
 * plan the measured figures give against what each setting moves. */
static void pipeline_sweep(size_t index) {
  static const char *const pieces[] = {"", "512K", "1M", "2M", "4M", "8M"};
  static const char *const threads[] = {"8", "16"};
  size_t big = quick ? ((size_t)16 << 20) : ((size_t)64 << 20);
  unsigned char *src = must_malloc(big), *dst = must_malloc(big);
  void *pinned = NULL;
  printf("\nthe engine by FERRY_STAGE_BYTES and FERRY_COPY_THREADS (device %zu; pieces \"plan\": the engine's own)\n",
         index);
  print_header();
  for (size_t pi = 0; pi < sizeof pieces / sizeof pieces[0]; pi++) {
    for (size_t ti = 0; ti < sizeof threads / sizeof threads[0]; ti++) {
      ferry_shutdown();
      if (pieces[pi][0]) {
        setenv("FERRY_STAGE_BYTES", pieces[pi], 1);
        setenv("FERRY_STAGE_MIN", "64K", 1);
      } else {
        unsetenv("FERRY_STAGE_BYTES");
        unsetenv("FERRY_STAGE_MIN");
      }
      setenv("FERRY_COPY_THREADS", threads[ti], 1);
      ferry_device *dev;
      if (ferry_init() != FERRY_OK || ferry_device_get(index, &dev) != FERRY_OK)
        die("ferry_init for the sweep: %s", ferry_last_error());
      ferry_device_info info;
      ferry_device_info_get(dev, &info);
      device_index = info.index;
      device_name = info.name;
      api = driver();
      char why[256];
      raw_baseline *raw = raw_calls->open(dev, why);
      if (!raw) die("raw baseline: %s", why);
      pinned = raw_calls->host_alloc(raw, big);
      if (!pinned) die("cuMemAllocHost of %zu bytes failed", big);
      ferry_buffer a;
      if (ferry_alloc(dev, big, FERRY_UINT8, &a) != FERRY_OK) die("ferry_alloc: %s", ferry_last_error());
      if (ferry_write(a, 0, src, big) != FERRY_OK) die("ferry_write: %s", ferry_last_error()); /* measures */
      const size_t sizes[] = {(size_t)4 << 20, (size_t)16 << 20, (size_t)64 << 20};
      for (size_t z = 0; z < 3 && sizes[z] <= big; z++) {
        char name[96];
        snprintf(name, sizeof name, "sweep pieces=%s threads=%s: h2d", pieces[pi][0] ? pieces[pi] : "plan",
                 threads[ti]);
        job f = {.kind = FERRY_WRITE, .dev = dev, .raw = raw, .a = a, .host = src, .bytes = sizes[z]};
        job r = f;
        r.kind = RAW_H2D;
        r.host = pinned;
        bandwidth_row(name, f, r, "cuMemcpyHtoD from cuMemAllocHost memory", NO_TARGET, 0);
        snprintf(name, sizeof name, "sweep pieces=%s threads=%s: d2h", pieces[pi][0] ? pieces[pi] : "plan",
                 threads[ti]);
        f.kind = FERRY_READ;
        f.host = dst;
        r.kind = RAW_D2H;
        bandwidth_row(name, f, r, "cuMemcpyDtoH to cuMemAllocHost memory", NO_TARGET, 0);
      }
      ferry_free(a);
      raw_calls->host_free(raw, pinned);
      raw_calls->close(raw);
    }
  }
  ferry_shutdown();
  unsetenv("FERRY_STAGE_BYTES");
  unsetenv("FERRY_STAGE_MIN");
  unsetenv("FERRY_COPY_THREADS");
  free(src);
  free(dst);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *csv_path = NULL;
  long only = -1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc)
      csv_path = argv[++i];
    else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
      only = strtol(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--sweep") == 0)
      sweep = true;
    else if (strcmp(argv[i], "--targets") == 0)
      targets_only = true;
    else {
      fprintf(stderr, "usage: bench_cuda [--quick] [--targets] [--csv FILE] [--device N] [--sweep]\n");
      return 2;
    }
  }
  if (ferry_init() != FERRY_OK) die("ferry_init: %s", ferry_last_error());
  raw_calls = raw_ops_for("cuda");
  api = driver();
  ferry_backend_info cuda = {0};
  for (size_t i = 0; i < ferry_backend_count(); i++)
    if (ferry_backend_get(i, &cuda) == FERRY_OK && strcmp(cuda.name, "cuda") == 0) break;
  if (!api || !raw_calls || cuda.device_count == 0) {
    printf("bench_cuda: no CUDA device: %s\n", cuda.status ? cuda.status : "no cuda backend");
    const char *req = getenv("FERRY_REQUIRE_BACKENDS");
    ferry_shutdown();
    return req && strstr(req, "cuda") ? 1 : 77;
  }
  if (csv_path) {
    csv = fopen(csv_path, "w");
    if (!csv) die("cannot write %s", csv_path);
    fprintf(csv, "device_index,device,test,bytes,ferry,raw,unit,raw_call,ratio,target,verdict,repeats\n");
  }
  int version = 0;
  api->cuDriverGetVersion(&version);
  time_t t = time(NULL);
  char date[64];
  strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", localtime(&t));
  printf("bench_cuda%s: %zu CUDA device(s), driver API %d.%d, %s\n", quick ? " --quick" : "", cuda.device_count,
         version / 1000, (version % 1000) / 10, date);
  printf("ratio = ferry / raw (GB/s: above 1 is faster; us: below 1 is faster); median of the repeats\n");
  double t0 = bench_seconds();
  size_t first = (size_t)-1;
  for (size_t d = 0; d < cuda.device_count; d++) {
    if (only >= 0 && (size_t)only != cuda.first_device + d) continue;
    ferry_device *dev;
    if (ferry_device_get(cuda.first_device + d, &dev) != FERRY_OK) die("%s", ferry_last_error());
    bench_device(dev);
    if (first == (size_t)-1) first = cuda.first_device + d;
  }
  if (first != (size_t)-1 && !targets_only) h2d_modes(first);
  if (first != (size_t)-1 && sweep) pipeline_sweep(first);
  ferry_shutdown();
  printf("\n%d target(s) missed; %.1f s\n", failed_targets, bench_seconds() - t0);
  if (csv) fclose(csv);
  return 0;
}
