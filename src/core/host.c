/*
 * Host memory the core keeps track of: pinned blocks from ferry_host_alloc, the
 * ranges under live host-ptr buffers, and a small pool of threads for large host
 * copies (one core's memcpy reaches a third of what the memory system can do).
 */
#include "internal.h"

#include "../backends/native/host_info.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- ranges under host-ptr buffers --------------------------------------- */

typedef struct host_range {
  uintptr_t start, end;
} host_range;

static struct {
  pthread_mutex_t lock;
  host_range *items;
  size_t count, capacity;
} ranges = {.lock = PTHREAD_MUTEX_INITIALIZER};

ferry_status ferry__host_ranges_claim(const char *fn, const void *ptr, size_t bytes) {
  uintptr_t start = (uintptr_t)ptr, end = start + bytes;
  ferry_status st = FERRY_OK;
  pthread_mutex_lock(&ranges.lock);
  for (size_t i = 0; i < ranges.count && st == FERRY_OK; i++)
    if (start < ranges.items[i].end && ranges.items[i].start < end) st = FERRY_ERROR_REFUSED;
  if (st == FERRY_OK && ranges.count == ranges.capacity) {
    size_t cap = ranges.capacity ? ranges.capacity * 2 : 16;
    host_range *grown = ferry__core_alloc(ranges.items, cap * sizeof *grown);
    if (grown) {
      ranges.items = grown;
      ranges.capacity = cap;
    } else {
      st = ferry__fail(FERRY_ERROR_OUT_OF_MEMORY,
                       "%s: no host memory to record the range of a host-pointer buffer (%zu bytes for %zu ranges)", fn,
                       cap * sizeof *grown, cap);
    }
  }
  if (st == FERRY_OK) ranges.items[ranges.count++] = (host_range){start, end};
  pthread_mutex_unlock(&ranges.lock);
  return st;
}

void ferry__host_ranges_unclaim(const void *ptr) {
  pthread_mutex_lock(&ranges.lock);
  for (size_t i = 0; i < ranges.count; i++) {
    if (ranges.items[i].start == (uintptr_t)ptr) {
      ranges.items[i] = ranges.items[--ranges.count];
      break;
    }
  }
  pthread_mutex_unlock(&ranges.lock);
}

/* ---- pinned blocks --------------------------------------------------------- */

typedef struct pinned_block {
  uintptr_t start;
  size_t bytes;
  ferry_device *device;
  bool internal; /* ferry's own (staging slots): not the user's to free */
} pinned_block;

/* Sorted by start, so that "is this range pinned?" is a binary search. */
static struct {
  pthread_rwlock_t lock;
  pinned_block *items;
  size_t count, capacity;
} pinned = {.lock = PTHREAD_RWLOCK_INITIALIZER};

/* Index of the first block starting after p. */
static size_t pinned_upper(uintptr_t p) {
  size_t lo = 0, hi = pinned.count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (pinned.items[mid].start <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static void host_block_free(ferry_device *dev, void *ptr, size_t bytes) {
  if (dev->ops->host_free)
    dev->ops->host_free(dev, ptr, bytes);
  else
    free(ptr);
}

/* Allocates a block with the backend (or page-aligned malloc) and registers it. */
static ferry_status host_block_new(const char *fn, ferry_device *device, size_t bytes, bool internal, void **out_ptr) {
  void *ptr = NULL;
  ferry_status st;
  if (device->ops->host_alloc) {
    st = device->ops->host_alloc(device, bytes, &ptr);
    if (st != FERRY_OK) return ferry__fail(st, "%s: %s", fn, ferry__error_text());
  } else {
    size_t rounded = (bytes + 4095) & ~(size_t)4095;
    if (rounded < bytes || posix_memalign(&ptr, 4096, rounded) != 0) {
      char text[64];
      return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for %s", fn, ferry__bytes_text(bytes, text));
    }
  }
  pthread_rwlock_wrlock(&pinned.lock);
  if (pinned.count == pinned.capacity) {
    size_t cap = pinned.capacity ? pinned.capacity * 2 : 16;
    pinned_block *grown = realloc(pinned.items, cap * sizeof *grown);
    if (!grown) {
      pthread_rwlock_unlock(&pinned.lock);
      host_block_free(device, ptr, bytes);
      return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory to track a pinned block", fn);
    }
    pinned.items = grown;
    pinned.capacity = cap;
  }
  size_t at = pinned_upper((uintptr_t)ptr);
  memmove(&pinned.items[at + 1], &pinned.items[at], (pinned.count - at) * sizeof pinned.items[0]);
  pinned.items[at] = (pinned_block){(uintptr_t)ptr, bytes, device, internal};
  pinned.count++;
  pthread_rwlock_unlock(&pinned.lock);
  *out_ptr = ptr;
  return FERRY_OK;
}

/* Unregisters the block starting at ptr; false if there is none (of that kind). */
static bool host_block_remove(void *ptr, bool internal, pinned_block *out) {
  pthread_rwlock_wrlock(&pinned.lock);
  size_t at = pinned_upper((uintptr_t)ptr);
  if (at == 0 || pinned.items[at - 1].start != (uintptr_t)ptr || pinned.items[at - 1].internal != internal) {
    pthread_rwlock_unlock(&pinned.lock);
    return false;
  }
  *out = pinned.items[at - 1];
  memmove(&pinned.items[at - 1], &pinned.items[at], (pinned.count - at) * sizeof pinned.items[0]);
  pinned.count--;
  pthread_rwlock_unlock(&pinned.lock);
  return true;
}

static ferry_status host_too_big(const char *fn, size_t bytes) {
  char a[64], b[64];
  return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: %s asked, but this machine has %s of memory", fn,
                     ferry__bytes_text(bytes, a), ferry__bytes_text(ferry__host_memory(), b));
}

ferry_status ferry_host_alloc(ferry_device *device, size_t bytes, void **out_ptr) {
  static const char fn[] = "ferry_host_alloc";
  ferry_status st = ferry__enter_device(device, fn);
  if (st != FERRY_OK) return st;
  if (!out_ptr)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_ptr is NULL", fn);
  else if (bytes == 0)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: bytes is 0", fn);
  else if (bytes > ferry__host_memory()) /* never handed to an allocator: sanitizers abort on such sizes */
    st = host_too_big(fn, bytes);
  else
    st = host_block_new(fn, device, bytes, false, out_ptr);
  ferry__leave();
  return st;
}

ferry_status ferry__host_alloc_internal(ferry_device *dev, size_t bytes, void **out) {
  return host_block_new("staging", dev, bytes, true, out);
}

void ferry__host_free_internal(void *ptr) {
  pinned_block block;
  if (host_block_remove(ptr, true, &block)) host_block_free(block.device, ptr, block.bytes);
}

ferry_status ferry_host_free(void *ptr) {
  static const char fn[] = "ferry_host_free";
  if (!ptr) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: ptr is NULL", fn);
  /* Inside the gate: the block's device must outlive its free. */
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  pinned_block block;
  if (host_block_remove(ptr, false, &block))
    host_block_free(block.device, ptr, block.bytes);
  else
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                     "%s: %p did not come from ferry_host_alloc (or was released already)", fn, ptr);
  ferry__leave();
  return st;
}

bool ferry__host_is_pinned(const ferry_backend *backend, const void *ptr, size_t bytes) {
  bool yes = false;
  pthread_rwlock_rdlock(&pinned.lock);
  size_t at = pinned_upper((uintptr_t)ptr);
  if (at > 0) {
    const pinned_block *b = &pinned.items[at - 1];
    yes = b->device->backend == backend && (uintptr_t)ptr - b->start <= b->bytes &&
          bytes <= b->bytes - ((uintptr_t)ptr - b->start);
  }
  pthread_rwlock_unlock(&pinned.lock);
  return yes;
}

/* Empties both lists. The blocks go back to their devices when `free_blocks` (a
 * shutdown); a forked child leaves them (they are its parent's drivers'). */
static void host_lists_clear(bool free_blocks) {
  pthread_rwlock_wrlock(&pinned.lock);
  for (size_t i = 0; free_blocks && i < pinned.count; i++)
    host_block_free(pinned.items[i].device, (void *)pinned.items[i].start, pinned.items[i].bytes);
  free(pinned.items);
  pinned.items = NULL;
  pinned.count = pinned.capacity = 0;
  pthread_rwlock_unlock(&pinned.lock);
  pthread_mutex_lock(&ranges.lock);
  free(ranges.items);
  ranges.items = NULL;
  ranges.count = ranges.capacity = 0;
  pthread_mutex_unlock(&ranges.lock);
}

void ferry__host_shutdown(void) { host_lists_clear(true); }

/* ---- fork() ---------------------------------------------------------------- */

void ferry__host_forget(void) { host_lists_clear(false); }

static void copy_pool_after_fork(void);

void ferry__host_fork(ferry_fork_phase phase) {
  if (phase == FERRY_FORK_PREPARE) {
    pthread_mutex_lock(&ranges.lock);
    pthread_rwlock_wrlock(&pinned.lock);
    return;
  }
  pthread_rwlock_unlock(&pinned.lock);
  if (phase == FERRY_FORK_CHILD) {
    /* glibc's write lock remembers its writer's thread id, which differs in the
     * child, so the unlock above did not release it (it only balances the
     * sanitizers' books): the child's lock starts afresh. */
    pthread_rwlock_t fresh = PTHREAD_RWLOCK_INITIALIZER;
    pinned.lock = fresh;
    copy_pool_after_fork();
  }
  pthread_mutex_unlock(&ranges.lock);
}

/* ---- parallel host copies ----------------------------------------------- */

/* One copy in progress. It lives on the caller's stack; workers reach it only
 * while the pool's `job` points at it, and the caller waits for every worker
 * to let go before returning. */
typedef struct copy_job {
  char *dst;
  const char *src;
  size_t n, chunk, chunks;
  _Atomic size_t next;
} copy_job;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake, idle;
  pthread_mutex_t busy; /* one parallel copy at a time; others copy on their own */
  pthread_t *threads;
  int nthreads; /* workers started, besides the caller */
  bool started, stop;
  copy_job *job;
  uint64_t generation; /* counts jobs, so a worker joins each one once */
  int active;          /* workers inside the job */
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .idle = PTHREAD_COND_INITIALIZER,
          .busy = PTHREAD_MUTEX_INITIALIZER};

static void copy_chunks(copy_job *job) {
  size_t i;
  while ((i = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed)) < job->chunks) {
    size_t off = i * job->chunk;
    size_t len = job->n - off < job->chunk ? job->n - off : job->chunk;
    memcpy(job->dst + off, job->src + off, len);
  }
}

static void *copy_worker(void *arg) {
  (void)arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&pool.lock);
  for (;;) {
    while (!pool.stop && (!pool.job || pool.generation == seen))
      pthread_cond_wait(&pool.wake, &pool.lock);
    if (pool.stop) break;
    copy_job *job = pool.job;
    seen = pool.generation;
    pool.active++;
    pthread_mutex_unlock(&pool.lock);
    copy_chunks(job);
    pthread_mutex_lock(&pool.lock);
    pool.active--;
    if (pool.active == 0) pthread_cond_broadcast(&pool.idle);
  }
  pthread_mutex_unlock(&pool.lock);
  return NULL;
}

/* Threads to use: FERRY_COPY_THREADS, else the processors online, at most 16;
 * but none besides the caller's on machines of fewer than 4 processors, where a
 * second thread gains little (1.15x of memcpy at best on 2 cores) and loses much
 * as soon as anything else runs (0.75x measured under load). */
static int copy_thread_count(void) {
  uint64_t set;
  if (ferry__option_number("FERRY_COPY_THREADS", &set)) return (int)set; /* 1 to 64, checked at ferry_init */
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 4) return 1;
  return n > 16 ? 16 : (int)n;
}

static void pool_start(void) {
  int want = copy_thread_count() - 1;
  pool.started = true;
  if (want <= 0) return;
  pool.threads = calloc((size_t)want, sizeof *pool.threads);
  if (!pool.threads) return;
  for (int i = 0; i < want; i++) {
    if (pthread_create(&pool.threads[i], NULL, copy_worker, NULL) != 0) break;
    pool.nthreads++;
  }
}

/* Below this a single memcpy wins: handing work to the pool costs ~15 us on a
 * small machine (measured with ferry bench: 0.6x of memcpy at 1 MiB). */
#define PARALLEL_MIN ((size_t)4 << 20)

void ferry__parallel_memcpy(void *dst, const void *src, size_t n) {
  if (n < PARALLEL_MIN || pthread_mutex_trylock(&pool.busy) != 0) {
    memcpy(dst, src, n);
    return;
  }
  pthread_mutex_lock(&pool.lock);
  if (!pool.started) pool_start();
  int workers = pool.nthreads;
  pthread_mutex_unlock(&pool.lock);
  if (workers == 0) {
    pthread_mutex_unlock(&pool.busy);
    memcpy(dst, src, n);
    return;
  }
  /* Many pieces per thread, taken in turn: a thread that is descheduled (a busy
   * machine) then holds up the copy by one small piece, not by its share.
   * Between 256 KiB (below, handing out costs) and 4 MiB. */
  size_t chunk = ((n / ((size_t)(workers + 1) * 8)) + 4095) & ~(size_t)4095;
  if (chunk < ((size_t)256 << 10)) chunk = (size_t)256 << 10;
  if (chunk > ((size_t)4 << 20)) chunk = (size_t)4 << 20;
  copy_job job = {.dst = dst, .src = src, .n = n, .chunk = chunk, .chunks = (n + chunk - 1) / chunk};
  atomic_init(&job.next, 0);
  pthread_mutex_lock(&pool.lock);
  pool.job = &job;
  pool.generation++;
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  copy_chunks(&job);
  pthread_mutex_lock(&pool.lock);
  pool.job = NULL;
  while (pool.active > 0)
    pthread_cond_wait(&pool.idle, &pool.lock);
  pthread_mutex_unlock(&pool.lock);
  pthread_mutex_unlock(&pool.busy);
}

void ferry__host_move(void *dst, const void *src, size_t n) {
  uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
  if (d == s) return;
  if (d < s + n && s < d + n)
    memmove(dst, src, n);
  else
    ferry__parallel_memcpy(dst, src, n);
}

/* In a forked child: the copy threads are the parent's and do not run here; the
 * pool's locks and conditions may be held or waited on by them, so they start
 * afresh. The list of the parent's threads goes at the child's ferry_shutdown. */
static void copy_pool_after_fork(void) {
  pthread_mutex_t fresh_lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t fresh_cond = PTHREAD_COND_INITIALIZER;
  pool.lock = fresh_lock;
  pool.busy = fresh_lock;
  pool.wake = fresh_cond;
  pool.idle = fresh_cond;
  pool.nthreads = 0;
  pool.job = NULL;
  pool.active = 0;
}

void ferry__copy_pool_shutdown(void) {
  pthread_mutex_lock(&pool.lock);
  pool.stop = true;
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  for (int i = 0; i < pool.nthreads; i++)
    pthread_join(pool.threads[i], NULL);
  free(pool.threads);
  pthread_mutex_lock(&pool.lock);
  pool.threads = NULL;
  pool.nthreads = 0;
  pool.started = false;
  pool.stop = false;
  pthread_mutex_unlock(&pool.lock);
}
