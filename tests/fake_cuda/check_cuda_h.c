/*
 * Compile-time check of src/backends/cuda/cuda_api.h against the CUDA
 * toolkit's cuda.h: every constant has the driver's value and every function
 * in the table has exactly the type of the versioned symbol it is loaded from.
 * Built and run (ctest cuda_h_check) only where a toolkit is installed.
 */
#define FERRY_CUDA_TYPES_FROM_CUDA_H
#include "backends/cuda/cuda_api.h"

#define SAME(a, b) _Static_assert((long long)(a) == (long long)(b), #a " differs from cuda.h's " #b)

SAME(FCU_SUCCESS, CUDA_SUCCESS);
SAME(FCU_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE);
SAME(FCU_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY);
SAME(FCU_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_INITIALIZED);
SAME(FCU_ERROR_DEINITIALIZED, CUDA_ERROR_DEINITIALIZED);
SAME(FCU_ERROR_STUB_LIBRARY, CUDA_ERROR_STUB_LIBRARY);
SAME(FCU_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE);
SAME(FCU_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_DEVICE);
SAME(FCU_ERROR_INVALID_IMAGE, CUDA_ERROR_INVALID_IMAGE);
SAME(FCU_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_CONTEXT);
SAME(FCU_ERROR_ECC_UNCORRECTABLE, CUDA_ERROR_ECC_UNCORRECTABLE);
SAME(FCU_ERROR_PEER_ACCESS_UNSUPPORTED, CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
SAME(FCU_ERROR_INVALID_PTX, CUDA_ERROR_INVALID_PTX);
SAME(FCU_ERROR_NVLINK_UNCORRECTABLE, CUDA_ERROR_NVLINK_UNCORRECTABLE);
SAME(FCU_ERROR_UNSUPPORTED_PTX_VERSION, CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
SAME(FCU_ERROR_CONTAINED, CUDA_ERROR_CONTAINED);
SAME(FCU_ERROR_NOT_FOUND, CUDA_ERROR_NOT_FOUND);
SAME(FCU_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_HANDLE);
SAME(FCU_ERROR_NOT_READY, CUDA_ERROR_NOT_READY);
SAME(FCU_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_ILLEGAL_ADDRESS);
SAME(FCU_ERROR_LAUNCH_OUT_OF_RESOURCES, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
SAME(FCU_ERROR_LAUNCH_TIMEOUT, CUDA_ERROR_LAUNCH_TIMEOUT);
SAME(FCU_ERROR_PEER_ACCESS_ALREADY_ENABLED, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
SAME(FCU_ERROR_PEER_ACCESS_NOT_ENABLED, CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
SAME(FCU_ERROR_ASSERT, CUDA_ERROR_ASSERT);
SAME(FCU_ERROR_TOO_MANY_PEERS, CUDA_ERROR_TOO_MANY_PEERS);
SAME(FCU_ERROR_HOST_MEMORY_ALREADY_REGISTERED, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
SAME(FCU_ERROR_HOST_MEMORY_NOT_REGISTERED, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
SAME(FCU_ERROR_HARDWARE_STACK_ERROR, CUDA_ERROR_HARDWARE_STACK_ERROR);
SAME(FCU_ERROR_ILLEGAL_INSTRUCTION, CUDA_ERROR_ILLEGAL_INSTRUCTION);
SAME(FCU_ERROR_MISALIGNED_ADDRESS, CUDA_ERROR_MISALIGNED_ADDRESS);
SAME(FCU_ERROR_INVALID_ADDRESS_SPACE, CUDA_ERROR_INVALID_ADDRESS_SPACE);
SAME(FCU_ERROR_INVALID_PC, CUDA_ERROR_INVALID_PC);
SAME(FCU_ERROR_LAUNCH_FAILED, CUDA_ERROR_LAUNCH_FAILED);
SAME(FCU_ERROR_TENSOR_MEMORY_LEAK, CUDA_ERROR_TENSOR_MEMORY_LEAK);
SAME(FCU_ERROR_NOT_PERMITTED, CUDA_ERROR_NOT_PERMITTED);
SAME(FCU_ERROR_NOT_SUPPORTED, CUDA_ERROR_NOT_SUPPORTED);
SAME(FCU_ERROR_UNKNOWN, CUDA_ERROR_UNKNOWN);

SAME(FCU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY);
SAME(FCU_DEVICE_ATTRIBUTE_PCI_BUS_ID, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
SAME(FCU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
SAME(FCU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
SAME(FCU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
SAME(FCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
SAME(FCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
SAME(FCU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
     CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM);

SAME(FCU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_CONTEXT);
SAME(FCU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
SAME(FCU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_DEVICE_POINTER);
SAME(FCU_POINTER_ATTRIBUTE_HOST_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER);
SAME(FCU_POINTER_ATTRIBUTE_SYNC_MEMOPS, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS);
SAME(FCU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
SAME(FCU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR);
SAME(FCU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_RANGE_SIZE);

SAME(FCU_MEMORYTYPE_HOST, CU_MEMORYTYPE_HOST);
SAME(FCU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE);
SAME(FCU_MEMORYTYPE_ARRAY, CU_MEMORYTYPE_ARRAY);
SAME(FCU_MEMORYTYPE_UNIFIED, CU_MEMORYTYPE_UNIFIED);

SAME(FCU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_PORTABLE);
SAME(FCU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_DEVICEMAP);
SAME(FCU_MEMHOSTREGISTER_PORTABLE, CU_MEMHOSTREGISTER_PORTABLE);
SAME(FCU_MEMHOSTREGISTER_DEVICEMAP, CU_MEMHOSTREGISTER_DEVICEMAP);
SAME(FCU_STREAM_DEFAULT, CU_STREAM_DEFAULT);
SAME(FCU_STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING);
SAME(FCU_EVENT_DISABLE_TIMING, CU_EVENT_DISABLE_TIMING);
SAME(FCU_STREAM_WAIT_VALUE_GEQ, CU_STREAM_WAIT_VALUE_GEQ);

/* Numbers the fake driver (fake_cuda.c) answers or refuses without a name in
 * cuda_api.h. */
SAME(0, CU_EVENT_WAIT_DEFAULT);   /* the one cuStreamWaitEvent flag it accepts */
SAME(1, CU_STREAM_WAIT_VALUE_EQ); /* cuStreamWaitValue32 flags it refuses: */
SAME(2, CU_STREAM_WAIT_VALUE_AND);
SAME(3, CU_STREAM_WAIT_VALUE_NOR);
SAME(1u << 30, CU_STREAM_WAIT_VALUE_FLUSH);
SAME(4, CU_EVENT_INTERPROCESS); /* cuEventCreate flags: needs DISABLE_TIMING */
SAME(1, CU_EVENT_BLOCKING_SYNC);
SAME(122, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS); /* answered 0 */
SAME(123, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR); /* answered 0 */
SAME(709, CUDA_ERROR_CONTEXT_IS_DESTROYED);

/* Each table member has the type of the symbol it is loaded from. The symbol
 * names are spelled out (not the plain names) so that cuda.h's macros cannot
 * rename them. */
#define SIGNATURE(required, member, symbol, ret, params)                                                               \
  _Static_assert(__builtin_types_compatible_p(__typeof__(((ferry_cuda_api *)0)->member), ret(*) params),               \
                 "table member " #member);
FERRY_CUDA_FUNCTIONS(SIGNATURE)

#define SYMBOL_TYPE(member, real)                                                                                      \
  _Static_assert(__builtin_types_compatible_p(__typeof__(((ferry_cuda_api *)0)->member), __typeof__(&real)),           \
                 #member " is not the type of " #real)
SYMBOL_TYPE(cuGetErrorName, cuGetErrorName);
SYMBOL_TYPE(cuGetErrorString, cuGetErrorString);
SYMBOL_TYPE(cuInit, cuInit);
SYMBOL_TYPE(cuDriverGetVersion, cuDriverGetVersion);
SYMBOL_TYPE(cuDeviceGetCount, cuDeviceGetCount);
SYMBOL_TYPE(cuDeviceGet, cuDeviceGet);
SYMBOL_TYPE(cuDeviceGetName, cuDeviceGetName);
SYMBOL_TYPE(cuDeviceTotalMem, cuDeviceTotalMem_v2);
SYMBOL_TYPE(cuDeviceGetAttribute, cuDeviceGetAttribute);
SYMBOL_TYPE(cuDeviceGetUuid, cuDeviceGetUuid_v2);
SYMBOL_TYPE(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId);
SYMBOL_TYPE(cuDeviceCanAccessPeer, cuDeviceCanAccessPeer);
SYMBOL_TYPE(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
SYMBOL_TYPE(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2);
SYMBOL_TYPE(cuCtxGetCurrent, cuCtxGetCurrent);
SYMBOL_TYPE(cuCtxSetCurrent, cuCtxSetCurrent);
SYMBOL_TYPE(cuCtxPushCurrent, cuCtxPushCurrent_v2);
SYMBOL_TYPE(cuCtxPopCurrent, cuCtxPopCurrent_v2);
SYMBOL_TYPE(cuCtxSynchronize, cuCtxSynchronize);
SYMBOL_TYPE(cuCtxEnablePeerAccess, cuCtxEnablePeerAccess);
SYMBOL_TYPE(cuMemGetInfo, cuMemGetInfo_v2);
SYMBOL_TYPE(cuMemAlloc, cuMemAlloc_v2);
SYMBOL_TYPE(cuMemFree, cuMemFree_v2);
SYMBOL_TYPE(cuMemHostAlloc, cuMemHostAlloc);
SYMBOL_TYPE(cuMemAllocHost, cuMemAllocHost_v2);
SYMBOL_TYPE(cuMemFreeHost, cuMemFreeHost);
SYMBOL_TYPE(cuMemHostRegister, cuMemHostRegister_v2);
SYMBOL_TYPE(cuMemHostUnregister, cuMemHostUnregister);
SYMBOL_TYPE(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer_v2);
SYMBOL_TYPE(cuPointerGetAttribute, cuPointerGetAttribute);
SYMBOL_TYPE(cuPointerGetAttributes, cuPointerGetAttributes);
SYMBOL_TYPE(cuPointerSetAttribute, cuPointerSetAttribute);
SYMBOL_TYPE(cuMemcpyHtoD, cuMemcpyHtoD_v2);
SYMBOL_TYPE(cuMemcpyDtoH, cuMemcpyDtoH_v2);
SYMBOL_TYPE(cuMemcpyDtoD, cuMemcpyDtoD_v2);
SYMBOL_TYPE(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2);
SYMBOL_TYPE(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2);
SYMBOL_TYPE(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2);
SYMBOL_TYPE(cuMemcpyPeerAsync, cuMemcpyPeerAsync);
SYMBOL_TYPE(cuMemsetD8Async, cuMemsetD8Async);
SYMBOL_TYPE(cuMemsetD16Async, cuMemsetD16Async);
SYMBOL_TYPE(cuMemsetD32Async, cuMemsetD32Async);
SYMBOL_TYPE(cuMemcpyPeer, cuMemcpyPeer);
SYMBOL_TYPE(cuStreamCreate, cuStreamCreate);
SYMBOL_TYPE(cuStreamDestroy, cuStreamDestroy_v2);
SYMBOL_TYPE(cuStreamSynchronize, cuStreamSynchronize);
SYMBOL_TYPE(cuStreamQuery, cuStreamQuery);
SYMBOL_TYPE(cuStreamWaitEvent, cuStreamWaitEvent);
SYMBOL_TYPE(cuStreamWaitValue32, cuStreamWaitValue32_v2);
SYMBOL_TYPE(cuEventCreate, cuEventCreate);
SYMBOL_TYPE(cuEventRecord, cuEventRecord);
SYMBOL_TYPE(cuEventSynchronize, cuEventSynchronize);
SYMBOL_TYPE(cuEventQuery, cuEventQuery);
SYMBOL_TYPE(cuEventElapsedTime, cuEventElapsedTime_v2);
SYMBOL_TYPE(cuEventDestroy, cuEventDestroy_v2);
SYMBOL_TYPE(cuModuleLoadData, cuModuleLoadData);
SYMBOL_TYPE(cuModuleUnload, cuModuleUnload);
SYMBOL_TYPE(cuModuleGetFunction, cuModuleGetFunction);
SYMBOL_TYPE(cuLaunchKernel, cuLaunchKernel);

/* At run time: each symbol name in the table is what cuda.h turns the plain
 * name into (cuMemAlloc -> cuMemAlloc_v2). */
#include <stdio.h>
#include <string.h>

#define STR2(x) #x
#define STR(x)  STR2(x)

int main(void) {
  int bad = 0, n = 0;
#define NAME(required, member, symbol, ret, params)                                                                    \
  n++;                                                                                                                 \
  if (strcmp(symbol, STR(member)) != 0) {                                                                              \
    printf("%s is loaded as %s, but cuda.h calls it %s\n", #member, symbol, STR(member));                              \
    bad++;                                                                                                             \
  }
  FERRY_CUDA_FUNCTIONS(NAME)
  printf("cuda_api.h against cuda.h: constants and %d signatures agree (compile time); symbol names: %s\n", n,
         bad ? "MISMATCH" : "all agree");
  return bad ? 1 : 0;
}
