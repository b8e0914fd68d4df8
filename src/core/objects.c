/*
 * Handles of queues and events: as safe as buffer handles (handles.c), with a
 * kind in each handle so that an event's handle passed as a queue is stale.
 *
 * A handle is (generation << 32 | kind << 28 | slot). Each slot holds one
 * atomic word, generation << 32 | references, the generation odd while the
 * slot holds a live object. A lookup is one compare-and-swap that adds a
 * reference if the generation still matches; retiring moves the word to the
 * next (even) generation and drops the owner's reference in one step, so
 * lookups fail at once while holders keep the object until the last reference
 * goes. The slots live in chunks that never move and last as long as the
 * process, like the buffers' table, so a handle from before a shutdown never
 * matches again.
 */
#include "context.h"

#include <stdlib.h>
#include <string.h>

#define CHUNK_BITS  10
#define CHUNK_SLOTS (1u << CHUNK_BITS)
#define MAX_CHUNKS  (1u << 18) /* 2^28 slots per kind */
#define NO_SLOT     FERRY__NO_SLOT
#define INDEX_MASK  ((1u << 28) - 1)

typedef struct ferry_object_slot {
  _Atomic uint64_t state; /* generation << 32 | references */
  void *object;
  uint32_t next_free;
} object_slot;

typedef ferry_object_table object_table;

/* This file's part of the context, one table per kind (MAX_CHUNKS chunk pointers once made). */
static object_table *const tables = ferry__ctx.objects;

static inline uint32_t gen_of(uint64_t s) { return (uint32_t)(s >> 32); }
static inline uint32_t refs_of(uint64_t s) { return (uint32_t)s; }

static object_slot *slot_at(object_table *t, uint32_t index) {
  _Atomic(object_slot *) *chunks = atomic_load_explicit(&t->chunks, memory_order_acquire);
  if (!chunks || index >= MAX_CHUNKS * CHUNK_SLOTS) return NULL;
  object_slot *chunk = atomic_load_explicit(&chunks[index >> CHUNK_BITS], memory_order_acquire);
  return chunk ? &chunk[index & (CHUNK_SLOTS - 1)] : NULL;
}

/* The slot a handle names, if it is of `kind`. */
static object_slot *named(ferry_object_kind kind, uint64_t id, uint32_t *out_gen) {
  if (kind <= 0 || kind >= FERRY_OBJECT_KINDS) return NULL;
  uint32_t low = (uint32_t)id;
  if (low >> 28 != (uint32_t)kind) return NULL;
  *out_gen = (uint32_t)(id >> 32);
  return slot_at(&tables[kind], low & INDEX_MASK);
}

ferry_status ferry__object_new(ferry_object_kind kind, void *object, const char *fn, uint64_t *out_id) {
  object_table *t = &tables[kind];
  pthread_mutex_lock(&t->lock);
  if (!atomic_load_explicit(&t->chunks, memory_order_relaxed)) {
    _Atomic(object_slot *) *chunks = calloc(MAX_CHUNKS, sizeof *chunks);
    if (!chunks) {
      pthread_mutex_unlock(&t->lock);
      return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for the handle table", fn);
    }
    atomic_store_explicit(&t->chunks, chunks, memory_order_release);
  }
  uint32_t index;
  object_slot *s;
  if (t->free_head != NO_SLOT) {
    index = t->free_head;
    s = slot_at(t, index);
    t->free_head = s->next_free;
  } else {
    if (t->used == MAX_CHUNKS * CHUNK_SLOTS) {
      pthread_mutex_unlock(&t->lock);
      return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: the handle table is full (%u handles live or retired)", fn,
                         MAX_CHUNKS * CHUNK_SLOTS);
    }
    index = t->used;
    if ((index & (CHUNK_SLOTS - 1)) == 0) {
      object_slot *chunk = ferry__core_alloc(NULL, CHUNK_SLOTS * sizeof *chunk);
      if (!chunk) {
        pthread_mutex_unlock(&t->lock);
        return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for more handles", fn);
      }
      memset(chunk, 0, CHUNK_SLOTS * sizeof *chunk);
      for (uint32_t i = 0; i < CHUNK_SLOTS; i++)
        atomic_init(&chunk[i].state, 0);
      _Atomic(object_slot *) *chunks = atomic_load_explicit(&t->chunks, memory_order_relaxed);
      atomic_store_explicit(&chunks[index >> CHUNK_BITS], chunk, memory_order_release);
    }
    t->used++;
    s = slot_at(t, index);
  }
  pthread_mutex_unlock(&t->lock);
  s->object = object;
  uint32_t gen = gen_of(atomic_load_explicit(&s->state, memory_order_relaxed)) + 1; /* odd: live */
  atomic_store_explicit(&s->state, (uint64_t)gen << 32 | 1u, memory_order_release);
  *out_id = (uint64_t)gen << 32 | (uint64_t)kind << 28 | index;
  return FERRY_OK;
}

void *ferry__object_get(ferry_object_kind kind, uint64_t id) {
  uint32_t gen;
  object_slot *s = named(kind, id, &gen);
  if (!s || !(gen & 1)) return NULL;
  uint64_t cur = atomic_load_explicit(&s->state, memory_order_acquire);
  while (gen_of(cur) == gen && refs_of(cur) > 0) {
    if (atomic_compare_exchange_weak_explicit(&s->state, &cur, cur + 1, memory_order_acquire, memory_order_acquire))
      return s->object;
  }
  return NULL;
}

void ferry__object_hold(ferry_object_kind kind, uint64_t id) {
  uint32_t gen;
  object_slot *s = named(kind, id, &gen);
  if (s) atomic_fetch_add_explicit(&s->state, 1, memory_order_relaxed);
}

/* The slot goes back to the free list once its last reference is gone and its
 * handle is dead; a slot whose generations ran out is retired for good. */
static void slot_free(ferry_object_kind kind, uint64_t id, object_slot *s) {
  object_table *t = &tables[kind];
  if (gen_of(atomic_load(&s->state)) >= FERRY_GENERATION_LIMIT) return;
  pthread_mutex_lock(&t->lock);
  s->object = NULL;
  s->next_free = t->free_head;
  t->free_head = (uint32_t)id & INDEX_MASK;
  pthread_mutex_unlock(&t->lock);
}

bool ferry__object_put(ferry_object_kind kind, uint64_t id) {
  uint32_t gen;
  object_slot *s = named(kind, id, &gen);
  if (!s) return false;
  uint64_t before = atomic_fetch_sub_explicit(&s->state, 1, memory_order_acq_rel);
  if (refs_of(before) != 1) return false;
  if (gen_of(before) & 1) return false; /* the owner's reference cannot be the last while live */
  slot_free(kind, id, s);
  return true;
}

ferry_retire ferry__object_retire(ferry_object_kind kind, uint64_t id) {
  uint32_t gen;
  object_slot *s = named(kind, id, &gen);
  if (!s || !(gen & 1)) return FERRY_RETIRE_STALE;
  uint64_t cur = atomic_load_explicit(&s->state, memory_order_acquire);
  for (;;) {
    if (gen_of(cur) != gen || refs_of(cur) == 0) return FERRY_RETIRE_STALE;
    uint64_t next = (uint64_t)(gen + 1) << 32 | (refs_of(cur) - 1);
    if (atomic_compare_exchange_weak_explicit(&s->state, &cur, next, memory_order_acq_rel, memory_order_acquire)) break;
  }
  if (refs_of(cur) - 1 > 0) return FERRY_RETIRE_HELD;
  slot_free(kind, id, s);
  return FERRY_RETIRE_LAST;
}
