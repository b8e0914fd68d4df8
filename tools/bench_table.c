/* `ferry bench`: the table and legend (stdout), the progress bar and notes (stderr). */
#include "bench.h"

#include <stdarg.h>
#include <string.h>
#include <unistd.h>

/* ---- numbers ------------------------------------------------------------------ */

/* Three significant digits or so, never wider than 8 characters. */
static const char *number(double v, char buf[32]) {
  if (v >= 1e6)
    snprintf(buf, 32, "%.2e", v);
  else if (v >= 100)
    snprintf(buf, 32, "%.0f", v);
  else if (v >= 10)
    snprintf(buf, 32, "%.1f", v);
  else if (v >= 1)
    snprintf(buf, 32, "%.2f", v);
  else
    snprintf(buf, 32, "%.3f", v);
  return buf;
}

static const char *figure_text(const bench_row *row, double seconds, char buf[48]) {
  char n[32];
  snprintf(buf, 48, "%s %s", number(bench_figure(row, seconds), n), bench_paths[row->path].latency ? "us" : "GB/s");
  return buf;
}

/* Half the interquartile range, relative to the median. */
static const char *spread_text(const bench_stats *s, char buf[32]) {
  double rel = s->median > 0 ? (s->p75 - s->p25) / 2 / s->median * 100 : 0;
  if (rel >= 99.5)
    snprintf(buf, 32, "%.0f%%", rel);
  else
    snprintf(buf, 32, "%.1f%%", rel);
  return buf;
}

/* ---- the table ------------------------------------------------------------------ */

static void capabilities(const bench_device *d, char *buf, size_t size) {
  char mem[32], max[32];
  size_t used =
      (size_t)snprintf(buf, size, "%s of memory, buffers up to %s", bench_size_approx(d->info.total_memory, mem),
                       bench_size_approx(d->info.max_allocation, max));
  if (used < size)
    used += (size_t)snprintf(buf + used, size - used, "; zero-copy: %s", d->info.zero_copy ? "yes" : "no");
  if (used < size) {
    if (d->info.host_ptr)
      snprintf(buf + used, size - used, "; host-ptr: yes (alignment %zu B)", d->info.host_ptr_alignment);
    else
      snprintf(buf + used, size - used, "; host-ptr: no");
  }
}

void bench_print_header(FILE *f, const bench_run *run) {
  const bench_options *o = &run->opt;
  char a[32], b[32];
  fprintf(f, "ferry bench %s on %s: %zu device%s, %s run, sizes %s", ferry_version(), run->host, run->device_count,
          run->device_count == 1 ? "" : "s", o->quick ? "quick" : "full", bench_size_short(o->sizes[0], a));
  if (o->size_count > 1)
    fprintf(f, " to %s (%zu sizes)", bench_size_short(o->sizes[o->size_count - 1], b), o->size_count);
  if (o->repeat)
    fprintf(f, ", %d samples a figure\n", o->repeat);
  else
    fprintf(f, ", %s samples a figure\n", o->quick ? "3 to 9" : "5 to 21");
  fprintf(f, "Each figure is a median; +- is half its interquartile range. ferry/raw above 1: ferry is faster.\n");
}

void bench_print_device(FILE *f, const bench_run *run, const bench_device *d) {
  char caps[256];
  capabilities(d, caps, sizeof caps);
  fprintf(f, "\ndevice %zu: %s, %s\n  %s\n", d->info.index, d->info.backend, d->info.name, caps);
  if (d->raw)
    fprintf(f, "  raw baseline: the %s backend's own calls, on the same buffers\n", d->info.backend);
  else
    fprintf(f, "  raw baseline: none (%s); raw columns show -\n", d->raw_note);

  const int wpath = 15, wsize = 8, wfig = 14, wspread = 6, wratio = 9;
  fprintf(f, "\n  %-*s %*s %*s %*s %*s %*s %*s   %s\n", wpath, "path", wsize, "size", wfig, "ferry", wspread, "+-",
          wfig, "raw", wspread, "+-", wratio, "ferry/raw", "raw call");
  int failure_number = 0;
  for (int p = 0; p < PATH_COUNT; p++) {
    bool first = true;
    for (size_t si = 0; si < run->opt.size_count; si++) {
      const bench_row *row = bench_row_at(run, d, (bench_path)p, si);
      if (row->status == ROW_SKIPPED) continue;
      char size[32], fig[48], sp[32], rfig[48], rsp[32], ratio[32], call[128], fail[32];
      const char *ferry_col = "-", *ferry_sp = "", *raw_col = "-", *raw_sp = "", *ratio_col = "-";
      if (row->status == ROW_FAILED) {
        snprintf(fail, sizeof fail, "FAILED [%d]", ++failure_number);
        ferry_col = fail;
      } else {
        ferry_col = figure_text(row, row->ferry.median, fig);
        ferry_sp = spread_text(&row->ferry, sp);
      }
      if (row->raw_error) {
        snprintf(rfig, sizeof rfig, "FAILED [%d]", ++failure_number);
        raw_col = rfig;
      } else if (row->has_raw) {
        raw_col = figure_text(row, row->raw.median, rfig);
        raw_sp = spread_text(&row->raw, rsp);
        double r = bench_ratio(row);
        if (r > 0) {
          snprintf(ratio, sizeof ratio, "%.2fx", r);
          if (r >= 1000 || r < 0.01) snprintf(ratio, sizeof ratio, "%.1ex", r);
          ratio_col = ratio;
        }
      }
      fprintf(f, "  %-*s %*s %*s %*s %*s %*s %*s   %s\n", wpath, first ? bench_paths[p].label : "", wsize,
              bench_size_text(row->bytes, size), wfig, ferry_col, wspread, ferry_sp, wfig, raw_col, wspread, raw_sp,
              wratio, ratio_col, first ? bench_raw_call(d, (bench_path)p, call, sizeof call) : "");
      first = false;
    }
  }

  /* What was not measured, and why. */
  bool over_cap = false;
  for (size_t si = 0; si < run->opt.size_count; si++)
    over_cap = over_cap || run->opt.sizes[si] > d->size_cap;
  if (over_cap) {
    char cap[32];
    fprintf(f, "  sizes above %s not measured: %s\n", bench_size_approx(d->size_cap, cap), d->cap_reason);
  }
  for (int p = 0; p < PATH_COUNT; p++) {
    const char *reason = NULL;
    size_t count = 0, measured = 0;
    for (size_t si = 0; si < run->opt.size_count; si++) {
      const bench_row *row = bench_row_at(run, d, (bench_path)p, si);
      if (run->opt.sizes[si] > d->size_cap) continue;
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
      fprintf(f, "  %s: not measured, %s\n", bench_paths[p].label, reason);
    } else {
      for (size_t si = 0; si < run->opt.size_count; si++) {
        const bench_row *row = bench_row_at(run, d, (bench_path)p, si);
        char size[32];
        if (run->opt.sizes[si] <= d->size_cap && row->status == ROW_SKIPPED && row->error)
          fprintf(f, "  %s, %s: not measured, %s\n", bench_paths[p].label, bench_size_text(row->bytes, size),
                  row->error);
      }
    }
  }

  /* The failures, numbered as in the table. */
  if (failure_number) {
    fprintf(f, "  failures:\n");
    int k = 0;
    for (int p = 0; p < PATH_COUNT; p++) {
      for (size_t si = 0; si < run->opt.size_count; si++) {
        const bench_row *row = bench_row_at(run, d, (bench_path)p, si);
        char size[32];
        if (row->status == ROW_FAILED && row->error)
          fprintf(f, "    [%d] %s, %s: %s\n", ++k, bench_paths[p].label, bench_size_text(row->bytes, size), row->error);
        if (row->raw_error)
          fprintf(f, "    [%d] %s, %s (raw): %s\n", ++k, bench_paths[p].label, bench_size_text(row->bytes, size),
                  row->raw_error);
      }
    }
  }
  fflush(f);
}

/* "  label           text..." with the text wrapped at 110 columns under itself. */
static void wrapped(FILE *f, const char *label, const char *text) {
  const int indent = 18, width = 110;
  fprintf(f, "  %-15s ", label);
  int col = indent;
  const char *p = text;
  while (*p) {
    const char *end = strchr(p, ' ');
    int len = end ? (int)(end - p) : (int)strlen(p);
    if (col > indent && col + 1 + len > width) {
      fprintf(f, "\n%*s", indent, "");
      col = indent;
    } else if (col > indent) {
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

void bench_print_legend(FILE *f, const bench_run *run) {
  (void)run;
  fprintf(f, "\nrows:\n");
  for (int p = 0; p < PATH_COUNT; p++)
    wrapped(f, bench_paths[p].label, bench_paths[p].meaning);
  fprintf(f, "columns:\n"
             "  ferry, raw      the median over the samples: GB/s (10^9 bytes/s) for transfers, microseconds for\n"
             "                  alloc+free; raw is the call a program without ferry makes, on the same buffers\n"
             "  +-              half the interquartile range (p75 - p25) / 2, relative to the median\n"
             "  ferry/raw       ferry GB/s / raw GB/s (alloc+free: raw time / ferry time): above 1, ferry is faster\n"
             "  raw call        pinned rows: the driver's pinned memory if it has an allocator, else the same block\n"
             "Host-ptr and zero-copy rows only synchronise (no bytes move on host devices), so their GB/s is an\n"
             "equivalent: what it would take to move the bytes there and back in that time.\n");
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

void bench_progress_step(const bench_device *d, const char *what, size_t bytes) {
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
  fprintf(stderr, "\r[%s] %3ld%%  device %zu (%s)  %-14s %-8s %5.1f s\033[K", bar,
          (progress.done - 1) * 100 / progress.total, d->info.index, d->info.backend, what,
          bench_size_text(bytes, size), now - progress.started);
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
