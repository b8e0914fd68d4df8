/*
 * Transfer statistics (ferry_device_stats's h2d, d2h and d2d bytes and counts).
 *
 * Every transfer is counted, so counting must cost next to nothing: two atomic
 * additions on counters that every thread shares cost about as much as the rest
 * of a 64-byte ferry_write on native (docs/PERFORMANCE.md). So each thread counts
 * in a record of its own, with plain (single-writer) stores, and
 * ferry_device_stats adds the records up.
 *
 * A record belongs to one thread at a time: a thread takes a free one at its
 * first transfer and gives it back when it exits (a thread-specific key's
 * destructor), and the next thread that takes it counts on from its values.
 * Records are never freed, so a thread exiting after ferry_shutdown, or a reader
 * racing a thread's exit, touches live memory; there are at most as many as
 * threads that transferred at the same time. A record's counts belong to one
 * session: the first count in a new session clears it. Devices past
 * STATS_DEVICES, a thread that cannot get a record, and a transfer that ends
 * while ferry_shutdown waits for it (the session has moved on, its device not
 * yet gone) count on the device's shared counters, which the reader adds too.
 */
#include "context.h"

#include <stdlib.h>

#define STATS_DEVICES 64

typedef struct ferry_thread_counts {
  struct ferry_thread_counts *next; /* set once, before the record is published */
  _Atomic bool taken;
  _Atomic uint64_t session; /* the session the counts belong to */
  _Atomic uint64_t bytes[STATS_DEVICES][FERRY_DIRECTIONS], count[STATS_DEVICES][FERRY_DIRECTIONS];
} thread_counts;

/* This file's part of the context: every record ever made; only grows. */
static _Atomic(thread_counts *) *const records = &ferry__ctx.stats.records;
static _Thread_local thread_counts *mine;
static pthread_key_t exit_key;
static bool exit_key_made;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;

static void give_back(void *p) {
  thread_counts *t = p;
  mine = NULL;
  atomic_store_explicit(&t->taken, false, memory_order_release);
}

static void make_exit_key(void) { exit_key_made = pthread_key_create(&exit_key, give_back) == 0; }

/* This thread's record, or NULL when there is none to be had. */
static thread_counts *take_record(void) {
  pthread_once(&exit_key_once, make_exit_key);
  if (!exit_key_made) return NULL; /* a record could never be given back */
  thread_counts *t;
  for (t = atomic_load_explicit(records, memory_order_acquire); t; t = t->next) {
    bool free_one = false;
    if (atomic_compare_exchange_strong_explicit(&t->taken, &free_one, true, memory_order_acquire, memory_order_relaxed))
      break;
  }
  if (!t) {
    if (!(t = calloc(1, sizeof *t))) return NULL;
    atomic_init(&t->taken, true);
    thread_counts *head = atomic_load_explicit(records, memory_order_relaxed);
    do {
      t->next = head;
    } while (!atomic_compare_exchange_weak_explicit(records, &head, t, memory_order_release, memory_order_relaxed));
  }
  if (pthread_setspecific(exit_key, t) != 0) {
    atomic_store_explicit(&t->taken, false, memory_order_release);
    return NULL;
  }
  mine = t;
  return t;
}

/* Adds to a counter only this thread writes: no locked instruction. */
static inline void add_own(_Atomic uint64_t *counter, uint64_t v) {
  atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + v, memory_order_relaxed);
}

void ferry__count_transfer(ferry_device *dev, ferry_direction dir, uint64_t bytes) {
  size_t index = dev->info.index;
  thread_counts *t = mine;
  uint64_t session = ferry__handles_session();
  if (index < STATS_DEVICES && session == dev->state->session && (t || (t = take_record()))) {
    if (atomic_load_explicit(&t->session, memory_order_relaxed) != session) {
      for (size_t d = 0; d < STATS_DEVICES; d++)
        for (int k = 0; k < FERRY_DIRECTIONS; k++) {
          atomic_store_explicit(&t->bytes[d][k], 0, memory_order_relaxed);
          atomic_store_explicit(&t->count[d][k], 0, memory_order_relaxed);
        }
      /* Readers look at the counts only once they see the session. */
      atomic_store_explicit(&t->session, session, memory_order_release);
    }
    add_own(&t->bytes[index][dir], bytes);
    add_own(&t->count[index][dir], 1);
    return;
  }
  struct ferry_device_state *s = dev->state;
  ferry__stat_add(&s->shared_bytes[dir], bytes);
  ferry__stat_add(&s->shared_count[dir], 1);
}

void ferry__transfer_totals(const ferry_device *dev, uint64_t bytes[FERRY_DIRECTIONS],
                            uint64_t count[FERRY_DIRECTIONS]) {
  const struct ferry_device_state *s = dev->state;
  for (int k = 0; k < FERRY_DIRECTIONS; k++) {
    bytes[k] = atomic_load_explicit(&s->shared_bytes[k], memory_order_relaxed);
    count[k] = atomic_load_explicit(&s->shared_count[k], memory_order_relaxed);
  }
  size_t index = dev->info.index;
  uint64_t session = ferry__handles_session();
  if (index >= STATS_DEVICES || session != s->session) return;
  for (thread_counts *t = atomic_load_explicit(records, memory_order_acquire); t; t = t->next) {
    if (atomic_load_explicit(&t->session, memory_order_acquire) != session) continue;
    for (int k = 0; k < FERRY_DIRECTIONS; k++) {
      bytes[k] += atomic_load_explicit(&t->bytes[index][k], memory_order_relaxed);
      count[k] += atomic_load_explicit(&t->count[index][k], memory_order_relaxed);
    }
  }
}
