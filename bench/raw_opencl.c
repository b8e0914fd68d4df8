/* Raw opencl baseline: placeholder until the backend lands. */
#include "raw.h"

const raw_ops *raw_opencl_ops(void) { return 0; }
