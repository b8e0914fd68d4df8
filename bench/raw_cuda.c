/* Raw cuda baseline: placeholder until the backend lands. */
#include "raw.h"

const raw_ops *raw_cuda_ops(void) { return 0; }
