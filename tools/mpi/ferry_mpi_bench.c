/*
 * ferry-mpi-bench: libferry_mpi against MPI itself, in the OSU micro-benchmarks'
 * terms (osu_latency, osu_bw, osu_bibw, osu_allreduce: their message sizes,
 * window, iterations and warm-up), under mpirun with two or more ranks.
 *
 * Every row is measured twice in the same run, alternately, several times: with
 * ferry buffers on one device kind (the same device index on every rank) through
 * libferry_mpi, and with MPI's own calls on malloc'd host buffers; the table shows
 * the medians and their ratio. docs/MPI.md explains the output, docs/JSON.md the
 * JSON.
 */
#include "ferry_mpi.h"

#include "../../src/core/companion.h" /* which path a buffer takes, as libferry_mpi sees it */

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum test { LATENCY, BW, BIBW, ALLREDUCE, TEST_COUNT } test;
static const char *const test_name[TEST_COUNT] = {"latency", "bw", "bibw", "allreduce"};

typedef struct options {
  bool run[TEST_COUNT];
  size_t min, max; /* message sizes, bytes (powers of two between) */
  int iters, skip; /* for messages up to LARGE */
  int iters_large, skip_large;
  int window;  /* bw, bibw */
  int reps;    /* measurements of each row, each side; the median is shown */
  long device; /* -1: every device */
  const char *json, *plot;
} options;

#define LARGE ((size_t)8192) /* OSU's LARGE_MESSAGE_SIZE */

static int me, nranks;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Rank 0 says it, everyone stops. */
static void die(const char *fmt, ...) {
  if (me == 0) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ferry-mpi-bench: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
  }
  MPI_Finalize();
  exit(2);
}

static void check(ferry_status st, const char *what) {
  if (st == FERRY_OK) return;
  fprintf(stderr, "ferry-mpi-bench: rank %d: %s: %s: %s\n", me, what, ferry_status_name(st), ferry_last_error());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/* ---- the two sides of each measurement -------------------------------------------------- */

/* One side's buffers: ferry buffers (dev non-NULL) or malloc'd memory. */
typedef struct side {
  ferry_device *dev;
  ferry_buffer fs, fr; /* send and receive buffers, ferry */
  char *hs, *hr;       /* the same, malloc'd */
  ferry_mpi_request *freq;
  MPI_Request *mreq;
} side;

static void side_send(side *s, size_t n, int to, int tag) {
  if (s->dev)
    check(ferry_mpi_send(s->fs, 0, n, to, tag, MPI_COMM_WORLD), "ferry_mpi_send");
  else
    MPI_Send(s->hs, (int)n, MPI_BYTE, to, tag, MPI_COMM_WORLD);
}

static void side_recv(side *s, size_t n, int from, int tag) {
  if (s->dev)
    check(ferry_mpi_recv(s->fr, 0, n, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "ferry_mpi_recv");
  else
    MPI_Recv(s->hr, (int)n, MPI_BYTE, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

static void side_isend(side *s, int k, size_t n, int to, int tag) {
  if (s->dev)
    check(ferry_mpi_isend(s->fs, 0, n, to, tag, MPI_COMM_WORLD, &s->freq[k]), "ferry_mpi_isend");
  else
    MPI_Isend(s->hs, (int)n, MPI_BYTE, to, tag, MPI_COMM_WORLD, &s->mreq[k]);
}

static void side_irecv(side *s, int k, size_t n, int from, int tag) {
  if (s->dev)
    check(ferry_mpi_irecv(s->fr, 0, n, from, tag, MPI_COMM_WORLD, &s->freq[k]), "ferry_mpi_irecv");
  else
    MPI_Irecv(s->hr, (int)n, MPI_BYTE, from, tag, MPI_COMM_WORLD, &s->mreq[k]);
}

static void side_waitall(side *s, int first, int count) {
  for (int k = first; k < first + count; k++)
    if (s->dev) check(ferry_mpi_wait(s->freq[k], MPI_STATUS_IGNORE), "ferry_mpi_wait");
  if (!s->dev) MPI_Waitall(count, s->mreq + first, MPI_STATUSES_IGNORE);
}

static void side_allreduce(side *s, size_t n) {
  if (s->dev)
    check(ferry_mpi_allreduce(s->fs, s->fr, MPI_SUM, MPI_COMM_WORLD), "ferry_mpi_allreduce");
  else
    MPI_Allreduce(s->hs, s->hr, (int)(n / sizeof(float)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  (void)n;
}

/* One measurement of test t at n bytes on side s: microseconds (latency,
 * allreduce) or MB/s (bw, bibw), as rank 0 sees it, given to every rank. */
static double measure(const options *o, test t, side *s, size_t n) {
  int iters = n > LARGE ? o->iters_large : o->iters, skip = n > LARGE ? o->skip_large : o->skip;
  int w = o->window;
  double t0 = 0, value = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < iters + skip; i++) {
    if (i == skip) {
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = now();
    }
    switch (t) {
    case LATENCY: /* ranks 0 and 1 ping-pong; the others wait */
      if (me == 0) {
        side_send(s, n, 1, 1);
        side_recv(s, n, 1, 1);
      } else if (me == 1) {
        side_recv(s, n, 0, 1);
        side_send(s, n, 0, 1);
      }
      break;
    case BW: /* rank 0 sends a window, rank 1 receives it and answers with 4 bytes */
      if (me == 0) {
        for (int k = 0; k < w; k++)
          side_isend(s, k, n, 1, 100);
        side_waitall(s, 0, w);
        char ack[4];
        MPI_Recv(ack, 4, MPI_BYTE, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (me == 1) {
        for (int k = 0; k < w; k++)
          side_irecv(s, k, n, 0, 100);
        side_waitall(s, 0, w);
        char ack[4] = {0};
        MPI_Send(ack, 4, MPI_BYTE, 0, 101, MPI_COMM_WORLD);
      }
      break;
    case BIBW: /* both send a window to each other */
      if (me < 2) {
        int peer = 1 - me;
        for (int k = 0; k < w; k++)
          side_irecv(s, k, n, peer, 102);
        for (int k = 0; k < w; k++)
          side_isend(s, w + k, n, peer, 102);
        side_waitall(s, 0, 2 * w);
        char ack[4] = {0};
        MPI_Sendrecv(ack, 4, MPI_BYTE, peer, 103, ack, 4, MPI_BYTE, peer, 103, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
      break;
    case ALLREDUCE: side_allreduce(s, n); break;
    case TEST_COUNT: break;
    }
  }
  double dt = now() - t0;
  switch (t) {
  case LATENCY: value = dt * 1e6 / (2.0 * iters); break;
  case BW: value = (double)n * w * iters / dt / 1e6; break;
  case BIBW: value = 2.0 * (double)n * w * iters / dt / 1e6; break;
  case ALLREDUCE: value = dt * 1e6 / iters; break;
  case TEST_COUNT: break;
  }
  MPI_Bcast(&value, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return value;
}

/* ---- rows ----------------------------------------------------------------------------------- */

typedef struct row {
  test t;
  long device; /* -1: none (the MPI baseline alone) */
  char backend[16], name[160], path[64];
  size_t size;
  double ferry, mpi;
  int window, iters, skip;
} row;

static row *rows;
static size_t row_count, row_cap;

static void add_row(const row *r) {
  if (row_count == row_cap) {
    row_cap = row_cap ? row_cap * 2 : 64;
    rows = realloc(rows, row_cap * sizeof *rows);
    if (!rows) MPI_Abort(MPI_COMM_WORLD, 1);
  }
  rows[row_count++] = *r;
}

static const char *unit_of(test t) { return t == BW || t == BIBW ? "MB/s" : "us"; }

static void size_text(size_t n, char *out, size_t len) {
  if (n >= ((size_t)1 << 20) && n % ((size_t)1 << 20) == 0)
    snprintf(out, len, "%zu MiB", n >> 20);
  else if (n >= 1024 && n % 1024 == 0)
    snprintf(out, len, "%zu KiB", n >> 10);
  else
    snprintf(out, len, "%zu B", n);
}

/* Runs test t on device d (every rank the same index) for every size. */
static void run_device(const options *o, test t, size_t d) {
  ferry_device *dev = NULL;
  ferry_device_info info;
  check(ferry_device_get(d, &dev), "ferry_device_get");
  check(ferry_device_info_get(dev, &info), "ferry_device_info_get");
  /* As OSU's: bandwidth from 1 byte, allreduce from one float. */
  size_t least = t == ALLREDUCE ? sizeof(float) : t == BW || t == BIBW ? 1 : 0;
  size_t first = o->min < least ? least : o->min;
  int w = t == BW || t == BIBW ? o->window : 1;
  int nreq = 2 * w;
  side f = {.dev = dev}, m = {0};
  f.freq = calloc((size_t)nreq, sizeof *f.freq);
  m.mreq = calloc((size_t)nreq, sizeof *m.mreq);
  m.hs = malloc(o->max ? o->max : 1);
  m.hr = malloc(o->max ? o->max : 1);
  if (!f.freq || !m.mreq || !m.hs || !m.hr) die("no host memory for %zu bytes", o->max);
  memset(m.hs, 1, o->max);
  memset(m.hr, 0, o->max);
  ferry_kind kind = t == ALLREDUCE ? FERRY_FLOAT32 : FERRY_UINT8;
  size_t esize = t == ALLREDUCE ? sizeof(float) : 1;
  if (me == 0) {
    printf("\n# %s, %d ranks: ferry on device %zu (%s: %s) on every rank, beside MPI on malloc'd memory\n",
           test_name[t], nranks, d, info.backend, info.name);
    printf("%-10s %14s %14s %8s\n", "size", t == BW || t == BIBW ? "ferry MB/s" : "ferry us",
           t == BW || t == BIBW ? "MPI MB/s" : "MPI us", "ratio");
  }
  for (size_t n = first; n <= o->max; n = n ? n * 2 : 1) {
    if (t == ALLREDUCE && n % sizeof(float)) continue;
    /* Whole buffers for allreduce (its length is the message); else room for the largest. */
    size_t len = t == ALLREDUCE ? n / esize : o->max;
    check(ferry_alloc(dev, len ? len : 1, kind, &f.fs), "ferry_alloc");
    check(ferry_alloc(dev, len ? len : 1, kind, &f.fr), "ferry_alloc");
    double *fv = malloc((size_t)o->reps * sizeof *fv), *mv = malloc((size_t)o->reps * sizeof *mv);
    if (!fv || !mv) die("no host memory");
    for (int r = 0; r < o->reps; r++) {
      mv[r] = measure(o, t, &m, n);
      fv[r] = measure(o, t, &f, n);
    }
    row rw = {.t = t,
              .device = (long)d,
              .size = n,
              .window = w,
              .iters = n > LARGE ? o->iters_large : o->iters,
              .skip = n > LARGE ? o->skip_large : o->skip};
    snprintf(rw.backend, sizeof rw.backend, "%s", info.backend);
    snprintf(rw.name, sizeof rw.name, "%s", info.name);
    /* As libferry_mpi chooses: a message in pieces (above 32 KiB) of a buffer the
     * CPU cannot address is mapped where the device can (PoCL). */
    ferry_companion_hold h;
    check(ferry__companion_hold(f.fs, "ferry-mpi-bench", &h), "ferry__companion_hold");
    void *mapped = NULL;
    if (!h.host && n > ((size_t)32 << 10) &&
        ferry__companion_map(&h, "ferry-mpi-bench", 0, n, false, &mapped) == FERRY_OK)
      check(ferry__companion_unmap(&h, "ferry-mpi-bench", mapped), "ferry__companion_unmap");
    snprintf(rw.path, sizeof rw.path, "%s",
             h.host   ? "its memory, to MPI"
             : mapped ? "mapped, to MPI"
                      : "through host memory");
    ferry__companion_release(&h);
    rw.ferry = median(fv, o->reps);
    rw.mpi = median(mv, o->reps);
    add_row(&rw);
    if (me == 0) {
      char sz[32];
      size_text(n, sz, sizeof sz);
      double ratio = rw.mpi > 0 ? rw.ferry / rw.mpi : 0;
      printf("%-10s %14.2f %14.2f %7.2fx\n", sz, rw.ferry, rw.mpi, ratio);
      fflush(stdout);
    }
    free(fv);
    free(mv);
    check(ferry_free(f.fs), "ferry_free");
    check(ferry_free(f.fr), "ferry_free");
  }
  free(f.freq);
  free(m.mreq);
  free(m.hs);
  free(m.hr);
}

/* ---- output --------------------------------------------------------------------------------- */

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(f, "\\u%04x", *s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

static void write_json(const options *o) {
  FILE *f = strcmp(o->json, "-") == 0 ? stdout : fopen(o->json, "w");
  if (!f) {
    fprintf(stderr, "ferry-mpi-bench: --json %s: %s\n", o->json, strerror(errno));
    return;
  }
  char host[MPI_MAX_PROCESSOR_NAME] = "";
  int hlen = 0;
  MPI_Get_processor_name(host, &hlen);
  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int llen = 0;
  MPI_Get_library_version(lib, &llen);
  char *nl = strchr(lib, '\n');
  if (nl) *nl = '\0';
  fprintf(f, "{\n  \"schema_version\": 1,\n  \"tool\": \"ferry-mpi-bench\",\n  \"ranks\": %d,\n  \"host\": ", nranks);
  json_string(f, host);
  fprintf(f, ",\n  \"mpi\": ");
  json_string(f, lib);
  fprintf(f, ",\n  \"repetitions\": %d,\n  \"rows\": [", o->reps);
  for (size_t i = 0; i < row_count; i++) {
    const row *r = &rows[i];
    fprintf(f, "%s\n    {\"test\": \"%s\", \"device\": %ld, \"backend\": ", i ? "," : "", test_name[r->t], r->device);
    json_string(f, r->backend);
    fprintf(f, ", \"name\": ");
    json_string(f, r->name);
    fprintf(f, ", \"path\": ");
    json_string(f, r->path);
    fprintf(f,
            ", \"bytes\": %zu, \"window\": %d, \"iterations\": %d, \"warmup\": %d, \"unit\": \"%s\", "
            "\"ferry\": %.6g, \"mpi\": %.6g, \"ratio\": %.6g}",
            r->size, r->window, r->iters, r->skip, unit_of(r->t), r->ferry, r->mpi, r->mpi > 0 ? r->ferry / r->mpi : 0);
  }
  fprintf(f, "\n  ]\n}\n");
  if (f != stdout) fclose(f);
}

/* --plot FILE.svg: a row of two panels per test, against the message size (both
 * axes logarithmic; 0-byte rows are left out): the figures, ferry solid with
 * filled markers and MPI dashed with hollow ones, a colour per device; and
 * ferry/MPI around a line at 1. Every line is a <g class="series" data-test
 * data-device data-side="ferry|mpi|ratio"> whose markers have a <title> with the
 * value (shown on hover), so that scripts and tests can read the chart back. */
static const char *const colours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#1f1f1f"};
#define PANEL_W 420.0
#define PANEL_H 240.0
#define MARGIN  70.0

static void svg_text(FILE *f, const char *s) {
  for (; *s; s++)
    if (*s == '<')
      fputs("&lt;", f);
    else if (*s == '>')
      fputs("&gt;", f);
    else if (*s == '&')
      fputs("&amp;", f);
    else if (*s == '"')
      fputs("&quot;", f);
    else
      fputc(*s, f);
}

static bool plotted(const row *r, test t) { return r->t == t && r->size > 0 && r->ferry > 0 && r->mpi > 0; }

/* A panel's place and its axes' ranges (log2 bytes across, log10 values up). */
typedef struct frame {
  double ox, oy, lx0, lx1, ly0, ly1;
} frame;

/* Row r's value in panel k (0: the figures, ferry or MPI by `side`; 1: ferry/MPI) and its point. */
static double point_of(const frame *fr, const row *r, int k, int side, double *px, double *py) {
  double v = k ? r->ferry / r->mpi : side ? r->mpi : r->ferry;
  *px = fr->ox + (log2((double)r->size) - fr->lx0) / (fr->lx1 - fr->lx0) * PANEL_W;
  *py = fr->oy + PANEL_H - (log10(v) - fr->ly0) / (fr->ly1 - fr->ly0) * PANEL_H;
  return v;
}

static void write_svg(const options *o) {
  FILE *f = fopen(o->plot, "w");
  if (!f) {
    fprintf(stderr, "ferry-mpi-bench: --plot %s: %s\n", o->plot, strerror(errno));
    return;
  }
  int tests = 0;
  for (int t = 0; t < TEST_COUNT; t++)
    for (size_t i = 0; i < row_count; i++)
      if (plotted(&rows[i], (test)t)) {
        tests++;
        break;
      }
  double width = 2 * (PANEL_W + 2 * MARGIN), height = tests * (PANEL_H + 2 * MARGIN) + 60;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
          "font-family=\"system-ui, sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
          "fill=\"white\"/>\n<text x=\"%.0f\" y=\"28\" font-size=\"16\">ferry-mpi-bench, %d ranks: libferry_mpi "
          "(solid) beside MPI on malloc'd memory (dashed)</text>\n",
          width, height, width, height, MARGIN, nranks);
  int at = 0;
  for (int t = 0; t < TEST_COUNT; t++) {
    double lx0 = INFINITY, lx1 = -INFINITY, ly0[2] = {INFINITY, INFINITY}, ly1[2] = {-INFINITY, -INFINITY};
    for (size_t i = 0; i < row_count; i++) {
      const row *r = &rows[i];
      if (!plotted(r, (test)t)) continue;
      double x = log2((double)r->size), v[3] = {log10(r->ferry), log10(r->mpi), log10(r->ferry / r->mpi)};
      lx0 = fmin(lx0, x), lx1 = fmax(lx1, x);
      ly0[0] = fmin(ly0[0], fmin(v[0], v[1])), ly1[0] = fmax(ly1[0], fmax(v[0], v[1]));
      ly0[1] = fmin(ly0[1], fmin(v[2], 0)), ly1[1] = fmax(ly1[1], fmax(v[2], 0));
    }
    if (lx0 > lx1) continue;
    if (lx1 - lx0 < 1) lx1 = lx0 + 1;
    for (int k = 0; k < 2; k++) { /* whole decades, at least one */
      ly0[k] = floor(ly0[k]), ly1[k] = ceil(ly1[k]);
      if (ly1[k] - ly0[k] < 1) ly1[k] = ly0[k] + 1;
    }
    double oy = 60 + at++ * (PANEL_H + 2 * MARGIN);
    for (int k = 0; k < 2; k++) {
      double ox = MARGIN + k * (PANEL_W + 2 * MARGIN);
      fprintf(f, "<g class=\"panel\" data-test=\"%s\" data-panel=\"%s\">\n", test_name[t], k ? "ratio" : "value");
      fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#999\"/>\n", ox, oy,
              PANEL_W, PANEL_H);
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\">%s: %s</text>\n", ox, oy - 8, test_name[t],
              k                      ? "ferry / MPI (log)"
              : t == BW || t == BIBW ? "MB/s (log)"
                                     : "microseconds (log)");
      for (double d = ly0[k]; d <= ly1[k] + 1e-9; d++) { /* decades */
        double y = oy + PANEL_H - (d - ly0[k]) / (ly1[k] - ly0[k]) * PANEL_H;
        fprintf(f,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/><text x=\"%.1f\" y=\"%.1f\" "
                "text-anchor=\"end\">%g</text>\n",
                ox, ox + PANEL_W, y, y, k && d == 0 ? "#444" : "#eee", ox - 6, y + 4, pow(10, d));
      }
      for (double x = ceil(lx0); x <= lx1 + 1e-9; x += lx1 - lx0 > 12 ? 4 : 2) { /* sizes */
        double px = ox + (x - lx0) / (lx1 - lx0) * PANEL_W;
        char sz[32];
        size_text((size_t)1 << (int)x, sz, sizeof sz);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", px, oy + PANEL_H + 16, sz);
      }
      for (long dev = 0;; dev++) {
        bool any = false, present = false;
        for (size_t i = 0; i < row_count && !present; i++)
          present = rows[i].device >= dev;
        if (!present) break;
        for (int side = 0; side < (k ? 1 : 2); side++) {
          const char *colour = colours[dev % (long)(sizeof colours / sizeof colours[0])];
          const char *name = NULL;
          frame fr = {ox, oy, lx0, lx1, ly0[k], ly1[k]};
          for (size_t i = 0; i < row_count; i++) {
            const row *r = &rows[i];
            if (!plotted(r, (test)t) || r->device != dev) continue;
            double px, py;
            point_of(&fr, r, k, side, &px, &py);
            if (!any) {
              name = r->name;
              fprintf(f,
                      "<g class=\"series\" data-test=\"%s\" data-device=\"%ld\" data-side=\"%s\">\n<polyline "
                      "fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s points=\"",
                      test_name[t], dev,
                      k      ? "ratio"
                      : side ? "mpi"
                             : "ferry",
                      colour, side ? " stroke-dasharray=\"5 4\"" : "");
              any = true;
            }
            fprintf(f, "%.1f,%.1f ", px, py);
          }
          if (!any) continue;
          fputs("\"/>\n", f);
          for (size_t i = 0; i < row_count; i++) {
            const row *r = &rows[i];
            if (!plotted(r, (test)t) || r->device != dev) continue;
            double px, py, v = point_of(&fr, r, k, side, &px, &py);
            char sz[32];
            size_text(r->size, sz, sizeof sz);
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\" stroke=\"%s\"><title>", px, py,
                    side ? "white" : colour, colour);
            svg_text(f, r->backend);
            fprintf(f, " (device %ld), %s: %s %.4g%s</title></circle>\n", dev, sz,
                    k      ? "ferry/MPI"
                    : side ? "MPI"
                           : "ferry",
                    v,
                    k                      ? "x"
                    : t == BW || t == BIBW ? " MB/s"
                                           : " us");
          }
          fputs("</g>\n", f);
          any = false;
          if (k == 0 && side == 0 && name) { /* the legend, beside the value panel */
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">device %ld: ", ox + 8, oy + 16 + 14 * (double)dev,
                    colour, dev);
            svg_text(f, name);
            fputs("</text>\n", f);
          }
        }
      }
      fputs("</g>\n", f);
    }
  }
  fputs("</svg>\n", f);
  if (fclose(f) != 0) fprintf(stderr, "ferry-mpi-bench: --plot %s: %s\n", o->plot, strerror(errno));
}

/* ---- options -------------------------------------------------------------------------------- */

static void usage(FILE *out) {
  fprintf(out, "usage: mpirun -n 2 ferry-mpi-bench [latency|bw|bibw|allreduce|all ...] [-m [MIN:]MAX] [-i ITER]\n"
               "                                   [-x WARMUP] [-W WINDOW] [-r REPS] [-d DEVICE] [--json FILE]\n"
               "                                   [--plot FILE.svg]\n"
               "\n"
               "libferry_mpi against MPI on malloc'd memory, in the same run, as the OSU micro-benchmarks\n"
               "measure (osu_latency, osu_bw, osu_bibw, osu_allreduce). Every row: the median of REPS\n"
               "measurements each side, alternately, and ferry/MPI (above 1 is better for bw and bibw,\n"
               "below 1 for latency and allreduce).\n"
               "\n"
               "  latency        ping-pong between ranks 0 and 1: one-way microseconds\n"
               "  bw, bibw       a window of non-blocking messages, one way or both: MB/s (10^6 bytes/s)\n"
               "  allreduce      float32 sum over every rank: microseconds per call\n"
               "  -m [MIN:]MAX   message sizes, powers of two (default 0:4M; bw and bibw from 1 byte,\n"
               "                 allreduce from 4; suffixes K, M, G)\n"
               "  -i ITER        iterations for messages up to 8 KiB (default: latency 10000, bw and bibw 100,\n"
               "                 allreduce 1000); a tenth of it (at least 1; bw: a fifth) above\n"
               "  -x WARMUP      warm-up iterations up to 8 KiB (default 100; bw 10); a tenth above\n"
               "  -W WINDOW      messages in flight for bw and bibw (default 64)\n"
               "  -r REPS        measurements of each row, each side (default 5)\n"
               "  -d DEVICE      ferry's device index, the same on every rank (default: every device)\n"
               "  --json FILE    every row as JSON (docs/JSON.md), '-' for stdout\n"
               "  --plot FILE.svg  a chart per test against the message size: the figures and ferry/MPI\n");
}

static bool parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *s == '-') return false;
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k')
    shift = 10, end++;
  else if (*end == 'M' || *end == 'm')
    shift = 20, end++;
  else if (*end == 'G' || *end == 'g')
    shift = 30, end++;
  if (*end || (shift && v > (~0ull >> shift)) || v > (unsigned long long)INT32_MAX) return false;
  *out = (size_t)(v << shift);
  return *out <= (size_t)INT32_MAX;
}

static bool parse_int(const char *s, int min, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < min || v > 100000000) return false;
  *out = (int)v;
  return true;
}

static void parse(int argc, char **argv, options *o) {
  int iters = -1, skip = -1;
  bool any = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    bool known = false;
    for (int t = 0; t < TEST_COUNT; t++)
      if (strcmp(a, test_name[t]) == 0) o->run[t] = any = known = true;
    if (known) continue;
    if (strcmp(a, "all") == 0) {
      for (int t = 0; t < TEST_COUNT; t++)
        o->run[t] = true;
      any = true;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      if (me == 0) usage(stdout);
      MPI_Finalize();
      exit(0);
    } else if (!v) {
      die("%s needs a value (ferry-mpi-bench --help)", a);
    } else if (strcmp(a, "-m") == 0) {
      char buf[64];
      snprintf(buf, sizeof buf, "%s", v);
      char *colon = strchr(buf, ':');
      if (colon) *colon = '\0';
      if (!(colon ? parse_size(buf, &o->min) && parse_size(colon + 1, &o->max) : parse_size(buf, &o->max)) ||
          o->min > o->max)
        die("-m %s: sizes are [MIN:]MAX in bytes (K, M, G allowed), MIN at most MAX, at most 2 GiB - 1", v);
      i++;
    } else if (strcmp(a, "-i") == 0) {
      if (!parse_int(v, 1, &iters)) die("-i %s: iterations are a whole number from 1", v);
      i++;
    } else if (strcmp(a, "-x") == 0) {
      if (!parse_int(v, 0, &skip)) die("-x %s: warm-up iterations are a whole number from 0", v);
      i++;
    } else if (strcmp(a, "-W") == 0) {
      if (!parse_int(v, 1, &o->window) || o->window > 4096) die("-W %s: the window is 1 to 4096 messages", v);
      i++;
    } else if (strcmp(a, "-r") == 0) {
      if (!parse_int(v, 1, &o->reps) || o->reps > 1000) die("-r %s: repetitions are 1 to 1000", v);
      i++;
    } else if (strcmp(a, "-d") == 0) {
      int d;
      if (!parse_int(v, 0, &d)) die("-d %s: a device index from 0", v);
      o->device = d;
      i++;
    } else if (strcmp(a, "--json") == 0) {
      o->json = v;
      i++;
    } else if (strcmp(a, "--plot") == 0) {
      size_t len = strlen(v);
      if (len < 5 || strcmp(v + len - 4, ".svg") != 0)
        die("--plot %s: the chart is SVG, so its name must end in .svg", v);
      o->plot = v;
      i++;
    } else {
      die("unknown argument %s (ferry-mpi-bench --help)", a);
    }
  }
  if (!any)
    for (int t = 0; t < TEST_COUNT; t++)
      o->run[t] = true;
  o->iters = iters;
  o->skip = skip;
}

/* OSU's defaults for test t, where -i and -x did not say. */
static options for_test(const options *given, test t) {
  options o = *given;
  int it = t == LATENCY ? 10000 : t == ALLREDUCE ? 1000 : 100, sk = t == BW || t == BIBW ? 10 : 100;
  if (given->iters > 0) it = given->iters;
  if (given->skip >= 0) sk = given->skip;
  o.iters = it;
  o.skip = sk;
  o.iters_large = t == BW || t == BIBW ? (it / 5 > 0 ? it / 5 : 1) : (it / 10 > 0 ? it / 10 : 1);
  o.skip_large = sk / 10;
  return o;
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  options o = {.min = 0, .max = (size_t)4 << 20, .window = 64, .reps = 5, .device = -1};
  parse(argc, argv, &o);
  if (nranks < 2) die("run under mpirun with at least 2 ranks (mpirun -n 2 ferry-mpi-bench)");
  check(ferry_init(), "ferry_init");
  size_t count = ferry_device_count();
  if (o.device >= (long)count) die("-d %ld: there are %zu devices (ferry info lists them)", o.device, count);
  for (int t = 0; t < TEST_COUNT; t++) {
    if (!o.run[t]) continue;
    options ot = for_test(&o, (test)t);
    for (size_t d = 0; d < count; d++)
      if (o.device < 0 || (size_t)o.device == d) run_device(&ot, (test)t, d);
  }
  if (o.json && me == 0) write_json(&o);
  if (o.plot && me == 0) write_svg(&o);
  ferry_shutdown();
  MPI_Finalize();
  free(rows);
  return 0;
}
