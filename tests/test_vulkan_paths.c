/*
 * The conformance suite on the vulkan backend's other paths. On lavapipe (what CI
 * has) device memory is mapped host memory, so `conformance.vulkan` exercises
 * the memcpy path only; a discrete GPU takes the staging ring, non-coherent
 * flushes and, with NVIDIA's 4096-allocation limit, buffers in shared blocks.
 * FERRY_VULKAN_DEBUG forces those paths on any driver; this program runs every
 * device case and the cross-device cases against native under each of them,
 * and once more on a device without timeline semaphores (notimeline: no lanes,
 * the fenced paths).
 *
 * The cases are the suite's own (the queue cases too), compiled in unchanged.
 */
#include "conformance_backends.c"
#include "conformance_cases.c"
#include "conformance_queues.c"

static const conformance_case *const device_lists[] = {conformance_device_cases, conformance_queue_cases, NULL};
static const conformance_pair_case *const pair_lists[] = {conformance_pair_cases, conformance_queue_pair_cases, NULL};

static void run_mode(const char *mode) {
  setenv("FERRY_VULKAN_DEBUG", mode, 1);
  CHECK_OK(ferry_init());
  char context[512];
  ferry_device *native = NULL;
  ferry_device_info native_info;
  for (size_t i = 0; i < ferry_device_count(); i++) {
    ferry_device *dev;
    ferry_device_get(i, &dev);
    ferry_device_info_get(dev, &native_info);
    if (strcmp(native_info.backend, "native") == 0) {
      native = dev;
      break;
    }
  }
  for (size_t i = 0; i < ferry_device_count(); i++) {
    ferry_device *dev;
    ferry_device_info info;
    ferry_device_get(i, &dev);
    ferry_device_info_get(dev, &info);
    if (strcmp(info.backend, "vulkan") != 0) continue;
    printf("device %zu (%s), FERRY_VULKAN_DEBUG=%s\n", info.index, info.name, mode);
    for (const conformance_case *const *list = device_lists; *list; list++)
      for (const conformance_case *c = *list; c->name; c++) {
        snprintf(context, sizeof context, "vulkan[%zu] (%s) %s", info.index, mode, c->name);
        harness_case_begin(context);
        c->run(dev, &info);
        harness_case_end(c->name);
      }
    if (!native) continue;
    for (const conformance_pair_case *const *list = pair_lists; *list; list++)
      for (const conformance_pair_case *c = *list; c->name; c++) {
        snprintf(context, sizeof context, "vulkan[%zu] -> native (%s) %s", info.index, mode, c->name);
        harness_case_begin(context);
        c->run(dev, &info, native, &native_info);
        harness_case_end(c->name);
        snprintf(context, sizeof context, "native -> vulkan[%zu] (%s) %s", info.index, mode, c->name);
        harness_case_begin(context);
        c->run(native, &native_info, dev, &info);
        harness_case_end(c->name);
      }
  }
  harness_context = "";
  ferry_shutdown();
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  ferry_backend_info b;
  int present = harness_start_backend("vulkan", "vulkan_paths", &b);
  if (present != 0) return present;
  ferry_shutdown();
  /* The last: a device without timeline semaphores (no lanes: queues run on the core's thread, fences). */
  const char *modes[] = {"staging", "staging,noncoherent,suballoc", "suballoc,noncoherent", "staging,notimeline"};
  /* The staging paths wait for fences most: once polling them (as on a GPU), once as the device comes. */
  bool preset_spin = getenv("FERRY_VULKAN_SPIN_US") != NULL;
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
    if (!preset_spin && m == 0) setenv("FERRY_VULKAN_SPIN_US", "100000", 1);
    run_mode(modes[m]);
    if (!preset_spin) unsetenv("FERRY_VULKAN_SPIN_US");
  }
  unsetenv("FERRY_VULKAN_DEBUG");
  return harness_finish("vulkan_paths");
}
