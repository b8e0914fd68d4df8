/*
 * `ferry bench --plot FILE.svg`: bandwidth against size, one panel per device,
 * one line per path (solid with filled markers: ferry; dashed with hollow
 * markers: the raw call), both axes logarithmic, gridlines, a shared legend.
 *
 * Every line is a <g class="series" data-device=".." data-path=".." data-side="ferry|raw">
 * holding one <polyline> and a marker per point, each with a <title> (the browser
 * shows it on hover), so that scripts and tests can read the chart back.
 * Host-ptr and zero-copy rows only synchronise; on host devices their equivalent
 * GB/s can run far above the copies, and the y axis is fitted to the copies: a
 * line that leaves the top is clipped there and marked with an arrow.
 */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PI 3.14159265358979323846

typedef struct style {
  const char *colour;
  const char *marker; /* circle, square, up, down, diamond, hexagon, star */
} style;

/* Okabe-Ito colours (told apart with the common colour-vision deficiencies), and a marker shape each. */
static const style styles[PATH_COUNT] = {
    [PATH_H2D] = {"#0072B2", "circle"},       [PATH_D2H] = {"#D55E00", "square"},
    [PATH_H2D_PINNED] = {"#56B4E9", "up"},    [PATH_D2H_PINNED] = {"#E69F00", "down"},
    [PATH_HOST_PTR] = {"#009E73", "diamond"}, [PATH_ZERO_COPY] = {"#CC79A7", "hexagon"},
    [PATH_D2D] = {"#333333", "star"},         [PATH_ALLOC] = {"#999999", "circle"},
};

static const char *const FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif";

static void esc(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    default: fputc(*s, f);
    }
  }
}

static void marker(FILE *f, const char *shape, double x, double y, double r, const char *colour, bool hollow) {
  char paint[96];
  if (hollow)
    snprintf(paint, sizeof paint, "fill=\"#ffffff\" stroke=\"%s\" stroke-width=\"1.4\"", colour);
  else
    snprintf(paint, sizeof paint, "fill=\"%s\" stroke=\"#ffffff\" stroke-width=\"0.8\"", colour);
  if (strcmp(shape, "circle") == 0) {
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" %s>", x, y, r, paint);
    return;
  }
  double pts[16][2];
  int n = 0;
  if (strcmp(shape, "square") == 0) {
    double s = r * 0.9;
    double q[4][2] = {{-s, -s}, {s, -s}, {s, s}, {-s, s}};
    memcpy(pts, q, sizeof q);
    n = 4;
  } else if (strcmp(shape, "up") == 0 || strcmp(shape, "down") == 0) {
    double k = strcmp(shape, "up") == 0 ? 1 : -1;
    double q[3][2] = {{0, -1.25 * r * k}, {1.15 * r, 0.8 * r * k}, {-1.15 * r, 0.8 * r * k}};
    memcpy(pts, q, sizeof q);
    n = 3;
  } else if (strcmp(shape, "diamond") == 0) {
    double q[4][2] = {{0, -1.3 * r}, {1.1 * r, 0}, {0, 1.3 * r}, {-1.1 * r, 0}};
    memcpy(pts, q, sizeof q);
    n = 4;
  } else if (strcmp(shape, "hexagon") == 0) {
    for (n = 0; n < 6; n++) {
      pts[n][0] = 1.1 * r * cos(BENCH_PI / 3 * n);
      pts[n][1] = 1.1 * r * sin(BENCH_PI / 3 * n);
    }
  } else { /* star */
    for (n = 0; n < 10; n++) {
      double rr = n % 2 ? 0.55 * r : 1.35 * r;
      pts[n][0] = rr * sin(BENCH_PI / 5 * n);
      pts[n][1] = -rr * cos(BENCH_PI / 5 * n);
    }
  }
  fprintf(f, "<polygon points=\"");
  for (int i = 0; i < n; i++)
    fprintf(f, "%s%.1f,%.1f", i ? " " : "", x + pts[i][0], y + pts[i][1]);
  fprintf(f, "\" %s>", paint);
}

static const char *marker_end(const char *shape) { return strcmp(shape, "circle") == 0 ? "</circle>" : "</polygon>"; }

/* A tick label: "0.01", "0.2", "5", "20", "5000", "1e5". */
static void tick_label(double v, char buf[32]) {
  if (v >= 1e5 || v < 1e-3) {
    int e = (int)floor(log10(v) + 1e-9);
    double m = v / pow(10, e);
    if (fabs(m - 1) < 1e-6)
      snprintf(buf, 32, "1e%d", e);
    else
      snprintf(buf, 32, "%.0fe%d", m, e);
  } else {
    snprintf(buf, 32, "%g", v);
  }
}

/* A figure in few characters: "9.7e5", "3120", "45.2", "0.81". */
static void compact(double v, char buf[32]) {
  if (v >= 1e5) {
    char t[32];
    snprintf(t, sizeof t, "%.1e", v); /* "9.7e+05" */
    char *e = strchr(t, 'e');
    if (!e) {
      snprintf(buf, 32, "%s", t);
      return;
    }
    *e = '\0';
    int exp = atoi(e + 1);
    size_t len = strlen(t);
    if (len >= 2 && strcmp(t + len - 2, ".0") == 0) t[len - 2] = '\0';
    /* The mantissa is a few characters ("9.7"); the bound keeps the compiler sure of it. */
    snprintf(buf, 32, "%.16se%d", t, exp);
  } else {
    snprintf(buf, 32, v >= 100 ? "%.0f" : v >= 1 ? "%.3g" : "%.2g", v);
  }
}

typedef struct panel {
  double x, y, w, h;         /* the plot area */
  double lx0, lx1, ly0, ly1; /* log2(size) and log10(GB/s) at its edges */
  double above[PATH_COUNT];  /* the largest figure of a line that leaves the top; 0 if none */
  bool empty;
} panel;

static double px(const panel *p, double bytes) { return p->x + (log2(bytes) - p->lx0) / (p->lx1 - p->lx0) * p->w; }
static double py(const panel *p, double gbs) { return p->y + p->h - (log10(gbs) - p->ly0) / (p->ly1 - p->ly0) * p->h; }

/* Paths on the chart: every bandwidth row (alloc+free is a latency). */
static bool plotted(bench_path p) { return !bench_paths[p].latency; }
/* Raw lines on the chart: not for the sync rows, whose raw side is the h2d + d2h already drawn. */
static bool raw_plotted(bench_path p) { return plotted(p) && !bench_paths[p].sync_only; }

static bool point(const bench_row *row, int side, double *out) {
  if (row->status != ROW_OK || !plotted(row->path)) return false;
  if (side && (!row->has_raw || !raw_plotted(row->path))) return false;
  *out = bench_figure(row, side ? row->raw.median : row->ferry.median);
  return *out > 0;
}

/* The axes' ranges. x: the sizes, with room for the markers. y: the copies'
 * figures; a sync row's figures widen it up to ten times the fastest copy, and a
 * line above that leaves the top (its largest figure is noted). */
static void fit(const bench_run *run, const bench_device *d, panel *P) {
  const bench_options *o = &run->opt;
  P->lx0 = log2((double)o->sizes[0]) - 0.4;
  P->lx1 = log2((double)o->sizes[o->size_count - 1]) + 0.4;
  if (o->size_count == 1) {
    P->lx0 -= 1;
    P->lx1 += 1;
  }
  double lo = INFINITY, hi = 0, copies_hi = 0;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) copies_hi = hi;
    for (int p = 0; p < PATH_COUNT; p++) {
      if (!plotted((bench_path)p) || bench_paths[p].sync_only != (pass == 1)) continue;
      for (size_t si = 0; si < o->size_count; si++) {
        const bench_row *row = bench_row_at(run, d, (bench_path)p, si);
        for (int side = 0; side < 2; side++) {
          double v;
          if (!point(row, side, &v)) continue;
          if (v < lo) lo = v;
          if ((pass == 0 || copies_hi == 0 || v <= copies_hi * 10) && v > hi) hi = v;
        }
      }
    }
  }
  P->empty = hi == 0;
  if (P->empty) {
    lo = 1;
    hi = 100;
  }
  double l0 = log10(lo), l1 = log10(hi);
  if (l1 - l0 < 0.6) {
    double mid = (l0 + l1) / 2;
    l0 = mid - 0.3;
    l1 = mid + 0.3;
  }
  double pad = (l1 - l0) * 0.06 + 0.03;
  P->ly0 = l0 - pad;
  P->ly1 = l1 + pad;
  for (int p = 0; p < PATH_COUNT; p++) {
    P->above[p] = 0;
    if (!plotted((bench_path)p)) continue;
    for (size_t si = 0; si < o->size_count; si++) {
      double v;
      if (point(bench_row_at(run, d, (bench_path)p, si), 0, &v) && log10(v) > P->ly1 && v > P->above[p])
        P->above[p] = v;
    }
  }
}

static bool any_above(const panel *P) {
  for (int p = 0; p < PATH_COUNT; p++)
    if (P->above[p] > 0) return true;
  return false;
}

static void draw_panel(FILE *f, const bench_run *run, const bench_device *d, size_t di, panel P, double ox, double oy,
                       double pw, double ph, double header) {
  const bench_options *o = &run->opt;
  P.x = ox + 70;
  P.y = oy + header;
  P.w = pw - 70 - 20;
  P.h = ph - header - 56;

  /* Panel frame and title. */
  fprintf(f, "<g class=\"panel\" data-device=\"%zu\">\n", d->info.index);
  fprintf(f,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" rx=\"8\" fill=\"#ffffff\" stroke=\"#d9dde3\"/>\n",
          ox, oy, pw, ph);
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"15\" font-weight=\"600\" fill=\"#1f2328\">device %zu · ", ox + 16,
          oy + 25, d->info.index);
  esc(f, d->info.backend);
  fputs(" · ", f);
  /* About 8.5 px a character at this size: a long name is cut to the panel's width. */
  size_t room = (size_t)((pw - 32) / 8.5), used = strlen(d->info.backend) + 14;
  char name[256];
  snprintf(name, sizeof name, "%s", d->info.name);
  if (room > used + 8 && strlen(name) > room - used) {
    size_t cut = room - used - 1;
    while (cut > 0 && ((unsigned char)name[cut] & 0xC0) == 0x80) /* not inside a UTF-8 character */
      cut--;
    name[cut] = '\0';
    esc(f, name);
    fputs("…", f);
  } else {
    esc(f, name);
  }
  fputs("<title>", f);
  esc(f, d->info.name);
  fputs("</title></text>\n", f);

  /* Lines that leave the top: which, and how far they go. */
  if (any_above(&P)) {
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11.5\" fill=\"#57606a\">▲ above the chart (sync only):", ox + 16,
            oy + 45);
    bool first = true;
    for (int p = 0; p < PATH_COUNT; p++) {
      if (P.above[p] <= 0) continue;
      char v[32];
      compact(P.above[p], v);
      fprintf(f, "%s <tspan fill=\"%s\" font-weight=\"600\">%s</tspan> to %s GB/s", first ? "" : ",", styles[p].colour,
              bench_paths[p].label, v);
      first = false;
    }
    fprintf(f, "</text>\n");
  }

  /* Gridlines and ticks: decades, with 2 and 5 labelled on short ranges. */
  double span = P.ly1 - P.ly0;
  fprintf(f, "<g font-size=\"11.5\" fill=\"#57606a\">\n");
  for (int e = (int)floor(P.ly0); e <= (int)ceil(P.ly1); e++) {
    for (int m = 1; m <= 9; m++) {
      double v = m * pow(10, e), l = log10(v);
      if (l < P.ly0 || l > P.ly1) continue;
      bool major = m == 1 || (span <= 2.2 && (m == 2 || m == 5));
      if (!major && span > 5) continue;
      double y = py(&P, v);
      fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1\"/>\n", P.x, y,
              P.x + P.w, y, major ? "#c8ced6" : "#eef0f3");
      if (major) {
        char label[32];
        tick_label(v, label);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" dominant-baseline=\"middle\">%s</text>\n", P.x - 8,
                y, label);
      }
    }
  }
  /* x: a gridline at every power of 2, labels on at most 10 of them, counted from the first size. */
  int k0 = (int)ceil(P.lx0), k1 = (int)floor(P.lx1);
  int first = (int)ceil(log2((double)o->sizes[0]) - 1e-9);
  int step = 1;
  while ((k1 - k0) / step + 1 > 10)
    step *= 2;
  for (int k = k0; k <= k1; k++) {
    bool labelled = ((k - first) % step + step) % step == 0;
    double x = px(&P, ldexp(1.0, k));
    char label[32];
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1\"/>\n", x, P.y, x,
            P.y + P.h, labelled ? "#c8ced6" : "#eef0f3");
    if (labelled)
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x, P.y + P.h + 18,
              bench_size_short((size_t)1 << k, label));
  }
  fprintf(f, "</g>\n");
  /* Axes and their labels. */
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#8c959f\"/>\n", P.x,
          P.y, P.w, P.h);
  fprintf(f,
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12.5\" fill=\"#1f2328\">transfer size "
          "(bytes, log scale)</text>\n",
          P.x + P.w / 2, P.y + P.h + 40);
  fprintf(f,
          "<text transform=\"translate(%.1f %.1f) rotate(-90)\" text-anchor=\"middle\" font-size=\"12.5\" "
          "fill=\"#1f2328\">bandwidth, GB/s (log scale)</text>\n",
          ox + 20, P.y + P.h / 2);
  if (P.empty)
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\" fill=\"#57606a\">no figures on "
            "this device</text>\n",
            P.x + P.w / 2, P.y + P.h / 2);

  /* The series, clipped to the plot area (with room for the markers at its edges). */
  fprintf(f,
          "<clipPath id=\"clip%zu\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/></clipPath>\n<g "
          "clip-path=\"url(#clip%zu)\">\n",
          di, P.x - 6, P.y - 1, P.w + 12, P.h + 2, di);
  for (int side = 1; side >= 0; side--) { /* raw first, so that ferry's lines lie on top */
    for (int p = 0; p < PATH_COUNT; p++) {
      size_t points = 0;
      double v;
      for (size_t si = 0; si < o->size_count; si++)
        points += point(bench_row_at(run, d, (bench_path)p, si), side, &v);
      if (points == 0) continue;
      const style *st = &styles[p];
      fprintf(f, "<g class=\"series\" data-device=\"%zu\" data-backend=\"", d->info.index);
      esc(f, d->info.backend);
      fprintf(f, "\" data-path=\"%s\" data-side=\"%s\"><title>device %zu (", bench_paths[p].id, side ? "raw" : "ferry",
              d->info.index);
      esc(f, d->info.backend);
      fprintf(f, "): %s, %s</title>\n", bench_paths[p].label, side ? "raw call" : "ferry");
      fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" stroke-linejoin=\"round\"%s points=\"",
              st->colour, side ? "1.6" : "2.4", side ? " stroke-dasharray=\"6 4\" stroke-opacity=\"0.85\"" : "");
      bool first = true;
      for (size_t si = 0; si < o->size_count; si++) {
        const bench_row *row = bench_row_at(run, d, (bench_path)p, si);
        if (!point(row, side, &v)) continue;
        fprintf(f, "%s%.1f,%.1f", first ? "" : " ", px(&P, (double)row->bytes), py(&P, v));
        first = false;
      }
      fprintf(f, "\"/>\n");
      for (size_t si = 0; si < o->size_count; si++) {
        const bench_row *row = bench_row_at(run, d, (bench_path)p, si);
        if (!point(row, side, &v)) continue;
        const bench_stats *t = side ? &row->raw : &row->ferry;
        double x = px(&P, (double)row->bytes), y = py(&P, v);
        if (!side) { /* the interquartile range, where it shows */
          double ya = py(&P, bench_figure(row, t->p75)), yb = py(&P, bench_figure(row, t->p25));
          if (ya - yb > 6)
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.2\"/>", x,
                    ya, x, yb, st->colour);
        }
        char size[32], num[32];
        if (y < P.y) { /* above the chart: an arrow on the top edge instead */
          fprintf(f, "<path d=\"M%.1f %.1f l-5 9 h10 z\" fill=\"%s\">", x, P.y + 1, st->colour);
        } else {
          marker(f, st->marker, x, y, side ? 3.4 : 4.0, st->colour, side);
        }
        compact(v, num);
        fprintf(f, "<title>%s %s, %s: %s GB/s</title>%s\n", bench_paths[p].label, side ? "raw" : "ferry",
                bench_size_text(row->bytes, size), num, y < P.y ? "</path>" : marker_end(st->marker));
      }
      fprintf(f, "</g>\n");
    }
  }
  fprintf(f, "</g>\n</g>\n");
}

int bench_write_svg(const char *path, const bench_run *run) {
  FILE *f = fopen(path, "w");
  if (!f) {
    bench_note("--plot %s: cannot write the file: %s", path, strerror(errno));
    return 1;
  }
  size_t n = run->device_count;
  int cols = n <= 1 ? 1 : 2;
  int rows = (int)((n + (size_t)cols - 1) / (size_t)cols);
  if (rows < 1) rows = 1;
  const double margin = 24, gap = 20, top = 74;
  double pw = cols == 1 ? 900 : 560, ph = 400;
  double width = margin * 2 + cols * pw + (cols - 1) * gap;

  /* Every panel's ranges first: a note about lines above the chart needs room in all of them. */
  panel *panels = calloc(n ? n : 1, sizeof *panels);
  if (!panels) {
    fclose(f);
    bench_note("--plot %s: no memory to lay the chart out", path);
    return 1;
  }
  double header = 40;
  bool above = false;
  for (size_t di = 0; di < n; di++) {
    fit(run, &run->devices[di], &panels[di]);
    if (any_above(&panels[di])) above = true;
  }
  if (above) header = 58;

  /* Which paths appear at all (the legend lists only those). */
  bool present[PATH_COUNT] = {false};
  bool any_raw = false;
  for (size_t di = 0; di < n; di++)
    for (int p = 0; p < PATH_COUNT; p++)
      for (size_t si = 0; si < run->opt.size_count; si++) {
        const bench_row *row = bench_row_at(run, &run->devices[di], (bench_path)p, si);
        double v;
        if (point(row, 0, &v)) present[p] = true;
        if (point(row, 1, &v)) any_raw = true;
      }
  int items = 0;
  for (int p = 0; p < PATH_COUNT; p++)
    items += present[p];
  const int legend_cols = 4;
  int legend_rows = (items + legend_cols - 1) / legend_cols + 1;
  double legend_h = 28 + legend_rows * 24.0;
  double height = top + rows * ph + (rows - 1) * gap + gap + legend_h + margin;

  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
          "font-family=\"%s\">\n",
          width, height, width, height, FONT);
  fprintf(f, "<title>ferry bench: bandwidth against transfer size</title>\n");
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#f6f8fa\"/>\n");
  fprintf(f,
          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"21\" font-weight=\"700\" fill=\"#1f2328\">ferry bench · bandwidth "
          "against transfer size</text>\n",
          margin, margin + 18);
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12.5\" fill=\"#57606a\">ferry %s · ", margin, margin + 40,
          ferry_version());
  esc(f, run->host);
  fprintf(f, " · %s · %s run · medians · higher is better</text>\n", run->started, run->opt.quick ? "quick" : "full");

  for (size_t di = 0; di < n; di++) {
    double ox = margin + (double)(di % (size_t)cols) * (pw + gap);
    double oy = top + (double)(di / (size_t)cols) * (ph + gap);
    draw_panel(f, run, &run->devices[di], di, panels[di], ox, oy, pw, ph, header);
  }

  /* The legend: a swatch per path, then what solid and dashed mean. */
  double ly = top + rows * ph + (rows - 1) * gap + gap;
  fprintf(f, "<g class=\"legend\" font-size=\"13\" fill=\"#1f2328\">\n");
  fprintf(f,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" rx=\"8\" fill=\"#ffffff\" stroke=\"#d9dde3\"/>\n",
          margin, ly, width - 2 * margin, legend_h);
  double col_w = (width - 2 * margin - 32) / legend_cols;
  int k = 0;
  for (int p = 0; p < PATH_COUNT; p++) {
    if (!present[p]) continue;
    double x = margin + 16 + (k % legend_cols) * col_w, y = ly + 24 + (k / legend_cols) * 24.0;
    fprintf(f, "<g class=\"legend-item\" data-path=\"%s\">", bench_paths[p].id);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.4\"/>", x, y,
            x + 34, y, styles[p].colour);
    marker(f, styles[p].marker, x + 17, y, 4.0, styles[p].colour, false);
    fprintf(f, "%s<text x=\"%.1f\" y=\"%.1f\" dominant-baseline=\"middle\">%s</text></g>\n",
            marker_end(styles[p].marker), x + 44, y, bench_paths[p].label);
    k++;
  }
  double y = ly + 24 + ((k + legend_cols - 1) / legend_cols) * 24.0;
  double x = margin + 16;
  fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#57606a\" stroke-width=\"2.4\"/>", x, y,
          x + 34, y);
  marker(f, "circle", x + 17, y, 4.0, "#57606a", false);
  fprintf(f, "</circle><text x=\"%.1f\" y=\"%.1f\" dominant-baseline=\"middle\">ferry</text>\n", x + 44, y);
  if (any_raw) {
    x += col_w;
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#57606a\" stroke-width=\"1.6\" "
            "stroke-dasharray=\"6 4\"/>",
            x, y, x + 34, y);
    marker(f, "circle", x + 17, y, 3.4, "#57606a", true);
    fprintf(f,
            "</circle><text x=\"%.1f\" y=\"%.1f\" dominant-baseline=\"middle\">raw call, same buffers<title>the "
            "call a program without ferry makes: memcpy, cuMemcpy*, clEnqueue*Buffer, vkCmdCopyBuffer</title></text>\n",
            x + 44, y);
  }
  x += col_w;
  fprintf(f,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#57606a\" stroke-width=\"1.2\"/><text "
          "x=\"%.1f\" y=\"%.1f\" dominant-baseline=\"middle\">interquartile range</text>\n",
          x + 17, y - 8, x + 17, y + 8, x + 44, y);
  if (above) {
    x += col_w;
    fprintf(f,
            "<path d=\"M%.1f %.1f l-5 9 h10 z\" fill=\"#57606a\"/><text x=\"%.1f\" y=\"%.1f\" "
            "dominant-baseline=\"middle\">above the chart (sync only)</text>\n",
            x + 17, y - 5, x + 44, y);
  }
  fprintf(f, "</g>\n</svg>\n");
  free(panels);
  int bad = ferror(f);
  if (fclose(f) != 0) bad = 1;
  if (bad) {
    bench_note("--plot %s: writing the file failed: %s", path, strerror(errno));
    return 1;
  }
  return 0;
}
