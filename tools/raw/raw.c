/* The raw baselines by backend name. tools/raw/raw_<backend>.c defines raw_<backend>_ops(). */
#include "raw.h"

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
