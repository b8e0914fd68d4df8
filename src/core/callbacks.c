/*
 * Callbacks into the program: the deleters of imported DLPack tensors, which
 * ferry calls when a buffer's memory is released.
 *
 * A deleter is the program's code and may call ferry (give memory back with
 * ferry_host_free, shut ferry down) or wait for threads that do. So it never
 * runs where the memory is released, which may be inside the gate (ferry_free)
 * or under the init lock (ferry_shutdown): the release queues it on its thread's
 * list, and the thread runs its list once it is out of every ferry call of its
 * own (ferry__leave of its outermost call, the end of a reference's release
 * outside any call, the end of ferry_shutdown, after the init lock is given
 * back). A deleter's ferry calls are then ordinary calls, with one exception:
 * the deleters that ferry_shutdown queued run after the session is gone, and a
 * call made from one of them does not start ferry again (it fails at once,
 * saying so) unless another thread already has.
 *
 * The list is the thread's own: no lock, and nothing to wait for. Each entry is
 * part of the record it releases (dlpack.c's), so queueing cannot fail.
 */
#include "internal.h"

static _Thread_local struct {
  ferry_callback *head, *tail;
  unsigned depth;           /* ferry calls of this thread in progress (gate entries, ferry_shutdown) */
  unsigned shutting_down;   /* inside ferry_shutdown (its entries are marked so) */
  unsigned shutdown_queued; /* running entries that ferry_shutdown queued */
} me;

void ferry__callback_defer(ferry_callback *cb, void (*run)(ferry_callback *cb)) {
  cb->run = run;
  cb->next = NULL;
  cb->from_shutdown = me.shutting_down > 0;
  if (me.tail)
    me.tail->next = cb;
  else
    me.head = cb;
  me.tail = cb;
}

/* Runs the thread's entries in order, those the callbacks queue included. */
static void run_queued(void) {
  while (me.depth == 0 && me.head) {
    ferry_callback *cb = me.head;
    me.head = cb->next;
    if (!me.head) me.tail = NULL;
    bool from_shutdown = cb->from_shutdown;
    if (from_shutdown) me.shutdown_queued++;
    cb->run(cb); /* may free cb, call ferry, queue more */
    if (from_shutdown) me.shutdown_queued--;
  }
}

void ferry__calls_enter(void) { me.depth++; }

void ferry__calls_leave(void) {
  if (--me.depth == 0) run_queued();
}

void ferry__callbacks_run_if_outside(void) { run_queued(); }

void ferry__shutdown_enter(void) {
  me.shutting_down++;
  me.depth++;
}

void ferry__shutdown_leave(void) {
  me.shutting_down--;
  ferry__calls_leave();
}

bool ferry__in_shutdown_callback(void) { return me.shutdown_queued > 0; }
