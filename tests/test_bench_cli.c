/*
 * The `ferry` command from the command line, as a user runs it: exit codes,
 * sentences, what goes to stdout and stderr, and files written, for `ferry bench`
 * (good and bad arguments, output files checked before measuring, runs that
 * measure nothing, --paths, --backend, --quiet, --no-legend, the checked backend
 * left out, 100-column tables, units, plurals), `ferry info` (--verbose, --json
 * FILE, --help), `ferry help [env]`, `-V`, and the manual page.
 *
 * Runs the built `ferry` program: $FERRY_TOOL, else ../ferry beside this test's
 * directory (the build tree's layout). Skipped (77) when neither exists. Real runs
 * keep to the host devices and a size or two, so the test takes a few seconds.
 * With --fake-cuda (ctest bench_cli.cuda_fake, on two fake GPUs) it checks the
 * cuda devices instead: driver facts, and the peer copies between the two GPUs.
 * The JSON, CSV and SVG are read back by tests/bench_output_check.py.
 */
#include "harness.h"

#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char tool[4096];

static bool find_tool(void) {
  const char *env = getenv("FERRY_TOOL");
  if (env && *env) {
    snprintf(tool, sizeof tool, "%s", env);
    return access(tool, X_OK) == 0;
  }
  char self[2048];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return false;
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  if (!slash) return false;
  *slash = '\0';
  snprintf(tool, sizeof tool, "%s/../ferry", self);
  return access(tool, X_OK) == 0;
}

typedef struct result {
  int code; /* exit status, or -1 when it did not exit normally */
  double seconds;
  char out[1 << 17], err[1 << 16];
} result;

static result res;

static void slurp(int fd, char *buf, size_t size) {
  size_t used = 0;
  lseek(fd, 0, SEEK_SET);
  ssize_t n;
  while (used + 1 < size && (n = read(fd, buf + used, size - 1 - used)) > 0)
    used += (size_t)n;
  buf[used] = '\0';
  close(fd);
}

/* The environment of the next runs: "NAME=VALUE" (an empty VALUE unsets NAME). */
static const char *env_for_run[8];

/* Runs `ferry ARGS...` (NULL-terminated), with only the native backend unless
 * env_for_run says otherwise. */
static const result *ferry_v(const char *first, va_list ap) {
  const char *argv[64] = {tool};
  int argc = 1;
  for (const char *a = first; a && argc < 62; a = va_arg(ap, const char *))
    argv[argc++] = a;
  argv[argc] = NULL;

  char out_name[] = "/tmp/ferry-cli-out-XXXXXX", err_name[] = "/tmp/ferry-cli-err-XXXXXX";
  int out = mkstemp(out_name), err = mkstemp(err_name);
  res.code = -1;
  res.out[0] = res.err[0] = '\0';
  if (out < 0 || err < 0) {
    CHECK_MSG(false, "mkstemp failed");
    return &res;
  }
  unlink(out_name);
  unlink(err_name);
  fflush(NULL);
  double t0 = harness_now_s();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out, 1);
    dup2(err, 2);
    setenv("FERRY_BACKENDS", "native", 1);
    for (int i = 0; i < 8 && env_for_run[i]; i++) {
      char name[128];
      const char *eq = strchr(env_for_run[i], '=');
      snprintf(name, sizeof name, "%.*s", (int)(eq - env_for_run[i]), env_for_run[i]);
      if (eq[1])
        setenv(name, eq + 1, 1);
      else
        unsetenv(name);
    }
    execv(tool, (char *const *)argv);
    _exit(127);
  }
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) res.code = WEXITSTATUS(status);
  res.seconds = harness_now_s() - t0;
  slurp(out, res.out, sizeof res.out);
  slurp(err, res.err, sizeof res.err);
  return &res;
}

static const result *ferry(const char *first, ...) {
  va_list ap;
  va_start(ap, first);
  const result *r = ferry_v(first, ap);
  va_end(ap);
  return r;
}

/* `ferry bench ARGS...` */
static const result *bench(const char *first, ...) {
  va_list ap;
  va_start(ap, first);
  /* "bench" goes first: shift the arguments by one through a small array. */
  const char *args[64] = {first};
  int n = 1;
  for (const char *a = va_arg(ap, const char *); a && n < 62; a = va_arg(ap, const char *))
    args[n++] = a;
  va_end(ap);
  args[n] = NULL;
  return ferry("bench", args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7], args[8], args[9],
               args[10], args[11], args[12], args[13], args[14], args[15], args[16], (const char *)NULL);
}

/* Bad arguments: exit 2, the sentence and the usage on stderr, nothing on stdout. */
#define CHECK_BAD(needle, ...)                                                                                         \
  do {                                                                                                                 \
    const result *r_ = bench(__VA_ARGS__, (const char *)NULL);                                                         \
    CHECK_MSG(r_->code == 2, "ferry bench %s: exit %d, expected 2; stderr: %s", #__VA_ARGS__, r_->code, r_->err);      \
    CHECK_MSG(strstr(r_->err, needle) != NULL, "ferry bench %s: stderr lacks \"%s\": %s", #__VA_ARGS__, needle,        \
              r_->err);                                                                                                \
    CHECK_MSG(strstr(r_->err, "usage: ferry bench") != NULL, "ferry bench %s: no usage on stderr: %s", #__VA_ARGS__,   \
              r_->err);                                                                                                \
    CHECK_MSG(r_->out[0] == '\0', "ferry bench %s: printed on stdout: %s", #__VA_ARGS__, r_->out);                     \
  } while (0)

/* Counts the occurrences of needle in text. */
static int count_in(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
    n++;
  return n;
}

/* Every line at most `width` columns (the tables are meant for a terminal). */
static bool lines_fit(const char *text, int width, char *longest, size_t size) {
  bool fit = true;
  for (const char *p = text; *p;) {
    const char *end = strchr(p, '\n');
    int len = end ? (int)(end - p) : (int)strlen(p);
    if (len > width && fit) {
      snprintf(longest, size, "%.*s", len, p);
      fit = false;
    }
    p += len + (end ? 1 : 0);
  }
  return fit;
}

/* The first line that contains `needle`, into buf. */
static bool line_of(const char *text, const char *needle, char *buf, size_t size) {
  const char *at = strstr(text, needle);
  if (!at) return false;
  while (at > text && at[-1] != '\n')
    at--;
  snprintf(buf, size, "%.*s", (int)strcspn(at, "\n"), at);
  return true;
}

static bool file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* ---- ferry bench ---------------------------------------------------------------------- */

static void check_help(void) {
  harness_context = "bench --help";
  const result *r = bench("--help", (const char *)NULL);
  CHECK_MSG(r->code == 0, "--help exit %d; stderr: %s", r->code, r->err);
  static const char *const options[] = {"--device N|all", "--backend", "--paths",   "--sizes",    "--repeat",
                                        "--quick",        "--json",    "--csv",     "--plot",     "-q, --quiet",
                                        "--no-legend",    "A:B",       "K, M or G", "-h, --help", "exit status",
                                        "ferry help env", "peer",      "cross"};
  for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
    CHECK_MSG(strstr(r->out, options[i]) != NULL, "ferry bench --help does not mention %s", options[i]);
  char longest[512];
  CHECK_MSG(lines_fit(r->out, 100, longest, sizeof longest), "a --help line is wider than 100: %s", longest);
  r = bench("-h", (const char *)NULL);
  CHECK(r->code == 0 && strstr(r->out, "usage: ferry bench"));
  /* --help wins over what follows, even a bad argument. */
  r = bench("--help", "--bogus", (const char *)NULL);
  CHECK(r->code == 0);
}

static void check_bad_arguments(void) {
  harness_context = "bench: bad arguments";
  CHECK_BAD("unknown option '--bogus'", "--bogus");
  CHECK_BAD("unknown option '-x'", "-x");
  CHECK_BAD("unexpected argument 'now'", "now");
  CHECK_BAD("--sizes needs a value", "--sizes");
  CHECK_BAD("--sizes needs a value", "--sizes=");
  /* --sizes: the sentence names the part that is wrong. */
  CHECK_BAD("'0' is 0 bytes, which measures nothing", "--sizes", "0");
  CHECK_BAD("--sizes 4K:0: '0' is 0 bytes", "--sizes", "4K:0");
  CHECK_BAD("'0K' is 0 bytes", "--sizes", "4K,0K");
  CHECK_BAD("'abc' is not a size", "--sizes", "abc");
  CHECK_BAD("'4Q' is not a size", "--sizes", "4Q");
  CHECK_BAD("'8Q' is not a size", "--sizes", "4K:8Q");
  CHECK_BAD("'-4K' is not a size", "--sizes", "-4K");
  CHECK_BAD("'1.5M' is not a size", "--sizes", "1.5M");
  CHECK_BAD("is too large", "--sizes", "99999999999999999999");
  CHECK_BAD("'99999999999T' is too large", "--sizes", "99999999999T");
  CHECK_BAD("the first size '1G' (1 GiB) is larger than the last '4K' (4 KiB)", "--sizes", "1G:4K");
  CHECK_BAD("the step factor '1' after the second ':'", "--sizes", "4K:1M:1");
  CHECK_BAD("the step factor 'x'", "--sizes", "4K:1M:x");
  CHECK_BAD("an empty item", "--sizes", "4K,,8K");
  CHECK_BAD("an empty item", "--sizes", "4K,");
  CHECK_BAD("either a range A:B or a list", "--sizes", "4K:8K,16K");
  char many[1024] = "1";
  for (int i = 2; i <= 65; i++)
    snprintf(many + strlen(many), sizeof many - strlen(many), ",%d", i);
  CHECK_BAD("more than 64 sizes", "--sizes", many);
  CHECK_BAD("--repeat 0:", "--repeat", "0");
  CHECK_BAD("--repeat -3:", "--repeat", "-3");
  CHECK_BAD("--repeat x:", "--repeat", "x");
  CHECK_BAD("--repeat 5s:", "--repeat", "5s");
  CHECK_BAD("--repeat needs a value", "--repeat");
  CHECK_BAD("'x' is not a device", "--device", "x");
  CHECK_BAD("'-1' is not a device", "--device", "-1");
  CHECK_BAD("'' is not a device", "--device", "0,");
  CHECK_BAD("--device needs a value", "--device");
  CHECK_BAD("there is no device 7; this machine has 1 device (0..0)", "--device", "7");
  CHECK_BAD("there is no device 3", "--device", "0,3");
  CHECK_BAD("--paths h2d,bogus: 'bogus' is not a path; the paths are h2d, d2h", "--paths", "h2d,bogus");
  CHECK_BAD("an empty item", "--paths", "h2d,");
  CHECK_BAD("--paths needs a value", "--paths=");
  CHECK_BAD("there is no backend 'nosuch'; this build has native, cuda, metal, opencl, vulkan, checked", "--backend",
            "nosuch");
  CHECK_BAD("--backend opencl: the opencl backend has no devices on this machine: left out by FERRY_BACKENDS",
            "--backend", "opencl");
  CHECK_BAD("--backend needs a value", "--backend");
  CHECK_BAD("--json needs a value", "--json");
  CHECK_BAD("--json needs a file name", "--json=");
  CHECK_BAD("--plot needs a file name", "--plot", "-");
  CHECK_BAD("--json and --csv name the same file 'x'", "--json", "x", "--csv", "x");
  CHECK_BAD("--json and --csv name the same file '-'", "--json", "-", "--csv", "-");
}

static void check_good_runs(void) {
  harness_context = "bench: good runs";
  const result *r = bench("--device", "0", "--sizes", "4K", "--repeat", "1", (const char *)NULL);
  CHECK_MSG(r->code == 0, "a small run: exit %d; stderr: %s", r->code, r->err);
  CHECK_MSG(strstr(r->out, "device 0: native"), "no device heading: %s", r->out);
  CHECK(strstr(r->out, "ferry/raw") != NULL && strstr(r->out, "memcpy") != NULL);
  CHECK(strstr(r->out, "0 failures") != NULL);
  static const char *const rows[] = {"h2d ",           "d2h ",     "h2d pinned",   "d2h pinned",   "host-ptr sync",
                                     "zero-copy sync", "d2d ",     "write_async ", "async pinned", "h2d+d2h 2q ",
                                     "both pinned",    "elapsed ", "alloc+free"};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    CHECK_MSG(strstr(r->out, rows[i]) != NULL, "the table lacks the row '%s'", rows[i]);
  CHECK_MSG(r->err[0] == '\0', "stderr is not a terminal, yet something was printed there: %s", r->err);
  /* What it ran on: ferry's version, the OS and CPU, the device's driver. */
  CHECK_MSG(strstr(r->out, "ferry 0.") && strstr(r->out, "processor") && strstr(r->out, "driver: glibc"),
            "the header does not say what the run ran on: %.600s", r->out);
  /* Plurals: 1 sample, 1 device. */
  CHECK_MSG(strstr(r->out, "1 sample a figure") != NULL, "no '1 sample a figure' with --repeat 1: %.300s", r->out);
  CHECK_MSG(strstr(r->out, "on 1 device in") != NULL, "no 'on 1 device' in the summary");
  /* One unit per column, named in the header: GB/s and microseconds. */
  CHECK_MSG(strstr(r->out, "ferry GB/s") && strstr(r->out, "raw GB/s") && strstr(r->out, "ferry us") &&
                strstr(r->out, "raw us"),
            "the header does not name the units: %.1500s", r->out);
  char table[8192] = "";
  const char *head = strstr(r->out, "ferry GB/s"), *legend = strstr(r->out, "\nrows:");
  if (head) head = strchr(head, '\n'); /* the rows under the header */
  if (head && legend && legend > head) snprintf(table, sizeof table, "%.*s", (int)(legend - head), head);
  CHECK_MSG(table[0] && !strstr(table, " MB/s") && !strstr(table, " KB/s") && !strstr(table, " us ") &&
                !strstr(table, " ms ") && !strstr(table, "e+"),
            "a unit inside a column: %s", table);
  /* The sync rows move no bytes: a time, and no bandwidth. */
  const char *sync = strstr(r->out, "host-ptr sync");
  char sync_line[256] = "";
  if (sync) snprintf(sync_line, sizeof sync_line, "%.*s", (int)strcspn(sync, "\n"), sync);
  CHECK_MSG(sync && strstr(sync_line, "   4 KiB                        "), "host-ptr sync shows a bandwidth: %s",
            sync_line);
  /* One sample: no spread from it, and a note that says so. */
  char h2d_line[256];
  CHECK_MSG(line_of(r->out, "  h2d ", h2d_line, sizeof h2d_line) && !strchr(h2d_line, '%'),
            "a spread from one sample: %s", h2d_line);
  CHECK_MSG(strstr(r->out, "+- is blank for figures of fewer than 5 samples"), "no note on the blank spread");
  /* Tables fit 100 columns. */
  char longest[512];
  CHECK_MSG(lines_fit(r->out, 100, longest, sizeof longest), "a line wider than 100 columns: %s", longest);

  /* A:B steps by 4 up to B; A:B:F by F; a list is sorted and deduplicated; --opt=value works. */
  r = bench("--sizes", "1K:16K", "--repeat", "1", (const char *)NULL);
  CHECK_MSG(r->code == 0, "--sizes 1K:16K: exit %d; stderr: %s", r->code, r->err);
  CHECK(count_in(r->out, " 1 KiB ") == 13 && count_in(r->out, " 4 KiB ") == 13 && count_in(r->out, " 16 KiB ") == 13);
  CHECK(count_in(r->out, " 2 KiB ") == 0 && count_in(r->out, " 8 KiB ") == 0);
  r = bench("--sizes=1K:8K:2", "--repeat=1", "--device=all", (const char *)NULL);
  CHECK_MSG(r->code == 0, "--sizes=1K:8K:2: exit %d; stderr: %s", r->code, r->err);
  CHECK(count_in(r->out, " 2 KiB ") == 13 && count_in(r->out, " 8 KiB ") == 13);
  r = bench("--sizes", "8k,1000,8KiB,2KB", "--repeat", "1", (const char *)NULL);
  CHECK_MSG(r->code == 0, "a list: exit %d; stderr: %s", r->code, r->err);
  CHECK(count_in(r->out, " 8 KiB ") == 13 && count_in(r->out, " 1000 B ") == 13 && count_in(r->out, " 2 KiB ") == 13);
  const char *at1000 = strstr(r->out, " 1000 B "), *at2k = strstr(r->out, " 2 KiB ");
  CHECK_MSG(at1000 && at2k && at1000 < at2k, "sizes are not in ascending order");
  r = bench("--sizes", "4K:10K", "--repeat", "1", (const char *)NULL);
  CHECK_MSG(r->code == 0 && count_in(r->out, " 4 KiB ") == 13 && count_in(r->out, " 16 KiB ") == 0,
            "--sizes 4K:10K measures 4 KiB alone");

  /* Tiny transfers: the unit that fits, never "0.000 GB/s"; "1 byte". */
  r = bench("--sizes", "1,16", "--repeat", "1", "--paths", "h2d,d2h", (const char *)NULL);
  CHECK_MSG(r->code == 0, "--sizes 1,16: exit %d; stderr: %s", r->code, r->err);
  CHECK_MSG(strstr(r->out, " 1 byte ") != NULL, "no '1 byte' row: %s", r->out);
  CHECK_MSG(strstr(r->out, "0.00 GB/s") == NULL && strstr(r->out, "0.000 GB/s") == NULL &&
                strstr(r->out, " 0.0 GB/s") == NULL,
            "a zero GB/s figure: %s", r->out);
  CHECK_MSG(strstr(r->out, " 0.0") != NULL && !strstr(r->out, "e-0"), "1-byte copies not as plain GB/s: %s", r->out);

  /* A sync row of 256 MiB: ferry moves nothing, the raw way 512 MiB, so the ratio
   * is in the thousands, even where ferry's synchronisation is slowed (under a
   * sanitizer on a busy machine it took 18.8 us: a ratio of 557 at 64 MiB). It is
   * a plain number, never 1.6e+05x, with the note that says why; three samples
   * leave the spread blank (never 100% from three points). */
  r = bench("--sizes", "256M", "--repeat", "3", "--paths", "zero-copy", (const char *)NULL);
  CHECK_MSG(r->code == 0, "--paths zero-copy --sizes 256M: exit %d; stderr: %s", r->code, r->err);
  char zc_line[256] = "";
  CHECK_MSG(line_of(r->out, "  zero-copy sync", zc_line, sizeof zc_line), "no zero-copy sync row: %.2000s", r->out);
  CHECK_MSG(!strchr(zc_line, '%') && !strstr(zc_line, "e+"), "spread or exponent in a 3-sample row: %s", zc_line);
  {
    /* The ratio column: the last number, before the raw way's name. */
    double ratio = 0;
    char copy[256];
    snprintf(copy, sizeof copy, "%s", zc_line);
    const char *prev = NULL, *last = NULL;
    for (char *tok = strtok(copy, " "); tok; tok = strtok(NULL, " ")) {
      prev = last;
      last = tok;
    }
    if (prev) ratio = strtod(prev, NULL);
    CHECK_MSG(ratio >= 1000, "a 256 MiB sync row's ratio below 1000 (%g): %s", ratio, zc_line);
    if (ratio >= 1000)
      CHECK_MSG(strstr(r->out, "note: a sync row's ferry/raw grows with the size"), "no note on a ratio of %g: %s",
                ratio, r->out);
  }
  CHECK_MSG(strstr(r->out, "+- is blank for figures of fewer than 5 samples"), "no note on 3 samples' spread");

  /* A size beyond the host memory is not measured, with a note, and is no failure. */
  r = bench("--sizes", "4K,1T", "--repeat", "1", (const char *)NULL);
  CHECK_MSG(r->code == 0, "--sizes 4K,1T: exit %d; stderr: %s", r->code, r->err);
  CHECK_MSG(strstr(r->out, "not measured: ") != NULL && count_in(r->out, " 1 TiB ") == 0,
            "--sizes 4K,1T: no note about the size cap: %s", r->out);
  CHECK(count_in(r->out, " 4 KiB ") == 13);

  /* --json - puts the data on stdout and the tables on stderr. */
  r = bench("--sizes", "4K", "--repeat", "1", "--json", "-", (const char *)NULL);
  CHECK_MSG(r->code == 0, "--json -: exit %d; stderr: %s", r->code, r->err);
  CHECK_MSG(r->out[0] == '{' && strstr(r->out, "\"schema_version\": 1"),
            "--json - did not write JSON to stdout: %.200s", r->out);
  CHECK_MSG(strstr(r->err, "ferry/raw") != NULL, "--json -: the table is not on stderr");
  r = bench("--sizes", "4K", "--repeat", "1", "--csv", "-", (const char *)NULL);
  CHECK_MSG(r->code == 0 && strncmp(r->out, "device,backend,", 15) == 0, "--csv - did not write CSV to stdout");
}

/* Choosing what to run, and the checked backend. */
static void check_choosing(void) {
  harness_context = "bench: --paths, --backend, --quiet, --no-legend";
  const result *r = bench("--sizes", "4K", "--repeat", "1", "--paths", "h2d,alloc", (const char *)NULL);
  CHECK_MSG(r->code == 0, "--paths h2d,alloc: exit %d; stderr: %s", r->code, r->err);
  CHECK_MSG(count_in(r->out, " 4 KiB ") == 2, "--paths h2d,alloc: not 2 rows: %s", r->out);
  CHECK(strstr(r->out, "  h2d ") && strstr(r->out, "alloc+free") && !strstr(r->out, "d2h pinned"));
  r = bench("--sizes", "4K", "--repeat", "1", "--paths", "pinned,sync", (const char *)NULL);
  CHECK_MSG(r->code == 0 && count_in(r->out, " 4 KiB ") == 4, "--paths pinned,sync: not 4 rows: %s", r->out);
  /* The queue rows: both measured on the native device, status ok, and they alone. */
  r = bench("--sizes", "4K,1M", "--repeat", "2", "--paths", "async,both", "--json", "-", (const char *)NULL);
  CHECK_MSG(r->code == 0, "--paths async,both: exit %d; stderr: %s", r->code, r->err);
  CHECK_MSG(count_in(r->out, "\"path\": \"async\", \"size\": ") == 2 &&
                count_in(r->out, "\"path\": \"both\", \"size\": ") == 2 &&
                count_in(r->out, "\"status\": \"ok\"") == 4 && count_in(r->out, "\"status\": ") == 4 &&
                strstr(r->out, "\"failures\": 0"),
            "--paths async,both: not the two rows at two sizes, all ok: %.3000s", r->out);
  CHECK_MSG(strstr(r->err, "write_async ") && strstr(r->err, "h2d+d2h 2q ") && !strstr(r->err, "alloc+free "),
            "--paths async,both: the table lacks a row, or has others: %.3000s", r->err);
  r = bench("--sizes", "4K", "--repeat", "1", "--paths", "queues", (const char *)NULL);
  CHECK_MSG(r->code == 0 && count_in(r->out, " 4 KiB ") == 5 && strstr(r->out, "async pinned") &&
                strstr(r->out, "both pinned") && strstr(r->out, "elapsed "),
            "--paths queues: not the 5 queue rows: %s", r->out);
  r = bench("--sizes", "4K", "--repeat", "1", "--backend", "native", (const char *)NULL);
  CHECK_MSG(r->code == 0 && strstr(r->out, "device 0: native"), "--backend native: exit %d: %s", r->code, r->err);
  r = bench("--sizes", "4K", "--repeat", "1", "-q", (const char *)NULL);
  CHECK_MSG(r->code == 0 && r->out[0] == '\0' && r->err[0] == '\0', "--quiet: exit %d, stdout: %.200s", r->code,
            r->out);
  r = bench("--sizes", "4K", "--repeat", "1", "--no-legend", (const char *)NULL);
  CHECK_MSG(r->code == 0 && !strstr(r->out, "\nrows:") && !strstr(r->out, "\ncolumns:") && strstr(r->out, "ferry/raw"),
            "--no-legend: the legend is there, or the table is not");
  r = bench("--sizes", "4K", "--repeat", "1", (const char *)NULL);
  CHECK_MSG(strstr(r->out, "\nrows:") && strstr(r->out, "\ncolumns:"), "no legend by default");

  harness_context = "bench: the checked backend";
  const char *both[] = {"FERRY_BACKENDS=native,checked", NULL};
  memcpy(env_for_run, both, sizeof both);
  r = bench("--sizes", "4K", "--repeat", "1", (const char *)NULL);
  CHECK_MSG(r->code == 0, "native + checked: exit %d; stderr: %s", r->code, r->err);
  CHECK_MSG(strstr(r->out, "device 0: native") && !strstr(r->out, "device 1: checked"),
            "the checked device was measured without being asked for: %.400s", r->out);
  CHECK_MSG(strstr(r->out, "device 1 (checked) left out: a debugging device"), "no line about the checked device");
  r = bench("--sizes", "4K", "--repeat", "1", "--backend", "checked", (const char *)NULL);
  CHECK_MSG(r->code == 0 && strstr(r->out, "device 1: checked") && !strstr(r->out, "device 0: native"),
            "--backend checked: %.400s", r->out);
  CHECK(strstr(r->out, "a debugging device") != NULL);
  r = bench("--sizes", "4K", "--repeat", "1", "--device", "1", (const char *)NULL);
  CHECK_MSG(r->code == 0 && strstr(r->out, "device 1: checked"), "--device 1 does not measure checked");
  r = bench("--sizes", "4K", "--repeat", "1", "--device", "all", "--paths", "h2d,cross", (const char *)NULL);
  CHECK_MSG(r->code == 0 && strstr(r->out, "device 1: checked") && strstr(r->out, "cross 0>1") &&
                strstr(r->out, "cross 1>0"),
            "--device all: no checked device or no pairs: %.2000s", r->out);
  env_for_run[0] = NULL;
}

/* Output files checked before measuring; runs that measure nothing. */
static void check_failures(void) {
  harness_context = "bench: failures";
  const result *r = bench("--sizes", "4K", "--repeat", "1", "--json", "/nonexistent-dir/x.json", (const char *)NULL);
  CHECK_MSG(r->code == 2, "an unwritable --json: exit %d, expected 2", r->code);
  CHECK_MSG(strstr(r->err, "--json /nonexistent-dir/x.json: cannot create '/nonexistent-dir/x.json': the folder "
                           "'/nonexistent-dir' does not exist"),
            "stderr: %s", r->err);
  CHECK_MSG(r->out[0] == '\0', "an unwritable --json: something was measured first: %.300s", r->out);
  r = bench("--csv", "/tmp", (const char *)NULL);
  CHECK_MSG(r->code == 2 && strstr(r->err, "--csv /tmp: '/tmp' is a folder") && r->out[0] == '\0', "--csv /tmp: %s",
            r->err);
  /* Checked before measuring: a full run with a bad --plot ends at once. */
  r = bench("--plot", "/nonexistent-dir/x.svg", (const char *)NULL);
  CHECK_MSG(r->code == 2 && strstr(r->err, "--plot /nonexistent-dir/x.svg: cannot create") && r->seconds < 2,
            "--plot /nonexistent-dir/x.svg: exit %d after %.1f s: %s", r->code, r->seconds, r->err);
  /* The check leaves no file behind. */
  char path[] = "/tmp/ferry-cli-json-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd >= 0) {
    close(fd);
    unlink(path);
    r = bench("--sizes", "4K:1K", "--json", path, (const char *)NULL); /* bad arguments: no file either */
    CHECK(r->code == 2 && !file_exists(path));
    r = bench("--sizes", "4K", "--repeat", "1", "--json", path, (const char *)NULL);
    CHECK_MSG(r->code == 0 && file_exists(path), "--json FILE: exit %d, file %s", r->code,
              file_exists(path) ? "written" : "missing");
    unlink(path);
  }

  /* Nothing to measure: a sentence, and exit 1. */
  r = bench("--sizes", "64T", (const char *)NULL);
  CHECK_MSG(r->code == 1 && strstr(r->err, "ferry bench: nothing to measure: device 0 (native) takes sizes up to"),
            "--sizes 64T: exit %d: %s", r->code, r->err);
  CHECK_MSG(r->out[0] == '\0', "--sizes 64T: a table of nothing: %s", r->out);
  r = bench("--paths", "peer", (const char *)NULL);
  CHECK_MSG(r->code == 1 && strstr(r->err, "nothing to measure: copies between devices need two devices"),
            "--paths peer on one device: exit %d: %s", r->code, r->err);
  const char *checked_only[] = {"FERRY_BACKENDS=checked", NULL};
  memcpy(env_for_run, checked_only, sizeof checked_only);
  r = bench("--sizes", "4K", (const char *)NULL);
  CHECK_MSG(r->code == 1 && strstr(r->err, "nothing to measure: no device is asked for: device 0 is the checked"),
            "only checked: exit %d: %s", r->code, r->err);
  env_for_run[0] = NULL;
}

/* What a new user ran into: option words taken for file names, repeated options,
 * a PNG name for the SVG, files that open but take no write, stray arguments. */
static void check_command_line_traps(void) {
  harness_context = "bench: command-line traps";
  /* An option after --json is the option, not a file name. */
  unlink("--no-legend");
  CHECK_BAD("--json needs a file name, and '--no-legend' is an option", "--json", "--no-legend");
  CHECK_MSG(!file_exists("--no-legend"), "a file named --no-legend was written");
  CHECK_BAD("--csv needs a file name, and '-q' is an option", "--csv", "-q");
  CHECK_BAD("--plot needs a file name, and '--quick' is an option", "--plot", "--quick");
  /* A value taken once, given twice: refused, not one of them dropped. */
  CHECK_BAD("--repeat is given twice ('1' and '2'); give it once", "--repeat", "1", "--repeat", "2");
  CHECK_BAD("--sizes is given twice", "--sizes", "4K", "--sizes", "8K");
  CHECK_BAD("--json is given twice", "--json", "a.json", "--json", "b.json");
  /* The chart is SVG: a .png name is refused, before anything is measured. */
  CHECK_BAD("--plot x.png: the chart is SVG, so its name must end in .svg", "--plot", "x.png");
  CHECK_MSG(!file_exists("x.png"), "x.png was written");
  /* A file that opens but takes no write fails at once, not after the run. */
  const result *r = bench("--csv", "/proc/version", (const char *)NULL);
  CHECK_MSG(r->code == 2 && strstr(r->err, "--csv /proc/version: cannot write '/proc/version'") && r->out[0] == '\0' &&
                r->seconds < 2,
            "--csv /proc/version: exit %d after %.1f s: %s", r->code, r->seconds, r->err);
  /* --device twice: both devices are measured. */
  const char *both[] = {"FERRY_BACKENDS=native,checked", NULL};
  memcpy(env_for_run, both, sizeof both);
  r = bench("--device", "1", "--device", "0", "--sizes", "4K", "--repeat", "1", "--paths", "h2d", (const char *)NULL);
  CHECK_MSG(r->code == 0 && strstr(r->out, "device 1: checked") && strstr(r->out, "device 0: native"),
            "--device 1 --device 0 does not measure both: %.2000s", r->out);
  /* --paths twice: both. */
  r = bench("--paths", "h2d", "--paths", "d2h", "--sizes", "4K", "--repeat", "1", (const char *)NULL);
  CHECK_MSG(r->code == 0 && strstr(r->out, "  h2d ") && strstr(r->out, "  d2h "),
            "--paths h2d --paths d2h does not measure both: %.2000s", r->out);
  env_for_run[0] = NULL;
  /* The other commands take no stray arguments. */
  r = ferry("version", "--bogus", (const char *)NULL);
  CHECK_MSG(r->code == 2 && strstr(r->err, "unexpected argument '--bogus'") && r->out[0] == '\0',
            "ferry version --bogus: exit %d: %s", r->code, r->err);
  r = ferry("-V", "x", (const char *)NULL);
  CHECK_MSG(r->code == 2, "ferry -V x: exit %d", r->code);
  r = ferry("help", "env", "extra", (const char *)NULL);
  CHECK_MSG(r->code == 2 && strstr(r->err, "unexpected argument 'extra'") && r->out[0] == '\0',
            "ferry help env extra: exit %d: %s", r->code, r->err);
}

/* --summary (what make run shows): a short table on stdout, the full tables in --tables FILE. */
static void check_summary(void) {
  harness_context = "bench: --summary, --tables";
  char path[] = "/tmp/ferry-cli-tables-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return;
  close(fd);
  const char *both[] = {"FERRY_BACKENDS=native,checked", NULL};
  memcpy(env_for_run, both, sizeof both);
  const result *r =
      bench("--summary", "--tables", path, "--device", "all", "--sizes", "4K,64K", "--repeat", "1", (const char *)NULL);
  env_for_run[0] = NULL;
  CHECK_MSG(r->code == 0, "--summary --tables: exit %d: %s", r->code, r->err);
  CHECK_MSG(strstr(r->out, "summary: ferry's median") && strstr(r->out, "h2d GB/s") &&
                strstr(r->out, "alloc+free us") && strstr(r->out, "  0   native, ") &&
                strstr(r->out, "  1   checked") && strstr(r->out, "between devices at 64 KiB") && strstr(r->out, path),
            "--summary: %s", r->out);
  CHECK_MSG(!strstr(r->out, "raw ways:") && !strstr(r->out, "\nrows:"), "--summary printed the full tables: %s",
            r->out);
  int lines = 0;
  for (const char *p = r->out; *p; p++)
    lines += *p == '\n';
  CHECK_MSG(lines <= 20, "--summary: %d lines, expected a short table", lines);
  char longest[512];
  CHECK_MSG(lines_fit(r->out, 100, longest, sizeof longest), "--summary: a line wider than 100: %s", longest);
  char text[1 << 15] = "";
  FILE *f = fopen(path, "r");
  if (f) {
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
  }
  CHECK_MSG(strstr(text, "ferry GB/s") && strstr(text, "device 1: checked") && strstr(text, "\nrows:"),
            "--tables FILE does not hold the full tables: %.500s", text);
  unlink(path);
  CHECK_BAD("--tables needs a file name, and '--summary' is an option", "--tables", "--summary");
}

/* Ctrl-C during a run: what was measured is written, marked partial, and said on stderr. */
static void check_interrupt(void) {
  harness_context = "bench: Ctrl-C";
  char dir[] = "/tmp/ferry-cli-int-XXXXXX";
  if (!mkdtemp(dir)) {
    CHECK_MSG(false, "mkdtemp failed");
    return;
  }
  char json[128], csv[128], svg[128], out[128], err[128];
  snprintf(json, sizeof json, "%s/run.json", dir);
  snprintf(csv, sizeof csv, "%s/run.csv", dir);
  snprintf(svg, sizeof svg, "%s/run.svg", dir);
  snprintf(out, sizeof out, "%s/stdout", dir);
  snprintf(err, sizeof err, "%s/stderr", dir);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600), e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(o, 1);
    dup2(e, 2);
    setenv("FERRY_BACKENDS", "native", 1);
    /* A run of many seconds: every size to 256 MiB, many samples. */
    execl(tool, tool, "bench", "--sizes", "4K:256M:2", "--repeat", "21", "--json", json, "--csv", csv, "--plot", svg,
          (char *)NULL);
    _exit(127);
  }
  if (pid < 0) { /* never kill(-1, ...): that would signal every process */
    CHECK_MSG(false, "fork failed");
    return;
  }
  /* Interrupted once the first figures are in (the JSON is written only at the end):
   * the header is out when Ctrl-C is caught, and the first row takes well under 1.5 s. */
  struct timespec tick = {0, 20000000}, wait = {1, 500000000};
  double t0 = harness_now_s();
  char head[4096] = "";
  while (harness_now_s() - t0 < 30 && !strstr(head, "Each figure is a median")) {
    nanosleep(&tick, NULL);
    FILE *h = fopen(out, "r");
    if (!h) continue;
    size_t n = fread(head, 1, sizeof head - 1, h);
    head[n] = '\0';
    fclose(h);
  }
  nanosleep(&wait, NULL);
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  int fd = open(out, O_RDONLY), fe = open(err, O_RDONLY);
  if (fd >= 0) slurp(fd, res.out, sizeof res.out);
  if (fe >= 0) slurp(fe, res.err, sizeof res.err);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 130, "interrupted: status %d, expected exit 130; stderr: %s",
            status, res.err);
  CHECK_MSG(strstr(res.err, "ferry bench: interrupted (Ctrl-C)") && strstr(res.err, "marked partial"),
            "interrupted: stderr does not say so: %s", res.err);
  CHECK_MSG(strstr(res.out, "\ninterrupted: ") && strstr(res.out, "device 0: native"),
            "interrupted: the tables do not say so: %.3000s", res.out);
  char text[1 << 16] = "";
  FILE *f = fopen(json, "r");
  if (f) {
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
  }
  CHECK_MSG(strstr(text, "\"partial\": true") && strstr(text, "\"status\": \"ok\"") &&
                strstr(text, "the run was interrupted first"),
            "interrupted: the JSON is not there, or not marked partial: %.400s", text);
  CHECK_MSG(file_exists(csv) && file_exists(svg), "interrupted: the CSV or the SVG was not written");
  unlink(json);
  unlink(csv);
  unlink(svg);
  unlink(out);
  unlink(err);
  rmdir(dir);
}

/* A long kernel name and processor name still fit 100 columns: the host line wraps.
 * The processor's name comes from /proc/cpuinfo, which a mount namespace of the
 * test's own replaces (as root; skipped, saying so, where that is not allowed). */
static void check_long_host_line(void) {
  harness_context = "long host names";
  char fake[] = "/tmp/ferry-cli-cpuinfo-XXXXXX";
  int fd = mkstemp(fake);
  if (fd < 0) return;
  const char *text = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+ with a very long name of "
                     "the kind a virtual machine reports, @ 2.00GHz, stepping 8 (Sapphire Rapids)\n\n";
  if (write(fd, text, strlen(text)) < 0) CHECK_MSG(false, "writing %s failed", fake);
  close(fd);
  char out[] = "/tmp/ferry-cli-host-XXXXXX";
  int fo = mkstemp(out);
  close(fo);
  char probe[1024];
  snprintf(probe, sizeof probe,
           "unshare -m sh -c 'mount --make-rprivate / && mount --bind %s /proc/cpuinfo' >/dev/null 2>&1", fake);
  int can = system(probe);
  if (!WIFEXITED(can) || WEXITSTATUS(can) != 0) {
    printf("bench_cli: the long host line is not checked: no mount namespace here (unshare -m needs root)\n");
    unlink(fake);
    return;
  }
  static const char *const runs[] = {"info", "info --verbose", "bench --sizes 4K --repeat 1 --paths h2d"};
  for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "unshare -m sh -c 'mount --make-rprivate / && mount --bind %s /proc/cpuinfo && "
             "FERRY_BACKENDS=native exec \"%s\" %s' >%s 2>/dev/null",
             fake, tool, runs[k], out);
    int rc = system(cmd);
    int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    int fr = open(out, O_RDONLY);
    if (fr >= 0) slurp(fr, res.out, sizeof res.out);
    CHECK_MSG(code == 0 && strstr(res.out, "very long name"), "ferry %s with a long processor name: exit %d: %.600s",
              runs[k], code, res.out);
    char longest[512];
    CHECK_MSG(lines_fit(res.out, 100, longest, sizeof longest), "ferry %s: a line wider than 100: %s", runs[k],
              longest);
  }
  unlink(out);
  unlink(fake);
}

/* ---- ferry info, help, version, the manual ------------------------------------------ */

static void check_info(void) {
  harness_context = "info";
  const char *both[] = {"FERRY_BACKENDS=native,checked", NULL};
  memcpy(env_for_run, both, sizeof both);
  const result *r = ferry("info", (const char *)NULL);
  CHECK_MSG(r->code == 0, "ferry info: exit %d: %s", r->code, r->err);
  CHECK_MSG(strstr(r->out, "  1   checked") && strstr(r->out, " debug ") &&
                strstr(r->out, "debug: the checked backend"),
            "ferry info does not mark the checked device: %s", r->out);
  CHECK_MSG(strstr(r->out, "skipped: left out by FERRY_BACKENDS"), "backends without devices not listed");
  char longest[512];
  CHECK_MSG(lines_fit(r->out, 100, longest, sizeof longest), "ferry info: a line wider than 100: %s", longest);
  r = ferry("info", "--verbose", (const char *)NULL);
  CHECK_MSG(r->code == 0 && strstr(r->out, "device 0: native") && strstr(r->out, "driver          glibc") &&
                strstr(r->out, "API             Linux") && strstr(r->out, " free;") &&
                strstr(r->out, "settings in effect"),
            "ferry info --verbose: %s", r->out);
  r = ferry("info", "-v", (const char *)NULL);
  CHECK(r->code == 0 && strstr(r->out, "PCI address"));
  /* What clinfo and vulkaninfo users look for first, on the OpenCL and Vulkan
   * devices present (PoCL and lavapipe here): a CPU driver's free memory is the
   * host's, and says so. */
  const char *gpu_apis[] = {"FERRY_BACKENDS=opencl,vulkan", NULL};
  memcpy(env_for_run, gpu_apis, sizeof gpu_apis);
  r = ferry("info", "--verbose", (const char *)NULL);
  CHECK_MSG(r->code == 0, "ferry info --verbose on opencl and vulkan: exit %d: %s", r->code, r->err);
  const char *cl = strstr(r->out, ": opencl, "), *vk = strstr(r->out, ": vulkan, ");
  if (cl) {
    char block[2048];
    snprintf(block, sizeof block, "%.*s", (int)(vk && vk > cl ? vk - cl : (ptrdiff_t)strlen(cl)), cl);
    CHECK_MSG(strstr(block, "compute units, ") && strstr(block, " MHz") && strstr(block, "work groups up to") &&
                  strstr(block, "of local memory"),
              "ferry info --verbose: an OpenCL device without compute units, clock, work groups or local memory: %s",
              block);
    CHECK_MSG(!strstr(block, "type            cpu") || strstr(block, "the driver says nothing of its own"),
              "an OpenCL CPU device's free memory not marked as the host's: %s", block);
  }
  if (vk) {
    char block[2048];
    snprintf(block, sizeof block, "%.*s", (int)strcspn(vk, "\n") + 1200, vk);
    CHECK_MSG(strstr(block, "heap 0 ") && strstr(block, "memory type 0 ") && strstr(block, "queue family 0 ") &&
                  strstr(block, "work groups up to"),
              "ferry info --verbose: a Vulkan device without heaps, memory types or queue families: %s", block);
    CHECK_MSG(!strstr(block, "type            cpu") || strstr(block, "the driver says nothing of its own"),
              "a Vulkan CPU device's free memory not marked as the host's: %s", block);
  }
  if (!cl || !vk) printf("  ferry info --verbose: %s%s not present here\n", cl ? "" : "opencl ", vk ? "" : "vulkan");
  memcpy(env_for_run, both, sizeof both);
  r = ferry("info", "--help", (const char *)NULL);
  static const char *const words[] = {"--verbose", "--json [FILE]", "-h, --help",  "columns:",    "zero-copy",
                                      "host-ptr",  "debug",         "exit status", "environment", "ferry help"};
  CHECK_MSG(r->code == 0, "ferry info --help: exit %d", r->code);
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    CHECK_MSG(strstr(r->out, words[i]) != NULL, "ferry info --help does not mention %s", words[i]);
  r = ferry("info", "--bogus", (const char *)NULL);
  CHECK_MSG(r->code == 2 && strstr(r->err, "unknown option '--bogus'") && strstr(r->err, "usage: ferry info"),
            "ferry info --bogus: exit %d: %s", r->code, r->err);
  r = ferry("info", "--json", "/nonexistent-dir/i.json", (const char *)NULL);
  CHECK_MSG(r->code == 2 && strstr(r->err, "the folder '/nonexistent-dir' does not exist"),
            "ferry info --json /nonexistent-dir/i.json: exit %d: %s", r->code, r->err);
  char path[] = "/tmp/ferry-cli-info-XXXXXX";
  int fd = mkstemp(path);
  if (fd >= 0) {
    close(fd);
    r = ferry("info", "--json", path, (const char *)NULL);
    CHECK_MSG(r->code == 0 && r->out[0] == '\0', "ferry info --json FILE: exit %d, stdout %.100s", r->code, r->out);
    FILE *f = fopen(path, "r");
    char head[256] = "";
    if (f) {
      size_t n = fread(head, 1, sizeof head - 1, f);
      head[n] = '\0';
      fclose(f);
    }
    CHECK_MSG(strstr(head, "\"schema_version\": 1") && strstr(head, "\"tool\": \"ferry info\""),
              "ferry info --json FILE wrote: %s", head);
    unlink(path);
  }
  r = ferry("info", "--json", (const char *)NULL);
  CHECK_MSG(r->code == 0 && r->out[0] == '{' && strstr(r->out, "\"debugging\": true"), "ferry info --json: %.200s",
            r->out);
  env_for_run[0] = NULL;
}

static void check_help_and_version(void) {
  harness_context = "help, version";
  const result *r = ferry("-V", (const char *)NULL);
  CHECK_MSG(r->code == 0 && strncmp(r->out, "ferry 0.", 8) == 0, "ferry -V: exit %d: %s", r->code, r->out);
  r = ferry("--version", (const char *)NULL);
  CHECK(r->code == 0 && strncmp(r->out, "ferry 0.", 8) == 0);
  r = ferry("version", (const char *)NULL);
  CHECK(r->code == 0 && strncmp(r->out, "ferry 0.", 8) == 0);
  r = ferry("help", (const char *)NULL);
  CHECK_MSG(r->code == 0 && strstr(r->out, "ferry help env") && strstr(r->out, "FERRY_BACKENDS"), "ferry help: %s",
            r->out);
  r = ferry("help", "env", (const char *)NULL);
  CHECK_MSG(r->code == 0 && strstr(r->out, "OCL_ICD_VENDORS") && strstr(r->out, "FERRY_REQUIRE_BACKENDS"),
            "ferry help env: %s", r->out);
  /* Every setting the library reads is in 'ferry help env', with what it accepts. */
  size_t options = ferry_option_count();
  CHECK_MSG(options >= 10, "only %zu settings", options);
  for (size_t i = 0; i < options; i++) {
    ferry_option_info o;
    CHECK_OK(ferry_option_get(i, &o));
    char line[160];
    snprintf(line, sizeof line, "\n  %s\n", o.name);
    CHECK_MSG(strstr(r->out, line) != NULL, "ferry help env does not list %s", o.name);
  }
  char longest[512];
  CHECK_MSG(lines_fit(r->out, 100, longest, sizeof longest), "ferry help env: a line wider than 100: %s", longest);
  /* The settings in effect, where they come from: bench's header, info --verbose and --json. */
  const char *env[] = {"FERRY_CACHE_LIMIT=1G", NULL};
  memcpy(env_for_run, env, sizeof env);
  r = bench("--sizes", "4K", "--repeat", "1", "--paths", "h2d", (const char *)NULL);
  CHECK_MSG(r->code == 0 &&
                strstr(r->out, "settings: FERRY_BACKENDS=native (environment), FERRY_CACHE_LIMIT=1G (environment);"),
            "bench's header does not say FERRY_CACHE_LIMIT=1G: %.400s", r->out);
  r = ferry("info", "--verbose", (const char *)NULL);
  CHECK_MSG(strstr(r->out, "FERRY_CACHE_LIMIT") && strstr(r->out, "1G") && strstr(r->out, "environment"),
            "ferry info --verbose does not list FERRY_CACHE_LIMIT=1G: %s", r->out);
  r = ferry("info", "--json", (const char *)NULL);
  CHECK_MSG(strstr(r->out, "{\"name\": \"FERRY_CACHE_LIMIT\", \"value\": \"1G\", \"source\": \"environment\"}"),
            "ferry info --json: no FERRY_CACHE_LIMIT setting from the environment: %.2000s", r->out);
  /* A bad value: ferry cannot start, and says why. */
  const char *bad[] = {"FERRY_CACHE_LIMIT=-5", NULL};
  memcpy(env_for_run, bad, sizeof bad);
  r = ferry("info", (const char *)NULL);
  CHECK_MSG(r->code == 1 && strstr(r->err, "FERRY_CACHE_LIMIT"), "ferry info with FERRY_CACHE_LIMIT=-5: exit %d: %s",
            r->code, r->err);
  env_for_run[0] = NULL;
  r = ferry("help", "bench", (const char *)NULL);
  CHECK(r->code == 0 && strstr(r->out, "usage: ferry bench"));
  r = ferry("help", "info", (const char *)NULL);
  CHECK(r->code == 0 && strstr(r->out, "usage: ferry info"));
  r = ferry("help", "nothing", (const char *)NULL);
  CHECK(r->code == 2 && strstr(r->err, "no help on 'nothing'"));
  r = ferry("frobnicate", (const char *)NULL);
  CHECK(r->code == 2 && strstr(r->err, "unknown command 'frobnicate'"));
  r = ferry((const char *)NULL);
  CHECK(r->code == 2 && strstr(r->err, "usage: ferry"));
}

/* ---- two fake CUDA GPUs (--fake-cuda) --------------------------------------------- */

static void check_fake_cuda(void) {
  harness_context = "fake cuda";
  const char *env[] = {"FERRY_BACKENDS=cuda,native", NULL};
  memcpy(env_for_run, env, sizeof env);
  const result *r = ferry("info", "--verbose", (const char *)NULL);
  CHECK_MSG(r->code == 0 && strstr(r->out, "device 1: cuda") && strstr(r->out, "PCI address     0000:11:00.0") &&
                strstr(r->out, "API             CUDA 13.0") && strstr(r->out, "UUID            66616b65-"),
            "ferry info --verbose on two fake GPUs: %s", r->out);
  /* Peer copies between the two GPUs, against cuMemcpyPeer: what bench/bench_peer measured. */
  r = bench("--backend", "cuda", "--paths", "peer,h2d", "--sizes", "4K,1M", "--repeat", "2", (const char *)NULL);
  CHECK_MSG(r->code == 0, "peer rows: exit %d: %s", r->code, r->err);
  CHECK_MSG(strstr(r->out, "peer 0>1") && strstr(r->out, "peer 1>0") && strstr(r->out, "cuMemcpyPeer") &&
                strstr(r->out, "0 failures"),
            "no peer rows between the fake GPUs: %s", r->out);
  /* The driver's name is the loaded library's, except on a machine with NVIDIA's
   * kernel driver, where it is NVIDIA and its version (even for the fake library). */
  CHECK_MSG((strstr(r->out, "driver: libcuda.so.1, CUDA 13.0") ||
             (strstr(r->out, "driver: NVIDIA ") && strstr(r->out, ", CUDA 13.0"))),
            "no CUDA driver line: %.2000s", r->out);
  CHECK_MSG(!strstr(r->err, "fake_cuda:"), "the fake driver saw misuse: %s", r->err);
  /* On a GPU, pageable transfers against the host's limit: warm (the rows) and cold,
   * a target from 4 MiB up; the JSON carries the same. */
  r = bench("--backend", "cuda", "--device", "0", "--paths", "h2d,d2h,h2d-pinned,d2h-pinned", "--sizes", "64K,4M",
            "--repeat", "3", (const char *)NULL);
  CHECK_MSG(r->code == 0 && strstr(r->out, "pageable against the host's limit") &&
                strstr(r->out, "the lesser of the pinned rows at 4 MiB") && strstr(r->out, "h2d cold") &&
                strstr(r->out, "the host's best streaming copy"),
            "no host's limit under a GPU's table: exit %d: %s%s", r->code, r->out, r->err);
  const char *block = strstr(r->out, "pageable against the host's limit");
  const char *limit_row = block ? strstr(block, "       4 MiB  ") : NULL;
  CHECK_MSG(limit_row && strstr(limit_row, "x  0.75x: "), "no 4 MiB line against the limit: %s", r->out);
  const char *block_end = block ? strstr(block, "\n\n") : NULL, *small = block ? strstr(block, "64 KiB") : NULL;
  CHECK_MSG(block && (!small || (block_end && small > block_end)),
            "a 64 KiB line against the limit (none below 4 MiB): %s", r->out);
  char longest[200];
  CHECK_MSG(lines_fit(r->out, 100, longest, sizeof longest), "the host's limit: a line wider than 100: %s", longest);
  r = bench("--backend", "cuda", "--device", "0", "--paths", "h2d", "--sizes", "4M", "--repeat", "3", "--json", "-",
            (const char *)NULL);
  CHECK_MSG(r->code == 0 && strstr(r->out, "\"host_limit\": {\"limit_h2d_gbs\": ") &&
                strstr(r->out, "\"pinned_bytes\": 0, ") && strstr(r->out, "\"cold\": [") &&
                strstr(r->out, "{\"bytes\": 4194304, \"slices\": ") && strstr(r->out, "\"target\": 0.75, "),
            "no host_limit in the JSON of a GPU: %s", r->out);
  CHECK_MSG(strstr(r->err, "(no pinned rows measured: --paths h2d-pinned,d2h-pinned adds them)"),
            "without pinned rows the limit does not say so: %s", r->err);
  /* Not on a CPU device, nor in --quick runs. */
  r = bench("--backend", "native", "--paths", "h2d", "--sizes", "4M", "--repeat", "2", "--json", "-",
            (const char *)NULL);
  CHECK_MSG(r->code == 0 && strstr(r->out, "\"host_limit\": null") && !strstr(r->err, "host's limit"),
            "a host's limit on a CPU device: %s%s", r->out, r->err);
  r = bench("--backend", "cuda", "--device", "0", "--quick", "--sizes", "4M", (const char *)NULL);
  CHECK_MSG(r->code == 0 && !strstr(r->out, "host's limit"), "a host's limit in a --quick run: %s", r->out);
  /* Staged through the host when peer access is off (FERRY_CUDA_PEER=0), still beside cuMemcpyPeer. */
  const char *staged[] = {"FERRY_BACKENDS=cuda,native", "FERRY_CUDA_PEER=0", NULL};
  memcpy(env_for_run, staged, sizeof staged);
  r = bench("--device", "0,1", "--paths", "peer,cross", "--sizes", "1M", "--repeat", "2", (const char *)NULL);
  CHECK_MSG(r->code == 0 && strstr(r->out, "peer 0>1") && !strstr(r->out, "cross 0>1"),
            "staged peer copies: exit %d: %s%s", r->code, r->out, r->err);
  /* With native too: cross rows between cuda and native. */
  r = bench("--paths", "cross", "--sizes", "4K", "--repeat", "1", (const char *)NULL);
  CHECK_MSG(r->code == 0 && strstr(r->out, "cross 0>2") && strstr(r->out, "cross 2>0"),
            "cross rows between cuda and native: %s%s", r->out, r->err);
  env_for_run[0] = NULL;
}

int main(int argc, char **argv) {
  if (!find_tool()) {
    printf("bench_cli: skipped: the ferry program is not at %s (set FERRY_TOOL to its path)\n", tool);
    return HARNESS_SKIP;
  }
  if (argc > 1 && strcmp(argv[1], "--fake-cuda") == 0) {
    check_fake_cuda();
    return harness_finish("bench_cli (fake cuda)");
  }
  check_help();
  check_bad_arguments();
  check_good_runs();
  check_choosing();
  check_failures();
  check_command_line_traps();
  check_summary();
  check_interrupt();
  check_long_host_line();
  check_info();
  check_help_and_version();
  return harness_finish("bench_cli");
}
