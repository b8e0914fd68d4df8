/*
 * The part of the OpenCL API that ferry uses, declared by ferry itself so that no
 * OpenCL header or SDK is needed to build: the types, the constants and a table
 * of function pointers filled from the ICD loader (libOpenCL.so.1) at run time.
 *
 * Values are those of the OpenCL 1.2 / 3.0 specification (Khronos cl.h). Only
 * OpenCL 1.2-era entry points are required, so every conformant 1.2+ platform
 * works (NVIDIA's OpenCL 3.0 platform has 1.2-era features only); the one 2.0
 * entry point (clCreateCommandQueueWithProperties) is optional and used only on
 * devices that say 2.0 or later.
 *
 * Tests and benchmarks make their own raw OpenCL calls on ferry's buffers through
 * ferry__opencl_api(), ferry_device_ptr() (the cl_mem) and ferry_device_native()
 * (cl_device_id, cl_context, cl_command_queue).
 */
#ifndef FERRY_OPENCL_API_H
#define FERRY_OPENCL_API_H

#include <stddef.h>
#include <stdint.h>

/* ---- scalar and handle types -------------------------------------------- */

typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_ulong;
typedef cl_uint cl_bool;
typedef cl_ulong cl_bitfield;

typedef struct _cl_platform_id *cl_platform_id;
typedef struct _cl_device_id *cl_device_id;
typedef struct _cl_context *cl_context;
typedef struct _cl_command_queue *cl_command_queue;
typedef struct _cl_mem *cl_mem;
typedef struct _cl_program *cl_program;
typedef struct _cl_kernel *cl_kernel;
typedef struct _cl_event *cl_event;

typedef cl_bitfield cl_device_type;
typedef cl_uint cl_platform_info;
typedef cl_uint cl_device_info;
typedef cl_bitfield cl_command_queue_properties;
typedef intptr_t cl_context_properties;
typedef cl_bitfield cl_mem_flags;
typedef cl_bitfield cl_map_flags;
typedef cl_uint cl_mem_info;
typedef cl_uint cl_event_info;
typedef cl_uint cl_program_build_info;
typedef cl_bitfield cl_properties;
typedef cl_properties cl_queue_properties; /* OpenCL 2.0 */
typedef cl_uint cl_profiling_info;
typedef cl_uint cl_command_queue_info;

/* ---- constants ---------------------------------------------------------- */

#define CL_SUCCESS 0
#define CL_FALSE   0
#define CL_TRUE    1

/* cl_platform_info */
#define CL_PLATFORM_PROFILE    0x0900
#define CL_PLATFORM_VERSION    0x0901
#define CL_PLATFORM_NAME       0x0902
#define CL_PLATFORM_VENDOR     0x0903
#define CL_PLATFORM_EXTENSIONS 0x0904

/* cl_device_type */
#define CL_DEVICE_TYPE_DEFAULT     (1u << 0)
#define CL_DEVICE_TYPE_CPU         (1u << 1)
#define CL_DEVICE_TYPE_GPU         (1u << 2)
#define CL_DEVICE_TYPE_ACCELERATOR (1u << 3)
#define CL_DEVICE_TYPE_CUSTOM      (1u << 4)
#define CL_DEVICE_TYPE_ALL         0xFFFFFFFFu

/* cl_device_info */
#define CL_DEVICE_TYPE                0x1000
#define CL_DEVICE_MAX_COMPUTE_UNITS   0x1002
#define CL_DEVICE_MAX_MEM_ALLOC_SIZE  0x1010
#define CL_DEVICE_MEM_BASE_ADDR_ALIGN 0x1019
#define CL_DEVICE_GLOBAL_MEM_SIZE     0x101F
#define CL_DEVICE_AVAILABLE           0x1027
#define CL_DEVICE_NAME                0x102B
#define CL_DEVICE_VENDOR              0x102C
#define CL_DRIVER_VERSION             0x102D
#define CL_DEVICE_VERSION             0x102F
#define CL_DEVICE_EXTENSIONS          0x1030
#define CL_DEVICE_PLATFORM            0x1031
#define CL_DEVICE_QUEUE_PROPERTIES    0x102A /* which cl_command_queue_properties the device takes */
#define CL_DEVICE_HOST_UNIFIED_MEMORY 0x1035 /* OpenCL 1.1-1.2 (deprecated in 2.0, still answered) */
/* cl_khr_device_uuid: 16 bytes (CL_UUID_SIZE_KHR). */
#define CL_DEVICE_UUID_KHR 0x106A
#define CL_UUID_SIZE_KHR   16
/* cl_khr_pci_bus_info: a cl_device_pci_bus_info_khr. */
#define CL_DEVICE_PCI_BUS_INFO_KHR 0x410F
typedef struct cl_device_pci_bus_info_khr {
  cl_uint pci_domain, pci_bus, pci_device, pci_function;
} cl_device_pci_bus_info_khr;
/* cl_amd_device_attribute_query: free memory in KiB, as size_t[2] (total free, largest free block). */
#define CL_DEVICE_GLOBAL_FREE_MEMORY_AMD 0x4039

/* cl_context_properties */
#define CL_CONTEXT_PLATFORM 0x1084

/* cl_command_queue_properties; cl_command_queue_info (CL_QUEUE_PROPERTIES also names them in the
 * property list of clCreateCommandQueueWithProperties) */
#define CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE (1u << 0)
#define CL_QUEUE_PROFILING_ENABLE              (1u << 1)
#define CL_QUEUE_CONTEXT                       0x1090
#define CL_QUEUE_DEVICE                        0x1091
#define CL_QUEUE_PROPERTIES                    0x1093

/* cl_mem_flags */
#define CL_MEM_READ_WRITE     (1u << 0)
#define CL_MEM_WRITE_ONLY     (1u << 1)
#define CL_MEM_READ_ONLY      (1u << 2)
#define CL_MEM_USE_HOST_PTR   (1u << 3)
#define CL_MEM_ALLOC_HOST_PTR (1u << 4)
#define CL_MEM_COPY_HOST_PTR  (1u << 5)

/* cl_map_flags */
#define CL_MAP_READ                    (1u << 0)
#define CL_MAP_WRITE                   (1u << 1)
#define CL_MAP_WRITE_INVALIDATE_REGION (1u << 2) /* OpenCL 1.2 */

/* cl_mem_info */
#define CL_MEM_TYPE      0x1100
#define CL_MEM_FLAGS     0x1101
#define CL_MEM_SIZE      0x1102
#define CL_MEM_HOST_PTR  0x1103
#define CL_MEM_MAP_COUNT 0x1104
#define CL_MEM_CONTEXT   0x1106

/* cl_mem_object_type */
#define CL_MEM_OBJECT_BUFFER 0x10F0

/* cl_event_info and execution status (negative: the command's error code) */
#define CL_EVENT_COMMAND_EXECUTION_STATUS 0x11D3
#define CL_EVENT_CONTEXT                  0x11D4
#define CL_COMPLETE                       0x0
#define CL_RUNNING                        0x1
#define CL_SUBMITTED                      0x2
#define CL_QUEUED                         0x3

/* cl_profiling_info: nanoseconds of the device's clock */
#define CL_PROFILING_COMMAND_START 0x1282
#define CL_PROFILING_COMMAND_END   0x1283

/* cl_program_build_info */
#define CL_PROGRAM_BUILD_LOG 0x1183

/* Error codes (the ones ferry names are listed in ferry__opencl_error_name). */
#define CL_DEVICE_NOT_FOUND                          -1
#define CL_MEM_OBJECT_ALLOCATION_FAILURE             -4
#define CL_OUT_OF_RESOURCES                          -5
#define CL_OUT_OF_HOST_MEMORY                        -6
#define CL_PROFILING_INFO_NOT_AVAILABLE              -7
#define CL_MEM_COPY_OVERLAP                          -8
#define CL_MAP_FAILURE                               -12
#define CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST -14
#define CL_INVALID_VALUE                             -30
#define CL_INVALID_CONTEXT                           -34
#define CL_INVALID_QUEUE_PROPERTIES                  -35
#define CL_INVALID_HOST_PTR                          -37
#define CL_INVALID_MEM_OBJECT                        -38
#define CL_INVALID_EVENT                             -58
#define CL_INVALID_OPERATION                         -59
#define CL_INVALID_BUFFER_SIZE                       -61
#define CL_PLATFORM_NOT_FOUND_KHR                    -1001

/* ---- entry points ------------------------------------------------------- */

typedef void (*ferry_cl_context_notify)(const char *errinfo, const void *private_info, size_t cb, void *user_data);
typedef void (*ferry_cl_build_notify)(cl_program program, void *user_data);
typedef void (*ferry_cl_mem_notify)(cl_mem mem, void *user_data);

/* The loaded entry points. The ones under "required" are there whenever the
 * table is; the rest may be NULL (the kernel functions: a driver without a
 * compiler is still a memory device). */
typedef struct ferry_cl_api {
  /* required */
  cl_int (*clGetPlatformIDs)(cl_uint num_entries, cl_platform_id *platforms, cl_uint *num_platforms);
  cl_int (*clGetPlatformInfo)(cl_platform_id platform, cl_platform_info name, size_t size, void *value,
                              size_t *size_ret);
  cl_int (*clGetDeviceIDs)(cl_platform_id platform, cl_device_type type, cl_uint num_entries, cl_device_id *devices,
                           cl_uint *num_devices);
  cl_int (*clGetDeviceInfo)(cl_device_id device, cl_device_info name, size_t size, void *value, size_t *size_ret);
  cl_context (*clCreateContext)(const cl_context_properties *properties, cl_uint num_devices,
                                const cl_device_id *devices, ferry_cl_context_notify notify, void *user_data,
                                cl_int *errcode_ret);
  cl_int (*clReleaseContext)(cl_context context);
  cl_command_queue (*clCreateCommandQueue)(cl_context context, cl_device_id device,
                                           cl_command_queue_properties properties, cl_int *errcode_ret);
  cl_int (*clRetainCommandQueue)(cl_command_queue queue);
  cl_int (*clReleaseCommandQueue)(cl_command_queue queue);
  cl_int (*clGetCommandQueueInfo)(cl_command_queue queue, cl_command_queue_info name, size_t size, void *value,
                                  size_t *size_ret);
  cl_mem (*clCreateBuffer)(cl_context context, cl_mem_flags flags, size_t size, void *host_ptr, cl_int *errcode_ret);
  cl_int (*clReleaseMemObject)(cl_mem mem);
  cl_int (*clGetMemObjectInfo)(cl_mem mem, cl_mem_info name, size_t size, void *value, size_t *size_ret);
  cl_int (*clEnqueueReadBuffer)(cl_command_queue queue, cl_mem buffer, cl_bool blocking, size_t offset, size_t size,
                                void *ptr, cl_uint num_events, const cl_event *wait_list, cl_event *event);
  cl_int (*clEnqueueWriteBuffer)(cl_command_queue queue, cl_mem buffer, cl_bool blocking, size_t offset, size_t size,
                                 const void *ptr, cl_uint num_events, const cl_event *wait_list, cl_event *event);
  cl_int (*clEnqueueCopyBuffer)(cl_command_queue queue, cl_mem src, cl_mem dst, size_t src_offset, size_t dst_offset,
                                size_t size, cl_uint num_events, const cl_event *wait_list, cl_event *event);
  void *(*clEnqueueMapBuffer)(cl_command_queue queue, cl_mem buffer, cl_bool blocking, cl_map_flags flags,
                              size_t offset, size_t size, cl_uint num_events, const cl_event *wait_list,
                              cl_event *event, cl_int *errcode_ret);
  cl_int (*clEnqueueUnmapMemObject)(cl_command_queue queue, cl_mem mem, void *mapped_ptr, cl_uint num_events,
                                    const cl_event *wait_list, cl_event *event);
  cl_int (*clFlush)(cl_command_queue queue);
  cl_int (*clFinish)(cl_command_queue queue);
  cl_int (*clWaitForEvents)(cl_uint num_events, const cl_event *events);
  cl_int (*clGetEventInfo)(cl_event event, cl_event_info name, size_t size, void *value, size_t *size_ret);
  cl_int (*clReleaseEvent)(cl_event event);
  /* Lanes, tickets and gates (OpenCL 1.1 user events, 1.2 markers, barriers and fills). */
  cl_int (*clGetEventProfilingInfo)(cl_event event, cl_profiling_info name, size_t size, void *value, size_t *size_ret);
  cl_event (*clCreateUserEvent)(cl_context context, cl_int *errcode_ret);
  cl_int (*clSetUserEventStatus)(cl_event event, cl_int status);
  cl_int (*clEnqueueMarkerWithWaitList)(cl_command_queue queue, cl_uint num_events, const cl_event *wait_list,
                                        cl_event *event);
  cl_int (*clEnqueueBarrierWithWaitList)(cl_command_queue queue, cl_uint num_events, const cl_event *wait_list,
                                         cl_event *event);
  cl_int (*clEnqueueFillBuffer)(cl_command_queue queue, cl_mem buffer, const void *pattern, size_t pattern_size,
                                size_t offset, size_t size, cl_uint num_events, const cl_event *wait_list,
                                cl_event *event);

  /* optional (OpenCL 2.0): a queue from a property list; used on 2.0+ devices */
  cl_command_queue (*clCreateCommandQueueWithProperties)(cl_context context, cl_device_id device,
                                                         const cl_queue_properties *properties, cl_int *errcode_ret);

  /* optional (OpenCL 1.1): called once the driver destroyed the buffer */
  cl_int (*clSetMemObjectDestructorCallback)(cl_mem mem, ferry_cl_mem_notify notify, void *user_data);

  /* optional: programs and kernels (tests, and users' own kernels) */
  cl_program (*clCreateProgramWithSource)(cl_context context, cl_uint count, const char **strings,
                                          const size_t *lengths, cl_int *errcode_ret);
  cl_int (*clBuildProgram)(cl_program program, cl_uint num_devices, const cl_device_id *devices, const char *options,
                           ferry_cl_build_notify notify, void *user_data);
  cl_int (*clGetProgramBuildInfo)(cl_program program, cl_device_id device, cl_program_build_info name, size_t size,
                                  void *value, size_t *size_ret);
  cl_int (*clReleaseProgram)(cl_program program);
  cl_kernel (*clCreateKernel)(cl_program program, const char *name, cl_int *errcode_ret);
  cl_int (*clSetKernelArg)(cl_kernel kernel, cl_uint index, size_t size, const void *value);
  cl_int (*clEnqueueNDRangeKernel)(cl_command_queue queue, cl_kernel kernel, cl_uint work_dim,
                                   const size_t *global_offset, const size_t *global_size, const size_t *local_size,
                                   cl_uint num_events, const cl_event *wait_list, cl_event *event);
  cl_int (*clReleaseKernel)(cl_kernel kernel);
} ferry_cl_api;

/* Loads the ICD loader (FERRY_OPENCL_LIBRARY, else libOpenCL.so.1) and fills
 * *out. On failure returns a nonzero value with why[] saying what is missing
 * ("libOpenCL.so.1: cannot open shared object file: No such file or directory"). */
int ferry__opencl_load(ferry_cl_api *out, void **out_handle, char *why, size_t why_size);
void ferry__opencl_unload(void *handle);

/* The table the opencl backend loaded, for tests and benchmarks that make raw
 * calls on ferry's buffers; NULL when the opencl backend has no devices (no
 * driver, left out by FERRY_BACKENDS) or after ferry_shutdown(). Initialises
 * ferry if it is not yet. */
const ferry_cl_api *ferry__opencl_api(void);

/* "CL_MEM_OBJECT_ALLOCATION_FAILURE" for -4; "an unknown OpenCL error" for codes
 * no specification or common extension defines. Never NULL. */
const char *ferry__opencl_error_name(cl_int code);

#endif /* FERRY_OPENCL_API_H */
