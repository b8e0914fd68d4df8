/*
 * `ferry bench`: the measurements.
 *
 * For each device and size the host memory is allocated and touched, the device
 * buffers allocated, and then every path is, in turn: checked (the bytes of one
 * ferry transfer and of one raw transfer are compared with what was sent), warmed
 * up and calibrated (how many back-to-back calls make one sample of about
 * target_sample seconds, separately for ferry and raw), and sampled: ferry, raw,
 * ferry, raw ... so that drift hits both. Each figure is the median of its samples.
 */
#include "bench.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const bench_path_desc bench_paths[PATH_COUNT] = {
    [PATH_H2D] = {"h2d", "h2d", "ferry_host_to_device from ordinary (malloc'd) host memory", 1, false, false},
    [PATH_D2H] = {"d2h", "d2h", "ferry_device_to_host into ordinary host memory", 1, false, false},
    [PATH_H2D_PINNED] = {"h2d-pinned", "h2d pinned", "ferry_host_to_device from ferry_host_alloc (pinned) memory", 1,
                         false, false},
    [PATH_D2H_PINNED] = {"d2h-pinned", "d2h pinned", "ferry_device_to_host into ferry_host_alloc (pinned) memory", 1,
                         false, false},
    [PATH_HOST_PTR] = {"host-ptr", "host-ptr sync",
                       "ferry_alloc_host_ptr buffer: h2d + d2h on its own array (synchronisation only; GB/s counts "
                       "both ways) vs raw h2d + d2h of the same bytes on an ordinary buffer",
                       2, false, true},
    [PATH_ZERO_COPY] = {"zero-copy", "zero-copy sync",
                        "ferry_alloc_zero_copy buffer: h2d + d2h on its own array (synchronisation only; GB/s counts "
                        "both ways) vs raw h2d + d2h of the same bytes on an ordinary buffer",
                        2, false, true},
    [PATH_D2D] = {"d2d", "d2d", "ferry_device_to_device between two buffers of the device (bytes copied per second)", 1,
                  false, false},
    [PATH_ALLOC] = {"alloc", "alloc+free", "ferry_alloc + ferry_free of one buffer, in microseconds", 1, true, false},
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
  if (row->status != ROW_OK || !row->has_raw || row->ferry.median <= 0) return 0;
  return row->raw.median / row->ferry.median;
}

bench_row *bench_row_at(const bench_run *run, const bench_device *d, bench_path p, size_t size_index) {
  return &d->rows[(size_t)p * run->opt.size_count + size_index];
}

static const char *alloc_call_name(const char *backend) {
  if (strcmp(backend, "native") == 0 || strcmp(backend, "checked") == 0) return "posix_memalign+free";
  return "driver alloc+free";
}

const char *bench_raw_call(const bench_device *d, bench_path p, char *buf, size_t size) {
  const raw_ops *r = d->raw;
  if (!r) return "-";
  switch (p) {
  case PATH_H2D: snprintf(buf, size, "%s", r->h2d_name); break;
  case PATH_D2H: snprintf(buf, size, "%s", r->d2h_name); break;
  case PATH_H2D_PINNED:
    snprintf(buf, size, "%s (%s)", r->h2d_name, r->host_alloc ? "driver's pinned memory" : "same block");
    break;
  case PATH_D2H_PINNED:
    snprintf(buf, size, "%s (%s)", r->d2h_name, r->host_alloc ? "driver's pinned memory" : "same block");
    break;
  case PATH_HOST_PTR:
  case PATH_ZERO_COPY: snprintf(buf, size, "%s + %s", r->h2d_name, r->d2h_name); break;
  case PATH_D2D: snprintf(buf, size, "%s", r->d2d_name); break;
  case PATH_ALLOC:
    if (!r->alloc_free) return "-";
    snprintf(buf, size, "%s", alloc_call_name(d->info.backend));
    break;
  default: return "-";
  }
  return buf;
}

/* ---- one (device, size): the memory every path works on ------------------- */

typedef struct ctx {
  bench_device *d;
  const raw_ops *raw;
  raw_baseline *rb;
  size_t bytes;
  unsigned char *src, *dst;  /* ordinary host memory, touched */
  ferry_buffer a, b;         /* device buffers: a for every transfer, b the d2d destination */
  unsigned char *pinned;     /* ferry_host_alloc */
  unsigned char *raw_pinned; /* raw->host_alloc, or the same block as pinned */
  bool raw_pinned_own;       /* raw_pinned came from raw->host_alloc */
  unsigned char *own;        /* the host-ptr / zero-copy buffer's array */
  ferry_buffer hb;           /* that buffer */
  char err[1200];            /* the sentence of the last failure */
} ctx;

typedef int (*op_fn)(ctx *c);

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
static int f_alloc(ctx *c) {
  ferry_buffer x;
  ferry_status st = ferry_alloc(c->d->dev, c->bytes, FERRY_UINT8, &x);
  if (st == FERRY_OK) st = ferry_free(x);
  return st == FERRY_OK ? 0 : ferry_failed(c, st);
}

static int raw_failed(ctx *c, const char *call, int code) {
  return ctx_fail(c, "the raw baseline %s of %zu bytes failed (it returned %d)", call, c->bytes, code);
}
static int r_h2d(ctx *c) {
  int rc = c->raw->h2d(c->rb, c->a, c->src, c->bytes);
  return rc ? raw_failed(c, c->raw->h2d_name, rc) : 0;
}
static int r_d2h(ctx *c) {
  int rc = c->raw->d2h(c->rb, c->a, c->dst, c->bytes);
  return rc ? raw_failed(c, c->raw->d2h_name, rc) : 0;
}
static int r_h2d_pinned(ctx *c) {
  int rc = c->raw->h2d(c->rb, c->a, c->raw_pinned, c->bytes);
  return rc ? raw_failed(c, c->raw->h2d_name, rc) : 0;
}
static int r_d2h_pinned(ctx *c) {
  int rc = c->raw->d2h(c->rb, c->a, c->raw_pinned, c->bytes);
  return rc ? raw_failed(c, c->raw->d2h_name, rc) : 0;
}
static int r_roundtrip(ctx *c) { return r_h2d(c) ? -1 : r_d2h(c); }
static int r_d2d(ctx *c) {
  int rc = c->raw->d2d(c->rb, c->a, c->b, c->bytes);
  return rc ? raw_failed(c, c->raw->d2d_name, rc) : 0;
}
static int r_alloc(ctx *c) {
  int rc = c->raw->alloc_free(c->rb, c->bytes);
  return rc ? raw_failed(c, alloc_call_name(c->d->info.backend), rc) : 0;
}

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

/* The raw round trip: src -> a -> dst. */
static int verify_roundtrip(ctx *c) {
  fill(c->src, c->bytes);
  memset(c->dst, 0xA5, c->bytes);
  if (r_roundtrip(c)) return -1;
  return check_bytes(c, "the raw h2d + d2h", c->src, c->dst);
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

static int verify_d2d(ctx *c, op_fn op, const char *what) {
  memset(c->dst, 0x3C, c->bytes);
  if (write_through(c, c->b, c->dst)) return -1;
  fill(c->src, c->bytes);
  if (write_through(c, c->a, c->src)) return -1;
  if (op(c) || read_back(c, c->b, c->dst)) return -1;
  return check_bytes(c, what, c->src, c->dst);
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

/* ---- timing ------------------------------------------------------------------- */

static int time_ops(op_fn op, ctx *c, long n, double *out) {
  double t0 = bench_now();
  for (long i = 0; i < n; i++)
    if (op(c)) return -1;
  *out = bench_now() - t0;
  return 0;
}

/* How many back-to-back calls last about `target` seconds; also warms the path up. */
static int calibrate(op_fn op, ctx *c, double target, long *out_n, double *out_per_op) {
  long n = 1;
  for (;;) {
    double t;
    if (time_ops(op, c, n, &t)) return -1;
    if (t >= target || n >= MAX_INNER) {
      *out_n = n;
      *out_per_op = t / (double)n;
      return 0;
    }
    double want = t > 0 ? (double)n * target / t * 1.1 : (double)n * 16;
    long next = want > (double)n * 16 ? n * 16 : (long)want + 1;
    if (next <= n) next = n * 2;
    n = next < MAX_INNER ? next : MAX_INNER;
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Quartiles with linear interpolation between the sorted samples. */
static bench_stats summarise(double *v, int n) {
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

static void row_fail(bench_run *run, const bench_device *d, bench_row *row, const char *sentence) {
  char size[32];
  row->status = ROW_FAILED;
  free(row->error);
  row->error = dup_text(sentence);
  run->failures++;
  bench_note("device %zu (%s), %s, %s: %s", d->info.index, d->info.backend, bench_paths[row->path].label,
             bench_size_text(row->bytes, size), sentence);
}

static void row_raw_fail(bench_run *run, const bench_device *d, bench_row *row, const char *sentence) {
  char size[32];
  row->has_raw = false;
  free(row->raw_error);
  row->raw_error = dup_text(sentence);
  run->failures++;
  bench_note("device %zu (%s), %s, %s: %s", d->info.index, d->info.backend, bench_paths[row->path].label,
             bench_size_text(row->bytes, size), sentence);
}

static void row_skip(bench_row *row, const char *why) {
  row->status = ROW_SKIPPED;
  free(row->error);
  row->error = why ? dup_text(why) : NULL;
}

/* Calibrates, then samples ferry and raw in turn. The bytes were checked before. */
static void measure(bench_run *run, ctx *c, bench_row *row, op_fn fop, op_fn rop) {
  budget b = budget_for(&run->opt);
  long nf = 1, nr = 1;
  double tf = 0, tr = 0;
  if (calibrate(fop, c, b.target_sample, &nf, &tf)) {
    row_fail(run, c->d, row, c->err);
    return;
  }
  if (rop && calibrate(rop, c, b.target_sample, &nr, &tr)) {
    row_raw_fail(run, c->d, row, c->err);
    rop = NULL;
  }
  int n = run->opt.repeat;
  if (n == 0) {
    double pair = tf * (double)nf + (rop ? tr * (double)nr : 0);
    double fit = pair > 0 ? b.per_figure / pair : b.max_samples;
    int lo = row->bytes >= ((size_t)256 << 20) ? 3 : b.min_samples;
    n = fit < lo ? lo : fit > b.max_samples ? b.max_samples : (int)fit;
  }
  double *sf = malloc(sizeof(double) * (size_t)n), *sr = malloc(sizeof(double) * (size_t)n);
  if (!sf || !sr) {
    free(sf);
    free(sr);
    row_fail(run, c->d, row, "no host memory for the samples");
    return;
  }
  for (int i = 0; i < n; i++) {
    double t;
    if (time_ops(fop, c, nf, &t)) {
      row_fail(run, c->d, row, c->err);
      free(sf);
      free(sr);
      return;
    }
    sf[i] = t / (double)nf;
    if (rop) {
      if (time_ops(rop, c, nr, &t)) {
        row_raw_fail(run, c->d, row, c->err);
        rop = NULL;
      } else {
        sr[i] = t / (double)nr;
      }
    }
  }
  row->status = ROW_OK;
  row->samples = n;
  row->ferry_ops = nf;
  row->ferry = summarise(sf, n);
  if (rop) {
    row->has_raw = true;
    row->raw_ops = nr;
    row->raw = summarise(sr, n);
  }
  free(sf);
  free(sr);
}

/* Checks the bytes of one ferry and one raw transfer, then measures. */
static void run_path(bench_run *run, ctx *c, bench_row *row, op_fn fop, op_fn rop, int (*verify_f)(ctx *),
                     int (*verify_r)(ctx *)) {
  if (verify_f && verify_f(c)) {
    row_fail(run, c->d, row, c->err);
    return;
  }
  if (rop && verify_r && verify_r(c)) {
    row_raw_fail(run, c->d, row, c->err);
    rop = NULL;
  }
  row->verified = verify_f != NULL;
  measure(run, c, row, fop, rop);
}

/* The checks, one per path, as int (*)(ctx *). */
static int vf_h2d(ctx *c) { return verify_to_device(c, f_h2d, c->src, "ferry_host_to_device"); }
static int vr_h2d(ctx *c) { return verify_to_device(c, r_h2d, c->src, c->raw->h2d_name); }
static int vf_d2h(ctx *c) { return verify_to_host(c, f_d2h, c->dst, "ferry_device_to_host"); }
static int vr_d2h(ctx *c) { return verify_to_host(c, r_d2h, c->dst, c->raw->d2h_name); }
static int vf_h2d_pinned(ctx *c) {
  return verify_to_device(c, f_h2d_pinned, c->pinned, "ferry_host_to_device from pinned memory");
}
static int vr_h2d_pinned(ctx *c) { return verify_to_device(c, r_h2d_pinned, c->raw_pinned, c->raw->h2d_name); }
static int vf_d2h_pinned(ctx *c) {
  return verify_to_host(c, f_d2h_pinned, c->pinned, "ferry_device_to_host into pinned memory");
}
static int vr_d2h_pinned(ctx *c) { return verify_to_host(c, r_d2h_pinned, c->raw_pinned, c->raw->d2h_name); }
static int vf_host_ptr(ctx *c) { return verify_sync(c, "the host-ptr buffer's synchronisation"); }
static int vf_zero_copy(ctx *c) { return verify_sync(c, "the zero-copy buffer's synchronisation"); }
static int vf_d2d(ctx *c) { return verify_d2d(c, f_d2d, "ferry_device_to_device"); }
static int vr_d2d(ctx *c) { return verify_d2d(c, r_d2d, c->raw->d2d_name); }

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
    row_fail(run, c->d, row, text);
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
    row_fail(run, c->d, row, text);
  } else {
    run_path(run, c, row, f_sync, c->raw ? r_roundtrip : NULL, zero_copy ? vf_zero_copy : vf_host_ptr,
             verify_roundtrip);
    st = ferry_free(c->hb);
    if (st != FERRY_OK) {
      char text[1200];
      snprintf(text, sizeof text, "freeing the buffer: %s (%s)", ferry_last_error(), ferry_status_name(st));
      row_fail(run, c->d, row, text);
    }
  }
  free(c->own);
  c->own = NULL;
}

static void run_d2d(bench_run *run, ctx *c, bench_row *row) {
  ferry_status st = ferry_alloc(c->d->dev, c->bytes, FERRY_UINT8, &c->b);
  if (st != FERRY_OK) {
    char text[1200];
    snprintf(text, sizeof text, "the second buffer: %s (%s)", ferry_last_error(), ferry_status_name(st));
    row_fail(run, c->d, row, text);
    return;
  }
  run_path(run, c, row, f_d2d, c->raw ? r_d2d : NULL, vf_d2d, vr_d2d);
  ferry_free(c->b);
  c->b = FERRY_NULL_BUFFER;
}

/* ---- a device ---------------------------------------------------------------------- */

/* Bytes of host memory the system can still give (MemAvailable), or 0 when unknown. */
static uint64_t host_available(void) {
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
 * (two buffers for d2d) and a sixth of the host memory available (ordinary,
 * pinned and host-ptr blocks live at once, and host devices' buffers too). */
static void size_cap(bench_device *d) {
  char a[32], b[32];
  uint64_t cap = d->info.max_allocation;
  snprintf(d->cap_reason, sizeof d->cap_reason, "the device's max_allocation is %s",
           bench_size_approx(d->info.max_allocation, a));
  if (d->info.total_memory / 2 < cap) {
    cap = d->info.total_memory / 2;
    snprintf(d->cap_reason, sizeof d->cap_reason, "two buffers of that size exceed the device's %s of memory",
             bench_size_approx(d->info.total_memory, a));
  }
  uint64_t avail = host_available();
  if (avail && avail / 6 < cap) {
    cap = avail / 6;
    snprintf(d->cap_reason, sizeof d->cap_reason,
             "the host has %s available and the benchmark keeps up to six blocks of the size at once",
             bench_size_approx(avail, b));
  }
  d->size_cap = cap > SIZE_MAX ? SIZE_MAX : (size_t)cap;
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

static void skip_size(bench_run *run, bench_device *d, size_t si) {
  for (int p = 0; p < PATH_COUNT; p++) {
    row_skip(bench_row_at(run, d, (bench_path)p, si), NULL);
    bench_progress_step(d, "skipped", run->opt.sizes[si]);
  }
}

static void run_size(bench_run *run, bench_device *d, raw_baseline *rb, size_t si) {
  size_t bytes = run->opt.sizes[si];
  ctx c;
  memset(&c, 0, sizeof c);
  c.d = d;
  c.raw = d->raw;
  c.rb = rb;
  c.bytes = bytes;
  bench_row *rows[PATH_COUNT];
  for (int p = 0; p < PATH_COUNT; p++)
    rows[p] = bench_row_at(run, d, (bench_path)p, si);

  /* Paths the device does not have. */
  if (!d->info.zero_copy) row_skip(rows[PATH_ZERO_COPY], "the device's memory is not host memory");
  if (!d->info.host_ptr) row_skip(rows[PATH_HOST_PTR], "the device has no host-pointer buffers");
  if (d->info.host_ptr && d->info.host_ptr_alignment > 1 && bytes % d->info.host_ptr_alignment != 0) {
    char text[128];
    snprintf(text, sizeof text, "%zu bytes is not a multiple of the device's host_ptr_alignment (%zu)", bytes,
             d->info.host_ptr_alignment);
    row_skip(rows[PATH_HOST_PTR], text);
  }
  bool want[PATH_COUNT];
  for (int p = 0; p < PATH_COUNT; p++)
    want[p] = !(p == PATH_ZERO_COPY && !d->info.zero_copy) && !(p == PATH_HOST_PTR && rows[p]->error);

  /* Ordinary host memory, touched, and the buffer every transfer uses. */
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
    for (int p = 0; p < PATH_ALLOC; p++) {
      if (want[p]) row_fail(run, d, rows[p], text);
      bench_progress_step(d, bench_paths[p].label, bytes);
    }
  } else {
    const raw_ops *raw = d->raw;
    bench_progress_step(d, "h2d", bytes);
    run_path(run, &c, rows[PATH_H2D], f_h2d, raw ? r_h2d : NULL, vf_h2d, vr_h2d);
    bench_progress_step(d, "d2h", bytes);
    run_path(run, &c, rows[PATH_D2H], f_d2h, raw ? r_d2h : NULL, vf_d2h, vr_d2h);
    bool pinned = pinned_open(&c) == 0;
    if (!pinned) {
      row_fail(run, d, rows[PATH_H2D_PINNED], c.err);
      row_fail(run, d, rows[PATH_D2H_PINNED], c.err);
    }
    bench_progress_step(d, "h2d pinned", bytes);
    if (pinned)
      run_path(run, &c, rows[PATH_H2D_PINNED], f_h2d_pinned, raw ? r_h2d_pinned : NULL, vf_h2d_pinned, vr_h2d_pinned);
    bench_progress_step(d, "d2h pinned", bytes);
    if (pinned)
      run_path(run, &c, rows[PATH_D2H_PINNED], f_d2h_pinned, raw ? r_d2h_pinned : NULL, vf_d2h_pinned, vr_d2h_pinned);
    pinned_close(&c);
    bench_progress_step(d, "host-ptr", bytes);
    if (want[PATH_HOST_PTR]) run_sync(run, &c, rows[PATH_HOST_PTR], false);
    bench_progress_step(d, "zero-copy", bytes);
    if (want[PATH_ZERO_COPY]) run_sync(run, &c, rows[PATH_ZERO_COPY], true);
    bench_progress_step(d, "d2d", bytes);
    run_d2d(run, &c, rows[PATH_D2D]);
    ferry_free(c.a);
  }
  free(c.src);
  free(c.dst);
  c.src = c.dst = NULL;
  bench_progress_step(d, "alloc+free", bytes);
  run_path(run, &c, rows[PATH_ALLOC], f_alloc, d->raw && d->raw->alloc_free ? r_alloc : NULL, verify_alloc, NULL);
}

void bench_measure_device(bench_run *run, bench_device *d) {
  double t0 = bench_now();
  size_cap(d);
  raw_baseline *rb = NULL;
  d->raw = raw_ops_for(d->info.backend);
  if (!d->raw) {
    snprintf(d->raw_note, sizeof d->raw_note, "no raw baseline for the %s backend yet", d->info.backend);
  } else {
    char why[256] = "";
    rb = d->raw->open(d->dev, why);
    if (!rb) {
      snprintf(d->raw_note, sizeof d->raw_note, "the raw baseline could not start: %s",
               why[0] ? why : "no reason given");
      bench_note("device %zu (%s): %s; ferry's figures are shown without it", d->info.index, d->info.backend,
                 d->raw_note);
      d->raw = NULL;
    }
  }
  warm_up(run, d, rb);
  for (size_t si = 0; si < run->opt.size_count; si++) {
    if (run->opt.sizes[si] > d->size_cap)
      skip_size(run, d, si);
    else
      run_size(run, d, rb, si);
  }
  if (rb) d->raw->close(rb);
  ferry_device_trim(d->dev);
  d->seconds = bench_now() - t0;
}
