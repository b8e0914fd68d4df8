/*
 * cuda_threads: ferry's cuda devices used from many threads at once.
 *
 * Every operation may come from a thread that has never touched CUDA, or from
 * one with another context current: ferry makes the device's primary context
 * current for the call and gives a thread's own context back afterwards. Each
 * thread allocates, writes, reads, copies within and between GPUs, uses
 * host-pointer buffers over arrays of its own and pinned blocks, and checks
 * every byte. Runs on real GPUs and on the fake driver (under TSan in CI).
 */
#include "backends/cuda/cuda_api.h"
#include "harness.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 8
#define ROUNDS  12

static ferry_device *devs[16];
static size_t dev_count;
static const ferry_cuda_api *api;
static pthread_mutex_t check_lock = PTHREAD_MUTEX_INITIALIZER; /* the harness counters are not atomic */

typedef struct worker {
  int id;
  int failures;
  char first_failure[512];
} worker;

static void failf(worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(worker *w, const char *fmt, ...) {
  if (w->failures++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->first_failure, sizeof w->first_failure, fmt, ap);
    va_end(ap);
  }
}

#define T_OK(expr)                                                                                                     \
  do {                                                                                                                 \
    ferry_status st_ = (expr);                                                                                         \
    if (st_ != FERRY_OK)                                                                                               \
      failf(w, "line %d: %s returned %s: %s", __LINE__, #expr, ferry_status_name(st_), ferry_last_error());            \
  } while (0)

#define T_CHECK(cond)                                                                                                  \
  do {                                                                                                                 \
    if (!(cond)) failf(w, "line %d: %s is false", __LINE__, #cond);                                                    \
  } while (0)

static void *work(void *arg) {
  worker *w = arg;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  /* Thread 1 runs with another GPU's context current (or a device's context,
   * when there is one GPU), and must find it current after every call. */
  cu_context own = NULL;
  if (w->id == 1) {
    ferry_native nat;
    T_OK(ferry_device_native(devs[dev_count - 1], &nat));
    own = (cu_context)nat.context;
    if (api->cuCtxSetCurrent(own) != FCU_SUCCESS) failf(w, "cuCtxSetCurrent failed");
  }
  for (int round = 0; round < ROUNDS; round++) {
    ferry_device *dev = devs[(size_t)(w->id + round) % dev_count];
    ferry_device *other = devs[(size_t)(w->id + round + 1) % dev_count];
    size_t n = 1000 + (size_t)(w->id * 977 + round * 131) % 70000;
    uint32_t seed = (uint32_t)(w->id * 1000 + round);
    unsigned char *src = malloc(n), *dst = malloc(n);
    fill_pattern(src, n, seed);
    ferry_buffer a = FERRY_NULL_BUFFER, b = FERRY_NULL_BUFFER, c = FERRY_NULL_BUFFER;
    T_OK(ferry_alloc(dev, n, FERRY_UINT8, &a));
    T_OK(ferry_alloc(dev, n, FERRY_UINT8, &b));
    T_OK(ferry_alloc(other, n, FERRY_UINT8, &c));
    T_OK(ferry_host_ptr_to_device(src, n, a));
    T_OK(ferry_device_to_device(a, b));
    T_OK(ferry_device_to_device(b, c));
    memset(dst, 0, n);
    T_OK(ferry_device_to_host_ptr(c, dst, n));
    T_CHECK(find_pattern_mismatch(dst, n, seed) == SIZE_MAX);
    /* Byte ranges and an overlapping copy within one buffer. */
    T_OK(ferry_copy(c, 0, c, 7, n - 7));
    memset(dst, 0, n);
    T_OK(ferry_read(c, 7, dst, n - 7));
    T_CHECK(find_pattern_mismatch(dst, n - 7, seed) == SIZE_MAX);
    /* A host-pointer buffer over an array of this thread's own. */
    size_t hbytes = page * (1 + (size_t)(round % 3));
    unsigned char *array = harness_aligned(page, hbytes);
    fill_pattern(array, hbytes, seed + 1);
    ferry_buffer h = FERRY_NULL_BUFFER;
    T_OK(ferry_alloc_host_ptr(dev, ferry_array_of(array, hbytes, FERRY_UINT8), &h, NULL));
    T_OK(ferry_host_to_device(ferry_array_of(array, hbytes, FERRY_UINT8), h));
    ferry_buffer d = FERRY_NULL_BUFFER;
    T_OK(ferry_alloc(other, hbytes, FERRY_UINT8, &d));
    T_OK(ferry_device_to_device(h, d));
    unsigned char *back = malloc(hbytes);
    T_OK(ferry_device_to_host_ptr(d, back, hbytes));
    T_CHECK(find_pattern_mismatch(back, hbytes, seed + 1) == SIZE_MAX);
    T_OK(ferry_free(h));
    T_OK(ferry_free(d));
    free(back);
    free(array);
    /* Pinned memory. */
    void *pinned = NULL;
    T_OK(ferry_host_alloc(dev, n, &pinned));
    if (pinned) {
      T_OK(ferry_device_to_host_ptr(a, pinned, n));
      T_CHECK(find_pattern_mismatch(pinned, n, seed) == SIZE_MAX);
      T_OK(ferry_host_free(pinned));
    }
    T_OK(ferry_free(a));
    T_OK(ferry_free(b));
    T_OK(ferry_free(c));
    free(src);
    free(dst);
    if (own) {
      cu_context now = NULL;
      api->cuCtxGetCurrent(&now);
      if (now != own) failf(w, "round %d: ferry changed the thread's current context", round);
    }
  }
  if (own) api->cuCtxSetCurrent(NULL);
  return NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  ferry_backend_info b;
  int present = harness_start_backend("cuda", "cuda_threads", &b);
  if (present != 0) return present;
  for (size_t d = 0; d < b.device_count && dev_count < 16; d++)
    if (ferry_device_get(b.first_device + d, &devs[dev_count]) == FERRY_OK) dev_count++;
  api = ferry__cuda_api();
  if (dev_count == 0 || !api) {
    printf("SKIP cuda_threads: this build has no cuda backend\n");
    ferry_shutdown();
    return HARNESS_SKIP;
  }
  printf("%d threads x %d rounds on %zu CUDA device(s)\n", THREADS, ROUNDS, dev_count);
  pthread_t threads[THREADS];
  worker workers[THREADS];
  for (int i = 0; i < THREADS; i++) {
    workers[i] = (worker){.id = i};
    CHECK(pthread_create(&threads[i], NULL, work, &workers[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(threads[i], NULL);
    pthread_mutex_lock(&check_lock);
    CHECK_MSG(workers[i].failures == 0, "thread %d: %d failures, the first: %s", i, workers[i].failures,
              workers[i].first_failure);
    pthread_mutex_unlock(&check_lock);
  }
  for (size_t d = 0; d < dev_count; d++) {
    ferry_stats s;
    CHECK_OK(ferry_device_stats(devs[d], &s));
    CHECK(s.live_buffers == 0);
    CHECK_OK(ferry_device_synchronize(devs[d]));
  }
  ferry_shutdown();
  return harness_finish("cuda_threads");
}
