/*
 * `ferry bench`: transfers and allocations on every device, beside the raw
 * driver calls they stand on. This file runs the command: arguments and output
 * files (checked before anything else), the plan (the devices, the pairs of
 * devices, the sizes each can take), the measurements device by device (each
 * table printed as soon as its device is done), the pairs, then --json, --csv and
 * --plot. Output files are opened before anything is measured. Ctrl-C (or SIGTERM)
 * stops the run at the next row: the tables and files then hold what was measured,
 * marked partial. Exit status: 0 every figure measured, 1 something failed or
 * nothing could be measured, 2 bad arguments or an output file that cannot be
 * written, 130 (143) interrupted by Ctrl-C (SIGTERM).
 */
#include "bench.h"
#include "tool.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

static void free_run(bench_run *run) {
  for (size_t i = 0; i < run->device_count; i++) {
    bench_device *d = &run->devices[i];
    for (size_t r = 0; d->rows && r < (size_t)PATH_DEVICE_COUNT * run->opt.size_count; r++) {
      free(d->rows[r].error);
      free(d->rows[r].raw_error);
    }
    free(d->rows);
  }
  for (size_t i = 0; i < run->pair_count; i++) {
    bench_pair *p = &run->pairs[i];
    for (size_t r = 0; p->rows && r < run->opt.size_count; r++) {
      free(p->rows[r].error);
      free(p->rows[r].raw_error);
    }
    free(p->rows);
  }
  free(run->devices);
  free(run->pairs);
}

static bench_row *new_rows(size_t count, const size_t *sizes, size_t size_count, bench_path first) {
  bench_row *rows = calloc(count ? count : 1, sizeof *rows);
  if (!rows) return NULL;
  for (size_t r = 0; r < count; r++) {
    rows[r].path = (bench_path)(first + (int)(r / size_count));
    rows[r].bytes = sizes[r % size_count];
  }
  return rows;
}

/* Is device `index` asked for? Without --device and --backend: every device
 * but the debugging ones; else the devices either names. */
static bool wanted(const bench_options *o, const ferry_device_info *info) {
  if (o->device_all) return true;
  if (o->device_count == 0 && o->backend_count == 0) return !tool_is_debugging(info);
  for (size_t i = 0; i < o->device_count; i++)
    if (o->devices[i] == info->index) return true;
  for (size_t i = 0; i < o->backend_count; i++)
    if (strcmp(o->backends[i], info->backend) == 0) return true;
  return false;
}

static bool any_device_path(const bench_options *o) {
  for (int p = 0; p < PATH_DEVICE_COUNT; p++)
    if (o->paths[p]) return true;
  return false;
}

/* The devices to measure: those --device names, in its order, then the others
 * asked for in index order. */
static int pick_devices(bench_run *run) {
  const bench_options *o = &run->opt;
  size_t n = ferry_device_count();
  run->devices = calloc(n ? n : 1, sizeof *run->devices);
  if (!run->devices) return 1;
  size_t order[BENCH_MAX_DEVICES], count = 0;
  for (size_t i = 0; i < o->device_count; i++)
    order[count++] = o->devices[i];
  for (size_t i = 0; i < n && count < BENCH_MAX_DEVICES; i++) {
    bool listed = false;
    for (size_t k = 0; k < o->device_count; k++)
      listed = listed || o->devices[k] == i;
    if (!listed) order[count++] = i;
  }
  for (size_t k = 0; k < count; k++) {
    bench_device *d = &run->devices[run->device_count];
    ferry_status st = ferry_device_get(order[k], &d->dev);
    if (st == FERRY_OK) st = ferry_device_info_get(d->dev, &d->info);
    if (st != FERRY_OK) {
      bench_note("device %zu: %s (%s)", order[k], ferry_last_error(), ferry_status_name(st));
      return 1;
    }
    if (!wanted(o, &d->info)) {
      /* Said only when nothing was asked for: then the debugging devices are left out by default. */
      bool by_default = !o->device_all && o->device_count == 0 && o->backend_count == 0;
      if (by_default && tool_is_debugging(&d->info)) run->left_out[run->left_out_count++] = d->info.index;
      memset(d, 0, sizeof *d);
      continue;
    }
    d->has_driver = ferry_device_driver_info(d->dev, &d->driver) == FERRY_OK;
    d->rows = new_rows((size_t)PATH_DEVICE_COUNT * o->size_count, o->sizes, o->size_count, PATH_H2D);
    if (!d->rows) return 1;
    run->device_count++;
  }
  return 0;
}

static int add_pair(bench_run *run, size_t from, size_t to, bench_path path) {
  bench_pair *p = &run->pairs[run->pair_count];
  memset(p, 0, sizeof *p);
  p->from = from;
  p->to = to;
  p->path = path;
  p->rows = new_rows(run->opt.size_count, run->opt.sizes, run->opt.size_count, path);
  if (!p->rows) return 1;
  run->pair_count++;
  return 0;
}

/* The pairs of devices: every ordered pair of devices of one backend whose raw
 * baseline has a copy between devices (peer); and, staged through host memory
 * (cross), every ordered pair of the first devices of two backends, and the first
 * two devices of a backend without such a copy. */
static int pick_pairs(bench_run *run) {
  size_t n = run->device_count;
  run->pairs = calloc(n * n + 1, sizeof *run->pairs);
  if (!run->pairs) return 1;
  bool peer = run->opt.paths[PATH_PEER], cross = run->opt.paths[PATH_CROSS];
  bench_device *dv = run->devices;
  for (size_t i = 0; i < n && peer; i++)
    for (size_t j = 0; j < n; j++) {
      const raw_ops *r = raw_ops_for(dv[i].info.backend);
      if (i != j && strcmp(dv[i].info.backend, dv[j].info.backend) == 0 && r && r->peer &&
          add_pair(run, i, j, PATH_PEER))
        return 1;
    }
  if (!cross) return 0;
  size_t first[BENCH_MAX_DEVICES], second[BENCH_MAX_DEVICES], groups = 0;
  for (size_t i = 0; i < n; i++) {
    size_t g = 0;
    while (g < groups && strcmp(dv[first[g]].info.backend, dv[i].info.backend) != 0)
      g++;
    if (g == groups) {
      first[groups] = i;
      second[groups++] = SIZE_MAX;
    } else if (second[g] == SIZE_MAX) {
      second[g] = i;
    }
  }
  for (size_t a = 0; a < groups; a++)
    for (size_t b = 0; b < groups; b++)
      if (a != b && add_pair(run, first[a], first[b], PATH_CROSS)) return 1;
  for (size_t g = 0; g < groups; g++) {
    const raw_ops *r = raw_ops_for(dv[first[g]].info.backend);
    if (second[g] == SIZE_MAX || (r && r->peer)) continue;
    if (add_pair(run, first[g], second[g], PATH_CROSS) || add_pair(run, second[g], first[g], PATH_CROSS)) return 1;
  }
  return 0;
}

/* Rows to measure, and when there are none, why (a sentence in why). */
static long plan(bench_run *run, char *why, size_t why_size) {
  const bench_options *o = &run->opt;
  long rows = 0;
  size_t used = 0;
  why[0] = '\0';
#define WHY(...)                                                                                                       \
  do {                                                                                                                 \
    if (used < why_size) {                                                                                             \
      int n_ = snprintf(why + used, why_size - used, __VA_ARGS__);                                                     \
      if (n_ > 0) used += (size_t)n_;                                                                                  \
    }                                                                                                                  \
  } while (0)
  for (size_t i = 0; i < run->device_count && any_device_path(o); i++) {
    bench_device *d = &run->devices[i];
    long before = rows;
    bool fits = false;
    for (size_t si = 0; si < o->size_count; si++) {
      if (o->sizes[si] > d->size_cap) continue;
      fits = true;
      for (int p = 0; p < PATH_DEVICE_COUNT; p++) {
        char unused[160];
        rows += o->paths[p] && bench_path_applies(d, (bench_path)p, o->sizes[si], unused, sizeof unused);
      }
    }
    if (rows > before) continue;
    char cap[32];
    if (!fits)
      WHY("%sdevice %zu (%s) takes sizes up to %s (%s)", used ? "; " : "", d->info.index, d->info.backend,
          bench_size_approx(d->size_cap, cap), d->cap_reason);
    else
      WHY("%sdevice %zu (%s) has none of the paths asked for (--paths)", used ? "; " : "", d->info.index,
          d->info.backend);
  }
  for (size_t i = 0; i < run->pair_count; i++)
    for (size_t si = 0; si < o->size_count; si++)
      rows += o->sizes[si] <= run->pairs[i].size_cap;
  if (rows == 0 && run->pair_count == 0 && (o->paths[PATH_PEER] || o->paths[PATH_CROSS]) && !any_device_path(o))
    WHY("%scopies between devices need two devices (peer: two of one backend with a raw peer copy, such as cuda)",
        used ? "; " : "");
  if (rows == 0 && run->device_count == 0) {
    WHY("%sno device is asked for", used ? "; " : "");
    for (size_t i = 0; i < run->left_out_count; i++)
      WHY("%s device %zu is the checked backend's, a debugging device that is measured only when --device %zu or "
          "--backend checked names it",
          i ? ";" : ":", run->left_out[i], run->left_out[i]);
  }
#undef WHY
  return rows;
}

/* ---- output files, opened before anything is measured: a bad path costs no run ---- */

enum { OUT_JSON, OUT_CSV, OUT_PLOT, OUT_TABLES, OUT_COUNT };
static const char *const out_option[OUT_COUNT] = {"--json", "--csv", "--plot", "--tables"};

static int open_outputs(const bench_options *o, tool_output out[OUT_COUNT]) {
  const char *paths[OUT_COUNT] = {o->json_path, o->csv_path, o->plot_path, o->tables_path};
  memset(out, 0, sizeof(tool_output) * OUT_COUNT);
  for (int k = 0; k < OUT_COUNT; k++) {
    char why[1200];
    if (paths[k] && tool_output_open(&out[k], paths[k], why, sizeof why) != 0) {
      fprintf(stderr, "ferry bench: %s %s: %s\n", out_option[k], paths[k], why);
      for (int j = 0; j < k; j++)
        tool_output_abandon(&out[j]);
      return 2;
    }
  }
  return 0;
}

static void abandon_outputs(tool_output out[OUT_COUNT]) {
  for (int k = 0; k < OUT_COUNT; k++)
    tool_output_abandon(&out[k]);
}

static int write_outputs(const bench_run *run, tool_output out[OUT_COUNT]) {
  int failures = 0;
  if (out[OUT_JSON].path) failures += bench_write_json(&out[OUT_JSON], run);
  if (out[OUT_CSV].path) failures += bench_write_csv(&out[OUT_CSV], run);
  if (out[OUT_PLOT].path) failures += bench_write_svg(&out[OUT_PLOT], run);
  return failures;
}

/* ---- Ctrl-C: the run stops at the next row, and what was measured is written ---- */

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) {
  stop_signal = sig;
  signal(sig, SIG_DFL); /* a second Ctrl-C ends the command at once */
}

bool bench_interrupted(void) { return stop_signal != 0; }

static void catch_stops(bool on) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on ? on_stop : SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* Rows that an interruption left unmeasured say so (the tables, JSON and CSV). */
static void mark_unmeasured(bench_run *run) {
  for (size_t i = 0; i < run->device_count; i++)
    for (size_t r = 0; r < (size_t)PATH_DEVICE_COUNT * run->opt.size_count; r++)
      bench_row_interrupted(&run->devices[i].rows[r]);
  for (size_t i = 0; i < run->pair_count; i++)
    for (size_t r = 0; r < run->opt.size_count; r++)
      bench_row_interrupted(&run->pairs[i].rows[r]);
}

static void say_partial(const bench_run *run, const tool_output out[OUT_COUNT], long figures) {
  char written[1200] = "", n[64];
  size_t used = 0;
  for (int k = 0; k < OUT_COUNT; k++)
    if (out[k].path && k != OUT_TABLES && used < sizeof written)
      used += (size_t)snprintf(written + used, sizeof written - used, "%s%s", used ? ", " : "",
                               strcmp(out[k].path, "-") == 0 ? "stdout" : out[k].path);
  bench_note("interrupted (%s) after %.1f s: %s measured%s%s%s", stop_signal == SIGINT ? "Ctrl-C" : "SIGTERM",
             run->seconds, bench_plural(figures, "figure", "figures", n), used ? "; written, marked partial, to " : "",
             written, used ? "" : "; nothing else is written (no --json, --csv or --plot)");
}

static long count_figures(const bench_run *run) {
  long figures = 0;
  for (size_t i = 0; i < run->device_count; i++)
    for (size_t r = 0; r < (size_t)PATH_DEVICE_COUNT * run->opt.size_count; r++)
      figures += run->devices[i].rows[r].status == ROW_OK;
  for (size_t i = 0; i < run->pair_count; i++)
    for (size_t r = 0; r < run->opt.size_count; r++)
      figures += run->pairs[i].rows[r].status == ROW_OK;
  return figures;
}

/* "196 figures on 3 devices and 6 pairs in 4.3 s; 0 failures" */
static void print_closing(FILE *f, const bench_run *run, long figures, const char *where_failures) {
  char a[64], b[64], c[64], d[64];
  fprintf(f, "\n%s%s on %s", run->interrupted ? "interrupted: " : "", bench_plural(figures, "figure", "figures", a),
          bench_plural((long)run->device_count, "device", "devices", b));
  if (run->pair_count) fprintf(f, " and %s", bench_plural((long)run->pair_count, "pair", "pairs", d));
  fprintf(f, " in %.1f s; %s", run->seconds, bench_plural(run->failures, "failure", "failures", c));
  if (run->failures) fprintf(f, " (%s)", where_failures);
  fputc('\n', f);
  fflush(f);
}

/* Sets the run up to its plan; 0 to measure, else the exit status (said on stderr). */
static int prepare(bench_run *run) {
  char err[1024];
  if (bench_check_selection(&run->opt, err, sizeof err) != 0) {
    fprintf(stderr, "ferry bench: %s\n", err);
    bench_usage(stderr);
    return 2;
  }
  if (ferry_device_count() == 0) {
    fprintf(stderr, "ferry bench: there are no devices to measure; 'ferry info' says why each backend has none\n");
    return 1;
  }
  tool_system_describe(&run->sys);
  if (pick_devices(run) != 0 || pick_pairs(run) != 0) {
    fprintf(stderr, "ferry bench: no host memory to prepare the devices\n");
    return 1;
  }
  for (size_t i = 0; i < run->device_count; i++)
    bench_device_prepare(&run->devices[i]);
  for (size_t i = 0; i < run->pair_count; i++)
    bench_pair_cap(run, &run->pairs[i]);
  char why[2048];
  run->planned = plan(run, why, sizeof why);
  if (run->planned == 0) {
    fprintf(stderr, "ferry bench: nothing to measure: %s\n", why);
    return 1;
  }
  return 0;
}

/* Measures every device, then every pair, printing each table when it is done. */
static void measure_all(bench_run *run, FILE *table) {
  double t0 = bench_now();
  catch_stops(true); /* before the header: once it is out, Ctrl-C keeps what is measured */
  if (table) {
    bench_print_header(table, run);
    fflush(table);
  }
  bench_progress_start(run->planned);
  bool device_rows = any_device_path(&run->opt);
  for (size_t i = 0; i < run->device_count && device_rows && !bench_interrupted(); i++) {
    bench_measure_device(run, &run->devices[i]);
    if (bench_interrupted()) mark_unmeasured(run); /* before its table, which then says so */
    bench_progress_clear();
    if (table) bench_print_device(table, run, &run->devices[i]);
  }
  for (size_t i = 0; i < run->pair_count && !bench_interrupted(); i++)
    bench_measure_pair(run, &run->pairs[i]);
  catch_stops(false);
  bench_progress_end();
  run->interrupted = bench_interrupted();
  if (run->interrupted) mark_unmeasured(run);
  if (table && run->pair_count) bench_print_pairs(table, run);
  run->seconds = bench_now() - t0;
  if (table && !run->opt.no_legend) bench_print_legend(table, run);
}

int ferry_bench_main(int argc, char **argv) {
  bench_run run;
  memset(&run, 0, sizeof run);
  char err[1024];
  if (bench_parse(argc, argv, &run.opt, err, sizeof err) != 0) {
    fprintf(stderr, "ferry bench: %s\n", err);
    bench_usage(stderr);
    return 2;
  }
  if (run.opt.help) {
    bench_help(stdout);
    return 0;
  }
  tool_output out[OUT_COUNT];
  if (open_outputs(&run.opt, out)) return 2;
  ferry_status st = ferry_init();
  if (st != FERRY_OK) {
    fprintf(stderr, "ferry bench: ferry could not start: %s (%s)\n", ferry_last_error(), ferry_status_name(st));
    abandon_outputs(out);
    return 1;
  }
  int rc = prepare(&run);
  if (rc != 0) {
    abandon_outputs(out);
    free_run(&run);
    ferry_shutdown();
    return rc;
  }

  /* The tables: into --tables FILE; else on stdout, or on stderr where stdout is the data
   * (--json -, --csv -); none with --summary (without --tables) or --quiet. The summary
   * goes where the tables would. */
  bool data_on_stdout = (run.opt.json_path && strcmp(run.opt.json_path, "-") == 0) ||
                        (run.opt.csv_path && strcmp(run.opt.csv_path, "-") == 0);
  FILE *screen = run.opt.quiet ? NULL : data_on_stdout ? stderr : stdout;
  FILE *table = run.opt.tables_path ? tool_output_begin(&out[OUT_TABLES]) : run.opt.summary ? NULL : screen;
  FILE *summary = run.opt.summary ? screen : NULL;
  measure_all(&run, table);
  int write_failures = write_outputs(&run, out);

  long figures = count_figures(&run);
  if (table) print_closing(table, &run, figures, "listed under the tables");
  if (summary && summary != table) {
    const char *where = run.opt.tables_path && strcmp(run.opt.tables_path, "-") != 0 ? run.opt.tables_path : NULL;
    bench_print_summary(summary, &run, where);
    print_closing(summary, &run, figures, "listed in the full tables");
  }
  if (run.opt.tables_path && tool_output_close(&out[OUT_TABLES]) != 0) {
    bench_note("--tables %s: writing the file failed", run.opt.tables_path);
    write_failures++;
  }
  if (run.interrupted)
    say_partial(&run, out, figures);
  else if (figures == 0 && run.failures == 0)
    fprintf(stderr, "ferry bench: nothing was measured (every row was skipped; the tables say why)\n");
  rc = run.interrupted ? 128 + (int)stop_signal : run.failures || write_failures || figures == 0 ? 1 : 0;
  free_run(&run);
  ferry_shutdown();
  return rc;
}
