/* Facts about the host machine (src/core/host_info.c), for the backends whose
 * devices are the host's processors (native, checked) and for the core, which
 * gives a CPU device's free memory from them where its driver says nothing. */
#ifndef FERRY_CORE_HOST_INFO_H
#define FERRY_CORE_HOST_INFO_H

#include "ferry.h"

#include <stddef.h>
#include <stdint.h>

/* The processor's model name ("AMD EPYC 7B13 64-Core Processor"), or "host CPU". */
void ferry__host_cpu_name(char *buf, size_t size);

/* The driver of a host device: the C library and its version, the operating
 * system, and the memory available now (MemAvailable). */
void ferry__host_driver_info(ferry_driver_info *out);

/* MemAvailable from /proc/meminfo, in bytes: what the kernel can give without
 * swapping; 0 when unknown. */
uint64_t ferry__host_available_memory(void);

#endif
