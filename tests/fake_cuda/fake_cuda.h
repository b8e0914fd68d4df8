/*
 * The fake CUDA driver's own entry points, beside the driver API it imitates.
 * Tests find them with dlsym in the library that ferry loaded
 * (FERRY_CUDA_LIBRARY); the real libcuda.so.1 has none of them, which is how a
 * test knows it runs on real hardware.
 *
 * Environment, read at cuInit (when no context is alive):
 *   FAKE_CUDA_DEVICES=N        devices (default 1; 0 makes cuInit fail with CUDA_ERROR_NO_DEVICE)
 *   FAKE_CUDA_MEM=BYTES        memory per device, "512M", "2G" (default 1G)
 *   FAKE_CUDA_PEER=0|1         cuDeviceCanAccessPeer between distinct devices (default 1)
 *   FAKE_CUDA_DEVICE_BASE=N    CUdevice handle of device 0 (default 0, as on real drivers)
 *   FAKE_CUDA_INIT_ERROR=CODE  what cuInit returns (default 0)
 *   FAKE_CUDA_DELAY_US=N       the device's queue waits N us before each operation (default 0),
 *                              so that a missing wait shows up as wrong bytes or a sanitizer report
 *   FAKE_CUDA_KERNELS=1        cuModuleLoadData accepts PTX and cuLaunchKernel runs the one kernel
 *                              it knows (ferry_increment_i32) on the host; otherwise cuModuleLoadData
 *                              returns CUDA_ERROR_NOT_SUPPORTED
 *   FAKE_CUDA_HOST_MISALIGN=1  cuMemHostAlloc returns pointers 64 bytes past a page boundary
 *   FAKE_CUDA_NO_SYNC_MEMOPS=1 cuPointerSetAttribute(SYNC_MEMOPS) returns CUDA_ERROR_NOT_SUPPORTED
 *   FAKE_CUDA_STRICT=1         misuse (wrong context, unknown pointers, resources left in a context at its
 *                              release) is printed to stderr, and leaks abort the process
 */
#ifndef FERRY_FAKE_CUDA_H
#define FERRY_FAKE_CUDA_H

typedef struct fake_cuda_counts {
  long device_allocations; /* live cuMemAlloc blocks, all devices */
  long pinned_blocks;      /* live cuMemHostAlloc / cuMemAllocHost blocks */
  long registered_ranges;  /* live cuMemHostRegister ranges */
  long streams, events, modules;
  long contexts_retained; /* primary contexts with a reference */
  long misuse;            /* calls the fake refused as API misuse (wrong context, bad pointer, ...) */
  long sync_memops_set;   /* cuPointerSetAttribute(SYNC_MEMOPS) calls that succeeded */
  long pageable_h2d;      /* cuMemcpyHtoD_v2 calls that returned before the copy landed */
  long peer_copies;       /* cuMemcpyPeer calls */
  long unregisters;       /* cuMemHostUnregister calls that succeeded */
} fake_cuda_counts;

/* Exported as fake_cuda_inject, fake_cuda_counts_get and fake_cuda_make_sticky. */

/* The next `skip` calls of `function` (its symbol name, "cuMemAlloc_v2") run
 * normally, the `times` after that return `result`. At most 16 at once;
 * fake_cuda_inject(NULL, 0, 0, 0) clears them all. Returns 0, or -1 when full. */
typedef int (*fake_cuda_inject_fn)(const char *function, int result, int skip, int times);
/* Fills *out. */
typedef void (*fake_cuda_counts_fn)(fake_cuda_counts *out);
/* Makes device `ordinal`'s context fail every later call with `result` (a sticky
 * error, as after a kernel fault), until the context is destroyed. */
typedef int (*fake_cuda_make_sticky_fn)(int ordinal, int result);

#endif
