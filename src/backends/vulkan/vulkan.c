/* vulkan: placeholder until the backend lands; reports itself absent. */
#include "../../core/backend.h"

static ferry_status vulkan_probe(ferry_probe *probe) {
  (void)probe;
  return ferry__fail(FERRY_ERROR_UNSUPPORTED, "the vulkan backend is not built yet");
}

const ferry_backend ferry_backend_vulkan = {.name = "vulkan", .probe = vulkan_probe};
