/*
 * vulkan: every Vulkan physical device, through the loader (libvulkan.so.1)
 * opened at run time and ferry's own declarations (vulkan_api.h).
 *
 * One instance for the backend; per physical device one logical device with one
 * queue of a family that can compute (and so transfer), which ferry_device_native
 * exposes. ferry submits to that queue under its own lock (VkQueue is externally
 * synchronised). Buffers are VkBuffers with bound memory (vulkan_memory.c); bytes
 * move by memcpy through persistent mappings where device memory is the host's
 * (CPU devices such as lavapipe, integrated GPUs), else through the core's
 * pinned staging and vkCmdCopyBuffer; large copies within a device run a copy
 * shader (vulkan_transfer.c). See docs/backends/vulkan.md.
 */
#include "vulkan_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

vkb_options ferry__vkb_opts;

bool ferry__vkb_is_oom(VkResult r) {
  return r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_TOO_MANY_OBJECTS ||
         r == VK_ERROR_FRAGMENTATION || r == VK_ERROR_OUT_OF_POOL_MEMORY;
}

ferry_status ferry__vkb_fail(const ferry_device *dev, const char *call, VkResult r, const char *fmt, ...) {
  char detail[768] = "";
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
  }
  return ferry__fail(ferry__vkb_is_oom(r) ? FERRY_ERROR_OUT_OF_MEMORY : FERRY_ERROR_BACKEND,
                     "%s returned %s (%d) on %s%s%s", call, ferry__vulkan_result_name(r), (int)r, dev->label,
                     detail[0] ? " " : "", detail);
}

/* ---- options ------------------------------------------------------------------ */

static void read_options(void) {
  memset(&ferry__vkb_opts, 0, sizeof ferry__vkb_opts);
  ferry__vkb_opts.staging = ferry__option_has_word("FERRY_VULKAN_DEBUG", "staging");
  ferry__vkb_opts.noncoherent = ferry__option_has_word("FERRY_VULKAN_DEBUG", "noncoherent");
  ferry__vkb_opts.suballoc = ferry__option_has_word("FERRY_VULKAN_DEBUG", "suballoc");
  ferry__vkb_opts.nosuballoc = ferry__option_has_word("FERRY_VULKAN_DEBUG", "nosuballoc");
  ferry__vkb_opts.transferqueue = ferry__option_has_word("FERRY_VULKAN_DEBUG", "transferqueue");
  ferry__vkb_opts.noshader = ferry__option_has_word("FERRY_VULKAN_DEBUG", "noshader");
  ferry__vkb_opts.shader = ferry__option_has_word("FERRY_VULKAN_DEBUG", "shader");
  ferry__vkb_opts.notimeline = ferry__option_has_word("FERRY_VULKAN_DEBUG", "notimeline");
  ferry__vkb_opts.gates = ferry__option_has_word("FERRY_VULKAN_DEBUG", "gates");
  /* The values are checked against vulkan_options' ranges at ferry_init. The
   * copy shader's shape is for tuning on new hardware (the default is the
   * fastest shape measured on the H200: docs/backends/vulkan.md). */
  uint64_t v;
  ferry__vkb_opts.copy_unroll = ferry__option_number("FERRY_VULKAN_COPY_UNROLL", &v) ? (uint32_t)v : 1;
  ferry__vkb_opts.copy_groups = ferry__option_number("FERRY_VULKAN_COPY_GROUPS", &v) ? (uint32_t)v : 0;
  ferry__vkb_opts.spin_us = ferry__option_number("FERRY_VULKAN_SPIN_US", &v) ? (long long)v : -1;
}

/* ---- ops ---------------------------------------------------------------------- */

static ferry_status vkb_native(const ferry_device *dev, ferry_native *out) {
  const vkb_device *d = dev->impl;
  out->device = (uintptr_t)d->phys;
  out->context = (uintptr_t)d->device;
  out->queue = (uintptr_t)d->compute->queue;
  out->queue_family = d->compute->family;
  return FERRY_OK;
}

/* Is the device extension `name` supported? */
static bool device_has_extension(const vkb_device *d, const char *name) {
  uint32_t n = 0;
  if (ferry__vk()->vkEnumerateDeviceExtensionProperties(d->phys, NULL, &n, NULL) != VK_SUCCESS || n == 0) return false;
  VkExtensionProperties *ext = calloc(n, sizeof *ext);
  bool found = false;
  if (ext && ferry__vk()->vkEnumerateDeviceExtensionProperties(d->phys, NULL, &n, ext) >= 0)
    for (uint32_t i = 0; i < n && !found; i++)
      found = strncmp(ext[i].extensionName, name, VK_MAX_EXTENSION_NAME_SIZE) == 0;
  free(ext);
  return found;
}

/* driverName and driverInfo (Vulkan 1.2 or VK_KHR_driver_properties), deviceUUID
 * (1.1), the PCI address (VK_EXT_pci_bus_info); the API version always. */
static ferry_status vkb_driver_info(ferry_device *dev, ferry_driver_info *out) {
  const vkb_device *d = dev->impl;
  /* What vulkaninfo shows first: the compute limits, the heaps and memory types,
   * the queue families. */
  out->max_work_group_size = d->props.limits.maxComputeWorkGroupInvocations;
  out->local_memory = d->props.limits.maxComputeSharedMemorySize;
  out->heap_count = d->memory.memoryHeapCount < FERRY_MAX_HEAPS ? d->memory.memoryHeapCount : FERRY_MAX_HEAPS;
  for (uint32_t i = 0; i < out->heap_count; i++)
    out->heaps[i] = (ferry_memory_heap){d->memory.memoryHeaps[i].size, d->memory.memoryHeaps[i].flags};
  out->memory_type_count =
      d->memory.memoryTypeCount < FERRY_MAX_MEMORY_TYPES ? d->memory.memoryTypeCount : FERRY_MAX_MEMORY_TYPES;
  for (uint32_t i = 0; i < out->memory_type_count; i++)
    out->memory_types[i] =
        (ferry_memory_type){d->memory.memoryTypes[i].propertyFlags, d->memory.memoryTypes[i].heapIndex};
  VkQueueFamilyProperties families[FERRY_MAX_QUEUE_FAMILIES];
  uint32_t nf = FERRY_MAX_QUEUE_FAMILIES;
  ferry__vk()->vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nf, families);
  out->queue_family_count = nf < FERRY_MAX_QUEUE_FAMILIES ? nf : FERRY_MAX_QUEUE_FAMILIES;
  for (uint32_t i = 0; i < out->queue_family_count; i++)
    out->queue_families[i] = (ferry_queue_family){families[i].queueFlags, families[i].queueCount};
  uint32_t api = d->props.apiVersion;
  snprintf(out->api_version, sizeof out->api_version, "Vulkan %u.%u.%u", VK_API_VERSION_MAJOR(api),
           VK_API_VERSION_MINOR(api), VK_API_VERSION_PATCH(api));
  bool v11 = ferry__vk()->instance_version >= VK_API_VERSION_1_1 && api >= VK_API_VERSION_1_1 &&
             ferry__vk()->vkGetPhysicalDeviceProperties2;
  if (!v11) return FERRY_OK;
  VkPhysicalDeviceIDProperties id = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
  VkPhysicalDeviceDriverProperties driver = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDevicePCIBusInfoPropertiesEXT pci = {.sType =
                                                     VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT};
  bool has_driver = VK_API_VERSION_MINOR(api) >= 2 || VK_API_VERSION_MAJOR(api) > 1 ||
                    device_has_extension(d, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
  bool has_pci = device_has_extension(d, VK_EXT_PCI_BUS_INFO_EXTENSION_NAME);
  void *chain = NULL;
  if (has_pci) {
    pci.pNext = chain;
    chain = &pci;
  }
  if (has_driver) {
    driver.pNext = chain;
    chain = &driver;
  }
  id.pNext = chain;
  VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &id};
  ferry__vk()->vkGetPhysicalDeviceProperties2(d->phys, &p2);
  ferry__uuid_text(id.deviceUUID, out->uuid);
  if (has_driver) {
    driver.driverName[VK_MAX_DRIVER_NAME_SIZE - 1] = driver.driverInfo[VK_MAX_DRIVER_INFO_SIZE - 1] = '\0';
    snprintf(out->driver, sizeof out->driver, "%s", driver.driverName);
    snprintf(out->driver_version, sizeof out->driver_version, "%s", driver.driverInfo);
  }
  if (has_pci) ferry__pci_text(pci.pciDomain, pci.pciBus, pci.pciDevice, pci.pciFunction, out->pci_bus_id);
  return FERRY_OK;
}

static void device_close(vkb_device *d) {
  if (!d) return;
  if (d->device) {
    ferry__vk()->vkDeviceWaitIdle(d->device);
    ferry__vkb_lanes_teardown(d); /* gives its contexts back to their queues first */
    ferry__vkb_transfer_teardown(d);
    ferry__vkb_memory_teardown(d);
    ferry__vk()->vkDestroyDevice(d->device, NULL);
  }
  if (d->locks_ready) {
    pthread_mutex_destroy(&d->alloc_lock);
    pthread_mutex_destroy(&d->copier.lock);
  }
  for (uint32_t i = 0; i < VKB_QUEUES_MAX; i++) {
    if (!d->queues[i].ready) continue;
    pthread_mutex_destroy(&d->queues[i].lock);
    pthread_mutex_destroy(&d->queues[i].ctx_lock);
  }
  free(d);
}

static void vkb_destroy(ferry_device *dev) {
  device_close(dev->impl);
  dev->impl = NULL;
}

/* Devices with timeline semaphores: lanes and tickets (vulkan_lanes.c), and no
 * gates. A gate is a batch waiting for a semaphore only the host signals, and
 * drivers run a VkQueue's batches in order (lavapipe on one thread; GPUs on one
 * hardware queue): every later batch of that VkQueue, those of the synchronous
 * calls included, would wait behind it, so a synchronous read of an unrelated
 * buffer waited for another queue's event (tests/test_queues.c, staged_sides).
 * Without gates the core pushes a queue's work only once it is ready (its waits
 * ended on the queue's thread), which keeps every lane independent. Until lanes
 * have VkQueues of their own, gates are a testing path:
 * FERRY_VULKAN_DEBUG=gates (vkb_ops_gated). */
static const ferry_device_ops vkb_ops = {
    .alloc = ferry__vkb_alloc,
    .free = ferry__vkb_free,
    .write = ferry__vkb_write,
    .read = ferry__vkb_read,
    .copy_start = ferry__vkb_copy,
    .fill_start = ferry__vkb_fill,
    .host_ptr_import = ferry__vkb_host_ptr_import,
    .host_ptr_sync = ferry__vkb_host_ptr_sync,
    .host_ptr_release = ferry__vkb_host_ptr_release,
    .pin_alloc = ferry__vkb_pin_alloc,
    .pin_register = ferry__vkb_pin_register,
    .pin_release = ferry__vkb_pin_release,
    .dma_start = ferry__vkb_dma_start,
    .lane_create = ferry__vkb_lane_create,
    .lane_destroy = ferry__vkb_lane_destroy,
    .lane_native = ferry__vkb_lane_native,
    .marker = ferry__vkb_marker,
    .lane_wait = ferry__vkb_lane_wait,
    .ticket_query = ferry__vkb_ticket_query,
    .ticket_wait = ferry__vkb_ticket_wait,
    .ticket_release = ferry__vkb_ticket_release,
    .ticket_elapsed = ferry__vkb_ticket_elapsed,
    .synchronize = ferry__vkb_synchronize,
    .native = vkb_native,
    .free_memory = ferry__vkb_free_memory,
    .driver_info = vkb_driver_info,
    .destroy = vkb_destroy,
};

/* The same with gates (FERRY_VULKAN_DEBUG=gates), made from vkb_ops when the
 * backend starts. */
static ferry_device_ops vkb_ops_gated;

static void gated_ops_make(void) {
  vkb_ops_gated = vkb_ops;
  vkb_ops_gated.gate_create = ferry__vkb_gate_create;
  vkb_ops_gated.gate_push = ferry__vkb_gate_push;
  vkb_ops_gated.gate_raise = ferry__vkb_gate_raise;
  vkb_ops_gated.gate_destroy = ferry__vkb_gate_destroy;
}

/* Without them (Vulkan 1.1 without VK_KHR_timeline_semaphore, or
 * FERRY_VULKAN_DEBUG=notimeline): no lanes, so the core runs queues on its
 * thread; every operation is submitted with a fence, and a DMA's ticket is
 * its command context. */
static const ferry_device_ops vkb_ops_fenced = {
    .alloc = ferry__vkb_alloc,
    .free = ferry__vkb_free,
    .write = ferry__vkb_write,
    .read = ferry__vkb_read,
    .copy_start = ferry__vkb_copy,
    .fill_start = ferry__vkb_fill,
    .host_ptr_import = ferry__vkb_host_ptr_import,
    .host_ptr_sync = ferry__vkb_host_ptr_sync,
    .host_ptr_release = ferry__vkb_host_ptr_release,
    .pin_alloc = ferry__vkb_pin_alloc,
    .pin_register = ferry__vkb_pin_register,
    .pin_release = ferry__vkb_pin_release,
    .dma_start = ferry__vkb_dma_start,
    .ticket_wait = ferry__vkb_ctx_ticket_wait,
    .ticket_release = ferry__vkb_ctx_ticket_release,
    .synchronize = ferry__vkb_synchronize,
    .native = vkb_native,
    .free_memory = ferry__vkb_free_memory,
    .driver_info = vkb_driver_info,
    .destroy = vkb_destroy,
};

/* ---- opening one physical device ---------------------------------------------- */

typedef struct device_extensions {
  bool host_memory, budget, portability_subset, maintenance4, timeline;
} device_extensions;

static ferry_status read_extensions(ferry_device *dev, device_extensions *out) {
  vkb_device *d = dev->impl;
  memset(out, 0, sizeof *out);
  uint32_t n = 0;
  VkResult r = ferry__vk()->vkEnumerateDeviceExtensionProperties(d->phys, NULL, &n, NULL);
  if (r != VK_SUCCESS) return ferry__vkb_fail(dev, "vkEnumerateDeviceExtensionProperties", r, NULL);
  if (n == 0) return FERRY_OK;
  VkExtensionProperties *ext = calloc(n, sizeof *ext);
  if (!ext) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for %u extension names", n);
  r = ferry__vk()->vkEnumerateDeviceExtensionProperties(d->phys, NULL, &n, ext);
  if (r < 0) {
    free(ext);
    return ferry__vkb_fail(dev, "vkEnumerateDeviceExtensionProperties", r, NULL);
  }
  for (uint32_t i = 0; i < n; i++) {
    const char *e = ext[i].extensionName;
    ext[i].extensionName[VK_MAX_EXTENSION_NAME_SIZE - 1] = '\0';
    if (strcmp(e, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME) == 0) out->host_memory = true;
    if (strcmp(e, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME) == 0) out->budget = true;
    if (strcmp(e, VK_KHR_PORTABILITY_SUBSET_EXTENSION_NAME) == 0) out->portability_subset = true;
    if (strcmp(e, VK_KHR_MAINTENANCE_4_EXTENSION_NAME) == 0) out->maintenance4 = true;
    if (strcmp(e, VK_KHR_TIMELINE_SEMAPHORE_EXTENSION_NAME) == 0) out->timeline = true;
  }
  free(ext);
  return FERRY_OK;
}

/* What one family offers: its index, how many queues ferry takes, its timestamps. */
typedef struct family_pick {
  uint32_t index, count, timestamp_bits;
} family_pick;

/* The queue family ferry exposes: the first that can compute (compute queues can
 * always transfer), up to `compute_max` of its queues. And, with
 * FERRY_VULKAN_DEBUG=transferqueue, the first family for transfers alone: its
 * queues then move bytes between host and device (count 0: none). On the H200
 * that was slower than the exposed queue (docs/backends/vulkan.md), so it is not
 * the default. */
static ferry_status pick_families(ferry_device *dev, uint32_t compute_max, uint32_t transfer_max,
                                  family_pick *out_compute, family_pick *out_transfer) {
  vkb_device *d = dev->impl;
  uint32_t n = 0;
  ferry__vk()->vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &n, NULL);
  VkQueueFamilyProperties *fam = n ? calloc(n, sizeof *fam) : NULL;
  if (n && !fam) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for %u queue families", n);
  if (n) ferry__vk()->vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &n, fam);
  uint32_t pick = UINT32_MAX, transfer = UINT32_MAX;
  for (uint32_t i = 0; i < n && pick == UINT32_MAX; i++)
    if (fam[i].queueCount > 0 && (fam[i].queueFlags & VK_QUEUE_COMPUTE_BIT)) pick = i;
  for (uint32_t i = 0; i < n && transfer == UINT32_MAX; i++)
    if (fam[i].queueCount > 0 && (fam[i].queueFlags & VK_QUEUE_TRANSFER_BIT) &&
        !(fam[i].queueFlags & (VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT)))
      transfer = i;
  if (pick == UINT32_MAX) {
    free(fam);
    return ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s has no queue family that can compute (of %u families)", dev->label,
                       n);
  }
  *out_compute = (family_pick){.index = pick,
                               .count = fam[pick].queueCount < compute_max ? fam[pick].queueCount : compute_max,
                               .timestamp_bits = fam[pick].timestampValidBits};
  *out_transfer = (family_pick){.index = UINT32_MAX, .count = 0};
  if (ferry__vkb_opts.transferqueue && transfer != UINT32_MAX)
    *out_transfer =
        (family_pick){.index = transfer,
                      .count = fam[transfer].queueCount < transfer_max ? fam[transfer].queueCount : transfer_max,
                      .timestamp_bits = fam[transfer].timestampValidBits};
  free(fam);
  return FERRY_OK;
}

/* Properties that need Vulkan 1.1: maxMemoryAllocationSize, maxBufferSize,
 * minImportedHostPointerAlignment. */
static void read_limits(vkb_device *d, const device_extensions *ext, bool v11, VkDeviceSize *max_memory_allocation,
                        VkDeviceSize *max_buffer, VkDeviceSize *host_ptr_alignment) {
  *max_memory_allocation = 0;
  *max_buffer = 0;
  *host_ptr_alignment = 0;
  if (!v11) return;
  VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  VkPhysicalDeviceMaintenance4Properties m4 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES};
  VkPhysicalDeviceExternalMemoryHostPropertiesEXT host = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
  VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &m3};
  void **tail = &m3.pNext;
  bool has_m4 = ext->maintenance4 || d->props.apiVersion >= VK_API_VERSION_1_3;
  if (has_m4) {
    *tail = &m4;
    tail = &m4.pNext;
  }
  if (ext->host_memory) {
    *tail = &host;
    tail = &host.pNext;
  }
  ferry__vk()->vkGetPhysicalDeviceProperties2(d->phys, &p2);
  *max_memory_allocation = m3.maxMemoryAllocationSize;
  if (has_m4) *max_buffer = m4.maxBufferSize;
  if (ext->host_memory) *host_ptr_alignment = host.minImportedHostPointerAlignment;
}

/* Can a buffer with ferry's usage be created over host memory? */
static bool host_import_supported(vkb_device *d) {
  if (!ferry__vk()->vkGetPhysicalDeviceExternalBufferProperties) return true; /* the import itself will tell */
  VkPhysicalDeviceExternalBufferInfo info = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_BUFFER_INFO,
                                             .usage = VKB_BUFFER_USAGE,
                                             .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT};
  VkExternalBufferProperties props = {.sType = VK_STRUCTURE_TYPE_EXTERNAL_BUFFER_PROPERTIES};
  ferry__vk()->vkGetPhysicalDeviceExternalBufferProperties(d->phys, &info, &props);
  return (props.externalMemoryProperties.externalMemoryFeatures & VK_EXTERNAL_MEMORY_FEATURE_IMPORTABLE_BIT) != 0;
}

static ferry_status device_open(ferry_device *dev, VkPhysicalDevice phys, uint32_t index) {
  vkb_device *d = dev->impl;
  d->phys = phys;
  pthread_mutex_init(&d->alloc_lock, NULL);
  pthread_mutex_init(&d->copier.lock, NULL);
  d->locks_ready = true;

  ferry__vk()->vkGetPhysicalDeviceProperties(phys, &d->props);
  d->props.deviceName[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE - 1] = '\0';
  ferry__vk()->vkGetPhysicalDeviceMemoryProperties(phys, &d->memory);
  snprintf(dev->label, sizeof dev->label, "vulkan device %u (%s)", index, d->props.deviceName);
  d->unified = d->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ||
               d->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
  /* A thread that waits for a GPU polls its fence for up to 2 ms before it sleeps:
   * NVIDIA's vkWaitForFences wakes long after the fence signals, polling sees it
   * at once (docs/backends/vulkan.md, "Waiting"). A CPU device's work runs on the
   * host's processors, which polling would take from it. */
  if (ferry__vkb_opts.spin_us >= 0)
    d->spin_ns = (uint64_t)ferry__vkb_opts.spin_us * 1000;
  else
    d->spin_ns = d->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? 0 : 2000000;

  device_extensions ext;
  ferry_status st = read_extensions(dev, &ext);
  if (st != FERRY_OK) return st;
  bool v11 = ferry__vk()->instance_version >= VK_API_VERSION_1_1 && d->props.apiVersion >= VK_API_VERSION_1_1 &&
             ferry__vk()->vkGetPhysicalDeviceProperties2 && ferry__vk()->vkGetPhysicalDeviceMemoryProperties2;
  /* Timeline semaphores: Vulkan 1.2 (where the feature is required), or the
   * extension on 1.1 (which requires it too); enabled at vkCreateDevice. */
  bool core12 = ferry__vk()->instance_version >= VK_API_VERSION_1_2 && d->props.apiVersion >= VK_API_VERSION_1_2;
  bool want_timeline = !ferry__vkb_opts.notimeline && v11 && (core12 || ext.timeline);
  family_pick compute, transfer;
  /* With lanes, several queues of a family, so that two ferry queues run at
   * once on a GPU; without, one does everything. */
  if ((st = pick_families(dev, want_timeline ? VKB_COMPUTE_QUEUES : 1, want_timeline ? VKB_XFER_QUEUES : 1, &compute,
                          &transfer)) != FERRY_OK)
    return st;
  VkDeviceSize max_memory_allocation, max_buffer, host_alignment;
  read_limits(d, &ext, v11, &max_memory_allocation, &max_buffer, &host_alignment);

  const char *names[5];
  uint32_t count = 0;
  bool want_host = ext.host_memory && v11 && host_alignment > 0 && (host_alignment & (host_alignment - 1)) == 0 &&
                   host_import_supported(d);
  if (want_host) names[count++] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
  if (ext.budget && v11) names[count++] = VK_EXT_MEMORY_BUDGET_EXTENSION_NAME;
  if (ext.portability_subset) names[count++] = VK_KHR_PORTABILITY_SUBSET_EXTENSION_NAME;
  uint32_t base_count = count;
  if (want_timeline && !core12) names[count++] = VK_KHR_TIMELINE_SEMAPHORE_EXTENSION_NAME;
  float priorities[VKB_COMPUTE_QUEUES];
  for (int i = 0; i < VKB_COMPUTE_QUEUES; i++)
    priorities[i] = 1.0f; /* every queue alike: a ferry queue's VkQueue is no more urgent than another's */
  VkDeviceQueueCreateInfo queues[2] = {{.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                        .queueFamilyIndex = compute.index,
                                        .queueCount = compute.count,
                                        .pQueuePriorities = priorities},
                                       {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                        .queueFamilyIndex = transfer.index,
                                        .queueCount = transfer.count,
                                        .pQueuePriorities = priorities}};
  uint32_t family_count = transfer.count ? 2 : 1;
  VkPhysicalDeviceTimelineSemaphoreFeatures timeline = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES, .timelineSemaphore = VK_TRUE};
  VkDeviceCreateInfo info = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                             .pNext = want_timeline ? &timeline : NULL,
                             .queueCreateInfoCount = family_count,
                             .pQueueCreateInfos = queues,
                             .enabledExtensionCount = count,
                             .ppEnabledExtensionNames = count ? names : NULL};
  VKB_DRIVER_STARTUP_BEGIN();
  VkResult r = ferry__vk()->vkCreateDevice(phys, &info, NULL, &d->device);
  if (r != VK_SUCCESS && want_timeline) {
    /* A driver that refuses the feature after all: the device without lanes. */
    want_timeline = false;
    info.pNext = NULL;
    info.enabledExtensionCount = base_count;
    info.ppEnabledExtensionNames = base_count ? names : NULL;
    r = ferry__vk()->vkCreateDevice(phys, &info, NULL, &d->device);
  }
  VKB_DRIVER_STARTUP_END();
  if (r != VK_SUCCESS) {
    d->device = NULL;
    return ferry__vkb_fail(dev, "vkCreateDevice", r, "with %u extension(s) and queues of %u famil%s", count,
                           family_count, family_count == 1 ? "y" : "ies");
  }
  d->compute_count = compute.count;
  d->xfer_count = transfer.count;
  d->queue_count = compute.count + transfer.count;
  for (uint32_t i = 0; i < d->queue_count; i++) {
    vkb_queue *q = &d->queues[i];
    const family_pick *f = i < compute.count ? &compute : &transfer;
    q->family = f->index;
    q->timestamp_bits = f->timestamp_bits;
    ferry__vk()->vkGetDeviceQueue(d->device, q->family, i < compute.count ? i : i - compute.count, &q->queue);
    pthread_mutex_init(&q->lock, NULL);
    pthread_mutex_init(&q->ctx_lock, NULL);
    q->ready = true;
  }
  d->families[0] = compute.index;
  d->families[1] = transfer.index;
  d->family_count = family_count;
  d->compute = &d->queues[0];
  d->xfer = transfer.count ? &d->queues[compute.count] : d->compute;
  if (want_timeline) {
    /* Vulkan 1.2's entry points, or the extension's (the same with KHR). */
    PFN_vkVoidFunction f[3] = {
        ferry__vk()->vkGetDeviceProcAddr(d->device,
                                         core12 ? "vkGetSemaphoreCounterValue" : "vkGetSemaphoreCounterValueKHR"),
        ferry__vk()->vkGetDeviceProcAddr(d->device, core12 ? "vkWaitSemaphores" : "vkWaitSemaphoresKHR"),
        ferry__vk()->vkGetDeviceProcAddr(d->device, core12 ? "vkSignalSemaphore" : "vkSignalSemaphoreKHR")};
    d->get_counter = (PFN_vkGetSemaphoreCounterValue)f[0];
    d->wait_semaphores = (PFN_vkWaitSemaphores)f[1];
    d->signal_semaphore = (PFN_vkSignalSemaphore)f[2];
    d->timeline = f[0] && f[1] && f[2];
  }
  d->budget = ext.budget && v11;
  if (want_host) {
    d->get_host_pointer_properties = (PFN_vkGetMemoryHostPointerPropertiesEXT)ferry__vk()->vkGetDeviceProcAddr(
        d->device, "vkGetMemoryHostPointerPropertiesEXT");
    d->host_ptr = d->get_host_pointer_properties != NULL;
    d->host_ptr_alignment = (size_t)host_alignment;
  }

  if ((st = ferry__vkb_memory_setup(dev)) != FERRY_OK) return st;
  if (max_memory_allocation && max_memory_allocation < d->max_allocation) d->max_allocation = max_memory_allocation;
  if (max_buffer && max_buffer < d->max_allocation) d->max_allocation = max_buffer;
  if (d->max_allocation > SIZE_MAX) d->max_allocation = SIZE_MAX;
  if ((st = ferry__vkb_transfer_setup(dev)) != FERRY_OK) return st;
  return d->timeline ? ferry__vkb_lanes_setup(dev) : FERRY_OK;
}

/* ---- the backend ------------------------------------------------------------------ */

static ferry_status vulkan_probe(ferry_probe *probe) {
  if (sizeof(uintptr_t) < sizeof(VkBuffer))
    return ferry__fail(FERRY_ERROR_UNSUPPORTED,
                       "a VkBuffer (64 bits) does not fit in ferry_device_ptr's uintptr_t on this platform");
  read_options();
  gated_ops_make();
  ferry_status st = ferry__vk_api_load();
  if (st != FERRY_OK) return st;
  uint32_t n = 0;
  VKB_DRIVER_STARTUP_BEGIN();
  VkResult r = ferry__vk()->vkEnumeratePhysicalDevices(ferry__vk()->instance, &n, NULL);
  VKB_DRIVER_STARTUP_END();
  VkPhysicalDevice *phys = NULL;
  if (r == VK_SUCCESS && n > 0) {
    phys = calloc(n, sizeof *phys);
    if (!phys) {
      ferry__vk_api_unload();
      return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for %u Vulkan devices", n);
    }
    VKB_DRIVER_STARTUP_BEGIN();
    r = ferry__vk()->vkEnumeratePhysicalDevices(ferry__vk()->instance, &n, phys);
    VKB_DRIVER_STARTUP_END();
    if (r == VK_INCOMPLETE) r = VK_SUCCESS;
  }
  if (r != VK_SUCCESS || n == 0) {
    free(phys);
    char lib[256];
    snprintf(lib, sizeof lib, "%s", ferry__vk()->library_name);
    ferry__vk_api_unload();
    if (r != VK_SUCCESS)
      return ferry__fail(FERRY_ERROR_BACKEND, "vkEnumeratePhysicalDevices (through %s) returned %s (%d)", lib,
                         ferry__vulkan_result_name(r), (int)r);
    return ferry__fail(FERRY_ERROR_UNSUPPORTED,
                       "vkEnumeratePhysicalDevices (through %s) found no Vulkan device: no driver (ICD) reports one",
                       lib);
  }
  size_t added = 0;
  char first_error[1024] = "";
  for (uint32_t i = 0; i < n; i++) {
    vkb_device *d = calloc(1, sizeof *d);
    if (!d) {
      free(phys);
      return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for a Vulkan device");
    }
    ferry_device stand_in;
    memset(&stand_in, 0, sizeof stand_in);
    stand_in.impl = d;
    snprintf(stand_in.label, sizeof stand_in.label, "vulkan device %u", i);
    st = device_open(&stand_in, phys[i], i);
    if (st != FERRY_OK) {
      /* A device that cannot be opened is left out; the others go on. */
      if (!first_error[0]) snprintf(first_error, sizeof first_error, "%s", ferry__error_text());
      device_close(d);
      continue;
    }
    ferry_device_desc desc = {
        .ops = !d->timeline            ? &vkb_ops_fenced
               : ferry__vkb_opts.gates ? &vkb_ops_gated
                                       : &vkb_ops,
        .impl = d,
        .name = d->props.deviceName,
        .total_memory = d->total_memory,
        .max_allocation = d->max_allocation,
        .is_cpu = d->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU,
        .zero_copy = false,
        .host_ptr = d->host_ptr,
        .host_ptr_alignment = d->host_ptr ? d->host_ptr_alignment : 1,
        /* Buffers that are not mapped (discrete GPUs) are reached through the core's staging only. */
        .caps = FERRY_CAP_CACHE | (d->mapped ? 0u : FERRY_CAP_STAGE),
    };
    st = ferry__device_add(probe, &desc);
    if (st != FERRY_OK) {
      device_close(d);
      free(phys);
      return st; /* the core closes the devices added so far and unloads */
    }
    added++;
  }
  free(phys);
  if (added == 0) {
    ferry__vk_api_unload();
    return ferry__fail(FERRY_ERROR_BACKEND, "none of the %u Vulkan device(s) could be opened: %s", n, first_error);
  }
  return FERRY_OK;
}

static const ferry_option_def vulkan_options[] = {
    {.name = "FERRY_VULKAN_LIBRARY",
     .type = FERRY_OPTION_TEXT,
#if defined(__APPLE__)
     .default_value = "libvulkan.1.dylib",
#else
     .default_value = "libvulkan.so.1",
#endif
     .range = "a library name or path for dlopen",
     .description = "the Vulkan loader to load"},
    {.name = "FERRY_VULKAN_COPY_UNROLL",
     .type = FERRY_OPTION_COUNT,
     .min = 1,
     .max = 16,
     .default_value = "1",
     .range = "1 to 16",
     .description = "16-byte words the copy shader moves per invocation and step"},
    {.name = "FERRY_VULKAN_COPY_GROUPS",
     .type = FERRY_OPTION_COUNT,
     .min = 1,
     .max = UINT32_MAX,
     .range = "1 to 4294967295",
     .description = "most work groups per copy-shader dispatch (default and upper bound: the device's "
                    "maxComputeWorkGroupCount[0])"},
    {.name = "FERRY_VULKAN_SPIN_US",
     .type = FERRY_OPTION_COUNT,
     .min = 0,
     .max = 60000000,
     .range = "0 to 60000000 microseconds",
     .description = "how long a wait polls its fence before it sleeps (default 2000 on GPUs, 0 on CPU devices)"},
    {.name = "FERRY_VULKAN_DEBUG",
     .type = FERRY_OPTION_WORDS,
     .words = "staging,noncoherent,suballoc,nosuballoc,transferqueue,noshader,shader,notimeline,gates",
     .range = "words separated by commas: staging, noncoherent, suballoc, nosuballoc, transferqueue, noshader, shader, "
              "notimeline, gates",
     .description = "force paths a device would not take otherwise, for testing (docs/backends/vulkan.md)"},
    {.name = NULL},
};

const ferry_backend ferry_backend_vulkan = {
    .name = "vulkan", .options = vulkan_options, .probe = vulkan_probe, .unload = ferry__vk_api_unload};
