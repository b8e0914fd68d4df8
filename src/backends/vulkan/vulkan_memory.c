/*
 * Memory: which memory types ferry uses, buffers (a VkBuffer with memory of its
 * own, or a slot in a shared block), buffers over the user's array
 * (VK_EXT_external_memory_host) and pinned host memory for the core's engine
 * (host-visible memory of the device's own, or imported host memory).
 *
 * Memory types. Ferry buffers take a device-local type of the largest
 * device-local heap. On CPU devices and integrated GPUs it prefers one that is
 * also host-visible and cached: the buffer is then mapped for good and written
 * and read by memcpy. On discrete GPUs it prefers a type that is NOT
 * host-visible (a host-visible device-local type is the small PCIe BAR window,
 * or with resizable BAR uncached memory across the bus): bytes go through
 * staging. Staging and pinned host memory take a host-visible type, cached and
 * coherent where there is one, not device-local on discrete GPUs.
 *
 * Blocks. Some drivers allow few live allocations (maxMemoryAllocationCount is
 * 4096 on NVIDIA), so where that count is limited, buffers of up to 4 MiB are
 * bound at offsets in shared blocks of 2-64 MiB, each split into equal slots of
 * one size class; a block goes back to the driver when its last buffer is freed.
 * Larger buffers have memory of their own.
 */
#include "vulkan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static VkDeviceSize round_up(VkDeviceSize v, VkDeviceSize align) {
  return align > 1 ? (v + align - 1) / align * align : v;
}

void ferry__vkb_sharing(const vkb_device *d, VkBufferCreateInfo *info) {
  if (d->family_count > 1) {
    info->sharingMode = VK_SHARING_MODE_CONCURRENT;
    info->queueFamilyIndexCount = d->family_count;
    info->pQueueFamilyIndices = d->families;
  } else {
    info->sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  }
}

/* ---- memory types --------------------------------------------------------------- */

static vkb_type type_of(const vkb_device *d, uint32_t index) {
  vkb_type t = {.index = VKB_NO_TYPE};
  if (index == VKB_NO_TYPE) return t;
  t.index = index;
  t.flags = d->memory.memoryTypes[index].propertyFlags;
  t.heap = d->memory.memoryTypes[index].heapIndex;
  t.coherent = (t.flags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) && !ferry__vkb_opts.noncoherent;
  return t;
}

/* Picks the allowed type with the best (lexicographic) score. */
typedef void (*score_fn)(const vkb_device *d, VkFlags flags, int score[3]);

static uint32_t best_type(const vkb_device *d, uint32_t bits, score_fn fn) {
  uint32_t best = VKB_NO_TYPE;
  int best_score[3] = {0, 0, 0};
  VkDeviceSize best_heap = 0;
  for (uint32_t i = 0; i < d->memory.memoryTypeCount && i < VK_MAX_MEMORY_TYPES; i++) {
    VkFlags f = d->memory.memoryTypes[i].propertyFlags;
    if (!(bits & (1u << i)) || (f & (VK_MEMORY_PROPERTY_PROTECTED_BIT | VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT)))
      continue;
    int score[3];
    fn(d, f, score);
    if (score[0] < 0) continue;
    VkDeviceSize heap = d->memory.memoryHeaps[d->memory.memoryTypes[i].heapIndex].size;
    int cmp = 0;
    for (int k = 0; k < 3 && cmp == 0; k++)
      cmp = (score[k] > best_score[k]) - (score[k] < best_score[k]);
    if (best == VKB_NO_TYPE || cmp > 0 || (cmp == 0 && heap > best_heap)) {
      best = i;
      memcpy(best_score, score, sizeof score);
      best_heap = heap;
    }
  }
  return best;
}

static void score_buffer(const vkb_device *d, VkFlags f, int s[3]) {
  bool local = f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, visible = f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
  bool cached = f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT, coherent = f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  s[0] = local ? 1 : 0;
  if (d->unified || !local) {
    s[1] = visible && cached ? 2 : visible ? 1 : 0; /* mapped and read back at memory speed */
    s[2] = coherent ? 1 : 0;
  } else {
    s[1] = visible ? 0 : 1; /* plain video memory, not the BAR window */
    s[2] = 0;
  }
}

static void score_staging(const vkb_device *d, VkFlags f, int s[3]) {
  if (!(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) {
    s[0] = -1;
    return;
  }
  bool local = f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  s[0] = d->unified || !local ? 1 : 0; /* host memory on discrete GPUs */
  s[1] = f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT ? 1 : 0;
  s[2] = f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT ? 1 : 0;
}

static void score_import(const vkb_device *d, VkFlags f, int s[3]) {
  (void)d;
  if (!(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) {
    s[0] = -1;
    return;
  }
  s[0] = f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT ? 1 : 0;
  s[1] = f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT ? 1 : 0;
  s[2] = 0;
}

const char *ferry__vkb_heap_text(vkb_device *d, uint32_t heap, char buf[256]) {
  char size[64], free_text[64];
  uint64_t free_bytes = 0;
  if (d->budget && ferry__vk()->vkGetPhysicalDeviceMemoryProperties2) {
    VkPhysicalDeviceMemoryBudgetPropertiesEXT b = {.sType =
                                                       VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 p = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, .pNext = &b};
    ferry__vk()->vkGetPhysicalDeviceMemoryProperties2(d->phys, &p);
    if (heap < VK_MAX_MEMORY_HEAPS && b.heapBudget[heap] > b.heapUsage[heap])
      free_bytes = b.heapBudget[heap] - b.heapUsage[heap];
  }
  int n = snprintf(buf, 256, "heap %u of %s", heap, ferry__bytes_text(d->memory.memoryHeaps[heap].size, size));
  if (free_bytes && n > 0 && n < 256)
    snprintf(buf + n, 256 - (size_t)n, ", %s free", ferry__bytes_text(free_bytes, free_text));
  return buf;
}

uint64_t ferry__vkb_free_memory(ferry_device *dev) {
  vkb_device *d = dev->impl;
  if (!d->budget || !ferry__vk()->vkGetPhysicalDeviceMemoryProperties2 || d->buf_type.index == VKB_NO_TYPE) return 0;
  VkPhysicalDeviceMemoryBudgetPropertiesEXT b = {.sType =
                                                     VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
  VkPhysicalDeviceMemoryProperties2 p = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, .pNext = &b};
  ferry__vk()->vkGetPhysicalDeviceMemoryProperties2(d->phys, &p);
  uint32_t h = d->buf_type.heap;
  return b.heapBudget[h] > b.heapUsage[h] ? b.heapBudget[h] - b.heapUsage[h] : 0;
}

/* Memory requirements of a buffer with `usage`, from a throwaway buffer (the
 * types and alignment are the same for every buffer of one usage). */
static ferry_status probe_requirements(ferry_device *dev, VkFlags usage, VkMemoryRequirements *out) {
  vkb_device *d = dev->impl;
  VkBufferCreateInfo info = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .size = 4096,
                             .usage = usage,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  ferry__vkb_sharing(d, &info);
  VkBuffer b = VK_NULL_HANDLE;
  VkResult r = ferry__vk()->vkCreateBuffer(d->device, &info, NULL, &b);
  if (r != VK_SUCCESS) return ferry__vkb_fail(dev, "vkCreateBuffer", r, "for a 4096-byte buffer (usage 0x%x)", usage);
  ferry__vk()->vkGetBufferMemoryRequirements(d->device, b, out);
  ferry__vk()->vkDestroyBuffer(d->device, b, NULL);
  return FERRY_OK;
}

ferry_status ferry__vkb_memory_setup(ferry_device *dev) {
  vkb_device *d = dev->impl;
  VkMemoryRequirements buf_req, staging_req;
  ferry_status st = probe_requirements(dev, VKB_BUFFER_USAGE, &buf_req);
  if (st == FERRY_OK) st = probe_requirements(dev, VKB_STAGING_USAGE, &staging_req);
  if (st != FERRY_OK) return st;
  d->buf_type = type_of(d, best_type(d, buf_req.memoryTypeBits, score_buffer));
  d->staging_type = type_of(d, best_type(d, staging_req.memoryTypeBits, score_staging));
  if (d->buf_type.index == VKB_NO_TYPE || d->staging_type.index == VKB_NO_TYPE)
    return ferry__fail(FERRY_ERROR_UNSUPPORTED,
                       "%s offers no memory type for %s buffers (memoryTypeBits 0x%x for storage buffers, 0x%x for "
                       "transfer buffers)",
                       dev->label, d->buf_type.index == VKB_NO_TYPE ? "storage" : "host-visible staging",
                       buf_req.memoryTypeBits, staging_req.memoryTypeBits);
  d->buf_align = buf_req.alignment ? buf_req.alignment : 1;
  d->atom = d->props.limits.nonCoherentAtomSize ? d->props.limits.nonCoherentAtomSize : 1;
  VkFlags f = d->buf_type.flags;
  d->mapped = !ferry__vkb_opts.staging && (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
              (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) && (d->unified || !(f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT));
  d->suballoc = !ferry__vkb_opts.nosuballoc &&
                (ferry__vkb_opts.suballoc || d->props.limits.maxMemoryAllocationCount < VKB_SUBALLOC_LIMIT);

  /* Sizes: the buffer type's heap bounds one buffer; total memory is the largest device-local heap. */
  d->max_allocation = d->memory.memoryHeaps[d->buf_type.heap].size;
  d->total_memory = 0;
  uint64_t largest = 0;
  for (uint32_t h = 0; h < d->memory.memoryHeapCount && h < VK_MAX_MEMORY_HEAPS; h++) {
    uint64_t size = d->memory.memoryHeaps[h].size;
    if ((d->memory.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && size > d->total_memory)
      d->total_memory = size;
    if (size > largest) largest = size;
  }
  if (d->total_memory == 0) d->total_memory = largest;
  return FERRY_OK;
}

/* ---- flushing ----------------------------------------------------------------- */

ferry_status ferry__vkb_flush(ferry_device *dev, VkDeviceMemory memory, VkDeviceSize mem_size, VkDeviceSize offset,
                              VkDeviceSize bytes, bool to_device) {
  vkb_device *d = dev->impl;
  VkDeviceSize start = offset / d->atom * d->atom;
  VkDeviceSize end = round_up(offset + bytes, d->atom);
  VkMappedMemoryRange range = {.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE,
                               .memory = memory,
                               .offset = start,
                               .size = end >= mem_size ? VK_WHOLE_SIZE : end - start};
  VkResult r = to_device ? ferry__vk()->vkFlushMappedMemoryRanges(d->device, 1, &range)
                         : ferry__vk()->vkInvalidateMappedMemoryRanges(d->device, 1, &range);
  if (r != VK_SUCCESS)
    return ferry__vkb_fail(dev, to_device ? "vkFlushMappedMemoryRanges" : "vkInvalidateMappedMemoryRanges", r,
                           "for bytes %llu..%llu of a mapping", (unsigned long long)offset,
                           (unsigned long long)(offset + bytes));
  return FERRY_OK;
}

/* ---- device memory ---------------------------------------------------------------- */

/* vkAllocateMemory with a sentence that names the size, the type and its heap. */
static ferry_status allocate(ferry_device *dev, VkDeviceSize bytes, const vkb_type *type, const void *next,
                             VkDeviceMemory *out) {
  vkb_device *d = dev->impl;
  VkMemoryAllocateInfo info = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .pNext = next,
                               .allocationSize = bytes,
                               .memoryTypeIndex = type->index};
  VkResult r = ferry__vk()->vkAllocateMemory(d->device, &info, NULL, out);
  if (r != VK_SUCCESS) {
    *out = VK_NULL_HANDLE;
    char size[64], heap[256], count[160] = "";
    if (r == VK_ERROR_TOO_MANY_OBJECTS)
      snprintf(count, sizeof count, " (%llu allocations live; the driver allows %u)",
               (unsigned long long)atomic_load(&d->allocations), d->props.limits.maxMemoryAllocationCount);
    return ferry__vkb_fail(dev, "vkAllocateMemory", r, "for %s in memory type %u (%s)%s",
                           ferry__bytes_text(bytes, size), type->index, ferry__vkb_heap_text(d, type->heap, heap),
                           count);
  }
  atomic_fetch_add(&d->allocations, 1);
  return FERRY_OK;
}

static void release(vkb_device *d, VkDeviceMemory memory) {
  if (!memory) return;
  ferry__vk()->vkFreeMemory(d->device, memory, NULL);
  atomic_fetch_sub(&d->allocations, 1);
}

static ferry_status map_memory(ferry_device *dev, VkDeviceMemory memory, VkDeviceSize bytes, char **out) {
  vkb_device *d = dev->impl;
  void *p = NULL;
  VkResult r = ferry__vk()->vkMapMemory(d->device, memory, 0, VK_WHOLE_SIZE, 0, &p);
  if (r != VK_SUCCESS || !p) {
    char size[64];
    return ferry__vkb_fail(dev, "vkMapMemory", r == VK_SUCCESS ? VK_ERROR_MEMORY_MAP_FAILED : r, "for %s",
                           ferry__bytes_text(bytes, size));
  }
  *out = p;
  return FERRY_OK;
}

static VkDeviceSize block_bytes_for(vkb_device *d, VkDeviceSize slot) {
  VkDeviceSize b = slot * 32;
  if (b < VKB_BLOCK_MIN) b = VKB_BLOCK_MIN;
  if (b > VKB_BLOCK_MAX) b = VKB_BLOCK_MAX;
  VkDeviceSize heap = d->memory.memoryHeaps[d->buf_type.heap].size;
  if (b > heap / 16) b = heap / 16;
  if (b < slot) b = slot;
  return b / slot * slot;
}

static bool slot_take(vkb_block *b, uint32_t *out) {
  for (uint32_t w = 0; w * 64 < b->slots; w++) {
    uint64_t free_bits = ~b->bitmap[w];
    if (!free_bits) continue;
    uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(free_bits);
    if (i >= b->slots) return false;
    b->bitmap[w] |= 1ull << (i % 64);
    b->used++;
    *out = i;
    return true;
  }
  return false;
}

static void block_destroy(vkb_device *d, vkb_block *b) {
  release(d, b->memory);
  free(b->bitmap);
  free(b);
}

/* A slot for a buffer with requirements `req`. */
static ferry_status block_take(ferry_device *dev, const VkMemoryRequirements *req, vkb_buffer *a) {
  vkb_device *d = dev->impl;
  VkDeviceSize align = req->alignment > 1 ? req->alignment : 1;
  if (d->mapped && !d->buf_type.coherent && d->atom > align) align = d->atom; /* flushes never touch a neighbour */
  /* The core's size classes, so that a class the core asks for fills a slot exactly. */
  VkDeviceSize slot_bytes = round_up(ferry__size_class((size_t)req->size), align);
  vkb_block *block = NULL;
  uint32_t slot = 0;
  pthread_mutex_lock(&d->alloc_lock);
  for (vkb_block *b = d->blocks; b && !block; b = b->next)
    if (b->slot_bytes == slot_bytes && b->used < b->slots && slot_take(b, &slot)) block = b;
  pthread_mutex_unlock(&d->alloc_lock);
  if (!block) {
    /* A new block, made outside the lock (vkAllocateMemory can take a while). */
    vkb_block *b = calloc(1, sizeof *b);
    VkDeviceSize bytes = block_bytes_for(d, slot_bytes);
    uint32_t slots = (uint32_t)(bytes / slot_bytes);
    uint64_t *bitmap = calloc((slots + 63) / 64, sizeof *bitmap);
    if (!b || !bitmap) {
      free(b);
      free(bitmap);
      return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory to track a block of %u buffers", slots);
    }
    b->bytes = bytes;
    b->slot_bytes = slot_bytes;
    b->slots = slots;
    b->bitmap = bitmap;
    ferry_status st = allocate(dev, bytes, &d->buf_type, NULL, &b->memory);
    if (st == FERRY_OK && d->mapped) st = map_memory(dev, b->memory, bytes, &b->map);
    if (st != FERRY_OK) {
      block_destroy(d, b);
      return st;
    }
    slot_take(b, &slot);
    pthread_mutex_lock(&d->alloc_lock);
    b->next = d->blocks;
    d->blocks = b;
    pthread_mutex_unlock(&d->alloc_lock);
    block = b;
  }
  a->block = block;
  a->slot = slot;
  a->memory = block->memory;
  a->mem_size = block->bytes;
  a->offset = (VkDeviceSize)slot * slot_bytes;
  a->map = block->map ? block->map + a->offset : NULL;
  return FERRY_OK;
}

static void block_give(vkb_device *d, vkb_buffer *a) {
  vkb_block *b = a->block, *dead = NULL;
  pthread_mutex_lock(&d->alloc_lock);
  b->bitmap[a->slot / 64] &= ~(1ull << (a->slot % 64));
  if (--b->used == 0) {
    for (vkb_block **link = &d->blocks; *link; link = &(*link)->next) {
      if (*link == b) {
        *link = b->next;
        dead = b;
        break;
      }
    }
  }
  pthread_mutex_unlock(&d->alloc_lock);
  if (dead) block_destroy(d, dead);
}

static ferry_status own_memory(ferry_device *dev, const VkMemoryRequirements *req, vkb_buffer *a) {
  vkb_device *d = dev->impl;
  ferry_status st = allocate(dev, req->size, &d->buf_type, NULL, &a->memory);
  if (st != FERRY_OK) return st;
  a->mem_size = req->size;
  a->offset = 0;
  if (d->mapped && (st = map_memory(dev, a->memory, req->size, &a->map)) != FERRY_OK) {
    release(d, a->memory);
    a->memory = VK_NULL_HANDLE;
  }
  return st;
}

ferry_status ferry__vkb_alloc(ferry_device *dev, size_t bytes, ferry_mem *out) {
  vkb_device *d = dev->impl;
  char size[64];
  vkb_buffer *a = calloc(1, sizeof *a);
  if (!a) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory to track a buffer on %s", dev->label);
  VkBufferCreateInfo info = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .size = bytes,
                             .usage = VKB_BUFFER_USAGE,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  ferry__vkb_sharing(d, &info);
  VkResult r = ferry__vk()->vkCreateBuffer(d->device, &info, NULL, &a->buffer);
  if (r != VK_SUCCESS) {
    char heap[256];
    free(a);
    return ferry__vkb_fail(dev, "vkCreateBuffer", r, "for a buffer of %s in memory type %u (%s)",
                           ferry__bytes_text(bytes, size), d->buf_type.index,
                           ferry__vkb_heap_text(d, d->buf_type.heap, heap));
  }
  VkMemoryRequirements req;
  ferry__vk()->vkGetBufferMemoryRequirements(d->device, a->buffer, &req);
  ferry_status st;
  if (!(req.memoryTypeBits & (1u << d->buf_type.index)))
    st = ferry__fail(FERRY_ERROR_BACKEND,
                     "vkGetBufferMemoryRequirements on %s: a buffer of %s cannot live in memory type %u "
                     "(memoryTypeBits 0x%x)",
                     dev->label, ferry__bytes_text(bytes, size), d->buf_type.index, req.memoryTypeBits);
  else if (d->suballoc && req.size <= VKB_SUBALLOC_MAX)
    st = block_take(dev, &req, a);
  else
    st = own_memory(dev, &req, a);
  if (st == FERRY_OK &&
      (r = ferry__vk()->vkBindBufferMemory(d->device, a->buffer, a->memory, a->offset)) != VK_SUCCESS) {
    st = ferry__vkb_fail(dev, "vkBindBufferMemory", r, "for a %s buffer at offset %llu", ferry__bytes_text(bytes, size),
                         (unsigned long long)a->offset);
    if (a->block)
      block_give(d, a);
    else
      release(d, a->memory);
  }
  if (st != FERRY_OK) {
    ferry__vk()->vkDestroyBuffer(d->device, a->buffer, NULL);
    free(a);
    return st;
  }
  a->bytes = bytes;
  a->coherent = d->buf_type.coherent;
  /* Mapped coherent memory is plain host memory the core copies itself, except
   * under FERRY_VULKAN_DEBUG=shader, where copies are to reach the copy shader. */
  bool plain = a->map && a->coherent && !ferry__vkb_opts.shader;
  *out = (ferry_mem){.handle = (uintptr_t)a->buffer, .host = plain ? a->map : NULL, .impl = a, .bytes = bytes};
  return FERRY_OK;
}

ferry_status ferry__vkb_free(ferry_device *dev, ferry_mem *mem) {
  vkb_device *d = dev->impl;
  vkb_buffer *a = mem->impl;
  ferry__vk()->vkDestroyBuffer(d->device, a->buffer, NULL);
  if (a->block)
    block_give(d, a);
  else
    release(d, a->memory); /* unmaps too */
  free(a);
  return FERRY_OK;
}

/* ---- buffers over the user's array ------------------------------------------------- */

/* A VkBuffer of `usage` over host memory the device imports
 * (VK_EXT_external_memory_host), mapped where the memory type is not coherent
 * (flush and invalidate need it; the bytes are read and written through the
 * host's own pointer). Fills *out (buffer, memory, mem_size, coherent). */
static ferry_status import_host(ferry_device *dev, void *host, size_t bytes, VkFlags usage, vkb_pin *out) {
  vkb_device *d = dev->impl;
  char size[64];
  VkMemoryHostPointerPropertiesEXT props = {.sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
  VkResult r =
      d->get_host_pointer_properties(d->device, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, host, &props);
  if (r != VK_SUCCESS)
    return ferry__vkb_fail(dev, "vkGetMemoryHostPointerPropertiesEXT", r, "for host memory at %p (%s)", host,
                           ferry__bytes_text(bytes, size));
  vkb_pin p = {.mem_size = bytes};
  VkExternalMemoryBufferCreateInfo external = {.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
                                               .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT};
  VkBufferCreateInfo info = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .pNext = &external,
                             .size = bytes,
                             .usage = usage,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  ferry__vkb_sharing(d, &info);
  r = ferry__vk()->vkCreateBuffer(d->device, &info, NULL, &p.buffer);
  if (r != VK_SUCCESS)
    return ferry__vkb_fail(dev, "vkCreateBuffer", r, "for a buffer of %s over host memory",
                           ferry__bytes_text(bytes, size));
  VkMemoryRequirements req;
  ferry__vk()->vkGetBufferMemoryRequirements(d->device, p.buffer, &req);
  vkb_type type = type_of(d, best_type(d, req.memoryTypeBits & props.memoryTypeBits, score_import));
  ferry_status st = FERRY_OK;
  if (type.index == VKB_NO_TYPE)
    st = ferry__fail(FERRY_ERROR_BACKEND,
                     "%s has no host-visible memory type for a buffer over host memory at %p (the pointer allows "
                     "types 0x%x, the buffer 0x%x)",
                     dev->label, host, props.memoryTypeBits, req.memoryTypeBits);
  else if (req.size > bytes)
    st = ferry__fail(FERRY_ERROR_BACKEND,
                     "vkGetBufferMemoryRequirements on %s: a buffer over %zu bytes of host memory needs %llu bytes",
                     dev->label, bytes, (unsigned long long)req.size);
  VkImportMemoryHostPointerInfoEXT import = {.sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
                                             .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
                                             .pHostPointer = host};
  if (st == FERRY_OK) st = allocate(dev, bytes, &type, &import, &p.memory);
  if (st == FERRY_OK && (r = ferry__vk()->vkBindBufferMemory(d->device, p.buffer, p.memory, 0)) != VK_SUCCESS)
    st = ferry__vkb_fail(dev, "vkBindBufferMemory", r, "for a buffer over host memory at %p (%s)", host,
                         ferry__bytes_text(bytes, size));
  p.coherent = type.coherent;
  char *mapping = NULL;
  if (st == FERRY_OK && !p.coherent) st = map_memory(dev, p.memory, bytes, &mapping);
  if (st != FERRY_OK) {
    release(d, p.memory);
    ferry__vk()->vkDestroyBuffer(d->device, p.buffer, NULL);
    return st;
  }
  *out = p;
  return FERRY_OK;
}

ferry_status ferry__vkb_host_ptr_import(ferry_device *dev, void *host, size_t bytes, ferry_mem *out,
                                        ferry_refusal *why) {
  *why = FERRY_REFUSAL_DRIVER;
  vkb_buffer *a = calloc(1, sizeof *a);
  if (!a) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory to track a buffer on %s", dev->label);
  vkb_pin p;
  ferry_status st = import_host(dev, host, bytes, VKB_BUFFER_USAGE, &p);
  if (st != FERRY_OK) {
    free(a);
    return st;
  }
  a->buffer = p.buffer;
  a->memory = p.memory;
  a->coherent = p.coherent;
  a->vk_mapped = !p.coherent;
  a->imported = true;
  a->map = host;
  a->bytes = bytes;
  a->mem_size = bytes;
  *out = (ferry_mem){.handle = (uintptr_t)a->buffer, .host = a->coherent ? host : NULL, .impl = a, .bytes = bytes};
  *why = FERRY_REFUSAL_NONE;
  return FERRY_OK;
}

ferry_status ferry__vkb_host_ptr_sync(ferry_device *dev, ferry_mem *mem, ferry_sync_dir dir) {
  vkb_buffer *a = mem->impl;
  if (a->coherent) return FERRY_OK; /* ferry's own transfers are complete; the host sees every byte */
  return ferry__vkb_flush(dev, a->memory, a->mem_size, 0, a->bytes, dir == FERRY_SYNC_TO_DEVICE);
}

ferry_status ferry__vkb_host_ptr_release(ferry_device *dev, ferry_mem *mem) {
  vkb_device *d = dev->impl;
  vkb_buffer *a = mem->impl;
  ferry_status st = FERRY_OK;
  if (!a->coherent)
    st = ferry__vkb_flush(dev, a->memory, a->mem_size, 0, a->bytes, false); /* the array's latest bytes */
  ferry__vk()->vkDestroyBuffer(d->device, a->buffer, NULL);
  release(d, a->memory);
  free(a);
  return st;
}

/* ---- pinned host memory for the core's engine --------------------------------------- */

/* A host-visible buffer of `bytes` in the staging memory type, mapped. */
static ferry_status staging_create(ferry_device *dev, size_t bytes, vkb_pin *pin, char **out_map) {
  vkb_device *d = dev->impl;
  char size[64], heap[256];
  if ((uint64_t)bytes > d->memory.memoryHeaps[d->staging_type.heap].size)
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY,
                       "%s of pinned host memory asked, but memory type %u of %s lives in %s",
                       ferry__bytes_text(bytes, size), d->staging_type.index, dev->label,
                       ferry__vkb_heap_text(d, d->staging_type.heap, heap));
  VkBufferCreateInfo info = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .size = bytes,
                             .usage = VKB_STAGING_USAGE,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  ferry__vkb_sharing(d, &info);
  VkBuffer buffer = VK_NULL_HANDLE;
  VkResult r = ferry__vk()->vkCreateBuffer(d->device, &info, NULL, &buffer);
  if (r != VK_SUCCESS)
    return ferry__vkb_fail(dev, "vkCreateBuffer", r, "for a %s staging buffer", ferry__bytes_text(bytes, size));
  VkMemoryRequirements req;
  ferry__vk()->vkGetBufferMemoryRequirements(d->device, buffer, &req);
  VkDeviceMemory memory = VK_NULL_HANDLE;
  char *map = NULL;
  ferry_status st = FERRY_OK;
  if (!(req.memoryTypeBits & (1u << d->staging_type.index)))
    st = ferry__fail(FERRY_ERROR_BACKEND, "a staging buffer on %s cannot live in memory type %u (memoryTypeBits 0x%x)",
                     dev->label, d->staging_type.index, req.memoryTypeBits);
  if (st == FERRY_OK) st = allocate(dev, req.size, &d->staging_type, NULL, &memory);
  if (st == FERRY_OK && (r = ferry__vk()->vkBindBufferMemory(d->device, buffer, memory, 0)) != VK_SUCCESS)
    st = ferry__vkb_fail(dev, "vkBindBufferMemory", r, "for a %s staging buffer", ferry__bytes_text(bytes, size));
  if (st == FERRY_OK) st = map_memory(dev, memory, req.size, &map);
  if (st != FERRY_OK) {
    release(d, memory);
    ferry__vk()->vkDestroyBuffer(d->device, buffer, NULL);
    return st;
  }
  *pin = (vkb_pin){.buffer = buffer, .memory = memory, .mem_size = req.size, .coherent = d->staging_type.coherent};
  *out_map = map;
  return FERRY_OK;
}

ferry_status ferry__vkb_pin_alloc(ferry_device *dev, size_t bytes, void **out_base, uintptr_t *out_token) {
  vkb_pin *pin = malloc(sizeof *pin);
  if (!pin) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory to track a pinned block on %s", dev->label);
  char *map = NULL;
  ferry_status st = staging_create(dev, bytes, pin, &map);
  if (st != FERRY_OK) {
    free(pin);
    return st;
  }
  *out_base = map;
  *out_token = (uintptr_t)pin;
  return FERRY_OK;
}

/* Imports the block (VK_EXT_external_memory_host) and binds a transfer buffer over it. */
ferry_status ferry__vkb_pin_register(ferry_device *dev, void *base, size_t bytes, uintptr_t *out_token) {
  vkb_device *d = dev->impl;
  char size[64];
  if (!d->host_ptr || (uintptr_t)base % d->host_ptr_alignment || bytes % d->host_ptr_alignment)
    return ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s cannot import host memory at %p (%s)", dev->label, base,
                       ferry__bytes_text(bytes, size));
  vkb_pin *pin = malloc(sizeof *pin);
  if (!pin) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory to track a pinned block on %s", dev->label);
  ferry_status st = import_host(dev, base, bytes, VKB_STAGING_USAGE, pin);
  if (st != FERRY_OK) {
    free(pin);
    return st;
  }
  *out_token = (uintptr_t)pin;
  return FERRY_OK;
}

void ferry__vkb_pin_release(ferry_device *dev, void *base, size_t bytes, uintptr_t token, bool allocated) {
  (void)base;
  (void)bytes;
  (void)allocated;
  vkb_device *d = dev->impl;
  vkb_pin *pin = (vkb_pin *)token;
  ferry__vk()->vkDestroyBuffer(d->device, pin->buffer, NULL);
  release(d, pin->memory); /* unmaps too */
  free(pin);
}

void ferry__vkb_memory_teardown(vkb_device *d) {
  while (d->blocks) {
    vkb_block *b = d->blocks;
    d->blocks = b->next;
    block_destroy(d, b);
  }
}
