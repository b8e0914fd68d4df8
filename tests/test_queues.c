/*
 * Queues beyond the conformance suite: failures while work runs (through the
 * fault backend, whose operations fail on demand), how they are reported and
 * what is cancelled; work pending at ferry_shutdown(); handles after a
 * shutdown; queues in a forked child; and many threads on many queues at once
 * (run under TSan in CI).
 */
/* usleep */
#define _DEFAULT_SOURCE
#include "fault_backend.h"
#include "harness.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static ferry_device *device_of(const char *backend, size_t which) {
  for (size_t i = 0; i < ferry_device_count(); i++) {
    ferry_device *d;
    ferry_device_info info;
    if (ferry_device_get(i, &d) != FERRY_OK || ferry_device_info_get(d, &info) != FERRY_OK) continue;
    if (strcmp(info.backend, backend) == 0 && info.backend_index == which) return d;
  }
  return NULL;
}

static ferry_buffer filled(ferry_device *dev, size_t n, unsigned char byte) {
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &b));
  CHECK_OK(ferry_fill(b, 0, n, &byte, 1));
  return b;
}

static void expect_bytes(ferry_buffer b, size_t n, unsigned char byte, const char *what) {
  unsigned char *h = malloc(n);
  CHECK_OK(ferry_read(b, 0, h, n));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += h[i] != byte;
  CHECK_MSG(bad == 0, "%s: %zu of %zu bytes are not 0x%02x", what, bad, n, (unsigned)byte);
  free(h);
}

/* ---- a staged copy between devices does not hold the other device --------------- */

/* A queue on `x` copies to a buffer of `y` through a ring, behind a wait that a
 * host part on another queue holds until this thread lets it go. The copy's
 * side on `y` is pushed at once, behind a gate; a synchronous read of another
 * buffer of `y` from this thread must not wait behind it (on `y`'s lane of the
 * synchronous calls it would never return: the gate rises only after this
 * thread lets the host part end). */
static void staged_sides(ferry_device *x, ferry_device *y, ferry_device *holder) {
  harness_context = "staged copy's side on another device";
  const size_t n = (size_t)1 << 20;
  ferry_queue q, held;
  CHECK_OK(ferry_queue_create(x, &q));
  CHECK_OK(ferry_queue_create(holder, &held));
  ferry_buffer src = filled(x, n, 0x5a), dst = filled(y, n, 0), other = filled(y, 4096, 0x21);
  ferry_buffer hb = filled(holder, 64, 0);
  ferry_event e = FERRY_NULL_EVENT;
  CHECK_OK(ferry_event_create(&e));
  unsigned char word[64] = {1};
  atomic_store(&fault.hold_writes, true);
  CHECK_OK(ferry_write_async(held, hb, 0, word, sizeof word));
  CHECK_OK(ferry_event_record(e, held));
  CHECK_OK(ferry_queue_wait_event(q, e));
  CHECK_OK(ferry_copy_async(q, src, 0, dst, 0, n));
  /* Returns while the copy waits. */
  expect_bytes(other, 4096, 0x21, "a synchronous read on the other device while the copy waits");
  CHECK_STATUS(ferry_queue_query(q), FERRY_NOT_READY);
  atomic_store(&fault.hold_writes, false);
  CHECK_OK(ferry_queue_synchronize(q));
  expect_bytes(dst, n, 0x5a, "the staged copy, once the wait ended");
  /* And back, on the same queue (the other device's side is the destination's). */
  CHECK_OK(ferry_fill(src, 0, n, (unsigned char[]){0}, 1));
  CHECK_OK(ferry_copy_async(q, dst, 0, src, 0, n));
  CHECK_OK(ferry_queue_synchronize(q));
  expect_bytes(src, n, 0x5a, "the staged copy back");
  CHECK_OK(ferry_event_destroy(e));
  CHECK_OK(ferry_queue_destroy(held));
  CHECK_OK(ferry_queue_destroy(q));
  CHECK_OK(ferry_free(src));
  CHECK_OK(ferry_free(dst));
  CHECK_OK(ferry_free(other));
  CHECK_OK(ferry_free(hb));
}

/* ---- a failure in the middle of a queue ------------------------------------------ */

static void failure_mid_queue(ferry_device *a) {
  harness_context = "failure mid-queue";
  const size_t n = 4096;
  ferry_queue q;
  CHECK_OK(ferry_queue_create(a, &q));
  ferry_buffer b1 = filled(a, n, 0), b2 = filled(a, n, 0), b3 = filled(a, n, 0);
  unsigned char ones[4096], twos[4096], threes[4096];
  memset(ones, 1, n);
  memset(twos, 2, n);
  memset(threes, 3, n);
  ferry_event after = FERRY_NULL_EVENT;
  CHECK_OK(ferry_event_create(&after));
  /* The second of three writes fails; the third, and the fill behind it, are not run. */
  fault_arm(OP_WRITE, FERRY_ERROR_BACKEND, 1);
  CHECK_OK(ferry_write_async(q, b1, 0, ones, n));
  CHECK_OK(ferry_write_async(q, b2, 0, twos, n));
  CHECK_OK(ferry_write_async(q, b3, 0, threes, n));
  unsigned char seven = 7;
  CHECK_OK(ferry_fill_async(q, b1, 0, n, &seven, 1));
  CHECK_OK(ferry_event_record(after, q));
  /* The event completes all the same, so other queues' waits end. */
  ferry_queue other;
  CHECK_OK(ferry_queue_create(a, &other));
  CHECK_OK(ferry_queue_wait_event(other, after));
  CHECK_OK(ferry_queue_synchronize(other));
  /* Until the report, submissions are refused and submit nothing. */
  CHECK_STATUS(ferry_write_async(q, b3, 0, ones, n), FERRY_ERROR_CANCELLED);
  CHECK_ERROR_HAS("ferry_queue_synchronize");
  CHECK_ERROR_HAS("FAULT_DRIVER_ERROR (-99)");
  CHECK_STATUS(ferry_event_record(after, q), FERRY_ERROR_CANCELLED);
  /* Reported once, naming the operation, the buffer and the driver's words, with what was not run. */
  CHECK_STATUS(ferry_queue_synchronize(q), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("ferry_queue_synchronize");
  CHECK_ERROR_HAS("ferry_write_async: bytes 0..4096 of buffer");
  CHECK_ERROR_HAS("4096 uint8 elements");
  CHECK_ERROR_HAS("FAULT_DRIVER_ERROR (-99) injected into write");
  CHECK_ERROR_HAS("3 operations submitted behind it were not run");
  CHECK_OK(ferry_queue_synchronize(q));
  CHECK_OK(ferry_queue_query(q));
  CHECK_OK(ferry_event_synchronize(after)); /* reported already */
  expect_bytes(b1, n, 1, "the write before the failure");
  expect_bytes(b2, n, 0, "the failed write's buffer");
  expect_bytes(b3, n, 0, "a write behind the failure");
  /* Once reported, the queue works again. */
  CHECK_OK(ferry_write_async(q, b3, 0, threes, n));
  CHECK_OK(ferry_queue_synchronize(q));
  expect_bytes(b3, n, 3, "after the report");
  CHECK_OK(ferry_queue_destroy(other));
  CHECK_OK(ferry_queue_destroy(q));
  CHECK_OK(ferry_event_destroy(after));
  CHECK_OK(ferry_free(b1));
  CHECK_OK(ferry_free(b2));
  CHECK_OK(ferry_free(b3));
}

/* Each reporter reports a failure once: query, an event recorded after it,
 * ferry_device_synchronize, ferry_queue_destroy. */
static void every_reporter(ferry_device *a) {
  harness_context = "reporters";
  const size_t n = 256;
  ferry_buffer b = filled(a, n, 0);
  unsigned char src[256];
  memset(src, 9, n);
  enum { QUERY, EVENT_SYNC, EVENT_QUERY, DEVICE_SYNC, DESTROY, REPORTERS };
  static const char *const names[REPORTERS] = {"ferry_queue_query", "ferry_event_synchronize", "ferry_event_query",
                                               "ferry_device_synchronize", "ferry_queue_destroy"};
  for (int r = 0; r < REPORTERS; r++) {
    ferry_queue q;
    ferry_event e;
    CHECK_OK(ferry_queue_create(a, &q));
    CHECK_OK(ferry_event_create(&e));
    fault_arm(OP_WRITE, FERRY_ERROR_OUT_OF_MEMORY, 0);
    /* The write waits until the event is recorded behind it: once it has failed,
     * a new submission would be refused (FERRY_ERROR_CANCELLED) until reported. */
    atomic_store(&fault.hold_writes, true);
    CHECK_OK(ferry_write_async(q, b, 0, src, n));
    CHECK_OK(ferry_event_record(e, q));
    atomic_store(&fault.hold_writes, false);
    ferry_status st = FERRY_OK;
    for (int tries = 0; tries < 2000; tries++) {
      switch (r) {
      case QUERY: st = ferry_queue_query(q); break;
      case EVENT_SYNC: st = ferry_event_synchronize(e); break;
      case EVENT_QUERY: st = ferry_event_query(e); break;
      case DEVICE_SYNC: st = ferry_device_synchronize(a); break;
      default: st = ferry_queue_destroy(q); break;
      }
      if (st != FERRY_NOT_READY) break;
      usleep(1000);
    }
    CHECK_MSG(st == FERRY_ERROR_OUT_OF_MEMORY, "%s returned %s, expected FERRY_ERROR_OUT_OF_MEMORY: %s", names[r],
              ferry_status_name(st), ferry_last_error());
    CHECK_ERROR_HAS(names[r]);
    CHECK_ERROR_HAS("injected into write");
    /* Once only. */
    if (r != DESTROY) {
      CHECK_OK(ferry_queue_synchronize(q));
      CHECK_OK(ferry_queue_destroy(q));
    } else {
      CHECK_STATUS(ferry_queue_destroy(q), FERRY_ERROR_STALE_HANDLE);
    }
    CHECK_OK(ferry_event_destroy(e));
  }
  expect_bytes(b, n, 0, "after failed writes");
  CHECK_OK(ferry_free(b));
}

/* A failure on the default queue: the synchronous calls on the device are
 * refused until it is reported. */
static void default_queue_failure(ferry_device *a) {
  harness_context = "default queue";
  ferry_queue dq;
  CHECK_OK(ferry_queue_default(a, &dq));
  ferry_buffer b = filled(a, 128, 5);
  unsigned char src[128], back[128];
  memset(src, 6, sizeof src);
  fault_arm(OP_WRITE, FERRY_ERROR_BACKEND, 0);
  CHECK_OK(ferry_write_async(dq, b, 0, src, sizeof src));
  unsigned char none = 0;
  ferry_status st;
  for (int i = 0; i < 2000 && (st = ferry_read(b, 0, back, sizeof back)) == FERRY_OK; i++)
    usleep(1000); /* until the queue's thread has run it */
  CHECK_STATUS(ferry_read(b, 0, back, sizeof back), FERRY_ERROR_CANCELLED);
  CHECK_ERROR_HAS("default queue");
  CHECK_STATUS(ferry_fill(b, 0, 1, &none, 1), FERRY_ERROR_CANCELLED);
  CHECK_STATUS(ferry_queue_synchronize(dq), FERRY_ERROR_BACKEND);
  CHECK_OK(ferry_read(b, 0, back, sizeof back));
  for (size_t i = 0; i < sizeof back; i++)
    CHECK(back[i] == 5);
  CHECK_OK(ferry_free(b));
}

/* A copy between the two fault devices whose DMA fails part way: reported, and
 * the destination's other bytes untouched. */
static void staged_failure(ferry_device *a, ferry_device *b) {
  harness_context = "staged failure";
  const size_t n = (size_t)9 << 20;
  ferry_queue q;
  CHECK_OK(ferry_queue_create(b, &q));
  ferry_buffer s = filled(a, n, 0x11), d = filled(b, n + 64, 0x22);
  fault.peer_unsupported = true;
  fault_arm(OP_DMA_WAIT, FERRY_ERROR_BACKEND, 3);
  CHECK_OK(ferry_copy_async(q, s, 0, d, 32, n));
  CHECK_STATUS(ferry_queue_synchronize(q), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("ferry_copy_async");
  CHECK_ERROR_HAS("injected into dma_wait");
  fault.peer_unsupported = false;
  unsigned char edge[32];
  CHECK_OK(ferry_read(d, 0, edge, 32));
  for (int i = 0; i < 32; i++)
    CHECK(edge[i] == 0x22);
  CHECK_OK(ferry_read(d, n + 32, edge, 32));
  for (int i = 0; i < 32; i++)
    CHECK(edge[i] == 0x22);
  /* The same copy works now. */
  CHECK_OK(ferry_copy_async(q, s, 0, d, 32, n));
  CHECK_OK(ferry_queue_synchronize(q));
  unsigned char *h = malloc(n);
  CHECK_OK(ferry_read(d, 32, h, n));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += h[i] != 0x11;
  CHECK(bad == 0);
  free(h);
  CHECK_OK(ferry_queue_destroy(q));
  CHECK_OK(ferry_free(s));
  CHECK_OK(ferry_free(d));
  CHECK(fault.bad_tickets == 0);
}

/* ---- shutdown, fork ---------------------------------------------------------------- */

static void shutdown_with_work_pending(void) {
  harness_context = "shutdown with work pending";
  CHECK_OK(ferry_init());
  ferry_device *dev = device_of("native", 0);
  CHECK(dev != NULL);
  if (!dev) return;
  const size_t n = (size_t)8 << 20;
  unsigned char *src = malloc(n), *back = calloc(1, n);
  fill_pattern(src, n, 3);
  ferry_queue q, q2;
  ferry_buffer b;
  ferry_event e;
  CHECK_OK(ferry_queue_create(dev, &q));
  CHECK_OK(ferry_queue_create(dev, &q2));
  CHECK_OK(ferry_event_create(&e));
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &b));
  for (int i = 0; i < 4; i++)
    CHECK_OK(ferry_write_async(q, b, 0, src, n));
  CHECK_OK(ferry_event_record(e, q));
  CHECK_OK(ferry_queue_wait_event(q2, e));
  CHECK_OK(ferry_read_async(q2, b, 0, back, n));
  CHECK_OK(ferry_free(b)); /* held by the queued work */
  ferry_shutdown();        /* waits for every queue */
  CHECK(find_pattern_mismatch(back, n, 3) == SIZE_MAX);
  /* Every handle of the session is stale now; a new session starts on the next call. */
  CHECK_STATUS(ferry_queue_synchronize(q), FERRY_ERROR_STALE_HANDLE);
  CHECK_STATUS(ferry_queue_destroy(q2), FERRY_ERROR_STALE_HANDLE);
  CHECK_STATUS(ferry_event_query(e), FERRY_ERROR_STALE_HANDLE);
  ferry_queue q3;
  CHECK_OK(ferry_device_get(0, &dev));
  CHECK_OK(ferry_queue_create(dev, &q3));
  CHECK(q3.id != q.id && q3.id != q2.id);
  CHECK_OK(ferry_queue_destroy(q3));
  free(src);
  free(back);
}

static void queues_in_a_forked_child(void) {
  harness_context = "fork";
  ferry_device *dev = device_of("native", 0);
  CHECK(dev != NULL);
  if (!dev) return;
  ferry_queue q;
  ferry_event e;
  CHECK_OK(ferry_queue_create(dev, &q));
  CHECK_OK(ferry_event_create(&e));
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    int bad = 0;
    unsigned char byte = 0;
    ferry_buffer none = {0x100000001ULL};
    bad += ferry_queue_synchronize(q) != FERRY_ERROR_BACKEND;
    bad += strstr(ferry_last_error(), "child forked") == NULL;
    bad += ferry_write_async(q, none, 0, &byte, 1) != FERRY_ERROR_BACKEND;
    bad += ferry_event_record(e, q) != FERRY_ERROR_BACKEND;
    bad += ferry_queue_create(dev, &q) != FERRY_ERROR_BACKEND;
    ferry_shutdown(); /* forgets the parent's session, queues included */
    ferry_device *d;
    ferry_queue q2;
    bad += ferry_device_get(0, &d) != FERRY_OK;
    bad += ferry_queue_create(d, &q2) != FERRY_OK;
    bad += ferry_queue_destroy(q2) != FERRY_OK;
    _exit(bad);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child: status %d", status);
  CHECK_OK(ferry_queue_synchronize(q));
  CHECK_OK(ferry_queue_destroy(q));
  CHECK_OK(ferry_event_destroy(e));
}

/* ---- many threads ------------------------------------------------------------------ */

typedef struct stress {
  ferry_device *dev;
  unsigned seed;
  ferry_event *shared; /* events other threads record and wait for */
  int failures;
} stress;

static unsigned next_rand(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return *s >> 8;
}

static void *stress_thread(void *arg) {
  stress *t = arg;
  const size_t n = 64 << 10;
  ferry_queue q;
  ferry_buffer b;
  if (ferry_queue_create(t->dev, &q) != FERRY_OK || ferry_alloc(t->dev, n, FERRY_UINT8, &b) != FERRY_OK) {
    t->failures++;
    return NULL;
  }
  unsigned char *src = malloc(n), *back = malloc(n);
  for (int round = 0; round < 200; round++) {
    unsigned r = next_rand(&t->seed);
    unsigned char byte = (unsigned char)r;
    memset(src, byte, n);
    memset(back, 0, n);
    if (ferry_write_async(q, b, 0, src, n) != FERRY_OK) t->failures++;
    if (r % 3 == 0 && ferry_event_record(t->shared[r % 4], q) != FERRY_OK) t->failures++;
    if (r % 5 == 0 && ferry_queue_wait_event(q, t->shared[(r >> 4) % 4]) != FERRY_OK) t->failures++;
    if (ferry_read_async(q, b, 0, back, n) != FERRY_OK) t->failures++;
    if (r % 7 == 0) {
      ferry_status st = ferry_queue_query(q);
      if (st != FERRY_OK && st != FERRY_NOT_READY) t->failures++;
    }
    if (ferry_queue_synchronize(q) != FERRY_OK || memcmp(src, back, n) != 0) t->failures++;
  }
  if (ferry_queue_destroy(q) != FERRY_OK || ferry_free(b) != FERRY_OK) t->failures++;
  free(src);
  free(back);
  return NULL;
}

static void many_threads(ferry_device *dev, const char *name) {
  harness_context = name;
  enum { THREADS = 6 };
  ferry_event shared[4];
  for (int i = 0; i < 4; i++)
    CHECK_OK(ferry_event_create(&shared[i]));
  pthread_t th[THREADS];
  stress jobs[THREADS];
  for (int i = 0; i < THREADS; i++) {
    jobs[i] = (stress){.dev = dev, .seed = 17u + (unsigned)i, .shared = shared};
    CHECK(pthread_create(&th[i], NULL, stress_thread, &jobs[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    CHECK_MSG(jobs[i].failures == 0, "%s: thread %d: %d failures", name, i, jobs[i].failures);
  }
  for (int i = 0; i < 4; i++)
    CHECK_OK(ferry_event_destroy(shared[i]));
}

int main(void) {
  if (ferry__register_backend(&fault_backend) != FERRY_OK) {
    fprintf(stderr, "FAIL: %s\n", ferry_last_error());
    return 1;
  }
  CHECK_OK(ferry_init());
  ferry_device *a = device_of("fault", 0), *b = device_of("fault", 1);
  CHECK(a && b);
  if (a && b) {
    failure_mid_queue(a);
    every_reporter(a);
    default_queue_failure(a);
    staged_failure(a, b);
    many_threads(a, "threads on fault device A");
  }
  ferry_device *native = device_of("native", 0);
  if (native) many_threads(native, "threads on native");
  /* Staged between PoCL and lavapipe (ctest sets FERRY_OPENCL_PIPELINE=1 and
   * FERRY_VULKAN_DEBUG=staging), both ways round. */
  ferry_device *cl = device_of("opencl", 0), *vk = device_of("vulkan", 0);
  if (a && cl && vk) {
    staged_sides(cl, vk, a);
    staged_sides(vk, cl, a);
  } else
    printf("skip staged_sides: needs an OpenCL and a Vulkan device\n");
  queues_in_a_forked_child();
  shutdown_with_work_pending();
  ferry_shutdown();
  return harness_finish("queues");
}
