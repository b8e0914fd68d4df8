/* `ferry bench`: --json and --csv. Both hold every row of the paths asked for,
 * skipped ones included (with the reason). docs/JSON.md describes every field. */
#include "bench.h"
#include "tool.h"

#include <errno.h>
#include <math.h>
#include <string.h>

/* The five numbers of a figure in its unit (GB/s: the slowest sample is the minimum). */
typedef struct figure5 {
  double min, p25, median, p75, max;
} figure5;

static figure5 in_unit(const bench_row *row, const bench_stats *t) {
  if (bench_paths[row->path].latency)
    return (figure5){bench_figure(row, t->min), bench_figure(row, t->p25), bench_figure(row, t->median),
                     bench_figure(row, t->p75), bench_figure(row, t->max)};
  return (figure5){bench_figure(row, t->max), bench_figure(row, t->p75), bench_figure(row, t->median),
                   bench_figure(row, t->p25), bench_figure(row, t->min)};
}

static const char *status_name(bench_row_status s) {
  return s == ROW_OK ? "ok" : s == ROW_FAILED ? "failed" : "skipped";
}

static const char *unit_of(bench_path p) { return bench_paths[p].latency ? "us" : "GB/s"; }

/* Why a row was skipped, in words (a size over the cap has no sentence of its own). */
static void skip_reason(const bench_row *row, size_t cap, const char *cap_reason, char *buf, size_t size) {
  char text[32];
  if (row->error)
    snprintf(buf, size, "%s", row->error);
  else if (row->bytes > cap)
    snprintf(buf, size, "over the size cap of %s: %s", bench_size_approx(cap, text), cap_reason);
  else
    snprintf(buf, size, "not measured");
}

static FILE *open_out(tool_output *out, const char *option) {
  FILE *f = tool_output_begin(out);
  if (!f) bench_note("%s %s: cannot write the file: %s", option, out->path, strerror(errno));
  return f;
}

static int close_out(tool_output *out, const char *option) {
  if (tool_output_close(out) != 0) {
    bench_note("%s %s: writing the file failed: %s", option, out->path, strerror(errno));
    return 1;
  }
  return 0;
}

/* ---- JSON ------------------------------------------------------------------------- */

static void jnum(FILE *f, double v) {
  if (isfinite(v))
    fprintf(f, "%.6g", v);
  else
    fputs("null", f);
}

/* A GB/s figure, null where it was not measured (0). */
static void jrate(FILE *f, double v) {
  if (v > 0)
    jnum(f, v);
  else
    fputs("null", f);
}

/* devices[].host_limit: null where the run did not measure it. */
static void jlimit(FILE *f, const bench_run *run, const bench_device *d) {
  const bench_host_limit *l = &d->limit;
  const bench_host_copy *h = &run->host_copy;
  if (!l->measured) {
    fputs("null", f);
    return;
  }
  fprintf(f, "{\"limit_h2d_gbs\": ");
  jrate(f, bench_limit_of(run, d, true));
  fprintf(f, ", \"limit_d2h_gbs\": ");
  jrate(f, bench_limit_of(run, d, false));
  fprintf(f, ", \"pinned_bytes\": %zu, \"pinned_h2d_gbs\": ", l->pinned_bytes);
  jrate(f, l->pinned_h2d);
  fprintf(f, ", \"pinned_d2h_gbs\": ");
  jrate(f, l->pinned_d2h);
  fprintf(f, ", \"host_copy_gbs\": ");
  jrate(f, h->measured ? h->gbs : 0);
  fprintf(f, ", \"host_copy_threads\": %d, \"host_copy_one_thread_gbs\": ", h->measured ? h->threads : 0);
  jrate(f, h->measured ? h->one_thread_gbs : 0);
  fprintf(f, ", \"host_copy_bytes\": %zu, \"last_level_cache\": ", h->bytes);
  if (h->llc_known)
    fprintf(f, "%zu", h->llc);
  else
    fputs("null", f);
  fprintf(f, ", \"cold\": [");
  bool pinned_is_limit = bench_pinned_is_limit(run, d);
  for (size_t i = 0; i < l->cold_count; i++) {
    const bench_cold *c = &l->cold[i];
    double warm[2], target = bench_limit_target(c->bytes, pinned_is_limit);
    bench_limit_warm(run, d, c->bytes, warm);
    fprintf(f, "%s\n        {\"bytes\": %zu, \"slices\": %zu, \"warm_h2d_gbs\": ", i ? "," : "", c->bytes, c->slices);
    jrate(f, warm[0]);
    fprintf(f, ", \"cold_h2d_gbs\": ");
    jrate(f, c->h2d);
    fprintf(f, ", \"warm_d2h_gbs\": ");
    jrate(f, warm[1]);
    fprintf(f, ", \"cold_d2h_gbs\": ");
    jrate(f, c->d2h);
    fprintf(f, ", \"target\": ");
    jrate(f, target);
    fprintf(f, ", \"error\": ");
    tool_json_string(f, c->why[0] ? c->why : NULL);
    fputc('}', f);
  }
  fprintf(f, "%s]}", l->cold_count ? "\n      " : "");
}

static void jfigure(FILE *f, const bench_row *row, const bench_stats *t, long ops) {
  figure5 v = in_unit(row, t);
  fputs("{\"median\": ", f);
  jnum(f, v.median);
  fputs(", \"p25\": ", f);
  jnum(f, v.p25);
  fputs(", \"p75\": ", f);
  jnum(f, v.p75);
  fputs(", \"min\": ", f);
  jnum(f, v.min);
  fputs(", \"max\": ", f);
  jnum(f, v.max);
  fputs(", \"time_us\": {\"median\": ", f);
  jnum(f, t->median * 1e6);
  fputs(", \"p25\": ", f);
  jnum(f, t->p25 * 1e6);
  fputs(", \"p75\": ", f);
  jnum(f, t->p75 * 1e6);
  fputs(", \"min\": ", f);
  jnum(f, t->min * 1e6);
  fputs(", \"max\": ", f);
  jnum(f, t->max * 1e6);
  fprintf(f, "}, \"ops_per_sample\": %ld}", ops);
}

/* One result; `raw_tag` and the calls come from the device (d) or the pair (p). */
static void jresult(FILE *f, const bench_run *run, const bench_device *d, const bench_pair *p, const bench_row *row,
                    size_t cap, const char *cap_reason) {
  char call[512], reason[512];
  fprintf(f, "{\"path\": \"%s\", \"size\": %zu, \"status\": \"%s\", \"unit\": \"%s\", \"samples\": ",
          bench_paths[row->path].id, row->bytes, status_name(row->status), unit_of(row->path));
  bool ok = row->status == ROW_OK;
  if (row->status == ROW_SKIPPED)
    fputs("null", f);
  else
    fprintf(f, "%d", row->samples);
  fprintf(f, ", \"verified\": %s, \"ferry\": ", row->verified && ok ? "true" : "false");
  if (ok)
    jfigure(f, row, &row->ferry, row->ferry_ops);
  else
    fputs("null", f);
  bool raw = ok && row->raw_count > 0;
  fputs(", \"raw\": ", f);
  if (raw)
    jfigure(f, row, &row->raw[0].t, row->raw[0].ops);
  else
    fputs("null", f);
  fputs(", \"raw_way\": ", f);
  tool_json_string(f, raw ? bench_row_raw_tag(d, p, row, 0) : NULL);
  fputs(", \"raw_call\": ", f);
  tool_json_string(f, raw ? bench_row_raw_call(run, d, p, row, 0, call, sizeof call) : NULL);
  fputs(", \"raw_other\": ", f);
  if (raw && row->raw_count > 1) {
    fputs("{\"way\": ", f);
    tool_json_string(f, bench_row_raw_tag(d, p, row, 1));
    fputs(", \"call\": ", f);
    tool_json_string(f, bench_row_raw_call(run, d, p, row, 1, call, sizeof call));
    fputs(", \"figure\": ", f);
    jfigure(f, row, &row->raw[1].t, row->raw[1].ops);
    fputc('}', f);
  } else {
    fputs("null", f);
  }
  fputs(", \"ratio\": ", f);
  double r = bench_ratio(row);
  if (r > 0)
    jnum(f, r);
  else
    fputs("null", f);
  fputs(", \"error\": ", f);
  tool_json_string(f, row->status == ROW_FAILED ? row->error : NULL);
  fputs(", \"raw_error\": ", f);
  tool_json_string(f, row->raw_error);
  fputs(", \"reason\": ", f);
  if (row->status == ROW_SKIPPED) {
    skip_reason(row, cap, cap_reason, reason, sizeof reason);
    tool_json_string(f, reason);
  } else {
    fputs("null", f);
  }
  fputc('}', f);
}

static void jcalls(FILE *f, const bench_run *run, const bench_device *d) {
  fputs("[", f);
  for (int way = 0; d->raw && way < (d->alt ? 2 : 1); way++) {
    fprintf(f, "%s{\"way\": ", way ? ", " : "");
    tool_json_string(f, bench_raw_tag(d->raw, way));
    fputs(", \"calls\": {", f);
    bool first = true;
    for (int p = 0; p < PATH_DEVICE_COUNT; p++) {
      char call[512];
      if (!run->opt.paths[p] || !bench_raw_call(d, (bench_path)p, way, call, sizeof call)) continue;
      fprintf(f, "%s\"%s\": ", first ? "" : ", ", bench_paths[p].id);
      tool_json_string(f, call);
      first = false;
    }
    fputs("}}", f);
  }
  fputs("]", f);
}

int bench_write_json(tool_output *out, const bench_run *run) {
  FILE *f = open_out(out, "--json");
  if (!f) return 1;
  const bench_options *o = &run->opt;
  fprintf(f, "{\n  \"schema_version\": %d,\n  \"tool\": \"ferry bench\",\n", TOOL_SCHEMA_VERSION);
  tool_json_context(f, &run->sys, 2);
  fprintf(f, "  \"quick\": %s,\n  \"repeat\": ", o->quick ? "true" : "false");
  if (o->repeat)
    fprintf(f, "%d", o->repeat);
  else
    fputs("null", f);
  fprintf(f, ",\n  \"sizes\": [");
  for (size_t i = 0; i < o->size_count; i++)
    fprintf(f, "%s%zu", i ? ", " : "", o->sizes[i]);
  fprintf(f, "],\n  \"seconds\": ");
  jnum(f, run->seconds);
  fprintf(f,
          ",\n  \"failures\": %d,\n  \"partial\": %s,\n  \"units\": {\"GB/s\": \"10^9 bytes per second\", \"us\": "
          "\"microseconds per "
          "operation\"},\n  \"paths\": [",
          run->failures, run->interrupted ? "true" : "false");
  bool first = true;
  for (int p = 0; p < PATH_COUNT; p++) {
    if (!o->paths[p]) continue;
    fprintf(f, "%s\n    {\"id\": ", first ? "" : ",");
    first = false;
    tool_json_string(f, bench_paths[p].id);
    fprintf(f, ", \"label\": ");
    tool_json_string(f, bench_paths[p].label);
    fprintf(f, ", \"unit\": \"%s\", \"bytes_factor\": %d, \"sync_only\": %s, \"between_devices\": %s, \"meaning\": ",
            unit_of((bench_path)p), bench_paths[p].bytes_factor, bench_paths[p].sync_only ? "true" : "false",
            bench_paths[p].pair ? "true" : "false");
    tool_json_string(f, bench_paths[p].meaning);
    fputc('}', f);
  }
  fprintf(f, "\n  ],\n  \"left_out\": [");
  for (size_t i = 0; i < run->left_out_count; i++)
    fprintf(f, "%s%zu", i ? ", " : "", run->left_out[i]);
  fprintf(f, "],\n  \"devices\": [");
  for (size_t di = 0; di < run->device_count; di++) {
    const bench_device *d = &run->devices[di];
    fprintf(f, "%s\n    {\n", di ? "," : "");
    tool_json_device_fields(f, &d->info, &d->driver, d->has_driver, 6);
    fprintf(f, ",\n      \"size_cap\": %zu,\n      \"raw_baseline\": %s,\n      \"raw_note\": ", d->size_cap,
            d->raw ? "true" : "false");
    tool_json_string(f, d->raw ? NULL : d->raw_note);
    fprintf(f, ",\n      \"raw_ways\": ");
    jcalls(f, run, d);
    fprintf(f, ",\n      \"host_limit\": ");
    jlimit(f, run, d);
    fprintf(f, ",\n      \"seconds\": ");
    jnum(f, d->seconds);
    fprintf(f, ",\n      \"results\": [");
    first = true;
    for (int p = 0; p < PATH_DEVICE_COUNT; p++) {
      if (!o->paths[p]) continue;
      for (size_t si = 0; si < o->size_count; si++) {
        fprintf(f, "%s\n        ", first ? "" : ",");
        first = false;
        jresult(f, run, d, NULL, bench_device_row(run, d, (bench_path)p, si), d->size_cap, d->cap_reason);
      }
    }
    fprintf(f, "%s]\n    }", first ? "" : "\n      ");
  }
  fprintf(f, "%s],\n  \"pairs\": [", run->device_count ? "\n  " : "");
  for (size_t pi = 0; pi < run->pair_count; pi++) {
    const bench_pair *p = &run->pairs[pi];
    fprintf(f,
            "%s\n    {\"path\": \"%s\", \"from\": %zu, \"to\": %zu, \"size_cap\": %zu, \"raw_baseline\": %s, "
            "\"raw_call\": ",
            pi ? "," : "", bench_paths[p->path].id, run->devices[p->from].info.index, run->devices[p->to].info.index,
            p->size_cap, p->has_raw ? "true" : "false");
    tool_json_string(f, p->has_raw ? p->raw_call : NULL);
    fputs(", \"raw_call_second\": ", f);
    tool_json_string(f, p->has_raw && p->has_alt ? p->raw_call_alt : NULL);
    fputs(", \"raw_note\": ", f);
    tool_json_string(f, p->has_raw ? NULL : p->raw_note);
    fputs(", \"seconds\": ", f);
    jnum(f, p->seconds);
    fputs(",\n      \"results\": [", f);
    for (size_t si = 0; si < o->size_count; si++) {
      fprintf(f, "%s\n        ", si ? "," : "");
      jresult(f, run, &run->devices[p->from], p, bench_pair_row(run, p, si), p->size_cap, p->cap_reason);
    }
    fprintf(f, "\n      ]}");
  }
  fprintf(f, "%s]\n}\n", run->pair_count ? "\n  " : "");
  return close_out(out, "--json");
}

/* ---- CSV ---------------------------------------------------------------------------- */

static void cstr(FILE *f, const char *s) {
  if (!s) return;
  if (!strpbrk(s, ",\"\n\r")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

static void cnum(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "%.6g", v);
}

static void cfigure(FILE *f, const bench_row *row, const bench_stats *t, bool present) {
  if (!present) {
    fputs(",,,,", f);
    return;
  }
  figure5 v = in_unit(row, t);
  cnum(f, v.median);
  fputc(',', f);
  cnum(f, v.p25);
  fputc(',', f);
  cnum(f, v.p75);
  fputc(',', f);
  cnum(f, v.min);
  fputc(',', f);
  cnum(f, v.max);
}

static void crow(FILE *f, const bench_run *run, const bench_device *d, const bench_pair *p, const bench_row *row,
                 size_t cap, const char *cap_reason) {
  char call[512], reason[600];
  if (p) {
    const bench_device *a = &run->devices[p->from], *b = &run->devices[p->to];
    char text[600];
    fprintf(f, "%zu>%zu,", a->info.index, b->info.index);
    snprintf(text, sizeof text, "%s>%s", a->info.backend, b->info.backend);
    cstr(f, text);
    fputc(',', f);
    snprintf(text, sizeof text, "%.290s > %.290s", a->info.name, b->info.name);
    cstr(f, text);
  } else {
    fprintf(f, "%zu,", d->info.index);
    cstr(f, d->info.backend);
    fputc(',', f);
    cstr(f, d->info.name);
  }
  bool ok = row->status == ROW_OK, raw = ok && row->raw_count > 0;
  fprintf(f, ",%s,%zu,%s,%s,", bench_paths[row->path].id, row->bytes, status_name(row->status), unit_of(row->path));
  cfigure(f, row, &row->ferry, ok);
  fputc(',', f);
  cfigure(f, row, &row->raw[0].t, raw);
  fputc(',', f);
  double r = bench_ratio(row);
  if (r > 0) cnum(f, r);
  fputc(',', f);
  if (raw) {
    cstr(f, bench_row_raw_tag(d, p, row, 0));
    fputc(',', f);
    cstr(f, bench_row_raw_call(run, d, p, row, 0, call, sizeof call));
  } else {
    fputc(',', f);
  }
  fputc(',', f);
  if (raw && row->raw_count > 1) {
    cstr(f, bench_row_raw_tag(d, p, row, 1));
    fputc(',', f);
    cnum(f, in_unit(row, &row->raw[1].t).median);
  } else {
    fputc(',', f);
  }
  fputc(',', f);
  if (row->status != ROW_SKIPPED)
    fprintf(f, "%d,%s", row->samples, row->verified ? "true" : "false");
  else
    fputc(',', f);
  fputc(',', f);
  if (row->status == ROW_SKIPPED) {
    skip_reason(row, cap, cap_reason, reason, sizeof reason);
    cstr(f, reason);
  } else if (row->status == ROW_FAILED) {
    cstr(f, row->error);
  } else if (row->raw_error) {
    snprintf(reason, sizeof reason, "raw: %s", row->raw_error);
    cstr(f, reason);
  }
  fputc('\n', f);
}

int bench_write_csv(tool_output *out, const bench_run *run) {
  FILE *f = open_out(out, "--csv");
  if (!f) return 1;
  fputs("device,backend,device_name,path,size_bytes,status,unit,ferry_median,ferry_p25,ferry_p75,ferry_min,ferry_max,"
        "raw_median,raw_p25,raw_p75,raw_min,raw_max,ratio,raw_way,raw_call,raw_other_way,raw_other_median,samples,"
        "verified,error\n",
        f);
  for (size_t di = 0; di < run->device_count; di++) {
    const bench_device *d = &run->devices[di];
    for (int p = 0; p < PATH_DEVICE_COUNT; p++)
      for (size_t si = 0; si < run->opt.size_count && run->opt.paths[p]; si++)
        crow(f, run, d, NULL, bench_device_row(run, d, (bench_path)p, si), d->size_cap, d->cap_reason);
  }
  for (size_t pi = 0; pi < run->pair_count; pi++) {
    const bench_pair *p = &run->pairs[pi];
    for (size_t si = 0; si < run->opt.size_count; si++)
      crow(f, run, &run->devices[p->from], p, bench_pair_row(run, p, si), p->size_cap, p->cap_reason);
  }
  return close_out(out, "--csv");
}
