/*
 * What libferry gives its companion libraries (libferry_mpi), which link the
 * shared libferry and see only its exported symbols: the thread's error
 * sentence, the FERRY_DEBUG words, and buffers held across calls. Not for
 * programs: these names may change with any release, as the companion libraries
 * are built from the same tree.
 */
#ifndef FERRY_CORE_COMPANION_H
#define FERRY_CORE_COMPANION_H

#include "ferry.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define FERRY_COMPANION_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define FERRY_COMPANION_PRINTF(f, a)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Sets this thread's error sentence (ferry_last_error) and returns `status`. */
FERRY_API ferry_status ferry__companion_fail(ferry_status status, const char *fmt, ...) FERRY_COMPANION_PRINTF(2, 3);

/* Is `word` among FERRY_DEBUG's words ("mpi")? Read at ferry_init. */
FERRY_API bool ferry__companion_debug(const char *word);

/* A numeric or switch FERRY_* setting of the session (FERRY_MPI_CUDA_AWARE):
 * true with its value when it is set. */
FERRY_API bool ferry__companion_option(const char *name, uint64_t *out);

/* A buffer held across calls: its memory stays valid until the hold is released,
 * even if the program frees the buffer meanwhile, and ferry_shutdown() takes the
 * hold over (a transfer on it after that fails with FERRY_ERROR_STALE_BUFFER). */
typedef struct ferry_companion_hold {
  ferry_buffer buffer;
  uint64_t session;
  void *host;           /* the bytes as host memory the CPU may read and write at any time, or NULL */
  ferry_device *device; /* its device */
  bool lanes;           /* its device's queues run transfers on the device's own queues (DMA), not on threads */
  ferry_kind kind;
  size_t elem_size, length, bytes;
} ferry_companion_hold;

/* Takes a hold (FERRY_ERROR_STALE_BUFFER naming `fn` for a stale handle). */
FERRY_API ferry_status ferry__companion_hold(ferry_buffer buffer, const char *fn, ferry_companion_hold *out);
/* Releases it; any thread, at any time, once. */
FERRY_API void ferry__companion_release(ferry_companion_hold *hold);
/* ferry_write (to_device) or ferry_read of [offset, offset + bytes) of the held
 * buffer, freed or not, from or into `host`; synchronous, after the default
 * queue's work as the public calls. */
FERRY_API ferry_status ferry__companion_transfer(const ferry_companion_hold *hold, const char *fn, bool to_device,
                                                 size_t offset, void *host, size_t bytes);
/* The same on `queue`, a queue of the buffer's device that the companion made
 * (ferry_queue_create): submitted in the queue's order, as ferry_write_async and
 * ferry_read_async, whether or not the program has freed the buffer; `host`
 * must stay until the queue's work is done (ferry_event_record on it, or
 * ferry_queue_synchronize, say when). */
FERRY_API ferry_status ferry__companion_transfer_async(const ferry_companion_hold *hold, const char *fn,
                                                       ferry_queue queue, bool to_device, size_t offset, void *host,
                                                       size_t bytes);

/* [offset, offset + bytes) of the held buffer as host memory without a copy,
 * in *out until ferry__companion_unmap: read only, or (`write`) written too.
 * FERRY_ERROR_UNSUPPORTED where the device could only copy (use
 * ferry__companion_transfer). After the default queue's work, as the public
 * calls. bytes > 0. */
FERRY_API ferry_status ferry__companion_map(const ferry_companion_hold *hold, const char *fn, size_t offset,
                                            size_t bytes, bool write, void **out);
/* The device address of byte `offset` of a held CUDA buffer (its CUdeviceptr
 * + offset), for an MPI that moves CUDA memory itself; FERRY_ERROR_UNSUPPORTED
 * on other backends. After the default queue's work, as the public calls. */
FERRY_API ferry_status ferry__companion_device_address(const ferry_companion_hold *hold, const char *fn, size_t offset,
                                                       uintptr_t *out);
/* Ends a map of the same hold; the device's later work sees what was written. */
FERRY_API ferry_status ferry__companion_unmap(const ferry_companion_hold *hold, const char *fn, void *ptr);

/* DLPack's stream protocol (the Python package's __dlpack__(stream=...)): later
 * work on `native_queue`, a native queue of the program's on the device (a
 * CUstream), waits for everything submitted so far to the device's queues, on
 * the device where its backend can make it wait (CUDA: cuStreamWaitEvent on an
 * event of each busy queue), else on the host. Reports a failure of a queue's
 * work as ferry_queue_synchronize would. */
FERRY_API ferry_status ferry__companion_native_wait(ferry_device *device, uintptr_t native_queue, const char *fn);

/* Lends [ptr, ptr + bytes) of the companion's own host memory, whole pages (its
 * staging) to ferry's registry of pinned memory for this session: a transfer
 * between it and a device DMAs directly (the device's driver registers it at the
 * first one, where it can) instead of staging. ferry never frees it; the lend
 * ends at ferry__companion_take_back or at ferry_shutdown, after which it must be
 * lent again: *out_session says in which session it was lent. */
FERRY_API ferry_status ferry__companion_lend(void *ptr, size_t bytes, uint64_t *out_session);
/* Ends a lend of `session` (nothing if ferry has shut down since), before the
 * memory is freed. */
FERRY_API void ferry__companion_take_back(void *ptr, uint64_t session);
/* The session now (it moves on at every ferry_shutdown). */
FERRY_API uint64_t ferry__companion_session(void);
#ifdef __cplusplus
}
#endif

#endif
