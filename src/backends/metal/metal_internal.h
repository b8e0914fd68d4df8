/* What metal.c (devices, memory, errors) and metal_transfer.c (blits, pinned
 * memory and DMA for the core's transfer engine) share. */
#ifndef FERRY_METAL_INTERNAL_H
#define FERRY_METAL_INTERNAL_H

#include "metal_objc.h"

#include <pthread.h>

#define METAL_RMW_STRIPES 16

typedef struct metal_device {
  mtl_id device; /* retained */
  mtl_id queue;  /* from newCommandQueue */
  bool unified;  /* hasUnifiedMemory: shared-storage buffers the core reads and writes directly */
  size_t page;   /* host-pointer buffers and registered pinned blocks are aligned to it */
  char name[256];
  /* Writes that do not start or end on a 4-byte boundary rewrite whole words
   * (blits move words on macOS); writers of one word take the same lock. */
  pthread_mutex_t rmw[METAL_RMW_STRIPES];
} metal_device;

/* ---- metal.c ------------------------------------------------------------------- */

/* The page size host-pointer buffers and registered blocks are aligned to (sysconf). */
size_t ferry__metal_page_size(void);

/* After waitUntilCompleted: FERRY_OK when the command buffer completed, else
 * FERRY_ERROR_BACKEND with the NSError's description, domain and code. `what`
 * says what the command buffer did. Runs inside the caller's autorelease pool. */
ferry_status ferry__metal_completed(const ferry_device *dev, mtl_id command_buffer, const char *what);

/* FERRY_ERROR_OUT_OF_MEMORY: newBufferWithLength:options: of `length` bytes in
 * `storage` ("private", "shared") returned nil; the sentence names `purpose`, the
 * device's currentAllocatedSize and its working set. Runs inside the caller's pool. */
ferry_status ferry__metal_no_buffer(const ferry_device *dev, size_t length, const char *storage, const char *purpose);

/* ---- metal_transfer.c ------------------------------------------------------------ */

void ferry__metal_transfer_init(metal_device *md);
void ferry__metal_transfer_destroy(metal_device *md);

/* Within the device: blits, with the bytes blits cannot move (macOS's 4-byte
 * rule) moved through host memory. */
ferry_status ferry__metal_copy(ferry_device *dev, const ferry_mem *src, size_t src_offset, ferry_mem *dst,
                               size_t dst_offset, size_t bytes);

/* Discrete GPUs: Metal has no call that moves ordinary host memory into or out
 * of a private buffer, so these are the backend's own, synchronous: the bytes
 * through a temporary shared buffer and a blit. The engine calls them where its
 * plan prefers one call to its ring, and where the device cannot reach a ring. */
ferry_status ferry__metal_write(ferry_device *dev, ferry_mem *dst, size_t offset, const void *src, size_t bytes);
ferry_status ferry__metal_read(ferry_device *dev, const ferry_mem *src, size_t offset, void *dst, size_t bytes);

/* Pinned memory and DMA for the engine (discrete GPUs): a shared-storage
 * MTLBuffer is the pinned block (its token), a blit between it and device
 * memory the DMA, the command buffer's wait the ticket's. */
ferry_status ferry__metal_pin_alloc(ferry_device *dev, size_t bytes, void **out_base, uintptr_t *out_token);
ferry_status ferry__metal_pin_register(ferry_device *dev, void *base, size_t bytes, uintptr_t *out_token);
void ferry__metal_pin_release(ferry_device *dev, void *base, size_t bytes, uintptr_t token, bool allocated);
ferry_status ferry__metal_dma_start(ferry_device *dev, ferry_dma_dir dir, ferry_mem *mem, size_t mem_offset,
                                    const ferry_pinned *host, size_t bytes, ferry_ticket *out);
/* The wait may be called more than once; the release frees the ticket. */
/* Sets a range to a pattern whose bytes are all one value by fillBuffer:range:value:;
 * FERRY_ERROR_UNSUPPORTED (no message) for other patterns, which the core writes. */
ferry_status ferry__metal_fill_start(ferry_device *dev, ferry_lane *lane, ferry_mem *mem, size_t offset, size_t bytes,
                                     uint32_t pattern, unsigned pattern_size, ferry_ticket *out);
ferry_status ferry__metal_ticket_wait(ferry_device *dev, ferry_ticket ticket);
void ferry__metal_ticket_release(ferry_device *dev, ferry_ticket ticket);

#endif /* FERRY_METAL_INTERNAL_H */
