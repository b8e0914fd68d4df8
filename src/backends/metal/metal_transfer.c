/*
 * Moving bytes on a Metal device: blits, and what the core's transfer engine
 * (src/core/engine.c) asks of a backend.
 *
 * On unified memory (ferry_mem.host set: shared storage) the core copies the
 * bytes itself and nothing here runs for transfers. On discrete GPUs device
 * memory is private, and the engine moves bytes through pinned blocks:
 *  - pin_alloc: a shared-storage MTLBuffer (newBufferWithLength:options:), whose
 *    contents is the block the core hands out; the buffer is the token;
 *  - pin_register: a block another allocator made, wrapped by
 *    newBufferWithBytesNoCopy:length:options:deallocator: (shared, nil
 *    deallocator) where it lies on whole pages of this machine's page size;
 *    refused otherwise, and the engine then stages through a ring of its own;
 *  - dma_start: a blit between the token's buffer and device memory, committed;
 *    the ticket holds the command buffer, which dma_wait waits for, checks and
 *    releases.
 *
 * Apple's blit rule on macOS: offsets and sizes multiples of 4. Every buffer
 * ferry makes is a whole number of words (metal.c), and:
 *  - a DMA whose pinned offset and device offset are equal modulo 4 is one blit
 *    for its whole words; the at most 3 + 3 bytes at its ends move synchronously
 *    first (below);
 *  - a range that cannot be blitted in place (offsets that differ modulo 4, or
 *    the ends of a range) goes through a temporary shared buffer: the words
 *    around it are blitted there, and the bytes copied by the host. A write that
 *    starts or ends inside a word reads that word from the device first and
 *    writes it back whole (read-modify-write, under a lock that every writer of
 *    a partial word of the buffer takes), so the bytes outside the range stay
 *    what they were. The same path is the backend's write and read (Metal has
 *    no call that moves ordinary host memory into a private buffer).
 */
#include "metal_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest temporary shared buffer a range that cannot be blitted in place
 * goes through: a window costs one command buffer's round trip (two for a
 * partial word's read-modify-write), so windows are large, but the temporary
 * stays small beside what the engine's ring holds. */
#define TEMP_MAX ((size_t)8 << 20)

static size_t floor4(size_t x) { return x & ~(size_t)3; }
/* Only for x up to an allocation's length, which is a multiple of 4: no overflow. */
static size_t ceil4(size_t x) { return (x + 3) & ~(size_t)3; }
static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }
static bool words(size_t offset, size_t bytes) { return offset % 4 == 0 && bytes % 4 == 0; }

static mtl_id buffer_of(const ferry_mem *mem) { return (mtl_id)mem->handle; }

/* ---- the primitive: blits between buffers of one device ------------------------------ */

typedef metal_blit blit_op;

static blit_op copy_op(mtl_id src, size_t src_offset, mtl_id dst, size_t dst_offset, size_t bytes) {
  return (blit_op){.src = src, .src_offset = src_offset, .dst = dst, .dst_offset = dst_offset, .bytes = bytes};
}

/* Encodes, in one command buffer on `queue`, a wait for `chain_event` and one
 * for `wait_event` (MTL_NIL: none), the copies and fills, and a signal of
 * `signal_event` (MTL_NIL: none), and commits it; *out_cb is the command buffer
 * (retained). */
static ferry_status commit(ferry_device *dev, mtl_id queue, const blit_op *ops, int count, mtl_id chain_event,
                           uint64_t chain_value, mtl_id wait_event, uint64_t wait_value, mtl_id signal_event,
                           uint64_t signal_value, mtl_id *out_cb) {
  ferry_status st = FERRY_OK;
  void *pool = ferry__metal_rt.pool_push();
  mtl_id cb = mtl_command_buffer(queue);
  mtl_id encoder = MTL_NIL;
  if (cb) { /* the waits before any encoder: Metal encodes them between passes */
    if (chain_event) mtl_encode_wait_for_event(cb, chain_event, chain_value);
    if (wait_event) mtl_encode_wait_for_event(cb, wait_event, wait_value);
    if (count > 0) encoder = mtl_blit_command_encoder(cb);
  }
  if (!cb) {
    st = ferry__fail(FERRY_ERROR_BACKEND, "commandBuffer on a command queue of %s returned nil", dev->label);
  } else if (count > 0 && !encoder) {
    st = ferry__fail(FERRY_ERROR_BACKEND, "blitCommandEncoder on %s returned nil", dev->label);
  } else {
    if (encoder) {
      for (int i = 0; i < count; i++)
        if (ops[i].fill)
          mtl_fill_buffer(encoder, ops[i].dst, (mtl_range){ops[i].dst_offset, ops[i].bytes}, ops[i].value);
        else
          mtl_copy_from_buffer(encoder, ops[i].src, ops[i].src_offset, ops[i].dst, ops[i].dst_offset, ops[i].bytes);
      mtl_end_encoding(encoder);
    }
    if (signal_event) mtl_encode_signal_event(cb, signal_event, signal_value);
    mtl_commit(cb);
    *out_cb = mtl_retain(cb); /* past this pool */
  }
  ferry__metal_rt.pool_pop(pool);
  return st;
}

/* The copies and fills in one command buffer on the device's own queue; *out_wait
 * is the command buffer (retained) for blit_wait. */
static ferry_status blit_start(ferry_device *dev, const blit_op *ops, int count, mtl_id *out_wait) {
  metal_device *md = dev->impl;
  return commit(dev, md->queue, ops, count, MTL_NIL, 0, MTL_NIL, 0, MTL_NIL, 0, out_wait);
}

/* Waits for a command buffer from blit_start, says how it ended, releases it. */
static ferry_status blit_wait(ferry_device *dev, mtl_id cb, const char *what) {
  void *pool = ferry__metal_rt.pool_push();
  mtl_wait_until_completed(cb);
  ferry_status st = ferry__metal_completed(dev, cb, what);
  mtl_release(cb);
  ferry__metal_rt.pool_pop(pool);
  return st;
}

static ferry_status blit_run(ferry_device *dev, const blit_op *ops, int count, const char *what) {
  mtl_id cb = MTL_NIL;
  ferry_status st = blit_start(dev, ops, count, &cb);
  return st == FERRY_OK ? blit_wait(dev, cb, what) : st;
}

/* ---- ranges that cannot be blitted in place ------------------------------------------ */

void ferry__metal_transfer_init(metal_device *md) {
  for (int i = 0; i < METAL_RMW_STRIPES; i++)
    pthread_mutex_init(&md->rmw[i], NULL);
  pthread_mutex_init(&md->tickets_lock, NULL);
  pthread_mutex_init(&md->lanes_lock, NULL);
}

void ferry__metal_transfer_destroy(metal_device *md) {
  for (int i = 0; i < METAL_RMW_STRIPES; i++)
    pthread_mutex_destroy(&md->rmw[i]);
  pthread_mutex_destroy(&md->tickets_lock);
  pthread_mutex_destroy(&md->lanes_lock);
}

static pthread_mutex_t *rmw_lock(metal_device *md, const ferry_mem *mem) {
  return &md->rmw[(mem->handle >> 4) % METAL_RMW_STRIPES];
}

/* A shared-storage buffer and its contents, which the host reads and writes:
 * a temporary for one call, or a pinned block for the engine. */
typedef struct shared_buffer {
  mtl_id buffer;
  unsigned char *contents;
  size_t bytes;
} shared_buffer;

static ferry_status shared_make(ferry_device *dev, size_t bytes, const char *purpose, shared_buffer *out) {
  metal_device *md = dev->impl;
  ferry_status st = FERRY_OK;
  void *pool = ferry__metal_rt.pool_push();
  mtl_id buffer = mtl_new_buffer_with_length(md->device, bytes, MTL_RESOURCE_STORAGE_SHARED);
  void *contents = buffer ? mtl_contents(buffer) : NULL;
  if (!buffer) {
    st = ferry__metal_no_buffer(dev, bytes, "shared", purpose);
  } else if (!contents) {
    char size[64];
    mtl_release(buffer);
    st = ferry__fail(FERRY_ERROR_BACKEND, "contents of a shared-storage buffer of %s (%s) on %s returned NULL",
                     ferry__bytes_text(bytes, size), purpose, dev->label);
  } else {
    *out = (shared_buffer){.buffer = buffer, .contents = contents, .bytes = bytes};
  }
  ferry__metal_rt.pool_pop(pool);
  return st;
}

static void temp_free(shared_buffer *t) {
  void *pool = ferry__metal_rt.pool_push();
  mtl_release(t->buffer);
  ferry__metal_rt.pool_pop(pool);
  t->buffer = MTL_NIL;
}

/* The temporary for a range: its whole words, at most TEMP_MAX. */
static ferry_status temp_for(ferry_device *dev, size_t offset, size_t bytes, shared_buffer *out) {
  return shared_make(dev, min_size(ceil4(offset + bytes) - floor4(offset), TEMP_MAX),
                     "a temporary for bytes a blit cannot move in place", out);
}

/* Host memory -> device through a temporary, window by window. Window = the
 * whole words the range touches, at most the temporary; a word the range covers
 * only in part (the first and the last at most) is read from the device first
 * and written back whole. */
static ferry_status write_through_temp(ferry_device *dev, ferry_mem *dst, size_t offset, const void *src,
                                       size_t bytes) {
  metal_device *md = dev->impl;
  shared_buffer t = {0};
  ferry_status st = temp_for(dev, offset, bytes, &t);
  if (st != FERRY_OK) return st;
  pthread_mutex_t *lock = words(offset, bytes) ? NULL : rmw_lock(md, dst);
  if (lock) pthread_mutex_lock(lock);
  mtl_id device_buffer = buffer_of(dst);
  char what[256];
  size_t pos = offset, end = offset + bytes;
  while (pos < end && st == FERRY_OK) {
    size_t wstart = floor4(pos), wend = min_size(ceil4(end), wstart + t.bytes), stop = min_size(end, wend);
    blit_op keep[2];
    int kept = 0;
    if (pos > wstart) keep[kept++] = copy_op(device_buffer, wstart, t.buffer, 0, 4);
    if (stop < wend && !(kept && wend - 4 == wstart))
      keep[kept++] = copy_op(device_buffer, wend - 4, t.buffer, wend - 4 - wstart, 4);
    if (kept) {
      snprintf(what, sizeof what, "a blit of the partly written words of bytes %zu..%zu to a temporary buffer", wstart,
               wend);
      if ((st = blit_run(dev, keep, kept, what)) != FERRY_OK) break;
    }
    memcpy(t.contents + (pos - wstart), (const char *)src + (pos - offset), stop - pos);
    snprintf(what, sizeof what, "a blit of %zu bytes from a temporary buffer to device buffer bytes %zu..%zu",
             wend - wstart, wstart, wend);
    st = blit_run(dev, (blit_op[]){copy_op(t.buffer, 0, device_buffer, wstart, wend - wstart)}, 1, what);
    pos = stop;
  }
  if (lock) pthread_mutex_unlock(lock);
  temp_free(&t);
  return st;
}

static ferry_status read_through_temp(ferry_device *dev, const ferry_mem *src, size_t offset, void *dst, size_t bytes) {
  shared_buffer t = {0};
  ferry_status st = temp_for(dev, offset, bytes, &t);
  if (st != FERRY_OK) return st;
  char what[256];
  size_t pos = offset, end = offset + bytes;
  while (pos < end && st == FERRY_OK) {
    size_t wstart = floor4(pos), wend = min_size(ceil4(end), wstart + t.bytes), stop = min_size(end, wend);
    snprintf(what, sizeof what, "a blit of device buffer bytes %zu..%zu to a temporary buffer", wstart, wend);
    st = blit_run(dev, (blit_op[]){copy_op(buffer_of(src), wstart, t.buffer, 0, wend - wstart)}, 1, what);
    if (st == FERRY_OK) memcpy((char *)dst + (pos - offset), t.contents + (pos - wstart), stop - pos);
    pos = stop;
  }
  temp_free(&t);
  return st;
}

/* ---- the backend's own write and read ------------------------------------------------- */

ferry_status ferry__metal_write(ferry_device *dev, ferry_mem *dst, size_t offset, const void *src, size_t bytes) {
  if (dst->host) { /* shared storage: plain memory */
    ferry__host_move((char *)dst->host + offset, src, bytes);
    return FERRY_OK;
  }
  return write_through_temp(dev, dst, offset, src, bytes);
}

ferry_status ferry__metal_read(ferry_device *dev, const ferry_mem *src, size_t offset, void *dst, size_t bytes) {
  if (src->host) {
    ferry__host_move(dst, (const char *)src->host + offset, bytes);
    return FERRY_OK;
  }
  return read_through_temp(dev, src, offset, dst, bytes);
}

/* ---- within the device ------------------------------------------------------------------- */

/* Offsets that differ modulo 4 cannot be blitted on macOS: through host memory,
 * a window at a time. */
static ferry_status copy_via_host(ferry_device *dev, const ferry_mem *src, size_t so, ferry_mem *dst, size_t doff,
                                  size_t bytes) {
  size_t chunk = min_size(bytes, TEMP_MAX);
  void *tmp = malloc(chunk);
  if (!tmp) {
    char size[64];
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for %s to copy through on %s",
                       ferry__bytes_text(chunk, size), dev->label);
  }
  ferry_status st = FERRY_OK;
  for (size_t done = 0; done < bytes && st == FERRY_OK; done += chunk) {
    size_t n = min_size(chunk, bytes - done);
    st = ferry__metal_read(dev, src, so + done, tmp, n);
    if (st == FERRY_OK) st = ferry__metal_write(dev, dst, doff + done, tmp, n);
  }
  free(tmp);
  return st;
}

/* A few bytes (less than a word) through the host. */
static ferry_status copy_bytes_via_host(ferry_device *dev, const ferry_mem *src, size_t so, ferry_mem *dst, size_t doff,
                                        size_t bytes) {
  unsigned char tmp[4];
  ferry_status st = ferry__metal_read(dev, src, so, tmp, bytes);
  return st == FERRY_OK ? ferry__metal_write(dev, dst, doff, tmp, bytes) : st;
}

ferry_status ferry__metal_copy(ferry_device *dev, const ferry_mem *src, size_t so, ferry_mem *dst, size_t doff,
                               size_t bytes) {
  /* The core copies host-visible memory itself; these are for completeness. */
  if (src->host) return ferry__metal_write(dev, dst, doff, (const char *)src->host + so, bytes);
  if (dst->host) return ferry__metal_read(dev, src, so, (char *)dst->host + doff, bytes);
  if (so % 4 != doff % 4) return copy_via_host(dev, src, so, dst, doff, bytes);
  /* The whole words by one blit; the bytes before and after them through the host. */
  size_t head = min_size(bytes, (4 - doff % 4) % 4);
  size_t tail = (bytes - head) % 4;
  size_t middle = bytes - head - tail;
  ferry_status st = FERRY_OK;
  if (middle) {
    char what[256];
    snprintf(what, sizeof what, "a blit of %zu bytes from buffer offset %zu to buffer offset %zu", middle, so + head,
             doff + head);
    st = blit_run(dev, (blit_op[]){copy_op(buffer_of(src), so + head, buffer_of(dst), doff + head, middle)}, 1, what);
  }
  if (st == FERRY_OK && head) st = copy_bytes_via_host(dev, src, so, dst, doff, head);
  if (st == FERRY_OK && tail) st = copy_bytes_via_host(dev, src, so + bytes - tail, dst, doff + bytes - tail, tail);
  return st;
}

/* ---- pinned memory for the engine ------------------------------------------------------ */

ferry_status ferry__metal_pin_alloc(ferry_device *dev, size_t bytes, void **out_base, uintptr_t *out_token) {
  shared_buffer block = {0};
  ferry_status st = shared_make(dev, bytes, "pinned host memory", &block);
  if (st != FERRY_OK) return st;
  *out_base = block.contents;
  *out_token = (uintptr_t)block.buffer;
  return FERRY_OK;
}

/* newBufferWithBytesNoCopy takes whole pages of the machine's page size (16 KiB
 * on Apple silicon), the core's blocks are whole 4 KiB pages: those that are not
 * on this machine's pages are refused, and the engine stages through this
 * device's own ring instead. */
ferry_status ferry__metal_pin_register(ferry_device *dev, void *base, size_t bytes, uintptr_t *out_token) {
  metal_device *md = dev->impl;
  char size[64];
  if ((uintptr_t)base % md->page || bytes % md->page)
    return ferry__fail(FERRY_ERROR_UNSUPPORTED,
                       "host memory at %p (%s) is not on whole pages of %zu bytes, which "
                       "newBufferWithBytesNoCopy:length:options:deallocator: needs on %s",
                       base, ferry__bytes_text(bytes, size), md->page, dev->label);
  ferry_status st = FERRY_OK;
  void *pool = ferry__metal_rt.pool_push();
  mtl_id buffer = mtl_new_buffer_with_bytes_no_copy(md->device, base, bytes, MTL_RESOURCE_STORAGE_SHARED, NULL);
  if (!buffer)
    st = ferry__fail(FERRY_ERROR_BACKEND,
                     "newBufferWithBytesNoCopy:length:options:deallocator: over pinned host memory at %p (%s, shared "
                     "storage) on %s returned nil",
                     base, ferry__bytes_text(bytes, size), dev->label);
  else
    *out_token = (uintptr_t)buffer;
  ferry__metal_rt.pool_pop(pool);
  return st;
}

void ferry__metal_pin_release(ferry_device *dev, void *base, size_t bytes, uintptr_t token, bool allocated) {
  (void)dev;
  (void)base;
  (void)bytes;
  (void)allocated; /* either way the buffer goes; a registered block's memory stays its allocator's */
  if (!token) return;
  void *pool = ferry__metal_rt.pool_push();
  mtl_release((mtl_id)token);
  ferry__metal_rt.pool_pop(pool);
}

/* ---- work with tickets: the engine's DMA, copies and fills ------------------------------- */

ferry_status ferry__metal_push(ferry_device *dev, metal_lane *lane, const metal_blit *blits, int count,
                               mtl_id wait_event, uint64_t wait_value, const char *what, ferry_ticket *out) {
  metal_device *md = dev->impl;
  if (out) *out = 0;
  metal_ticket *t = calloc(1, sizeof *t);
  if (!t) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory to track a command buffer on %s", dev->label);
  snprintf(t->what, sizeof t->what, "%s", what);
  t->lane = lane;
  ferry_status st;
  if (!lane) {
    st = commit(dev, md->queue, blits, count, MTL_NIL, 0, wait_event, wait_value, MTL_NIL, 0, &t->command_buffer);
  } else {
    /* The value and the commit under one lock: the lane's command buffers
     * signal its event in the order committed. Each waits for the one before
     * it: Metal starts a queue's command buffers in commit order but lets
     * those that share no resource overlap and finish in any order, and a
     * ticket stands for everything before it on the lane. */
    pthread_mutex_lock(&lane->lock);
    t->value = lane->value + 1;
    st = commit(dev, lane->queue, blits, count, lane->value ? lane->event : MTL_NIL, lane->value, wait_event,
                wait_value, lane->event, t->value, &t->command_buffer);
    if (st == FERRY_OK) {
      lane->value = t->value;
      if (!out) { /* kept, so that a later ticket reports its failure */
        if (lane->unclaimed_tail)
          lane->unclaimed_tail->next = t;
        else
          lane->unclaimed = t;
        lane->unclaimed_tail = t;
      }
    }
    pthread_mutex_unlock(&lane->lock);
  }
  if (st != FERRY_OK) {
    free(t);
    return st;
  }
  if (out) {
    *out = (ferry_ticket)(uintptr_t)t;
  } else if (!lane) { /* nobody waits for it: wait here */
    st = ferry__metal_ticket_wait(dev, (ferry_ticket)(uintptr_t)t);
    ferry__metal_ticket_release(dev, (ferry_ticket)(uintptr_t)t);
  }
  return st;
}

/* A range the blit cannot move in place, complete on return. */
static ferry_status dma_through_temp(ferry_device *dev, ferry_dma_dir dir, ferry_mem *mem, size_t offset, void *host,
                                     size_t bytes) {
  return dir == FERRY_DMA_TO_DEVICE ? ferry__metal_write(dev, mem, offset, host, bytes)
                                    : ferry__metal_read(dev, mem, offset, host, bytes);
}

static ferry_status not_words(ferry_device *dev, const char *what, size_t a, size_t b, size_t bytes) {
  return ferry__fail(FERRY_ERROR_UNSUPPORTED,
                     "%s of %zu bytes at offsets %zu and %zu on a queue of %s: a queue's blits move whole 4-byte "
                     "words at offsets that are multiples of 4",
                     what, bytes, a, b, dev->label);
}

ferry_status ferry__metal_dma_start(ferry_device *dev, ferry_lane *lane, ferry_dma_dir dir, ferry_mem *mem,
                                    size_t mem_offset, const ferry_pinned *host, size_t bytes, ferry_ticket *out) {
  if (out) *out = 0;
  mtl_id pinned = (mtl_id)host->token;
  char *p = host->host;
  char what[200];
  if (dir == FERRY_DMA_TO_DEVICE)
    snprintf(what, sizeof what, "a blit of %zu bytes from pinned host memory to device buffer offset %zu", bytes,
             mem_offset);
  else
    snprintf(what, sizeof what, "a blit of %zu bytes from device buffer offset %zu to pinned host memory", bytes,
             mem_offset);
  if (lane) {
    if (mem->host || !pinned || !words(mem_offset, bytes) || host->offset % 4)
      return not_words(dev, "a DMA", host->offset, mem_offset, bytes);
    blit_op op = dir == FERRY_DMA_TO_DEVICE ? copy_op(pinned, host->offset, buffer_of(mem), mem_offset, bytes)
                                            : copy_op(buffer_of(mem), mem_offset, pinned, host->offset, bytes);
    return ferry__metal_push(dev, (metal_lane *)lane, &op, 1, MTL_NIL, 0, what, out);
  }
  /* Token 0 (memory the driver pinned itself) does not happen: this backend
   * offers no host_pinned. Offsets that differ modulo 4 cannot be blitted. */
  if (mem->host || !pinned || host->offset % 4 != mem_offset % 4)
    return dma_through_temp(dev, dir, mem, mem_offset, p, bytes);
  size_t head = min_size(bytes, (4 - mem_offset % 4) % 4);
  size_t tail = (bytes - head) % 4;
  size_t middle = bytes - head - tail;
  ferry_status st = FERRY_OK;
  if (head) st = dma_through_temp(dev, dir, mem, mem_offset, p, head);
  if (st == FERRY_OK && tail) st = dma_through_temp(dev, dir, mem, mem_offset + bytes - tail, p + bytes - tail, tail);
  if (st != FERRY_OK || middle == 0) return st;
  size_t at = host->offset + head;
  blit_op op = dir == FERRY_DMA_TO_DEVICE ? copy_op(pinned, at, buffer_of(mem), mem_offset + head, middle)
                                          : copy_op(buffer_of(mem), mem_offset + head, pinned, at, middle);
  return ferry__metal_push(dev, NULL, &op, 1, MTL_NIL, 0, what, out);
}

ferry_status ferry__metal_copy_start(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t so,
                                     ferry_mem *dst, size_t doff, size_t bytes, ferry_ticket *out) {
  if (out) *out = 0;
  if (!lane) return ferry__metal_copy(dev, src, so, dst, doff, bytes);
  if (src->host || dst->host || !words(so, bytes) || doff % 4) return not_words(dev, "a copy", so, doff, bytes);
  char what[200];
  snprintf(what, sizeof what, "a blit of %zu bytes from buffer offset %zu to buffer offset %zu", bytes, so, doff);
  blit_op op = copy_op(buffer_of(src), so, buffer_of(dst), doff, bytes);
  return ferry__metal_push(dev, (metal_lane *)lane, &op, 1, MTL_NIL, 0, what, out);
}

/* ---- fill ----------------------------------------------------------------------------- */

/* fillBuffer:range:value: writes one byte value, on whole words (macOS): a
 * pattern of 2 or 4 different bytes goes back to the core, which writes it;
 * without a lane, the bytes before and after the words go through the host. */
ferry_status ferry__metal_fill_start(ferry_device *dev, ferry_lane *lane, ferry_mem *mem, size_t offset, size_t bytes,
                                     uint32_t pattern, unsigned pattern_size, ferry_ticket *out) {
  if (out) *out = 0;
  unsigned char p[4];
  memcpy(p, &pattern, pattern_size);
  for (unsigned i = 1; i < pattern_size; i++)
    if (p[i] != p[0]) return FERRY_ERROR_UNSUPPORTED;
  if (mem->host) return FERRY_ERROR_UNSUPPORTED; /* not on a discrete GPU: the core fills it in place */
  if (lane && !words(offset, bytes)) return not_words(dev, "a fill", offset, offset, bytes);
  unsigned char edge[3] = {p[0], p[0], p[0]};
  size_t head = min_size(bytes, (4 - offset % 4) % 4);
  size_t tail = (bytes - head) % 4;
  size_t middle = bytes - head - tail;
  ferry_status st = FERRY_OK;
  if (head) st = ferry__metal_write(dev, mem, offset, edge, head);
  if (st == FERRY_OK && tail) st = ferry__metal_write(dev, mem, offset + bytes - tail, edge, tail);
  if (st != FERRY_OK || middle == 0) return st;
  char what[200];
  snprintf(what, sizeof what, "a fill of %zu bytes of 0x%02x at device buffer offset %zu", middle, p[0], offset + head);
  blit_op op = {.dst = buffer_of(mem), .dst_offset = offset + head, .bytes = middle, .fill = true, .value = p[0]};
  return ferry__metal_push(dev, (metal_lane *)lane, &op, 1, MTL_NIL, 0, what, out);
}
