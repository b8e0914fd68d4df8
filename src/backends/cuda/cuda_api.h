/*
 * The few CUDA driver API types, constants and functions the cuda backend uses,
 * declared here so that ferry builds without the CUDA toolkit. The values and
 * signatures are the driver's (cuda.h of CUDA 13.0); the function table is
 * filled by dlsym on libcuda.so.1 at run time, under the versioned symbol names
 * that cuda.h maps the plain names to (cuMemAlloc -> cuMemAlloc_v2, ...).
 *
 * Tests and benchmarks reach the loaded table through ferry__cuda_api(), to make
 * raw driver calls on ferry's buffers (ferry_device_ptr is the CUdeviceptr,
 * ferry_device_native gives the CUdevice and the primary CUcontext).
 *
 * tests/fake_cuda/check_cuda_h.c checks every type, constant and signature here
 * against the toolkit's cuda.h where one is installed.
 */
#ifndef FERRY_CUDA_API_H
#define FERRY_CUDA_API_H

#include <stddef.h>

#ifdef FERRY_CUDA_TYPES_FROM_CUDA_H
/* Only for the check against the toolkit's header. */
#include <cuda.h>
typedef CUresult cu_result;
typedef CUdevice cu_device;
typedef CUdeviceptr cu_deviceptr;
typedef CUcontext cu_context;
typedef CUstream cu_stream;
typedef CUevent cu_event;
typedef CUmodule cu_module;
typedef CUfunction cu_function;
typedef CUdevice_attribute cu_device_attribute;
typedef CUpointer_attribute cu_pointer_attribute;
typedef CUuuid cu_uuid;
#else
typedef int cu_result; /* CUresult */
typedef int cu_device; /* CUdevice: an ordinal-like handle; 0 is a valid device */
typedef unsigned long long cu_deviceptr;
typedef struct cu_ctx_st *cu_context;
typedef struct cu_stream_st *cu_stream; /* NULL is the legacy default stream */
typedef struct cu_event_st *cu_event;
typedef struct cu_mod_st *cu_module;
typedef struct cu_func_st *cu_function;
typedef int cu_device_attribute;
typedef int cu_pointer_attribute;
typedef struct cu_uuid {
  char bytes[16];
} cu_uuid; /* CUuuid */
#endif

/* CUresult values ferry names or acts on. */
enum {
  FCU_SUCCESS = 0,
  FCU_ERROR_INVALID_VALUE = 1,
  FCU_ERROR_OUT_OF_MEMORY = 2,
  FCU_ERROR_NOT_INITIALIZED = 3,
  FCU_ERROR_DEINITIALIZED = 4,
  FCU_ERROR_STUB_LIBRARY = 34,
  FCU_ERROR_NO_DEVICE = 100,
  FCU_ERROR_INVALID_DEVICE = 101,
  FCU_ERROR_INVALID_IMAGE = 200,
  FCU_ERROR_INVALID_CONTEXT = 201,
  FCU_ERROR_ECC_UNCORRECTABLE = 214,
  FCU_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
  FCU_ERROR_INVALID_PTX = 218,
  FCU_ERROR_NVLINK_UNCORRECTABLE = 220,
  FCU_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  FCU_ERROR_CONTAINED = 226,
  FCU_ERROR_NOT_FOUND = 500,
  FCU_ERROR_INVALID_HANDLE = 400,
  FCU_ERROR_NOT_READY = 600,
  FCU_ERROR_ILLEGAL_ADDRESS = 700,
  FCU_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  FCU_ERROR_LAUNCH_TIMEOUT = 702,
  FCU_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
  FCU_ERROR_PEER_ACCESS_NOT_ENABLED = 705,
  FCU_ERROR_ASSERT = 710,
  FCU_ERROR_TOO_MANY_PEERS = 711,
  FCU_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
  FCU_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
  FCU_ERROR_HARDWARE_STACK_ERROR = 714,
  FCU_ERROR_ILLEGAL_INSTRUCTION = 715,
  FCU_ERROR_MISALIGNED_ADDRESS = 716,
  FCU_ERROR_INVALID_ADDRESS_SPACE = 717,
  FCU_ERROR_INVALID_PC = 718,
  FCU_ERROR_LAUNCH_FAILED = 719,
  FCU_ERROR_TENSOR_MEMORY_LEAK = 721,
  FCU_ERROR_NOT_PERMITTED = 800,
  FCU_ERROR_NOT_SUPPORTED = 801,
  FCU_ERROR_UNKNOWN = 999,
};

/* CUdevice_attribute */
enum {
  FCU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19,
  FCU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
  FCU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
  FCU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
  FCU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
  FCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  FCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  FCU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = 91,
};

/* CUpointer_attribute */
enum {
  FCU_POINTER_ATTRIBUTE_CONTEXT = 1,
  FCU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
  FCU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
  FCU_POINTER_ATTRIBUTE_HOST_POINTER = 4,
  FCU_POINTER_ATTRIBUTE_SYNC_MEMOPS = 6,
  FCU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
  FCU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
  FCU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
};

/* CUmemorytype */
enum {
  FCU_MEMORYTYPE_HOST = 1,
  FCU_MEMORYTYPE_DEVICE = 2,
  FCU_MEMORYTYPE_ARRAY = 3,
  FCU_MEMORYTYPE_UNIFIED = 4,
};

/* Flags */
#define FCU_MEMHOSTALLOC_PORTABLE     0x01u
#define FCU_MEMHOSTALLOC_DEVICEMAP    0x02u
#define FCU_MEMHOSTREGISTER_PORTABLE  0x01u
#define FCU_MEMHOSTREGISTER_DEVICEMAP 0x02u
#define FCU_STREAM_DEFAULT            0x0u /* blocking: ordered with the legacy default stream */
#define FCU_STREAM_NON_BLOCKING       0x1u
#define FCU_EVENT_DISABLE_TIMING      0x2u
#define FCU_STREAM_WAIT_VALUE_GEQ     0x0u /* (int32_t)(*addr - value) >= 0: a cyclic greater-or-equal */

/*
 * The driver functions: X(required, member, "symbol", return type, parameters).
 * A required symbol missing from the library makes the backend absent; the
 * others (used by tests and benchmarks, or by ferry with a fallback) are NULL
 * when missing.
 */
#define FERRY_CUDA_FUNCTIONS(X)                                                                                        \
  X(1, cuGetErrorName, "cuGetErrorName", cu_result, (cu_result error, const char **str))                               \
  X(1, cuGetErrorString, "cuGetErrorString", cu_result, (cu_result error, const char **str))                           \
  X(1, cuInit, "cuInit", cu_result, (unsigned int flags))                                                              \
  X(1, cuDriverGetVersion, "cuDriverGetVersion", cu_result, (int *version))                                            \
  X(1, cuDeviceGetCount, "cuDeviceGetCount", cu_result, (int *count))                                                  \
  X(1, cuDeviceGet, "cuDeviceGet", cu_result, (cu_device * device, int ordinal))                                       \
  X(1, cuDeviceGetName, "cuDeviceGetName", cu_result, (char *name, int len, cu_device dev))                            \
  X(1, cuDeviceTotalMem, "cuDeviceTotalMem_v2", cu_result, (size_t * bytes, cu_device dev))                            \
  X(1, cuDeviceGetAttribute, "cuDeviceGetAttribute", cu_result,                                                        \
    (int *value, cu_device_attribute attrib, cu_device dev))                                                           \
  X(0, cuDeviceGetUuid, "cuDeviceGetUuid_v2", cu_result, (cu_uuid * uuid, cu_device dev))                              \
  X(0, cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", cu_result, (char *pci_bus_id, int len, cu_device dev))              \
  X(1, cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", cu_result, (int *can, cu_device dev, cu_device peer))           \
  X(1, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", cu_result, (cu_context * ctx, cu_device dev))             \
  X(1, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", cu_result, (cu_device dev))                          \
  X(1, cuCtxGetCurrent, "cuCtxGetCurrent", cu_result, (cu_context * ctx))                                              \
  X(1, cuCtxSetCurrent, "cuCtxSetCurrent", cu_result, (cu_context ctx))                                                \
  X(1, cuCtxPushCurrent, "cuCtxPushCurrent_v2", cu_result, (cu_context ctx))                                           \
  X(1, cuCtxPopCurrent, "cuCtxPopCurrent_v2", cu_result, (cu_context * ctx))                                           \
  X(1, cuCtxSynchronize, "cuCtxSynchronize", cu_result, (void))                                                        \
  X(1, cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess", cu_result, (cu_context peer, unsigned int flags))               \
  X(1, cuMemGetInfo, "cuMemGetInfo_v2", cu_result, (size_t * free_bytes, size_t * total_bytes))                        \
  X(1, cuMemAlloc, "cuMemAlloc_v2", cu_result, (cu_deviceptr * dptr, size_t bytes))                                    \
  X(1, cuMemFree, "cuMemFree_v2", cu_result, (cu_deviceptr dptr))                                                      \
  X(1, cuMemHostAlloc, "cuMemHostAlloc", cu_result, (void **ptr, size_t bytes, unsigned int flags))                    \
  X(0, cuMemAllocHost, "cuMemAllocHost_v2", cu_result, (void **ptr, size_t bytes))                                     \
  X(1, cuMemFreeHost, "cuMemFreeHost", cu_result, (void *ptr))                                                         \
  X(1, cuMemHostRegister, "cuMemHostRegister_v2", cu_result, (void *ptr, size_t bytes, unsigned int flags))            \
  X(1, cuMemHostUnregister, "cuMemHostUnregister", cu_result, (void *ptr))                                             \
  X(1, cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", cu_result,                                           \
    (cu_deviceptr * dptr, void *ptr, unsigned int flags))                                                              \
  X(1, cuPointerGetAttribute, "cuPointerGetAttribute", cu_result,                                                      \
    (void *data, cu_pointer_attribute attribute, cu_deviceptr ptr))                                                    \
  X(1, cuPointerGetAttributes, "cuPointerGetAttributes", cu_result,                                                    \
    (unsigned int count, cu_pointer_attribute *attributes, void **data, cu_deviceptr ptr))                             \
  X(1, cuPointerSetAttribute, "cuPointerSetAttribute", cu_result,                                                      \
    (const void *value, cu_pointer_attribute attribute, cu_deviceptr ptr))                                             \
  X(1, cuMemcpyHtoD, "cuMemcpyHtoD_v2", cu_result, (cu_deviceptr dst, const void *src, size_t bytes))                  \
  X(1, cuMemcpyDtoH, "cuMemcpyDtoH_v2", cu_result, (void *dst, cu_deviceptr src, size_t bytes))                        \
  X(1, cuMemcpyDtoD, "cuMemcpyDtoD_v2", cu_result, (cu_deviceptr dst, cu_deviceptr src, size_t bytes))                 \
  X(1, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", cu_result,                                                           \
    (cu_deviceptr dst, const void *src, size_t bytes, cu_stream stream))                                               \
  X(1, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", cu_result,                                                           \
    (void *dst, cu_deviceptr src, size_t bytes, cu_stream stream))                                                     \
  X(1, cuMemcpyPeer, "cuMemcpyPeer", cu_result,                                                                        \
    (cu_deviceptr dst, cu_context dst_ctx, cu_deviceptr src, cu_context src_ctx, size_t bytes))                        \
  X(1, cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", cu_result,                                                           \
    (cu_deviceptr dst, cu_deviceptr src, size_t bytes, cu_stream stream))                                              \
  X(1, cuMemcpyPeerAsync, "cuMemcpyPeerAsync", cu_result,                                                              \
    (cu_deviceptr dst, cu_context dst_ctx, cu_deviceptr src, cu_context src_ctx, size_t bytes, cu_stream stream))      \
  X(1, cuMemsetD8Async, "cuMemsetD8Async", cu_result, (cu_deviceptr dst, unsigned char value, size_t n, cu_stream s))  \
  X(1, cuMemsetD16Async, "cuMemsetD16Async", cu_result,                                                                \
    (cu_deviceptr dst, unsigned short value, size_t n, cu_stream s))                                                   \
  X(1, cuMemsetD32Async, "cuMemsetD32Async", cu_result, (cu_deviceptr dst, unsigned int value, size_t n, cu_stream s)) \
  X(1, cuStreamCreate, "cuStreamCreate", cu_result, (cu_stream * stream, unsigned int flags))                          \
  X(1, cuStreamDestroy, "cuStreamDestroy_v2", cu_result, (cu_stream stream))                                           \
  X(1, cuStreamSynchronize, "cuStreamSynchronize", cu_result, (cu_stream stream))                                      \
  X(1, cuStreamQuery, "cuStreamQuery", cu_result, (cu_stream stream))                                                  \
  X(1, cuStreamWaitEvent, "cuStreamWaitEvent", cu_result, (cu_stream stream, cu_event event, unsigned int flags))      \
  X(1, cuEventCreate, "cuEventCreate", cu_result, (cu_event * event, unsigned int flags))                              \
  X(1, cuEventRecord, "cuEventRecord", cu_result, (cu_event event, cu_stream stream))                                  \
  X(1, cuEventSynchronize, "cuEventSynchronize", cu_result, (cu_event event))                                          \
  X(1, cuEventQuery, "cuEventQuery", cu_result, (cu_event event))                                                      \
  X(1, cuEventElapsedTime, "cuEventElapsedTime_v2", cu_result, (float *ms, cu_event start, cu_event stop))             \
  X(1, cuEventDestroy, "cuEventDestroy_v2", cu_result, (cu_event event))                                               \
  X(0, cuStreamWaitValue32, "cuStreamWaitValue32_v2", cu_result,                                                       \
    (cu_stream stream, cu_deviceptr addr, unsigned int value, unsigned int flags))                                     \
  X(0, cuModuleLoadData, "cuModuleLoadData", cu_result, (cu_module * module, const void *image))                       \
  X(0, cuModuleUnload, "cuModuleUnload", cu_result, (cu_module module))                                                \
  X(0, cuModuleGetFunction, "cuModuleGetFunction", cu_result, (cu_function * fn, cu_module module, const char *name))  \
  X(0, cuLaunchKernel, "cuLaunchKernel", cu_result,                                                                    \
    (cu_function fn, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z, unsigned int block_x,              \
     unsigned int block_y, unsigned int block_z, unsigned int shared_bytes, cu_stream stream, void **params,           \
     void **extra))

#define FERRY_CUDA_MEMBER(required, member, symbol, ret, params) ret(*member) params;
typedef struct ferry_cuda_api {
  FERRY_CUDA_FUNCTIONS(FERRY_CUDA_MEMBER)
} ferry_cuda_api;
#undef FERRY_CUDA_MEMBER

/* The loaded driver's functions; NULL while the cuda backend has no devices
 * (before ferry_init, after ferry_shutdown, or without a driver). */
const ferry_cuda_api *ferry__cuda_api(void);

/* "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory", through the loaded driver's
 * cuGetErrorName and cuGetErrorString; `buf` holds at least 256 bytes. */
const char *ferry__cuda_error_text(cu_result r, char *buf, size_t size);

#endif /* FERRY_CUDA_API_H */
