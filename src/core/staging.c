/*
 * Pipelined transfers through pinned staging slots.
 *
 * A GPU moves data at full speed only from pinned (page-locked) host memory;
 * from ordinary memory the driver stages it itself, at a fraction of the speed
 * (8.8 GB/s instead of 55 GB/s on the H200). So for large transfers from or to
 * ordinary memory the core copies through FERRY_STAGE_SLOTS pinned slots of its
 * own: the host copy into slot k (on several threads) runs while the device
 * moves slot k-1, and the other way round for reads.
 *
 * The slots of a device are made on first use with the backend's host_alloc,
 * registered as pinned (so that other devices of the backend take them as
 * such), and kept until shutdown. One pipelined transfer per device runs at a
 * time; the others wait for the slots.
 *
 * Tunables: FERRY_STAGE_BYTES (slot size, default 16M), FERRY_STAGE_MIN (smallest
 * transfer that is pipelined; default 8M for writes, 1M for reads; 0 turns
 * pipelining off), and
 * FERRY_COPY_THREADS (threads for the host copies, see host.c).
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SLOT_BYTES ((size_t)16 << 20) /* the H200 sweep: 53 GB/s at 16 MiB, 47-52 at 8 MiB */
/* Where the pipeline starts paying, measured on the H200 (bench_cuda, final run):
 * reads gain from 1 MiB (1.22x of the driver's pageable copy); writes lose there
 * (0.79x) and only break even at 4 MiB (0.98x), but gain 1.8x at 16 MiB. */
#define DEFAULT_MIN_WRITE ((size_t)8 << 20)
#define DEFAULT_MIN_READ  ((size_t)1 << 20)

static bool has_pipeline(const ferry_device *dev) {
  return dev->ops->write_async && dev->ops->read_async && dev->ops->wait_slot && dev->ops->host_alloc;
}

/* Takes the device's slots, making them on first use. false: no pipeline now. */
static bool stage_take(ferry_device *dev) {
  struct ferry_stage *s = &dev->state->stage;
  pthread_mutex_lock(&s->lock);
  if (s->slot[0]) return true;
  if (s->failed) {
    pthread_mutex_unlock(&s->lock);
    return false;
  }
  for (unsigned i = 0; i < FERRY_STAGE_SLOTS; i++) {
    if (ferry__host_alloc_internal(dev, s->slot_bytes, &s->slot[i]) != FERRY_OK) {
      /* No pinned memory to spare: transfers take the direct path from now on. */
      while (i-- > 0) {
        ferry__host_free_internal(s->slot[i]);
        s->slot[i] = NULL;
      }
      s->failed = true;
      pthread_mutex_unlock(&s->lock);
      return false;
    }
  }
  return true;
}

static void stage_give(ferry_device *dev) { pthread_mutex_unlock(&dev->state->stage.lock); }

void ferry__stage_init(ferry_device *dev) {
  struct ferry_stage *s = &dev->state->stage;
  pthread_mutex_init(&s->lock, NULL);
  uint64_t v;
  s->slot_bytes = ferry__option_number("FERRY_STAGE_BYTES", &v) ? (size_t)v : DEFAULT_SLOT_BYTES;
  bool set = ferry__option_number("FERRY_STAGE_MIN", &v);
  s->min_write = set ? (size_t)v : DEFAULT_MIN_WRITE;
  s->min_read = set ? (size_t)v : DEFAULT_MIN_READ;
}

void ferry__stage_release(ferry_device *dev) {
  struct ferry_stage *s = &dev->state->stage;
  for (unsigned i = 0; i < FERRY_STAGE_SLOTS; i++) {
    if (s->slot[i]) ferry__host_free_internal(s->slot[i]);
    s->slot[i] = NULL;
  }
}

bool ferry__stage_wanted(const ferry_device *dev, const ferry_mem *mem, const void *host, size_t bytes,
                         bool to_device) {
  const struct ferry_stage *s = &dev->state->stage;
  size_t min = to_device ? s->min_write : s->min_read;
  if (!has_pipeline(dev) || min == 0 || bytes < min) return false;
  if (mem->host || (mem->flags & (FERRY_MEM_HOST_PTR | FERRY_MEM_ZERO_COPY))) return false;
  if (ferry__host_is_pinned(dev->backend, host, bytes)) return false;
  if (dev->ops->host_is_pinned && dev->ops->host_is_pinned((ferry_device *)dev, host, bytes)) return false;
  return true;
}

/* The piece of a transfer each slot carries: the whole slot for large
 * transfers; for mid-sized ones about half the transfer, so that even two
 * pieces overlap, but not below the size from which host copies run on
 * several threads (4 MiB). */
static size_t piece_bytes(const struct ferry_stage *s, size_t bytes) {
  size_t half = ((bytes / 2) + 4095) & ~(size_t)4095;
  size_t floor = (size_t)4 << 20;
  size_t piece = half > floor ? half : floor;
  return piece < s->slot_bytes ? piece : s->slot_bytes;
}

/* Waits for every slot; keeps the first failure. */
static ferry_status drain(ferry_device *dev, unsigned used, ferry_status st) {
  for (unsigned k = 0; k < used && k < FERRY_STAGE_SLOTS; k++) {
    ferry_status w = dev->ops->wait_slot(dev, k);
    if (st == FERRY_OK) st = w;
  }
  return st;
}

ferry_status ferry__stage_write(ferry_device *dev, ferry_mem *dst, size_t offset, const void *src, size_t bytes) {
  if (!stage_take(dev)) return dev->ops->write(dev, dst, offset, src, bytes);
  struct ferry_stage *s = &dev->state->stage;
  size_t piece = piece_bytes(s, bytes);
  ferry_status st = FERRY_OK;
  unsigned i = 0;
  for (size_t done = 0; done < bytes && st == FERRY_OK; done += piece, i++) {
    unsigned k = i % FERRY_STAGE_SLOTS;
    size_t n = bytes - done < piece ? bytes - done : piece;
    if (i >= FERRY_STAGE_SLOTS && (st = dev->ops->wait_slot(dev, k)) != FERRY_OK) break;
    ferry__parallel_memcpy(s->slot[k], (const char *)src + done, n);
    st = dev->ops->write_async(dev, dst, offset + done, s->slot[k], n, k);
  }
  st = drain(dev, i, st);
  stage_give(dev);
  return st;
}

/* Reads `bytes` from the device through the slots, handing each chunk to `sink`
 * (a host copy, or another device's write). */
typedef ferry_status (*chunk_sink)(void *ctx, size_t done, const void *chunk, size_t n);

static ferry_status stage_read_into(ferry_device *dev, const ferry_mem *src, size_t offset, size_t bytes,
                                    chunk_sink sink, void *ctx) {
  size_t piece = piece_bytes(&dev->state->stage, bytes);
  void *const *slot = dev->state->stage.slot;
  size_t chunks = (bytes + piece - 1) / piece;
  ferry_status st = FERRY_OK;
  unsigned started = 0;
  /* Fill the pipeline, then: wait for the oldest slot, drain it, refill it. */
  for (; started < FERRY_STAGE_SLOTS && started < chunks && st == FERRY_OK; started++) {
    size_t done = (size_t)started * piece;
    size_t n = bytes - done < piece ? bytes - done : piece;
    st = dev->ops->read_async(dev, src, offset + done, slot[started], n, started);
  }
  for (size_t i = 0; i < chunks && st == FERRY_OK; i++) {
    unsigned k = (unsigned)(i % FERRY_STAGE_SLOTS);
    size_t done = i * piece;
    size_t n = bytes - done < piece ? bytes - done : piece;
    if ((st = dev->ops->wait_slot(dev, k)) != FERRY_OK) break;
    if ((st = sink(ctx, done, slot[k], n)) != FERRY_OK) break;
    size_t next = i + FERRY_STAGE_SLOTS;
    if (next < chunks) {
      size_t ndone = next * piece;
      size_t nn = bytes - ndone < piece ? bytes - ndone : piece;
      st = dev->ops->read_async(dev, src, offset + ndone, slot[k], nn, k);
    }
  }
  return drain(dev, started, st);
}

static ferry_status copy_to_host(void *ctx, size_t done, const void *chunk, size_t n) {
  ferry__parallel_memcpy((char *)ctx + done, chunk, n);
  return FERRY_OK;
}

ferry_status ferry__stage_read(ferry_device *dev, const ferry_mem *src, size_t offset, void *dst, size_t bytes) {
  if (!stage_take(dev)) return dev->ops->read(dev, src, offset, dst, bytes);
  ferry_status st = stage_read_into(dev, src, offset, bytes, copy_to_host, dst);
  stage_give(dev);
  return st;
}

typedef struct device_sink {
  ferry_device *dev;
  ferry_mem *mem;
  size_t offset;
} device_sink;

static ferry_status write_to_device(void *ctx, size_t done, const void *chunk, size_t n) {
  device_sink *d = ctx;
  return d->dev->ops->write(d->dev, d->mem, d->offset + done, chunk, n);
}

bool ferry__stage_copy(ferry_device *sdev, const ferry_mem *src, size_t so, ferry_device *ddev, ferry_mem *dst,
                       size_t doff, size_t bytes, ferry_status *out_status) {
  size_t min = sdev->state->stage.min_read;
  if (!has_pipeline(sdev) || min == 0 || bytes < min || !stage_take(sdev)) return false;
  device_sink sink = {ddev, dst, doff};
  *out_status = stage_read_into(sdev, src, so, bytes, write_to_device, &sink);
  stage_give(sdev);
  return true;
}
