/*
 * Moving bytes on a Metal device: every host<->device transfer, and copies within
 * the device.
 *
 * On unified memory (ferry_mem.host set: shared storage) a transfer is a host
 * copy into or out of the buffer's `contents`. On discrete GPUs device memory is
 * private, and all traffic is one primitive: a blit between a pinned host block
 * (page-aligned host memory wrapped by newBufferWithBytesNoCopy, so the GPU can
 * read and write it) and device memory, started by blit_start (which returns the
 * command buffer) and finished by blit_wait. Around it:
 *  - pinned blocks: ferry_host_alloc's blocks (the core's staging slots among
 *    them) and, per device, a few bounce blocks that synchronous transfers from
 *    ordinary memory borrow;
 *  - Apple's blit rule on macOS: offsets and sizes multiples of 4. A transfer
 *    that starts or ends inside a 4-byte word rewrites that whole word: the
 *    device's bytes of it are read first (read-modify-write, under a lock that
 *    every writer of a partial word of the buffer takes), so the bytes outside
 *    the range stay what they were;
 *  - the core's pipeline (write_async / read_async / wait_slot) starts blits on
 *    its pinned slots and waits for them.
 */
#include "metal_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BOUNCE_BYTES ((size_t)4 << 20)

static size_t floor4(size_t x) { return x & ~(size_t)3; }
/* Only for x up to an allocation's length, which is a multiple of 4: no overflow. */
static size_t ceil4(size_t x) { return (x + 3) & ~(size_t)3; }
static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }
static bool words(size_t offset, size_t bytes) { return offset % 4 == 0 && bytes % 4 == 0; }

static mtl_id buffer_of(const ferry_mem *mem) { return (mtl_id)mem->handle; }

/* ---- the primitive: blits between buffers of one device ------------------------------ */

typedef struct blit_op {
  mtl_id src;
  size_t src_offset;
  mtl_id dst;
  size_t dst_offset;
  size_t bytes; /* > 0; offsets and bytes multiples of 4 */
} blit_op;

/* Encodes the copies in one command buffer and commits it; *out_wait is the
 * command buffer (retained) for blit_wait. */
static ferry_status blit_start(ferry_device *dev, const blit_op *ops, int count, mtl_id *out_wait) {
  metal_device *md = dev->impl;
  ferry_status st = FERRY_OK;
  void *pool = ferry__metal_rt.pool_push();
  mtl_id cb = mtl_command_buffer(md->queue);
  mtl_id encoder = cb ? mtl_blit_command_encoder(cb) : MTL_NIL;
  if (!cb) {
    st = ferry__fail(FERRY_ERROR_BACKEND, "commandBuffer on %s's queue returned nil", dev->label);
  } else if (!encoder) {
    st = ferry__fail(FERRY_ERROR_BACKEND, "blitCommandEncoder on %s returned nil", dev->label);
  } else {
    for (int i = 0; i < count; i++)
      mtl_copy_from_buffer(encoder, ops[i].src, ops[i].src_offset, ops[i].dst, ops[i].dst_offset, ops[i].bytes);
    mtl_end_encoding(encoder);
    mtl_commit(cb);
    *out_wait = mtl_retain(cb); /* past this pool, until blit_wait */
  }
  ferry__metal_rt.pool_pop(pool);
  return st;
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

/* ---- pinned blocks ------------------------------------------------------------------- */

static uint64_t host_ram(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
}

static ferry_status block_make(ferry_device *dev, size_t bytes, metal_block *out) {
  metal_device *md = dev->impl;
  char size[64], ram[64];
  size_t rounded = (bytes + md->page - 1) & ~(md->page - 1);
  uint64_t limit = host_ram();
  if (rounded < bytes || rounded > limit)
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "cannot pin %s of host memory for %s: the host has %s of RAM",
                       ferry__bytes_text(bytes, size), dev->label, ferry__bytes_text(limit, ram));
  void *host = NULL;
  if (posix_memalign(&host, md->page, rounded) != 0)
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for a pinned block of %s for %s",
                       ferry__bytes_text(rounded, size), dev->label);
  void *pool = ferry__metal_rt.pool_push();
  mtl_id buffer = mtl_new_buffer_with_bytes_no_copy(md->device, host, rounded, MTL_RESOURCE_STORAGE_SHARED, NULL);
  ferry__metal_rt.pool_pop(pool);
  if (!buffer) {
    free(host);
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY,
                       "newBufferWithBytesNoCopy:length:options:deallocator: over a pinned block of %s (page size "
                       "%zu) on %s returned nil",
                       ferry__bytes_text(rounded, size), md->page, dev->label);
  }
  *out = (metal_block){.next = NULL, .host = host, .bytes = rounded, .buffer = buffer};
  return FERRY_OK;
}

static void block_unmake(metal_block *b) {
  void *pool = ferry__metal_rt.pool_push();
  mtl_release(b->buffer); /* before the memory it wraps goes */
  ferry__metal_rt.pool_pop(pool);
  free(b->host);
  b->buffer = MTL_NIL;
  b->host = NULL;
}

ferry_status ferry__metal_host_alloc(ferry_device *dev, size_t bytes, void **out) {
  metal_device *md = dev->impl;
  if (md->unified) {
    /* Transfers are host copies: any memory is as fast. Whole pages, so that a
     * block can also be the array of a host-pointer buffer. */
    char size[64];
    size_t rounded = (bytes + md->page - 1) & ~(md->page - 1);
    if (rounded < bytes || rounded > host_ram() || posix_memalign(out, md->page, rounded) != 0)
      return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for %s on %s", ferry__bytes_text(bytes, size),
                         dev->label);
    return FERRY_OK;
  }
  metal_block *b = malloc(sizeof *b);
  if (!b) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory to track a pinned block on %s", dev->label);
  ferry_status st = block_make(dev, bytes, b);
  if (st != FERRY_OK) {
    free(b);
    return st;
  }
  pthread_mutex_lock(&md->blocks_lock);
  b->next = md->blocks;
  md->blocks = b;
  pthread_mutex_unlock(&md->blocks_lock);
  *out = b->host;
  return FERRY_OK;
}

void ferry__metal_host_free(ferry_device *dev, void *ptr, size_t bytes) {
  (void)bytes;
  metal_device *md = dev->impl;
  metal_block *found = NULL;
  pthread_mutex_lock(&md->blocks_lock);
  for (metal_block **link = &md->blocks; *link; link = &(*link)->next) {
    if ((*link)->host == ptr) {
      found = *link;
      *link = found->next;
      break;
    }
  }
  pthread_mutex_unlock(&md->blocks_lock);
  if (found) {
    block_unmake(found);
    free(found);
  } else if (md->unified) {
    free(ptr);
  }
}

/* The pinned block of this device that holds [p, p + bytes): its buffer and the
 * offset of p in it. */
static bool block_find(metal_device *md, const void *p, size_t bytes, mtl_id *buffer, size_t *offset) {
  bool found = false;
  uintptr_t at = (uintptr_t)p;
  pthread_mutex_lock(&md->blocks_lock);
  for (metal_block *b = md->blocks; b && !found; b = b->next) {
    uintptr_t start = (uintptr_t)b->host;
    if (at >= start && at - start <= b->bytes && bytes <= b->bytes - (at - start)) {
      *buffer = b->buffer;
      *offset = at - start;
      found = true;
    }
  }
  pthread_mutex_unlock(&md->blocks_lock);
  return found;
}

/* ---- bounce blocks ---------------------------------------------------------------------- */

void ferry__metal_transfer_init(metal_device *md) {
  pthread_mutex_init(&md->blocks_lock, NULL);
  for (int i = 0; i < METAL_BOUNCE_COUNT; i++)
    pthread_mutex_init(&md->bounce[i].lock, NULL);
  for (int i = 0; i < METAL_RMW_STRIPES; i++)
    pthread_mutex_init(&md->rmw[i], NULL);
}

/* A bounce block of the device, locked, made on first use. */
static ferry_status bounce_take(ferry_device *dev, metal_bounce **out) {
  metal_device *md = dev->impl;
  unsigned first = atomic_fetch_add(&md->next_bounce, 1) % METAL_BOUNCE_COUNT;
  metal_bounce *b = NULL;
  for (unsigned k = 0; k < METAL_BOUNCE_COUNT && !b; k++)
    if (pthread_mutex_trylock(&md->bounce[(first + k) % METAL_BOUNCE_COUNT].lock) == 0)
      b = &md->bounce[(first + k) % METAL_BOUNCE_COUNT];
  if (!b) { /* all busy: wait for one */
    b = &md->bounce[first];
    pthread_mutex_lock(&b->lock);
  }
  if (!b->block.buffer) {
    ferry_status st = block_make(dev, BOUNCE_BYTES, &b->block);
    if (st != FERRY_OK) {
      pthread_mutex_unlock(&b->lock);
      return st;
    }
  }
  *out = b;
  return FERRY_OK;
}

static void bounce_give(metal_bounce *b) { pthread_mutex_unlock(&b->lock); }

static pthread_mutex_t *rmw_lock(metal_device *md, const ferry_mem *mem) {
  return &md->rmw[(mem->handle >> 4) % METAL_RMW_STRIPES];
}

/* ---- host to device ----------------------------------------------------------------------- */

/* Through a bounce block, window by window. Window = the whole words the range
 * touches, at most a block; a word the range covers only in part (the first
 * and the last at most) is read from the device first and written back whole. */
static ferry_status write_through_bounce(ferry_device *dev, ferry_mem *dst, size_t offset, const void *src,
                                         size_t bytes) {
  metal_device *md = dev->impl;
  metal_bounce *b;
  ferry_status st = bounce_take(dev, &b);
  if (st != FERRY_OK) return st;
  pthread_mutex_t *lock = words(offset, bytes) ? NULL : rmw_lock(md, dst);
  if (lock) pthread_mutex_lock(lock);
  mtl_id device_buffer = buffer_of(dst), stage = b->block.buffer;
  char what[256];
  size_t pos = offset, end = offset + bytes;
  while (pos < end && st == FERRY_OK) {
    size_t wstart = floor4(pos), wend = min_size(ceil4(end), wstart + b->block.bytes), stop = min_size(end, wend);
    blit_op keep[2];
    int kept = 0;
    if (pos > wstart) keep[kept++] = (blit_op){device_buffer, wstart, stage, 0, 4};
    if (stop < wend && !(kept && wend - 4 == wstart))
      keep[kept++] = (blit_op){device_buffer, wend - 4, stage, wend - 4 - wstart, 4};
    if (kept) {
      snprintf(what, sizeof what, "a blit of the partly written words of bytes %zu..%zu to a bounce block", wstart,
               wend);
      st = blit_run(dev, keep, kept, what);
    }
    if (st != FERRY_OK) break;
    memcpy((char *)b->block.host + (pos - wstart), (const char *)src + (pos - offset), stop - pos);
    snprintf(what, sizeof what, "a blit of %zu bytes from a bounce block to device buffer bytes %zu..%zu",
             wend - wstart, wstart, wend);
    st = blit_run(dev, &(blit_op){stage, 0, device_buffer, wstart, wend - wstart}, 1, what);
    pos = stop;
  }
  if (lock) pthread_mutex_unlock(lock);
  bounce_give(b);
  return st;
}

ferry_status ferry__metal_write(ferry_device *dev, ferry_mem *dst, size_t offset, const void *src, size_t bytes) {
  if (dst->host) { /* shared storage: plain memory */
    ferry__host_move((char *)dst->host + offset, src, bytes);
    return FERRY_OK;
  }
  mtl_id block;
  size_t at;
  if (words(offset, bytes) && block_find(dev->impl, src, bytes, &block, &at) && at % 4 == 0) {
    char what[256];
    snprintf(what, sizeof what, "a blit of %zu bytes from a pinned block to device buffer offset %zu", bytes, offset);
    return blit_run(dev, &(blit_op){block, at, buffer_of(dst), offset, bytes}, 1, what);
  }
  return write_through_bounce(dev, dst, offset, src, bytes);
}

/* ---- device to host ----------------------------------------------------------------------- */

static ferry_status read_through_bounce(ferry_device *dev, const ferry_mem *src, size_t offset, void *dst,
                                        size_t bytes) {
  metal_bounce *b;
  ferry_status st = bounce_take(dev, &b);
  if (st != FERRY_OK) return st;
  char what[256];
  size_t pos = offset, end = offset + bytes;
  while (pos < end && st == FERRY_OK) {
    size_t wstart = floor4(pos), wend = min_size(ceil4(end), wstart + b->block.bytes), stop = min_size(end, wend);
    snprintf(what, sizeof what, "a blit of device buffer bytes %zu..%zu to a bounce block", wstart, wend);
    st = blit_run(dev, &(blit_op){buffer_of(src), wstart, b->block.buffer, 0, wend - wstart}, 1, what);
    if (st == FERRY_OK) memcpy((char *)dst + (pos - offset), (const char *)b->block.host + (pos - wstart), stop - pos);
    pos = stop;
  }
  bounce_give(b);
  return st;
}

ferry_status ferry__metal_read(ferry_device *dev, const ferry_mem *src, size_t offset, void *dst, size_t bytes) {
  if (src->host) {
    ferry__host_move(dst, (const char *)src->host + offset, bytes);
    return FERRY_OK;
  }
  mtl_id block;
  size_t at;
  if (words(offset, bytes) && block_find(dev->impl, dst, bytes, &block, &at) && at % 4 == 0) {
    char what[256];
    snprintf(what, sizeof what, "a blit of %zu bytes from device buffer offset %zu to a pinned block", bytes, offset);
    return blit_run(dev, &(blit_op){buffer_of(src), offset, block, at, bytes}, 1, what);
  }
  return read_through_bounce(dev, src, offset, dst, bytes);
}

/* ---- within the device ------------------------------------------------------------------- */

/* A few bytes (less than a word) through the host. */
static ferry_status copy_bytes_via_host(ferry_device *dev, const ferry_mem *src, size_t so, ferry_mem *dst, size_t doff,
                                        size_t bytes) {
  unsigned char tmp[4];
  ferry_status st = ferry__metal_read(dev, src, so, tmp, bytes);
  return st == FERRY_OK ? ferry__metal_write(dev, dst, doff, tmp, bytes) : st;
}

/* Offsets that differ modulo 4 cannot be blitted on macOS: through host memory. */
static ferry_status copy_via_host(ferry_device *dev, const ferry_mem *src, size_t so, ferry_mem *dst, size_t doff,
                                  size_t bytes) {
  if (src->host) return ferry__metal_write(dev, dst, doff, (const char *)src->host + so, bytes);
  if (dst->host) return ferry__metal_read(dev, src, so, (char *)dst->host + doff, bytes);
  size_t chunk = min_size(bytes, BOUNCE_BYTES);
  void *tmp = malloc(chunk);
  if (!tmp) {
    char size[64];
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for a %s staging buffer",
                       ferry__bytes_text(chunk, size));
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

ferry_status ferry__metal_copy(ferry_device *dev, const ferry_mem *src, size_t so, ferry_mem *dst, size_t doff,
                               size_t bytes) {
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
    st = blit_run(dev, &(blit_op){buffer_of(src), so + head, buffer_of(dst), doff + head, middle}, 1, what);
  }
  if (st == FERRY_OK && head) st = copy_bytes_via_host(dev, src, so, dst, doff, head);
  if (st == FERRY_OK && tail) st = copy_bytes_via_host(dev, src, so + bytes - tail, dst, doff + bytes - tail, tail);
  return st;
}

/* ---- the core's pipeline --------------------------------------------------------------------- */

static ferry_status bad_slot(const ferry_device *dev, unsigned slot) {
  return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "staging slot %u on %s: there are %d", slot, dev->label,
                     FERRY_STAGE_SLOTS);
}

ferry_status ferry__metal_wait_slot(ferry_device *dev, unsigned slot) {
  if (slot >= FERRY_STAGE_SLOTS) return bad_slot(dev, slot);
  metal_device *md = dev->impl;
  mtl_id cb = md->slot_wait[slot];
  if (!cb) return FERRY_OK;
  md->slot_wait[slot] = MTL_NIL;
  char what[64];
  snprintf(what, sizeof what, "the blit on staging slot %u", slot);
  return blit_wait(dev, cb, what);
}

/* A blit between a slot and device memory where the rules allow one, else the
 * synchronous path (a range that does not start and end on words). */
static ferry_status slot_start(ferry_device *dev, ferry_mem *mem, size_t offset, void *pinned, size_t bytes,
                               unsigned slot, bool to_device) {
  if (slot >= FERRY_STAGE_SLOTS) return bad_slot(dev, slot);
  ferry_status st = ferry__metal_wait_slot(dev, slot);
  if (st != FERRY_OK) return st;
  metal_device *md = dev->impl;
  mtl_id block;
  size_t at;
  if (mem->host || !words(offset, bytes) || !block_find(md, pinned, bytes, &block, &at) || at % 4)
    return to_device ? ferry__metal_write(dev, mem, offset, pinned, bytes)
                     : ferry__metal_read(dev, mem, offset, pinned, bytes);
  blit_op op = to_device ? (blit_op){block, at, buffer_of(mem), offset, bytes}
                         : (blit_op){buffer_of(mem), offset, block, at, bytes};
  return blit_start(dev, &op, 1, &md->slot_wait[slot]);
}

ferry_status ferry__metal_write_async(ferry_device *dev, ferry_mem *dst, size_t offset, const void *pinned_src,
                                      size_t bytes, unsigned slot) {
  return slot_start(dev, dst, offset, (void *)pinned_src, bytes, slot, true);
}

ferry_status ferry__metal_read_async(ferry_device *dev, const ferry_mem *src, size_t offset, void *pinned_dst,
                                     size_t bytes, unsigned slot) {
  return slot_start(dev, (ferry_mem *)src, offset, pinned_dst, bytes, slot, false);
}

void ferry__metal_transfer_destroy(metal_device *md) {
  for (int i = 0; i < FERRY_STAGE_SLOTS; i++) {
    if (md->slot_wait[i]) { /* the core waits for every slot; this is only in case */
      mtl_wait_until_completed(md->slot_wait[i]);
      mtl_release(md->slot_wait[i]);
      md->slot_wait[i] = MTL_NIL;
    }
  }
  for (int i = 0; i < METAL_BOUNCE_COUNT; i++) {
    if (md->bounce[i].block.buffer) block_unmake(&md->bounce[i].block);
    pthread_mutex_destroy(&md->bounce[i].lock);
  }
  while (md->blocks) { /* ferry_shutdown frees every block first; this is only in case */
    metal_block *b = md->blocks;
    md->blocks = b->next;
    block_unmake(b);
    free(b);
  }
  pthread_mutex_destroy(&md->blocks_lock);
  for (int i = 0; i < METAL_RMW_STRIPES; i++)
    pthread_mutex_destroy(&md->rmw[i]);
}
