/* `ferry bench`: the command line. Every value is checked here, with a sentence for what is wrong. */
#include "bench.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define REPEAT_MAX 100000
#define FACTOR_MAX 1024

void bench_usage(FILE *f) {
  fprintf(f, "usage: ferry bench [--device N|all] [--backend NAME] [--paths LIST] [--sizes 4K:1G] [--repeat N]\n"
             "                   [--quick] [--json FILE] [--csv FILE] [--plot FILE.svg] [--tables FILE]\n"
             "                   [--summary] [-q] [--no-legend]\n"
             "       ferry bench --help   (every option, and what each row measures)\n");
}

void bench_help(FILE *f) {
  fprintf(f,
          "usage: ferry bench [options]\n"
          "\n"
          "Measures ferry's transfers and allocations on each device, and beside each figure the raw\n"
          "driver call a program written against the device would make (memcpy, cuMemcpy*,\n"
          "clEnqueue*Buffer or map + memcpy, vkCmdCopyBuffer or memcpy into mapped memory; where a\n"
          "device has two such ways, both are measured and the faster is shown), on the same buffers\n"
          "in the same run, with the ratio ferry / raw (above 1: ferry is faster).\n"
          "\n"
          "what to measure:\n"
          "  --device N|all    the devices: an index from 'ferry info', a comma list (--device 0,2), or\n"
          "                    all of them. Default: every device but the checked backend's (a debugging\n"
          "                    device, measured only when --device or --backend names it)\n"
          "  --backend NAME    the devices of these backends (--backend cuda,opencl); with --device, the\n"
          "                    devices either names\n"
          "  --paths LIST      the rows to measure, a comma list of: h2d d2h h2d-pinned d2h-pinned host-ptr\n"
          "                    zero-copy d2d async async-pinned both both-pinned elapsed alloc peer cross\n"
          "                    (also: pinned, sync, queues, pairs). Default: all\n"
          "  --sizes SPEC      transfer sizes in bytes, with an optional K, M or G suffix (binary:\n"
          "                    1K = 1024). A:B means A, 4A, 16A, ... up to B (B itself only when it\n"
          "                    is A times a power of 4); A:B:F steps by the factor F instead (2..%d);\n"
          "                    A,B,C is a list. Sizes above a device's max_allocation, or too large\n"
          "                    for the host memory available, are skipped on it with a note.\n"
          "                    Default 4K:1G (4K 16K 64K 256K 1M 4M 16M 64M 256M 1G); --quick: 4K:16M.\n"
          "  --repeat N        samples behind every figure (1..%d). Default: automatic, as many as\n"
          "                    fit a time budget per figure, 5 to 21 (3 to 9 with --quick; at least 3\n"
          "                    from 256 MiB on).\n"
          "  --quick           a short run: sizes 4K:16M, fewer samples, shorter budgets. What\n"
          "                    'make run' runs.\n"
          "\n"
          "output:\n"
          "  --json FILE       every figure as JSON ('-': stdout, and the tables go to stderr);\n"
          "                    JSON.md (below) describes every field\n"
          "  --csv FILE        every figure as CSV, one line per device (or pair), path and size ('-': stdout)\n"
          "  --plot FILE.svg   an SVG chart: per device, bandwidth, time per operation and ferry/raw\n"
          "                    against size (the name must end in .svg)\n"
          "  --tables FILE     the tables (header, a table per device, legend) into FILE, not stdout\n"
          "  --summary         a short table on stdout instead of the full ones: per device h2d, d2h,\n"
          "                    d2d and alloc+free, with ferry/raw ('make run' shows it, --tables FILE\n"
          "                    keeping the full ones)\n"
          "  -q, --quiet       nothing on stdout (failures are still said on stderr)\n"
          "  --no-legend       the tables without the legend under them\n"
          "  -h, --help        this text\n"
          "Output files are opened before anything is measured. Options take their value as the next\n"
          "argument or after '=' (--sizes=4K:1M); --device, --backend and --paths given twice add up,\n"
          "the others are taken once. Ctrl-C stops the run: what was measured is written, marked\n"
          "partial.\n",
          FACTOR_MAX, REPEAT_MAX);
  fprintf(f, "\n"
             "rows (each device, each size):\n"
             "  h2d, d2h           ferry_host_to_device / ferry_device_to_host with ordinary (malloc) memory\n"
             "  h2d pinned, d2h pinned\n"
             "                     the same with memory from ferry_host_alloc (raw: the driver's pinned\n"
             "                     memory where it has an allocator, else the same block)\n"
             "  host-ptr sync      on a ferry_alloc_host_ptr buffer: ferry_host_to_device + ferry_device_to_host\n"
             "                     on its own array (synchronisation only, no copy by ferry), in microseconds,\n"
             "                     against the raw h2d + d2h of the same bytes on an ordinary buffer\n"
             "  zero-copy sync     the same on a ferry_alloc_zero_copy buffer (host devices only)\n"
             "  d2d                ferry_device_to_device between two buffers of the device\n"
             "  write_async        ferry_write_async from ordinary memory on a queue of the device: the\n"
             "                     microseconds to submit one (the queue is synchronised after each sample,\n"
             "                     untimed; a sample queues 64 MiB at most), against the driver's own\n"
             "                     non-blocking write where it has one (OpenCL, CUDA, Vulkan)\n"
             "  async pinned       the same from ferry_host_alloc (pinned) memory\n"
             "  h2d+d2h 2q         ferry_write_async on one queue and ferry_read_async on a second at once,\n"
             "                     both synchronised: GB/s both ways together (raw: two OpenCL queues, two\n"
             "                     CUDA streams, two VkQueues)\n"
             "  both pinned        h2d+d2h 2q from and into two ferry_host_alloc (pinned) blocks\n"
             "  elapsed            ferry_write_async from pinned memory between two ferry_event_record, timed\n"
             "                     by ferry_event_elapsed: GB/s by the events' clock (raw: the same copy\n"
             "                     between two of the driver's events, cuEventElapsedTime; ferry/raw near 1:\n"
             "                     the two clocks agree)\n"
             "  alloc+free         ferry_alloc + ferry_free, in microseconds (raw: the driver's own pair)\n"
             "rows between two devices (every ordered pair measured; BENCH.md says which pairs):\n"
             "  peer A>B           ferry_device_to_device between two devices of one backend, against the\n"
             "                     driver's peer copy (cuMemcpyPeer)\n"
             "  cross A>B          ferry_device_to_device between devices, against the raw d2h of A into host\n"
             "                     memory + the raw h2d of B from it\n"
             "\n"
             "how it measures:\n"
             "  Host memory is touched before timing. Each figure is warmed up, then ferry and the raw\n"
             "  calls alternate, sample after sample, so that drift hits both; a sample times enough\n"
             "  back-to-back calls to last 0.2-0.5 ms (small sizes), and every figure is the median of\n"
             "  its samples. The spread (+-) is half the interquartile range, relative to the median, shown\n"
             "  from 5 samples on; the JSON and CSV give min, p25, median, p75 and max. The bytes of one\n"
             "  ferry transfer and one raw transfer per way are checked per device, path and size. Each\n"
             "  column has one unit: GB/s (10^9 bytes/s) for transfers, microseconds per operation for all.\n"
             "\n"
             "exit status: 0 every figure measured; 1 something failed, or there was nothing to measure\n"
             "(each said in a sentence); 2 bad arguments, or an output file that cannot be written; 130\n"
             "interrupted by Ctrl-C (143: SIGTERM), with what was measured written, marked partial.\n"
             "\n"
             "environment: FERRY_BACKENDS=opencl,native keeps only these backends; every variable ferry\n"
             "reads is in 'ferry help env'.\n");
  char bench[1200], json[1200];
  fprintf(f,
          "\ndocumentation ('man ferry' too):\n  %s: every option, row and column, and how it measures\n"
          "  %s: every field of --json\n",
          tool_doc_path("BENCH.md", bench, sizeof bench), tool_doc_path("JSON.md", json, sizeof json));
}

static int fail(char *err, size_t err_size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t err_size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, err_size, fmt, ap);
  va_end(ap);
  return 2;
}

const char *bench_size_text(size_t bytes, char buf[32]) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  size_t whole = bytes;
  while (u < 6 && whole >= 1024 && whole % 1024 == 0) {
    whole /= 1024;
    u++;
  }
  if (bytes == 1) {
    snprintf(buf, 32, "1 byte");
    return buf;
  }
  if (u > 0 || bytes < 1024) {
    snprintf(buf, 32, "%zu %s", whole, units[u]);
    return buf;
  }
  double v = (double)bytes;
  u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    u++;
  }
  snprintf(buf, 32, "%.1f %s", v, units[u]);
  return buf;
}

const char *bench_size_approx(uint64_t bytes, char buf[32]) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    u++;
  }
  if (u == 0 || v == (double)(uint64_t)v)
    snprintf(buf, 32, "%.0f %s", v, units[u]);
  else
    snprintf(buf, 32, "%.1f %s", v, units[u]);
  return buf;
}

const char *bench_size_short(size_t bytes, char buf[32]) {
  static const char suffix[] = " KMGTPE";
  int u = 0;
  size_t whole = bytes;
  while (u < 6 && whole >= 1024 && whole % 1024 == 0) {
    whole /= 1024;
    u++;
  }
  if (u == 0)
    snprintf(buf, 32, "%zu", whole);
  else
    snprintf(buf, 32, "%zu%c", whole, suffix[u]);
  return buf;
}

const char *bench_plural(long n, const char *one, const char *many, char buf[64]) {
  snprintf(buf, 64, "%ld %s", n, n == 1 ? one : many);
  return buf;
}

/* One size: digits, then optionally K, M, G or T (any case), optionally followed by B or iB. */
typedef enum size_parse { SIZE_OK, SIZE_GARBAGE, SIZE_ZERO, SIZE_TOO_LARGE } size_parse;

static size_parse parse_size(const char *s, size_t len, size_t *out) {
  if (len == 0 || len >= 64) return SIZE_GARBAGE;
  char text[64];
  memcpy(text, s, len);
  text[len] = '\0';
  if (text[0] < '0' || text[0] > '9') return SIZE_GARBAGE;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(text, &end, 10);
  bool range = errno == ERANGE;
  int shift = 0;
  switch (*end) {
  case 'k':
  case 'K':
    shift = 10;
    end++;
    break;
  case 'm':
  case 'M':
    shift = 20;
    end++;
    break;
  case 'g':
  case 'G':
    shift = 30;
    end++;
    break;
  case 't':
  case 'T':
    shift = 40;
    end++;
    break;
  default: break;
  }
  if (shift && (end[0] == 'i' || end[0] == 'I') && (end[1] == 'b' || end[1] == 'B'))
    end += 2;
  else if (end[0] == 'b' || end[0] == 'B')
    end++;
  if (*end != '\0') return SIZE_GARBAGE;
  if (range || v > (unsigned long long)(SIZE_MAX >> shift)) return SIZE_TOO_LARGE;
  if (v == 0) return SIZE_ZERO;
  *out = (size_t)v << shift;
  return SIZE_OK;
}

static int size_error(const char *spec, const char *item, size_t len, size_parse why, char *err, size_t err_size) {
  int shown = (int)(len < 40 ? len : 40);
  if (why == SIZE_ZERO)
    return fail(err, err_size, "--sizes %s: '%.*s' is 0 bytes, which measures nothing; sizes start at 1 byte", spec,
                shown, item);
  if (why == SIZE_TOO_LARGE)
    return fail(err, err_size, "--sizes %s: '%.*s' is too large to be a size on this machine", spec, shown, item);
  return fail(err, err_size,
              "--sizes %s: '%.*s' is not a size; write a whole number of bytes with an optional K, M or G suffix "
              "(4096, 64K, 16M, 1G)",
              spec, shown, item);
}

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}

static int parse_sizes(const char *spec, bench_options *opt, char *err, size_t err_size) {
  size_t n = 0;
  if (*spec == '\0') return fail(err, err_size, "--sizes needs a value, for example --sizes 4K:1G or --sizes 4K,1M");
  const char *colon = strchr(spec, ':');
  if (colon) {
    if (strchr(spec, ','))
      return fail(err, err_size, "--sizes %s: use either a range A:B or a list A,B,C, not both", spec);
    const char *colon2 = strchr(colon + 1, ':');
    size_t a, b, factor = 4;
    size_t blen = colon2 ? (size_t)(colon2 - colon - 1) : strlen(colon + 1);
    size_parse why = parse_size(spec, (size_t)(colon - spec), &a);
    if (why != SIZE_OK) return size_error(spec, spec, (size_t)(colon - spec), why, err, err_size);
    why = parse_size(colon + 1, blen, &b);
    if (why != SIZE_OK) return size_error(spec, colon + 1, blen, why, err, err_size);
    if (colon2) {
      char *end;
      errno = 0;
      long f = strtol(colon2 + 1, &end, 10);
      if (errno || end == colon2 + 1 || *end != '\0' || f < 2 || f > FACTOR_MAX)
        return fail(err, err_size,
                    "--sizes %s: the step factor '%.40s' after the second ':' must be a whole number from 2 to %d",
                    spec, colon2 + 1, FACTOR_MAX);
      factor = (size_t)f;
    }
    if (a > b) {
      char ta[32], tb[32];
      return fail(err, err_size,
                  "--sizes %s: the first size '%.*s' (%s) is larger than the last '%.*s' (%s); write the smaller first",
                  spec, (int)(colon - spec < 40 ? colon - spec : 40), spec, bench_size_text(a, ta),
                  (int)(blen < 40 ? blen : 40), colon + 1, bench_size_text(b, tb));
    }
    for (size_t s = a; s <= b; s *= factor) {
      if (n == BENCH_MAX_SIZES)
        return fail(err, err_size,
                    "--sizes %s: that is more than %d sizes; use a larger step (A:B:4) or a shorter range", spec,
                    BENCH_MAX_SIZES);
      opt->sizes[n++] = s;
      if (s > SIZE_MAX / factor) break;
    }
  } else {
    const char *p = spec;
    for (;;) {
      const char *comma = strchr(p, ',');
      size_t len = comma ? (size_t)(comma - p) : strlen(p);
      size_t v;
      if (len == 0)
        return fail(err, err_size, "--sizes %s: an empty item in the list (two commas, or a comma at an end)", spec);
      size_parse why = parse_size(p, len, &v);
      if (why != SIZE_OK) return size_error(spec, p, len, why, err, err_size);
      if (n == BENCH_MAX_SIZES)
        return fail(err, err_size, "--sizes %s: that is more than %d sizes", spec, BENCH_MAX_SIZES);
      opt->sizes[n++] = v;
      if (!comma) break;
      p = comma + 1;
    }
    qsort(opt->sizes, n, sizeof opt->sizes[0], cmp_size);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
      if (kept == 0 || opt->sizes[kept - 1] != opt->sizes[i]) opt->sizes[kept++] = opt->sizes[i];
    n = kept;
  }
  opt->size_count = n;
  opt->sizes_given = true;
  return 0;
}

/* --device N[,M...] or all. Given more than once, the lists add up (--device 2 --device 0
 * measures both); "all" takes in every device whatever else is named. */
static int parse_devices(const char *spec, bench_options *opt, char *err, size_t err_size) {
  if (strcmp(spec, "all") == 0) {
    opt->device_all = true;
    return 0;
  }
  const char *p = spec;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char text[32];
    bool digits = len > 0 && len < sizeof text;
    for (size_t i = 0; digits && i < len; i++)
      digits = p[i] >= '0' && p[i] <= '9';
    if (!digits)
      return fail(err, err_size,
                  "--device %s: '%.*s' is not a device; give an index from 'ferry info' (0, 1, ...), "
                  "a comma list of them, or 'all'",
                  spec, (int)(len < 40 ? len : 40), p);
    memcpy(text, p, len);
    text[len] = '\0';
    errno = 0;
    unsigned long long v = strtoull(text, NULL, 10);
    if (errno || v >= BENCH_MAX_DEVICES)
      return fail(err, err_size, "--device %s: there is no device %s; 'ferry info' lists the devices", spec, text);
    bool seen = false;
    for (size_t i = 0; i < opt->device_count; i++)
      seen = seen || opt->devices[i] == (size_t)v;
    if (!seen) opt->devices[opt->device_count++] = (size_t)v;
    if (!comma) break;
    p = comma + 1;
  }
  return 0;
}

static int parse_repeat(const char *s, bench_options *opt, char *err, size_t err_size) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0' || v < 1 || v > REPEAT_MAX)
    return fail(err, err_size, "--repeat %s: give the number of samples per figure as a whole number from 1 to %d", s,
                REPEAT_MAX);
  opt->repeat = (int)v;
  return 0;
}

/* --paths: ids, labels, and the groups "pinned", "sync", "queues", "pairs". The first --paths
 * replaces the default (all); a second one adds to it. */
static int parse_paths(const char *spec, bench_options *opt, char *err, size_t err_size) {
  if (!opt->paths_given) memset(opt->paths, 0, sizeof opt->paths);
  opt->paths_given = true;
  const char *p = spec;
  if (*spec == '\0') return fail(err, err_size, "--paths needs a value, for example --paths h2d,d2h");
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == 0)
      return fail(err, err_size, "--paths %s: an empty item in the list (two commas, or one at an end)", spec);
    bool known = false;
    for (int k = 0; k < PATH_COUNT; k++) {
      const char *id = bench_paths[k].id, *label = bench_paths[k].label;
      if ((strlen(id) == len && strncmp(p, id, len) == 0) || (strlen(label) == len && strncmp(p, label, len) == 0)) {
        opt->paths[k] = known = true;
      }
    }
    static const struct {
      const char *name;
      bench_path a, b;
    } groups[] = {{"pinned", PATH_H2D_PINNED, PATH_D2H_PINNED},
                  {"sync", PATH_HOST_PTR, PATH_ZERO_COPY},
                  {"queues", PATH_ASYNC, PATH_ELAPSED},
                  {"pairs", PATH_PEER, PATH_CROSS},
                  {"alloc+free", PATH_ALLOC, PATH_ALLOC}};
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
      if (strlen(groups[g].name) == len && strncmp(p, groups[g].name, len) == 0)
        for (int k = groups[g].a; k <= (int)groups[g].b; k++) /* a group is a run of rows */
          opt->paths[k] = known = true;
    if (!known) {
      char list[256] = "";
      for (int k = 0; k < PATH_COUNT; k++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", bench_paths[k].id);
      return fail(err, err_size,
                  "--paths %s: '%.*s' is not a path; the paths are %s (and the groups pinned, sync, "
                  "queues, pairs)",
                  spec, (int)(len < 40 ? len : 40), p, list);
    }
    if (!comma) break;
    p = comma + 1;
  }
  return 0;
}

static int parse_backends(const char *spec, bench_options *opt, char *err, size_t err_size) {
  const char *p = spec;
  if (*spec == '\0') return fail(err, err_size, "--backend needs a value, for example --backend cuda");
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == 0)
      return fail(err, err_size, "--backend %s: an empty item in the list (two commas, or one at an end)", spec);
    if (len >= sizeof opt->backends[0])
      return fail(err, err_size, "--backend %s: '%.40s' is not a backend ('ferry info' lists them)", spec, p);
    bool seen = false;
    for (size_t i = 0; i < opt->backend_count; i++)
      seen = seen || (strlen(opt->backends[i]) == len && strncmp(opt->backends[i], p, len) == 0);
    if (!seen) {
      if (opt->backend_count == BENCH_MAX_BACKENDS)
        return fail(err, err_size, "--backend %s: more than %d backends", spec, BENCH_MAX_BACKENDS);
      memcpy(opt->backends[opt->backend_count], p, len);
      opt->backends[opt->backend_count++][len] = '\0';
    }
    if (!comma) break;
    p = comma + 1;
  }
  return 0;
}

/* Does `name` end in `suffix`, in any case? */
static bool ends_with(const char *name, const char *suffix) {
  size_t n = strlen(name), k = strlen(suffix);
  if (n < k) return false;
  for (size_t i = 0; i < k; i++) {
    char a = name[n - k + i], b = suffix[i];
    if (a >= 'A' && a <= 'Z') a = (char)(a - 'A' + 'a');
    if (a != b) return false;
  }
  return true;
}

/* An output file's name: given, not an option taken for a name, and for --plot an SVG. */
static int parse_file(const char *option, const char *value, bool after_equals, char *err, size_t err_size) {
  if (*value == '\0') return fail(err, err_size, "%s needs a file name", option);
  /* "--json --no-legend" means the option, not a file of that name; "--json=--x" or
   * "--json ./--x" name such a file. "-" alone is stdout. */
  if (!after_equals && value[0] == '-' && value[1] != '\0')
    return fail(err, err_size,
                "%s needs a file name, and '%s' is an option; for a file of that name write %s ./%s or %s=%s", option,
                value, option, value, option, value);
  if (strcmp(option, "--plot") == 0) {
    if (strcmp(value, "-") == 0) return fail(err, err_size, "--plot needs a file name (the SVG does not go to stdout)");
    if (!ends_with(value, ".svg"))
      return fail(err, err_size,
                  "--plot %s: the chart is SVG, so its name must end in .svg (an SVG converts to PNG with, for "
                  "example, rsvg-convert -o chart.png chart.svg)",
                  value);
  }
  return 0;
}

int bench_parse(int argc, char **argv, bench_options *opt, char *err, size_t err_size) {
  memset(opt, 0, sizeof *opt);
  for (int k = 0; k < PATH_COUNT; k++)
    opt->paths[k] = true;
  const char *sizes_spec = NULL;
  enum { O_DEVICE, O_BACKEND, O_PATHS, O_SIZES, O_REPEAT, O_JSON, O_CSV, O_PLOT, O_TABLES, O_VALUED };
  static const char *const valued[O_VALUED] = {"--device", "--backend", "--paths", "--sizes", "--repeat",
                                               "--json",   "--csv",     "--plot",  "--tables"};
  /* The lists (--device, --backend, --paths) add up when given twice; the others take
   * one value, and a second one is refused rather than one of them silently dropped. */
  static const bool once[O_VALUED] = {
      [O_SIZES] = true, [O_REPEAT] = true, [O_JSON] = true, [O_CSV] = true, [O_PLOT] = true, [O_TABLES] = true};
  const char *given[O_VALUED] = {NULL};
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      opt->help = true;
      return 0;
    }
    if (strcmp(arg, "--quick") == 0) {
      opt->quick = true;
      continue;
    }
    if (strcmp(arg, "-q") == 0 || strcmp(arg, "--quiet") == 0) {
      opt->quiet = true;
      continue;
    }
    if (strcmp(arg, "--no-legend") == 0) {
      opt->no_legend = true;
      continue;
    }
    if (strcmp(arg, "--summary") == 0) {
      opt->summary = true;
      continue;
    }
    const char *value = NULL;
    int which = -1;
    bool after_equals = false;
    for (int k = 0; k < O_VALUED && which < 0; k++) {
      size_t len = strlen(valued[k]);
      if (strncmp(arg, valued[k], len) != 0) continue;
      if (arg[len] == '=') {
        which = k;
        value = arg + len + 1;
        after_equals = true;
      } else if (arg[len] == '\0') {
        which = k;
        if (i + 1 >= argc)
          return fail(err, err_size, "%s needs a value (ferry bench --help lists what each option takes)", valued[k]);
        value = argv[++i];
      }
    }
    if (which < 0) {
      if (arg[0] == '-') return fail(err, err_size, "unknown option '%s'", arg);
      return fail(err, err_size, "unexpected argument '%s' (ferry bench takes only options)", arg);
    }
    if (once[which] && given[which])
      return fail(err, err_size, "%s is given twice ('%.200s' and '%.200s'); give it once", valued[which], given[which],
                  value);
    given[which] = value;
    int rc = 0;
    switch (which) {
    case O_DEVICE: rc = parse_devices(value, opt, err, err_size); break;
    case O_BACKEND: rc = parse_backends(value, opt, err, err_size); break;
    case O_PATHS: rc = parse_paths(value, opt, err, err_size); break;
    case O_SIZES: sizes_spec = value; break;
    case O_REPEAT: rc = parse_repeat(value, opt, err, err_size); break;
    default:
      rc = parse_file(valued[which], value, after_equals, err, err_size);
      if (which == O_JSON) opt->json_path = value;
      if (which == O_CSV) opt->csv_path = value;
      if (which == O_PLOT) opt->plot_path = value;
      if (which == O_TABLES) opt->tables_path = value;
      break;
    }
    if (rc) return rc;
  }
  if (sizes_spec) {
    int rc = parse_sizes(sizes_spec, opt, err, err_size);
    if (rc) return rc;
  } else {
    size_t last = opt->quick ? ((size_t)16 << 20) : ((size_t)1 << 30);
    for (size_t s = 4096; s <= last; s *= 4)
      opt->sizes[opt->size_count++] = s;
  }
  const char *files[4] = {opt->json_path, opt->csv_path, opt->plot_path, opt->tables_path};
  const char *names[4] = {"--json", "--csv", "--plot", "--tables"};
  for (int a = 0; a < 4; a++)
    for (int b = a + 1; b < 4; b++)
      if (files[a] && files[b] && strcmp(files[a], files[b]) == 0)
        return fail(err, err_size, "%s and %s name the same file '%s'; give each its own", names[a], names[b],
                    files[a]);
  return 0;
}

int bench_check_selection(const bench_options *opt, char *err, size_t err_size) {
  size_t device_count = ferry_device_count();
  for (size_t i = 0; i < opt->device_count; i++) {
    if (opt->devices[i] >= device_count) {
      if (device_count == 0)
        return fail(err, err_size, "--device %zu: this machine has no devices ('ferry info' says why)",
                    opt->devices[i]);
      char count[64];
      return fail(err, err_size,
                  "--device %zu: there is no device %zu; this machine has %s (0..%zu), 'ferry info' "
                  "lists them",
                  opt->devices[i], opt->devices[i], bench_plural((long)device_count, "device", "devices", count),
                  device_count - 1);
    }
  }
  for (size_t i = 0; i < opt->backend_count; i++) {
    char known[256] = "";
    bool found = false;
    for (size_t b = 0; b < ferry_backend_count(); b++) {
      ferry_backend_info info;
      if (ferry_backend_get(b, &info) != FERRY_OK) continue;
      snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", b ? ", " : "", info.name);
      if (strcmp(info.name, opt->backends[i]) != 0) continue;
      found = true;
      if (info.device_count == 0)
        return fail(err, err_size, "--backend %s: the %s backend has no devices on this machine: %s", opt->backends[i],
                    info.name, info.status);
    }
    if (!found)
      return fail(err, err_size, "--backend %s: there is no backend '%s'; this build has %s", opt->backends[i],
                  opt->backends[i], known);
  }
  return 0;
}
