/* Raw vulkan baseline: placeholder until the backend lands. */
#include "raw.h"

const raw_ops *raw_vulkan_ops(void) { return 0; }
