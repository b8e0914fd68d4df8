/*
 * Transfers: every argument is checked here, then the transfer engine
 * (engine.c) moves the bytes.
 *
 * A zero-copy or host-ptr buffer addressed through its own array only
 * synchronises (the bytes are already there); through any other array it
 * copies, exactly as a buffer with memory of its own. Copies within a device
 * are the backend's; between devices of one backend its peer copy where it has
 * one; everything else is the engine's.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Puts "fn: buffer ...: " in front of the backend's sentence. */
static ferry_status backend_failed(ferry_status st, const char *fn, const ferry_slot *slot) {
  char text[512];
  return ferry__fail(st, "%s: %s: %s", fn, ferry__buffer_text(slot, text), ferry__error_text());
}

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

/* A transfer that moves no bytes still fails on a buffer the backend finds
 * damaged (checked's guards): every transfer touching it does. */
static ferry_status check_untouched(const char *fn, ferry_slot *slot) {
  ferry_device *dev = slot->device;
  if (!dev->ops->check) return FERRY_OK;
  ferry_status st = dev->ops->check(dev, &slot->mem);
  return st == FERRY_OK ? st : backend_failed(st, fn, slot);
}

/* ---- moving bytes between the host and one buffer -------------------------- */

/* Does the host range name the buffer's own bytes (a zero-copy or host-ptr
 * buffer addressed through its own array)? */
static bool own_bytes(const ferry_slot *slot, size_t offset, const void *host) {
  return slot->over_host_array && host == (const char *)slot->host_array + offset;
}

static ferry_status sync_own(const char *fn, ferry_slot *slot, ferry_sync_dir dir) {
  ferry_device *dev = slot->device;
  if (!(slot->mem.flags & FERRY_MEM_HOST_PTR)) return FERRY_OK; /* zero-copy: nothing to hand over */
  ferry_status st = dev->ops->host_ptr_sync(dev, &slot->mem, dir);
  return st == FERRY_OK ? st : backend_failed(st, fn, slot);
}

static ferry_status write_bytes(const char *fn, ferry_slot *slot, size_t offset, const void *src, size_t bytes) {
  ferry_device *dev = slot->device;
  ferry_status st = FERRY_OK;
  if (bytes == 0) {
    st = check_untouched(fn, slot);
  } else {
    if (own_bytes(slot, offset, src))
      st = sync_own(fn, slot, FERRY_SYNC_TO_DEVICE);
    else if ((st = ferry__engine_write(dev, &slot->mem, offset, src, bytes)) != FERRY_OK)
      st = backend_failed(st, fn, slot);
  }
  if (st == FERRY_OK) ferry__count_transfer(dev, FERRY_H2D, bytes);
  return st;
}

static ferry_status read_bytes(const char *fn, ferry_slot *slot, size_t offset, void *dst, size_t bytes) {
  ferry_device *dev = slot->device;
  ferry_status st = FERRY_OK;
  if (bytes == 0) {
    st = check_untouched(fn, slot);
  } else {
    if (own_bytes(slot, offset, dst))
      st = sync_own(fn, slot, FERRY_SYNC_TO_HOST);
    else if ((st = ferry__engine_read(dev, &slot->mem, offset, dst, bytes)) != FERRY_OK)
      st = backend_failed(st, fn, slot);
  }
  if (st == FERRY_OK) ferry__count_transfer(dev, FERRY_D2H, bytes);
  return st;
}

/* ---- copies between buffers ------------------------------------------------ */

/* Within one allocation, overlapping, on a device whose copy cannot overlap: via
 * a temporary allocation on the same device. */
static ferry_status copy_overlapping(ferry_device *dev, ferry_mem *mem, size_t so, size_t doff, size_t bytes) {
  ferry_mem tmp;
  size_t class_bytes;
  ferry_status st = ferry__mem_alloc(dev, bytes, &tmp, &class_bytes);
  if (st != FERRY_OK) return st;
  st = dev->ops->copy(dev, mem, so, &tmp, 0, bytes);
  if (st == FERRY_OK) st = dev->ops->copy(dev, &tmp, 0, mem, doff, bytes);
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", ferry__error_text());
  ferry__mem_release(dev, &tmp, class_bytes);
  if (st != FERRY_OK) ferry__fail(st, "%s", saved);
  return st;
}

static ferry_status copy_bytes(const char *fn, ferry_slot *src, size_t so, ferry_slot *dst, size_t doff, size_t bytes) {
  ferry_device *sdev = src->device, *ddev = dst->device;
  ferry_status st = FERRY_OK;
  if (bytes == 0 || (src == dst && so == doff)) {
    /* Nothing to move; a damaged buffer still fails the copy. */
    if ((st = check_untouched(fn, src)) == FERRY_OK && dst != src) st = check_untouched(fn, dst);
    if (st != FERRY_OK) return st; /* the sentence names the damaged buffer */
  } else if (sdev == ddev && (src->mem.host || dst->mem.host)) {
    /* Host memory on one side at least: the engine's host paths. */
    if (src->mem.host && dst->mem.host)
      ferry__host_move((char *)dst->mem.host + doff, (const char *)src->mem.host + so, bytes);
    else
      st = ferry__engine_copy(sdev, &src->mem, so, ddev, &dst->mem, doff, bytes);
  } else if (sdev == ddev) {
    bool overlapping = src == dst && so < doff + bytes && doff < so + bytes;
    if (overlapping && !(sdev->caps & FERRY_CAP_OVERLAP_COPY))
      st = copy_overlapping(sdev, &src->mem, so, doff, bytes);
    else
      st = sdev->ops->copy(sdev, &src->mem, so, &dst->mem, doff, bytes);
  } else {
    st = FERRY_ERROR_UNSUPPORTED;
    if (sdev->backend == ddev->backend && sdev->ops->copy_peer)
      st = sdev->ops->copy_peer(sdev, &src->mem, so, ddev, &dst->mem, doff, bytes);
    if (st == FERRY_ERROR_UNSUPPORTED) st = ferry__engine_copy(sdev, &src->mem, so, ddev, &dst->mem, doff, bytes);
  }
  if (st != FERRY_OK) {
    char a[512], b[512];
    return ferry__fail(st, "%s: from %s to %s: %s", fn, ferry__buffer_text(src, a), ferry__buffer_text(dst, b),
                       ferry__error_text());
  }
  ferry__count_transfer(ddev, FERRY_D2D, bytes);
  return FERRY_OK;
}

/* ---- the public transfers -------------------------------------------------- */

ferry_status ferry_host_to_device(ferry_array src, ferry_buffer dst) {
  static const char fn[] = "ferry_host_to_device";
  ferry_slot *slot;
  ferry_status st = ferry__acquire(dst, fn, &slot);
  if (st != FERRY_OK) return st;
  size_t bytes = 0;
  if ((st = check_typed(fn, src, slot, &bytes)) == FERRY_OK) st = write_bytes(fn, slot, 0, src.data, bytes);
  ferry__release(slot);
  return st;
}

ferry_status ferry_device_to_host(ferry_buffer src, ferry_array dst) {
  static const char fn[] = "ferry_device_to_host";
  ferry_slot *slot;
  ferry_status st = ferry__acquire(src, fn, &slot);
  if (st != FERRY_OK) return st;
  size_t bytes = 0;
  if ((st = check_typed(fn, dst, slot, &bytes)) == FERRY_OK) st = read_bytes(fn, slot, 0, dst.data, bytes);
  ferry__release(slot);
  return st;
}

ferry_status ferry_host_ptr_to_device(const void *src_ptr, size_t byte_size, ferry_buffer dst) {
  static const char fn[] = "ferry_host_ptr_to_device";
  ferry_slot *slot;
  ferry_status st = ferry__acquire(dst, fn, &slot);
  if (st != FERRY_OK) return st;
  if ((st = check_ptr(fn, src_ptr, byte_size, slot)) == FERRY_OK) st = write_bytes(fn, slot, 0, src_ptr, byte_size);
  ferry__release(slot);
  return st;
}

ferry_status ferry_device_to_host_ptr(ferry_buffer src, void *dst_ptr, size_t byte_size) {
  static const char fn[] = "ferry_device_to_host_ptr";
  ferry_slot *slot;
  ferry_status st = ferry__acquire(src, fn, &slot);
  if (st != FERRY_OK) return st;
  if ((st = check_ptr(fn, dst_ptr, byte_size, slot)) == FERRY_OK) st = read_bytes(fn, slot, 0, dst_ptr, byte_size);
  ferry__release(slot);
  return st;
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
  char a[512], b[512];
  if (s->kind != d->kind || s->elem_size != d->elem_size)
    st = ferry__fail(FERRY_ERROR_KIND_MISMATCH, "%s: %s and %s differ in kind (%s, %zu bytes each vs %s, %zu)", fn,
                     ferry__buffer_text(s, a), ferry__buffer_text(d, b), ferry_kind_name(s->kind), s->elem_size,
                     ferry_kind_name(d->kind), d->elem_size);
  else if (s->length != d->length)
    st = ferry__fail(FERRY_ERROR_SIZE_MISMATCH, "%s: %s has %zu elements, %s has %zu", fn, ferry__buffer_text(s, a),
                     s->length, ferry__buffer_text(d, b), d->length);
  else
    st = copy_bytes(fn, s, 0, d, 0, s->bytes);
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
    else
      st = write_bytes(fn, slot, dst_offset, src, bytes);
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
    else
      st = read_bytes(fn, slot, src_offset, dst, bytes);
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
      (st = check_range(fn, d, dst_offset, bytes, "destination")) == FERRY_OK)
    st = copy_bytes(fn, s, src_offset, d, dst_offset, bytes);
  ferry__release(d);
  ferry__release(s);
  return st;
}
