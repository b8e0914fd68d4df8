/*
 * The raw CUDA baseline's own driver table: the few driver functions that
 * raw_cuda.c (and bench/bench_cuda.c) call, looked up in the libcuda that ferry's
 * cuda backend loaded (FERRY_CUDA_LIBRARY, else libcuda.so.1) through the core's
 * loader. The types and constants are ferry's declarations of the driver API
 * (src/backends/cuda/cuda_api.h), under the versioned symbol names cuda.h maps
 * the plain names to.
 */
#ifndef FERRY_RAW_CUDA_H
#define FERRY_RAW_CUDA_H

#include "backends/cuda/cuda_api.h"

#include <stdbool.h>

/* X(member, "symbol", required, return type, parameters) */
#define RAW_CUDA_FUNCTIONS(X)                                                                                          \
  X(cuDriverGetVersion, "cuDriverGetVersion", true, cu_result, (int *version))                                         \
  X(cuCtxGetCurrent, "cuCtxGetCurrent", true, cu_result, (cu_context * ctx))                                           \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", true, cu_result, (cu_context ctx))                                             \
  X(cuCtxSynchronize, "cuCtxSynchronize", true, cu_result, (void))                                                     \
  X(cuStreamSynchronize, "cuStreamSynchronize", true, cu_result, (cu_stream stream))                                   \
  X(cuMemAlloc, "cuMemAlloc_v2", true, cu_result, (cu_deviceptr * dptr, size_t bytes))                                 \
  X(cuMemFree, "cuMemFree_v2", true, cu_result, (cu_deviceptr dptr))                                                   \
  X(cuMemAllocHost, "cuMemAllocHost_v2", false, cu_result, (void **ptr, size_t bytes))                                 \
  X(cuMemFreeHost, "cuMemFreeHost", true, cu_result, (void *ptr))                                                      \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", true, cu_result, (cu_deviceptr dst, const void *src, size_t bytes))               \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", true, cu_result,                                                        \
    (cu_deviceptr dst, const void *src, size_t bytes, cu_stream stream))                                               \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", true, cu_result, (void *dst, cu_deviceptr src, size_t bytes))                     \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", true, cu_result,                                                        \
    (void *dst, cu_deviceptr src, size_t bytes, cu_stream stream))                                                     \
  X(cuStreamCreate, "cuStreamCreate", true, cu_result, (cu_stream * stream, unsigned int flags))                       \
  X(cuStreamDestroy, "cuStreamDestroy_v2", true, cu_result, (cu_stream stream))                                        \
  X(cuMemcpyDtoD, "cuMemcpyDtoD_v2", true, cu_result, (cu_deviceptr dst, cu_deviceptr src, size_t bytes))              \
  X(cuMemcpyPeer, "cuMemcpyPeer", true, cu_result,                                                                     \
    (cu_deviceptr dst, cu_context dst_ctx, cu_deviceptr src, cu_context src_ctx, size_t bytes))                        \
  X(cuEventCreate, "cuEventCreate", false, cu_result, (cu_event * event, unsigned int flags))                          \
  X(cuEventRecord, "cuEventRecord", false, cu_result, (cu_event event, cu_stream stream))                              \
  X(cuEventSynchronize, "cuEventSynchronize", false, cu_result, (cu_event event))                                      \
  X(cuEventElapsedTime, "cuEventElapsedTime_v2", false, cu_result, (float *ms, cu_event start, cu_event stop))         \
  X(cuEventDestroy, "cuEventDestroy_v2", false, cu_result, (cu_event event))

typedef struct raw_cuda_driver {
#define RAW_CUDA_MEMBER(member, symbol, required, ret, params) ret(*member) params;
  RAW_CUDA_FUNCTIONS(RAW_CUDA_MEMBER)
#undef RAW_CUDA_MEMBER
} raw_cuda_driver;

/* The table, looked up once (after ferry_init, with the cuda backend running);
 * NULL with a sentence in why[256] when the library or a required function is
 * missing. An optional function the driver lacks is NULL. */
const raw_cuda_driver *raw_cuda_driver_load(char why[256]);

#endif
