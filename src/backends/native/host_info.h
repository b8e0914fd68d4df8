/* Facts about the host machine shared by the native and checked backends. */
#ifndef FERRY_BACKENDS_HOST_INFO_H
#define FERRY_BACKENDS_HOST_INFO_H

#include "ferry.h"

#include <stddef.h>

/* The processor's model name ("AMD EPYC 7B13 64-Core Processor"), or "host CPU". */
void ferry__host_cpu_name(char *buf, size_t size);

/* The driver of a host device: the C library and its version, the operating
 * system, and the memory available now (MemAvailable). */
void ferry__host_driver_info(ferry_driver_info *out);

#endif
