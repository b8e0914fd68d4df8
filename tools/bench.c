/*
 * `ferry bench`: transfers and allocations on every device, beside the raw
 * driver calls they stand on. This file runs the command: arguments, devices,
 * the measurements device by device (each table printed as soon as its device is
 * done), then --json, --csv and --plot. Exit status: 0 all figures measured, 1
 * something failed, 2 bad arguments.
 */
#include "bench.h"
#include "tool.h"

#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

static void describe_host(bench_run *run) {
  struct utsname u;
  if (uname(&u) == 0)
    snprintf(run->host, sizeof run->host, "%.40s %.60s %.20s", u.sysname, u.release, u.machine);
  else
    snprintf(run->host, sizeof run->host, "unknown host");
  time_t now = time(NULL);
  struct tm tm;
  if (gmtime_r(&now, &tm))
    strftime(run->started, sizeof run->started, "%Y-%m-%dT%H:%M:%SZ", &tm);
  else
    snprintf(run->started, sizeof run->started, "unknown");
}

static void free_run(bench_run *run) {
  for (size_t i = 0; i < run->device_count; i++) {
    bench_device *d = &run->devices[i];
    if (!d->rows) continue;
    for (size_t r = 0; r < (size_t)PATH_COUNT * run->opt.size_count; r++) {
      free(d->rows[r].error);
      free(d->rows[r].raw_error);
    }
    free(d->rows);
  }
  free(run->devices);
}

/* The devices to measure, in the order asked. */
static int pick_devices(bench_run *run) {
  size_t n = run->opt.all_devices ? ferry_device_count() : run->opt.device_count;
  run->devices = calloc(n ? n : 1, sizeof *run->devices);
  if (!run->devices) return 1;
  for (size_t i = 0; i < n; i++) {
    bench_device *d = &run->devices[i];
    size_t index = run->opt.all_devices ? i : run->opt.devices[i];
    ferry_status st = ferry_device_get(index, &d->dev);
    if (st == FERRY_OK) st = ferry_device_info_get(d->dev, &d->info);
    if (st != FERRY_OK) {
      bench_note("device %zu: %s (%s)", index, ferry_last_error(), ferry_status_name(st));
      return 1;
    }
    d->rows = calloc((size_t)PATH_COUNT * run->opt.size_count, sizeof *d->rows);
    if (!d->rows) return 1;
    for (int p = 0; p < PATH_COUNT; p++)
      for (size_t si = 0; si < run->opt.size_count; si++) {
        bench_row *row = &d->rows[(size_t)p * run->opt.size_count + si];
        row->path = (bench_path)p;
        row->bytes = run->opt.sizes[si];
      }
    run->device_count++;
  }
  return 0;
}

int ferry_bench_main(int argc, char **argv) {
  bench_run run;
  memset(&run, 0, sizeof run);
  char err[512];
  if (bench_parse(argc, argv, &run.opt, err, sizeof err) != 0) {
    fprintf(stderr, "ferry bench: %s\n", err);
    bench_usage(stderr);
    return 2;
  }
  if (run.opt.help) {
    bench_help(stdout);
    return 0;
  }
  ferry_status st = ferry_init();
  if (st != FERRY_OK) {
    fprintf(stderr, "ferry bench: ferry could not start: %s (%s)\n", ferry_last_error(), ferry_status_name(st));
    return 1;
  }
  size_t count = ferry_device_count();
  if (bench_check_devices(&run.opt, count, err, sizeof err) != 0) {
    fprintf(stderr, "ferry bench: %s\n", err);
    bench_usage(stderr);
    ferry_shutdown();
    return 2;
  }
  if (count == 0) {
    fprintf(stderr, "ferry bench: there are no devices to measure; 'ferry info' says why each backend has none\n");
    ferry_shutdown();
    return 1;
  }
  describe_host(&run);
  if (pick_devices(&run) != 0) {
    fprintf(stderr, "ferry bench: could not prepare the devices\n");
    free_run(&run);
    ferry_shutdown();
    return 1;
  }

  /* With --json - or --csv -, stdout is the data and the table goes to stderr. */
  bool data_on_stdout = (run.opt.json_path && strcmp(run.opt.json_path, "-") == 0) ||
                        (run.opt.csv_path && strcmp(run.opt.csv_path, "-") == 0);
  FILE *table = data_on_stdout ? stderr : stdout;

  double t0 = bench_now();
  bench_print_header(table, &run);
  fflush(table);
  bench_progress_start((long)(run.device_count * run.opt.size_count * PATH_COUNT));
  for (size_t i = 0; i < run.device_count; i++) {
    bench_measure_device(&run, &run.devices[i]);
    bench_progress_clear();
    bench_print_device(table, &run, &run.devices[i]);
  }
  bench_progress_end();
  run.seconds = bench_now() - t0;
  bench_print_legend(table, &run);

  int write_failures = 0;
  if (run.opt.json_path) write_failures += bench_write_json(run.opt.json_path, &run);
  if (run.opt.csv_path) write_failures += bench_write_csv(run.opt.csv_path, &run);
  if (run.opt.plot_path) write_failures += bench_write_svg(run.opt.plot_path, &run);

  size_t figures = 0;
  for (size_t i = 0; i < run.device_count; i++)
    for (size_t r = 0; r < (size_t)PATH_COUNT * run.opt.size_count; r++)
      figures += run.devices[i].rows[r].status == ROW_OK;
  fprintf(table, "\n%zu figure%s on %zu device%s in %.1f s; %d failure%s%s\n", figures, figures == 1 ? "" : "s",
          run.device_count, run.device_count == 1 ? "" : "s", run.seconds, run.failures, run.failures == 1 ? "" : "s",
          run.failures ? " (listed under the tables)" : "");
  fflush(table);
  int rc = run.failures || write_failures ? 1 : 0;
  free_run(&run);
  ferry_shutdown();
  return rc;
}
