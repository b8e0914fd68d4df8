/*
 * The fake CUDA driver's model of streams and events, tested on the fake
 * itself (not through ferry): the library named by argv[1] (or
 * FERRY_CUDA_LIBRARY) is dlopened and its functions looked up by the names of
 * cuda_api.h's table, as ferry does.
 *
 * Each case starts the driver with its own configuration (cuInit reads
 * FAKE_CUDA_* while no context is alive) and ends with every resource
 * released. Work is held back deterministically with cuStreamWaitValue32 on a
 * "gate" word that the test raises; timing is asserted only where it is the
 * point (FAKE_CUDA_DELAY_US, overlap of two streams, elapsed times), with
 * generous bounds. The fake's device addresses are host addresses: peek()
 * reads them directly, only where no queued operation can touch them.
 */
#include "fake_cuda.h"

#include "backends/cuda/cuda_api.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static ferry_cuda_api api;
static fake_cuda_inject_fn inject;
static fake_cuda_counts_fn counts_get;
static fake_cuda_make_sticky_fn make_sticky;

static _Atomic int failures; /* the threads case checks from several threads */

#define CHECK(cond)                                                                                                    \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      failures++;                                                                                                      \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                                                  \
    }                                                                                                                  \
  } while (0)

#define CHECK_CU(call, want)                                                                                           \
  do {                                                                                                                 \
    cu_result r_ = (call);                                                                                             \
    if (r_ != (cu_result)(want)) {                                                                                     \
      failures++;                                                                                                      \
      fprintf(stderr, "FAIL %s:%d: %s returned %d, not %d\n", __FILE__, __LINE__, #call, r_, (int)(want));             \
    }                                                                                                                  \
  } while (0)

#define OK(call) CHECK_CU(call, FCU_SUCCESS)

enum { UNKNOWN = FCU_ERROR_UNKNOWN, NOT_READY = FCU_ERROR_NOT_READY, INVALID = FCU_ERROR_INVALID_VALUE };

/* ---- helpers ------------------------------------------------------------------------------------- */

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void sleep_ms(long ms) {
  struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static void setenv_long(const char *name, long v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%ld", v);
  setenv(name, buf, 1);
}

static void *host_func_symbol; /* cuLaunchHostFunc (not in cuda_api.h: ferry does not call it) */

static cu_device dev[2];
static cu_context ctx[2];
static int ndev;

/* The driver with `devices` GPUs, device 0's context current. */
static void start(int devices, long delay_us, long jitter_us, bool no_wait_value) {
  setenv_long("FAKE_CUDA_DEVICES", devices);
  setenv_long("FAKE_CUDA_DELAY_US", delay_us);
  setenv_long("FAKE_CUDA_JITTER_US", jitter_us);
  if (no_wait_value)
    setenv("FAKE_CUDA_NO_WAIT_VALUE", "1", 1);
  else
    unsetenv("FAKE_CUDA_NO_WAIT_VALUE");
  OK(api.cuInit(0));
  ndev = devices;
  for (int i = 0; i < ndev; i++) {
    OK(api.cuDeviceGet(&dev[i], i));
    OK(api.cuDevicePrimaryCtxRetain(&ctx[i], dev[i]));
  }
  OK(api.cuCtxSetCurrent(ctx[0]));
}

static fake_cuda_counts counts(void) {
  fake_cuda_counts c;
  counts_get(&c);
  return c;
}

/* Every resource released, then the contexts. */
static void stop(void) {
  fake_cuda_counts c = counts();
  CHECK(c.streams == 0 && c.events == 0 && c.device_allocations == 0 && c.pinned_blocks == 0 &&
        c.registered_ranges == 0);
  OK(api.cuCtxSetCurrent(NULL));
  for (int i = 0; i < ndev; i++)
    OK(api.cuDevicePrimaryCtxRelease(dev[i]));
  CHECK(counts().contexts_retained == 0);
}

static void push(int d) { OK(api.cuCtxPushCurrent(ctx[d])); }
static void pop(void) {
  cu_context c;
  OK(api.cuCtxPopCurrent(&c));
}

static cu_stream stream(unsigned flags) {
  cu_stream s = NULL;
  OK(api.cuStreamCreate(&s, flags));
  return s;
}

static cu_event event(unsigned flags) {
  cu_event e = NULL;
  OK(api.cuEventCreate(&e, flags));
  return e;
}

static cu_deviceptr dalloc(size_t n) {
  cu_deviceptr p = 0;
  OK(api.cuMemAlloc(&p, n));
  return p;
}

/* The fake's device memory is host memory. */
static uint32_t peek32(cu_deviceptr p) {
  uint32_t v;
  memcpy(&v, (const void *)(uintptr_t)p, sizeof v);
  return v;
}

static void fill32(cu_deviceptr p, uint32_t v, size_t n) {
  OK(api.cuMemsetD32Async(p, v, n, NULL));
  OK(api.cuStreamSynchronize(NULL));
}

/* A word of mapped host memory that streams wait on (cuStreamWaitValue32). */
typedef struct gate {
  uint32_t *word;
  cu_deviceptr dptr;
  uint32_t level;
} gate;

static gate gate_new(void) {
  gate g = {0};
  void *p = NULL;
  OK(api.cuMemHostAlloc(&p, 64, FCU_MEMHOSTALLOC_DEVICEMAP));
  g.word = p;
  *g.word = 0;
  OK(api.cuMemHostGetDevicePointer(&g.dptr, p, 0));
  return g;
}

/* The later work of `s` waits for the next gate_open. */
static void gate_close(gate *g, cu_stream s) {
  OK(api.cuStreamWaitValue32(s, g->dptr, g->level + 1, FCU_STREAM_WAIT_VALUE_GEQ));
}

static void gate_open(gate *g) { __atomic_store_n(g->word, ++g->level, __ATOMIC_RELEASE); }

static void gate_free(gate *g) { OK(api.cuMemFreeHost(g->word)); }

typedef struct later {
  gate *g;
  long ms;
  pthread_t thread;
} later;

static void *open_later_main(void *arg) {
  later *l = arg;
  sleep_ms(l->ms);
  gate_open(l->g);
  return NULL;
}

/* Opens the gate from another thread after `ms`. */
static void open_later(later *l, gate *g, long ms) {
  l->g = g;
  l->ms = ms;
  CHECK(pthread_create(&l->thread, NULL, open_later_main, l) == 0);
}

static void joined(later *l) { pthread_join(l->thread, NULL); }

/* ---- cases -------------------------------------------------------------------------------------- */

/* Every function of cuda_api.h's table is there, and the attributes of the
 * stream memory operations say GEQ only. */
static void case_symbols_and_attributes(void) {
  start(1, 0, 0, false);
  int v = -1;
  OK(api.cuDeviceGetAttribute(&v, 122, dev[0])); /* CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS */
  CHECK(v == 0);
  v = -1;
  OK(api.cuDeviceGetAttribute(&v, 123, dev[0])); /* CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR */
  CHECK(v == 0);
  stop();
}

/* One stream runs its work in order, late and on another thread, whatever the
 * delays: a chain of copies where each reads what the one before wrote. */
static void case_in_order(void) {
  start(1, 200, 300, false);
  enum { SLOTS = 64, SETS = 40 };
  cu_stream s = stream(FCU_STREAM_NON_BLOCKING);
  cu_deviceptr slots = dalloc(SLOTS * 4), last = dalloc(4);
  fill32(slots, 0, SLOTS);
  uint32_t *pinned = NULL;
  OK(api.cuMemAllocHost((void **)&pinned, 4));
  *pinned = 0x1234;
  OK(api.cuMemcpyHtoDAsync(slots, pinned, 4, s));
  for (int i = 1; i < SLOTS; i++)
    OK(api.cuMemcpyDtoDAsync(slots + 4 * i, slots + 4 * (i - 1), 4, s));
  for (uint32_t v = 1; v <= SETS; v++)
    OK(api.cuMemsetD32Async(last, v, 1, s));
  cu_event done = event(FCU_EVENT_DISABLE_TIMING);
  OK(api.cuEventRecord(done, s));
  /* 100 operations of at least 200 us each: none can be complete yet. */
  CHECK_CU(api.cuStreamQuery(s), NOT_READY);
  CHECK_CU(api.cuEventQuery(done), NOT_READY);
  OK(api.cuStreamSynchronize(s));
  OK(api.cuStreamQuery(s));
  OK(api.cuEventQuery(done));
  int wrong = 0;
  for (int i = 0; i < SLOTS; i++)
    wrong += peek32(slots + 4 * i) != 0x1234;
  CHECK(wrong == 0);
  CHECK(peek32(last) == SETS);
  OK(api.cuEventDestroy(done));
  OK(api.cuStreamDestroy(s));
  OK(api.cuMemFree(slots));
  OK(api.cuMemFree(last));
  OK(api.cuMemFreeHost(pinned));
  stop();
}

/* Two non-blocking streams run side by side: one held at a gate does not
 * hold the other, and their delays overlap. */
static void case_overlap(void) {
  enum { OPS = 8, DELAY_MS = 40 };
  start(1, DELAY_MS * 1000, 0, false);
  cu_stream a = stream(FCU_STREAM_NON_BLOCKING), b = stream(FCU_STREAM_NON_BLOCKING);
  cu_deviceptr x = dalloc(8);
  gate g = gate_new();
  gate_close(&g, a);
  OK(api.cuMemsetD32Async(x, 1, 1, a));
  OK(api.cuMemsetD32Async(x + 4, 2, 1, b));
  OK(api.cuStreamSynchronize(b)); /* b runs while a waits */
  CHECK(peek32(x + 4) == 2);
  CHECK_CU(api.cuStreamQuery(a), NOT_READY);
  gate_open(&g);
  OK(api.cuStreamSynchronize(a));
  CHECK(peek32(x) == 1);
  double t0 = now_ms();
  for (int i = 0; i < OPS; i++) {
    OK(api.cuMemsetD32Async(x, (unsigned)i, 1, a));
    OK(api.cuMemsetD32Async(x + 4, (unsigned)i, 1, b));
  }
  OK(api.cuStreamSynchronize(a));
  OK(api.cuStreamSynchronize(b));
  double ms = now_ms() - t0;
  printf("  %d operations of %d ms on each of two streams: %.0f ms (one after the other: %d ms)\n", OPS, DELAY_MS, ms,
         2 * OPS * DELAY_MS);
  CHECK(ms >= OPS * DELAY_MS - 1);
  CHECK(ms < 2 * OPS * DELAY_MS - 2 * DELAY_MS); /* overlapped */
  OK(api.cuStreamDestroy(a));
  OK(api.cuStreamDestroy(b));
  OK(api.cuMemFree(x));
  gate_free(&g);
  stop();
}

/* FAKE_CUDA_CONNECTIONS: streams that share a hardware queue start their work
 * in the order it was queued, so a wait on one holds the later work of the
 * others on that queue; streams on another queue go on. */
static void case_connections(void) {
  setenv("FAKE_CUDA_CONNECTIONS", "2", 1);
  start(1, 0, 0, false);
  /* The legacy stream is on queue 0, then a on 1, b on 0, c on 1. */
  cu_stream a = stream(FCU_STREAM_NON_BLOCKING), b = stream(FCU_STREAM_NON_BLOCKING),
            c = stream(FCU_STREAM_NON_BLOCKING);
  cu_deviceptr x = dalloc(8);
  fill32(x, 0, 2);
  gate g = gate_new();
  gate_close(&g, a);
  OK(api.cuMemsetD32Async(x, 1, 1, c));     /* queued behind a's wait */
  OK(api.cuMemsetD32Async(x + 4, 2, 1, b)); /* another queue */
  OK(api.cuStreamSynchronize(b));
  CHECK(peek32(x + 4) == 2);
  sleep_ms(20);
  CHECK_CU(api.cuStreamQuery(c), NOT_READY);
  CHECK(peek32(x) == 0);
  gate_open(&g);
  OK(api.cuStreamSynchronize(c));
  CHECK(peek32(x) == 1);
  OK(api.cuStreamDestroy(a));
  OK(api.cuStreamDestroy(b));
  OK(api.cuStreamDestroy(c));
  OK(api.cuMemFree(x));
  gate_free(&g);
  stop();
  unsetenv("FAKE_CUDA_CONNECTIONS");
}

/* Blocking streams and the legacy stream wait for each other's earlier work;
 * non-blocking streams do not; the synchronous calls run on the legacy stream. */
static void case_legacy_ordering(void) {
  start(1, 0, 0, false);
  cu_stream blocking = stream(FCU_STREAM_DEFAULT), free_running = stream(FCU_STREAM_NON_BLOCKING);
  cu_deviceptr x = dalloc(16);
  fill32(x, 0, 4);
  gate g = gate_new();

  /* Legacy work after a held blocking stream waits for it, and lands after it. */
  gate_close(&g, blocking);
  OK(api.cuMemsetD32Async(x, 1, 1, blocking));
  OK(api.cuMemsetD32Async(x, 2, 1, NULL));
  sleep_ms(20);
  CHECK_CU(api.cuStreamQuery(NULL), NOT_READY);
  CHECK(peek32(x) == 0);
  /* A non-blocking stream is not held. */
  OK(api.cuMemsetD32Async(x + 4, 3, 1, free_running));
  OK(api.cuStreamSynchronize(free_running));
  CHECK(peek32(x + 4) == 3);
  gate_open(&g);
  OK(api.cuStreamSynchronize(NULL));
  CHECK(peek32(x) == 2);
  OK(api.cuStreamQuery(blocking));

  /* Blocking-stream work after held legacy work waits for it. */
  gate_close(&g, NULL);
  OK(api.cuMemsetD32Async(x + 8, 4, 1, blocking));
  OK(api.cuMemsetD32Async(x + 12, 5, 1, free_running));
  OK(api.cuStreamSynchronize(free_running));
  CHECK(peek32(x + 12) == 5);
  sleep_ms(20);
  CHECK_CU(api.cuStreamQuery(blocking), NOT_READY);
  CHECK(peek32(x + 8) == 0);
  gate_open(&g);
  OK(api.cuStreamSynchronize(blocking));
  CHECK(peek32(x + 8) == 4);

  /* A synchronous copy (the legacy stream) waits for a held blocking stream. */
  gate_close(&g, blocking);
  OK(api.cuMemsetD32Async(x, 6, 1, blocking));
  later l;
  open_later(&l, &g, 30);
  double t0 = now_ms();
  uint32_t got = 0;
  OK(api.cuMemcpyDtoH(&got, x, 4));
  CHECK(got == 6);            /* the held memset ran first */
  CHECK(now_ms() - t0 >= 10); /* (30 ms, less what the thread may have slept before t0) */
  OK(api.cuStreamQuery(blocking));
  joined(&l);

  /* cuCtxSynchronize waits for every stream, non-blocking ones too. */
  gate_close(&g, free_running);
  OK(api.cuMemsetD32Async(x + 4, 7, 1, free_running));
  open_later(&l, &g, 30);
  t0 = now_ms();
  OK(api.cuCtxSynchronize());
  CHECK(now_ms() - t0 >= 10);
  CHECK(peek32(x + 4) == 7);
  joined(&l);

  OK(api.cuStreamDestroy(blocking));
  OK(api.cuStreamDestroy(free_running));
  OK(api.cuMemFree(x));
  gate_free(&g);
  stop();
}

/* Events: query, synchronize, elapsed time, captures replaced by a new record. */
static void case_events(void) {
  enum { DELAY_MS = 20 };
  start(1, DELAY_MS * 1000, 0, false);
  cu_stream s = stream(FCU_STREAM_NON_BLOCKING), idle = stream(FCU_STREAM_NON_BLOCKING);
  cu_deviceptr x = dalloc(4);
  cu_event never = event(0), untimed = event(FCU_EVENT_DISABLE_TIMING), start_ev = event(0), stop_ev = event(0);
  float ms = -1;

  /* Never recorded: complete, and no time. */
  OK(api.cuEventQuery(never));
  OK(api.cuEventSynchronize(never));
  OK(api.cuEventRecord(start_ev, s));
  OK(api.cuEventSynchronize(start_ev));
  CHECK_CU(api.cuEventElapsedTime(&ms, start_ev, never), FCU_ERROR_INVALID_HANDLE);
  CHECK_CU(api.cuEventElapsedTime(&ms, never, start_ev), FCU_ERROR_INVALID_HANDLE);
  OK(api.cuEventRecord(untimed, s));
  OK(api.cuEventSynchronize(untimed));
  CHECK_CU(api.cuEventElapsedTime(&ms, start_ev, untimed), FCU_ERROR_INVALID_HANDLE);
  CHECK_CU(api.cuEventElapsedTime(NULL, start_ev, start_ev), INVALID);
  CHECK_CU(api.cuEventCreate(&never, 0x8), INVALID);
  CHECK_CU(api.cuEventCreate(&never, 0x4), INVALID); /* interprocess without DISABLE_TIMING */

  /* Three memsets between two records: the stop record completes four delays
   * after the start record. */
  OK(api.cuEventRecord(start_ev, s));
  for (int i = 0; i < 3; i++)
    OK(api.cuMemsetD32Async(x, (unsigned)i, 1, s));
  OK(api.cuEventRecord(stop_ev, s));
  CHECK_CU(api.cuEventQuery(stop_ev), NOT_READY);
  CHECK_CU(api.cuEventElapsedTime(&ms, start_ev, stop_ev), NOT_READY);
  OK(api.cuEventSynchronize(stop_ev));
  OK(api.cuEventQuery(start_ev));
  OK(api.cuEventElapsedTime(&ms, start_ev, stop_ev));
  printf("  elapsed between two records with 3 operations of %d ms and the record between: %.2f ms\n", DELAY_MS,
         (double)ms);
  CHECK(ms >= 4 * DELAY_MS - 0.01f && ms < 4 * DELAY_MS + 2000);
  float back = 0;
  OK(api.cuEventElapsedTime(&back, stop_ev, start_ev));
  CHECK(back == -ms);

  /* Recording again replaces the capture: a held record no longer counts. */
  gate g = gate_new();
  cu_event e = event(FCU_EVENT_DISABLE_TIMING);
  gate_close(&g, s);
  OK(api.cuEventRecord(e, s));
  CHECK_CU(api.cuEventQuery(e), NOT_READY);
  OK(api.cuEventRecord(e, idle));
  OK(api.cuStreamSynchronize(idle));
  OK(api.cuEventQuery(e));
  OK(api.cuEventSynchronize(e));
  gate_open(&g);
  OK(api.cuStreamSynchronize(s));

  OK(api.cuEventDestroy(e));
  OK(api.cuEventDestroy(never));
  OK(api.cuEventDestroy(untimed));
  OK(api.cuEventDestroy(start_ev));
  OK(api.cuEventDestroy(stop_ev));
  CHECK_CU(api.cuEventQuery(e), FCU_ERROR_INVALID_HANDLE); /* destroyed */
  OK(api.cuStreamDestroy(s));
  OK(api.cuStreamDestroy(idle));
  OK(api.cuMemFree(x));
  gate_free(&g);
  stop();
}

/* cuStreamWaitEvent: the capture as it stands at the call, from any context;
 * a never-recorded event means no wait. */
static void case_wait_event(void) {
  start(2, 100, 100, false);
  cu_stream a = stream(FCU_STREAM_NON_BLOCKING), b = stream(FCU_STREAM_NON_BLOCKING),
            c = stream(FCU_STREAM_NON_BLOCKING);
  cu_deviceptr x = dalloc(16);
  fill32(x, 0, 4);
  gate g = gate_new();
  cu_event e = event(FCU_EVENT_DISABLE_TIMING), fresh = event(FCU_EVENT_DISABLE_TIMING);

  gate_close(&g, a);
  OK(api.cuMemsetD32Async(x, 1, 1, a));
  OK(api.cuEventRecord(e, a));
  OK(api.cuStreamWaitEvent(b, e, 0));
  OK(api.cuMemsetD32Async(x + 4, 2, 1, b));
  /* A new capture (on an idle stream) does not release b's wait. */
  OK(api.cuEventRecord(e, c));
  OK(api.cuEventSynchronize(e));
  /* A never-recorded event: no wait. */
  OK(api.cuStreamWaitEvent(c, fresh, 0));
  OK(api.cuMemsetD32Async(x + 8, 3, 1, c));
  OK(api.cuStreamSynchronize(c));
  CHECK(peek32(x + 8) == 3);
  sleep_ms(20);
  CHECK_CU(api.cuStreamQuery(b), NOT_READY);
  CHECK(peek32(x + 4) == 0);
  CHECK_CU(api.cuStreamWaitEvent(b, e, 1), INVALID);
  gate_open(&g);
  OK(api.cuStreamSynchronize(b));
  CHECK(peek32(x) == 1 && peek32(x + 4) == 2);

  /* Across contexts: device 0's stream waits for an event of device 1, then
   * copies what device 1 wrote (peer copy on the stream). */
  push(1);
  cu_stream s1 = stream(FCU_STREAM_NON_BLOCKING);
  cu_deviceptr y = dalloc(4);
  cu_event e1 = event(FCU_EVENT_DISABLE_TIMING);
  gate_close(&g, s1);
  OK(api.cuMemsetD32Async(y, 0xC0DE, 1, s1));
  OK(api.cuEventRecord(e1, s1));
  CHECK_CU(api.cuEventRecord(e, s1), FCU_ERROR_INVALID_HANDLE); /* an event of device 0 */
  pop();
  OK(api.cuStreamWaitEvent(a, e1, 0));
  OK(api.cuMemcpyPeerAsync(x + 12, ctx[0], y, ctx[1], 4, a));
  sleep_ms(20);
  CHECK_CU(api.cuStreamQuery(a), NOT_READY);
  CHECK_CU(api.cuEventQuery(e1), NOT_READY);
  OK(api.cuStreamQuery(b)); /* idle */
  gate_open(&g);
  OK(api.cuStreamSynchronize(a));
  CHECK(peek32(x + 12) == 0xC0DE);
  OK(api.cuStreamSynchronize(s1)); /* a stream of another context: allowed without making it current */

  push(1);
  OK(api.cuEventDestroy(e1));
  OK(api.cuStreamDestroy(s1));
  OK(api.cuMemFree(y));
  pop();
  OK(api.cuEventDestroy(e));
  OK(api.cuEventDestroy(fresh));
  OK(api.cuStreamDestroy(a));
  OK(api.cuStreamDestroy(b));
  OK(api.cuStreamDestroy(c));
  OK(api.cuMemFree(x));
  gate_free(&g);
  stop();
}

/* cuStreamWaitValue32: what it accepts, GEQ across the wrap of 2^32, and
 * FAKE_CUDA_NO_WAIT_VALUE. */
static void case_wait_value(void) {
  start(1, 0, 0, false);
  cu_stream s = stream(FCU_STREAM_NON_BLOCKING);
  cu_deviceptr x = dalloc(4), mapped;
  fill32(x, 0, 1);

  /* Only a word of host memory mapped with DEVICEMAP, through the address
   * cuMemHostGetDevicePointer gave. */
  uint32_t pageable[2] = {0, 0};
  CHECK_CU(api.cuStreamWaitValue32(s, (cu_deviceptr)(uintptr_t)pageable, 0, FCU_STREAM_WAIT_VALUE_GEQ), INVALID);
  CHECK_CU(api.cuStreamWaitValue32(s, x, 0, FCU_STREAM_WAIT_VALUE_GEQ), INVALID); /* device memory */
  void *plain = NULL, *asked = NULL;
  OK(api.cuMemHostAlloc(&plain, 64, 0));
  OK(api.cuMemHostGetDevicePointer(&mapped, plain, 0));
  CHECK_CU(api.cuStreamWaitValue32(s, mapped, 0, FCU_STREAM_WAIT_VALUE_GEQ), INVALID); /* no DEVICEMAP */
  OK(api.cuMemHostAlloc(&asked, 64, FCU_MEMHOSTALLOC_DEVICEMAP));
  uint32_t *w = asked;
  *w = 0;
  CHECK_CU(api.cuStreamWaitValue32(s, (cu_deviceptr)(uintptr_t)asked, 0, FCU_STREAM_WAIT_VALUE_GEQ),
           INVALID); /* no cuMemHostGetDevicePointer */
  OK(api.cuMemHostGetDevicePointer(&mapped, asked, 0));
  CHECK_CU(api.cuStreamWaitValue32(s, mapped + 2, 0, FCU_STREAM_WAIT_VALUE_GEQ), INVALID); /* misaligned */
  CHECK_CU(api.cuStreamWaitValue32(s, mapped, 0, 1), INVALID);                             /* EQ */
  CHECK_CU(api.cuStreamWaitValue32(s, mapped, 0, 3), INVALID);                             /* NOR */
  OK(api.cuStreamWaitValue32(s, mapped, 0, FCU_STREAM_WAIT_VALUE_GEQ));
  OK(api.cuStreamSynchronize(s));
  /* Registered memory with DEVICEMAP. */
  uint32_t *reg = aligned_alloc(4096, 4096);
  reg[0] = 0;
  OK(api.cuMemHostRegister(reg, 4096, FCU_MEMHOSTREGISTER_DEVICEMAP));
  cu_deviceptr reg_d;
  OK(api.cuMemHostGetDevicePointer(&reg_d, reg, 0));
  OK(api.cuStreamWaitValue32(s, reg_d, 0, FCU_STREAM_WAIT_VALUE_GEQ));
  OK(api.cuStreamSynchronize(s));

  /* Later work waits until the word reaches the value. */
  OK(api.cuStreamWaitValue32(s, mapped, 3, FCU_STREAM_WAIT_VALUE_GEQ));
  OK(api.cuMemsetD32Async(x, 9, 1, s));
  sleep_ms(20);
  CHECK_CU(api.cuStreamQuery(s), NOT_READY);
  CHECK(peek32(x) == 0);
  __atomic_store_n(w, 2, __ATOMIC_RELEASE);
  sleep_ms(20);
  CHECK_CU(api.cuStreamQuery(s), NOT_READY);
  CHECK(peek32(x) == 0);
  __atomic_store_n(w, 3, __ATOMIC_RELEASE);
  OK(api.cuStreamSynchronize(s));
  CHECK(peek32(x) == 9);

  /* Cyclic: 0xfffffff0 is below 5 (5 - 0xfffffff0 = 21 in 32 bits), 6 after the wrap is above it. */
  __atomic_store_n(w, 0xfffffff0u, __ATOMIC_RELEASE);
  OK(api.cuStreamWaitValue32(s, mapped, 5, FCU_STREAM_WAIT_VALUE_GEQ));
  OK(api.cuMemsetD32Async(x, 10, 1, s));
  sleep_ms(20);
  CHECK_CU(api.cuStreamQuery(s), NOT_READY);
  __atomic_store_n(w, 0xffffffffu, __ATOMIC_RELEASE);
  sleep_ms(20);
  CHECK_CU(api.cuStreamQuery(s), NOT_READY);
  CHECK(peek32(x) == 9);
  __atomic_store_n(w, 6, __ATOMIC_RELEASE);
  OK(api.cuStreamSynchronize(s));
  CHECK(peek32(x) == 10);
  /* ...and 0x10 is already at or above 0xfffffff0 (0x20 past it). */
  __atomic_store_n(w, 0x10, __ATOMIC_RELEASE);
  OK(api.cuStreamWaitValue32(s, mapped, 0xfffffff0u, FCU_STREAM_WAIT_VALUE_GEQ));
  OK(api.cuMemsetD32Async(x, 11, 1, s));
  OK(api.cuStreamSynchronize(s));
  CHECK(peek32(x) == 11);
  /* 0x80000000 apart is "below". */
  __atomic_store_n(w, 0, __ATOMIC_RELEASE);
  OK(api.cuStreamWaitValue32(s, mapped, 0x80000000u, FCU_STREAM_WAIT_VALUE_GEQ));
  sleep_ms(10);
  CHECK_CU(api.cuStreamQuery(s), NOT_READY);
  __atomic_store_n(w, 0x80000000u, __ATOMIC_RELEASE);
  OK(api.cuStreamSynchronize(s));

  OK(api.cuMemHostUnregister(reg));
  free(reg);
  OK(api.cuMemFreeHost(plain));
  OK(api.cuMemFreeHost(asked));
  OK(api.cuStreamDestroy(s));
  OK(api.cuMemFree(x));
  stop();

  /* FAKE_CUDA_NO_WAIT_VALUE: refused, so that a fallback can be tested. */
  start(1, 0, 0, true);
  gate g = gate_new();
  CHECK_CU(api.cuStreamWaitValue32(NULL, g.dptr, 0, FCU_STREAM_WAIT_VALUE_GEQ), FCU_ERROR_NOT_SUPPORTED);
  gate_free(&g);
  stop();
}

/* The three memsets: patterns, bounds, alignment. */
static void case_memset(void) {
  start(1, 50, 50, false);
  cu_stream s = stream(FCU_STREAM_NON_BLOCKING);
  enum { BYTES = 64 };
  cu_deviceptr x = dalloc(BYTES);
  unsigned char got[BYTES], want[BYTES];
  OK(api.cuMemsetD8Async(x, 0x11, BYTES, s));
  OK(api.cuMemsetD8Async(x + 3, 0xAB, 13, s));
  OK(api.cuMemsetD16Async(x + 18, 0xBEEF, 7, s));
  OK(api.cuMemsetD32Async(x + 36, 0xDEADBEEFu, 5, s));
  OK(api.cuMemsetD8Async(x, 0x22, 0, s)); /* nothing */
  OK(api.cuStreamSynchronize(s));
  memset(want, 0x11, BYTES);
  memset(want + 3, 0xAB, 13);
  for (int i = 0; i < 7; i++) {
    uint16_t v = 0xBEEF;
    memcpy(want + 18 + 2 * i, &v, 2);
  }
  for (int i = 0; i < 5; i++) {
    uint32_t v = 0xDEADBEEFu;
    memcpy(want + 36 + 4 * i, &v, 4);
  }
  OK(api.cuMemcpyDtoH(got, x, BYTES));
  CHECK(memcmp(got, want, BYTES) == 0);
  CHECK_CU(api.cuMemsetD16Async(x + 1, 1, 1, s), INVALID);
  CHECK_CU(api.cuMemsetD32Async(x + 2, 1, 1, s), INVALID);
  CHECK_CU(api.cuMemsetD8Async(x, 1, BYTES + 1, s), INVALID);
  CHECK_CU(api.cuMemsetD32Async(x + 4, 1, BYTES / 4, s), INVALID);
  OK(api.cuStreamDestroy(s));
  CHECK_CU(api.cuMemsetD8Async(x, 1, 1, s), FCU_ERROR_INVALID_HANDLE); /* destroyed */
  OK(api.cuMemFree(x));
  stop();
}

/* Peer copies: on a stream (ordered by it alone), and the synchronous one
 * (after all the work already queued on the contexts). */
static void case_peer(void) {
  start(2, 200, 200, false);
  enum { N = 4096 };
  cu_stream s0 = stream(FCU_STREAM_NON_BLOCKING);
  cu_deviceptr d0 = dalloc(N);
  push(1);
  cu_deviceptr d1 = dalloc(N);
  cu_stream s1 = stream(FCU_STREAM_NON_BLOCKING);
  unsigned char *src = malloc(N), *back = malloc(N);
  for (int i = 0; i < N; i++)
    src[i] = (unsigned char)(i * 7 + 1);
  OK(api.cuMemcpyHtoD(d1, src, N));
  OK(api.cuStreamSynchronize(NULL));
  pop();
  OK(api.cuMemcpyPeerAsync(d0, ctx[0], d1, ctx[1], N, s0));
  OK(api.cuStreamSynchronize(s0));
  OK(api.cuMemcpyDtoH(back, d0, N));
  CHECK(memcmp(src, back, N) == 0);
  CHECK_CU(api.cuMemcpyPeerAsync(d0, ctx[0], d1, ctx[1], N + 1, s0), INVALID);
  CHECK_CU(api.cuMemcpyPeerAsync(d0, ctx[1], d1, ctx[0], N, s0), INVALID); /* contexts swapped */

  /* cuMemcpyPeer after held work of the source context (a non-blocking stream). */
  gate g = gate_new();
  push(1);
  gate_close(&g, s1);
  OK(api.cuMemsetD8Async(d1, 0x5A, N, s1));
  pop();
  OK(api.cuMemcpyPeer(d0, ctx[0], d1, ctx[1], N));
  sleep_ms(20);
  CHECK_CU(api.cuStreamQuery(NULL), NOT_READY);
  gate_open(&g);
  OK(api.cuCtxSynchronize());
  OK(api.cuMemcpyDtoH(back, d0, N));
  memset(src, 0x5A, N);
  CHECK(memcmp(src, back, N) == 0);

  OK(api.cuStreamDestroy(s0));
  OK(api.cuMemFree(d0));
  push(1);
  OK(api.cuStreamDestroy(s1));
  OK(api.cuMemFree(d1));
  pop();
  free(src);
  free(back);
  gate_free(&g);
  stop();
}

/* Host memory: pageable sources are staged at the call, pinned ones read when
 * the copy runs; copies into pageable memory are synchronous. */
static void case_host_memory(void) {
  enum { DELAY_MS = 20 };
  start(1, DELAY_MS * 1000, 0, false);
  cu_stream s = stream(FCU_STREAM_NON_BLOCKING);
  cu_deviceptr x = dalloc(8);
  gate g = gate_new();
  uint32_t *pinned = NULL, pageable = 0x11;
  OK(api.cuMemHostAlloc((void **)&pinned, 64, 0));
  pinned[0] = 0x33;
  gate_close(&g, s);
  OK(api.cuMemcpyHtoDAsync(x, &pageable, 4, s));
  OK(api.cuMemcpyHtoDAsync(x + 4, pinned, 4, s));
  pageable = 0x22;  /* the caller may reuse pageable memory at once */
  pinned[0] = 0x44; /* but not pinned memory: the copy reads it later */
  gate_open(&g);
  OK(api.cuStreamSynchronize(s));
  CHECK(peek32(x) == 0x11);
  CHECK(peek32(x + 4) == 0x44);

  /* Into pageable memory: complete on return, after the stream's earlier work. */
  OK(api.cuMemsetD32Async(x, 0x66, 1, s));
  uint32_t out = 0;
  double t0 = now_ms();
  OK(api.cuMemcpyDtoHAsync(&out, x, 4, s));
  CHECK(out == 0x66);
  CHECK(now_ms() - t0 >= 2 * DELAY_MS - 1);
  OK(api.cuStreamQuery(s));
  /* Into pinned memory: returns at once, lands later. */
  gate_close(&g, s);
  OK(api.cuMemcpyDtoHAsync(pinned + 1, x, 4, s));
  CHECK_CU(api.cuStreamQuery(s), NOT_READY);
  gate_open(&g);
  OK(api.cuStreamSynchronize(s));
  CHECK(pinned[1] == 0x66);

  OK(api.cuStreamDestroy(s));
  OK(api.cuMemFree(x));
  OK(api.cuMemFreeHost(pinned));
  gate_free(&g);
  stop();
}

/* cuStreamDestroy and cuEventDestroy with work pending: both return at once,
 * and the work still completes. */
static void case_destroy_pending(void) {
  start(1, 100, 100, false);
  cu_deviceptr x = dalloc(8);
  fill32(x, 0, 2);
  gate g = gate_new();
  cu_stream s = stream(FCU_STREAM_NON_BLOCKING), b = stream(FCU_STREAM_DEFAULT);
  cu_event done = event(FCU_EVENT_DISABLE_TIMING), dropped = event(0);
  gate_close(&g, s);
  OK(api.cuMemsetD32Async(x, 0x77, 1, s));
  OK(api.cuEventRecord(done, s));
  OK(api.cuEventRecord(dropped, s));
  OK(api.cuEventDestroy(dropped));
  long streams = counts().streams;
  OK(api.cuStreamDestroy(s));
  CHECK(counts().streams == streams - 1);
  CHECK_CU(api.cuStreamQuery(s), FCU_ERROR_INVALID_HANDLE);
  CHECK_CU(api.cuEventQuery(done), NOT_READY);
  gate_open(&g);
  OK(api.cuEventSynchronize(done));
  CHECK(peek32(x) == 0x77);

  /* A destroyed blocking stream's work still comes before later legacy work. */
  gate_close(&g, b);
  OK(api.cuMemsetD32Async(x + 4, 1, 1, b));
  OK(api.cuStreamDestroy(b));
  OK(api.cuMemsetD32Async(x + 4, 2, 1, NULL));
  CHECK_CU(api.cuStreamQuery(NULL), NOT_READY);
  gate_open(&g);
  OK(api.cuStreamSynchronize(NULL));
  CHECK(peek32(x + 4) == 2);

  /* Many streams destroyed with work queued (each on a word of its own: the
   * non-blocking ones are not ordered with each other), then freed memory. */
  cu_deviceptr words = dalloc(16 * 4);
  for (unsigned i = 0; i < 16; i++) {
    cu_stream t = stream(i % 2 ? FCU_STREAM_NON_BLOCKING : FCU_STREAM_DEFAULT);
    OK(api.cuMemsetD32Async(words + 4 * i, i, 1, t));
    OK(api.cuStreamDestroy(t));
  }
  OK(api.cuEventDestroy(done));
  OK(api.cuMemFree(x));
  OK(api.cuMemFree(words)); /* waits for the context's work, destroyed streams' too */
  gate_free(&g);
  stop();
}

/* fake_cuda_inject on the new calls, sticky errors, and a fault found when
 * queued work runs. */
static void case_failures(void) {
  start(2, 0, 0, false);
  cu_stream s = stream(FCU_STREAM_NON_BLOCKING);
  cu_event e = event(0), e2 = event(0);
  cu_deviceptr x = dalloc(64);
  gate g = gate_new();
  OK(api.cuEventRecord(e, s));
  OK(api.cuEventRecord(e2, s));
  OK(api.cuStreamSynchronize(s));
  float ms;
#define INJECTED(name, call)                                                                                           \
  do {                                                                                                                 \
    CHECK(inject(name, UNKNOWN, 1, 1) == 0);                                                                           \
    OK(call);                                                                                                          \
    CHECK_CU(call, UNKNOWN);                                                                                           \
    OK(call);                                                                                                          \
  } while (0)
  INJECTED("cuStreamQuery", api.cuStreamQuery(s));
  INJECTED("cuStreamWaitEvent", api.cuStreamWaitEvent(s, e, 0));
  INJECTED("cuEventQuery", api.cuEventQuery(e));
  INJECTED("cuEventElapsedTime_v2", api.cuEventElapsedTime(&ms, e, e2));
  INJECTED("cuMemsetD8Async", api.cuMemsetD8Async(x, 1, 64, s));
  INJECTED("cuMemsetD16Async", api.cuMemsetD16Async(x, 1, 32, s));
  INJECTED("cuMemsetD32Async", api.cuMemsetD32Async(x, 1, 16, s));
  INJECTED("cuMemcpyDtoDAsync_v2", api.cuMemcpyDtoDAsync(x, x + 32, 32, s));
  INJECTED("cuMemcpyPeerAsync", api.cuMemcpyPeerAsync(x, ctx[0], x + 32, ctx[0], 32, s));
  INJECTED("cuStreamWaitValue32_v2", api.cuStreamWaitValue32(s, g.dptr, 0, FCU_STREAM_WAIT_VALUE_GEQ));
  INJECTED("cuEventRecord", api.cuEventRecord(e, s));
  INJECTED("cuStreamSynchronize", api.cuStreamSynchronize(s));
  INJECTED("cuEventSynchronize", api.cuEventSynchronize(e));
  CHECK(inject("cuStreamCreate", FCU_ERROR_OUT_OF_MEMORY, 0, 1) == 0);
  cu_stream none = NULL;
  CHECK_CU(api.cuStreamCreate(&none, 0), FCU_ERROR_OUT_OF_MEMORY);
  CHECK(inject(NULL, 0, 0, 0) == 0);
#undef INJECTED

  /* A sticky error fails the new calls too. */
  CHECK(make_sticky(0, FCU_ERROR_LAUNCH_FAILED) == 0);
  CHECK_CU(api.cuMemsetD8Async(x, 1, 1, s), FCU_ERROR_LAUNCH_FAILED);
  CHECK_CU(api.cuStreamWaitEvent(s, e, 0), FCU_ERROR_LAUNCH_FAILED);
  CHECK_CU(api.cuStreamWaitValue32(s, g.dptr, 0, FCU_STREAM_WAIT_VALUE_GEQ), FCU_ERROR_LAUNCH_FAILED);
  CHECK_CU(api.cuStreamQuery(s), FCU_ERROR_LAUNCH_FAILED);
  CHECK_CU(api.cuStreamQuery(NULL), FCU_ERROR_LAUNCH_FAILED);
  CHECK_CU(api.cuEventQuery(e), FCU_ERROR_LAUNCH_FAILED);
  CHECK_CU(api.cuEventSynchronize(e), FCU_ERROR_LAUNCH_FAILED);
  CHECK_CU(api.cuStreamSynchronize(s), FCU_ERROR_LAUNCH_FAILED);
  CHECK(make_sticky(0, 0) == 0); /* the fake can recover; a GPU cannot */

  /* Device 1's memory freed while a peer copy from it waits on device 0's
   * stream: the copy finds it gone when it runs, and device 0's context is
   * lost, as after a fault. */
  push(1);
  cu_deviceptr y = dalloc(64);
  pop();
  gate_close(&g, s);
  OK(api.cuMemcpyPeerAsync(x, ctx[0], y, ctx[1], 64, s));
  push(1);
  OK(api.cuMemFree(y)); /* waits for device 1's work only */
  pop();
  long faults = counts().async_faults;
  gate_open(&g);
  CHECK_CU(api.cuStreamSynchronize(s), FCU_ERROR_ILLEGAL_ADDRESS);
  CHECK(counts().async_faults == faults + 1);
  CHECK_CU(api.cuMemsetD8Async(x, 1, 1, s), FCU_ERROR_ILLEGAL_ADDRESS);
  CHECK_CU(api.cuCtxSynchronize(), FCU_ERROR_ILLEGAL_ADDRESS);
  push(1);
  OK(api.cuCtxSynchronize()); /* device 1 is fine */
  pop();
  CHECK(make_sticky(0, 0) == 0);

  OK(api.cuEventDestroy(e));
  OK(api.cuEventDestroy(e2));
  OK(api.cuStreamDestroy(s));
  OK(api.cuMemFree(x));
  gate_free(&g);
  stop();
}

/* Several threads at once on shared streams and events (for TSan). */
enum { THREADS = 4, ROUNDS = 150 };
static cu_event shared_events[THREADS];
static cu_deviceptr shared_slots;

static void *hammer_main(void *arg) {
  int i = (int)(intptr_t)arg;
  OK(api.cuCtxSetCurrent(ctx[i % ndev]));
  cu_stream s = stream(i % 2 ? FCU_STREAM_NON_BLOCKING : FCU_STREAM_DEFAULT);
  cu_event mine = event(FCU_EVENT_DISABLE_TIMING);
  for (unsigned k = 0; k < ROUNDS; k++) {
    if (i % ndev == 0) OK(api.cuMemsetD32Async(shared_slots + 4 * (unsigned)i, k, 1, s));
    OK(api.cuEventRecord(mine, s));
    OK(api.cuEventRecord(shared_events[i], s));
    OK(api.cuStreamWaitEvent(s, shared_events[(i + 1) % THREADS], 0));
    cu_result q = api.cuEventQuery(shared_events[(i + 2) % THREADS]);
    CHECK(q == FCU_SUCCESS || q == NOT_READY);
    q = api.cuStreamQuery(s);
    CHECK(q == FCU_SUCCESS || q == NOT_READY);
    if (k % 25 == 0) {
      cu_stream t = stream(FCU_STREAM_NON_BLOCKING);
      OK(api.cuStreamWaitEvent(t, mine, 0));
      OK(api.cuEventRecord(mine, t));
      OK(api.cuStreamDestroy(t));
      OK(api.cuEventSynchronize(mine));
    }
  }
  OK(api.cuStreamSynchronize(s));
  OK(api.cuEventDestroy(mine));
  OK(api.cuStreamDestroy(s));
  OK(api.cuCtxSetCurrent(NULL));
  return NULL;
}

static void case_threads(void) {
  start(2, 20, 40, false);
  shared_slots = dalloc(4 * THREADS);
  fill32(shared_slots, 0, THREADS);
  for (int i = 0; i < THREADS; i++) {
    push(i % ndev);
    shared_events[i] = event(FCU_EVENT_DISABLE_TIMING);
    pop();
  }
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_create(&t[i], NULL, hammer_main, (void *)(intptr_t)i) == 0);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  OK(api.cuCtxSynchronize());
  for (int i = 0; i < THREADS; i += ndev)
    CHECK(peek32(shared_slots + 4 * (unsigned)i) == ROUNDS - 1);
  for (int i = 0; i < THREADS; i++)
    OK(api.cuEventDestroy(shared_events[i]));
  OK(api.cuMemFree(shared_slots));
  stop();
}

/* FAKE_CUDA_STRICT: a stream and an event left at the release abort the
 * process, naming them. Run first, in a child, before this process has
 * threads. */
static void case_strict_leak(void) {
  int pipefd[2];
  CHECK(pipe(pipefd) == 0);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    dup2(pipefd[1], 2);
    setenv("FAKE_CUDA_STRICT", "1", 1);
    start(1, 0, 0, false);
    cu_stream s = stream(FCU_STREAM_NON_BLOCKING);
    cu_event e = event(0);
    OK(api.cuEventRecord(e, s));
    OK(api.cuDevicePrimaryCtxRelease(dev[0]));
    _exit(0); /* not reached: the release aborts */
  }
  close(pipefd[1]);
  char out[4096] = "";
  size_t len = 0;
  ssize_t got;
  while (len < sizeof out - 1 && (got = read(pipefd[0], out + len, sizeof out - 1 - len)) > 0)
    len += (size_t)got;
  out[len] = '\0';
  close(pipefd[0]);
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
  CHECK(strstr(out, "released with a stream still live") != NULL);
  CHECK(strstr(out, "released with an event still live") != NULL);
  CHECK(strstr(out, "2 resources leaked") != NULL);
  if (failures) fprintf(stderr, "the child said:\n%s", out);
}

/* ---- main ------------------------------------------------------------------------------------- */

/* cuLaunchHostFunc: the function runs on the stream's thread in the stream's
 * order (after the gate and the memset before it, before the memset after it),
 * cuStreamSynchronize covers it, and a driver call from inside it is refused
 * as misuse. */
typedef struct host_call {
  cu_deviceptr x;
  uint32_t seen; /* the word at x when the function ran */
  _Atomic int calls;
  cu_result inner; /* what a driver call from inside returned */
  bool call_driver;
} host_call;

static void host_fn(void *arg) {
  host_call *h = arg;
  h->seen = peek32(h->x);
  if (h->call_driver) {
    cu_event e = NULL;
    h->inner = api.cuEventCreate(&e, 0);
  }
  atomic_fetch_add(&h->calls, 1);
}

static void case_host_func(void) {
  start(1, 200, 100, false);
  fake_cuda_launch_host_func_fn launch_host = NULL;
  *(void **)&launch_host = host_func_symbol;
  CHECK(launch_host != NULL);
  if (!launch_host) {
    stop();
    return;
  }
  cu_stream s = stream(FCU_STREAM_NON_BLOCKING);
  cu_deviceptr x = dalloc(64);
  fill32(x, 1, 16);
  gate g = gate_new();
  host_call h = {.x = x};
  gate_close(&g, s);
  OK(api.cuMemsetD32Async(x, 2, 16, s));
  CHECK_CU((cu_result)launch_host(s, host_fn, &h), FCU_SUCCESS);
  OK(api.cuMemsetD32Async(x, 3, 16, s));
  sleep_ms(20);
  CHECK(atomic_load(&h.calls) == 0); /* behind the gate */
  CHECK_CU(api.cuStreamQuery(s), NOT_READY);
  gate_open(&g);
  OK(api.cuStreamSynchronize(s));
  CHECK(atomic_load(&h.calls) == 1 && h.seen == 2 && peek32(x) == 3);
  /* On the legacy stream too; and a driver call from inside is refused. */
  long misuse_before = counts().misuse;
  h.call_driver = true;
  CHECK_CU((cu_result)launch_host(NULL, host_fn, &h), FCU_SUCCESS);
  OK(api.cuStreamSynchronize(NULL));
  CHECK(atomic_load(&h.calls) == 2 && h.inner == FCU_ERROR_NOT_PERMITTED);
  CHECK(counts().misuse == misuse_before + 1);
  CHECK_CU((cu_result)launch_host(s, NULL, &h), INVALID);
  OK(api.cuStreamDestroy(s));
  OK(api.cuMemFree(x));
  gate_free(&g);
  stop();
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *path = argc > 1 ? argv[1] : getenv("FERRY_CUDA_LIBRARY");
  if (!path) {
    fprintf(stderr, "usage: %s LIBCUDA (the fake driver)\n", argv[0]);
    return 2;
  }
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  int missing = 0;
#define LOOKUP(required, member, symbol, ret, params)                                                                  \
  if (!(*(void **)&api.member = dlsym(lib, symbol))) {                                                                 \
    fprintf(stderr, "FAIL: %s has no %s\n", path, symbol);                                                             \
    missing++;                                                                                                         \
  }
  FERRY_CUDA_FUNCTIONS(LOOKUP)
#undef LOOKUP
  host_func_symbol = dlsym(lib, "cuLaunchHostFunc");
  *(void **)&inject = dlsym(lib, "fake_cuda_inject");
  *(void **)&counts_get = dlsym(lib, "fake_cuda_counts_get");
  *(void **)&make_sticky = dlsym(lib, "fake_cuda_make_sticky");
  if (missing || !inject || !counts_get || !make_sticky) {
    fprintf(stderr, "FAIL: %s is not the fake CUDA driver with every function of cuda_api.h\n", path);
    return 1;
  }
  unsetenv("FAKE_CUDA_STRICT"); /* the cases make misuse on purpose; leaks are counted by stop() */

  static const struct {
    const char *name;
    void (*run)(void);
  } cases[] = {
      {"strict: streams and events left at release", case_strict_leak},
      {"symbols and stream memory-operation attributes", case_symbols_and_attributes},
      {"in order per stream (delay and jitter)", case_in_order},
      {"non-blocking streams overlap", case_overlap},
      {"streams sharing hardware queues (FAKE_CUDA_CONNECTIONS)", case_connections},
      {"blocking streams and the legacy stream", case_legacy_ordering},
      {"events: query, synchronize, elapsed, record again", case_events},
      {"cuStreamWaitEvent, across streams and contexts", case_wait_event},
      {"cuStreamWaitValue32 (GEQ, wrap, refusals)", case_wait_value},
      {"memset D8, D16, D32", case_memset},
      {"peer copies, on a stream and synchronous", case_peer},
      {"pageable and pinned host memory", case_host_memory},
      {"destroy with work pending", case_destroy_pending},
      {"injected, sticky and asynchronous failures", case_failures},
      {"threads at once", case_threads},
      {"cuLaunchHostFunc: in order, on the stream's thread, no driver calls inside", case_host_func},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int before = atomic_load(&failures);
    double t0 = now_ms();
    cases[i].run();
    printf("%-4s %s (%.0f ms)\n", failures == before ? "ok" : "FAIL", cases[i].name, now_ms() - t0);
  }
  fake_cuda_counts c = counts();
  printf("misuse the fake reported (on purpose): %ld\n", c.misuse);
  if (failures) {
    printf("%d checks failed\n", atomic_load(&failures));
    return 1;
  }
  printf("all cases passed\n");
  return 0;
}
