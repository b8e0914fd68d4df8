/*
 * libferry_mpi under mpirun: every rank runs this program (ctest: -np 2 and
 * -np 4, each with a time limit).
 *
 * Two ranks: every ordered pair of devices (a PoCL buffer on rank 0 to a
 * lavapipe buffer on rank 1, ...), both ways, at sizes 0, 1, odd, the largest
 * that travels inside its header, one more, one piece, many pieces; blocking
 * and non-blocking (tests polled to completion), MPI_ANY_SOURCE and MPI_ANY_TAG
 * with the status's source, tag and count; a message longer than the receive
 * range (refused with both sizes, nothing written, the channel clean after);
 * buffers freed during isend and irecv; both ranks sending two messages before
 * receiving (no send waits for its peer); bcast from each rank and allreduce
 * (exact on integers, within rounding on floats, in place); the errors
 * (ranks, tags, roots, stale buffers and requests, kinds). More ranks: a ring
 * on each rank's own device (ferry_mpi_local_device), bcast and allreduce.
 * Every rank checks what it received byte for byte.
 *
 * Modes of their own ctests: --gpu-only (each rank on its own GPU through
 * ferry_mpi_local_device(comm, true, ...), the fake CUDA driver's two GPUs in
 * CI, then all of the above), --large (messages of 1 GiB and 5 bytes through
 * host memory and handed to MPI) and --kill (rank 1 dies mid-transfer; the
 * script around it checks that the job ends, failed, in time).
 */
#include "ferry_mpi.h"
#include "harness.h"

#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static int me, nranks;

#define PIECE  ((size_t)4 << 20)
#define INLINE ((size_t)32 << 10)

static ferry_device *device_at(size_t i) {
  ferry_device *d = NULL;
  CHECK_OK(ferry_device_get(i, &d));
  return d;
}

static const char *backend_of(ferry_device *d) {
  static _Thread_local ferry_device_info info;
  if (ferry_device_info_get(d, &info) != FERRY_OK) return "?";
  return info.backend;
}

/* A buffer of n bytes (at least 1) on `dev`, filled with 0xEE. */
static ferry_buffer sentinel_buffer(ferry_device *dev, size_t n) {
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, n ? n : 1, FERRY_UINT8, &b));
  unsigned char *p = malloc(n ? n : 1);
  memset(p, 0xEE, n ? n : 1);
  CHECK_OK(ferry_write(b, 0, p, n ? n : 1));
  free(p);
  return b;
}

/* A buffer of at + n bytes on `dev`: 0xEE, then from `at` the pattern of `seed`. */
static ferry_buffer pattern_buffer_at(ferry_device *dev, size_t at, size_t n, uint32_t seed) {
  ferry_buffer b = sentinel_buffer(dev, at + n);
  unsigned char *p = malloc(n ? n : 1);
  fill_pattern(p, n, seed);
  CHECK_OK(ferry_write(b, at, p, n));
  free(p);
  return b;
}

static ferry_buffer pattern_buffer(ferry_device *dev, size_t n, uint32_t seed) {
  return pattern_buffer_at(dev, 0, n, seed);
}

/* [offset, offset + n) of b holds the pattern, and the bytes around it 0xEE. */
static void expect(ferry_buffer b, size_t offset, size_t n, uint32_t seed, const char *what) {
  size_t total = ferry_size(b);
  unsigned char *p = malloc(total);
  CHECK_OK(ferry_read(b, 0, p, total));
  size_t bad = find_pattern_mismatch(p + offset, n, seed);
  CHECK_MSG(bad == SIZE_MAX, "rank %d: %s: %zu bytes differ from byte %zu on", me, what, n, bad);
  for (size_t i = 0; i < total; i++)
    if ((i < offset || i >= offset + n) && p[i] != 0xEE) {
      CHECK_MSG(false, "rank %d: %s: byte %zu outside the range was written (0x%02x)", me, what, i, p[i]);
      break;
    }
  free(p);
}

static const size_t sizes[] = {0, 1, 4097, INLINE, INLINE + 1, PIECE, 3 * PIECE + 5};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* ---- two ranks: every pair of devices ---------------------------------------------------- */

static void pair(ferry_device *mine, ferry_device *theirs_on_peer, int sender, size_t n, uint32_t seed, bool async) {
  (void)theirs_on_peer;
  int peer = 1 - me, tag = 7;
  if (me == sender) {
    ferry_buffer b = pattern_buffer_at(mine, 3, n, seed); /* sent from offset 3 */
    if (async) {
      ferry_mpi_request r = {0};
      CHECK_OK(ferry_mpi_isend(b, 3, n, peer, tag, MPI_COMM_WORLD, &r));
      int done = 0;
      while (!done)
        CHECK_OK(ferry_mpi_test(r, &done, MPI_STATUS_IGNORE));
      CHECK_STATUS(ferry_mpi_test(r, &done, MPI_STATUS_IGNORE), FERRY_ERROR_STALE_HANDLE);
    } else {
      CHECK_OK(ferry_mpi_send(b, 3, n, peer, tag, MPI_COMM_WORLD));
    }
    CHECK_OK(ferry_free(b));
  } else {
    ferry_buffer b = sentinel_buffer(mine, n + 10); /* received at offset 5, room for 5 more */
    MPI_Status status;
    if (async) {
      ferry_mpi_request r = {0};
      CHECK_OK(ferry_mpi_irecv(b, 5, n + 5, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &r));
      CHECK_OK(ferry_mpi_wait(r, &status));
      CHECK_STATUS(ferry_mpi_wait(r, &status), FERRY_ERROR_STALE_HANDLE);
    } else {
      CHECK_OK(ferry_mpi_recv(b, 5, n + 5, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &status));
    }
    int count = -1;
    MPI_Get_count(&status, MPI_BYTE, &count);
    CHECK_MSG(status.MPI_SOURCE == peer && status.MPI_TAG == tag && count == (int)n,
              "rank %d: status source %d tag %d count %d, expected %d, %d, %zu", me, status.MPI_SOURCE, status.MPI_TAG,
              count, peer, tag, n);
    char what[160];
    snprintf(what, sizeof what, "%s -> %s, %zu bytes%s", backend_of(theirs_on_peer), backend_of(mine), n,
             async ? " (isend/irecv)" : "");
    expect(b, 5, n, seed, what);
    CHECK_OK(ferry_free(b));
  }
}

static void every_pair(void) {
  size_t n = ferry_device_count();
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++)
      for (size_t s = 0; s < NSIZES; s++)
        for (int async = 0; async < 2; async++) {
          /* Device i of rank 0 sends to device j of rank 1, then j back to i. */
          ferry_device *d0 = device_at(i), *d1 = device_at(j);
          harness_context = "pairs";
          uint32_t seed = (uint32_t)(i * 131 + j * 17 + s * 3 + (size_t)async);
          pair(me == 0 ? d0 : d1, me == 0 ? d1 : d0, 0, sizes[s], seed, async);
          pair(me == 0 ? d0 : d1, me == 0 ? d1 : d0, 1, sizes[s], seed + 1000, async);
        }
}

/* ---- two ranks: a message too long, buffers freed meanwhile ------------------------------------- */

static void too_long(ferry_device *dev) {
  harness_context = "a message too long";
  for (size_t s = 0; s < NSIZES; s++) {
    size_t n = sizes[s];
    if (n == 0) continue;
    for (int async = 0; async < 2; async++) {
      if (me == 0) {
        ferry_buffer b = pattern_buffer(dev, n, 5);
        CHECK_OK(ferry_mpi_send(b, 0, n, 1, 3, MPI_COMM_WORLD)); /* refused by the receiver, taken off the channel */
        CHECK_OK(ferry_mpi_send(b, 0, n, 1, 3, MPI_COMM_WORLD)); /* then received whole */
        CHECK_OK(ferry_free(b));
      } else {
        ferry_buffer b = sentinel_buffer(dev, n);
        char both[96];
        snprintf(both, sizeof both, "has %zu bytes, the receive range %zu", n, n - 1);
        if (async) {
          ferry_mpi_request r = {0};
          CHECK_OK(ferry_mpi_irecv(b, 0, n - 1, 0, 3, MPI_COMM_WORLD, &r));
          CHECK_STATUS(ferry_mpi_wait(r, MPI_STATUS_IGNORE), FERRY_ERROR_SIZE_MISMATCH);
          CHECK_ERROR_HAS(both);
          CHECK_STATUS(ferry_mpi_wait(r, MPI_STATUS_IGNORE), FERRY_ERROR_STALE_HANDLE);
        } else {
          CHECK_STATUS(ferry_mpi_recv(b, 0, n - 1, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE), FERRY_ERROR_SIZE_MISMATCH);
          CHECK_ERROR_HAS(both);
        }
        expect(b, 0, 0, 5, "a refused message wrote nothing");
        CHECK_OK(ferry_mpi_recv(b, 0, n, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        expect(b, 0, n, 5, "the message after a refused one");
        CHECK_OK(ferry_free(b));
      }
    }
  }
}

static void freed_meanwhile(ferry_device *dev) {
  harness_context = "buffers freed during isend and irecv";
  size_t n = 2 * PIECE + 9;
  if (me == 0) {
    ferry_buffer b = pattern_buffer(dev, n, 8);
    ferry_mpi_request r;
    CHECK_OK(ferry_mpi_isend(b, 0, n, 1, 4, MPI_COMM_WORLD, &r));
    CHECK_OK(ferry_free(b));
    CHECK_OK(ferry_mpi_wait(r, MPI_STATUS_IGNORE));
    /* An irecv whose buffer goes before the bytes come: completes, no crash. */
    ferry_buffer c = sentinel_buffer(dev, n);
    CHECK_OK(ferry_mpi_irecv(c, 0, n, 1, 5, MPI_COMM_WORLD, &r));
    CHECK_OK(ferry_free(c));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_OK(ferry_mpi_wait(r, MPI_STATUS_IGNORE));
  } else {
    ferry_buffer b = sentinel_buffer(dev, n);
    CHECK_OK(ferry_mpi_recv(b, 0, n, 0, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    expect(b, 0, n, 8, "sent from a buffer freed during the isend");
    ferry_buffer c = pattern_buffer(dev, n, 9);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_OK(ferry_mpi_send(c, 0, n, 0, 5, MPI_COMM_WORLD));
    CHECK_OK(ferry_free(b));
    CHECK_OK(ferry_free(c));
  }
}

/* Two receives that could take the same messages, made before either message
 * comes, each message in pieces: each gets its own message whole, in the order
 * the receives were made, whichever is waited for first. */
static void two_pending(ferry_device *dev) {
  harness_context = "two receives pending for one source and tag";
  size_t na = 2 * PIECE + 1, nb = PIECE + 7;
  if (me == 0) {
    MPI_Barrier(MPI_COMM_WORLD); /* both receives are made */
    ferry_buffer a = pattern_buffer(dev, na, 20), b = pattern_buffer(dev, nb, 21);
    ferry_mpi_request ra, rb;
    CHECK_OK(ferry_mpi_isend(a, 0, na, 1, 6, MPI_COMM_WORLD, &ra));
    CHECK_OK(ferry_mpi_isend(b, 0, nb, 1, 6, MPI_COMM_WORLD, &rb));
    CHECK_OK(ferry_mpi_wait(rb, MPI_STATUS_IGNORE));
    CHECK_OK(ferry_mpi_wait(ra, MPI_STATUS_IGNORE));
    CHECK_OK(ferry_free(a));
    CHECK_OK(ferry_free(b));
  } else {
    ferry_buffer a = sentinel_buffer(dev, na), b = sentinel_buffer(dev, na);
    ferry_mpi_request ra, rb;
    CHECK_OK(ferry_mpi_irecv(a, 0, na, 0, 6, MPI_COMM_WORLD, &ra));
    CHECK_OK(ferry_mpi_irecv(b, 0, na, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &rb));
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Status st;
    int count = -1;
    CHECK_OK(ferry_mpi_wait(rb, &st)); /* the later receive first */
    MPI_Get_count(&st, MPI_BYTE, &count);
    CHECK_MSG(count == (int)nb, "rank 1: the second receive got %d bytes, expected %zu", count, nb);
    CHECK_OK(ferry_mpi_wait(ra, &st));
    MPI_Get_count(&st, MPI_BYTE, &count);
    CHECK_MSG(count == (int)na, "rank 1: the first receive got %d bytes, expected %zu", count, na);
    expect(a, 0, na, 20, "the first of two pending receives");
    expect(b, 0, nb, 21, "the second of two pending receives");
    CHECK_OK(ferry_free(a));
    CHECK_OK(ferry_free(b));
  }
}

/* Both ranks send first: two messages in pieces each to the other, on one tag,
 * before either receives. A non-blocking send never waits for its peer (the
 * second waits behind the first's pieces, queued, not blocked), and the
 * messages arrive whole and in order. */
static void sends_first(ferry_device *dev) {
  harness_context = "both ranks send two messages before receiving";
  int peer = 1 - me;
  size_t na = 3 * PIECE + 5, nb = 2 * PIECE + 3;
  uint32_t seed = 30 + 2 * (uint32_t)me, peer_seed = 30 + 2 * (uint32_t)peer;
  ferry_buffer a = pattern_buffer(dev, na, seed), b = pattern_buffer(dev, nb, seed + 1);
  ferry_buffer ra = sentinel_buffer(dev, na), rb = sentinel_buffer(dev, na);
  ferry_mpi_request r[4];
  CHECK_OK(ferry_mpi_isend(a, 0, na, peer, 8, MPI_COMM_WORLD, &r[0]));
  CHECK_OK(ferry_mpi_isend(b, 0, nb, peer, 8, MPI_COMM_WORLD, &r[1]));
  CHECK_OK(ferry_mpi_irecv(ra, 0, na, peer, 8, MPI_COMM_WORLD, &r[2]));
  CHECK_OK(ferry_mpi_irecv(rb, 0, na, peer, 8, MPI_COMM_WORLD, &r[3]));
  MPI_Status st;
  int count = -1;
  CHECK_OK(ferry_mpi_wait(r[3], &st)); /* the later receive first: the earlier one moves meanwhile */
  MPI_Get_count(&st, MPI_BYTE, &count);
  CHECK_MSG(count == (int)nb, "rank %d: the second message has %d bytes, expected %zu", me, count, nb);
  CHECK_OK(ferry_mpi_wait(r[2], MPI_STATUS_IGNORE));
  CHECK_OK(ferry_mpi_wait(r[1], MPI_STATUS_IGNORE));
  CHECK_OK(ferry_mpi_wait(r[0], MPI_STATUS_IGNORE));
  expect(ra, 0, na, peer_seed, "the first of two messages sent before any receive");
  expect(rb, 0, nb, peer_seed + 1, "the second of two messages sent before any receive");
  CHECK_OK(ferry_free(a));
  CHECK_OK(ferry_free(b));
  CHECK_OK(ferry_free(ra));
  CHECK_OK(ferry_free(rb));
}

/* A device that fails mid-message, through the fake CUDA driver's injected
 * failures (a real driver cannot be made to fail on purpose): the sender's
 * read of its second piece, then the receiver's write of its second piece,
 * each with non-blocking and blocking calls. The failing side returns the
 * driver's failure, the other side learns of a sender's (the trailer) and is
 * not left waiting, and a message after it goes through whole. */
static void device_failures(ferry_device *dev) {
  typedef int (*inject_fn)(const char *function, int result, int skip, int times);
  inject_fn inject = NULL;
  const char *lib = getenv("FERRY_CUDA_LIBRARY"), *aware = getenv("FERRY_MPI_CUDA_AWARE");
  /* Through host memory only: a CUDA-aware MPI moves the device memory itself. */
  bool staged = strcmp(backend_of(dev), "cuda") == 0 && !(aware && strcmp(aware, "1") == 0);
  void *handle = lib && *lib && staged ? dlopen(lib, RTLD_NOW) : NULL;
  if (handle) *(void **)&inject = dlsym(handle, "fake_cuda_inject");
  int have = inject != NULL, all = 0;
  MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all) {
    harness_context = "a device failing mid-message (fake CUDA)";
    size_t n = 3 * PIECE + 5;
    for (int round = 0; round < 4; round++) {
      bool sender_fails = round < 2, blocking = round % 2 == 1;
      ferry_buffer b = me == 0 ? pattern_buffer(dev, n, 40 + (uint32_t)round) : sentinel_buffer(dev, n);
      MPI_Barrier(MPI_COMM_WORLD);
      if (me == (sender_fails ? 0 : 1))
        CHECK(inject(sender_fails ? "cuMemcpyDtoHAsync_v2" : "cuMemcpyHtoDAsync_v2", 1, 1, 1) == 0);
      ferry_status st;
      if (me == 0) {
        ferry_mpi_request r;
        st = blocking ? ferry_mpi_send(b, 0, n, 1, 30 + round, MPI_COMM_WORLD)
                      : ferry_mpi_isend(b, 0, n, 1, 30 + round, MPI_COMM_WORLD, &r);
        if (!blocking && st == FERRY_OK) st = ferry_mpi_wait(r, MPI_STATUS_IGNORE);
      } else {
        ferry_mpi_request r;
        st = blocking ? ferry_mpi_recv(b, 0, n, 0, 30 + round, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
                      : ferry_mpi_irecv(b, 0, n, 0, 30 + round, MPI_COMM_WORLD, &r);
        if (!blocking && st == FERRY_OK) st = ferry_mpi_wait(r, MPI_STATUS_IGNORE);
      }
      const char *call = me == 0 ? (blocking ? "ferry_mpi_send" : "ferry_mpi_isend + wait")
                                 : (blocking ? "ferry_mpi_recv" : "ferry_mpi_irecv + wait");
      bool fails_here = me == (sender_fails ? 0 : 1);
      if (fails_here || (me == 1 && sender_fails)) {
        CHECK_MSG(st == FERRY_ERROR_BACKEND, "rank %d: %s with the %s's device failing gave %s, expected %s", me, call,
                  sender_fails ? "sender" : "receiver", ferry_status_name(st), ferry_status_name(FERRY_ERROR_BACKEND));
        if (me == 1 && sender_fails)
          CHECK_MSG(strstr(ferry_last_error(), "could not read its buffer") != NULL,
                    "rank 1: the sentence does not say the sender's read failed: %s", ferry_last_error());
      } else {
        CHECK_MSG(st == FERRY_OK, "rank %d: %s with the other rank's device failing gave %s: %s", me, call,
                  ferry_status_name(st), ferry_last_error());
      }
      inject(NULL, 0, 0, 0);
      /* The next message, whole. */
      if (me == 0)
        CHECK_OK(ferry_mpi_send(b, 0, n, 1, 40 + round, MPI_COMM_WORLD));
      else {
        CHECK_OK(ferry_mpi_recv(b, 0, n, 0, 40 + round, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        expect(b, 0, n, 40 + (uint32_t)round, "a message after a device failure");
      }
      CHECK_OK(ferry_free(b));
    }
  }
  if (handle) dlclose(handle);
}

/* ---- every rank ------------------------------------------------------------------------------- */

static void errors(ferry_device *dev) {
  harness_context = "errors";
  ferry_buffer b = sentinel_buffer(dev, 64);
  ferry_mpi_request r = {0};
  CHECK_STATUS(ferry_mpi_send(b, 0, 8, nranks, 0, MPI_COMM_WORLD), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("not a rank");
  CHECK_STATUS(ferry_mpi_send(b, 0, 8, -5, 0, MPI_COMM_WORLD), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_mpi_send(b, 0, 8, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_mpi_send(b, 0, 8, 0, -1, MPI_COMM_WORLD), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("tag -1");
  CHECK_STATUS(ferry_mpi_send(b, 0, 8, 0, MPI_ANY_TAG, MPI_COMM_WORLD), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_mpi_recv(b, 0, 8, nranks + 3, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_mpi_send(b, 60, 8, 0, 0, MPI_COMM_WORLD), FERRY_ERROR_OUT_OF_RANGE);
  CHECK_STATUS(ferry_mpi_recv(b, SIZE_MAX, 8, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), FERRY_ERROR_OVERFLOW);
  CHECK_STATUS(ferry_mpi_send(b, 0, 8, 0, 0, MPI_COMM_NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_mpi_isend(b, 0, 8, 0, 0, MPI_COMM_WORLD, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_mpi_bcast(b, 0, 8, nranks, MPI_COMM_WORLD), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("root");
  CHECK_STATUS(ferry_mpi_wait((ferry_mpi_request){0}, MPI_STATUS_IGNORE), FERRY_ERROR_STALE_HANDLE);
  CHECK_STATUS(ferry_mpi_wait((ferry_mpi_request){0xdead00000003ull}, MPI_STATUS_IGNORE), FERRY_ERROR_STALE_HANDLE);
  int done = 7;
  CHECK_STATUS(ferry_mpi_test(r, &done, MPI_STATUS_IGNORE), FERRY_ERROR_STALE_HANDLE);
  CHECK_STATUS(ferry_mpi_test(r, NULL, MPI_STATUS_IGNORE), FERRY_ERROR_INVALID_ARGUMENT);
  /* To and from MPI_PROC_NULL: nothing moves, and it completes. */
  CHECK_OK(ferry_mpi_send(b, 0, 8, MPI_PROC_NULL, 0, MPI_COMM_WORLD));
  MPI_Status st;
  CHECK_OK(ferry_mpi_recv(b, 0, 8, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
  CHECK(st.MPI_SOURCE == MPI_PROC_NULL);
  CHECK_OK(ferry_mpi_irecv(b, 0, 8, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &r));
  CHECK_OK(ferry_mpi_wait(r, MPI_STATUS_IGNORE));
  expect(b, 0, 0, 0, "errors and MPI_PROC_NULL wrote nothing");
  /* Stale buffers, before anything is sent. */
  CHECK_OK(ferry_free(b));
  CHECK_STATUS(ferry_mpi_send(b, 0, 8, 0, 0, MPI_COMM_WORLD), FERRY_ERROR_STALE_BUFFER);
  CHECK_STATUS(ferry_mpi_irecv(b, 0, 8, 0, 0, MPI_COMM_WORLD, &r), FERRY_ERROR_STALE_BUFFER);
  CHECK_STATUS(ferry_mpi_bcast(b, 0, 8, 0, MPI_COMM_WORLD), FERRY_ERROR_STALE_BUFFER);
  /* Allreduce: kinds and lengths checked on each rank before anything moves. */
  ferry_buffer f = FERRY_NULL_BUFFER, g = FERRY_NULL_BUFFER, h = FERRY_NULL_BUFFER, c = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, 16, FERRY_FLOAT32, &f));
  CHECK_OK(ferry_alloc(dev, 16, FERRY_INT32, &g));
  CHECK_OK(ferry_alloc(dev, 17, FERRY_FLOAT32, &h));
  CHECK_OK(ferry_alloc(dev, 16, FERRY_FLOAT16, &c));
  CHECK_STATUS(ferry_mpi_allreduce(f, g, MPI_SUM, MPI_COMM_WORLD), FERRY_ERROR_KIND_MISMATCH);
  CHECK_STATUS(ferry_mpi_allreduce(f, h, MPI_SUM, MPI_COMM_WORLD), FERRY_ERROR_SIZE_MISMATCH);
  CHECK_STATUS(ferry_mpi_allreduce(c, c, MPI_SUM, MPI_COMM_WORLD), FERRY_ERROR_UNSUPPORTED);
  CHECK_ERROR_HAS("float16");
  CHECK_STATUS(ferry_mpi_allreduce(f, f, MPI_OP_NULL, MPI_COMM_WORLD), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_mpi_local_device(MPI_COMM_WORLD, false, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_OK(ferry_free(f));
  CHECK_OK(ferry_free(g));
  CHECK_OK(ferry_free(h));
  CHECK_OK(ferry_free(c));
}

static void broadcast(ferry_device *dev) {
  harness_context = "bcast";
  const size_t bsizes[] = {0, 3, INLINE + 7, 2 * PIECE + 1};
  for (int root = 0; root < nranks; root++)
    for (size_t s = 0; s < sizeof bsizes / sizeof bsizes[0]; s++) {
      size_t n = bsizes[s];
      uint32_t seed = (uint32_t)(root * 10 + (int)s);
      ferry_buffer b = me == root ? pattern_buffer(dev, n + 2, seed) : sentinel_buffer(dev, n + 2);
      if (me == root) {
        /* The root sends from offset 1: its pattern there starts at byte 1. */
        unsigned char *p = malloc(n + 2);
        memset(p, 0xEE, n + 2);
        fill_pattern(p + 1, n, seed);
        CHECK_OK(ferry_write(b, 0, p, n + 2));
        free(p);
      }
      CHECK_OK(ferry_mpi_bcast(b, 1, n, root, MPI_COMM_WORLD));
      char what[96];
      snprintf(what, sizeof what, "bcast of %zu bytes from rank %d onto %s", n, root, backend_of(dev));
      expect(b, 1, n, seed, what);
      CHECK_OK(ferry_free(b));
    }
}

static void allreduce(ferry_device *dev) {
  harness_context = "allreduce";
  const size_t counts[] = {1, 1000, (PIECE / 4) * 2 + 3};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    size_t n = counts[c];
    int32_t *ints = malloc(n * sizeof *ints), *isum = malloc(n * sizeof *isum);
    double *dbl = malloc(n * sizeof *dbl), *dsum = malloc(n * sizeof *dsum);
    float *flt = malloc(n * sizeof *flt), *fmx = malloc(n * sizeof *fmx);
    for (size_t i = 0; i < n; i++) {
      ints[i] = (int32_t)(i * 7 + (size_t)me * 1000003u) - 5000;
      dbl[i] = (double)i * 0.25 + me / 3.0;
      flt[i] = (float)((i * 13 + (size_t)me * 5) % 97);
    }
    ferry_buffer bi, bo, bd, bf;
    CHECK_OK(ferry_alloc(dev, n, FERRY_INT32, &bi));
    CHECK_OK(ferry_alloc(dev, n, FERRY_INT32, &bo));
    CHECK_OK(ferry_alloc(dev, n, FERRY_FLOAT64, &bd));
    CHECK_OK(ferry_alloc(dev, n, FERRY_FLOAT32, &bf));
    CHECK_OK(ferry_host_to_device(ferry_array_of(ints, n, FERRY_INT32), bi));
    CHECK_OK(ferry_host_to_device(ferry_array_of(dbl, n, FERRY_FLOAT64), bd));
    CHECK_OK(ferry_host_to_device(ferry_array_of(flt, n, FERRY_FLOAT32), bf));
    CHECK_OK(ferry_mpi_allreduce(bi, bo, MPI_SUM, MPI_COMM_WORLD));
    CHECK_OK(ferry_mpi_allreduce(bd, bd, MPI_SUM, MPI_COMM_WORLD)); /* in place */
    CHECK_OK(ferry_mpi_allreduce(bf, bf, MPI_MAX, MPI_COMM_WORLD));
    CHECK_OK(ferry_device_to_host(bo, ferry_array_of(isum, n, FERRY_INT32)));
    CHECK_OK(ferry_device_to_host(bd, ferry_array_of(dsum, n, FERRY_FLOAT64)));
    CHECK_OK(ferry_device_to_host(bf, ferry_array_of(fmx, n, FERRY_FLOAT32)));
    size_t bad_i = SIZE_MAX, bad_d = SIZE_MAX, bad_f = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
      int64_t want = 0;
      double wd = 0;
      float wf = 0;
      for (int r = 0; r < nranks; r++) {
        want += (int32_t)(i * 7 + (size_t)r * 1000003u) - 5000;
        wd += (double)i * 0.25 + r / 3.0;
        float v = (float)((i * 13 + (size_t)r * 5) % 97);
        wf = r == 0 || v > wf ? v : wf;
      }
      if (isum[i] != (int32_t)want && bad_i == SIZE_MAX) bad_i = i;
      if (fabs(dsum[i] - wd) > 1e-9 * fmax(1.0, fabs(wd)) && bad_d == SIZE_MAX) bad_d = i;
      if (fmx[i] != wf && bad_f == SIZE_MAX) bad_f = i;
    }
    CHECK_MSG(bad_i == SIZE_MAX, "rank %d: int32 sum of %zu on %s: element %zu wrong", me, n, backend_of(dev), bad_i);
    CHECK_MSG(bad_d == SIZE_MAX, "rank %d: float64 sum in place of %zu on %s: element %zu wrong", me, n,
              backend_of(dev), bad_d);
    CHECK_MSG(bad_f == SIZE_MAX, "rank %d: float32 max of %zu on %s: element %zu wrong", me, n, backend_of(dev), bad_f);
    CHECK_OK(ferry_free(bi));
    CHECK_OK(ferry_free(bo));
    CHECK_OK(ferry_free(bd));
    CHECK_OK(ferry_free(bf));
    free(ints), free(isum), free(dbl), free(dsum), free(flt), free(fmx);
  }
}

/* A ring: each rank sends to the next and receives from the one before, on its own device. */
static void ring(ferry_device *dev) {
  harness_context = "ring";
  int next = (me + 1) % nranks, prev = (me + nranks - 1) % nranks;
  for (size_t s = 0; s < NSIZES; s++) {
    size_t n = sizes[s];
    ferry_buffer out = pattern_buffer(dev, n, (uint32_t)(me * 100 + (int)s)), in = sentinel_buffer(dev, n);
    ferry_mpi_request rs, rr;
    CHECK_OK(ferry_mpi_irecv(in, 0, n, prev, 11, MPI_COMM_WORLD, &rr));
    CHECK_OK(ferry_mpi_isend(out, 0, n, next, 11, MPI_COMM_WORLD, &rs));
    CHECK_OK(ferry_mpi_wait(rs, MPI_STATUS_IGNORE));
    CHECK_OK(ferry_mpi_wait(rr, MPI_STATUS_IGNORE));
    char what[96];
    snprintf(what, sizeof what, "ring, %zu bytes onto %s from rank %d", n, backend_of(dev), prev);
    expect(in, 0, n, (uint32_t)(prev * 100 + (int)s), what);
    CHECK_OK(ferry_free(out));
    CHECK_OK(ferry_free(in));
  }
}

/* ---- modes of their own ctests ------------------------------------------------------------- */

static ferry_device *device_of_backend(const char *backend) {
  for (size_t i = 0; i < ferry_device_count(); i++)
    if (strcmp(backend_of(device_at(i)), backend) == 0) return device_at(i);
  return NULL;
}

/* Two ranks: 1 GiB and 5 bytes, from checked (through host memory, in pieces of
 * 4 MiB) to checked and to native, and from native (handed to MPI: two pieces of
 * 1 GiB and 5 bytes) to checked. */
static void large(void) {
  harness_context = "messages of 1 GiB";
  size_t n = ((size_t)1 << 30) + 5;
  ferry_device *checked = device_of_backend("checked"), *native = device_of_backend("native");
  CHECK_MSG(checked && native, "the large messages need the native and checked devices");
  if (!checked || !native) return;
  ferry_device *from[] = {checked, checked, native}, *to[] = {checked, native, checked};
  for (int leg = 0; leg < 3; leg++) {
    uint32_t seed = 40 + (uint32_t)leg;
    if (me == 0) {
      ferry_buffer b = pattern_buffer(from[leg], n, seed);
      CHECK_OK(ferry_mpi_send(b, 0, n, 1, 12, MPI_COMM_WORLD));
      CHECK_OK(ferry_free(b));
    } else if (me == 1) {
      ferry_buffer b = sentinel_buffer(to[leg], n);
      MPI_Status status;
      CHECK_OK(ferry_mpi_recv(b, 0, n, 0, 12, MPI_COMM_WORLD, &status));
      MPI_Count count = -1;
      MPI_Get_elements_x(&status, MPI_BYTE, &count);
      CHECK_MSG(count == (MPI_Count)n, "rank 1: the status says %lld bytes, expected %zu", (long long)count, n);
      char what[96];
      snprintf(what, sizeof what, "%s -> %s, %zu bytes", backend_of(from[leg]), backend_of(to[leg]), n);
      expect(b, 0, n, seed, what);
      CHECK_OK(ferry_free(b));
    }
  }
}

/* Rank 1 receives part of a message of 256 MiB through host memory, then is
 * killed; rank 0 is inside ferry_mpi_send then. Ending the job is mpirun's
 * part; ferry's is not to hang where MPI returns. */
static void killed(void) {
  size_t n = (size_t)256 << 20;
  ferry_device *checked = device_of_backend("checked");
  if (!checked) MPI_Abort(MPI_COMM_WORLD, 1);
  if (me == 0) {
    ferry_buffer b = pattern_buffer(checked, n, 3);
    MPI_Barrier(MPI_COMM_WORLD);
    ferry_status st = ferry_mpi_send(b, 0, n, 1, 13, MPI_COMM_WORLD);
    printf("rank 0: ferry_mpi_send returned %s after rank 1 was killed\n", ferry_status_name(st));
    fflush(stdout);
  } else if (me == 1) {
    ferry_buffer b = sentinel_buffer(checked, n);
    MPI_Barrier(MPI_COMM_WORLD);
    ferry_mpi_request r;
    CHECK_OK(ferry_mpi_irecv(b, 0, n, 0, 13, MPI_COMM_WORLD, &r));
    int done = 0;
    for (int i = 0; i < 1000 && !done; i++)
      CHECK_OK(ferry_mpi_test(r, &done, MPI_STATUS_IGNORE));
    printf("rank 1: killing myself in the middle of a transfer\n");
    fflush(stdout);
    raise(SIGKILL);
  }
  MPI_Barrier(MPI_COMM_WORLD); /* never passes: rank 1 is gone */
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  const char *mode = argc > 1 ? argv[1] : "";
  bool gpu_only = strcmp(mode, "--gpu-only") == 0;
  CHECK_OK(ferry_init());
  if (strcmp(mode, "--kill") == 0) {
    killed();
    MPI_Finalize();
    return 1;
  }
  if (strcmp(mode, "--large") == 0) {
    large();
    int failures = harness_failures, total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    ferry_shutdown();
    int rc = harness_finish(me == 0 ? "mpi large, rank 0" : "mpi large, rank 1");
    MPI_Finalize();
    return total > 0 ? 1 : rc;
  }
  ferry_device *dev = NULL;
  CHECK_OK(ferry_mpi_local_device(MPI_COMM_WORLD, gpu_only, &dev));
  if (!dev) {
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  /* Each rank of the node takes the next device (with gpu_only: the next GPU), wrapping around. */
  ferry_device *gpus[64];
  size_t ngpus = 0;
  for (size_t i = 0; i < ferry_device_count() && ngpus < 64; i++) {
    ferry_device_info info;
    if (ferry_device_info_get(device_at(i), &info) == FERRY_OK && !info.is_cpu) gpus[ngpus++] = device_at(i);
  }
  ferry_device *want =
      gpu_only ? (ngpus ? gpus[(size_t)me % ngpus] : NULL) : device_at((size_t)me % ferry_device_count());
  CHECK_MSG(dev == want, "rank %d: ferry_mpi_local_device gave another device than the %d-th%s", me, me,
            gpu_only ? " GPU" : "");
  printf("rank %d of %d: device %s\n", me, nranks, backend_of(dev));
  fflush(stdout);
  errors(dev);
  MPI_Barrier(MPI_COMM_WORLD);
  if (nranks == 2) {
    every_pair();
    too_long(dev);
    freed_meanwhile(dev);
    two_pending(dev);
    sends_first(dev);
    device_failures(dev);
  }
  ring(dev);
  broadcast(dev);
  allreduce(dev);
  int failures = harness_failures, total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  ferry_shutdown();
  char name[32];
  snprintf(name, sizeof name, "mpi rank %d", me);
  int rc = harness_finish(name);
  MPI_Finalize();
  return total > 0 ? 1 : rc;
}
