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
 * is read or written through host memory, piece by piece, through a ring of a
 * few slots of its request (rings, below), the device's transfer of one piece
 * overlapping MPI's of the others, blocking and non-blocking calls alike; every
 * ferry call that waits moves every such request on, and nothing waits for a
 * device without moving MPI on meanwhile (with MPI's shared-memory transport
 * copying through a buffer of its own, both ranks' calls move the bytes, so a
 * rank blocked on its DMA would hold its peer's transfer back too). Staging
 * memory is lent to ferry's registry of pinned memory, so the device's part is
 * one DMA.
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
#define DEPTH        3                  /* pieces in flight in a collective through host memory */
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
 * message's pieces are either all posted at once (into host memory the CPU
 * addresses) or their (communicator, source, tag) is marked as a stream that
 * nobody else probes until the receive has posted its last piece's receive.
 * Senders mirror this: a message's MPI messages are posted at once under the
 * lock, or its (communicator, destination, tag) is a stream; a send to a stream
 * that is busy, or that an earlier send still waits for, waits in turn (queued:
 * a non-blocking send never blocks).
 *
 * A message through host memory goes through a ring of a few piece-sized slots
 * of its request (RING): the sender reads piece k into a slot once the MPI send
 * of the piece that slot held has completed and posts it once read; the
 * receiver posts piece k's receive once the device write out of that slot is
 * done and starts the write once it has arrived. Those requests are `active`:
 * every ferry call that waits moves every active request on (progress_all), as
 * MPI's own progress moves every MPI request, so a window of messages needs a
 * ring each, not its whole length in staging memory, and the bytes cross a few
 * slots that stay in the processor's caches. Matching happens whenever a ferry
 * call runs (a receive, a wait, a test); nothing is ever blocked on inside MPI
 * while the lock is held, except a refused message's pieces being taken off
 * the channel (the sender sends them regardless). */

typedef enum req_state {
  REQ_SEND,      /* a send: its MPI messages posted */
  REQ_QUEUED,    /* a send waiting for its stream (active): nothing posted yet */
  REQ_SENDING,   /* a send through its ring (active): the header posted, pieces going */
  REQ_NOTHING,   /* to or from MPI_PROC_NULL */
  REQ_UNMATCHED, /* a receive whose header has not been matched yet */
  REQ_INLINE,    /* matched: the bytes came inside the header */
  REQ_PIECES,    /* matched: every piece and the trailer posted, into host memory */
  REQ_RECEIVING, /* matched: the pieces through its ring (active until every write is done) */
  REQ_FAILED,    /* matched and refused, or failed: `why` says so */
} req_state;

#define RING 4 /* slots of a message's ring; at most MOVER_EVENTS */

#define HEAD_ROOM (sizeof(header) + INLINE_MAX) /* the largest header (bytes inside) */

typedef struct request {
  const char *fn; /* the call that made it */
  req_state state;
  ferry_companion_hold hold;
  size_t offset, bytes; /* the range */
  MPI_Comm comm;
  int peer, tag;     /* as given; once matched, the sender's */
  MPI_Request *reqs; /* MPI's requests of the message */
  size_t nreqs;
  char *head;         /* a send's header (+ inline bytes, + the trailer word); a receive's HEAD_ROOM + trailer */
  char *staging;      /* the ring's slots, for a device without host access */
  void *mapped;       /* the range mapped without a copy (ferry__companion_map), until the request ends */
  bool device_memory; /* `mapped` is device memory for a CUDA-aware MPI: nothing to unmap */
  header hd;          /* a receive's, once matched */
  /* The ring: `slots` slots of `slot` bytes, for the message's `pieces` pieces
   * (of hd.piece bytes). A send: `started` pieces read (or being read), `moved` posted to MPI;
   * reqs[0] the header, reqs[1 + k % slots] piece k's, reqs[1 + slots] the
   * trailer. A receive: `started` pieces' receives posted, `moved` arrived (their
   * writes started); reqs[k % slots] piece k's, reqs[slots] the trailer. */
  size_t slots, slot, pieces, started, moved;
  int head_len;        /* a send's header length (the trailer word follows it) */
  const char *from;    /* a queued send's bytes in host memory (NULL: through its ring) */
  bool trailer_posted; /* a receive's trailer receive is posted (its stream ended) */
  bool ring_done;      /* a receive: every piece and the trailer in, every write done */
  ferry_status device; /* the first failure of the device's part (a send's trailer says it) */
  bool active;         /* in the `active` list */
  struct request *active_next;
  struct mover *mv;     /* the device's part on a queue of its own (movers, below), or NULL */
  bool mv_failed;       /* its work failed: it is not kept */
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
static entry *table;
static uint32_t table_count, table_cap;
static request *unmatched; /* oldest first */
static request *active;    /* sends queued or through their ring, receives through their ring; oldest first */
static stream *streams;
static size_t stream_count, stream_cap;
static uint64_t pass;

/* With the lock held: q at the end of the active list. */
static void activate(request *q) {
  request **at = &active;
  while (*at)
    at = &(*at)->active_next;
  *at = q;
  q->active_next = NULL;
  q->active = true;
}

/* With the lock held: q out of the active list, if it is there. */
static void deactivate(request *q) {
  if (!q->active) return;
  request **at = &active;
  while (*at != q)
    at = &(*at)->active_next;
  *at = q->active_next;
  q->active = false;
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
  *q = (request){.fn = fn, .hold = *h, .offset = offset, .bytes = bytes, .comm = comm, .peer = peer, .tag = tag};
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
 * 2 GiB (the rings of the messages on their way, at most four slots of a piece
 * each, and a message of whole pieces from a sender with its bytes in host
 * memory: up to two 1 GiB slots), without lending and registering blocks again. */
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
  return st == FERRY_OK ? ferry_event_record(m->ev[e], m->queue) : st;
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
  pthread_mutex_lock(&lock); /* a request given up before its ring was done */
  deactivate(q);
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

/* With the lock held. */
static void stream_end(MPI_Comm comm, bool send, int rank, int tag) {
  for (size_t i = 0; i < stream_count; i++)
    if (streams[i].send == send && streams[i].comm == comm && streams[i].rank == rank && streams[i].tag == tag) {
      streams[i] = streams[--stream_count];
      break;
    }
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

/* Posts the receives of every piece and of the trailer of q's matched message
 * straight into `to`: host memory the CPU addresses (the buffer's own, or its
 * range mapped). */
static void post_pieces(request *q, char *to) {
  size_t n = pieces_of(q->hd.total, q->hd.piece);
  if (!(q->reqs = malloc((n + 1) * sizeof *q->reqs))) {
    drain(&q->hd, q->peer, q->tag, q->comm);
    refuse(q, FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for the %zu requests of %llu bytes", q->fn, n + 1,
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
}

/* ---- rings ---------------------------------------------------------------------------------- */

/* q's ring for its message (q->hd: its length and piece, a send's as a receive's): at most RING
 * slots of a piece each (two for pieces above 64 MiB, which only a sender with
 * every byte in host memory makes), in one staging block, and its MPI requests
 * (the slots' and `extra` more), all MPI_REQUEST_NULL; and its mover. */
static ferry_status ring_make(request *q, size_t extra) {
  size_t total = q->hd.total, piece = q->hd.piece;
  q->pieces = pieces_of(total, piece);
  q->slot = piece < total ? piece : total;
  q->slots = q->pieces < RING ? q->pieces : RING;
  if (q->slot > ((size_t)64 << 20) && q->slots > 2) q->slots = 2;
  q->device = FERRY_OK;
  if (!(q->reqs = malloc((q->slots + extra) * sizeof *q->reqs)) || !(q->staging = block_get(q->slots * q->slot)))
    return ferry__companion_fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory to stage %zu bytes", q->fn,
                                 q->slots * q->slot);
  for (size_t i = 0; i < q->slots + extra; i++)
    q->reqs[i] = MPI_REQUEST_NULL;
  q->nreqs = q->slots + extra;
  if (!q->mv) q->mv = mover_get(&q->hold);
  return FERRY_OK;
}

static char *slot_of(const request *q, size_t k) { return q->staging + (k % q->slots) * q->slot; }

/* The device's part of q failed: kept, for the trailer (a send) and the wait;
 * the pieces still go (the peer expects them all), without the device. */
static void device_failed(request *q, ferry_status st) {
  if (q->device == FERRY_OK) q->device = st;
  keep_failure(q, st);
  q->mv_failed = q->mv != NULL;
}

/* Starts piece k's move between the device and its slot: on q's mover (its
 * completion in the mover's event k % MOVER_EVENTS), else synchronously. */
static void piece_start(request *q, bool to_device, size_t k) {
  if (q->device != FERRY_OK) return;
  size_t at = q->offset + k * q->hd.piece, len = piece_len(q->hd.total, q->hd.piece, k);
  ferry_status st =
      q->mv ? mover_start(q->mv, q->fn, &q->hold, to_device, at, slot_of(q, k), len, (int)(k % MOVER_EVENTS))
            : device_part(q->fn, &q->hold, to_device, at, slot_of(q, k), len);
  if (st != FERRY_OK) device_failed(q, st);
}

/* Has piece k's move between the device and its slot completed? */
static bool piece_moved(request *q, size_t k) {
  if (!q->mv || q->device != FERRY_OK) return true;
  ferry_status st = ferry_event_query(q->mv->ev[k % MOVER_EVENTS]);
  if (st == FERRY_NOT_READY) return false;
  if (st != FERRY_OK) device_failed(q, st);
  return true;
}

/* q's ring is through (lock held): its mover and its staging go back for the
 * next messages now, not at q's wait, so that a window of messages takes a ring
 * or two at a time (a window of 64 held 64 staging blocks and 64 queues until
 * its waits, beyond what is kept: each message made and pinned a block and made
 * a queue, and ran at a tenth of MPI's speed). Only once neither the device nor
 * MPI uses a slot any more. */
static void ring_release(request *q) {
  mover_end(q);
  block_put(q->staging);
  q->staging = NULL;
}

/* An MPI call of a ring failed: its request ends with MPI's words. */
static void ring_failed_mpi(request *q, const char *call, int rc) {
  ferry_status st = mpi_failed(q->fn, call, rc);
  q->result = FERRY_OK; /* MPI's failure comes first */
  keep_failure(q, st);
}

/* ---- sending ----------------------------------------------------------------------------- */

/* May q, a send, post its header now (lock held)? Not while a message in
 * pieces to the same place is on its way, nor before an earlier send to it. */
static bool send_may_start(const request *q) {
  if (stream_busy(q->comm, true, q->peer, q->tag)) return false;
  for (const request *o = active; o && o != q; o = o->active_next)
    if (o->state == REQ_QUEUED && o->comm == q->comm && o->peer == q->peer && o->tag == q->tag) return false;
  return true;
}

/* Posts q's header (lock held), with its pieces and trailer where its bytes
 * are all in host memory (q->from): REQ_SEND; else makes its ring (only a
 * message on its way has one: a window of them to one place takes one ring at
 * a time) and marks the stream: REQ_SENDING. */
static void send_begin(request *q) {
  size_t n = q->hd.piece ? pieces_of(q->bytes, q->hd.piece) : 0;
  ferry_status st = q->from ? FERRY_OK : ring_make(q, 2);
  if (st == FERRY_OK && !q->from && !stream_add(q->comm, true, q->peer, q->tag))
    st = ferry__companion_fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory to note a message in pieces", q->fn);
  if (st != FERRY_OK) {
    refuse(q, st, "%s", ferry_last_error()); /* nothing was posted */
    return;
  }
  int rc = MPI_Isend(q->head, q->head_len, MPI_BYTE, q->peer, q->tag, q->comm, &q->reqs[0]);
  for (size_t k = 0; rc == MPI_SUCCESS && q->from && k < n; k++)
    rc = MPI_Isend(q->from + k * q->hd.piece, (int)piece_len(q->bytes, q->hd.piece, k), MPI_BYTE, q->peer, q->tag,
                   q->comm, &q->reqs[1 + k]);
  if (rc == MPI_SUCCESS && q->from && n > 0)
    rc = MPI_Isend(q->head + q->head_len, 1, MPI_INT64_T, q->peer, q->tag, q->comm, &q->reqs[1 + n]);
  q->state = q->from ? REQ_SEND : REQ_SENDING;
  if (rc != MPI_SUCCESS) {
    /* What was posted goes out; the receiver then finds a message cut short only
     * if MPI itself failed midway, which MPI's error handler has seen first. */
    ring_failed_mpi(q, "MPI_Isend", rc);
    if (!q->from) stream_end(q->comm, true, q->peer, q->tag);
    q->state = REQ_SEND;
  }
}

/* Moves a send on (lock held): a queued one posts its header once it may; a
 * ring reads piece k into its slot once the send of the piece the slot held has
 * completed, and posts it once read; after the last, the trailer (what the
 * device's reads came to) ends the stream: REQ_SEND, its mover given back,
 * active until MPI has sent every slot's last piece, then its staging goes back
 * (ring_release) and it leaves the active list. */
static void send_step(request *q) {
  if (q->state == REQ_QUEUED) {
    if (!send_may_start(q)) return;
    send_begin(q);
  }
  if (q->state == REQ_SEND && q->staging && q->result == FERRY_OK) {
    int flag = 0, rc = MPI_Testall((int)q->slots, &q->reqs[1], &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      ring_failed_mpi(q, "MPI_Testall", rc); /* the wait waits for what is posted, then the staging goes */
    } else if (!flag) {
      return;
    } else {
      ring_release(q);
    }
  }
  if (q->state != REQ_SENDING) {
    deactivate(q);
    return;
  }
  int rc = MPI_SUCCESS;
  const char *call = "MPI_Isend";
  for (bool moving = true; moving && rc == MPI_SUCCESS;) {
    moving = false;
    for (; q->moved < q->started && piece_moved(q, q->moved); q->moved++, moving = true) {
      size_t k = q->moved;
      if ((rc = MPI_Isend(slot_of(q, k), (int)piece_len(q->hd.total, q->hd.piece, k), MPI_BYTE, q->peer, q->tag,
                          q->comm, &q->reqs[1 + k % q->slots])) != MPI_SUCCESS)
        break;
    }
    while (rc == MPI_SUCCESS && q->started < q->pieces) {
      size_t k = q->started;
      if (k >= q->slots) {
        int flag = 0;
        if (k - q->slots >= q->moved) break; /* the slot's piece is not even posted */
        if ((rc = MPI_Test(&q->reqs[1 + k % q->slots], &flag, MPI_STATUS_IGNORE)) != MPI_SUCCESS) call = "MPI_Test";
        if (rc != MPI_SUCCESS || !flag) break;
      }
      piece_start(q, false, k);
      q->started++;
      moving = true;
    }
  }
  if (rc == MPI_SUCCESS && q->moved == q->pieces) {
    int64_t word = q->device;
    memcpy(q->head + q->head_len, &word, sizeof word);
    rc = MPI_Isend(q->head + q->head_len, 1, MPI_INT64_T, q->peer, q->tag, q->comm, &q->reqs[1 + q->slots]);
    if (rc == MPI_SUCCESS) {
      stream_end(q->comm, true, q->peer, q->tag);
      q->state = REQ_SEND;
      mover_end(q); /* every piece was read (piece_moved) */
      send_step(q);
      return;
    }
  }
  if (rc != MPI_SUCCESS) {
    ring_failed_mpi(q, call, rc);
    stream_end(q->comm, true, q->peer, q->tag);
    q->state = REQ_SEND;
    deactivate(q);
  }
}

/* ---- receiving through a ring ------------------------------------------------------------ */

/* Moves a receive through its ring on (lock held): piece k's receive is posted
 * once the device's write out of its slot (of the piece before it there) is
 * done, and its write starts once it has arrived; after the last piece's
 * receive the trailer's, which ends the stream; done once the trailer is in
 * and every write has completed (ring_done, out of the active list). */
static void recv_step(request *q) {
  int rc = MPI_SUCCESS;
  const char *call = "MPI_Test";
  for (bool moving = true; moving && rc == MPI_SUCCESS;) {
    moving = false;
    while (q->moved < q->started) {
      int flag = 0;
      if ((rc = MPI_Test(&q->reqs[q->moved % q->slots], &flag, MPI_STATUS_IGNORE)) != MPI_SUCCESS || !flag) break;
      piece_start(q, true, q->moved);
      q->moved++;
      moving = true;
    }
    while (rc == MPI_SUCCESS && q->started < q->pieces) {
      size_t k = q->started;
      if (k >= q->slots && (k - q->slots >= q->moved || !piece_moved(q, k - q->slots))) break;
      if ((rc = MPI_Irecv(slot_of(q, k), (int)piece_len(q->hd.total, q->hd.piece, k), MPI_BYTE, q->peer, q->tag,
                          q->comm, &q->reqs[k % q->slots])) != MPI_SUCCESS) {
        call = "MPI_Irecv";
        break;
      }
      q->started++;
      moving = true;
    }
  }
  if (rc == MPI_SUCCESS && q->started == q->pieces && !q->trailer_posted) {
    if ((rc = MPI_Irecv(q->head + HEAD_ROOM, 1, MPI_INT64_T, q->peer, q->tag, q->comm, &q->reqs[q->slots])) ==
        MPI_SUCCESS) {
      q->trailer_posted = true;
      stream_end(q->comm, false, q->peer, q->tag); /* the next message from there may be matched */
    } else {
      call = "MPI_Irecv";
    }
  }
  int flag = 0;
  if (rc == MPI_SUCCESS && q->trailer_posted && q->moved == q->pieces &&
      (rc = MPI_Test(&q->reqs[q->slots], &flag, MPI_STATUS_IGNORE)) == MPI_SUCCESS && flag) {
    ferry_status st = q->mv && q->device == FERRY_OK ? ferry_queue_query(q->mv->queue) : FERRY_OK;
    if (st == FERRY_NOT_READY) return;
    if (st != FERRY_OK) device_failed(q, st);
    q->ring_done = true;
    ring_release(q); /* every piece's receive and write completed */
    deactivate(q);
    return;
  }
  if (rc != MPI_SUCCESS) {
    ring_failed_mpi(q, call, rc);
    if (!q->trailer_posted) stream_end(q->comm, false, q->peer, q->tag);
    q->trailer_posted = true;
    q->ring_done = true;
    deactivate(q);
  }
}

/* q, matched, through its ring (lock held): the stream is marked, the first
 * pieces' receives posted. */
static void recv_ring_start(request *q) {
  ferry_status st = ring_make(q, 1);
  if (st == FERRY_OK && !stream_add(q->comm, false, q->peer, q->tag))
    st = ferry__companion_fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory to note a message in pieces", q->fn);
  if (st != FERRY_OK) {
    drain(&q->hd, q->peer, q->tag, q->comm);
    refuse(q, st, "%s", ferry_last_error());
    return;
  }
  q->state = REQ_RECEIVING;
  activate(q);
  recv_step(q);
}

/* Every active request moved on, oldest first (lock held). */
static void progress_all(void) {
  for (request *q = active, *next; q; q = next) {
    next = q->active_next; /* a step may take q (only q) off the list */
    if (q->state == REQ_RECEIVING)
      recv_step(q);
    else
      send_step(q);
  }
}

/* ---- matching ------------------------------------------------------------------------------- */

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
  char *to = NULL;
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
  } else if ((to = q->hold.host ? (char *)q->hold.host + q->offset : map_range(q, q->hd.total, true))) {
    post_pieces(q, to);
  } else {
    recv_ring_start(q);
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

/* What any waiting thread does between its polls: matches the unmatched
 * receives (one made earlier may be what a peer waits for before it takes
 * what this thread waits for) and moves every active request on. */
static void others(void) {
  pthread_mutex_lock(&lock);
  if (unmatched) advance();
  if (active) progress_all();
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

/* Whether q is still unmatched after one more pass, which moves every active
 * request on too: what q waits for may come only once a send of this rank's
 * has gone (both ranks sending before they receive). */
static bool still_unmatched(request *q) {
  pthread_mutex_lock(&lock);
  if (q->state == REQ_UNMATCHED) advance();
  if (active) progress_all();
  bool waiting = q->state == REQ_UNMATCHED;
  pthread_mutex_unlock(&lock);
  return waiting;
}

/* ---- the calls that send ------------------------------------------------------------------ */

static ferry_status progress(request *q, bool wait, bool *done, MPI_Status *out_status);

/* q's header, in q->hd and, with the bytes when they fit inside, in q->head,
 * and after it a trailer word 0 (for a message in pieces whose bytes are all
 * read already); q->head_len the header's length. `staged`: the sender reads
 * its device piece by piece. */
static ferry_status make_head(request *q, bool staged) {
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
  q->head_len = (int)len;
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

/* A send of the checked range (a blocking one when `out` is NULL, else made
 * a request there): its header made, its bytes handed to MPI as they are where
 * the CPU addresses them, else through its ring; posted at once, or queued
 * behind an earlier message to the same place. */
static ferry_status send_make(const char *fn, ferry_companion_hold *h, size_t offset, size_t bytes, int dest, int tag,
                              MPI_Comm comm, request **out_q, ferry_mpi_request *out) {
  request *q = request_new(fn, h, offset, bytes, comm, dest, tag);
  if (!q) {
    ferry__companion_release(h);
    return FERRY_ERROR_OUT_OF_MEMORY;
  }
  ferry_status st = FERRY_OK;
  q->state = dest == MPI_PROC_NULL ? REQ_NOTHING : REQ_SEND;
  if (q->state == REQ_SEND) {
    q->from = h->host ? (const char *)h->host + offset : NULL;
    bool staged = bytes > INLINE_MAX && !q->from && !(q->from = map_range(q, bytes, false));
    if ((st = make_head(q, staged)) == FERRY_OK && !staged) {
      if (!q->from) q->from = q->head; /* the bytes are inside the header */
      size_t n = q->hd.piece ? pieces_of(bytes, q->hd.piece) : 0;
      if ((q->reqs = malloc((n + 2) * sizeof *q->reqs))) {
        for (size_t i = 0; i < n + 2; i++)
          q->reqs[i] = MPI_REQUEST_NULL;
        q->nreqs = n + 2;
      } else {
        st = ferry__companion_fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for %zu requests", fn, n + 2);
      }
    }
  }
  if (!q->mapped) debug_path(fn, h, bytes, NULL);
  if (st == FERRY_OK && out) st = publish(q, out);
  if (st != FERRY_OK) {
    request_free(q);
    return st;
  }
  if (q->state == REQ_SEND) {
    pthread_mutex_lock(&lock);
    q->state = REQ_QUEUED;
    activate(q);
    progress_all(); /* posts it where it may go now, and moves the others on */
    pthread_mutex_unlock(&lock);
  }
  *out_q = q;
  return FERRY_OK;
}

ferry_status ferry_mpi_send(ferry_buffer buf, size_t offset, size_t bytes, int dest, int tag, MPI_Comm comm) {
  static const char fn[] = "ferry_mpi_send";
  ferry_companion_hold h;
  ferry_status st = send_checks(fn, buf, offset, bytes, dest, tag, comm, &h);
  if (st != FERRY_OK) return st;
  request *q = NULL;
  if ((st = send_make(fn, &h, offset, bytes, dest, tag, comm, &q, NULL)) != FERRY_OK) return st;
  bool done = false;
  st = progress(q, true, &done, MPI_STATUS_IGNORE);
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
  request *q = NULL;
  return send_make(fn, &h, offset, bytes, dest, tag, comm, &q, out_request);
}

/* ---- the calls that receive ---------------------------------------------------------------- */

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
                               MPI_Comm comm, request **out) {
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

/* Moves a request on, waiting or not; *done once it has ended. */
static ferry_status progress(request *q, bool wait, bool *done, MPI_Status *out_status) {
  const char *fn = q->fn;
  int rc, flag = 0;
  *done = false;
  if (q->state == REQ_UNMATCHED) {
    while (still_unmatched(q)) /* each pass probes, which is MPI's progress (see wait_all) */
      if (!wait) return FERRY_OK;
  }
  /* A ring (or a queued send) goes on in every waiting call's progress_all; here until it is through. */
  for (;;) {
    pthread_mutex_lock(&lock);
    if (q->active) progress_all();
    bool going = q->active;
    pthread_mutex_unlock(&lock);
    if (!going) break;
    if (!wait) return FERRY_OK;
    if (unmatched) others();
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
    rc = wait ? wait_all((int)q->nreqs, q->reqs) : MPI_Testall((int)q->nreqs, q->reqs, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      *done = true;
      return mpi_failed(fn, wait ? "MPI_Waitall" : "MPI_Testall", rc);
    }
    if (!wait && !flag) return FERRY_OK;
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
  case REQ_RECEIVING: {
    *done = true;
    if (q->result != FERRY_OK) {
      /* MPI's failure or the device's: what MPI still has posted into the ring ends before the ring goes. */
      if (q->nreqs) wait_all((int)q->nreqs, q->reqs);
      return ferry__companion_fail(q->result, "%s", q->why);
    }
    int64_t word;
    memcpy(&word, q->head + HEAD_ROOM, sizeof word);
    st = trailer_status(fn, word, q->peer);
    break;
  }
  case REQ_INLINE:
    *done = true;
    st = device_part(fn, &q->hold, true, q->offset, q->head + sizeof(header), q->hd.total);
    break;
  case REQ_UNMATCHED:
  case REQ_QUEUED:
  case REQ_SENDING: return FERRY_OK; /* not reached */
  }
  if (st == FERRY_OK) set_status(out_status, q->peer, q->tag, q->hd.total);
  return st;
}

ferry_status ferry_mpi_recv(ferry_buffer buf, size_t offset, size_t bytes, int source, int tag, MPI_Comm comm,
                            MPI_Status *out_status) {
  request *q = NULL;
  ferry_status st = recv_start("ferry_mpi_recv", buf, offset, bytes, source, tag, comm, &q);
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
  ferry_status st = recv_start(fn, buf, offset, bytes, source, tag, comm, &q);
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
    deactivate(q);
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
