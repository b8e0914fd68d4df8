/*
 * `ferry bench`: what its files share.
 *
 *   bench.c          ferry_bench_main: arguments, the plan (devices, pairs, size caps),
 *                    the run, the outputs, the exit code
 *   bench_options.c  the command line: parsing, validation, --help; sizes as text
 *   bench_measure.c  the measurements: ferry and the raw calls interleaved, medians, checks
 *   bench_table.c    the tables and legend on stdout, the progress bar and notes on stderr
 *   bench_export.c   --json and --csv
 *   bench_svg.c      --plot: the SVG chart
 */
#ifndef FERRY_TOOLS_BENCH_H
#define FERRY_TOOLS_BENCH_H

#include "ferry.h"
#include "raw.h"
#include "tool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BENCH_MAX_SIZES    64
#define BENCH_MAX_DEVICES  256
#define BENCH_MAX_BACKENDS 16

/* What one row measures. The order is the tables'. The paths before PATH_PEER
 * are on one device; PATH_PEER and PATH_CROSS between two. */
typedef enum bench_path {
  PATH_H2D,        /* ferry_host_to_device from ordinary (malloc'd) memory */
  PATH_D2H,        /* ferry_device_to_host into ordinary memory */
  PATH_H2D_PINNED, /* ferry_host_to_device from ferry_host_alloc memory */
  PATH_D2H_PINNED, /* ferry_device_to_host into ferry_host_alloc memory */
  PATH_HOST_PTR,   /* h2d + d2h on a ferry_alloc_host_ptr buffer's own array (synchronisation only) */
  PATH_ZERO_COPY,  /* h2d + d2h on a ferry_alloc_zero_copy buffer's own array (synchronisation only) */
  PATH_D2D,        /* ferry_device_to_device between two buffers of the device */
  PATH_ASYNC,      /* ferry_write_async from ordinary memory on a queue: the submission alone (synchronised untimed) */
  PATH_ASYNC_PINNED, /* the same from ferry_host_alloc memory */
  PATH_BOTH,         /* ferry_write_async on one queue + ferry_read_async on another at once, both synchronised */
  PATH_BOTH_PINNED,  /* the same from and into ferry_host_alloc memory */
  PATH_ELAPSED,      /* ferry_write_async from ferry_host_alloc memory between two events, by ferry_event_elapsed */
  PATH_ALLOC,        /* ferry_alloc + ferry_free (after the transfer paths: those before it share their memory) */
  PATH_PEER,         /* ferry_device_to_device between two devices of a backend with a raw peer copy (cuda) */
  PATH_CROSS,        /* ferry_device_to_device between two devices, against the raw d2h + h2d through host memory */
  PATH_COUNT
} bench_path;
#define PATH_DEVICE_COUNT PATH_PEER

typedef struct bench_path_desc {
  const char *id;      /* "h2d-pinned": the name in --paths, JSON, CSV and SVG */
  const char *label;   /* the tables' first column */
  const char *meaning; /* one line for the legend under the tables */
  int bytes_factor;    /* bytes moved per operation, in units of the row's size (2 for round trips) */
  bool latency;        /* the figure is microseconds per operation, not GB/s (alloc+free, the sync
                          rows, which move no bytes, and the submissions of write_async) */
  bool sync_only;      /* ferry moves no bytes here: it only synchronises */
  bool pair;           /* between two devices */
  bool self_timed;     /* a sample's time is what the calls measured themselves (events on the device's
                          clock: ferry_event_elapsed, cuEventElapsedTime), not the host's clock around them */
} bench_path_desc;

extern const bench_path_desc bench_paths[PATH_COUNT];

typedef struct bench_options {
  bool device_all;                   /* --device all: every device, the debugging ones too */
  size_t devices[BENCH_MAX_DEVICES]; /* --device N[,M...] */
  size_t device_count;
  char backends[BENCH_MAX_BACKENDS][32]; /* --backend NAME[,NAME...] */
  size_t backend_count;
  bool paths[PATH_COUNT]; /* --paths: the paths measured (all by default) */
  bool paths_given;
  size_t sizes[BENCH_MAX_SIZES]; /* ascending, no duplicates */
  size_t size_count;
  bool sizes_given; /* --sizes on the command line */
  int repeat;       /* --repeat N: samples per figure; 0 = automatic */
  bool quick;       /* --quick */
  bool quiet;       /* -q, --quiet: nothing on stdout */
  bool no_legend;   /* --no-legend */
  bool summary;     /* --summary: a short table instead of the full ones (what make run shows) */
  const char *json_path, *csv_path, *plot_path;
  const char *tables_path; /* --tables FILE: the full tables into FILE */
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

/* One raw way's figure. */
typedef struct bench_raw_figure {
  bench_stats t; /* seconds per operation */
  long ops;      /* operations timed together in one sample */
  int way;       /* 0: the backend's first way, 1: its second (raw_ops' alt) */
} bench_raw_figure;

typedef struct bench_row {
  bench_path path;
  size_t bytes; /* the row's size */
  bench_row_status status;
  char *error;             /* ROW_FAILED: the sentence; ROW_SKIPPED: why (NULL: over the size cap) */
  bench_stats ferry;       /* seconds per operation */
  long ferry_ops;          /* operations timed together in one sample */
  int raw_count;           /* raw figures: 0, 1, or 2 where both ways were measured */
  bench_raw_figure raw[2]; /* raw[0] is the faster (the one shown and compared), raw[1] the other way */
  char *raw_error;         /* a raw call failed (the ferry figure may still be fine) */
  int samples;             /* interleaved ferry/raw samples behind each figure */
  bool verified;           /* the bytes of one ferry transfer (and one raw transfer per way) were checked */
  bool settled;            /* measured, failed or skipped; false: not reached (yet) */
} bench_row;

/* Pageable transfers of one size, cache-cold: from or into the blocks of an area
 * twice the last-level cache in turn (bench_host.c). */
typedef struct bench_cold {
  size_t bytes;
  size_t slices;   /* blocks of the area taken in turn (1: the size alone is twice the cache) */
  double h2d, d2h; /* GB/s, medians; 0: not measured (why says why, or the run stopped) */
  char why[200];
} bench_cold;

/* The host's limit for a pageable transfer on a device that stages (not a CPU
 * device): the lesser of its pinned rows and the host's streaming copy. */
typedef struct bench_host_limit {
  bool measured;
  double pinned_h2d, pinned_d2h; /* GB/s: ferry's pinned rows at the largest size both were measured */
  size_t pinned_bytes;           /* that size; 0: no pinned rows */
  bench_cold cold[BENCH_MAX_SIZES];
  size_t cold_count;
} bench_host_limit;

typedef struct bench_device {
  ferry_device *dev;
  ferry_device_info info;
  ferry_driver_info driver;
  bool has_driver;
  const raw_ops *raw; /* NULL: no raw baseline on this backend (or it could not open) */
  bool alt;           /* the raw baseline's second way exists on this device */
  char raw_note[320]; /* why there is no raw baseline */
  size_t size_cap;    /* largest size measured on this device */
  char cap_reason[200];
  bench_row *rows; /* [path * size_count + size index], the device paths */
  bench_host_limit limit;
  double seconds; /* time spent on the device */
} bench_device;

typedef struct bench_pair {
  size_t from, to; /* indices into bench_run.devices */
  bench_path path; /* PATH_PEER or PATH_CROSS */
  bool has_raw;
  char raw_call[200];     /* the raw way: "cuMemcpyPeer + cuCtxSynchronize" */
  bool has_alt;           /* cross: a second raw way, through the devices' second ways (raw_ops' alt) */
  char raw_call_alt[200]; /* its calls */
  char raw_note[320];     /* why there is no raw way */
  size_t size_cap;
  char cap_reason[200];
  bench_row *rows; /* [size index] */
  double seconds;
} bench_pair;

/* The host's best streaming copy (memcpy of a block larger than the last-level
 * cache, on 1, 2, 4, ... threads), measured once a run, where a device needs it. */
typedef struct bench_host_copy {
  bool done, measured;
  double gbs;            /* the best, GB/s */
  int threads;           /* on how many threads */
  double one_thread_gbs; /* on one */
  size_t bytes;          /* the block copied */
  size_t llc;            /* the last-level cache, bytes (32 MiB where the system says nothing) */
  bool llc_known;        /* false: the system said nothing; 32 MiB was assumed */
  char why[120];         /* not measured: why */
} bench_host_copy;

typedef struct bench_run {
  bench_options opt;
  bench_host_copy host_copy;
  tool_system sys;
  bench_device *devices;
  size_t device_count;
  size_t left_out[BENCH_MAX_DEVICES]; /* debugging devices not measured by default */
  size_t left_out_count;
  bench_pair *pairs;
  size_t pair_count;
  long planned;     /* rows to measure */
  int failures;     /* failed rows, plus failures outside rows */
  bool interrupted; /* Ctrl-C (or SIGTERM) stopped the run: what it holds is partial */
  double seconds;
} bench_run;

/* ---- bench.c ---- */

/* Has Ctrl-C (or SIGTERM) asked the run to stop? Measuring stops at the next row. */
bool bench_interrupted(void);

/* ---- bench_options.c ---- */

/* Parses argv (the arguments after "bench"). Returns 0, or 2 with a sentence in err. */
int bench_parse(int argc, char **argv, bench_options *opt, char *err, size_t err_size);
/* Device indices and backend names exist? After ferry_init. Returns 0, or 2 with a sentence in err. */
int bench_check_selection(const bench_options *opt, char *err, size_t err_size);
void bench_usage(FILE *f);
void bench_help(FILE *f);
/* "4 KiB", "1 GiB", "1000 B", "1 byte", "1.5 MiB" */
const char *bench_size_text(size_t bytes, char buf[32]);
/* "23.5 GiB": memory sizes, rounded to a tenth */
const char *bench_size_approx(uint64_t bytes, char buf[32]);
/* "4K", "1M", "1G" (axis labels); "1000" for sizes that are not a whole K/M/G */
const char *bench_size_short(size_t bytes, char buf[32]);
/* "1 sample", "3 samples" */
const char *bench_plural(long n, const char *one, const char *many, char buf[64]);

/* ---- bench_measure.c ---- */

/* Before measuring: the device's size cap, and whether its raw baseline starts
 * (d->raw, d->alt; d->raw_note and a note on stderr when it does not). */
void bench_device_prepare(bench_device *d);
/* Bytes of host memory the system can still give (MemAvailable), or 0 when unknown. */
uint64_t bench_host_available(void);
/* The largest size measured on a device (d->size_cap, d->cap_reason), and on a pair. */
void bench_device_cap(bench_device *d);
void bench_pair_cap(const bench_run *run, bench_pair *p);
/* Does the device have the path at this size? When not, why[] says why. */
bool bench_path_applies(const bench_device *d, bench_path p, size_t bytes, char *why, size_t why_size);
/* Measures one device of the run (d->dev, d->info and d->rows set); rows record
 * failures, run->failures counts them, and each is said on stderr as it happens. */
void bench_measure_device(bench_run *run, bench_device *d);
/* Measures a copy between two devices. */
void bench_measure_pair(bench_run *run, bench_pair *p);
/* A row left unmeasured by an interruption says so (skipped, with that reason). */
void bench_row_interrupted(bench_row *row);
#define BENCH_INTERRUPTED "the run was interrupted first"
double bench_now(void);
/* Five numbers of n samples (sorted in place), quartiles interpolated between them. */
bench_stats bench_summarise(double *v, int n);
/* The row's figure: GB/s (10^9 bytes/s) for bandwidth rows, microseconds for latency rows. */
double bench_figure(const bench_row *row, double seconds);
/* ferry / raw, as "above 1: ferry is faster" (raw time / ferry time); 0 when there is no raw figure. */
double bench_ratio(const bench_row *row);
/* The calls of a raw way on a device path ("clEnqueueWriteBuffer+clFinish"); NULL when there are none. */
const char *bench_raw_call(const bench_device *d, bench_path p, int way, char *buf, size_t size);
/* The short name of a way: "enqueue", "map", "memcpy". */
const char *bench_raw_tag(const raw_ops *raw, int way);
bench_row *bench_device_row(const bench_run *run, const bench_device *d, bench_path p, size_t size_index);
bench_row *bench_pair_row(const bench_run *run, const bench_pair *p, size_t size_index);
/* "peer 0>1" */
const char *bench_pair_label(const bench_run *run, const bench_pair *p, char buf[48]);
/* The calls and the short name of a row's raw figure (0: the one shown, 1: the
 * other way), on a device (p NULL) or a pair. NULL when there is no such figure. */
const char *bench_row_raw_call(const bench_run *run, const bench_device *d, const bench_pair *p, const bench_row *row,
                               int figure, char *buf, size_t size);
const char *bench_row_raw_tag(const bench_device *d, const bench_pair *p, const bench_row *row, int figure);

/* ---- bench_host.c ---- */

/* Is the host's limit measured and printed for this device? (Full runs, h2d or
 * d2h asked, a device that is not a CPU and not a debugging one.) */
bool bench_wants_limit(const bench_run *run, const bench_device *d);
/* The host's streaming copy (once a run; run->host_copy). */
void bench_measure_host_copy(bench_run *run);
/* After the device's rows: d->limit (the pinned figures, the cold transfers). */
void bench_measure_limit(bench_run *run, bench_device *d);
/* The limit in GB/s for one direction: the lesser of the pinned row and the host's
 * copy, whichever exist; 0 when neither does. */
double bench_limit_of(const bench_run *run, const bench_device *d, bool to_device);
/* Both directions' limit is the pinned rows (not the host's copy). */
bool bench_pinned_is_limit(const bench_run *run, const bench_device *d);
/* The share of the limit a pageable transfer of this size should reach: 4 MiB
 * 0.75, 16 MiB 0.85, 64 MiB 0.9, 1 GiB 0.95 where the pinned rows are the limit,
 * else 0.9; 0 below 4 MiB (no target). */
double bench_limit_target(size_t bytes, bool pinned_is_limit);
/* The warm figures (GB/s) of the h2d and d2h rows at this size; 0 where not measured. */
void bench_limit_warm(const bench_run *run, const bench_device *d, size_t bytes, double out[2]);

/* ---- bench_table.c ---- */

void bench_print_header(FILE *f, const bench_run *run);
void bench_print_device(FILE *f, const bench_run *run, const bench_device *d);
void bench_print_pairs(FILE *f, const bench_run *run);
void bench_print_legend(FILE *f, const bench_run *run);
/* --summary: one line per device (h2d, d2h, d2d at its largest size, alloc+free at its
 * smallest), the pairs in a sentence; `tables` names where the full tables are (or NULL). */
void bench_print_summary(FILE *f, const bench_run *run, const char *tables);
/* A bandwidth with the unit that fits: "64.0 GB/s", "95.3 MB/s", "712 KB/s" */
const char *bench_bandwidth_text(double gbs, char buf[32]);
/* The progress bar (stderr, only when it is a terminal). */
void bench_progress_start(long total_steps);
/* Says that the step `what` (a row) at `bytes` begins. */
void bench_progress_step(const char *where, const char *what, size_t bytes);
void bench_progress_clear(void);
void bench_progress_end(void);
/* A sentence on stderr, clear of the progress bar. */
void bench_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- bench_export.c ---- */

/* Into the file opened before measuring (tool_output_open); 0 on success, otherwise a
 * sentence was printed. */
int bench_write_json(tool_output *out, const bench_run *run);
int bench_write_csv(tool_output *out, const bench_run *run);

/* ---- bench_svg.c ---- */

int bench_write_svg(tool_output *out, const bench_run *run);

#endif
