/*
 * What each backend offers the conformance suite, and what it skips and why, in
 * one table (as IREE's per-driver CTS lists do): the cases stay free of
 * backend names, and a backend's exceptions are read here, next to each other.
 * A backend not listed gets the defaults (every native handle set, nothing skipped).
 */
#include "conformance.h"

#include <fnmatch.h>

static const conformance_skip no_skips[] = {{NULL, NULL}};

static const conformance_backend backends[] = {
    /* Host memory: no driver, no handles. */
    {"native", 0, CONF_QUEUE_NATIVE_GIVEN, no_skips},
    {"checked", 0, CONF_QUEUE_NATIVE_GIVEN, no_skips},
    /* CUdevice 0 is the first GPU and the device's native queue is stream 0 (the
     * legacy default stream): only the context is certain to be non-zero. */
    {"cuda", CONF_NATIVE_CONTEXT, CONF_QUEUE_NATIVE_GIVEN, no_skips},
    /* id<MTLDevice> and id<MTLCommandQueue>; Metal has no context. Each queue
     * has a command queue of its own. */
    {"metal", CONF_NATIVE_DEVICE | CONF_NATIVE_QUEUE, CONF_QUEUE_NATIVE_GIVEN, no_skips},
    /* cl_device_id, cl_context, cl_command_queue. */
    {"opencl", CONF_NATIVE_DEVICE | CONF_NATIVE_CONTEXT | CONF_NATIVE_QUEUE, CONF_QUEUE_NATIVE_GIVEN, no_skips},
    /* VkPhysicalDevice, VkDevice, VkQueue (and its family). Without timeline
     * semaphores (or FERRY_VULKAN_DEBUG=notimeline) the queues run on ferry's thread. */
    {"vulkan", CONF_NATIVE_DEVICE | CONF_NATIVE_CONTEXT | CONF_NATIVE_QUEUE, CONF_QUEUE_NATIVE_EITHER, no_skips},
    /* The test backend: made-up handles 1, 2, 3; no lanes. */
    {"fault", CONF_NATIVE_DEVICE | CONF_NATIVE_CONTEXT | CONF_NATIVE_QUEUE, CONF_QUEUE_NATIVE_REFUSED, no_skips},
};

static const conformance_backend fallback = {NULL, CONF_NATIVE_DEVICE | CONF_NATIVE_CONTEXT | CONF_NATIVE_QUEUE,
                                             CONF_QUEUE_NATIVE_EITHER, no_skips};

const conformance_backend *conformance_backend_of(const char *name) {
  for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
    if (strcmp(backends[i].name, name) == 0) return &backends[i];
  return &fallback;
}

const char *conformance_skip_reason(const conformance_backend *b, const char *case_name) {
  for (const conformance_skip *s = b->skips; s->cases; s++)
    if (fnmatch(s->cases, case_name, 0) == 0) return s->why;
  return NULL;
}
