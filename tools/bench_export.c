/* `ferry bench`: --json and --csv. Both hold every row, skipped ones included (with the reason). */
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

/* Why a row was skipped, in words (a size over the cap has no sentence of its own). */
static void skip_reason(const bench_device *d, const bench_row *row, char *buf, size_t size) {
  if (row->error)
    snprintf(buf, size, "%s", row->error);
  else if (row->bytes > d->size_cap)
    snprintf(buf, size, "over the device's size cap: %s", d->cap_reason);
  else
    snprintf(buf, size, "not measured");
}

static FILE *open_out(const char *path, const char *option) {
  if (strcmp(path, "-") == 0) return stdout;
  FILE *f = fopen(path, "w");
  if (!f) bench_note("%s %s: cannot write the file: %s", option, path, strerror(errno));
  return f;
}

static int close_out(FILE *f, const char *path, const char *option) {
  int bad = ferror(f);
  if (f == stdout) {
    fflush(f);
  } else if (fclose(f) != 0) {
    bad = 1;
  }
  if (bad) {
    bench_note("%s %s: writing the file failed: %s", option, path, strerror(errno));
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

int bench_write_json(const char *path, const bench_run *run) {
  FILE *f = open_out(path, "--json");
  if (!f) return 1;
  const bench_options *o = &run->opt;
  fprintf(f, "{\n  \"tool\": \"ferry bench\",\n  \"version\": ");
  tool_json_string(f, ferry_version());
  fprintf(f, ",\n  \"started\": ");
  tool_json_string(f, run->started);
  fprintf(f, ",\n  \"host\": ");
  tool_json_string(f, run->host);
  fprintf(f, ",\n  \"quick\": %s,\n  \"repeat\": ", o->quick ? "true" : "false");
  if (o->repeat)
    fprintf(f, "%d", o->repeat);
  else
    fputs("null", f);
  fprintf(f, ",\n  \"sizes\": [");
  for (size_t i = 0; i < o->size_count; i++)
    fprintf(f, "%s%zu", i ? ", " : "", o->sizes[i]);
  fprintf(f, "],\n  \"seconds\": ");
  jnum(f, run->seconds);
  fprintf(f, ",\n  \"failures\": %d,\n", run->failures);
  fprintf(f, "  \"units\": {\"GB/s\": \"10^9 bytes per second\", \"us\": \"microseconds per operation\"},\n"
             "  \"statistics\": \"median of the samples; p25 and p75 bound the interquartile range; min and max; "
             "time_us per operation\",\n"
             "  \"ratio\": \"ferry / raw: ferry GB/s over raw GB/s, or raw time over ferry time for us; above 1 ferry "
             "is faster\",\n");
  fprintf(f, "  \"paths\": [");
  for (int p = 0; p < PATH_COUNT; p++) {
    fprintf(f, "%s\n    {\"id\": ", p ? "," : "");
    tool_json_string(f, bench_paths[p].id);
    fprintf(f, ", \"label\": ");
    tool_json_string(f, bench_paths[p].label);
    fprintf(f, ", \"unit\": \"%s\", \"bytes_factor\": %d, \"sync_only\": %s, \"meaning\": ",
            bench_paths[p].latency ? "us" : "GB/s", bench_paths[p].bytes_factor,
            bench_paths[p].sync_only ? "true" : "false");
    tool_json_string(f, bench_paths[p].meaning);
    fputc('}', f);
  }
  fprintf(f, "\n  ],\n  \"devices\": [");
  for (size_t di = 0; di < run->device_count; di++) {
    const bench_device *d = &run->devices[di];
    const ferry_device_info *in = &d->info;
    fprintf(f, "%s\n    {\n      \"index\": %zu,\n      \"backend\": ", di ? "," : "", in->index);
    tool_json_string(f, in->backend);
    fprintf(f, ",\n      \"name\": ");
    tool_json_string(f, in->name);
    fprintf(f,
            ",\n      \"total_memory\": %llu,\n      \"max_allocation\": %llu,\n      \"is_cpu\": %s,\n"
            "      \"zero_copy\": %s,\n      \"host_ptr\": %s,\n      \"host_ptr_alignment\": %zu,\n"
            "      \"size_cap\": %zu,\n      \"raw_baseline\": %s,\n      \"raw_note\": ",
            (unsigned long long)in->total_memory, (unsigned long long)in->max_allocation, in->is_cpu ? "true" : "false",
            in->zero_copy ? "true" : "false", in->host_ptr ? "true" : "false", in->host_ptr_alignment, d->size_cap,
            d->raw ? "true" : "false");
    tool_json_string(f, d->raw ? NULL : d->raw_note);
    fprintf(f, ",\n      \"seconds\": ");
    jnum(f, d->seconds);
    fprintf(f, ",\n      \"results\": [");
    bool first = true;
    for (int p = 0; p < PATH_COUNT; p++) {
      for (size_t si = 0; si < o->size_count; si++) {
        const bench_row *row = bench_row_at(run, d, (bench_path)p, si);
        char call[160], reason[400];
        fprintf(f, "%s\n        {\"path\": ", first ? "" : ",");
        first = false;
        tool_json_string(f, bench_paths[p].id);
        fprintf(f, ", \"size\": %zu, \"status\": \"%s\", \"unit\": \"%s\"", row->bytes, status_name(row->status),
                bench_paths[p].latency ? "us" : "GB/s");
        if (row->status == ROW_SKIPPED) {
          skip_reason(d, row, reason, sizeof reason);
          fprintf(f, ", \"reason\": ");
          tool_json_string(f, reason);
          fputc('}', f);
          continue;
        }
        fprintf(f, ", \"samples\": %d, \"verified\": %s, \"ferry\": ", row->samples, row->verified ? "true" : "false");
        if (row->status == ROW_OK)
          jfigure(f, row, &row->ferry, row->ferry_ops);
        else
          fputs("null", f);
        fprintf(f, ", \"raw\": ");
        if (row->status == ROW_OK && row->has_raw)
          jfigure(f, row, &row->raw, row->raw_ops);
        else
          fputs("null", f);
        fprintf(f, ", \"raw_call\": ");
        const char *rc = bench_raw_call(d, (bench_path)p, call, sizeof call);
        tool_json_string(f, strcmp(rc, "-") == 0 ? NULL : rc);
        fprintf(f, ", \"ratio\": ");
        double r = bench_ratio(row);
        if (r > 0)
          jnum(f, r);
        else
          fputs("null", f);
        fprintf(f, ", \"error\": ");
        tool_json_string(f, row->status == ROW_FAILED ? row->error : NULL);
        fprintf(f, ", \"raw_error\": ");
        tool_json_string(f, row->raw_error);
        fputc('}', f);
      }
    }
    fprintf(f, "\n      ]\n    }");
  }
  fprintf(f, "\n  ]\n}\n");
  return close_out(f, path, "--json");
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

int bench_write_csv(const char *path, const bench_run *run) {
  FILE *f = open_out(path, "--csv");
  if (!f) return 1;
  fputs("device,backend,device_name,path,size_bytes,status,unit,ferry_median,ferry_p25,ferry_p75,ferry_min,ferry_max,"
        "raw_median,raw_p25,raw_p75,raw_min,raw_max,ratio,raw_call,samples,verified,error\n",
        f);
  for (size_t di = 0; di < run->device_count; di++) {
    const bench_device *d = &run->devices[di];
    for (int p = 0; p < PATH_COUNT; p++) {
      for (size_t si = 0; si < run->opt.size_count; si++) {
        const bench_row *row = bench_row_at(run, d, (bench_path)p, si);
        char call[160], reason[400];
        fprintf(f, "%zu,", d->info.index);
        cstr(f, d->info.backend);
        fputc(',', f);
        cstr(f, d->info.name);
        fprintf(f, ",%s,%zu,%s,%s,", bench_paths[p].id, row->bytes, status_name(row->status),
                bench_paths[p].latency ? "us" : "GB/s");
        cfigure(f, row, &row->ferry, row->status == ROW_OK);
        fputc(',', f);
        cfigure(f, row, &row->raw, row->status == ROW_OK && row->has_raw);
        fputc(',', f);
        double r = bench_ratio(row);
        if (r > 0) cnum(f, r);
        fputc(',', f);
        const char *rc = bench_raw_call(d, (bench_path)p, call, sizeof call);
        if (row->status != ROW_SKIPPED && strcmp(rc, "-") != 0) cstr(f, rc);
        fputc(',', f);
        if (row->status != ROW_SKIPPED)
          fprintf(f, "%d,%s", row->samples, row->verified ? "true" : "false");
        else
          fputc(',', f);
        fputc(',', f);
        if (row->status == ROW_SKIPPED) {
          skip_reason(d, row, reason, sizeof reason);
          cstr(f, reason);
        } else if (row->status == ROW_FAILED) {
          cstr(f, row->error);
        } else if (row->raw_error) {
          snprintf(reason, sizeof reason, "raw: %s", row->raw_error);
          cstr(f, reason);
        }
        fputc('\n', f);
      }
    }
  }
  return close_out(f, path, "--csv");
}
