/*
 * The handle table.
 *
 * A handle is (generation << 32 | slot index). Each slot holds one 64-bit atomic
 * word, generation << 32 | references. A generation is odd while the slot holds
 * a live buffer and even once it is freed; every reuse moves it on, and slots
 * whose generation would wrap are retired, so an old handle never matches again.
 * Across ferry_shutdown() the table is freed but the next one starts above every
 * generation handed out before, so pre-shutdown handles stay stale too.
 *
 * Lookups take no lock: one compare-and-swap adds a reference if the generation
 * still matches, and the last reference to go releases the memory. A buffer freed
 * while another thread is inside a transfer on it therefore stays valid until
 * that transfer ends.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_BITS  12
#define CHUNK_SLOTS (1u << CHUNK_BITS)
#define MAX_CHUNKS  (1u << 16) /* 2^28 live buffers at most */
#define NO_SLOT     UINT32_MAX
#define GEN_RETIRE  0xFFFFFFF0u /* a slot whose dead generation reaches this is not reused */

static struct {
  _Atomic(ferry_slot *) *chunks; /* MAX_CHUNKS entries; each chunk never moves */
  pthread_mutex_t lock;          /* slot allocation and the free list */
  uint32_t used;                 /* slots ever handed out in this table */
  uint32_t free_head;
} table = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Generations start here in a new table: above everything before the last shutdown. */
static uint32_t generation_floor = 1;
static uint64_t serial_counter; /* under table.lock */
/* Set while ferry__handles_shutdown releases every buffer: references held past
 * ferry_free (DLPack exports) are then gone with the session. */
static bool shutting_down;

static inline uint32_t state_gen(uint64_t s) { return (uint32_t)(s >> 32); }
static inline uint32_t state_refs(uint64_t s) { return (uint32_t)s; }

ferry_status ferry__handles_init(void) {
  table.chunks = calloc(MAX_CHUNKS, sizeof *table.chunks);
  if (!table.chunks) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "ferry_init: no host memory for the handle table");
  table.used = 0;
  table.free_head = NO_SLOT;
  return FERRY_OK;
}

static ferry_slot *slot_at(uint32_t index) {
  ferry_slot *chunk = atomic_load_explicit(&table.chunks[index >> CHUNK_BITS], memory_order_acquire);
  return chunk ? &chunk[index & (CHUNK_SLOTS - 1)] : NULL;
}

ferry_status ferry__slot_new(ferry_slot **out_slot, uint32_t *out_index) {
  pthread_mutex_lock(&table.lock);
  uint32_t index;
  ferry_slot *slot;
  if (table.free_head != NO_SLOT) {
    index = table.free_head;
    slot = slot_at(index);
    table.free_head = slot->next_free;
  } else {
    if (table.used == (uint32_t)MAX_CHUNKS * CHUNK_SLOTS) {
      pthread_mutex_unlock(&table.lock);
      return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "the handle table is full (%u buffers)",
                         (unsigned)MAX_CHUNKS * CHUNK_SLOTS);
    }
    index = table.used;
    if ((index & (CHUNK_SLOTS - 1)) == 0) {
      ferry_slot *chunk = calloc(CHUNK_SLOTS, sizeof *chunk);
      if (!chunk) {
        pthread_mutex_unlock(&table.lock);
        return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for %u more buffer handles", CHUNK_SLOTS);
      }
      /* Dead generations just below the floor: the first live one is the floor. */
      for (uint32_t i = 0; i < CHUNK_SLOTS; i++)
        atomic_init(&chunk[i].state, (uint64_t)(generation_floor - 1) << 32);
      atomic_store_explicit(&table.chunks[index >> CHUNK_BITS], chunk, memory_order_release);
    }
    table.used++;
    slot = slot_at(index);
  }
  uint64_t serial = ++serial_counter;
  pthread_mutex_unlock(&table.lock);
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
  pthread_mutex_lock(&table.lock);
  slot->next_free = table.free_head;
  table.free_head = index;
  pthread_mutex_unlock(&table.lock);
}

void ferry__slot_abandon(ferry_slot *slot, uint32_t index) { slot_recycle(slot, index); }

static ferry_slot *lookup(ferry_buffer b) {
  uint32_t index = (uint32_t)b.id;
  uint32_t gen = (uint32_t)(b.id >> 32);
  if (!(gen & 1u) || !table.chunks || index >= (uint32_t)MAX_CHUNKS * CHUNK_SLOTS) return NULL;
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

void ferry__release(ferry_slot *slot) {
  uint64_t prev = atomic_fetch_sub_explicit(&slot->state, 1, memory_order_acq_rel);
  if (state_refs(prev) == 1) {
    /* Only a retired buffer can lose its last reference here: a live one still
     * holds its owner's. The error, if any, has nobody to go to but stderr. */
    if (slot_finish(slot, slot->index) != FERRY_OK)
      fprintf(stderr, "ferry: releasing a freed buffer's memory failed: %s\n", ferry_last_error());
  }
}

ferry_status ferry__retire(ferry_buffer b, const char *fn) {
  /* One compare-and-swap: the next (even) generation, and the owner's reference
   * dropped. Whoever drops the last reference gives the memory back: this call,
   * or a transfer in another thread that still holds the buffer. */
  uint32_t index = (uint32_t)b.id, gen = (uint32_t)(b.id >> 32);
  ferry_slot *slot = NULL;
  if ((gen & 1u) && table.chunks && index < (uint32_t)MAX_CHUNKS * CHUNK_SLOTS) slot = slot_at(index);
  uint64_t s = slot ? atomic_load_explicit(&slot->state, memory_order_acquire) : 0;
  uint64_t next;
  do {
    if (!slot || state_gen(s) != gen) {
      ferry_slot *unused;
      return ferry__acquire(b, fn, &unused); /* not live: the stale sentence (it cannot succeed) */
    }
    next = ((uint64_t)(gen + 1) << 32) | (state_refs(s) - 1);
  } while (!atomic_compare_exchange_weak_explicit(&slot->state, &s, next, memory_order_acq_rel, memory_order_acquire));
  return state_refs(next) == 0 ? slot_finish(slot, index) : FERRY_OK;
}

ferry_slot *ferry__held_slot(ferry_buffer b) {
  uint32_t index = (uint32_t)b.id, gen = (uint32_t)(b.id >> 32);
  if (shutting_down || !table.chunks || !(gen & 1u) || index >= (uint32_t)MAX_CHUNKS * CHUNK_SLOTS) return NULL;
  ferry_slot *slot = slot_at(index);
  if (!slot) return NULL;
  /* A held reference keeps the slot from being reused, so in its own session the
   * generation is gen (live) or gen + 1 (freed); a later session's table starts
   * above both. */
  uint32_t now = state_gen(atomic_load_explicit(&slot->state, memory_order_acquire));
  return now == gen || now == gen + 1 ? slot : NULL;
}

void ferry__release_held(ferry_buffer b) {
  ferry_slot *slot = ferry__held_slot(b);
  if (slot) ferry__release(slot);
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

void ferry__handles_shutdown(bool report_leaks) {
  if (!table.chunks) return;
  uint32_t highest = generation_floor;
  size_t leaked = 0;
  shutting_down = true;
  for (uint32_t i = 0; i < table.used; i++) {
    ferry_slot *slot = slot_at(i);
    uint64_t s = atomic_load(&slot->state);
    uint32_t gen = state_gen(s);
    if (gen > highest) highest = gen;
    /* Live buffers, and freed ones whose memory a DLPack tensor still holds. */
    bool freed_but_held = !(gen & 1u) && state_refs(s) > 0;
    if (!(gen & 1u) && !freed_but_held) continue;
    if (report_leaks) {
      char text[512];
      if (leaked == 0) fprintf(stderr, "ferry: buffers still live at ferry_shutdown():\n");
      fprintf(stderr, "ferry:   %s, %zu bytes%s%s\n", ferry__buffer_text(slot, text), slot->bytes,
              slot->over_host_array ? ", over a host array" : "",
              freed_but_held ? ", freed but still held by a DLPack tensor" : "");
    }
    leaked++;
    if (ferry__slot_destroy_memory(slot) != FERRY_OK)
      fprintf(stderr, "ferry: ferry_shutdown: %s\n", ferry_last_error());
  }
  if (report_leaks && leaked) fprintf(stderr, "ferry: %zu buffer(s) were not freed\n", leaked);
  if (report_leaks && !leaked) fprintf(stderr, "ferry: no buffers leaked\n");
  for (uint32_t c = 0; c < MAX_CHUNKS; c++) {
    ferry_slot *chunk = atomic_load(&table.chunks[c]);
    if (!chunk) break;
    free(chunk);
  }
  free(table.chunks);
  table.chunks = NULL;
  shutting_down = false;
  /* Next session: generations start above every one handed out (odd, live). */
  generation_floor = (highest + 2) | 1u;
  if (generation_floor >= GEN_RETIRE) generation_floor = 1; /* after ~2^31 shutdowns; cannot happen in practice */
}
