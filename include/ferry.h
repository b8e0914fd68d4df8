/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry: one memory API over every compute device on a machine.
 *
 * This header is the whole public API. The contract behind it (names, argument
 * order, behaviour) is docs/API.md; every function below says what it does where
 * it is declared.
 *
 * Conventions that hold everywhere:
 *  - Every function that can fail returns ferry_status. Results go through out_
 *    parameters, which are left untouched on failure.
 *  - A failed call changes nothing: no buffer content, no handle, no host memory.
 *  - ferry_last_error() gives this thread's sentence about its last failure, with
 *    the numbers (sizes, offsets, device, driver call and code).
 *  - Every function may be called from any thread at once, ferry_shutdown()
 *    included (it waits for the calls in flight).
 */
#ifndef FERRY_H
#define FERRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* FERRY_API: how ferry's functions are exported. A program that compiles ferry's
 * sources into a module of its own, with nothing exported, defines it empty. */
#ifndef FERRY_API
#if defined(_WIN32)
#define FERRY_API
#elif defined(__GNUC__)
#define FERRY_API __attribute__((visibility("default")))
#else
#define FERRY_API
#endif
#endif

#define FERRY_VERSION_MAJOR 0
#define FERRY_VERSION_MINOR 1
#define FERRY_VERSION_PATCH 0

/* The library's version as "MAJOR.MINOR.PATCH". */
FERRY_API const char *ferry_version(void);

/* ------------------------------------------------------------------------- */
/* Status and errors                                                         */
/* ------------------------------------------------------------------------- */

typedef enum ferry_status {
  FERRY_OK = 0,
  FERRY_ERROR_INVALID_ARGUMENT, /* NULL where a value is needed, unknown kind, zero element size, bad index */
  FERRY_ERROR_OVERFLOW,         /* length x element size (or offset + bytes) does not fit in size_t */
  FERRY_ERROR_SIZE_MISMATCH,    /* host length or byte count differs from the buffer's */
  FERRY_ERROR_KIND_MISMATCH,    /* host array kind (or element size) differs from the buffer's */
  FERRY_ERROR_OUT_OF_RANGE,     /* offset + bytes runs past the end of a buffer */
  FERRY_ERROR_STALE_BUFFER,     /* the handle was freed already (use after free, double free) or never existed */
  FERRY_ERROR_UNSUPPORTED,      /* this device cannot do this (alloc_zero_copy on a GPU) */
  FERRY_ERROR_REFUSED,          /* alloc_host_ptr (or a DLPack import) refused; the reason is in *out_refusal */
  FERRY_ERROR_OUT_OF_MEMORY,    /* device or host memory exhausted (after releasing cached memory) */
  FERRY_ERROR_NO_DEVICE,        /* device index out of range */
  FERRY_ERROR_BACKEND,          /* a driver call failed; the message names the call and the driver's code */
  FERRY_NOT_READY,              /* ferry_queue_query / ferry_event_query: work still running (not an error) */
  FERRY_ERROR_STALE_HANDLE,     /* a queue, event or request handle that was destroyed or never existed */
  FERRY_ERROR_CANCELLED,        /* not run: an earlier operation on the same queue failed */
} ferry_status;

/* The enumerator's name, "FERRY_ERROR_SIZE_MISMATCH"; "FERRY_STATUS_UNKNOWN" for
 * values outside the enum. Never NULL. */
FERRY_API const char *ferry_status_name(ferry_status s);

/* This thread's sentence about its last failure, for example
 * "ferry_host_to_device: host array has 100 float32 elements, buffer 7 on device 0
 * (cuda: NVIDIA H200) has 128". Successful calls leave it as it was (like errno);
 * before any failure it is "no error". The string is thread-local and valid until
 * this thread's next ferry call. Never NULL. */
FERRY_API const char *ferry_last_error(void);

/* ------------------------------------------------------------------------- */
/* Element kinds                                                             */
/* ------------------------------------------------------------------------- */

/* The kinds of OCaml's Bigarray, plus the unsigned and bfloat16 kinds C users need. */
typedef enum ferry_kind {
  FERRY_FLOAT16,
  FERRY_BFLOAT16,
  FERRY_FLOAT32,
  FERRY_FLOAT64,
  FERRY_INT8,
  FERRY_UINT8,
  FERRY_INT16,
  FERRY_UINT16,
  FERRY_INT32,
  FERRY_UINT32,
  FERRY_INT64,
  FERRY_UINT64,
  FERRY_NATIVEINT, /* intptr_t (Bigarray's int and nativeint) */
  FERRY_COMPLEX32, /* two float32 */
  FERRY_COMPLEX64, /* two float64 */
  FERRY_CHAR,
  FERRY_CUSTOM, /* only from ferry_alloc_custom: element size given there */
} ferry_kind;

/* Bytes per element; 0 for FERRY_CUSTOM and for values outside the enum. */
FERRY_API size_t ferry_kind_size(ferry_kind k);

/* "float32", "complex64", "custom"; "unknown" for values outside the enum. Never NULL. */
FERRY_API const char *ferry_kind_name(ferry_kind k);

/* ------------------------------------------------------------------------- */
/* Host arrays                                                               */
/* ------------------------------------------------------------------------- */

/* A typed view of host memory: `length` elements of `kind` at `data`, the C
 * counterpart of a one-dimensional C-layout Bigarray. ferry never frees or keeps
 * it, except where a function says so (ferry_alloc_zero_copy, ferry_alloc_host_ptr). */
typedef struct ferry_array {
  void *data;
  size_t length;
  ferry_kind kind;
} ferry_array;

/* Builds a ferry_array; checks nothing (the functions that take it do). */
FERRY_API ferry_array ferry_array_of(void *data, size_t length, ferry_kind kind);

/* ------------------------------------------------------------------------- */
/* Devices                                                                   */
/* ------------------------------------------------------------------------- */

/* A device; owned by the library, valid until ferry_shutdown(). */
typedef struct ferry_device ferry_device;

/* Starts every backend and numbers their devices. Optional: any call initialises
 * on first use. Idempotent. Reads the settings (see ferry_set_option) and fails
 * with FERRY_ERROR_INVALID_ARGUMENT when one of them is wrong (FERRY_BACKENDS
 * naming a backend this build does not have, or none; a byte count that does not
 * parse, ...); a backend whose driver is missing just has no devices (see
 * ferry_backend_get). */
FERRY_API ferry_status ferry_init(void);

/* Waits for the work of every queue (see "Queues and events" below; a failure
 * never reported is printed with FERRY_DEBUG set), then frees every queue,
 * event, buffer, cached allocation, pinned host block and device, and unloads
 * the drivers. Every buffer, queue and event handle and every device pointer
 * becomes stale; a later call initialises again, and old handles stay stale,
 * whatever happened before. Memory that DLPack tensors still hold is released
 * too (their deleters stay safe to call later; see ferry_dlpack_export), and
 * imported tensors' deleters run, on this
 * thread, just before ferry_shutdown returns, when the session is gone and
 * ferry holds no lock (see ferry_dlpack_import). With
 * FERRY_DEBUG=leaks in the environment, prints every buffer still live to stderr
 * first. Safe while other threads are inside ferry calls: it waits for the calls
 * in flight (a transfer finishes, on the buffer it started with), and calls that
 * arrive meanwhile wait for it, then start ferry again; a handle or device pointer
 * of the ended session then fails cleanly (FERRY_ERROR_STALE_BUFFER,
 * FERRY_ERROR_INVALID_ARGUMENT). The handle table itself is kept (128 bytes
 * per buffer that was ever live at once), so that no handle is ever reused.
 * In a child forked while ferry was running, every other ferry call fails with
 * FERRY_ERROR_BACKEND (the parent's devices are not usable there); this returns
 * at once and forgets the parent's session without calling a driver, and ferry
 * may then start again in the child (native and checked; a driver the parent had
 * started is reported unavailable, see docs/API.md). */
FERRY_API void ferry_shutdown(void);

/* Number of devices, across all backends. */
FERRY_API size_t ferry_device_count(void);

/* The device with global index `index` (0 .. ferry_device_count()-1).
 * FERRY_ERROR_NO_DEVICE when out of range. */
FERRY_API ferry_status ferry_device_get(size_t index, ferry_device **out_device);

/* The first GPU (the first device that is not a CPU) if any, else the native CPU
 * device, else the first device; NULL when there are no devices at all. */
FERRY_API ferry_device *ferry_device_best(void);

/* Waits until all work on the device is complete: what was submitted to every
 * queue of the device (its default queue included), then the work the user
 * enqueued through ferry_device_native's and ferry_queue_native's handles
 * (CUDA: cuCtxSynchronize of the primary context; OpenCL: clFinish of every
 * queue; Vulkan: vkQueueWaitIdle; Metal: an empty command buffer waited for).
 * Reports a failure of a queue's work not yet reported, as
 * ferry_queue_synchronize would (saying how many other queues of the device
 * failed too). On the checked backend it also verifies the guard bytes of
 * every live buffer and the poison of quarantined memory, and reports the
 * first corruption found as FERRY_ERROR_BACKEND. */
FERRY_API ferry_status ferry_device_synchronize(ferry_device *device);

typedef struct ferry_device_info {
  size_t index;              /* global index, 0 .. ferry_device_count()-1 */
  size_t backend_index;      /* index among its backend's devices */
  const char *name;          /* "NVIDIA H200", "pthread-skylake-avx512 (PoCL)" */
  const char *backend;       /* "cuda", "opencl", "vulkan", "metal", "native", "checked" */
  uint64_t total_memory;     /* bytes of device memory (host RAM for host backends); on CPU devices the live
                                buffers with memory of their own are kept within it */
  uint64_t max_allocation;   /* largest single buffer in bytes */
  bool is_cpu;               /* the device computes on the host's processors */
  bool zero_copy;            /* ferry_alloc_zero_copy succeeds: device memory is host memory */
  bool host_ptr;             /* ferry_alloc_host_ptr can succeed on this device */
  size_t host_ptr_alignment; /* alignment that ferry_alloc_host_ptr needs of data and of byte length (1 if none) */
} ferry_device_info;

/* Fills *out_info. The strings stay valid until ferry_shutdown(). */
FERRY_API ferry_status ferry_device_info_get(const ferry_device *device, ferry_device_info *out_info);

/* Native handles, for running one's own kernels on ferry buffers with the vendor API. */
typedef struct ferry_native {
  uintptr_t device;      /* CUdevice | cl_device_id | VkPhysicalDevice | id<MTLDevice> | 0 */
  uintptr_t context;     /* CUcontext (the primary context) | cl_context | VkDevice | 0 */
  uintptr_t queue;       /* 0 (the default stream) | cl_command_queue | VkQueue | id<MTLCommandQueue> | 0 */
  uint32_t queue_family; /* Vulkan: the family index of queue (it supports compute and transfer); else 0 */
} ferry_native;

/* Fills *out_native with the device's vendor handles (all zero on native and
 * checked). Work a user enqueues on these handles is the user's to finish
 * (clFinish, cuCtxSynchronize, a fence) before ferry touches the buffers it uses;
 * ferry's own transfers complete before they return. */
FERRY_API ferry_status ferry_device_native(const ferry_device *device, ferry_native *out_native);

/* Backends, whether they have devices or not (an extension to the contract, for
 * tools and tests that must say which backends were skipped and why). */
typedef struct ferry_backend_info {
  const char *name;    /* "cuda", "opencl", ... */
  bool enabled;        /* FERRY_BACKENDS keeps it (always true when it is unset) */
  size_t device_count; /* devices it contributed; 0 when absent */
  size_t first_device; /* global index of its first device (when device_count > 0) */
  const char *status;  /* "ok", or why it has no devices: "libcuda.so.1: cannot open shared object file" */
} ferry_backend_info;

/* Number of backends compiled into this build (cuda, metal, opencl, vulkan,
 * native, checked, in that order), enabled or not. */
FERRY_API size_t ferry_backend_count(void);

/* Fills *out_info for backend `index` (0 .. ferry_backend_count()-1), in the
 * order devices are numbered. FERRY_ERROR_NO_DEVICE when out of range. */
FERRY_API ferry_status ferry_backend_get(size_t index, ferry_backend_info *out_info);

/* A Vulkan memory heap (VkMemoryHeap), in ferry_driver_info. */
typedef struct ferry_memory_heap {
  uint64_t size;  /* bytes */
  uint32_t flags; /* VkMemoryHeapFlags: 1 device-local, 2 multi-instance */
} ferry_memory_heap;

/* A Vulkan memory type (VkMemoryType), in ferry_driver_info. */
typedef struct ferry_memory_type {
  uint32_t flags; /* VkMemoryPropertyFlags: 1 device-local, 2 host-visible, 4 host-coherent, 8 host-cached, ... */
  uint32_t heap;  /* the index of its heap in ferry_driver_info.heaps */
} ferry_memory_type;

/* A Vulkan queue family (VkQueueFamilyProperties), in ferry_driver_info. */
typedef struct ferry_queue_family {
  uint32_t flags; /* VkQueueFlags: 1 graphics, 2 compute, 4 transfer, 8 sparse binding, ... */
  uint32_t count; /* queues in the family */
} ferry_queue_family;

#define FERRY_MAX_HEAPS          16
#define FERRY_MAX_MEMORY_TYPES   32
#define FERRY_MAX_QUEUE_FAMILIES 16

/* What a device's driver says about itself (beyond the framework's Memory API, for
 * tools and bug reports: `ferry info --verbose`, the header of `ferry bench`).
 * Every string is NUL-terminated, and empty where the driver gives nothing; every
 * number is 0 where the driver gives nothing. */
typedef struct ferry_driver_info {
  /* The driver's name: "NVIDIA" (cuda: from /proc/driver/nvidia/version; else the
   * library loaded, "libcuda.so.1"), the OpenCL platform's name ("NVIDIA CUDA",
   * "Portable Computing Language"), Vulkan's driverName ("NVIDIA", "llvmpipe"),
   * the C library on native and checked ("glibc"). */
  char driver[256];
  /* Its version: NVIDIA's kernel driver ("580.65.06"), CL_DRIVER_VERSION, Vulkan's
   * driverInfo ("Mesa 22.3.6 (LLVM 15.0.6)"), the C library's ("2.36"). */
  char driver_version[256];
  /* The API it offers and its version: "CUDA 13.0" (cuDriverGetVersion),
   * CL_PLATFORM_VERSION ("OpenCL 3.0 PoCL 3.1 ..."), "Vulkan 1.3.230", and on native
   * and checked the operating system ("Linux 6.1.0-18-amd64"). */
  char api_version[256];
  /* "0000:1b:00.0" (domain:bus:device.function, lowercase hex) where the API gives
   * one: cuDeviceGetPCIBusId, cl_khr_pci_bus_info, VK_EXT_pci_bus_info. */
  char pci_bus_id[32];
  /* The device's UUID as 8-4-4-4-12 lowercase hex, where the API gives one:
   * cuDeviceGetUuid, cl_khr_device_uuid, VkPhysicalDeviceIDProperties. On NVIDIA
   * GPUs the three agree, which tells which devices of different backends are one
   * GPU (nvidia-smi shows it with a "GPU-" prefix). */
  char uuid[40];
  /* Bytes of device memory free right now (cuMemGetInfo, VK_EXT_memory_budget,
   * cl_amd_device_attribute_query; MemAvailable on native and checked); 0 when
   * the driver does not say. */
  uint64_t free_memory;

  /* Added after the fields above (0.1.0): what clinfo and vulkaninfo show first. */

  /* free_memory is the host's MemAvailable, not the driver's: a CPU device whose
   * driver says nothing of its free memory (PoCL, lavapipe) allocates from the
   * host's, so the host's figure is given, marked by this. Always false on the
   * host backends (native, checked), whose memory is the host's by definition. */
  bool free_memory_from_host;
  /* OpenCL: CL_DEVICE_MAX_COMPUTE_UNITS (processor cores on CPU devices,
   * multiprocessors on GPUs); native and checked: processors online. */
  uint32_t compute_units;
  /* OpenCL: CL_DEVICE_MAX_CLOCK_FREQUENCY, in MHz. */
  uint32_t clock_mhz;
  /* OpenCL: CL_DEVICE_MAX_WORK_GROUP_SIZE; Vulkan: maxComputeWorkGroupInvocations. */
  uint64_t max_work_group_size;
  /* OpenCL: CL_DEVICE_LOCAL_MEM_SIZE; Vulkan: maxComputeSharedMemorySize; bytes. */
  uint64_t local_memory;
  /* OpenCL's CL_DEVICE_LOCAL_MEM_TYPE: 1 memory of its own (CL_LOCAL), 2 carved
   * from global memory (CL_GLOBAL); 0 where the driver does not say. */
  uint32_t local_memory_type;
  /* Vulkan: the memory heaps, memory types and queue families of the physical
   * device (vkGetPhysicalDeviceMemoryProperties, vkGetPhysicalDeviceQueueFamilyProperties),
   * as many as the counts say. */
  uint32_t heap_count;
  ferry_memory_heap heaps[FERRY_MAX_HEAPS];
  uint32_t memory_type_count;
  ferry_memory_type memory_types[FERRY_MAX_MEMORY_TYPES];
  uint32_t queue_family_count;
  ferry_queue_family queue_families[FERRY_MAX_QUEUE_FAMILIES];
} ferry_driver_info;

/* Fills *out_info with what the device's driver says about itself. Asks the
 * driver each time (free_memory changes). FERRY_ERROR_INVALID_ARGUMENT for a NULL
 * or unknown device or a NULL out_info. */
FERRY_API ferry_status ferry_device_driver_info(const ferry_device *device, ferry_driver_info *out_info);

/* ------------------------------------------------------------------------- */
/* Settings                                                                  */
/* ------------------------------------------------------------------------- */

/* ferry's settings are named after their environment variables (FERRY_BACKENDS,
 * FERRY_CACHE_LIMIT, FERRY_CUDA_LIBRARY, ...; the list, with what each takes, is
 * ferry_option_get's and the README's). ferry_init reads each one once: the value
 * given by ferry_set_option if there is one, else the environment's; an empty
 * value counts as unset (the default). A value that is not a number where one is
 * needed, negative, outside its range, or not one of its words makes ferry_init
 * fail with FERRY_ERROR_INVALID_ARGUMENT naming the variable, the value and what it
 * takes; every call that needs the library then fails the same way until the value
 * is fixed. */

typedef enum ferry_option_source {
  FERRY_OPTION_DEFAULT = 0, /* neither the environment nor code set it */
  FERRY_OPTION_ENVIRONMENT, /* from the environment variable of that name */
  FERRY_OPTION_CODE,        /* from ferry_set_option */
} ferry_option_source;

typedef struct ferry_option_info {
  const char *name;           /* "FERRY_CACHE_LIMIT": the environment variable's name */
  const char *value;          /* the value in effect, as text ("" when unset and without default) */
  ferry_option_source source; /* where the value comes from */
  const char *range;          /* what it accepts, in words: "0 to 2^62 bytes; suffixes K, M, G, T" */
  const char *description;    /* one line */
} ferry_option_info;

/* Sets option `name` (the environment variable's name) from code, checked as the
 * environment's value would be; value NULL removes the code setting. Only before
 * ferry_init (or after ferry_shutdown): while ferry is running it returns
 * FERRY_ERROR_INVALID_ARGUMENT and changes nothing, since settings take effect at
 * ferry_init. A value set from code wins over the environment's (the program asked
 * for it explicitly), for every later ferry_init until it is removed (NULL brings
 * the environment's back); the empty string means the default, whatever the
 * environment says. An unknown name, or a value the option does not take, is
 * FERRY_ERROR_INVALID_ARGUMENT with the name, the value and what it takes. */
FERRY_API ferry_status ferry_set_option(const char *name, const char *value);

/* Number of settings this build reads: the core's and every backend's, whether
 * the backend is enabled or not. Does not start ferry. */
FERRY_API size_t ferry_option_count(void);

/* Fills *out for setting `index` (0 .. ferry_option_count()-1), in a fixed order
 * (the core's, then each backend's). While ferry is running, the value is the one
 * it read at ferry_init; before, the one the next ferry_init would read. Does not
 * start ferry. The strings stay valid for as long as the process runs, whatever
 * any thread calls later (ferry_set_option, ferry_init, ferry_shutdown included):
 * they describe the setting when it was asked, and ferry keeps one copy of each
 * distinct value it has shown. FERRY_ERROR_INVALID_ARGUMENT for a NULL out or an
 * index out of range, FERRY_ERROR_OUT_OF_MEMORY when no host memory is left for
 * the copy of a value. */
FERRY_API ferry_status ferry_option_get(size_t index, ferry_option_info *out);

/* ------------------------------------------------------------------------- */
/* Buffers                                                                   */
/* ------------------------------------------------------------------------- */

/* A buffer handle, passed by value. Handles are checked on every use: a freed,
 * made-up or pre-shutdown handle gives FERRY_ERROR_STALE_BUFFER and touches
 * nothing, also after its slot has been reused. */
typedef struct ferry_buffer {
  uint64_t id;
} ferry_buffer;
/* A handle that is never a buffer's (id 0: every use gives FERRY_ERROR_STALE_BUFFER).
 * C spells it as a compound literal; C++, which has none, as a braced temporary. */
#ifdef __cplusplus
#define FERRY_NULL_BUFFER (ferry_buffer{0})
#else
#define FERRY_NULL_BUFFER ((ferry_buffer){0})
#endif

/* Why ferry_alloc_host_ptr said no. */
typedef enum ferry_refusal {
  FERRY_REFUSAL_NONE = 0,
  FERRY_REFUSAL_UNSUPPORTED, /* this backend or device has no buffers over host memory */
  FERRY_REFUSAL_MISALIGNED,  /* host.data is not aligned to host_ptr_alignment */
  FERRY_REFUSAL_BAD_LENGTH,  /* byte length is 0 or not a multiple of host_ptr_alignment */
  FERRY_REFUSAL_OVERLAP,     /* the range overlaps memory already under another host-ptr buffer */
  FERRY_REFUSAL_DRIVER,      /* the driver said no; ferry_last_error() names the call and code */
  /* Reasons only ferry_dlpack_import gives (an extension to the contract): */
  FERRY_REFUSAL_STRIDED,   /* the tensor is not compact row-major: its strides skip or reorder elements */
  FERRY_REFUSAL_DTYPE,     /* a dtype ferry has no kind for: lanes != 1, an unknown code, or bits that no kind has */
  FERRY_REFUSAL_DEVICE,    /* no ferry device has the tensor's memory, or the device asked for cannot use it */
  FERRY_REFUSAL_READ_ONLY, /* the versioned tensor is read-only (ferry buffers are always writable) */
  FERRY_REFUSAL_VERSION,   /* the versioned tensor's DLPack major version is not 1 */
} ferry_refusal;

/* "FERRY_REFUSAL_MISALIGNED"; "FERRY_REFUSAL_UNKNOWN" outside the enum. Never NULL. */
FERRY_API const char *ferry_refusal_name(ferry_refusal r);

/* A buffer of `length` elements of `kind` on `device`; its bytes are length x
 * ferry_kind_size(kind). Length 0 is a valid, empty buffer on every backend. The
 * contents of a fresh buffer are unspecified (the checked backend fills them with
 * poison). FERRY_ERROR_INVALID_ARGUMENT for a NULL device or out, FERRY_CUSTOM or
 * an unknown kind; FERRY_ERROR_OVERFLOW when the byte count does not fit in size_t;
 * FERRY_ERROR_OUT_OF_MEMORY when the device cannot hold it (after the allocation
 * cache was released and the allocation tried again), and on a CPU device when its
 * live buffers would hold more than its total_memory. */
FERRY_API ferry_status ferry_alloc(ferry_device *device, size_t length, ferry_kind kind, ferry_buffer *out_buffer);

/* A buffer of kind FERRY_CUSTOM with `length` elements of `elem_size` bytes each
 * (records, structs). elem_size 0 is FERRY_ERROR_INVALID_ARGUMENT. Custom buffers
 * take only the _ptr transfers and the byte-range functions. */
FERRY_API ferry_status ferry_alloc_custom(ferry_device *device, size_t length, size_t elem_size,
                                          ferry_buffer *out_buffer);

/* A buffer that IS the host array, on devices whose memory is host memory
 * (native, checked): no copy is made, ferry_device_ptr is host.data, ferry_size is
 * host.length. Every other device returns FERRY_ERROR_UNSUPPORTED (OpenCL CPU
 * devices included: their memory is the runtime's, not the array's). Freeing the
 * buffer never frees the array; the caller keeps it alive until then. Several
 * zero-copy buffers may share host memory. The array's own mistakes are
 * ferry_alloc_host_ptr's: FERRY_ERROR_INVALID_ARGUMENT or FERRY_ERROR_OVERFLOW. */
FERRY_API ferry_status ferry_alloc_zero_copy(ferry_device *device, ferry_array host, ferry_buffer *out_buffer);

/* Explicit opt-in, never used implicitly: a device buffer created over the host
 * array's memory (OpenCL CL_MEM_USE_HOST_PTR, CUDA host registration mapped into
 * the device's address space, Vulkan VK_EXT_external_memory_host). The caller
 * keeps the array alive and in place until the buffer is freed. Host access goes
 * through ferry_host_to_device / ferry_device_to_host (or the _ptr variants) on
 * the same array, which synchronise instead of copying. native and checked return
 * their zero-copy buffer. When the device cannot, returns FERRY_ERROR_REFUSED and
 * stores the reason in *out_refusal (which may be NULL); on success
 * *out_refusal is FERRY_REFUSAL_NONE. Arguments that are wrong whatever the device
 * (NULL device or out_buffer, NULL data with a nonzero length, an unknown or
 * custom kind, an overflowing length, an array whose end lies past the last
 * address) give FERRY_ERROR_INVALID_ARGUMENT or
 * FERRY_ERROR_OVERFLOW, not a refusal. */
FERRY_API ferry_status ferry_alloc_host_ptr(ferry_device *device, ferry_array host, ferry_buffer *out_buffer,
                                            ferry_refusal *out_refusal);

/* Releases the buffer; the handle becomes stale. Freeing it again, or using it
 * after, returns FERRY_ERROR_STALE_BUFFER and touches nothing. The memory may be
 * kept in the device's allocation cache (see ferry_device_trim). A host-ptr
 * buffer gives its array back to the host (a pending device-side view is
 * synchronised first); the array itself is never freed. A buffer exported through
 * DLPack keeps its memory until the last tensor's deleter runs (the handle is
 * stale at once all the same); a buffer imported from DLPack calls its
 * producer's deleter when its memory goes. */
FERRY_API ferry_status ferry_free(ferry_buffer buffer);

/* ------------------------------------------------------------------------- */
/* Transfers: synchronous, on return the data is where it was sent            */
/* ------------------------------------------------------------------------- */

/* Copies the host array into the buffer. The kinds must be equal
 * (FERRY_ERROR_KIND_MISMATCH; custom buffers take only the _ptr variants) and the
 * lengths too (FERRY_ERROR_SIZE_MISMATCH): nothing is clamped, nothing is copied
 * when they differ. On a zero-copy or host-ptr buffer, from its own array this
 * moves no data (it only hands the array to the device); from another array it
 * copies. Overlapping host ranges behave like memmove. */
FERRY_API ferry_status ferry_host_to_device(ferry_array src, ferry_buffer dst);

/* Copies the buffer into the host array; the same checks as ferry_host_to_device.
 * On a zero-copy or host-ptr buffer, to its own array this only synchronises
 * (hands the array back to the host). */
FERRY_API ferry_status ferry_device_to_host(ferry_buffer src, ferry_array dst);

/* Copies byte_size bytes from src_ptr into the buffer; works on any buffer,
 * custom ones included. byte_size must equal the buffer's bytes
 * (FERRY_ERROR_SIZE_MISMATCH). The caller keeps src_ptr alive for the call. */
FERRY_API ferry_status ferry_host_ptr_to_device(const void *src_ptr, size_t byte_size, ferry_buffer dst);

/* Copies the buffer's bytes to dst_ptr; byte_size must equal the buffer's bytes. */
FERRY_API ferry_status ferry_device_to_host_ptr(ferry_buffer src, void *dst_ptr, size_t byte_size);

/* Copies src into dst: the same kind and length (custom: the same element size
 * and length). Works on one device, between two devices of one backend, and
 * between backends (staged through host memory where there is no direct path).
 * Counts in the destination device's d2d statistics. */
FERRY_API ferry_status ferry_device_to_device(ferry_buffer src, ferry_buffer dst);

/* ------------------------------------------------------------------------- */
/* Byte ranges                                                               */
/* ------------------------------------------------------------------------- */

/* Writes `bytes` bytes from src into dst at dst_offset. A range past the end is
 * FERRY_ERROR_OUT_OF_RANGE (an offset past the end too, even with 0 bytes);
 * offset + bytes overflowing is FERRY_ERROR_OVERFLOW. Zero bytes is a no-op, and
 * src may then be NULL. */
FERRY_API ferry_status ferry_write(ferry_buffer dst, size_t dst_offset, const void *src, size_t bytes);

/* Reads `bytes` bytes of src at src_offset into dst; the same checks as ferry_write. */
FERRY_API ferry_status ferry_read(ferry_buffer src, size_t src_offset, void *dst, size_t bytes);

/* Copies `bytes` bytes between two buffers, on any devices; within one buffer it
 * behaves like memmove. The same range checks as ferry_write, on both buffers. */
FERRY_API ferry_status ferry_copy(ferry_buffer src, size_t src_offset, ferry_buffer dst, size_t dst_offset,
                                  size_t bytes);

/* ------------------------------------------------------------------------- */
/* Buffer info                                                               */
/* ------------------------------------------------------------------------- */

/* Elements; 0 for a stale handle. */
FERRY_API size_t ferry_size(ferry_buffer b);

/* Bytes per element; 0 for a stale handle. */
FERRY_API size_t ferry_elem_size(ferry_buffer b);

/* The buffer's kind; FERRY_CUSTOM for custom buffers and for a stale handle
 * (tell them apart with ferry_elem_size, which is 0 only for a stale handle). */
FERRY_API ferry_kind ferry_buffer_kind(ferry_buffer b);

/* What a user passes to the vendor API to run a kernel on the buffer: the
 * CUdeviceptr (cuda), the cl_mem (opencl), the VkBuffer (vulkan), the id<MTLBuffer>
 * (metal), the host address (native, checked; for a zero-copy buffer, the array's
 * own address). 0 for a stale handle, and for an empty buffer that owns no memory
 * (a zero-copy buffer's is still its array's address). */
FERRY_API uintptr_t ferry_device_ptr(ferry_buffer b);

/* "No transfers needed": true exactly for buffers that ARE their host array with
 * nothing to synchronise, those made by ferry_alloc_zero_copy and by
 * ferry_alloc_host_ptr on a zero-copy device (native, checked). False for
 * host-pointer buffers on devices with memory of their own (OpenCL, Vulkan, CUDA:
 * host access to them goes through transfers on the same array, which synchronise
 * instead of copying), for every other buffer and for a stale handle. */
FERRY_API bool ferry_is_zero_copy(ferry_buffer b);

/* The buffer's device; NULL for a stale handle. */
FERRY_API ferry_device *ferry_buffer_device(ferry_buffer b);

/* ------------------------------------------------------------------------- */
/* Pinned host memory, the allocation cache, statistics                      */
/* ------------------------------------------------------------------------- */

/* `bytes` bytes of host memory that transfers at full speed to and from the
 * device (cuMemAllocHost on CUDA; page-aligned host memory on host backends and
 * where the driver offers nothing better). Aligned to at least 4096 bytes.
 * Release it with ferry_host_free; ferry_shutdown() releases what is left.
 * bytes 0 is FERRY_ERROR_INVALID_ARGUMENT. */
FERRY_API ferry_status ferry_host_alloc(ferry_device *device, size_t bytes, void **out_ptr);

/* Releases memory from ferry_host_alloc. Any other pointer (NULL included, and one
 * already released) is FERRY_ERROR_INVALID_ARGUMENT and is left alone. */
FERRY_API ferry_status ferry_host_free(void *ptr);

/* Releases the device's cached free memory to the driver, and memory the backend
 * keeps for itself (the checked backend's quarantine of freed buffers; a write
 * after free found there is reported as FERRY_ERROR_BACKEND, after everything was
 * released). An allocation that runs out of memory does the same before it is
 * tried again. */
FERRY_API ferry_status ferry_device_trim(ferry_device *device);

typedef struct ferry_stats {
  uint64_t live_buffers, bytes_in_use, bytes_cached, peak_bytes_in_use;
  uint64_t h2d_bytes, d2h_bytes,
      d2d_bytes; /* since ferry_init; h2d and d2h on the buffer's device, d2d on the destination's */
  uint64_t h2d_count, d2h_count, d2d_count;
} ferry_stats;

/* The device's statistics. bytes_in_use counts the bytes of live buffers (as
 * asked); bytes_cached the bytes the allocation cache holds; transfers count
 * successful calls (ferry_write counts as h2d, ferry_read as d2h, ferry_copy as
 * d2d). */
FERRY_API ferry_status ferry_device_stats(const ferry_device *device, ferry_stats *out_stats);

/* ------------------------------------------------------------------------- */
/* Queues and events: asynchronous work                                      */
/* ------------------------------------------------------------------------- */

/*
 * A queue belongs to one device and runs the operations submitted to it in the
 * order submitted: a CUDA stream, an in-order OpenCL command queue, a chain of
 * Vulkan submissions, a Metal command queue, a thread of ferry's on the host
 * backends. Operations on different queues are unordered unless
 * ferry_queue_wait_event orders them. Every device has a default queue
 * (ferry_queue_default); the synchronous calls above first wait for the work
 * already submitted to it, so that code mixing the two stays in order.
 *
 * Everything is checked when an operation is submitted (handles, byte ranges,
 * overflow, a NULL host pointer with bytes > 0, the queue's device); a bad call
 * returns its error at once and submits nothing. An operation holds its buffers
 * until it ends: ferry_free during it succeeds and the memory stays valid.
 * Host memory passed to an _async call must stay alive and unchanged (for a
 * read: untouched) until the operation completes; ordinary (pageable) memory is
 * fine, and the call returns without waiting for the bytes.
 *
 * A failure while the work runs is reported once, with a sentence naming the
 * operation and the driver's words, by the first of ferry_queue_synchronize,
 * ferry_queue_query, ferry_queue_destroy, ferry_device_synchronize, or
 * ferry_event_synchronize / ferry_event_query on an event recorded on the queue
 * after the failed operation. The operations submitted behind it are not run
 * (the sentence says how many); until the report, submissions to the queue
 * (the synchronous calls too, for the default queue) return
 * FERRY_ERROR_CANCELLED. Once reported, the queue works again.
 *
 * Handles are values like ferry_buffer: a destroyed or made-up handle is
 * FERRY_ERROR_STALE_HANDLE, never a crash; after ferry_shutdown() every queue
 * and event handle is stale.
 */
typedef struct ferry_queue {
  uint64_t id;
} ferry_queue;
typedef struct ferry_event {
  uint64_t id;
} ferry_event;
#ifdef __cplusplus
#define FERRY_NULL_QUEUE (ferry_queue{0})
#define FERRY_NULL_EVENT (ferry_event{0})
#else
#define FERRY_NULL_QUEUE ((ferry_queue){0})
#define FERRY_NULL_EVENT ((ferry_event){0})
#endif

/* A new queue of the device, with a native queue of its own. */
FERRY_API ferry_status ferry_queue_create(ferry_device *device, ferry_queue *out_queue);

/* The device's own queue: the same handle every time; ferry_queue_destroy
 * refuses it (FERRY_ERROR_INVALID_ARGUMENT). */
FERRY_API ferry_status ferry_queue_default(ferry_device *device, ferry_queue *out_queue);

/* Waits for the queue's work, then frees it; the handle is stale at once.
 * Returns a failure of the queue's work not yet reported (the queue is freed
 * all the same). */
FERRY_API ferry_status ferry_queue_destroy(ferry_queue queue);

/* Waits until everything submitted to the queue has completed; reports a
 * failure of its work (see above). */
FERRY_API ferry_status ferry_queue_synchronize(ferry_queue queue);

/* FERRY_OK when everything submitted has completed, FERRY_NOT_READY while work
 * runs; never waits. Reports a failure like ferry_queue_synchronize. */
FERRY_API ferry_status ferry_queue_query(ferry_queue queue);

/* The native queue under a ferry queue, for launching one's own kernels in its
 * order: .queue is the CUstream, cl_command_queue, VkQueue (and .queue_family)
 * or id<MTLCommandQueue>, 0 on the host backends; .device and .context as
 * ferry_device_native. Work submitted to a CUDA stream or an OpenCL queue is
 * ordered with the ferry queue's as the driver orders it; on Metal a command
 * buffer committed there starts after ferry's earlier work and Metal orders it
 * with that work through the buffers both use; on Vulkan, order with events
 * instead, and submit nothing to the VkQueue while a ferry call on that device
 * runs (Vulkan wants a queue externally synchronised). */
FERRY_API ferry_status ferry_queue_native(ferry_queue queue, ferry_native *out_native);

/* ferry_write, ferry_read, ferry_copy on a queue. write and read take a queue
 * of the buffer's device; copy a queue of the source's or the destination's
 * device (the devices may be of different backends). Any other queue is
 * FERRY_ERROR_INVALID_ARGUMENT. Zero bytes is a valid operation that moves
 * nothing (an offset equal to the buffer's size is then in range). */
FERRY_API ferry_status ferry_write_async(ferry_queue queue, ferry_buffer dst, size_t dst_offset, const void *src,
                                         size_t bytes);
FERRY_API ferry_status ferry_read_async(ferry_queue queue, ferry_buffer src, size_t src_offset, void *dst,
                                        size_t bytes);
FERRY_API ferry_status ferry_copy_async(ferry_queue queue, ferry_buffer src, size_t src_offset, ferry_buffer dst,
                                        size_t dst_offset, size_t bytes);

/* ferry_host_to_device, ferry_device_to_host and ferry_device_to_device on a
 * queue: whole buffers, with the synchronous typed calls' checks (kinds and
 * lengths, FERRY_ERROR_KIND_MISMATCH and FERRY_ERROR_SIZE_MISMATCH) made when
 * submitted, and the queue rules of the byte-range calls above. The host
 * array's memory must stay alive (and, for a read, untouched) until the
 * operation completes. */
FERRY_API ferry_status ferry_host_to_device_async(ferry_queue queue, ferry_array src, ferry_buffer dst);
FERRY_API ferry_status ferry_device_to_host_async(ferry_queue queue, ferry_buffer src, ferry_array dst);
FERRY_API ferry_status ferry_device_to_device_async(ferry_queue queue, ferry_buffer src, ferry_buffer dst);

/* Sets [dst_offset, dst_offset + bytes) of dst to `pattern` repeated: a pattern
 * of 1, 2 or 4 bytes, copied when submitted; bytes and dst_offset must be
 * multiples of pattern_size (else FERRY_ERROR_INVALID_ARGUMENT). ferry_fill is
 * synchronous, as the transfers above. */
FERRY_API ferry_status ferry_fill(ferry_buffer dst, size_t dst_offset, size_t bytes, const void *pattern,
                                  size_t pattern_size);
FERRY_API ferry_status ferry_fill_async(ferry_queue queue, ferry_buffer dst, size_t dst_offset, size_t bytes,
                                        const void *pattern, size_t pattern_size);

/* An event, bound to no device until recorded; one never recorded is complete. */
FERRY_API ferry_status ferry_event_create(ferry_event *out_event);

/* The handle is stale at once; waits that queues already take on it stay. */
FERRY_API ferry_status ferry_event_destroy(ferry_event event);

/* Captures all work submitted to the queue so far; recording again replaces
 * the capture (on any queue of any device). */
FERRY_API ferry_status ferry_event_record(ferry_event event, ferry_queue queue);

/* The queue's later operations wait for the event's capture as it stands now,
 * whatever its device and backend, without blocking the calling thread. */
FERRY_API ferry_status ferry_queue_wait_event(ferry_queue queue, ferry_event event);

/* Waits for the event's capture; reports a failure of the queue's work before
 * it (see above). */
FERRY_API ferry_status ferry_event_synchronize(ferry_event event);

/* FERRY_OK when the capture has completed, FERRY_NOT_READY while not; never
 * waits. */
FERRY_API ferry_status ferry_event_query(ferry_event event);

/* Milliseconds from start's completion to stop's (negative if stop completed
 * first), both last recorded on queues of one device, from the device's own
 * clock where it has one (CUDA events, OpenCL profiling, Vulkan timestamps,
 * Metal's GPU times), else the host's monotonic clock at completion.
 * FERRY_ERROR_INVALID_ARGUMENT if either was never recorded or they were last
 * recorded on different devices; else FERRY_NOT_READY if either is not
 * complete. */
FERRY_API ferry_status ferry_event_elapsed(ferry_event start, ferry_event stop, double *out_ms);

/* ------------------------------------------------------------------------- */
/* DLPack: buffers in and out of NumPy, PyTorch, CuPy, JAX, TVM (extension)  */
/* ------------------------------------------------------------------------- */

/*
 * DLPack is the exchange format of array libraries: a producer hands a consumer
 * a managed tensor (the memory, its device, shape and dtype, and a deleter the
 * consumer calls once it is done). ferry declares DLPack's structures itself,
 * under its own names, field for field as dlpack.h has them: the legacy
 * DLManagedTensor of DLPack 0.8 and the versioned DLManagedTensorVersioned of
 * DLPack 1.x. A program may include dlpack.h beside ferry.h (no name is shared)
 * and cast between DLManagedTensor * and ferry_dl_managed_tensor *, and between
 * DLManagedTensorVersioned * and ferry_dl_managed_tensor_versioned *.
 *
 * What `data` is, per device type (as DLPack defines it; ferry_device_ptr gives
 * the same value): the host address (FERRY_DL_CPU, FERRY_DL_CUDA_HOST), the
 * CUdeviceptr (FERRY_DL_CUDA, FERRY_DL_CUDA_MANAGED), the cl_mem
 * (FERRY_DL_OPENCL), the VkBuffer (FERRY_DL_VULKAN), the id<MTLBuffer>
 * (FERRY_DL_METAL). The tensor's bytes start at data + byte_offset on devices
 * whose data is an address, at byte_offset into the object otherwise.
 */

/* The DLPack version ferry's versioned tensors carry (major 1 is the ABI of
 * ferry_dl_managed_tensor_versioned; ferry imports any 1.x). */
#define FERRY_DL_VERSION_MAJOR 1
#define FERRY_DL_VERSION_MINOR 0

/* DLDeviceType: the values of dlpack.h. */
enum {
  FERRY_DL_CPU = 1,           /* kDLCPU: host memory */
  FERRY_DL_CUDA = 2,          /* kDLCUDA: device memory of the CUDA device with ordinal device_id */
  FERRY_DL_CUDA_HOST = 3,     /* kDLCUDAHost: pinned host memory (cudaMallocHost) */
  FERRY_DL_OPENCL = 4,        /* kDLOpenCL */
  FERRY_DL_VULKAN = 7,        /* kDLVulkan */
  FERRY_DL_METAL = 8,         /* kDLMetal */
  FERRY_DL_VPI = 9,           /* kDLVPI */
  FERRY_DL_ROCM = 10,         /* kDLROCM */
  FERRY_DL_ROCM_HOST = 11,    /* kDLROCMHost: pinned host memory (hipMallocHost) */
  FERRY_DL_EXT_DEV = 12,      /* kDLExtDev */
  FERRY_DL_CUDA_MANAGED = 13, /* kDLCUDAManaged: cudaMallocManaged memory */
  FERRY_DL_ONEAPI = 14,       /* kDLOneAPI */
  FERRY_DL_WEBGPU = 15,       /* kDLWebGPU */
  FERRY_DL_HEXAGON = 16,      /* kDLHexagon */
  FERRY_DL_MAIA = 17,         /* kDLMAIA */
};

/* DLDataTypeCode: the values of dlpack.h that ferry reads and writes. */
enum {
  FERRY_DL_INT = 0,           /* kDLInt */
  FERRY_DL_UINT = 1,          /* kDLUInt */
  FERRY_DL_FLOAT = 2,         /* kDLFloat */
  FERRY_DL_OPAQUE_HANDLE = 3, /* kDLOpaqueHandle (never imported) */
  FERRY_DL_BFLOAT = 4,        /* kDLBfloat */
  FERRY_DL_COMPLEX = 5,       /* kDLComplex: bits is the whole complex number's */
  FERRY_DL_BOOL = 6,          /* kDLBool: 8 bits */
};

/* Flags of ferry_dl_managed_tensor_versioned (DLPACK_FLAG_BITMASK_*). */
#define FERRY_DL_FLAG_READ_ONLY ((uint64_t)1 << 0) /* the consumer must not write the memory */
#define FERRY_DL_FLAG_IS_COPIED ((uint64_t)1 << 1) /* the producer made a copy that the consumer alone uses */

typedef struct ferry_dl_version { /* DLPackVersion */
  uint32_t major;
  uint32_t minor;
} ferry_dl_version;

typedef struct ferry_dl_device { /* DLDevice */
  int32_t device_type;           /* FERRY_DL_* (DLDeviceType, an int-sized enum in dlpack.h) */
  int32_t device_id;
} ferry_dl_device;

typedef struct ferry_dl_data_type { /* DLDataType */
  uint8_t code;                     /* FERRY_DL_INT, ... */
  uint8_t bits;
  uint16_t lanes;
} ferry_dl_data_type;

typedef struct ferry_dl_tensor { /* DLTensor */
  void *data;
  ferry_dl_device device;
  int32_t ndim;
  ferry_dl_data_type dtype;
  int64_t *shape;   /* ndim extents */
  int64_t *strides; /* ndim strides in elements, or NULL for compact row-major */
  uint64_t byte_offset;
} ferry_dl_tensor;

typedef struct ferry_dl_managed_tensor { /* DLManagedTensor (DLPack 0.8, "legacy") */
  ferry_dl_tensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct ferry_dl_managed_tensor *self);
} ferry_dl_managed_tensor;

typedef struct ferry_dl_managed_tensor_versioned { /* DLManagedTensorVersioned (DLPack 1.x) */
  ferry_dl_version version;
  void *manager_ctx;
  void (*deleter)(struct ferry_dl_managed_tensor_versioned *self);
  uint64_t flags; /* FERRY_DL_FLAG_* */
  ferry_dl_tensor dl_tensor;
} ferry_dl_managed_tensor_versioned;

/* DLPack's name for a ferry device: (FERRY_DL_CPU, 0) for native and checked,
 * (FERRY_DL_CUDA, the device's CUDA ordinal), and (FERRY_DL_OPENCL |
 * FERRY_DL_VULKAN | FERRY_DL_METAL, the device's backend_index).
 * FERRY_ERROR_UNSUPPORTED for a device of a backend DLPack has no type for. */
FERRY_API ferry_status ferry_dlpack_device(const ferry_device *device, ferry_dl_device *out_dl_device);

/* The ferry device that a DLPack device names: FERRY_DL_CPU, FERRY_DL_CUDA_HOST and
 * FERRY_DL_ROCM_HOST (host memory, id 0) name the native device (checked when
 * FERRY_BACKENDS leaves native out); FERRY_DL_CUDA and FERRY_DL_CUDA_MANAGED the
 * CUDA device of that ordinal; FERRY_DL_OPENCL, FERRY_DL_VULKAN and FERRY_DL_METAL
 * the device of that backend index. FERRY_ERROR_NO_DEVICE when there is none. */
FERRY_API ferry_status ferry_dlpack_find_device(ferry_dl_device dl_device, ferry_device **out_device);

/* Exports the buffer as a DLPack managed tensor that a consumer takes over:
 * one dimension (shape {length}, strides {1}: compact), byte_offset 0, the dtype of
 * the buffer's kind (float16/bfloat16/float32/float64 as FLOAT or BFLOAT, the
 * integers as INT or UINT of their width, nativeint as INT of the pointer's width,
 * complex32/complex64 as COMPLEX 64/128, char as UINT 8; a custom buffer as
 * bytes: UINT 8 with length x elem_size elements), the device of
 * ferry_dlpack_device, and data as DLPack defines it for that device
 * (ferry_device_ptr). Many tensors may be exported from one buffer.
 *
 * Lifetime: the tensor holds the buffer's memory until the consumer calls its
 * deleter, exactly once, from any thread and at any time: a garbage collector's
 * thread while another thread is inside ferry_shutdown is fine (the tensor's
 * reference is then dropped by exactly one of the two, and neither waits for the
 * other). ferry_free on the buffer makes the
 * handle stale at once, as always, but the memory stays, under the tensor, until
 * the last tensor exported from it is released. ferry_shutdown releases every
 * buffer's memory, exported or not: a tensor still held then points to released
 * memory and must not be read or written; its deleter stays safe to call (it
 * frees the tensor's own record and nothing else). ferry_dlpack_live_exports
 * says whether any are held.
 *
 * FERRY_ERROR_STALE_BUFFER for a stale handle, FERRY_ERROR_INVALID_ARGUMENT for a
 * NULL out_tensor, FERRY_ERROR_UNSUPPORTED on a device DLPack has no type for,
 * FERRY_ERROR_OUT_OF_MEMORY when no host memory is left for the tensor. */
FERRY_API ferry_status ferry_dlpack_export(ferry_buffer buffer, ferry_dl_managed_tensor **out_tensor);

/* The same as a versioned tensor: version {FERRY_DL_VERSION_MAJOR,
 * FERRY_DL_VERSION_MINOR}, flags 0 (writable, not a copy). */
FERRY_API ferry_status ferry_dlpack_export_versioned(ferry_buffer buffer,
                                                     ferry_dl_managed_tensor_versioned **out_tensor);

/* Imports a DLPack managed tensor as a ferry buffer over the tensor's memory (no
 * copy is made, ever):
 *  - host memory (FERRY_DL_CPU, FERRY_DL_CUDA_HOST, FERRY_DL_ROCM_HOST): a
 *    zero-copy buffer (ferry_is_zero_copy is true, ferry_device_ptr is the address)
 *    on the native device, or on `device` when it is given and its memory is host
 *    memory (checked: no guard bytes around memory ferry did not allocate). On a
 *    device with memory of its own, given explicitly, the buffer is a host-pointer
 *    buffer over the tensor's memory, with ferry_alloc_host_ptr's rules and
 *    refusals (OpenCL, CUDA; the tensor's memory is the array);
 *  - FERRY_DL_CUDA: a buffer over the CUdeviceptr on the CUDA device of that
 *    ordinal; the driver must know the pointer as that device's memory, and the
 *    tensor must lie inside one allocation;
 *  - FERRY_DL_OPENCL: a buffer over the cl_mem, when it is a buffer of the ferry
 *    device's own context (byte_offset 0 only); a `data` that is no OpenCL
 *    object of the device's driver (a host address, a number that is no handle)
 *    is refused before the driver sees it, which would crash on it;
 *  - a tensor ferry itself exported, from any device (Vulkan and Metal included):
 *    a second buffer over the same memory, on the same device.
 * The buffer's kind follows the dtype: INT/UINT 8..64, FLOAT 16/32/64, BFLOAT 16,
 * COMPLEX 64/128, BOOL 8 (as FERRY_UINT8: ferry has no boolean kind); its
 * length is the product of the shape (1 for ndim 0; 0 for an empty tensor).
 * `device` NULL picks the device ferry_dlpack_find_device names.
 *
 * Ownership: on FERRY_OK, ferry owns the tensor and calls its deleter exactly once,
 * when the buffer's memory is released (ferry_free, or ferry_shutdown for a buffer
 * still live then); the tensor's memory must stay valid until then. The deleter
 * runs on the thread that released the memory, once that thread is out of
 * ferry's calls and ferry holds no lock there (at the end of ferry_free, of the
 * transfer or the consumer's deleter that dropped the buffer's last reference, of
 * ferry_shutdown), so it may call ferry like any code: give memory back with
 * ferry_host_free, even shut ferry down. The deleters that ferry_shutdown runs do
 * so once the session is gone: a call from one of them that would start ferry
 * again fails at once with FERRY_ERROR_INVALID_ARGUMENT (ferry_shutdown released
 * everything, ferry_host_alloc's blocks included), and ferry_shutdown from one
 * has nothing left to do. On any other
 * status ferry did not take the tensor and did not call its deleter: the caller
 * still owns it (every check is made before ferry takes it).
 *
 * Refusals (FERRY_ERROR_REFUSED, the reason in *out_refusal, which may be NULL,
 * and in ferry_last_error()): FERRY_REFUSAL_VERSION (versioned, major != 1: no
 * other field is read), FERRY_REFUSAL_READ_ONLY, FERRY_REFUSAL_DTYPE,
 * FERRY_REFUSAL_STRIDED (non-contiguous tensors are refused, never copied;
 * compact strides given explicitly are fine, and extents of 1 may have any
 * stride), FERRY_REFUSAL_DEVICE (no ferry device for the tensor's device, the
 * memory is not usable on it: another GPU's pointer, another context's cl_mem, a
 * bare VkBuffer or id<MTLBuffer> without its memory, a CUDA tensor onto a CPU
 * device), FERRY_REFUSAL_MISALIGNED (data + byte_offset not aligned to the
 * dtype's scalar: 2 bytes for float16, 4 for float32 and complex64, ...),
 * FERRY_REFUSAL_UNSUPPORTED (byte_offset on OpenCL), and ferry_alloc_host_ptr's
 * reasons for host memory on a GPU. Malformed tensors are
 * FERRY_ERROR_INVALID_ARGUMENT (NULL tensor or out_buffer, negative ndim or
 * extents, NULL shape with ndim > 0, NULL data with bytes, data + byte_offset
 * wrapping around, or an end (one past the last byte) beyond the last address)
 * or FERRY_ERROR_OVERFLOW (the byte count does not fit in
 * size_t); a tensor ferry exported before ferry_shutdown is
 * FERRY_ERROR_STALE_BUFFER. *out_refusal is FERRY_REFUSAL_NONE on success. */
FERRY_API ferry_status ferry_dlpack_import(ferry_dl_managed_tensor *tensor, ferry_device *device,
                                           ferry_buffer *out_buffer, ferry_refusal *out_refusal);

/* The same for a versioned tensor. */
FERRY_API ferry_status ferry_dlpack_import_versioned(ferry_dl_managed_tensor_versioned *tensor, ferry_device *device,
                                                     ferry_buffer *out_buffer, ferry_refusal *out_refusal);

/* Tensors ferry exported whose deleter has not run yet, over the process's
 * lifetime (all sessions). Bindings check it before ferry_shutdown, which would
 * release the memory under them. */
FERRY_API size_t ferry_dlpack_live_exports(void);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_H */
