/* `ferry bench`: the header, tables and legend (stdout, at most 100 columns), the
 * progress bar and notes (stderr). */
#include "bench.h"

#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#define WIDTH 100 /* the widest line, so that a table fits a terminal and a diff */

/* ---- numbers ------------------------------------------------------------------ */

/* A plain number of three significant digits or so (never an exponent): "0.064",
 * "2.50", "46.2", "712", "160000". Below 0.01 two significant digits: "0.0052". */
static const char *number(double v, char buf[32]) {
  if (v >= 99.95)
    snprintf(buf, 32, "%.0f", v);
  else if (v >= 9.995)
    snprintf(buf, 32, "%.1f", v);
  else if (v >= 0.9995)
    snprintf(buf, 32, "%.2f", v);
  else if (v >= 0.00995 || v <= 0)
    snprintf(buf, 32, "%.3f", v);
  else {
    int decimals = 3;
    for (double x = v; x < 0.0995 && decimals < 9; x *= 10)
      decimals++;
    snprintf(buf, 32, "%.*f", decimals, v);
  }
  return buf;
}

const char *bench_bandwidth_text(double gbs, char buf[32]) {
  char n[32];
  if (gbs >= 0.9995)
    snprintf(buf, 32, "%.24s GB/s", number(gbs, n));
  else if (gbs >= 0.0009995)
    snprintf(buf, 32, "%.24s MB/s", number(gbs * 1e3, n));
  else
    snprintf(buf, 32, "%.24s KB/s", number(gbs * 1e6, n));
  return buf;
}

/* The spread needs enough samples to mean anything: with fewer than this many the
 * quartiles are interpolated between three or four points, and the column is left
 * blank (the JSON and CSV still have min, p25, p75 and max). */
#define SPREAD_MIN_SAMPLES 5

/* Half the interquartile range, relative to the median; "" with too few samples. */
static const char *spread_text(const bench_stats *s, int samples, char buf[32]) {
  buf[0] = '\0';
  if (samples < SPREAD_MIN_SAMPLES || s->median <= 0) return buf;
  double rel = (s->p75 - s->p25) / 2 / s->median * 100;
  snprintf(buf, 32, rel >= 9.95 ? "%.0f%%" : "%.1f%%", rel);
  return buf;
}

/* Ratios at or above this come from rows where ferry skips what the raw call does
 * (a sync row moves no bytes; alloc+free reuses cached memory): a note says so. */
#define RATIO_NOTE_FROM 1000.0

/* ---- text ---------------------------------------------------------------------- */

/* "  label  text..." with the text wrapped at WIDTH columns under itself. */
static void wrapped(FILE *f, int indent, const char *label, int label_width, const char *text) {
  int start = indent + label_width + (label_width ? 1 : 0);
  int col = fprintf(f, "%*s%-*s%s", indent, "", label_width, label, label_width ? " " : "");
  if (col < start) col = start;
  if (col > start) { /* a label wider than its column: the text starts on the next line */
    fprintf(f, "\n%*s", start, "");
    col = start;
  }
  const char *p = text;
  while (*p) {
    const char *end = strchr(p, ' ');
    int len = end ? (int)(end - p) : (int)strlen(p);
    if (col > start && col + 1 + len > WIDTH) {
      fprintf(f, "\n%*s", start, "");
      col = start;
    } else if (col > start) {
      fputc(' ', f);
      col++;
    }
    fprintf(f, "%.*s", len, p);
    col += len;
    p += len;
    while (*p == ' ')
      p++;
  }
  fputc('\n', f);
}

/* ---- the header ------------------------------------------------------------------ */

void bench_print_header(FILE *f, const bench_run *run) {
  const bench_options *o = &run->opt;
  char a[32], b[32], version[128], line[1024], n1[64], n2[64];
  int used = snprintf(line, sizeof line, "%s: %s run, sizes %s", tool_version_text(version),
                      o->quick ? "quick" : "full", bench_size_short(o->sizes[0], a));
  if (o->size_count > 1 && used > 0 && (size_t)used < sizeof line)
    used += snprintf(line + used, sizeof line - (size_t)used, " to %s (%zu sizes)",
                     bench_size_short(o->sizes[o->size_count - 1], b), o->size_count);
  if (used > 0 && (size_t)used < sizeof line) {
    if (o->repeat)
      snprintf(line + used, sizeof line - (size_t)used, ", %s a figure",
               bench_plural(o->repeat, "sample", "samples", n1));
    else
      snprintf(line + used, sizeof line - (size_t)used, ", %s samples a figure", o->quick ? "3 to 9" : "5 to 21");
  }
  wrapped(f, 0, "", 0, line);
  char mem[32];
  snprintf(line, sizeof line, "on %s, %s (%s, %s of memory), %s", run->sys.os, run->sys.cpu,
           bench_plural(run->sys.cpus, "processor", "processors", n2), bench_size_approx(run->sys.memory, mem),
           run->sys.started);
  wrapped(f, 0, "", 0, line);
  /* The settings that differ from the defaults; 'ferry info --verbose' lists them all. */
  size_t count = tool_setting_count(), changed = 0;
  used = snprintf(line, sizeof line, "%s", "");
  for (size_t i = 0; i < count; i++) {
    tool_setting s;
    if (!tool_setting_get(i, &s) || strcmp(s.source, "default") == 0) continue;
    if (used >= 0 && (size_t)used < sizeof line)
      used += snprintf(line + used, sizeof line - (size_t)used, "%s%s=%s (%s)", changed ? ", " : "", s.name, s.value,
                       s.source);
    changed++;
  }
  if (count && used >= 0 && (size_t)used < sizeof line)
    snprintf(line + used, sizeof line - (size_t)used, "%s%s at their defaults ('ferry info --verbose' lists them)",
             changed ? "; " : "", changed ? "the others" : "all");
  if (count) wrapped(f, 0, "settings:", 9, line);
  for (size_t i = 0; i < run->left_out_count; i++)
    fprintf(f, "device %zu (checked) left out: a debugging device (--backend checked or --device %zu measures it)\n",
            run->left_out[i], run->left_out[i]);
  fprintf(f, "Each figure is a median; +- is half its interquartile range. ferry/raw above 1: ferry is faster.\n");
}

/* ---- a table ---------------------------------------------------------------------- */

/* One unit per column, named in the header: bandwidth in GB/s (transfers only) and
 * time per operation in microseconds (every row), each with its spread. */
#define ROW_FORMAT "  %-14s %8s %10s %10s %9s %5s %9s %5s %9s  %s"

static void table_head(FILE *f) {
  fprintf(f, "\n" ROW_FORMAT "\n", "path", "size", "ferry GB/s", "raw GB/s", "ferry us", "+-", "raw us", "+-",
          "ferry/raw", "raw way");
}

/* What a table's rows needed said under it. */
typedef struct table_notes {
  int failures;     /* FAILED [n] so far */
  bool ratio_sync;  /* a sync row's ratio at RATIO_NOTE_FROM or more */
  bool ratio_alloc; /* an alloc+free row's */
  bool ratio_other; /* another row's */
  bool few_samples; /* a spread left blank */
} table_notes;

static void table_row(FILE *f, const char *label, const bench_row *row, const char *tag, table_notes *notes) {
  char size[32], gbs[32], rgbs[32], us[32], rus[32], sp[32] = "", rsp[32] = "", ratio[32], fail[32], rfail[32];
  const char *ferry_gbs = "", *raw_gbs = "", *ferry_us = "", *raw_us = "", *ratio_col = "-", *way = "";
  bool bandwidth = !bench_paths[row->path].latency;
  if (row->status == ROW_FAILED) {
    snprintf(fail, sizeof fail, "FAILED [%d]", ++notes->failures);
    ferry_gbs = fail;
  } else {
    if (bandwidth) ferry_gbs = number(bench_figure(row, row->ferry.median), gbs);
    ferry_us = number(row->ferry.median * 1e6, us);
    spread_text(&row->ferry, row->samples, sp);
    notes->few_samples = notes->few_samples || row->samples < SPREAD_MIN_SAMPLES;
  }
  if (row->raw_error) {
    snprintf(rfail, sizeof rfail, "FAILED [%d]", ++notes->failures);
    raw_gbs = rfail;
  }
  if (row->status == ROW_OK && row->raw_count > 0) {
    if (!row->raw_error) {
      if (bandwidth) raw_gbs = number(bench_figure(row, row->raw[0].t.median), rgbs);
      raw_us = number(row->raw[0].t.median * 1e6, rus);
      spread_text(&row->raw[0].t, row->samples, rsp);
    }
    double r = bench_ratio(row);
    if (r > 0) ratio_col = number(r, ratio);
    if (r >= RATIO_NOTE_FROM) {
      const bench_path_desc *p = &bench_paths[row->path];
      if (p->sync_only)
        notes->ratio_sync = true;
      else if (row->path == PATH_ALLOC)
        notes->ratio_alloc = true;
      else
        notes->ratio_other = true;
    }
    way = tag;
  }
  char line[512];
  snprintf(line, sizeof line, ROW_FORMAT, label, bench_size_text(row->bytes, size), ferry_gbs, raw_gbs, ferry_us, sp,
           raw_us, rsp, ratio_col, way);
  size_t n = strlen(line);
  while (n > 0 && line[n - 1] == ' ') /* no blanks at the ends of lines */
    line[--n] = '\0';
  fprintf(f, "%s\n", line);
}

/* The notes a table's figures call for, under it. */
static void table_notes_print(FILE *f, const table_notes *notes) {
  char from[32];
  number(RATIO_NOTE_FROM, from);
  if (notes->ratio_sync)
    wrapped(f, 2, "", 0,
            "note: a sync row's ferry/raw grows with the size: ferry moves no bytes there (the array is the "
            "buffer's memory), while the raw h2d + d2h copies them all");
  if (notes->ratio_alloc)
    wrapped(f, 2, "", 0,
            "note: alloc+free's ferry/raw is large where ferry reuses memory from its cache and the driver "
            "allocates anew");
  if (notes->ratio_other) {
    char line[200];
    snprintf(line, sizeof line,
             "note: a ferry/raw of %s or more means the raw way did far more work than ferry's; the JSON has both "
             "times",
             from);
    wrapped(f, 2, "", 0, line);
  }
  if (notes->few_samples)
    wrapped(f, 2, "", 0,
            "+- is blank for figures of fewer than 5 samples (--repeat 5 or more shows it); the JSON and CSV "
            "have every figure's min and max");
}

/* Lists the failures of rows, numbered as in the table. */
static void failures(FILE *f, const char *label, const bench_row *row, int *k) {
  char size[32];
  if (row->status == ROW_FAILED && row->error)
    fprintf(f, "    [%d] %s, %s: %s\n", ++*k, label, bench_size_text(row->bytes, size), row->error);
  if (row->raw_error)
    fprintf(f, "    [%d] %s, %s (raw): %s\n", ++*k, label, bench_size_text(row->bytes, size), row->raw_error);
}

static bool is_interrupted(const bench_row *row) {
  return row->status == ROW_SKIPPED && row->error && strcmp(row->error, BENCH_INTERRUPTED) == 0;
}

static void capabilities(const bench_device *d, char *buf, size_t size) {
  char mem[32], max[32];
  size_t used =
      (size_t)snprintf(buf, size, "%s of memory, buffers up to %s", bench_size_approx(d->info.total_memory, mem),
                       bench_size_approx(d->info.max_allocation, max));
  if (used < size && d->has_driver && d->driver.free_memory) {
    char free_text[32];
    used += (size_t)snprintf(buf + used, size - used,
                             d->driver.free_memory_from_host ? " (the host has %s free)" : " (%s free)",
                             bench_size_approx(d->driver.free_memory, free_text));
  }
  if (used < size)
    used += (size_t)snprintf(buf + used, size - used, "; zero-copy: %s", d->info.zero_copy ? "yes" : "no");
  if (used < size) {
    if (d->info.host_ptr)
      snprintf(buf + used, size - used, "; host-ptr: yes (alignment %zu B)", d->info.host_ptr_alignment);
    else
      snprintf(buf + used, size - used, "; host-ptr: no");
  }
}

/* "enqueue: h2d clEnqueueWriteBuffer+clFinish; d2h ...": the calls of one way, per path measured.
 * False when the way has calls for none of them (a second way for alloc+free alone). */
static bool way_calls(const bench_run *run, const bench_device *d, int way, char *buf, size_t size) {
  size_t used = (size_t)snprintf(buf, size, "%s:", bench_raw_tag(d->raw, way));
  static const bench_path shown[] = {PATH_H2D, PATH_D2H, PATH_D2D, PATH_ASYNC, PATH_BOTH, PATH_ELAPSED, PATH_ALLOC};
  /* The pinned queue rows make the calls of their ordinary rows (named there). */
  bool any = false;
  for (size_t k = 0; k < sizeof shown / sizeof shown[0]; k++) {
    bench_path p = shown[k];
    bool measured =
        run->opt.paths[p] || (p == PATH_ASYNC && run->opt.paths[PATH_ASYNC_PINNED]) ||
        (p == PATH_BOTH && run->opt.paths[PATH_BOTH_PINNED]) ||
        (p == PATH_H2D &&
         (run->opt.paths[PATH_H2D_PINNED] || run->opt.paths[PATH_HOST_PTR] || run->opt.paths[PATH_ZERO_COPY])) ||
        (p == PATH_D2H &&
         (run->opt.paths[PATH_D2H_PINNED] || run->opt.paths[PATH_HOST_PTR] || run->opt.paths[PATH_ZERO_COPY]));
    char call[256];
    if (!measured || !bench_raw_call(d, p, way, call, sizeof call) || used >= size) continue;
    used += (size_t)snprintf(buf + used, size - used, "%s %s %s", any ? ";" : "", bench_paths[p].label, call);
    any = true;
  }
  return any;
}

static void ratio_cell(char *buf, size_t size, double gbs, double limit) {
  if (gbs > 0 && limit > 0)
    snprintf(buf, size, "%.2fx", gbs / limit);
  else
    snprintf(buf, size, "-");
}

/* Pageable transfers against the host's limit: the warm rows and the cold figures. */
static void print_limit(FILE *f, const bench_run *run, const bench_device *d) {
  const bench_host_limit *l = &d->limit;
  const bench_host_copy *h = &run->host_copy;
  if (!l->measured) return;
  char line[1200], llc[32], block[32], pin[32];
  double lim_h2d = bench_limit_of(run, d, true), lim_d2h = bench_limit_of(run, d, false);
  snprintf(line, sizeof line,
           "pageable against the host's limit (warm: the rows above, one block every time; cold: blocks of "
           "the size in turn through an area of at least %s, twice the %s last-level cache%s):",
           bench_size_approx(2 * h->llc, block), bench_size_approx(h->llc, llc), h->llc_known ? "" : " assumed");
  fputc('\n', f);
  wrapped(f, 2, "", 0, line);
  char copy[300];
  if (h->measured)
    snprintf(copy, sizeof copy,
             "the host's best streaming copy, %.1f GB/s on %d thread%s (memcpy of %s; %.1f GB/s on one)", h->gbs,
             h->threads, h->threads == 1 ? "" : "s", bench_size_approx(h->bytes, block), h->one_thread_gbs);
  else
    snprintf(copy, sizeof copy, "the host's copy not measured (%s)", h->why);
  if (l->pinned_bytes)
    snprintf(line, sizeof line,
             "limit to the device %.1f GB/s, to the host %.1f GB/s: the lesser of the pinned rows at %s "
             "(%.1f / %.1f GB/s) and %s",
             lim_h2d, lim_d2h, bench_size_text(l->pinned_bytes, pin), l->pinned_h2d, l->pinned_d2h, copy);
  else
    snprintf(line, sizeof line,
             "limit %.1f GB/s: %s (no pinned rows measured: --paths h2d-pinned,d2h-pinned adds them)", lim_h2d, copy);
  wrapped(f, 2, "", 0, line);
  fprintf(f, "  %10s  %9s  %9s  %9s  %9s  %s\n", "size", "h2d warm", "h2d cold", "d2h warm", "d2h cold", "target");
  bool pinned_is_limit = bench_pinned_is_limit(run, d);
  for (size_t i = 0; i < l->cold_count; i++) {
    const bench_cold *c = &l->cold[i];
    double warm[2];
    bench_limit_warm(run, d, c->bytes, warm);
    char cells[4][32], size[32], target[64] = "";
    ratio_cell(cells[0], sizeof cells[0], warm[0], lim_h2d);
    ratio_cell(cells[1], sizeof cells[1], c->h2d, lim_h2d);
    ratio_cell(cells[2], sizeof cells[2], warm[1], lim_d2h);
    ratio_cell(cells[3], sizeof cells[3], c->d2h, lim_d2h);
    double t = bench_limit_target(c->bytes, pinned_is_limit);
    if (t > 0) {
      double r[4] = {warm[0] / lim_h2d, lim_h2d > 0 ? c->h2d / lim_h2d : 0, warm[1] / lim_d2h,
                     lim_d2h > 0 ? c->d2h / lim_d2h : 0};
      bool all = lim_h2d > 0 && lim_d2h > 0, met = all;
      for (int k = 0; k < 4 && all; k++)
        met = met && r[k] >= t;
      snprintf(target, sizeof target, "%.2fx: %s", t, !all ? "-" : met ? "met" : "missed");
    }
    fprintf(f, "  %10s  %9s  %9s  %9s  %9s  %s\n", bench_size_text(c->bytes, size), cells[0], cells[1], cells[2],
            cells[3], target);
    if (c->why[0]) fprintf(f, "  %10s  cold: %s\n", "", c->why);
  }
}

void bench_print_device(FILE *f, const bench_run *run, const bench_device *d) {
  char caps[320], driver[700], line[1200];
  capabilities(d, caps, sizeof caps);
  snprintf(line, sizeof line, "device %zu: %s, %s%s", d->info.index, d->info.backend, d->info.name,
           tool_is_debugging(&d->info) ? " (a debugging device: checks, not speed)" : "");
  fputc('\n', f);
  wrapped(f, 0, "", 0, line);
  if (d->has_driver && tool_driver_text(&d->driver, driver, sizeof driver)[0]) wrapped(f, 2, "driver:", 7, driver);
  wrapped(f, 2, "", 0, caps);
  if (d->raw)
    fprintf(f, "  raw baseline: the %s driver's own calls on the same buffers%s\n", d->info.backend,
            d->alt ? "; of its two ways, the faster" : "");
  else
    fprintf(f, "  raw baseline: none (%s); raw columns show -\n", d->raw_note);

  table_head(f);
  table_notes notes = {0};
  for (int p = 0; p < PATH_DEVICE_COUNT; p++) {
    if (!run->opt.paths[p]) continue;
    bool first = true;
    for (size_t si = 0; si < run->opt.size_count; si++) {
      const bench_row *row = bench_device_row(run, d, (bench_path)p, si);
      if (row->status == ROW_SKIPPED) continue;
      const char *tag = bench_row_raw_tag(d, NULL, row, 0);
      table_row(f, first ? bench_paths[p].label : "", row, tag ? tag : "", &notes);
      first = false;
    }
  }
  table_notes_print(f, &notes);

  /* What the raw ways call. */
  if (d->raw) {
    bool first = true;
    for (int way = 0; way < (d->alt ? 2 : 1); way++) {
      if (!way_calls(run, d, way, line, sizeof line)) continue;
      wrapped(f, 2, first ? "raw ways:" : "", 9, line);
      first = false;
    }
    if (run->opt.paths[PATH_H2D_PINNED] || run->opt.paths[PATH_D2H_PINNED] || run->opt.paths[PATH_ASYNC_PINNED] ||
        run->opt.paths[PATH_BOTH_PINNED] || run->opt.paths[PATH_HOST_PTR] || run->opt.paths[PATH_ZERO_COPY])
      wrapped(f, 2, "", 9,
              d->raw->host_alloc ? "pinned rows: the same calls with the driver's pinned memory; sync rows: h2d, "
                                   "then d2h"
                                 : "pinned rows: the same calls with the same block; sync rows: h2d, then d2h");
  }

  print_limit(f, run, d);

  /* What was not measured, and why. */
  bool over_cap = false;
  for (size_t si = 0; si < run->opt.size_count; si++)
    over_cap = over_cap || run->opt.sizes[si] > d->size_cap;
  if (over_cap) {
    char cap[32];
    snprintf(line, sizeof line, "sizes above %s not measured: %s", bench_size_approx(d->size_cap, cap), d->cap_reason);
    wrapped(f, 2, "", 0, line);
  }
  size_t interrupted = 0; /* rows an interruption left unmeasured: one line for all of them */
  for (int p = 0; p < PATH_DEVICE_COUNT; p++) {
    if (!run->opt.paths[p]) continue;
    const char *reason = NULL;
    size_t count = 0, measured = 0;
    for (size_t si = 0; si < run->opt.size_count; si++) {
      const bench_row *row = bench_device_row(run, d, (bench_path)p, si);
      if (run->opt.sizes[si] > d->size_cap) continue;
      if (is_interrupted(row)) {
        interrupted++;
        continue;
      }
      measured++;
      if (row->status == ROW_SKIPPED && row->error) {
        if (!reason || strcmp(reason, row->error) == 0) {
          reason = row->error;
          count++;
        } else {
          count = SIZE_MAX / 2; /* several reasons: each size on its own line */
        }
      }
    }
    if (!reason) continue;
    if (count == measured) {
      snprintf(line, sizeof line, "%s: not measured, %s", bench_paths[p].label, reason);
      wrapped(f, 2, "", 0, line);
    } else {
      for (size_t si = 0; si < run->opt.size_count; si++) {
        const bench_row *row = bench_device_row(run, d, (bench_path)p, si);
        char size[32];
        if (run->opt.sizes[si] <= d->size_cap && row->status == ROW_SKIPPED && row->error && !is_interrupted(row)) {
          snprintf(line, sizeof line, "%s, %s: not measured, %s", bench_paths[p].label,
                   bench_size_text(row->bytes, size), row->error);
          wrapped(f, 2, "", 0, line);
        }
      }
    }
  }

  if (interrupted) {
    char n[64];
    fprintf(f, "  interrupted: %s of this device not measured\n", bench_plural((long)interrupted, "row", "rows", n));
  }
  if (notes.failures) {
    fprintf(f, "  failures:\n");
    int k = 0;
    for (int p = 0; p < PATH_DEVICE_COUNT; p++)
      for (size_t si = 0; si < run->opt.size_count && run->opt.paths[p]; si++)
        failures(f, bench_paths[p].label, bench_device_row(run, d, (bench_path)p, si), &k);
  }
  fflush(f);
}

void bench_print_pairs(FILE *f, const bench_run *run) {
  fprintf(f, "\nbetween devices: ferry_device_to_device from a buffer of device A into one of device B (A>B)\n");
  table_head(f);
  table_notes notes = {0};
  for (size_t i = 0; i < run->pair_count; i++) {
    const bench_pair *p = &run->pairs[i];
    char label[48];
    bench_pair_label(run, p, label);
    bool first = true;
    for (size_t si = 0; si < run->opt.size_count; si++) {
      const bench_row *row = bench_pair_row(run, p, si);
      if (row->status == ROW_SKIPPED) continue;
      const char *tag = bench_row_raw_tag(NULL, p, row, 0);
      table_row(f, first ? label : "", row, tag ? tag : "", &notes);
      first = false;
    }
  }
  table_notes_print(f, &notes);
  char line[1024];
  for (size_t i = 0; i < run->pair_count; i++) {
    const bench_pair *p = &run->pairs[i];
    char label[48], cap[32];
    bench_pair_label(run, p, label);
    if (p->has_raw && p->has_alt)
      snprintf(line, sizeof line, "raw first: %s; second: %s", p->raw_call, p->raw_call_alt);
    else if (p->has_raw)
      snprintf(line, sizeof line, "raw %s", p->raw_call);
    else
      snprintf(line, sizeof line, "no raw baseline (%s)", p->raw_note);
    bool over = false;
    for (size_t si = 0; si < run->opt.size_count; si++)
      over = over || run->opt.sizes[si] > p->size_cap;
    if (over) {
      size_t used = strlen(line);
      snprintf(line + used, sizeof line - used, "; sizes above %s not measured (%s)",
               bench_size_approx(p->size_cap, cap), p->cap_reason);
    }
    strcat(label, ":");
    wrapped(f, 2, label, 14, line);
  }
  if (notes.failures) {
    fprintf(f, "  failures:\n");
    int k = 0;
    for (size_t i = 0; i < run->pair_count; i++) {
      char label[48];
      bench_pair_label(run, &run->pairs[i], label);
      for (size_t si = 0; si < run->opt.size_count; si++)
        failures(f, label, bench_pair_row(run, &run->pairs[i], si), &k);
    }
  }
  fflush(f);
}

void bench_print_legend(FILE *f, const bench_run *run) {
  fprintf(f, "\nrows:\n");
  for (int p = 0; p < PATH_COUNT; p++)
    if (run->opt.paths[p] && (p < PATH_DEVICE_COUNT || run->pair_count))
      wrapped(f, 2, bench_paths[p].label, 14, bench_paths[p].meaning);
  fprintf(f, "columns:\n");
  wrapped(f, 2, "GB/s", 14,
          "the median bandwidth over the samples, in 10^9 bytes per second, of ferry and of raw, what a program "
          "without ferry does on the same buffers (transfers only)");
  wrapped(f, 2, "us", 14,
          "the median time per operation, in microseconds: per transfer, per alloc+free, per h2d + d2h pair on "
          "the sync rows, per submission on write_async, per pair of copies on h2d+d2h 2q");
  wrapped(f, 2, "+-", 14,
          "half the interquartile range (p75 - p25) / 2 of the time, relative to the median; blank for fewer "
          "than 5 samples");
  wrapped(f, 2, "ferry/raw", 14,
          "raw time / ferry time (for transfers: ferry GB/s / raw GB/s): above 1, ferry is faster");
  wrapped(f, 2, "raw way", 14,
          "which raw way the figure is: where a device has two (OpenCL's enqueue and map, Vulkan's staging and "
          "mapped memory on CPU devices), both are measured and the faster is shown");
}

/* ---- the summary (--summary) ------------------------------------------------------ */

/* The row of a path at the largest (or the smallest) size where it was measured. */
static const bench_row *summary_row(const bench_run *run, const bench_device *d, bench_path p, bool largest) {
  const bench_row *found = NULL;
  for (size_t si = 0; si < run->opt.size_count && run->opt.paths[p]; si++) {
    const bench_row *row = bench_device_row(run, d, p, si);
    if (row->status == ROW_OK && (largest || !found)) found = row;
  }
  return found;
}

/* "9.17 (1.02)": ferry's figure, and ferry/raw where there is a raw figure. */
static const char *summary_cell(const bench_row *row, char buf[48]) {
  char fig[32], ratio[32];
  if (!row) return "-";
  bool latency = bench_paths[row->path].latency;
  number(latency ? row->ferry.median * 1e6 : bench_figure(row, row->ferry.median), fig);
  double r = bench_ratio(row);
  if (r > 0)
    snprintf(buf, 48, "%s (%s)", fig, number(r, ratio));
  else
    snprintf(buf, 48, "%s", fig);
  return buf;
}

void bench_print_summary(FILE *f, const bench_run *run, const char *tables) {
  static const struct {
    bench_path path;
    bool largest;
    const char *head;
  } cols[] = {{PATH_H2D, true, "h2d GB/s"},
              {PATH_D2H, true, "d2h GB/s"},
              {PATH_D2D, true, "d2d GB/s"},
              {PATH_ALLOC, false, "alloc+free us"}};
  enum { NCOLS = sizeof cols / sizeof cols[0] };
  fprintf(f, "\nsummary: ferry's median (ferry/raw: above 1, ferry is faster); copies at each device's largest\n"
             "size measured, alloc+free at its smallest\n");
  fprintf(f, "\n  %-3s %-20s %8s", "#", "device", "size");
  for (int k = 0; k < NCOLS; k++)
    fprintf(f, k + 1 < NCOLS ? "  %-14s" : "  %s\n", cols[k].head);
  for (size_t i = 0; i < run->device_count; i++) {
    const bench_device *d = &run->devices[i];
    const bench_row *rows[NCOLS];
    size_t bytes = 0;
    for (int k = 0; k < NCOLS; k++) {
      rows[k] = summary_row(run, d, cols[k].path, cols[k].largest);
      if (cols[k].largest && rows[k] && rows[k]->bytes > bytes) bytes = rows[k]->bytes;
    }
    /* The copies at one size: a column measured only at smaller sizes shows "-". */
    for (int k = 0; k < NCOLS; k++)
      if (cols[k].largest && rows[k] && rows[k]->bytes != bytes) rows[k] = NULL;
    char name[64], size[32], line[256];
    snprintf(name, sizeof name, "%s, %s", d->info.backend, d->info.name);
    if (strlen(name) > 20) snprintf(name + 17, sizeof name - 17, "...");
    int used = snprintf(line, sizeof line, "  %-3zu %-20s %8s", d->info.index, name,
                        bytes ? bench_size_text(bytes, size) : "-");
    for (int k = 0; k < NCOLS && used > 0 && (size_t)used < sizeof line; k++) {
      char cell[48];
      used += snprintf(line + used, sizeof line - (size_t)used, "  %-14s", summary_cell(rows[k], cell));
    }
    size_t n = strlen(line);
    while (n > 0 && line[n - 1] == ' ')
      line[--n] = '\0';
    fprintf(f, "%s\n", line);
  }
  if (run->pair_count) {
    /* Each pair at its largest size measured; the size said once where they agree. */
    const bench_row *best[BENCH_MAX_DEVICES];
    size_t n = run->pair_count < BENCH_MAX_DEVICES ? run->pair_count : BENCH_MAX_DEVICES, common = 0;
    bool same = true;
    for (size_t i = 0; i < n; i++) {
      best[i] = NULL;
      for (size_t si = 0; si < run->opt.size_count; si++)
        if (bench_pair_row(run, &run->pairs[i], si)->status == ROW_OK)
          best[i] = bench_pair_row(run, &run->pairs[i], si);
      if (best[i] && !common) common = best[i]->bytes;
      same = same && (!best[i] || best[i]->bytes == common);
    }
    char text[4096], size[32];
    size_t used = (size_t)snprintf(text, sizeof text, "between devices%s%s, GB/s (ferry/raw):", same ? " at " : "",
                                   same ? bench_size_text(common, size) : "");
    for (size_t i = 0; i < n && used < sizeof text; i++) {
      char label[48], cell[48];
      bench_pair_label(run, &run->pairs[i], label);
      used += (size_t)snprintf(text + used, sizeof text - used, "%s %s %s", i ? ";" : "", label,
                               summary_cell(best[i], cell));
      if (best[i] && !same && used < sizeof text)
        used += (size_t)snprintf(text + used, sizeof text - used, " at %s", bench_size_text(best[i]->bytes, size));
    }
    wrapped(f, 2, "", 0, text);
  }
  if (tables)
    fprintf(f, "\nthe full tables (every path and size, the raw calls, the legend): %s\n", tables);
  else
    fprintf(f, "\nthe full tables: the same command without --summary\n");
}

/* ---- progress bar and notes ------------------------------------------------------ */

static struct {
  bool on;
  long total, done;
  double started;
  bool visible;
} progress;

void bench_progress_start(long total_steps) {
  progress.on = isatty(STDERR_FILENO) == 1;
  progress.total = total_steps > 0 ? total_steps : 1;
  progress.done = 0;
  progress.started = bench_now();
  progress.visible = false;
}

void bench_progress_step(const char *where, const char *what, size_t bytes) {
  if (progress.done < progress.total) progress.done++;
  if (!progress.on) return;
  double now = bench_now(); /* a few hundred steps in a run: each is drawn, so the label is never stale */
  const int width = 24;
  long filled = (progress.done - 1) * width / progress.total;
  char bar[32];
  for (int i = 0; i < width; i++)
    bar[i] = i < filled ? '#' : '.';
  bar[width] = '\0';
  char size[32];
  fprintf(stderr, "\r[%s] %3ld%%  %s  %-14s %-8s %5.1f s\033[K", bar, (progress.done - 1) * 100 / progress.total, where,
          what, bench_size_text(bytes, size), now - progress.started);
  fflush(stderr);
  progress.visible = true;
}

void bench_progress_clear(void) {
  if (progress.on && progress.visible) {
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
    progress.visible = false;
  }
}

void bench_progress_end(void) {
  bench_progress_clear();
  progress.on = false;
}

void bench_note(const char *fmt, ...) {
  bench_progress_clear();
  fflush(stdout);
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ferry bench: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stderr);
}
