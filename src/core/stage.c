/*
 * Staged transfers on a queue: pageable host memory to or from a device, and
 * copies between devices without a peer path, with the device's part in its
 * lane's order when submission returns.
 *
 * At submission every piece's DMA is pushed at once on the lanes of the
 * devices that have gates, each behind a gate; the queue's thread then does the
 * host's part piece by piece (the host copy into or out of the ring, or, for a
 * copy between devices, watching one device's DMA and opening the other's
 * gate) and raises the gates as the pieces become ready:
 *
 *   to the device    device: [gate k+1, DMA slot -> device] for every piece k
 *                    host:   wait for the DMA that last used the slot, copy piece k in, raise to k+1
 *   to the host      device: [gate k-S+1 (the slot is free), DMA device -> slot] ..., then gate P
 *                    host:   wait for piece k's DMA, copy it out, raise to k+1
 *   between devices  source: [gate k-S+1, DMA source -> slot] ..., then gate P
 *                    dest:   [gate k+1, DMA slot -> dest]
 *                    host:   wait for the source's DMA k, raise the destination's gate to k+1;
 *                            wait for the destination's DMA k, raise the source's gate to k+1
 *
 * (S slots in the ring, P pieces.) A lane waits only for the host's progress
 * and for work pushed before it, never for work pushed after it, so no
 * mapping of lanes onto the hardware's queues can deadlock. The gate P at the
 * end of a lane's part holds the lane's later work until the host's part is
 * done, so that markers (events) and the queue's later work see the whole
 * transfer. A side whose device has no gates, or no lanes, is moved by the
 * queue's thread itself as it goes, with the driver's calls.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define AHEAD_PIECE_MIN ((size_t)1 << 20) /* pieces of a staged transfer pushed ahead: at least this */
#define AHEAD_PIECES    32                /* and at most this many pushed at once, so submission stays short */

typedef struct stage_side {
  ferry_side s;
  bool ahead;            /* its DMAs are pushed at submission, behind `gate` */
  ferry_gate *gate;      /* ahead only */
  ferry_ticket *tickets; /* ahead only: one per piece */
} stage_side;

struct ferry_stage {
  ferry_op_kind kind; /* WRITE: host -> b; READ: a -> host; COPY: a -> b */
  size_t n, piece, pieces;
  unsigned slots;
  ferry_device *ring_dev;
  ferry_ring *ring;
  char *host; /* the user's memory (WRITE, READ) */
  bool has_a, has_b;
  stage_side a, b;
  ferry_ticket start; /* the queue's work before it, waited for before the host's part begins */
  ferry_device *start_dev;
  bool pushed; /* every DMA is in its lane */
};

static bool can_ahead(const ferry_side *s) {
  const ferry_device_ops *o = s->dev->ops;
  return s->lane && s->dma && o->gate_create && o->gate_push && o->gate_raise;
}

static char *slot_of(const ferry_stage *st, size_t k) { return st->ring->base + (k % st->slots) * st->piece; }

/* The piece of a transfer pushed ahead: a share of the transfer that keeps the
 * number of pushes bounded, within what the ring holds in two slots. */
static size_t ahead_piece(ferry_device *dev, ferry_dma_dir dir, size_t n, size_t ring_bytes) {
  size_t piece = ferry__engine_plan(dev, dir, n).piece;
  size_t share = ((n + AHEAD_PIECES - 1) / AHEAD_PIECES + 4095) & ~(size_t)4095;
  if (piece < share) piece = share;
  if (piece < AHEAD_PIECE_MIN) piece = AHEAD_PIECE_MIN;
  if (piece > ring_bytes / 2) piece = ring_bytes / 2;
  if (piece > n) piece = (n + 4095) & ~(size_t)4095;
  return piece;
}

bool ferry__stage_possible(ferry_device *dev) {
  const ferry_device_ops *o = dev->ops;
  return o->lane_create && o->dma_start && (dev->caps & FERRY_CAP_STAGE) && o->gate_create && o->gate_push &&
         o->gate_raise;
}

void ferry__stage_free(ferry_stage *st) {
  if (!st) return;
  stage_side *sides[2] = {&st->a, &st->b};
  for (int i = 0; i < 2; i++) {
    stage_side *sd = sides[i];
    if (sd->tickets) {
      for (size_t k = 0; k < st->pieces; k++)
        if (sd->tickets[k]) sd->s.dev->ops->ticket_release(sd->s.dev, sd->tickets[k]);
      free(sd->tickets);
    }
    if (sd->gate) sd->s.dev->ops->gate_destroy(sd->s.dev, sd->gate);
  }
  if (st->start) st->start_dev->ops->ticket_release(st->start_dev, st->start);
  if (st->ring) ferry__ring_give(st->ring_dev, st->ring);
  free(st);
}

/* Makes an ahead side ready: its gate and its tickets. */
static ferry_status side_prepare(ferry_stage *st, stage_side *sd) {
  sd->ahead = can_ahead(&sd->s);
  if (!sd->ahead) return FERRY_OK;
  sd->tickets = calloc(st->pieces, sizeof *sd->tickets);
  if (!sd->tickets) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for a staged transfer's tickets");
  return sd->s.dev->ops->gate_create(sd->s.dev, &sd->gate);
}

ferry_status ferry__stage_prepare(const ferry_stage_request *req, ferry_stage **out) {
  ferry_stage *st = calloc(1, sizeof *st);
  if (!st) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for a staged transfer");
  st->kind = req->kind;
  st->n = req->n;
  st->host = req->host;
  /* The ring comes from the device that stages (the queue's where both do). */
  st->ring_dev = req->ring_dev;
  st->ring = ferry__ring_take(st->ring_dev);
  if (!st->ring) {
    free(st);
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no pinned memory to stage %zu bytes through, on %s", req->n,
                       req->ring_dev->label);
  }
  ferry_dma_dir dir = req->kind == FERRY_OP_READ ? FERRY_DMA_TO_HOST : FERRY_DMA_TO_DEVICE;
  st->piece = ahead_piece(st->ring_dev, dir, req->n, st->ring->bytes);
  st->pieces = (req->n + st->piece - 1) / st->piece;
  st->slots = ferry__slot_count(st->ring->bytes, st->piece);
  ferry_status s = FERRY_OK;
  if (req->kind != FERRY_OP_WRITE) {
    st->has_a = true;
    st->a.s = ferry__side_of(req->a_dev, req->a_lane, req->a_mem, req->a_offset, st->ring->base, st->ring->bytes);
    s = side_prepare(st, &st->a);
  }
  if (s == FERRY_OK && req->kind != FERRY_OP_READ) {
    st->has_b = true;
    st->b.s = ferry__side_of(req->b_dev, req->b_lane, req->b_mem, req->b_offset, st->ring->base, st->ring->bytes);
    s = side_prepare(st, &st->b);
  }
  if (s != FERRY_OK) {
    ferry__stage_free(st);
    return s;
  }
  *out = st;
  return FERRY_OK;
}

bool ferry__stage_ahead(const ferry_stage *st, bool queue_side_a) {
  return queue_side_a ? st->has_a && st->a.ahead : st->has_b && st->b.ahead;
}

/* Pushes every piece's DMA of the ahead sides. The source's DMAs wait for its
 * gate: at 1 once the queue's earlier work is done (the host raises it after
 * the start marker), at k - S + 2 for piece k once the slot is free, and at P + 1
 * (the end) for the lane's later work. On failure part way the pushed work
 * stays in the lanes: the host part (ferry__stage_run) then raises every gate
 * without moving bytes, so that the lanes go on. */
ferry_status ferry__stage_push(ferry_stage *st, ferry_ticket start, ferry_device *start_dev, ferry_ticket *out_final) {
  st->start = start;
  st->start_dev = start_dev;
  *out_final = 0;
  ferry_status s = FERRY_OK;
  size_t S = st->slots;
  for (size_t k = 0; k < st->pieces && s == FERRY_OK; k++) {
    char *slot = slot_of(st, k);
    size_t len = ferry__piece_len(st->n, st->piece, k), at = k * st->piece;
    if (st->has_a && st->a.ahead) {
      ferry_device *dev = st->a.s.dev;
      if (k == 0 || k >= S) s = dev->ops->gate_push(dev, st->a.s.lane, st->a.gate, k < S ? 1 : k - S + 2);
      if (s == FERRY_OK) {
        ferry_pinned p = ferry__pinned_at(&st->a.s.ring, slot);
        s = dev->ops->dma_start(dev, st->a.s.lane, FERRY_DMA_TO_HOST, st->a.s.mem, st->a.s.offset + at, &p, len,
                                &st->a.tickets[k]);
      }
    }
    if (s == FERRY_OK && st->has_b && st->b.ahead) {
      ferry_device *dev = st->b.s.dev;
      s = dev->ops->gate_push(dev, st->b.s.lane, st->b.gate, k + 1);
      if (s == FERRY_OK) {
        ferry_pinned p = ferry__pinned_at(&st->b.s.ring, slot);
        s = dev->ops->dma_start(dev, st->b.s.lane, FERRY_DMA_TO_DEVICE, st->b.s.mem, st->b.s.offset + at, &p, len,
                                &st->b.tickets[k]);
      }
    }
  }
  if (s == FERRY_OK && st->has_a && st->a.ahead)
    s = st->a.s.dev->ops->gate_push(st->a.s.dev, st->a.s.lane, st->a.gate, st->pieces + 1);
  if (s == FERRY_OK && st->has_b && st->b.ahead && st->b.s.dev == start_dev) *out_final = st->b.tickets[st->pieces - 1];
  st->pushed = s == FERRY_OK;
  return s;
}

/* ---- the host's part ------------------------------------------------------------- */

static ferry_status wait_ticket(ferry_device *dev, ferry_ticket t) {
  return t ? dev->ops->ticket_wait(dev, t) : FERRY_OK;
}

static void raise_gate(stage_side *sd, uint64_t value) {
  if (sd->ahead) (void)sd->s.dev->ops->gate_raise(sd->s.dev, sd->gate, value);
}

/* The driver's synchronous move of piece k for a side that is not ahead. */
static ferry_status side_now(stage_side *sd, ferry_dma_dir dir, size_t at, char *slot, size_t len) {
  ferry_device *dev = sd->s.dev;
  if (!sd->s.dma) {
    if (dir == FERRY_DMA_TO_DEVICE)
      return dev->ops->write ? dev->ops->write(dev, sd->s.lane, sd->s.mem, sd->s.offset + at, slot, len)
                             : ferry__fail(FERRY_ERROR_BACKEND, "%s can move bytes only by DMA", dev->label);
    return dev->ops->read ? dev->ops->read(dev, sd->s.lane, sd->s.mem, sd->s.offset + at, slot, len)
                          : ferry__fail(FERRY_ERROR_BACKEND, "%s can move bytes only by DMA", dev->label);
  }
  ferry_pinned p = ferry__pinned_at(&sd->s.ring, slot);
  ferry_ticket t = 0;
  ferry_status s = dev->ops->dma_start(dev, sd->s.lane, dir, sd->s.mem, sd->s.offset + at, &p, len, &t);
  return s == FERRY_OK ? ferry__ticket_finish(dev, t) : s;
}

ferry_status ferry__stage_run(ferry_stage *st, bool cancel) {
  ferry_status s = st->pushed ? FERRY_OK : FERRY_ERROR_CANCELLED;
  ferry_error_scope first = ferry__first_failure_begin(false);
  bool move = !cancel && st->pushed;
  size_t S = st->slots, P = st->pieces;
  if (move && st->start && (s = wait_ticket(st->start_dev, st->start)) != FERRY_OK) move = false;
  if (st->has_a) raise_gate(&st->a, 1); /* the queue's earlier work is done */
  ferry__copy_threads_hold();
  for (size_t k = 0; k < P && move; k++) {
    char *slot = slot_of(st, k);
    size_t len = ferry__piece_len(st->n, st->piece, k), at = k * st->piece;
    switch (st->kind) {
    case FERRY_OP_WRITE: /* host -> b */
      if (k >= S && (s = wait_ticket(st->b.s.dev, st->b.tickets[k - S])) != FERRY_OK) break;
      ferry__ring_copy_in(st->ring, st->n, st->b.s.dma, slot, st->host + at, len);
      raise_gate(&st->b, k + 1);
      break;
    case FERRY_OP_READ: /* a -> host */
      if ((s = wait_ticket(st->a.s.dev, st->a.tickets[k])) != FERRY_OK) break;
      ferry__parallel_memcpy(st->host + at, slot, len);
      raise_gate(&st->a, k + 2);
      break;
    default: /* a -> b */
      if (st->a.ahead) {
        s = wait_ticket(st->a.s.dev, st->a.tickets[k]);
      } else {
        if (k >= S && st->b.ahead) s = wait_ticket(st->b.s.dev, st->b.tickets[k - S]); /* the slot is free */
        if (s == FERRY_OK) s = side_now(&st->a, FERRY_DMA_TO_HOST, at, slot, len);
      }
      if (s != FERRY_OK) break;
      if (st->b.ahead) {
        raise_gate(&st->b, k + 1);
        if (st->a.ahead && k >= 1 && (s = wait_ticket(st->b.s.dev, st->b.tickets[k - 1])) == FERRY_OK)
          raise_gate(&st->a, k + 1); /* piece k-1's slot is free */
      } else if ((s = side_now(&st->b, FERRY_DMA_TO_DEVICE, at, slot, len)) == FERRY_OK) {
        raise_gate(&st->a, k + 2);
      }
      break;
    }
    if (s != FERRY_OK) move = false;
  }
  /* The end: every DMA has its bytes, and the lanes' later work may go. */
  if (st->kind == FERRY_OP_COPY && st->b.ahead && P > 0 && s == FERRY_OK && move)
    s = wait_ticket(st->b.s.dev, st->b.tickets[P - 1]);
  ferry__copy_threads_release();
  if (st->has_a) raise_gate(&st->a, P + 1);
  if (st->has_b) raise_gate(&st->b, P);
  ferry__first_failure_end(first);
  return cancel ? FERRY_ERROR_CANCELLED : s;
}
