/*
 * Queues: operations run in the order submitted, asynchronously.
 *
 * A queue has a lane (the backend's ordered native queue) and, once it gets
 * work with a host part, a thread. Each submitted operation becomes an entry:
 *
 *  - direct: everything it does is device work (a DMA from pinned memory, a
 *    copy within the device, a fill, a marker, a wait on another lane's
 *    ticket), pushed on the lane at submission;
 *  - staged (stage.c): pageable memory to or from a device, or a copy between
 *    devices, whose DMAs are pushed at submission behind gates that the
 *    queue's thread raises as it copies the pieces;
 *  - host: work only the host can do (host memory of a buffer, a wait for
 *    another device's capture, everything on devices without lanes), run by
 *    the queue's thread after a marker of the earlier work, with a gate on the
 *    lane that holds the later work until it is done.
 *
 * So an operation is in the lane's order when submission returns, and work the
 * program pushes itself on the lane (ferry_queue_native) runs after it; the
 * lane never waits for work pushed after it (stage.c says why that matters).
 * On a device with lanes but without gates, work is pushed by the queue's
 * thread as it comes, and operations submitted while a host part is pending go
 * to the thread too.
 *
 * Entries retire in order once complete: their device part's ticket has
 * completed (a ticketless direct entry counts as complete once a later entry
 * is) and their host part has run. Retiring releases what the operation held
 * (buffers, staging rings, tickets, gates) and completes captures. Whoever
 * waits retires; the queue's thread does too when it has nothing else to do,
 * so that staging rings come back without anyone waiting.
 */
#include "queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TICKET_EVERY 64 /* a direct entry gets a ticket at least this often, so entries retire without a wait */

/* ---- handles and references ------------------------------------------------------------ */

ferry_status ferry__queue_acquire(ferry_queue queue, const char *fn, ferry_queue_obj **out) {
  ferry_queue_obj *q = ferry__object_get(FERRY_OBJECT_QUEUE, queue.id);
  if (!q)
    return ferry__fail(FERRY_ERROR_STALE_HANDLE,
                       "%s: queue handle 0x%llx is not a live queue (destroyed, from before ferry_shutdown(), or "
                       "never made)",
                       fn, (unsigned long long)queue.id);
  *out = q;
  return FERRY_OK;
}

void ferry__queue_ref(ferry_queue_obj *q) { ferry__object_hold(FERRY_OBJECT_QUEUE, q->id); }

static void queue_release_lane(ferry_queue_obj *q);

static void queue_free(ferry_queue_obj *q) {
  if (q->lane_pending_release) queue_release_lane(q);
  while (q->free_entries) {
    q_entry *e = q->free_entries;
    q->free_entries = e->next;
    free(e);
  }
  pthread_cond_destroy(&q->changed);
  pthread_mutex_destroy(&q->lock);
  free(q);
}

void ferry__queue_unref(ferry_queue_obj *q) {
  if (ferry__object_put(FERRY_OBJECT_QUEUE, q->id)) queue_free(q);
}

ferry_device *ferry__queue_device(const ferry_queue_obj *q) { return q->dev; }

/* "queue 0x100000001 of device 0 (cuda: NVIDIA H200)" */
static const char *queue_text(const ferry_queue_obj *q, char buf[400]) {
  snprintf(buf, 400, "%s queue 0x%llx of %s", q->is_default ? "the default" : "", (unsigned long long)q->id,
           q->dev->label);
  return q->is_default ? buf : buf + 1;
}

/* ---- entries ---------------------------------------------------------------------------- */

static q_entry *entry_new(ferry_queue_obj *q) {
  q_entry *e = q->free_entries;
  if (e)
    q->free_entries = e->next;
  else if (!(e = malloc(sizeof *e)))
    return NULL;
  memset(e, 0, sizeof *e);
  return e;
}

static void entry_append(ferry_queue_obj *q, q_entry *e) {
  e->seq = ++q->next_seq;
  if (q->tail)
    q->tail->next = e;
  else
    q->head = e;
  q->tail = e;
  atomic_fetch_add(&q->pending, 1);
}

/* What an entry holds, released once it retired (without the queue's lock:
 * the last reference to a buffer frees its memory through the backend). */
static void entry_cleanup(ferry_queue_obj *q, q_entry *e) {
  ferry_device *dev = q->dev;
  if (e->status == FERRY_OK && !e->cancelled && e->mode != ENTRY_HOST) ferry__op_count(&e->op);
  if (e->ticket && e->ticket_owned) dev->ops->ticket_release(dev, e->ticket);
  if (e->start) dev->ops->ticket_release(dev, e->start);
  if (e->gate) dev->ops->gate_destroy(dev, e->gate);
  ferry__stage_free(e->stage);
  if (e->has_tmp) ferry__mem_release(dev, &e->tmp, e->tmp_class);
  ferry__op_release(&e->op);
  free(e->text);
}

/* Records the first failure not yet reported. */
static void note_failure(ferry_queue_obj *q, q_entry *e, ferry_status st) {
  e->status = st;
  if (atomic_load(&q->failing)) return;
  ferry__op_failed(st, &e->op);
  snprintf(q->fail_text, sizeof q->fail_text, "%s", ferry__error_text());
  q->fail_status = st;
  q->fail_seq = e->seq;
  q->cancel_below = UINT64_MAX;
  q->not_run = q->ran_after = 0;
  atomic_store(&q->failing, true);
}

/* Is the entry's own work complete? Polls its ticket (the lock held). */
static bool entry_complete(ferry_queue_obj *q, q_entry *e) {
  if (!e->host_done || e->needs_witness) return false;
  if (!e->ticket || e->ticket_done) return true;
  /* A thread waits for its ticket outside the lock, and retires it: retired here,
   * the ticket would be released while that thread's driver call still uses it. */
  if (q->waiting && q->waited == e) return false;
  ferry_status st = ferry__ticket_poll(q->dev, e->ticket);
  if (st == FERRY_NOT_READY) return false;
  e->ticket_done = true;
  if (st != FERRY_OK) note_failure(q, e, st);
  return true;
}

/* Unlinks the head (complete) onto `done`. */
static void retire_head(ferry_queue_obj *q, q_entry **done) {
  q_entry *e = q->head;
  if (e->op.kind == FERRY_OP_MARKER && e->op.capture) {
    ferry_capture *c = e->op.capture;
    if (c->host_time == 0) c->host_time = ferry__now();
    atomic_store_explicit(&c->done, true, memory_order_release);
  }
  q->head = e->next;
  if (!q->head) q->tail = NULL;
  if (atomic_load(&q->failing) && e->seq > q->fail_seq) {
    if (e->cancelled)
      q->not_run++;
    else if (e->mode == ENTRY_DIRECT)
      q->ran_after++;
  }
  e->next = *done;
  *done = e;
  atomic_fetch_add(&q->unreleased, 1);
  atomic_fetch_sub(&q->pending, 1);
}

/* Retires every complete entry at the head; returns them for cleanup. */
static q_entry *retire_locked(ferry_queue_obj *q) {
  q_entry *done = NULL;
  while (q->head) {
    q_entry *e = q->head;
    if (e->needs_witness) {
      /* A run of ticketless direct entries completes with the entry after it. */
      q_entry *w = e;
      while (w && w->needs_witness)
        w = w->next;
      if (!w || !entry_complete(q, w)) break;
      while (q->head != w)
        retire_head(q, &done);
      continue;
    }
    if (!entry_complete(q, e)) break;
    retire_head(q, &done);
  }
  if (done) pthread_cond_broadcast(&q->changed);
  return done;
}

/* ---- releasing on queue threads ------------------------------------------------------------
 *
 * What a retired entry holds is released by the thread that retired it, but
 * not by a queue's thread: the last reference to a buffer frees its memory
 * through the driver, and some drivers' frees wait for every stream of the
 * device (cuMemFree, cuMemHostUnregister), one of which may be waiting for a
 * gate that this very thread raises later. Queue threads hand their retired
 * entries to the releaser, a thread that waits for nothing else. */

static _Thread_local bool on_queue_thread;
static _Atomic unsigned releaser_pending; /* batches handed over and not yet released */

typedef struct release_batch {
  struct release_batch *next;
  ferry_queue_obj *q; /* held */
  q_entry *done;
} release_batch;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t work, idle;
  release_batch *head;
  bool started, stopping, busy;
  pthread_t thread;
} releaser = {.lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER};

static void cleanup_all(ferry_queue_obj *q, q_entry *done);

static void *releaser_thread(void *arg) {
  (void)arg;
  pthread_mutex_lock(&releaser.lock);
  for (;;) {
    release_batch *b = releaser.head;
    if (b) {
      releaser.head = b->next;
      releaser.busy = true;
      pthread_mutex_unlock(&releaser.lock);
      cleanup_all(b->q, b->done);
      ferry__queue_unref(b->q);
      free(b);
      pthread_mutex_lock(&releaser.lock);
      atomic_fetch_sub(&releaser_pending, 1);
      releaser.busy = false;
      if (!releaser.head) pthread_cond_broadcast(&releaser.idle);
      continue;
    }
    if (releaser.stopping) break;
    pthread_cond_wait(&releaser.work, &releaser.lock);
  }
  pthread_mutex_unlock(&releaser.lock);
  return NULL;
}

/* Releases what retired entries hold, now or (on a queue's thread) on the releaser. */
static void release_done(ferry_queue_obj *q, q_entry *done) {
  if (!done) return;
  if (!on_queue_thread) {
    cleanup_all(q, done);
    return;
  }
  release_batch *b = malloc(sizeof *b);
  pthread_mutex_lock(&releaser.lock);
  if (b && !releaser.started && pthread_create(&releaser.thread, NULL, releaser_thread, NULL) == 0)
    releaser.started = true;
  if (!b || !releaser.started) {
    pthread_mutex_unlock(&releaser.lock);
    free(b);
    cleanup_all(q, done); /* no memory for the hand-over: release here, as before queues had threads */
    return;
  }
  ferry__queue_ref(q);
  *b = (release_batch){.q = q, .done = done};
  release_batch **tail = &releaser.head;
  while (*tail)
    tail = &(*tail)->next;
  *tail = b;
  atomic_fetch_add(&releaser_pending, 1);
  pthread_cond_signal(&releaser.work);
  pthread_mutex_unlock(&releaser.lock);
}

/* Waits until the releaser has released everything handed to it. */
static void releaser_flush(void) {
  if (!atomic_load_explicit(&releaser_pending, memory_order_acquire)) return;
  pthread_mutex_lock(&releaser.lock);
  while (releaser.head || releaser.busy)
    pthread_cond_wait(&releaser.idle, &releaser.lock);
  pthread_mutex_unlock(&releaser.lock);
}

void ferry__queues_releaser_stop(void) {
  releaser_flush();
  pthread_mutex_lock(&releaser.lock);
  bool started = releaser.started;
  releaser.stopping = true;
  pthread_cond_broadcast(&releaser.work);
  pthread_mutex_unlock(&releaser.lock);
  if (started) pthread_join(releaser.thread, NULL);
  pthread_mutex_lock(&releaser.lock);
  releaser.started = releaser.stopping = false;
  pthread_mutex_unlock(&releaser.lock);
}

void ferry__queues_releaser_forget(void) {
  /* In a forked child: the thread is the parent's; what it held goes with the parent's session. */
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c1 = PTHREAD_COND_INITIALIZER, c2 = PTHREAD_COND_INITIALIZER;
  releaser.lock = lock;
  releaser.work = c1;
  releaser.idle = c2;
  releaser.head = NULL;
  releaser.started = releaser.stopping = releaser.busy = false;
  atomic_store(&releaser_pending, 0);
}

static void cleanup_all(ferry_queue_obj *q, q_entry *done) {
  /* In submission order: they were pushed onto `done` newest first. */
  q_entry *ordered = NULL;
  while (done) {
    q_entry *next = done->next;
    done->next = ordered;
    ordered = done;
    done = next;
  }
  q_entry *e = ordered, *last = NULL;
  uint64_t count = 0;
  for (; e; last = e, e = e->next, count++)
    entry_cleanup(q, e);
  if (last) {
    pthread_mutex_lock(&q->lock);
    last->next = q->free_entries;
    q->free_entries = ordered;
    atomic_fetch_sub(&q->unreleased, count);
    pthread_cond_broadcast(&q->changed); /* a wait for the release may end */
    pthread_mutex_unlock(&q->lock);
  }
}

/* A ticketless run at the tail has nothing after it to complete with: a
 * marker of the lane's work so far becomes the last one's ticket. */
static void flush_tail_locked(ferry_queue_obj *q) {
  q_entry *t = q->tail;
  if (!t || !t->needs_witness) return;
  ferry_ticket tk = 0;
  if (q->dev->ops->marker(q->dev, q->lane, false, &tk) == FERRY_OK) {
    t->ticket = tk;
    t->ticket_owned = true;
    t->needs_witness = false;
    q->ticketless = 0;
  } else {
    /* The driver cannot mark the lane: wait for all of it instead. */
    t->needs_witness = false;
    note_failure(q, t, FERRY_ERROR_BACKEND);
  }
}

/* One blocking step towards retiring the head (the lock held; it is dropped
 * while waiting). */
static void wait_step_locked(ferry_queue_obj *q) {
  q_entry *e = q->head;
  if (!e) return;
  while (e && e->needs_witness)
    e = e->next;
  if (!e) {
    flush_tail_locked(q);
    return;
  }
  if (!e->host_done || q->waiting || !e->ticket || e->ticket_done || e != q->head) {
    if (e != q->head && e->host_done && e->ticket && !e->ticket_done && !q->waiting) {
      /* the witness of a ticketless run: wait for it like the head */
    } else {
      pthread_cond_wait(&q->changed, &q->lock);
      return;
    }
  }
  q->waiting = true;
  q->waited = e;
  ferry_ticket t = e->ticket;
  pthread_mutex_unlock(&q->lock);
  ferry_status st = q->dev->ops->ticket_wait(q->dev, t);
  pthread_mutex_lock(&q->lock);
  q->waiting = false;
  q->waited = NULL;
  e->ticket_done = true;
  if (st != FERRY_OK) note_failure(q, e, st);
  pthread_cond_broadcast(&q->changed);
}

static bool seq_retired(const ferry_queue_obj *q, uint64_t seq) { return !q->head || q->head->seq > seq; }

void ferry__queue_wait_seq(ferry_queue_obj *q, uint64_t seq) {
  pthread_mutex_lock(&q->lock);
  if (seq == 0) seq = q->next_seq;
  for (;;) {
    q_entry *done = retire_locked(q);
    if (done) {
      pthread_mutex_unlock(&q->lock);
      release_done(q, done);
      pthread_mutex_lock(&q->lock);
      continue;
    }
    if (seq_retired(q, seq)) break;
    wait_step_locked(q);
  }
  /* What the queue's thread retired is released by the time a program's wait
   * returns: a buffer freed after a synchronize is gone at once. (Not on a
   * queue's thread: see the releaser.) */
  while (!on_queue_thread && atomic_load(&q->unreleased) > 0)
    pthread_cond_wait(&q->changed, &q->lock);
  pthread_mutex_unlock(&q->lock);
}

bool ferry__queue_poll_seq(ferry_queue_obj *q, uint64_t seq) {
  pthread_mutex_lock(&q->lock);
  if (seq == 0) seq = q->next_seq;
  if (q->tail && q->tail->seq <= seq) flush_tail_locked(q);
  q_entry *done = retire_locked(q);
  bool retired = seq_retired(q, seq);
  pthread_mutex_unlock(&q->lock);
  release_done(q, done);
  return retired;
}

/* ---- failures ----------------------------------------------------------------------------- */

ferry_status ferry__queue_report(ferry_queue_obj *q, const char *fn, uint64_t seq) {
  if (!atomic_load(&q->failing)) return FERRY_OK;
  pthread_mutex_lock(&q->lock);
  ferry_status st = FERRY_OK;
  if (atomic_load(&q->failing) && q->fail_seq < seq) {
    /* Behind the failure: the entries retired already, and those still in flight. */
    unsigned not_run = q->not_run, ran = q->ran_after;
    for (q_entry *e = q->head; e; e = e->next)
      if (e->seq > q->fail_seq) {
        if (e->mode == ENTRY_DIRECT)
          ran++;
        else if (!e->host_taken || e->cancelled)
          not_run++;
      }
    char qt[400], tail[200];
    if (not_run)
      snprintf(tail, sizeof tail, "; %u operation%s submitted behind it %s not run%s", not_run, not_run == 1 ? "" : "s",
               not_run == 1 ? "was" : "were", ran ? " (the device had already taken the ones it runs itself)" : "");
    else if (ran)
      snprintf(tail, sizeof tail, "; the %u operation%s submitted behind it %s already in the device's own queue", ran,
               ran == 1 ? "" : "s", ran == 1 ? "was" : "were");
    else
      snprintf(tail, sizeof tail, "; no operation was submitted behind it");
    st = ferry__fail(q->fail_status, "%s: %s failed: %s%s", fn, queue_text(q, qt), q->fail_text, tail);
    atomic_store(&q->failing, false);
    q->cancel_below = q->next_seq + 1; /* what was submitted before the report stays cancelled */
  }
  pthread_mutex_unlock(&q->lock);
  return st;
}

/* The sentence of a submission refused while a failure waits to be reported. */
static ferry_status cancelled(ferry_queue_obj *q, const char *fn) {
  char qt[400];
  return ferry__fail(FERRY_ERROR_CANCELLED,
                     "%s: not submitted: an earlier operation on %s failed (%s); ferry_queue_synchronize (or "
                     "ferry_device_synchronize) reports it and lets the queue work again",
                     fn, queue_text(q, qt), q->fail_text);
}

/* ---- the queue's thread -------------------------------------------------------------------- */

static q_entry *next_host_locked(ferry_queue_obj *q) {
  for (q_entry *e = q->head; e; e = e->next)
    if (!e->host_taken && e->mode != ENTRY_DIRECT) return e;
  return NULL;
}

static ferry_lanes host_lanes(const ferry_queue_obj *q) {
  /* On a device with gates the queue's lane only takes work at submission;
   * whatever the host part moves goes through the synchronous lanes. */
  if (q->gates || !q->lane) return (ferry_lanes){0};
  return (ferry_lanes){.queue_dev = q->dev, .queue_lane = q->lane};
}

static ferry_status run_host(ferry_queue_obj *q, q_entry *e) {
  ferry_device *dev = q->dev;
  ferry_status st = FERRY_OK;
  if (e->start) st = dev->ops->ticket_wait(dev, e->start);
  if (e->cancelled) {
    if (e->stage) (void)ferry__stage_run(e->stage, true);
  } else if (st != FERRY_OK) {
    if (e->stage) (void)ferry__stage_run(e->stage, true);
  } else if (e->mode == ENTRY_STAGED) {
    st = ferry__stage_run(e->stage, false);
  } else if (e->op.kind == FERRY_OP_MARKER) {
    ferry_capture *c = e->op.capture;
    ferry_ticket t = 0;
    if (q->lane && dev->ops->marker && (st = dev->ops->marker(dev, q->lane, true, &t)) == FERRY_OK && t) {
      atomic_store_explicit(&c->ticket, t, memory_order_release);
      st = dev->ops->ticket_wait(dev, t);
    }
    c->host_time = ferry__now();
  } else if (e->op.kind == FERRY_OP_WAIT) {
    ferry__capture_wait(e->op.capture);
  } else {
    st = ferry__op_run(&e->op, host_lanes(q));
    if (st != FERRY_OK) return st; /* op_run's sentence names the operation */
  }
  if (e->gate) (void)dev->ops->gate_raise(dev, e->gate, 1);
  if (st != FERRY_OK && !e->cancelled) ferry__op_failed(st, &e->op);
  return st;
}

static void *queue_thread(void *arg) {
  ferry_queue_obj *q = arg;
  on_queue_thread = true;
  pthread_mutex_lock(&q->lock);
  for (;;) {
    q_entry *e = next_host_locked(q);
    if (e) {
      e->host_taken = true;
      if (atomic_load(&q->failing) && e->seq > q->fail_seq && e->seq < q->cancel_below) e->cancelled = true;
      pthread_mutex_unlock(&q->lock);
      ferry_status st = run_host(q, e);
      char text[1024];
      snprintf(text, sizeof text, "%s", ferry__error_text());
      pthread_mutex_lock(&q->lock);
      e->host_done = true;
      q->host_queued--;
      if (st != FERRY_OK && !e->cancelled) {
        if (!atomic_load(&q->failing)) {
          snprintf(q->fail_text, sizeof q->fail_text, "%s", text);
          q->fail_status = st;
          q->fail_seq = e->seq;
          q->cancel_below = UINT64_MAX;
          q->not_run = q->ran_after = 0;
          atomic_store(&q->failing, true);
        }
        e->status = st;
      } else if (e->cancelled) {
        e->status = FERRY_ERROR_CANCELLED;
      }
      pthread_cond_broadcast(&q->changed);
      continue;
    }
    /* Nothing to run: retire what completes, so that rings and buffers go back. */
    q_entry *done = retire_locked(q);
    if (done) {
      pthread_mutex_unlock(&q->lock);
      release_done(q, done);
      pthread_mutex_lock(&q->lock);
      continue;
    }
    if (q->stopping) break;
    q_entry *h = q->head;
    if (h && h->mode != ENTRY_DIRECT && h->host_done && h->ticket && !h->ticket_done && !q->waiting)
      wait_step_locked(q); /* a staged entry's last DMA: its ring comes back once it is done */
    else
      pthread_cond_wait(&q->changed, &q->lock);
  }
  pthread_mutex_unlock(&q->lock);
  return NULL;
}

/* Starts the queue's thread (the lock held). */
static ferry_status thread_ensure(ferry_queue_obj *q, const char *fn) {
  if (q->thread_started) return FERRY_OK;
  int rc = pthread_create(&q->thread, NULL, queue_thread, q);
  if (rc != 0)
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: the queue's thread could not be started (pthread_create: %s)",
                       fn, strerror(rc));
  q->thread_started = true;
  return FERRY_OK;
}

/* ---- submission --------------------------------------------------------------------------- */

typedef enum plan_kind { PLAN_NOTHING, PLAN_DIRECT, PLAN_HOST, PLAN_STAGED } plan_kind;

/* Direct pushes that the backend refused once (FERRY_ERROR_UNSUPPORTED), so
 * that the next classification takes another way. */
enum { REFUSED_WRITE_START = 1, REFUSED_READ_START = 2, REFUSED_PEER = 4, REFUSED_LANE_WAIT = 8, REFUSED_FILL = 16 };

/* Whether the device's lanes can move n bytes at offsets a and b
 * (FERRY_CAP_LANE_WORDS: whole words at word offsets only). */
static bool lane_fits(const ferry_device *dev, size_t a, size_t b, size_t n) {
  return !(dev->caps & FERRY_CAP_LANE_WORDS) || ((a | b | n) & 3) == 0;
}

typedef struct plan {
  plan_kind kind;
  ferry_stage_request req; /* PLAN_STAGED */
  /* PLAN_DIRECT: a DMA between pinned host memory and one buffer (WRITE, READ,
   * or a COPY between a buffer and another's host memory). */
  bool dma;
  ferry_dma_dir dir;
  ferry_slot *dma_slot;
  size_t dma_offset;
  ferry_pinned pin;
  /* PLAN_DIRECT: the same transfer through the backend's write_start or
   * read_start, from or to pageable host memory. */
  bool host_start;
  void *host;
  unsigned refused;
} plan;

/* A transfer between host memory at `host` and a buffer of the queue's device. */
static plan_kind host_transfer(ferry_queue_obj *q, plan *p, ferry_dma_dir dir, ferry_slot *slot, size_t offset,
                               void *host, size_t n) {
  ferry_device *dev = q->dev;
  if (slot->mem.host || !lane_fits(dev, offset, (uintptr_t)host, n)) return PLAN_HOST;
  if (ferry__pinned_for(dev, host, n, n >= ((size_t)64 << 10), &p->pin)) {
    p->dma = true;
    p->dir = dir;
    p->dma_slot = slot;
    p->dma_offset = offset;
    return PLAN_DIRECT;
  }
  if (dir == FERRY_DMA_TO_DEVICE ? dev->ops->write_start && !(p->refused & REFUSED_WRITE_START)
                                 : dev->ops->read_start && !(p->refused & REFUSED_READ_START)) {
    p->host_start = true;
    p->dir = dir;
    p->dma_slot = slot;
    p->dma_offset = offset;
    p->host = host;
    return PLAN_DIRECT;
  }
  if (q->gates && ferry__stage_possible(dev)) {
    p->req = (ferry_stage_request){
        .kind = dir == FERRY_DMA_TO_DEVICE ? FERRY_OP_WRITE : FERRY_OP_READ, .n = n, .host = host, .ring_dev = dev};
    if (dir == FERRY_DMA_TO_DEVICE) {
      p->req.b_dev = dev;
      p->req.b_lane = q->lane;
      p->req.b_mem = &slot->mem;
      p->req.b_offset = offset;
    } else {
      p->req.a_dev = dev;
      p->req.a_lane = q->lane;
      p->req.a_mem = &slot->mem;
      p->req.a_offset = offset;
    }
    return PLAN_STAGED;
  }
  return PLAN_HOST;
}

/* The queue's lane on another device, made at first use (NULL where that
 * device has no lanes); false where none can be had (the copy then runs on
 * the queue's thread). */
static bool side_lane(ferry_queue_obj *q, ferry_device *other, ferry_lane **out) {
  *out = NULL;
  if (!other->ops->lane_create) return true;
  bool found = false;
  pthread_mutex_lock(&q->lock);
  for (unsigned i = 0; i < q->sides && !found; i++)
    if (q->side[i].dev == other) {
      *out = q->side[i].lane;
      found = true;
    }
  if (!found && q->sides < FERRY__QUEUE_SIDES) {
    /* A device that cannot give a lane is no failure: the copy runs on the thread. */
    ferry_error_scope quiet = ferry__first_failure_begin(true);
    if (other->ops->lane_create(other, out) == FERRY_OK) {
      q->side[q->sides].dev = other;
      q->side[q->sides].lane = *out;
      q->sides++;
      found = true;
    }
    ferry__first_failure_end(quiet);
  }
  pthread_mutex_unlock(&q->lock);
  return found;
}

static plan_kind classify(ferry_queue_obj *q, const ferry_op *op, plan *p) {
  ferry_device *dev = q->dev;
  p->dma = false;
  p->host_start = false;
  if (!q->lane) return PLAN_HOST; /* devices without lanes: everything on the queue's thread */
  switch (op->kind) {
  case FERRY_OP_MARKER: return PLAN_DIRECT;
  case FERRY_OP_WAIT:
    if (ferry__capture_done(op->capture)) return PLAN_NOTHING;
    return atomic_load_explicit(&op->capture->ticket, memory_order_acquire) && dev->ops->lane_wait &&
                   !(p->refused & REFUSED_LANE_WAIT)
               ? PLAN_DIRECT
               : PLAN_HOST;
  case FERRY_OP_FILL:
    if (op->bytes == 0) return dev->ops->check ? PLAN_HOST : PLAN_NOTHING;
    return op->dst->mem.host || !dev->ops->fill_start || (p->refused & REFUSED_FILL) ||
                   !lane_fits(dev, op->dst_offset, 0, op->bytes)
               ? PLAN_HOST
               : PLAN_DIRECT;
  case FERRY_OP_WRITE:
    if (op->bytes == 0) return dev->ops->check ? PLAN_HOST : PLAN_NOTHING;
    if (ferry__op_own_bytes(op->dst, op->dst_offset, op->host)) return PLAN_HOST;
    return host_transfer(q, p, FERRY_DMA_TO_DEVICE, op->dst, op->dst_offset, op->host, op->bytes);
  case FERRY_OP_READ:
    if (op->bytes == 0) return dev->ops->check ? PLAN_HOST : PLAN_NOTHING;
    if (ferry__op_own_bytes(op->src, op->src_offset, op->host)) return PLAN_HOST;
    return host_transfer(q, p, FERRY_DMA_TO_HOST, op->src, op->src_offset, op->host, op->bytes);
  case FERRY_OP_COPY: break;
  }
  ferry_slot *s = op->src, *d = op->dst;
  ferry_device *sdev = s->device, *ddev = d->device;
  size_t n = op->bytes;
  if (n == 0 || (s == d && op->src_offset == op->dst_offset))
    return sdev->ops->check || ddev->ops->check ? PLAN_HOST : PLAN_NOTHING;
  if (s->mem.host && d->mem.host) return PLAN_HOST;
  /* A buffer whose bytes are host memory, on one side: a transfer of the other. */
  if (s->mem.host)
    return ddev == dev
               ? host_transfer(q, p, FERRY_DMA_TO_DEVICE, d, op->dst_offset, (char *)s->mem.host + op->src_offset, n)
               : PLAN_HOST;
  if (d->mem.host)
    return sdev == dev
               ? host_transfer(q, p, FERRY_DMA_TO_HOST, s, op->src_offset, (char *)d->mem.host + op->dst_offset, n)
               : PLAN_HOST;
  if (!lane_fits(sdev, op->src_offset, 0, n) || !lane_fits(ddev, op->dst_offset, 0, n)) return PLAN_HOST;
  if (sdev == ddev) return PLAN_DIRECT;
  if (sdev->backend == ddev->backend && sdev->ops->peer_start && !(p->refused & REFUSED_PEER)) return PLAN_DIRECT;
  /* Between devices through a ring: the queue's side pushed ahead. */
  if (!q->gates || !ferry__stage_possible(dev)) return PLAN_HOST;
  ferry_lane *other_lane = NULL;
  if (!side_lane(q, sdev == dev ? ddev : sdev, &other_lane)) return PLAN_HOST;
  p->req = (ferry_stage_request){.kind = FERRY_OP_COPY,
                                 .n = n,
                                 .ring_dev = dev,
                                 .a_dev = sdev,
                                 .a_lane = sdev == dev ? q->lane : other_lane,
                                 .a_mem = &s->mem,
                                 .a_offset = op->src_offset,
                                 .b_dev = ddev,
                                 .b_lane = ddev == dev ? q->lane : other_lane,
                                 .b_mem = &d->mem,
                                 .b_offset = op->dst_offset};
  return PLAN_STAGED;
}

/* Pushes a direct entry's work (the lock held); FERRY_ERROR_UNSUPPORTED
 * without a message when the backend refused the way the plan took. */
static ferry_status push_direct(ferry_queue_obj *q, q_entry *e, plan *p, bool want_ticket) {
  ferry_device *dev = q->dev;
  ferry_lane *lane = q->lane;
  ferry_op *op = &e->op;
  ferry_ticket t = 0, *out = want_ticket ? &t : NULL;
  ferry_status st;
  if (p->dma) {
    st = dev->ops->dma_start(dev, lane, p->dir, &p->dma_slot->mem, p->dma_offset, &p->pin, op->bytes, out);
  } else if (p->host_start) {
    if (p->dir == FERRY_DMA_TO_DEVICE) {
      st = dev->ops->write_start(dev, lane, &p->dma_slot->mem, p->dma_offset, p->host, op->bytes, out);
      if (st == FERRY_ERROR_UNSUPPORTED) p->refused |= REFUSED_WRITE_START;
    } else {
      st = dev->ops->read_start(dev, lane, &p->dma_slot->mem, p->dma_offset, p->host, op->bytes, out);
      if (st == FERRY_ERROR_UNSUPPORTED) p->refused |= REFUSED_READ_START;
    }
  } else {
    switch (op->kind) {
    case FERRY_OP_MARKER: {
      ferry_ticket t = 0;
      st = dev->ops->marker(dev, lane, true, &t);
      if (st != FERRY_OK) t = 0;
      e->ticket = t; /* the capture's: it keeps it for ferry_event_elapsed */
      atomic_store_explicit(&op->capture->ticket, t, memory_order_release);
    }
      e->ticket_owned = false;
      return st;
    case FERRY_OP_WAIT:
      st = dev->ops->lane_wait(dev, lane, op->capture->dev,
                               atomic_load_explicit(&op->capture->ticket, memory_order_acquire));
      if (st == FERRY_ERROR_UNSUPPORTED) p->refused |= REFUSED_LANE_WAIT;
      break;
    case FERRY_OP_FILL:
      st =
          dev->ops->fill_start(dev, lane, &op->dst->mem, op->dst_offset, op->bytes, op->pattern, op->pattern_size, out);
      if (st == FERRY_ERROR_UNSUPPORTED) p->refused |= REFUSED_FILL; /* a pattern the device cannot fill */
      break;
    default: {
      ferry_slot *s = op->src, *d = op->dst;
      if (s->device != d->device) {
        st = dev->ops->peer_start(dev, lane, s->device, &s->mem, op->src_offset, d->device, &d->mem, op->dst_offset,
                                  op->bytes, out);
        if (st == FERRY_ERROR_UNSUPPORTED) p->refused |= REFUSED_PEER;
        break;
      }
      bool overlapping =
          s == d && op->src_offset < op->dst_offset + op->bytes && op->dst_offset < op->src_offset + op->bytes;
      if (!overlapping || (dev->caps & FERRY_CAP_OVERLAP_COPY)) {
        st = dev->ops->copy_start(dev, lane, &s->mem, op->src_offset, &d->mem, op->dst_offset, op->bytes, out);
        break;
      }
      /* Through a temporary, which the entry keeps until it retires. */
      if ((st = ferry__mem_alloc(dev, op->bytes, &e->tmp, &e->tmp_class)) != FERRY_OK) return st;
      e->has_tmp = true;
      if ((st = dev->ops->copy_start(dev, lane, &s->mem, op->src_offset, &e->tmp, 0, op->bytes, NULL)) == FERRY_OK)
        st = dev->ops->copy_start(dev, lane, &e->tmp, 0, &d->mem, op->dst_offset, op->bytes, out);
      break;
    }
    }
  }
  if (st == FERRY_OK) {
    e->ticket = t;
    e->ticket_owned = t != 0;
  }
  return st;
}

static ferry_status submit_locked(ferry_queue_obj *q, q_entry *e, plan *p, plan_kind kind, ferry_stage *stage) {
  ferry_device *dev = q->dev;
  const char *fn = e->op.fn;
  ferry_status st = FERRY_OK;
  /* Without gates, work queued behind a host part waits for it on the thread. */
  if (q->lane && !q->gates && q->host_queued > 0 && kind == PLAN_DIRECT) kind = PLAN_HOST;
  switch (kind) {
  case PLAN_NOTHING:
    e->mode = ENTRY_DIRECT;
    e->host_done = true;
    break;
  case PLAN_DIRECT: {
    bool want = q->ticketless + 1 >= TICKET_EVERY;
    e->mode = ENTRY_DIRECT;
    e->host_done = true;
    if ((st = push_direct(q, e, p, want)) != FERRY_OK) return st;
    e->needs_witness = e->ticket == 0 && e->op.kind != FERRY_OP_MARKER;
    q->ticketless = e->needs_witness ? q->ticketless + 1 : 0;
    q->device_work = true;
    break;
  }
  case PLAN_HOST:
  case PLAN_STAGED: {
    e->mode = kind == PLAN_STAGED ? ENTRY_STAGED : ENTRY_HOST;
    ferry_ticket start = 0;
    /* The host part starts once the lane's earlier work is done: ferry's, and
     * the program's own once it has had the lane. */
    if (q->lane && (q->device_work || q->native_out) &&
        (st = dev->ops->marker(dev, q->lane, false, &start)) != FERRY_OK)
      return st;
    if (kind == PLAN_STAGED) {
      e->stage = stage;
      ferry_ticket final = 0;
      st = ferry__stage_push(stage, start, dev, &final);
      e->ticket = final;
      e->ticket_owned = false;
      /* A push that failed part way still runs (raising the gates) and reports. */
      if (st != FERRY_OK) e->status = st;
    } else {
      e->start = start;
      if (q->lane && q->gates) {
        if ((st = dev->ops->gate_create(dev, &e->gate)) == FERRY_OK &&
            (st = dev->ops->gate_push(dev, q->lane, e->gate, 1)) != FERRY_OK) {
          dev->ops->gate_destroy(dev, e->gate);
          e->gate = NULL;
        }
        if (st != FERRY_OK) {
          if (start) (void)ferry__ticket_finish(dev, start);
          e->start = 0;
          return st;
        }
      }
    }
    if ((st = thread_ensure(q, fn)) != FERRY_OK) {
      /* Nothing else can raise what was pushed: do it here, and fail the call. */
      if (e->stage) {
        (void)ferry__stage_run(e->stage, true);
        ferry__stage_free(e->stage);
        e->stage = NULL;
      }
      if (e->gate) {
        (void)dev->ops->gate_raise(dev, e->gate, 1);
        e->host_done = true;
      }
      return FERRY_ERROR_OUT_OF_MEMORY;
    }
    q->host_queued++;
    /* A staged transfer to the device leaves its last pieces' DMA in the lane when
     * its host part ends: a host part behind it (a host-pointer buffer handed over
     * through the device's own queue, say) waits for them through a marker. */
    q->device_work = kind == PLAN_STAGED;
    break;
  }
  }
  return FERRY_OK;
}

ferry_status ferry__queue_submit(ferry_queue_obj *q, ferry_op *op) {
  plan p = {0};
  ferry_status st = FERRY_OK;
  for (int attempt = 0; attempt < 8; attempt++) {
    plan_kind kind = classify(q, op, &p);
    ferry_stage *stage = NULL;
    if (kind == PLAN_STAGED && (st = ferry__stage_prepare(&p.req, &stage)) != FERRY_OK) {
      ferry__op_failed(st, op);
      ferry__op_release(op);
      return st;
    }
    pthread_mutex_lock(&q->lock);
    if (atomic_load(&q->failing)) {
      st = cancelled(q, op->fn);
      pthread_mutex_unlock(&q->lock);
      ferry__stage_free(stage);
      ferry__op_release(op);
      return st;
    }
    q_entry *e = entry_new(q);
    if (!e) {
      pthread_mutex_unlock(&q->lock);
      ferry__stage_free(stage);
      ferry__op_release(op);
      return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for a queue entry", op->fn);
    }
    e->op = *op;
    st = submit_locked(q, e, &p, kind, stage);
    if (st == FERRY_OK || (kind == PLAN_STAGED && e->stage)) {
      entry_append(q, e);
      if (e->op.kind == FERRY_OP_MARKER) e->op.capture->seq = e->seq;
      if (e->mode != ENTRY_DIRECT) pthread_cond_broadcast(&q->changed);
      /* What completed meanwhile goes, so that entries do not pile up; but only
       * where something may be complete for a reason of its own: an entry with a
       * ticket (every TICKET_EVERY-th direct one has one) or a host part.
       * Retiring queries the driver and walks the run of ticketless entries
       * before the next ticket: on every submission it was a third of ferry's
       * own cost of a small pinned write_async. */
      q_entry *done = e->ticket || e->mode != ENTRY_DIRECT ? retire_locked(q) : NULL;
      pthread_mutex_unlock(&q->lock);
      release_done(q, done);
      return FERRY_OK;
    }
    /* Nothing was submitted. */
    if (e->has_tmp) ferry__mem_release(q->dev, &e->tmp, e->tmp_class);
    e->next = q->free_entries;
    q->free_entries = e;
    pthread_mutex_unlock(&q->lock);
    if (stage) ferry__stage_free(stage);
    if (st != FERRY_ERROR_UNSUPPORTED) break; /* else classify again: the backend refused that way */
  }
  ferry__op_failed(st, op);
  ferry__op_release(op);
  return st;
}

/* ---- making and ending queues ------------------------------------------------------------ */

static ferry_status queue_make(ferry_device *dev, bool is_default, const char *fn, ferry_queue_obj **out) {
  ferry_queue_obj *q = calloc(1, sizeof *q);
  if (!q) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for a queue", fn);
  q->dev = dev;
  q->is_default = is_default;
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->changed, NULL);
  ferry_status st = FERRY_OK;
  if (dev->ops->lane_create && (st = dev->ops->lane_create(dev, &q->lane)) != FERRY_OK) {
    char text[1024];
    snprintf(text, sizeof text, "%s", ferry__error_text());
    queue_free(q);
    return ferry__fail(st, "%s: a queue on %s: %s", fn, dev->label, text);
  }
  q->gates = q->lane && dev->ops->gate_create != NULL;
  if ((st = ferry__object_new(FERRY_OBJECT_QUEUE, q, fn, &q->id)) != FERRY_OK) {
    if (q->lane) dev->ops->lane_destroy(dev, q->lane);
    queue_free(q);
    return st;
  }
  struct ferry_device_state *s = dev->state;
  pthread_mutex_lock(&s->queues_lock);
  q->next_of_device = s->queues;
  s->queues = q;
  pthread_mutex_unlock(&s->queues_lock);
  *out = q;
  return FERRY_OK;
}

/* Waits for the queue's work and stops its thread. */
static void queue_drain(ferry_queue_obj *q) {
  ferry__queue_wait_seq(q, 0);
  releaser_flush(); /* the tickets of the lane are released before it goes */
  pthread_mutex_lock(&q->lock);
  q->stopping = true;
  pthread_cond_broadcast(&q->changed);
  bool joined = q->thread_started;
  pthread_mutex_unlock(&q->lock);
  if (joined) pthread_join(q->thread, NULL);
  q->thread_started = false;
}

/* Gives the lane back (after every ticket of it was released); the object
 * stays until its last reference goes. */
static void queue_release_lane(ferry_queue_obj *q) {
  q->lane_pending_release = false;
  if (q->lane) q->dev->ops->lane_destroy(q->dev, q->lane);
  q->lane = NULL;
  for (unsigned i = 0; i < q->sides; i++)
    q->side[i].dev->ops->lane_destroy(q->side[i].dev, q->side[i].lane);
  q->sides = 0;
  q->destroyed = true;
}

static void unlink_from_device(ferry_queue_obj *q) {
  struct ferry_device_state *s = q->dev->state;
  pthread_mutex_lock(&s->queues_lock);
  for (ferry_queue_obj **p = &s->queues; *p; p = &(*p)->next_of_device)
    if (*p == q) {
      *p = q->next_of_device;
      break;
    }
  pthread_mutex_unlock(&s->queues_lock);
}

ferry_status ferry_queue_create(ferry_device *device, ferry_queue *out_queue) {
  static const char fn[] = "ferry_queue_create";
  ferry_status st = ferry__enter_device(device, fn);
  if (st != FERRY_OK) return st;
  ferry_queue_obj *q = NULL;
  if (!out_queue)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_queue is NULL", fn);
  else if ((st = queue_make(device, false, fn, &q)) == FERRY_OK)
    *out_queue = (ferry_queue){q->id};
  ferry__leave();
  return st;
}

ferry_status ferry_queue_default(ferry_device *device, ferry_queue *out_queue) {
  static const char fn[] = "ferry_queue_default";
  ferry_status st = ferry__enter_device(device, fn);
  if (st != FERRY_OK) return st;
  if (!out_queue) {
    ferry__leave();
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_queue is NULL", fn);
  }
  struct ferry_device_state *s = device->state;
  pthread_mutex_lock(&s->default_lock);
  ferry_queue_obj *q = atomic_load(&s->default_queue);
  if (!q && (st = queue_make(device, true, fn, &q)) == FERRY_OK) atomic_store(&s->default_queue, q);
  pthread_mutex_unlock(&s->default_lock);
  if (st == FERRY_OK) *out_queue = (ferry_queue){q->id};
  ferry__leave();
  return st;
}

ferry_status ferry_queue_destroy(ferry_queue queue) {
  static const char fn[] = "ferry_queue_destroy";
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  ferry_queue_obj *q = NULL;
  if ((st = ferry__queue_acquire(queue, fn, &q)) != FERRY_OK) {
    ferry__leave();
    return st;
  }
  if (q->is_default) {
    char qt[400];
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                     "%s: %s is the device's own and lasts until ferry_shutdown(); nothing was changed", fn,
                     queue_text(q, qt));
    ferry__queue_unref(q);
    ferry__leave();
    return st;
  }
  ferry_retire r = ferry__object_retire(FERRY_OBJECT_QUEUE, q->id);
  if (r == FERRY_RETIRE_STALE) { /* another thread destroyed it meanwhile */
    ferry__queue_unref(q);
    ferry__leave();
    return ferry__fail(FERRY_ERROR_STALE_HANDLE, "%s: queue handle 0x%llx was destroyed meanwhile", fn,
                       (unsigned long long)queue.id);
  }
  unlink_from_device(q);
  queue_drain(q);
  /* Captures of its markers (events) keep their tickets: the lane goes with the last of them. */
  st = ferry__queue_report(q, fn, UINT64_MAX);
  q->lane_pending_release = true;
  ferry__queue_unref(q);
  ferry__leave();
  return st;
}

ferry_status ferry_queue_synchronize(ferry_queue queue) {
  static const char fn[] = "ferry_queue_synchronize";
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  ferry_queue_obj *q = NULL;
  if ((st = ferry__queue_acquire(queue, fn, &q)) == FERRY_OK) {
    ferry__queue_wait_seq(q, 0);
    st = ferry__queue_report(q, fn, UINT64_MAX);
    ferry__queue_unref(q);
  }
  ferry__leave();
  return st;
}

ferry_status ferry_queue_query(ferry_queue queue) {
  static const char fn[] = "ferry_queue_query";
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  ferry_queue_obj *q = NULL;
  if ((st = ferry__queue_acquire(queue, fn, &q)) == FERRY_OK) {
    st = ferry__queue_poll_seq(q, 0) ? ferry__queue_report(q, fn, UINT64_MAX) : FERRY_NOT_READY;
    ferry__queue_unref(q);
  }
  ferry__leave();
  return st;
}

ferry_status ferry_queue_native(ferry_queue queue, ferry_native *out_native) {
  static const char fn[] = "ferry_queue_native";
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  ferry_queue_obj *q = NULL;
  if ((st = ferry__queue_acquire(queue, fn, &q)) == FERRY_OK) {
    ferry_native n = {0};
    ferry_device *dev = q->dev;
    if (!out_native)
      st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_native is NULL", fn);
    else if (dev->ops->native && (st = dev->ops->native(dev, &n)) != FERRY_OK)
      ferry__fail(st, "%s: %s: %s", fn, dev->label, ferry__error_text());
    else if (q->lane && dev->ops->lane_native && (st = dev->ops->lane_native(dev, q->lane, &n)) != FERRY_OK)
      ferry__fail(st, "%s: %s: %s", fn, dev->label, ferry__error_text());
    else if (!q->lane && n.queue)
      /* The device has a native queue, but this queue's work runs on ferry's
       * thread: handing out the device's queue would promise an order that
       * does not hold. */
      st = ferry__fail(FERRY_ERROR_UNSUPPORTED,
                       "%s: the queues of %s do not yet run on a native queue (their work runs on ferry's own thread), "
                       "so no native queue is ordered with them; order your own work with ferry_event_record and "
                       "ferry_event_synchronize",
                       fn, dev->label);
    if (st == FERRY_OK) {
      *out_native = n;
      pthread_mutex_lock(&q->lock);
      q->native_out = q->lane != NULL;
      pthread_mutex_unlock(&q->lock);
    }
    ferry__queue_unref(q);
  }
  ferry__leave();
  return st;
}

/* ---- the synchronous calls, the device, shutdown --------------------------------------------- */

ferry_status ferry__queue_settle_default(ferry_device *dev, const char *fn) {
  ferry_queue_obj *q = atomic_load_explicit(&dev->state->default_queue, memory_order_acquire);
  if (!q) return FERRY_OK;
  if (atomic_load_explicit(&q->pending, memory_order_acquire) == 0 &&
      atomic_load_explicit(&q->unreleased, memory_order_acquire) == 0 &&
      !atomic_load_explicit(&q->failing, memory_order_acquire))
    return FERRY_OK;
  if (!atomic_load(&q->failing)) ferry__queue_wait_seq(q, 0);
  if (atomic_load(&q->failing)) {
    pthread_mutex_lock(&q->lock);
    ferry_status st = cancelled(q, fn);
    pthread_mutex_unlock(&q->lock);
    return st;
  }
  return FERRY_OK;
}

/* The device's queues, each with a reference. */
static size_t device_queues(ferry_device *dev, ferry_queue_obj ***out) {
  struct ferry_device_state *s = dev->state;
  pthread_mutex_lock(&s->queues_lock);
  size_t n = 0;
  for (ferry_queue_obj *q = s->queues; q; q = q->next_of_device)
    n++;
  ferry_queue_obj **list = n ? malloc(n * sizeof *list) : NULL;
  size_t i = 0;
  if (list)
    for (ferry_queue_obj *q = s->queues; q; q = q->next_of_device) {
      ferry__queue_ref(q);
      list[i++] = q;
    }
  pthread_mutex_unlock(&s->queues_lock);
  *out = list;
  return i;
}

ferry_status ferry__queues_synchronize_device(ferry_device *dev, const char *fn) {
  ferry_queue_obj **list;
  size_t n = device_queues(dev, &list);
  ferry_status first = FERRY_OK;
  char text[1024] = "";
  unsigned more = 0;
  for (size_t i = 0; i < n; i++) {
    ferry__queue_wait_seq(list[i], 0);
    ferry_status st = ferry__queue_report(list[i], fn, UINT64_MAX);
    if (st != FERRY_OK && first == FERRY_OK) {
      first = st;
      snprintf(text, sizeof text, "%s", ferry__error_text());
    } else if (st != FERRY_OK) {
      more++;
    }
    ferry__queue_unref(list[i]);
  }
  free(list);
  if (first != FERRY_OK) {
    if (more)
      return ferry__fail(first, "%s (and %u more queue%s of the device failed, reported here too)", text, more,
                         more == 1 ? "" : "s");
    return ferry__fail(first, "%s", text);
  }
  return FERRY_OK;
}

ferry_status ferry__queues_native_wait(ferry_device *dev, uintptr_t native_queue, const char *fn) {
  ferry_queue_obj **list;
  size_t n = device_queues(dev, &list);
  ferry_status first = FERRY_OK;
  for (size_t i = 0; i < n; i++) {
    ferry_queue_obj *q = list[i];
    ferry_status st = FERRY_OK;
    bool on_host = !dev->ops->native_wait || atomic_load(&q->failing);
    ferry_capture *c = NULL;
    if (!on_host && !ferry__queue_poll_seq(q, 0)) {
      /* A marker of everything submitted: its ticket is behind every earlier
       * operation's device work (staged pieces wait on the device for the
       * queue's thread). */
      if ((st = ferry__queue_mark(q, fn, &c)) == FERRY_OK) {
        ferry_ticket t = atomic_load_explicit(&c->ticket, memory_order_acquire);
        if (!t) on_host = true; /* not pushed yet (the queue's thread pushes it): wait here */
        if (t && (st = dev->ops->native_wait(dev, t, native_queue)) == FERRY_ERROR_UNSUPPORTED) {
          on_host = true;
          st = FERRY_OK;
        } else if (st != FERRY_OK) {
          ferry__fail(st, "%s: %s", fn, ferry__error_text());
        }
      }
    }
    if (st == FERRY_OK && on_host) {
      ferry__queue_wait_seq(q, c ? c->seq : 0);
      st = ferry__queue_report(q, fn, UINT64_MAX);
    }
    if (c) ferry__capture_unref(c);
    if (st != FERRY_OK && first == FERRY_OK) first = st;
    ferry__queue_unref(q);
  }
  free(list);
  return first;
}

void ferry__queues_drain_device(ferry_device *dev, bool report) {
  struct ferry_device_state *s = dev->state;
  pthread_mutex_lock(&s->queues_lock);
  ferry_queue_obj *list = s->queues;
  pthread_mutex_unlock(&s->queues_lock);
  for (ferry_queue_obj *q = list; q; q = q->next_of_device) {
    queue_drain(q);
    if (atomic_load(&q->failing) && report)
      fprintf(stderr, "ferry: ferry_shutdown: a failure of %s's work was never reported: %s\n", dev->label,
              q->fail_text);
  }
}

void ferry__queues_end_device(ferry_device *dev) {
  struct ferry_device_state *s = dev->state;
  for (;;) {
    pthread_mutex_lock(&s->queues_lock);
    ferry_queue_obj *q = s->queues;
    if (q) s->queues = q->next_of_device;
    pthread_mutex_unlock(&s->queues_lock);
    if (!q) break;
    queue_release_lane(q);
    if (ferry__object_retire(FERRY_OBJECT_QUEUE, q->id) == FERRY_RETIRE_LAST) queue_free(q);
  }
  atomic_store(&s->default_queue, NULL);
}

void ferry__queues_forget_device(ferry_device *dev) {
  struct ferry_device_state *s = dev->state;
  while (s->queues) {
    ferry_queue_obj *q = s->queues;
    s->queues = q->next_of_device;
    /* The parent's threads and lanes: only the core's memory goes. */
    while (q->head) {
      q_entry *e = q->head;
      q->head = e->next;
      free(e->text);
      free(e);
    }
    ferry_retire r = ferry__object_retire(FERRY_OBJECT_QUEUE, q->id);
    if (r == FERRY_RETIRE_LAST) {
      while (q->free_entries) {
        q_entry *e = q->free_entries;
        q->free_entries = e->next;
        free(e);
      }
      free(q);
    }
  }
  atomic_store(&s->default_queue, NULL);
}
