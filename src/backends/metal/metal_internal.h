/* What metal.c (devices, memory, errors) and metal_transfer.c (moving bytes)
 * share. */
#ifndef FERRY_METAL_INTERNAL_H
#define FERRY_METAL_INTERNAL_H

#include "metal_objc.h"

#include <pthread.h>
#include <stdatomic.h>

#define METAL_BOUNCE_COUNT 4
#define METAL_RMW_STRIPES  16

/* Pinned host memory for one device: page-aligned host memory wrapped as a
 * shared-storage MTLBuffer (newBufferWithBytesNoCopy:..., nil deallocator), so
 * that a blit can read or write it. */
typedef struct metal_block {
  struct metal_block *next;
  void *host;
  size_t bytes; /* a multiple of the page size */
  mtl_id buffer;
} metal_block;

/* A block that synchronous transfers borrow on discrete GPUs. */
typedef struct metal_bounce {
  pthread_mutex_t lock;
  metal_block block; /* block.buffer is nil until first use */
} metal_bounce;

typedef struct metal_device {
  mtl_id device; /* retained */
  mtl_id queue;  /* from newCommandQueue */
  bool unified;  /* hasUnifiedMemory: shared-storage buffers the core reads and writes directly */
  size_t page;   /* host-pointer and pinned blocks are aligned to it */
  char name[256];

  /* metal_transfer.c's state (discrete GPUs). */
  pthread_mutex_t blocks_lock;
  metal_block *blocks; /* from ferry_host_alloc (and the core's staging slots) */
  metal_bounce bounce[METAL_BOUNCE_COUNT];
  _Atomic unsigned next_bounce;
  /* Writes that do not start or end on a 4-byte boundary rewrite whole words
   * (blits move words on macOS); writers of one word take the same lock. */
  pthread_mutex_t rmw[METAL_RMW_STRIPES];
  mtl_id slot_wait[FERRY_STAGE_SLOTS]; /* the command buffer last started on each staging slot */
} metal_device;

/* ---- metal.c ------------------------------------------------------------------- */

/* The page size blocks and host-pointer buffers are aligned to (sysconf). */
size_t ferry__metal_page_size(void);

/* After waitUntilCompleted: FERRY_OK when the command buffer completed, else
 * FERRY_ERROR_BACKEND with the NSError's description, domain and code. `what`
 * says what the command buffer did. Runs inside the caller's autorelease pool. */
ferry_status ferry__metal_completed(const ferry_device *dev, mtl_id command_buffer, const char *what);

/* ---- metal_transfer.c ------------------------------------------------------------ */

void ferry__metal_transfer_init(metal_device *md);
/* Releases the bounce blocks and any command buffer still held (before the device goes). */
void ferry__metal_transfer_destroy(metal_device *md);

ferry_status ferry__metal_write(ferry_device *dev, ferry_mem *dst, size_t offset, const void *src, size_t bytes);
ferry_status ferry__metal_read(ferry_device *dev, const ferry_mem *src, size_t offset, void *dst, size_t bytes);
ferry_status ferry__metal_copy(ferry_device *dev, const ferry_mem *src, size_t src_offset, ferry_mem *dst,
                               size_t dst_offset, size_t bytes);
ferry_status ferry__metal_host_alloc(ferry_device *dev, size_t bytes, void **out);
void ferry__metal_host_free(ferry_device *dev, void *ptr, size_t bytes);
ferry_status ferry__metal_write_async(ferry_device *dev, ferry_mem *dst, size_t offset, const void *pinned_src,
                                      size_t bytes, unsigned slot);
ferry_status ferry__metal_read_async(ferry_device *dev, const ferry_mem *src, size_t offset, void *pinned_dst,
                                     size_t bytes, unsigned slot);
ferry_status ferry__metal_wait_slot(ferry_device *dev, unsigned slot);

#endif /* FERRY_METAL_INTERNAL_H */
