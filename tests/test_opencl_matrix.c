/*
 * The conformance suite on OpenCL configurations a plain run does not reach:
 *
 *  - two OpenCL devices, so that copies between two contexts (staged through
 *    host memory) are checked pair by pair: PoCL makes two devices when
 *    POCL_DEVICES="pthread pthread" (set here unless the environment sets it);
 *  - FERRY_OPENCL_PIPELINE=1: pinned host memory and pipelined transfers on CPU
 *    devices too (by default only devices with memory of their own have them).
 *
 * Each configuration runs ferry_conformance (next to this program) as a child
 * process, --backend opencl and --cross. Skipped (77) when there is no OpenCL
 * device, unless FERRY_REQUIRE_BACKENDS names opencl.
 */
#include "harness.h"

#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Runs ferry_conformance with the arguments; its exit code (77: skipped). */
static int run(const char *conformance, const char *arg1, const char *arg2) {
  char *argv[] = {(char *)conformance, (char *)arg1, (char *)arg2, NULL};
  pid_t pid;
  fflush(stdout);
  if (posix_spawn(&pid, conformance, NULL, NULL, argv, environ) != 0) {
    fprintf(stderr, "FAIL: cannot start %s\n", conformance);
    return 1;
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 1;
  return WEXITSTATUS(status);
}

int main(int argc, char **argv) {
  (void)argc;
  setvbuf(stdout, NULL, _IOLBF, 0);
  setenv("POCL_DEVICES", "pthread pthread", 0);
  ferry_backend_info b;
  int present = harness_start_backend("opencl", "opencl_matrix", &b);
  if (present != 0) return present;
  ferry_shutdown();
  /* ferry_conformance lies beside this program. */
  char self[4096], conformance[4200];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0)
    snprintf(self, sizeof self, "%s", argv[0]);
  else
    self[len] = '\0';
  char *slash = strrchr(self, '/');
  if (slash) *slash = '\0';
  snprintf(conformance, sizeof conformance, "%s/ferry_conformance", slash ? self : ".");

  printf("%zu OpenCL device(s)%s\n", b.device_count,
         b.device_count < 2 ? ": the cross-context pairs are not reached" : "");
  static const char *const pipeline[] = {"", "1"};
  for (int p = 0; p < 2; p++) {
    if (*pipeline[p])
      setenv("FERRY_OPENCL_PIPELINE", pipeline[p], 1);
    else
      unsetenv("FERRY_OPENCL_PIPELINE");
    const char *label = *pipeline[p] ? "FERRY_OPENCL_PIPELINE=1" : "default";
    printf("== %s: ferry_conformance --backend opencl\n", label);
    int rc = run(conformance, "--backend", "opencl");
    CHECK_MSG(rc == 0, "%s: ferry_conformance --backend opencl exited %d", label, rc);
    printf("== %s: ferry_conformance --cross\n", label);
    rc = run(conformance, "--cross", NULL);
    CHECK_MSG(rc == 0, "%s: ferry_conformance --cross exited %d", label, rc);
  }
  return harness_finish("opencl_matrix");
}
