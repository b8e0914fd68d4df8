/*
 * cuda_kernel: a kernel of our own runs on ferry's buffers, as a user's would.
 *
 * The kernel (PTX below) adds 1 to every int32 element; it is loaded with
 * cuModuleLoadData into the device's primary context (ferry_device_native) and
 * launched with cuLaunchKernel on ferry_device_ptr of
 *  - an ordinary buffer (ferry_host_to_device, launch, cuCtxSynchronize,
 *    ferry_device_to_host);
 *  - a host-pointer buffer (write the array, ferry_host_to_device of the same
 *    array, launch, ferry_device_to_host of the same array, check the array),
 *    with and without the user's own cuCtxSynchronize;
 *  - buffers just written by ferry, from a stream that does NOT wait for the
 *    legacy stream: ferry's transfers must be complete on return, for each way
 *    the backend completes pageable writes (FERRY_CUDA_H2D=stream, memops, bounce).
 * A child process then makes a kernel fault (an illegal address) and checks
 * that ferry reports the sticky error clearly (skipped with FERRY_TEST_NO_FAULT=1,
 * for runs under compute-sanitizer, which would report the planted fault).
 *
 * Skips (exit 77) without a CUDA device, or when the driver cannot load PTX
 * (the fake driver without FAKE_CUDA_KERNELS), unless FERRY_REQUIRE_BACKENDS
 * names cuda.
 *
 * The kernel, its PTX and launch are in tests/cuda_kernel.h.
 */
#include "backends/cuda/cuda_api.h"
#include "core/backend.h"
#include "cuda_kernel.h"
#include "harness.h"

#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

extern char **environ;

static const ferry_cuda_api *api;

/* data[0 .. n) += 1 on `stream`. */
static cu_result launch(cu_function fn, uintptr_t data, unsigned int n, cu_stream stream) {
  return increment_launch(api, fn, data, n, stream);
}

/* The module in the device's primary context, which is pushed (and stays
 * pushed until the caller pops it). */
typedef struct kernel {
  cu_module module;
  cu_function fn;
} kernel;

/* 0 loaded; 77 the driver cannot load PTX here; 1 failed. */
static int kernel_load(ferry_device *dev, kernel *k) {
  ferry_native nat;
  CHECK_OK(ferry_device_native(dev, &nat));
  cu_result r = api->cuCtxPushCurrent((cu_context)nat.context);
  if (r != FCU_SUCCESS) {
    CHECK_MSG(false, "cuCtxPushCurrent of the primary context: %s", cu_text(r));
    return 1;
  }
  int rc = 0;
  r = api->cuModuleLoadData(&k->module, increment_ptx);
  if (r == FCU_ERROR_NOT_SUPPORTED && !harness_backend_required("cuda")) {
    printf("SKIP cuda_kernel: this CUDA driver cannot load PTX: cuModuleLoadData returned %s (the fake driver runs "
           "kernels only with FAKE_CUDA_KERNELS=1)\n",
           cu_text(r));
    rc = HARNESS_SKIP;
  } else if (r != FCU_SUCCESS) {
    CHECK_MSG(false, "cuModuleLoadData of the increment kernel: %s", cu_text(r));
    rc = 1;
  } else if ((r = api->cuModuleGetFunction(&k->fn, k->module, "ferry_increment_i32")) != FCU_SUCCESS) {
    CHECK_MSG(false, "cuModuleGetFunction(ferry_increment_i32): %s", cu_text(r));
    api->cuModuleUnload(k->module);
    rc = 1;
  }
  if (rc != 0) {
    cu_context popped;
    api->cuCtxPopCurrent(&popped);
  }
  return rc;
}

static void kernel_unload(kernel *k) {
  CHECK_CU(api->cuModuleUnload(k->module));
  cu_context popped;
  CHECK_CU(api->cuCtxPopCurrent(&popped));
}

/* ---- an ordinary buffer ------------------------------------------------------------ */

static void ordinary_buffer(ferry_device *dev, cu_function fn) {
  size_t n = ((size_t)1 << 20) + 3; /* not a multiple of the block */
  int32_t *a = malloc(n * sizeof *a), *back = malloc(n * sizeof *back);
  fill(a, n, 7);
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, n, FERRY_INT32, &b));
  CHECK(ferry_device_ptr(b) != 0);
  CHECK_OK(ferry_host_to_device(ferry_array_of(a, n, FERRY_INT32), b));
  CHECK_CU(launch(fn, ferry_device_ptr(b), (unsigned int)n, NULL));
  CHECK_CU(api->cuCtxSynchronize());
  memset(back, 0, n * sizeof *back);
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(back, n, FERRY_INT32)));
  expect(back, n, 7, 1, "ordinary buffer after one launch");
  /* A second launch; ferry_device_synchronize finishes it. */
  CHECK_CU(launch(fn, ferry_device_ptr(b), (unsigned int)n, NULL));
  CHECK_OK(ferry_device_synchronize(dev));
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(back, n, FERRY_INT32)));
  expect(back, n, 7, 2, "ordinary buffer after two launches");
  CHECK_OK(ferry_free(b));
  free(a);
  free(back);
}

/* ---- a host-pointer buffer ----------------------------------------------------------- */

static void host_ptr_buffer(ferry_device *dev, const ferry_device_info *info, cu_function fn) {
  if (!info->host_ptr) {
    CHECK_MSG(false, "%s has no host-pointer buffers", info->name);
    return;
  }
  size_t align = info->host_ptr_alignment, bytes = (size_t)4 << 20;
  bytes = (bytes + align - 1) / align * align;
  size_t n = bytes / sizeof(int32_t);
  int32_t *array = harness_aligned(align, bytes);
  int32_t *other = malloc(bytes);
  fill(array, n, 11);
  ferry_buffer h = FERRY_NULL_BUFFER;
  ferry_refusal why = FERRY_REFUSAL_NONE;
  CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(array, n, FERRY_INT32), &h, &why));
  CHECK(why == FERRY_REFUSAL_NONE);
  CHECK(!ferry_is_zero_copy(h)); /* host access needs the synchronising transfers */
  uintptr_t dptr = ferry_device_ptr(h);
  CHECK(dptr != 0);
  /* The protocol: write the array, hand it over, launch, take it back. */
  CHECK_OK(ferry_host_to_device(ferry_array_of(array, n, FERRY_INT32), h));
  CHECK_CU(launch(fn, dptr, (unsigned int)n, NULL));
  CHECK_CU(api->cuCtxSynchronize());
  CHECK_OK(ferry_device_to_host(h, ferry_array_of(array, n, FERRY_INT32)));
  expect(array, n, 11, 1, "host-pointer array after a launch and cuCtxSynchronize");
  /* Without the user's own synchronisation: taking the array back waits. */
  CHECK_OK(ferry_host_to_device(ferry_array_of(array, n, FERRY_INT32), h));
  CHECK_CU(launch(fn, dptr, (unsigned int)n, NULL));
  CHECK_OK(ferry_device_to_host(h, ferry_array_of(array, n, FERRY_INT32)));
  expect(array, n, 11, 2, "host-pointer array taken back by ferry_device_to_host alone");
  /* The host writes the array directly; the kernel sees it. */
  fill(array, n, 12);
  CHECK_OK(ferry_host_to_device(ferry_array_of(array, n, FERRY_INT32), h));
  CHECK_CU(launch(fn, dptr, (unsigned int)n, NULL));
  CHECK_OK(ferry_device_to_host(h, ferry_array_of(array, n, FERRY_INT32)));
  expect(array, n, 12, 1, "host-pointer array rewritten by the host");
  /* From another array: copied in; a kernel; read out to another array. */
  fill(other, n, 13);
  CHECK_OK(ferry_host_to_device(ferry_array_of(other, n, FERRY_INT32), h));
  CHECK_CU(launch(fn, dptr, (unsigned int)n, NULL));
  CHECK_CU(api->cuCtxSynchronize());
  memset(other, 0, bytes);
  CHECK_OK(ferry_device_to_host(h, ferry_array_of(other, n, FERRY_INT32)));
  expect(other, n, 13, 1, "another array read from the host-pointer buffer");
  /* Device to device, then a kernel on the ordinary buffer. */
  ferry_buffer plain = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, n, FERRY_INT32, &plain));
  CHECK_OK(ferry_device_to_device(h, plain));
  CHECK_CU(launch(fn, ferry_device_ptr(plain), (unsigned int)n, NULL));
  CHECK_CU(api->cuCtxSynchronize());
  CHECK_OK(ferry_device_to_host(plain, ferry_array_of(other, n, FERRY_INT32)));
  expect(other, n, 13, 2, "ordinary buffer copied from the host-pointer buffer");
  CHECK_OK(ferry_free(plain));
  /* Freed: the array keeps the last content. */
  CHECK_OK(ferry_host_to_device(ferry_array_of(array, n, FERRY_INT32), h));
  CHECK_CU(launch(fn, dptr, (unsigned int)n, NULL));
  CHECK_OK(ferry_free(h));
  expect(array, n, 13, 2, "array after ferry_free of its host-pointer buffer");
  free(array);
  free(other);
}

/* ---- the pinned check the staging pipeline asks ----------------------------------------- */

static void pinned_check(ferry_device *dev) {
  const ferry_device_ops *ops = dev->ops;
  size_t bytes = (size_t)1 << 20;
  void *pinned = NULL;
  unsigned char *pageable = malloc(bytes);
  CHECK_CU(api->cuMemAllocHost(&pinned, bytes)); /* the primary context is current */
  if (!pinned || !ops->host_pinned) return;
  CHECK(!ops->host_pinned(dev, pageable, bytes));
  CHECK(ops->host_pinned(dev, pinned, bytes));
  CHECK(ops->host_pinned(dev, (char *)pinned + 1, bytes - 1));
  CHECK(!ops->host_pinned(dev, (char *)pinned + 1, bytes));
  /* For the record: does the driver give the range of pinned host memory? */
  cu_deviceptr start = 0;
  size_t size = 0;
  cu_pointer_attribute attrs[2] = {FCU_POINTER_ATTRIBUTE_RANGE_START_ADDR, FCU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void *data[2] = {&start, &size};
  cu_result r = api->cuPointerGetAttributes(2, attrs, data, (cu_deviceptr)(uintptr_t)pinned + 10);
  printf("  (the driver gives the range of cuMemAllocHost memory: %s: start %s, size %zu)\n", cu_text(r),
         start == (cu_deviceptr)(uintptr_t)pinned ? "= the block" : "differs", size);
  CHECK_CU(api->cuMemFreeHost(pinned));
  free(pageable);
}

/* ---- completion on return ---------------------------------------------------------------- */

/* Each transfer is followed at once by a kernel on a non-blocking stream, which
 * does not wait for the legacy stream: if ferry returned before the bytes
 * landed, the kernel would race the copy. */
static void complete_on_return(ferry_device *dev, cu_function fn, const char *mode) {
  cu_stream side = NULL;
  CHECK_CU(api->cuStreamCreate(&side, FCU_STREAM_NON_BLOCKING));
  const size_t sizes[] = {64, (size_t)256 << 10, (size_t)64 << 20};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    size_t bytes = sizes[s], n = bytes / sizeof(int32_t);
    int32_t *a = malloc(bytes), *back = malloc(bytes), *pinned = NULL;
    CHECK_OK(ferry_host_alloc(dev, bytes, (void **)&pinned));
    ferry_buffer b = FERRY_NULL_BUFFER, c = FERRY_NULL_BUFFER;
    CHECK_OK(ferry_alloc(dev, n, FERRY_INT32, &b));
    CHECK_OK(ferry_alloc(dev, n, FERRY_INT32, &c));
    char what[160];
    /* From pageable memory. */
    fill(a, n, 21 + (int32_t)s);
    CHECK_OK(ferry_write(b, 0, a, bytes));
    CHECK_CU(launch(fn, ferry_device_ptr(b), (unsigned int)n, side));
    CHECK_CU(api->cuStreamSynchronize(side));
    CHECK_OK(ferry_read(b, 0, back, bytes));
    snprintf(what, sizeof what, "FERRY_CUDA_H2D=%s: %zu bytes written from pageable memory", mode, bytes);
    expect(back, n, 21 + (int32_t)s, 1, what);
    /* From pinned memory. */
    if (pinned) {
      fill(pinned, n, 31 + (int32_t)s);
      CHECK_OK(ferry_write(b, 0, pinned, bytes));
      CHECK_CU(launch(fn, ferry_device_ptr(b), (unsigned int)n, side));
      CHECK_CU(api->cuStreamSynchronize(side));
      CHECK_OK(ferry_read(b, 0, back, bytes));
      snprintf(what, sizeof what, "FERRY_CUDA_H2D=%s: %zu bytes written from ferry_host_alloc memory", mode, bytes);
      expect(back, n, 31 + (int32_t)s, 1, what);
    }
    /* Device to device. */
    CHECK_OK(ferry_copy(b, 0, c, 0, bytes));
    CHECK_CU(launch(fn, ferry_device_ptr(c), (unsigned int)n, side));
    CHECK_CU(api->cuStreamSynchronize(side));
    CHECK_OK(ferry_read(c, 0, back, bytes));
    snprintf(what, sizeof what, "FERRY_CUDA_H2D=%s: %zu bytes copied device to device", mode, bytes);
    expect(back, n, pinned ? 31 + (int32_t)s : 21 + (int32_t)s, 2, what);
    CHECK_OK(ferry_free(b));
    CHECK_OK(ferry_free(c));
    if (pinned) CHECK_OK(ferry_host_free(pinned));
    free(a);
    free(back);
  }
  CHECK_CU(api->cuStreamDestroy(side));
}

/* ---- a kernel on a queue's own stream ------------------------------------------------------ */

/* A kernel launched on the stream ferry_queue_native gives runs in the queue's
 * order: after the write submitted before it (from pageable and from pinned
 * memory, whose pieces are pushed at submission behind waits for the host), and
 * before the read and the copy submitted after it. Nothing is synchronised in
 * between: the stream alone orders the three. */
static void queue_native_order(ferry_device *dev, cu_function fn) {
  ferry_queue q = FERRY_NULL_QUEUE;
  CHECK_OK(ferry_queue_create(dev, &q));
  ferry_native qn = {0};
  CHECK_OK(ferry_queue_native(q, &qn));
  cu_stream stream = (cu_stream)qn.queue;
  CHECK(stream != NULL);
  const size_t sizes[] = {64, (size_t)256 << 10, (size_t)24 << 20};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0] && stream; s++) {
    size_t bytes = sizes[s], n = bytes / sizeof(int32_t);
    int32_t *a = malloc(bytes), *back = malloc(bytes), *pinned = NULL;
    CHECK_OK(ferry_host_alloc(dev, bytes, (void **)&pinned));
    ferry_buffer b = FERRY_NULL_BUFFER, c = FERRY_NULL_BUFFER;
    CHECK_OK(ferry_alloc(dev, n, FERRY_INT32, &b));
    CHECK_OK(ferry_alloc(dev, n, FERRY_INT32, &c));
    for (int from_pinned = 0; from_pinned < 2; from_pinned++) {
      int32_t *src = from_pinned ? pinned : a;
      if (!src) continue;
      int32_t seed = 51 + (int32_t)(s * 2) + from_pinned;
      fill(src, n, seed);
      memset(back, 0, bytes);
      CHECK_OK(ferry_write_async(q, b, 0, src, bytes));
      CHECK_CU(launch(fn, ferry_device_ptr(b), (unsigned int)n, stream));
      CHECK_OK(ferry_copy_async(q, b, 0, c, 0, bytes));
      CHECK_CU(launch(fn, ferry_device_ptr(c), (unsigned int)n, stream));
      CHECK_OK(ferry_read_async(q, c, 0, back, bytes));
      CHECK_OK(ferry_queue_synchronize(q));
      char what[160];
      snprintf(what, sizeof what, "%zu bytes from %s memory, a kernel on ferry_queue_native's stream after each step",
               bytes, from_pinned ? "pinned" : "pageable");
      expect(back, n, seed, 2, what);
    }
    CHECK_OK(ferry_free(b));
    CHECK_OK(ferry_free(c));
    if (pinned) CHECK_OK(ferry_host_free(pinned));
    free(a);
    free(back);
  }
  CHECK_OK(ferry_queue_destroy(q));
}

/* ---- a kernel that faults (in a child process: the context is lost) ---------------------------- */

static int fault_child(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  ferry_device *dev = NULL;
  for (size_t i = 0; i < ferry_device_count() && !dev; i++) {
    ferry_device *d;
    ferry_device_info info;
    if (ferry_device_get(i, &d) == FERRY_OK && ferry_device_info_get(d, &info) == FERRY_OK &&
        strcmp(info.backend, "cuda") == 0)
      dev = d;
  }
  api = ferry__cuda_api();
  static kernel k; /* the process ends with the context lost: nothing is released */
  if (!dev || !api || kernel_load(dev, &k) != 0) return 2;
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, 1024, FERRY_INT32, &b));
  /* An address no allocation has: the kernel faults. */
  CHECK_CU(launch(k.fn, (uintptr_t)0x100, 1024, NULL));
  ferry_status st = ferry_device_synchronize(dev);
  printf("ferry_device_synchronize after the fault: %s: %s\n", ferry_status_name(st), ferry_last_error());
  CHECK(st == FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("cuCtxSynchronize");
  CHECK_ERROR_HAS("CUDA_ERROR_ILLEGAL_ADDRESS (700)");
  CHECK_ERROR_HAS("sticky");
  int32_t word = 5;
  st = ferry_write(b, 0, &word, sizeof word);
  printf("ferry_write after the fault: %s: %s\n", ferry_status_name(st), ferry_last_error());
  CHECK(st == FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("ferry_write");
  CHECK_ERROR_HAS("sticky");
  return harness_finish("cuda_kernel --fault");
}

static void faulting_kernel(void) {
  const char *no = getenv("FERRY_TEST_NO_FAULT");
  if (no && strcmp(no, "0") != 0) {
    printf("  (the faulting-kernel case is left out: FERRY_TEST_NO_FAULT=%s)\n", no);
    return;
  }
  char *argv[] = {"/proc/self/exe", "--fault", NULL};
  pid_t pid;
  fflush(stdout);
  int rc = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ);
  CHECK_MSG(rc == 0, "posix_spawn of the faulting child: %s", strerror(rc));
  if (rc != 0) return;
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the faulting child exited with status %d",
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  printf("  %-40s %s\n", "sticky error after a faulting kernel",
         WIFEXITED(status) && !WEXITSTATUS(status) ? "ok" : "FAILED");
}

/* ---- main ------------------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 2 && strcmp(argv[1], "--fault") == 0) return fault_child();
  static const char *const modes[] = {"stream", "memops", "bounce"};
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
    setenv("FERRY_CUDA_H2D", modes[m], 1);
    ferry_backend_info b;
    int present = harness_start_backend("cuda", "cuda_kernel", &b);
    if (present != 0) return present;
    api = ferry__cuda_api();
    CHECK(api != NULL);
    if (!api) {
      ferry_shutdown();
      return harness_finish("cuda_kernel");
    }
    ferry_device *devs[16];
    size_t count = 0;
    for (size_t d = 0; d < b.device_count && count < 16; d++)
      if (ferry_device_get(b.first_device + d, &devs[count]) == FERRY_OK) count++;
    for (size_t d = 0; d < count; d++) {
      ferry_device_info info;
      CHECK_OK(ferry_device_info_get(devs[d], &info));
      kernel k;
      int rc = kernel_load(devs[d], &k);
      if (rc == HARNESS_SKIP) {
        ferry_shutdown();
        return HARNESS_SKIP;
      }
      if (rc != 0) continue;
      printf("device %zu (%s), FERRY_CUDA_H2D=%s\n", info.index, info.name, modes[m]);
      int before = harness_failures;
      if (m == 0) {
        ordinary_buffer(devs[d], k.fn);
        host_ptr_buffer(devs[d], &info, k.fn);
        pinned_check(devs[d]);
        printf("  %-40s %s\n", "ordinary and host-pointer buffers", harness_failures == before ? "ok" : "FAILED");
        before = harness_failures;
      }
      complete_on_return(devs[d], k.fn, modes[m]);
      printf("  %-40s %s\n", "transfers complete on return", harness_failures == before ? "ok" : "FAILED");
      if (m == 0) {
        before = harness_failures;
        queue_native_order(devs[d], k.fn);
        printf("  %-40s %s\n", "kernels on a queue's own stream", harness_failures == before ? "ok" : "FAILED");
      }
      kernel_unload(&k);
    }
    ferry_shutdown();
  }
  unsetenv("FERRY_CUDA_H2D");
  faulting_kernel();
  return harness_finish("cuda_kernel");
}
