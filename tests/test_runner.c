/*
 * The case runner of tests/harness.c, which the conformance suite uses: the name
 * filter, a case that checks nothing (a failure, not "ok"), a case that does not
 * apply ("n/a"), and the watchdog that names a case that hangs and fails the run.
 */
#include "harness.h"

#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* The child: a case that never ends, under a half-second limit. */
static _Noreturn void hang(void) {
  harness_case_time_limit(0.5);
  harness_case_begin("runner[0] sleeps_forever");
  for (;;)
    sleep(1);
}

/* Runs `case` and says whether it passed; its failures are taken back, so that
 * this program's own result counts only the checks about the runner. */
static bool run_case(const char *name, void (*body)(void), int *failures_seen) {
  int failures = harness_failures;
  harness_case_begin(name);
  body();
  bool passed = harness_case_end(name);
  *failures_seen = harness_failures - failures;
  harness_failures = failures;
  return passed;
}

static void checks_nothing(void) {}
static void checks_and_passes(void) { CHECK(1 + 1 == 2); }
static void checks_and_fails(void) { CHECK_MSG(false, "(this failure is expected)"); }
static void does_not_apply(void) { harness_not_applicable("the device has no such thing"); }
static void does_not_apply_but_fails(void) {
  harness_not_applicable("the device has no such thing");
  CHECK_MSG(false, "(this failure is expected)");
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 2 && strcmp(argv[1], "--hang") == 0) hang();

  /* The watchdog, in a child: it must stop within seconds, fail, and name the case. */
  int err[2];
  CHECK(pipe(err) == 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawn_file_actions_addclose(&fa, err[0]);
  char *child_argv[] = {"/proc/self/exe", "--hang", NULL};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid;
  int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, child_argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(err[1]);
  CHECK_MSG(rc == 0, "posix_spawn: %s", strerror(rc));
  char text[2048] = "";
  size_t got = 0;
  ssize_t n;
  while (got < sizeof text - 1 && (n = read(err[0], text + got, sizeof text - 1 - got)) > 0)
    got += (size_t)n;
  text[got] = '\0';
  close(err[0]);
  int status = 0;
  if (rc == 0) CHECK(waitpid(pid, &status, 0) == pid);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 1, "the hung child ended with status 0x%x", status);
  CHECK_MSG(strstr(text, "FAIL runner[0] sleeps_forever: did not finish within 0.5 s"),
            "the watchdog's message does not name the case: '%s'", text);
  CHECK_MSG(seconds < 30, "the watchdog took %.1f s to stop a case limited to 0.5 s", seconds);
  printf("watchdog: a hung case was stopped after %.1f s: %s", seconds, text);

  /* The filter: an fnmatch glob; an exact name matches itself; none selects all. */
  CHECK(harness_case_selected("byte_ranges"));
  harness_case_filter("zero_*");
  CHECK(harness_case_selected("zero_copy") && harness_case_selected("zero_length"));
  CHECK(!harness_case_selected("byte_ranges") && !harness_case_selected("a_zero_copy"));
  harness_case_filter("byte_ranges");
  CHECK(harness_case_selected("byte_ranges") && !harness_case_selected("byte_ranges_2"));
  harness_case_filter("*host*");
  CHECK(harness_case_selected("host_ptr") && harness_case_selected("cross_over_host_arrays"));
  harness_case_filter(NULL);
  CHECK(harness_case_selected("anything"));

  /* What each kind of case prints and counts. */
  int failures;
  CHECK(run_case("checks_and_passes", checks_and_passes, &failures) && failures == 0);
  CHECK(!run_case("checks_and_fails", checks_and_fails, &failures) && failures == 1);
  CHECK_MSG(!run_case("checks_nothing", checks_nothing, &failures) && failures == 1,
            "a case that made no check was not a failure");
  CHECK(run_case("does_not_apply", does_not_apply, &failures) && failures == 0);
  CHECK(!run_case("does_not_apply_but_fails", does_not_apply_but_fails, &failures) && failures == 1);
  return harness_finish("runner");
}
