/* The raw baselines by backend name (raw/raw_<backend>.c defines raw_<backend>_ops()),
 * and what their driver tables share: the library ferry loaded, opened through the
 * core's loader. */
#include "raw.h"

#include "core/library.h"

#include <stdio.h>
#include <string.h>

const raw_ops *raw_host_ops(void);
const raw_ops *raw_cuda_ops(void);
const raw_ops *raw_opencl_ops(void);
const raw_ops *raw_vulkan_ops(void);
const raw_ops *raw_metal_ops(void);

const raw_ops *raw_ops_for(const char *backend) {
  if (strcmp(backend, "native") == 0 || strcmp(backend, "checked") == 0) return raw_host_ops();
  if (strcmp(backend, "cuda") == 0) return raw_cuda_ops();
  if (strcmp(backend, "opencl") == 0) return raw_opencl_ops();
  if (strcmp(backend, "vulkan") == 0) return raw_vulkan_ops();
  if (strcmp(backend, "metal") == 0) return raw_metal_ops();
  return NULL;
}

void *raw_library_open(const char *option, const char *fallback, char why[256]) {
  const char *path = fallback;
  for (size_t i = 0; i < ferry_option_count(); i++) {
    ferry_option_info o;
    if (ferry_option_get(i, &o) == FERRY_OK && strcmp(o.name, option) == 0 && o.value && *o.value) path = o.value;
  }
  char text[1024];
  /* Kept loaded, as the backends keep their drivers: it is the same library, already mapped. */
  void *library = ferry__library_open(path, true, text, sizeof text);
  if (!library) snprintf(why, 256, "%.250s", text);
  return library;
}

bool raw_library_symbol(void *library, const char *name, void *slot, size_t size, char why[256]) {
  void *symbol = ferry__library_symbol(library, name);
  if (!symbol || size != sizeof symbol) {
    snprintf(why, 256, "the driver library has no %.200s", name);
    return false;
  }
  memcpy(slot, &symbol, size); /* a function pointer from dlsym's void *, without ISO C's cast between them */
  return true;
}
