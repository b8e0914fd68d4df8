/* cuda: placeholder until the backend lands; reports itself absent. */
#include "../../core/backend.h"

static ferry_status cuda_probe(ferry_probe *probe) {
  (void)probe;
  return ferry__fail(FERRY_ERROR_UNSUPPORTED, "the cuda backend is not built yet");
}

const ferry_backend ferry_backend_cuda = {.name = "cuda", .probe = cuda_probe};
