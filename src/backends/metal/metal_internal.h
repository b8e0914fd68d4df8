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
  pthread_mutex_t tickets_lock; /* a ticket's finishing */
  pthread_mutex_t lanes_lock;   /* `lanes` */
  struct metal_lane *lanes;     /* every lane of the device, for synchronize */
} metal_device;

/* One blit: a copy between two buffers of the device, or a fill of one. */
typedef struct metal_blit {
  mtl_id src; /* unused by a fill */
  size_t src_offset;
  mtl_id dst;
  size_t dst_offset;
  size_t bytes; /* > 0; offsets and bytes multiples of 4 */
  bool fill;    /* fillBuffer:range:value: of dst with `value`, not a copy */
  uint8_t value;
} metal_blit;

/* A lane (metal_lanes.c): a command queue of its own, and a shared event that
 * every command buffer of the lane signals at its end with the next value, so
 * that other lanes (of any Metal device) can wait for it. */
typedef struct metal_lane {
  mtl_id queue; /* newCommandQueue (+1): what ferry_queue_native hands out */
  mtl_id event; /* newSharedEvent (+1) */
  mtl_id word;  /* a private buffer of 4 bytes that timing markers fill */
  pthread_mutex_t lock;
  uint64_t value;                 /* the last value a command buffer of the lane signals (lock) */
  struct metal_ticket *unclaimed; /* committed work nobody took a ticket for, oldest first (lock) */
  struct metal_ticket *unclaimed_tail;
  struct metal_lane *next; /* in the device's list */
} metal_lane;

/* A command buffer in flight: the ticket. */
typedef struct metal_ticket {
  mtl_id command_buffer; /* retained until finished */
  metal_lane *lane;      /* NULL: on the device's own queue */
  uint64_t value;        /* what it signals on its lane's event */
  char what[200];        /* what it does, for errors */
  bool finished;         /* waited for: status and times are final (the device's tickets_lock) */
  ferry_status status;
  char error[512];           /* status's sentence */
  double gpu_start, gpu_end; /* GPUStartTime, GPUEndTime (seconds; 0 where Metal gave none) */
  struct metal_ticket *next; /* in the lane's unclaimed list */
} metal_ticket;

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
/* On a lane only whole words at word offsets, in place (FERRY_CAP_LANE_WORDS):
 * FERRY_ERROR_UNSUPPORTED otherwise. Without a lane, the bytes a blit cannot
 * move go through the host first, complete on return. */
ferry_status ferry__metal_dma_start(ferry_device *dev, ferry_lane *lane, ferry_dma_dir dir, ferry_mem *mem,
                                    size_t mem_offset, const ferry_pinned *host, size_t bytes, ferry_ticket *out);
ferry_status ferry__metal_copy_start(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t so,
                                     ferry_mem *dst, size_t doff, size_t bytes, ferry_ticket *out);
/* Sets a range to a pattern whose bytes are all one value by fillBuffer:range:value:;
 * FERRY_ERROR_UNSUPPORTED (no message) for other patterns, which the core writes. */
ferry_status ferry__metal_fill_start(ferry_device *dev, ferry_lane *lane, ferry_mem *mem, size_t offset, size_t bytes,
                                     uint32_t pattern, unsigned pattern_size, ferry_ticket *out);

/* Commits one command buffer on `lane` (NULL: the device's own queue): a wait
 * for `wait_event` (MTL_NIL: none) to reach wait_value, then the blits (count
 * may be 0), then, on a lane, the signal of the lane's event. `what` says what
 * it does (for errors). With `out`, the ticket; on a lane without `out` the
 * lane keeps it, and a later ticket of the lane reports its failure. */
ferry_status ferry__metal_push(ferry_device *dev, metal_lane *lane, const metal_blit *blits, int count,
                               mtl_id wait_event, uint64_t wait_value, const char *what, ferry_ticket *out);

/* ---- metal_lanes.c: lanes, markers, gates and tickets ------------------------------- */

ferry_status ferry__metal_lane_create(ferry_device *dev, ferry_lane **out);
void ferry__metal_lane_destroy(ferry_device *dev, ferry_lane *lane);
ferry_status ferry__metal_lane_native(ferry_device *dev, ferry_lane *lane, ferry_native *out);
/* Waits for everything committed on `queue` (`which` names it in errors): an
 * empty command buffer committed there and waited for, Metal's usual way (its
 * command buffers start in commit order; docs/backends/metal.md says what
 * Apple does not promise about it). */
ferry_status ferry__metal_queue_drain(ferry_device *dev, mtl_id queue, const char *which);
/* Waits for everything committed on every lane's command queue, the program's own included. */
ferry_status ferry__metal_lanes_drain(ferry_device *dev);
ferry_status ferry__metal_marker(ferry_device *dev, ferry_lane *lane, bool timing, ferry_ticket *out);
ferry_status ferry__metal_lane_wait(ferry_device *dev, ferry_lane *lane, ferry_device *ticket_dev, ferry_ticket ticket);
ferry_status ferry__metal_gate_create(ferry_device *dev, ferry_gate **out);
ferry_status ferry__metal_gate_push(ferry_device *dev, ferry_lane *lane, ferry_gate *gate, uint64_t value);
ferry_status ferry__metal_gate_raise(ferry_device *dev, ferry_gate *gate, uint64_t value);
void ferry__metal_gate_destroy(ferry_device *dev, ferry_gate *gate);
ferry_status ferry__metal_ticket_query(ferry_device *dev, ferry_ticket ticket);
/* The wait may be called more than once, from any thread; the release frees the ticket. */
ferry_status ferry__metal_ticket_wait(ferry_device *dev, ferry_ticket ticket);
void ferry__metal_ticket_release(ferry_device *dev, ferry_ticket ticket);
ferry_status ferry__metal_ticket_elapsed(ferry_device *dev, ferry_ticket start, ferry_ticket stop, double *out_ms);

#endif /* FERRY_METAL_INTERNAL_H */
