/*
 * The fake CUDA driver's streams and events, and the calls that queue work on
 * them (copies, memsets, kernels, event records, waits); fake_cuda.c has the
 * rest of the driver. fake_cuda.h documents the behaviour for the tests.
 *
 * Every stream, and the legacy (NULL) stream of each primary context, is a FIFO
 * of operations worked in order by a thread of its own. An operation runs once
 * the one before it on its stream has completed and its dependencies are met:
 *  - ordering with the legacy stream: an operation on the legacy stream
 *    depends on the work queued before it on every blocking stream of its
 *    context, and an operation on a blocking stream on the work queued before
 *    it on the legacy stream (non-blocking streams have neither);
 *  - cuStreamWaitEvent: a wait operation on the event's capture, a "marker"
 *    that the cuEventRecord operation completes when it runs;
 *  - cuStreamWaitValue32: a wait operation that polls a word of host memory;
 *  - cuMemcpyPeer: all the work queued before it on the three contexts.
 * Copies, memsets, kernels and records wait FAKE_CUDA_DELAY_US (plus up to
 * FAKE_CUDA_JITTER_US) before they run; waits do not. A context with a sticky
 * error runs nothing more: its queued work completes at once, undone.
 *
 * Locks, always taken in this order: `memory` (fake_memory_lock: frees
 * exclude the threads' operations), `lock` (fake_cuda.c: regions, counts),
 * `qlock` (here: every queue, stream, event and marker). Nothing is reported
 * with misuse() while qlock is held, since that takes `lock`.
 */
#include "fake_cuda_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STREAM_MAGIC 0x5354524dU
#define EVENT_MAGIC  0x45564e54U

#define FAKE_STREAM_LEGACY     ((cu_stream)(uintptr_t)1) /* CU_STREAM_LEGACY */
#define FAKE_STREAM_PER_THREAD ((cu_stream)(uintptr_t)2) /* CU_STREAM_PER_THREAD: taken as the legacy stream */

#define FAKE_EVENT_BLOCKING_SYNC 0x1u
#define FAKE_EVENT_INTERPROCESS  0x4u

/* How often a stream looks at the word of a cuStreamWaitValue32: from the
 * first interval, doubling to the last while the word stays low. */
#define POLL_FIRST_US 5
#define POLL_LAST_US  1000

/* ---- types -------------------------------------------------------------------------------------- */

/* One cuEventRecord: complete once the record has run on its stream. */
typedef struct marker {
  int refs; /* the event while this is its capture, the record operation, waits */
  bool done;
  long long ns; /* CLOCK_MONOTONIC when the record ran */
} marker;

typedef struct dep {
  fake_stream *s;
  unsigned long long seq; /* met once s has completed its operation number seq */
} dep;

typedef enum op_kind { OP_COPY, OP_MEMSET, OP_KERNEL, OP_RECORD, OP_WAIT, OP_WAIT_VALUE, OP_HOST_FUNC } op_kind;

typedef struct op {
  struct op *next;
  op_kind kind;
  const char *function; /* the call that queued it, for reports */
  unsigned long long seq;
  unsigned long long conn_seq; /* its place on its stream's connection (FAKE_CUDA_CONNECTIONS) */
  struct {
    uintptr_t p;
    size_t n;
  } live[2]; /* memory the operation touches, checked when it runs */
  int nlive;
  /* OP_COPY, OP_MEMSET */
  void *dst;
  const void *src;
  size_t n;    /* bytes (OP_MEMSET: elements) */
  void *owned; /* freed after the operation (a pageable copy's staging) */
  unsigned elem;
  uint32_t value; /* OP_MEMSET: the pattern; OP_WAIT_VALUE: the value waited for */
  /* OP_KERNEL */
  int32_t *data;
  unsigned count, grid, block;
  bool fault;
  /* OP_WAIT_VALUE */
  const uint32_t *word;
  /* OP_HOST_FUNC */
  fake_cuda_host_fn host_fn;
  void *user_data;
  /* OP_RECORD: completed by it; OP_WAIT: waited for (or NULL) */
  marker *mark;
  int ndeps;
  dep *deps;
} op;

struct fake_stream {
  fake_ctx *ctx;
  struct cu_stream_st *handle; /* NULL for the legacy stream, and once destroyed */
  bool legacy, blocking;
  bool destroyed; /* by cuStreamDestroy: the thread ends once the queue is empty */
  bool stop;      /* the context is released */
  bool exited, joined, orphaned;
  bool listed;    /* in `blocked` */
  int connection; /* the hardware queue it shares (FAKE_CUDA_CONNECTIONS), or -1 */
  int refs;       /* deps and host waits that name it */
  op *head, *tail;
  unsigned long long submitted, completed;
  uint64_t rng; /* the jitter's, used by the stream's thread only */
  pthread_cond_t wake;
  pthread_t thread;
  fake_stream *next; /* the context's streams */
  fake_stream *next_blocked;
};

struct cu_stream_st {
  unsigned magic;
  fake_stream *s;
  struct cu_stream_st *next_free;
};

struct cu_event_st {
  unsigned magic;
  fake_ctx *ctx;
  unsigned flags;
  marker *capture;                 /* the last record; NULL before the first */
  struct cu_event_st *prev, *next; /* live_events, or free_events (next) */
};

/* ---- state ------------------------------------------------------------------------------------------ */

static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t progress = PTHREAD_COND_INITIALIZER; /* an operation completed, a thread ended */
static pthread_rwlock_t memory = PTHREAD_RWLOCK_INITIALIZER;

/* Handles are recycled, not freed, while a context is alive: a call on a
 * destroyed handle reads its magic, not freed memory. */
static struct cu_stream_st *free_stream_handles;
static struct cu_event_st *live_events, *free_events;
/* Streams whose thread waits for another stream or for an event. */
static fake_stream *blocked;
static _Atomic uint64_t seeds;

FAKE_INTERNAL void fake_memory_lock(void) { pthread_rwlock_wrlock(&memory); }
FAKE_INTERNAL void fake_memory_unlock(void) { pthread_rwlock_unlock(&memory); }

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static uint64_t next_random(uint64_t *state) { /* xorshift64* */
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545F4914F6CDD1DULL;
}

/* ---- with qlock held ------------------------------------------------------------------------------- */

static void marker_unref(marker *m) {
  if (--m->refs == 0) free(m);
}

static void stream_free(fake_stream *s) {
  pthread_cond_destroy(&s->wake);
  free(s);
}

static void stream_unref(fake_stream *s) {
  if (--s->refs == 0 && s->orphaned) stream_free(s);
}

static void unlist(fake_stream *s) {
  for (fake_stream **p = &blocked; *p; p = &(*p)->next_blocked)
    if (*p == s) {
      *p = s->next_blocked;
      break;
    }
  s->listed = false;
}

/* Something completed: host waits look again, and so do the streams waiting
 * for another stream or an event. */
static void notify(void) {
  pthread_cond_broadcast(&progress);
  for (fake_stream *b = blocked; b; b = b->next_blocked) {
    b->listed = false;
    pthread_cond_signal(&b->wake);
  }
  blocked = NULL;
}

static bool pending(const fake_stream *s) { return s->completed < s->submitted; }

/* Joins the threads of destroyed streams that have ended, and frees those
 * nothing names any more. */
static void reap(fake_ctx *c) {
  for (fake_stream **p = &c->streams; *p;) {
    fake_stream *t = *p;
    if (t->exited && !t->joined) {
      pthread_join(t->thread, NULL); /* it has nothing left to do but return */
      t->joined = true;
    }
    if (t->joined && t->refs == 0) {
      *p = t->next;
      stream_free(t);
      continue;
    }
    p = &t->next;
  }
}

static bool word_reached(const op *o) {
  uint32_t w = __atomic_load_n(o->word, __ATOMIC_ACQUIRE);
  return (int32_t)(w - o->value) >= 0; /* CU_STREAM_WAIT_VALUE_GEQ: cyclic */
}

static bool deps_met(const op *o) {
  for (int i = 0; i < o->ndeps; i++)
    if (o->deps[i].s->completed < o->deps[i].seq) return false;
  return true;
}

/* The stream argument of a call with context `c` current: NULL, or an error
 * with the reason in `why` (to report once qlock is released). */
static fake_stream *resolve(fake_ctx *c, cu_stream h, char *why, size_t size, cu_result *r) {
  *r = FCU_SUCCESS;
  if (h == NULL || h == FAKE_STREAM_LEGACY || h == FAKE_STREAM_PER_THREAD) return c->streams;
  if (h->magic != STREAM_MAGIC) {
    snprintf(why, size, "not a live stream");
    *r = FCU_ERROR_INVALID_HANDLE;
    return NULL;
  }
  if (h->s->ctx != c) {
    snprintf(why, size, "stream of device %d used while device %d's context is current", h->s->ctx->ordinal,
             c->ordinal);
    *r = FCU_ERROR_INVALID_HANDLE;
    return NULL;
  }
  return h->s;
}

static bool ordered_with(const fake_stream *s, const fake_stream *t) {
  return (s->legacy && t->blocking) || (s->blocking && t->legacy);
}

static size_t stream_count(const fake_ctx *c) {
  size_t n = 0;
  for (const fake_stream *t = c ? c->streams : NULL; t; t = t->next)
    n++;
  return n;
}

static void add_dep(op *o, fake_stream *t, unsigned long long seq) {
  t->refs++;
  o->deps[o->ndeps++] = (dep){t, seq};
}

/* Links `o` at the end of `s` with its dependencies: the legacy-stream order,
 * all the work of the contexts `after`, and `extra`. False when out of memory
 * (o is then not queued). */
static bool queue(fake_stream *s, op *o, fake_ctx *const *after, int nafter, const dep *extra) {
  size_t cap = stream_count(s->ctx) + (extra ? 1 : 0);
  for (int i = 0; i < nafter; i++)
    cap += stream_count(after[i]);
  o->next = NULL;
  o->ndeps = 0;
  o->deps = NULL;
  if (cap > 0 && !(o->deps = malloc(cap * sizeof *o->deps))) return false;
  for (fake_stream *t = s->ctx->streams; t; t = t->next)
    if (t != s && ordered_with(s, t) && pending(t)) add_dep(o, t, t->submitted);
  for (int i = 0; i < nafter; i++)
    for (fake_stream *t = after[i]->streams; t; t = t->next)
      if (t != s && pending(t)) add_dep(o, t, t->submitted);
  if (extra) add_dep(o, extra->s, extra->seq);
  o->seq = ++s->submitted;
  if (s->connection >= 0) o->conn_seq = ++s->ctx->conn_queued[s->connection];
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  pthread_cond_signal(&s->wake);
  return true;
}

/* Waits for the work queued so far: on `s` alone, or on every stream of `c`
 * (all), or on the legacy stream of `c` and the blocking streams (a
 * synchronisation of the legacy stream waits for them as its work does). */
typedef enum scope { SCOPE_STREAM, SCOPE_LEGACY, SCOPE_CONTEXT } scope;

static void wait_locked(fake_ctx *c, fake_stream *s, scope sc) {
  dep local[32], *w = local;
  size_t n = 0, cap = sc == SCOPE_STREAM ? 1 : stream_count(c);
  if (cap > sizeof local / sizeof local[0] && !(w = malloc(cap * sizeof *w))) {
    fprintf(stderr, "fake_cuda: out of memory while waiting for a context's streams\n");
    abort();
  }
  if (sc == SCOPE_STREAM) {
    w[n++] = (dep){s, s->submitted};
  } else {
    for (fake_stream *t = c->streams; t; t = t->next)
      if (sc == SCOPE_CONTEXT || t->legacy || t->blocking) w[n++] = (dep){t, t->submitted};
  }
  for (size_t i = 0; i < n; i++)
    w[i].s->refs++; /* kept while waiting: a destroyed stream may end meanwhile */
  for (size_t i = 0; i < n; i++)
    while (w[i].s->completed < w[i].seq)
      pthread_cond_wait(&progress, &qlock);
  for (size_t i = 0; i < n; i++)
    stream_unref(w[i].s);
  if (w != local) free(w);
}

/* ---- the streams' threads ------------------------------------------------------------------------ */

static void lose_context(fake_ctx *c, const op *o, int gone) {
  cu_result none = FCU_SUCCESS;
  atomic_compare_exchange_strong(&c->sticky, &none, FCU_ERROR_ILLEGAL_ADDRESS);
  pthread_mutex_lock(&lock);
  counts.async_faults++;
  pthread_mutex_unlock(&lock);
  misuse(o->function,
         "queued work found memory at 0x%llx (%zu bytes) gone when it ran on device %d: the context is lost "
         "(CUDA_ERROR_ILLEGAL_ADDRESS)",
         (unsigned long long)o->live[gone].p, o->live[gone].n, c->ordinal);
}

static void do_memset(const op *o) {
  unsigned char *d = o->dst;
  if (o->elem == 1) {
    memset(d, (int)(o->value & 0xff), o->n);
  } else if (o->elem == 2) {
    uint16_t v = (uint16_t)o->value;
    for (size_t i = 0; i < o->n; i++)
      memcpy(d + 2 * i, &v, 2);
  } else {
    uint32_t v = o->value;
    for (size_t i = 0; i < o->n; i++)
      memcpy(d + 4 * i, &v, 4);
  }
}

/* Runs `o` (without qlock): waits the delay, checks its memory, does it. */
static void run(fake_stream *s, op *o) {
  fake_ctx *c = s->ctx;
  if (c->sticky) return; /* a lost context runs nothing */
  if (o->kind == OP_WAIT) return;
  if (o->kind == OP_WAIT_VALUE) {
    if (!word_reached(o))
      misuse(o->function,
             "device %d's context released while a stream waits for the word at %p to reach 0x%x: the "
             "wait is abandoned",
             c->ordinal, (const void *)o->word, o->value);
    return;
  }
  long us = cfg.delay_us;
  if (cfg.jitter_us > 0) us += (long)(next_random(&s->rng) % (uint64_t)(cfg.jitter_us + 1));
  sleep_us(us);
  if (o->kind == OP_RECORD) return; /* completed, with its time, by finish() */
  if (o->kind == OP_HOST_FUNC) {
    /* On the stream's thread, in the stream's order; a host function must not
     * call the driver (CUDA's rule): fake_in_host_fn makes every call misuse. */
    fake_in_host_fn = true;
    o->host_fn(o->user_data);
    fake_in_host_fn = false;
    return;
  }
  pthread_rwlock_rdlock(&memory);
  int gone = -1;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < o->nlive; i++)
    if (!find_region(o->live[i].p, o->live[i].n)) gone = i;
  pthread_mutex_unlock(&lock);
  if (gone >= 0) {
    lose_context(c, o, gone);
  } else if (o->kind == OP_COPY) {
    memmove(o->dst, o->src, o->n);
  } else if (o->kind == OP_MEMSET) {
    do_memset(o);
  } else if (o->fault) {
    c->sticky = FCU_ERROR_ILLEGAL_ADDRESS; /* the kernel read out of bounds */
  } else {
    for (unsigned b = 0; b < o->grid; b++)
      for (unsigned t = 0; t < o->block; t++) {
        unsigned long long i = (unsigned long long)b * o->block + t;
        if (i < o->count) o->data[i] += 1;
      }
  }
  pthread_rwlock_unlock(&memory);
}

/* With qlock held: `o`, the head of `s`, has run. */
static void finish(fake_stream *s, op *o) {
  if (o->kind == OP_RECORD) {
    o->mark->ns = now_ns();
    o->mark->done = true;
  }
  if (o->mark) marker_unref(o->mark);
  for (int i = 0; i < o->ndeps; i++)
    stream_unref(o->deps[i].s);
  free(o->deps);
  free(o->owned);
  s->head = o->next;
  if (!s->head) s->tail = NULL;
  s->completed = o->seq;
  free(o);
  notify();
}

static void *stream_main(void *arg) {
  fake_stream *s = arg;
  long poll_us = POLL_FIRST_US;
  pthread_mutex_lock(&qlock);
  for (;;) {
    op *o = s->head;
    if (!o) {
      if (s->destroyed || s->stop) break;
      pthread_cond_wait(&s->wake, &qlock);
      continue;
    }
    /* On a shared hardware queue, the operations queued before it start first. */
    bool turn = s->connection < 0 || s->ctx->conn_started[s->connection] + 1 == o->conn_seq;
    bool ready = turn && (s->ctx->sticky || deps_met(o));
    if (ready && o->kind == OP_WAIT && o->mark && !o->mark->done && !s->ctx->sticky) ready = false;
    if (ready && o->kind == OP_WAIT_VALUE && !s->ctx->sticky && !s->ctx->dying && !word_reached(o)) {
      /* The host raises the word with plain stores: look again soon. */
      struct timespec t;
      clock_gettime(CLOCK_REALTIME, &t);
      long long ns = t.tv_nsec + poll_us * 1000LL;
      t.tv_sec += (time_t)(ns / 1000000000LL);
      t.tv_nsec = (long)(ns % 1000000000LL);
      pthread_cond_timedwait(&s->wake, &qlock, &t);
      if (poll_us < POLL_LAST_US) poll_us *= 2;
      continue;
    }
    if (!ready) {
      if (!s->listed) {
        s->next_blocked = blocked;
        blocked = s;
        s->listed = true;
      }
      pthread_cond_wait(&s->wake, &qlock);
      if (s->listed) unlist(s);
      continue;
    }
    poll_us = POLL_FIRST_US;
    if (s->connection >= 0) {
      s->ctx->conn_started[s->connection] = o->conn_seq; /* the next on the queue may start */
      notify();
    }
    pthread_mutex_unlock(&qlock);
    run(s, o);
    pthread_mutex_lock(&qlock);
    finish(s, o);
  }
  s->exited = true;
  pthread_cond_broadcast(&progress);
  pthread_mutex_unlock(&qlock);
  return NULL;
}

/* A stream of `c` with its thread started, not yet in the context's list. */
static fake_stream *stream_new(fake_ctx *c, bool legacy, bool blocking) {
  fake_stream *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->ctx = c;
  s->legacy = legacy;
  s->blocking = blocking;
  s->rng = (atomic_fetch_add(&seeds, 1) + 1) * 0x9E3779B97F4A7C15ULL;
  s->connection = -1;
  if (pthread_cond_init(&s->wake, NULL) != 0) {
    free(s);
    return NULL;
  }
  if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
    stream_free(s);
    return NULL;
  }
  return s;
}

/* With qlock held, before anything is queued on `s`: its hardware queue. */
static void connect_stream(fake_ctx *c, fake_stream *s) {
  if (cfg.connections > 0) s->connection = (int)(c->next_connection++ % (unsigned)cfg.connections);
}

/* ---- contexts (fake_cuda.c) ------------------------------------------------------------------------ */

FAKE_INTERNAL bool fake_streams_start(fake_ctx *c) {
  fake_stream *legacy = stream_new(c, true, false);
  pthread_mutex_lock(&qlock);
  c->next_connection = 0;
  memset(c->conn_queued, 0, sizeof c->conn_queued);
  memset(c->conn_started, 0, sizeof c->conn_started);
  if (legacy) connect_stream(c, legacy);
  c->streams = legacy;
  c->dying = false;
  pthread_mutex_unlock(&qlock);
  return legacy != NULL;
}

FAKE_INTERNAL void fake_drain_ctx(fake_ctx *c) {
  pthread_mutex_lock(&qlock);
  wait_locked(c, NULL, SCOPE_CONTEXT);
  reap(c);
  pthread_mutex_unlock(&qlock);
}

FAKE_INTERNAL long fake_streams_stop(fake_ctx *c) {
  long streams_left = 0, events_left = 0;
  pthread_mutex_lock(&qlock);
  c->dying = true; /* waits on host memory give up */
  for (fake_stream *t = c->streams; t; t = t->next)
    pthread_cond_signal(&t->wake);
  wait_locked(c, NULL, SCOPE_CONTEXT);
  for (fake_stream *t = c->streams; t; t = t->next) {
    t->stop = true;
    pthread_cond_signal(&t->wake);
  }
  for (;;) {
    bool all = true;
    for (fake_stream *t = c->streams; t; t = t->next)
      all = all && t->exited;
    if (all) break;
    pthread_cond_wait(&progress, &qlock);
  }
  while (c->streams) {
    fake_stream *t = c->streams;
    c->streams = t->next;
    if (!t->joined) pthread_join(t->thread, NULL);
    t->joined = true;
    if (t->handle) { /* never destroyed */
      streams_left++;
      if (cfg.strict) fprintf(stderr, "fake_cuda: device %d's context released with a stream still live\n", c->ordinal);
      t->handle->magic = 0;
      t->handle->next_free = free_stream_handles;
      free_stream_handles = t->handle;
      t->handle = NULL;
    }
    if (t->refs == 0)
      stream_free(t);
    else
      t->orphaned = true; /* an operation of another context still names it */
  }
  for (struct cu_event_st *e = live_events, *next; e; e = next) {
    next = e->next;
    if (e->ctx != c) continue;
    events_left++;
    if (cfg.strict) fprintf(stderr, "fake_cuda: device %d's context released with an event still live\n", c->ordinal);
    if (e->capture) marker_unref(e->capture);
    e->capture = NULL;
    e->magic = 0;
    if (e->prev)
      e->prev->next = e->next;
    else
      live_events = e->next;
    if (e->next) e->next->prev = e->prev;
    e->next = free_events;
    free_events = e;
  }
  pthread_mutex_unlock(&qlock);
  pthread_mutex_lock(&lock);
  counts.streams -= streams_left;
  counts.events -= events_left;
  pthread_mutex_unlock(&lock);
  return streams_left + events_left;
}

FAKE_INTERNAL void fake_streams_release_handles(void) {
  pthread_mutex_lock(&qlock);
  while (free_stream_handles) {
    struct cu_stream_st *h = free_stream_handles;
    free_stream_handles = h->next_free;
    free(h);
  }
  while (free_events) {
    struct cu_event_st *e = free_events;
    free_events = e->next;
    free(e);
  }
  pthread_mutex_unlock(&qlock);
}

/* ---- queueing ------------------------------------------------------------------------------------ */

/* Checks a stream argument (of a call with `c` current) without queueing. */
static cu_result stream_check(const char *function, fake_ctx *c, cu_stream h) {
  char why[160] = "";
  cu_result r;
  pthread_mutex_lock(&qlock);
  (void)resolve(c, h, why, sizeof why, &r);
  pthread_mutex_unlock(&qlock);
  if (r) misuse(function, "%s", why);
  return r;
}

typedef struct submit_opts {
  fake_ctx *after[3]; /* contexts all of whose queued work comes first */
  int nafter;
  bool wait; /* returns once the operation has completed */
} submit_opts;

/* Queues a copy of `proto` on the stream `h` of the current context `c`. On
 * failure nothing is queued and proto->owned is left to the caller. */
static cu_result submit(const char *function, fake_ctx *c, cu_stream h, const op *proto, const submit_opts *opts) {
  op *o = malloc(sizeof *o);
  if (!o) return FCU_ERROR_OUT_OF_MEMORY;
  *o = *proto;
  o->function = function;
  char why[160] = "";
  cu_result r;
  pthread_mutex_lock(&qlock);
  fake_stream *s = resolve(c, h, why, sizeof why, &r);
  if (s && !queue(s, o, opts ? opts->after : NULL, opts ? opts->nafter : 0, NULL)) r = FCU_ERROR_OUT_OF_MEMORY;
  if (r) {
    pthread_mutex_unlock(&qlock);
    free(o);
    if (why[0]) misuse(function, "%s", why);
    return r;
  }
  if (opts && opts->wait) {
    unsigned long long seq = o->seq; /* o is the thread's from here on */
    s->refs++;
    while (s->completed < seq)
      pthread_cond_wait(&progress, &qlock);
    stream_unref(s);
  }
  pthread_mutex_unlock(&qlock);
  return opts && opts->wait ? c->sticky : FCU_SUCCESS;
}

static op copy_op(void *dst, const void *src, size_t n) {
  return (op){.kind = OP_COPY, .dst = dst, .src = src, .n = n};
}

static void must_live(op *o, uintptr_t p, size_t n) {
  o->live[o->nlive].p = p;
  o->live[o->nlive].n = n;
  o->nlive++;
}

FAKE_INTERNAL cu_result fake_launch_increment(const char *function, fake_ctx *c, cu_stream stream, int32_t *data,
                                              unsigned count, unsigned grid, unsigned block, size_t bytes, bool fault) {
  op o = {.kind = OP_KERNEL, .data = data, .count = count, .grid = grid, .block = block, .fault = fault};
  if (bytes > 0 && !fault) must_live(&o, (uintptr_t)data, bytes);
  return submit(function, c, stream, &o, NULL);
}

/* ---- copies ------------------------------------------------------------------------------------- */

/* A pageable source staged now (the caller may reuse its memory at once). */
static cu_result stage(op *o, const void *src, size_t bytes) {
  void *staging = malloc(bytes);
  if (!staging) return FCU_ERROR_OUT_OF_MEMORY;
  memcpy(staging, src, bytes);
  o->src = o->owned = staging;
  return FCU_SUCCESS;
}

/* submit() without waiting, for an operation that owns its staging. */
static cu_result submit_owned(const char *function, fake_ctx *c, cu_stream h, op *o) {
  cu_result r = submit(function, c, h, o, NULL);
  if (r) free(o->owned);
  return r;
}

FAKE_API cu_result cuMemcpyHtoD_v2(cu_deviceptr dst, const void *src, size_t bytes) {
  INJECT("cuMemcpyHtoD_v2");
  fake_ctx *c;
  cu_result r = need_ctx("cuMemcpyHtoD_v2", &c);
  if (r) return r;
  if (bytes == 0) return FCU_SUCCESS;
  bool pinned = false, memops = false;
  if ((r = check_side("cuMemcpyHtoD_v2", c, (uintptr_t)dst, bytes, SIDE_DEVICE, NULL, &memops)) ||
      (r = check_side("cuMemcpyHtoD_v2", c, (uintptr_t)src, bytes, SIDE_HOST, &pinned, NULL)))
    return r;
  op o = copy_op((void *)(uintptr_t)dst, src, bytes);
  must_live(&o, (uintptr_t)dst, bytes);
  if (pinned || memops) { /* complete on return */
    if (pinned) must_live(&o, (uintptr_t)src, bytes);
    return submit("cuMemcpyHtoD_v2", c, NULL, &o, &(submit_opts){.wait = true});
  }
  /* From pageable memory: staged at once, landed later. */
  if ((r = stage(&o, src, bytes)) || (r = submit_owned("cuMemcpyHtoD_v2", c, NULL, &o))) return r;
  pthread_mutex_lock(&lock);
  counts.pageable_h2d++;
  pthread_mutex_unlock(&lock);
  return FCU_SUCCESS;
}

FAKE_API cu_result cuMemcpyDtoH_v2(void *dst, cu_deviceptr src, size_t bytes) {
  INJECT("cuMemcpyDtoH_v2");
  fake_ctx *c;
  cu_result r = need_ctx("cuMemcpyDtoH_v2", &c);
  if (r) return r;
  if (bytes == 0) return FCU_SUCCESS;
  bool pinned = false;
  if ((r = check_side("cuMemcpyDtoH_v2", c, (uintptr_t)src, bytes, SIDE_DEVICE, NULL, NULL)) ||
      (r = check_side("cuMemcpyDtoH_v2", c, (uintptr_t)dst, bytes, SIDE_HOST, &pinned, NULL)))
    return r;
  op o = copy_op(dst, (const void *)(uintptr_t)src, bytes);
  must_live(&o, (uintptr_t)src, bytes);
  if (pinned) must_live(&o, (uintptr_t)dst, bytes);
  /* device to host is complete on return */
  return submit("cuMemcpyDtoH_v2", c, NULL, &o, &(submit_opts){.wait = true});
}

static cu_result dtod(const char *function, cu_deviceptr dst, cu_deviceptr src, size_t bytes, cu_stream stream) {
  fake_ctx *c;
  cu_result r = need_ctx(function, &c);
  if (r || (r = stream_check(function, c, stream))) return r;
  if (bytes == 0) return FCU_SUCCESS;
  if ((r = check_side(function, c, (uintptr_t)src, bytes, SIDE_DEVICE, NULL, NULL)) ||
      (r = check_side(function, c, (uintptr_t)dst, bytes, SIDE_DEVICE, NULL, NULL)))
    return r;
  if (src < dst + bytes && dst < src + bytes && src != dst) {
    misuse(function, "overlapping ranges (undefined on a GPU)");
    return FCU_ERROR_INVALID_VALUE;
  }
  op o = copy_op((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
  must_live(&o, (uintptr_t)src, bytes);
  must_live(&o, (uintptr_t)dst, bytes);
  return submit(function, c, stream, &o, NULL); /* returns before the copy is done */
}

FAKE_API cu_result cuMemcpyDtoD_v2(cu_deviceptr dst, cu_deviceptr src, size_t bytes) {
  INJECT("cuMemcpyDtoD_v2");
  return dtod("cuMemcpyDtoD_v2", dst, src, bytes, NULL);
}

FAKE_API cu_result cuMemcpyDtoDAsync_v2(cu_deviceptr dst, cu_deviceptr src, size_t bytes, cu_stream stream) {
  INJECT("cuMemcpyDtoDAsync_v2");
  return dtod("cuMemcpyDtoDAsync_v2", dst, src, bytes, stream);
}

FAKE_API cu_result cuMemcpyHtoDAsync_v2(cu_deviceptr dst, const void *src, size_t bytes, cu_stream stream) {
  INJECT("cuMemcpyHtoDAsync_v2");
  const char *function = "cuMemcpyHtoDAsync_v2";
  fake_ctx *c;
  cu_result r = need_ctx(function, &c);
  if (r || (r = stream_check(function, c, stream))) return r;
  if (bytes == 0) return FCU_SUCCESS;
  bool pinned = false;
  if ((r = check_side(function, c, (uintptr_t)dst, bytes, SIDE_DEVICE, NULL, NULL)) ||
      (r = check_side(function, c, (uintptr_t)src, bytes, SIDE_HOST, &pinned, NULL)))
    return r;
  op o = copy_op((void *)(uintptr_t)dst, src, bytes);
  must_live(&o, (uintptr_t)dst, bytes);
  if (pinned) { /* read when the copy runs */
    must_live(&o, (uintptr_t)src, bytes);
    return submit(function, c, stream, &o, NULL);
  }
  /* pageable: staged at once, as the driver does */
  if ((r = stage(&o, src, bytes))) return r;
  return submit_owned(function, c, stream, &o);
}

FAKE_API cu_result cuMemcpyDtoHAsync_v2(void *dst, cu_deviceptr src, size_t bytes, cu_stream stream) {
  INJECT("cuMemcpyDtoHAsync_v2");
  const char *function = "cuMemcpyDtoHAsync_v2";
  fake_ctx *c;
  cu_result r = need_ctx(function, &c);
  if (r || (r = stream_check(function, c, stream))) return r;
  if (bytes == 0) return FCU_SUCCESS;
  bool pinned = false;
  if ((r = check_side(function, c, (uintptr_t)src, bytes, SIDE_DEVICE, NULL, NULL)) ||
      (r = check_side(function, c, (uintptr_t)dst, bytes, SIDE_HOST, &pinned, NULL)))
    return r;
  op o = copy_op(dst, (const void *)(uintptr_t)src, bytes);
  must_live(&o, (uintptr_t)src, bytes);
  if (pinned) must_live(&o, (uintptr_t)dst, bytes);
  /* To pageable memory the driver waits for the stream's earlier work and the copy. */
  return submit(function, c, stream, &o, &(submit_opts){.wait = !pinned});
}

/* The contexts of a peer copy, checked. */
static cu_result peer_ctxs(cu_context dst_ctx, cu_context src_ctx, fake_ctx **dc, fake_ctx **sc) {
  *dc = as_ctx(dst_ctx);
  *sc = as_ctx(src_ctx);
  if (!*dc || !*sc || (*dc)->refs == 0 || (*sc)->refs == 0) return FCU_ERROR_INVALID_CONTEXT;
  if ((*dc)->sticky) return (*dc)->sticky;
  if ((*sc)->sticky) return (*sc)->sticky;
  return FCU_SUCCESS;
}

FAKE_API cu_result cuMemcpyPeer(cu_deviceptr dst, cu_context dst_ctx, cu_deviceptr src, cu_context src_ctx,
                                size_t bytes) {
  INJECT("cuMemcpyPeer");
  fake_ctx *c, *dc, *sc;
  cu_result r = need_ctx("cuMemcpyPeer", &c);
  if (r || (r = peer_ctxs(dst_ctx, src_ctx, &dc, &sc))) return r;
  if (bytes == 0) return FCU_SUCCESS;
  if ((r = check_side("cuMemcpyPeer", sc, (uintptr_t)src, bytes, SIDE_DEVICE, NULL, NULL)) ||
      (r = check_side("cuMemcpyPeer", dc, (uintptr_t)dst, bytes, SIDE_DEVICE, NULL, NULL)))
    return r;
  /* On the current context's legacy stream, after all the work queued on the
   * three contexts, and before the later work of the legacy streams (and so of
   * the blocking streams) of the other two; returns before the copy is done. */
  op *o = malloc(sizeof *o), *later[2] = {NULL, NULL};
  fake_ctx *others[2];
  int nothers = 0;
  if (sc != c) others[nothers++] = sc;
  if (dc != c && dc != sc) others[nothers++] = dc;
  for (int i = 0; i < nothers; i++)
    later[i] = malloc(sizeof *later[i]);
  if (!o || (nothers > 0 && !later[0]) || (nothers > 1 && !later[1])) {
    free(o);
    free(later[0]);
    free(later[1]);
    return FCU_ERROR_OUT_OF_MEMORY;
  }
  *o = copy_op((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
  o->function = "cuMemcpyPeer";
  must_live(o, (uintptr_t)src, bytes);
  must_live(o, (uintptr_t)dst, bytes);
  fake_ctx *after[3] = {c, sc, dc};
  pthread_mutex_lock(&qlock);
  fake_stream *s = c->streams;
  bool ok = queue(s, o, after, 3, NULL);
  dep mine = {s, ok ? o->seq : 0};
  for (int i = 0; i < nothers; i++) {
    *later[i] = (op){.kind = OP_WAIT, .function = "cuMemcpyPeer"};
    if (ok && others[i]->streams && queue(others[i]->streams, later[i], NULL, 0, &mine)) later[i] = NULL;
  }
  pthread_mutex_unlock(&qlock);
  free(later[0]); /* those not queued */
  free(later[1]);
  if (!ok) {
    free(o);
    return FCU_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_lock(&lock);
  counts.peer_copies++;
  pthread_mutex_unlock(&lock);
  return FCU_SUCCESS;
}

FAKE_API cu_result cuMemcpyPeerAsync(cu_deviceptr dst, cu_context dst_ctx, cu_deviceptr src, cu_context src_ctx,
                                     size_t bytes, cu_stream stream) {
  INJECT("cuMemcpyPeerAsync");
  fake_ctx *c, *dc, *sc;
  cu_result r = need_ctx("cuMemcpyPeerAsync", &c);
  if (r || (r = peer_ctxs(dst_ctx, src_ctx, &dc, &sc)) || (r = stream_check("cuMemcpyPeerAsync", c, stream))) return r;
  if (bytes == 0) return FCU_SUCCESS;
  if ((r = check_side("cuMemcpyPeerAsync", sc, (uintptr_t)src, bytes, SIDE_DEVICE, NULL, NULL)) ||
      (r = check_side("cuMemcpyPeerAsync", dc, (uintptr_t)dst, bytes, SIDE_DEVICE, NULL, NULL)))
    return r;
  /* Ordered by its stream only: the source context's work is the caller's to wait for. */
  op o = copy_op((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
  must_live(&o, (uintptr_t)src, bytes);
  must_live(&o, (uintptr_t)dst, bytes);
  r = submit("cuMemcpyPeerAsync", c, stream, &o, NULL);
  if (r == FCU_SUCCESS) {
    pthread_mutex_lock(&lock);
    counts.peer_copies++;
    pthread_mutex_unlock(&lock);
  }
  return r;
}

/* ---- memsets ------------------------------------------------------------------------------------ */

static cu_result memset_async(const char *function, cu_deviceptr dst, uint32_t value, unsigned elem, size_t n,
                              cu_stream stream) {
  fake_ctx *c;
  cu_result r = need_ctx(function, &c);
  if (r || (r = stream_check(function, c, stream))) return r;
  if (n == 0) return FCU_SUCCESS;
  if (dst % elem != 0) {
    misuse(function, "0x%llx is not aligned to its %u-byte elements", dst, elem);
    return FCU_ERROR_INVALID_VALUE;
  }
  if (n > SIZE_MAX / elem) return FCU_ERROR_INVALID_VALUE;
  if ((r = check_side(function, c, (uintptr_t)dst, n * elem, SIDE_DEVICE, NULL, NULL))) return r;
  op o = {.kind = OP_MEMSET, .dst = (void *)(uintptr_t)dst, .n = n, .elem = elem, .value = value};
  must_live(&o, (uintptr_t)dst, n * elem);
  return submit(function, c, stream, &o, NULL);
}

FAKE_API cu_result cuMemsetD8Async(cu_deviceptr dst, unsigned char value, size_t n, cu_stream stream) {
  INJECT("cuMemsetD8Async");
  return memset_async("cuMemsetD8Async", dst, value, 1, n, stream);
}

FAKE_API cu_result cuMemsetD16Async(cu_deviceptr dst, unsigned short value, size_t n, cu_stream stream) {
  INJECT("cuMemsetD16Async");
  return memset_async("cuMemsetD16Async", dst, value, 2, n, stream);
}

FAKE_API cu_result cuMemsetD32Async(cu_deviceptr dst, unsigned int value, size_t n, cu_stream stream) {
  INJECT("cuMemsetD32Async");
  return memset_async("cuMemsetD32Async", dst, value, 4, n, stream);
}

/* ---- streams ------------------------------------------------------------------------------------ */

FAKE_API cu_result cuStreamCreate(cu_stream *stream, unsigned int flags) {
  INJECT("cuStreamCreate");
  fake_ctx *c;
  cu_result r = need_ctx("cuStreamCreate", &c);
  if (r) return r;
  if (!stream || flags > FCU_STREAM_NON_BLOCKING) return FCU_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&qlock);
  struct cu_stream_st *h = free_stream_handles;
  if (h) free_stream_handles = h->next_free;
  pthread_mutex_unlock(&qlock);
  if (!h && !(h = malloc(sizeof *h))) return FCU_ERROR_OUT_OF_MEMORY;
  fake_stream *s = stream_new(c, false, !(flags & FCU_STREAM_NON_BLOCKING));
  pthread_mutex_lock(&qlock);
  if (!s) {
    h->magic = 0;
    h->next_free = free_stream_handles;
    free_stream_handles = h;
    pthread_mutex_unlock(&qlock);
    return FCU_ERROR_OUT_OF_MEMORY;
  }
  reap(c);
  connect_stream(c, s);
  s->handle = h;
  h->magic = STREAM_MAGIC;
  h->s = s;
  s->next = c->streams->next; /* after the legacy stream */
  c->streams->next = s;
  pthread_mutex_unlock(&qlock);
  pthread_mutex_lock(&lock);
  counts.streams++;
  pthread_mutex_unlock(&lock);
  *stream = h;
  return FCU_SUCCESS;
}

/* Returns at once: the work queued on the stream still runs (CUDA's rule). */
FAKE_API cu_result cuStreamDestroy_v2(cu_stream stream) {
  INJECT("cuStreamDestroy_v2");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (!stream || stream == FAKE_STREAM_LEGACY || stream == FAKE_STREAM_PER_THREAD) return FCU_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&qlock);
  if (stream->magic != STREAM_MAGIC) {
    pthread_mutex_unlock(&qlock);
    misuse("cuStreamDestroy_v2", "not a live stream");
    return FCU_ERROR_INVALID_HANDLE;
  }
  fake_stream *s = stream->s;
  s->destroyed = true;
  s->handle = NULL;
  stream->magic = 0;
  stream->next_free = free_stream_handles;
  free_stream_handles = stream;
  pthread_cond_signal(&s->wake);
  reap(s->ctx);
  pthread_mutex_unlock(&qlock);
  pthread_mutex_lock(&lock);
  counts.streams--;
  pthread_mutex_unlock(&lock);
  return FCU_SUCCESS;
}

/* The stream a query or synchronisation names, and the scope of its work. The
 * legacy stream needs a current context; a stream of any context will do. */
static cu_result stream_target(const char *function, cu_stream h, fake_ctx **c, fake_stream **s, scope *sc) {
  *s = NULL;
  if (h == NULL || h == FAKE_STREAM_LEGACY || h == FAKE_STREAM_PER_THREAD) {
    cu_result r = need_ctx(function, c);
    if (r) return r;
    *sc = SCOPE_LEGACY;
    return FCU_SUCCESS;
  }
  *c = NULL;
  *sc = SCOPE_STREAM;
  pthread_mutex_lock(&qlock);
  bool live = h->magic == STREAM_MAGIC;
  if (live) {
    *s = h->s;
    *c = h->s->ctx;
  }
  pthread_mutex_unlock(&qlock);
  if (!live) {
    misuse(function, "not a live stream");
    return FCU_ERROR_INVALID_HANDLE;
  }
  return (*c)->sticky;
}

FAKE_API cu_result cuStreamSynchronize(cu_stream stream) {
  INJECT("cuStreamSynchronize");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  fake_ctx *c;
  fake_stream *s;
  scope sc;
  cu_result r = stream_target("cuStreamSynchronize", stream, &c, &s, &sc);
  if (r) return r;
  pthread_mutex_lock(&qlock);
  if (sc == SCOPE_STREAM) {
    if (stream->magic != STREAM_MAGIC) { /* destroyed meanwhile */
      pthread_mutex_unlock(&qlock);
      return FCU_ERROR_INVALID_HANDLE;
    }
    s = stream->s;
  }
  wait_locked(c, s, sc);
  pthread_mutex_unlock(&qlock);
  return c->sticky;
}

FAKE_API cu_result cuStreamQuery(cu_stream stream) {
  INJECT("cuStreamQuery");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  fake_ctx *c;
  fake_stream *s;
  scope sc;
  cu_result r = stream_target("cuStreamQuery", stream, &c, &s, &sc);
  if (r) return r;
  bool busy = false;
  pthread_mutex_lock(&qlock);
  if (sc == SCOPE_STREAM) {
    if (stream->magic != STREAM_MAGIC) /* destroyed meanwhile */
      r = FCU_ERROR_INVALID_HANDLE;
    else
      busy = pending(stream->s);
  } else {
    for (fake_stream *t = c->streams; t; t = t->next)
      if (t->legacy || t->blocking) busy = busy || pending(t);
  }
  pthread_mutex_unlock(&qlock);
  return r ? r : c->sticky ? c->sticky : busy ? FCU_ERROR_NOT_READY : FCU_SUCCESS;
}

FAKE_API cu_result cuStreamWaitEvent(cu_stream stream, cu_event event, unsigned int flags) {
  INJECT("cuStreamWaitEvent");
  fake_ctx *c;
  cu_result r = need_ctx("cuStreamWaitEvent", &c);
  if (r) return r;
  if (flags != 0) return FCU_ERROR_INVALID_VALUE; /* CU_EVENT_WAIT_DEFAULT only */
  if (!event) return FCU_ERROR_INVALID_HANDLE;
  op *o = malloc(sizeof *o);
  if (!o) return FCU_ERROR_OUT_OF_MEMORY;
  *o = (op){.kind = OP_WAIT, .function = "cuStreamWaitEvent"};
  char why[160] = "";
  pthread_mutex_lock(&qlock);
  fake_stream *s = resolve(c, stream, why, sizeof why, &r);
  if (!r && event->magic != EVENT_MAGIC) {
    snprintf(why, sizeof why, "not a live event");
    r = FCU_ERROR_INVALID_HANDLE;
  }
  /* The capture as it stands now (a later record does not move it); an event
   * never recorded, or complete, means no wait. The event may be of another
   * context. */
  marker *m = r ? NULL : event->capture;
  bool queued = false;
  if (m && !m->done) {
    o->mark = m;
    if (queue(s, o, NULL, 0, NULL)) {
      m->refs++;
      queued = true;
    } else {
      r = FCU_ERROR_OUT_OF_MEMORY;
    }
  }
  pthread_mutex_unlock(&qlock);
  if (!queued) free(o);
  if (why[0]) misuse("cuStreamWaitEvent", "%s", why);
  return r;
}

FAKE_API cu_result cuStreamWaitValue32_v2(cu_stream stream, cu_deviceptr addr, unsigned int value, unsigned int flags) {
  INJECT("cuStreamWaitValue32_v2");
  const char *function = "cuStreamWaitValue32_v2";
  fake_ctx *c;
  cu_result r = need_ctx(function, &c);
  if (r) return r;
  if (cfg.no_wait_value) return FCU_ERROR_NOT_SUPPORTED; /* FAKE_CUDA_NO_WAIT_VALUE */
  if ((r = stream_check(function, c, stream))) return r;
  if (flags != FCU_STREAM_WAIT_VALUE_GEQ) {
    misuse(function, "flags 0x%x: the fake driver has CU_STREAM_WAIT_VALUE_GEQ only", flags);
    return FCU_ERROR_INVALID_VALUE;
  }
  pthread_mutex_lock(&lock);
  region *reg = addr % 4 == 0 ? find_region((uintptr_t)addr, 4) : NULL;
  bool mapped = reg && reg->kind != R_DEVICE && reg->devicemap && reg->device_pointer;
  pthread_mutex_unlock(&lock);
  if (!mapped) {
    misuse(function,
           "0x%llx is not an aligned word of host memory mapped with DEVICEMAP whose address came from "
           "cuMemHostGetDevicePointer",
           addr);
    return FCU_ERROR_INVALID_VALUE;
  }
  op o = {.kind = OP_WAIT_VALUE, .word = (const uint32_t *)(uintptr_t)addr, .value = value};
  return submit(function, c, stream, &o, NULL);
}

/* ---- events ------------------------------------------------------------------------------------- */

FAKE_API cu_result cuEventCreate(cu_event *event, unsigned int flags) {
  INJECT("cuEventCreate");
  fake_ctx *c;
  cu_result r = need_ctx("cuEventCreate", &c);
  if (r) return r;
  unsigned known = FAKE_EVENT_BLOCKING_SYNC | FCU_EVENT_DISABLE_TIMING | FAKE_EVENT_INTERPROCESS;
  if (!event || (flags & ~known) || ((flags & FAKE_EVENT_INTERPROCESS) && !(flags & FCU_EVENT_DISABLE_TIMING)))
    return FCU_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&qlock);
  struct cu_event_st *e = free_events;
  if (e) free_events = e->next;
  pthread_mutex_unlock(&qlock);
  if (!e && !(e = malloc(sizeof *e))) return FCU_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&qlock);
  *e = (struct cu_event_st){.magic = EVENT_MAGIC, .ctx = c, .flags = flags, .next = live_events};
  if (live_events) live_events->prev = e;
  live_events = e;
  pthread_mutex_unlock(&qlock);
  pthread_mutex_lock(&lock);
  counts.events++;
  pthread_mutex_unlock(&lock);
  *event = e;
  return FCU_SUCCESS;
}

FAKE_API cu_result cuEventRecord(cu_event event, cu_stream stream) {
  INJECT("cuEventRecord");
  fake_ctx *c;
  cu_result r = need_ctx("cuEventRecord", &c);
  if (r) return r;
  if (!event) return FCU_ERROR_INVALID_HANDLE;
  op *o = malloc(sizeof *o);
  marker *m = malloc(sizeof *m);
  if (!o || !m) {
    free(o);
    free(m);
    return FCU_ERROR_OUT_OF_MEMORY;
  }
  *m = (marker){.refs = 2}; /* the event's capture, the record operation */
  *o = (op){.kind = OP_RECORD, .function = "cuEventRecord", .mark = m};
  char why[160] = "";
  pthread_mutex_lock(&qlock);
  fake_stream *s = NULL;
  if (event->magic != EVENT_MAGIC) {
    snprintf(why, sizeof why, "not a live event");
    r = FCU_ERROR_INVALID_HANDLE;
  } else if ((s = resolve(c, stream, why, sizeof why, &r)) && event->ctx != c) {
    snprintf(why, sizeof why, "event of device %d recorded on device %d's stream", event->ctx->ordinal, c->ordinal);
    r = FCU_ERROR_INVALID_HANDLE;
  }
  if (!r && !queue(s, o, NULL, 0, NULL)) r = FCU_ERROR_OUT_OF_MEMORY;
  if (!r) { /* the new capture replaces the old one */
    if (event->capture) marker_unref(event->capture);
    event->capture = m;
  }
  pthread_mutex_unlock(&qlock);
  if (r) {
    free(o);
    free(m);
  }
  if (why[0]) misuse("cuEventRecord", "%s", why);
  return r;
}

FAKE_API cu_result cuEventQuery(cu_event event) {
  INJECT("cuEventQuery");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (!event) return FCU_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&qlock);
  bool live = event->magic == EVENT_MAGIC;
  bool done = live && (!event->capture || event->capture->done); /* never recorded: complete */
  fake_ctx *c = live ? event->ctx : NULL;
  pthread_mutex_unlock(&qlock);
  if (!live) {
    misuse("cuEventQuery", "not a live event");
    return FCU_ERROR_INVALID_HANDLE;
  }
  return c->sticky ? c->sticky : done ? FCU_SUCCESS : FCU_ERROR_NOT_READY;
}

FAKE_API cu_result cuEventSynchronize(cu_event event) {
  INJECT("cuEventSynchronize");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (!event) return FCU_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&qlock);
  if (event->magic != EVENT_MAGIC) {
    pthread_mutex_unlock(&qlock);
    misuse("cuEventSynchronize", "not a live event");
    return FCU_ERROR_INVALID_HANDLE;
  }
  fake_ctx *c = event->ctx;
  marker *m = event->capture; /* kept while waiting: the event may be recorded again or destroyed */
  if (m) {
    m->refs++;
    while (!m->done)
      pthread_cond_wait(&progress, &qlock);
    marker_unref(m);
  }
  pthread_mutex_unlock(&qlock);
  return c->sticky;
}

FAKE_API cu_result cuEventElapsedTime_v2(float *ms, cu_event start, cu_event stop) {
  INJECT("cuEventElapsedTime_v2");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (!ms) return FCU_ERROR_INVALID_VALUE;
  if (!start || !stop) return FCU_ERROR_INVALID_HANDLE;
  cu_result r = FCU_SUCCESS;
  pthread_mutex_lock(&qlock);
  if (start->magic != EVENT_MAGIC || stop->magic != EVENT_MAGIC)
    r = FCU_ERROR_INVALID_HANDLE;
  else if ((start->flags | stop->flags) & FCU_EVENT_DISABLE_TIMING)
    r = FCU_ERROR_INVALID_HANDLE;
  else if (!start->capture || !stop->capture) /* never recorded */
    r = FCU_ERROR_INVALID_HANDLE;
  else if (start->ctx->sticky || stop->ctx->sticky)
    r = start->ctx->sticky ? start->ctx->sticky : stop->ctx->sticky;
  else if (!start->capture->done || !stop->capture->done)
    r = FCU_ERROR_NOT_READY;
  else
    *ms = (float)((double)(stop->capture->ns - start->capture->ns) / 1e6);
  pthread_mutex_unlock(&qlock);
  return r;
}

/* Allowed with records pending (as in CUDA): they complete, unobserved. */
FAKE_API cu_result cuEventDestroy_v2(cu_event event) {
  INJECT("cuEventDestroy_v2");
  if (!initialized) return FCU_ERROR_NOT_INITIALIZED;
  if (!event) return FCU_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&qlock);
  if (event->magic != EVENT_MAGIC) {
    pthread_mutex_unlock(&qlock);
    misuse("cuEventDestroy_v2", "not a live event");
    return FCU_ERROR_INVALID_HANDLE;
  }
  if (event->capture) marker_unref(event->capture);
  event->capture = NULL;
  event->magic = 0;
  if (event->prev)
    event->prev->next = event->next;
  else
    live_events = event->next;
  if (event->next) event->next->prev = event->prev;
  event->next = free_events;
  free_events = event;
  pthread_mutex_unlock(&qlock);
  pthread_mutex_lock(&lock);
  counts.events--;
  pthread_mutex_unlock(&lock);
  return FCU_SUCCESS;
}

/* ---- host functions ----------------------------------------------------------------------------- */

FAKE_API cu_result cuLaunchHostFunc(cu_stream stream, fake_cuda_host_fn fn, void *user_data) {
  INJECT("cuLaunchHostFunc");
  const char *function = "cuLaunchHostFunc";
  fake_ctx *c;
  cu_result r = need_ctx(function, &c);
  if (r) return r;
  if (!fn) {
    misuse(function, "a NULL function");
    return FCU_ERROR_INVALID_VALUE;
  }
  if ((r = stream_check(function, c, stream))) return r;
  op o = {.kind = OP_HOST_FUNC, .host_fn = fn, .user_data = user_data};
  return submit(function, c, stream, &o, NULL);
}
