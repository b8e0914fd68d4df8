/*
 * Many threads at once, on every device present:
 *  - each thread allocates, transfers, copies across devices and frees its own
 *    buffers, and checks every byte it reads back;
 *  - meanwhile threads share a table of handles that they read through, replace
 *    and free at random: every call returns OK or FERRY_ERROR_STALE_BUFFER, and
 *    nothing crashes, even when a buffer is freed during another thread's read;
 *  - ferry_init from many threads at once gives one registry;
 *  - transfer statistics are exact when many threads, short-lived ones included,
 *    count at once, and start from zero in the next session.
 * Run under TSan in CI.
 */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { THREADS = 8, SHARED = 32 };

static int iterations = 150;
static size_t device_count;
static _Atomic int unexpected; /* statuses other than OK / STALE in the shared-handle phase */
static _Atomic int mismatches;
static _Atomic uint64_t shared[SHARED];

static uint32_t next_random(uint32_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

static ferry_device *device_at(size_t i) {
  ferry_device *d = NULL;
  ferry_device_get(i % device_count, &d);
  return d;
}

static void *own_buffers(void *arg) {
  uint32_t rng = (uint32_t)(uintptr_t)arg * 7919u + 1;
  for (int it = 0; it < iterations; it++) {
    /* Now and then a buffer large enough for the copy threads (4 MiB and up), so
     * that several callers meet in the pool. */
    size_t n = it % 25 == 0 ? ((size_t)5 << 20) + it : 1 + next_random(&rng) % 65536;
    uint32_t seed = next_random(&rng);
    ferry_device *a = device_at(next_random(&rng)), *b = device_at(next_random(&rng));
    unsigned char *h = malloc(n), *back = malloc(n);
    fill_pattern(h, n, seed);
    ferry_buffer x, y;
    if (ferry_alloc(a, n, FERRY_UINT8, &x) != FERRY_OK || ferry_alloc(b, n, FERRY_UINT8, &y) != FERRY_OK) {
      atomic_fetch_add(&unexpected, 1);
      fprintf(stderr, "alloc failed: %s\n", ferry_last_error());
      free(h);
      free(back);
      continue;
    }
    if (ferry_host_to_device(ferry_array_of(h, n, FERRY_UINT8), x) != FERRY_OK ||
        ferry_device_to_device(x, y) != FERRY_OK || ferry_device_to_host_ptr(y, back, n) != FERRY_OK) {
      atomic_fetch_add(&unexpected, 1);
      fprintf(stderr, "transfer failed: %s\n", ferry_last_error());
    } else if (find_pattern_mismatch(back, n, seed) != SIZE_MAX) {
      atomic_fetch_add(&mismatches, 1);
    }
    size_t off = n / 3, len = n - off;
    memset(back, 0, n);
    if (ferry_read(x, off, back, len) != FERRY_OK || memcmp(back, h + off, len) != 0) atomic_fetch_add(&mismatches, 1);
    if (ferry_free(x) != FERRY_OK || ferry_free(y) != FERRY_OK) atomic_fetch_add(&unexpected, 1);
    free(h);
    free(back);
  }
  return NULL;
}

static void expect_ok_or_stale(ferry_status st, const char *what) {
  if (st != FERRY_OK && st != FERRY_ERROR_STALE_BUFFER) {
    atomic_fetch_add(&unexpected, 1);
    fprintf(stderr, "%s: %s: %s\n", what, ferry_status_name(st), ferry_last_error());
  }
}

/* Reads through, replaces and frees the shared handles at random. Each shared
 * buffer is written once, before it is published, with its seed in its first 4
 * bytes and fill_pattern(seed) after: a read that succeeds must see exactly such
 * a buffer, even when the buffer is freed (and its memory reused) meanwhile. */
static void *shared_handles(void *arg) {
  uint32_t rng = (uint32_t)(uintptr_t)arg * 104729u + 3;
  enum { N = 4096 };
  unsigned char back[N], h[N];
  for (int it = 0; it < iterations * 4; it++) {
    size_t i = next_random(&rng) % SHARED;
    switch (next_random(&rng) % 4) {
    case 0: { /* publish a new buffer, free the one it replaces */
      uint32_t seed = next_random(&rng);
      ferry_buffer b;
      if (ferry_alloc(device_at(next_random(&rng)), N, FERRY_UINT8, &b) != FERRY_OK) {
        atomic_fetch_add(&unexpected, 1);
        break;
      }
      memcpy(h, &seed, 4);
      fill_pattern(h + 4, N - 4, seed);
      expect_ok_or_stale(ferry_host_ptr_to_device(h, N, b), "fill");
      uint64_t old = atomic_exchange(&shared[i], b.id);
      if (old) expect_ok_or_stale(ferry_free((ferry_buffer){old}), "free replaced");
      break;
    }
    case 1:
    case 2: { /* read through whatever handle is there */
      ferry_buffer b = {atomic_load(&shared[i])};
      if (!b.id) break;
      ferry_status st = ferry_device_to_host_ptr(b, back, N);
      expect_ok_or_stale(st, "read");
      if (st == FERRY_OK) {
        uint32_t seed;
        memcpy(&seed, back, 4);
        if (find_pattern_mismatch(back + 4, N - 4, seed) != SIZE_MAX) atomic_fetch_add(&mismatches, 1);
      }
      (void)ferry_size(b);
      (void)ferry_device_ptr(b);
      break;
    }
    case 3: { /* free it */
      uint64_t old = atomic_exchange(&shared[i], 0);
      if (old) expect_ok_or_stale(ferry_free((ferry_buffer){old}), "free");
      break;
    }
    }
  }
  return NULL;
}

static _Atomic size_t init_counts[THREADS];

static void *init_concurrently(void *arg) {
  size_t i = (size_t)(uintptr_t)arg;
  if (ferry_init() != FERRY_OK) atomic_fetch_add(&unexpected, 1);
  atomic_store(&init_counts[i], ferry_device_count());
  return NULL;
}

static void *pinned_churn(void *arg) {
  (void)arg;
  for (int it = 0; it < iterations; it++) {
    void *p;
    if (ferry_host_alloc(device_at((size_t)it), 8192, &p) != FERRY_OK) {
      atomic_fetch_add(&unexpected, 1);
      continue;
    }
    memset(p, it, 8192);
    if (ferry_host_free(p) != FERRY_OK) atomic_fetch_add(&unexpected, 1);
  }
  return NULL;
}

/* Each call: 5 writes of 64 bytes and 3 reads of 16 on native's device (stats phase). */
enum { STAT_WRITES = 5, STAT_READS = 3 };
static ferry_device *stats_device;

static void *count_transfers(void *arg) {
  (void)arg;
  ferry_buffer b;
  unsigned char bytes[64] = {0};
  if (ferry_alloc(stats_device, 64, FERRY_UINT8, &b) != FERRY_OK) {
    atomic_fetch_add(&unexpected, 1);
    return NULL;
  }
  for (int i = 0; i < STAT_WRITES; i++)
    if (ferry_write(b, 0, bytes, 64) != FERRY_OK) atomic_fetch_add(&unexpected, 1);
  for (int i = 0; i < STAT_READS; i++)
    if (ferry_read(b, 0, bytes, 16) != FERRY_OK) atomic_fetch_add(&unexpected, 1);
  if (ferry_free(b) != FERRY_OK) atomic_fetch_add(&unexpected, 1);
  return NULL;
}

static void run_threads(void *(*fn)(void *), int count) {
  pthread_t t[THREADS * 2];
  for (int i = 0; i < count; i++)
    pthread_create(&t[i], NULL, fn, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < count; i++)
    pthread_join(t[i], NULL);
}

int main(void) {
  const char *it = getenv("FERRY_TEST_ITERATIONS");
  if (it) iterations = atoi(it);
  /* Concurrent first initialisation. */
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    pthread_create(&t[i], NULL, init_concurrently, (void *)(uintptr_t)i);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  device_count = ferry_device_count();
  CHECK(device_count > 0);
  for (int i = 0; i < THREADS; i++)
    CHECK(atomic_load(&init_counts[i]) == device_count);
  printf("threads: %zu devices, %d threads, %d iterations\n", device_count, THREADS, iterations);

  harness_context = "own buffers";
  run_threads(own_buffers, THREADS);
  harness_context = "shared handles";
  pthread_t mixed[THREADS];
  for (int i = 0; i < THREADS; i++)
    pthread_create(&mixed[i], NULL, i % 4 == 3 ? pinned_churn : shared_handles, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < THREADS; i++)
    pthread_join(mixed[i], NULL);
  for (int i = 0; i < SHARED; i++) {
    uint64_t old = atomic_exchange(&shared[i], 0);
    if (old) CHECK_OK(ferry_free((ferry_buffer){old}));
  }
  harness_context = "";
  CHECK_MSG(atomic_load(&unexpected) == 0, "%d calls returned something other than OK or STALE",
            atomic_load(&unexpected));
  CHECK_MSG(atomic_load(&mismatches) == 0, "%d read-backs differed", atomic_load(&mismatches));
  for (size_t d = 0; d < device_count; d++) {
    ferry_stats s;
    CHECK_OK(ferry_device_stats(device_at(d), &s));
    CHECK_MSG(s.live_buffers == 0 && s.bytes_in_use == 0, "device %zu: %llu buffers, %llu bytes still live", d,
              (unsigned long long)s.live_buffers, (unsigned long long)s.bytes_in_use);
  }
  /* Statistics: rounds of short-lived threads (each thread's record goes back
   * when it exits and the next thread counts on from it), counted exactly. */
  harness_context = "statistics";
  stats_device = harness_device_of("native");
  if (!stats_device) stats_device = device_at(0);
  ferry_stats before, after;
  CHECK_OK(ferry_device_stats(stats_device, &before));
  enum { ROUNDS = 6 };
  for (int r = 0; r < ROUNDS; r++)
    run_threads(count_transfers, THREADS);
  CHECK_OK(ferry_device_stats(stats_device, &after));
  uint64_t calls = (uint64_t)ROUNDS * THREADS;
  CHECK_MSG(after.h2d_count - before.h2d_count == calls * STAT_WRITES &&
                after.h2d_bytes - before.h2d_bytes == calls * STAT_WRITES * 64 &&
                after.d2h_count - before.d2h_count == calls * STAT_READS &&
                after.d2h_bytes - before.d2h_bytes == calls * STAT_READS * 16,
            "h2d %llu transfers / %llu bytes, d2h %llu / %llu counted; %llu threads made %llu / %llu and %llu / %llu",
            (unsigned long long)(after.h2d_count - before.h2d_count),
            (unsigned long long)(after.h2d_bytes - before.h2d_bytes),
            (unsigned long long)(after.d2h_count - before.d2h_count),
            (unsigned long long)(after.d2h_bytes - before.d2h_bytes), (unsigned long long)calls,
            (unsigned long long)(calls * STAT_WRITES), (unsigned long long)(calls * STAT_WRITES * 64),
            (unsigned long long)(calls * STAT_READS), (unsigned long long)(calls * STAT_READS * 16));
  CHECK(atomic_load(&unexpected) == 0);
  ferry_shutdown();
  /* A new session's devices start from zero, whatever the threads' records hold. */
  CHECK_OK(ferry_init());
  stats_device = harness_device_of("native");
  if (!stats_device) CHECK_OK(ferry_device_get(0, &stats_device));
  CHECK_OK(ferry_device_stats(stats_device, &after));
  CHECK(after.h2d_count == 0 && after.d2h_count == 0 && after.h2d_bytes == 0);
  count_transfers(NULL);
  CHECK_OK(ferry_device_stats(stats_device, &after));
  CHECK(after.h2d_count == STAT_WRITES && after.d2h_count == STAT_READS);
  harness_context = "";
  ferry_shutdown();
  return harness_finish("threads");
}
