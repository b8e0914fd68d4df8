/*
 * `ferry bench` from the command line: exit codes and sentences for good and bad
 * arguments, as a user sees them. Runs the built `ferry` program: $FERRY_TOOL,
 * else ../ferry beside this test's directory (the build tree's layout). Skipped
 * (77) when neither exists. Real runs keep to the native device and a size or
 * two, so the whole test takes a second or so.
 */
#include "harness.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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
  char out[1 << 16], err[1 << 16];
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

/* Runs `ferry bench ARGS...` (NULL-terminated) with only the native backend. */
static const result *bench(const char *first, ...) {
  const char *argv[64] = {tool, "bench"};
  int argc = 2;
  va_list ap;
  va_start(ap, first);
  for (const char *a = first; a && argc < 62; a = va_arg(ap, const char *))
    argv[argc++] = a;
  va_end(ap);
  argv[argc] = NULL;

  char out_name[] = "/tmp/ferry-bench-cli-out-XXXXXX", err_name[] = "/tmp/ferry-bench-cli-err-XXXXXX";
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
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out, 1);
    dup2(err, 2);
    setenv("FERRY_BACKENDS", "native", 1);
    execv(tool, (char *const *)argv);
    _exit(127);
  }
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) res.code = WEXITSTATUS(status);
  slurp(out, res.out, sizeof res.out);
  slurp(err, res.err, sizeof res.err);
  return &res;
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

static void check_help(void) {
  harness_context = "--help";
  const result *r = bench("--help", (const char *)NULL);
  CHECK_MSG(r->code == 0, "--help exit %d; stderr: %s", r->code, r->err);
  static const char *const options[] = {"--device N|all", "--sizes", "--repeat",  "--quick",    "--json",     "--csv",
                                        "--plot",         "A:B",     "K, M or G", "-h, --help", "exit status"};
  for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
    CHECK_MSG(strstr(r->out, options[i]) != NULL, "--help does not mention %s", options[i]);
  r = bench("-h", (const char *)NULL);
  CHECK(r->code == 0 && strstr(r->out, "usage: ferry bench"));
  /* --help wins over what follows, even a bad argument. */
  r = bench("--help", "--bogus", (const char *)NULL);
  CHECK(r->code == 0);
}

static void check_bad_arguments(void) {
  harness_context = "bad arguments";
  CHECK_BAD("unknown option '--bogus'", "--bogus");
  CHECK_BAD("unknown option '-x'", "-x");
  CHECK_BAD("unexpected argument 'now'", "now");
  CHECK_BAD("--sizes needs a value", "--sizes");
  CHECK_BAD("--sizes needs a value", "--sizes=");
  CHECK_BAD("0 bytes measures nothing", "--sizes", "0");
  CHECK_BAD("0 bytes measures nothing", "--sizes", "4K:0");
  CHECK_BAD("0 bytes measures nothing", "--sizes", "4K,0K");
  CHECK_BAD("'abc' is not a size", "--sizes", "abc");
  CHECK_BAD("'4Q' is not a size", "--sizes", "4Q");
  CHECK_BAD("'-4K' is not a size", "--sizes", "-4K");
  CHECK_BAD("'1.5M' is not a size", "--sizes", "1.5M");
  CHECK_BAD("is too large", "--sizes", "99999999999999999999");
  CHECK_BAD("is too large", "--sizes", "99999999999T");
  CHECK_BAD("the first size (1 GiB) is larger than the last (4 KiB)", "--sizes", "1G:4K");
  CHECK_BAD("step factor", "--sizes", "4K:1M:1");
  CHECK_BAD("step factor", "--sizes", "4K:1M:x");
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
  CHECK_BAD("--json needs a value", "--json");
  CHECK_BAD("--json needs a file name", "--json=");
  CHECK_BAD("--plot needs a file name", "--plot", "-");
  CHECK_BAD("--json and --csv name the same file 'x'", "--json", "x", "--csv", "x");
  CHECK_BAD("--json and --csv name the same file '-'", "--json", "-", "--csv", "-");
}

/* Counts the lines of the table that name a size (the data rows). */
static int count_in(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
    n++;
  return n;
}

static void check_good_runs(void) {
  harness_context = "good runs";
  const result *r = bench("--device", "0", "--sizes", "4K", "--repeat", "1", (const char *)NULL);
  CHECK_MSG(r->code == 0, "a small run: exit %d; stderr: %s", r->code, r->err);
  CHECK_MSG(strstr(r->out, "device 0: native"), "no device heading: %s", r->out);
  CHECK(strstr(r->out, "ferry/raw") != NULL);
  CHECK(strstr(r->out, "memcpy") != NULL);
  CHECK(strstr(r->out, "0 failures") != NULL);
  static const char *const rows[] = {"h2d ",          "d2h ",           "h2d pinned", "d2h pinned",
                                     "host-ptr sync", "zero-copy sync", "d2d ",       "alloc+free"};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    CHECK_MSG(strstr(r->out, rows[i]) != NULL, "the table lacks the row '%s'", rows[i]);
  CHECK_MSG(r->err[0] == '\0', "stderr is not a terminal, yet something was printed there: %s", r->err);

  /* A:B steps by 4 up to B; A:B:F by F; a list is sorted and deduplicated; --opt=value works. */
  r = bench("--sizes", "1K:16K", "--repeat", "1", (const char *)NULL);
  CHECK_MSG(r->code == 0, "--sizes 1K:16K: exit %d; stderr: %s", r->code, r->err);
  CHECK(count_in(r->out, " 1 KiB ") == 8 && count_in(r->out, " 4 KiB ") == 8 && count_in(r->out, " 16 KiB ") == 8);
  CHECK(count_in(r->out, " 2 KiB ") == 0 && count_in(r->out, " 8 KiB ") == 0);
  r = bench("--sizes=1K:8K:2", "--repeat=1", "--device=all", (const char *)NULL);
  CHECK_MSG(r->code == 0, "--sizes=1K:8K:2: exit %d; stderr: %s", r->code, r->err);
  CHECK(count_in(r->out, " 2 KiB ") == 8 && count_in(r->out, " 8 KiB ") == 8);
  r = bench("--sizes", "8k,1000,8KiB,2KB", "--repeat", "1", (const char *)NULL);
  CHECK_MSG(r->code == 0, "a list: exit %d; stderr: %s", r->code, r->err);
  CHECK(count_in(r->out, " 8 KiB ") == 8 && count_in(r->out, " 1000 B ") == 8 && count_in(r->out, " 2 KiB ") == 8);
  const char *at1000 = strstr(r->out, " 1000 B "), *at2k = strstr(r->out, " 2 KiB ");
  CHECK_MSG(at1000 && at2k && at1000 < at2k, "sizes are not in ascending order");
  r = bench("--sizes", "4K:10K", "--repeat", "1", (const char *)NULL);
  CHECK_MSG(r->code == 0 && count_in(r->out, " 4 KiB ") == 8 && count_in(r->out, " 16 KiB ") == 0,
            "--sizes 4K:10K measures 4 KiB alone");

  /* A size beyond the host memory is not measured, with a note, and is no failure. */
  r = bench("--sizes", "4K,1T", "--repeat", "1", (const char *)NULL);
  CHECK_MSG(r->code == 0, "--sizes 4K,1T: exit %d; stderr: %s", r->code, r->err);
  CHECK_MSG(strstr(r->out, "not measured: ") != NULL && count_in(r->out, " 1 TiB ") == 0,
            "--sizes 4K,1T: no note about the size cap: %s", r->out);
  CHECK(count_in(r->out, " 4 KiB ") == 8);

  /* --json - puts the data on stdout and the table on stderr. */
  r = bench("--sizes", "4K", "--repeat", "1", "--json", "-", (const char *)NULL);
  CHECK_MSG(r->code == 0, "--json -: exit %d; stderr: %s", r->code, r->err);
  CHECK_MSG(r->out[0] == '{' && strstr(r->out, "\"devices\""), "--json - did not write JSON to stdout: %.200s", r->out);
  CHECK_MSG(strstr(r->err, "ferry/raw") != NULL, "--json -: the table is not on stderr");
  r = bench("--sizes", "4K", "--repeat", "1", "--csv", "-", (const char *)NULL);
  CHECK_MSG(r->code == 0 && strncmp(r->out, "device,backend,", 15) == 0, "--csv - did not write CSV to stdout");
}

static void check_failures(void) {
  harness_context = "failures";
  /* A file that cannot be written is a failure: a sentence, exit 1, and the rest still done. */
  const result *r = bench("--sizes", "4K", "--repeat", "1", "--json", "/nonexistent-dir/x.json", (const char *)NULL);
  CHECK_MSG(r->code == 1, "an unwritable --json: exit %d, expected 1", r->code);
  CHECK_MSG(strstr(r->err, "--json /nonexistent-dir/x.json: cannot write the file") != NULL, "stderr: %s", r->err);
  CHECK(strstr(r->out, "device 0: native") != NULL);
  r = bench("--sizes", "4K", "--repeat", "1", "--plot", "/nonexistent-dir/x.svg", (const char *)NULL);
  CHECK_MSG(r->code == 1 && strstr(r->err, "--plot /nonexistent-dir/x.svg: cannot write"), "stderr: %s", r->err);
}

int main(void) {
  if (!find_tool()) {
    printf("bench_cli: skipped: the ferry program is not at %s (set FERRY_TOOL to its path)\n", tool);
    return HARNESS_SKIP;
  }
  check_help();
  check_bad_arguments();
  check_good_runs();
  check_failures();
  return harness_finish("bench_cli");
}
