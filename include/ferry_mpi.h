/*
 * ferry_mpi.h: ferry buffers across MPI ranks (library libferry_mpi, built when
 * CMake finds MPI; CMake target ferry::mpi, pkg-config ferry-mpi).
 *
 * Every function takes byte ranges of ferry buffers on any device of any
 * backend, and runs on the caller's communicator with the caller's tag. A
 * buffer whose memory the CPU addresses directly is handed to MPI as it is;
 * any other goes through pinned host memory in pieces, the device's DMA of one
 * piece overlapped with MPI's transfer of another. FERRY_DEBUG=mpi says which
 * path each call takes. docs/MPI.md is the guide.
 *
 * Messages: a ferry message may travel as several MPI messages with the same
 * source, tag and communicator, so a program must not send its own MPI messages
 * with the same (destination, tag, communicator) while a ferry message to that
 * destination is in flight, and ferry messages are received only by ferry's
 * receives. ferry never changes a communicator's error handler: an MPI error
 * goes to that handler as any MPI call's would, and where it returns, ferry
 * returns FERRY_ERROR_BACKEND with MPI's error string.
 *
 * Every function may be called from any thread at once (MPI initialised with
 * MPI_THREAD_MULTIPLE for that; else from the threads MPI allows).
 */
#ifndef FERRY_MPI_H
#define FERRY_MPI_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An unfinished ferry_mpi_isend or ferry_mpi_irecv: a value, as safe as a
 * buffer handle (a completed or made-up one is FERRY_ERROR_STALE_HANDLE). */
typedef struct ferry_mpi_request {
  uint64_t id;
} ferry_mpi_request;

/* Sends [offset, offset + bytes) of `buf` to rank `dest` of `comm` with `tag`
 * (0 to MPI_TAG_UB). The range, the rank and the tag are checked before
 * anything is sent (FERRY_ERROR_OUT_OF_RANGE, FERRY_ERROR_OVERFLOW,
 * FERRY_ERROR_INVALID_ARGUMENT, FERRY_ERROR_STALE_BUFFER). Returns once the
 * range may be changed again. Zero bytes is a message too. */
FERRY_API ferry_status ferry_mpi_send(ferry_buffer buf, size_t offset, size_t bytes, int dest, int tag, MPI_Comm comm);

/* Receives a message of at most `bytes` from `source` (or MPI_ANY_SOURCE) with
 * `tag` (or MPI_ANY_TAG) into [offset, offset + bytes) of `buf`, on any device.
 * A longer message is FERRY_ERROR_SIZE_MISMATCH with both sizes: nothing of the
 * range is written, and the message is taken off the channel (as MPI's own
 * truncation takes it), so that the sender is not left waiting. out_status (or
 * MPI_STATUS_IGNORE) gets the sender's rank and tag, and
 * MPI_Get_count(out_status, MPI_BYTE, &n) the bytes received. */
FERRY_API ferry_status ferry_mpi_recv(ferry_buffer buf, size_t offset, size_t bytes, int source, int tag, MPI_Comm comm,
                                      MPI_Status *out_status);

/* ferry_mpi_send and ferry_mpi_recv without waiting: the request completes
 * through ferry_mpi_wait or a ferry_mpi_test that says done, exactly once; the
 * buffer stays valid until then even if it is freed. The range must not be
 * changed (for a receive: not used) until then. Receives take messages in the
 * order they were made (as MPI's own do), and are matched while ferry's
 * point-to-point calls run (a receive, a send's wait, any wait or test), not in
 * the background: test a pending receive now and then. */
FERRY_API ferry_status ferry_mpi_isend(ferry_buffer buf, size_t offset, size_t bytes, int dest, int tag, MPI_Comm comm,
                                       ferry_mpi_request *out_request);
FERRY_API ferry_status ferry_mpi_irecv(ferry_buffer buf, size_t offset, size_t bytes, int source, int tag,
                                       MPI_Comm comm, ferry_mpi_request *out_request);

/* Waits for the request, then ends it (the handle is stale afterwards, also when
 * the wait fails: a failure ends the request). out_status as ferry_mpi_recv's. */
FERRY_API ferry_status ferry_mpi_wait(ferry_mpi_request request, MPI_Status *out_status);

/* *out_done 1 and the request ended (as ferry_mpi_wait) when it has completed;
 * else FERRY_OK with *out_done 0. Moves the request on: a receive's device part
 * runs in the test that finds its bytes arrived. */
FERRY_API ferry_status ferry_mpi_test(ferry_mpi_request request, int *out_done, MPI_Status *out_status);

/* [offset, offset + bytes) of the root's buffer into the same range of every
 * other rank's buffer (each on any device). Collective: every rank of comm
 * calls it with the same bytes and root. */
FERRY_API ferry_status ferry_mpi_bcast(ferry_buffer buf, size_t offset, size_t bytes, int root, MPI_Comm comm);

/* Reduces element by element, in the buffers' kind, every rank's `send` into
 * every rank's `recv`: whole buffers of one kind and length (send may be recv:
 * in place). op: MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX (or any MPI operation valid
 * on the kind's MPI type). float16, bfloat16, char and custom buffers are
 * FERRY_ERROR_UNSUPPORTED; mismatched kinds or lengths FERRY_ERROR_KIND_MISMATCH
 * and FERRY_ERROR_SIZE_MISMATCH; nothing is sent or written then. Collective. */
FERRY_API ferry_status ferry_mpi_allreduce(ferry_buffer send, ferry_buffer recv, MPI_Op op, MPI_Comm comm);

/* The device this rank should use: the ranks of one node
 * (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, ...), in their order in comm)
 * take ferry's devices in index order, wrapping around; with gpu_only, only
 * devices that are not CPUs count (FERRY_ERROR_NO_DEVICE when there are none).
 * Collective over comm. */
FERRY_API ferry_status ferry_mpi_local_device(MPI_Comm comm, bool gpu_only, ferry_device **out_device);

#ifdef __cplusplus
}
#endif

#endif
