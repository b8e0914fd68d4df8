/*
 * Operations: what a write, read, copy or fill does, whoever runs it. The
 * synchronous calls run an operation here on the device's synchronous lanes;
 * a queue (queue.c) runs the same operation on its own lane, pushing what it
 * can at submission (stage.c) and running the rest here on its thread.
 *
 * A zero-copy or host-ptr buffer addressed through its own array only
 * synchronises (the bytes are already there); through any other array it
 * copies, exactly as a buffer with memory of its own. Copies within a device
 * are the backend's; between devices of one backend its peer copy where it has
 * one; everything else is the engine's (engine.c).
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ferry_lane *ferry__lane_for(ferry_lanes lanes, ferry_device *dev, ferry_dma_dir dir) {
  if (dev == lanes.queue_dev) return lanes.queue_lane;
  return dev->state->sync_lane[dir];
}

ferry_status ferry__op_failed(ferry_status st, const ferry_op *op) {
  char a[512], b[512];
  if (op->kind == FERRY_OP_COPY)
    return ferry__fail(st, "%s: from bytes %zu..%zu of %s to bytes %zu..%zu of %s: %s", op->fn, op->src_offset,
                       op->src_offset + op->bytes, ferry__buffer_text(op->src, a), op->dst_offset,
                       op->dst_offset + op->bytes, ferry__buffer_text(op->dst, b), ferry__error_text());
  const ferry_slot *slot = op->kind == FERRY_OP_READ ? op->src : op->dst;
  if (!slot) return ferry__fail(st, "%s: %s", op->fn, ferry__error_text()); /* a marker or a wait: no buffer */
  size_t offset = op->kind == FERRY_OP_READ ? op->src_offset : op->dst_offset;
  return ferry__fail(st, "%s: bytes %zu..%zu of %s: %s", op->fn, offset, offset + op->bytes,
                     ferry__buffer_text(slot, a), ferry__error_text());
}

ferry_op ferry__op_host_transfer(const char *fn, bool to_device, ferry_slot *slot, size_t offset, void *host,
                                 size_t bytes) {
  ferry_op op = {.kind = to_device ? FERRY_OP_WRITE : FERRY_OP_READ, .fn = fn, .bytes = bytes, .host = host};
  if (to_device) {
    op.dst = slot;
    op.dst_offset = offset;
  } else {
    op.src = slot;
    op.src_offset = offset;
  }
  return op;
}

void ferry__op_release(ferry_op *op) {
  /* One reference each, also when they are the same buffer (acquired twice). */
  if (op->src) ferry__release(op->src);
  if (op->dst) ferry__release(op->dst);
  op->src = op->dst = NULL;
  if (op->capture) ferry__capture_unref(op->capture);
  op->capture = NULL;
}

void ferry__op_count(const ferry_op *op) {
  switch (op->kind) {
  case FERRY_OP_WRITE: ferry__count_transfer(op->dst->device, FERRY_H2D, op->bytes); break;
  case FERRY_OP_READ: ferry__count_transfer(op->src->device, FERRY_D2H, op->bytes); break;
  case FERRY_OP_COPY: ferry__count_transfer(op->dst->device, FERRY_D2D, op->bytes); break;
  default: break;
  }
}

bool ferry__op_own_bytes(const ferry_slot *slot, size_t offset, const void *host) {
  return slot->over_host_array && host == (const char *)slot->host_array + offset;
}

void ferry__host_fill(void *p, size_t n, uint32_t pattern, unsigned pattern_size) {
  unsigned char *d = p, pat[4];
  memcpy(pat, &pattern, sizeof pat);
  if (pattern_size == 1) {
    memset(d, pat[0], n);
    return;
  }
  /* Lay the pattern down once, then double what is written. */
  size_t done = n < pattern_size ? n : pattern_size;
  memcpy(d, pat, done);
  while (done < n) {
    size_t more = done < n - done ? done : n - done;
    memcpy(d + done, d, more);
    done += more;
  }
}

/* ---- one buffer ------------------------------------------------------------ */

/* A transfer that moves no bytes still fails on a buffer the backend finds
 * damaged (checked's guards): every transfer touching it does. */
static ferry_status check_untouched(ferry_slot *slot) {
  ferry_device *dev = slot->device;
  return dev->ops->check ? dev->ops->check(dev, &slot->mem) : FERRY_OK;
}

static ferry_status sync_own(ferry_slot *slot, ferry_sync_dir dir) {
  ferry_device *dev = slot->device;
  if (!(slot->mem.flags & FERRY_MEM_HOST_PTR)) return FERRY_OK; /* zero-copy: nothing to hand over */
  return dev->ops->host_ptr_sync(dev, &slot->mem, dir);
}

static ferry_status run_write(const ferry_op *op, ferry_lanes lanes) {
  ferry_slot *slot = op->dst;
  ferry_device *dev = slot->device;
  if (op->bytes == 0) return check_untouched(slot);
  if (ferry__op_own_bytes(slot, op->dst_offset, op->host)) return sync_own(slot, FERRY_SYNC_TO_DEVICE);
  return ferry__engine_write(dev, ferry__lane_for(lanes, dev, FERRY_DMA_TO_DEVICE), &slot->mem, op->dst_offset,
                             op->host, op->bytes);
}

static ferry_status run_read(const ferry_op *op, ferry_lanes lanes) {
  ferry_slot *slot = op->src;
  ferry_device *dev = slot->device;
  if (op->bytes == 0) return check_untouched(slot);
  if (ferry__op_own_bytes(slot, op->src_offset, op->host)) return sync_own(slot, FERRY_SYNC_TO_HOST);
  return ferry__engine_read(dev, ferry__lane_for(lanes, dev, FERRY_DMA_TO_HOST), &slot->mem, op->src_offset, op->host,
                            op->bytes);
}

/* The pattern written from host memory, a block at a time, where the backend
 * cannot fill (or the buffer's bytes are host memory). */
static ferry_status fill_by_writes(ferry_device *dev, ferry_lane *lane, ferry_mem *mem, size_t offset, size_t n,
                                   uint32_t pattern, unsigned pattern_size) {
  if (mem->host) {
    ferry__host_fill((char *)mem->host + offset, n, pattern, pattern_size);
    return FERRY_OK;
  }
  size_t block = n < ((size_t)1 << 20) ? n : ((size_t)1 << 20); /* a multiple of 4: the pattern repeats in it */
  unsigned char *src = malloc(block);
  if (!src) {
    char text[64];
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for a %s fill pattern block on %s",
                       ferry__bytes_text(block, text), dev->label);
  }
  ferry__host_fill(src, block, pattern, pattern_size);
  ferry_status st = FERRY_OK;
  for (size_t at = 0; at < n && st == FERRY_OK; at += block)
    st = ferry__engine_write(dev, lane, mem, offset + at, src, n - at < block ? n - at : block);
  free(src);
  return st;
}

static ferry_status run_fill(const ferry_op *op, ferry_lanes lanes) {
  ferry_slot *slot = op->dst;
  ferry_device *dev = slot->device;
  if (op->bytes == 0) return check_untouched(slot);
  ferry_lane *lane = ferry__lane_for(lanes, dev, FERRY_DMA_TO_DEVICE);
  if (!slot->mem.host && dev->ops->fill_start) {
    ferry_ticket t = 0;
    ferry_status st =
        dev->ops->fill_start(dev, lane, &slot->mem, op->dst_offset, op->bytes, op->pattern, op->pattern_size, &t);
    if (st != FERRY_ERROR_UNSUPPORTED) return st == FERRY_OK ? ferry__ticket_finish(dev, t) : st;
  }
  return fill_by_writes(dev, lane, &slot->mem, op->dst_offset, op->bytes, op->pattern, op->pattern_size);
}

/* ---- copies between buffers ------------------------------------------------ */

/* Within one device; overlapping ranges of one allocation on a device whose copy
 * cannot overlap go through a temporary allocation on the same device. */
static ferry_status copy_within(ferry_device *dev, ferry_lane *lane, ferry_mem *src, size_t so, ferry_mem *dst,
                                size_t doff, size_t n, bool overlapping) {
  ferry_ticket t = 0;
  if (!overlapping || (dev->caps & FERRY_CAP_OVERLAP_COPY)) {
    ferry_status st = dev->ops->copy_start(dev, lane, src, so, dst, doff, n, &t);
    return st == FERRY_OK ? ferry__ticket_finish(dev, t) : st;
  }
  ferry_mem tmp;
  size_t class_bytes;
  ferry_status st = ferry__mem_alloc(dev, n, &tmp, &class_bytes);
  if (st != FERRY_OK) return st;
  if ((st = dev->ops->copy_start(dev, lane, src, so, &tmp, 0, n, &t)) == FERRY_OK) {
    st = ferry__ticket_finish(dev, t); /* the lane orders the two; waiting here keeps tmp's lifetime simple */
    t = 0;
    if (st == FERRY_OK && (st = dev->ops->copy_start(dev, lane, &tmp, 0, dst, doff, n, &t)) == FERRY_OK)
      st = ferry__ticket_finish(dev, t);
  }
  ferry_error_scope scope = ferry__first_failure_begin(st != FERRY_OK);
  ferry__mem_release(dev, &tmp, class_bytes);
  ferry__first_failure_end(scope);
  return st;
}

/* *damaged: the one buffer to name when a copy that moves nothing fails. */
static ferry_status run_copy(const ferry_op *op, ferry_lanes lanes, const ferry_slot **damaged) {
  ferry_slot *src = op->src, *dst = op->dst;
  size_t so = op->src_offset, doff = op->dst_offset, n = op->bytes;
  ferry_device *sdev = src->device, *ddev = dst->device;
  if (n == 0 || (src == dst && so == doff)) {
    /* Nothing to move; a damaged buffer still fails the copy. */
    ferry_status st = check_untouched(src);
    *damaged = src;
    if (st == FERRY_OK && dst != src) {
      st = check_untouched(dst);
      *damaged = dst;
    }
    return st;
  }
  ferry_lane *slane = ferry__lane_for(lanes, sdev, FERRY_DMA_TO_HOST),
             *dlane = ferry__lane_for(lanes, ddev, FERRY_DMA_TO_DEVICE);
  if (sdev == ddev && src->mem.host && dst->mem.host) {
    ferry__plain_move((char *)dst->mem.host + doff, (const char *)src->mem.host + so, n);
    return FERRY_OK;
  }
  ferry_copy_ends ends = {.sdev = sdev,
                          .slane = slane,
                          .src = &src->mem,
                          .so = so,
                          .ddev = ddev,
                          .dlane = dlane,
                          .dst = &dst->mem,
                          .doff = doff,
                          .n = n};
  if (sdev == ddev && (src->mem.host || dst->mem.host)) return ferry__engine_copy(&ends); /* the host paths */
  if (sdev == ddev) {
    bool overlapping = src == dst && so < doff + n && doff < so + n;
    return copy_within(sdev, dlane, &src->mem, so, &dst->mem, doff, n, overlapping);
  }
  ferry_status st = FERRY_ERROR_UNSUPPORTED;
  if (sdev->backend == ddev->backend && sdev->ops->peer_start) {
    ferry_ticket t = 0;
    st = sdev->ops->peer_start(ddev, dlane, sdev, &src->mem, so, ddev, &dst->mem, doff, n, &t);
    if (st == FERRY_OK) st = ferry__ticket_finish(ddev, t);
  }
  if (st == FERRY_ERROR_UNSUPPORTED) st = ferry__engine_copy(&ends);
  return st;
}

ferry_status ferry__op_run(const ferry_op *op, ferry_lanes lanes) {
  ferry_status st;
  const ferry_slot *damaged = NULL;
  switch (op->kind) {
  case FERRY_OP_WRITE: st = run_write(op, lanes); break;
  case FERRY_OP_READ: st = run_read(op, lanes); break;
  case FERRY_OP_COPY: st = run_copy(op, lanes, &damaged); break;
  case FERRY_OP_FILL: st = run_fill(op, lanes); break;
  default: return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: not an operation to run on its own", op->fn);
  }
  if (st != FERRY_OK && damaged) {
    char text[512];
    return ferry__fail(st, "%s: %s: %s", op->fn, ferry__buffer_text(damaged, text), ferry__error_text());
  }
  if (st != FERRY_OK) return ferry__op_failed(st, op);
  ferry__op_count(op);
  return FERRY_OK;
}
