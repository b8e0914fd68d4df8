/*
 * Running out of memory on every backend present (native, checked, PoCL,
 * lavapipe): each runs in a child process under an address-space limit
 * (setrlimit(RLIMIT_AS)), allocates until ferry says FERRY_ERROR_OUT_OF_MEMORY
 * with the numbers (nothing may abort: PoCL's own assertion did when its deferred
 * allocation failed), frees, and allocates and transfers again. The second round
 * must fit as many buffers as the first: memory ferry or the backend kept (the
 * allocation cache, checked's quarantine) is given back when an allocation runs
 * out.
 *
 * A device with memory of its own (a discrete GPU: NVIDIA's OpenCL and Vulkan)
 * does not take address space for its buffers, so the limit does not limit
 * them: there the test is what it does limit, host memory ferry allocates for
 * the device (ferry_host_alloc's pinned blocks), and device allocations must go
 * on working under it.
 *
 * Skipped under ASan and TSan: their shadow memory takes terabytes of address
 * space, so no address-space limit can be set under them.
 */
#include "harness.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#endif

#define HEADROOM   ((size_t)768 << 20) /* address space allowed beyond what the process has at the start */
#define PIECE      ((size_t)64 << 20)
#define MAX_PIECES 64

/* The process's address space now, in bytes (/proc/self/statm's first field). */
static size_t address_space(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  if (f) {
    if (fscanf(f, "%lu", &pages) != 1) pages = 0;
    fclose(f);
  }
  return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* Allocates PIECE buffers until one fails; that one must be out of memory. */
static int fill(ferry_device *dev, ferry_buffer *pieces, const char *round) {
  int n = 0;
  static unsigned char page[4096];
  for (; n < MAX_PIECES; n++) {
    ferry_status st = ferry_alloc(dev, PIECE, FERRY_UINT8, &pieces[n]);
    if (st != FERRY_OK) {
      CHECK_MSG(st == FERRY_ERROR_OUT_OF_MEMORY, "%s: allocation %d failed with %s: %s", round, n,
                ferry_status_name(st), ferry_last_error());
      CHECK_ERROR_HAS("67108864"); /* the size, in numbers */
      break;
    }
    CHECK_OK(ferry_write(pieces[n], PIECE - sizeof page, page, sizeof page));
  }
  CHECK_MSG(n < MAX_PIECES, "%s: %d buffers of 64 MiB fit under a limit of 768 MiB more", round, n);
  return n;
}

/* ferry_host_alloc of PIECE blocks until one fails; that one must be out of memory. */
static int fill_host(ferry_device *dev, void **blocks, const char *round) {
  int n = 0;
  for (; n < MAX_PIECES; n++) {
    ferry_status st = ferry_host_alloc(dev, PIECE, &blocks[n]);
    if (st != FERRY_OK) {
      CHECK_MSG(st == FERRY_ERROR_OUT_OF_MEMORY, "%s: host block %d failed with %s: %s", round, n,
                ferry_status_name(st), ferry_last_error());
      break;
    }
    memset((char *)blocks[n] + PIECE - 4096, 1, 4096);
  }
  CHECK_MSG(n < MAX_PIECES, "%s: %d host blocks of 64 MiB fit under a limit of 768 MiB more", round, n);
  return n;
}

/* A device with memory of its own, under the limit: host blocks run out, device memory does not. */
static void run_device_with_own_memory(ferry_device *dev, const char *backend) {
  void *blocks[MAX_PIECES];
  int first = fill_host(dev, blocks, "first round");
  for (int i = 0; i < first; i++)
    CHECK_OK(ferry_host_free(blocks[i]));
  int second = fill_host(dev, blocks, "second round");
  CHECK_MSG(second >= first - 1, "%d host blocks fit before freeing, %d after", first, second);
  for (int i = 0; i < second; i++)
    CHECK_OK(ferry_host_free(blocks[i]));
  ferry_buffer b[4];
  unsigned char out[4096], back[4096];
  fill_pattern(out, sizeof out, 11);
  for (int i = 0; i < 4; i++) {
    CHECK_OK(ferry_alloc(dev, (size_t)256 << 20, FERRY_UINT8, &b[i])); /* a GiB of device memory: not limited */
    CHECK_OK(ferry_write(b[i], 0, out, sizeof out));
    CHECK_OK(ferry_read(b[i], 0, back, sizeof back));
    CHECK(memcmp(out, back, sizeof out) == 0);
  }
  for (int i = 0; i < 4; i++)
    CHECK_OK(ferry_free(b[i]));
  printf("%s: %d and %d host blocks of 64 MiB under a limit of 768 MiB more address space; device memory "
         "unlimited by it\n",
         backend, first, second);
}

static void run_backend(const char *backend) {
  harness_context = backend;
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", backend));
  CHECK_OK(ferry_init());
  ferry_device *dev = harness_device_of(backend);
  if (!dev) return; /* the parent said why */
  /* A first transfer, so the driver has made whatever it makes on first use. */
  ferry_buffer warm;
  unsigned char out[4096], back[4096];
  fill_pattern(out, sizeof out, 9);
  CHECK_OK(ferry_alloc(dev, sizeof out, FERRY_UINT8, &warm));
  CHECK_OK(ferry_write(warm, 0, out, sizeof out));
  CHECK_OK(ferry_free(warm));

  struct rlimit limit = {address_space() + HEADROOM, RLIM_INFINITY};
  CHECK(setrlimit(RLIMIT_AS, &limit) == 0);
  ferry_device_info info;
  CHECK_OK(ferry_device_info_get(dev, &info));
  if (!info.is_cpu) {
    run_device_with_own_memory(dev, backend);
    ferry_shutdown();
    return;
  }

  /* More than the limit leaves, at once. */
  ferry_buffer huge;
  CHECK_STATUS(ferry_alloc(dev, (size_t)2 << 30, FERRY_UINT8, &huge), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_ERROR_HAS("2 GiB");

  ferry_buffer pieces[MAX_PIECES];
  int first = fill(dev, pieces, "first round");
  for (int i = 0; i < first; i++)
    CHECK_OK(ferry_free(pieces[i]));
  int second = fill(dev, pieces, "second round");
  /* A driver's own threads may take address space of their own in between (a
   * malloc arena is 64 MiB): one buffer of slack there, none on native and checked. */
  int slack = strcmp(backend, "native") == 0 || strcmp(backend, "checked") == 0 ? 0 : 1;
  CHECK_MSG(second >= first - slack, "%d buffers fit before freeing, %d after: memory freed was kept", first, second);
  for (int i = 0; i < second; i++)
    CHECK_OK(ferry_free(pieces[i]));

  /* Allocation and transfers work again. */
  ferry_buffer b;
  CHECK_OK(ferry_alloc(dev, sizeof out, FERRY_UINT8, &b));
  CHECK_OK(ferry_write(b, 0, out, sizeof out));
  CHECK_OK(ferry_read(b, 0, back, sizeof back));
  CHECK(memcmp(out, back, sizeof out) == 0);
  CHECK_OK(ferry_free(b));
  printf("%s: %d and %d buffers of 64 MiB under a limit of 768 MiB more address space\n", backend, first, second);
  ferry_shutdown();
}

#ifdef UNDER_SANITIZER
static const bool under_sanitizer = true;
#else
static const bool under_sanitizer = false;
#endif

int main(void) {
  if (under_sanitizer) {
    printf("SKIP oom: ASan and TSan reserve terabytes of address space for their shadow memory, so no "
           "address-space limit (RLIMIT_AS) can be set under them\n");
    return HARNESS_SKIP;
  }
  static const char *const backends[] = {"native", "checked", "opencl", "vulkan"};
  int required_missing = 0;
  for (int i = 0; i < 4; i++) {
    /* Is there a device? Asked in a child too: this process starts no driver. */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      alarm(120);
      harness_failures = 0;
      ferry_backend_info info;
      ferry_set_option("FERRY_BACKENDS", backends[i]);
      int present = harness_start_backend(backends[i], "oom", &info);
      if (present != 0) _exit(present == HARNESS_SKIP ? 77 : 1);
      ferry_shutdown();
      run_backend(backends[i]);
      fflush(stdout);
      _exit(harness_failures ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    harness_context = backends[i];
    if (WIFSIGNALED(status)) {
      CHECK_MSG(false, "%s: the child was killed by signal %d (%s)", backends[i], WTERMSIG(status),
                strsignal(WTERMSIG(status)));
    } else if (WEXITSTATUS(status) == 77) {
      continue; /* skipped, with the reason printed */
    } else {
      if (WEXITSTATUS(status) != 0 && harness_backend_required(backends[i])) required_missing = 1;
      CHECK_MSG(WEXITSTATUS(status) == 0, "%s: the child's checks failed", backends[i]);
    }
  }
  harness_context = "";
  int st = harness_finish("oom");
  return st ? st : required_missing;
}
