/*
 * The copy threads: large host copies split over a small pool of threads, since
 * one core's memcpy reaches only part of what the memory system moves
 * (docs/PERFORMANCE.md).
 *
 * A job is a run of tasks (a copy's chunks) that the workers and the caller take
 * in order from an atomic counter, so that a descheduled thread holds the job up
 * by one task, not by its share. Between jobs a worker spins for a short
 * while before it sleeps (waking a sleeping thread costs tens of microseconds,
 * as much as copying a megabyte), and while the engine runs a transfer it holds
 * the workers awake (ferry__copy_threads_hold).
 *
 * FERRY_COPY_THREADS sets the number of threads (the caller's included);
 * default: the processors online, at most 16, and none besides the caller on
 * machines of fewer than 4 processors, where a second thread gains little and
 * loses much as soon as anything else runs.
 */
#include "internal.h"

#include <sched.h>
#include <stdlib.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
  pthread_mutex_t lock; /* start, stop, and sleeping workers' condition */
  pthread_cond_t wake;
  pthread_mutex_t busy; /* one parallel copy at a time; others copy on their own */
  pthread_t *threads;
  int nthreads; /* workers started, besides the caller */
  bool started;
  _Atomic bool stop;
  _Atomic(ferry_copy_job *) job;
  _Atomic uint64_t generation; /* counts jobs, so that a worker joins each one once */
  _Atomic int active;          /* workers inside a job */
  _Atomic int sleeping;        /* workers waiting on `wake` */
  _Atomic int holders;         /* pipelines keeping the workers awake */
  _Atomic uint64_t last_job_ns;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER, .busy = PTHREAD_MUTEX_INITIALIZER};

/* How long a worker spins for the next job before it sleeps. */
#define SPIN_NS 200000u
/* Below these a single memcpy wins: handing work to sleeping threads costs
 * about 15 us, to spinning ones about 1 us. */
#define PARALLEL_MIN_COLD ((size_t)4 << 20)
#define PARALLEL_MIN_HOT  ((size_t)256 << 10)
#define CHUNK_MIN         ((size_t)64 << 10)
#define CHUNK_MAX         ((size_t)4 << 20)

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static void take_tasks(ferry_copy_job *job) {
  size_t i;
  while ((i = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed)) < job->count)
    job->task(job->ctx, i);
}

/* Waits for a job newer than `seen`; false when the pool stops. */
static bool await_job(uint64_t seen) {
  uint64_t start = now_ns();
  for (unsigned spins = 0;; spins++) {
    if (atomic_load(&pool.stop)) return false;
    if (atomic_load(&pool.generation) != seen) return true;
    if ((spins & 255) == 255) {
      uint64_t t = now_ns(), last = atomic_load(&pool.last_job_ns);
      if (atomic_load(&pool.holders) == 0 && t - start > SPIN_NS && t - last > SPIN_NS) break;
      sched_yield(); /* let whatever else wants this processor have it now and then */
    }
    cpu_relax();
  }
  pthread_mutex_lock(&pool.lock);
  atomic_fetch_add(&pool.sleeping, 1);
  while (!atomic_load(&pool.stop) && atomic_load(&pool.generation) == seen)
    pthread_cond_wait(&pool.wake, &pool.lock);
  atomic_fetch_sub(&pool.sleeping, 1);
  pthread_mutex_unlock(&pool.lock);
  return !atomic_load(&pool.stop);
}

static void *copy_worker(void *arg) {
  (void)arg;
  uint64_t seen = 0;
  while (await_job(seen)) {
    seen = atomic_load(&pool.generation);
    atomic_fetch_add(&pool.active, 1); /* before looking at the job: see ferry__copy_threads_finish */
    ferry_copy_job *job = atomic_load(&pool.job);
    if (job) take_tasks(job);
    atomic_fetch_sub(&pool.active, 1);
  }
  return NULL;
}

static int copy_thread_count(void) {
  uint64_t set;
  if (ferry__option_number("FERRY_COPY_THREADS", &set)) return (int)set; /* 1 to 64, checked at ferry_init */
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 4) return 1;
  return n > 16 ? 16 : (int)n;
}

/* Starts the workers on first use; their number. */
static int pool_workers(void) {
  pthread_mutex_lock(&pool.lock);
  if (!pool.started) {
    pool.started = true;
    int want = copy_thread_count() - 1;
    pool.threads = want > 0 ? calloc((size_t)want, sizeof *pool.threads) : NULL;
    for (int i = 0; pool.threads && i < want; i++) {
      if (pthread_create(&pool.threads[i], NULL, copy_worker, NULL) != 0) break;
      pool.nthreads++;
    }
  }
  int n = pool.nthreads;
  pthread_mutex_unlock(&pool.lock);
  return n;
}

/* Are the workers awake (a job or a hold within the spin time)? */
static bool pool_hot(void) {
  return atomic_load(&pool.holders) > 0 || now_ns() - atomic_load(&pool.last_job_ns) < SPIN_NS / 2;
}

bool ferry__copy_threads_start(ferry_copy_job *job) {
  if (pthread_mutex_trylock(&pool.busy) != 0) return false; /* another thread's job runs */
  if (pool_workers() == 0) {
    pthread_mutex_unlock(&pool.busy);
    return false;
  }
  atomic_store(&job->next, 0);
  atomic_store(&pool.job, job);
  atomic_fetch_add(&pool.generation, 1);
  if (atomic_load(&pool.sleeping) > 0) {
    pthread_mutex_lock(&pool.lock);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
  }
  return true;
}

void ferry__copy_threads_help(ferry_copy_job *job) { take_tasks(job); }

/* A worker reaches the job only between raising `active` and lowering it; it
 * raises `active` before it loads `job`. So once `job` is cleared and `active`
 * has been seen at zero, no worker can reach the job any more (both sides are
 * sequentially consistent), and the caller's stack may go. */
void ferry__copy_threads_finish(ferry_copy_job *job) {
  take_tasks(job); /* whatever no worker took */
  atomic_store(&pool.job, NULL);
  while (atomic_load(&pool.active) > 0)
    cpu_relax();
  atomic_store(&pool.last_job_ns, now_ns());
  pthread_mutex_unlock(&pool.busy);
}

typedef struct copy_chunks {
  char *dst;
  const char *src;
  size_t n, chunk;
} copy_chunks;

static void copy_chunk(void *ctx, size_t i) {
  const copy_chunks *c = ctx;
  size_t off = i * c->chunk, len = c->n - off < c->chunk ? c->n - off : c->chunk;
  memcpy(c->dst + off, c->src + off, len);
}

/* memcpy with non-temporal stores (16-byte aligned destination), then a fence:
 * the stores are weakly ordered, and another thread may start the DMA next. */
static void stream_copy(char *dst, const char *src, size_t n) {
#if defined(__SSE2__)
  size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
  if (head > n) head = n;
  memcpy(dst, src, head);
  dst += head, src += head, n -= head;
  size_t blocks = n / 64;
  for (size_t b = 0; b < blocks; b++, dst += 64, src += 64) {
    __m128i x0 = _mm_loadu_si128((const __m128i *)src), x1 = _mm_loadu_si128((const __m128i *)(src + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(src + 32)), x3 = _mm_loadu_si128((const __m128i *)(src + 48));
    _mm_stream_si128((__m128i *)dst, x0);
    _mm_stream_si128((__m128i *)(dst + 16), x1);
    _mm_stream_si128((__m128i *)(dst + 32), x2);
    _mm_stream_si128((__m128i *)(dst + 48), x3);
  }
  memcpy(dst, src, n % 64);
  _mm_sfence();
#else
  memcpy(dst, src, n);
#endif
}

static void stream_chunk(void *ctx, size_t i) {
  const copy_chunks *c = ctx;
  size_t off = i * c->chunk, len = c->n - off < c->chunk ? c->n - off : c->chunk;
  stream_copy(c->dst + off, c->src + off, len);
}

/* Copies at least this large stream (non-temporal stores) when they are whole
 * copies between plain host memory: they cannot stay in the last-level cache
 * anyway, and streaming saves reading each destination line before writing it.
 * One large memcpy of glibc does the same past a threshold derived from the cache
 * size, but a parallel copy's chunks are each below it: with ordinary stores, one
 * thread's 4 MiB pieces of a 256 MiB copy ran at 0.63x of one memcpy. */
static size_t stream_from(void) {
  static _Atomic size_t cached;
  size_t v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v) return v;
  long llc = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
  llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
  v = llc > 0 ? (size_t)llc : (size_t)32 << 20;
  if (v < ((size_t)4 << 20)) v = (size_t)4 << 20;
  atomic_store_explicit(&cached, v, memory_order_relaxed);
  return v;
}

typedef enum copy_use {
  COPY_PIECE,   /* a piece of a pipeline, or memory a driver maps: in chunks, as always */
  COPY_FOR_DMA, /* into memory a device reads by DMA: streaming stores */
  COPY_PLAIN,   /* a whole copy between plain host memory */
} copy_use;

static void parallel_copy(void *dst, const void *src, size_t n, copy_use use) {
  bool plain = use == COPY_PLAIN, stream = use == COPY_FOR_DMA || (plain && n >= stream_from());
  if (n < PARALLEL_MIN_HOT || (n < PARALLEL_MIN_COLD && !pool_hot()) || (plain && pool_workers() == 0)) {
    /* One call: one thread's memcpy of the whole range is never slower than its pieces. */
    if (use == COPY_FOR_DMA)
      stream_copy(dst, src, n);
    else
      memcpy(dst, src, n);
    return;
  }
  /* About four chunks per thread. */
  int workers = pool_workers();
  size_t chunk = ((n / ((size_t)(workers + 1) * 4)) + 4095) & ~(size_t)4095;
  if (chunk < CHUNK_MIN) chunk = CHUNK_MIN;
  if (chunk > CHUNK_MAX) chunk = CHUNK_MAX;
  copy_chunks c = {.dst = dst, .src = src, .n = n, .chunk = chunk};
  ferry_copy_job job = {.task = stream ? stream_chunk : copy_chunk, .ctx = &c, .count = (n + chunk - 1) / chunk};
  if (!ferry__copy_threads_start(&job)) {
    if (plain) { /* another thread's job has the workers: this one copies alone, in one call */
      memcpy(dst, src, n);
      return;
    }
    for (size_t i = 0; i < job.count; i++)
      job.task(&c, i);
    return;
  }
  ferry__copy_threads_help(&job);
  ferry__copy_threads_finish(&job);
}

void ferry__parallel_memcpy(void *dst, const void *src, size_t n) { parallel_copy(dst, src, n, COPY_PIECE); }

void ferry__parallel_memcpy_plain(void *dst, const void *src, size_t n) { parallel_copy(dst, src, n, COPY_PLAIN); }

void ferry__parallel_copy_for_dma(void *dst, const void *src, size_t n) { parallel_copy(dst, src, n, COPY_FOR_DMA); }

void ferry__copy_threads_hold(void) { atomic_fetch_add(&pool.holders, 1); }

void ferry__copy_threads_release(void) {
  atomic_store(&pool.last_job_ns, now_ns());
  atomic_fetch_sub(&pool.holders, 1);
}

void ferry__copy_threads_shutdown(void) {
  pthread_mutex_lock(&pool.lock);
  atomic_store(&pool.stop, true);
  pthread_cond_broadcast(&pool.wake);
  int n = pool.nthreads;
  pthread_t *threads = pool.threads;
  pthread_mutex_unlock(&pool.lock);
  for (int i = 0; i < n; i++)
    pthread_join(threads[i], NULL);
  free(threads);
  pthread_mutex_lock(&pool.lock);
  pool.threads = NULL;
  pool.nthreads = 0;
  pool.started = false;
  atomic_store(&pool.stop, false);
  pthread_mutex_unlock(&pool.lock);
}

void ferry__copy_threads_fork(ferry_fork_phase phase) {
  if (phase != FERRY_FORK_CHILD) return;
  /* The copy threads are the parent's and do not run here; the pool's locks and
   * condition may be held or waited on by them, so they start afresh. The list
   * of the parent's threads goes at the child's ferry_shutdown (nothing to join). */
  pthread_mutex_t fresh_lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t fresh_cond = PTHREAD_COND_INITIALIZER;
  pool.lock = fresh_lock;
  pool.busy = fresh_lock;
  pool.wake = fresh_cond;
  pool.nthreads = 0;
  atomic_store(&pool.job, NULL);
  atomic_store(&pool.active, 0);
  atomic_store(&pool.sleeping, 0);
  atomic_store(&pool.holders, 0);
}
