/*
 * The vulkan backend's own declarations, shared by its files:
 *   vulkan_api.c       the loader, the instance, the entry-point table
 *   vulkan.c           probe, devices, the ops table, device info
 *   vulkan_memory.c    memory types, buffers (own memory or a slot of a block), host pointers, pinned host memory
 *   vulkan_transfer.c  command buffers, copies, the copy shader, fills, DMA for the core's engine
 *   vulkan_lanes.c     lanes, tickets, gates and timing markers on timeline semaphores
 */
#ifndef FERRY_VULKAN_INTERNAL_H
#define FERRY_VULKAN_INTERNAL_H

#include "../../core/backend.h"
#include "vulkan_api.h"

#include <pthread.h>
#include <stdbool.h>

/* Buffers are created with these usages so that users can bind them to their
 * own compute shaders (ferry_device_ptr is the VkBuffer). */
#define VKB_BUFFER_USAGE                                                                                               \
  (VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_STORAGE_BUFFER_BIT)
#define VKB_STAGING_USAGE (VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT)

#define VKB_NO_TYPE        UINT32_MAX              /* no memory type */
#define VKB_SUBALLOC_MAX   ((VkDeviceSize)4 << 20) /* buffers up to this size share blocks */
#define VKB_BLOCK_MIN      ((VkDeviceSize)2 << 20)
#define VKB_BLOCK_MAX      ((VkDeviceSize)64 << 20)
#define VKB_SUBALLOC_LIMIT (1u << 20) /* sub-allocate when maxMemoryAllocationCount is below this */
#define VKB_COMPUTE_QUEUES 16         /* queues of the compute family, at most, that lanes are spread over */
#define VKB_XFER_QUEUES    2          /* and of a transfer family (FERRY_VULKAN_DEBUG=transferqueue) */
#define VKB_QUEUES_MAX     (VKB_COMPUTE_QUEUES + VKB_XFER_QUEUES)

/* A memory type as chosen for one use. */
typedef struct vkb_type {
  uint32_t index; /* VKB_NO_TYPE when there is none */
  VkFlags flags;
  uint32_t heap;
  bool coherent; /* HOST_COHERENT (and not switched off by FERRY_VULKAN_DEBUG=noncoherent) */
} vkb_type;

/* One command buffer with its fence (the fence: devices without timeline semaphores). */
typedef struct vkb_cmd {
  VkCommandBuffer cb;
  VkFence fence;
  bool pending; /* submitted with the fence and not yet waited for */
} vkb_cmd;

enum { VKB_COPY_PIECES = 4 }; /* shader copies: descriptor sets per submission */

/* A byte range of a VkDeviceMemory, for flushes and invalidations. */
typedef struct vkb_range {
  VkDeviceMemory memory;
  VkDeviceSize mem_size, offset, bytes;
} vkb_range;

/* A command pool with one command buffer, for one submission at a time; on
 * the compute family also descriptor sets for the copy shader and a small
 * buffer for the unaligned ends of fills (both made on first use). Without
 * timeline semaphores a DMA's ticket is its context; on a lane a context is
 * in the lane's list from its submission until the lane's timeline passes
 * `value`, then back in its queue's free list. */
typedef struct vkb_ctx {
  struct vkb_ctx *next;
  struct vkb_queue *queue; /* the family its pool is of, and the free list it returns to */
  VkCommandPool pool;
  vkb_cmd cmd;
  VkDescriptorPool descriptors;
  VkDescriptorSet sets[VKB_COPY_PIECES];
  ferry_mem scratch; /* fills: the pattern, copied to the ends vkCmdFillBuffer cannot reach */
  bool has_scratch;
  uint64_t value; /* on a lane: the timeline value its submission signals */
  /* Without timeline semaphores: a DMA into non-coherent pinned memory, invalidated once done. */
  vkb_range inval;
} vkb_ctx;

/* A VkQueue ferry submits to, with what goes with it. */
typedef struct vkb_queue {
  VkQueue queue;
  uint32_t family;
  uint32_t timestamp_bits;  /* the family's timestampValidBits (0: no timestamps) */
  pthread_mutex_t lock;     /* vkQueueSubmit, vkQueueWaitIdle: a queue is externally synchronised */
  pthread_mutex_t ctx_lock; /* free_ctx */
  vkb_ctx *free_ctx;
  uint32_t lanes; /* lanes at home on it (under the device's lanes_lock): a new lane takes the least used */
  bool ready;     /* the locks are initialised */
} vkb_queue;

struct vkb_gate;

/* A lane (ferry_lane): a chain of submissions, each waiting for the lane's
 * timeline at the value the one before signals and signalling the next, so
 * that they run in order whichever VkQueue each goes to. A ticket is a value
 * of the timeline. */
typedef struct vkb_lane {
  uint32_t index;         /* in the device's lane table (a ticket names it) */
  vkb_queue *home, *xfer; /* copies, fills, markers, waits; DMA (a transfer family's queue, or home) */
  VkSemaphore timeline;
  pthread_mutex_t lock;          /* below; held across vkQueueSubmit so that values are submitted in order */
  uint64_t base;                 /* the timeline's value when the lane was made (a pooled semaphore goes on counting) */
  uint64_t last;                 /* the value the latest submission signals */
  vkb_ctx *flight, *flight_tail; /* contexts submitted, in order, until the timeline passes them */
  vkb_ctx *spare;                /* the lane's own contexts once done: its command pools, reused first */
  struct vkb_gate *gate;         /* the latest gate pushed, and the value waited for */
  uint64_t gate_value;
  _Atomic uint64_t done; /* a value the timeline is known to have reached */
} vkb_lane;

/* A range to flush when a gate is raised: a DMA from non-coherent pinned
 * memory pushed behind the gate, whose bytes the host writes before raising it. */
typedef struct vkb_flush {
  struct vkb_flush *next;
  uint64_t value;
  vkb_range range;
} vkb_flush;

/* A gate (ferry_gate): a timeline semaphore that only the host signals, pooled. */
typedef struct vkb_gate {
  struct vkb_gate *next; /* in the pool */
  VkSemaphore semaphore;
  pthread_mutex_t lock;
  uint64_t base;   /* the semaphore's value when the gate was taken: gate value v is base + v */
  uint64_t raised; /* the semaphore's value now (under lock) */
  vkb_flush *flushes;
} vkb_gate;

/* A range to invalidate once a lane's timeline reaches `value`: a DMA into
 * non-coherent host memory, before the host reads it. */
typedef struct vkb_inval {
  struct vkb_inval *next;
  vkb_lane *lane;
  uint64_t value;
  vkb_range range;
} vkb_inval;

/* A timing marker's timestamp query (the ticket points at it). */
enum { VKB_TIMING_PAGE = 256 };
typedef struct vkb_timing {
  struct vkb_timing *next; /* free list */
  VkQueryPool pool;
  uint32_t query;
  vkb_lane *lane;
  uint64_t value;
  vkb_queue *queue; /* timestamps compare only within one queue */
} vkb_timing;

typedef struct vkb_timing_page {
  struct vkb_timing_page *next;
  VkQueryPool pool;
  vkb_timing records[VKB_TIMING_PAGE];
} vkb_timing_page;

/* A timeline semaphore of a destroyed lane, kept for the next (another lane's
 * submission may still wait on it: semaphores go only with the device). */
typedef struct vkb_pooled_timeline {
  VkSemaphore semaphore;
  uint64_t value;
} vkb_pooled_timeline;

enum { VKB_LANE_PAGE = 256, VKB_LANE_PAGES = 128 }; /* lane indices 1 to 32767 */

/* The compute pipeline that copies between buffers (vulkan_transfer.c), made on first use. */
typedef struct vkb_copier {
  pthread_mutex_t lock;
  VkShaderModule module;
  VkDescriptorSetLayout set_layout;
  VkPipelineLayout layout;
  VkPipeline pipeline;
  uint32_t unroll; /* the shader's UNROLL (specialisation constant 0) */
  bool ready, failed;
} vkb_copier;

/* A block of device memory split into equal slots, one buffer each. */
typedef struct vkb_block {
  struct vkb_block *next;
  VkDeviceMemory memory;
  VkDeviceSize bytes;      /* of the memory */
  VkDeviceSize slot_bytes; /* a multiple of the buffers' alignment */
  uint32_t slots, used;
  char *map; /* persistent mapping of the whole block, or NULL */
  uint64_t *bitmap;
} vkb_block;

/* One ferry allocation (ferry_mem.impl). */
typedef struct vkb_buffer {
  VkBuffer buffer;
  VkDeviceMemory memory;
  VkDeviceSize offset;   /* of the buffer within memory */
  VkDeviceSize mem_size; /* of memory (for flush ranges) */
  vkb_block *block;      /* NULL when memory is the buffer's own */
  uint32_t slot;
  size_t bytes;
  char *map;      /* host address of the buffer's byte 0 (the user's array for host pointers), or NULL */
  bool coherent;  /* no flush or invalidate needed for map */
  bool imported;  /* VK_EXT_external_memory_host over the user's array */
  bool vk_mapped; /* vkMapMemory was called on memory (imported, non-coherent: for flush/invalidate) */
} vkb_buffer;

/* Pinned host memory for the core's engine (the token of a block): a VkBuffer
 * over host-visible memory the device allocated (pin_alloc), or over a block
 * another allocator made, imported through VK_EXT_external_memory_host
 * (pin_register). */
typedef struct vkb_pin {
  VkBuffer buffer;
  VkDeviceMemory memory;
  VkDeviceSize mem_size;
  bool coherent;
} vkb_pin;

typedef struct vkb_device {
  VkPhysicalDevice phys;
  VkDevice device;
  /* Queues of the first family that computes (compute: the first, which
   * ferry_device_native exposes), and with FERRY_VULKAN_DEBUG=transferqueue of
   * a family for transfers alone (copy engines), for transfers between host and
   * device memory; xfer is the first of those, else the compute queue. With
   * timeline semaphores lanes are spread over them. */
  vkb_queue queues[VKB_QUEUES_MAX];
  uint32_t queue_count, compute_count, xfer_count; /* compute: queues[0..compute_count), then xfer_count */
  vkb_queue *compute, *xfer;
  uint32_t families[2], family_count; /* buffers are shared between these (VK_SHARING_MODE_CONCURRENT) */

  /* Lanes, gates and tickets (vulkan_lanes.c): only with timeline semaphores. */
  bool timeline;
  PFN_vkGetSemaphoreCounterValue get_counter;
  PFN_vkWaitSemaphores wait_semaphores;
  PFN_vkSignalSemaphore signal_semaphore;
  pthread_mutex_t lanes_lock; /* the lane table's indices, the pools, the queues' lane counts */
  _Atomic(vkb_lane *) *lane_pages[VKB_LANE_PAGES];
  uint32_t lane_next, *lane_free, lane_free_count, lane_free_cap;
  vkb_pooled_timeline *timelines;
  uint32_t timeline_count, timeline_cap;
  vkb_gate *free_gates;
  vkb_lane *own_lane; /* for a NULL lane (a direct caller of the ops: tests) */
  pthread_mutex_t inval_lock;
  vkb_inval *invals;
  _Atomic uint32_t inval_count;
  pthread_mutex_t timing_lock;
  vkb_timing *free_timing;
  vkb_timing_page *timing_pages;
  bool lanes_ready; /* the locks above are initialised */
  vkb_copier copier;
  bool copy_shader; /* large copies within the device run the copy shader */
  VkPhysicalDeviceProperties props;
  VkPhysicalDeviceMemoryProperties memory;
  bool unified;  /* CPU or integrated GPU: device memory is the host's */
  bool mapped;   /* ferry buffers are persistently mapped and written by memcpy */
  bool suballoc; /* small buffers share blocks of memory */
  bool budget;   /* VK_EXT_memory_budget is enabled */
  bool host_ptr;
  size_t host_ptr_alignment;
  vkb_type buf_type, staging_type;
  VkDeviceSize buf_align, atom;
  uint64_t max_allocation, total_memory;
  uint64_t spin_ns; /* fence waits poll this long before they sleep in vkWaitForFences (0 on CPU devices) */
  PFN_vkGetMemoryHostPointerPropertiesEXT get_host_pointer_properties;

  pthread_mutex_t alloc_lock; /* blocks */
  bool locks_ready;
  _Atomic uint64_t allocations; /* live vkAllocateMemory objects, for messages */

  vkb_block *blocks;
} vkb_device;

/* FERRY_VULKAN_DEBUG (comma-separated words) and the tuning variables, read at probe:
 * they force the paths a device would otherwise not take, so that every path
 * can be tested on any driver (lavapipe in CI). */
typedef struct vkb_options {
  bool staging;         /* "staging": never map ferry buffers; every transfer goes through the core's staging */
  bool noncoherent;     /* "noncoherent": treat every memory type as non-coherent (flush and invalidate) */
  bool suballoc;        /* "suballoc": small buffers share blocks even where allocations are not limited */
  bool nosuballoc;      /* "nosuballoc": every buffer has memory of its own */
  bool transferqueue;   /* "transferqueue": host<->device transfers on a queue of a transfer-only family */
  bool noshader;        /* "noshader": copies within the device by vkCmdCopyBuffer only */
  bool shader;          /* "shader": the copy shader also where buffers are mapped (CPU devices) */
  bool notimeline;      /* "notimeline": no timeline semaphores, so no lanes (as on a Vulkan 1.1 driver) */
  bool gates;           /* "gates": lanes with gates (host-signalled semaphores), which stall a shared VkQueue */
  uint32_t copy_unroll; /* FERRY_VULKAN_COPY_UNROLL: 16-byte words per invocation and step of the copy shader (1) */
  uint32_t copy_groups; /* FERRY_VULKAN_COPY_GROUPS: work groups per dispatch, at most (0: the device's limit) */
  long long spin_us;    /* FERRY_VULKAN_SPIN_US: how long a wait polls its fence before it sleeps (-1: per device) */
} vkb_options;
extern vkb_options ferry__vkb_opts;

/* Under LeakSanitizer (ASan builds), what the driver allocates while it starts
 * (vkCreateInstance loads the drivers, vkEnumeratePhysicalDevices and
 * vkCreateDevice start them) is marked as not leaked: static initialisers of
 * libraries a driver loads keep memory for good (lavapipe's LLVM pulls in libz3,
 * which does), and those libraries are unloaded by vkDestroyInstance, so that a
 * suppression by library name cannot match. Ferry's own allocations are never
 * inside these brackets. Elsewhere they do nothing. */
#if defined(__SANITIZE_ADDRESS__)
#define VKB_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define VKB_LSAN 1
#endif
#endif
#ifdef VKB_LSAN
void __lsan_disable(void);
void __lsan_enable(void);
#define VKB_DRIVER_STARTUP_BEGIN() __lsan_disable()
#define VKB_DRIVER_STARTUP_END()   __lsan_enable()
#else
#define VKB_DRIVER_STARTUP_BEGIN() ((void)0)
#define VKB_DRIVER_STARTUP_END()   ((void)0)
#endif

/* ---- vulkan_api.c ---------------------------------------------------------- */
ferry_status ferry__vk_api_load(void);
void ferry__vk_api_unload(void);
const ferry_vk_api *ferry__vk(void); /* the table, also while it is being filled */

/* ---- vulkan.c --------------------------------------------------------------
 * Every function takes the ferry_device; during probe, before the core has
 * numbered the device, a stand-in with the same impl and a label of our own. */
/* Sets the sentence "<call> <details> returned VK_X (n) on <device>" and returns
 * FERRY_ERROR_OUT_OF_MEMORY for the out-of-memory codes, else FERRY_ERROR_BACKEND. */
ferry_status ferry__vkb_fail(const ferry_device *dev, const char *call, VkResult r, const char *fmt, ...)
    FERRY_PRINTF(4, 5);
bool ferry__vkb_is_oom(VkResult r);

/* ---- vulkan_memory.c ------------------------------------------------------- */
/* How every buffer ferry makes is shared between the families of its queues. */
void ferry__vkb_sharing(const vkb_device *d, VkBufferCreateInfo *info);
ferry_status ferry__vkb_memory_setup(ferry_device *dev); /* memory types, alignment, limits */
void ferry__vkb_memory_teardown(vkb_device *d);          /* blocks and pinned blocks left over */
/* Describes a heap for messages: "heap 0 of 80 GiB (…), 12 GiB free". */
const char *ferry__vkb_heap_text(vkb_device *d, uint32_t heap, char buf[256]);
uint64_t ferry__vkb_free_memory(ferry_device *dev);
ferry_status ferry__vkb_alloc(ferry_device *dev, size_t bytes, ferry_mem *out);
ferry_status ferry__vkb_free(ferry_device *dev, ferry_mem *mem);
ferry_status ferry__vkb_host_ptr_import(ferry_device *dev, void *host, size_t bytes, ferry_mem *out,
                                        ferry_refusal *why);
ferry_status ferry__vkb_host_ptr_sync(ferry_device *dev, ferry_mem *mem, ferry_sync_dir dir);
ferry_status ferry__vkb_host_ptr_release(ferry_device *dev, ferry_mem *mem);
ferry_status ferry__vkb_pin_alloc(ferry_device *dev, size_t bytes, void **out_base, uintptr_t *out_token);
ferry_status ferry__vkb_pin_register(ferry_device *dev, void *base, size_t bytes, uintptr_t *out_token);
void ferry__vkb_pin_release(ferry_device *dev, void *base, size_t bytes, uintptr_t token, bool allocated);
/* Flush (host writes to the device) or invalidate (device writes to the host) a
 * range of mapped memory, widened to nonCoherentAtomSize. */
ferry_status ferry__vkb_flush(ferry_device *dev, VkDeviceMemory memory, VkDeviceSize mem_size, VkDeviceSize offset,
                              VkDeviceSize bytes, bool to_device);

/* ---- vulkan_transfer.c ----------------------------------------------------- */
ferry_status ferry__vkb_transfer_setup(ferry_device *dev);
void ferry__vkb_transfer_teardown(vkb_device *d);
ferry_status ferry__vkb_write(ferry_device *dev, ferry_lane *lane, ferry_mem *dst, size_t off, const void *src,
                              size_t bytes);
ferry_status ferry__vkb_read(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t off, void *dst,
                             size_t bytes);
ferry_status ferry__vkb_copy(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t so, ferry_mem *dst,
                             size_t doff, size_t bytes, ferry_ticket *out);
ferry_status ferry__vkb_dma_start(ferry_device *dev, ferry_lane *lane, ferry_dma_dir dir, ferry_mem *mem, size_t off,
                                  const ferry_pinned *host, size_t bytes, ferry_ticket *out);
ferry_status ferry__vkb_fill(ferry_device *dev, ferry_lane *lane, ferry_mem *mem, size_t off, size_t bytes,
                             uint32_t pattern, unsigned pattern_size, ferry_ticket *out);
/* Without timeline semaphores: a DMA's ticket is its context. */
ferry_status ferry__vkb_ctx_ticket_wait(ferry_device *dev, ferry_ticket ticket);
void ferry__vkb_ctx_ticket_release(ferry_device *dev, ferry_ticket ticket);
ferry_status ferry__vkb_synchronize(ferry_device *dev);
/* A context of `queue`'s family, free and with its fence waited for; contexts
 * of `lane` whose submissions completed are taken back first where the queue
 * has none free. */
ferry_status ferry__vkb_ctx_take(ferry_device *dev, vkb_lane *lane, vkb_queue *queue, vkb_ctx **out);
void ferry__vkb_ctx_give(vkb_ctx *c);
ferry_status ferry__vkb_cmd_begin(ferry_device *dev, vkb_cmd *c, const char *what);
ferry_status ferry__vkb_cmd_end(ferry_device *dev, vkb_cmd *c, const char *what);

/* ---- vulkan_lanes.c -------------------------------------------------------- */
ferry_status ferry__vkb_lanes_setup(ferry_device *dev); /* with d->timeline: the locks and the device's own lane */
void ferry__vkb_lanes_teardown(vkb_device *d);          /* after vkDeviceWaitIdle */
/* The lane for `lane` (NULL: the device's own). */
vkb_lane *ferry__vkb_lane_of(ferry_device *dev, ferry_lane *lane);
/* What a submission on a lane carries besides its command buffer (any may be NULL). */
typedef struct vkb_submit_extra {
  VkSemaphore wait; /* also wait for this timeline semaphore at wait_value */
  uint64_t wait_value;
  struct vkb_gate *gate;  /* the wait is this gate's (the lane's latest gate from now on) */
  const vkb_range *flush; /* flush now, and again when the lane's latest gate is raised (a DMA from it) */
  const vkb_range *inval; /* invalidate once the submission completed, before the host reads (a DMA into it) */
} vkb_submit_extra;
/* Submits `c` (NULL: an empty batch) to `queue` as the lane's next value,
 * chained after the lane's last; *out_value is the value it signals. */
ferry_status ferry__vkb_lane_submit(ferry_device *dev, vkb_lane *l, vkb_queue *queue, vkb_ctx *c,
                                    const vkb_submit_extra *extra, const char *what, uint64_t *out_value);
ferry_ticket ferry__vkb_lane_ticket(const vkb_lane *l, uint64_t value);
/* Contexts of the lane whose submissions completed become its spares (ferry__vkb_lane_spare). */
void ferry__vkb_lane_reclaim(ferry_device *dev, vkb_lane *l);
/* One of the lane's own done contexts for `queue` (ferry__vkb_lane_reclaim made them so), or NULL. */
vkb_ctx *ferry__vkb_lane_spare(vkb_lane *l, vkb_queue *queue);
/* Waits for everything submitted on the lane so far (the synchronous write and read). */
ferry_status ferry__vkb_lane_settle(ferry_device *dev, vkb_lane *l);
ferry_status ferry__vkb_lane_create(ferry_device *dev, ferry_lane **out);
void ferry__vkb_lane_destroy(ferry_device *dev, ferry_lane *lane);
ferry_status ferry__vkb_lane_native(ferry_device *dev, ferry_lane *lane, ferry_native *out);
ferry_status ferry__vkb_marker(ferry_device *dev, ferry_lane *lane, bool timing, ferry_ticket *out);
ferry_status ferry__vkb_lane_wait(ferry_device *dev, ferry_lane *lane, ferry_device *ticket_dev, ferry_ticket ticket);
ferry_status ferry__vkb_gate_create(ferry_device *dev, ferry_gate **out);
ferry_status ferry__vkb_gate_push(ferry_device *dev, ferry_lane *lane, ferry_gate *gate, uint64_t value);
ferry_status ferry__vkb_gate_raise(ferry_device *dev, ferry_gate *gate, uint64_t value);
void ferry__vkb_gate_destroy(ferry_device *dev, ferry_gate *gate);
ferry_status ferry__vkb_ticket_query(ferry_device *dev, ferry_ticket ticket);
ferry_status ferry__vkb_ticket_wait(ferry_device *dev, ferry_ticket ticket);
void ferry__vkb_ticket_release(ferry_device *dev, ferry_ticket ticket);
ferry_status ferry__vkb_ticket_elapsed(ferry_device *dev, ferry_ticket start, ferry_ticket stop, double *out_ms);

#endif /* FERRY_VULKAN_INTERNAL_H */
