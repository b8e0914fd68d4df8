/*
 * Transfers: every argument is checked here, then the operation (ops.c) runs
 * now, after the default queue's earlier work (the synchronous calls), or is
 * submitted to a queue (the _async calls, queue.c).
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- checks ---------------------------------------------------------------- */

static ferry_status check_typed(const char *fn, ferry_array a, const ferry_slot *slot, size_t *out_bytes) {
  char text[512];
  /* Input that is wrong whatever the buffer comes first (docs/API.md's order). */
  if ((unsigned)a.kind > (unsigned)FERRY_CUSTOM)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: host array kind %d is not a ferry_kind", fn, (int)a.kind);
  if (slot->kind == FERRY_CUSTOM)
    return ferry__fail(FERRY_ERROR_KIND_MISMATCH,
                       "%s: %s is a custom buffer; custom buffers take only ferry_host_ptr_to_device, "
                       "ferry_device_to_host_ptr and the byte-range functions",
                       fn, ferry__buffer_text(slot, text));
  if (a.kind != slot->kind)
    return ferry__fail(FERRY_ERROR_KIND_MISMATCH, "%s: host array is %s, %s is %s", fn, ferry_kind_name(a.kind),
                       ferry__buffer_text(slot, text), ferry_kind_name(slot->kind));
  if (a.length != slot->length)
    return ferry__fail(FERRY_ERROR_SIZE_MISMATCH, "%s: host array has %zu %s elements, %s has %zu", fn, a.length,
                       ferry_kind_name(a.kind), ferry__buffer_text(slot, text), slot->length);
  if (!a.data && a.length > 0)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: host array data is NULL but its length is %zu", fn, a.length);
  *out_bytes = slot->bytes;
  return FERRY_OK;
}

static ferry_status check_ptr(const char *fn, const void *ptr, size_t byte_size, const ferry_slot *slot) {
  char text[512];
  if (byte_size != slot->bytes)
    return ferry__fail(FERRY_ERROR_SIZE_MISMATCH, "%s: byte_size is %zu, %s has %zu bytes", fn, byte_size,
                       ferry__buffer_text(slot, text), slot->bytes);
  if (!ptr && byte_size > 0)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: the host pointer is NULL but byte_size is %zu", fn,
                       byte_size);
  return FERRY_OK;
}

static ferry_status check_overflow(const char *fn, size_t offset, size_t bytes, const char *which) {
  if (offset > SIZE_MAX - bytes)
    return ferry__fail(FERRY_ERROR_OVERFLOW, "%s: %s offset %zu + %zu bytes overflows size_t", fn, which, offset,
                       bytes);
  return FERRY_OK;
}

static ferry_status check_range(const char *fn, const ferry_slot *slot, size_t offset, size_t bytes,
                                const char *which) {
  char text[512];
  ferry_status st = check_overflow(fn, offset, bytes, which);
  if (st != FERRY_OK) return st;
  if (offset + bytes > slot->bytes)
    return ferry__fail(FERRY_ERROR_OUT_OF_RANGE, "%s: %s bytes %zu..%zu run past the end of %s, which has %zu bytes",
                       fn, which, offset, offset + bytes, ferry__buffer_text(slot, text), slot->bytes);
  return FERRY_OK;
}

/* ---- running an operation now ---------------------------------------------------- */

/* A synchronous call: the work already submitted to the default queue of each
 * device the operation touches first, then the operation itself, complete on
 * return. The references of op are the caller's. */
ferry_status ferry__run_now(ferry_op *op) {
  ferry_slot *a = op->dst ? op->dst : op->src, *b = op->src && op->dst ? op->src : NULL;
  ferry_status st = ferry__queue_settle_default(a->device, op->fn);
  if (st == FERRY_OK && b && b->device != a->device) st = ferry__queue_settle_default(b->device, op->fn);
  if (st != FERRY_OK) return st;
  return ferry__op_run(op, (ferry_lanes){0});
}

/* ---- the public transfers -------------------------------------------------- */

ferry_status ferry_host_to_device(ferry_array src, ferry_buffer dst) {
  static const char fn[] = "ferry_host_to_device";
  ferry_slot *slot;
  ferry_status st = ferry__acquire(dst, fn, &slot);
  if (st != FERRY_OK) return st;
  size_t bytes = 0;
  if ((st = check_typed(fn, src, slot, &bytes)) == FERRY_OK) {
    ferry_op op = {.kind = FERRY_OP_WRITE, .fn = fn, .dst = slot, .bytes = bytes, .host = src.data};
    st = ferry__run_now(&op);
  }
  ferry__release(slot);
  return st;
}

ferry_status ferry_device_to_host(ferry_buffer src, ferry_array dst) {
  static const char fn[] = "ferry_device_to_host";
  ferry_slot *slot;
  ferry_status st = ferry__acquire(src, fn, &slot);
  if (st != FERRY_OK) return st;
  size_t bytes = 0;
  if ((st = check_typed(fn, dst, slot, &bytes)) == FERRY_OK) {
    ferry_op op = {.kind = FERRY_OP_READ, .fn = fn, .src = slot, .bytes = bytes, .host = dst.data};
    st = ferry__run_now(&op);
  }
  ferry__release(slot);
  return st;
}

ferry_status ferry_host_ptr_to_device(const void *src_ptr, size_t byte_size, ferry_buffer dst) {
  static const char fn[] = "ferry_host_ptr_to_device";
  ferry_slot *slot;
  ferry_status st = ferry__acquire(dst, fn, &slot);
  if (st != FERRY_OK) return st;
  if ((st = check_ptr(fn, src_ptr, byte_size, slot)) == FERRY_OK) {
    ferry_op op = {
        .kind = FERRY_OP_WRITE, .fn = fn, .dst = slot, .bytes = byte_size, .host = (void *)(uintptr_t)src_ptr};
    st = ferry__run_now(&op);
  }
  ferry__release(slot);
  return st;
}

ferry_status ferry_device_to_host_ptr(ferry_buffer src, void *dst_ptr, size_t byte_size) {
  static const char fn[] = "ferry_device_to_host_ptr";
  ferry_slot *slot;
  ferry_status st = ferry__acquire(src, fn, &slot);
  if (st != FERRY_OK) return st;
  if ((st = check_ptr(fn, dst_ptr, byte_size, slot)) == FERRY_OK) {
    ferry_op op = {.kind = FERRY_OP_READ, .fn = fn, .src = slot, .bytes = byte_size, .host = dst_ptr};
    st = ferry__run_now(&op);
  }
  ferry__release(slot);
  return st;
}

/* Two whole buffers of one kind and length (ferry_device_to_device). */
static ferry_status check_pair(const char *fn, const ferry_slot *s, const ferry_slot *d) {
  char a[512], b[512];
  if (s->kind != d->kind || s->elem_size != d->elem_size)
    return ferry__fail(FERRY_ERROR_KIND_MISMATCH, "%s: %s and %s differ in kind (%s, %zu bytes each vs %s, %zu)", fn,
                       ferry__buffer_text(s, a), ferry__buffer_text(d, b), ferry_kind_name(s->kind), s->elem_size,
                       ferry_kind_name(d->kind), d->elem_size);
  if (s->length != d->length)
    return ferry__fail(FERRY_ERROR_SIZE_MISMATCH, "%s: %s has %zu elements, %s has %zu", fn, ferry__buffer_text(s, a),
                       s->length, ferry__buffer_text(d, b), d->length);
  return FERRY_OK;
}

ferry_status ferry_device_to_device(ferry_buffer src, ferry_buffer dst) {
  static const char fn[] = "ferry_device_to_device";
  ferry_slot *s, *d;
  ferry_status st = ferry__acquire(src, fn, &s);
  if (st != FERRY_OK) return st;
  if ((st = ferry__acquire(dst, fn, &d)) != FERRY_OK) {
    ferry__release(s);
    return st;
  }
  if ((st = check_pair(fn, s, d)) == FERRY_OK) {
    ferry_op op = {.kind = FERRY_OP_COPY, .fn = fn, .src = s, .dst = d, .bytes = s->bytes};
    st = ferry__run_now(&op);
  }
  ferry__release(d);
  ferry__release(s);
  return st;
}

ferry_status ferry_write(ferry_buffer dst, size_t dst_offset, const void *src, size_t bytes) {
  static const char fn[] = "ferry_write";
  ferry_slot *slot;
  ferry_status st = ferry__acquire(dst, fn, &slot);
  if (st != FERRY_OK) return st;
  if ((st = check_range(fn, slot, dst_offset, bytes, "destination")) == FERRY_OK) {
    if (!src && bytes > 0)
      st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: src is NULL but bytes is %zu", fn, bytes);
    else {
      ferry_op op = {.kind = FERRY_OP_WRITE,
                     .fn = fn,
                     .dst = slot,
                     .dst_offset = dst_offset,
                     .bytes = bytes,
                     .host = (void *)(uintptr_t)src};
      st = ferry__run_now(&op);
    }
  }
  ferry__release(slot);
  return st;
}

ferry_status ferry_read(ferry_buffer src, size_t src_offset, void *dst, size_t bytes) {
  static const char fn[] = "ferry_read";
  ferry_slot *slot;
  ferry_status st = ferry__acquire(src, fn, &slot);
  if (st != FERRY_OK) return st;
  if ((st = check_range(fn, slot, src_offset, bytes, "source")) == FERRY_OK) {
    if (!dst && bytes > 0)
      st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: dst is NULL but bytes is %zu", fn, bytes);
    else {
      ferry_op op = {
          .kind = FERRY_OP_READ, .fn = fn, .src = slot, .src_offset = src_offset, .bytes = bytes, .host = dst};
      st = ferry__run_now(&op);
    }
  }
  ferry__release(slot);
  return st;
}

ferry_status ferry_copy(ferry_buffer src, size_t src_offset, ferry_buffer dst, size_t dst_offset, size_t bytes) {
  static const char fn[] = "ferry_copy";
  ferry_slot *s, *d;
  ferry_status st = ferry__acquire(src, fn, &s);
  if (st != FERRY_OK) return st;
  if ((st = ferry__acquire(dst, fn, &d)) != FERRY_OK) {
    ferry__release(s);
    return st;
  }
  /* Overflow on either side first, then either range past its end (docs/API.md's order). */
  if ((st = check_overflow(fn, src_offset, bytes, "source")) == FERRY_OK &&
      (st = check_overflow(fn, dst_offset, bytes, "destination")) == FERRY_OK &&
      (st = check_range(fn, s, src_offset, bytes, "source")) == FERRY_OK &&
      (st = check_range(fn, d, dst_offset, bytes, "destination")) == FERRY_OK) {
    ferry_op op = {.kind = FERRY_OP_COPY,
                   .fn = fn,
                   .src = s,
                   .src_offset = src_offset,
                   .dst = d,
                   .dst_offset = dst_offset,
                   .bytes = bytes};
    st = ferry__run_now(&op);
  }
  ferry__release(d);
  ferry__release(s);
  return st;
}

/* ---- fills ------------------------------------------------------------------------- */

static ferry_status check_fill(const char *fn, const ferry_slot *slot, size_t offset, size_t bytes, const void *pattern,
                               size_t pattern_size, uint32_t *out_pattern) {
  if (pattern_size != 1 && pattern_size != 2 && pattern_size != 4)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: pattern_size is %zu; a pattern has 1, 2 or 4 bytes", fn,
                       pattern_size);
  if (!pattern && bytes > 0)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: pattern is NULL but bytes is %zu", fn, bytes);
  ferry_status st = check_range(fn, slot, offset, bytes, "destination");
  if (st != FERRY_OK) return st;
  if (offset % pattern_size || bytes % pattern_size)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                       "%s: dst_offset %zu and bytes %zu must be multiples of the pattern's %zu bytes", fn, offset,
                       bytes, pattern_size);
  *out_pattern = 0;
  if (pattern) memcpy(out_pattern, pattern, pattern_size);
  return FERRY_OK;
}

ferry_status ferry_fill(ferry_buffer dst, size_t dst_offset, size_t bytes, const void *pattern, size_t pattern_size) {
  static const char fn[] = "ferry_fill";
  ferry_slot *slot;
  ferry_status st = ferry__acquire(dst, fn, &slot);
  if (st != FERRY_OK) return st;
  uint32_t pat = 0;
  if ((st = check_fill(fn, slot, dst_offset, bytes, pattern, pattern_size, &pat)) == FERRY_OK) {
    ferry_op op = {.kind = FERRY_OP_FILL,
                   .fn = fn,
                   .dst = slot,
                   .dst_offset = dst_offset,
                   .bytes = bytes,
                   .pattern = pat,
                   .pattern_size = (unsigned)pattern_size};
    st = ferry__run_now(&op);
  }
  ferry__release(slot);
  return st;
}

/* ---- on a queue -------------------------------------------------------------------- */

/* The queue is of `dev`, or of `other` when given (copies take either end's). */
static ferry_status check_queue_device(const char *fn, ferry_queue_obj *q, const ferry_slot *slot,
                                       const ferry_slot *other) {
  ferry_device *qdev = ferry__queue_device(q);
  if (qdev == slot->device || (other && qdev == other->device)) return FERRY_OK;
  char a[512], b[512];
  if (other)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                       "%s: the queue is one of %s, but the copy is from %s to %s: a copy takes a queue of the "
                       "source's or the destination's device",
                       fn, qdev->label, ferry__buffer_text(other, a), ferry__buffer_text(slot, b));
  return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: the queue is one of %s, but %s is on another device", fn,
                     qdev->label, ferry__buffer_text(slot, a));
}

/* Enters the gate and takes the queue; on failure nothing is held. */
static ferry_status queue_begin(ferry_queue queue, const char *fn, ferry_queue_obj **out) {
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  if ((st = ferry__queue_acquire(queue, fn, out)) != FERRY_OK) ferry__leave();
  return st;
}

static void queue_end(ferry_queue_obj *q) {
  ferry__queue_unref(q);
  ferry__leave();
}

/* A transfer between host memory and `buffer` on a queue of its device. With
 * `typed`, the whole buffer and the checks of the synchronous typed transfers
 * (kind, length); else a byte range. The buffer's reference passes to the queue. */
static ferry_status host_async(const char *fn, ferry_queue queue, ferry_op_kind kind, ferry_buffer buffer,
                               size_t offset, void *host, size_t bytes, const ferry_array *typed) {
  ferry_queue_obj *q = NULL;
  ferry_status st = queue_begin(queue, fn, &q);
  if (st != FERRY_OK) return st;
  ferry_slot *slot;
  if ((st = ferry__acquire(buffer, fn, &slot)) == FERRY_OK) {
    bool to_device = kind == FERRY_OP_WRITE;
    if (typed)
      st = check_typed(fn, *typed, slot, &bytes);
    else if ((st = check_range(fn, slot, offset, bytes, to_device ? "destination" : "source")) == FERRY_OK && !host &&
             bytes > 0)
      st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but bytes is %zu", fn, to_device ? "src" : "dst",
                       bytes);
    if (st == FERRY_OK) st = check_queue_device(fn, q, slot, NULL);
    if (st == FERRY_OK) {
      ferry_op op = ferry__op_host_transfer(fn, to_device, slot, offset, host, bytes);
      st = ferry__queue_submit(q, &op); /* takes the reference */
    } else {
      ferry__release(slot);
    }
  }
  queue_end(q);
  return st;
}

ferry_status ferry_write_async(ferry_queue queue, ferry_buffer dst, size_t dst_offset, const void *src, size_t bytes) {
  return host_async("ferry_write_async", queue, FERRY_OP_WRITE, dst, dst_offset, (void *)(uintptr_t)src, bytes, NULL);
}

ferry_status ferry_read_async(ferry_queue queue, ferry_buffer src, size_t src_offset, void *dst, size_t bytes) {
  return host_async("ferry_read_async", queue, FERRY_OP_READ, src, src_offset, dst, bytes, NULL);
}

ferry_status ferry_host_to_device_async(ferry_queue queue, ferry_array src, ferry_buffer dst) {
  return host_async("ferry_host_to_device_async", queue, FERRY_OP_WRITE, dst, 0, src.data, 0, &src);
}

ferry_status ferry_device_to_host_async(ferry_queue queue, ferry_buffer src, ferry_array dst) {
  return host_async("ferry_device_to_host_async", queue, FERRY_OP_READ, src, 0, dst.data, 0, &dst);
}

/* A copy between two buffers on a queue of either's device: a byte range, or with
 * `whole` the two whole buffers with ferry_device_to_device's checks. */
static ferry_status copy_async(const char *fn, ferry_queue queue, ferry_buffer src, size_t src_offset, ferry_buffer dst,
                               size_t dst_offset, size_t bytes, bool whole) {
  ferry_queue_obj *q = NULL;
  ferry_status st = queue_begin(queue, fn, &q);
  if (st != FERRY_OK) return st;
  ferry_slot *s, *d;
  if ((st = ferry__acquire(src, fn, &s)) == FERRY_OK) {
    if ((st = ferry__acquire(dst, fn, &d)) != FERRY_OK) {
      ferry__release(s);
    } else {
      if (whole) {
        if ((st = check_pair(fn, s, d)) == FERRY_OK) bytes = s->bytes;
      } else if ((st = check_overflow(fn, src_offset, bytes, "source")) == FERRY_OK &&
                 (st = check_overflow(fn, dst_offset, bytes, "destination")) == FERRY_OK &&
                 (st = check_range(fn, s, src_offset, bytes, "source")) == FERRY_OK) {
        st = check_range(fn, d, dst_offset, bytes, "destination");
      }
      if (st == FERRY_OK) st = check_queue_device(fn, q, d, s);
      if (st == FERRY_OK) {
        ferry_op op = {.kind = FERRY_OP_COPY,
                       .fn = fn,
                       .src = s,
                       .src_offset = src_offset,
                       .dst = d,
                       .dst_offset = dst_offset,
                       .bytes = bytes};
        st = ferry__queue_submit(q, &op);
      } else {
        ferry__release(d);
        ferry__release(s);
      }
    }
  }
  queue_end(q);
  return st;
}

ferry_status ferry_copy_async(ferry_queue queue, ferry_buffer src, size_t src_offset, ferry_buffer dst,
                              size_t dst_offset, size_t bytes) {
  return copy_async("ferry_copy_async", queue, src, src_offset, dst, dst_offset, bytes, false);
}

ferry_status ferry_device_to_device_async(ferry_queue queue, ferry_buffer src, ferry_buffer dst) {
  return copy_async("ferry_device_to_device_async", queue, src, 0, dst, 0, 0, true);
}

ferry_status ferry_fill_async(ferry_queue queue, ferry_buffer dst, size_t dst_offset, size_t bytes, const void *pattern,
                              size_t pattern_size) {
  static const char fn[] = "ferry_fill_async";
  ferry_queue_obj *q = NULL;
  ferry_status st = queue_begin(queue, fn, &q);
  if (st != FERRY_OK) return st;
  ferry_slot *slot;
  if ((st = ferry__acquire(dst, fn, &slot)) == FERRY_OK) {
    uint32_t pat = 0;
    if ((st = check_fill(fn, slot, dst_offset, bytes, pattern, pattern_size, &pat)) == FERRY_OK)
      st = check_queue_device(fn, q, slot, NULL);
    if (st == FERRY_OK) {
      ferry_op op = {.kind = FERRY_OP_FILL,
                     .fn = fn,
                     .dst = slot,
                     .dst_offset = dst_offset,
                     .bytes = bytes,
                     .pattern = pat,
                     .pattern_size = (unsigned)pattern_size};
      st = ferry__queue_submit(q, &op);
    } else {
      ferry__release(slot);
    }
  }
  queue_end(q);
  return st;
}
