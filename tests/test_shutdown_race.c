/*
 * ferry_shutdown() racing other threads: workers allocate, transfer (4 MiB
 * writes on the copy threads too), copy, query and free on native and checked
 * while the main thread shuts ferry down again and again. Every call must either
 * work or fail cleanly: FERRY_ERROR_STALE_BUFFER for a buffer of a session that
 * ended, FERRY_ERROR_INVALID_ARGUMENT for a device pointer of one. A shutdown
 * waits for the calls in flight; calls that arrive meanwhile wait and then start
 * ferry again. Run under ASan and TSan in CI: a use after free or a race fails.
 */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WORKERS 4
#define BIG     ((size_t)4 << 20)

static _Atomic bool stop;
static _Atomic long calls_ok, calls_clean, unexpected, corrupted;
static _Atomic int last_bad_status;

static void note(ferry_status st) {
  if (st == FERRY_OK)
    atomic_fetch_add(&calls_ok, 1);
  else if (st == FERRY_ERROR_STALE_BUFFER || st == FERRY_ERROR_INVALID_ARGUMENT)
    atomic_fetch_add(&calls_clean, 1);
  else {
    atomic_fetch_add(&unexpected, 1);
    atomic_store(&last_bad_status, (int)st);
    fprintf(stderr, "unexpected %s: %s\n", ferry_status_name(st), ferry_last_error());
  }
}

static void *worker(void *arg) {
  unsigned id = (unsigned)(uintptr_t)arg;
  unsigned char *src = malloc(BIG), *dst = malloc(BIG);
  fill_pattern(src, BIG, id);
  ferry_buffer kept = FERRY_NULL_BUFFER; /* lives across iterations, so shutdowns find buffers live */
  for (unsigned i = 0; !atomic_load(&stop); i++) {
    /* 4 MiB on native, whose large copies run on the copy threads; less on checked,
     * whose quarantine a shutdown verifies byte by byte. */
    bool native = i % 2;
    size_t size = native ? BIG : (size_t)64 << 10;
    ferry_device *dev = harness_device_of(native ? "native" : "checked");
    if (!dev) continue;
    ferry_buffer b;
    ferry_status st = ferry_alloc(dev, size, FERRY_UINT8, &b);
    note(st);
    if (st != FERRY_OK) continue;
    /* Write, then read back: when both worked, the bytes are right. */
    ferry_status w = ferry_write(b, 0, src, i % 4 == 1 ? size : 4096);
    note(w);
    ferry_status r = ferry_read(b, 0, dst, 4096);
    note(r);
    if (w == FERRY_OK && r == FERRY_OK && find_pattern_mismatch(dst, 4096, id) != SIZE_MAX)
      atomic_fetch_add(&corrupted, 1);
    note(ferry_copy(b, 0, b, 8192, 4096));
    if (ferry_size(b) != 0 && ferry_size(b) != size) atomic_fetch_add(&corrupted, 1);
    note(ferry_device_synchronize(dev));
    void *pinned = NULL;
    st = ferry_host_alloc(dev, 8192, &pinned);
    note(st);
    if (st == FERRY_OK) {
      st = ferry_host_free(pinned);
      if (st != FERRY_ERROR_INVALID_ARGUMENT) note(st); /* released by a shutdown in between: fine */
    }
    if (kept.id) {
      note(ferry_copy(kept, 0, b, 0, 4096)); /* across devices when the sizes differ */
      note(ferry_free(kept));
    }
    kept = b;
  }
  if (kept.id) ferry_free(kept);
  free(src);
  free(dst);
  return NULL;
}

int main(void) {
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", "native,checked"));
  CHECK_OK(ferry_set_option("FERRY_COPY_THREADS", "3"));
  CHECK_OK(ferry_init());
  pthread_t t[WORKERS];
  for (unsigned i = 0; i < WORKERS; i++)
    pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
  const char *env = getenv("FERRY_TEST_ITERATIONS");
  int rounds = env ? atoi(env) : 100;
  for (int i = 0; i < rounds; i++) {
    /* Let the workers into each session (up to a second), then shut it down
     * under them after a varying pause. */
    long before = atomic_load(&calls_ok);
    for (int wait = 0; wait < 1000 && atomic_load(&calls_ok) < before + WORKERS; wait++) {
      struct timespec ms = {0, 1000000};
      nanosleep(&ms, NULL);
    }
    struct timespec pause = {0, (long)((i % 7) * 100000)};
    nanosleep(&pause, NULL);
    ferry_shutdown();
  }
  atomic_store(&stop, true);
  for (unsigned i = 0; i < WORKERS; i++)
    pthread_join(t[i], NULL);
  ferry_shutdown();
  harness_context = "shutdown racing calls";
  CHECK_MSG(atomic_load(&unexpected) == 0, "%ld calls failed otherwise than cleanly (last: %s)",
            atomic_load(&unexpected), ferry_status_name((ferry_status)atomic_load(&last_bad_status)));
  CHECK_MSG(atomic_load(&corrupted) == 0, "%ld reads gave wrong bytes", atomic_load(&corrupted));
  CHECK_MSG(atomic_load(&calls_ok) > 0, "no call worked");
  printf("%d shutdowns; %ld calls worked, %ld failed cleanly (stale buffer or device of an ended session)\n", rounds,
         atomic_load(&calls_ok), atomic_load(&calls_clean));
  /* ferry works normally afterwards. */
  ferry_device *dev = ferry_device_best();
  ferry_buffer b;
  CHECK_OK(ferry_alloc(dev, 16, FERRY_UINT8, &b));
  CHECK_OK(ferry_free(b));
  ferry_shutdown();
  ferry_set_option("FERRY_BACKENDS", NULL);
  ferry_set_option("FERRY_COPY_THREADS", NULL);
  return harness_finish("shutdown_race");
}
