/*
 * The fake CUDA driver's own entry points, beside the driver API it imitates.
 * Tests find them with dlsym in the library that ferry loaded
 * (FERRY_CUDA_LIBRARY); the real libcuda.so.1 has none of them, which is how a
 * test knows it runs on real hardware. Every symbol the library exports is a
 * CUDA name or starts with fake_cuda_.
 *
 * Environment, read at cuInit (when no context is alive):
 *   FAKE_CUDA_DEVICES=N        devices (default 1; 0 makes cuInit fail with CUDA_ERROR_NO_DEVICE)
 *   FAKE_CUDA_MEM=BYTES        memory per device, "512M", "2G" (default 1G)
 *   FAKE_CUDA_PEER=0|1         cuDeviceCanAccessPeer between distinct devices (default 1)
 *   FAKE_CUDA_DEVICE_BASE=N    CUdevice handle of device 0 (default 0, as on real drivers)
 *   FAKE_CUDA_INIT_ERROR=CODE  what cuInit returns (default 0)
 *   FAKE_CUDA_DELAY_US=N       every stream waits N us before each copy, memset, kernel and event
 *                              record it runs (default 0), so that a missing wait shows up as wrong
 *                              bytes or a sanitizer report
 *   FAKE_CUDA_JITTER_US=N      and a pseudo-random 0..N us more (default 0), different for each
 *                              operation, so that the order in which streams finish varies
 *   FAKE_CUDA_CONNECTIONS=N    the streams of a context share N (1 to 32) hardware queues (CUDA's
 *                              CUDA_DEVICE_MAX_CONNECTIONS; default 0: one per stream), given out
 *                              round robin as streams are made, the legacy stream first. A queue
 *                              starts its operations in the order they were queued, whichever stream
 *                              they belong to, and an operation starts only once its stream's earlier
 *                              work is done and its waits are met: a wait holds every later operation
 *                              of its queue (the false dependency that makes a stream wait for work
 *                              queued after it on another stream deadlock on a GPU)
 *   FAKE_CUDA_KERNELS=1        cuModuleLoadData accepts PTX and cuLaunchKernel runs the one kernel
 *                              it knows (ferry_increment_i32) on the host; otherwise cuModuleLoadData
 *                              returns CUDA_ERROR_NOT_SUPPORTED
 *   FAKE_CUDA_HOST_MISALIGN=1  cuMemHostAlloc returns pointers 64 bytes past a page boundary
 *   FAKE_CUDA_NO_SYNC_MEMOPS=1 cuPointerSetAttribute(SYNC_MEMOPS) returns CUDA_ERROR_NOT_SUPPORTED
 *   FAKE_CUDA_NO_WAIT_VALUE=1  cuStreamWaitValue32 returns CUDA_ERROR_NOT_SUPPORTED (801), as a driver
 *                              without stream memory operations does, so that a fallback can be tested
 *   FAKE_CUDA_STRICT=1         misuse (wrong context, unknown pointers or handles, resources left in a
 *                              context at its release, streams, events and work waiting on host memory
 *                              included) is printed to stderr, and leaks abort the process
 *
 * Streams and events (fake_cuda_streams.c), as CUDA orders them:
 *  - Every stream, and the legacy (NULL) stream of each primary context, is a
 *    FIFO of operations run in order by a thread of its own: work completes
 *    late and on another thread. CU_STREAM_LEGACY is the legacy stream;
 *    CU_STREAM_PER_THREAD is taken as the legacy stream too.
 *  - The asynchronous calls queue and return at once: cuMemcpyHtoDAsync,
 *    cuMemcpyDtoHAsync, cuMemcpyDtoDAsync, cuMemcpyPeerAsync,
 *    cuMemsetD8/D16/D32Async, cuLaunchKernel, cuEventRecord,
 *    cuStreamWaitEvent, cuStreamWaitValue32. Except, as in the driver:
 *    cuMemcpyHtoDAsync from pageable memory (not from cuMemHostAlloc,
 *    cuMemAllocHost or cuMemHostRegister) copies the source into a staging
 *    buffer before it returns (the caller may reuse its memory; the bytes land
 *    later), and cuMemcpyDtoHAsync into pageable memory returns once the copy
 *    is done (after the stream's earlier work). From and into pinned memory,
 *    the host bytes are read or written when the copy runs.
 *  - Blocking streams (cuStreamCreate flags 0) and the legacy stream wait for
 *    each other: an operation on the legacy stream runs after the work queued
 *    before it on every blocking stream of the context, and an operation on a
 *    blocking stream after the work queued before it on the legacy stream.
 *    CU_STREAM_NON_BLOCKING streams wait for nothing but their own work.
 *  - The synchronous calls run on the legacy stream: cuMemcpyHtoD returns
 *    once done from pinned memory or into SYNC_MEMOPS memory, and otherwise
 *    stages the source and returns before the bytes land; cuMemcpyDtoH returns
 *    once done; cuMemcpyDtoD returns before the copy is done; cuMemcpyPeer
 *    returns before the copy is done, which runs after all the work queued on
 *    the current, source and destination contexts, and before the later work
 *    of the other two contexts' legacy (and so blocking) streams.
 *  - cuStreamSynchronize and cuStreamQuery (CUDA_SUCCESS when idle, otherwise
 *    CUDA_ERROR_NOT_READY) cover the stream's work; for the legacy stream, the
 *    work of the blocking streams too. They take a stream of any context
 *    without making it current. cuCtxSynchronize, cuMemFree and
 *    cuModuleUnload wait for every stream of the context; cuMemFreeHost and
 *    cuMemHostUnregister for every stream of every context.
 *  - cuStreamDestroy returns at once; the work queued on the stream still
 *    runs (and legacy-stream work still waits for it). cuEventDestroy of an
 *    event with records pending is allowed.
 *  - cuEventRecord captures the stream's position: the event completes once
 *    the work queued on the stream before it has completed (and, on the
 *    legacy stream, that of the blocking streams). Recording again replaces
 *    the capture. An event never recorded is complete. cuEventQuery returns
 *    CUDA_SUCCESS or CUDA_ERROR_NOT_READY, cuEventSynchronize waits. Event and
 *    stream must be of the same context (CUDA_ERROR_INVALID_HANDLE).
 *  - cuEventElapsedTime: milliseconds between the CLOCK_MONOTONIC times at
 *    which the two records ran; CUDA_ERROR_NOT_READY while either is pending,
 *    CUDA_ERROR_INVALID_HANDLE when either was never recorded or was created
 *    with CU_EVENT_DISABLE_TIMING.
 *  - cuStreamWaitEvent(stream, event, 0): the stream's later work waits for
 *    the event's capture as it stands at the call (a later record does not
 *    move it); the event may be of another context. No wait when it was never
 *    recorded. Other flags: CUDA_ERROR_INVALID_VALUE.
 *  - cuStreamWaitValue32(stream, addr, value, CU_STREAM_WAIT_VALUE_GEQ): the
 *    stream's later work waits until (int32_t)(*addr - value) >= 0. addr must
 *    be a 4-byte aligned word of host memory mapped with
 *    cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP) or
 *    cuMemHostRegister(CU_MEMHOSTREGISTER_DEVICEMAP), at the address that
 *    cuMemHostGetDevicePointer gave; other addresses and flags are
 *    CUDA_ERROR_INVALID_VALUE. That is stricter than the driver (an H200's
 *    takes EQ, device memory and pinned memory without DEVICEMAP too): the
 *    fake holds ferry to the use that works everywhere. The stream polls the
 *    word (5 us, doubling to 1 ms between looks) with acquire loads: the host
 *    raises it with a store at any time (an atomic store, __atomic_store_n or
 *    C11 atomic_store, keeps ThreadSanitizer quiet). A context released while a stream still waits
 *    abandons the wait (reported as misuse). cuDeviceGetAttribute answers 0
 *    for CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS (122) and
 *    CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR (123).
 *  - cuMemsetD8/D16/D32Async set N elements of 1, 2 or 4 bytes; the pointer
 *    must be aligned to the element size (CUDA_ERROR_INVALID_VALUE).
 *  - Errors of queued work: an operation checks its memory when it runs. A
 *    copy or memset whose memory is gone by then (a device range freed
 *    meanwhile, say by another context's cuMemFree, which waits for its own
 *    context's work only) makes its context sticky with
 *    CUDA_ERROR_ILLEGAL_ADDRESS, as a fault on a GPU would: the call that
 *    queued it had succeeded, later calls fail (counts.async_faults, and a
 *    misuse report). A kernel that reads out of bounds does the same when it
 *    runs. A context with a sticky error runs nothing more: its queued work
 *    completes at once, undone, and its synchronisations return the error.
 *  - Every call can be failed with fake_cuda_inject (by its symbol name:
 *    "cuEventElapsedTime_v2", "cuStreamWaitValue32_v2", ...), fails with the
 *    context's sticky error, and checks pointers against live allocations.
 *    Streams and events are counted (fake_cuda_counts); those left at a
 *    context's release are freed with it, and reported under FAKE_CUDA_STRICT.
 *    All functions may be called from any thread at once.
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
  long peer_copies;       /* cuMemcpyPeer and cuMemcpyPeerAsync calls */
  long unregisters;       /* cuMemHostUnregister calls that succeeded */
  long async_faults;      /* queued operations that found their memory gone when they ran */
} fake_cuda_counts;

/* Exported as fake_cuda_inject, fake_cuda_counts_get and fake_cuda_make_sticky. */

/* The next `skip` calls of `function` (its symbol name, "cuMemAlloc_v2") run
 * normally, the `times` after that return `result`. At most 16 at once;
 * fake_cuda_inject(NULL, 0, 0, 0) clears them all. Returns 0, or -1 when full. */
/* cuLaunchHostFunc(stream, fn, user_data): fn(user_data) runs on the stream's
 * thread, in the stream's order (ferry does not use it; the tests do). A call
 * into the driver from fn is misuse (CUDA_ERROR_NOT_PERMITTED). */
typedef void (*fake_cuda_host_fn)(void *user_data);
typedef int (*fake_cuda_launch_host_func_fn)(void *stream, fake_cuda_host_fn fn, void *user_data);

typedef int (*fake_cuda_inject_fn)(const char *function, int result, int skip, int times);
/* Fills *out. */
typedef void (*fake_cuda_counts_fn)(fake_cuda_counts *out);
/* Makes device `ordinal`'s context fail every later call with `result` (a sticky
 * error, as after a kernel fault), until the context is destroyed, or until
 * fake_cuda_make_sticky(ordinal, 0) (a GPU cannot recover; the fake can). */
typedef int (*fake_cuda_make_sticky_fn)(int ordinal, int result);

#endif
