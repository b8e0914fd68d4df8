/*
 * `ferry bench --plot FILE.svg`: one row of panels per device (and one for the
 * copies between devices), each against the transfer size, both axes logarithmic:
 *
 *   bandwidth      GB/s of the copies (h2d, d2h, pinned, d2d, both ways on two queues;
 *                  peer and cross)
 *   time per op    microseconds of what moves no bytes: alloc+free and the sync rows;
 *                  and of write_async's submissions
 *   ferry / raw    the ratio of every path, around a line at 1 (above: ferry is faster),
 *                  so that a ferry line hidden under its raw line still shows
 *
 * Solid lines with filled markers are ferry, dashed lines with hollow markers the
 * raw call; vertical bars are the interquartile range where it is wider than a
 * few pixels. A point beyond a panel's axis (a ratio past 20x, say) is drawn as
 * an arrow on the panel's edge, with its value in the tooltip, and never off the
 * chart. Lines that lie on top of each other are named under the panel, and the
 * legend lists every path drawn.
 *
 * Every line is a <g class="series" data-panel=".." data-path=".." data-side="ferry|raw|ratio"
 * data-device=".."> (for copies between devices data-from and data-to instead of
 * data-device), holding one <polyline> and a marker per point, each with a <title>
 * (the browser shows it on hover), so that scripts and tests can read the chart back.
 */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PI 3.14159265358979323846

typedef struct style {
  const char *colour;
  const char *marker; /* circle, square, up, down, diamond, hexagon, star, pentagon, cross */
} style;

/* Okabe-Ito colours (told apart with the common colour-vision deficiencies), and a marker shape each;
 * the queue rows take two of Paul Tol's muted colours (wine, olive), chosen under the same rule,
 * as Okabe-Ito's last one (yellow) is too pale on white. */
static const style styles[PATH_DEVICE_COUNT] = {
    [PATH_H2D] = {"#0072B2", "circle"},        [PATH_D2H] = {"#D55E00", "square"},
    [PATH_H2D_PINNED] = {"#56B4E9", "up"},     [PATH_D2H_PINNED] = {"#E69F00", "down"},
    [PATH_HOST_PTR] = {"#009E73", "diamond"},  [PATH_ZERO_COPY] = {"#CC79A7", "hexagon"},
    [PATH_D2D] = {"#1f1f1f", "star"},          [PATH_ASYNC] = {"#882255", "pentagon"},
    [PATH_BOTH] = {"#999933", "cross"},        [PATH_ALLOC] = {"#8a8a8a", "circle"},
    [PATH_ASYNC_PINNED] = {"#882255", "down"}, [PATH_BOTH_PINNED] = {"#999933", "up"},
    [PATH_ELAPSED] = {"#332288", "diamond"},
};
/* Copies between devices, one style per pair, in turn. */
static const style pair_styles[] = {
    {"#0072B2", "circle"}, {"#D55E00", "square"}, {"#009E73", "diamond"}, {"#CC79A7", "hexagon"},
    {"#E69F00", "down"},   {"#56B4E9", "up"},     {"#1f1f1f", "star"},    {"#8a8a8a", "circle"},
};
#define PAIR_STYLES (sizeof pair_styles / sizeof pair_styles[0])

static const char *const FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif";

typedef enum panel_kind { PANEL_BANDWIDTH, PANEL_TIME, PANEL_RATIO, PANEL_KINDS } panel_kind;
static const char *const panel_ids[PANEL_KINDS] = {"bandwidth", "time", "ratio"};
static const char *const panel_titles[PANEL_KINDS] = {"bandwidth, GB/s", "time per operation, microseconds",
                                                      "ferry / raw (above 1: ferry is faster)"};
/* Ratios beyond these are drawn as arrows on the panel's edge. */
#define RATIO_LOW  (1.0 / 20)
#define RATIO_HIGH 20.0

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
  } else if (strcmp(shape, "pentagon") == 0) { /* point up */
    for (n = 0; n < 5; n++) {
      pts[n][0] = 1.2 * r * sin(2 * BENCH_PI / 5 * n);
      pts[n][1] = -1.2 * r * cos(2 * BENCH_PI / 5 * n);
    }
  } else if (strcmp(shape, "cross") == 0) { /* a plus sign, arms a third of its width */
    double a = 1.25 * r, b = 0.42 * r;
    double q[12][2] = {{-b, -a}, {b, -a}, {b, -b}, {a, -b}, {a, b},   {b, b},
                       {b, a},   {-b, a}, {-b, b}, {-a, b}, {-a, -b}, {-b, -b}};
    memcpy(pts, q, sizeof q);
    n = 12;
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

/* ---- the lines ------------------------------------------------------------------------ */

/* One line on a panel: a path (or a pair) of one target, one side. */
typedef struct series {
  panel_kind panel;
  int side; /* 0 ferry, 1 raw, 2 the ratio */
  bench_path path;
  const bench_device *d; /* a device's line, or */
  const bench_pair *p;   /* a pair's */
  style st;
  char label[48];
  const bench_row *rows[BENCH_MAX_SIZES];
  double v[BENCH_MAX_SIZES]; /* the value in the panel's unit */
  int n;
} series;

/* The value of a row on a panel for a side; false when there is none. */
static bool value_of(const bench_row *row, panel_kind k, int side, double *out) {
  if (row->status != ROW_OK) return false;
  double v;
  if (k == PANEL_RATIO) {
    v = bench_ratio(row);
  } else {
    if (side == 1 && row->raw_count == 0) return false;
    double t = side == 1 ? row->raw[0].t.median : row->ferry.median;
    v = k == PANEL_TIME ? t * 1e6 : bench_figure(row, t);
  }
  if (!(v > 0) || !isfinite(v)) return false;
  *out = v;
  return true;
}

static panel_kind kind_of(bench_path p) { return bench_paths[p].latency ? PANEL_TIME : PANEL_BANDWIDTH; }

/* Fills *s with the points of one line; false when it has none. */
static bool gather(const bench_run *run, series *s) {
  s->n = 0;
  for (size_t si = 0; si < run->opt.size_count; si++) {
    const bench_row *row = s->p ? bench_pair_row(run, s->p, si) : bench_device_row(run, s->d, s->path, si);
    double v;
    if (!value_of(row, s->panel, s->side, &v)) continue;
    s->rows[s->n] = row;
    s->v[s->n++] = v;
  }
  return s->n > 0;
}

/* The lines of a target (a device, or every pair when d is NULL), in drawing order. */
static int lines_of(const bench_run *run, const bench_device *d, series *out, int max) {
  int n = 0;
  for (int k = 0; k < PANEL_KINDS; k++) {
    for (int side = 1; side >= 0; side--) { /* raw first, so that ferry's lines lie on top */
      int s = k == PANEL_RATIO ? 2 : side;
      if (k == PANEL_RATIO && side == 1) continue;
      if (d) {
        for (int p = 0; p < PATH_DEVICE_COUNT && n < max; p++) {
          if (!run->opt.paths[p] || (k != PANEL_RATIO && kind_of((bench_path)p) != (panel_kind)k)) continue;
          series *x = &out[n];
          memset(x, 0, sizeof *x);
          x->panel = (panel_kind)k;
          x->side = s;
          x->path = (bench_path)p;
          x->d = d;
          x->st = styles[p];
          snprintf(x->label, sizeof x->label, "%s", bench_paths[p].label);
          if (gather(run, x)) n++;
        }
      } else {
        if (k == PANEL_TIME) continue;
        for (size_t i = 0; i < run->pair_count && n < max; i++) {
          series *x = &out[n];
          memset(x, 0, sizeof *x);
          x->panel = (panel_kind)k;
          x->side = s;
          x->p = &run->pairs[i];
          x->path = x->p->path;
          x->st = pair_styles[i % PAIR_STYLES];
          bench_pair_label(run, x->p, x->label);
          if (gather(run, x)) n++;
        }
      }
    }
  }
  return n;
}

/* ---- one panel ----------------------------------------------------------------------- */

typedef struct panel {
  panel_kind kind;
  double x, y, w, h;         /* the plot area */
  double lx0, lx1, ly0, ly1; /* log2(size) and log10(value) at its edges */
  bool empty;
} panel;

static double px(const panel *P, double bytes) { return P->x + (log2(bytes) - P->lx0) / (P->lx1 - P->lx0) * P->w; }
static double py(const panel *P, double v) { return P->y + P->h - (log10(v) - P->ly0) / (P->ly1 - P->ly0) * P->h; }

/* The axes' ranges: x the sizes, with room for the markers; y the values, the
 * ratio's within RATIO_LOW..RATIO_HIGH and always around 1. */
static void fit(const bench_run *run, panel *P, const series *const *s, int n) {
  const bench_options *o = &run->opt;
  P->lx0 = log2((double)o->sizes[0]) - 0.4;
  P->lx1 = log2((double)o->sizes[o->size_count - 1]) + 0.4;
  if (o->size_count == 1) {
    P->lx0 -= 1;
    P->lx1 += 1;
  }
  double lo = INFINITY, hi = 0;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < s[i]->n; k++) {
      double v = s[i]->v[k];
      if (P->kind == PANEL_RATIO) v = v < RATIO_LOW ? RATIO_LOW : v > RATIO_HIGH ? RATIO_HIGH : v;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  P->empty = hi == 0;
  if (P->empty) {
    lo = 1;
    hi = 100;
  }
  if (P->kind == PANEL_RATIO) {
    if (lo > 1 / 1.5) lo = 1 / 1.5;
    if (hi < 1.5) hi = 1.5;
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
}

static void grid(FILE *f, const bench_run *run, const panel *P) {
  double span = P->ly1 - P->ly0;
  fprintf(f, "<g font-size=\"11\" fill=\"#57606a\">\n");
  for (int e = (int)floor(P->ly0); e <= (int)ceil(P->ly1); e++) {
    for (int m = 1; m <= 9; m++) {
      double v = m * pow(10, e), l = log10(v);
      if (l < P->ly0 || l > P->ly1) continue;
      bool major = m == 1 || (span <= 2.2 && (m == 2 || m == 5));
      if (!major && span > 5) continue;
      double y = py(P, v);
      fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1\"/>\n", P->x, y,
              P->x + P->w, y, major ? "#c8ced6" : "#eef0f3");
      if (major) {
        char label[32];
        tick_label(v, label);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" dominant-baseline=\"middle\">%s%s</text>\n",
                P->x - 6, y, label, P->kind == PANEL_RATIO ? "x" : "");
      }
    }
  }
  /* x: a gridline at every power of 2, labels on at most 8 of them, counted from the first size. */
  const bench_options *o = &run->opt;
  int k0 = (int)ceil(P->lx0), k1 = (int)floor(P->lx1);
  int first = (int)ceil(log2((double)o->sizes[0]) - 1e-9);
  int step = 1;
  while ((k1 - k0) / step + 1 > 8)
    step *= 2;
  for (int k = k0; k <= k1; k++) {
    bool labelled = ((k - first) % step + step) % step == 0;
    double x = px(P, ldexp(1.0, k));
    char label[32];
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1\"/>\n", x, P->y, x,
            P->y + P->h, labelled ? "#c8ced6" : "#eef0f3");
    if (labelled)
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x, P->y + P->h + 16,
              bench_size_short((size_t)1 << k, label));
  }
  fprintf(f, "</g>\n");
}

static void series_open(FILE *f, const bench_run *run, const series *s) {
  fprintf(f, "<g class=\"series\" data-panel=\"%s\" data-path=\"%s\" data-side=\"%s\"", panel_ids[s->panel],
          bench_paths[s->path].id,
          s->side == 2 ? "ratio"
          : s->side    ? "raw"
                       : "ferry");
  if (s->d)
    fprintf(f, " data-device=\"%zu\"><title>device %zu (", s->d->info.index, s->d->info.index);
  else
    fprintf(f, " data-from=\"%zu\" data-to=\"%zu\"><title>between devices (", run->devices[s->p->from].info.index,
            run->devices[s->p->to].info.index);
  esc(f, s->d ? s->d->info.backend : "copies");
  fprintf(f, "): ");
  esc(f, s->label);
  fprintf(f, ", %s</title>\n", s->side == 2 ? "ferry / raw" : s->side ? "raw call" : "ferry");
}

/* The text of a point's value: "12.3 GB/s", "0.064 us", "1.04x". */
static void value_text(panel_kind k, double v, char buf[48]) {
  char n[32];
  compact(v, n);
  snprintf(buf, 48, "%s%s", n, k == PANEL_BANDWIDTH ? " GB/s" : k == PANEL_TIME ? " us" : "x");
}

static void draw_series(FILE *f, const bench_run *run, const panel *P, const series *s) {
  series_open(f, run, s);
  bool raw = s->side == 1;
  /* The line goes through the points, clamped to the plot area's edges. */
  fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" stroke-linejoin=\"round\"%s points=\"",
          s->st.colour, raw ? "1.5" : "2.2", raw ? " stroke-dasharray=\"6 4\" stroke-opacity=\"0.85\"" : "");
  for (int k = 0; k < s->n; k++) {
    double y = py(P, s->v[k]);
    y = y < P->y ? P->y : y > P->y + P->h ? P->y + P->h : y;
    fprintf(f, "%s%.1f,%.1f", k ? " " : "", px(P, (double)s->rows[k]->bytes), y);
  }
  fprintf(f, "\"/>\n");
  for (int k = 0; k < s->n; k++) {
    const bench_row *row = s->rows[k];
    double x = px(P, (double)row->bytes), y = py(P, s->v[k]);
    if (s->side == 0 && P->kind != PANEL_RATIO) { /* the interquartile range, where it shows */
      const bench_stats *t = &row->ferry;
      double a = P->kind == PANEL_TIME ? t->p75 * 1e6 : bench_figure(row, t->p75);
      double b = P->kind == PANEL_TIME ? t->p25 * 1e6 : bench_figure(row, t->p25);
      double ya = py(P, a), yb = py(P, b);
      double top = ya < yb ? ya : yb, bottom = ya < yb ? yb : ya;
      if (top < P->y) top = P->y;
      if (bottom > P->y + P->h) bottom = P->y + P->h;
      if (bottom - top > 6)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.2\"/>", x, top,
                x, bottom, s->st.colour);
    }
    char size[32], v[48];
    value_text(P->kind, s->v[k], v);
    if (y < P->y || y > P->y + P->h) { /* beyond the axis: an arrow on the edge, the value in the tooltip */
      bool up = y < P->y;
      fprintf(f, "<path class=\"clipped\" d=\"M%.1f %.1f l-5.5 %d h11 z\" fill=\"%s\">", x, up ? P->y : P->y + P->h,
              up ? 10 : -10, s->st.colour);
      fprintf(f, "<title>");
      esc(f, s->label);
      fprintf(f, " %s, %s: %s (beyond the axis)</title></path>\n", s->side == 1 ? "raw" : "ferry",
              bench_size_text(row->bytes, size), v);
      continue;
    }
    marker(f, s->st.marker, x, y, raw ? 3.3 : 3.9, s->st.colour, raw);
    fprintf(f, "<title>");
    esc(f, s->label);
    fprintf(f, " %s, %s: %s</title>%s\n",
            s->side == 2 ? "ferry / raw"
            : raw        ? "raw"
                         : "ferry",
            bench_size_text(row->bytes, size), v, marker_end(s->st.marker));
  }
  fprintf(f, "</g>\n");
}

/* Two ferry lines whose points all lie within 2 px of each other: the later hides the earlier. */
static bool coincide(const panel *P, const series *a, const series *b) {
  if (a->n != b->n || a->n == 0) return false;
  for (int k = 0; k < a->n; k++) {
    if (a->rows[k]->bytes != b->rows[k]->bytes) return false;
    if (fabs(py(P, a->v[k]) - py(P, b->v[k])) > 2) return false;
  }
  return true;
}

static void draw_panel(FILE *f, const bench_run *run, panel *P, const series *all, int count, double ox, double oy,
                       double pw, double ph, int id) {
  const series *s[3 * PATH_COUNT + 64]; /* this panel's lines */
  int n = 0;
  for (int i = 0; i < count && n < (int)(sizeof s / sizeof s[0]); i++)
    if (all[i].panel == P->kind) s[n++] = &all[i];
  P->x = ox + 52;
  P->y = oy + 26;
  P->w = pw - 52 - 14;
  P->h = ph - 26 - 54;
  fit(run, P, s, n);

  fprintf(f, "<g class=\"panel\" data-kind=\"%s\">\n", panel_ids[P->kind]);
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12.5\" font-weight=\"600\" fill=\"#1f2328\">%s</text>\n", P->x,
          oy + 16, panel_titles[P->kind]);
  if (P->kind == PANEL_RATIO && !P->empty) { /* ferry faster above 1, slower below */
    double y1 = py(P, 1);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#eaf6ee\"/>\n", P->x, P->y, P->w,
            y1 - P->y);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fbeeec\"/>\n", P->x, y1, P->w,
            P->y + P->h - y1);
  }
  grid(f, run, P);
  fprintf(f,
          "<rect class=\"plot-area\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
          "stroke=\"#8c959f\"/>\n",
          P->x, P->y, P->w, P->h);
  fprintf(f,
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11.5\" fill=\"#57606a\">transfer size "
          "(bytes)</text>\n",
          P->x + P->w / 2, P->y + P->h + 32);
  if (P->kind == PANEL_RATIO && !P->empty) {
    double y1 = py(P, 1);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#57606a\" stroke-width=\"1.3\"/>\n",
            P->x, y1, P->x + P->w, y1);
  }
  if (P->empty) {
    const char *why = P->kind == PANEL_TIME ? "no alloc+free or sync rows" : "no figures";
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\" fill=\"#8c959f\">%s</text>\n",
            P->x + P->w / 2, P->y + P->h / 2, why);
  }
  /* The lines, clipped to the plot area with room for the markers on its edges. */
  fprintf(f,
          "<clipPath id=\"clip%d\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/></clipPath>\n<g "
          "clip-path=\"url(#clip%d)\">\n",
          id, P->x - 7, P->y - 7, P->w + 14, P->h + 14, id);
  for (int i = 0; i < n; i++)
    draw_series(f, run, P, s[i]);
  fprintf(f, "</g>\n");
  /* Which lines hide under others. */
  char note[512] = "";
  size_t used = 0;
  for (int i = 0; i < n; i++) {
    if (s[i]->side == 1) continue;
    for (int j = i + 1; j < n; j++) {
      if (s[j]->side != s[i]->side || !coincide(P, s[i], s[j])) continue;
      int w = snprintf(note + used, sizeof note - used, "%s%s under %s", used ? ", " : "", s[i]->label, s[j]->label);
      if (w > 0 && used + (size_t)w < sizeof note) used += (size_t)w;
      break;
    }
  }
  if (used) {
    fprintf(f, "<text class=\"hidden-lines\" x=\"%.1f\" y=\"%.1f\" font-size=\"10.5\" fill=\"#57606a\">hidden: ", P->x,
            P->y + P->h + 47);
    esc(f, note);
    fprintf(f, "<title>these lines lie on the ones named after them; the legend lists every line</title></text>\n");
  }
  fprintf(f, "</g>\n");
}

/* ---- the chart ---------------------------------------------------------------------- */

static void row_title(FILE *f, const bench_run *run, const bench_device *d, double x, double y, double width) {
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"15\" font-weight=\"600\" fill=\"#1f2328\">", x, y);
  if (!d) {
    fprintf(f, "between devices · ferry_device_to_device from device A into device B (A&gt;B)</text>\n");
    return;
  }
  fprintf(f, "device %zu · ", d->info.index);
  esc(f, d->info.backend);
  fputs(" · ", f);
  /* About 8.5 px a character at this size: a long name is cut to the width. */
  size_t room = (size_t)(width / 8.5), used = strlen(d->info.backend) + 14;
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
  char driver[700];
  if (d->has_driver && tool_driver_text(&d->driver, driver, sizeof driver)[0]) {
    if (strlen(driver) > 150) strcpy(driver + 147, "...");
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11.5\" fill=\"#57606a\">", x, y + 17);
    esc(f, driver);
    if (d->raw)
      fprintf(f, " · raw: the %s driver's own calls%s", d->info.backend, d->alt ? ", the faster of two ways" : "");
    fputs("</text>\n", f);
  }
  (void)run;
}

int bench_write_svg(tool_output *out, const bench_run *run) {
  const char *path = out->path;
  FILE *f = tool_output_begin(out);
  if (!f) {
    bench_note("--plot %s: cannot write the file: %s", path, strerror(errno));
    return 1;
  }
  bool device_rows = false;
  for (int p = 0; p < PATH_DEVICE_COUNT; p++)
    device_rows = device_rows || run->opt.paths[p];
  size_t rows = (device_rows ? run->device_count : 0) + (run->pair_count ? 1 : 0);
  const double margin = 24, gap = 18, top = 70, head = 40, pw = 410, ph = 300, row_gap = 26;
  double width = margin * 2 + 3 * pw + 2 * gap;
  size_t max_lines = 3 * PATH_COUNT + 3 * run->pair_count + 8;
  series *lines = calloc(max_lines, sizeof *lines);
  if (!lines) {
    tool_output_close(out);
    bench_note("--plot %s: no memory to lay the chart out", path);
    return 1;
  }

  /* Which paths and pairs are drawn at all (the legend lists those). */
  bool present[PATH_DEVICE_COUNT] = {false}, any_raw = false;
  for (size_t di = 0; device_rows && di < run->device_count; di++) {
    int n = lines_of(run, &run->devices[di], lines, (int)max_lines);
    for (int i = 0; i < n; i++) {
      present[lines[i].path] = true;
      any_raw = any_raw || lines[i].side == 1;
    }
  }
  int path_items = 0;
  for (int p = 0; p < PATH_DEVICE_COUNT; p++)
    path_items += present[p];
  const int legend_cols = 5;
  /* Rows: the paths, the pairs (after a label of their own), the line styles. */
  int legend_rows = (path_items + legend_cols - 1) / legend_cols + 1;
  if (run->pair_count) legend_rows += ((int)run->pair_count + legend_cols - 2) / (legend_cols - 1);
  double legend_h = 24 + legend_rows * 24.0;
  double height = top + (double)rows * (head + ph + row_gap) + legend_h + margin;

  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
          "font-family=\"%s\">\n",
          width, height, width, height, FONT);
  fprintf(f, "<title>ferry bench: ferry against the raw driver calls, by transfer size</title>\n");
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#f6f8fa\"/>\n");
  fprintf(f,
          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"21\" font-weight=\"700\" fill=\"#1f2328\">ferry bench · ferry "
          "against the raw driver calls</text>\n",
          margin, margin + 18);
  char version[128], mem[32];
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12.5\" fill=\"#57606a\">", margin, margin + 38);
  esc(f, tool_version_text(version));
  fputs(" · ", f);
  esc(f, run->sys.os);
  fputs(" · ", f);
  esc(f, run->sys.cpu);
  fprintf(f, " (%ld processor%s, %s) · %s · %s run%s · medians of interleaved samples</text>\n", run->sys.cpus,
          run->sys.cpus == 1 ? "" : "s", bench_size_approx(run->sys.memory, mem), run->sys.started,
          run->opt.quick ? "quick" : "full", run->interrupted ? ", interrupted: partial" : "");

  double y = top;
  int clip = 0;
  for (size_t r = 0; r < rows; r++) {
    const bench_device *d = device_rows && r < run->device_count ? &run->devices[r] : NULL;
    fprintf(f, "<g class=\"target\" %s=\"%zu\">\n", d ? "data-device" : "data-pairs",
            d ? d->info.index : run->pair_count);
    fprintf(f,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" rx=\"8\" fill=\"#ffffff\" "
            "stroke=\"#d9dde3\"/>\n",
            margin - 8, y - 4, width - 2 * margin + 16, head + ph + 4);
    row_title(f, run, d, margin + 6, y + 16, width - 2 * margin);
    int n = lines_of(run, d, lines, (int)max_lines);
    for (int k = 0; k < PANEL_KINDS; k++) {
      if (!d && k == PANEL_TIME) continue;
      panel P = {.kind = (panel_kind)k};
      int slot = !d && k == PANEL_RATIO ? 1 : k;
      draw_panel(f, run, &P, lines, n, margin + slot * (pw + gap), y + head, pw, ph, clip++);
    }
    fprintf(f, "</g>\n");
    y += head + ph + row_gap;
  }

  /* The legend: a swatch per path and pair, then what the line styles mean. */
  fprintf(f, "<g class=\"legend\" font-size=\"12.5\" fill=\"#1f2328\">\n");
  fprintf(f,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" rx=\"8\" fill=\"#ffffff\" stroke=\"#d9dde3\"/>\n",
          margin - 8, y - 4, width - 2 * margin + 16, legend_h);
  double col_w = (width - 2 * margin) / legend_cols;
  int line = 0, k = 0; /* the legend's line, and the item on it */
  for (int i = 0; i < PATH_DEVICE_COUNT + (int)run->pair_count; i++) {
    style st;
    char label[48];
    const char *attr;
    if (i < PATH_DEVICE_COUNT) {
      if (!present[i]) continue;
      st = styles[i];
      snprintf(label, sizeof label, "%s", bench_paths[i].label);
      attr = "data-path";
    } else {
      if (i == PATH_DEVICE_COUNT) { /* the pairs start a line of their own, after a label */
        if (k) line++;
        fprintf(f,
                "<text x=\"%.1f\" y=\"%.1f\" dominant-baseline=\"middle\" fill=\"#57606a\">between devices:</text>\n",
                margin + 8, y + 18 + line * 24.0);
        k = 1;
      }
      const bench_pair *p = &run->pairs[i - PATH_DEVICE_COUNT];
      st = pair_styles[(size_t)(i - PATH_DEVICE_COUNT) % PAIR_STYLES];
      bench_pair_label(run, p, label);
      attr = "data-pair";
    }
    if (k == legend_cols) {
      line++;
      k = i >= PATH_DEVICE_COUNT ? 1 : 0;
    }
    double x = margin + 8 + k * col_w, ly = y + 18 + line * 24.0;
    fprintf(f, "<g class=\"legend-item\" %s=\"", attr);
    esc(f, i < PATH_DEVICE_COUNT ? bench_paths[i].id : label);
    fprintf(f, "\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.2\"/>", x, ly,
            x + 32, ly, st.colour);
    marker(f, st.marker, x + 16, ly, 3.9, st.colour, false);
    fprintf(f, "%s<text x=\"%.1f\" y=\"%.1f\" dominant-baseline=\"middle\">", marker_end(st.marker), x + 40, ly);
    esc(f, label);
    fprintf(f, "</text></g>\n");
    k++;
  }
  if (k) line++;
  double ly = y + 18 + line * 24.0, x = margin + 8;
  fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#57606a\" stroke-width=\"2.2\"/>", x, ly,
          x + 32, ly);
  marker(f, "circle", x + 16, ly, 3.9, "#57606a", false);
  fprintf(f, "</circle><text x=\"%.1f\" y=\"%.1f\" dominant-baseline=\"middle\">ferry</text>\n", x + 40, ly);
  if (any_raw || run->pair_count) {
    x += col_w;
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#57606a\" stroke-width=\"1.5\" "
            "stroke-dasharray=\"6 4\"/>",
            x, ly, x + 32, ly);
    marker(f, "circle", x + 16, ly, 3.3, "#57606a", true);
    fprintf(f,
            "</circle><text x=\"%.1f\" y=\"%.1f\" dominant-baseline=\"middle\">raw call, same buffers<title>what a "
            "program written against the device does: memcpy, cuMemcpy*, clEnqueue*Buffer or map, vkCmdCopyBuffer "
            "or mapped memory; of two ways the faster</title></text>\n",
            x + 40, ly);
  }
  x += col_w;
  fprintf(f,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#57606a\" stroke-width=\"1.2\"/><text "
          "x=\"%.1f\" y=\"%.1f\" dominant-baseline=\"middle\">interquartile range</text>\n",
          x + 16, ly - 8, x + 16, ly + 8, x + 40, ly);
  x += col_w;
  fprintf(f,
          "<path d=\"M%.1f %.1f l-5.5 10 h11 z\" fill=\"#57606a\"/><text x=\"%.1f\" y=\"%.1f\" "
          "dominant-baseline=\"middle\">beyond the axis (hover: the value)</text>\n",
          x + 16, ly - 5, x + 40, ly);
  fprintf(f, "</g>\n</svg>\n");
  free(lines);
  if (tool_output_close(out) != 0) {
    bench_note("--plot %s: writing the file failed: %s", path, strerror(errno));
    return 1;
  }
  return 0;
}
