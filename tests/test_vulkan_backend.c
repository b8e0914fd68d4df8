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
 *  - a missing or wrong loader library is a skipped backend with the reason.
 * Each runs as the device comes and with FERRY_VULKAN_DEBUG forcing the staging,
 * non-coherent and sub-allocation paths (unless FERRY_VULKAN_DEBUG is set already).
 */
#include "backends/vulkan/vulkan_internal.h"
#include "core/internal.h"
#include "harness.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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
    CHECK_OK(ops->dma_start(dev, FERRY_DMA_TO_DEVICE, &slot->mem, i * piece, &p, piece, &tickets[i]));
  }
  for (size_t i = 0; i < PIECES; i++)
    CHECK_OK(ops->dma_wait(dev, tickets[i]));
  CHECK_OK(ferry_read(b, 0, plain, bytes));
  CHECK_MSG(find_pattern_mismatch(plain, bytes, 501) == SIZE_MAX, "after DMA to the device");

  memset(pin2, 0, bytes);
  for (size_t i = 0; i < PIECES; i++) {
    ferry_pinned p = {.host = pin2 + i * piece, .token = token2, .offset = i * piece};
    CHECK_OK(ops->dma_start(dev, FERRY_DMA_TO_HOST, &slot->mem, i * piece, &p, piece, &tickets[i]));
  }
  for (size_t i = 0; i < PIECES; i++)
    CHECK_OK(ops->dma_wait(dev, tickets[i]));
  CHECK_MSG(find_pattern_mismatch(pin2, bytes, 501) == SIZE_MAX, "after DMA to the host");

  /* A block of another allocator, imported (VK_EXT_external_memory_host). */
  if (info->host_ptr) {
    unsigned char *other = harness_aligned(4096, bytes);
    uintptr_t t = 0;
    CHECK_OK(ops->pin_register(dev, other, bytes, &t));
    fill_pattern(other, bytes, 504);
    ferry_pinned p = {.host = other + 4096, .token = t, .offset = 4096};
    CHECK_OK(ops->dma_start(dev, FERRY_DMA_TO_DEVICE, &slot->mem, 100, &p, 10000, &tickets[0]));
    CHECK_OK(ops->dma_wait(dev, tickets[0]));
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
    const char *modes[] = {"", "staging", "staging,noncoherent,suballoc", "suballoc", "staging,noshader,transferqueue"};
    const char *spins[] = {NULL, "100000", "20", NULL, "0"};
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
