/*
 * A Metal device's queues: lanes, markers, gates and tickets.
 *
 *  - a lane is an MTLCommandQueue of its own (newCommandQueue), which
 *    ferry_queue_native hands out: command buffers the program commits there
 *    run after ferry's, in commit order;
 *  - every operation is one command buffer (blits, or nothing but waits and
 *    signals), committed by the submitting thread; at its end it signals the
 *    lane's MTLSharedEvent with the lane's next value, so that another lane,
 *    of this device or another Metal device, waits for it on the GPU
 *    (encodeWaitForEvent:value:), never on the host; and it begins with a wait
 *    for the value of the one before it, since Metal lets command buffers of
 *    one queue that share no resource run at once and finish in any order;
 *  - a gate is an MTLSharedEvent of its own: gate_push commits a command buffer
 *    that waits for the value, gate_raise sets signaledValue from the host;
 *  - a ticket is the command buffer: waitUntilCompleted, then its status and
 *    error; queried by its status. Work nobody took a ticket for stays with
 *    the lane until a later ticket of the lane is finished, which reports its
 *    failure (Metal has no sticky errors: a failed command buffer does not fail
 *    the ones after it);
 *  - a timing marker is a command buffer that fills a 4-byte word of the lane,
 *    so that it is GPU work with GPU times: ferry_event_elapsed is the
 *    difference of two markers' GPUEndTime (the host's time base, in seconds).
 *
 * The synchronous calls do not use lanes (FERRY_CAP_SYNC_NO_LANES): they run on
 * the device's own queue, and move the bytes a blit cannot (macOS blits whole
 * words at word offsets) through the host, complete on return. A queue's work
 * that is not whole words (FERRY_CAP_LANE_WORDS) runs on the queue's thread
 * the same way, behind a gate.
 */
#include "metal_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static metal_ticket *ticket_of(ferry_ticket t) { return (metal_ticket *)(uintptr_t)t; }

/* ---- lanes ------------------------------------------------------------------------------ */

ferry_status ferry__metal_lane_create(ferry_device *dev, ferry_lane **out) {
  metal_device *md = dev->impl;
  metal_lane *l = calloc(1, sizeof *l);
  if (!l) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for a command queue of %s", dev->label);
  ferry_status st = FERRY_OK;
  void *pool = ferry__metal_rt.pool_push();
  l->queue = mtl_new_command_queue(md->device);
  l->event = l->queue ? mtl_new_shared_event(md->device) : MTL_NIL;
  l->word = l->event ? mtl_new_buffer_with_length(md->device, 4, MTL_RESOURCE_STORAGE_PRIVATE) : MTL_NIL;
  if (!l->queue)
    st = ferry__fail(FERRY_ERROR_BACKEND, "newCommandQueue on %s returned nil (a queue of ferry's)", dev->label);
  else if (!l->event)
    st = ferry__fail(FERRY_ERROR_BACKEND, "newSharedEvent on %s returned nil (a queue's event)", dev->label);
  else if (!l->word)
    st = ferry__metal_no_buffer(dev, 4, "private", "a queue's word for timing markers");
  if (st != FERRY_OK) {
    if (l->word) mtl_release(l->word);
    if (l->event) mtl_release(l->event);
    if (l->queue) mtl_release(l->queue);
    free(l);
  }
  ferry__metal_rt.pool_pop(pool);
  if (st != FERRY_OK) return st;
  pthread_mutex_init(&l->lock, NULL);
  pthread_mutex_lock(&md->lanes_lock);
  l->next = md->lanes;
  md->lanes = l;
  pthread_mutex_unlock(&md->lanes_lock);
  *out = (ferry_lane *)l;
  return FERRY_OK;
}

ferry_status ferry__metal_queue_drain(ferry_device *dev, mtl_id queue, const char *which) {
  ferry_status st;
  void *pool = ferry__metal_rt.pool_push();
  mtl_id cb = mtl_command_buffer(queue);
  if (!cb) {
    st = ferry__fail(FERRY_ERROR_BACKEND, "commandBuffer on %s of %s returned nil", which, dev->label);
  } else {
    mtl_commit(cb);
    mtl_wait_until_completed(cb);
    st = ferry__metal_completed(dev, cb, "an empty command buffer (waiting for a queue)");
  }
  ferry__metal_rt.pool_pop(pool);
  return st;
}

ferry_status ferry__metal_lanes_drain(ferry_device *dev) {
  metal_device *md = dev->impl;
  ferry_status st = FERRY_OK;
  pthread_mutex_lock(&md->lanes_lock);
  for (metal_lane *l = md->lanes; l && st == FERRY_OK; l = l->next)
    st = ferry__metal_queue_drain(dev, l->queue, "a queue's command queue");
  pthread_mutex_unlock(&md->lanes_lock);
  return st;
}

/* Finishes and frees the unclaimed tickets up to `value` (all with UINT64_MAX);
 * the first failure among them, if `first` is not NULL and holds none yet. */
static void unclaimed_finish(ferry_device *dev, metal_lane *l, uint64_t value, metal_ticket *first) {
  for (;;) {
    pthread_mutex_lock(&l->lock);
    metal_ticket *t = l->unclaimed;
    if (t && t->value <= value) {
      l->unclaimed = t->next;
      if (!l->unclaimed) l->unclaimed_tail = NULL;
    } else {
      t = NULL;
    }
    pthread_mutex_unlock(&l->lock);
    if (!t) return;
    t->lane = NULL; /* finished alone, not as a claimed ticket of the lane */
    ferry_status st = ferry__metal_ticket_wait(dev, (ferry_ticket)(uintptr_t)t);
    if (st != FERRY_OK && first) {
      metal_device *md = dev->impl;
      pthread_mutex_lock(&md->tickets_lock);
      if (first->status == FERRY_OK) {
        first->status = st;
        snprintf(first->error, sizeof first->error, "%.400s (an earlier operation on the same queue)", t->error);
      }
      pthread_mutex_unlock(&md->tickets_lock);
    }
    free(t);
  }
}

void ferry__metal_lane_destroy(ferry_device *dev, ferry_lane *lane) {
  metal_device *md = dev->impl;
  metal_lane *l = (metal_lane *)lane;
  pthread_mutex_lock(&md->lanes_lock);
  for (metal_lane **p = &md->lanes; *p; p = &(*p)->next)
    if (*p == l) {
      *p = l->next;
      break;
    }
  pthread_mutex_unlock(&md->lanes_lock);
  unclaimed_finish(dev, l, UINT64_MAX, NULL);
  /* The program's own command buffers on the queue (ferry_queue_native) finish
   * first. */
  (void)ferry__metal_queue_drain(dev, l->queue, "a queue's command queue");
  void *pool = ferry__metal_rt.pool_push();
  mtl_release(l->word);
  mtl_release(l->event);
  mtl_release(l->queue);
  ferry__metal_rt.pool_pop(pool);
  pthread_mutex_destroy(&l->lock);
  free(l);
}

ferry_status ferry__metal_lane_native(ferry_device *dev, ferry_lane *lane, ferry_native *out) {
  (void)dev;
  out->queue = (uintptr_t)((metal_lane *)lane)->queue;
  return FERRY_OK;
}

/* ---- markers and waits --------------------------------------------------------------------- */

ferry_status ferry__metal_marker(ferry_device *dev, ferry_lane *lane, bool timing, ferry_ticket *out) {
  metal_lane *l = (metal_lane *)lane;
  if (!l) {
    if (out) *out = 0; /* the device's own queue: its work is done on return */
    return FERRY_OK;
  }
  if (!timing) return ferry__metal_push(dev, l, NULL, 0, MTL_NIL, 0, "a marker of a queue's work", out);
  metal_blit fill = {.dst = l->word, .bytes = 4, .fill = true};
  return ferry__metal_push(dev, l, &fill, 1, MTL_NIL, 0, "a timing marker (a fill of a queue's word)", out);
}

ferry_status ferry__metal_lane_wait(ferry_device *dev, ferry_lane *lane, ferry_device *ticket_dev,
                                    ferry_ticket ticket) {
  if (ticket_dev->backend != dev->backend) return FERRY_ERROR_UNSUPPORTED;
  if (ticket == 0) return FERRY_OK;
  metal_ticket *t = ticket_of(ticket);
  if (!t->lane) return FERRY_ERROR_UNSUPPORTED; /* not work of a lane: the core waits on the host */
  return ferry__metal_push(dev, (metal_lane *)lane, NULL, 0, t->lane->event, t->value,
                           "a wait for another queue's work", NULL);
}

/* ---- gates ---------------------------------------------------------------------------------- */

ferry_status ferry__metal_gate_create(ferry_device *dev, ferry_gate **out) {
  metal_device *md = dev->impl;
  void *pool = ferry__metal_rt.pool_push();
  mtl_id event = mtl_new_shared_event(md->device);
  ferry__metal_rt.pool_pop(pool);
  if (!event) return ferry__fail(FERRY_ERROR_BACKEND, "newSharedEvent on %s returned nil (a gate)", dev->label);
  *out = (ferry_gate *)event;
  return FERRY_OK;
}

ferry_status ferry__metal_gate_push(ferry_device *dev, ferry_lane *lane, ferry_gate *gate, uint64_t value) {
  return ferry__metal_push(dev, (metal_lane *)lane, NULL, 0, (mtl_id)gate, value, "a wait for the host's progress",
                           NULL);
}

ferry_status ferry__metal_gate_raise(ferry_device *dev, ferry_gate *gate, uint64_t value) {
  (void)dev;
  void *pool = ferry__metal_rt.pool_push();
  mtl_set_signaled_value((mtl_id)gate, value);
  ferry__metal_rt.pool_pop(pool);
  return FERRY_OK;
}

void ferry__metal_gate_destroy(ferry_device *dev, ferry_gate *gate) {
  (void)dev;
  void *pool = ferry__metal_rt.pool_push();
  mtl_release((mtl_id)gate);
  ferry__metal_rt.pool_pop(pool);
}

/* ---- tickets ---------------------------------------------------------------------------------- */

ferry_status ferry__metal_ticket_wait(ferry_device *dev, ferry_ticket ticket) {
  metal_device *md = dev->impl;
  metal_ticket *t = ticket_of(ticket);
  /* Several threads may wait for one ticket: each waits on a reference of its
   * own, and the first to finish keeps the outcome and lets the command buffer go. */
  pthread_mutex_lock(&md->tickets_lock);
  if (t->finished) {
    ferry_status st = t->status;
    if (st != FERRY_OK) ferry__fail(st, "%s", t->error);
    pthread_mutex_unlock(&md->tickets_lock);
    return st;
  }
  void *pool = ferry__metal_rt.pool_push();
  mtl_id cb = mtl_retain(t->command_buffer);
  pthread_mutex_unlock(&md->tickets_lock);
  mtl_wait_until_completed(cb);
  pthread_mutex_lock(&md->tickets_lock);
  if (!t->finished) {
    ferry_status st = ferry__metal_completed(dev, cb, t->what);
    t->status = st;
    if (st != FERRY_OK) snprintf(t->error, sizeof t->error, "%s", ferry__error_text());
    t->gpu_start = mtl_gpu_start_time(cb);
    t->gpu_end = mtl_gpu_end_time(cb);
    mtl_release(t->command_buffer);
    t->command_buffer = MTL_NIL;
    t->finished = true;
  }
  mtl_release(cb);
  ferry__metal_rt.pool_pop(pool);
  metal_lane *lane = t->lane;
  pthread_mutex_unlock(&md->tickets_lock);
  /* Work before it that nobody took a ticket for is done too: its failure is this ticket's. */
  if (lane) unclaimed_finish(dev, lane, t->value, t);
  pthread_mutex_lock(&md->tickets_lock);
  ferry_status st = t->status;
  if (st != FERRY_OK) ferry__fail(st, "%s", t->error);
  pthread_mutex_unlock(&md->tickets_lock);
  return st;
}

ferry_status ferry__metal_ticket_query(ferry_device *dev, ferry_ticket ticket) {
  metal_device *md = dev->impl;
  metal_ticket *t = ticket_of(ticket);
  pthread_mutex_lock(&md->tickets_lock);
  bool finished = t->finished;
  mtl_uint status = MTL_CB_COMPLETED;
  if (!finished) {
    void *pool = ferry__metal_rt.pool_push();
    status = mtl_status(t->command_buffer);
    ferry__metal_rt.pool_pop(pool);
  }
  pthread_mutex_unlock(&md->tickets_lock);
  if (!finished && status != MTL_CB_COMPLETED && status != MTL_CB_ERROR) return FERRY_NOT_READY;
  return ferry__metal_ticket_wait(dev, ticket); /* done: at once */
}

void ferry__metal_ticket_release(ferry_device *dev, ferry_ticket ticket) {
  metal_ticket *t = ticket_of(ticket);
  (void)ferry__metal_ticket_wait(dev, ticket); /* lets the command buffer go */
  free(t);
}

ferry_status ferry__metal_ticket_elapsed(ferry_device *dev, ferry_ticket start, ferry_ticket stop, double *out_ms) {
  ferry_status st = ferry__metal_ticket_wait(dev, start);
  if (st == FERRY_OK) st = ferry__metal_ticket_wait(dev, stop);
  if (st != FERRY_OK) return st;
  const metal_ticket *a = ticket_of(start), *b = ticket_of(stop);
  /* No GPU times (0): the core uses the host's clock. */
  if (a->gpu_end <= 0 || b->gpu_end <= 0) return FERRY_ERROR_UNSUPPORTED;
  *out_ms = (b->gpu_end - a->gpu_end) * 1e3;
  return FERRY_OK;
}
