/*
 * The vulkan backend's own declarations, shared by its files:
 *   vulkan_api.c       the loader, the instance, the entry-point table
 *   vulkan.c           probe, devices, the ops table, device info
 *   vulkan_memory.c    memory types, buffers (own memory or a slot of a block), host pointers, pinned host memory
 *   vulkan_transfer.c  command buffers, submission, copies, the copy shader, DMA for the core's engine
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

/* A memory type as chosen for one use. */
typedef struct vkb_type {
  uint32_t index; /* VKB_NO_TYPE when there is none */
  VkFlags flags;
  uint32_t heap;
  bool coherent; /* HOST_COHERENT (and not switched off by FERRY_VULKAN_DEBUG=noncoherent) */
} vkb_type;

/* One command buffer with its fence. */
typedef struct vkb_cmd {
  VkCommandBuffer cb;
  VkFence fence;
  bool pending; /* submitted and not yet waited for */
} vkb_cmd;

enum { VKB_COPY_PIECES = 4 }; /* shader copies: descriptor sets per submission */

/* A command pool with one command buffer, for one copy at a time (a DMA's
 * ticket is its context); on the compute lane also descriptor sets for the copy
 * shader (made on first use). */
typedef struct vkb_ctx {
  struct vkb_ctx *next;
  struct vkb_lane *lane;
  VkCommandPool pool;
  vkb_cmd cmd;
  VkDescriptorPool descriptors;
  VkDescriptorSet sets[VKB_COPY_PIECES];
  /* A DMA into non-coherent pinned memory: the range to invalidate once it is done. */
  VkDeviceMemory inval_memory;
  VkDeviceSize inval_mem_size, inval_offset, inval_bytes;
} vkb_ctx;

/* A queue ferry submits to, with what goes with it. */
typedef struct vkb_lane {
  VkQueue queue;
  uint32_t family;
  pthread_mutex_t lock;     /* vkQueueSubmit, vkQueueWaitIdle: a queue is externally synchronised */
  pthread_mutex_t ctx_lock; /* free_ctx */
  vkb_ctx *free_ctx;
  bool ready; /* the locks are initialised */
} vkb_lane;

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
  /* The queue ferry_device_native exposes (a family that computes) and, where the
   * device has a family for transfers alone (copy engines), a queue of it for
   * transfers between host and device memory; else xfer is the compute lane. */
  vkb_lane lanes[2];
  vkb_lane *compute, *xfer;
  uint32_t families[2], family_count; /* buffers are shared between these (VK_SHARING_MODE_CONCURRENT) */
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
ferry_status ferry__vkb_write(ferry_device *dev, ferry_mem *dst, size_t off, const void *src, size_t bytes);
ferry_status ferry__vkb_read(ferry_device *dev, const ferry_mem *src, size_t off, void *dst, size_t bytes);
ferry_status ferry__vkb_copy(ferry_device *dev, const ferry_mem *src, size_t so, ferry_mem *dst, size_t doff,
                             size_t bytes);
ferry_status ferry__vkb_dma_start(ferry_device *dev, ferry_dma_dir dir, ferry_mem *mem, size_t off,
                                  const ferry_pinned *host, size_t bytes, ferry_ticket *out);
ferry_status ferry__vkb_dma_wait(ferry_device *dev, ferry_ticket ticket);
ferry_status ferry__vkb_synchronize(ferry_device *dev);

#endif /* FERRY_VULKAN_INTERNAL_H */
