/*
 * `ferry bench`: what its files share.
 *
 *   bench.c          ferry_bench_main: arguments, devices, the run, the outputs, the exit code
 *   bench_options.c  the command line: parsing, validation, --help; sizes as text
 *   bench_measure.c  the measurements: ferry and the raw call interleaved, medians, checks
 *   bench_table.c    the table and legend on stdout, the progress bar and notes on stderr
 *   bench_export.c   --json and --csv
 *   bench_svg.c      --plot: the SVG chart
 */
#ifndef FERRY_TOOLS_BENCH_H
#define FERRY_TOOLS_BENCH_H

#include "ferry.h"
#include "raw.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BENCH_MAX_SIZES   64
#define BENCH_MAX_DEVICES 256

/* What one row measures. The order is the table's. */
typedef enum bench_path {
  PATH_H2D,        /* ferry_host_to_device from ordinary (malloc'd) memory */
  PATH_D2H,        /* ferry_device_to_host into ordinary memory */
  PATH_H2D_PINNED, /* ferry_host_to_device from ferry_host_alloc memory */
  PATH_D2H_PINNED, /* ferry_device_to_host into ferry_host_alloc memory */
  PATH_HOST_PTR,   /* h2d + d2h on a ferry_alloc_host_ptr buffer's own array (synchronisation only) */
  PATH_ZERO_COPY,  /* h2d + d2h on a ferry_alloc_zero_copy buffer's own array (synchronisation only) */
  PATH_D2D,        /* ferry_device_to_device between two buffers of the device */
  PATH_ALLOC,      /* ferry_alloc + ferry_free: a latency, not a bandwidth */
  PATH_COUNT
} bench_path;

typedef struct bench_path_desc {
  const char *id;      /* "h2d-pinned": the name in JSON, CSV and SVG */
  const char *label;   /* the table's first column */
  const char *meaning; /* one line for the legend under the table */
  int bytes_factor;    /* bytes moved per operation, in units of the row's size (2 for round trips) */
  bool latency;        /* the figure is microseconds per operation, not GB/s */
  bool sync_only;      /* ferry moves no bytes here: it only synchronises */
} bench_path_desc;

extern const bench_path_desc bench_paths[PATH_COUNT];

typedef struct bench_options {
  bool all_devices;                  /* --device all (the default) */
  size_t devices[BENCH_MAX_DEVICES]; /* --device N[,M...] */
  size_t device_count;
  size_t sizes[BENCH_MAX_SIZES]; /* ascending, no duplicates */
  size_t size_count;
  bool sizes_given; /* --sizes on the command line */
  int repeat;       /* --repeat N: samples per figure; 0 = automatic */
  bool quick;       /* --quick */
  const char *json_path, *csv_path, *plot_path;
  bool help;
} bench_options;

/* Five-number summary of the seconds one operation took, over the samples. */
typedef struct bench_stats {
  double min, p25, median, p75, max;
} bench_stats;

typedef enum bench_row_status {
  ROW_SKIPPED = 0, /* not measured: the path does not exist on the device, or the size is over its cap */
  ROW_OK,
  ROW_FAILED, /* an allocation or transfer failed, or a check of the bytes did: `error` says which */
} bench_row_status;

typedef struct bench_row {
  bench_path path;
  size_t bytes; /* the row's size */
  bench_row_status status;
  char *error;       /* ROW_FAILED: the sentence; ROW_SKIPPED: why (may be NULL) */
  bench_stats ferry; /* seconds per operation */
  bool has_raw;      /* a raw figure exists */
  bench_stats raw;
  char *raw_error;         /* the raw call failed (the ferry figure may still be fine) */
  int samples;             /* interleaved ferry/raw samples behind each figure */
  long ferry_ops, raw_ops; /* operations timed together in one sample */
  bool verified;           /* the bytes of one ferry transfer (and one raw transfer) were checked */
} bench_row;

typedef struct bench_device {
  ferry_device *dev;
  ferry_device_info info;
  const raw_ops *raw; /* NULL: no raw baseline on this backend (or it could not open) */
  char raw_note[320]; /* why there is no raw baseline */
  size_t size_cap;    /* largest size measured on this device */
  char cap_reason[160];
  bench_row *rows; /* [path * size_count + size index] */
  double seconds;  /* time spent on the device */
} bench_device;

typedef struct bench_run {
  bench_options opt;
  bench_device *devices;
  size_t device_count;
  int failures; /* failed rows, plus failures outside rows */
  double seconds;
  char started[32]; /* UTC, ISO 8601 */
  char host[128];   /* uname: "Linux 6.1.0 x86_64" */
} bench_run;

/* ---- bench_options.c ---- */

/* Parses argv (the arguments after "bench"). Returns 0, or 2 with a sentence in err. */
int bench_parse(int argc, char **argv, bench_options *opt, char *err, size_t err_size);
/* Device indices exist? After ferry_init. Returns 0, or 2 with a sentence in err. */
int bench_check_devices(const bench_options *opt, size_t device_count, char *err, size_t err_size);
void bench_usage(FILE *f);
void bench_help(FILE *f);
/* "4 KiB", "1 GiB", "1000 B", "1.5 MiB" */
const char *bench_size_text(size_t bytes, char buf[32]);
/* "23.5 GiB": memory sizes, rounded to a tenth */
const char *bench_size_approx(uint64_t bytes, char buf[32]);
/* "4K", "1M", "1G" (axis labels); "1000" for sizes that are not a whole K/M/G */
const char *bench_size_short(size_t bytes, char buf[32]);

/* ---- bench_measure.c ---- */

/* Measures one device of the run (d->dev, d->info and d->rows set); rows record
 * failures, run->failures counts them, and each is said on stderr as it happens. */
void bench_measure_device(bench_run *run, bench_device *d);
double bench_now(void);
/* The row's figure: GB/s (10^9 bytes/s) for bandwidth rows, microseconds for latency rows. */
double bench_figure(const bench_row *row, double seconds);
/* ferry / raw, as "above 1: ferry is faster" (raw time / ferry time); 0 when there is no raw figure. */
double bench_ratio(const bench_row *row);
const char *bench_raw_call(const bench_device *d, bench_path p, char *buf, size_t size);
bench_row *bench_row_at(const bench_run *run, const bench_device *d, bench_path p, size_t size_index);

/* ---- bench_table.c ---- */

void bench_print_header(FILE *f, const bench_run *run);
void bench_print_device(FILE *f, const bench_run *run, const bench_device *d);
void bench_print_legend(FILE *f, const bench_run *run);
/* The progress bar (stderr, only when it is a terminal). */
void bench_progress_start(long total_steps);
/* Says that the step `what` (a path) at `bytes` begins; total_steps = devices x sizes x PATH_COUNT. */
void bench_progress_step(const bench_device *d, const char *what, size_t bytes);
void bench_progress_clear(void);
void bench_progress_end(void);
/* A sentence on stderr, clear of the progress bar. */
void bench_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- bench_export.c ---- */

/* 0 on success; otherwise a sentence was printed. "-" is stdout. */
int bench_write_json(const char *path, const bench_run *run);
int bench_write_csv(const char *path, const bench_run *run);

/* ---- bench_svg.c ---- */

int bench_write_svg(const char *path, const bench_run *run);

#endif
