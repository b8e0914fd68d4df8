/*
 * `ferry bench`: the measurements.
 *
 * For each device and size the host memory is allocated and touched, the device
 * buffers allocated, and then every path is, in turn: checked (the bytes of one
 * ferry transfer and of one raw transfer per way are compared with what was
 * sent), warmed up and calibrated (how many back-to-back calls make one sample of
 * about target_sample seconds, separately for ferry and each raw way), and
 * sampled: ferry, raw, (the raw's second way,) ferry, raw ... so that drift hits
 * all alike. Each figure is the median of its samples; of two raw ways the one
 * with the lower median is shown. Copies between two devices (peer, cross) are
 * measured the same way, after the devices.
 *
 * A path may have a settle step beside its call (write_async: the queue's
 * synchronisation), run after each sample's clock stops, so that the figure is the
 * calls alone while nothing they queued outlives the sample. Such a path queues at
 * most ASYNC_QUEUED_MAX bytes a sample, and the same number of calls on every side.
 */
#include "bench.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const bench_path_desc bench_paths[PATH_COUNT] = {
    [PATH_H2D] = {"h2d", "h2d", "ferry_host_to_device from ordinary (malloc'd) host memory", 1, false, false, false,
                  false},
    [PATH_D2H] = {"d2h", "d2h", "ferry_device_to_host into ordinary host memory", 1, false, false, false, false},
    [PATH_H2D_PINNED] = {"h2d-pinned", "h2d pinned", "ferry_host_to_device from ferry_host_alloc (pinned) memory", 1,
                         false, false, false, false},
    [PATH_D2H_PINNED] = {"d2h-pinned", "d2h pinned", "ferry_device_to_host into ferry_host_alloc (pinned) memory", 1,
                         false, false, false, false},
    [PATH_HOST_PTR] = {"host-ptr", "host-ptr sync",
                       "ferry_alloc_host_ptr buffer: h2d + d2h on its own array (synchronisation only, no bytes "
                       "move), microseconds per pair, vs the raw h2d + d2h of the same bytes on an ordinary buffer",
                       2, true, true, false, false},
    [PATH_ZERO_COPY] = {"zero-copy", "zero-copy sync",
                        "ferry_alloc_zero_copy buffer: h2d + d2h on its own array (synchronisation only, no bytes "
                        "move), microseconds per pair, vs the raw h2d + d2h of the same bytes on an ordinary buffer",
                        2, true, true, false, false},
    [PATH_D2D] = {"d2d", "d2d", "ferry_device_to_device between two buffers of the device (bytes copied per second)", 1,
                  false, false, false, false},
    [PATH_ASYNC] = {"async", "write_async",
                    "ferry_write_async from ordinary host memory on a queue of the device: microseconds to submit "
                    "one; the queue is synchronised after each sample, untimed, and a sample queues 64 MiB at most",
                    1, true, false, false, false},
    [PATH_ASYNC_PINNED] = {"async-pinned", "async pinned",
                           "ferry_write_async from ferry_host_alloc (pinned) memory on a queue of the device: "
                           "microseconds to submit one, as write_async",
                           1, true, false, false, false},
    [PATH_BOTH] = {"both", "h2d+d2h 2q",
                   "ferry_write_async on one queue of the device and ferry_read_async on a second at once, both "
                   "synchronised (bytes moved both ways per second)",
                   2, false, false, false, false},
    [PATH_BOTH_PINNED] = {"both-pinned", "both pinned",
                          "h2d+d2h 2q from and into two ferry_host_alloc (pinned) blocks (bytes moved both ways per "
                          "second)",
                          2, false, false, false, false},
    [PATH_ELAPSED] = {"elapsed", "elapsed",
                      "ferry_write_async from ferry_host_alloc (pinned) memory between two ferry_event_record on a "
                      "queue of the device, timed by ferry_event_elapsed: bytes per second by the events' clock",
                      1, false, false, false, true},
    [PATH_ALLOC] = {"alloc", "alloc+free", "ferry_alloc + ferry_free of one buffer, in microseconds", 1, true, false,
                    false, false},
    [PATH_PEER] = {"peer", "peer",
                   "ferry_device_to_device from a buffer of device A into one of device B, both of one backend, vs "
                   "the driver's copy between devices (cuMemcpyPeer)",
                   1, false, false, true, false},
    [PATH_CROSS] = {"cross", "cross",
                    "ferry_device_to_device from a buffer of device A into one of device B, vs the raw d2h of A into "
                    "ordinary host memory + the raw h2d of B from it",
                    1, false, false, true, false},
};

/* How long a figure may take, and how many samples it gets. */
typedef struct budget {
  double target_sample; /* seconds one sample should last (back-to-back calls) */
  double per_figure;    /* seconds of sampling per figure, ferry and raw together */
  int min_samples, max_samples;
  double warmup; /* seconds of warm-up per device */
} budget;

static budget budget_for(const bench_options *opt) {
  if (opt->quick)
    return (budget){.target_sample = 200e-6, .per_figure = 0.05, .min_samples = 3, .max_samples = 9, .warmup = 0.02};
  return (budget){.target_sample = 500e-6, .per_figure = 0.3, .min_samples = 5, .max_samples = 21, .warmup = 0.1};
}

#define MAX_INNER 1000000L
/* The most bytes one write_async sample leaves queued: the calls are timed, their
 * copies run after, so without a cap a sample of small, quick submissions could
 * queue gigabytes of work behind the clock. */
#define ASYNC_QUEUED_MAX ((size_t)64 << 20)

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double bench_figure(const bench_row *row, double seconds) {
  const bench_path_desc *p = &bench_paths[row->path];
  if (seconds <= 0) seconds = 1e-9;
  if (p->latency) return seconds * 1e6;
  return (double)row->bytes * p->bytes_factor / seconds / 1e9;
}

double bench_ratio(const bench_row *row) {
  if (row->status != ROW_OK || row->raw_count == 0 || row->ferry.median <= 0) return 0;
  return row->raw[0].t.median / row->ferry.median;
}

bench_row *bench_device_row(const bench_run *run, const bench_device *d, bench_path p, size_t size_index) {
  return &d->rows[(size_t)p * run->opt.size_count + size_index];
}

bench_row *bench_pair_row(const bench_run *run, const bench_pair *p, size_t size_index) {
  (void)run;
  return &p->rows[size_index];
}

const char *bench_pair_label(const bench_run *run, const bench_pair *p, char buf[48]) {
  snprintf(buf, 48, "%s %zu>%zu", bench_paths[p->path].label, run->devices[p->from].info.index,
           run->devices[p->to].info.index);
  return buf;
}

const char *bench_raw_tag(const raw_ops *raw, int way) {
  const char *tag = way ? raw->alt_tag : raw->tag;
  return tag ? tag : way ? "alt" : "raw";
}

const char *bench_raw_call(const bench_device *d, bench_path p, int way, char *buf, size_t size) {
  const raw_ops *r = d->raw;
  if (!r || (way && !d->alt)) return NULL;
  const char *h2d = way ? r->h2d_alt_name : r->h2d_name, *d2h = way ? r->d2h_alt_name : r->d2h_name;
  const char *d2d = way ? r->d2d_alt_name : r->d2d_name;
  const char *pinned = r->host_alloc ? "the driver's pinned memory" : "the same block";
  switch (p) {
  case PATH_H2D:
  case PATH_D2H: snprintf(buf, size, "%s", p == PATH_H2D ? h2d : d2h); break;
  case PATH_H2D_PINNED:
  case PATH_D2H_PINNED: snprintf(buf, size, "%s, %s", p == PATH_H2D_PINNED ? h2d : d2h, pinned); break;
  case PATH_HOST_PTR:
  case PATH_ZERO_COPY: snprintf(buf, size, "%s, then %s", h2d, d2h); break;
  case PATH_D2D:
    if (!d2d) return NULL;
    snprintf(buf, size, "%s", d2d);
    break;
  case PATH_ASYNC:
  case PATH_ASYNC_PINNED:
    if (way || !r->h2d_async || !r->finish) return NULL;
    snprintf(buf, size, "%s%s", r->h2d_async_name, p == PATH_ASYNC_PINNED ? ", pinned" : "");
    break;
  case PATH_BOTH:
  case PATH_BOTH_PINNED:
    if (way || !r->both) return NULL;
    snprintf(buf, size, "%s%s", r->both_name, p == PATH_BOTH_PINNED ? ", pinned" : "");
    break;
  case PATH_ELAPSED:
    if (way || !r->h2d_elapsed) return NULL;
    snprintf(buf, size, "%s", r->h2d_elapsed_name);
    break;
  case PATH_ALLOC:
    if (way || !r->alloc_free) return NULL;
    snprintf(buf, size, "%s", r->alloc_name ? r->alloc_name : "the driver's alloc + free");
    break;
  default: return NULL;
  }
  return buf;
}

const char *bench_row_raw_call(const bench_run *run, const bench_device *d, const bench_pair *p, const bench_row *row,
                               int figure, char *buf, size_t size) {
  (void)run;
  if (row->raw_count <= figure) return NULL;
  int way = row->raw[figure].way;
  if (p) return way ? p->raw_call_alt : p->raw_call;
  return bench_raw_call(d, row->path, way, buf, size);
}

const char *bench_row_raw_tag(const bench_device *d, const bench_pair *p, const bench_row *row, int figure) {
  if (row->raw_count <= figure) return NULL;
  int way = row->raw[figure].way;
  if (p) return p->path == PATH_PEER ? "peer" : way ? "second" : "first";
  if (row->path == PATH_ALLOC) return "alloc";
  return bench_raw_tag(d->raw, way);
}

/* ---- size caps and what a device has --------------------------------------------- */

uint64_t bench_host_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof line, f)) {
      if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
        fclose(f);
        return (uint64_t)kb * 1024;
      }
    }
    fclose(f);
  }
#ifdef _SC_AVPHYS_PAGES
  long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return (uint64_t)pages * (uint64_t)page;
#endif
  return 0;
}

/* The largest size measured on the device: its max_allocation, half its memory
 * (two buffers for d2d) and an eighth of the host memory available (ordinary,
 * pinned and host-ptr blocks live at once, a raw baseline's own buffers, and on
 * host devices the buffers themselves). */
void bench_device_cap(bench_device *d) {
  char a[32], b[32];
  uint64_t cap = d->info.max_allocation;
  snprintf(d->cap_reason, sizeof d->cap_reason, "the device's max_allocation is %s",
           bench_size_approx(d->info.max_allocation, a));
  if (d->info.total_memory / 2 < cap) {
    cap = d->info.total_memory / 2;
    snprintf(d->cap_reason, sizeof d->cap_reason, "two buffers of that size exceed the device's %s of memory",
             bench_size_approx(d->info.total_memory, a));
  }
  uint64_t avail = bench_host_available();
  if (avail && avail / 8 < cap) {
    cap = avail / 8;
    snprintf(d->cap_reason, sizeof d->cap_reason,
             "the host has %s available and the benchmark keeps up to eight blocks of the size at once",
             bench_size_approx(avail, b));
  }
  d->size_cap = cap > SIZE_MAX ? SIZE_MAX : (size_t)cap;
}

void bench_pair_cap(const bench_run *run, bench_pair *p) {
  const bench_device *a = &run->devices[p->from], *b = &run->devices[p->to];
  const bench_device *lower = a->size_cap <= b->size_cap ? a : b;
  p->size_cap = lower->size_cap;
  snprintf(p->cap_reason, sizeof p->cap_reason, "on device %zu %.150s", lower->info.index, lower->cap_reason);
}

bool bench_path_applies(const bench_device *d, bench_path p, size_t bytes, char *why, size_t why_size) {
  if (p == PATH_ZERO_COPY && !d->info.zero_copy) {
    snprintf(why, why_size, "the device's memory is not host memory");
    return false;
  }
  if (p == PATH_HOST_PTR && !d->info.host_ptr) {
    snprintf(why, why_size, "the device has no host-pointer buffers");
    return false;
  }
  if (p == PATH_HOST_PTR && d->info.host_ptr_alignment > 1 && bytes % d->info.host_ptr_alignment != 0) {
    char size[32], align[32];
    snprintf(why, why_size, "%s is not a multiple of the device's host_ptr_alignment (%s)",
             bench_size_text(bytes, size), bench_size_text(d->info.host_ptr_alignment, align));
    return false;
  }
  return true;
}

/* ---- the memory every path of one (device, size) works on --------------------- */

typedef struct ctx {
  bench_device *d;  /* the device; for a pair, the source */
  bench_device *to; /* a pair's destination */
  const raw_ops *raw, *raw_to;
  raw_baseline *rb, *rb_to;
  size_t bytes;
  unsigned char *src, *dst;  /* ordinary host memory, touched */
  unsigned char *host;       /* a pair's raw d2h + h2d go through this */
  ferry_buffer a, b;         /* device buffers: a for every transfer, b the d2d destination (a pair's on `to`) */
  unsigned char *pinned;     /* ferry_host_alloc */
  unsigned char *raw_pinned; /* raw->host_alloc, or the same block as pinned */
  bool raw_pinned_own;       /* raw_pinned came from raw->host_alloc */
  unsigned char *own;        /* the host-ptr / zero-copy buffer's array */
  ferry_buffer hb;           /* that buffer */
  ferry_queue q1, q2;        /* queues of the device: write_async's, and both's second (its reads) */
  /* The host memory of the queue rows: src and dst, or pinned blocks for the
   * pinned rows (ferry's, and the raw side's where its driver allocates them). */
  unsigned char *qsrc, *qdst, *raw_qsrc, *raw_qdst;
  unsigned char *pinned2, *raw_pinned2; /* the pinned rows' second blocks (their reads) */
  bool raw_pinned2_own;
  ferry_event e1, e2; /* the elapsed row's events */
  bool self_timed;    /* the path measured is (bench_path_desc.self_timed) */
  double clock;       /* a self-timed path's calls add the seconds they measured here */
  char err[1200];     /* the sentence of the last failure */
} ctx;

typedef int (*op_fn)(ctx *c);

/* One raw way of a path: the timed call and the check of its bytes. */
typedef struct way {
  op_fn op, verify;
  int index;    /* 0: the backend's first way, 1: its second */
  op_fn settle; /* NULL, or what waits for the calls' queued work after each sample, untimed */
} way;

static int ctx_fail(ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int ctx_fail(ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  return -1;
}

static int ferry_failed(ctx *c, ferry_status st) {
  return ctx_fail(c, "%s (%s)", ferry_last_error(), ferry_status_name(st));
}

static ferry_array arr(ctx *c, void *p) { return ferry_array_of(p, c->bytes, FERRY_UINT8); }

/* Waits after a failed call, so that nothing it queued before still uses the host
 * memory; c->err keeps the call's sentence, not the wait's. */
static void settle_quietly(ctx *c, op_fn settle) {
  char keep[sizeof c->err];
  memcpy(keep, c->err, sizeof keep);
  (void)settle(c);
  memcpy(c->err, keep, sizeof keep);
}

/* One call, then its settling: a complete transfer, for the checks. */
static int settle_after(ctx *c, op_fn op, op_fn settle) {
  if (op(c)) {
    settle_quietly(c, settle);
    return -1;
  }
  return settle(c);
}

/* ---- ferry's calls ---- */

static int f_h2d(ctx *c) {
  ferry_status st = ferry_host_to_device(arr(c, c->src), c->a);
  return st == FERRY_OK ? 0 : ferry_failed(c, st);
}
static int f_d2h(ctx *c) {
  ferry_status st = ferry_device_to_host(c->a, arr(c, c->dst));
  return st == FERRY_OK ? 0 : ferry_failed(c, st);
}
static int f_h2d_pinned(ctx *c) {
  ferry_status st = ferry_host_to_device(arr(c, c->pinned), c->a);
  return st == FERRY_OK ? 0 : ferry_failed(c, st);
}
static int f_d2h_pinned(ctx *c) {
  ferry_status st = ferry_device_to_host(c->a, arr(c, c->pinned));
  return st == FERRY_OK ? 0 : ferry_failed(c, st);
}
static int f_sync(ctx *c) {
  ferry_status st = ferry_host_to_device(arr(c, c->own), c->hb);
  if (st == FERRY_OK) st = ferry_device_to_host(c->hb, arr(c, c->own));
  return st == FERRY_OK ? 0 : ferry_failed(c, st);
}
static int f_d2d(ctx *c) {
  ferry_status st = ferry_device_to_device(c->a, c->b);
  return st == FERRY_OK ? 0 : ferry_failed(c, st);
}
static int f_async(ctx *c) {
  ferry_status st = ferry_write_async(c->q1, c->a, 0, c->qsrc, c->bytes);
  return st == FERRY_OK ? 0 : ferry_failed(c, st);
}
static int fs_async(ctx *c) {
  ferry_status st = ferry_queue_synchronize(c->q1);
  return st == FERRY_OK ? 0 : ferry_failed(c, st);
}
static int f_async_once(ctx *c) { return settle_after(c, f_async, fs_async); }
/* A write between two events, complete on return; the events' time goes to c->clock. */
static int f_elapsed(ctx *c) {
  double ms = 0;
  ferry_status st = ferry_event_record(c->e1, c->q1);
  if (st == FERRY_OK) st = ferry_write_async(c->q1, c->a, 0, c->qsrc, c->bytes);
  if (st == FERRY_OK) st = ferry_event_record(c->e2, c->q1);
  if (st == FERRY_OK) st = ferry_event_synchronize(c->e2);
  if (st == FERRY_OK) st = ferry_event_elapsed(c->e1, c->e2, &ms);
  if (st != FERRY_OK) {
    settle_quietly(c, fs_async); /* nothing may still use qsrc */
    return ferry_failed(c, st);
  }
  c->clock += ms * 1e-3;
  return 0;
}
/* Both queues are synchronised even after a failure: nothing may still use src or
 * dst on return. The first failure is the one said. */
static int f_both(ctx *c) {
  ferry_status st = ferry_write_async(c->q1, c->a, 0, c->qsrc, c->bytes);
  if (st != FERRY_OK) return ferry_failed(c, st);
  int rc = 0;
  st = ferry_read_async(c->q2, c->b, 0, c->qdst, c->bytes);
  if (st != FERRY_OK) rc = ferry_failed(c, st);
  st = ferry_queue_synchronize(c->q1);
  if (st != FERRY_OK && rc == 0) rc = ferry_failed(c, st);
  st = ferry_queue_synchronize(c->q2);
  if (st != FERRY_OK && rc == 0) rc = ferry_failed(c, st);
  return rc;
}
static int f_alloc(ctx *c) {
  ferry_buffer x;
  ferry_status st = ferry_alloc(c->d->dev, c->bytes, FERRY_UINT8, &x);
  if (st == FERRY_OK) st = ferry_free(x);
  return st == FERRY_OK ? 0 : ferry_failed(c, st);
}

/* ---- the raw calls: the first way, the second (alt), and between devices ---- */

static int raw_failed(ctx *c, const char *call, int code) {
  char size[32];
  return ctx_fail(c, "the raw baseline %s of %s failed (it returned %d)", call ? call : "call",
                  bench_size_text(c->bytes, size), code);
}
#define RAW(call, name)                                                                                                \
  do {                                                                                                                 \
    int rc_ = (call);                                                                                                  \
    if (rc_) return raw_failed(c, (name), rc_);                                                                        \
  } while (0)

static int r_h2d(ctx *c) {
  RAW(c->raw->h2d(c->rb, c->a, c->src, c->bytes), c->raw->h2d_name);
  return 0;
}
static int r_d2h(ctx *c) {
  RAW(c->raw->d2h(c->rb, c->a, c->dst, c->bytes), c->raw->d2h_name);
  return 0;
}
static int r_h2d_pinned(ctx *c) {
  RAW(c->raw->h2d(c->rb, c->a, c->raw_pinned, c->bytes), c->raw->h2d_name);
  return 0;
}
static int r_d2h_pinned(ctx *c) {
  RAW(c->raw->d2h(c->rb, c->a, c->raw_pinned, c->bytes), c->raw->d2h_name);
  return 0;
}
static int r_roundtrip(ctx *c) { return r_h2d(c) ? -1 : r_d2h(c); }
static int r_d2d(ctx *c) {
  RAW(c->raw->d2d(c->rb, c->a, c->b, c->bytes), c->raw->d2d_name);
  return 0;
}
static int r_alloc(ctx *c) {
  RAW(c->raw->alloc_free(c->rb, c->bytes), c->raw->alloc_name);
  return 0;
}
static int r_h2d_async(ctx *c) {
  RAW(c->raw->h2d_async(c->rb, c->a, c->raw_qsrc, c->bytes), c->raw->h2d_async_name);
  return 0;
}
static int r_finish(ctx *c) {
  RAW(c->raw->finish(c->rb), c->raw->finish_name);
  return 0;
}
static int r_h2d_async_once(ctx *c) { return settle_after(c, r_h2d_async, r_finish); }
static int r_elapsed(ctx *c) {
  double s = 0;
  int rc = c->raw->h2d_elapsed(c->rb, c->a, c->raw_qsrc, c->bytes, &s);
  if (rc) return raw_failed(c, c->raw->h2d_elapsed_name, rc);
  c->clock += s;
  return 0;
}
static int r_both(ctx *c) {
  RAW(c->raw->both(c->rb, c->a, c->raw_qsrc, c->b, c->raw_qdst, c->bytes), c->raw->both_name);
  return 0;
}
static int a_h2d(ctx *c) {
  RAW(c->raw->h2d_alt(c->rb, c->a, c->src, c->bytes), c->raw->h2d_alt_name);
  return 0;
}
static int a_d2h(ctx *c) {
  RAW(c->raw->d2h_alt(c->rb, c->a, c->dst, c->bytes), c->raw->d2h_alt_name);
  return 0;
}
static int a_h2d_pinned(ctx *c) {
  RAW(c->raw->h2d_alt(c->rb, c->a, c->raw_pinned, c->bytes), c->raw->h2d_alt_name);
  return 0;
}
static int a_d2h_pinned(ctx *c) {
  RAW(c->raw->d2h_alt(c->rb, c->a, c->raw_pinned, c->bytes), c->raw->d2h_alt_name);
  return 0;
}
static int a_roundtrip(ctx *c) { return a_h2d(c) ? -1 : a_d2h(c); }
static int a_d2d(ctx *c) {
  RAW(c->raw->d2d_alt(c->rb, c->a, c->b, c->bytes), c->raw->d2d_alt_name);
  return 0;
}
static int r_peer(ctx *c) {
  RAW(c->raw->peer(c->rb, c->a, c->rb_to, c->b, c->bytes), c->raw->peer_name);
  return 0;
}
/* A copy between devices as a program without ferry makes it: where one device's
 * memory is the host's (native, checked: its buffers are host addresses), one
 * call of the other device straight into or out of it; else the source's d2h into
 * ordinary host memory, then the destination's h2d from it. `second`: through each
 * device's second way where it has one (memcpy out of and into mapped memory). */
static int cross_d2h(ctx *c, bool second, void *into) {
  if (second && c->d->alt)
    RAW(c->raw->d2h_alt(c->rb, c->a, into, c->bytes), c->raw->d2h_alt_name);
  else
    RAW(c->raw->d2h(c->rb, c->a, into, c->bytes), c->raw->d2h_name);
  return 0;
}
static int cross_h2d(ctx *c, bool second, const void *from) {
  if (second && c->to->alt)
    RAW(c->raw_to->h2d_alt(c->rb_to, c->b, from, c->bytes), c->raw_to->h2d_alt_name);
  else
    RAW(c->raw_to->h2d(c->rb_to, c->b, from, c->bytes), c->raw_to->h2d_name);
  return 0;
}
static int cross(ctx *c, bool second) {
  if (c->to->info.zero_copy) return cross_d2h(c, second, (void *)ferry_device_ptr(c->b));
  if (c->d->info.zero_copy) return cross_h2d(c, second, (const void *)ferry_device_ptr(c->a));
  return cross_d2h(c, second, c->host) ? -1 : cross_h2d(c, second, c->host);
}
static int r_cross(ctx *c) { return cross(c, false); }
static int a_cross(ctx *c) { return cross(c, true); }

/* ---- checking the bytes ------------------------------------------------------ */

static uint64_t seed_counter = 1;

/* Bytes that differ with the offset and with every call, quick to write. */
static void fill(unsigned char *p, size_t n) {
  uint64_t seed = seed_counter++;
  uint64_t base = seed * 0x9E3779B97F4A7C15u, step = (seed << 1 | 1) * 0xD1B54A32D192ED03u;
  size_t words = n / 8;
  for (size_t i = 0; i < words; i++) {
    uint64_t w = base + i * step;
    memcpy(p + 8 * i, &w, 8);
  }
  for (size_t i = words * 8; i < n; i++)
    p[i] = (unsigned char)(seed + i * 131u);
}

static int check_bytes(ctx *c, const char *what, const unsigned char *want, const unsigned char *got) {
  if (memcmp(want, got, c->bytes) == 0) return 0;
  size_t i = 0;
  while (want[i] == got[i])
    i++;
  char size[32];
  return ctx_fail(c, "%s delivered wrong bytes: byte %zu of %s is 0x%02x, expected 0x%02x", what, i,
                  bench_size_text(c->bytes, size), got[i], want[i]);
}

static int read_back(ctx *c, ferry_buffer buf, unsigned char *into) {
  memset(into, 0xA5, c->bytes);
  ferry_status st = ferry_device_to_host_ptr(buf, into, c->bytes);
  return st == FERRY_OK ? 0 : ctx_fail(c, "reading back to check: %s (%s)", ferry_last_error(), ferry_status_name(st));
}

static int write_through(ctx *c, ferry_buffer buf, const unsigned char *from) {
  ferry_status st = ferry_host_ptr_to_device(from, c->bytes, buf);
  return st == FERRY_OK ? 0 : ctx_fail(c, "writing to check: %s (%s)", ferry_last_error(), ferry_status_name(st));
}

/* op copies `from` into buffer a; read a back and compare. */
static int verify_to_device(ctx *c, op_fn op, unsigned char *from, const char *what) {
  fill(from, c->bytes);
  if (op(c) || read_back(c, c->a, c->dst)) return -1;
  return check_bytes(c, what, from, c->dst);
}

/* op copies buffer a into `into`; write a first and compare. */
static int verify_to_host(ctx *c, op_fn op, unsigned char *into, const char *what) {
  fill(c->src, c->bytes);
  if (write_through(c, c->a, c->src)) return -1;
  memset(into, 0xA5, c->bytes);
  if (op(c)) return -1;
  return check_bytes(c, what, c->src, into);
}

/* A raw round trip: `from` -> a -> `into`, by `there` and `back`. */
static int verify_roundtrip_of(ctx *c, op_fn there, op_fn back, unsigned char *from, unsigned char *into,
                               const char *what) {
  fill(from, c->bytes);
  if (there(c)) return -1;
  memset(into, 0xA5, c->bytes);
  if (back(c)) return -1;
  return check_bytes(c, what, from, into);
}

/* A host-ptr or zero-copy buffer: what the host writes into its array reaches
 * the device after ferry_host_to_device on the array, and what the device holds
 * reaches the array after ferry_device_to_host on it. */
static int verify_sync(ctx *c, const char *what) {
  fill(c->own, c->bytes);
  ferry_status st = ferry_host_to_device(arr(c, c->own), c->hb);
  if (st != FERRY_OK) return ferry_failed(c, st);
  if (read_back(c, c->hb, c->dst)) return -1;
  char text[96];
  snprintf(text, sizeof text, "%s (host to device)", what);
  if (check_bytes(c, text, c->own, c->dst)) return -1;
  fill(c->src, c->bytes);
  if (write_through(c, c->hb, c->src)) return -1;
  st = ferry_device_to_host(c->hb, arr(c, c->own));
  if (st != FERRY_OK) return ferry_failed(c, st);
  snprintf(text, sizeof text, "%s (device to host)", what);
  return check_bytes(c, text, c->src, c->own);
}

/* A copy from a into b (one device, or a pair): b is overwritten first so that a
 * copy that did nothing shows. */
static int verify_copy(ctx *c, op_fn op, const char *what) {
  memset(c->dst, 0x3C, c->bytes);
  if (write_through(c, c->b, c->dst)) return -1;
  fill(c->src, c->bytes);
  if (write_through(c, c->a, c->src)) return -1;
  if (op(c) || read_back(c, c->b, c->dst)) return -1;
  return check_bytes(c, what, c->src, c->dst);
}

/* Both directions at once: src into a, and b into dst. b is written first with bytes
 * of its own, kept in a block of the check's, so that a read that did nothing shows. */
static int verify_both(ctx *c, op_fn op, unsigned char *src, unsigned char *dst, const char *what) {
  char size[32], text[256];
  unsigned char *want = malloc(c->bytes);
  if (!want) return ctx_fail(c, "no host memory to check %s at %s", what, bench_size_text(c->bytes, size));
  int rc = -1;
  fill(want, c->bytes);
  if (write_through(c, c->b, want) == 0) {
    fill(src, c->bytes);
    memset(dst, 0xA5, c->bytes);
    if (op(c) == 0) {
      snprintf(text, sizeof text, "%.200s (device to host)", what);
      if (check_bytes(c, text, want, dst) == 0 && read_back(c, c->a, want) == 0) {
        snprintf(text, sizeof text, "%.200s (host to device)", what);
        rc = check_bytes(c, text, src, want);
      }
    }
  }
  free(want);
  return rc;
}

static int verify_alloc(ctx *c) {
  ferry_buffer x;
  ferry_status st = ferry_alloc(c->d->dev, c->bytes, FERRY_UINT8, &x);
  if (st != FERRY_OK) return ferry_failed(c, st);
  size_t got = ferry_size(x);
  bool has_ptr = ferry_device_ptr(x) != 0;
  st = ferry_free(x);
  if (st != FERRY_OK) return ferry_failed(c, st);
  if (got != c->bytes) return ctx_fail(c, "ferry_alloc of %zu bytes gave a buffer of %zu", c->bytes, got);
  if (!has_ptr) return ctx_fail(c, "ferry_alloc of %zu bytes gave a buffer without a device pointer", c->bytes);
  return 0;
}

/* The checks, one per path and side. */
static int vf_h2d(ctx *c) { return verify_to_device(c, f_h2d, c->src, "ferry_host_to_device"); }
static int vf_d2h(ctx *c) { return verify_to_host(c, f_d2h, c->dst, "ferry_device_to_host"); }
static int vf_h2d_pinned(ctx *c) {
  return verify_to_device(c, f_h2d_pinned, c->pinned, "ferry_host_to_device from pinned memory");
}
static int vf_d2h_pinned(ctx *c) {
  return verify_to_host(c, f_d2h_pinned, c->pinned, "ferry_device_to_host into pinned memory");
}
static int vf_host_ptr(ctx *c) { return verify_sync(c, "the host-ptr buffer's synchronisation"); }
static int vf_zero_copy(ctx *c) { return verify_sync(c, "the zero-copy buffer's synchronisation"); }
static int vf_d2d(ctx *c) { return verify_copy(c, f_d2d, "ferry_device_to_device"); }
static int vf_async(ctx *c) {
  return verify_to_device(c, f_async_once, c->qsrc, "ferry_write_async + ferry_queue_synchronize");
}
static int vf_elapsed(ctx *c) {
  return verify_to_device(c, f_elapsed, c->qsrc, "ferry_write_async between two ferry_event_record");
}
static int vf_both(ctx *c) {
  return verify_both(c, f_both, c->qsrc, c->qdst, "ferry_write_async + ferry_read_async on two queues");
}

static int vr_h2d(ctx *c) { return verify_to_device(c, r_h2d, c->src, c->raw->h2d_name); }
static int vr_d2h(ctx *c) { return verify_to_host(c, r_d2h, c->dst, c->raw->d2h_name); }
static int vr_h2d_pinned(ctx *c) { return verify_to_device(c, r_h2d_pinned, c->raw_pinned, c->raw->h2d_name); }
static int vr_d2h_pinned(ctx *c) { return verify_to_host(c, r_d2h_pinned, c->raw_pinned, c->raw->d2h_name); }
static int vr_roundtrip(ctx *c) { return verify_roundtrip_of(c, r_h2d, r_d2h, c->src, c->dst, "the raw h2d + d2h"); }
static int vr_d2d(ctx *c) { return verify_copy(c, r_d2d, c->raw->d2d_name); }
static int vr_h2d_async(ctx *c) { return verify_to_device(c, r_h2d_async_once, c->raw_qsrc, c->raw->h2d_async_name); }
static int vr_elapsed(ctx *c) { return verify_to_device(c, r_elapsed, c->raw_qsrc, c->raw->h2d_elapsed_name); }
static int vr_both(ctx *c) { return verify_both(c, r_both, c->raw_qsrc, c->raw_qdst, c->raw->both_name); }
static int vr_peer(ctx *c) { return verify_copy(c, r_peer, c->raw->peer_name); }
static int vr_cross(ctx *c) { return verify_copy(c, r_cross, "the raw copy between devices"); }
/* On memory of a baseline's own, the second way's bytes start and end there. */
static int va_cross(ctx *c) {
  bool own_from = c->d->alt && c->raw->alt_own_memory, own_to = c->to->alt && c->raw_to->alt_own_memory;
  if (!own_from && !own_to) return verify_copy(c, a_cross, "the raw copy between devices (second ways)");
  fill(c->src, c->bytes);
  if (own_from) {
    RAW(c->raw->h2d_alt(c->rb, c->a, c->src, c->bytes), c->raw->h2d_alt_name);
  } else if (write_through(c, c->a, c->src)) {
    return -1;
  }
  if (a_cross(c)) return -1;
  memset(c->dst, 0xA5, c->bytes);
  if (own_to) {
    RAW(c->raw_to->d2h_alt(c->rb_to, c->b, c->dst, c->bytes), c->raw_to->d2h_alt_name);
  } else if (read_back(c, c->b, c->dst)) {
    return -1;
  }
  return check_bytes(c, "the raw copy between devices (second ways)", c->src, c->dst);
}

/* The second way on ferry's own buffers (OpenCL's map) is checked as the first is;
 * on memory of the baseline's own (Vulkan's mapped buffers), by round trips. */
static int va_h2d(ctx *c) {
  if (c->raw->alt_own_memory) return verify_roundtrip_of(c, a_h2d, a_d2h, c->src, c->dst, c->raw->h2d_alt_name);
  return verify_to_device(c, a_h2d, c->src, c->raw->h2d_alt_name);
}
static int va_d2h(ctx *c) {
  if (c->raw->alt_own_memory) return verify_roundtrip_of(c, a_h2d, a_d2h, c->src, c->dst, c->raw->d2h_alt_name);
  return verify_to_host(c, a_d2h, c->dst, c->raw->d2h_alt_name);
}
static int va_h2d_pinned(ctx *c) {
  if (c->raw->alt_own_memory)
    return verify_roundtrip_of(c, a_h2d_pinned, a_d2h, c->raw_pinned, c->dst, c->raw->h2d_alt_name);
  return verify_to_device(c, a_h2d_pinned, c->raw_pinned, c->raw->h2d_alt_name);
}
static int va_d2h_pinned(ctx *c) {
  if (c->raw->alt_own_memory)
    return verify_roundtrip_of(c, a_h2d, a_d2h_pinned, c->src, c->raw_pinned, c->raw->d2h_alt_name);
  return verify_to_host(c, a_d2h_pinned, c->raw_pinned, c->raw->d2h_alt_name);
}
static int va_roundtrip(ctx *c) {
  return verify_roundtrip_of(c, a_h2d, a_d2h, c->src, c->dst, "the raw h2d + d2h (second way)");
}
/* A copy on the baseline's own memory: in through a, copied to b, out through b. */
static int a_d2d_round(ctx *c) {
  if (a_h2d(c) || a_d2d(c)) return -1;
  ferry_buffer a = c->a;
  c->a = c->b; /* a_d2h reads "a" */
  int rc = a_d2h(c);
  c->a = a;
  return rc;
}
static int va_d2d(ctx *c) {
  if (c->raw->alt_own_memory) {
    fill(c->src, c->bytes);
    memset(c->dst, 0xA5, c->bytes);
    if (a_d2d_round(c)) return -1;
    return check_bytes(c, c->raw->d2d_alt_name, c->src, c->dst);
  }
  return verify_copy(c, a_d2d, c->raw->d2d_alt_name);
}

/* The raw ways of a device path, as many as the device has. */
static int device_ways(const ctx *c, bench_path p, way out[2]) {
  static const struct {
    op_fn op, verify, alt, alt_verify, settle;
  } table[PATH_DEVICE_COUNT] = {
      [PATH_H2D] = {r_h2d, vr_h2d, a_h2d, va_h2d, NULL},
      [PATH_D2H] = {r_d2h, vr_d2h, a_d2h, va_d2h, NULL},
      [PATH_H2D_PINNED] = {r_h2d_pinned, vr_h2d_pinned, a_h2d_pinned, va_h2d_pinned, NULL},
      [PATH_D2H_PINNED] = {r_d2h_pinned, vr_d2h_pinned, a_d2h_pinned, va_d2h_pinned, NULL},
      [PATH_HOST_PTR] = {r_roundtrip, vr_roundtrip, a_roundtrip, va_roundtrip, NULL},
      [PATH_ZERO_COPY] = {r_roundtrip, vr_roundtrip, a_roundtrip, va_roundtrip, NULL},
      [PATH_D2D] = {r_d2d, vr_d2d, a_d2d, va_d2d, NULL},
      [PATH_ASYNC] = {r_h2d_async, vr_h2d_async, NULL, NULL, r_finish},
      [PATH_ASYNC_PINNED] = {r_h2d_async, vr_h2d_async, NULL, NULL, r_finish},
      [PATH_BOTH] = {r_both, vr_both, NULL, NULL, NULL},
      [PATH_BOTH_PINNED] = {r_both, vr_both, NULL, NULL, NULL},
      [PATH_ELAPSED] = {r_elapsed, vr_elapsed, NULL, NULL, NULL},
      [PATH_ALLOC] = {r_alloc, NULL, NULL, NULL, NULL},
  };
  int n = 0;
  if (!c->raw) return 0;
  if (p == PATH_ALLOC && !c->raw->alloc_free) return 0;
  if ((p == PATH_ASYNC || p == PATH_ASYNC_PINNED) && (!c->raw->h2d_async || !c->raw->finish)) return 0;
  if ((p == PATH_BOTH || p == PATH_BOTH_PINNED) && !c->raw->both) return 0;
  if (p == PATH_ELAPSED && !c->raw->h2d_elapsed) return 0;
  out[n++] = (way){table[p].op, table[p].verify, 0, table[p].settle};
  bool alt = c->d->alt && table[p].alt && (p != PATH_D2D || c->raw->d2d_alt);
  if (alt) out[n++] = (way){table[p].alt, table[p].alt_verify, 1, NULL};
  return n;
}

/* ---- timing ------------------------------------------------------------------- */

/* Times n back-to-back calls; then settle, where the path has one, after the clock
 * stops (its failure fails the sample as a call's would). */
static int time_ops(op_fn op, op_fn settle, ctx *c, long n, double *out) {
  c->clock = 0;
  double t0 = bench_now();
  for (long i = 0; i < n; i++)
    if (op(c)) {
      if (settle) settle_quietly(c, settle);
      return -1;
    }
  *out = bench_now() - t0;
  if (c->self_timed) *out = c->clock;
  return settle ? settle(c) : 0;
}

/* The most calls in one sample: write_async's (pinned or not) queue at most ASYNC_QUEUED_MAX bytes
 * (and at least one call). */
static long max_ops(const bench_row *row) {
  if (row->path != PATH_ASYNC && row->path != PATH_ASYNC_PINNED) return MAX_INNER;
  size_t k = ASYNC_QUEUED_MAX / row->bytes;
  if (k < 1) k = 1;
  return k < (size_t)MAX_INNER ? (long)k : MAX_INNER;
}

/* How many back-to-back calls (at most max_n) last about `target` seconds; also
 * warms the path up. *out_per_op is the wall time per call, settling included: what
 * a sample costs, for the time budget. */
static int calibrate(op_fn op, op_fn settle, ctx *c, double target, long max_n, long *out_n, double *out_per_op) {
  long n = 1;
  for (;;) {
    double t, w0 = bench_now();
    if (time_ops(op, settle, c, n, &t)) return -1;
    double wall = bench_now() - w0;
    if (t >= target || n >= max_n) {
      *out_n = n;
      *out_per_op = wall / (double)n;
      return 0;
    }
    double want = t > 0 ? (double)n * target / t * 1.1 : (double)n * 16;
    long next = want > (double)n * 16 ? n * 16 : (long)want + 1;
    if (next <= n) next = n * 2;
    n = next < max_n ? next : max_n;
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

bench_stats bench_summarise(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  bench_stats s;
  double q[3] = {0.25, 0.5, 0.75};
  double out[3];
  for (int k = 0; k < 3; k++) {
    double pos = q[k] * (n - 1);
    int lo = (int)pos;
    int hi = lo + 1 < n ? lo + 1 : lo;
    out[k] = v[lo] + (v[hi] - v[lo]) * (pos - lo);
  }
  s.min = v[0];
  s.p25 = out[0];
  s.median = out[1];
  s.p75 = out[2];
  s.max = v[n - 1];
  return s;
}

static char *dup_text(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p) memcpy(p, s, n);
  return p;
}

static void say_failure(const ctx *c, const bench_row *row, const char *sentence) {
  char size[32];
  if (c->to)
    bench_note("%s %zu>%zu, %s: %s", bench_paths[row->path].label, c->d->info.index, c->to->info.index,
               bench_size_text(row->bytes, size), sentence);
  else
    bench_note("device %zu (%s), %s, %s: %s", c->d->info.index, c->d->info.backend, bench_paths[row->path].label,
               bench_size_text(row->bytes, size), sentence);
}

static void row_fail(bench_run *run, const ctx *c, bench_row *row, const char *sentence) {
  row->status = ROW_FAILED;
  row->settled = true;
  free(row->error);
  row->error = dup_text(sentence);
  run->failures++;
  say_failure(c, row, sentence);
}

static void row_raw_fail(bench_run *run, const ctx *c, bench_row *row, const char *sentence) {
  run->failures++;
  say_failure(c, row, sentence);
  if (row->raw_error) return; /* the first one is kept */
  row->raw_error = dup_text(sentence);
}

static void row_skip(bench_row *row, const char *why) {
  row->status = ROW_SKIPPED;
  row->settled = true;
  free(row->error);
  row->error = why ? dup_text(why) : NULL;
}

/* Calibrates, then samples ferry and the raw ways in turn. The bytes were checked before. */
static void measure(bench_run *run, ctx *c, bench_row *row, op_fn fop, op_fn fsettle, way *ways, int nways) {
  budget b = budget_for(&run->opt);
  long nf = 1, nr[2] = {1, 1}, most = max_ops(row);
  double tf = 0, tr[2] = {0, 0};
  if (calibrate(fop, fsettle, c, b.target_sample, most, &nf, &tf)) {
    row_fail(run, c, row, c->err);
    return;
  }
  for (int w = 0; w < nways; w++)
    if (ways[w].op && calibrate(ways[w].op, ways[w].settle, c, b.target_sample, most, &nr[w], &tr[w])) {
      row_raw_fail(run, c, row, c->err);
      ways[w].op = NULL;
    }
  if (fsettle) {
    /* A submission's cost depends on how much is queued ahead of it (a driver's
     * threads wake for the first, then run beside the later ones), so every side
     * queues the same number a sample: the most any side's calibration asked for. */
    long same = nf;
    for (int w = 0; w < nways; w++)
      if (ways[w].op && nr[w] > same) same = nr[w];
    for (int w = 0; w < nways; w++)
      nr[w] = same;
    nf = same;
  }
  int n = run->opt.repeat;
  if (n == 0) {
    double round = tf * (double)nf;
    for (int w = 0; w < nways; w++)
      if (ways[w].op) round += tr[w] * (double)nr[w];
    double fit = round > 0 ? b.per_figure / round : b.max_samples;
    int lo = row->bytes >= ((size_t)256 << 20) ? 3 : b.min_samples;
    n = fit < lo ? lo : fit > b.max_samples ? b.max_samples : (int)fit;
  }
  double *sf = malloc(sizeof(double) * (size_t)n * 3);
  if (!sf) {
    row_fail(run, c, row, "no host memory for the samples");
    return;
  }
  double *sr[2] = {sf + n, sf + 2 * n};
  for (int i = 0; i < n; i++) {
    double t;
    if (bench_interrupted()) { /* a figure of fewer samples than planned is not shown */
      row_skip(row, BENCH_INTERRUPTED);
      free(sf);
      return;
    }
    if (time_ops(fop, fsettle, c, nf, &t)) {
      row_fail(run, c, row, c->err);
      free(sf);
      return;
    }
    sf[i] = t / (double)nf;
    for (int w = 0; w < nways; w++) {
      if (!ways[w].op) continue;
      if (time_ops(ways[w].op, ways[w].settle, c, nr[w], &t)) {
        row_raw_fail(run, c, row, c->err);
        ways[w].op = NULL;
      } else {
        sr[w][i] = t / (double)nr[w];
      }
    }
  }
  row->status = ROW_OK;
  row->settled = true;
  row->samples = n;
  row->ferry_ops = nf;
  row->ferry = bench_summarise(sf, n);
  row->raw_count = 0;
  for (int w = 0; w < nways; w++)
    if (ways[w].op)
      row->raw[row->raw_count++] =
          (bench_raw_figure){.t = bench_summarise(sr[w], n), .ops = nr[w], .way = ways[w].index};
  if (row->raw_count == 2 && row->raw[1].t.median < row->raw[0].t.median) { /* the faster way is the baseline */
    bench_raw_figure first = row->raw[0];
    row->raw[0] = row->raw[1];
    row->raw[1] = first;
  }
  free(sf);
}

/* Checks the bytes of one ferry transfer and one transfer per raw way, then measures. */
static void run_path(bench_run *run, ctx *c, bench_row *row, op_fn fop, op_fn fsettle, op_fn verify, way *ways,
                     int nways) {
  if (bench_interrupted()) return; /* left unsettled: bench_row_interrupted marks it */
  if (verify && verify(c)) {
    row_fail(run, c, row, c->err);
    return;
  }
  for (int w = 0; w < nways; w++)
    if (ways[w].op && ways[w].verify && ways[w].verify(c)) {
      row_raw_fail(run, c, row, c->err);
      ways[w].op = NULL;
    }
  row->verified = verify != NULL;
  measure(run, c, row, fop, fsettle, ways, nways);
}

/* fsettle: NULL, or ferry's settle step (see the top of this file). */
static void run_device_path(bench_run *run, ctx *c, bench_row *row, op_fn fop, op_fn fsettle, op_fn verify) {
  way ways[2];
  int n = device_ways(c, row->path, ways);
  run_path(run, c, row, fop, fsettle, verify, ways, n);
}

/* ---- the paths that need memory of their own ----------------------------------- */

/* Allocates the pinned blocks (ferry's, and the driver's for the raw side where it has an allocator). */
static int pinned_open(ctx *c) {
  void *p = NULL;
  ferry_status st = ferry_host_alloc(c->d->dev, c->bytes, &p);
  if (st != FERRY_OK) return ferry_failed(c, st);
  c->pinned = p;
  memset(c->pinned, 0x11, c->bytes); /* page faults are not bandwidth */
  c->raw_pinned = c->pinned;
  c->raw_pinned_own = false;
  if (c->raw && c->raw->host_alloc) {
    void *q = c->raw->host_alloc(c->rb, c->bytes);
    if (q) {
      c->raw_pinned = q;
      c->raw_pinned_own = true;
      memset(c->raw_pinned, 0x22, c->bytes);
    } else {
      char size[32];
      bench_note("device %zu (%s): the raw baseline's pinned allocation of %s failed; its pinned figures use "
                 "ferry_host_alloc's block",
                 c->d->info.index, c->d->info.backend, bench_size_text(c->bytes, size));
    }
  }
  return 0;
}

static void pinned_close(ctx *c) {
  if (c->raw_pinned_own) c->raw->host_free(c->rb, c->raw_pinned);
  if (c->pinned) ferry_host_free(c->pinned);
  c->pinned = c->raw_pinned = NULL;
  c->raw_pinned_own = false;
}

static void run_sync(bench_run *run, ctx *c, bench_row *row, bool zero_copy) {
  const ferry_device_info *info = &c->d->info;
  size_t align = info->host_ptr_alignment > 64 ? info->host_ptr_alignment : 64;
  void *p = NULL;
  if (posix_memalign(&p, align, c->bytes) != 0) {
    char size[32], text[160];
    snprintf(text, sizeof text, "no host memory for the %s array of %s", zero_copy ? "zero-copy" : "host-ptr",
             bench_size_text(c->bytes, size));
    row_fail(run, c, row, text);
    return;
  }
  c->own = p;
  memset(c->own, 0x33, c->bytes);
  ferry_status st;
  ferry_refusal refusal = FERRY_REFUSAL_NONE;
  if (zero_copy)
    st = ferry_alloc_zero_copy(c->d->dev, arr(c, c->own), &c->hb);
  else
    st = ferry_alloc_host_ptr(c->d->dev, arr(c, c->own), &c->hb, &refusal);
  if (st != FERRY_OK) {
    char text[1200];
    if (st == FERRY_ERROR_REFUSED)
      snprintf(text, sizeof text, "%s (%s, %s)", ferry_last_error(), ferry_status_name(st),
               ferry_refusal_name(refusal));
    else
      snprintf(text, sizeof text, "%s (%s)", ferry_last_error(), ferry_status_name(st));
    row_fail(run, c, row, text);
  } else {
    run_device_path(run, c, row, f_sync, NULL, zero_copy ? vf_zero_copy : vf_host_ptr);
    st = ferry_free(c->hb);
    if (st != FERRY_OK) {
      char text[1200];
      snprintf(text, sizeof text, "freeing the buffer: %s (%s)", ferry_last_error(), ferry_status_name(st));
      row_fail(run, c, row, text);
    }
  }
  free(c->own);
  c->own = NULL;
}

/* d2d and both: a path on buffer a and a second buffer b of the device. */
static void run_with_second(bench_run *run, ctx *c, bench_row *row, op_fn fop, op_fn verify) {
  ferry_status st = ferry_alloc(c->d->dev, c->bytes, FERRY_UINT8, &c->b);
  if (st != FERRY_OK) {
    char text[1200];
    snprintf(text, sizeof text, "the second buffer: %s (%s)", ferry_last_error(), ferry_status_name(st));
    row_fail(run, c, row, text);
    return;
  }
  run_device_path(run, c, row, fop, NULL, verify);
  ferry_free(c->b);
  c->b = FERRY_NULL_BUFFER;
}

static void device_step(const bench_device *d, const char *what, size_t bytes);

/* The pinned queue rows' blocks: the first (their writes') as the pinned rows',
 * and, with `second`, another for their reads (ferry's, and the raw side's where
 * its driver allocates pinned memory; else it uses ferry's). */
static int queue_pinned_open(ctx *c, bool second) {
  if (pinned_open(c)) return -1;
  if (!second) return 0;
  void *p = NULL;
  ferry_status st = ferry_host_alloc(c->d->dev, c->bytes, &p);
  if (st != FERRY_OK) {
    int rc = ferry_failed(c, st);
    pinned_close(c);
    return rc;
  }
  c->pinned2 = p;
  memset(c->pinned2, 0x33, c->bytes);
  c->raw_pinned2 = c->pinned2;
  c->raw_pinned2_own = false;
  if (c->raw_pinned_own) {
    void *q = c->raw->host_alloc(c->rb, c->bytes);
    if (q) {
      c->raw_pinned2 = q;
      c->raw_pinned2_own = true;
      memset(c->raw_pinned2, 0x44, c->bytes);
    }
  }
  return 0;
}

static void queue_pinned_close(ctx *c) {
  if (c->raw_pinned2_own) c->raw->host_free(c->rb, c->raw_pinned2);
  if (c->pinned2) ferry_host_free(c->pinned2);
  c->pinned2 = c->raw_pinned2 = NULL;
  c->raw_pinned2_own = false;
  pinned_close(c);
}

/* The queue rows (write_async and both, from ordinary and from pinned memory, and
 * elapsed), on two queues of the device made for this size (the second only for
 * both) and destroyed after: a failure to make one, the pinned blocks or the
 * events, fails the rows that need it. */
static void run_queues(bench_run *run, ctx *c, bench_row *const *rows, const bool *go) {
  bench_device *d = c->d;
  ferry_queue q[2] = {FERRY_NULL_QUEUE, FERRY_NULL_QUEUE};
  int want = go[PATH_BOTH] || go[PATH_BOTH_PINNED] ? 2 : 1, made = 0;
  ferry_status st = FERRY_OK;
  while (made < want && (st = ferry_queue_create(d->dev, &q[made])) == FERRY_OK)
    made++;
  char text[1200] = "", pinned_text[1200] = "";
  if (st != FERRY_OK)
    snprintf(text, sizeof text, "creating %s queue of the device: %s (%s)", made ? "a second" : "a", ferry_last_error(),
             ferry_status_name(st));
  bool pinned_wanted = go[PATH_ASYNC_PINNED] || go[PATH_BOTH_PINNED] || go[PATH_ELAPSED], pinned_ok = false;
  if (pinned_wanted) {
    pinned_ok = queue_pinned_open(c, go[PATH_BOTH_PINNED]) == 0;
    if (!pinned_ok) snprintf(pinned_text, sizeof pinned_text, "the pinned blocks: %.1100s", c->err);
  }
  char events_text[1200] = "";
  ferry_status ev = FERRY_OK;
  if (go[PATH_ELAPSED] &&
      ((ev = ferry_event_create(&c->e1)) != FERRY_OK || (ev = ferry_event_create(&c->e2)) != FERRY_OK))
    snprintf(events_text, sizeof events_text, "creating the events: %s (%s)", ferry_last_error(),
             ferry_status_name(ev));
  c->q1 = q[0];
  c->q2 = q[1];
  bench_row *last = NULL;
  for (int p = PATH_ASYNC; p <= PATH_ELAPSED; p++) {
    if (!go[p]) continue;
    bool pinned = p == PATH_ASYNC_PINNED || p == PATH_BOTH_PINNED || p == PATH_ELAPSED,
         two = p == PATH_BOTH || p == PATH_BOTH_PINNED;
    device_step(d, bench_paths[p].label, c->bytes);
    if (made < (two ? 2 : 1)) {
      row_fail(run, c, rows[p], text);
    } else if (pinned && !pinned_ok) {
      row_fail(run, c, rows[p], pinned_text);
    } else if (p == PATH_ELAPSED && ev != FERRY_OK) {
      row_fail(run, c, rows[p], events_text);
    } else {
      c->qsrc = pinned ? c->pinned : c->src;
      c->qdst = pinned ? c->pinned2 : c->dst;
      c->raw_qsrc = pinned ? c->raw_pinned : c->src;
      c->raw_qdst = pinned ? c->raw_pinned2 : c->dst;
      c->self_timed = bench_paths[p].self_timed;
      if (p == PATH_ELAPSED)
        run_device_path(run, c, rows[p], f_elapsed, NULL, vf_elapsed);
      else if (!two)
        run_device_path(run, c, rows[p], f_async, fs_async, vf_async);
      else
        run_with_second(run, c, rows[p], f_both, vf_both);
      c->self_timed = false;
      last = rows[p];
    }
  }
  /* Each sample synchronised its queues: a failure here is one no row has reported. */
  for (int i = 0; i < made; i++) {
    st = ferry_queue_destroy(q[i]);
    if (st != FERRY_OK && last) {
      snprintf(text, sizeof text, "destroying a queue: %s (%s)", ferry_last_error(), ferry_status_name(st));
      row_fail(run, c, last, text);
    }
  }
  if (pinned_ok) queue_pinned_close(c);
  if (c->e1.id) ferry_event_destroy(c->e1);
  if (c->e2.id) ferry_event_destroy(c->e2);
  c->e1 = c->e2 = (ferry_event){0};
  c->q1 = c->q2 = FERRY_NULL_QUEUE;
  c->qsrc = c->qdst = c->raw_qsrc = c->raw_qdst = NULL;
}

/* ---- a device ---------------------------------------------------------------------- */

void bench_device_prepare(bench_device *d) {
  bench_device_cap(d);
  d->raw = raw_ops_for(d->info.backend);
  d->alt = false;
  if (!d->raw) {
    snprintf(d->raw_note, sizeof d->raw_note, "no raw baseline for the %s backend yet", d->info.backend);
    return;
  }
  char why[256] = "";
  raw_baseline *rb = d->raw->open(d->dev, why);
  if (!rb) {
    snprintf(d->raw_note, sizeof d->raw_note, "the raw baseline could not start: %s", why[0] ? why : "no reason given");
    bench_note("device %zu (%s): %s; ferry's figures are shown without it", d->info.index, d->info.backend,
               d->raw_note);
    d->raw = NULL;
    return;
  }
  d->alt = d->raw->alt_available && d->raw->h2d_alt && d->raw->d2h_alt && d->raw->alt_available(rb);
  d->raw->close(rb);
}

/* The device's raw baseline for a while of measuring; NULL where there is none. */
static raw_baseline *raw_open(bench_device *d) {
  if (!d->raw) return NULL;
  char why[256] = "";
  raw_baseline *rb = d->raw->open(d->dev, why);
  if (!rb) {
    snprintf(d->raw_note, sizeof d->raw_note, "the raw baseline could not start: %s", why[0] ? why : "no reason given");
    bench_note("device %zu (%s): %s; ferry's figures are shown without it", d->info.index, d->info.backend,
               d->raw_note);
    d->raw = NULL;
    d->alt = false;
  }
  return rb;
}

/* A few transfers before anything is timed: clocks up, caches and driver paths warm. */
static void warm_up(bench_run *run, bench_device *d, raw_baseline *rb) {
  size_t bytes = 64 << 10;
  if (bytes > d->size_cap) bytes = d->size_cap;
  if (bytes == 0) return;
  unsigned char *h = malloc(bytes);
  ferry_buffer buf;
  if (!h) return;
  memset(h, 1, bytes);
  if (ferry_alloc(d->dev, bytes, FERRY_UINT8, &buf) == FERRY_OK) {
    double until = bench_now() + budget_for(&run->opt).warmup;
    while (bench_now() < until) {
      if (ferry_host_to_device(ferry_array_of(h, bytes, FERRY_UINT8), buf) != FERRY_OK) break;
      if (ferry_device_to_host(buf, ferry_array_of(h, bytes, FERRY_UINT8)) != FERRY_OK) break;
      if (d->raw && (d->raw->h2d(rb, buf, h, bytes) || d->raw->d2h(rb, buf, h, bytes))) break;
    }
    ferry_free(buf);
  }
  free(h);
}

static void device_step(const bench_device *d, const char *what, size_t bytes) {
  char where[64];
  snprintf(where, sizeof where, "device %zu (%.16s)", d->info.index, d->info.backend);
  bench_progress_step(where, what, bytes);
}

static void run_size(bench_run *run, bench_device *d, raw_baseline *rb, size_t si) {
  size_t bytes = run->opt.sizes[si];
  const bool *want = run->opt.paths;
  ctx c;
  memset(&c, 0, sizeof c);
  c.d = d;
  c.raw = d->raw;
  c.rb = rb;
  c.bytes = bytes;
  bench_row *rows[PATH_DEVICE_COUNT];
  bool go[PATH_DEVICE_COUNT];
  for (int p = 0; p < PATH_DEVICE_COUNT; p++) {
    rows[p] = bench_device_row(run, d, (bench_path)p, si);
    char why[160];
    go[p] = want[p] && bench_path_applies(d, (bench_path)p, bytes, why, sizeof why);
    if (want[p] && !go[p]) row_skip(rows[p], why);
  }

  /* Ordinary host memory, touched, and the buffer every transfer uses. */
  bool transfers = false;
  for (int p = 0; p < PATH_ALLOC; p++)
    transfers = transfers || go[p];
  if (transfers) {
    void *s = NULL, *t = NULL;
    if (posix_memalign(&s, 4096, bytes) != 0) s = NULL;
    if (posix_memalign(&t, 4096, bytes) != 0) t = NULL;
    c.src = s;
    c.dst = t;
    char size[32], text[1200];
    bool ready = false;
    if (!c.src || !c.dst) {
      snprintf(text, sizeof text, "no host memory for two blocks of %s", bench_size_text(bytes, size));
    } else {
      memset(c.src, 0x44, bytes);
      memset(c.dst, 0x55, bytes);
      ferry_status st = ferry_alloc(d->dev, bytes, FERRY_UINT8, &c.a);
      if (st != FERRY_OK)
        snprintf(text, sizeof text, "%s (%s)", ferry_last_error(), ferry_status_name(st));
      else
        ready = true;
    }
    if (!ready) {
      for (int p = 0; p < PATH_ALLOC; p++)
        if (go[p]) {
          row_fail(run, &c, rows[p], text);
          device_step(d, bench_paths[p].label, bytes);
        }
    } else {
      static const struct { op_fn f, verify; } plain[] = {[PATH_H2D] = {f_h2d, vf_h2d}, [PATH_D2H] = {f_d2h, vf_d2h}};
      for (int p = PATH_H2D; p <= PATH_D2H; p++)
        if (go[p]) {
          device_step(d, bench_paths[p].label, bytes);
          run_device_path(run, &c, rows[p], plain[p].f, NULL, plain[p].verify);
        }
      if (go[PATH_H2D_PINNED] || go[PATH_D2H_PINNED]) {
        bool pinned = pinned_open(&c) == 0;
        if (go[PATH_H2D_PINNED]) {
          device_step(d, bench_paths[PATH_H2D_PINNED].label, bytes);
          if (pinned)
            run_device_path(run, &c, rows[PATH_H2D_PINNED], f_h2d_pinned, NULL, vf_h2d_pinned);
          else
            row_fail(run, &c, rows[PATH_H2D_PINNED], c.err);
        }
        if (go[PATH_D2H_PINNED]) {
          device_step(d, bench_paths[PATH_D2H_PINNED].label, bytes);
          if (pinned)
            run_device_path(run, &c, rows[PATH_D2H_PINNED], f_d2h_pinned, NULL, vf_d2h_pinned);
          else
            row_fail(run, &c, rows[PATH_D2H_PINNED], c.err);
        }
        pinned_close(&c);
      }
      if (go[PATH_HOST_PTR]) {
        device_step(d, bench_paths[PATH_HOST_PTR].label, bytes);
        run_sync(run, &c, rows[PATH_HOST_PTR], false);
      }
      if (go[PATH_ZERO_COPY]) {
        device_step(d, bench_paths[PATH_ZERO_COPY].label, bytes);
        run_sync(run, &c, rows[PATH_ZERO_COPY], true);
      }
      if (go[PATH_D2D]) {
        device_step(d, bench_paths[PATH_D2D].label, bytes);
        run_with_second(run, &c, rows[PATH_D2D], f_d2d, vf_d2d);
      }
      if (go[PATH_ASYNC] || go[PATH_ASYNC_PINNED] || go[PATH_BOTH] || go[PATH_BOTH_PINNED] || go[PATH_ELAPSED])
        run_queues(run, &c, rows, go);
      ferry_free(c.a);
    }
    free(c.src);
    free(c.dst);
    c.src = c.dst = NULL;
  }
  if (go[PATH_ALLOC]) {
    device_step(d, bench_paths[PATH_ALLOC].label, bytes);
    run_device_path(run, &c, rows[PATH_ALLOC], f_alloc, NULL, verify_alloc);
  }
}

void bench_row_interrupted(bench_row *row) {
  if (!row->settled) row_skip(row, BENCH_INTERRUPTED);
}

void bench_measure_device(bench_run *run, bench_device *d) {
  double t0 = bench_now();
  raw_baseline *rb = raw_open(d);
  warm_up(run, d, rb);
  for (size_t si = 0; si < run->opt.size_count && !bench_interrupted(); si++) {
    if (run->opt.sizes[si] > d->size_cap) {
      for (int p = 0; p < PATH_DEVICE_COUNT; p++)
        row_skip(bench_device_row(run, d, (bench_path)p, si), NULL);
      continue;
    }
    run_size(run, d, rb, si);
  }
  if (rb) d->raw->close(rb);
  bench_measure_limit(run, d);
  ferry_device_trim(d->dev);
  d->seconds = bench_now() - t0;
}

/* ---- a copy between two devices ---------------------------------------------------- */

/* The calls of a raw copy between devices, in words. */
static void cross_calls(const ctx *c, bool second, char *buf, size_t size) {
  const char *d2h = second && c->d->alt ? c->raw->d2h_alt_name : c->raw->d2h_name;
  const char *h2d = second && c->to->alt ? c->raw_to->h2d_alt_name : c->raw_to->h2d_name;
  if (c->to->info.zero_copy)
    snprintf(buf, size, "%.120s, straight into device %zu's memory", d2h, c->to->info.index);
  else if (c->d->info.zero_copy)
    snprintf(buf, size, "%.120s, straight from device %zu's memory", h2d, c->d->info.index);
  else
    snprintf(buf, size, "%.85s into host memory, then %.85s", d2h, h2d);
}

void bench_measure_pair(bench_run *run, bench_pair *p) {
  double t0 = bench_now();
  bench_device *from = &run->devices[p->from], *to = &run->devices[p->to];
  raw_baseline *rb_from = raw_open(from), *rb_to = raw_open(to);
  ctx c;
  memset(&c, 0, sizeof c);
  c.d = from;
  c.to = to;
  c.raw = from->raw;
  c.raw_to = to->raw;
  c.rb = rb_from;
  c.rb_to = rb_to;
  way ways[2];
  int nways = 0;
  if (p->path == PATH_PEER && rb_from && rb_to && c.raw->peer) {
    ways[nways++] = (way){r_peer, vr_peer, 0, NULL};
    snprintf(p->raw_call, sizeof p->raw_call, "%s", c.raw->peer_name ? c.raw->peer_name : "the driver's peer copy");
  } else if (p->path == PATH_CROSS && rb_from && rb_to) {
    ways[nways++] = (way){r_cross, vr_cross, 0, NULL};
    cross_calls(&c, false, p->raw_call, sizeof p->raw_call);
    /* A second way where a device whose call is made has one. */
    bool second = to->info.zero_copy ? from->alt : from->info.zero_copy ? to->alt : from->alt || to->alt;
    if (second) {
      ways[nways++] = (way){a_cross, va_cross, 1, NULL};
      p->has_alt = true;
      cross_calls(&c, true, p->raw_call_alt, sizeof p->raw_call_alt);
    }
  } else {
    snprintf(p->raw_note, sizeof p->raw_note, "%s", !rb_from ? from->raw_note : to->raw_note);
  }
  p->has_raw = nways > 0;
  char where[64];
  snprintf(where, sizeof where, "%s %zu>%zu", bench_paths[p->path].label, from->info.index, to->info.index);
  for (size_t si = 0; si < run->opt.size_count && !bench_interrupted(); si++) {
    bench_row *row = bench_pair_row(run, p, si);
    size_t bytes = run->opt.sizes[si];
    if (bytes > p->size_cap) {
      row_skip(row, NULL);
      continue;
    }
    bench_progress_step(where, bench_paths[p->path].label, bytes);
    c.bytes = bytes;
    char size[32], text[1200];
    void *s = NULL, *t = NULL, *h = NULL;
    if (posix_memalign(&s, 4096, bytes) != 0) s = NULL;
    if (posix_memalign(&t, 4096, bytes) != 0) t = NULL;
    bool staged = p->path == PATH_CROSS && nways > 0 && !from->info.zero_copy && !to->info.zero_copy;
    if (staged && posix_memalign(&h, 4096, bytes) != 0) h = NULL;
    c.src = s;
    c.dst = t;
    c.host = h;
    if (!s || !t || (staged && !h)) {
      snprintf(text, sizeof text, "no host memory for the blocks of %s", bench_size_text(bytes, size));
      row_fail(run, &c, row, text);
    } else {
      memset(c.src, 0x44, bytes);
      memset(c.dst, 0x55, bytes);
      if (c.host) memset(c.host, 0x66, bytes);
      ferry_status st = ferry_alloc(from->dev, bytes, FERRY_UINT8, &c.a);
      if (st == FERRY_OK) {
        st = ferry_alloc(to->dev, bytes, FERRY_UINT8, &c.b);
        if (st != FERRY_OK) ferry_free(c.a);
      }
      if (st != FERRY_OK) {
        snprintf(text, sizeof text, "%s (%s)", ferry_last_error(), ferry_status_name(st));
        row_fail(run, &c, row, text);
      } else {
        way use[2] = {ways[0], ways[1]}; /* run_path drops a way that fails; the next size tries it again */
        run_path(run, &c, row, f_d2d, NULL, vf_d2d, use, nways);
        ferry_free(c.a);
        ferry_free(c.b);
      }
    }
    free(s);
    free(t);
    free(h);
  }
  if (rb_from) from->raw->close(rb_from);
  if (rb_to) to->raw->close(rb_to);
  ferry_device_trim(from->dev);
  ferry_device_trim(to->dev);
  p->seconds = bench_now() - t0;
}
