/*
 * An OpenCL C kernel on ferry's buffers, through the OpenCL API ferry loaded:
 * the kernel increments every element of a buffer reached through its cl_mem
 * (ferry_device_ptr) on the device's own queue (ferry_device_native).
 *
 *  - a plain buffer: written by ferry, incremented, read back by ferry;
 *  - a host-pointer buffer: the array written on the host, handed to the device
 *    (ferry_host_to_device with the same array), incremented, taken back
 *    (ferry_device_to_host with the same array): the array itself holds the
 *    kernel's results; several rounds, then kernel results that reach the array
 *    through ferry_free alone, and device-side copies after a kernel;
 *  - kernels on a ferry queue's own cl_command_queue (ferry_queue_native),
 *    between a queued write, copy and read, ordered by the queue alone.
 *
 * Runs on every OpenCL device; skipped (77) when there is none, unless
 * FERRY_REQUIRE_BACKENDS names opencl.
 */
#include "harness.h"

#include "backends/opencl/opencl_api.h"

#include <stdlib.h>
#include <string.h>

static const char kernel_source[] = "__kernel void increment(__global int *a, const unsigned int n) {\n"
                                    "  size_t i = get_global_id(0);\n"
                                    "  if (i < n) a[i] += 1;\n"
                                    "}\n";

typedef struct kernel_ctx {
  const ferry_cl_api *api;
  cl_command_queue queue;
  cl_kernel kernel;
} kernel_ctx;

/* Runs increment on the first n int32 elements of the buffer; waits for it. */
static void run_increment(const kernel_ctx *k, ferry_buffer b, size_t n) {
  cl_mem mem = (cl_mem)ferry_device_ptr(b);
  cl_uint count = (cl_uint)n;
  CHECK(mem != NULL);
  CHECK(k->api->clSetKernelArg(k->kernel, 0, sizeof mem, &mem) == CL_SUCCESS);
  CHECK(k->api->clSetKernelArg(k->kernel, 1, sizeof count, &count) == CL_SUCCESS);
  size_t global = (n + 63) / 64 * 64;
  cl_int err = k->api->clEnqueueNDRangeKernel(k->queue, k->kernel, 1, NULL, &global, NULL, 0, NULL, NULL);
  CHECK_MSG(err == CL_SUCCESS, "clEnqueueNDRangeKernel: %s (%d)", ferry__opencl_error_name(err), (int)err);
  err = k->api->clFinish(k->queue);
  CHECK_MSG(err == CL_SUCCESS, "clFinish: %s (%d)", ferry__opencl_error_name(err), (int)err);
}

/* Enqueues increment on the first n int32 elements of the buffer on `queue`; does not wait. */
static void enqueue_increment(const kernel_ctx *k, cl_command_queue queue, ferry_buffer b, size_t n) {
  cl_mem mem = (cl_mem)ferry_device_ptr(b);
  cl_uint count = (cl_uint)n;
  CHECK(k->api->clSetKernelArg(k->kernel, 0, sizeof mem, &mem) == CL_SUCCESS);
  CHECK(k->api->clSetKernelArg(k->kernel, 1, sizeof count, &count) == CL_SUCCESS);
  size_t global = (n + 63) / 64 * 64;
  cl_int err = k->api->clEnqueueNDRangeKernel(queue, k->kernel, 1, NULL, &global, NULL, 0, NULL, NULL);
  CHECK_MSG(err == CL_SUCCESS, "clEnqueueNDRangeKernel on a ferry queue's own: %s (%d)", ferry__opencl_error_name(err),
            (int)err);
}

static int32_t value(size_t i, int round) { return (int32_t)(i * 2654435761u) ^ (int32_t)(round * 7919); }

static void plain_buffer(const kernel_ctx *k, ferry_device *dev) {
  size_t n = (1u << 20) + 3;
  int32_t *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out);
  for (size_t i = 0; i < n; i++)
    in[i] = value(i, 1);
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, n, FERRY_INT32, &b));
  CHECK_OK(ferry_host_to_device(ferry_array_of(in, n, FERRY_INT32), b));
  run_increment(k, b, n);
  memset(out, 0, n * sizeof *out);
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(out, n, FERRY_INT32)));
  size_t bad = SIZE_MAX;
  for (size_t i = 0; i < n && bad == SIZE_MAX; i++)
    if (out[i] != in[i] + 1) bad = i;
  CHECK_MSG(bad == SIZE_MAX, "plain buffer: element %zu is %d after the kernel, expected %d", bad,
            bad == SIZE_MAX ? 0 : out[bad], bad == SIZE_MAX ? 0 : in[bad] + 1);
  /* Twice more, then a byte range through ferry_read. */
  run_increment(k, b, n);
  run_increment(k, b, n);
  int32_t tail[5];
  CHECK_OK(ferry_read(b, (n - 5) * sizeof(int32_t), tail, sizeof tail));
  for (int i = 0; i < 5; i++)
    CHECK(tail[i] == in[n - 5 + (size_t)i] + 3);
  /* Only the first half: the rest stays. */
  run_increment(k, b, n / 2);
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(out, n, FERRY_INT32)));
  bad = SIZE_MAX;
  for (size_t i = 0; i < n && bad == SIZE_MAX; i++)
    if (out[i] != in[i] + 3 + (i < n / 2)) bad = i;
  CHECK_MSG(bad == SIZE_MAX, "plain buffer: element %zu wrong after a partial kernel", bad);
  CHECK_OK(ferry_free(b));
  free(in);
  free(out);
}

static void host_ptr_buffer(const kernel_ctx *k, ferry_device *dev, const ferry_device_info *info) {
  size_t align = info->host_ptr_alignment;
  size_t bytes = (size_t)4 << 20; /* a multiple of any power-of-two alignment up to 4 MiB */
  if (bytes % align) bytes = align * 4;
  size_t n = bytes / sizeof(int32_t);
  int32_t *array = harness_aligned(align > 64 ? align : 64, bytes);
  int32_t *back = malloc(bytes);
  ferry_buffer b = FERRY_NULL_BUFFER;
  ferry_refusal why = FERRY_REFUSAL_NONE;
  CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(array, n, FERRY_INT32), &b, &why));
  CHECK(!ferry_is_zero_copy(b)); /* host access needs the synchronising transfers */
  CHECK(ferry_device_ptr(b) != 0 && ferry_device_ptr(b) != (uintptr_t)array);

  for (int round = 0; round < 3; round++) {
    /* The host owns the array: write it in place. */
    for (size_t i = 0; i < n; i++)
      array[i] = value(i, round);
    CHECK_OK(ferry_host_to_device(ferry_array_of(array, n, FERRY_INT32), b)); /* hand it to the device */
    run_increment(k, b, n);
    CHECK_OK(ferry_device_to_host(b, ferry_array_of(array, n, FERRY_INT32))); /* take it back */
    size_t bad = SIZE_MAX;
    for (size_t i = 0; i < n && bad == SIZE_MAX; i++)
      if (array[i] != value(i, round) + 1) bad = i;
    CHECK_MSG(bad == SIZE_MAX, "host-ptr round %d: array element %zu is %d, expected the kernel's %d", round, bad,
              bad == SIZE_MAX ? 0 : array[bad], bad == SIZE_MAX ? 0 : value(bad, round) + 1);
  }

  /* Kernel results read through another array while the device owns the buffer. */
  CHECK_OK(ferry_host_to_device(ferry_array_of(array, n, FERRY_INT32), b));
  run_increment(k, b, n);
  memset(back, 0, bytes);
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(back, n, FERRY_INT32)));
  size_t bad = SIZE_MAX;
  for (size_t i = 0; i < n && bad == SIZE_MAX; i++)
    if (back[i] != value(i, 2) + 2) bad = i;
  CHECK_MSG(bad == SIZE_MAX, "host-ptr: read into another array after a kernel differs at element %zu", bad);

  /* Kernel results copied on the device into a plain buffer and back. */
  ferry_buffer plain = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, n, FERRY_INT32, &plain));
  CHECK_OK(ferry_device_to_device(b, plain));
  run_increment(k, plain, n);
  CHECK_OK(ferry_device_to_device(plain, b));
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(array, n, FERRY_INT32)));
  bad = SIZE_MAX;
  for (size_t i = 0; i < n && bad == SIZE_MAX; i++)
    if (array[i] != value(i, 2) + 3) bad = i;
  CHECK_MSG(bad == SIZE_MAX, "host-ptr: array after a device-side round trip differs at element %zu", bad);
  CHECK_OK(ferry_free(plain));

  /* The kernel's last results reach the array through ferry_free alone. */
  CHECK_OK(ferry_host_to_device(ferry_array_of(array, n, FERRY_INT32), b));
  run_increment(k, b, n);
  CHECK_OK(ferry_free(b));
  bad = SIZE_MAX;
  for (size_t i = 0; i < n && bad == SIZE_MAX; i++)
    if (array[i] != value(i, 2) + 4) bad = i;
  CHECK_MSG(bad == SIZE_MAX, "host-ptr: array after ferry_free differs at element %zu (%d, expected %d)", bad,
            bad == SIZE_MAX ? 0 : array[bad], bad == SIZE_MAX ? 0 : value(bad, 2) + 4);
  free(array);
  free(back);
}

/* Builds the kernel for the device; false (with the reason printed) when the
 * device cannot compile: then the device is skipped. */
/* Kernels enqueued on the cl_command_queue ferry_queue_native gives run in the
 * ferry queue's order: after the write submitted before them (pageable, so
 * staged), before the copy and the read submitted after; nothing waits in
 * between but the queue's own order. */
static void queue_native_order(const kernel_ctx *k, ferry_device *dev) {
  ferry_queue q = FERRY_NULL_QUEUE;
  CHECK_OK(ferry_queue_create(dev, &q));
  ferry_native qn = {0};
  CHECK_OK(ferry_queue_native(q, &qn));
  cl_command_queue queue = (cl_command_queue)qn.queue;
  CHECK(queue != NULL);
  const size_t counts[] = {16, (size_t)1 << 16, ((size_t)4 << 20) + 3};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0] && queue; c++) {
    size_t n = counts[c];
    int32_t *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out);
    for (size_t i = 0; i < n; i++)
      in[i] = value(i, 5 + (int)c);
    memset(out, 0, n * sizeof *out);
    ferry_buffer a = FERRY_NULL_BUFFER, b = FERRY_NULL_BUFFER;
    CHECK_OK(ferry_alloc(dev, n, FERRY_INT32, &a));
    CHECK_OK(ferry_alloc(dev, n, FERRY_INT32, &b));
    CHECK_OK(ferry_write_async(q, a, 0, in, n * sizeof *in));
    enqueue_increment(k, queue, a, n);
    CHECK_OK(ferry_copy_async(q, a, 0, b, 0, n * sizeof *in));
    enqueue_increment(k, queue, b, n);
    CHECK_OK(ferry_read_async(q, b, 0, out, n * sizeof *out));
    CHECK_OK(ferry_queue_synchronize(q));
    size_t bad = SIZE_MAX;
    for (size_t i = 0; i < n && bad == SIZE_MAX; i++)
      if (out[i] != in[i] + 2) bad = i;
    CHECK_MSG(bad == SIZE_MAX, "%zu elements: element %zu is %d, %d expected (write, kernel, copy, kernel, read)", n,
              bad, bad == SIZE_MAX ? 0 : out[bad], bad == SIZE_MAX ? 0 : in[bad] + 2);
    CHECK_OK(ferry_free(a));
    CHECK_OK(ferry_free(b));
    free(in);
    free(out);
  }
  CHECK_OK(ferry_queue_destroy(q));
}

static bool build_kernel(const ferry_cl_api *api, const ferry_native *nat, kernel_ctx *k, cl_program *out_program) {
  if (!api->clCreateProgramWithSource || !api->clBuildProgram || !api->clCreateKernel || !api->clEnqueueNDRangeKernel ||
      !api->clSetKernelArg) {
    CHECK_MSG(false, "the OpenCL library has no program/kernel entry points");
    return false;
  }
  cl_int err = CL_SUCCESS;
  const char *src = kernel_source;
  cl_program program = api->clCreateProgramWithSource((cl_context)nat->context, 1, &src, NULL, &err);
  CHECK_MSG(err == CL_SUCCESS && program, "clCreateProgramWithSource: %s (%d)", ferry__opencl_error_name(err),
            (int)err);
  if (err != CL_SUCCESS || !program) return false;
  cl_device_id device = (cl_device_id)nat->device;
  err = api->clBuildProgram(program, 1, &device, "", NULL, NULL);
  if (err != CL_SUCCESS) {
    char log[4096] = "";
    if (api->clGetProgramBuildInfo)
      api->clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    CHECK_MSG(false, "clBuildProgram: %s (%d): %s", ferry__opencl_error_name(err), (int)err, log);
    api->clReleaseProgram(program);
    return false;
  }
  k->kernel = api->clCreateKernel(program, "increment", &err);
  CHECK_MSG(err == CL_SUCCESS && k->kernel, "clCreateKernel: %s (%d)", ferry__opencl_error_name(err), (int)err);
  if (err != CL_SUCCESS || !k->kernel) {
    api->clReleaseProgram(program);
    return false;
  }
  k->api = api;
  k->queue = (cl_command_queue)nat->queue;
  *out_program = program;
  return true;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  ferry_backend_info backend;
  int present = harness_start_backend("opencl", "opencl_kernel", &backend);
  if (present != 0) return present;
  const ferry_cl_api *api = ferry__opencl_api();
  CHECK(api != NULL);
  char context[512];
  for (size_t d = 0; api && d < backend.device_count; d++) {
    ferry_device *dev = NULL;
    ferry_device_info info;
    CHECK_OK(ferry_device_get(backend.first_device + d, &dev));
    CHECK_OK(ferry_device_info_get(dev, &info));
    snprintf(context, sizeof context, "opencl[%zu] %s", info.index, info.name);
    harness_context = context;
    ferry_native nat;
    CHECK_OK(ferry_device_native(dev, &nat));
    kernel_ctx k = {0};
    cl_program program = NULL;
    printf("device %zu: %s\n", info.index, info.name);
    if (!build_kernel(api, &nat, &k, &program)) continue;
    int before = harness_failures;
    plain_buffer(&k, dev);
    printf("  %-28s %s\n", "kernel on a buffer", harness_failures == before ? "ok" : "FAILED");
    before = harness_failures;
    host_ptr_buffer(&k, dev, &info);
    printf("  %-28s %s\n", "kernel on a host-ptr buffer", harness_failures == before ? "ok" : "FAILED");
    before = harness_failures;
    queue_native_order(&k, dev);
    printf("  %-28s %s\n", "kernels on a queue's own", harness_failures == before ? "ok" : "FAILED");
    api->clReleaseKernel(k.kernel);
    api->clReleaseProgram(program);
  }
  harness_context = "";
  ferry_shutdown();
  return harness_finish("opencl_kernel");
}
