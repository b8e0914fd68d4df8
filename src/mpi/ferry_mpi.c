/*
 * libferry_mpi: ferry buffers across MPI ranks (include/ferry_mpi.h).
 *
 * A ferry message is one MPI message when it is small: a header (what it is and
 * how long) with the bytes after it. A larger one is the header alone, then the
 * bytes in pieces of at most PIECE, each its own MPI message with the same
 * source, tag and communicator, which MPI keeps in order, and a trailer that
 * says whether the sender could read all of them from its device (a receiver
 * must not take bytes for good that a failed read left unwritten). The receiver learns
 * the length from the header before it writes anything, so a message longer
 * than the receive range is refused with both sizes, its pieces taken off the
 * channel so that the sender does not wait forever.
 *
 * Where the bytes go: a buffer whose memory the CPU addresses directly (native,
 * checked, zero-copy and registered buffers) is given to MPI as it is. Any other
 * is read or written through host memory, piece by piece, the device's transfer
 * of one piece overlapping MPI's of the others: a blocking call through a few
 * slots it reuses; a non-blocking send reads each piece of its range into its
 * staging and posts it at once, a non-blocking receive writes each piece to the
 * device as soon as a ferry call finds it arrived (any call that waits, for
 * any request: progress, below). Staging memory is lent to ferry's registry of
 * pinned memory, so the device's part is one DMA. Nothing waits for a device
 * without moving MPI on meanwhile: with MPI's shared-memory transport copying
 * through a buffer of its own, both ranks' calls move the bytes, and a rank
 * blocked on its DMA held its peer's transfer back too.
 */
#include "ferry_mpi.h"

#include "../core/companion.h"

#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h> /* Open MPI's extensions: MPIX_Query_cuda_support */
#endif
#endif

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PIECE        ((size_t)4 << 20)  /* bytes of one MPI message of a large ferry message staged by its sender */
#define MIN_PIECE    ((size_t)64 << 10) /* the least FERRY_MPI_PIECE (and a header's piece) may be */
#define WHOLE_PIECE  ((size_t)1 << 30)  /* the same when the sender has every byte in host memory at once */
#define INLINE_MAX   ((size_t)32 << 10) /* messages up to this many bytes travel inside their header */
#define DEPTH        3                  /* pieces in flight in a blocking transfer through host memory */
#define HEADER_MAGIC 0x494d5046u        /* "FPMI" */

typedef struct header {
  uint32_t magic, version;
  uint64_t total; /* bytes of the message */
  uint64_t piece; /* bytes of each piece after the header; 0: the bytes follow the header */
} header;

/* ---- errors and checks ------------------------------------------------------------- */

static ferry_status mpi_failed(const char *fn, const char *call, int rc) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "error %d", rc);
  return ferry__companion_fail(FERRY_ERROR_BACKEND, "%s: %s failed: %s (MPI error %d)", fn, call, text, rc);
}

#define MPI_CHECK(fn, call, expr)                                                                                      \
  do {                                                                                                                 \
    int rc_ = (expr);                                                                                                  \
    if (rc_ != MPI_SUCCESS) return mpi_failed(fn, call, rc_);                                                          \
  } while (0)

static ferry_status check_comm(const char *fn, MPI_Comm comm, int *out_size) {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (!up || down)
    return ferry__companion_fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: MPI is %s", fn,
                                 down ? "finalised already" : "not initialised (call MPI_Init first)");
  if (comm == MPI_COMM_NULL)
    return ferry__companion_fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: comm is MPI_COMM_NULL", fn);
  int inter = 0;
  MPI_CHECK(fn, "MPI_Comm_test_inter", MPI_Comm_test_inter(comm, &inter));
  if (inter)
    return ferry__companion_fail(FERRY_ERROR_INVALID_ARGUMENT,
                                 "%s: comm is an inter-communicator, which ferry does not take", fn);
  MPI_CHECK(fn, "MPI_Comm_size", MPI_Comm_size(comm, out_size));
  return FERRY_OK;
}

static ferry_status check_rank(const char *fn, const char *what, int rank, int size, bool any_allowed) {
  if (rank == MPI_PROC_NULL || (any_allowed && rank == MPI_ANY_SOURCE) || (rank >= 0 && rank < size)) return FERRY_OK;
  return ferry__companion_fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: %s %d is not a rank of the communicator (0 to %d%s)",
                               fn, what, rank, size - 1,
                               any_allowed ? ", MPI_ANY_SOURCE or MPI_PROC_NULL" : " or MPI_PROC_NULL");
}

static ferry_status check_tag(const char *fn, int tag, bool any_allowed) {
  int *ub = NULL, found = 0;
  MPI_CHECK(fn, "MPI_Comm_get_attr", MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found));
  int max = found && ub ? *ub : 32767;
  if ((any_allowed && tag == MPI_ANY_TAG) || (tag >= 0 && tag <= max)) return FERRY_OK;
  return ferry__companion_fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: tag %d is outside 0 to %d (MPI_TAG_UB)%s", fn, tag,
                               max, any_allowed ? " and is not MPI_ANY_TAG" : "");
}

/* Holds `buf` and checks [offset, offset + bytes) against it. */
static ferry_status hold_range(const char *fn, ferry_buffer buf, size_t offset, size_t bytes,
                               ferry_companion_hold *out) {
  ferry_status st = ferry__companion_hold(buf, fn, out);
  if (st != FERRY_OK) return st;
  if (offset > SIZE_MAX - bytes)
    st = ferry__companion_fail(FERRY_ERROR_OVERFLOW, "%s: offset %zu + %zu bytes overflows size_t", fn, offset, bytes);
  else if (offset + bytes > out->bytes)
    st = ferry__companion_fail(FERRY_ERROR_OUT_OF_RANGE, "%s: bytes %zu..%zu are past the end of a buffer of %zu bytes",
                               fn, offset, offset + bytes, out->bytes);
  if (st != FERRY_OK) ferry__companion_release(out);
  return st;
}

/* FERRY_DEBUG=mpi: the path a transfer takes; `path` NULL: the one its hold says. */
static void debug_path(const char *fn, const ferry_companion_hold *h, size_t bytes, const char *path) {
  if (!ferry__companion_debug("mpi")) return;
  ferry_device_info info;
  const char *backend = ferry_device_info_get(h->device, &info) == FERRY_OK ? info.backend : "?";
  if (!path) path = h->host ? "its memory, handed to MPI" : "through host memory, in pieces";
  fprintf(stderr, "ferry mpi: %s of %zu bytes (%s buffer): %s\n", fn, bytes, backend, path);
}

/* Moves [offset, offset + n) of the held buffer from or into host memory at `at`. */
static ferry_status device_part(const char *fn, const ferry_companion_hold *h, bool to_device, size_t offset, void *at,
                                size_t n) {
  if (n == 0) return FERRY_OK;
  if (h->host) {
    if (to_device)
      memcpy((char *)h->host + offset, at, n);
    else
      memcpy(at, (char *)h->host + offset, n);
    return FERRY_OK;
  }
  return ferry__companion_transfer(h, fn, to_device, offset, at, n);
}

/* A message whose bytes the sender has in host memory all at once goes in pieces
 * of WHOLE_PIECE (below MPI's int count): MPI moves one large message faster than
 * many of PIECE (0.9x of a plain MPI message at 64 MiB here, against 0.5x in
 * pieces of 4 MiB, each with its own rendezvous). A sender that reads its device
 * piece by piece uses PIECE. The header says which. */
static size_t pieces_of(size_t total, size_t piece) { return (total + piece - 1) / piece; }

/* The piece of a message its sender stages: FERRY_MPI_PIECE, else PIECE. The
 * header carries it, so a receiver follows whatever its sender chose. */
static size_t staged_piece(void) {
  uint64_t v = 0;
  return ferry__companion_option("FERRY_MPI_PIECE", &v) ? (size_t)v : PIECE;
}

static size_t piece_len(size_t total, size_t piece, size_t k) {
  return total - k * piece < piece ? total - k * piece : piece;
}

/* ---- requests, streams and matching ----------------------------------------------------- *
 *
 * A ferry message of several MPI messages must reach one ferry receive whole.
 * MPI matches each MPI message on its own, so two receives that could both
 * match (same communicator, overlapping source and tag) would split a message
 * if both had a receive for its header posted: the second would take the
 * first's pieces. So no header receive is posted ahead: a receive's header is
 * matched by a probe, under `lock`, in the order the receives were made (a
 * receive is not given a message that an earlier, still unmatched one could
 * take, as MPI's own order says), and in the same critical section the
 * message's pieces are either all posted at once or their (communicator,
 * source, tag) is marked as a stream that nobody else probes until its owner
 * has received the pieces one by one. Senders mirror this: a message's MPI
 * messages are posted at once under the lock, or its (communicator,
 * destination, tag) is a stream that other sends to it wait for. Matching
 * happens whenever a ferry call runs (a receive, a wait, a test); nothing is
 * ever blocked on inside MPI while the lock is held, except a refused message's
 * pieces being taken off the channel (the sender sends them regardless). */

typedef enum req_state {
  REQ_SEND,      /* a send: its MPI messages posted */
  REQ_NOTHING,   /* to or from MPI_PROC_NULL */
  REQ_UNMATCHED, /* a receive whose header has not been matched yet */
  REQ_INLINE,    /* matched: the bytes came inside the header */
  REQ_PIECES,    /* matched: every piece and the trailer posted */
  REQ_STREAM,    /* matched: the owner receives the pieces itself, through host memory */
  REQ_FAILED,    /* matched and refused, or failed: `why` says so */
} req_state;

#define HEAD_ROOM (sizeof(header) + INLINE_MAX) /* the largest header (bytes inside) */

typedef struct request {
  const char *fn; /* the call that made it */
  req_state state;
  bool stream; /* a receive through host memory piece by piece (blocking receives) */
  ferry_companion_hold hold;
  size_t offset, bytes; /* the range */
  MPI_Comm comm;
  int peer, tag;     /* as given; once matched, the sender's */
  MPI_Request *reqs; /* MPI's requests of the message */
  size_t nreqs;
  char *head;         /* a send's header (+ inline bytes, + the trailer word); a receive's HEAD_ROOM + trailer */
  char *staging;      /* the whole range through host memory, for a device without host access */
  void *mapped;       /* the range mapped without a copy (ferry__companion_map), until the request ends */
  bool device_memory; /* `mapped` is device memory for a CUDA-aware MPI: nothing to unmap */
  header hd;          /* a receive's, once matched */
  size_t landed;      /* a receive through staging: the pieces written to the device so far (or started) */
  int land_rc;        /* MPI's failure while landing, MPI_SUCCESS until then */
  bool landing;       /* in the `landing` list: any thread's progress starts its pieces' writes */
  struct request *land_next;
  struct mover *mv;     /* the device's part on a queue of its own (movers, below), or NULL */
  bool mv_failed;       /* its work failed: it is not kept */
  bool mv_done;         /* a receive's writes have all completed */
  ferry_status result;  /* REQ_FAILED's status, or the first failure of a request that goes on */
  char why[600];        /* REQ_FAILED's sentence, set on whichever thread matched it */
  uint64_t missed;      /* the last matching pass in which it found nothing */
  struct request *next; /* in the list of unmatched receives, oldest first */
} request;

typedef struct stream {
  MPI_Comm comm;
  int rank, tag;
  bool send;
} stream;

typedef struct entry {
  uint32_t gen;
  bool busy; /* a call works on it */
  request *r;
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stream_ended = PTHREAD_COND_INITIALIZER;
static entry *table;
static uint32_t table_count, table_cap;
static request *unmatched; /* oldest first */
static request *landing;   /* receives through staging with a mover and pieces still to arrive */
static stream *streams;
static size_t stream_count, stream_cap;
static uint64_t pass;

/* With the lock held: q out of the landing list, if it is there. */
static void unland(request *q) {
  if (!q->landing) return;
  request **at = &landing;
  while (*at != q)
    at = &(*at)->land_next;
  *at = q->land_next;
  q->landing = false;
}

static void refuse(request *q, ferry_status st, const char *fmt, ...) FERRY_COMPANION_PRINTF(3, 4);
static void refuse(request *q, ferry_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(q->why, sizeof q->why, fmt, ap);
  va_end(ap);
  q->result = st;
  q->state = REQ_FAILED;
}

static void refuse_mpi(request *q, const char *call, int rc) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "error %d", rc);
  refuse(q, FERRY_ERROR_BACKEND, "%s: %s failed: %s (MPI error %d)", q->fn, call, text, rc);
}

/* Keeps the first failure of a request that goes on (its sentence is this
 * thread's now), for the wait or test that ends it. */
static void keep_failure(request *q, ferry_status st) {
  if (q->result != FERRY_OK) return;
  q->result = st;
  snprintf(q->why, sizeof q->why, "%s", ferry_last_error());
}

static request *request_new(const char *fn, const ferry_companion_hold *h, size_t offset, size_t bytes, MPI_Comm comm,
                            int peer, int tag) {
  request *q = calloc(1, sizeof *q);
  if (!q) {
    ferry__companion_fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for a request", fn);
    return NULL;
  }
  *q = (request){.fn = fn,
                 .hold = *h,
                 .offset = offset,
                 .bytes = bytes,
                 .comm = comm,
                 .peer = peer,
                 .tag = tag,
                 .land_rc = MPI_SUCCESS};
  return q;
}

/* Staging memory is kept for the next transfers: freeing it and mapping it
 * again for every message cost page faults and, on unmapping, a TLB shootdown
 * across the cores (11 ms for a fresh 4 MiB block against 0.2 ms for a warm one
 * in a virtual machine here). Each block is also lent to ferry's registry of
 * pinned memory, so that a device's driver registers it (cuMemHostRegister) at
 * its first transfer and every later one is a DMA straight into or out of it,
 * not a copy through the engine's own pinned blocks; a lent block stays pinned
 * while it is kept, which is what the pool's limits bound. At most POOL_BLOCKS
 * blocks, pool_keep bytes in all; each block's size and the session it was
 * lent in are in the page before it. */
#define POOL_BLOCKS 16
#define BLOCK_HEAD  ((size_t)4096) /* a page: the registry takes page-aligned memory */

typedef struct block_info {
  size_t size;
  uint64_t session; /* the ferry session it is lent in; 0: not lent */
} block_info;

/* pool_lock, not lock: a receive matched under lock takes its staging. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static char *pool[POOL_BLOCKS];
static int pooled;
static size_t pooled_bytes;

static block_info *info_of(char *p) { return (block_info *)(void *)(p - BLOCK_HEAD); }
static size_t block_size(char *p) { return info_of(p)->size; }

/* Bytes the pool keeps: a sixteenth of the machine's memory, from 256 MiB to
 * 2 GiB (a window of four 256 MiB messages each way, as `ferry-mpi-bench bibw`
 * sends them, without lending and registering blocks again). */
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static size_t pool_keep;

static void pool_init(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  uint64_t limit = ram / 16, low = (uint64_t)256 << 20, high = (uint64_t)2 << 30;
  pool_keep = (size_t)(limit < low ? low : limit > high ? high : limit);
}

/* Lends p to ferry's pinned registry for this session, once. A block that
 * cannot be lent is staged by ferry's engine like any host memory. */
static void lend(char *p) {
  block_info *b = info_of(p);
  if (b->session == ferry__companion_session()) return;
  uint64_t session = 0;
  b->session = ferry__companion_lend(p, b->size, &session) == FERRY_OK ? session : 0;
}

static void block_free(char *p) {
  block_info *b = info_of(p);
  if (b->session) ferry__companion_take_back(p, b->session);
  free(b);
}

/* At least n bytes: the smallest kept block that fits and is at most twice n,
 * else a new one; lent. NULL when there is no memory. */
static char *block_get(size_t n) {
  if (n == 0) n = 1;
  pthread_mutex_lock(&pool_lock);
  int best = -1;
  for (int i = 0; i < pooled; i++) {
    size_t size = block_size(pool[i]);
    if (size >= n && size / 2 <= n && (best < 0 || size < block_size(pool[best]))) best = i;
  }
  char *p = NULL;
  if (best >= 0) {
    p = pool[best];
    pooled_bytes -= block_size(p);
    memmove(pool + best, pool + best + 1, (size_t)(--pooled - best) * sizeof *pool);
  }
  pthread_mutex_unlock(&pool_lock);
  if (!p) {
    /* Whole pages: a device pins whole pages of what is lent, and a last page
     * shared with the next heap block would be pinned under it. */
    void *base = NULL;
    if (n > SIZE_MAX - 2 * BLOCK_HEAD) return NULL;
    size_t whole = (n + BLOCK_HEAD - 1) & ~(BLOCK_HEAD - 1);
    if (posix_memalign(&base, BLOCK_HEAD, BLOCK_HEAD + whole) != 0) return NULL;
    p = (char *)base + BLOCK_HEAD;
    *info_of(p) = (block_info){.size = whole};
  }
  lend(p);
  return p;
}

/* Keeps a block of block_get, in place of the oldest kept ones if there is no
 * room (the sizes in use change with the program's messages), or frees it. */
static void block_put(char *p) {
  if (!p) return;
  pthread_once(&pool_once, pool_init);
  size_t size = block_size(p), keep = pool_keep;
  char *gone[POOL_BLOCKS];
  int ngone = 0;
  pthread_mutex_lock(&pool_lock);
  if (size <= keep) {
    while (pooled == POOL_BLOCKS || size > keep - pooled_bytes) {
      gone[ngone++] = pool[0];
      pooled_bytes -= block_size(pool[0]);
      memmove(pool, pool + 1, (size_t)--pooled * sizeof *pool);
    }
    pool[pooled++] = p;
    pooled_bytes += size;
    p = NULL;
  }
  pthread_mutex_unlock(&pool_lock);
  for (int i = 0; i < ngone; i++)
    block_free(gone[i]);
  if (p) block_free(p);
}

static char *staging_get(request *q, size_t n) { return q->staging = block_get(n); }

/* ---- movers: the device's part on a queue of its own ---------------------------------- *
 *
 * A transfer through host memory moves each piece between the device and its
 * staging on a ferry queue of its own, a mover, so that the device's DMA of one
 * piece runs while MPI moves others and the calling thread drives MPI instead of
 * waiting for the device: a non-blocking receive writes each piece as it
 * arrives and waits only at the end; a send keeps the device's reads ahead of
 * MPI's sends; a blocking receive writes a piece while the next ones arrive. A
 * request takes a mover for its lifetime (its order and its failures are its
 * own); movers are kept per device for the next requests, as making a queue
 * costs a driver object (a CUDA stream). A mover whose work failed is
 * destroyed, not kept. Where no mover can be made, the device's part is
 * synchronous, as before. */
#define MOVER_EVENTS 4 /* pieces a mover may have in flight, each with its event */
#define MOVERS_KEPT  8

typedef struct mover {
  ferry_device *dev;
  uint64_t session; /* the ferry session its handles belong to */
  ferry_queue queue;
  ferry_event ev[MOVER_EVENTS];
} mover;

static pthread_mutex_t movers_lock = PTHREAD_MUTEX_INITIALIZER;
static mover *movers[MOVERS_KEPT];
static int movers_kept;

static void mover_free(mover *m) {
  if (!m) return;
  if (m->session == ferry__companion_session()) { /* else ferry_shutdown ended them */
    for (int i = 0; i < MOVER_EVENTS; i++)
      if (m->ev[i].id) ferry_event_destroy(m->ev[i]);
    if (m->queue.id) ferry_queue_destroy(m->queue);
  }
  free(m);
}

/* A mover of the held buffer's device, kept or new; NULL where the device's
 * queues have no lanes of their own (a queue's transfers would run on a thread
 * that competes with MPI's for the processors, for nothing) or none can be made
 * (the sentence is not kept): the caller moves synchronously then. */
static mover *mover_get(const ferry_companion_hold *h) {
  if (!h->lanes) return NULL;
  ferry_device *dev = h->device;
  uint64_t session = ferry__companion_session();
  mover *m = NULL, *stale[MOVERS_KEPT];
  int nstale = 0;
  pthread_mutex_lock(&movers_lock);
  for (int i = movers_kept - 1; i >= 0; i--) {
    if (movers[i]->session != session) {
      stale[nstale++] = movers[i];
    } else if (!m && movers[i]->dev == dev) {
      m = movers[i];
    } else {
      continue;
    }
    movers[i] = movers[--movers_kept];
  }
  pthread_mutex_unlock(&movers_lock);
  for (int i = 0; i < nstale; i++)
    mover_free(stale[i]);
  if (m) return m;
  if (!(m = calloc(1, sizeof *m))) return NULL;
  m->dev = dev;
  m->session = session;
  ferry_status st = ferry_queue_create(dev, &m->queue);
  for (int i = 0; i < MOVER_EVENTS && st == FERRY_OK; i++)
    st = ferry_event_create(&m->ev[i]);
  if (st != FERRY_OK) {
    mover_free(m);
    return NULL;
  }
  return m;
}

/* Gives a mover back once its queue is idle: kept when its work succeeded
 * (`failed` false, and there is room), else destroyed. */
static void mover_put(mover *m, bool failed) {
  if (!m) return;
  bool keep = ferry_queue_synchronize(m->queue) == FERRY_OK && !failed && m->session == ferry__companion_session();
  if (keep) {
    pthread_mutex_lock(&movers_lock);
    if (movers_kept < MOVERS_KEPT) {
      movers[movers_kept++] = m;
      m = NULL;
    }
    pthread_mutex_unlock(&movers_lock);
  }
  mover_free(m);
}

/* Ends q's use of its mover (after its queue is idle), kept unless its work failed. */
static void mover_end(request *q) {
  mover_put(q->mv, q->mv_failed);
  q->mv = NULL;
}

/* Starts the move of [offset, offset + n) of the held buffer to or from `at` on
 * the mover, the piece's completion recorded in event `e`. */
static ferry_status mover_start(mover *m, const char *fn, const ferry_companion_hold *h, bool to_device, size_t offset,
                                void *at, size_t n, int e) {
  ferry_status st = ferry__companion_transfer_async(h, fn, m->queue, to_device, offset, at, n);
  if (st == FERRY_OK && e >= 0) st = ferry_event_record(m->ev[e], m->queue);
  return st;
}

/* Does MPI move CUDA device memory itself? FERRY_MPI_CUDA_AWARE says, else
 * MPIX_Query_cuda_support where the MPI has it (asked at run time whatever
 * MPIX_CUDA_AWARE_SUPPORT said at build time: the library that runs may be
 * another build of the same MPI), else no. Asked once, after MPI_Init. */
static pthread_once_t cuda_aware_once = PTHREAD_ONCE_INIT;
static bool cuda_aware;

static void ask_cuda_aware(void) {
  uint64_t set = 0;
  if (ferry__companion_option("FERRY_MPI_CUDA_AWARE", &set)) {
    cuda_aware = set == 1;
    return;
  }
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  cuda_aware = MPIX_Query_cuda_support() == 1;
#endif
}

/* The range's device memory for MPI where MPI takes it (CUDA buffers under a
 * CUDA-aware MPI), in q->mapped (which then needs no unmap); NULL otherwise. */
static char *device_range(request *q, size_t n) {
  if (q->hold.host || n <= INLINE_MAX) return NULL;
  ferry_device_info info;
  if (ferry_device_info_get(q->hold.device, &info) != FERRY_OK || strcmp(info.backend, "cuda") != 0) return NULL;
  pthread_once(&cuda_aware_once, ask_cuda_aware);
  uintptr_t address = 0;
  if (!cuda_aware || ferry__companion_device_address(&q->hold, q->fn, q->offset, &address) != FERRY_OK) return NULL;
  debug_path(q->fn, &q->hold, n, "its device memory, handed to a CUDA-aware MPI");
  q->device_memory = true;
  return q->mapped = (void *)address;
}

/* A message in pieces of a buffer that the CPU cannot address at all times:
 * the range mapped without a copy where its device can (OpenCL on a CPU), in
 * q->mapped; NULL when the bytes must go through host memory. */
static char *map_range(request *q, size_t n, bool write) {
  if (q->hold.host || n <= INLINE_MAX) return NULL;
  char *device = device_range(q, n);
  if (device) return device;
  void *p = NULL;
  if (ferry__companion_map(&q->hold, q->fn, q->offset, n, write, &p) != FERRY_OK) return NULL;
  debug_path(q->fn, &q->hold, n, "mapped without a copy, handed to MPI");
  return q->mapped = p;
}

static ferry_status unmap_range(request *q) {
  if (!q->mapped) return FERRY_OK;
  void *p = q->mapped;
  q->mapped = NULL;
  if (q->device_memory) return FERRY_OK;
  return ferry__companion_unmap(&q->hold, q->fn, p);
}

static void request_free(request *q) {
  if (!q) return;
  pthread_mutex_lock(&lock); /* a receive given up before its pieces were all in */
  unland(q);
  pthread_mutex_unlock(&lock);
  unmap_range(q);
  ferry__companion_release(&q->hold);
  free(q->reqs);
  free(q->head);
  mover_end(q); /* its DMA into or out of the staging ends first */
  block_put(q->staging);
  free(q);
}

/* Gives the request a handle. */
static ferry_status publish(request *q, ferry_mpi_request *out) {
  pthread_mutex_lock(&lock);
  uint32_t i = 0;
  while (i < table_count && table[i].r)
    i++;
  if (i == table_count) {
    if (table_count == table_cap) {
      uint32_t cap = table_cap ? table_cap * 2 : 16;
      entry *more = realloc(table, cap * sizeof *more);
      if (!more) {
        pthread_mutex_unlock(&lock);
        return ferry__companion_fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for a request", q->fn);
      }
      table = more;
      table_cap = cap;
    }
    table[table_count++] = (entry){0};
  }
  table[i].gen++;
  table[i].busy = false;
  table[i].r = q;
  *out = (ferry_mpi_request){((uint64_t)table[i].gen << 32) | (i + 1)};
  pthread_mutex_unlock(&lock);
  return FERRY_OK;
}

/* The request of a handle, marked busy. */
static ferry_status take(const char *fn, ferry_mpi_request h, request **out) {
  uint32_t index = (uint32_t)h.id, gen = (uint32_t)(h.id >> 32);
  pthread_mutex_lock(&lock);
  entry *e = index >= 1 && index <= table_count ? &table[index - 1] : NULL;
  if (!e || !e->r || e->gen != gen) {
    pthread_mutex_unlock(&lock);
    return ferry__companion_fail(FERRY_ERROR_STALE_HANDLE,
                                 "%s: request 0x%016llx is stale: it completed, or was never handed out", fn,
                                 (unsigned long long)h.id);
  }
  if (e->busy) {
    pthread_mutex_unlock(&lock);
    return ferry__companion_fail(FERRY_ERROR_INVALID_ARGUMENT,
                                 "%s: request 0x%016llx is being waited for or tested by another thread", fn,
                                 (unsigned long long)h.id);
  }
  e->busy = true;
  *out = e->r;
  pthread_mutex_unlock(&lock);
  return FERRY_OK;
}

/* Ends the handle's use by this call: the request goes on, or (done) ends. */
static void give_back(ferry_mpi_request h, bool done) {
  uint32_t index = (uint32_t)h.id;
  pthread_mutex_lock(&lock);
  entry *e = &table[index - 1];
  request *q = e->r;
  e->busy = false;
  if (done) e->r = NULL; /* the handle is stale from now on */
  pthread_mutex_unlock(&lock);
  if (done) request_free(q);
}

static bool may_match(int want_rank, int want_tag, int rank, int tag) {
  return (want_rank == MPI_ANY_SOURCE || want_rank == rank) && (want_tag == MPI_ANY_TAG || want_tag == tag);
}

/* With the lock held. */
static bool stream_busy(MPI_Comm comm, bool send, int rank, int tag) {
  for (size_t i = 0; i < stream_count; i++)
    if (streams[i].send == send && streams[i].comm == comm && streams[i].rank == rank && streams[i].tag == tag)
      return true;
  return false;
}

static bool stream_add(MPI_Comm comm, bool send, int rank, int tag) {
  if (stream_count == stream_cap) {
    size_t cap = stream_cap ? stream_cap * 2 : 8;
    stream *more = realloc(streams, cap * sizeof *more);
    if (!more) return false;
    streams = more;
    stream_cap = cap;
  }
  streams[stream_count++] = (stream){.comm = comm, .rank = rank, .tag = tag, .send = send};
  return true;
}

static void stream_end(MPI_Comm comm, bool send, int rank, int tag) {
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < stream_count; i++)
    if (streams[i].send == send && streams[i].comm == comm && streams[i].rank == rank && streams[i].tag == tag) {
      streams[i] = streams[--stream_count];
      break;
    }
  pthread_cond_broadcast(&stream_ended);
  pthread_mutex_unlock(&lock);
}

/* Is this a ferry header? */
static bool parse_head(const char *head, int len, header *out) {
  if (len < (int)sizeof(header)) return false;
  memcpy(out, head, sizeof *out);
  if (out->magic != HEADER_MAGIC || out->version != 1) return false;
  return out->piece == 0 ? (size_t)len == sizeof(header) + out->total
                         : out->piece >= MIN_PIECE && out->piece <= WHOLE_PIECE && (size_t)len == sizeof(header) &&
                               out->total > INLINE_MAX;
}

/* Takes the pieces and the trailer of a refused message off the channel (the
 * sender sends them whatever happens here), with the stream marked. */
static void drain(const header *hd, int source, int tag, MPI_Comm comm) {
  size_t n = hd->piece ? pieces_of(hd->total, hd->piece) : 0;
  char *scratch = n ? malloc(piece_len(hd->total, hd->piece, 0)) : NULL;
  for (size_t k = 0; k < n; k++)
    MPI_Recv(scratch, scratch ? (int)piece_len(hd->total, hd->piece, k) : 0, MPI_BYTE, source, tag, comm,
             MPI_STATUS_IGNORE);
  if (n > 0) {
    int64_t word;
    MPI_Recv(&word, 1, MPI_INT64_T, source, tag, comm, MPI_STATUS_IGNORE);
  }
  free(scratch);
}

/* Posts the receives of every piece and of the trailer of q's matched message. */
static void post_pieces(request *q) {
  size_t n = pieces_of(q->hd.total, q->hd.piece);
  char *to = q->hold.host ? (char *)q->hold.host + q->offset : q->mapped;
  if (!to && !q->mv) q->mv = mover_get(&q->hold);
  if (!(q->reqs = malloc((n + 1) * sizeof *q->reqs)) || (!to && !(to = staging_get(q, q->hd.total)))) {
    drain(&q->hd, q->peer, q->tag, q->comm);
    refuse(q, FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory to receive %llu bytes", q->fn,
           (unsigned long long)q->hd.total);
    return;
  }
  int rc = MPI_SUCCESS;
  for (size_t k = 0; k < n && rc == MPI_SUCCESS; k++)
    if ((rc = MPI_Irecv(to + k * q->hd.piece, (int)piece_len(q->hd.total, q->hd.piece, k), MPI_BYTE, q->peer, q->tag,
                        q->comm, &q->reqs[q->nreqs])) == MPI_SUCCESS)
      q->nreqs++;
  if (rc == MPI_SUCCESS && (rc = MPI_Irecv(q->head + HEAD_ROOM, 1, MPI_INT64_T, q->peer, q->tag, q->comm,
                                           &q->reqs[q->nreqs])) == MPI_SUCCESS)
    q->nreqs++;
  if (rc != MPI_SUCCESS) {
    MPI_Waitall((int)q->nreqs, q->reqs, MPI_STATUSES_IGNORE);
    refuse_mpi(q, "MPI_Irecv", rc);
    return;
  }
  q->state = REQ_PIECES;
  if (q->staging && q->mv) { /* its writes start in any thread's progress (land_all) */
    q->landing = true;
    q->land_next = landing;
    landing = q;
  }
}

/* Matches q's header if a message for it is there and no earlier receive may
 * take it; with the lock held. True once q is matched (or failed). */
static bool match(request *q) {
  int flag = 0, rc;
  MPI_Status env;
  if ((rc = MPI_Iprobe(q->peer, q->tag, q->comm, &flag, &env)) != MPI_SUCCESS) {
    refuse_mpi(q, "MPI_Iprobe", rc);
    return true;
  }
  if (!flag) return false;
  for (request *o = unmatched; o != q; o = o->next)
    if (o->missed == pass && o->comm == q->comm && may_match(o->peer, o->tag, env.MPI_SOURCE, env.MPI_TAG))
      return false;                                                           /* an earlier receive comes first */
  if (stream_busy(q->comm, false, env.MPI_SOURCE, env.MPI_TAG)) return false; /* a piece of another's message */
  MPI_Message msg;
  MPI_Status ps;
  if ((rc = MPI_Mprobe(env.MPI_SOURCE, env.MPI_TAG, q->comm, &msg, &ps)) != MPI_SUCCESS) {
    refuse_mpi(q, "MPI_Mprobe", rc);
    return true;
  }
  q->peer = ps.MPI_SOURCE;
  q->tag = ps.MPI_TAG;
  int len = 0;
  MPI_Get_count(&ps, MPI_BYTE, &len);
  char *into = len >= 0 && (size_t)len <= HEAD_ROOM ? q->head : malloc(len > 0 ? (size_t)len : 1);
  if (!into) {
    refuse(q, FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for a message of %d bytes", q->fn, len);
    return true;
  }
  rc = MPI_Mrecv(into, len, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
  bool ferry_message = rc == MPI_SUCCESS && into == q->head && parse_head(into, len, &q->hd);
  if (into != q->head) free(into);
  if (rc != MPI_SUCCESS) {
    refuse_mpi(q, "MPI_Mrecv", rc);
  } else if (!ferry_message) {
    refuse(q, FERRY_ERROR_INVALID_ARGUMENT,
           "%s: the message from rank %d with tag %d (%d bytes) is not a ferry message: ferry messages are sent by "
           "ferry_mpi_send or ferry_mpi_isend of the same version",
           q->fn, q->peer, q->tag, len);
  } else if (q->hd.total > q->bytes) {
    drain(&q->hd, q->peer, q->tag, q->comm);
    refuse(q, FERRY_ERROR_SIZE_MISMATCH,
           "%s: the message from rank %d with tag %d has %llu bytes, the receive range %zu; nothing was written, and "
           "the message was taken off the channel",
           q->fn, q->peer, q->tag, (unsigned long long)q->hd.total, q->bytes);
  } else if (q->hd.piece == 0) {
    q->state = REQ_INLINE;
  } else if (map_range(q, q->hd.total, true)) {
    post_pieces(q);
  } else if (q->stream && q->hd.piece < WHOLE_PIECE) {
    if (stream_add(q->comm, false, q->peer, q->tag)) {
      q->state = REQ_STREAM;
    } else {
      drain(&q->hd, q->peer, q->tag, q->comm);
      refuse(q, FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory to note a message in pieces", q->fn);
    }
  } else {
    post_pieces(q);
  }
  return true;
}

/* One pass over the unmatched receives, oldest first; with the lock held. */
static void advance(void) {
  pass++;
  for (request **at = &unmatched; *at;) {
    request *q = *at;
    if (match(q)) {
      *at = q->next;
      q->next = NULL;
    } else {
      q->missed = pass;
      at = &q->next;
    }
  }
}

static void land_all(void);

/* What any waiting thread does between its polls: matches the unmatched
 * receives (one made earlier may be what a peer waits for before it takes
 * what this thread waits for) and starts the device writes of pieces that have
 * arrived for any receive (land_all). */
static void others(void) {
  pthread_mutex_lock(&lock);
  if (unmatched) advance();
  if (landing) land_all();
  pthread_mutex_unlock(&lock);
}

/* Waits for MPI requests, matching the unmatched receives meanwhile: one made
 * earlier may be what the peer waits for before it takes these (a blocking wait
 * in MPI would never let ferry match it). Busy, as MPI's own waits are, and
 * without a yield of its own: MPI's progress yields the processor when it is
 * told to (Open MPI's mpi_yield_when_idle, which mpirun sets when ranks
 * outnumber cores); a sched_yield here cost a microsecond per turn. */
static int wait_all(int n, MPI_Request *r) {
  for (;;) {
    int flag = 0, rc = MPI_Testall(n, r, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS || flag) return rc;
    others();
  }
}

/* Waits for a device's work, an event of a mover (`e`) or the whole of its
 * queue (`qu`), moving MPI on meanwhile: the caller's own MPI requests `own`
 * are tested (MPI's progress; they may complete, and are MPI_REQUEST_NULL
 * then), or without any a probe of `comm` moves it, and other requests go on
 * (others). A rank that blocked on its DMA would hold up its peer's transfer
 * whenever MPI needs both sides' calls to move bytes. */
static ferry_status device_wait(const ferry_event *e, const ferry_queue *qu, int n, MPI_Request *own, MPI_Comm comm) {
  for (;;) {
    ferry_status st = e ? ferry_event_query(*e) : ferry_queue_query(*qu);
    if (st != FERRY_NOT_READY) return st;
    int flag = 0;
    if (n > 0)
      MPI_Testall(n, own, &flag, MPI_STATUSES_IGNORE); /* a failure is the later wait's to report */
    else
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, MPI_STATUS_IGNORE);
    others();
  }
}

/* Puts a new receive at the end of the unmatched ones and tries to match. */
static void enqueue(request *q) {
  q->state = REQ_UNMATCHED;
  pthread_mutex_lock(&lock);
  request **at = &unmatched;
  while (*at)
    at = &(*at)->next;
  *at = q;
  advance();
  pthread_mutex_unlock(&lock);
}

/* Whether q is still unmatched after one more pass. */
static bool still_unmatched(request *q) {
  pthread_mutex_lock(&lock);
  if (q->state == REQ_UNMATCHED) advance();
  bool waiting = q->state == REQ_UNMATCHED;
  pthread_mutex_unlock(&lock);
  return waiting;
}

/* ---- sending --------------------------------------------------------------------------- */

/* q's header, in q->hd and, with the bytes when they fit inside, in q->head,
 * and after it a trailer word 0 (for a message in pieces whose bytes are all
 * read already); *out_len the header's length. `staged`: the sender reads its
 * device piece by piece. */
static ferry_status make_head(request *q, bool staged, int *out_len) {
  bool inline_bytes = q->bytes <= INLINE_MAX;
  size_t len = sizeof(header) + (inline_bytes ? q->bytes : 0);
  char *head = calloc(1, len + sizeof(int64_t));
  if (!head) return ferry__companion_fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for a message header", q->fn);
  q->hd = (header){.magic = HEADER_MAGIC,
                   .version = 1,
                   .total = q->bytes,
                   .piece = inline_bytes ? 0
                            : staged     ? staged_piece()
                                         : WHOLE_PIECE};
  memcpy(head, &q->hd, sizeof q->hd);
  ferry_status st =
      inline_bytes ? device_part(q->fn, &q->hold, false, q->offset, head + sizeof q->hd, q->bytes) : FERRY_OK;
  if (st != FERRY_OK) {
    free(head);
    return st;
  }
  q->head = head;
  *out_len = (int)len;
  return FERRY_OK;
}

static ferry_status send_checks(const char *fn, ferry_buffer buf, size_t offset, size_t bytes, int dest, int tag,
                                MPI_Comm comm, ferry_companion_hold *h) {
  int size = 0;
  ferry_status st = check_comm(fn, comm, &size);
  if (st == FERRY_OK) st = check_rank(fn, "dest", dest, size, false);
  if (st == FERRY_OK) st = check_tag(fn, tag, false);
  if (st == FERRY_OK) st = hold_range(fn, buf, offset, bytes, h);
  return st;
}

/* What a trailer says, for the receiver. */
static ferry_status trailer_status(const char *fn, int64_t word, int source) {
  if (word == 0) return FERRY_OK;
  return ferry__companion_fail(FERRY_ERROR_BACKEND,
                               "%s: rank %d could not read its buffer (%s) while sending: the range received holds "
                               "bytes that are not the message's",
                               fn, source, ferry_status_name((ferry_status)word));
}

/* Posts a send's MPI messages: the header, and the pieces and trailer from
 * `from` when the bytes are all in host memory already (`from` non-NULL), else
 * (a message in pieces) marks the stream for its owner. Waits for another
 * thread's stream to the same place first. */
static ferry_status post_send(request *q, int head_len, const char *from) {
  size_t n = q->hd.piece ? pieces_of(q->bytes, q->hd.piece) : 0;
  if (!(q->reqs = malloc((n + 2) * sizeof *q->reqs)))
    return ferry__companion_fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for %zu requests", q->fn, n + 2);
  pthread_mutex_lock(&lock);
  while (stream_busy(q->comm, true, q->peer, q->tag))
    pthread_cond_wait(&stream_ended, &lock);
  if (n > 0 && !from && !stream_add(q->comm, true, q->peer, q->tag)) {
    pthread_mutex_unlock(&lock);
    return ferry__companion_fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory to note a message in pieces", q->fn);
  }
  int rc = MPI_Isend(q->head, head_len, MPI_BYTE, q->peer, q->tag, q->comm, &q->reqs[0]);
  const char *call = "MPI_Isend";
  if (rc == MPI_SUCCESS) q->nreqs = 1;
  for (size_t k = 0; rc == MPI_SUCCESS && from && k < n; k++)
    if ((rc = MPI_Isend(from + k * q->hd.piece, (int)piece_len(q->bytes, q->hd.piece, k), MPI_BYTE, q->peer, q->tag,
                        q->comm, &q->reqs[q->nreqs])) == MPI_SUCCESS)
      q->nreqs++;
  if (rc == MPI_SUCCESS && from && n > 0 &&
      (rc = MPI_Isend(q->head + head_len, 1, MPI_INT64_T, q->peer, q->tag, q->comm, &q->reqs[q->nreqs])) == MPI_SUCCESS)
    q->nreqs++;
  pthread_mutex_unlock(&lock);
  if (rc != MPI_SUCCESS) {
    /* What was posted goes out; the receiver then finds a message cut short only
     * if MPI itself failed midway, which MPI's error handler has seen first. */
    if (q->nreqs) wait_all((int)q->nreqs, q->reqs);
    q->nreqs = 0;
    if (n > 0 && !from) stream_end(q->comm, true, q->peer, q->tag);
    return mpi_failed(q->fn, call, rc);
  }
  return FERRY_OK;
}

/* The pieces of q's message through host memory (DEPTH slots of a piece each,
 * allocated before the header went), each read from the device while the ones
 * before it are sent (on q's mover, the next piece's read starting before this
 * one is posted); then the trailer. The stream is marked. */
static ferry_status send_stream(request *q, char *slot[DEPTH]) {
  size_t piece = q->hd.piece, n = pieces_of(q->bytes, piece), started = 0;
  ferry_status st = FERRY_OK, device_st = FERRY_OK;
  int rc = MPI_SUCCESS;
  MPI_Request r[DEPTH];
  for (int d = 0; d < DEPTH; d++)
    r[d] = MPI_REQUEST_NULL;
  mover *m = q->mv;
  /* Every piece goes out even when the device could not give it (the receiver
   * expects them all); the trailer then says so. */
  for (size_t k = 0; k < n; k++) {
    int d = (int)(k % DEPTH);
    size_t len = piece_len(q->bytes, piece, k);
    if (m) {
      /* Reads of pieces k and k + 1, each into its slot once the slot's send is done. */
      for (; rc == MPI_SUCCESS && device_st == FERRY_OK && started < n && started <= k + 1; started++) {
        int ds = (int)(started % DEPTH);
        if ((rc = wait_all(1, &r[ds])) == MPI_SUCCESS)
          device_st = mover_start(m, q->fn, &q->hold, false, q->offset + started * piece, slot[ds],
                                  piece_len(q->bytes, piece, started), (int)(started % MOVER_EVENTS));
      }
      if (rc == MPI_SUCCESS && device_st == FERRY_OK)
        device_st = device_wait(&m->ev[k % MOVER_EVENTS], NULL, DEPTH, r, q->comm);
      if (device_st != FERRY_OK) q->mv_failed = true;
    }
    if (rc == MPI_SUCCESS) rc = wait_all(1, &r[d]);
    if (rc != MPI_SUCCESS) break;
    if (!m && device_st == FERRY_OK)
      device_st = device_part(q->fn, &q->hold, false, q->offset + k * piece, slot[d], len);
    if ((rc = MPI_Isend(slot[d], (int)len, MPI_BYTE, q->peer, q->tag, q->comm, &r[d])) != MPI_SUCCESS) break;
  }
  if (rc != MPI_SUCCESS) st = mpi_failed(q->fn, "MPI_Isend", rc);
  rc = wait_all(DEPTH, r);
  if (rc != MPI_SUCCESS && st == FERRY_OK) st = mpi_failed(q->fn, "MPI_Waitall", rc);
  if (st == FERRY_OK) {
    int64_t word = device_st;
    if ((rc = MPI_Isend(&word, 1, MPI_INT64_T, q->peer, q->tag, q->comm, &r[0])) != MPI_SUCCESS ||
        (rc = wait_all(1, &r[0])) != MPI_SUCCESS)
      st = mpi_failed(q->fn, "MPI_Isend", rc);
  }
  stream_end(q->comm, true, q->peer, q->tag);
  return st != FERRY_OK ? st : device_st;
}

/* A non-blocking send through host memory, after post_send marked its stream:
 * piece k read from the device into the request's staging (lent to ferry's
 * pinned registry, so one DMA) and posted at once, MPI moving it while piece k+1
 * is read; then the trailer. Every piece goes even when the device could not
 * give it (the receiver expects them all): the trailer says so, and the failure
 * is kept for the wait, as an MPI failure here is. */
static void send_staged(request *q, int head_len) {
  size_t piece = q->hd.piece, n = pieces_of(q->bytes, piece), started = 0;
  ferry_status device_st = FERRY_OK;
  int rc = MPI_SUCCESS;
  mover *m = q->mv = mover_get(&q->hold);
  for (size_t k = 0; k < n && rc == MPI_SUCCESS; k++) {
    size_t len = piece_len(q->bytes, piece, k);
    char *at = q->staging + k * piece;
    if (device_st == FERRY_OK && m) {
      /* The reads of the next pieces run while this one is posted. */
      for (; device_st == FERRY_OK && started < n && started < k + MOVER_EVENTS; started++)
        device_st = mover_start(m, q->fn, &q->hold, false, q->offset + started * piece, q->staging + started * piece,
                                piece_len(q->bytes, piece, started), (int)(started % MOVER_EVENTS));
      if (device_st == FERRY_OK)
        device_st = device_wait(&m->ev[k % MOVER_EVENTS], NULL, (int)q->nreqs, q->reqs, q->comm);
      q->mv_failed = device_st != FERRY_OK;
    } else if (device_st == FERRY_OK) {
      device_st = device_part(q->fn, &q->hold, false, q->offset + k * piece, at, len);
    }
    if (device_st != FERRY_OK) keep_failure(q, device_st);
    if ((rc = MPI_Isend(at, (int)len, MPI_BYTE, q->peer, q->tag, q->comm, &q->reqs[q->nreqs])) == MPI_SUCCESS)
      q->nreqs++;
  }
  mover_end(q); /* its reads are done, or failed */
  int64_t word = device_st;
  memcpy(q->head + head_len, &word, sizeof word);
  if (rc == MPI_SUCCESS &&
      (rc = MPI_Isend(q->head + head_len, 1, MPI_INT64_T, q->peer, q->tag, q->comm, &q->reqs[q->nreqs])) == MPI_SUCCESS)
    q->nreqs++;
  stream_end(q->comm, true, q->peer, q->tag);
  if (rc != MPI_SUCCESS) {
    ferry_status mpi_st = mpi_failed(q->fn, "MPI_Isend", rc);
    q->result = FERRY_OK; /* MPI's failure comes first */
    keep_failure(q, mpi_st);
  }
}

ferry_status ferry_mpi_send(ferry_buffer buf, size_t offset, size_t bytes, int dest, int tag, MPI_Comm comm) {
  static const char fn[] = "ferry_mpi_send";
  ferry_companion_hold h;
  ferry_status st = send_checks(fn, buf, offset, bytes, dest, tag, comm, &h);
  if (st != FERRY_OK) return st;
  if (dest == MPI_PROC_NULL) {
    ferry__companion_release(&h);
    return FERRY_OK;
  }
  request *q = request_new(fn, &h, offset, bytes, comm, dest, tag);
  if (!q) {
    ferry__companion_release(&h);
    return FERRY_ERROR_OUT_OF_MEMORY;
  }
  const char *direct = h.host ? (const char *)h.host + offset : map_range(q, bytes, false);
  if (!q->mapped) debug_path(fn, &h, bytes, NULL);
  bool pieces = bytes > INLINE_MAX, stream = pieces && !direct;
  char *slot[DEPTH] = {0};
  int head_len = 0;
  size_t piece = staged_piece();
  if (piece > bytes) piece = bytes;
  for (int d = 0; stream && d < DEPTH && st == FERRY_OK; d++)
    if (!(slot[d] = block_get(piece)))
      st = ferry__companion_fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory to stage %zu bytes", fn, piece);
  if (st == FERRY_OK) st = make_head(q, stream, &head_len);
  if (st == FERRY_OK) st = post_send(q, head_len, stream ? NULL : direct ? direct : q->head);
  if (st == FERRY_OK && stream) {
    q->mv = mover_get(&h);
    st = send_stream(q, slot);
    int rc = wait_all(1, &q->reqs[0]);
    if (rc != MPI_SUCCESS && st == FERRY_OK) st = mpi_failed(fn, "MPI_Wait", rc);
  } else if (st == FERRY_OK) {
    int rc = wait_all((int)q->nreqs, q->reqs);
    if (rc != MPI_SUCCESS) st = mpi_failed(fn, "MPI_Waitall", rc);
  }
  ferry_status unmapped = unmap_range(q);
  if (st == FERRY_OK) st = unmapped;
  mover_end(q); /* its reads into the slots end first */
  for (int d = 0; d < DEPTH; d++)
    block_put(slot[d]);
  request_free(q);
  return st;
}

ferry_status ferry_mpi_isend(ferry_buffer buf, size_t offset, size_t bytes, int dest, int tag, MPI_Comm comm,
                             ferry_mpi_request *out_request) {
  static const char fn[] = "ferry_mpi_isend";
  if (!out_request) return ferry__companion_fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_request is NULL", fn);
  ferry_companion_hold h;
  ferry_status st = send_checks(fn, buf, offset, bytes, dest, tag, comm, &h);
  if (st != FERRY_OK) return st;
  request *q = request_new(fn, &h, offset, bytes, comm, dest, tag);
  if (!q) {
    ferry__companion_release(&h);
    return FERRY_ERROR_OUT_OF_MEMORY;
  }
  q->state = dest == MPI_PROC_NULL ? REQ_NOTHING : REQ_SEND;
  int head_len = 0;
  if (q->state == REQ_SEND) {
    const char *from = h.host ? (const char *)h.host + offset : NULL;
    bool staged = bytes > INLINE_MAX && !from && !(from = map_range(q, bytes, false));
    st = make_head(q, staged, &head_len);
    if (st == FERRY_OK && staged && !staging_get(q, bytes))
      st = ferry__companion_fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory to stage %zu bytes", fn, bytes);
    if (st == FERRY_OK) st = post_send(q, head_len, staged ? NULL : from ? from : q->head);
    if (st == FERRY_OK && staged) send_staged(q, head_len);
  }
  if (!q->mapped) debug_path(fn, &h, bytes, NULL);
  if (st == FERRY_OK) st = publish(q, out_request);
  if (st != FERRY_OK) {
    if (q->nreqs) wait_all((int)q->nreqs, q->reqs);
    request_free(q);
  }
  return st;
}

/* ---- receiving --------------------------------------------------------------------------- */

static ferry_status recv_checks(const char *fn, ferry_buffer buf, size_t offset, size_t bytes, int source, int tag,
                                MPI_Comm comm, ferry_companion_hold *h) {
  int size = 0;
  ferry_status st = check_comm(fn, comm, &size);
  if (st == FERRY_OK) st = check_rank(fn, "source", source, size, true);
  if (st == FERRY_OK) st = check_tag(fn, tag, true);
  if (st == FERRY_OK) st = hold_range(fn, buf, offset, bytes, h);
  return st;
}

static void set_status(MPI_Status *out, int source, int tag, size_t bytes) {
  if (out == MPI_STATUS_IGNORE) return;
  out->MPI_SOURCE = source;
  out->MPI_TAG = tag;
  out->MPI_ERROR = MPI_SUCCESS;
  MPI_Status_set_elements_x(out, MPI_BYTE, (MPI_Count)bytes);
  MPI_Status_set_cancelled(out, 0);
}

/* A new receive, enqueued for matching. */
static ferry_status recv_start(const char *fn, ferry_buffer buf, size_t offset, size_t bytes, int source, int tag,
                               MPI_Comm comm, bool stream, request **out) {
  ferry_companion_hold h;
  ferry_status st = recv_checks(fn, buf, offset, bytes, source, tag, comm, &h);
  if (st != FERRY_OK) return st;
  debug_path(fn, &h, bytes,
             h.host ? NULL : "mapped without a copy where the device can, else through host memory (once matched)");
  request *q = request_new(fn, &h, offset, bytes, comm, source, tag);
  if (!q) {
    ferry__companion_release(&h);
    return FERRY_ERROR_OUT_OF_MEMORY;
  }
  q->stream = stream && !h.host;
  if (source == MPI_PROC_NULL) {
    q->state = REQ_NOTHING;
  } else if (!(q->head = malloc(HEAD_ROOM + sizeof(int64_t)))) {
    request_free(q);
    return ferry__companion_fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for a message header", fn);
  } else {
    enqueue(q);
  }
  *out = q;
  return FERRY_OK;
}

/* The pieces of q's message through host memory, piece k written to the
 * device while k+1.. arrive; then the trailer. The stream is marked. */
static ferry_status recv_stream(request *q) {
  const char *fn = q->fn;
  size_t piece = q->hd.piece, n = pieces_of(q->hd.total, piece), slot_bytes = piece < q->hd.total ? piece : q->hd.total;
  ferry_status st = FERRY_OK, device_st = FERRY_OK;
  char *slot[DEPTH] = {0};
  MPI_Request r[DEPTH];
  for (int d = 0; d < DEPTH; d++)
    r[d] = MPI_REQUEST_NULL;
  for (int d = 0; d < DEPTH && st == FERRY_OK; d++)
    if (!(slot[d] = block_get(slot_bytes)))
      st = ferry__companion_fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory to stage %zu bytes", fn, slot_bytes);
  if (st != FERRY_OK) {
    drain(&q->hd, q->peer, q->tag, q->comm);
  } else {
    int rc = MPI_SUCCESS;
    for (size_t k = 0; k < n && k < DEPTH && rc == MPI_SUCCESS; k++)
      rc = MPI_Irecv(slot[k], (int)piece_len(q->hd.total, piece, k), MPI_BYTE, q->peer, q->tag, q->comm, &r[k]);
    /* A device failure keeps receiving (the sender must not be left waiting) and
     * is returned at the end. With a mover, piece k's write runs while k + 1
     * arrives, and a slot takes its next piece once its write is done. */
    mover *m = q->mv = mover_get(&q->hold);
    for (size_t k = 0; k < n && rc == MPI_SUCCESS; k++) {
      int d = (int)(k % DEPTH);
      if ((rc = wait_all(1, &r[d])) != MPI_SUCCESS) break;
      size_t len = piece_len(q->hd.total, piece, k);
      if (device_st == FERRY_OK)
        device_st = m ? mover_start(m, fn, &q->hold, true, q->offset + k * piece, slot[d], len, (int)(k % MOVER_EVENTS))
                      : device_part(fn, &q->hold, true, q->offset + k * piece, slot[d], len);
      size_t again = m ? k - 1 : k; /* the piece whose slot takes its next one now */
      if (m && k == 0) continue;
      if (m && device_st == FERRY_OK) device_st = device_wait(&m->ev[again % MOVER_EVENTS], NULL, DEPTH, r, q->comm);
      if (again + DEPTH < n)
        rc = MPI_Irecv(slot[again % DEPTH], (int)piece_len(q->hd.total, piece, again + DEPTH), MPI_BYTE, q->peer,
                       q->tag, q->comm, &r[again % DEPTH]);
    }
    if (m && device_st == FERRY_OK && n > 0)
      device_st = device_wait(&m->ev[(n - 1) % MOVER_EVENTS], NULL, DEPTH, r, q->comm);
    q->mv_failed = device_st != FERRY_OK;
    int64_t word = 0;
    MPI_Request tr = MPI_REQUEST_NULL;
    if (rc == MPI_SUCCESS && (rc = MPI_Irecv(&word, 1, MPI_INT64_T, q->peer, q->tag, q->comm, &tr)) == MPI_SUCCESS)
      rc = wait_all(1, &tr);
    if (rc != MPI_SUCCESS) {
      wait_all(DEPTH, r);
      st = mpi_failed(fn, "MPI_Recv", rc);
    } else if (device_st == FERRY_OK) {
      st = trailer_status(fn, word, q->peer);
    }
  }
  mover_end(q); /* its writes out of the slots end first */
  for (int d = 0; d < DEPTH; d++)
    block_put(slot[d]);
  stream_end(q->comm, false, q->peer, q->tag);
  return st != FERRY_OK ? st : device_st;
}

/* With the lock held: starts the device writes of q's pieces (a receive
 * through staging) that have arrived, in order (MPI completes a channel's
 * messages in order), on its mover where it has one. A device failure is kept,
 * and the pieces are still received. q leaves the landing list once every
 * piece is in, or MPI failed (kept in land_rc). MPI's status. */
static int land_some(request *q) {
  size_t n = pieces_of(q->hd.total, q->hd.piece);
  int rc = q->land_rc;
  while (rc == MPI_SUCCESS && q->landed < n) {
    int flag = 0;
    if ((rc = MPI_Test(&q->reqs[q->landed], &flag, MPI_STATUS_IGNORE)) != MPI_SUCCESS || !flag) break;
    size_t k = q->landed++, len = piece_len(q->hd.total, q->hd.piece, k), at = k * q->hd.piece;
    if (q->result == FERRY_OK) {
      ferry_status st = q->mv ? mover_start(q->mv, q->fn, &q->hold, true, q->offset + at, q->staging + at, len, -1)
                              : device_part(q->fn, &q->hold, true, q->offset + at, q->staging + at, len);
      if (st != FERRY_OK) {
        keep_failure(q, st);
        q->mv_failed = q->mv != NULL;
      }
    }
  }
  q->land_rc = rc;
  if (rc != MPI_SUCCESS || q->landed == n) unland(q);
  return rc;
}

/* With the lock held: every landing receive goes as far as its pieces have come. */
static void land_all(void) {
  for (request *q = landing, *next; q; q = next) {
    next = q->land_next; /* land_some may take q off the list */
    land_some(q);
  }
}

/* A receive through staging, its pieces' writes started as they arrive;
 * waiting for every piece, or (`wait` false) as far as they have come: *all
 * says whether every piece is in (until then another thread's progress may
 * test them: land_all). MPI's status. */
static int land(request *q, bool wait, bool *all) {
  size_t n = pieces_of(q->hd.total, q->hd.piece);
  for (;;) {
    pthread_mutex_lock(&lock);
    int rc = land_some(q);
    *all = q->landed == n;
    pthread_mutex_unlock(&lock);
    if (rc != MPI_SUCCESS || *all || !wait) return rc;
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, q->comm, &flag, MPI_STATUS_IGNORE); /* MPI's progress */
    others();
  }
}

/* Moves a request on, waiting or not; *done once it has ended. */
static ferry_status progress(request *q, bool wait, bool *done, MPI_Status *out_status) {
  const char *fn = q->fn;
  int rc, flag = 0;
  *done = false;
  if (q->state == REQ_UNMATCHED) {
    while (still_unmatched(q)) /* each pass probes, which is MPI's progress (see wait_all) */
      if (!wait) return FERRY_OK;
  }
  ferry_status st = FERRY_OK;
  switch (q->state) {
  case REQ_NOTHING:
    *done = true;
    set_status(out_status, MPI_PROC_NULL, MPI_ANY_TAG, 0);
    return FERRY_OK;
  case REQ_FAILED: *done = true; return ferry__companion_fail(q->result, "%s", q->why);
  case REQ_SEND:
  case REQ_PIECES:
    if (q->state == REQ_PIECES && q->staging) {
      bool all = false;
      if ((rc = land(q, wait, &all)) != MPI_SUCCESS) {
        *done = true;
        return mpi_failed(fn, wait ? "MPI_Wait" : "MPI_Test", rc);
      }
      if (!all) return FERRY_OK;
    }
    rc = wait ? wait_all((int)q->nreqs, q->reqs) : MPI_Testall((int)q->nreqs, q->reqs, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      *done = true;
      return mpi_failed(fn, wait ? "MPI_Waitall" : "MPI_Testall", rc);
    }
    if (!wait && !flag) return FERRY_OK;
    if (q->state == REQ_PIECES && q->staging) {
      if (q->mv && !q->mv_done) {
        ferry_status moved =
            wait ? device_wait(NULL, &q->mv->queue, 0, NULL, q->comm) : ferry_queue_query(q->mv->queue);
        if (moved == FERRY_NOT_READY) return FERRY_OK;
        q->mv_done = true;
        if (moved != FERRY_OK) {
          keep_failure(q, moved);
          q->mv_failed = true;
        }
      }
    }
    *done = true;
    if (q->state == REQ_SEND) {
      ferry_status unmapped = unmap_range(q);
      return q->result != FERRY_OK ? ferry__companion_fail(q->result, "%s", q->why) : unmapped;
    }
    int64_t word;
    memcpy(&word, q->head + HEAD_ROOM, sizeof word);
    st = trailer_status(fn, word, q->peer);
    if (st == FERRY_OK && q->result != FERRY_OK) st = ferry__companion_fail(q->result, "%s", q->why);
    ferry_status unmapped = unmap_range(q);
    if (st == FERRY_OK) st = unmapped;
    break;
  case REQ_INLINE:
    *done = true;
    st = device_part(fn, &q->hold, true, q->offset, q->head + sizeof(header), q->hd.total);
    break;
  case REQ_STREAM:
    *done = true;
    st = recv_stream(q);
    break;
  case REQ_UNMATCHED: return FERRY_OK; /* not reached */
  }
  if (st == FERRY_OK) set_status(out_status, q->peer, q->tag, q->hd.total);
  return st;
}

ferry_status ferry_mpi_recv(ferry_buffer buf, size_t offset, size_t bytes, int source, int tag, MPI_Comm comm,
                            MPI_Status *out_status) {
  request *q = NULL;
  ferry_status st = recv_start("ferry_mpi_recv", buf, offset, bytes, source, tag, comm, true, &q);
  if (st != FERRY_OK) return st;
  bool done = false;
  st = progress(q, true, &done, out_status);
  request_free(q);
  return st;
}

ferry_status ferry_mpi_irecv(ferry_buffer buf, size_t offset, size_t bytes, int source, int tag, MPI_Comm comm,
                             ferry_mpi_request *out_request) {
  static const char fn[] = "ferry_mpi_irecv";
  if (!out_request) return ferry__companion_fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_request is NULL", fn);
  request *q = NULL;
  ferry_status st = recv_start(fn, buf, offset, bytes, source, tag, comm, false, &q);
  if (st != FERRY_OK) return st;
  if ((st = publish(q, out_request)) != FERRY_OK) {
    /* Not yet matched: out of the queue. Matched already: nothing is lost but
     * this receive's message, which MPI has given it. */
    pthread_mutex_lock(&lock);
    for (request **at = &unmatched; *at; at = &(*at)->next)
      if (*at == q) {
        *at = q->next;
        break;
      }
    unland(q);
    pthread_mutex_unlock(&lock);
    if (q->nreqs) wait_all((int)q->nreqs, q->reqs);
    request_free(q);
  }
  return st;
}

ferry_status ferry_mpi_wait(ferry_mpi_request request_handle, MPI_Status *out_status) {
  request *q = NULL;
  ferry_status st = take("ferry_mpi_wait", request_handle, &q);
  if (st != FERRY_OK) return st;
  bool done = false;
  st = progress(q, true, &done, out_status);
  give_back(request_handle, true);
  return st;
}

ferry_status ferry_mpi_test(ferry_mpi_request request_handle, int *out_done, MPI_Status *out_status) {
  static const char fn[] = "ferry_mpi_test";
  if (!out_done) return ferry__companion_fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_done is NULL", fn);
  request *q = NULL;
  ferry_status st = take(fn, request_handle, &q);
  if (st != FERRY_OK) return st;
  bool done = false;
  st = progress(q, false, &done, out_status);
  *out_done = done;
  give_back(request_handle, done);
  return st;
}

/* ---- collectives --------------------------------------------------------------------------- */

ferry_status ferry_mpi_bcast(ferry_buffer buf, size_t offset, size_t bytes, int root, MPI_Comm comm) {
  static const char fn[] = "ferry_mpi_bcast";
  int size = 0, me = 0;
  ferry_status st = check_comm(fn, comm, &size);
  if (st != FERRY_OK) return st;
  if (root < 0 || root >= size)
    return ferry__companion_fail(FERRY_ERROR_INVALID_ARGUMENT,
                                 "%s: root %d is not a rank of the communicator (0 to %d)", fn, root, size - 1);
  MPI_CHECK(fn, "MPI_Comm_rank", MPI_Comm_rank(comm, &me));
  ferry_companion_hold h;
  if ((st = hold_range(fn, buf, offset, bytes, &h)) != FERRY_OK) return st;
  debug_path(fn, &h, bytes, NULL);
  char *slot = h.host ? NULL : block_get(bytes < PIECE ? bytes : PIECE);
  if (!h.host && !slot)
    st = ferry__companion_fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory to stage %zu bytes", fn, PIECE);
  ferry_status device_st = FERRY_OK;
  for (size_t k = 0; st == FERRY_OK && k < pieces_of(bytes, PIECE); k++) {
    size_t len = piece_len(bytes, PIECE, k), at = offset + k * PIECE;
    char *p = h.host ? (char *)h.host + at : slot;
    if (me == root && !h.host && device_st == FERRY_OK) device_st = device_part(fn, &h, false, at, p, len);
    int rc = MPI_Bcast(p, (int)len, MPI_BYTE, root, comm);
    if (rc != MPI_SUCCESS)
      st = mpi_failed(fn, "MPI_Bcast", rc);
    else if (me != root && !h.host && device_st == FERRY_OK)
      device_st = device_part(fn, &h, true, at, p, len);
  }
  block_put(slot);
  ferry__companion_release(&h);
  return st != FERRY_OK ? st : device_st;
}

/* The MPI type of a kind that reductions take; MPI_DATATYPE_NULL for the others. */
static MPI_Datatype type_of(ferry_kind k) {
  switch (k) {
  case FERRY_FLOAT32: return MPI_FLOAT;
  case FERRY_FLOAT64: return MPI_DOUBLE;
  case FERRY_INT8: return MPI_INT8_T;
  case FERRY_UINT8: return MPI_UINT8_T;
  case FERRY_INT16: return MPI_INT16_T;
  case FERRY_UINT16: return MPI_UINT16_T;
  case FERRY_INT32: return MPI_INT32_T;
  case FERRY_UINT32: return MPI_UINT32_T;
  case FERRY_INT64: return MPI_INT64_T;
  case FERRY_UINT64: return MPI_UINT64_T;
  case FERRY_NATIVEINT: return sizeof(intptr_t) == 8 ? MPI_INT64_T : MPI_INT32_T;
  case FERRY_COMPLEX32: return MPI_C_FLOAT_COMPLEX;
  case FERRY_COMPLEX64: return MPI_C_DOUBLE_COMPLEX;
  default: return MPI_DATATYPE_NULL;
  }
}

ferry_status ferry_mpi_allreduce(ferry_buffer send, ferry_buffer recv, MPI_Op op, MPI_Comm comm) {
  static const char fn[] = "ferry_mpi_allreduce";
  int size = 0;
  ferry_status st = check_comm(fn, comm, &size);
  if (st != FERRY_OK) return st;
  if (op == MPI_OP_NULL) return ferry__companion_fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: op is MPI_OP_NULL", fn);
  ferry_companion_hold s, r;
  if ((st = ferry__companion_hold(send, fn, &s)) != FERRY_OK) return st;
  if ((st = ferry__companion_hold(recv, fn, &r)) != FERRY_OK) {
    ferry__companion_release(&s);
    return st;
  }
  MPI_Datatype type = type_of(s.kind);
  if (s.kind != r.kind || s.elem_size != r.elem_size)
    st = ferry__companion_fail(FERRY_ERROR_KIND_MISMATCH, "%s: send holds %s, recv %s", fn,
                               s.kind == FERRY_CUSTOM ? "custom records" : ferry_kind_name(s.kind),
                               r.kind == FERRY_CUSTOM ? "custom records" : ferry_kind_name(r.kind));
  else if (s.length != r.length)
    st =
        ferry__companion_fail(FERRY_ERROR_SIZE_MISMATCH, "%s: send has %zu elements, recv %zu", fn, s.length, r.length);
  else if (type == MPI_DATATYPE_NULL)
    st = ferry__companion_fail(FERRY_ERROR_UNSUPPORTED,
                               "%s: MPI has no type to reduce %s elements with (float16, bfloat16, char and custom "
                               "buffers cannot be reduced)",
                               fn, s.kind == FERRY_CUSTOM ? "custom" : ferry_kind_name(s.kind));
  if (st == FERRY_OK) debug_path(fn, &s, s.bytes, NULL);
  /* Host memory for each side: its own, a map without a copy (PoCL), or DEPTH
   * staging slots; in place (send is recv) one map serves both. */
  size_t total = s.bytes;
  bool in_place = send.id == recv.id;
  void *smap = NULL, *rmap = NULL;
  if (st == FERRY_OK && total > INLINE_MAX && !s.host &&
      ferry__companion_map(&s, fn, 0, total, in_place, &smap) == FERRY_OK)
    debug_path(fn, &s, total, "mapped without a copy, handed to MPI");
  if (st == FERRY_OK && total > INLINE_MAX && !r.host && !in_place &&
      ferry__companion_map(&r, fn, 0, total, true, &rmap) == FERRY_OK)
    debug_path(fn, &r, total, "mapped without a copy, handed to MPI");
  char *sh = s.host ? (char *)s.host : (char *)smap;
  char *rh = r.host ? (char *)r.host : in_place ? sh : (char *)rmap;
  /* Pieces of whole elements, the same on every rank whatever its path (the
   * collectives must match): piece k+1 is read from the device while MPI
   * reduces piece k, and written to the device while k+2 is reduced. Every
   * rank reduces in place, into its receive memory (the send bytes read or
   * copied there first): Open MPI 4.1's MPI_Iallreduce hangs when some ranks
   * pass MPI_IN_PLACE and others do not, and a staged rank reads its device
   * straight into the slot MPI reduces in. */
  size_t piece = PIECE / s.elem_size * s.elem_size, n = total ? (total + piece - 1) / piece : 0;
  char *b[DEPTH] = {0};
  MPI_Request req[DEPTH];
  for (int d = 0; d < DEPTH; d++) {
    req[d] = MPI_REQUEST_NULL;
    if (st == FERRY_OK && (size_t)d < n && !rh && !(b[d] = block_get(piece)))
      st = ferry__companion_fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory to stage %zu bytes", fn, piece);
  }
  ferry_status device_st = FERRY_OK;
  size_t posted = 0, finished = 0;
  if (st == FERRY_OK && n == 1) {
    /* One piece (n is the same on every rank): nothing to overlap, and MPI's
     * blocking reduction is faster than its non-blocking one. */
    char *out = rh ? rh : b[0], *in = sh ? sh : out;
    if (!sh) device_st = device_part(fn, &s, false, 0, out, total);
    int count = (int)(total / s.elem_size);
    int rc = in == out ? MPI_Allreduce(MPI_IN_PLACE, out, count, type, op, comm)
                       : MPI_Allreduce(in, out, count, type, op, comm);
    if (rc != MPI_SUCCESS)
      st = mpi_failed(fn, "MPI_Allreduce", rc);
    else if (!rh && device_st == FERRY_OK)
      device_st = device_part(fn, &r, true, 0, out, total);
    finished = n;
  }
  while (st == FERRY_OK && finished < n) {
    if (posted < n && posted - finished < DEPTH) {
      size_t at = posted * piece, len = total - at < piece ? total - at : piece;
      int d = (int)(posted % DEPTH);
      char *out = rh ? rh + at : b[d];
      if (!sh) {
        if (device_st == FERRY_OK) device_st = device_part(fn, &s, false, at, out, len);
      } else if (sh + at != out) {
        memcpy(out, sh + at, len);
      }
      int rc = MPI_Iallreduce(MPI_IN_PLACE, out, (int)(len / s.elem_size), type, op, comm, &req[d]);
      if (rc != MPI_SUCCESS) {
        st = mpi_failed(fn, "MPI_Iallreduce", rc);
        break;
      }
      posted++;
      continue;
    }
    size_t at = finished * piece, len = total - at < piece ? total - at : piece;
    int d = (int)(finished % DEPTH);
    int rc = wait_all(1, &req[d]);
    if (rc != MPI_SUCCESS) {
      st = mpi_failed(fn, "MPI_Wait", rc);
      break;
    }
    if (!rh && device_st == FERRY_OK) device_st = device_part(fn, &r, true, at, b[d], len);
    finished++;
  }
  if (st != FERRY_OK) wait_all(DEPTH, req);
  for (int d = 0; d < DEPTH; d++)
    block_put(b[d]);
  if (smap) {
    ferry_status u = ferry__companion_unmap(&s, fn, smap);
    if (device_st == FERRY_OK) device_st = u;
  }
  if (rmap) {
    ferry_status u = ferry__companion_unmap(&r, fn, rmap);
    if (device_st == FERRY_OK) device_st = u;
  }
  ferry__companion_release(&s);
  ferry__companion_release(&r);
  return st != FERRY_OK ? st : device_st;
}

ferry_status ferry_mpi_local_device(MPI_Comm comm, bool gpu_only, ferry_device **out_device) {
  static const char fn[] = "ferry_mpi_local_device";
  if (!out_device) return ferry__companion_fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_device is NULL", fn);
  int size = 0;
  ferry_status st = check_comm(fn, comm, &size);
  if (st != FERRY_OK) return st;
  MPI_Comm node;
  int local = 0;
  MPI_CHECK(fn, "MPI_Comm_split_type", MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int rc = MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  if (rc != MPI_SUCCESS) return mpi_failed(fn, "MPI_Comm_rank", rc);
  size_t n = ferry_device_count(), count = 0;
  for (size_t i = 0; i < n; i++) {
    ferry_device *d;
    ferry_device_info info;
    if (ferry_device_get(i, &d) == FERRY_OK && ferry_device_info_get(d, &info) == FERRY_OK &&
        (!gpu_only || !info.is_cpu))
      count++;
  }
  if (count == 0)
    return ferry__companion_fail(FERRY_ERROR_NO_DEVICE, "%s: no %s to give rank %d of its node", fn,
                                 gpu_only ? "device that is not a CPU (gpu_only)" : "device", local);
  size_t want = (size_t)local % count;
  for (size_t i = 0; i < n; i++) {
    ferry_device *d;
    ferry_device_info info;
    if (ferry_device_get(i, &d) != FERRY_OK || ferry_device_info_get(d, &info) != FERRY_OK || (gpu_only && info.is_cpu))
      continue;
    if (want-- == 0) {
      *out_device = d;
      return FERRY_OK;
    }
  }
  return ferry__companion_fail(FERRY_ERROR_NO_DEVICE, "%s: the devices changed while counted", fn);
}
