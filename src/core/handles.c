/*
 * The handle table.
 *
 * A handle is (generation << 32 | slot index). Each slot holds one 64-bit atomic
 * word, generation << 32 | references. A generation is odd while the slot holds
 * a live buffer and even once it is freed; every reuse moves it on, and a slot
 * whose generation reaches FERRY_GENERATION_LIMIT is retired for good, so an old
 * handle never matches again.
 *
 * The table lives as long as the process: ferry_shutdown() frees every buffer
 * (moving each slot to its next generation) but keeps the slots, so that each
 * slot's generations go on rising across sessions. No handle from before a
 * shutdown can come back, whatever the history: each slot has its own 2^31 lives
 * before it retires, there is no shared floor to wrap, and the table is full only
 * once all 2^28 slots are retired (about 2^59 allocations). It also means a lookup
 * never reads freed memory, even when it races ferry_shutdown().
 *
 * Lookups take no lock: one compare-and-swap adds a reference if the generation
 * still matches, and the last reference to go releases the memory. A buffer freed
 * while another thread is inside a transfer on it therefore stays valid until
 * that transfer ends.
 */
#include "context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#define CHUNK_BITS  12
#define CHUNK_SLOTS (1u << CHUNK_BITS)
#define MAX_CHUNKS  (1u << 16) /* 2^28 live buffers at most */
#define NO_SLOT     FERRY__NO_SLOT
#define GEN_RETIRE  FERRY_GENERATION_LIMIT /* a slot whose dead generation reaches this is not reused */

/* This file's part of the context: MAX_CHUNKS chunk pointers once made. */
static ferry_buffer_table *const table = &ferry__ctx.buffers;

/* Buffers freed while a transfer held them: the transfer's last reference
 * releases their memory. ferry_shutdown() waits for these before it destroys
 * the devices. */
static _Atomic uint64_t releases_pending;

static inline uint32_t state_gen(uint64_t s) { return (uint32_t)(s >> 32); }
static inline uint32_t state_refs(uint64_t s) { return (uint32_t)s; }

ferry_status ferry__handles_init(void) {
  if (atomic_load_explicit(&table->chunks, memory_order_acquire)) return FERRY_OK;
  _Atomic(ferry_slot *) *chunks = calloc(MAX_CHUNKS, sizeof *chunks);
  if (!chunks) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "ferry_init: no host memory for the handle table");
  atomic_store_explicit(&table->chunks, chunks, memory_order_release);
  return FERRY_OK;
}

/* The slot at `index`; NULL when there is none (no table yet, or an index past
 * the slots ever made). */
static ferry_slot *slot_at(uint32_t index) {
  _Atomic(ferry_slot *) *chunks = atomic_load_explicit(&table->chunks, memory_order_acquire);
  if (!chunks || index >= (uint32_t)MAX_CHUNKS * CHUNK_SLOTS) return NULL;
  ferry_slot *chunk = atomic_load_explicit(&chunks[index >> CHUNK_BITS], memory_order_acquire);
  return chunk ? &chunk[index & (CHUNK_SLOTS - 1)] : NULL;
}

ferry_status ferry__slot_new(const char *fn, ferry_slot **out_slot, uint32_t *out_index) {
  pthread_mutex_lock(&table->lock);
  uint32_t index;
  ferry_slot *slot;
  if (table->free_head != NO_SLOT) {
    index = table->free_head;
    slot = slot_at(index);
    table->free_head = slot->next_free;
  } else {
    if (table->used == (uint32_t)MAX_CHUNKS * CHUNK_SLOTS) {
      pthread_mutex_unlock(&table->lock);
      return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY,
                         "%s: the handle table is full: every one of its %u slots is live or retired", fn,
                         (unsigned)MAX_CHUNKS * CHUNK_SLOTS);
    }
    index = table->used;
    if ((index & (CHUNK_SLOTS - 1)) == 0) {
      ferry_slot *chunk = ferry__core_alloc(NULL, (size_t)CHUNK_SLOTS * sizeof *chunk);
      if (!chunk) {
        pthread_mutex_unlock(&table->lock);
        return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for %u more buffer handles (%zu bytes)", fn,
                           CHUNK_SLOTS, (size_t)CHUNK_SLOTS * sizeof *chunk);
      }
      memset(chunk, 0, (size_t)CHUNK_SLOTS * sizeof *chunk);
      for (uint32_t i = 0; i < CHUNK_SLOTS; i++)
        atomic_init(&chunk[i].state, (uint64_t)table->start_generation << 32);
      _Atomic(ferry_slot *) *chunks = atomic_load_explicit(&table->chunks, memory_order_relaxed);
      atomic_store_explicit(&chunks[index >> CHUNK_BITS], chunk, memory_order_release);
    }
    table->used++;
    slot = slot_at(index);
  }
  uint64_t serial = ++table->serial;
  pthread_mutex_unlock(&table->lock);
  /* The slot stays dead (even generation) until published, so no lookup matches it. */
  slot->index = index;
  slot->serial = serial;
  *out_slot = slot;
  *out_index = index;
  return FERRY_OK;
}

ferry_buffer ferry__slot_publish(ferry_slot *slot, uint32_t index) {
  uint32_t gen = state_gen(atomic_load_explicit(&slot->state, memory_order_relaxed)) + 1;
  atomic_store_explicit(&slot->state, (uint64_t)gen << 32 | 1u, memory_order_release);
  return (ferry_buffer){(uint64_t)gen << 32 | index};
}

static void slot_recycle(ferry_slot *slot, uint32_t index) {
  if (state_gen(atomic_load_explicit(&slot->state, memory_order_relaxed)) >= GEN_RETIRE) return;
  pthread_mutex_lock(&table->lock);
  slot->next_free = table->free_head;
  table->free_head = index;
  pthread_mutex_unlock(&table->lock);
}

void ferry__slot_abandon(ferry_slot *slot, uint32_t index) { slot_recycle(slot, index); }

static ferry_slot *lookup(ferry_buffer b) {
  uint32_t index = (uint32_t)b.id;
  uint32_t gen = (uint32_t)(b.id >> 32);
  /* In a forked child the parent's buffers are not usable: one relaxed load. */
  if (!(gen & 1u) || atomic_load_explicit(&ferry__forked, memory_order_relaxed)) return NULL;
  ferry_slot *slot = slot_at(index);
  if (!slot) return NULL;
  uint64_t s = atomic_load_explicit(&slot->state, memory_order_acquire);
  do {
    if (state_gen(s) != gen) return NULL;
  } while (!atomic_compare_exchange_weak_explicit(&slot->state, &s, s + 1, memory_order_acquire, memory_order_acquire));
  return slot;
}

ferry_slot *ferry__peek(ferry_buffer b) { return lookup(b); }

ferry_status ferry__acquire(ferry_buffer b, const char *fn, ferry_slot **out_slot) {
  ferry_slot *slot = lookup(b);
  if (!slot) {
    if (atomic_load(&ferry__forked)) return ferry__fork_refusal(fn);
    if (b.id == 0) return ferry__fail(FERRY_ERROR_STALE_BUFFER, "%s: the buffer is FERRY_NULL_BUFFER", fn);
    return ferry__fail(FERRY_ERROR_STALE_BUFFER,
                       "%s: buffer handle 0x%016llx is stale: it was freed, belongs to a session before "
                       "ferry_shutdown(), or was never handed out",
                       fn, (unsigned long long)b.id);
  }
  *out_slot = slot;
  return FERRY_OK;
}

/* The last reference is gone: give the memory back and the slot to the free list. */
static ferry_status slot_finish(ferry_slot *slot, uint32_t index) {
  ferry_status st = ferry__slot_destroy_memory(slot);
  slot_recycle(slot, index);
  return st;
}

void ferry__slot_ref(ferry_slot *slot) { atomic_fetch_add_explicit(&slot->state, 1, memory_order_relaxed); }

void ferry__release(ferry_slot *slot) {
  uint64_t prev = atomic_fetch_sub_explicit(&slot->state, 1, memory_order_acq_rel);
  if (state_refs(prev) == 1) {
    /* Only a buffer freed by ferry_free can lose its last reference here: a live
     * one still holds its owner's, and ferry_shutdown keeps it while it waits.
     * The error, if any, has nobody to go to but stderr. */
    if (slot_finish(slot, slot->index) != FERRY_OK)
      fprintf(stderr, "ferry: releasing a freed buffer's memory failed: %s\n", ferry_last_error());
    atomic_fetch_sub_explicit(&releases_pending, 1, memory_order_release);
    /* A transfer's last reference (outside the gate): the released memory's
     * deleter runs here, after the shutdown that may wait for this release was
     * told (callbacks.c). */
    ferry__callbacks_run_if_outside();
  }
}

ferry_status ferry__retire(ferry_buffer b, const char *fn) {
  /* One compare-and-swap: the next (even) generation, and the owner's reference
   * dropped. Whoever drops the last reference gives the memory back: this call,
   * or a transfer in another thread that still holds the buffer. */
  uint32_t index = (uint32_t)b.id, gen = (uint32_t)(b.id >> 32);
  ferry_slot *slot = (gen & 1u) ? slot_at(index) : NULL;
  uint64_t s = slot ? atomic_load_explicit(&slot->state, memory_order_acquire) : 0;
  uint64_t next;
  do {
    if (!slot || state_gen(s) != gen) {
      ferry_slot *unused;
      return ferry__acquire(b, fn, &unused); /* not live: the stale sentence (it cannot succeed) */
    }
    next = ((uint64_t)(gen + 1) << 32) | (state_refs(s) - 1);
  } while (!atomic_compare_exchange_weak_explicit(&slot->state, &s, next, memory_order_acq_rel, memory_order_acquire));
  if (state_refs(next) == 0) return slot_finish(slot, index);
  /* A transfer still holds it and releases the memory at its end (the count may
   * briefly wrap if it already did: ferry_shutdown reads it only once every
   * ferry_free has returned). */
  atomic_fetch_add_explicit(&releases_pending, 1, memory_order_relaxed);
  return FERRY_OK;
}

uint64_t ferry__handles_session(void) { return atomic_load_explicit(&table->session, memory_order_acquire); }

ferry_status ferry__hold(ferry_buffer b, const char *fn, ferry_slot **out_slot, uint64_t *out_session) {
  ferry_status st = ferry__acquire(b, fn, out_slot);
  if (st != FERRY_OK) return st;
  /* The count of this generation's holds, one more (a tag of an earlier
   * generation has none left: its slot could not be reused before they went). */
  uint32_t gen = (uint32_t)(b.id >> 32);
  _Atomic uint64_t *holds = &(*out_slot)->holds;
  uint64_t h = atomic_load_explicit(holds, memory_order_relaxed), next;
  do {
    next = (state_gen(h) == gen ? h : (uint64_t)gen << 32) + 1;
  } while (!atomic_compare_exchange_weak_explicit(holds, &h, next, memory_order_relaxed, memory_order_relaxed));
  *out_session = ferry__handles_session();
  return FERRY_OK;
}

ferry_slot *ferry__held_slot(ferry_buffer b, uint64_t session) {
  if (session != ferry__handles_session()) return NULL;
  uint32_t index = (uint32_t)b.id, gen = (uint32_t)(b.id >> 32);
  ferry_slot *slot = (gen & 1u) ? slot_at(index) : NULL;
  if (!slot) return NULL;
  /* The held reference keeps the slot from being reused: its generation is gen
   * (live) or gen + 1 (freed). */
  uint32_t now = state_gen(atomic_load_explicit(&slot->state, memory_order_acquire));
  return now == gen || now == gen + 1 ? slot : NULL;
}

void ferry__release_held(ferry_buffer b) {
  uint32_t index = (uint32_t)b.id, gen = (uint32_t)(b.id >> 32);
  ferry_slot *slot = (gen & 1u) ? slot_at(index) : NULL;
  if (!slot) return;
  /* One of this generation's holds, taken out in one step: ferry_shutdown takes
   * them all over in one step too (the word becomes 0), so exactly one of the
   * two drops each reference, whatever the timing. A word of another generation
   * or without holds: the session of this one ended, and ferry_shutdown
   * released the memory. */
  uint64_t h = atomic_load_explicit(&slot->holds, memory_order_acquire);
  do {
    if (state_gen(h) != gen || state_refs(h) == 0) return;
  } while (!atomic_compare_exchange_weak_explicit(&slot->holds, &h, h - 1, memory_order_acq_rel, memory_order_acquire));
  ferry__release(slot);
}

const char *ferry__buffer_text(const ferry_slot *slot, char buf[512]) {
  if (slot->kind == FERRY_CUSTOM)
    snprintf(buf, 512, "buffer %llu (%zu elements of %zu bytes) on %s", (unsigned long long)slot->serial, slot->length,
             slot->elem_size, slot->device->label);
  else
    snprintf(buf, 512, "buffer %llu (%zu %s elements) on %s", (unsigned long long)slot->serial, slot->length,
             ferry_kind_name(slot->kind), slot->device->label);
  return buf;
}

/* Waits a little, politely: for transfers in flight, which may take a while. */
static void pause_briefly(unsigned *rounds) {
  if ((*rounds)++ < 64) {
    sched_yield();
  } else {
    struct timespec t = {0, 50000};
    nanosleep(&t, NULL);
  }
}

void ferry__handles_shutdown(bool report_leaks) {
  _Atomic(ferry_slot *) *chunks = atomic_load(&table->chunks);
  if (!chunks) return;
  /* From here, references held past the session (DLPack exports) are gone with
   * it: a deleter that runs now, or later, leaves the slot alone. */
  atomic_fetch_add(&table->session, 1);
  pthread_mutex_lock(&table->lock);
  uint32_t used = table->used;
  pthread_mutex_unlock(&table->lock);
  size_t leaked = 0;
  for (uint32_t i = 0; i < used; i++) {
    ferry_slot *slot = slot_at(i);
    /* Retire every live buffer, keeping the owner's reference: no lookup matches
     * it any more, and a transfer that holds it finishes before its memory goes
     * (the owner's reference keeps that transfer from releasing it itself). */
    uint64_t s = atomic_load(&slot->state), next = 0;
    do {
      if (!(state_gen(s) & 1u)) break;
      next = ((uint64_t)(state_gen(s) + 1) << 32) | state_refs(s);
    } while (!atomic_compare_exchange_weak(&slot->state, &s, next));
    bool live = state_gen(s) & 1u;
    /* The tensors' references become the shutdown's, all in one step: a deleter
     * that runs from here on finds none to drop (one that took its own out
     * before drops it, and the wait below counts it as a transfer's). */
    uint64_t h = atomic_exchange(&slot->holds, 0);
    uint32_t held_gen = live ? state_gen(s) : state_gen(s) - 1;
    uint32_t holds = state_gen(h) == held_gen ? state_refs(h) : 0;
    /* A freed buffer whose memory DLPack tensors still hold: released here. */
    bool freed_but_held = !live && holds > 0 && state_refs(s) > 0;
    if (!live && !freed_but_held) continue;
    /* Transfers in flight hold references beyond the owner's and the tensors'. */
    unsigned rounds = 0;
    while (state_refs(atomic_load(&slot->state)) > (live ? 1u : 0u) + holds)
      pause_briefly(&rounds);
    if (report_leaks) {
      char text[512];
      if (leaked == 0) fprintf(stderr, "ferry: buffers still live at ferry_shutdown():\n");
      fprintf(stderr, "ferry:   %s, %zu bytes%s%s\n", ferry__buffer_text(slot, text), slot->bytes,
              slot->over_host_array ? ", over a host array" : "",
              freed_but_held ? ", freed but still held by a DLPack tensor" : "");
    }
    leaked++;
    atomic_store(&slot->state, (live ? next : s) & ~(uint64_t)UINT32_MAX);
    if (freed_but_held) atomic_fetch_sub(&releases_pending, 1); /* ferry_free counted it; nobody else releases it */
    if (slot_finish(slot, i) != FERRY_OK) fprintf(stderr, "ferry: ferry_shutdown: %s\n", ferry_last_error());
  }
  if (report_leaks && leaked) fprintf(stderr, "ferry: %zu buffer(s) were not freed\n", leaked);
  if (report_leaks && !leaked) fprintf(stderr, "ferry: no buffers leaked\n");
  /* Buffers freed during a transfer: that transfer releases their memory. */
  unsigned rounds = 0;
  while (atomic_load(&releases_pending) != 0)
    pause_briefly(&rounds);
}

void ferry__handles_skip_generations(uint32_t gen) {
  uint32_t dead = gen & ~1u;
  if (dead > GEN_RETIRE - 2) dead = GEN_RETIRE - 2;
  pthread_mutex_lock(&table->lock);
  if (table->start_generation < dead) table->start_generation = dead;
  /* Every slot of the chunks made so far, those not handed out yet included. */
  uint32_t made = (table->used + CHUNK_SLOTS - 1) & ~(CHUNK_SLOTS - 1);
  for (uint32_t i = 0; i < made; i++) {
    ferry_slot *slot = slot_at(i);
    uint64_t s = atomic_load(&slot->state);
    if (!(state_gen(s) & 1u) && state_gen(s) < dead) atomic_store(&slot->state, (uint64_t)dead << 32 | state_refs(s));
  }
  pthread_mutex_unlock(&table->lock);
}

void ferry__handles_fork(ferry_fork_phase phase) {
  if (phase == FERRY_FORK_PREPARE)
    pthread_mutex_lock(&table->lock);
  else
    pthread_mutex_unlock(&table->lock);
}

void ferry__handles_forget(void) {
  /* Every slot dead, at its next generation, without references (the parent's
   * transfers are not running here) and free, unless retired; the memory of the
   * parent's buffers is its drivers' and stays where it is. */
  atomic_fetch_add(&table->session, 1);
  pthread_mutex_lock(&table->lock);
  table->free_head = NO_SLOT;
  for (uint32_t i = table->used; i-- > 0;) {
    ferry_slot *slot = slot_at(i);
    uint32_t gen = state_gen(atomic_load(&slot->state));
    if (gen & 1u) gen++;
    atomic_store(&slot->state, (uint64_t)gen << 32);
    atomic_store(&slot->holds, 0);
    if (gen >= GEN_RETIRE) continue;
    slot->next_free = table->free_head;
    table->free_head = i;
  }
  atomic_store(&releases_pending, 0);
  pthread_mutex_unlock(&table->lock);
}
