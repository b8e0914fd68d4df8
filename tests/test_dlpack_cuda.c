/*
 * dlpack_cuda: DLPack between ferry and a CUDA program that runs its own kernel,
 * through the driver API (the kernel of cuda_kernel.h adds 1 to every
 * int32), on every CUDA device:
 *  - export: ferry writes a buffer and exports it; the consumer (the code below,
 *    as PyTorch or CuPy would) takes the versioned tensor, checks its device,
 *    dtype and layout, ferry_free's the buffer (the tensor keeps the memory),
 *    launches the kernel on data + byte_offset on a stream of its own that does
 *    not wait for ferry's, reads the result with cuMemcpyDtoH, and calls the
 *    deleter, after which the memory is back with ferry;
 *  - import: memory from cuMemAlloc, made and filled by the program outside
 *    ferry, wrapped in a tensor whose deleter calls cuMemFree; ferry imports
 *    it, reads and writes it, the kernel runs on ferry_device_ptr, and
 *    ferry_free calls the producer's deleter exactly once.
 *
 * Skips (77) without a CUDA device or when the driver cannot load PTX (the fake
 * without FAKE_CUDA_KERNELS=1), unless FERRY_REQUIRE_BACKENDS names cuda. The
 * ctest dlpack_cuda runs it on a GPU, dlpack_cuda.fake on the fake driver.
 */
#include "backends/cuda/cuda_api.h"
#include "cuda_kernel.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

static const ferry_cuda_api *api;

/* The consumer's kernel in the device's primary context (pushed while it runs). */
typedef struct consumer {
  cu_context ctx;
  cu_module module;
  cu_function fn;
  cu_stream stream; /* non-blocking: it does not wait for the legacy stream ferry uses */
} consumer;

/* 0 ready; 77 the driver cannot load PTX; 1 failed. */
static int consumer_start(ferry_device *dev, consumer *c) {
  ferry_native nat;
  CHECK_OK(ferry_device_native(dev, &nat));
  c->ctx = (cu_context)nat.context;
  CHECK_CU(api->cuCtxPushCurrent(c->ctx));
  cu_result r = api->cuModuleLoadData(&c->module, increment_ptx);
  int rc = 0;
  if (r == FCU_ERROR_NOT_SUPPORTED && !harness_backend_required("cuda")) {
    printf("SKIP dlpack_cuda: this CUDA driver cannot load PTX: cuModuleLoadData returned %s (the fake driver runs "
           "kernels only with FAKE_CUDA_KERNELS=1)\n",
           cu_text(r));
    rc = HARNESS_SKIP;
  } else if (r != FCU_SUCCESS) {
    CHECK_MSG(false, "cuModuleLoadData: %s", cu_text(r));
    rc = 1;
  } else {
    CHECK_CU(api->cuModuleGetFunction(&c->fn, c->module, "ferry_increment_i32"));
    CHECK_CU(api->cuStreamCreate(&c->stream, FCU_STREAM_NON_BLOCKING));
  }
  cu_context popped;
  api->cuCtxPopCurrent(&popped);
  return rc;
}

static void consumer_stop(consumer *c) {
  CHECK_CU(api->cuCtxPushCurrent(c->ctx));
  CHECK_CU(api->cuStreamDestroy(c->stream));
  CHECK_CU(api->cuModuleUnload(c->module));
  cu_context popped;
  api->cuCtxPopCurrent(&popped);
}

/* data[0 .. n) += 1 on the consumer's stream, then waits for it. */
static void consumer_increment(consumer *c, cu_deviceptr data, unsigned int n) {
  CHECK_CU(api->cuCtxPushCurrent(c->ctx));
  CHECK_CU(increment_launch(api, c->fn, (uintptr_t)data, n, c->stream));
  CHECK_CU(api->cuStreamSynchronize(c->stream));
  cu_context popped;
  api->cuCtxPopCurrent(&popped);
}

/* ---- ferry produces, the program consumes ---------------------------------------- */

static void export_to_kernel(ferry_device *dev, consumer *c) {
  size_t n = ((size_t)1 << 22) + 5; /* 16 MiB and a bit: not a multiple of the block */
  int32_t *host = malloc(n * sizeof *host);
  fill(host, n, 3);
  ferry_stats before;
  CHECK_OK(ferry_device_stats(dev, &before));
  ferry_buffer b;
  CHECK_OK(ferry_alloc(dev, n, FERRY_INT32, &b));
  CHECK_OK(ferry_host_to_device(ferry_array_of(host, n, FERRY_INT32), b));
  ferry_dl_managed_tensor_versioned *t = NULL;
  CHECK_OK(ferry_dlpack_export_versioned(b, &t));
  if (!t) return;
  /* The consumer's checks, as a framework makes them. */
  ferry_dl_device want;
  CHECK_OK(ferry_dlpack_device(dev, &want));
  const ferry_dl_tensor *dl = &t->dl_tensor;
  CHECK(t->version.major == 1 && !(t->flags & FERRY_DL_FLAG_READ_ONLY));
  CHECK(dl->device.device_type == FERRY_DL_CUDA && dl->device.device_id == want.device_id);
  CHECK(dl->dtype.code == FERRY_DL_INT && dl->dtype.bits == 32 && dl->dtype.lanes == 1);
  CHECK(dl->ndim == 1 && dl->shape[0] == (int64_t)n && (!dl->strides || dl->strides[0] == 1));
  cu_deviceptr data = (cu_deviceptr)(uintptr_t)dl->data + dl->byte_offset;
  /* The producer lets go of its handle; the tensor keeps the memory. */
  CHECK_OK(ferry_free(b));
  consumer_increment(c, data, (unsigned int)n);
  int32_t *back = malloc(n * sizeof *back);
  CHECK_CU(api->cuCtxPushCurrent(c->ctx));
  CHECK_CU(api->cuMemcpyDtoH(back, data, n * sizeof *back));
  cu_context popped;
  api->cuCtxPopCurrent(&popped);
  expect(back, n, 3, 1, "the consumer's kernel on ferry's exported buffer");
  ferry_stats held;
  CHECK_OK(ferry_device_stats(dev, &held));
  CHECK(held.live_buffers == before.live_buffers + 1);
  t->deleter(t);
  ferry_stats after;
  CHECK_OK(ferry_device_stats(dev, &after));
  CHECK(after.live_buffers == before.live_buffers && after.bytes_in_use == before.bytes_in_use);
  free(host);
  free(back);
}

/* ---- the program produces, ferry consumes ------------------------------------------- */

typedef struct produced {
  ferry_dl_managed_tensor tensor;
  int64_t shape[1];
  cu_context ctx;
  cu_deviceptr ptr;
  int deleted;
} produced;

static void produced_deleter(ferry_dl_managed_tensor *self) {
  produced *p = self->manager_ctx;
  p->deleted++;
  if (api->cuCtxPushCurrent(p->ctx) == FCU_SUCCESS) {
    CHECK_CU(api->cuMemFree(p->ptr));
    cu_context popped;
    api->cuCtxPopCurrent(&popped);
  }
}

static void import_from_cumemalloc(ferry_device *dev, consumer *c) {
  size_t n = ((size_t)1 << 20) + 7, bytes = n * sizeof(int32_t);
  int32_t *host = malloc(bytes), *back = malloc(bytes);
  fill(host, n, 9);
  produced p = {.ctx = c->ctx, .shape = {(int64_t)n}};
  CHECK_CU(api->cuCtxPushCurrent(p.ctx));
  CHECK_CU(api->cuMemAlloc(&p.ptr, bytes));
  CHECK_CU(api->cuMemcpyHtoD(p.ptr, host, bytes));
  CHECK_CU(api->cuCtxSynchronize());
  cu_context popped;
  api->cuCtxPopCurrent(&popped);
  ferry_dl_device dl;
  CHECK_OK(ferry_dlpack_device(dev, &dl));
  p.tensor = (ferry_dl_managed_tensor){
      .dl_tensor =
          {.data = (void *)(uintptr_t)p.ptr, .device = dl, .ndim = 1, .dtype = {FERRY_DL_INT, 32, 1}, .shape = p.shape},
      .manager_ctx = &p,
      .deleter = produced_deleter,
  };
  ferry_buffer b;
  ferry_refusal why = FERRY_REFUSAL_DRIVER;
  CHECK_OK(ferry_dlpack_import(&p.tensor, NULL, &b, &why));
  CHECK(why == FERRY_REFUSAL_NONE);
  CHECK(ferry_buffer_device(b) == dev);
  CHECK(ferry_device_ptr(b) == p.ptr);
  CHECK(ferry_buffer_kind(b) == FERRY_INT32 && ferry_size(b) == n);
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(back, n, FERRY_INT32)));
  expect(back, n, 9, 0, "ferry reading cuMemAlloc memory");
  fill(host, n, 10);
  CHECK_OK(ferry_host_to_device(ferry_array_of(host, n, FERRY_INT32), b));
  consumer_increment(c, (cu_deviceptr)ferry_device_ptr(b), (unsigned int)n);
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(back, n, FERRY_INT32)));
  expect(back, n, 10, 1, "a kernel on the imported buffer, read by ferry");
  CHECK(p.deleted == 0);
  CHECK_OK(ferry_free(b));
  CHECK(p.deleted == 1);
  CHECK_STATUS(ferry_free(b), FERRY_ERROR_STALE_BUFFER);
  CHECK(p.deleted == 1);
  free(host);
  free(back);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  ferry_backend_info info;
  int present = harness_start_backend("cuda", "dlpack_cuda", &info);
  if (present != 0) return present;
  api = ferry__cuda_api();
  CHECK(api != NULL);
  for (size_t d = 0; api && d < info.device_count; d++) {
    ferry_device *dev;
    CHECK_OK(ferry_device_get(info.first_device + d, &dev));
    ferry_device_info di;
    CHECK_OK(ferry_device_info_get(dev, &di));
    consumer c;
    int rc = consumer_start(dev, &c);
    if (rc == HARNESS_SKIP) {
      ferry_shutdown();
      return HARNESS_SKIP;
    }
    if (rc != 0) continue;
    int before = harness_failures;
    export_to_kernel(dev, &c);
    printf("dlpack_cuda: %s: exported buffer, consumer's kernel %s\n", di.name,
           harness_failures == before ? "ok" : "FAILED");
    before = harness_failures;
    import_from_cumemalloc(dev, &c);
    printf("dlpack_cuda: %s: cuMemAlloc memory imported, kernel on it %s\n", di.name,
           harness_failures == before ? "ok" : "FAILED");
    consumer_stop(&c);
  }
  ferry_shutdown();
  return harness_finish("dlpack_cuda");
}
