// ferry.h used from C++: its macros and types in the ways a C++ program uses
// them, linked against the C library (extern "C" linkage) and run.
#include <ferry.h>

#include <cstdio>
#include <cstring>

static int failures;
#define EXPECT(cond)                                                                                                   \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      std::fprintf(stderr, "FAIL %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #cond, ferry_last_error());        \
      failures++;                                                                                                      \
    }                                                                                                                  \
  } while (0)

static ferry_status free_it(ferry_buffer b) { return ferry_free(b); }

int main() {
  const ferry_buffer none = FERRY_NULL_BUFFER;
  ferry_buffer assigned;
  assigned = FERRY_NULL_BUFFER;
  EXPECT(none.id == 0 && assigned.id == 0 && FERRY_NULL_BUFFER.id == 0);
  EXPECT(free_it(FERRY_NULL_BUFFER) == FERRY_ERROR_STALE_BUFFER);
  EXPECT(std::strstr(ferry_last_error(), "FERRY_NULL_BUFFER") != nullptr);

  ferry_device *dev = ferry_device_best();
  EXPECT(dev != nullptr);
  float in[4] = {1, 2, 3, 4}, out[4] = {0, 0, 0, 0};
  ferry_buffer b = FERRY_NULL_BUFFER;
  EXPECT(ferry_alloc(dev, 4, FERRY_FLOAT32, &b) == FERRY_OK);
  EXPECT(ferry_host_to_device(ferry_array_of(in, 4, FERRY_FLOAT32), b) == FERRY_OK);
  EXPECT(ferry_device_to_host(b, ferry_array_of(out, 4, FERRY_FLOAT32)) == FERRY_OK);
  EXPECT(std::memcmp(in, out, sizeof in) == 0);
  EXPECT(ferry_buffer_kind(b) == FERRY_FLOAT32);
  EXPECT(std::strcmp(ferry_refusal_name(FERRY_REFUSAL_NONE), "FERRY_REFUSAL_NONE") == 0);
  EXPECT(ferry_free(b) == FERRY_OK);
  ferry_shutdown();
  std::printf("cxx: ferry.h %d.%d.%d works from C++ (library %s)\n", FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR,
              FERRY_VERSION_PATCH, ferry_version());
  return failures ? 1 : 0;
}
