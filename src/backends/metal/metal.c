/*
 * metal: Apple's GPUs. Metal exists only on Apple platforms, and this build has
 * no Metal backend yet, so the backend reports itself absent with the reason.
 * It holds its place in the device numbering (cuda, metal, opencl, vulkan,
 * native, checked) and in `ferry info`.
 */
#include "../../core/backend.h"

static ferry_status metal_probe(ferry_probe *probe) {
  (void)probe;
#if defined(__APPLE__)
  return ferry__fail(FERRY_ERROR_UNSUPPORTED, "this build of ferry has no Metal backend yet");
#else
  return ferry__fail(FERRY_ERROR_UNSUPPORTED, "Metal exists only on Apple platforms");
#endif
}

const ferry_backend ferry_backend_metal = {.name = "metal", .probe = metal_probe};
