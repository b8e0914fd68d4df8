/*
 * The transfer engine: every transfer between host memory and a device, and
 * every copy between devices without a peer path, runs here, on the lanes it
 * is given (a queue's, or the device's lanes for the synchronous calls).
 *
 *  - ferry_mem.host (native buffers, mapped Vulkan buffers, CUDA host-pointer
 *    buffers): the core copies the bytes itself (on the copy threads).
 *  - Pinned memory the device can reach (a block of the pinned registry, or
 *    memory the driver pinned itself): one DMA.
 *  - Pageable memory: the driver's own call (write / read), or through a
 *    staging ring, piece by piece: the host copy of piece k (on the copy
 *    threads) overlaps the DMA of piece k-1. Which of the two, and the piece
 *    size, is the plan (engine_plan.c), made from figures measured per device
 *    and direction, or from FERRY_STAGE_MIN / FERRY_STAGE_BYTES.
 *  - Between two devices without a peer copy: the source's DMA into a pinned
 *    ring the destination can DMA from, the source reading piece k+1 while the
 *    destination writes piece k; no host copy. Where neither device can reach
 *    the other's memory, one side's driver call moves the bytes.
 *
 * A staged transfer takes a ring from its device's pool for its whole
 * duration and gives it back: rings belong to transfers, not to devices, so
 * two queues (or two threads) of one device stage at the same time, one to the
 * device while the other reads back. A pool holds at most RING_MAX rings
 * (64 MiB each on devices that stage, one of 4 MiB on CPU devices, for the odd
 * range they bounce); a transfer that finds them all taken waits for one.
 *
 * Two ways of running a pipeline (stage.c's queued transfers use the second):
 *  - as ready: each piece's DMA is pushed once its host copy is done (the
 *    synchronous calls: nothing else waits behind them on their lane);
 *  - ahead: every piece's DMA is pushed at once, each behind a gate that the
 *    host raises when the piece is in the ring, so that the whole transfer is
 *    in its lane's order when submission returns (ferry_write_async).
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RING_BYTES   ((size_t)64 << 20)
#define RING_MIN     ((size_t)4 << 20)
#define RING_MAX     8
#define MAX_SLOTS    16
#define MEASURE_SIZE ((size_t)8 << 20)  /* the largest piece the figures are measured on */
#define SEEN_MIN     ((size_t)64 << 20) /* staged transfers this large tell the plan their host copies' rate */

static _Atomic uint64_t host_copied;

uint64_t ferry__engine_host_copied(void) { return atomic_load(&host_copied); }

double ferry__now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* FERRY_DEBUG=engine: where the time of the first staged transfers of a device
 * goes (this thread's host copies, DMA starts and waits). */
static _Thread_local struct {
  bool on;
  double copy, start, wait;
} spent;

#define SPENT(field, call)                                                                                             \
  do {                                                                                                                 \
    double t0_ = spent.on ? ferry__now() : 0;                                                                          \
    call;                                                                                                              \
    if (spent.on) spent.field += ferry__now() - t0_;                                                                   \
  } while (0)

static void host_copy(void *dst, const void *src, size_t n) {
  SPENT(copy, ferry__parallel_memcpy(dst, src, n));
  atomic_fetch_add_explicit(&host_copied, n, memory_order_relaxed);
}

static void host_copy_for_dma(void *ring, const void *src, size_t n) {
  SPENT(copy, ferry__parallel_copy_for_dma(ring, src, n));
  atomic_fetch_add_explicit(&host_copied, n, memory_order_relaxed);
}

/* ---- tickets ------------------------------------------------------------------- */

ferry_status ferry__ticket_finish(ferry_device *dev, ferry_ticket t) {
  if (t == 0) return FERRY_OK;
  ferry_status st = dev->ops->ticket_wait(dev, t);
  dev->ops->ticket_release(dev, t);
  return st;
}

ferry_status ferry__ticket_poll(ferry_device *dev, ferry_ticket t) {
  if (t == 0) return FERRY_OK;
  return dev->ops->ticket_query ? dev->ops->ticket_query(dev, t) : dev->ops->ticket_wait(dev, t);
}

/* ---- per device ----------------------------------------------------------------- */

void ferry__engine_device_init(ferry_device *dev) {
  struct ferry_engine *e = &dev->state->engine;
  pthread_mutex_init(&e->lock, NULL);
  pthread_mutex_init(&e->measure_lock, NULL);
  pthread_mutex_init(&e->figures_lock, NULL);
  pthread_cond_init(&e->ring_returned, NULL);
  uint64_t v;
  /* Checked at ferry_init: FERRY_STAGE_BYTES 4K to 4G, FERRY_STAGE_MIN 0 to 2^62. */
  if (ferry__option_number("FERRY_STAGE_BYTES", &v)) e->piece_override = (size_t)v & ~(size_t)4095;
  if (ferry__option_number("FERRY_STAGE_MIN", &v)) {
    e->min_set = true;
    e->min_override = v > SIZE_MAX ? SIZE_MAX : (size_t)v;
  }
}

void ferry__engine_device_release(ferry_device *dev) {
  struct ferry_engine *e = &dev->state->engine;
  pthread_mutex_lock(&e->lock);
  while (e->free_rings) {
    ferry_ring *r = e->free_rings;
    e->free_rings = r->next;
    ferry__pinned_free(r->base, false);
    free(r);
    e->ring_count--;
  }
  pthread_mutex_unlock(&e->lock);
}

void ferry__engine_device_destroy(ferry_device *dev) {
  struct ferry_engine *e = &dev->state->engine;
  pthread_cond_destroy(&e->ring_returned);
  pthread_mutex_destroy(&e->figures_lock);
  pthread_mutex_destroy(&e->measure_lock);
  pthread_mutex_destroy(&e->lock);
}

ferry_figures ferry__engine_figures(ferry_device *dev, ferry_dma_dir dir) {
  struct ferry_engine *e = &dev->state->engine;
  pthread_mutex_lock(&e->figures_lock);
  ferry_figures f = e->figures[dir];
  if (e->copy_seen[dir] > 0 && f.copy_rate > e->copy_seen[dir]) f.copy_rate = e->copy_seen[dir];
  pthread_mutex_unlock(&e->figures_lock);
  return f;
}

/* What a large staged transfer's host copies reached. The measurement copies a
 * few MiB of the transfer's bytes twice, and keeps the faster: bytes a cache
 * holds. A large transfer's bytes come from memory (on an H100 host the plan
 * measured 121 GB/s where the copies of 1 GiB transfers ran at 30-59 GB/s), so
 * what such transfers reached caps the plan's copy rate, and the plan's
 * estimates follow what transfers take: an average that moves halfway to each
 * new transfer's rate, so that neither one fast transfer (the first of a
 * process may find the host idle) nor one at a bad moment sets it for good. */
static void copy_seen(ferry_device *dev, ferry_dma_dir dir, size_t n, double copy_s) {
  if (copy_s <= 0) return;
  struct ferry_engine *e = &dev->state->engine;
  double rate = (double)n / copy_s;
  pthread_mutex_lock(&e->figures_lock);
  e->copy_seen[dir] = e->copy_seen[dir] > 0 ? (e->copy_seen[dir] + rate) / 2 : rate;
  pthread_mutex_unlock(&e->figures_lock);
}

/* A new ring of the pool's size, or a smaller one; NULL when no pinned memory
 * can be had. With e->lock not held (pinning can take milliseconds). */
static ferry_ring *ring_make(ferry_device *dev) {
  struct ferry_engine *e = &dev->state->engine;
  size_t bytes = (dev->caps & FERRY_CAP_STAGE) ? RING_BYTES : RING_MIN; /* CPU devices: a bounce for odd cases */
  if (e->piece_override && e->piece_override > bytes / 4) bytes = e->piece_override * 4;
  ferry_ring *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  /* Failed tries at a larger ring are not the caller's failure. */
  ferry_error_scope scope = ferry__first_failure_begin(true);
  for (; bytes >= RING_MIN; bytes /= 2) {
    void *p = NULL;
    if (ferry__pinned_alloc(dev, bytes, false, &p) == FERRY_OK) {
      r->base = p;
      r->bytes = bytes;
      ferry__first_failure_end(scope);
      return r;
    }
  }
  ferry__first_failure_end(scope);
  free(r);
  return NULL;
}

ferry_ring *ferry__ring_take(ferry_device *dev) {
  struct ferry_engine *e = &dev->state->engine;
  pthread_mutex_lock(&e->lock);
  for (;;) {
    if (e->free_rings) {
      ferry_ring *r = e->free_rings;
      e->free_rings = r->next;
      pthread_mutex_unlock(&e->lock);
      return r;
    }
    if (e->ring_failed && e->ring_count == 0) break; /* no staging memory: direct transfers only */
    if (e->ring_count < RING_MAX && !e->ring_failed) {
      e->ring_count++;
      pthread_mutex_unlock(&e->lock);
      ferry_ring *r = ring_make(dev);
      pthread_mutex_lock(&e->lock);
      if (r) {
        pthread_mutex_unlock(&e->lock);
        return r;
      }
      e->ring_count--;
      e->ring_failed = true; /* the machine has no more to pin: use the rings there are */
      pthread_cond_broadcast(&e->ring_returned);
      continue;
    }
    pthread_cond_wait(&e->ring_returned, &e->lock);
  }
  pthread_mutex_unlock(&e->lock);
  return NULL;
}

void ferry__ring_give(ferry_device *dev, ferry_ring *r) {
  if (!r) return;
  struct ferry_engine *e = &dev->state->engine;
  pthread_mutex_lock(&e->lock);
  r->next = e->free_rings;
  e->free_rings = r;
  pthread_cond_signal(&e->ring_returned);
  pthread_mutex_unlock(&e->lock);
}

/* ---- moving pieces ----------------------------------------------------------------- */

ferry_side ferry__side_of(ferry_device *dev, ferry_lane *lane, ferry_mem *mem, size_t offset, char *ring,
                          size_t ring_bytes) {
  ferry_side s = {.dev = dev, .lane = lane, .mem = mem, .offset = offset};
  s.dma = dev->ops->dma_start && (dev->caps & FERRY_CAP_STAGE) && ferry__pinned_find(dev, ring, ring_bytes, &s.ring);
  return s;
}

/* A piece of the ring in flight: whose ticket, if any. */
typedef struct slot {
  ferry_device *dev;
  ferry_ticket ticket;
} slot;

/* Starts moving [at, at + n) of the transfer between the ring at `host` and
 * the device; by the driver's synchronous call where the device does not reach
 * the ring by DMA. */
static ferry_status side_start(const ferry_side *s, ferry_dma_dir dir, size_t at, char *host, size_t n, slot *sl) {
  ferry_device *dev = s->dev;
  if (!s->dma) {
    if (dir == FERRY_DMA_TO_DEVICE)
      return dev->ops->write ? dev->ops->write(dev, s->lane, s->mem, s->offset + at, host, n)
                             : ferry__fail(FERRY_ERROR_BACKEND, "%s can move bytes only by DMA", dev->label);
    return dev->ops->read ? dev->ops->read(dev, s->lane, s->mem, s->offset + at, host, n)
                          : ferry__fail(FERRY_ERROR_BACKEND, "%s can move bytes only by DMA", dev->label);
  }
  ferry_pinned p = ferry__pinned_at(&s->ring, host);
  ferry_ticket t = 0;
  ferry_status st;
  SPENT(start, st = dev->ops->dma_start(dev, s->lane, dir, s->mem, s->offset + at, &p, n, &t));
  if (st == FERRY_OK) *sl = (slot){.dev = dev, .ticket = t};
  return st;
}

static ferry_status slot_wait(slot *sl) {
  ferry_device *dev = sl->dev;
  if (!dev) return FERRY_OK;
  sl->dev = NULL;
  ferry_status st;
  SPENT(wait, st = ferry__ticket_finish(dev, sl->ticket));
  return st;
}

/* Waits for every slot in flight; the first failure (`st`, or a wait's) and its sentence win. */
static ferry_status drain(slot *slots, unsigned count, ferry_status st) {
  ferry_error_scope first = ferry__first_failure_begin(st != FERRY_OK);
  for (unsigned k = 0; k < count; k++) {
    ferry_status w = slot_wait(&slots[k]);
    if (st == FERRY_OK) st = w;
  }
  ferry__first_failure_end(first);
  return st;
}

unsigned ferry__slot_count(size_t ring_bytes, size_t piece) {
  size_t k = ring_bytes / piece;
  return k < 1 ? 1 : k > MAX_SLOTS ? MAX_SLOTS : (unsigned)k;
}

size_t ferry__piece_len(size_t total, size_t piece, size_t i) {
  size_t at = i * piece;
  return total - at < piece ? total - at : piece;
}

/* Host -> device through the ring: the host copy of piece i overlaps the DMA of
 * the pieces before it. The ring's slots are used from where the ring's last
 * transfer left off, so that a slot is written long after the DMA that last
 * read it (the host's writes to a line a DMA has just read are slower). A
 * transfer that fits the ring is copied in with stores that bypass the caches,
 * a larger one with plain stores (docs/PERFORMANCE.md has the figures). */
void ferry__ring_copy_in(const ferry_ring *r, size_t n, bool dma, void *slot, const void *src, size_t len) {
  if (dma && n <= r->bytes)
    host_copy_for_dma(slot, src, len);
  else
    host_copy(slot, src, len);
}

static ferry_status pipe_write(ferry_ring *r, const ferry_side *d, const char *src, size_t n, size_t piece) {
  slot slots[MAX_SLOTS] = {{0}};
  unsigned k_count = ferry__slot_count(r->bytes, piece), first = (unsigned)(r->next_slot % k_count);
  size_t pieces = (n + piece - 1) / piece;
  ferry_status st = FERRY_OK;
  for (size_t i = 0; i < pieces && st == FERRY_OK; i++) {
    unsigned k = (unsigned)((first + i) % k_count);
    char *host = r->base + (size_t)k * piece;
    size_t len = ferry__piece_len(n, piece, i);
    if ((st = slot_wait(&slots[k])) != FERRY_OK) break;
    ferry__ring_copy_in(r, n, d->dma, host, src + i * piece, len);
    st = side_start(d, FERRY_DMA_TO_DEVICE, i * piece, host, len, &slots[k]);
  }
  r->next_slot = first + pieces;
  return drain(slots, k_count, st);
}

/* Device -> host through the ring: the device runs up to a ring ahead of the host copies. */
static ferry_status pipe_read(ferry_ring *r, const ferry_side *s, char *dst, size_t n, size_t piece) {
  slot slots[MAX_SLOTS] = {{0}};
  unsigned k_count = ferry__slot_count(r->bytes, piece), first = (unsigned)(r->next_slot % k_count);
  size_t pieces = (n + piece - 1) / piece, next = 0;
  ferry_status st = FERRY_OK;
  for (size_t i = 0; i < pieces && st == FERRY_OK; i++) {
    for (; next < pieces && next < i + k_count && st == FERRY_OK; next++) {
      unsigned k = (unsigned)((first + next) % k_count);
      st = side_start(s, FERRY_DMA_TO_HOST, next * piece, r->base + (size_t)k * piece, ferry__piece_len(n, piece, next),
                      &slots[k]);
    }
    unsigned k = (unsigned)((first + i) % k_count);
    if (st != FERRY_OK || (st = slot_wait(&slots[k])) != FERRY_OK) break;
    host_copy(dst + i * piece, r->base + (size_t)k * piece, ferry__piece_len(n, piece, i));
  }
  r->next_slot = first + pieces;
  return drain(slots, k_count, st);
}

/* Device A -> device B through the ring, no host copy: A reads up to a ring
 * ahead; B's writes of the two pieces before are in flight while A's next read
 * waits for a slot. */
static ferry_status pipe_cross(ferry_ring *r, const ferry_side *a, const ferry_side *b, size_t n, size_t piece) {
  slot slots[MAX_SLOTS] = {{0}};
  unsigned k_count = ferry__slot_count(r->bytes, piece);
  size_t lag = k_count >= 4 ? 2 : 1; /* B's writes left in flight */
  size_t pieces = (n + piece - 1) / piece, next = 0;
  ferry_status st = FERRY_OK;
  for (size_t i = 0; i < pieces && st == FERRY_OK; i++) {
    for (; next < pieces && next + lag <= i + k_count && st == FERRY_OK; next++) {
      unsigned k = (unsigned)(next % k_count);
      if ((st = slot_wait(&slots[k])) != FERRY_OK) break; /* B's write of the piece a ring before */
      st = side_start(a, FERRY_DMA_TO_HOST, next * piece, r->base + (size_t)k * piece, ferry__piece_len(n, piece, next),
                      &slots[k]);
    }
    unsigned k = (unsigned)(i % k_count);
    if (st != FERRY_OK || (st = slot_wait(&slots[k])) != FERRY_OK) break;
    st = side_start(b, FERRY_DMA_TO_DEVICE, i * piece, r->base + (size_t)k * piece, ferry__piece_len(n, piece, i),
                    &slots[k]);
  }
  return drain(slots, k_count, st);
}

/* One DMA between pinned memory and the device, waited for. */
static ferry_status dma_now(ferry_device *dev, ferry_lane *lane, ferry_dma_dir dir, ferry_mem *mem, size_t offset,
                            const ferry_pinned *pin, size_t n) {
  ferry_ticket t = 0;
  ferry_status st = dev->ops->dma_start(dev, lane, dir, mem, offset, pin, n, &t);
  return st == FERRY_OK ? ferry__ticket_finish(dev, t) : st;
}

/* ---- measuring a device ------------------------------------------------------------- */

/* Seconds one call of `what` takes, the faster of two. */
typedef ferry_status (*timed_fn)(void *ctx, size_t n);

static ferry_status time_it(timed_fn fn, void *ctx, size_t n, int runs, double *out) {
  double best = 0;
  for (int r = 0; r < runs; r++) {
    double t0 = ferry__now();
    ferry_status st = fn(ctx, n);
    double t = ferry__now() - t0;
    if (st != FERRY_OK) return st;
    if (r == 0 || t < best) best = t;
  }
  *out = best;
  return FERRY_OK;
}

typedef struct measure_ctx {
  const ferry_side *s;
  ferry_dma_dir dir;
  char *ring, *user; /* the transfer's own host bytes */
} measure_ctx;

static ferry_status time_direct(void *p, size_t n) {
  measure_ctx *c = p;
  ferry_device *dev = c->s->dev;
  return c->dir == FERRY_DMA_TO_DEVICE ? dev->ops->write(dev, c->s->lane, c->s->mem, c->s->offset, c->user, n)
                                       : dev->ops->read(dev, c->s->lane, c->s->mem, c->s->offset, c->user, n);
}

static ferry_status time_copy(void *p, size_t n) {
  measure_ctx *c = p;
  if (c->dir == FERRY_DMA_TO_DEVICE)
    ferry__parallel_copy_for_dma(c->ring, c->user, n); /* as pipe_write copies what fits the ring */
  else
    ferry__parallel_memcpy(c->user, c->ring, n);
  return FERRY_OK;
}

static ferry_status time_dma(void *p, size_t n) {
  measure_ctx *c = p;
  slot sl = {0};
  ferry_status st = side_start(c->s, c->dir, 0, c->ring, n, &sl);
  return st == FERRY_OK ? slot_wait(&sl) : st;
}

/* Fits fixed + bytes / rate through two timings. */
static void fit(size_t small, double t_small, size_t large, double t_large, double *fixed, double *rate) {
  double per_byte = (t_large - t_small) / (double)(large - small);
  if (per_byte <= 0) per_byte = t_large / (double)large;
  *rate = 1.0 / per_byte;
  *fixed = t_small - (double)small * per_byte;
  if (*fixed < 0) *fixed = 0;
}

/* Measures the device's figures for one direction on the transfer's own first
 * bytes: every byte this moves is one the transfer moves too (a write sends
 * src's first bytes to their place, a read brings the device's to dst), so a
 * transfer that fails later has changed nothing it would not have. With the
 * measure lock held and the transfer's ring taken. */
static ferry_status measure(struct ferry_engine *e, ferry_ring *r, const ferry_side *s, ferry_dma_dir dir, char *user,
                            size_t n) {
  size_t large = MEASURE_SIZE;
  if (large > n / 2) large = (n / 2) & ~(size_t)4095;
  if (large > r->bytes) large = r->bytes;
  size_t small = large / 4;
  measure_ctx c = {.s = s, .dir = dir, .ring = r->base, .user = user};
  ferry_figures f = {.measured = true};
  double t_small = 0, t_large = 0;
  ferry_status st = FERRY_OK;
  ferry__copy_threads_hold();
  if (dir == FERRY_DMA_TO_DEVICE) { /* the ring holds the source's bytes before they go out */
    if ((st = time_it(time_copy, &c, small, 2, &t_small)) == FERRY_OK &&
        (st = time_it(time_copy, &c, large, 2, &t_large)) == FERRY_OK)
      fit(small, t_small, large, t_large, &f.copy_fixed, &f.copy_rate);
  }
  if (st == FERRY_OK && (st = time_it(time_dma, &c, small, 2, &t_small)) == FERRY_OK &&
      (st = time_it(time_dma, &c, large, 2, &t_large)) == FERRY_OK)
    fit(small, t_small, large, t_large, &f.dma_fixed, &f.dma_rate);
  for (int rep = 0; rep < 2 && st == FERRY_OK; rep++) { /* the start alone */
    slot sl = {0};
    double t0 = ferry__now();
    st = side_start(s, dir, 0, r->base, small, &sl);
    double t = ferry__now() - t0;
    ferry_status w = slot_wait(&sl);
    if (st == FERRY_OK) st = w;
    if (rep == 0 || t < f.dma_issue) f.dma_issue = t;
  }
  if (st == FERRY_OK && dir == FERRY_DMA_TO_HOST) { /* the ring holds the device's bytes now */
    if ((st = time_it(time_copy, &c, small, 2, &t_small)) == FERRY_OK &&
        (st = time_it(time_copy, &c, large, 2, &t_large)) == FERRY_OK)
      fit(small, t_small, large, t_large, &f.copy_fixed, &f.copy_rate);
  }
  ferry__copy_threads_release();
  if (st != FERRY_OK) return st;
  bool direct = dir == FERRY_DMA_TO_DEVICE ? s->dev->ops->write != NULL : s->dev->ops->read != NULL;
  if (direct) {
    double t = 0;
    st = time_it(time_direct, &c, large, 2, &t);
    if (st == FERRY_OK)
      f.direct_rate = t > 0 ? (double)large / t : 0;
    else if (st == FERRY_ERROR_UNSUPPORTED)
      st = FERRY_OK; /* no direct path for this memory: staged it is */
    else
      return st;
  }
  /* A first measurement can be taken at a bad moment (another process's burst,
   * a cold driver); the device's figures are the best of the first few rounds,
   * each part on its own. */
  pthread_mutex_lock(&e->figures_lock);
  if (atomic_load_explicit(&e->measured[dir], memory_order_acquire)) {
    const ferry_figures *o = &e->figures[dir];
    if (o->direct_rate > f.direct_rate) f.direct_rate = o->direct_rate;
    if (o->copy_rate > f.copy_rate) f.copy_rate = o->copy_rate, f.copy_fixed = o->copy_fixed;
    if (o->dma_rate > f.dma_rate) f.dma_rate = o->dma_rate, f.dma_fixed = o->dma_fixed;
    if (o->dma_issue < f.dma_issue) f.dma_issue = o->dma_issue;
  }
  e->figures[dir] = f;
  pthread_mutex_unlock(&e->figures_lock);
  atomic_fetch_add_explicit(&e->rounds[dir], 1, memory_order_relaxed);
  atomic_store_explicit(&e->measured[dir], true, memory_order_release);
  if (ferry__option_has_word("FERRY_DEBUG", "engine")) ferry__engine_report(s->dev, dir);
  return FERRY_OK;
}

/* ---- host <-> device ------------------------------------------------------------------ */

bool ferry__pinned_for(ferry_device *dev, const void *ptr, size_t n, bool ask_driver, ferry_pinned *pin) {
  if (!dev->ops->dma_start || !(dev->caps & FERRY_CAP_STAGE)) return false;
  if (ferry__pinned_find(dev, ptr, n, pin)) return true;
  if (ask_driver && dev->ops->host_pinned && dev->ops->host_pinned(dev, ptr, n)) {
    *pin = (ferry_pinned){.host = (void *)(uintptr_t)ptr, .token = 0, .offset = 0};
    return true;
  }
  return false;
}

/* Describes a staged transfer under FERRY_DEBUG=engine: where its time went. */
static void report_staged(ferry_device *dev, ferry_dma_dir dir, size_t n, size_t piece, double t, double estimate) {
  fprintf(stderr,
          "ferry: engine: %s: %zu bytes %s in pieces of %zu: %.1f us (estimate %.1f): host copies %.1f, DMA "
          "starts %.1f, waits %.1f, the rest %.1f\n",
          dev->label, n, dir == FERRY_DMA_TO_DEVICE ? "to the device" : "to the host", piece, t * 1e6, estimate * 1e6,
          spent.copy * 1e6, spent.start * 1e6, spent.wait * 1e6, (t - spent.copy - spent.start - spent.wait) * 1e6);
}

/* Pageable memory through a ring, measuring the device first where its plan says so. */
static ferry_status staged(ferry_device *dev, ferry_lane *lane, ferry_dma_dir dir, ferry_mem *mem, size_t offset,
                           char *host, size_t n, ferry_plan plan) {
  struct ferry_engine *e = &dev->state->engine;
  ferry_ring *r = ferry__ring_take(dev);
  ferry_status st = FERRY_OK;
  bool direct = r == NULL;
  if (!direct) {
    ferry_side s = ferry__side_of(dev, lane, mem, offset, r->base, r->bytes);
    if (plan.measure) {
      /* Measured once: another transfer may have measured the device while
       * this one waited for the lock, and the plan reads the figures without it. */
      pthread_mutex_lock(&e->measure_lock);
      if (ferry__engine_wants_round(e, dir)) st = measure(e, r, &s, dir, host, n);
      pthread_mutex_unlock(&e->measure_lock);
      if (st == FERRY_OK) {
        plan = ferry__engine_plan(dev, dir, n);
        direct = plan.direct;
      }
    }
    if (plan.piece > r->bytes / 2) plan.piece = r->bytes / 2; /* a smaller ring than asked */
    if (st == FERRY_OK && !direct) {
      bool report = atomic_load(&e->measured[dir]) && ferry__option_has_word("FERRY_DEBUG", "engine") &&
                    atomic_fetch_add(&e->reports, 1) < 4;
      bool seen = n >= SEEN_MIN && s.dma; /* a few clock reads per piece */
      spent.on = report || seen;
      spent.copy = spent.start = spent.wait = 0;
      double t0 = report ? ferry__now() : 0, estimate = 0;
      if (report) {
        ferry_figures f = ferry__engine_figures(dev, dir);
        estimate = ferry__engine_estimate(&f, n, plan.piece);
      }
      ferry__copy_threads_hold();
      st = dir == FERRY_DMA_TO_DEVICE ? pipe_write(r, &s, host, n, plan.piece) : pipe_read(r, &s, host, n, plan.piece);
      ferry__copy_threads_release();
      if (seen && st == FERRY_OK) copy_seen(dev, dir, n, spent.copy);
      if (report) report_staged(dev, dir, n, plan.piece, ferry__now() - t0, estimate);
      spent.on = false;
    }
    ferry__ring_give(dev, r);
  }
  if (!direct || st != FERRY_OK) return st;
  if (dir == FERRY_DMA_TO_DEVICE && dev->ops->write) return dev->ops->write(dev, lane, mem, offset, host, n);
  if (dir == FERRY_DMA_TO_HOST && dev->ops->read) return dev->ops->read(dev, lane, mem, offset, host, n);
  return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no staging memory for %s, which moves bytes only by DMA", dev->label);
}

/* A range the backend refused to move itself (it lies in the allocation's own
 * array), on a device that does not stage: through a copy of the whole range,
 * so that every source byte is read before any is written. */
static ferry_status bounce_whole(ferry_device *dev, ferry_lane *lane, ferry_dma_dir dir, ferry_mem *mem, size_t offset,
                                 char *host, size_t n) {
  char *tmp = malloc(n);
  if (!tmp) {
    char text[64];
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for a %s bounce buffer on %s",
                       ferry__bytes_text(n, text), dev->label);
  }
  ferry_status st;
  if (dir == FERRY_DMA_TO_DEVICE) {
    memcpy(tmp, host, n);
    st = dev->ops->write(dev, lane, mem, offset, tmp, n);
  } else if ((st = dev->ops->read(dev, lane, mem, offset, tmp, n)) == FERRY_OK) {
    memcpy(host, tmp, n);
  }
  free(tmp);
  if (st == FERRY_ERROR_UNSUPPORTED)
    st = ferry__fail(FERRY_ERROR_BACKEND, "%s refused a transfer through a bounce buffer", dev->label);
  return st;
}

/* The driver's own call where the plan says so; staged where it says so, or
 * where the backend cannot move this range itself. */
static ferry_status pageable(ferry_device *dev, ferry_lane *lane, ferry_dma_dir dir, ferry_mem *mem, size_t offset,
                             char *host, size_t n) {
  ferry_plan plan = ferry__engine_plan(dev, dir, n);
  if (plan.direct) {
    ferry_status st = FERRY_ERROR_UNSUPPORTED;
    if (dir == FERRY_DMA_TO_DEVICE && dev->ops->write) st = dev->ops->write(dev, lane, mem, offset, host, n);
    if (dir == FERRY_DMA_TO_HOST && dev->ops->read) st = dev->ops->read(dev, lane, mem, offset, host, n);
    if (st != FERRY_ERROR_UNSUPPORTED) return st;
    if (!(dev->caps & FERRY_CAP_STAGE)) return bounce_whole(dev, lane, dir, mem, offset, host, n);
    plan.direct = false; /* the backend cannot move this range itself: staged it is */
  }
  ferry_pinned pin;
  if (ferry__pinned_for(dev, host, n, true, &pin)) return dma_now(dev, lane, dir, mem, offset, &pin, n);
  return staged(dev, lane, dir, mem, offset, host, n, plan);
}

ferry_status ferry__engine_write(ferry_device *dev, ferry_lane *lane, ferry_mem *dst, size_t offset, const void *src,
                                 size_t n) {
  if (n == 0) return FERRY_OK;
  if (dst->host) {
    ferry__plain_move((char *)dst->host + offset, src, n);
    return FERRY_OK;
  }
  ferry_pinned pin;
  if (ferry__pinned_for(dev, src, n, false, &pin)) return dma_now(dev, lane, FERRY_DMA_TO_DEVICE, dst, offset, &pin, n);
  return pageable(dev, lane, FERRY_DMA_TO_DEVICE, dst, offset, (char *)(uintptr_t)src, n);
}

ferry_status ferry__engine_read(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t offset, void *dst,
                                size_t n) {
  if (n == 0) return FERRY_OK;
  if (src->host) {
    ferry__plain_move(dst, (const char *)src->host + offset, n);
    return FERRY_OK;
  }
  /* The backend reads from mem without changing it; the DMA interface takes one pointer for both ways. */
  ferry_mem *mem = (ferry_mem *)(uintptr_t)src;
  ferry_pinned pin;
  if (ferry__pinned_for(dev, dst, n, false, &pin)) return dma_now(dev, lane, FERRY_DMA_TO_HOST, mem, offset, &pin, n);
  return pageable(dev, lane, FERRY_DMA_TO_HOST, mem, offset, dst, n);
}

/* ---- device <-> device ------------------------------------------------------------------ */

/* The piece of a copy between devices: a quarter of the ring, or of the copy
 * when it is smaller (so that even a small copy overlaps), at least 256 KiB. */
static size_t cross_piece(const struct ferry_engine *e, const ferry_ring *r, size_t n) {
  if (e->piece_override) return e->piece_override < r->bytes / 2 ? e->piece_override : r->bytes / 2;
  size_t piece = ((n / 4) + 4095) & ~(size_t)4095, floor = (size_t)256 << 10, ceiling = r->bytes / 4;
  if (piece < floor) piece = floor;
  return piece < ceiling ? piece : ceiling;
}

/* Through a ring of `owner`'s pool, if it has one and both sides can use it as
 * asked (need_both_dma: both reach it by DMA). */
static bool cross_through(ferry_device *owner, bool need_both_dma, const ferry_copy_ends *c, ferry_status *out) {
  ferry_ring *r = ferry__ring_take(owner);
  if (!r) return false;
  ferry_side a = ferry__side_of(c->sdev, c->slane, (ferry_mem *)(uintptr_t)c->src, c->so, r->base, r->bytes);
  ferry_side b = ferry__side_of(c->ddev, c->dlane, c->dst, c->doff, r->base, r->bytes);
  bool take = need_both_dma ? a.dma && b.dma : true;
  if (take) *out = pipe_cross(r, &a, &b, c->n, cross_piece(&owner->state->engine, r, c->n));
  ferry__ring_give(owner, r);
  return take;
}

ferry_status ferry__engine_copy(const ferry_copy_ends *c) {
  if (c->n == 0) return FERRY_OK;
  if (c->src->host)
    return ferry__engine_write(c->ddev, c->dlane, c->dst, c->doff, (const char *)c->src->host + c->so, c->n);
  if (c->dst->host) return ferry__engine_read(c->sdev, c->slane, c->src, c->so, (char *)c->dst->host + c->doff, c->n);
  ferry_status st = FERRY_OK;
  ferry_device *sdev = c->sdev, *ddev = c->ddev;
  /* A ring both devices reach by DMA: the source's, else the destination's. */
  bool s_stages = (sdev->caps & FERRY_CAP_STAGE) != 0, d_stages = (ddev->caps & FERRY_CAP_STAGE) != 0;
  if (s_stages && d_stages && (cross_through(sdev, true, c, &st) || cross_through(ddev, true, c, &st))) return st;
  /* Else the ring of a device that stages (its DMA one side, the other's driver
   * call the other), or any ring at all. */
  ferry_device *owner = s_stages || !d_stages ? sdev : ddev;
  if (cross_through(owner, false, c, &st) || cross_through(owner == sdev ? ddev : sdev, false, c, &st)) return st;
  return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory to stage a copy from %s to %s", sdev->label,
                     ddev->label);
}
