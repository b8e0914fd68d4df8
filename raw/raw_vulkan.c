/*
 * Raw Vulkan baseline: what a user without ferry writes to move bytes into and
 * out of a VkBuffer, on the very same ferry buffers (ferry_device_ptr is the
 * VkBuffer), on ferry's VkDevice and VkQueue (ferry_device_native), through a
 * table of its own (below: the Vulkan 1.0 entry points the loader exports, looked
 * up in the loader ferry opened, FERRY_VULKAN_LIBRARY else libvulkan.so.1), with a
 * command pool, command buffer and fence of its own:
 *
 *   h2d         memcpy into a host-visible staging buffer + vkCmdCopyBuffer + fence wait
 *               (from memory of host_alloc below: vkCmdCopyBuffer from that buffer, no memcpy)
 *   d2h         vkCmdCopyBuffer into the staging buffer + fence wait + memcpy out
 *   d2d         vkCmdCopyBuffer + fence wait
 *   host_alloc  a mapped host-visible VkBuffer (Vulkan's pinned memory)
 *   alloc_free  vkCreateBuffer + vkAllocateMemory + vkBindBufferMemory, then the frees
 *   h2d_async   memcpy into one of ASYNC_SLOTS staging buffers (waiting first for its last
 *               copy's fence when all are in use) + vkCmdCopyBuffer submitted with the slot's
 *               fence, not waited for (from memory of host_alloc: the copy from that buffer);
 *               finish: every slot's fence waited for
 *   both        a staged write on one VkQueue and a staged read on a second, each with a
 *               command buffer and fence of its own, submitted together and both waited
 *               for; the VkQueues are those of two ferry queues made for it (ferry_queue_native:
 *               the device's own queues as ferry hands them out, one shared where it has one)
 *
 * The staging buffer is one buffer as large as the transfer, made once: the
 * simplest fast code, with no chunking and no overlap. The queue is ferry's, and
 * a VkQueue must not be used from two threads at once: the raw calls are meant
 * to run while ferry is idle on that device (the benchmarks are single-threaded).
 *
 * On CPU devices and integrated GPUs (lavapipe), whose device-local memory is
 * also host-visible, a program would rather map its buffers and use memcpy: the
 * second way ("mapped"). ferry maps its own buffers there and keeps the mapping
 * to itself, so this way works on buffers of its own: one mapped buffer of the
 * same size per ferry buffer it stands for (the last two; DEVICE_LOCAL and
 * HOST_VISIBLE memory, cached and coherent where there is such a type):
 *   h2d_alt  memcpy into the mapping (+ vkFlushMappedMemoryRanges where not coherent)
 *   d2h_alt  (vkInvalidateMappedMemoryRanges where not coherent +) memcpy out of it
 *   d2d_alt  memcpy from one mapping into the other
 */
#include "backends/vulkan/vulkan_api.h"
#include "raw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE (VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT)

/* The calls the baseline makes: X(return type, name, parameters). Every one is a
 * Vulkan 1.0 core command, which the loader exports and dispatches on its first
 * argument, as for a program linked with -lvulkan. */
#define RAW_VK_FUNCTIONS(X)                                                                                            \
  X(void, vkGetPhysicalDeviceProperties, (VkPhysicalDevice, VkPhysicalDeviceProperties *))                             \
  X(void, vkGetPhysicalDeviceMemoryProperties, (VkPhysicalDevice, VkPhysicalDeviceMemoryProperties *))                 \
  X(VkResult, vkCreateBuffer, (VkDevice, const VkBufferCreateInfo *, const void *, VkBuffer *))                        \
  X(void, vkDestroyBuffer, (VkDevice, VkBuffer, const void *))                                                         \
  X(void, vkGetBufferMemoryRequirements, (VkDevice, VkBuffer, VkMemoryRequirements *))                                 \
  X(VkResult, vkAllocateMemory, (VkDevice, const VkMemoryAllocateInfo *, const void *, VkDeviceMemory *))              \
  X(void, vkFreeMemory, (VkDevice, VkDeviceMemory, const void *))                                                      \
  X(VkResult, vkBindBufferMemory, (VkDevice, VkBuffer, VkDeviceMemory, VkDeviceSize))                                  \
  X(VkResult, vkMapMemory, (VkDevice, VkDeviceMemory, VkDeviceSize, VkDeviceSize, VkFlags, void **))                   \
  X(VkResult, vkFlushMappedMemoryRanges, (VkDevice, uint32_t, const VkMappedMemoryRange *))                            \
  X(VkResult, vkInvalidateMappedMemoryRanges, (VkDevice, uint32_t, const VkMappedMemoryRange *))                       \
  X(VkResult, vkCreateCommandPool, (VkDevice, const VkCommandPoolCreateInfo *, const void *, VkCommandPool *))         \
  X(void, vkDestroyCommandPool, (VkDevice, VkCommandPool, const void *))                                               \
  X(VkResult, vkAllocateCommandBuffers, (VkDevice, const VkCommandBufferAllocateInfo *, VkCommandBuffer *))            \
  X(VkResult, vkBeginCommandBuffer, (VkCommandBuffer, const VkCommandBufferBeginInfo *))                               \
  X(VkResult, vkEndCommandBuffer, (VkCommandBuffer))                                                                   \
  X(void, vkCmdCopyBuffer, (VkCommandBuffer, VkBuffer, VkBuffer, uint32_t, const VkBufferCopy *))                      \
  X(void, vkCmdPipelineBarrier,                                                                                        \
    (VkCommandBuffer, VkFlags, VkFlags, VkFlags, uint32_t, const VkMemoryBarrier *, uint32_t,                          \
     const VkBufferMemoryBarrier *, uint32_t, const void *))                                                           \
  X(VkResult, vkCreateFence, (VkDevice, const VkFenceCreateInfo *, const void *, VkFence *))                           \
  X(void, vkDestroyFence, (VkDevice, VkFence, const void *))                                                           \
  X(VkResult, vkResetFences, (VkDevice, uint32_t, const VkFence *))                                                    \
  X(VkResult, vkWaitForFences, (VkDevice, uint32_t, const VkFence *, VkBool32, uint64_t))                              \
  X(VkResult, vkQueueSubmit, (VkQueue, uint32_t, const VkSubmitInfo *, VkFence))                                       \
  X(VkResult, vkQueueWaitIdle, (VkQueue))

typedef struct raw_vk_driver {
#define RAW_VK_MEMBER(ret, name, params) ret(*name) params;
  RAW_VK_FUNCTIONS(RAW_VK_MEMBER)
#undef RAW_VK_MEMBER
} raw_vk_driver;

/* The table, looked up once in the loader ferry's vulkan backend opened. */
static const raw_vk_driver *vk_driver(char why[256]) {
  static raw_vk_driver table;
  static bool loaded;
  if (loaded) return &table;
  void *lib = raw_library_open("FERRY_VULKAN_LIBRARY", "libvulkan.so.1", why);
  if (!lib) return NULL;
  raw_vk_driver t;
#define RAW_VK_LOOKUP(ret, name, params)                                                                               \
  if (!raw_library_symbol(lib, #name, &t.name, sizeof t.name, why)) return NULL;
  RAW_VK_FUNCTIONS(RAW_VK_LOOKUP)
#undef RAW_VK_LOOKUP
  table = t;
  loaded = true;
  return &table;
}

typedef struct host_buffer {
  struct host_buffer *next;
  VkBuffer buffer;
  VkDeviceMemory memory;
  VkDeviceSize bytes;
  char *map;
  bool coherent;
} host_buffer;

/* One of h2d_async's submissions in flight: its command buffer, fence and staging. */
#define ASYNC_SLOTS 8
typedef struct async_slot {
  VkCommandBuffer cb;
  VkFence fence;
  bool busy; /* submitted, its fence not waited for yet */
  host_buffer staging;
} async_slot;

/* The mapped way's buffer standing for one ferry buffer. */
typedef struct shadow {
  uint64_t id; /* the ferry_buffer's id; 0: unused */
  unsigned long long stamp;
  host_buffer buf;
} shadow;

struct raw_baseline {
  const raw_vk_driver *vk;
  VkPhysicalDevice phys;
  VkDevice device;
  VkQueue queue;
  uint32_t family;
  VkPhysicalDeviceMemoryProperties memory;
  VkDeviceSize atom;
  VkCommandPool pool;
  VkCommandBuffer cb;
  VkFence fence;
  host_buffer staging; /* the one staging buffer, grown to the largest transfer */
  host_buffer *pinned; /* from host_alloc */
  bool unified;        /* a CPU device or an integrated GPU with device-local, host-visible memory */
  shadow shadows[2];   /* the mapped way's buffers */
  unsigned long long clock;
  async_slot slots[ASYNC_SLOTS]; /* h2d_async's, made at its first call */
  bool slots_made;
  unsigned next_slot;
  ferry_device *dev;
  /* both's: two ferry queues whose VkQueues it borrows (while ferry is idle on
   * them), a slot for each way (made at its first call), and why not. */
  ferry_queue both_q[2];
  VkQueue both_vq[2];
  async_slot both_slot[2];
  int both_state; /* 0: not tried; 1: ready; -1: cannot */
};

/* A host-visible type (device-local too when `local`), coherent and cached where possible. */
static uint32_t pick_host_type(raw_baseline *raw, uint32_t bits, bool local) {
  uint32_t best = UINT32_MAX;
  int best_score = -1;
  for (uint32_t i = 0; i < raw->memory.memoryTypeCount; i++) {
    VkFlags f = raw->memory.memoryTypes[i].propertyFlags;
    if (!(bits & (1u << i)) || !(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) continue;
    if (local && !(f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)) continue;
    int score = (f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT ? 2 : 0) + (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT ? 1 : 0);
    if (score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

/* A mapped buffer: host memory for staging and pinning, or (`local`) device
 * memory as a program on a unified device would make its buffers. */
static int host_buffer_make(raw_baseline *raw, VkDeviceSize bytes, bool local, host_buffer *out) {
  const raw_vk_driver *vk = raw->vk;
  VkBufferCreateInfo info = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .size = bytes,
                             .usage = local ? USAGE | VK_BUFFER_USAGE_STORAGE_BUFFER_BIT : USAGE,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  memset(out, 0, sizeof *out);
  if (vk->vkCreateBuffer(raw->device, &info, NULL, &out->buffer) != VK_SUCCESS) return -1;
  VkMemoryRequirements req;
  vk->vkGetBufferMemoryRequirements(raw->device, out->buffer, &req);
  uint32_t type = pick_host_type(raw, req.memoryTypeBits, local);
  VkMemoryAllocateInfo alloc = {
      .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size, .memoryTypeIndex = type};
  void *map = NULL;
  if (type == UINT32_MAX || vk->vkAllocateMemory(raw->device, &alloc, NULL, &out->memory) != VK_SUCCESS ||
      vk->vkBindBufferMemory(raw->device, out->buffer, out->memory, 0) != VK_SUCCESS ||
      vk->vkMapMemory(raw->device, out->memory, 0, VK_WHOLE_SIZE, 0, &map) != VK_SUCCESS) {
    if (out->memory) vk->vkFreeMemory(raw->device, out->memory, NULL);
    vk->vkDestroyBuffer(raw->device, out->buffer, NULL);
    memset(out, 0, sizeof *out);
    return -1;
  }
  out->coherent = raw->memory.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  out->bytes = bytes;
  out->map = map;
  return 0;
}

static void host_buffer_free(raw_baseline *raw, host_buffer *b) {
  if (!b->buffer) return;
  raw->vk->vkDestroyBuffer(raw->device, b->buffer, NULL);
  raw->vk->vkFreeMemory(raw->device, b->memory, NULL);
  memset(b, 0, sizeof *b);
}

static raw_baseline *vulkan_open(ferry_device *dev, char why[256]) {
  const raw_vk_driver *vk = vk_driver(why);
  ferry_native nat;
  if (!vk) return NULL;
  if (ferry_device_native(dev, &nat) != FERRY_OK || nat.context == 0) {
    snprintf(why, 256, "not a vulkan device: %s", ferry_last_error());
    return NULL;
  }
  raw_baseline *raw = calloc(1, sizeof *raw);
  if (!raw) {
    snprintf(why, 256, "no host memory");
    return NULL;
  }
  raw->vk = vk;
  raw->dev = dev;
  raw->phys = (VkPhysicalDevice)nat.device;
  raw->device = (VkDevice)nat.context;
  raw->queue = (VkQueue)nat.queue;
  raw->family = nat.queue_family;
  vk->vkGetPhysicalDeviceMemoryProperties(raw->phys, &raw->memory);
  VkPhysicalDeviceProperties p;
  vk->vkGetPhysicalDeviceProperties(raw->phys, &p);
  raw->atom = p.limits.nonCoherentAtomSize ? p.limits.nonCoherentAtomSize : 1;
  if (p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU || p.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU)
    for (uint32_t i = 0; i < raw->memory.memoryTypeCount; i++) {
      VkFlags f = raw->memory.memoryTypes[i].propertyFlags;
      if ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) raw->unified = true;
    }
  VkCommandPoolCreateInfo pool = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                  .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                  .queueFamilyIndex = raw->family};
  VkCommandBufferAllocateInfo cb = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 1};
  VkFenceCreateInfo fence = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  if (vk->vkCreateCommandPool(raw->device, &pool, NULL, &raw->pool) != VK_SUCCESS ||
      (cb.commandPool = raw->pool, vk->vkAllocateCommandBuffers(raw->device, &cb, &raw->cb) != VK_SUCCESS) ||
      vk->vkCreateFence(raw->device, &fence, NULL, &raw->fence) != VK_SUCCESS) {
    snprintf(why, 256, "could not make a command pool, command buffer and fence");
    if (raw->pool) vk->vkDestroyCommandPool(raw->device, raw->pool, NULL);
    free(raw);
    return NULL;
  }
  return raw;
}

static void vulkan_close(raw_baseline *raw) {
  if (!raw) return;
  raw->vk->vkQueueWaitIdle(raw->queue);
  host_buffer_free(raw, &raw->staging);
  for (int i = 0; i < 2; i++)
    host_buffer_free(raw, &raw->shadows[i].buf);
  while (raw->pinned) {
    host_buffer *b = raw->pinned;
    raw->pinned = b->next;
    host_buffer_free(raw, b);
    free(b);
  }
  for (int i = 0; i < ASYNC_SLOTS; i++) {
    host_buffer_free(raw, &raw->slots[i].staging);
    if (raw->slots[i].fence) raw->vk->vkDestroyFence(raw->device, raw->slots[i].fence, NULL);
  }
  for (int i = 0; i < 2; i++) {
    if (raw->both_vq[i]) raw->vk->vkQueueWaitIdle(raw->both_vq[i]);
    host_buffer_free(raw, &raw->both_slot[i].staging);
    if (raw->both_slot[i].fence) raw->vk->vkDestroyFence(raw->device, raw->both_slot[i].fence, NULL);
    if (raw->both_q[i].id) ferry_queue_destroy(raw->both_q[i]);
  }
  raw->vk->vkDestroyFence(raw->device, raw->fence, NULL);
  raw->vk->vkDestroyCommandPool(raw->device, raw->pool, NULL); /* and the slots' command buffers */
  free(raw);
}

/* Records one copy into a command buffer, with a barrier to the host after a read. */
static int record_copy(raw_baseline *raw, VkCommandBuffer c, VkBuffer src, VkDeviceSize so, VkBuffer dst,
                       VkDeviceSize doff, VkDeviceSize bytes, bool to_host) {
  const raw_vk_driver *vk = raw->vk;
  VkCommandBufferBeginInfo begin = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                    .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  if (vk->vkBeginCommandBuffer(c, &begin) != VK_SUCCESS) return -1;
  VkBufferCopy region = {.srcOffset = so, .dstOffset = doff, .size = bytes};
  vk->vkCmdCopyBuffer(c, src, dst, 1, &region);
  if (to_host) {
    VkMemoryBarrier b = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                         .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                         .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    vk->vkCmdPipelineBarrier(c, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &b, 0, NULL, 0, NULL);
  }
  return vk->vkEndCommandBuffer(c) == VK_SUCCESS ? 0 : -1;
}

/* One vkCmdCopyBuffer, submitted and waited for. */
static int copy_wait(raw_baseline *raw, VkBuffer src, VkDeviceSize so, VkBuffer dst, VkDeviceSize doff,
                     VkDeviceSize bytes, bool to_host) {
  const raw_vk_driver *vk = raw->vk;
  if (record_copy(raw, raw->cb, src, so, dst, doff, bytes, to_host)) return -1;
  VkSubmitInfo submit = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &raw->cb};
  if (vk->vkQueueSubmit(raw->queue, 1, &submit, raw->fence) != VK_SUCCESS) return -1;
  if (vk->vkWaitForFences(raw->device, 1, &raw->fence, VK_TRUE, UINT64_MAX) != VK_SUCCESS) return -1;
  return vk->vkResetFences(raw->device, 1, &raw->fence) == VK_SUCCESS ? 0 : -1;
}

static int staging_for(raw_baseline *raw, size_t bytes) {
  if (raw->staging.bytes >= bytes) return 0;
  host_buffer_free(raw, &raw->staging);
  return host_buffer_make(raw, bytes, false, &raw->staging);
}

static int sync_range(raw_baseline *raw, host_buffer *b, bool flush) {
  if (b->coherent) return 0;
  VkMappedMemoryRange r = {.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE, .memory = b->memory, .size = VK_WHOLE_SIZE};
  VkResult res = flush ? raw->vk->vkFlushMappedMemoryRanges(raw->device, 1, &r)
                       : raw->vk->vkInvalidateMappedMemoryRanges(raw->device, 1, &r);
  return res == VK_SUCCESS ? 0 : -1;
}

static host_buffer *pinned_of(raw_baseline *raw, const void *p, size_t bytes) {
  for (host_buffer *b = raw->pinned; b; b = b->next)
    if ((const char *)p >= b->map && (const char *)p + bytes <= b->map + b->bytes) return b;
  return NULL;
}

static int vulkan_h2d(raw_baseline *raw, ferry_buffer dst, const void *src, size_t bytes) {
  host_buffer *pin = pinned_of(raw, src, bytes);
  if (pin) {
    if (sync_range(raw, pin, true)) return -1;
    return copy_wait(raw, pin->buffer, (VkDeviceSize)((const char *)src - pin->map), (VkBuffer)ferry_device_ptr(dst), 0,
                     bytes, false);
  }
  if (staging_for(raw, bytes)) return -1;
  memcpy(raw->staging.map, src, bytes);
  if (sync_range(raw, &raw->staging, true)) return -1;
  return copy_wait(raw, raw->staging.buffer, 0, (VkBuffer)ferry_device_ptr(dst), 0, bytes, false);
}

static int vulkan_d2h(raw_baseline *raw, ferry_buffer src, void *dst, size_t bytes) {
  host_buffer *pin = pinned_of(raw, dst, bytes);
  if (pin) {
    if (copy_wait(raw, (VkBuffer)ferry_device_ptr(src), 0, pin->buffer, (VkDeviceSize)((char *)dst - pin->map), bytes,
                  true))
      return -1;
    return sync_range(raw, pin, false);
  }
  if (staging_for(raw, bytes)) return -1;
  if (copy_wait(raw, (VkBuffer)ferry_device_ptr(src), 0, raw->staging.buffer, 0, bytes, true)) return -1;
  if (sync_range(raw, &raw->staging, false)) return -1;
  memcpy(dst, raw->staging.map, bytes);
  return 0;
}

static int vulkan_d2d(raw_baseline *raw, ferry_buffer src, ferry_buffer dst, size_t bytes) {
  return copy_wait(raw, (VkBuffer)ferry_device_ptr(src), 0, (VkBuffer)ferry_device_ptr(dst), 0, bytes, false);
}

static void *vulkan_host_alloc(raw_baseline *raw, size_t bytes) {
  host_buffer *b = calloc(1, sizeof *b);
  if (!b || host_buffer_make(raw, bytes, false, b)) {
    free(b);
    return NULL;
  }
  b->next = raw->pinned;
  raw->pinned = b;
  return b->map;
}

static void vulkan_host_free(raw_baseline *raw, void *ptr) {
  for (host_buffer **link = &raw->pinned; *link; link = &(*link)->next) {
    if ((*link)->map == ptr) {
      host_buffer *b = *link;
      *link = b->next;
      host_buffer_free(raw, b);
      free(b);
      return;
    }
  }
}

static int vulkan_alloc_free(raw_baseline *raw, size_t bytes) {
  const raw_vk_driver *vk = raw->vk;
  VkBufferCreateInfo info = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .size = bytes ? bytes : 1,
                             .usage = USAGE | VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VkBuffer buffer = VK_NULL_HANDLE;
  if (vk->vkCreateBuffer(raw->device, &info, NULL, &buffer) != VK_SUCCESS) return -1;
  VkMemoryRequirements req;
  vk->vkGetBufferMemoryRequirements(raw->device, buffer, &req);
  uint32_t type = UINT32_MAX;
  for (uint32_t i = 0; i < raw->memory.memoryTypeCount && type == UINT32_MAX; i++)
    if ((req.memoryTypeBits & (1u << i)) &&
        (raw->memory.memoryTypes[i].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT))
      type = i;
  for (uint32_t i = 0; i < raw->memory.memoryTypeCount && type == UINT32_MAX; i++)
    if (req.memoryTypeBits & (1u << i)) type = i;
  VkMemoryAllocateInfo alloc = {
      .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size, .memoryTypeIndex = type};
  VkDeviceMemory memory = VK_NULL_HANDLE;
  int rc = -1;
  if (vk->vkAllocateMemory(raw->device, &alloc, NULL, &memory) == VK_SUCCESS) {
    rc = vk->vkBindBufferMemory(raw->device, buffer, memory, 0) == VK_SUCCESS ? 0 : -1;
    vk->vkFreeMemory(raw->device, memory, NULL);
  }
  vk->vkDestroyBuffer(raw->device, buffer, NULL);
  return rc;
}

/* ---- the mapped way -------------------------------------------------------------- */

static bool vulkan_alt_available(raw_baseline *raw) { return raw->unified; }

/* The mapped buffer standing for ferry buffer `b`, made (or grown) on first use;
 * the one used least recently makes room. */
static host_buffer *shadow_of(raw_baseline *raw, ferry_buffer b, size_t bytes) {
  shadow *use = NULL;
  for (int i = 0; i < 2 && !use; i++)
    if (raw->shadows[i].id == b.id && raw->shadows[i].buf.bytes >= bytes) use = &raw->shadows[i];
  if (!use) {
    use = raw->shadows[0].stamp <= raw->shadows[1].stamp ? &raw->shadows[0] : &raw->shadows[1];
    host_buffer_free(raw, &use->buf);
    use->id = 0;
    if (host_buffer_make(raw, bytes, true, &use->buf)) return NULL;
    use->id = b.id;
  }
  use->stamp = ++raw->clock;
  return &use->buf;
}

static int vulkan_h2d_mapped(raw_baseline *raw, ferry_buffer dst, const void *src, size_t bytes) {
  host_buffer *s = shadow_of(raw, dst, bytes);
  if (!s) return -1;
  memcpy(s->map, src, bytes);
  return sync_range(raw, s, true);
}

static int vulkan_d2h_mapped(raw_baseline *raw, ferry_buffer src, void *dst, size_t bytes) {
  host_buffer *s = shadow_of(raw, src, bytes);
  if (!s || sync_range(raw, s, false)) return -1;
  memcpy(dst, s->map, bytes);
  return 0;
}

static int vulkan_d2d_mapped(raw_baseline *raw, ferry_buffer src, ferry_buffer dst, size_t bytes) {
  host_buffer *s = shadow_of(raw, src, bytes), *d = s ? shadow_of(raw, dst, bytes) : NULL;
  if (!d || sync_range(raw, s, false)) return -1;
  memcpy(d->map, s->map, bytes);
  return sync_range(raw, d, true);
}

/* The slots' command buffers and fences, once. */
static int slots_make(raw_baseline *raw) {
  if (raw->slots_made) return 0;
  const raw_vk_driver *vk = raw->vk;
  VkCommandBuffer cbs[ASYNC_SLOTS];
  VkCommandBufferAllocateInfo cb = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .commandPool = raw->pool,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = ASYNC_SLOTS};
  if (vk->vkAllocateCommandBuffers(raw->device, &cb, cbs) != VK_SUCCESS) return -1;
  VkFenceCreateInfo fence = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  for (int i = 0; i < ASYNC_SLOTS; i++) {
    raw->slots[i].cb = cbs[i];
    if (vk->vkCreateFence(raw->device, &fence, NULL, &raw->slots[i].fence) != VK_SUCCESS) return -1;
  }
  raw->slots_made = true;
  return 0;
}

static int slot_wait(raw_baseline *raw, async_slot *s) {
  if (!s->busy) return 0;
  s->busy = false;
  if (raw->vk->vkWaitForFences(raw->device, 1, &s->fence, VK_TRUE, UINT64_MAX) != VK_SUCCESS) return -1;
  return raw->vk->vkResetFences(raw->device, 1, &s->fence) == VK_SUCCESS ? 0 : -1;
}

/* As a program that queues writes without waiting would: each through a staging
 * buffer of its own while one is free (the slots in turn), waiting for the
 * oldest only when all eight are in flight. */
static int vulkan_h2d_async(raw_baseline *raw, ferry_buffer dst, const void *src, size_t bytes) {
  const raw_vk_driver *vk = raw->vk;
  if (slots_make(raw)) return -1;
  async_slot *s = &raw->slots[raw->next_slot++ % ASYNC_SLOTS];
  if (slot_wait(raw, s)) return -1;
  host_buffer *pin = pinned_of(raw, src, bytes);
  VkBuffer from;
  VkDeviceSize at = 0;
  if (pin) {
    if (sync_range(raw, pin, true)) return -1;
    from = pin->buffer;
    at = (VkDeviceSize)((const char *)src - pin->map);
  } else {
    if (s->staging.bytes < bytes) {
      host_buffer_free(raw, &s->staging);
      if (host_buffer_make(raw, bytes, false, &s->staging)) return -1;
    }
    memcpy(s->staging.map, src, bytes);
    if (sync_range(raw, &s->staging, true)) return -1;
    from = s->staging.buffer;
  }
  if (record_copy(raw, s->cb, from, at, (VkBuffer)ferry_device_ptr(dst), 0, bytes, false)) return -1;
  VkSubmitInfo submit = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &s->cb};
  if (vk->vkQueueSubmit(raw->queue, 1, &submit, s->fence) != VK_SUCCESS) return -1;
  s->busy = true;
  return 0;
}

static int vulkan_finish(raw_baseline *raw) {
  int rc = 0;
  for (int i = 0; i < ASYNC_SLOTS; i++)
    if (slot_wait(raw, &raw->slots[i])) rc = -1;
  raw->next_slot = 0;
  return rc;
}

/* both's queues and slots, once: two ferry queues of the device and their
 * VkQueues, which must be of the baseline's family (its command pool's). */
static int both_make(raw_baseline *raw) {
  if (raw->both_state) return raw->both_state > 0 ? 0 : -1;
  raw->both_state = -1;
  const raw_vk_driver *vk = raw->vk;
  VkCommandBuffer cbs[2];
  VkCommandBufferAllocateInfo cb = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .commandPool = raw->pool,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 2};
  VkFenceCreateInfo fence = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  if (vk->vkAllocateCommandBuffers(raw->device, &cb, cbs) != VK_SUCCESS) return -1;
  for (int i = 0; i < 2; i++) {
    ferry_native nat;
    raw->both_slot[i].cb = cbs[i];
    if (ferry_queue_create(raw->dev, &raw->both_q[i]) != FERRY_OK ||
        ferry_queue_native(raw->both_q[i], &nat) != FERRY_OK || !nat.queue || nat.queue_family != raw->family ||
        vk->vkCreateFence(raw->device, &fence, NULL, &raw->both_slot[i].fence) != VK_SUCCESS)
      return -1;
    raw->both_vq[i] = (VkQueue)nat.queue;
  }
  raw->both_state = 1;
  return 0;
}

/* The host side of one way: the caller's pinned block where it is one, else the
 * slot's staging buffer (grown to `bytes`). */
static host_buffer *both_side(raw_baseline *raw, async_slot *s, const void *p, size_t bytes, VkDeviceSize *at) {
  host_buffer *pin = pinned_of(raw, p, bytes);
  if (pin) {
    *at = (VkDeviceSize)((const char *)p - pin->map);
    return pin;
  }
  *at = 0;
  if (s->staging.bytes < bytes) {
    host_buffer_free(raw, &s->staging);
    if (host_buffer_make(raw, bytes, false, &s->staging)) return NULL;
  }
  return &s->staging;
}

/* Both directions at once, as a program with two queues would write it: the
 * write's bytes copied into its staging, both copies submitted (each on its own
 * queue, with its own fence), both fences waited for, the read's bytes copied out. */
static int vulkan_both(raw_baseline *raw, ferry_buffer dst_buf, const void *src, ferry_buffer src_buf, void *dst,
                       size_t bytes) {
  const raw_vk_driver *vk = raw->vk;
  if (both_make(raw)) return -1;
  VkDeviceSize up_at, down_at;
  host_buffer *up = both_side(raw, &raw->both_slot[0], src, bytes, &up_at);
  host_buffer *down = up ? both_side(raw, &raw->both_slot[1], dst, bytes, &down_at) : NULL;
  if (!down) return -1;
  if (up == &raw->both_slot[0].staging) memcpy(up->map, src, bytes);
  if (sync_range(raw, up, true) ||
      record_copy(raw, raw->both_slot[0].cb, up->buffer, up_at, (VkBuffer)ferry_device_ptr(dst_buf), 0, bytes, false) ||
      record_copy(raw, raw->both_slot[1].cb, (VkBuffer)ferry_device_ptr(src_buf), 0, down->buffer, down_at, bytes,
                  true))
    return -1;
  int rc = 0;
  for (int i = 0; i < 2; i++) {
    VkSubmitInfo submit = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &raw->both_slot[i].cb};
    if (vk->vkQueueSubmit(raw->both_vq[i], 1, &submit, raw->both_slot[i].fence) == VK_SUCCESS)
      raw->both_slot[i].busy = true;
    else
      rc = -1;
  }
  for (int i = 0; i < 2; i++)
    if (slot_wait(raw, &raw->both_slot[i])) rc = -1;
  if (rc || sync_range(raw, down, false)) return -1;
  if (down == &raw->both_slot[1].staging) memcpy(dst, down->map, bytes);
  return 0;
}

static const raw_ops vulkan_raw = {
    .backend = "vulkan",
    .h2d_name = "memcpy+vkCmdCopyBuffer",
    .d2h_name = "vkCmdCopyBuffer+memcpy",
    .d2d_name = "vkCmdCopyBuffer",
    .open = vulkan_open,
    .close = vulkan_close,
    .h2d = vulkan_h2d,
    .d2h = vulkan_d2h,
    .d2d = vulkan_d2d,
    .host_alloc = vulkan_host_alloc,
    .host_free = vulkan_host_free,
    .alloc_free = vulkan_alloc_free,
    .alloc_name = "vkCreateBuffer+vkAllocateMemory+vkBindBufferMemory, then the frees",
    .tag = "staging",
    .alt_available = vulkan_alt_available,
    .alt_tag = "mapped",
    .h2d_alt_name = "memcpy into mapped device-local memory",
    .d2h_alt_name = "memcpy out of mapped device-local memory",
    .d2d_alt_name = "memcpy between two mapped buffers",
    .h2d_alt = vulkan_h2d_mapped,
    .d2h_alt = vulkan_d2h_mapped,
    .d2d_alt = vulkan_d2d_mapped,
    .alt_own_memory = true,
    .h2d_async_name = "memcpy into one of 8 staging buffers + vkCmdCopyBuffer + vkQueueSubmit with a fence",
    .finish_name = "vkWaitForFences",
    .h2d_async = vulkan_h2d_async,
    .finish = vulkan_finish,
    .both_name = "a staged vkCmdCopyBuffer each way on two VkQueues (those of two ferry queues), each with its fence, "
                 "both waited for (both)",
    .both = vulkan_both,
};

const raw_ops *raw_vulkan_ops(void) { return &vulkan_raw; }
