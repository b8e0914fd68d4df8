/*
 * Lanes, tickets, gates and timing markers, on timeline semaphores (Vulkan
 * 1.2, or VK_KHR_timeline_semaphore on 1.1). Devices without them have no
 * lanes: the core runs their queues on its own thread, and transfers wait
 * for fences (vulkan_transfer.c).
 *
 *  - A lane is a chain of submissions: each waits for the lane's timeline at
 *    the value the one before it signals and signals the next, so the lane's
 *    work runs in order, whichever of the device's VkQueues each submission
 *    goes to (DMA may go to a transfer family's queue). Submissions of one lane
 *    are made in value order under the lane's lock.
 *  - A ticket is a value of a lane's timeline: complete once the counter has
 *    reached it (vkGetSemaphoreCounterValue; waited for with vkWaitSemaphores).
 *    A plain ticket is the lane's index and the value; a timing marker's is a
 *    record of its timestamp query. A marker without timing submits nothing.
 *  - A gate is a timeline semaphore that only the host signals
 *    (vkSignalSemaphore); gate_push submits an empty batch of the lane that
 *    waits for it. Gates are pooled: a gate taken again starts at the value
 *    it was left at. They are offered only under FERRY_VULKAN_DEBUG=gates
 *    (vulkan.c says why).
 *  - lane_wait for another lane of the device submits an empty batch that waits
 *    for that lane's timeline; for another device it is FERRY_ERROR_UNSUPPORTED
 *    (the core waits on the host and raises a gate).
 *
 * A driver may run a VkQueue's submissions in order on one thread (Mesa's
 * lavapipe does): a batch waiting for a gate then holds every later batch of
 * that VkQueue, of every lane, until the gate is raised. That stalls but cannot
 * deadlock, because every wait is for a value signalled by a batch submitted
 * earlier or by the host, and the core raises gates after host progress and
 * work pushed before them only. Nothing here makes a wait that depends on work
 * submitted later.
 *
 * Semaphores are never destroyed before the device: a batch of one lane may
 * still wait on another lane's timeline after that lane went (its semaphore is
 * pooled for the next lane, counting on from where it stopped).
 *
 * Non-coherent host memory: a DMA into it is invalidated once its lane's
 * timeline has passed it, by whichever thread first sees a ticket of the
 * device complete (the core waits tickets on its queue threads, and a program
 * may learn of the completion through any later ticket, of any lane that
 * waited for this one), before that ticket's wait or query returns. A DMA
 * from it is flushed when pushed and again when the gate it was pushed behind
 * is raised (the core writes the bytes between the two).
 */
#include "vulkan_internal.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TICKET_TIMING     (UINT64_C(1) << 63) /* the rest is a vkb_timing * */
#define TICKET_VALUE_BITS 48                  /* plain: index << 48 | value */
#define TICKET_VALUE_MAX  ((UINT64_C(1) << TICKET_VALUE_BITS) - 1)

/* ---- the lane table --------------------------------------------------------------- */

static vkb_lane *lane_at(vkb_device *d, uint32_t index) {
  _Atomic(vkb_lane *) *page = d->lane_pages[index / VKB_LANE_PAGE];
  return page ? atomic_load_explicit(&page[index % VKB_LANE_PAGE], memory_order_acquire) : NULL;
}

ferry_ticket ferry__vkb_lane_ticket(const vkb_lane *l, uint64_t value) {
  return ((uint64_t)l->index << TICKET_VALUE_BITS) | value;
}

/* The lane and value of a ticket. */
static void ticket_decode(vkb_device *d, ferry_ticket t, vkb_lane **l, uint64_t *value) {
  if (t & TICKET_TIMING) {
    const vkb_timing *rec = (const vkb_timing *)(uintptr_t)(t & ~TICKET_TIMING);
    *l = rec->lane;
    *value = rec->value;
  } else {
    *l = lane_at(d, (uint32_t)(t >> TICKET_VALUE_BITS));
    *value = t & TICKET_VALUE_MAX;
  }
}

vkb_lane *ferry__vkb_lane_of(ferry_device *dev, ferry_lane *lane) {
  vkb_device *d = dev->impl;
  return lane ? (vkb_lane *)lane : d->own_lane;
}

/* ---- semaphores ------------------------------------------------------------------- */

static ferry_status timeline_make(ferry_device *dev, VkSemaphore *out, const char *what) {
  vkb_device *d = dev->impl;
  VkSemaphoreTypeCreateInfo type = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                    .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE};
  VkSemaphoreCreateInfo info = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &type};
  VkResult r = ferry__vk()->vkCreateSemaphore(d->device, &info, NULL, out);
  if (r != VK_SUCCESS) {
    *out = VK_NULL_HANDLE;
    return ferry__vkb_fail(dev, "vkCreateSemaphore", r, "for a timeline semaphore (%s), initial value 0", what);
  }
  return FERRY_OK;
}

static ferry_status counter_of(ferry_device *dev, VkSemaphore s, uint64_t *out, const char *what) {
  vkb_device *d = dev->impl;
  VkResult r = d->get_counter(d->device, s, out);
  return r == VK_SUCCESS ? FERRY_OK : ferry__vkb_fail(dev, "vkGetSemaphoreCounterValue", r, "for %s", what);
}

static uint64_t monotonic_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void note_done(vkb_lane *l, uint64_t value) {
  uint64_t seen = atomic_load_explicit(&l->done, memory_order_relaxed);
  while (seen < value &&
         !atomic_compare_exchange_weak_explicit(&l->done, &seen, value, memory_order_release, memory_order_relaxed)) {
  }
}

/* Has the lane's timeline reached `value`? Asks the driver only when not known. */
static ferry_status lane_reached(ferry_device *dev, vkb_lane *l, uint64_t value, bool *out) {
  if (atomic_load_explicit(&l->done, memory_order_acquire) >= value) {
    *out = true;
    return FERRY_OK;
  }
  uint64_t now = 0;
  ferry_status st = counter_of(dev, l->timeline, &now, "a lane's timeline");
  if (st != FERRY_OK) return st;
  note_done(l, now);
  *out = now >= value;
  return FERRY_OK;
}

/* ---- invalidations after DMA into non-coherent memory --------------------------------- */

/* Invalidates every range whose lane has passed it (only_lane: that lane's
 * alone, all of which are complete). */
static void invalidate_passed(ferry_device *dev, vkb_lane *only_lane) {
  vkb_device *d = dev->impl;
  if (atomic_load_explicit(&d->inval_count, memory_order_acquire) == 0) return;
  pthread_mutex_lock(&d->inval_lock);
  for (vkb_inval **link = &d->invals; *link;) {
    vkb_inval *e = *link;
    bool passed = false;
    if (only_lane)
      passed = e->lane == only_lane;
    else if (lane_reached(dev, e->lane, e->value, &passed) != FERRY_OK)
      passed = false; /* the failure is the ticket's to report */
    if (!passed) {
      link = &e->next;
      continue;
    }
    *link = e->next;
    atomic_fetch_sub(&d->inval_count, 1);
    (void)ferry__vkb_flush(dev, e->range.memory, e->range.mem_size, e->range.offset, e->range.bytes, false);
    free(e);
  }
  pthread_mutex_unlock(&d->inval_lock);
}

/* The ticket's work is known complete: what it leaves to the host is done before anyone reads. */
static void observed(ferry_device *dev, vkb_lane *l, uint64_t value) {
  note_done(l, value);
  invalidate_passed(dev, NULL);
}

/* ---- submission ------------------------------------------------------------------- */

/* Records a flush for the lane's latest gate when it is not raised yet (the
 * lane's lock held); *out the record, NULL when none was needed. */
static ferry_status flush_at_gate(ferry_device *dev, vkb_lane *l, const vkb_range *range, vkb_flush **out) {
  *out = NULL;
  vkb_gate *g = l->gate;
  if (!g) return FERRY_OK;
  pthread_mutex_lock(&g->lock);
  if (g->raised < l->gate_value) {
    vkb_flush *f = malloc(sizeof *f);
    if (!f) {
      pthread_mutex_unlock(&g->lock);
      return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory to note a flush behind a gate on %s", dev->label);
    }
    *f = (vkb_flush){.next = g->flushes, .value = l->gate_value, .range = *range};
    g->flushes = f;
    *out = f;
  }
  pthread_mutex_unlock(&g->lock);
  return FERRY_OK;
}

static void flush_forget(vkb_gate *g, vkb_flush *f) {
  pthread_mutex_lock(&g->lock);
  for (vkb_flush **link = &g->flushes; *link; link = &(*link)->next)
    if (*link == f) {
      *link = f->next;
      free(f);
      break;
    }
  pthread_mutex_unlock(&g->lock);
}

ferry_status ferry__vkb_lane_submit(ferry_device *dev, vkb_lane *l, vkb_queue *queue, vkb_ctx *c,
                                    const vkb_submit_extra *extra, const char *what, uint64_t *out_value) {
  static const vkb_submit_extra none = {0};
  if (!extra) extra = &none;
  vkb_inval *inval = NULL;
  if (extra->inval && !(inval = malloc(sizeof *inval)))
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory to note an invalidation on %s", dev->label);
  VkSemaphore waits[2];
  uint64_t wait_values[2];
  VkFlags stages[2] = {VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT};
  uint32_t n = 0;
  pthread_mutex_lock(&l->lock);
  uint64_t value = l->last + 1;
  vkb_flush *noted = NULL;
  vkb_gate *gate = l->gate;
  ferry_status st = FERRY_OK;
  if (value > TICKET_VALUE_MAX)
    st = ferry__fail(FERRY_ERROR_BACKEND, "lane %u of %s has used up its timeline (value %llu)", l->index, dev->label,
                     (unsigned long long)value);
  /* A flush after the gate check: if the gate was raised already, the host's
   * writes came before, and this flush covers them; if not, its raise will. */
  if (st == FERRY_OK && extra->flush && (st = flush_at_gate(dev, l, extra->flush, &noted)) == FERRY_OK)
    st = ferry__vkb_flush(dev, extra->flush->memory, extra->flush->mem_size, extra->flush->offset, extra->flush->bytes,
                          true);
  if (st != FERRY_OK) {
    if (noted) flush_forget(gate, noted);
    pthread_mutex_unlock(&l->lock);
    free(inval);
    return st;
  }
  if (l->last > l->base) { /* the lane's work before (none yet: the timeline is at base already) */
    waits[n] = l->timeline;
    wait_values[n++] = l->last;
  }
  if (extra->wait) {
    waits[n] = extra->wait;
    wait_values[n++] = extra->wait_value;
  }
  VkTimelineSemaphoreSubmitInfo values = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                          .waitSemaphoreValueCount = n,
                                          .pWaitSemaphoreValues = n ? wait_values : NULL,
                                          .signalSemaphoreValueCount = 1,
                                          .pSignalSemaphoreValues = &value};
  VkSubmitInfo info = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .pNext = &values,
                       .waitSemaphoreCount = n,
                       .pWaitSemaphores = n ? waits : NULL,
                       .pWaitDstStageMask = n ? stages : NULL,
                       .commandBufferCount = c ? 1 : 0,
                       .pCommandBuffers = c ? &c->cmd.cb : NULL,
                       .signalSemaphoreCount = 1,
                       .pSignalSemaphores = &l->timeline};
  pthread_mutex_lock(&queue->lock);
  VkResult r = ferry__vk()->vkQueueSubmit(queue->queue, 1, &info, VK_NULL_HANDLE);
  pthread_mutex_unlock(&queue->lock);
  if (r != VK_SUCCESS) {
    if (noted) flush_forget(gate, noted);
    pthread_mutex_unlock(&l->lock);
    free(inval);
    return ferry__vkb_fail(dev, "vkQueueSubmit", r,
                           "for %s on lane %u (queue family %u, timeline value %llu, %u wait%s)", what, l->index,
                           queue->family, (unsigned long long)value, n, n == 1 ? "" : "s");
  }
  l->last = value;
  if (extra->gate) {
    /* DMAs pushed next from non-coherent memory are flushed again when it is raised. */
    l->gate = extra->gate;
    l->gate_value = extra->wait_value;
  }
  if (c) {
    c->value = value;
    c->next = NULL;
    if (l->flight_tail)
      l->flight_tail->next = c;
    else
      l->flight = c;
    l->flight_tail = c;
  }
  if (inval) {
    /* Noted before the lock goes, so that no ticket of the lane can be seen complete without it. */
    vkb_device *d = dev->impl;
    *inval = (vkb_inval){.lane = l, .value = value, .range = *extra->inval};
    pthread_mutex_lock(&d->inval_lock);
    inval->next = d->invals;
    d->invals = inval;
    atomic_fetch_add(&d->inval_count, 1);
    pthread_mutex_unlock(&d->inval_lock);
  }
  pthread_mutex_unlock(&l->lock);
  if (out_value) *out_value = value;
  return FERRY_OK;
}

void ferry__vkb_lane_reclaim(ferry_device *dev, vkb_lane *l) {
  uint64_t now = 0;
  pthread_mutex_lock(&l->lock);
  if (l->flight && l->flight->value > atomic_load(&l->done) && counter_of(dev, l->timeline, &now, "a lane") == FERRY_OK)
    note_done(l, now);
  uint64_t done = atomic_load(&l->done);
  vkb_ctx *back = NULL;
  while (l->flight && l->flight->value <= done) {
    vkb_ctx *c = l->flight;
    l->flight = c->next;
    c->next = back;
    back = c;
  }
  if (!l->flight) l->flight_tail = NULL;
  while (back) { /* the lane's own, for its next submissions */
    vkb_ctx *c = back;
    back = c->next;
    c->next = l->spare;
    l->spare = c;
  }
  pthread_mutex_unlock(&l->lock);
}

vkb_ctx *ferry__vkb_lane_spare(vkb_lane *l, vkb_queue *queue) {
  pthread_mutex_lock(&l->lock);
  vkb_ctx **at = &l->spare;
  while (*at && (*at)->queue != queue)
    at = &(*at)->next;
  vkb_ctx *c = *at;
  if (c) *at = c->next;
  pthread_mutex_unlock(&l->lock);
  return c;
}

/* A lane's spare contexts back to their queues' pools, for the lanes to come. */
static void lane_spares_back(vkb_lane *l) {
  pthread_mutex_lock(&l->lock);
  vkb_ctx *c = l->spare;
  l->spare = NULL;
  pthread_mutex_unlock(&l->lock);
  while (c) {
    vkb_ctx *next = c->next;
    ferry__vkb_ctx_give(c);
    c = next;
  }
}

/* ---- waiting ----------------------------------------------------------------------- */

/* Waits for the lane's timeline to reach `value`: polls for up to d->spin_ns
 * (NVIDIA's waits wake late, see vulkan_transfer.c), then sleeps in
 * vkWaitSemaphores. */
static ferry_status lane_wait_value(ferry_device *dev, vkb_lane *l, uint64_t value, const char *what) {
  vkb_device *d = dev->impl;
  bool reached = false;
  ferry_status st = lane_reached(dev, l, value, &reached);
  if (st != FERRY_OK || reached) return st;
  if (d->spin_ns) {
    uint64_t start = monotonic_ns();
    while (monotonic_ns() - start < d->spin_ns) {
      sched_yield();
      if ((st = lane_reached(dev, l, value, &reached)) != FERRY_OK || reached) return st;
    }
  }
  VkSemaphoreWaitInfo info = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
                              .semaphoreCount = 1,
                              .pSemaphores = &l->timeline,
                              .pValues = &value};
  VkResult r = d->wait_semaphores(d->device, &info, UINT64_MAX);
  if (r != VK_SUCCESS)
    return ferry__vkb_fail(dev, "vkWaitSemaphores", r, "for %s (lane %u, timeline value %llu)", what, l->index,
                           (unsigned long long)value);
  note_done(l, value);
  return FERRY_OK;
}

ferry_status ferry__vkb_lane_settle(ferry_device *dev, vkb_lane *l) {
  pthread_mutex_lock(&l->lock);
  uint64_t last = l->last;
  pthread_mutex_unlock(&l->lock);
  if (atomic_load_explicit(&l->done, memory_order_acquire) >= last) return FERRY_OK;
  ferry_status st = lane_wait_value(dev, l, last, "the lane's work before a transfer");
  if (st == FERRY_OK) observed(dev, l, last);
  return st;
}

ferry_status ferry__vkb_ticket_query(ferry_device *dev, ferry_ticket ticket) {
  vkb_lane *l;
  uint64_t value;
  ticket_decode(dev->impl, ticket, &l, &value);
  bool reached = false;
  ferry_status st = lane_reached(dev, l, value, &reached);
  if (st != FERRY_OK) return st;
  if (!reached) return FERRY_NOT_READY;
  observed(dev, l, value);
  return FERRY_OK;
}

ferry_status ferry__vkb_ticket_wait(ferry_device *dev, ferry_ticket ticket) {
  vkb_lane *l;
  uint64_t value;
  ticket_decode(dev->impl, ticket, &l, &value);
  ferry_status st = lane_wait_value(dev, l, value, "a lane's work");
  if (st == FERRY_OK) observed(dev, l, value);
  return st;
}

void ferry__vkb_ticket_release(ferry_device *dev, ferry_ticket ticket) {
  if (!(ticket & TICKET_TIMING)) return; /* a value: nothing held */
  vkb_device *d = dev->impl;
  vkb_timing *rec = (vkb_timing *)(uintptr_t)(ticket & ~TICKET_TIMING);
  pthread_mutex_lock(&d->timing_lock);
  rec->next = d->free_timing;
  d->free_timing = rec;
  pthread_mutex_unlock(&d->timing_lock);
}

/* ---- lanes ------------------------------------------------------------------------- */

/* Of `count` queues from `first`, the one fewest lanes are at home on (the
 * first of those), counted in; under lanes_lock. */
static vkb_queue *least_used(vkb_queue *first, uint32_t count) {
  vkb_queue *best = first;
  for (uint32_t i = 1; i < count; i++)
    if (first[i].lanes < best->lanes) best = &first[i];
  best->lanes++;
  return best;
}

/* Undoes least_used for a lane's queues (not the device's own lane, which
 * counts in none); under lanes_lock. */
static void lane_uncount(vkb_lane *l, bool own) {
  if (own) return;
  if (l->home) l->home->lanes--;
  if (l->xfer && l->xfer != l->home) l->xfer->lanes--;
}

/* A new lane on `home` (the device's own lane), else on a VkQueue of its own
 * while the family has one that no lane uses, then on the least used (its
 * submissions then share that VkQueue in the order they are made); DMA on the
 * least used transfer queue, where there are any. */
static ferry_status lane_new(ferry_device *dev, vkb_queue *home, vkb_lane **out) {
  vkb_device *d = dev->impl;
  vkb_lane *l = calloc(1, sizeof *l);
  if (!l) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for a lane of %s", dev->label);
  ferry_status st = FERRY_OK;
  pthread_mutex_lock(&d->lanes_lock);
  /* Room in the pools for every lane there may be, so that destroying one never fails. */
  uint32_t want = d->lane_next + 2;
  if (d->lane_free_cap < want) {
    uint32_t *grown = realloc(d->lane_free, want * 2 * sizeof *grown);
    if (grown) {
      d->lane_free = grown;
      d->lane_free_cap = want * 2;
    }
  }
  if (d->timeline_cap < want) {
    vkb_pooled_timeline *grown = realloc(d->timelines, want * 2 * sizeof *grown);
    if (grown) {
      d->timelines = grown;
      d->timeline_cap = want * 2;
    }
  }
  if (d->lane_free_cap < want || d->timeline_cap < want) {
    pthread_mutex_unlock(&d->lanes_lock);
    free(l);
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for the lane table of %s", dev->label);
  }
  l->home = home ? home : least_used(d->queues, d->compute_count);
  l->xfer = home ? home : d->xfer_count ? least_used(&d->queues[d->compute_count], d->xfer_count) : l->home;
  if (d->timeline_count > 0) {
    vkb_pooled_timeline p = d->timelines[--d->timeline_count];
    l->timeline = p.semaphore;
    l->base = p.value;
  }
  if (d->lane_free_count > 0) {
    l->index = d->lane_free[--d->lane_free_count];
  } else if (d->lane_next + 1 < VKB_LANE_PAGE * VKB_LANE_PAGES) {
    l->index = ++d->lane_next;
  } else {
    st = ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s has %u lanes, the most it can hold", dev->label,
                     VKB_LANE_PAGE * VKB_LANE_PAGES - 1);
  }
  uint32_t page = l->index / VKB_LANE_PAGE;
  if (st == FERRY_OK && !d->lane_pages[page]) {
    _Atomic(vkb_lane *) *p = calloc(VKB_LANE_PAGE, sizeof *p);
    if (p)
      d->lane_pages[page] = p;
    else
      st = ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for the lane table of %s", dev->label);
  }
  pthread_mutex_unlock(&d->lanes_lock);
  if (st == FERRY_OK && !l->timeline) st = timeline_make(dev, &l->timeline, "a lane");
  if (st != FERRY_OK) {
    pthread_mutex_lock(&d->lanes_lock);
    lane_uncount(l, home != NULL);
    if (l->timeline && d->timeline_count < d->timeline_cap)
      d->timelines[d->timeline_count++] = (vkb_pooled_timeline){l->timeline, l->base};
    if (l->index) d->lane_free[d->lane_free_count++] = l->index; /* lane_free has room for every index */
    pthread_mutex_unlock(&d->lanes_lock);
    free(l);
    return st;
  }
  l->last = l->base;
  atomic_init(&l->done, l->base);
  pthread_mutex_init(&l->lock, NULL);
  atomic_store_explicit(&d->lane_pages[page][l->index % VKB_LANE_PAGE], l, memory_order_release);
  *out = l;
  return FERRY_OK;
}

static void lane_free(ferry_device *dev, vkb_lane *l) {
  vkb_device *d = dev->impl;
  /* Its work has completed (the core's promise); waiting costs nothing then and keeps the pool's values true. */
  if (lane_wait_value(dev, l, l->last, "a lane's last work") != FERRY_OK) {
    /* A lost device: its semaphore cannot be trusted for a new lane. */
    (void)ferry__vk()->vkDeviceWaitIdle(d->device);
  }
  note_done(l, l->last);
  invalidate_passed(dev, l);
  ferry__vkb_lane_reclaim(dev, l);
  lane_spares_back(l);
  pthread_mutex_lock(&d->lanes_lock);
  lane_uncount(l, false);
  atomic_store_explicit(&d->lane_pages[l->index / VKB_LANE_PAGE][l->index % VKB_LANE_PAGE], NULL, memory_order_release);
  d->lane_free[d->lane_free_count++] = l->index;
  bool kept = d->timeline_count < d->timeline_cap;
  if (kept) d->timelines[d->timeline_count++] = (vkb_pooled_timeline){l->timeline, l->last};
  pthread_mutex_unlock(&d->lanes_lock);
  if (!kept) ferry__vk()->vkDestroySemaphore(d->device, l->timeline, NULL); /* the pool grows to fit: never */
  pthread_mutex_destroy(&l->lock);
  free(l);
}

ferry_status ferry__vkb_lane_create(ferry_device *dev, ferry_lane **out) {
  vkb_lane *l = NULL;
  ferry_status st = lane_new(dev, NULL, &l);
  if (st == FERRY_OK) *out = (ferry_lane *)l;
  return st;
}

void ferry__vkb_lane_destroy(ferry_device *dev, ferry_lane *lane) { lane_free(dev, (vkb_lane *)lane); }

ferry_status ferry__vkb_lane_native(ferry_device *dev, ferry_lane *lane, ferry_native *out) {
  vkb_lane *l = ferry__vkb_lane_of(dev, lane);
  out->queue = (uintptr_t)l->home->queue;
  out->queue_family = l->home->family;
  return FERRY_OK;
}

/* ---- markers and waits between lanes ------------------------------------------------ */

/* A record for a timing marker, with its query. */
static ferry_status timing_take(ferry_device *dev, vkb_timing **out) {
  vkb_device *d = dev->impl;
  pthread_mutex_lock(&d->timing_lock);
  if (!d->free_timing) {
    vkb_timing_page *page = calloc(1, sizeof *page);
    VkQueryPoolCreateInfo info = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                  .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                  .queryCount = VKB_TIMING_PAGE};
    VkResult r =
        page ? ferry__vk()->vkCreateQueryPool(d->device, &info, NULL, &page->pool) : VK_ERROR_OUT_OF_HOST_MEMORY;
    if (r != VK_SUCCESS) {
      pthread_mutex_unlock(&d->timing_lock);
      free(page);
      return ferry__vkb_fail(dev, "vkCreateQueryPool", r, "for %u timestamp queries", VKB_TIMING_PAGE);
    }
    for (uint32_t i = 0; i < VKB_TIMING_PAGE; i++) {
      page->records[i] = (vkb_timing){.next = d->free_timing, .pool = page->pool, .query = i};
      d->free_timing = &page->records[i];
    }
    page->next = d->timing_pages;
    d->timing_pages = page;
  }
  vkb_timing *rec = d->free_timing;
  d->free_timing = rec->next;
  pthread_mutex_unlock(&d->timing_lock);
  *out = rec;
  return FERRY_OK;
}

static ferry_status timing_marker(ferry_device *dev, vkb_lane *l, ferry_ticket *out) {
  static const char what[] = "a timing marker";
  vkb_timing *rec = NULL;
  ferry_status st = timing_take(dev, &rec);
  if (st != FERRY_OK) return st;
  vkb_ctx *c = NULL;
  if ((st = ferry__vkb_ctx_take(dev, l, l->home, &c)) == FERRY_OK &&
      (st = ferry__vkb_cmd_begin(dev, &c->cmd, what)) == FERRY_OK) {
    ferry__vk()->vkCmdResetQueryPool(c->cmd.cb, rec->pool, rec->query, 1);
    /* Once everything before it on the queue is done; the lane's work on other queues is waited for by the batch. */
    ferry__vk()->vkCmdWriteTimestamp(c->cmd.cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, rec->pool, rec->query);
    if ((st = ferry__vkb_cmd_end(dev, &c->cmd, what)) == FERRY_OK)
      st = ferry__vkb_lane_submit(dev, l, l->home, c, NULL, what, &rec->value);
  }
  if (st != FERRY_OK) {
    if (c) ferry__vkb_ctx_give(c);
    ferry__vkb_ticket_release(dev, TICKET_TIMING | (uintptr_t)rec);
    return st;
  }
  rec->lane = l;
  rec->queue = l->home;
  *out = TICKET_TIMING | (uintptr_t)rec;
  return FERRY_OK;
}

ferry_status ferry__vkb_marker(ferry_device *dev, ferry_lane *lane, bool timing, ferry_ticket *out) {
  vkb_device *d = dev->impl;
  vkb_lane *l = ferry__vkb_lane_of(dev, lane);
  /* Timestamps where the family has them; else a plain marker, and ticket_elapsed declines it. */
  if (timing && l->home->timestamp_bits > 0 && d->props.limits.timestampPeriod > 0) return timing_marker(dev, l, out);
  pthread_mutex_lock(&l->lock);
  uint64_t last = l->last;
  *out = last > l->base ? ferry__vkb_lane_ticket(l, last) : 0; /* nothing pushed yet: complete already */
  pthread_mutex_unlock(&l->lock);
  return FERRY_OK;
}

ferry_status ferry__vkb_ticket_elapsed(ferry_device *dev, ferry_ticket start, ferry_ticket stop, double *out_ms) {
  vkb_device *d = dev->impl;
  if (!(start & TICKET_TIMING) || !(stop & TICKET_TIMING)) return FERRY_ERROR_UNSUPPORTED;
  const vkb_timing *a = (const vkb_timing *)(uintptr_t)(start & ~TICKET_TIMING);
  const vkb_timing *b = (const vkb_timing *)(uintptr_t)(stop & ~TICKET_TIMING);
  /* Vulkan compares timestamps only of one queue; the core then takes the host's clock. */
  if (a->queue != b->queue) return FERRY_ERROR_UNSUPPORTED;
  uint64_t t[2];
  const vkb_timing *recs[2] = {a, b};
  for (int i = 0; i < 2; i++) {
    VkResult r = ferry__vk()->vkGetQueryPoolResults(d->device, recs[i]->pool, recs[i]->query, 1, sizeof t[i], &t[i],
                                                    sizeof t[i], VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (r != VK_SUCCESS)
      return ferry__vkb_fail(dev, "vkGetQueryPoolResults", r, "for timestamp query %u (a timing marker)",
                             recs[i]->query);
  }
  uint32_t bits = a->queue->timestamp_bits;
  uint64_t mask = bits >= 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
  uint64_t diff = (t[1] - t[0]) & mask;
  /* Stop before start (another lane's marker) is a negative interval, within the counter's wrap. */
  double ticks = diff > mask / 2 ? -(double)((mask - diff) + 1) : (double)diff;
  *out_ms = ticks * (double)d->props.limits.timestampPeriod / 1e6;
  return FERRY_OK;
}

ferry_status ferry__vkb_lane_wait(ferry_device *dev, ferry_lane *lane, ferry_device *ticket_dev, ferry_ticket ticket) {
  if (ticket_dev != dev) return FERRY_ERROR_UNSUPPORTED; /* another VkDevice: the core waits on the host */
  vkb_lane *l = ferry__vkb_lane_of(dev, lane), *other;
  uint64_t value;
  ticket_decode(dev->impl, ticket, &other, &value);
  if (other == l) return FERRY_OK; /* the lane's own order */
  bool reached = false;
  ferry_status st = lane_reached(dev, other, value, &reached);
  if (st != FERRY_OK || reached) return st;
  char what[96];
  snprintf(what, sizeof what, "a wait for lane %u at timeline value %llu", other->index, (unsigned long long)value);
  vkb_submit_extra extra = {.wait = other->timeline, .wait_value = value};
  return ferry__vkb_lane_submit(dev, l, l->home, NULL, &extra, what, NULL);
}

/* ---- gates ---------------------------------------------------------------------------- */

ferry_status ferry__vkb_gate_create(ferry_device *dev, ferry_gate **out) {
  vkb_device *d = dev->impl;
  pthread_mutex_lock(&d->lanes_lock);
  vkb_gate *g = d->free_gates;
  if (g) d->free_gates = g->next;
  pthread_mutex_unlock(&d->lanes_lock);
  if (!g) {
    if (!(g = calloc(1, sizeof *g)))
      return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for a gate of %s", dev->label);
    ferry_status st = timeline_make(dev, &g->semaphore, "a gate");
    if (st != FERRY_OK) {
      free(g);
      return st;
    }
    pthread_mutex_init(&g->lock, NULL);
  }
  g->next = NULL;
  g->base = g->raised; /* a pooled gate starts where it was left */
  *out = (ferry_gate *)g;
  return FERRY_OK;
}

ferry_status ferry__vkb_gate_push(ferry_device *dev, ferry_lane *lane, ferry_gate *gate, uint64_t value) {
  vkb_lane *l = ferry__vkb_lane_of(dev, lane);
  vkb_gate *g = (vkb_gate *)gate;
  char what[96];
  snprintf(what, sizeof what, "a wait for a gate at %llu (semaphore value %llu)", (unsigned long long)value,
           (unsigned long long)(g->base + value));
  vkb_submit_extra extra = {.wait = g->semaphore, .wait_value = g->base + value, .gate = g};
  return ferry__vkb_lane_submit(dev, l, l->home, NULL, &extra, what, NULL);
}

ferry_status ferry__vkb_gate_raise(ferry_device *dev, ferry_gate *gate, uint64_t value) {
  vkb_device *d = dev->impl;
  vkb_gate *g = (vkb_gate *)gate;
  ferry_status st = FERRY_OK;
  pthread_mutex_lock(&g->lock);
  uint64_t target = g->base + value;
  if (target > g->raised) { /* a timeline only grows: raising to a value it has is nothing */
    for (vkb_flush **link = &g->flushes; *link && st == FERRY_OK;) {
      vkb_flush *f = *link;
      if (f->value > target) {
        link = &f->next;
        continue;
      }
      st = ferry__vkb_flush(dev, f->range.memory, f->range.mem_size, f->range.offset, f->range.bytes, true);
      *link = f->next;
      free(f);
    }
    VkSemaphoreSignalInfo info = {
        .sType = VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO, .semaphore = g->semaphore, .value = target};
    VkResult r = d->signal_semaphore(d->device, &info);
    if (r == VK_SUCCESS)
      g->raised = target;
    else if (st == FERRY_OK)
      st = ferry__vkb_fail(dev, "vkSignalSemaphore", r, "raising a gate to %llu (semaphore value %llu, was %llu)",
                           (unsigned long long)value, (unsigned long long)target, (unsigned long long)g->raised);
  }
  pthread_mutex_unlock(&g->lock);
  return st;
}

void ferry__vkb_gate_destroy(ferry_device *dev, ferry_gate *gate) {
  vkb_device *d = dev->impl;
  vkb_gate *g = (vkb_gate *)gate;
  pthread_mutex_lock(&g->lock);
  while (g->flushes) { /* every value was raised (the core's promise): none is left */
    vkb_flush *f = g->flushes;
    g->flushes = f->next;
    free(f);
  }
  pthread_mutex_unlock(&g->lock);
  pthread_mutex_lock(&d->lanes_lock);
  g->next = d->free_gates;
  d->free_gates = g;
  pthread_mutex_unlock(&d->lanes_lock);
}

/* ---- the device ------------------------------------------------------------------------ */

ferry_status ferry__vkb_lanes_setup(ferry_device *dev) {
  vkb_device *d = dev->impl;
  pthread_mutex_init(&d->lanes_lock, NULL);
  pthread_mutex_init(&d->inval_lock, NULL);
  pthread_mutex_init(&d->timing_lock, NULL);
  atomic_init(&d->inval_count, 0);
  d->lanes_ready = true;
  d->lane_free_cap = d->timeline_cap = 8;
  d->lane_free = calloc(d->lane_free_cap, sizeof *d->lane_free);
  d->timelines = calloc(d->timeline_cap, sizeof *d->timelines);
  if (!d->lane_free || !d->timelines)
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for the lane table of %s", dev->label);
  vkb_lane *own = NULL;
  ferry_status st = lane_new(dev, d->compute, &own); /* counted on no queue: the core's first lane has the first */
  if (st == FERRY_OK) d->own_lane = own;
  return st;
}

void ferry__vkb_lanes_teardown(vkb_device *d) {
  if (!d->lanes_ready) return;
  const ferry_vk_api *v = ferry__vk();
  if (d->own_lane) { /* after vkDeviceWaitIdle: its contexts go back to their queues, to be destroyed there */
    vkb_lane *l = d->own_lane;
    while (l->flight) {
      vkb_ctx *c = l->flight;
      l->flight = c->next;
      ferry__vkb_ctx_give(c);
    }
    lane_spares_back(l);
    v->vkDestroySemaphore(d->device, l->timeline, NULL);
    pthread_mutex_destroy(&l->lock);
    free(l);
    d->own_lane = NULL;
  }
  for (uint32_t i = 0; i < d->timeline_count; i++)
    v->vkDestroySemaphore(d->device, d->timelines[i].semaphore, NULL);
  while (d->free_gates) {
    vkb_gate *g = d->free_gates;
    d->free_gates = g->next;
    v->vkDestroySemaphore(d->device, g->semaphore, NULL);
    pthread_mutex_destroy(&g->lock);
    free(g);
  }
  while (d->timing_pages) {
    vkb_timing_page *p = d->timing_pages;
    d->timing_pages = p->next;
    v->vkDestroyQueryPool(d->device, p->pool, NULL);
    free(p);
  }
  while (d->invals) {
    vkb_inval *e = d->invals;
    d->invals = e->next;
    free(e);
  }
  for (uint32_t p = 0; p < VKB_LANE_PAGES; p++)
    free(d->lane_pages[p]);
  free(d->lane_free);
  free(d->timelines);
  pthread_mutex_destroy(&d->lanes_lock);
  pthread_mutex_destroy(&d->inval_lock);
  pthread_mutex_destroy(&d->timing_lock);
  d->lanes_ready = false;
}
