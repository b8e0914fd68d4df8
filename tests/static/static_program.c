/*
 * A fully static program (linked with -static) that starts ferry with every
 * backend: the backends that load a driver library (cuda, opencl, vulkan) must
 * be unavailable and say why, never load it (glibc's dlopen in a static program
 * crashes inside the driver), and native and checked must work.
 */
#include "harness.h"

#include <string.h>

static const char *const needs_a_driver[] = {"cuda", "opencl", "vulkan"};
static const char *const host_backends[] = {"native", "checked"};

static bool find(const char *name, ferry_backend_info *out) {
  for (size_t i = 0; i < ferry_backend_count(); i++)
    if (ferry_backend_get(i, out) == FERRY_OK && strcmp(out->name, name) == 0) return true;
  return false;
}

int main(void) {
  CHECK_OK(ferry_init());
  ferry_backend_info b;
  for (size_t i = 0; i < sizeof needs_a_driver / sizeof needs_a_driver[0]; i++) {
    const char *name = needs_a_driver[i];
    CHECK_MSG(find(name, &b), "backend %s is not in this build", name);
    CHECK_MSG(b.device_count == 0, "%s has %zu devices in a static program", name, b.device_count);
    CHECK_MSG(strstr(b.status, "this program is statically linked; glibc cannot load driver libraries into it: "
                               "link ferry into a dynamically linked program"),
              "%s's status does not say why: %s", name, b.status);
    printf("%-7s unavailable: %s\n", name, b.status);
  }
  for (size_t i = 0; i < sizeof host_backends / sizeof host_backends[0]; i++) {
    const char *name = host_backends[i];
    CHECK_MSG(find(name, &b) && b.device_count == 1, "%s has no device: %s", name, b.status);
    ferry_device *dev = NULL;
    CHECK_OK(ferry_device_get(b.first_device, &dev));
    unsigned char in[4096], out[4096];
    fill_pattern(in, sizeof in, 7);
    ferry_buffer buf = FERRY_NULL_BUFFER;
    CHECK_OK(ferry_alloc(dev, sizeof in, FERRY_UINT8, &buf));
    CHECK_OK(ferry_host_to_device(ferry_array_of(in, sizeof in, FERRY_UINT8), buf));
    CHECK_OK(ferry_device_to_host(buf, ferry_array_of(out, sizeof out, FERRY_UINT8)));
    CHECK(memcmp(in, out, sizeof in) == 0);
    CHECK_OK(ferry_free(buf));
    printf("%-7s works\n", name);
  }
  ferry_shutdown();
  return harness_finish("static_program");
}
