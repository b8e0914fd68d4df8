/*
 * The vulkan backend beyond the conformance suite:
 *  - device info comes from the driver (name, heaps, limits, host-pointer alignment,
 *    the queue and its family);
 *  - driver failures name the call and the VkResult, out-of-memory the bytes and the heap;
 *  - the engine's ops (pin_alloc, pin_register, dma_start, dma_wait): DMA between
 *    pinned memory, the device's own or imported, and buffers;
 *  - thousands of small buffers share a few blocks of device memory where ferry
 *    sub-allocates (NVIDIA allows 4096 live allocations);
 *  - threads transferring and copying on one device at once;
 *  - lanes, tickets and gates called directly (order on a lane, a gate holding
 *    its lane until raised, waits between lanes, timing markers, fills of every
 *    pattern size at every alignment, non-coherent bookkeeping, threads on one
 *    lane), and two queues of the device through the API;
 *  - a missing or wrong loader library is a skipped backend with the reason.
 * Each runs as the device comes and with FERRY_VULKAN_DEBUG forcing the staging,
 * non-coherent and sub-allocation paths, and the device without timeline
 * semaphores (unless FERRY_VULKAN_DEBUG is set already).
 */
#include "backends/vulkan/vulkan_internal.h"
#include "core/internal.h"
#include "harness.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool has_extension(const ferry_vk_api *vk, VkPhysicalDevice phys, const char *name) {
  uint32_t n = 0;
  vk->vkEnumerateDeviceExtensionProperties(phys, NULL, &n, NULL);
  VkExtensionProperties *e = calloc(n ? n : 1, sizeof *e);
  vk->vkEnumerateDeviceExtensionProperties(phys, NULL, &n, e);
  bool found = false;
  for (uint32_t i = 0; i < n && !found; i++)
    found = strcmp(e[i].extensionName, name) == 0;
  free(e);
  return found;
}

/* ---- device info ------------------------------------------------------------------- */

static void info_from_driver(ferry_device *dev, const ferry_device_info *info) {
  const ferry_vk_api *vk = ferry__vulkan_api();
  CHECK(vk != NULL);
  if (!vk) return;
  ferry_native nat;
  CHECK_OK(ferry_device_native(dev, &nat));
  VkPhysicalDevice phys = (VkPhysicalDevice)nat.device;
  VkPhysicalDeviceProperties p;
  vk->vkGetPhysicalDeviceProperties(phys, &p);
  CHECK_MSG(strcmp(info->name, p.deviceName) == 0, "name %s, driver says %s", info->name, p.deviceName);
  CHECK(info->is_cpu == (p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU));
  CHECK(!info->zero_copy);

  VkPhysicalDeviceMemoryProperties m;
  vk->vkGetPhysicalDeviceMemoryProperties(phys, &m);
  uint64_t largest_local = 0, largest = 0;
  for (uint32_t h = 0; h < m.memoryHeapCount; h++) {
    if ((m.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && m.memoryHeaps[h].size > largest_local)
      largest_local = m.memoryHeaps[h].size;
    if (m.memoryHeaps[h].size > largest) largest = m.memoryHeaps[h].size;
  }
  CHECK(info->total_memory == (largest_local ? largest_local : largest));
  CHECK(info->max_allocation > 0 && info->max_allocation <= largest);

  if (vk->vkGetPhysicalDeviceProperties2 && p.apiVersion >= VK_API_VERSION_1_1) {
    VkPhysicalDeviceExternalMemoryHostPropertiesEXT host = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
    VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    bool ext = has_extension(vk, phys, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
    if (ext) m3.pNext = &host;
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &m3};
    vk->vkGetPhysicalDeviceProperties2(phys, &p2);
    CHECK_MSG(info->max_allocation <= m3.maxMemoryAllocationSize, "max_allocation %llu, maxMemoryAllocationSize %llu",
              (unsigned long long)info->max_allocation, (unsigned long long)m3.maxMemoryAllocationSize);
    /* The same layout read twice must agree (a check on ferry's own declarations). */
    CHECK(p2.properties.limits.nonCoherentAtomSize == p.limits.nonCoherentAtomSize);
    CHECK(p2.properties.limits.maxMemoryAllocationCount == p.limits.maxMemoryAllocationCount);
    CHECK(p2.properties.sparseProperties.residencyNonResidentStrict == p.sparseProperties.residencyNonResidentStrict);
    if (ext) {
      CHECK(info->host_ptr);
      CHECK_MSG(info->host_ptr_alignment == host.minImportedHostPointerAlignment,
                "host_ptr_alignment %zu, minImportedHostPointerAlignment %llu", info->host_ptr_alignment,
                (unsigned long long)host.minImportedHostPointerAlignment);
    }
  }
  if (!info->host_ptr) CHECK(info->host_ptr_alignment == 1);

  uint32_t nf = 0;
  vk->vkGetPhysicalDeviceQueueFamilyProperties(phys, &nf, NULL);
  VkQueueFamilyProperties *fam = calloc(nf ? nf : 1, sizeof *fam);
  vk->vkGetPhysicalDeviceQueueFamilyProperties(phys, &nf, fam);
  CHECK(nat.queue_family < nf);
  if (nat.queue_family < nf) CHECK(fam[nat.queue_family].queueFlags & VK_QUEUE_COMPUTE_BIT);
  free(fam);
  VkQueue q = NULL;
  vk->vkGetDeviceQueue((VkDevice)nat.context, nat.queue_family, 0, &q);
  CHECK(q == (VkQueue)nat.queue);
}

/* ---- failures ------------------------------------------------------------------------ */

static void failures(ferry_device *dev, const ferry_device_info *info) {
  CHECK(strcmp(ferry__vulkan_result_name(VK_ERROR_OUT_OF_DEVICE_MEMORY), "VK_ERROR_OUT_OF_DEVICE_MEMORY") == 0);
  CHECK(strcmp(ferry__vulkan_result_name(VK_ERROR_DEVICE_LOST), "VK_ERROR_DEVICE_LOST") == 0);
  CHECK(strcmp(ferry__vulkan_result_name(12345), "VkResult") == 0);

  float f[16];
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_STATUS(ferry_alloc_zero_copy(dev, ferry_array_of(f, 16, FERRY_FLOAT32), &b), FERRY_ERROR_UNSUPPORTED);
  CHECK_ERROR_HAS("vulkan");

  /* Past what the core lets through: the driver says no, and ferry says what was asked and where. */
  ferry_mem mem;
  size_t huge = (size_t)1 << 40;
  ferry_status st = dev->ops->alloc(dev, huge, &mem);
  if (st == FERRY_OK) {
    dev->ops->free(dev, &mem); /* a driver that promises a terabyte: nothing to check */
  } else {
    CHECK_STATUS(st, FERRY_ERROR_OUT_OF_MEMORY);
    CHECK_ERROR_HAS("VK_ERROR_OUT_OF_");
    CHECK_ERROR_HAS("1099511627776");
    CHECK_ERROR_HAS("heap");
    CHECK_ERROR_HAS(info->name);
  }
  void *p = (void *)0x1;
  /* More than the machine has: the core refuses before the driver sees it. */
  CHECK_STATUS(ferry_host_alloc(dev, SIZE_MAX - 100, &p), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_ERROR_HAS("this machine has"); /* the core refuses more than the host has, for every backend */
  CHECK(p == (void *)0x1);
  if (dev->caps & FERRY_CAP_STAGE) { /* pinned memory of the device's own: its heap bounds it */
    uint64_t heap = 0;
    for (uint32_t h = 0; h < VK_MAX_MEMORY_HEAPS; h++)
      if (((vkb_device *)dev->impl)->memory.memoryHeaps[h].size > heap)
        heap = ((vkb_device *)dev->impl)->memory.memoryHeaps[h].size;
    if (heap + 4096 < ferry__host_ram()) {
      CHECK_STATUS(ferry_host_alloc(dev, (size_t)heap + 4096, &p), FERRY_ERROR_OUT_OF_MEMORY);
      CHECK_ERROR_HAS("heap");
    }
  }
}

/* ---- DMA through pinned memory ------------------------------------------------------- */

static void dma(ferry_device *dev, const ferry_device_info *info) {
  const ferry_device_ops *ops = dev->ops;
  enum { PIECES = 6 };
  const size_t piece = (size_t)1 << 20, bytes = piece * PIECES;
  void *base = NULL, *base2 = NULL;
  uintptr_t token = 0, token2 = 0;
  unsigned char *plain = malloc(bytes);
  CHECK_OK(ops->pin_alloc(dev, bytes, &base, &token));
  CHECK_OK(ops->pin_alloc(dev, bytes, &base2, &token2));
  unsigned char *pin = base, *pin2 = base2;
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, bytes, FERRY_UINT8, &b));
  ferry_slot *slot = NULL;
  if (!pin || !pin2 || !plain || ferry__acquire(b, "test", &slot) != FERRY_OK) {
    CHECK(false);
    goto done;
  }
  ferry_ticket tickets[PIECES];
  fill_pattern(pin, bytes, 501);
  for (size_t i = 0; i < PIECES; i++) {
    ferry_pinned p = {.host = pin + i * piece, .token = token, .offset = i * piece};
    CHECK_OK(ops->dma_start(dev, NULL, FERRY_DMA_TO_DEVICE, &slot->mem, i * piece, &p, piece, &tickets[i]));
  }
  for (size_t i = 0; i < PIECES; i++)
    CHECK_OK(ferry__ticket_finish(dev, tickets[i]));
  CHECK_OK(ferry_read(b, 0, plain, bytes));
  CHECK_MSG(find_pattern_mismatch(plain, bytes, 501) == SIZE_MAX, "after DMA to the device");

  memset(pin2, 0, bytes);
  for (size_t i = 0; i < PIECES; i++) {
    ferry_pinned p = {.host = pin2 + i * piece, .token = token2, .offset = i * piece};
    CHECK_OK(ops->dma_start(dev, NULL, FERRY_DMA_TO_HOST, &slot->mem, i * piece, &p, piece, &tickets[i]));
  }
  for (size_t i = 0; i < PIECES; i++)
    CHECK_OK(ferry__ticket_finish(dev, tickets[i]));
  CHECK_MSG(find_pattern_mismatch(pin2, bytes, 501) == SIZE_MAX, "after DMA to the host");

  /* A block of another allocator, imported (VK_EXT_external_memory_host). */
  if (info->host_ptr) {
    unsigned char *other = harness_aligned(4096, bytes);
    uintptr_t t = 0;
    CHECK_OK(ops->pin_register(dev, other, bytes, &t));
    fill_pattern(other, bytes, 504);
    ferry_pinned p = {.host = other + 4096, .token = t, .offset = 4096};
    CHECK_OK(ops->dma_start(dev, NULL, FERRY_DMA_TO_DEVICE, &slot->mem, 100, &p, 10000, &tickets[0]));
    CHECK_OK(ferry__ticket_finish(dev, tickets[0]));
    CHECK_OK(ferry_read(b, 100, plain, 10000));
    CHECK(memcmp(plain, other + 4096, 10000) == 0);
    ops->pin_release(dev, other, bytes, t, false);
    free(other);
  }
  /* Plain writes and reads through ferry_host_alloc memory. */
  unsigned char *host = NULL;
  CHECK_OK(ferry_host_alloc(dev, bytes, (void **)&host));
  if (host) {
    fill_pattern(host, bytes, 503);
    CHECK_OK(ferry_write(b, 0, host, bytes));
    memset(plain, 0, bytes);
    CHECK_OK(ferry_read(b, 0, plain, bytes));
    CHECK(find_pattern_mismatch(plain, bytes, 503) == SIZE_MAX);
    CHECK_OK(ferry_read(b, 5, host + 3, 1000));
    CHECK(memcmp(host + 3, plain + 5, 1000) == 0);
    CHECK_OK(ferry_host_free(host));
  }
  ferry__release(slot);
done:
  CHECK_OK(ferry_free(b));
  if (pin) ops->pin_release(dev, base, bytes, token, true);
  if (pin2) ops->pin_release(dev, base2, bytes, token2, true);
  free(plain);
}

/* ---- copies within the device ---------------------------------------------------------- */

/* Large copies run a compute shader on 16-byte words with vkCmdCopyBuffer for the
 * ends; copies whose offsets differ modulo 16, and small ones, run vkCmdCopyBuffer. */
static void device_copies(ferry_device *dev, const ferry_device_info *info, const char *mode) {
  (void)info;
  const size_t bytes = (size_t)6 << 20;
  unsigned char *amodel = malloc(bytes), *bmodel = malloc(bytes), *back = malloc(bytes);
  fill_pattern(amodel, bytes, 601);
  fill_pattern(bmodel, bytes, 602);
  ferry_buffer a = FERRY_NULL_BUFFER, b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, bytes, FERRY_UINT8, &a));
  CHECK_OK(ferry_alloc(dev, bytes, FERRY_UINT8, &b));
  CHECK_OK(ferry_write(a, 0, amodel, bytes));
  CHECK_OK(ferry_write(b, 0, bmodel, bytes));
  const struct {
    size_t so, doff, n;
  } cases[] = {
      {0, 0, bytes},                   /* whole buffers */
      {5, 21, ((size_t)1 << 20) + 7},  /* equal modulo 16: unaligned ends, aligned middle */
      {16, 48, (size_t)2 << 20},       /* aligned throughout */
      {3, 4, ((size_t)1 << 20) + 100}, /* offsets differ modulo 16 */
      {1, 1, ((size_t)3 << 20) + 15},  /* odd start and length */
      {7, 7, 100},                     /* small */
      {bytes - 17, bytes - 1, 1},      /* the last byte */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    CHECK_OK(ferry_copy(a, cases[i].so, b, cases[i].doff, cases[i].n));
    memcpy(bmodel + cases[i].doff, amodel + cases[i].so, cases[i].n);
    memset(back, 0, bytes);
    CHECK_OK(ferry_read(b, 0, back, bytes));
    size_t at = SIZE_MAX;
    for (size_t k = 0; k < bytes && at == SIZE_MAX; k++)
      if (back[k] != bmodel[k]) at = k;
    CHECK_MSG(at == SIZE_MAX, "copy %zu (%zu -> %zu, %zu bytes): byte %zu differs", i, cases[i].so, cases[i].doff,
              cases[i].n, at);
  }
  /* Within one buffer, apart. */
  CHECK_OK(ferry_copy(a, 32, a, (size_t)4 << 20, ((size_t)1 << 20) + 48));
  memmove(amodel + ((size_t)4 << 20), amodel + 32, ((size_t)1 << 20) + 48);
  CHECK_OK(ferry_read(a, 0, back, bytes));
  CHECK(memcmp(back, amodel, bytes) == 0);
  vkb_device *d = dev->impl;
  if (strstr(mode, "staging") && !strstr(mode, "noshader"))
    CHECK_MSG(d->copier.ready, "the copy shader was not used (copy_shader %d, failed %d)", d->copy_shader,
              d->copier.failed);
  CHECK_OK(ferry_free(a));
  CHECK_OK(ferry_free(b));
  free(amodel);
  free(bmodel);
  free(back);
}

/* ---- many small buffers ---------------------------------------------------------------- */

static void many_small_buffers(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  vkb_device *d = dev->impl;
  enum { COUNT = 6000, BYTES = 1000 };
  CHECK_OK(ferry_device_trim(dev));
  uint64_t before = atomic_load(&d->allocations);
  ferry_buffer *b = calloc(COUNT, sizeof *b);
  unsigned char h[BYTES], back[BYTES];
  int made = 0;
  for (int i = 0; i < COUNT; i++) {
    if (ferry_alloc(dev, BYTES, FERRY_UINT8, &b[i]) != FERRY_OK) {
      CHECK_MSG(false, "buffer %d of %d: %s", i, COUNT, ferry_last_error());
      break;
    }
    made++;
    fill_pattern(h, BYTES, (uint32_t)i);
    CHECK_OK(ferry_write(b[i], 0, h, BYTES));
  }
  uint64_t during = atomic_load(&d->allocations) - before;
  if (d->suballoc)
    CHECK_MSG(during <= 8, "%d buffers of %d bytes took %llu allocations", made, BYTES, (unsigned long long)during);
  for (int i = 0; i < made; i += 97) {
    CHECK_OK(ferry_read(b[i], 0, back, BYTES));
    CHECK(find_pattern_mismatch(back, BYTES, (uint32_t)i) == SIZE_MAX);
  }
  /* Free every other one, reuse their places, check the survivors. */
  for (int i = 0; i < made; i += 2)
    CHECK_OK(ferry_free(b[i]));
  CHECK_OK(ferry_device_trim(dev));
  for (int i = 0; i < made; i += 2) {
    CHECK_OK(ferry_alloc(dev, BYTES / 2, FERRY_UINT8, &b[i]));
    fill_pattern(h, BYTES / 2, (uint32_t)i + 7);
    CHECK_OK(ferry_write(b[i], 0, h, BYTES / 2));
  }
  for (int i = 0; i < made; i += 31) {
    size_t n = i % 2 ? BYTES : BYTES / 2;
    CHECK_OK(ferry_read(b[i], 0, back, n));
    CHECK(find_pattern_mismatch(back, n, (uint32_t)i + (i % 2 ? 0 : 7)) == SIZE_MAX);
  }
  for (int i = 0; i < made; i++)
    CHECK_OK(ferry_free(b[i]));
  CHECK_OK(ferry_device_trim(dev));
  CHECK_MSG(atomic_load(&d->allocations) == before, "allocations %llu after freeing everything, %llu before",
            (unsigned long long)atomic_load(&d->allocations), (unsigned long long)before);
  free(b);
}

/* ---- threads ---------------------------------------------------------------------------- */

typedef struct worker {
  ferry_device *dev;
  uint32_t seed;
  int failures;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  uint32_t rng = w->seed * 2654435761u + 1;
  for (int it = 0; it < 24; it++) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    size_t n = 1 + rng % (3u << 20);
    unsigned char *h = malloc(n), *back = malloc(n);
    fill_pattern(h, n, rng);
    ferry_buffer a = FERRY_NULL_BUFFER, c = FERRY_NULL_BUFFER;
    bool ok = ferry_alloc(w->dev, n, FERRY_UINT8, &a) == FERRY_OK &&
              ferry_alloc(w->dev, n, FERRY_UINT8, &c) == FERRY_OK && ferry_write(a, 0, h, n) == FERRY_OK &&
              ferry_copy(a, 0, c, 0, n) == FERRY_OK && ferry_read(c, 0, back, n) == FERRY_OK;
    if (!ok) {
      fprintf(stderr, "thread %u: %s\n", w->seed, ferry_last_error());
      w->failures++;
    } else if (find_pattern_mismatch(back, n, rng) != SIZE_MAX) {
      fprintf(stderr, "thread %u: %zu bytes differ after write, copy, read\n", w->seed, n);
      w->failures++;
    }
    ferry_free(a);
    ferry_free(c);
    free(h);
    free(back);
  }
  return NULL;
}

static void threads(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  enum { THREADS = 6 };
  pthread_t t[THREADS];
  worker w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){.dev = dev, .seed = (uint32_t)i + 1};
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  int failures = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    failures += w[i].failures;
  }
  CHECK_MSG(failures == 0, "%d failed iterations", failures);
  CHECK_OK(ferry_device_synchronize(dev));
}

/* ---- lanes, tickets and gates, called directly ----------------------------------------- */

/* A buffer with its slot, for the ops. */
typedef struct vbuf {
  ferry_buffer b;
  ferry_slot *slot;
  size_t bytes;
} vbuf;

static bool vbuf_make(ferry_device *dev, size_t bytes, vbuf *out) {
  *out = (vbuf){.b = FERRY_NULL_BUFFER, .bytes = bytes};
  if (ferry_alloc(dev, bytes, FERRY_UINT8, &out->b) != FERRY_OK) return false;
  return ferry__acquire(out->b, "test", &out->slot) == FERRY_OK;
}

static void vbuf_free(vbuf *v) {
  if (v->slot) ferry__release(v->slot);
  if (v->b.id) CHECK_OK(ferry_free(v->b));
  *v = (vbuf){.b = FERRY_NULL_BUFFER};
}

/* The buffer's bytes as device memory holds them now, read by the host without
 * any lane (so that work held behind a gate cannot hide behind the read): through
 * the buffer's mapping, or a mapping of its memory made here. False where the
 * memory is not host-visible (a discrete GPU). */
static bool peek(ferry_device *dev, const vbuf *v, size_t off, void *out, size_t n) {
  vkb_device *d = dev->impl;
  vkb_buffer *a = v->slot->mem.impl;
  const ferry_vk_api *vk = ferry__vulkan_api();
  if (a->map) {
    if (!a->coherent) CHECK_OK(ferry__vkb_flush(dev, a->memory, a->mem_size, a->offset + off, n, false));
    memcpy(out, a->map + off, n);
    return true;
  }
  if (!(d->buf_type.flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) return false;
  void *p = NULL;
  if (vk->vkMapMemory(d->device, a->memory, 0, VK_WHOLE_SIZE, 0, &p) != VK_SUCCESS || !p) return false;
  if (!a->coherent) {
    VkMappedMemoryRange r = {
        .sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE, .memory = a->memory, .size = VK_WHOLE_SIZE};
    vk->vkInvalidateMappedMemoryRanges(d->device, 1, &r);
  }
  memcpy(out, (char *)p + a->offset + off, n);
  vk->vkUnmapMemory(d->device, a->memory);
  return true;
}

static bool all_bytes(const unsigned char *p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != v) return false;
  return true;
}

static void nap_ms(int ms) {
  struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static uint64_t lane_last(ferry_lane *lane) {
  vkb_lane *l = (vkb_lane *)lane;
  pthread_mutex_lock(&l->lock);
  uint64_t v = l->last;
  pthread_mutex_unlock(&l->lock);
  return v;
}

/* Waits for and releases a ticket. */
static ferry_status finish_ticket(ferry_device *dev, ferry_ticket t) { return ferry__ticket_finish(dev, t); }

/* Work on one lane runs in the order pushed, without the pushes waiting. */
static void lane_order(ferry_device *dev, ferry_lane *lane, vbuf *a, vbuf *b, unsigned char *pin, uintptr_t token) {
  const ferry_device_ops *ops = dev->ops;
  size_t n = a->bytes;
  uint8_t x = 0x11, y = 0x22;
  uint64_t before = lane_last(lane);
  CHECK_OK(ops->fill_start(dev, lane, &a->slot->mem, 0, n, x, 1, NULL));
  CHECK_OK(ops->copy_start(dev, lane, &a->slot->mem, 0, &b->slot->mem, 0, n, NULL));
  CHECK_OK(ops->fill_start(dev, lane, &a->slot->mem, 0, n, y, 1, NULL));
  memset(pin, 0, n);
  ferry_pinned p = {.host = pin, .token = token, .offset = 0};
  CHECK_OK(ops->dma_start(dev, lane, FERRY_DMA_TO_HOST, &b->slot->mem, 0, &p, n, NULL));
  CHECK_MSG(lane_last(lane) == before + 4, "4 pushes, lane values %llu -> %llu", (unsigned long long)before,
            (unsigned long long)lane_last(lane));
  ferry_ticket t = 0;
  CHECK_OK(ops->marker(dev, lane, false, &t));
  CHECK(t != 0);
  CHECK(lane_last(lane) == before + 4); /* a marker without timing submits nothing */
  CHECK_OK(ops->ticket_wait(dev, t));
  CHECK_OK(ops->ticket_query(dev, t));
  CHECK_OK(ops->ticket_wait(dev, t)); /* any number of times before the release */
  ops->ticket_release(dev, t);
  CHECK_MSG(all_bytes(pin, n, x), "the DMA after copy and fill: byte 0 is 0x%02x, not 0x%02x", pin[0], x);
  unsigned char *back = malloc(n);
  CHECK_OK(ferry_read(a->b, 0, back, n));
  CHECK(all_bytes(back, n, y));
  /* A chain of dependent work: 40 fills of one range, each copied on; the last wins. */
  for (uint32_t k = 0; k < 40; k++) {
    CHECK_OK(ops->fill_start(dev, lane, &a->slot->mem, 0, n, 0x30 + k, 1, NULL));
    CHECK_OK(ops->copy_start(dev, lane, &a->slot->mem, 0, &b->slot->mem, 0, n, NULL));
  }
  ferry_ticket last = 0;
  CHECK_OK(ops->dma_start(dev, lane, FERRY_DMA_TO_HOST, &b->slot->mem, 0, &p, n, &last));
  CHECK(last != 0);
  CHECK_OK(finish_ticket(dev, last));
  CHECK_MSG(all_bytes(pin, n, 0x30 + 39), "after 40 fills and copies: byte 0 is 0x%02x", pin[0]);
  free(back);
}

/* A gate holds its lane until raised: a copy behind it does not land before. */
static void gate_holds(ferry_device *dev, ferry_lane *lane, vbuf *a, vbuf *b) {
  const ferry_device_ops *ops = dev->ops;
  size_t n = a->bytes;
  unsigned char *look = malloc(n);
  CHECK_OK(ferry_fill(a->b, 0, n, &(uint8_t){0x55}, 1));
  CHECK_OK(ferry_fill(b->b, 0, n, &(uint8_t){0x44}, 1));
  ferry_gate *g = NULL;
  CHECK_OK(ops->gate_create(dev, &g));
  CHECK_OK(ops->gate_push(dev, lane, g, 2));
  ferry_ticket t = 0;
  CHECK_OK(ops->copy_start(dev, lane, &a->slot->mem, 0, &b->slot->mem, 0, n, &t));
  nap_ms(60);
  CHECK_STATUS(ops->ticket_query(dev, t), FERRY_NOT_READY);
  bool seen = peek(dev, b, 0, look, n);
  if (seen) CHECK_MSG(all_bytes(look, n, 0x44), "the copy behind the gate landed before the raise");
  CHECK_OK(ops->gate_raise(dev, g, 1)); /* not yet what it waits for */
  nap_ms(30);
  CHECK_STATUS(ops->ticket_query(dev, t), FERRY_NOT_READY);
  if (seen && peek(dev, b, 0, look, n)) CHECK_MSG(all_bytes(look, n, 0x44), "the copy landed at gate value 1 of 2");
  CHECK_OK(ops->gate_raise(dev, g, 2));
  CHECK_OK(ops->ticket_wait(dev, t));
  CHECK_OK(ops->ticket_query(dev, t));
  ops->ticket_release(dev, t);
  if (seen && peek(dev, b, 0, look, n)) CHECK(all_bytes(look, n, 0x55));
  CHECK_OK(ops->gate_raise(dev, g, 2)); /* again: nothing to do */
  ops->gate_destroy(dev, g);
  /* The pool gives the same gate back, starting where it was left: it holds again. */
  ferry_gate *g2 = NULL;
  CHECK_OK(ops->gate_create(dev, &g2));
  CHECK(g2 == g);
  CHECK_OK(ferry_fill(b->b, 0, n, &(uint8_t){0x66}, 1));
  CHECK_OK(ops->gate_push(dev, lane, g2, 1));
  CHECK_OK(ops->copy_start(dev, lane, &a->slot->mem, 0, &b->slot->mem, 0, n, &t));
  nap_ms(60);
  CHECK_STATUS(ops->ticket_query(dev, t), FERRY_NOT_READY);
  if (seen && peek(dev, b, 0, look, n)) CHECK_MSG(all_bytes(look, n, 0x66), "a pooled gate did not hold its lane");
  CHECK_OK(ops->gate_raise(dev, g2, 1));
  CHECK_OK(finish_ticket(dev, t));
  CHECK_OK(ferry_read(b->b, 0, look, n));
  CHECK(all_bytes(look, n, 0x55));
  ops->gate_destroy(dev, g2);
  free(look);
}

/* lane_wait: another lane of the device waits on the device; others are declined. */
static void lanes_wait(ferry_device *dev, ferry_lane *l1, ferry_lane *l2, vbuf *a, vbuf *b, vbuf *c) {
  const ferry_device_ops *ops = dev->ops;
  size_t n = a->bytes;
  unsigned char *look = malloc(n);
  fill_pattern(look, n, 77);
  CHECK_OK(ferry_write(a->b, 0, look, n));
  CHECK_OK(ferry_fill(b->b, 0, n, &(uint8_t){0}, 1));
  CHECK_OK(ferry_fill(c->b, 0, n, &(uint8_t){0}, 1));
  ferry_gate *g = NULL;
  CHECK_OK(ops->gate_create(dev, &g));
  CHECK_OK(ops->gate_push(dev, l1, g, 1));
  ferry_ticket t1 = 0, t2 = 0;
  CHECK_OK(ops->copy_start(dev, l1, &a->slot->mem, 0, &b->slot->mem, 0, n, &t1));
  uint64_t before = lane_last(l2);
  CHECK_OK(ops->lane_wait(dev, l2, dev, t1));
  CHECK_MSG(lane_last(l2) == before + 1, "a wait for a pending ticket of another lane is a submission");
  CHECK_OK(ops->copy_start(dev, l2, &b->slot->mem, 0, &c->slot->mem, 0, n, &t2));
  nap_ms(50);
  CHECK_STATUS(ops->ticket_query(dev, t2), FERRY_NOT_READY);
  CHECK_OK(ops->gate_raise(dev, g, 1));
  CHECK_OK(ops->ticket_wait(dev, t2));
  CHECK_OK(ferry_read(c->b, 0, look, n));
  CHECK_MSG(find_pattern_mismatch(look, n, 77) == SIZE_MAX, "the second lane's copy ran before the first's");
  /* Complete, or the lane's own: no submission. */
  before = lane_last(l2);
  CHECK_OK(ops->lane_wait(dev, l2, dev, t1));
  CHECK_OK(ops->lane_wait(dev, l2, dev, t2));
  CHECK(lane_last(l2) == before);
  /* Another device's ticket: the core waits on the host instead. */
  for (size_t i = 0; i < ferry_device_count(); i++) {
    ferry_device *other = NULL;
    ferry_device_get(i, &other);
    if (other != dev) {
      CHECK_STATUS(ops->lane_wait(dev, l2, other, t1), FERRY_ERROR_UNSUPPORTED);
      break;
    }
  }
  ops->ticket_release(dev, t1);
  ops->ticket_release(dev, t2);
  ops->gate_destroy(dev, g);
  free(look);
}

/* Timing markers: the device's clock between two, on one queue. */
static void timing(ferry_device *dev, ferry_lane *lane, vbuf *big) {
  vkb_device *d = dev->impl;
  const ferry_device_ops *ops = dev->ops;
  vkb_lane *l = (vkb_lane *)lane;
  bool stamps = l->home->timestamp_bits > 0 && d->props.limits.timestampPeriod > 0;
  ferry_ticket s = 0, e = 0;
  double t0 = ferry__now();
  CHECK_OK(ops->marker(dev, lane, true, &s));
  for (int k = 0; k < 4; k++)
    CHECK_OK(ops->fill_start(dev, lane, &big->slot->mem, 0, big->bytes, 0x01010101u * (uint32_t)k, 4, NULL));
  CHECK_OK(ops->marker(dev, lane, true, &e));
  CHECK(s != 0 && e != 0);
  CHECK_OK(ops->ticket_wait(dev, e));
  double host_ms = (ferry__now() - t0) * 1e3;
  CHECK_OK(ops->ticket_query(dev, s));
  double ms = 0, back = 0;
  if (!stamps) {
    CHECK_STATUS(ops->ticket_elapsed(dev, s, e, &ms), FERRY_ERROR_UNSUPPORTED);
  } else {
    CHECK_OK(ops->ticket_elapsed(dev, s, e, &ms));
    CHECK_OK(ops->ticket_elapsed(dev, e, s, &back));
    CHECK_MSG(ms > 0 && ms <= host_ms + 1.0, "4 fills of %zu bytes: %.3f ms on the device's clock, %.3f on the host's",
              big->bytes, ms, host_ms);
    CHECK_MSG(back < 0 && back > -ms * 1.0001 - 1e-6 && back < -ms * 0.9999 + 1e-6, "stop to start: %.6f ms, not %.6f",
              back, -ms);
    printf("  4 fills of %zu MiB: %.3f ms between timing markers (%.3f ms on the host)\n", big->bytes >> 20, ms,
           host_ms);
  }
  ops->ticket_release(dev, s);
  ops->ticket_release(dev, e);
}

/* Fills of every pattern size at every offset and length near the 4-byte
 * boundaries vkCmdFillBuffer needs, pushed in a row on one lane (they overlap:
 * order matters too), against a model. */
static void fills(ferry_device *dev, ferry_lane *lane) {
  const ferry_device_ops *ops = dev->ops;
  const size_t bytes = 2048;
  vbuf f;
  CHECK(vbuf_make(dev, bytes, &f));
  unsigned char *model = malloc(bytes), *back = malloc(bytes);
  fill_pattern(model, bytes, 91);
  CHECK_OK(ferry_write(f.b, 0, model, bytes));
  const size_t lens[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 15, 16, 17, 63, 64, 65, 100, 333, 1027};
  const unsigned sizes[] = {1, 2, 4};
  unsigned pushed = 0;
  for (size_t si = 0; si < 3; si++) {
    unsigned ps = sizes[si];
    for (size_t off = 0; off < 12; off++)
      for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li], at = off + 37 * li % 512;
        uint32_t pattern = 0xa1b2c3d4u ^ (uint32_t)(off * 131 + li * 7 + ps);
        unsigned char pat[4];
        memcpy(pat, &pattern, 4);
        ferry_status st = ops->fill_start(dev, lane, &f.slot->mem, at, n, pattern, ps, NULL);
        CHECK_MSG(st == FERRY_OK, "fill of %zu bytes at %zu, pattern size %u: %s", n, at, ps, ferry_last_error());
        for (size_t i = 0; i < n; i++)
          model[at + i] = pat[i % ps];
        pushed++;
      }
    ferry_ticket t = 0;
    CHECK_OK(ops->marker(dev, lane, false, &t));
    CHECK_OK(finish_ticket(dev, t));
    CHECK_OK(ferry_read(f.b, 0, back, bytes));
    size_t at = SIZE_MAX;
    for (size_t i = 0; i < bytes && at == SIZE_MAX; i++)
      if (back[i] != model[i]) at = i;
    CHECK_MSG(at == SIZE_MAX, "fills with %u-byte patterns: byte %zu is 0x%02x, not 0x%02x", ps, at,
              at < bytes ? back[at] : 0, at < bytes ? model[at] : 0);
  }
  /* The public calls, which take offsets and lengths in whole patterns. */
  const uint16_t p16 = 0xbeef;
  const uint32_t p32 = 0x01234567u;
  CHECK_OK(ferry_fill(f.b, 2, 1002, &p16, 2));
  for (size_t i = 0; i < 1002; i++)
    model[2 + i] = ((const unsigned char *)&p16)[i % 2];
  CHECK_OK(ferry_fill(f.b, 1004, 36, &p32, 4));
  for (size_t i = 0; i < 36; i++)
    model[1004 + i] = ((const unsigned char *)&p32)[i % 4];
  CHECK_OK(ferry_read(f.b, 0, back, bytes));
  CHECK(memcmp(back, model, bytes) == 0);
  vbuf_free(&f);
  free(model);
  free(back);
  (void)pushed;
}

/* Non-coherent pinned memory: what the DMAs leave to do is done by the time
 * anyone can know they are complete. */
static void noncoherent_bookkeeping(ferry_device *dev, ferry_lane *l1, ferry_lane *l2, vbuf *a, unsigned char *pin,
                                    uintptr_t token) {
  vkb_device *d = dev->impl;
  const ferry_device_ops *ops = dev->ops;
  const vkb_pin *vp = (const vkb_pin *)token;
  if (vp->coherent) return;
  size_t n = a->bytes;
  ferry_pinned p = {.host = pin, .token = token, .offset = 0};
  ferry_ticket t = 0, w = 0;
  CHECK_OK(ferry_fill(a->b, 0, n, &(uint8_t){0x5c}, 1));
  memset(pin, 0, n);
  CHECK_OK(ops->dma_start(dev, l1, FERRY_DMA_TO_HOST, &a->slot->mem, 0, &p, n, &t));
  CHECK(atomic_load(&d->inval_count) >= 1);
  /* Seen complete through another lane that waited for it: invalidated all the same. */
  CHECK_OK(ops->lane_wait(dev, l2, dev, t));
  CHECK_OK(ops->marker(dev, l2, false, &w));
  CHECK_OK(finish_ticket(dev, w));
  CHECK_MSG(atomic_load(&d->inval_count) == 0, "%u invalidations left after a later ticket completed",
            (unsigned)atomic_load(&d->inval_count));
  CHECK(all_bytes(pin, n, 0x5c));
  ops->ticket_release(dev, t);
  /* Behind a gate: flushed again when the gate is raised, after the host wrote. */
  ferry_gate *g = NULL;
  CHECK_OK(ops->gate_create(dev, &g));
  CHECK_OK(ops->gate_push(dev, l1, g, 1));
  CHECK_OK(ops->dma_start(dev, l1, FERRY_DMA_TO_DEVICE, &a->slot->mem, 0, &p, n, &t));
  CHECK(((vkb_gate *)g)->flushes != NULL);
  memset(pin, 0x7e, n); /* the host's bytes, written after the push */
  CHECK_OK(ops->gate_raise(dev, g, 1));
  CHECK(((vkb_gate *)g)->flushes == NULL);
  CHECK_OK(finish_ticket(dev, t));
  unsigned char *back = malloc(n);
  CHECK_OK(ferry_read(a->b, 0, back, n));
  CHECK_MSG(all_bytes(back, n, 0x7e), "bytes written after the push, before the raise, did not arrive");
  free(back);
  ops->gate_destroy(dev, g);
}

/* Threads pushing on one lane at once, each waiting for its own markers. */
typedef struct lane_worker {
  ferry_device *dev;
  ferry_lane *lane;
  vbuf a, b;
  int failures;
} lane_worker;

enum { LANE_THREADS = 4, LANE_ROUNDS = 30 };

static void *lane_work(void *arg) {
  lane_worker *w = arg;
  const ferry_device_ops *ops = w->dev->ops;
  unsigned char *back = malloc(w->a.bytes);
  for (int r = 0; r < LANE_ROUNDS; r++) {
    uint8_t v = (uint8_t)(r * 7 + (int)(uintptr_t)w % 5);
    ferry_ticket t = 0;
    bool ok = ops->fill_start(w->dev, w->lane, &w->a.slot->mem, 1, w->a.bytes - 2, v, 1, NULL) == FERRY_OK &&
              ops->copy_start(w->dev, w->lane, &w->a.slot->mem, 0, &w->b.slot->mem, 0, w->a.bytes, NULL) == FERRY_OK &&
              ops->marker(w->dev, w->lane, false, &t) == FERRY_OK && ferry__ticket_finish(w->dev, t) == FERRY_OK &&
              ferry_read(w->b.b, 1, back, w->a.bytes - 2) == FERRY_OK;
    if (!ok || !all_bytes(back, w->a.bytes - 2, v)) {
      fprintf(stderr, "lane worker round %d: %s\n", r, ok ? "wrong bytes" : ferry_last_error());
      w->failures++;
    }
  }
  free(back);
  return NULL;
}

static void lane_threads(ferry_device *dev, ferry_lane *lane) {
  lane_worker w[LANE_THREADS];
  pthread_t t[LANE_THREADS];
  uint64_t before = lane_last(lane);
  for (int i = 0; i < LANE_THREADS; i++) {
    w[i] = (lane_worker){.dev = dev, .lane = lane};
    CHECK(vbuf_make(dev, 4096 + (size_t)i * 1000, &w[i].a));
    CHECK(vbuf_make(dev, 4096 + (size_t)i * 1000, &w[i].b));
  }
  for (int i = 0; i < LANE_THREADS; i++)
    pthread_create(&t[i], NULL, lane_work, &w[i]);
  int failures = 0;
  for (int i = 0; i < LANE_THREADS; i++) {
    pthread_join(t[i], NULL);
    failures += w[i].failures;
    vbuf_free(&w[i].a);
    vbuf_free(&w[i].b);
  }
  CHECK_MSG(failures == 0, "%d failed rounds", failures);
  CHECK_MSG(lane_last(lane) == before + 2 * LANE_THREADS * LANE_ROUNDS, "lane values %llu -> %llu for %d pushes",
            (unsigned long long)before, (unsigned long long)lane_last(lane), 2 * LANE_THREADS * LANE_ROUNDS);
}

/* Driver failures on the lane paths: each names the call, the VkResult and the
 * numbers; a submission that failed leaves the lane's chain as it was. */
static VkResult FERRY_VKAPI failing_submit(VkQueue q, uint32_t n, const VkSubmitInfo *s, VkFence f) {
  (void)q, (void)n, (void)s, (void)f;
  return VK_ERROR_OUT_OF_DEVICE_MEMORY;
}
static VkResult FERRY_VKAPI failing_signal(VkDevice d, const VkSemaphoreSignalInfo *s) {
  (void)d, (void)s;
  return VK_ERROR_DEVICE_LOST;
}
static VkResult FERRY_VKAPI failing_counter(VkDevice d, VkSemaphore s, uint64_t *v) {
  (void)d, (void)s, (void)v;
  return VK_ERROR_DEVICE_LOST;
}

static void lane_failures(ferry_device *dev, ferry_lane *lane, vbuf *a) {
  vkb_device *d = dev->impl;
  const ferry_device_ops *ops = dev->ops;
  ferry_vk_api *vk = (ferry_vk_api *)(uintptr_t)ferry__vulkan_api(); /* the test swaps entry points */
  PFN_vkQueueSubmit submit = vk->vkQueueSubmit;
  uint64_t before = lane_last(lane);
  vk->vkQueueSubmit = failing_submit;
  CHECK_STATUS(ops->fill_start(dev, lane, &a->slot->mem, 3, 100, 0x77, 1, NULL), FERRY_ERROR_OUT_OF_MEMORY);
  vk->vkQueueSubmit = submit;
  CHECK_ERROR_HAS("vkQueueSubmit returned VK_ERROR_OUT_OF_DEVICE_MEMORY (-2)");
  CHECK_ERROR_HAS("a fill of 100 bytes at offset 3 with a 1-byte pattern");
  CHECK_ERROR_HAS("timeline value");
  CHECK_ERROR_HAS(dev->label);
  CHECK(lane_last(lane) == before);
  /* The chain goes on from where it was: the next push is not waiting for the lost value. */
  ferry_ticket t = 0;
  CHECK_OK(ops->fill_start(dev, lane, &a->slot->mem, 3, 100, 0x78, 1, &t));
  CHECK_OK(finish_ticket(dev, t));
  unsigned char back[100];
  CHECK_OK(ferry_read(a->b, 3, back, sizeof back));
  CHECK(all_bytes(back, sizeof back, 0x78));

  ferry_gate *g = NULL;
  CHECK_OK(ops->gate_create(dev, &g));
  PFN_vkSignalSemaphore signal = d->signal_semaphore;
  d->signal_semaphore = failing_signal;
  CHECK_STATUS(ops->gate_raise(dev, g, 1), FERRY_ERROR_BACKEND);
  d->signal_semaphore = signal;
  CHECK_ERROR_HAS("vkSignalSemaphore returned VK_ERROR_DEVICE_LOST (-4)");
  CHECK_ERROR_HAS("raising a gate to 1");
  CHECK_OK(ops->gate_raise(dev, g, 1)); /* not raised by the failed call: now it is */
  ops->gate_destroy(dev, g);

  CHECK_OK(ops->gate_create(dev, &g));
  CHECK_OK(ops->gate_push(dev, lane, g, 1));
  CHECK_OK(ops->fill_start(dev, lane, &a->slot->mem, 0, 8, 0x79, 1, &t));
  PFN_vkGetSemaphoreCounterValue counter = d->get_counter;
  d->get_counter = failing_counter;
  CHECK_STATUS(ops->ticket_query(dev, t), FERRY_ERROR_BACKEND);
  d->get_counter = counter;
  CHECK_ERROR_HAS("vkGetSemaphoreCounterValue returned VK_ERROR_DEVICE_LOST (-4)");
  CHECK_OK(ops->gate_raise(dev, g, 1));
  CHECK_OK(finish_ticket(dev, t));
  ops->gate_destroy(dev, g);
}

/* Each new lane is at home on the VkQueue fewest lanes are: a queue of its own
 * while the family has one that no lane uses, then the least shared; a lane
 * destroyed gives its place back. */
static void lane_homes(ferry_device *dev) {
  vkb_device *d = dev->impl;
  const ferry_device_ops *ops = dev->ops;
  ferry_lane *l[VKB_COMPUTE_QUEUES + 1] = {0};
  uint32_t n = d->compute_count + 1, before[VKB_COMPUTE_QUEUES] = {0};
  bool equal = true;
  for (uint32_t k = 0; k < d->compute_count; k++) {
    before[k] = d->queues[k].lanes;
    equal = equal && before[k] == before[0];
  }
  for (uint32_t i = 0; i < n; i++) {
    uint32_t least = UINT32_MAX;
    for (uint32_t k = 0; k < d->compute_count; k++)
      if (d->queues[k].lanes < least) least = d->queues[k].lanes;
    CHECK_OK(ops->lane_create(dev, &l[i]));
    if (!l[i]) break;
    const vkb_lane *v = (const vkb_lane *)l[i];
    CHECK_MSG(v->home->lanes == least + 1, "lane %u went to a VkQueue with %u lanes; the least used had %u", i,
              v->home->lanes - 1, least);
    for (uint32_t j = 0; equal && j < i && i < d->compute_count; j++)
      CHECK_MSG(((const vkb_lane *)l[j])->home != v->home, "lanes %u and %u share a VkQueue of %u", j, i,
                d->compute_count);
  }
  printf("  %u VkQueue(s) of family %u for lanes\n", d->compute_count, d->compute->family);
  for (uint32_t i = 0; i < n; i++)
    if (l[i]) ops->lane_destroy(dev, l[i]);
  for (uint32_t k = 0; k < d->compute_count; k++)
    CHECK_MSG(d->queues[k].lanes == before[k], "VkQueue %u: %u lanes after, %u before", k, d->queues[k].lanes,
              before[k]);
}

static void lanes(ferry_device *dev, const ferry_device_info *info, const char *mode) {
  (void)info;
  vkb_device *d = dev->impl;
  const ferry_device_ops *ops = dev->ops;
  if (!d->timeline) {
    /* No lanes: the core runs queues on its thread; every op still works (above). */
    CHECK(ops->lane_create == NULL && ops->gate_create == NULL && ops->marker == NULL && ops->fill_start != NULL);
    CHECK_MSG(strstr(mode, "notimeline") != NULL, "lavapipe has timeline semaphores; only notimeline turns them off");
    return;
  }
  CHECK(!strstr(mode, "notimeline"));
  CHECK(ops->lane_create && ops->marker && ops->lane_wait && ops->ticket_query && ops->ticket_elapsed);
  lane_homes(dev);
  if (!strstr(mode, "gates")) {
    /* Gates only where asked for (vulkan.c says why); the lanes are tested in the
     * modes with gates, and the queues below either way. */
    CHECK(ops->gate_create == NULL && ops->gate_push == NULL && ops->gate_raise == NULL && ops->gate_destroy == NULL);
    return;
  }
  CHECK(ops->gate_create && ops->gate_push && ops->gate_raise && ops->gate_destroy);
  ferry_lane *l1 = NULL, *l2 = NULL;
  CHECK_OK(ops->lane_create(dev, &l1));
  CHECK_OK(ops->lane_create(dev, &l2));
  if (!l1 || !l2) return;
  /* The lane's queue, as ferry_queue_native gives it. */
  ferry_native nat = {0};
  CHECK_OK(ops->lane_native(dev, l1, &nat));
  const ferry_vk_api *vk = ferry__vulkan_api();
  bool found = false;
  for (uint32_t i = 0; i < d->compute_count && !found; i++) {
    VkQueue q = NULL;
    vk->vkGetDeviceQueue(d->device, nat.queue_family, i, &q);
    found = q == (VkQueue)nat.queue;
  }
  CHECK_MSG(found, "lane_native's queue is none of family %u's", nat.queue_family);
  /* Nothing pushed yet: a marker is complete already. */
  ferry_ticket t = 1;
  CHECK_OK(ops->marker(dev, l1, false, &t));
  CHECK(t == 0);

  const size_t n = ((size_t)1 << 20) + 3;
  vbuf a, b, c, big;
  CHECK(vbuf_make(dev, n, &a));
  CHECK(vbuf_make(dev, n, &b));
  CHECK(vbuf_make(dev, n, &c));
  CHECK(vbuf_make(dev, (size_t)32 << 20, &big));
  void *base = NULL;
  uintptr_t token = 0;
  CHECK_OK(ops->pin_alloc(dev, n, &base, &token));
  if (a.slot && b.slot && c.slot && big.slot && base) {
    lane_order(dev, l1, &a, &b, base, token);
    gate_holds(dev, l1, &a, &b);
    lanes_wait(dev, l1, l2, &a, &b, &c);
    timing(dev, l1, &big);
    fills(dev, l1);
    noncoherent_bookkeeping(dev, l1, l2, &a, base, token);
    lane_threads(dev, l1);
    lane_failures(dev, l1, &a);
  }
  if (base) ops->pin_release(dev, base, n, token, true);
  vbuf_free(&a);
  vbuf_free(&b);
  vbuf_free(&c);
  vbuf_free(&big);
  ops->lane_destroy(dev, l1);
  ops->lane_destroy(dev, l2);
}

/* ---- queues through the API ------------------------------------------------------------- */

/* Two queues of the device: one writes while the other reads, ordered by an
 * event where they touch one buffer; fills and timing events. */
static void queues(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  vkb_device *d = dev->impl;
  ferry_queue q1 = FERRY_NULL_QUEUE, q2 = FERRY_NULL_QUEUE;
  CHECK_OK(ferry_queue_create(dev, &q1));
  CHECK_OK(ferry_queue_create(dev, &q2));
  ferry_native nat = {0};
  if (dev->ops->lane_create) {
    CHECK_OK(ferry_queue_native(q1, &nat));
    CHECK(nat.context == (uintptr_t)d->device);
    bool found = false;
    for (uint32_t i = 0; i < d->queue_count; i++)
      found = found || (nat.queue == (uintptr_t)d->queues[i].queue && nat.queue_family == d->queues[i].family);
    CHECK_MSG(found, "ferry_queue_native's VkQueue is none of ferry's");
  } else {
    /* Without timeline semaphores the queues run on ferry's thread, on no VkQueue of their own. */
    CHECK_STATUS(ferry_queue_native(q1, &nat), FERRY_ERROR_UNSUPPORTED);
    CHECK_ERROR_HAS("do not yet run on a native queue");
  }

  const size_t n = ((size_t)8 << 20) + 5;
  unsigned char *h1 = malloc(n), *h2 = malloc(n), *h3 = malloc(n), *back = malloc(n);
  fill_pattern(h1, n, 1001);
  fill_pattern(h3, n, 1003);
  ferry_buffer x = FERRY_NULL_BUFFER, y = FERRY_NULL_BUFFER, z = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &x));
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &y));
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &z));
  CHECK_OK(ferry_write(z, 0, h3, n));
  ferry_event e = FERRY_NULL_EVENT, start = FERRY_NULL_EVENT, stop = FERRY_NULL_EVENT;
  CHECK_OK(ferry_event_create(&e));
  CHECK_OK(ferry_event_create(&start));
  CHECK_OK(ferry_event_create(&stop));

  /* q1 writes x; q2 waits for it, reads it back and fills part of it. */
  CHECK_OK(ferry_write_async(q1, x, 0, h1, n));
  CHECK_OK(ferry_event_record(e, q1));
  CHECK_OK(ferry_queue_wait_event(q2, e));
  CHECK_OK(ferry_read_async(q2, x, 0, h2, n));
  CHECK_OK(ferry_fill_async(q2, x, 3, 1000, &(uint8_t){0xab}, 1));
  CHECK_OK(ferry_copy_async(q2, x, 0, y, 0, n));
  CHECK_OK(ferry_queue_synchronize(q2));
  CHECK_MSG(find_pattern_mismatch(h2, n, 1001) == SIZE_MAX, "q2's read did not wait for q1's write");
  CHECK_OK(ferry_read(y, 0, back, n));
  CHECK(all_bytes(back + 3, 1000, 0xab));
  memset(back + 3, 0, 1000);
  memset(h2 + 3, 0, 1000);
  CHECK(memcmp(back, h2, n) == 0);

  /* At once: q1 writes y while q2 reads z, each on its own lane. */
  memset(h2, 0, n);
  CHECK_OK(ferry_write_async(q1, y, 0, h1, n));
  CHECK_OK(ferry_read_async(q2, z, 0, h2, n));
  CHECK_OK(ferry_queue_synchronize(q1));
  CHECK_OK(ferry_queue_synchronize(q2));
  CHECK(find_pattern_mismatch(h2, n, 1003) == SIZE_MAX);
  CHECK_OK(ferry_read(y, 0, back, n));
  CHECK(find_pattern_mismatch(back, n, 1001) == SIZE_MAX);

  /* Timing events around a fill: the device's clock where it has one, else the host's. */
  CHECK_OK(ferry_event_record(start, q1));
  CHECK_OK(ferry_fill_async(q1, x, 0, n - 1, &(uint8_t){0x3c}, 1));
  CHECK_OK(ferry_event_record(stop, q1));
  CHECK_OK(ferry_event_synchronize(stop));
  double ms = -1;
  CHECK_OK(ferry_event_elapsed(start, stop, &ms));
  CHECK_MSG(ms >= 0, "elapsed %.3f ms", ms);
  CHECK_OK(ferry_read(x, 0, back, n));
  CHECK(all_bytes(back, n - 1, 0x3c));

  CHECK_OK(ferry_event_destroy(e));
  CHECK_OK(ferry_event_destroy(start));
  CHECK_OK(ferry_event_destroy(stop));
  CHECK_OK(ferry_queue_destroy(q1));
  CHECK_OK(ferry_queue_destroy(q2));
  CHECK_OK(ferry_free(x));
  CHECK_OK(ferry_free(y));
  CHECK_OK(ferry_free(z));
  free(h1);
  free(h2);
  free(h3);
  free(back);
}

/* ---- modes ------------------------------------------------------------------------------- */

static void paths_taken(ferry_device *dev, const ferry_device_info *info, const char *mode) {
  vkb_device *d = dev->impl;
  if (strstr(mode, "staging")) CHECK(!d->mapped);
  if (strstr(mode, "noncoherent")) CHECK(!d->buf_type.coherent && !d->staging_type.coherent);
  if (strstr(mode, "suballoc") && !strstr(mode, "nosuballoc")) CHECK(d->suballoc);
  const char *spin = getenv("FERRY_VULKAN_SPIN_US");
  if (spin)
    CHECK_MSG(d->spin_ns == strtoull(spin, NULL, 10) * 1000, "spin_ns %llu with FERRY_VULKAN_SPIN_US=%s",
              (unsigned long long)d->spin_ns, spin);
  else
    CHECK(d->spin_ns == (info->is_cpu ? 0 : 2000000u));
  char lanes[64];
  if (d->xfer != d->compute)
    snprintf(lanes, sizeof lanes, "queue families %u (exposed) and %u (transfers)", d->compute->family,
             d->xfer->family);
  else
    snprintf(lanes, sizeof lanes, "queue family %u", d->compute->family);
  printf("  memory type %u for buffers (%s), %u for staging (%s); %s; %s\n", d->buf_type.index,
         d->mapped ? "mapped" : "staged", d->staging_type.index, d->staging_type.coherent ? "coherent" : "flushed",
         d->suballoc ? "small buffers share blocks" : "one allocation per buffer", lanes);
}

static void run_mode(const char *mode) {
  CHECK_OK(ferry_init());
  for (size_t i = 0; i < ferry_device_count(); i++) {
    ferry_device *dev = NULL;
    ferry_device_info info;
    ferry_device_get(i, &dev);
    ferry_device_info_get(dev, &info);
    if (strcmp(info.backend, "vulkan") != 0) continue;
    const char *spin = getenv("FERRY_VULKAN_SPIN_US");
    printf("device %zu (%s)%s%s%s%s\n", info.index, info.name, *mode ? ", FERRY_VULKAN_DEBUG=" : "", mode,
           spin ? ", FERRY_VULKAN_SPIN_US=" : "", spin ? spin : "");
    paths_taken(dev, &info, mode);
    info_from_driver(dev, &info);
    failures(dev, &info);
    dma(dev, &info);
    device_copies(dev, &info, mode);
    many_small_buffers(dev, &info);
    threads(dev, &info);
    lanes(dev, &info, mode);
    queues(dev, &info);
  }
  ferry_shutdown();
}

/* The backend's status when the loader cannot be used. */
static void wrong_library(const char *path, const char *expect) {
  setenv("FERRY_VULKAN_LIBRARY", path, 1);
  CHECK_OK(ferry_init());
  for (size_t i = 0; i < ferry_backend_count(); i++) {
    ferry_backend_info b;
    CHECK_OK(ferry_backend_get(i, &b));
    if (strcmp(b.name, "vulkan") != 0) continue;
    CHECK(b.device_count == 0);
    CHECK_MSG(strstr(b.status, expect) != NULL, "FERRY_VULKAN_LIBRARY=%s: status \"%s\" lacks \"%s\"", path, b.status,
              expect);
  }
  CHECK(ferry__vulkan_api() == NULL);
  ferry_shutdown();
  unsetenv("FERRY_VULKAN_LIBRARY");
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  ferry_backend_info b;
  int present = harness_start_backend("vulkan", "vulkan_backend", &b);
  if (present != 0) return present;
  ferry_shutdown();
  const char *preset = getenv("FERRY_VULKAN_DEBUG");
  if (preset) {
    run_mode(preset);
  } else {
    /* With each mode, how long fence waits poll (NULL: the device's default): on
     * lavapipe only the polled runs take the polling path. */
    const char *modes[] = {"",
                           "staging,gates",
                           "staging,noncoherent,suballoc,gates",
                           "suballoc",
                           "staging,noshader,transferqueue",
                           "staging,noncoherent,notimeline"};
    const char *spins[] = {NULL, "100000", "20", NULL, "0", NULL};
    const char *preset_spin = getenv("FERRY_VULKAN_SPIN_US");
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
      setenv("FERRY_VULKAN_DEBUG", modes[m], 1);
      if (!preset_spin) {
        if (spins[m])
          setenv("FERRY_VULKAN_SPIN_US", spins[m], 1);
        else
          unsetenv("FERRY_VULKAN_SPIN_US");
      }
      run_mode(modes[m]);
    }
    unsetenv("FERRY_VULKAN_DEBUG");
    if (!preset_spin) unsetenv("FERRY_VULKAN_SPIN_US");
  }
  wrong_library("/nonexistent/libvulkan.so.1", "/nonexistent/libvulkan.so.1");
  wrong_library("libm.so.6", "vkGetInstanceProcAddr");
  return harness_finish("vulkan_backend");
}
