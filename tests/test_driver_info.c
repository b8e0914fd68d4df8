/*
 * ferry_device_driver_info on every device present: what each backend fills in,
 * in the documented formats, and bad arguments refused without touching the
 * output. On the fake CUDA driver (ctest driver_info.cuda_fake) also the PCI
 * address and UUID the fake reports, and free memory that follows allocations.
 */
#include "harness.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static bool terminated(const char *s, size_t size) { return memchr(s, '\0', size) != NULL; }

/* "0000:1b:00.0": lowercase hex, domain:bus:device.function. */
static bool pci_format(const char *s) {
  if (strlen(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  for (int i = 0; i < 12; i++)
    if (i != 4 && i != 7 && i != 10 && !(isdigit((unsigned char)s[i]) || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

/* "8-4-4-4-12" lowercase hex. */
static bool uuid_format(const char *s) {
  if (strlen(s) != 36) return false;
  for (int i = 0; i < 36; i++) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !(isdigit((unsigned char)s[i]) || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  }
  return true;
}

static void check_device(ferry_device *dev, const ferry_device_info *info) {
  ferry_driver_info d;
  memset(&d, 0x5A, sizeof d);
  CHECK_OK(ferry_device_driver_info(dev, &d));
  CHECK(terminated(d.driver, sizeof d.driver) && terminated(d.driver_version, sizeof d.driver_version));
  CHECK(terminated(d.api_version, sizeof d.api_version) && terminated(d.pci_bus_id, sizeof d.pci_bus_id));
  CHECK(terminated(d.uuid, sizeof d.uuid));
  CHECK_MSG(d.driver[0] != '\0', "device %zu (%s): no driver name", info->index, info->backend);
  CHECK_MSG(d.api_version[0] != '\0', "device %zu (%s): no API version", info->index, info->backend);
  CHECK_MSG(d.pci_bus_id[0] == '\0' || pci_format(d.pci_bus_id), "device %zu (%s): PCI address '%s'", info->index,
            info->backend, d.pci_bus_id);
  CHECK_MSG(d.uuid[0] == '\0' || uuid_format(d.uuid), "device %zu (%s): UUID '%s'", info->index, info->backend, d.uuid);
  CHECK_MSG(d.free_memory <= info->total_memory || info->is_cpu, "device %zu (%s): %llu bytes free of %llu",
            info->index, info->backend, (unsigned long long)d.free_memory, (unsigned long long)info->total_memory);
  const char *b = info->backend;
  if (strcmp(b, "native") == 0 || strcmp(b, "checked") == 0) {
    CHECK_MSG(d.driver_version[0] != '\0', "%s: no C library version", b);
    CHECK_MSG(d.free_memory > 0, "%s: MemAvailable not read", b);
  }
  /* The counts stay inside their arrays; a CPU device's free memory is never unknown. */
  CHECK(d.heap_count <= FERRY_MAX_HEAPS && d.memory_type_count <= FERRY_MAX_MEMORY_TYPES &&
        d.queue_family_count <= FERRY_MAX_QUEUE_FAMILIES);
  CHECK_MSG(!info->is_cpu || d.free_memory > 0, "device %zu (%s): a CPU device without free memory", info->index,
            info->backend);
  CHECK_MSG(!d.free_memory_from_host || (info->is_cpu && !info->zero_copy),
            "device %zu (%s): the host's free memory given for a device that is not a CPU driver's", info->index,
            info->backend);
  if (strcmp(b, "native") == 0 || strcmp(b, "checked") == 0) {
    CHECK_MSG(!d.free_memory_from_host && d.compute_units > 0, "%s: compute units %u, free memory from host %d", b,
              (unsigned)d.compute_units, d.free_memory_from_host);
  }
  if (strcmp(b, "cuda") == 0) CHECK_MSG(strncmp(d.api_version, "CUDA ", 5) == 0, "cuda: API '%s'", d.api_version);
  if (strcmp(b, "opencl") == 0) {
    CHECK_MSG(strncmp(d.api_version, "OpenCL ", 7) == 0, "opencl: '%s'", d.api_version);
    /* What clinfo shows first: every OpenCL device has them. */
    CHECK_MSG(d.compute_units > 0 && d.max_work_group_size > 0 && d.local_memory > 0,
              "opencl: compute units %u, work group %llu, local memory %llu", (unsigned)d.compute_units,
              (unsigned long long)d.max_work_group_size, (unsigned long long)d.local_memory);
    CHECK_MSG(d.local_memory_type == 1 || d.local_memory_type == 2, "opencl: local memory type %u",
              (unsigned)d.local_memory_type);
    CHECK(d.heap_count == 0 && d.queue_family_count == 0);
  }
  if (strcmp(b, "vulkan") == 0) {
    CHECK_MSG(strncmp(d.api_version, "Vulkan ", 7) == 0, "vulkan: '%s'", d.api_version);
    /* What vulkaninfo shows first. */
    CHECK_MSG(d.heap_count > 0 && d.memory_type_count > 0 && d.queue_family_count > 0,
              "vulkan: %u heaps, %u memory types, %u queue families", (unsigned)d.heap_count,
              (unsigned)d.memory_type_count, (unsigned)d.queue_family_count);
    for (uint32_t i = 0; i < d.memory_type_count; i++)
      CHECK_MSG(d.memory_types[i].heap < d.heap_count, "vulkan: memory type %u on heap %u of %u", (unsigned)i,
                (unsigned)d.memory_types[i].heap, (unsigned)d.heap_count);
    bool compute = false;
    for (uint32_t i = 0; i < d.queue_family_count; i++)
      compute = compute || ((d.queue_families[i].flags & 2u) && d.queue_families[i].count > 0);
    CHECK_MSG(compute, "vulkan: no queue family with compute queues");
    CHECK(d.max_work_group_size > 0 && d.local_memory > 0);
  }
  if (strcmp(b, "metal") == 0) {
    CHECK_MSG(strcmp(d.driver, "Metal") == 0, "metal: driver '%s'", d.driver);
    CHECK_MSG(strncmp(d.api_version, "Metal", 5) == 0, "metal: API '%s'", d.api_version);
  }

  /* Bad arguments: a sentence, and the output untouched. */
  CHECK_STATUS(ferry_device_driver_info(dev, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("out_info is NULL");
}

/* The fake CUDA driver's answers (tests/fake_cuda): bus 0x10 + ordinal, UUID "fakecuda" + ordinal. */
static void check_fake_cuda(ferry_device *dev, const ferry_device_info *info) {
  ferry_driver_info d;
  CHECK_OK(ferry_device_driver_info(dev, &d));
  char want[64];
  snprintf(want, sizeof want, "0000:%02zx:00.0", 0x10 + info->backend_index);
  CHECK_MSG(strcmp(d.pci_bus_id, want) == 0, "fake cuda %zu: PCI '%s', expected '%s'", info->backend_index,
            d.pci_bus_id, want);
  snprintf(want, sizeof want, "66616b65-6375-6461-0000-0000000000%02zx", info->backend_index);
  CHECK_MSG(strcmp(d.uuid, want) == 0, "fake cuda %zu: UUID '%s', expected '%s'", info->backend_index, d.uuid, want);
  CHECK_MSG(strcmp(d.api_version, "CUDA 13.0") == 0, "fake cuda: API '%s'", d.api_version);
  CHECK_MSG(d.free_memory > 0 && d.free_memory <= info->total_memory, "fake cuda: %llu bytes free",
            (unsigned long long)d.free_memory);
  /* Free memory follows allocations (cuMemGetInfo is asked each time). */
  ferry_buffer b;
  CHECK_OK(ferry_alloc(dev, (size_t)64 << 20, FERRY_UINT8, &b));
  ferry_driver_info after;
  CHECK_OK(ferry_device_driver_info(dev, &after));
  CHECK_MSG(after.free_memory + ((size_t)64 << 20) <= d.free_memory, "free memory %llu, then %llu after 64 MiB",
            (unsigned long long)d.free_memory, (unsigned long long)after.free_memory);
  CHECK_OK(ferry_free(b));
}

int main(void) {
  harness_context = "driver_info";
  CHECK_STATUS(ferry_device_driver_info(NULL, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("device is NULL");
  size_t n = ferry_device_count();
  bool fake = getenv("FAKE_CUDA_STRICT") != NULL;
  int fake_seen = 0;
  for (size_t i = 0; i < n; i++) {
    ferry_device *dev;
    ferry_device_info info;
    CHECK_OK(ferry_device_get(i, &dev));
    CHECK_OK(ferry_device_info_get(dev, &info));
    harness_context = info.backend;
    check_device(dev, &info);
    if (fake && strcmp(info.backend, "cuda") == 0) {
      check_fake_cuda(dev, &info);
      fake_seen++;
    }
  }
  if (fake) CHECK_MSG(fake_seen >= 1, "FAKE_CUDA_STRICT is set, yet no cuda device");
  /* Something that is not a device is refused, and the output is left alone. */
  ferry_driver_info d;
  memset(&d, 0x77, sizeof d);
  CHECK_STATUS(ferry_device_driver_info((const ferry_device *)&d, &d), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("is not a device");
  CHECK(((unsigned char *)&d)[0] == 0x77);
  ferry_shutdown();
  return harness_finish("driver_info");
}
