/*
 * Events: an event holds the capture of its last record, the work of one
 * queue up to a marker entry (queue.c). Recording again makes a new capture
 * and drops the old one; a queue that waits for an event takes the capture as
 * it stands (its own reference), so destroying or re-recording the event
 * changes nothing for waits already taken. A capture holds its queue's object
 * (not its handle): waiting on a capture of a destroyed queue ends at once,
 * since destroying waited for the queue's work.
 */
#include "queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ferry_event_obj {
  uint64_t id;
  pthread_mutex_t lock;
  ferry_capture *capture; /* NULL: never recorded */
  struct ferry_event_obj *prev, *next;
} ferry_event_obj;

/* Every live event, so that ferry_shutdown frees them. */
static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;
static ferry_event_obj *events;

/* ---- captures ------------------------------------------------------------------ */

ferry_capture *ferry__capture_new(ferry_queue_obj *q) {
  ferry_capture *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  atomic_init(&c->refs, 1);
  atomic_init(&c->done, false);
  ferry__queue_ref(q);
  c->queue = q;
  c->dev = ferry__queue_device(q);
  return c;
}

void ferry__capture_ref(ferry_capture *c) { atomic_fetch_add(&c->refs, 1); }

void ferry__capture_unref(ferry_capture *c) {
  if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
  ferry_ticket t = atomic_load_explicit(&c->ticket, memory_order_acquire);
  if (t) c->dev->ops->ticket_release(c->dev, t);
  ferry__queue_unref(c->queue);
  free(c);
}

bool ferry__capture_done(ferry_capture *c) {
  if (atomic_load_explicit(&c->done, memory_order_acquire)) return true;
  ferry__queue_poll_seq(c->queue, c->seq);
  return atomic_load_explicit(&c->done, memory_order_acquire);
}

void ferry__capture_wait(ferry_capture *c) {
  if (!atomic_load_explicit(&c->done, memory_order_acquire)) ferry__queue_wait_seq(c->queue, c->seq);
}

/* ---- events ----------------------------------------------------------------------- */

static void event_free(ferry_event_obj *ev) {
  ferry__capture_unref(ev->capture);
  pthread_mutex_destroy(&ev->lock);
  free(ev);
}

static void event_unlink(ferry_event_obj *ev) {
  pthread_mutex_lock(&events_lock);
  if (ev->prev)
    ev->prev->next = ev->next;
  else if (events == ev)
    events = ev->next;
  if (ev->next) ev->next->prev = ev->prev;
  ev->prev = ev->next = NULL;
  pthread_mutex_unlock(&events_lock);
}

static ferry_status event_acquire(ferry_event event, const char *fn, ferry_event_obj **out) {
  ferry_event_obj *ev = ferry__object_get(FERRY_OBJECT_EVENT, event.id);
  if (!ev)
    return ferry__fail(FERRY_ERROR_STALE_HANDLE,
                       "%s: event handle 0x%llx is not a live event (destroyed, from before ferry_shutdown(), or "
                       "never made)",
                       fn, (unsigned long long)event.id);
  *out = ev;
  return FERRY_OK;
}

static void event_put(ferry_event_obj *ev) {
  if (ferry__object_put(FERRY_OBJECT_EVENT, ev->id)) event_free(ev);
}

/* The event's capture, with a reference; NULL when never recorded. */
static ferry_capture *capture_of(ferry_event_obj *ev) {
  pthread_mutex_lock(&ev->lock);
  ferry_capture *c = ev->capture;
  if (c) ferry__capture_ref(c);
  pthread_mutex_unlock(&ev->lock);
  return c;
}

ferry_status ferry_event_create(ferry_event *out_event) {
  static const char fn[] = "ferry_event_create";
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  if (!out_event) {
    ferry__leave();
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_event is NULL", fn);
  }
  ferry_event_obj *ev = calloc(1, sizeof *ev);
  if (!ev) {
    ferry__leave();
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for an event", fn);
  }
  pthread_mutex_init(&ev->lock, NULL);
  if ((st = ferry__object_new(FERRY_OBJECT_EVENT, ev, fn, &ev->id)) != FERRY_OK) {
    event_free(ev);
    ferry__leave();
    return st;
  }
  pthread_mutex_lock(&events_lock);
  ev->next = events;
  if (events) events->prev = ev;
  events = ev;
  pthread_mutex_unlock(&events_lock);
  *out_event = (ferry_event){ev->id};
  ferry__leave();
  return FERRY_OK;
}

ferry_status ferry_event_destroy(ferry_event event) {
  static const char fn[] = "ferry_event_destroy";
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  ferry_event_obj *ev = NULL;
  if ((st = event_acquire(event, fn, &ev)) == FERRY_OK) {
    ferry_retire r = ferry__object_retire(FERRY_OBJECT_EVENT, ev->id);
    if (r == FERRY_RETIRE_STALE)
      st = ferry__fail(FERRY_ERROR_STALE_HANDLE, "%s: event handle 0x%llx was destroyed meanwhile", fn,
                       (unsigned long long)event.id);
    else
      event_unlink(ev);
    event_put(ev);
  }
  ferry__leave();
  return st;
}

ferry_status ferry__queue_mark(ferry_queue_obj *q, const char *fn, ferry_capture **out) {
  ferry_capture *c = ferry__capture_new(q);
  if (!c) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for an event's capture", fn);
  ferry__capture_ref(c); /* the marker's */
  ferry_op op = {.kind = FERRY_OP_MARKER, .fn = fn, .capture = c};
  ferry_status st = ferry__queue_submit(q, &op);
  if (st != FERRY_OK) {
    ferry__capture_unref(c);
    return st;
  }
  *out = c;
  return FERRY_OK;
}

ferry_status ferry_event_record(ferry_event event, ferry_queue queue) {
  static const char fn[] = "ferry_event_record";
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  ferry_event_obj *ev = NULL;
  ferry_queue_obj *q = NULL;
  if ((st = event_acquire(event, fn, &ev)) != FERRY_OK) {
    ferry__leave();
    return st;
  }
  if ((st = ferry__queue_acquire(queue, fn, &q)) == FERRY_OK) {
    ferry_capture *c = NULL;
    if ((st = ferry__queue_mark(q, fn, &c)) == FERRY_OK) {
      pthread_mutex_lock(&ev->lock);
      ferry_capture *old = ev->capture;
      ev->capture = c;
      pthread_mutex_unlock(&ev->lock);
      ferry__capture_unref(old);
    }
    ferry__queue_unref(q);
  }
  event_put(ev);
  ferry__leave();
  return st;
}

ferry_status ferry_queue_wait_event(ferry_queue queue, ferry_event event) {
  static const char fn[] = "ferry_queue_wait_event";
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  ferry_queue_obj *q = NULL;
  ferry_event_obj *ev = NULL;
  if ((st = ferry__queue_acquire(queue, fn, &q)) != FERRY_OK) {
    ferry__leave();
    return st;
  }
  if ((st = event_acquire(event, fn, &ev)) == FERRY_OK) {
    ferry_capture *c = capture_of(ev);
    event_put(ev);
    if (c) {
      ferry_op op = {.kind = FERRY_OP_WAIT, .fn = fn, .capture = c}; /* the op takes the reference */
      st = ferry__queue_submit(q, &op);
    }
  }
  ferry__queue_unref(q);
  ferry__leave();
  return st;
}

/* A failure of the capture's queue before the capture, reported once. */
static ferry_status report_before(ferry_capture *c, const char *fn) {
  return ferry__queue_report(c->queue, fn, c->seq);
}

ferry_status ferry_event_synchronize(ferry_event event) {
  static const char fn[] = "ferry_event_synchronize";
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  ferry_event_obj *ev = NULL;
  if ((st = event_acquire(event, fn, &ev)) == FERRY_OK) {
    ferry_capture *c = capture_of(ev);
    event_put(ev);
    if (c) {
      ferry__capture_wait(c);
      st = report_before(c, fn);
      ferry__capture_unref(c);
    }
  }
  ferry__leave();
  return st;
}

ferry_status ferry_event_query(ferry_event event) {
  static const char fn[] = "ferry_event_query";
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  ferry_event_obj *ev = NULL;
  if ((st = event_acquire(event, fn, &ev)) == FERRY_OK) {
    ferry_capture *c = capture_of(ev);
    event_put(ev);
    if (c) {
      st = ferry__capture_done(c) ? report_before(c, fn) : FERRY_NOT_READY;
      ferry__capture_unref(c);
    }
  }
  ferry__leave();
  return st;
}

ferry_status ferry_event_elapsed(ferry_event start, ferry_event stop, double *out_ms) {
  static const char fn[] = "ferry_event_elapsed";
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  ferry_event_obj *a = NULL, *b = NULL;
  if ((st = event_acquire(start, fn, &a)) != FERRY_OK) {
    ferry__leave();
    return st;
  }
  if ((st = event_acquire(stop, fn, &b)) != FERRY_OK) {
    event_put(a);
    ferry__leave();
    return st;
  }
  ferry_capture *ca = capture_of(a), *cb = capture_of(b);
  event_put(a);
  event_put(b);
  if (!out_ms) {
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_ms is NULL", fn);
  } else if (!ca || !cb) {
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: the %s event was never recorded", fn, !ca ? "start" : "stop");
  } else if (ca->dev != cb->dev) {
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                     "%s: the start event was last recorded on %s and the stop event on %s: the two clocks are not "
                     "one",
                     fn, ca->dev->label, cb->dev->label);
  } else if (!ferry__capture_done(ca) || !ferry__capture_done(cb)) {
    st = ferry__fail(FERRY_NOT_READY, "%s: the %s event has not completed yet", fn,
                     !ferry__capture_done(ca) ? "start" : "stop");
  } else {
    ferry_device *dev = ca->dev;
    double ms = 0;
    st = FERRY_ERROR_UNSUPPORTED;
    ferry_ticket ta = atomic_load_explicit(&ca->ticket, memory_order_acquire);
    ferry_ticket tb = atomic_load_explicit(&cb->ticket, memory_order_acquire);
    if (ta && tb && dev->ops->ticket_elapsed) {
      ferry_error_scope scope = ferry__first_failure_begin(true);
      st = dev->ops->ticket_elapsed(dev, ta, tb, &ms);
      ferry__first_failure_end(scope);
    }
    if (st != FERRY_OK) ms = (cb->host_time - ca->host_time) * 1e3; /* the host's clock at completion */
    *out_ms = ms;
    st = FERRY_OK;
  }
  ferry__capture_unref(ca);
  ferry__capture_unref(cb);
  ferry__leave();
  return st;
}

/* ---- shutdown and fork -------------------------------------------------------------- */

void ferry__events_shutdown(void) {
  pthread_mutex_lock(&events_lock);
  ferry_event_obj *list = events;
  events = NULL;
  pthread_mutex_unlock(&events_lock);
  while (list) {
    ferry_event_obj *ev = list;
    list = ev->next;
    ev->prev = ev->next = NULL;
    if (ferry__object_retire(FERRY_OBJECT_EVENT, ev->id) == FERRY_RETIRE_LAST) event_free(ev);
  }
}

void ferry__events_forget(void) {
  /* The captures' tickets are the parent's drivers': only the core's memory goes. */
  ferry_event_obj *list = events;
  events = NULL;
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  events_lock = fresh;
  while (list) {
    ferry_event_obj *ev = list;
    list = ev->next;
    if (ferry__object_retire(FERRY_OBJECT_EVENT, ev->id) == FERRY_RETIRE_LAST) {
      free(ev->capture);
      free(ev);
    }
  }
}
