/*
 * The parts of the API that are not about one device: names of statuses,
 * refusals and kinds; the registry (numbering, FERRY_BACKENDS, ferry_device_best);
 * ferry_init / ferry_shutdown and handles that outlive a shutdown; the leak
 * report of FERRY_DEBUG=leaks; the error sentence's thread-locality.
 */
#include "harness.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void names(void) {
  harness_context = "names";
  CHECK(strcmp(ferry_status_name(FERRY_OK), "FERRY_OK") == 0);
  CHECK(strcmp(ferry_status_name(FERRY_ERROR_SIZE_MISMATCH), "FERRY_ERROR_SIZE_MISMATCH") == 0);
  for (int s = FERRY_OK; s <= FERRY_ERROR_BACKEND; s++) {
    const char *n = ferry_status_name((ferry_status)s);
    CHECK(n && strncmp(n, "FERRY_", 6) == 0 && strcmp(n, "FERRY_STATUS_UNKNOWN") != 0);
  }
  CHECK(strcmp(ferry_status_name((ferry_status)1000), "FERRY_STATUS_UNKNOWN") == 0);
  CHECK(strcmp(ferry_status_name((ferry_status)-1), "FERRY_STATUS_UNKNOWN") == 0);
  CHECK(strcmp(ferry_refusal_name(FERRY_REFUSAL_OVERLAP), "FERRY_REFUSAL_OVERLAP") == 0);
  for (int r = FERRY_REFUSAL_NONE; r <= FERRY_REFUSAL_DRIVER; r++)
    CHECK(strncmp(ferry_refusal_name((ferry_refusal)r), "FERRY_REFUSAL_", 14) == 0);
  CHECK(strcmp(ferry_refusal_name((ferry_refusal)99), "FERRY_REFUSAL_UNKNOWN") == 0);

  static const struct {
    ferry_kind k;
    const char *name;
    size_t size;
  } kinds[] = {{FERRY_FLOAT16, "float16", 2},
               {FERRY_BFLOAT16, "bfloat16", 2},
               {FERRY_FLOAT32, "float32", 4},
               {FERRY_FLOAT64, "float64", 8},
               {FERRY_INT8, "int8", 1},
               {FERRY_UINT8, "uint8", 1},
               {FERRY_INT16, "int16", 2},
               {FERRY_UINT16, "uint16", 2},
               {FERRY_INT32, "int32", 4},
               {FERRY_UINT32, "uint32", 4},
               {FERRY_INT64, "int64", 8},
               {FERRY_UINT64, "uint64", 8},
               {FERRY_NATIVEINT, "nativeint", sizeof(intptr_t)},
               {FERRY_COMPLEX32, "complex32", 8},
               {FERRY_COMPLEX64, "complex64", 16},
               {FERRY_CHAR, "char", 1},
               {FERRY_CUSTOM, "custom", 0}};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    CHECK_MSG(ferry_kind_size(kinds[i].k) == kinds[i].size, "size of %s", kinds[i].name);
    CHECK_MSG(strcmp(ferry_kind_name(kinds[i].k), kinds[i].name) == 0, "name of %s", kinds[i].name);
  }
  CHECK(ferry_kind_size((ferry_kind)17) == 0 && ferry_kind_size((ferry_kind)-3) == 0);
  CHECK(strcmp(ferry_kind_name((ferry_kind)17), "unknown") == 0);
  int16_t shorts[3];
  ferry_array a = ferry_array_of(shorts, 3, FERRY_INT16);
  CHECK(a.data == (void *)shorts && a.length == 3 && a.kind == FERRY_INT16);
  char version[32];
  snprintf(version, sizeof version, "%d.%d.%d", FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR, FERRY_VERSION_PATCH);
  CHECK(strcmp(ferry_version(), version) == 0);
}

static void registry(void) {
  harness_context = "registry";
  CHECK_OK(ferry_init());
  CHECK_OK(ferry_init()); /* idempotent */
  size_t n = ferry_device_count();
  CHECK(n >= 2); /* native and checked at least */
  /* Numbering: backend by backend, in the documented order, indices consecutive. */
  static const char *const order[] = {"cuda", "metal", "opencl", "vulkan", "native", "checked"};
  CHECK(ferry_backend_count() == 6);
  size_t next = 0;
  for (size_t i = 0; i < ferry_backend_count(); i++) {
    ferry_backend_info b;
    CHECK_OK(ferry_backend_get(i, &b));
    CHECK_MSG(strcmp(b.name, order[i]) == 0, "backend %zu is %s, expected %s", i, b.name, order[i]);
    CHECK(b.enabled);
    CHECK(b.status && b.status[0]);
    if (b.device_count) {
      CHECK(b.first_device == next);
      CHECK(strcmp(b.status, "ok") == 0);
    }
    for (size_t d = 0; d < b.device_count; d++) {
      ferry_device *dev;
      ferry_device_info info;
      CHECK_OK(ferry_device_get(next + d, &dev));
      CHECK_OK(ferry_device_info_get(dev, &info));
      CHECK(strcmp(info.backend, b.name) == 0 && info.backend_index == d && info.index == next + d);
    }
    next += b.device_count;
  }
  CHECK(next == n);
  ferry_backend_info none;
  CHECK_STATUS(ferry_backend_get(99, &none), FERRY_ERROR_NO_DEVICE);
  CHECK_STATUS(ferry_backend_get(0, NULL), FERRY_ERROR_INVALID_ARGUMENT);

  /* The best device: the first GPU, else native. */
  ferry_device *best = ferry_device_best();
  CHECK(best != NULL);
  ferry_device_info bi;
  CHECK_OK(ferry_device_info_get(best, &bi));
  bool any_gpu = false;
  for (size_t i = 0; i < n; i++) {
    ferry_device *d;
    ferry_device_info info;
    ferry_device_get(i, &d);
    ferry_device_info_get(d, &info);
    if (!info.is_cpu) {
      any_gpu = true;
      CHECK(best == d);
      break;
    }
  }
  if (!any_gpu) CHECK(strcmp(bi.backend, "native") == 0);
  ferry_device *d = (ferry_device *)0x1;
  CHECK_STATUS(ferry_device_get(n, &d), FERRY_ERROR_NO_DEVICE);
  CHECK_ERROR_HAS("device index");
  CHECK(d == (ferry_device *)0x1);
  ferry_shutdown();
}

static void backends_variable(void) {
  harness_context = "FERRY_BACKENDS";
  setenv("FERRY_BACKENDS", "checked, native", 1);
  CHECK_OK(ferry_init());
  CHECK(ferry_device_count() == 2);
  ferry_device *d0, *d1;
  ferry_device_info i0, i1;
  CHECK_OK(ferry_device_get(0, &d0));
  CHECK_OK(ferry_device_get(1, &d1));
  ferry_device_info_get(d0, &i0);
  ferry_device_info_get(d1, &i1);
  CHECK(strcmp(i0.backend, "checked") == 0 && strcmp(i1.backend, "native") == 0);
  CHECK(ferry_device_best() == d1); /* no GPU: native, even when it is not first */
  ferry_backend_info b;
  CHECK_OK(ferry_backend_get(0, &b));
  CHECK(strcmp(b.name, "checked") == 0 && b.enabled);
  CHECK_OK(ferry_backend_get(2, &b));
  CHECK(!b.enabled && b.device_count == 0 && strstr(b.status, "FERRY_BACKENDS"));
  ferry_shutdown();

  setenv("FERRY_BACKENDS", "checked", 1);
  CHECK_OK(ferry_init());
  CHECK(ferry_device_count() == 1);
  ferry_device *only = ferry_device_best();
  CHECK(only != NULL);
  if (only) {
    ferry_device_info_get(only, &i0);
    CHECK(strcmp(i0.backend, "checked") == 0);
  }
  ferry_shutdown();

  setenv("FERRY_BACKENDS", "native,cuda-typo", 1);
  CHECK_STATUS(ferry_init(), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("cuda-typo");
  CHECK_ERROR_HAS("FERRY_BACKENDS");
  CHECK(ferry_device_count() == 0);
  CHECK(ferry_device_best() == NULL);
  ferry_buffer b0 = {0x99};
  ferry_device *dummy = NULL;
  CHECK_STATUS(ferry_device_get(0, &dummy), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_alloc((ferry_device *)&b0, 1, FERRY_INT8, &b0), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK(b0.id == 0x99);

  setenv("FERRY_BACKENDS", "native,native", 1);
  CHECK_STATUS(ferry_init(), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("twice");
  unsetenv("FERRY_BACKENDS");
  CHECK_OK(ferry_init());
  CHECK(ferry_device_count() >= 2);
  ferry_shutdown();
}

static void shutdown_makes_everything_stale(void) {
  harness_context = "shutdown";
  setenv("FERRY_BACKENDS", "native", 1);
  ferry_device *dev = ferry_device_best();
  ferry_buffer b;
  CHECK_OK(ferry_alloc(dev, 16, FERRY_UINT8, &b));
  void *pinned = NULL;
  CHECK_OK(ferry_host_alloc(dev, 100, &pinned));
  ferry_shutdown();
  ferry_shutdown(); /* twice is harmless */
  /* Before re-initialisation, and after it, the old handle is stale. */
  unsigned char h[16] = {0};
  CHECK_STATUS(ferry_write(b, 0, h, 16), FERRY_ERROR_STALE_BUFFER);
  CHECK(ferry_size(b) == 0);
  CHECK_OK(ferry_init());
  CHECK_STATUS(ferry_write(b, 0, h, 16), FERRY_ERROR_STALE_BUFFER);
  CHECK_STATUS(ferry_free(b), FERRY_ERROR_STALE_BUFFER);
  CHECK_STATUS(ferry_host_free(pinned), FERRY_ERROR_INVALID_ARGUMENT); /* released by the shutdown */
  /* New buffers reuse the first slot; the old handle still does not match. */
  ferry_buffer fresh;
  CHECK_OK(ferry_alloc(ferry_device_best(), 16, FERRY_UINT8, &fresh));
  CHECK((uint32_t)fresh.id == (uint32_t)b.id);
  CHECK(fresh.id != b.id);
  CHECK_STATUS(ferry_write(b, 0, h, 16), FERRY_ERROR_STALE_BUFFER);
  CHECK_OK(ferry_write(fresh, 0, h, 16));
  CHECK_OK(ferry_free(fresh));
  ferry_shutdown();
  unsetenv("FERRY_BACKENDS");
}

/* Runs fn with stderr going to a file; returns what was written. */
static char *capture_stderr(void (*fn)(void)) {
  char path[] = "/tmp/ferry-test-XXXXXX";
  int fd = mkstemp(path);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  fn();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  static char text[8192];
  ssize_t got = pread(fd, text, sizeof text - 1, 0);
  text[got > 0 ? got : 0] = '\0';
  close(fd);
  unlink(path);
  return text;
}

static void leave_two_buffers(void) {
  ferry_device *dev = ferry_device_best();
  ferry_buffer a, b, c;
  ferry_alloc(dev, 1000, FERRY_FLOAT64, &a);
  ferry_alloc_custom(dev, 3, 40, &b);
  ferry_alloc(dev, 5, FERRY_INT8, &c);
  ferry_free(c);
  ferry_shutdown();
}

static void leak_report(void) {
  harness_context = "FERRY_DEBUG=leaks";
  setenv("FERRY_BACKENDS", "native", 1);
  setenv("FERRY_DEBUG", "leaks", 1);
  const char *text = capture_stderr(leave_two_buffers);
  CHECK_MSG(strstr(text, "1000 float64 elements") != NULL, "leak report lacks the first buffer: %s", text);
  CHECK_MSG(strstr(text, "3 elements of 40 bytes") != NULL, "leak report lacks the custom buffer: %s", text);
  CHECK_MSG(strstr(text, "8000 bytes") != NULL, "leak report lacks the size: %s", text);
  CHECK_MSG(strstr(text, "native") != NULL, "leak report lacks the device: %s", text);
  CHECK_MSG(strstr(text, "2 buffer(s) were not freed") != NULL, "leak report lacks the count: %s", text);
  CHECK_MSG(strstr(text, "5 int8") == NULL, "leak report lists a freed buffer: %s", text);
  unsetenv("FERRY_DEBUG");
  text = capture_stderr(leave_two_buffers);
  CHECK_MSG(text[0] == '\0', "without FERRY_DEBUG nothing is printed: %s", text);
  unsetenv("FERRY_BACKENDS");
}

static void *fail_in_thread(void *arg) {
  (void)arg;
  ferry_buffer b = {0};
  ferry_free(b);
  return strstr(ferry_last_error(), "FERRY_NULL_BUFFER") ? (void *)1 : NULL;
}

static void error_is_thread_local(void) {
  harness_context = "ferry_last_error";
  ferry_device *dev = ferry_device_best();
  ferry_buffer b;
  CHECK_STATUS(ferry_alloc(dev, 1, (ferry_kind)55, &b), FERRY_ERROR_INVALID_ARGUMENT);
  pthread_t t;
  void *result = NULL;
  pthread_create(&t, NULL, fail_in_thread, NULL);
  pthread_join(t, &result);
  CHECK(result == (void *)1);
  CHECK_ERROR_HAS("55"); /* this thread's sentence is still its own */
  /* Success leaves the last failure's sentence alone. */
  CHECK_OK(ferry_alloc(dev, 1, FERRY_INT8, &b));
  CHECK_ERROR_HAS("55");
  CHECK_OK(ferry_free(b));
  ferry_shutdown();
}

int main(void) {
  names();
  registry();
  backends_variable();
  shutdown_makes_everything_stale();
  leak_report();
  error_is_thread_local();
  harness_context = "";
  return harness_finish("api");
}
