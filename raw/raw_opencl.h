/*
 * The raw OpenCL baseline's own driver table: the few OpenCL calls that
 * raw_opencl.c (and bench/bench_opencl.c) make, looked up in the OpenCL library
 * ferry's opencl backend loaded (FERRY_OPENCL_LIBRARY, else libOpenCL.so.1)
 * through the core's loader. The types and constants are ferry's declarations of
 * the OpenCL API (src/backends/opencl/opencl_api.h: the driver's API only, none
 * of the backend's own functions).
 */
#ifndef FERRY_RAW_OPENCL_H
#define FERRY_RAW_OPENCL_H

#include "backends/opencl/opencl_api.h"

#include <stdbool.h>

/* The calls the baseline makes: X(member, return type, parameters), each under its own name. */
#define RAW_CL_FUNCTIONS(X)                                                                                            \
  X(clGetDeviceInfo, cl_int, (cl_device_id device, cl_device_info name, size_t size, void *value, size_t *size_ret))   \
  X(clCreateBuffer, cl_mem,                                                                                            \
    (cl_context context, cl_mem_flags flags, size_t size, void *host_ptr, cl_int *errcode_ret))                        \
  X(clReleaseMemObject, cl_int, (cl_mem mem))                                                                          \
  X(clEnqueueReadBuffer, cl_int,                                                                                       \
    (cl_command_queue queue, cl_mem buffer, cl_bool blocking, size_t offset, size_t size, void *ptr,                   \
     cl_uint num_events, const cl_event *wait_list, cl_event *event))                                                  \
  X(clEnqueueWriteBuffer, cl_int,                                                                                      \
    (cl_command_queue queue, cl_mem buffer, cl_bool blocking, size_t offset, size_t size, const void *ptr,             \
     cl_uint num_events, const cl_event *wait_list, cl_event *event))                                                  \
  X(clEnqueueCopyBuffer, cl_int,                                                                                       \
    (cl_command_queue queue, cl_mem src, cl_mem dst, size_t src_offset, size_t dst_offset, size_t size,                \
     cl_uint num_events, const cl_event *wait_list, cl_event *event))                                                  \
  X(clEnqueueMapBuffer, void *,                                                                                        \
    (cl_command_queue queue, cl_mem buffer, cl_bool blocking, cl_map_flags flags, size_t offset, size_t size,          \
     cl_uint num_events, const cl_event *wait_list, cl_event *event, cl_int *errcode_ret))                             \
  X(clEnqueueUnmapMemObject, cl_int,                                                                                   \
    (cl_command_queue queue, cl_mem mem, void *mapped_ptr, cl_uint num_events, const cl_event *wait_list,              \
     cl_event *event))                                                                                                 \
  X(clFlush, cl_int, (cl_command_queue queue))                                                                         \
  X(clFinish, cl_int, (cl_command_queue queue))                                                                        \
  X(clReleaseCommandQueue, cl_int, (cl_command_queue queue))

/* The calls to make the second queue, either of which a driver may lack:
 * clCreateCommandQueue is deprecated from OpenCL 2.0 on (a 3.0 driver may drop it),
 * clCreateCommandQueueWithProperties is 2.0's; and the event calls of the elapsed
 * baseline (every OpenCL has them, but only that row needs them). */
#define RAW_CL_OPTIONAL(X)                                                                                             \
  X(clCreateCommandQueue, cl_command_queue,                                                                            \
    (cl_context context, cl_device_id device, cl_command_queue_properties properties, cl_int * errcode_ret))           \
  X(clCreateCommandQueueWithProperties, cl_command_queue,                                                              \
    (cl_context context, cl_device_id device, const cl_queue_properties *properties, cl_int *errcode_ret))             \
  X(clWaitForEvents, cl_int, (cl_uint num_events, const cl_event *events))                                             \
  X(clReleaseEvent, cl_int, (cl_event event))                                                                          \
  X(clGetEventProfilingInfo, cl_int,                                                                                   \
    (cl_event event, cl_profiling_info name, size_t size, void *value, size_t *size_ret))

typedef struct raw_cl_driver {
#define RAW_CL_MEMBER(member, ret, params) ret(*member) params;
  RAW_CL_FUNCTIONS(RAW_CL_MEMBER)
  RAW_CL_OPTIONAL(RAW_CL_MEMBER)
#undef RAW_CL_MEMBER
} raw_cl_driver;

/* The table, looked up once; NULL with a sentence in why[256] when the library or
 * a required function is missing (an optional one the driver lacks is NULL). */
const raw_cl_driver *raw_cl_driver_load(char why[256]);

/* An in-order queue, as ferry's backend makes one: through
 * clCreateCommandQueueWithProperties on a 2.0+ device, else clCreateCommandQueue;
 * with `profiling`, CL_QUEUE_PROFILING_ENABLE. NULL, with the driver's code in
 * *err, when neither works. */
cl_command_queue raw_cl_queue_create(const raw_cl_driver *api, cl_context context, cl_device_id id, bool profiling,
                                     cl_int *err);

#endif
