/* opencl: placeholder until the backend lands; reports itself absent. */
#include "../../core/backend.h"

static ferry_status opencl_probe(ferry_probe *probe) {
  (void)probe;
  return ferry__fail(FERRY_ERROR_UNSUPPORTED, "the opencl backend is not built yet");
}

const ferry_backend ferry_backend_opencl = {.name = "opencl", .probe = opencl_probe};
