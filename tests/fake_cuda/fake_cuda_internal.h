/*
 * What the two files of the fake CUDA driver share: fake_cuda.c (devices,
 * contexts, memory, modules, the test-only entry points) and
 * fake_cuda_streams.c (streams, events and the calls that queue work on them).
 * Nothing here is exported from the library (FAKE_INTERNAL), only the CUDA
 * names and fake_cuda_* are (FAKE_API).
 */
#ifndef FERRY_FAKE_CUDA_INTERNAL_H
#define FERRY_FAKE_CUDA_INTERNAL_H

#include "fake_cuda.h"

#include "backends/cuda/cuda_api.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define FAKE_API        __attribute__((visibility("default")))
#define FAKE_INTERNAL   __attribute__((visibility("hidden")))
#define MAX_DEVICES     16
#define MAX_CONNECTIONS 32

#define FAKE_ERROR_CONTEXT_IS_DESTROYED 709

/* ---- configuration (read at cuInit) ---- */

typedef struct fake_config {
  int devices;
  unsigned long long mem;
  bool peer;
  int device_base;
  int init_error;
  long delay_us, jitter_us;
  int connections; /* FAKE_CUDA_CONNECTIONS: 0 = a hardware queue per stream */
  bool kernels, host_misalign, no_sync_memops, no_wait_value, strict;
} fake_config;

FAKE_INTERNAL extern fake_config cfg;
FAKE_INTERNAL extern _Atomic bool initialized;

/* ---- bookkeeping ---- */

/* Guards counts, injections and the memory regions; taken last (never held
 * while taking the queue lock or the memory lock of fake_cuda_streams.c). */
FAKE_INTERNAL extern pthread_mutex_t lock;
FAKE_INTERNAL extern fake_cuda_counts counts;

/* Counts a refused call; prints it under FAKE_CUDA_STRICT. Takes `lock`. */
FAKE_INTERNAL void misuse(const char *function, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A result injected for this call (fake_cuda_inject), or 0. */
FAKE_INTERNAL cu_result injected(const char *function);

#define INJECT(name)                                                                                                   \
  do {                                                                                                                 \
    cu_result inj_ = injected(name);                                                                                   \
    if (inj_) return inj_;                                                                                             \
  } while (0)

FAKE_INTERNAL void sleep_us(long us);

/* ---- contexts ---- */

typedef struct fake_stream fake_stream; /* fake_cuda_streams.c */

typedef struct fake_ctx {
  int ordinal;
  _Atomic int refs;
  _Atomic cu_result sticky;
  bool peer_enabled[MAX_DEVICES];
  unsigned long long used; /* bytes of device memory */
  /* Under the queue lock of fake_cuda_streams.c: the legacy stream first, then
   * every stream made by cuStreamCreate that has not finished its work. */
  fake_stream *streams;
  bool dying; /* being released: waits on host memory give up */
  /* FAKE_CUDA_CONNECTIONS: the streams' shared hardware queues (under the
   * queue lock): operations queued on each, and those it has let start. */
  unsigned next_connection;
  unsigned long long conn_queued[MAX_CONNECTIONS], conn_started[MAX_CONNECTIONS];
  _Atomic bool running;
} fake_ctx;

/* The current context, or an error: not initialised, none current, destroyed,
 * sticky. *out is NULL on error. */
/* Set on a stream's thread while it runs a host function (cuLaunchHostFunc): every
 * call that needs a context then is misuse, as CUDA forbids it. */
FAKE_INTERNAL extern _Thread_local bool fake_in_host_fn;
FAKE_INTERNAL cu_result need_ctx(const char *function, fake_ctx **out);
/* A CUcontext argument, or NULL when it is not one of ours. */
FAKE_INTERNAL fake_ctx *as_ctx(cu_context ctx);
/* Every context with a running queue: fake_drain_ctx on each. */
FAKE_INTERNAL void drain_all(void);

/* ---- memory regions ---- */

typedef enum region_kind { R_DEVICE, R_PINNED, R_REGISTERED } region_kind;

typedef struct region {
  region_kind kind;
  uintptr_t start;
  size_t size;
  void *base; /* what to free */
  fake_ctx *ctx;
  bool sync_memops;
  bool devicemap;      /* pinned or registered with DEVICEMAP */
  bool device_pointer; /* cuMemHostGetDevicePointer has given its device address */
} region;

/* With `lock` held: the region holding [p, p + n), or NULL. */
FAKE_INTERNAL region *find_region(uintptr_t p, size_t n);

/* Kinds of pointer a copy accepts on each side. */
enum { SIDE_HOST = 1, SIDE_DEVICE = 2 };

/* Checks one side of a copy. Device side: memory of the context `c` (or mapped
 * host memory). Host side: anything but device memory. Sets *pinned when the
 * host range is page-locked, *memops when a device range has SYNC_MEMOPS. */
FAKE_INTERNAL cu_result check_side(const char *function, fake_ctx *c, uintptr_t p, size_t n, int side, bool *pinned,
                                   bool *memops);

/* ---- the queues (fake_cuda_streams.c) ---- */

/* Starts a context's legacy stream; false when its thread cannot start. */
FAKE_INTERNAL bool fake_streams_start(fake_ctx *c);
/* Ends a context's queues at its release: abandons waits on host memory,
 * waits for the rest, stops the threads, and frees the streams and events the
 * program left (reported under FAKE_CUDA_STRICT). Returns how many it left. */
FAKE_INTERNAL long fake_streams_stop(fake_ctx *c);
/* Once no context is alive: frees the recycled stream and event handles. */
FAKE_INTERNAL void fake_streams_release_handles(void);
/* Waits for the work queued so far on every stream of `c`, the destroyed
 * streams that have not finished theirs included. */
FAKE_INTERNAL void fake_drain_ctx(fake_ctx *c);
/* Freeing memory excludes the queues' threads from touching it meanwhile:
 * an operation checks its memory and runs under the shared side. */
FAKE_INTERNAL void fake_memory_lock(void);
FAKE_INTERNAL void fake_memory_unlock(void);

/* Queues the one kernel the fake runs on `stream` (checked against `c`):
 * data[i] += 1 for the threads i < count of grid x block, which touch `bytes`
 * bytes. With `fault`, the kernel makes the context sticky
 * (CUDA_ERROR_ILLEGAL_ADDRESS) when it runs, instead. */
FAKE_INTERNAL cu_result fake_launch_increment(const char *function, fake_ctx *c, cu_stream stream, int32_t *data,
                                              unsigned count, unsigned grid, unsigned block, size_t bytes, bool fault);

#endif
