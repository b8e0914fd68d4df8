/*
 * fork() after ferry started. In the child every call fails at once with
 * FERRY_ERROR_BACKEND, without entering a driver (PoCL used to hang at its first
 * call, lavapipe in ferry_device_synchronize and ferry_shutdown, native crashed in
 * ferry_shutdown joining copy threads that exist only in the parent); the child's
 * ferry_shutdown() forgets the parent's session, and ferry then starts again in
 * the child on native and checked, while the drivers the parent had started say
 * why they are unavailable. The parent's session goes on untouched.
 *
 * Each child runs under alarm(): a hang fails the test instead of blocking it.
 */
#include "harness.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILD_SECONDS 30
#define BIG           ((size_t)8 << 20) /* past the 4 MiB from which native copies run on the copy threads */

/* Runs `child` in a forked process with a time limit; its exit status says
 * whether its checks passed. */
static void in_child(const char *what, void (*child)(void *), void *arg) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(CHILD_SECONDS);
    harness_failures = 0;
    int before = harness_checks;
    child(arg);
    printf("%s: %d checks in the child, %d failed\n", what, harness_checks - before, harness_failures);
    fflush(stdout);
    fflush(stderr);
    _exit(harness_failures ? 1 : 0); /* no atexit handlers: they are the parent's */
  }
  CHECK_MSG(pid > 0, "%s: fork failed", what);
  if (pid <= 0) return;
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status))
    CHECK_MSG(false, "%s: the child was killed by signal %d%s", what, WTERMSIG(status),
              WTERMSIG(status) == SIGALRM ? " (it hung)" : "");
  else
    CHECK_MSG(WEXITSTATUS(status) == 0, "%s: the child's checks failed (exit %d)", what, WEXITSTATUS(status));
}

typedef struct inherited {
  const char *backend;
  ferry_device *dev;
  ferry_buffer buf;
  pid_t parent;
} inherited;

/* Does the sentence name the parent and say what to do? */
static void check_refusal(const inherited *in) {
  char pid[32];
  snprintf(pid, sizeof pid, "process %ld", (long)in->parent);
  CHECK_ERROR_HAS(pid);
  CHECK_ERROR_HAS("forked");
  CHECK_ERROR_HAS("ferry_shutdown()");
}

static void child_after_fork(void *arg) {
  const inherited *in = arg;
  char context[64];
  snprintf(context, sizeof context, "child of %s", in->backend);
  harness_context = context;
  unsigned char h[4096];
  memset(h, 1, sizeof h);
  /* Every call refuses at once, without a driver. */
  CHECK_STATUS(ferry_write(in->buf, 0, h, sizeof h), FERRY_ERROR_BACKEND);
  check_refusal(in);
  CHECK_STATUS(ferry_read(in->buf, 0, h, sizeof h), FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_copy(in->buf, 0, in->buf, 4096, 4096), FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_device_to_host_ptr(in->buf, h, 1), FERRY_ERROR_BACKEND);
  ferry_buffer other;
  CHECK_STATUS(ferry_alloc(in->dev, 16, FERRY_UINT8, &other), FERRY_ERROR_BACKEND);
  check_refusal(in);
  CHECK_STATUS(ferry_device_synchronize(in->dev), FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_device_trim(in->dev), FERRY_ERROR_BACKEND);
  ferry_stats stats;
  CHECK_STATUS(ferry_device_stats(in->dev, &stats), FERRY_ERROR_BACKEND);
  void *pinned;
  CHECK_STATUS(ferry_host_alloc(in->dev, 4096, &pinned), FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_free(in->buf), FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_init(), FERRY_ERROR_BACKEND);
  check_refusal(in);
  CHECK_STATUS(ferry_set_option("FERRY_BACKENDS", "native"), FERRY_ERROR_BACKEND);
  CHECK(ferry_device_count() == 0);
  CHECK(ferry_device_best() == NULL);
  CHECK(ferry_size(in->buf) == 0);
  CHECK(ferry_option_count() > 0); /* the settings' listing touches no device */

  /* ferry_shutdown forgets the parent's session at once. */
  ferry_shutdown();
  CHECK_STATUS(ferry_write(in->buf, 0, h, sizeof h), FERRY_ERROR_STALE_BUFFER);

  /* ferry starts again: native and checked work; a driver the parent started does
   * not (and is not started: a child that starts threads after a fork is more than
   * ThreadSanitizer supports). */
  char list[64];
  bool driver = strcmp(in->backend, "native") != 0 && strcmp(in->backend, "checked") != 0;
  snprintf(list, sizeof list, "native,checked%s%s", driver ? "," : "", driver ? in->backend : "");
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", list));
  CHECK_OK(ferry_init());
  for (size_t i = 0; i < ferry_backend_count(); i++) {
    ferry_backend_info b;
    CHECK_OK(ferry_backend_get(i, &b));
    if (strcmp(b.name, "native") == 0 || strcmp(b.name, "checked") == 0) {
      CHECK_MSG(b.device_count == 1, "%s has no device in the child: %s", b.name, b.status);
    } else if (strcmp(b.name, in->backend) == 0) {
      CHECK_MSG(b.device_count == 0 && strstr(b.status, "does not survive fork()"),
                "%s, started by the parent, says \"%s\" in the child", b.name, b.status);
    }
  }
  const char *fresh_backends[] = {"native", "checked"};
  for (int k = 0; k < 2; k++) {
    ferry_device *dev = harness_device_of(fresh_backends[k]);
    CHECK(dev != NULL);
    if (!dev) continue;
    ferry_buffer b;
    unsigned char out[4096], back[4096];
    fill_pattern(out, sizeof out, 5);
    CHECK_OK(ferry_alloc(dev, sizeof out, FERRY_UINT8, &b));
    CHECK_OK(ferry_write(b, 0, out, sizeof out));
    CHECK_OK(ferry_read(b, 0, back, sizeof back));
    CHECK(memcmp(out, back, sizeof out) == 0);
    CHECK(b.id != in->buf.id);
    CHECK_OK(ferry_free(b));
  }
  CHECK_STATUS(ferry_write(in->buf, 0, h, sizeof h), FERRY_ERROR_STALE_BUFFER);
  ferry_shutdown();
}

/* The parent starts `backend`, moves BIG bytes, forks, and checks its own session after. */
static int fork_with(const char *backend) {
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", backend));
  ferry_backend_info info;
  int present = harness_start_backend(backend, "fork", &info);
  if (present != 0) {
    ferry_set_option("FERRY_BACKENDS", NULL);
    return present;
  }
  char context[64];
  snprintf(context, sizeof context, "parent of %s", backend);
  harness_context = context;
  inherited in = {.backend = backend, .dev = harness_device_of(backend), .parent = getpid()};
  unsigned char *out = malloc(BIG), *back = malloc(BIG);
  fill_pattern(out, BIG, 11);
  CHECK_OK(ferry_alloc(in.dev, BIG, FERRY_UINT8, &in.buf));
  CHECK_OK(ferry_write(in.buf, 0, out, BIG));
  in_child(context, child_after_fork, &in);
  harness_context = context;
  /* The parent's session is untouched. */
  memset(back, 0, BIG);
  CHECK_OK(ferry_read(in.buf, 0, back, BIG));
  CHECK(find_pattern_mismatch(back, BIG, 11) == SIZE_MAX);
  CHECK_OK(ferry_device_synchronize(in.dev));
  CHECK_OK(ferry_free(in.buf));
  ferry_shutdown();
  free(out);
  free(back);
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", NULL));
  return 0;
}

/* Before this process ever started a driver: a child starts every backend afresh. */
static void child_of_fresh_parent(void *arg) {
  const char *backend = arg;
  harness_context = "child of a parent that never started ferry";
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", backend));
  CHECK_OK(ferry_init());
  ferry_device *dev = harness_device_of(backend);
  if (!dev) {
    printf("(no %s device: nothing to start in the child)\n", backend);
    ferry_shutdown();
    return;
  }
  ferry_buffer b;
  unsigned char out[4096], back[4096];
  fill_pattern(out, sizeof out, 3);
  CHECK_OK(ferry_alloc(dev, sizeof out, FERRY_UINT8, &b));
  CHECK_OK(ferry_write(b, 0, out, sizeof out));
  CHECK_OK(ferry_read(b, 0, back, sizeof back));
  CHECK(memcmp(out, back, sizeof out) == 0);
  CHECK_OK(ferry_free(b));
  CHECK_OK(ferry_device_synchronize(dev));
  ferry_shutdown();
}

int main(void) {
  static const char *const backends[] = {"native", "checked", "opencl", "vulkan", "metal"};
  enum { BACKENDS = sizeof backends / sizeof backends[0] };
  for (int i = 2; i < BACKENDS; i++)
    in_child(backends[i], child_of_fresh_parent, (void *)backends[i]);
  /* Copy threads on native whatever the machine: the reported crash needs them. */
  CHECK_OK(ferry_set_option("FERRY_COPY_THREADS", "3"));
  int failed_required = 0;
  for (int i = 0; i < BACKENDS; i++) {
    int r = fork_with(backends[i]);
    if (r == 1) failed_required = 1;
  }
  CHECK_OK(ferry_set_option("FERRY_COPY_THREADS", NULL));
  harness_context = "";
  int status = harness_finish("fork");
  return status ? status : failed_required;
}
