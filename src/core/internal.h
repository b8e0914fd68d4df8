/* Core-private declarations: the handle table, the device registry, the
 * allocation cache and statistics. Backends include backend.h only. */
#ifndef FERRY_CORE_INTERNAL_H
#define FERRY_CORE_INTERNAL_H

#include "backend.h"

#include <pthread.h>

/* ---- registry ---------------------------------------------------------- */

/* Registers an extra backend (tests' fault-injecting backend) before ferry_init.
 * It is numbered after the built-in ones and kept even when FERRY_BACKENDS is
 * set. Returns FERRY_ERROR_INVALID_ARGUMENT after init or when the table is full. */
FERRY_API ferry_status ferry__register_backend(const ferry_backend *backend);

/* The backends settings are collected from: the built-in ones, then those
 * registered; NULL past the last. */
const ferry_backend *ferry__backend_at(size_t index);

/* FERRY_BACKENDS's check: names of this build's backends, each once, at least one. */
bool ferry__backends_check(const char *value, char *why, size_t why_size);

/* ---- the gate (registry.c) --------------------------------------------- */

/* Every public call that uses a device, or the registry, runs between
 * ferry__enter and ferry__leave, so that ferry_shutdown() can wait for it (and
 * calls that arrive during a shutdown wait, then start ferry again). Transfers do
 * not enter: the reference they hold on their buffers holds the shutdown back.
 * ferry__enter initialises on first use; on failure nothing is held. */
ferry_status ferry__enter(const char *fn);
/* Enters only if ferry is up and no shutdown is under way (false: nothing held),
 * for work that must not start ferry again. */
bool ferry__enter_if_up(void);
/* ferry__enter, then a check that `device` is a device of the running session
 * (the sentence names `fn`); on failure nothing is held. */
ferry_status ferry__enter_device(const ferry_device *device, const char *fn);
void ferry__leave(void);
/* The session's device at `index`, NULL past the last; inside the gate only. */
ferry_device *ferry__device_at(size_t index);
/* ferry_alloc_host_ptr inside the gate (DLPack imports of host memory). */
ferry_status ferry__alloc_host_ptr_in(ferry_device *device, ferry_array host, ferry_buffer *out_buffer,
                                      ferry_refusal *out_refusal);

/* ---- callbacks into the program (callbacks.c) --------------------------- */

/* An entry of a thread's list of callbacks to run once the thread is out of
 * every ferry call (an imported DLPack tensor's deleter). Part of the record it
 * runs for: queueing never fails. */
typedef struct ferry_callback {
  struct ferry_callback *next;
  void (*run)(struct ferry_callback *cb);
  bool from_shutdown; /* queued by ferry_shutdown's releases */
} ferry_callback;

/* Queues `run(cb)` on this thread's list. */
void ferry__callback_defer(ferry_callback *cb, void (*run)(ferry_callback *cb));
/* A ferry call of this thread begins or ends (ferry__enter, ferry__leave); the
 * end of the outermost runs the thread's list. */
void ferry__calls_enter(void);
void ferry__calls_leave(void);
/* Runs the thread's list when it is inside no ferry call (the end of a
 * reference's release, which transfers make outside the gate). */
void ferry__callbacks_run_if_outside(void);
/* ferry_shutdown's beginning and end on this thread: what its releases queue is
 * marked as the shutdown's, and runs at the end, once the init lock is free. */
void ferry__shutdown_enter(void);
void ferry__shutdown_leave(void);
/* Is this thread running a callback that ferry_shutdown queued? ferry does not
 * start again from there. */
bool ferry__in_shutdown_callback(void);

/* ---- fork() (registry.c) ------------------------------------------------ */

/* True in a child forked from a process where ferry was running, until the
 * child's ferry_shutdown() forgets the parent's session. Read with a relaxed
 * load on the transfer path (no system call). */
extern _Atomic bool ferry__forked;
/* FERRY_ERROR_BACKEND and the sentence for a call in such a child. */
ferry_status ferry__fork_refusal(const char *fn);

/* The phases of a fork, for the files whose locks and state the fork handlers
 * look after: PREPARE takes their locks (the state is then consistent), PARENT
 * gives them back, CHILD gives them back in the child. */
typedef enum ferry_fork_phase { FERRY_FORK_PREPARE, FERRY_FORK_PARENT, FERRY_FORK_CHILD } ferry_fork_phase;
void ferry__handles_fork(ferry_fork_phase phase);
void ferry__options_fork(ferry_fork_phase phase);
/* The child's ferry_shutdown(): forget the parent's buffers, pinned blocks and
 * copy threads without calling a driver (their memory is the parent's drivers'). */
void ferry__handles_forget(void);

/* ---- host allocations of the core's own tables ------------------------- */

/* realloc, for the core's own tables (handle chunks, host-pointer ranges), so
 * that tests can make them fail. */
void *ferry__core_alloc(void *old, size_t bytes);
/* Test hook: the next `count` calls of ferry__core_alloc fail. */
void ferry__fail_core_allocs(unsigned count);

/* ---- settings (options.c) ---------------------------------------------- */

/* Reads and checks every setting for a new session (the init lock held); a wrong
 * value fails with FERRY_ERROR_INVALID_ARGUMENT and changes nothing. */
ferry_status ferry__options_load(void);
/* The session ended (or did not start): ferry_set_option is allowed again. */
void ferry__options_end(void);

/* ---- per-device state -------------------------------------------------- */

typedef struct ferry_cache_node {
  struct ferry_cache_node *next;
  ferry_mem mem;
  size_t class_bytes;
} ferry_cache_node;

#define FERRY_CACHE_BUCKETS 256

/* What the engine measured of one device in one direction (engine_plan.c):
 * times in seconds, rates in bytes per second. */
typedef struct ferry_figures {
  bool measured;
  double direct_rate;           /* the driver's own transfer from or to pageable memory (0: none) */
  double copy_fixed, copy_rate; /* a host copy on the copy threads, into or out of pinned memory */
  double dma_fixed, dma_rate;   /* a DMA between pinned memory and the device, start to wait */
  double dma_issue;             /* the time dma_start takes to return: the engine thread is busy for it */
} ferry_figures;

/* A staging ring: a block of the pinned registry that one staged transfer
 * holds at a time (engine.c's pool). */
typedef struct ferry_ring {
  struct ferry_ring *next; /* in the pool's free list */
  char *base;
  size_t bytes;
  size_t next_slot; /* the slot after the last one the ring's last transfer used */
} ferry_ring;

/* A device's transfer engine (engine.c): its pool of staging rings and its figures. */
struct ferry_engine {
  pthread_mutex_t lock;         /* the pool */
  pthread_cond_t ring_returned; /* a ring went back to the pool */
  ferry_ring *free_rings;       /* rings no transfer holds */
  unsigned ring_count;          /* rings made, held or free */
  bool ring_failed;             /* pinning a new ring failed: make no more */
  pthread_mutex_t measure_lock; /* one transfer measures the device at a time */
  pthread_mutex_t figures_lock; /* figures: written by a measurement, copied by the plan */
  size_t piece_override;        /* FERRY_STAGE_BYTES, 0 if unset */
  size_t min_override;          /* FERRY_STAGE_MIN */
  bool min_set;
  ferry_figures figures[2]; /* per ferry_dma_dir, under figures_lock; `measured` set once there are some */
  double copy_seen[2];      /* the host copy rate large staged transfers reached, averaged (0: none yet),
                               under figures_lock: the plan's copy rate is at most this */
  _Atomic bool measured[2];
  _Atomic unsigned rounds[2]; /* measurements taken: the best of the first few is kept (engine_plan.c) */
  _Atomic unsigned reports;   /* staged transfers described under FERRY_DEBUG=engine */
};

/* The statistics' three kinds of transfer (stats.c). */
typedef enum ferry_direction { FERRY_H2D, FERRY_D2H, FERRY_D2D, FERRY_DIRECTIONS } ferry_direction;

struct ferry_device_state {
  struct ferry_engine engine;
  /* The synchronous calls' lanes, one per ferry_dma_dir (copies within the
   * device and fills take the TO_DEVICE one); NULL on devices without lanes. */
  ferry_lane *sync_lane[2];
  /* The device's default queue (queue.c), made by the first ferry_queue_default;
   * the synchronous calls wait for its work. */
  _Atomic(struct ferry_queue_obj *) default_queue;
  pthread_mutex_t default_lock;   /* making the default queue */
  pthread_mutex_t queues_lock;    /* `queues` */
  struct ferry_queue_obj *queues; /* every queue of the device, the default one included */
  bool pin_misaligned;            /* the backend's pin_alloc gave an unaligned block once: ask with room to align */
  pthread_mutex_t cache_lock;
  ferry_cache_node *cache[FERRY_CACHE_BUCKETS];
  ferry_cache_node *spare_nodes; /* nodes kept for the next put: no malloc on the free path */
  uint64_t cache_limit;          /* bytes the cache may hold */
  _Atomic uint64_t live_buffers, bytes_in_use, bytes_cached, peak_bytes_in_use;
  _Atomic uint64_t bytes_owned; /* CPU devices: bytes of live buffers with memory of their own (kept <= total_memory) */
  /* Transfers counted by threads without a record of their own (stats.c). */
  _Atomic uint64_t shared_bytes[FERRY_DIRECTIONS], shared_count[FERRY_DIRECTIONS];
  uint64_t session; /* the session the device belongs to (ferry__handles_session) */
};

ferry_status ferry__device_state_init(ferry_device *dev);
void ferry__device_state_destroy(ferry_device *dev);
/* Test hook: the device's total_memory (ferry_device_info's), so that tests can
 * reach it without allocating the machine's memory. */
void ferry__device_set_total_memory(ferry_device *dev, uint64_t bytes);

/* In a forked child: frees the core's state of a device of the parent's session
 * without calling the backend (its cached blocks are the parent's driver's). */
void ferry__device_state_forget(ferry_device *dev);

/* Device memory through the cache: a cached block of the right class, else the
 * backend's alloc (with the cache released and a second try on out-of-memory). */
ferry_status ferry__mem_alloc(ferry_device *dev, size_t bytes, ferry_mem *out, size_t *out_class);
/* Gives memory back: to the cache when it came from a class, else to the backend. */
ferry_status ferry__mem_release(ferry_device *dev, ferry_mem *mem, size_t class_bytes);
/* Empties the device's cache into the backend; the first driver failure is returned. */
ferry_status ferry__cache_trim(ferry_device *dev);

/* Counts one transfer of `bytes` on dev (the destination's, for d2d), in this
 * thread's own record: no shared cache line, no locked instruction. */
void ferry__count_transfer(ferry_device *dev, ferry_direction dir, uint64_t bytes);
/* The device's totals this session, every thread's records added up. */
void ferry__transfer_totals(const ferry_device *dev, uint64_t bytes[FERRY_DIRECTIONS],
                            uint64_t count[FERRY_DIRECTIONS]);

/* Inline: the allocation path counts every call. */
static inline void ferry__stat_add(_Atomic uint64_t *counter, uint64_t v) {
  atomic_fetch_add_explicit(counter, v, memory_order_relaxed);
}

/* ---- the transfer engine (engine.c, engine_plan.c) ------------------------ */

void ferry__engine_device_init(ferry_device *dev);
/* Frees the device's staging rings (before the backend's destroy); the device stays usable. */
void ferry__engine_device_release(ferry_device *dev);
void ferry__engine_device_destroy(ferry_device *dev);
/* Host memory to or from one allocation, on `lane`, complete on return:
 * ferry_mem.host copied by the core, pinned memory by one DMA, pageable memory
 * by the driver's call or through a staging ring, whichever the device's
 * figures say is faster. */
ferry_status ferry__engine_write(ferry_device *dev, ferry_lane *lane, ferry_mem *dst, size_t offset, const void *src,
                                 size_t bytes);
ferry_status ferry__engine_read(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t offset, void *dst,
                                size_t bytes);
/* The two ends of a copy between devices, each with the lane its work goes on. */
typedef struct ferry_copy_ends {
  ferry_device *sdev;
  ferry_lane *slane;
  const ferry_mem *src;
  size_t so;
  ferry_device *ddev;
  ferry_lane *dlane;
  ferry_mem *dst;
  size_t doff, n;
} ferry_copy_ends;
/* Between allocations of two devices that have no peer copy for each other:
 * the source's DMA into pinned memory the destination's DMA reads, overlapped
 * piece by piece; complete on return. */
ferry_status ferry__engine_copy(const ferry_copy_ends *c);

/* Waits for a ticket and releases it (nothing for ticket 0). */
ferry_status ferry__ticket_finish(ferry_device *dev, ferry_ticket t);
/* ticket_query where the backend has it, else ticket_wait; FERRY_OK for ticket 0. */
ferry_status ferry__ticket_poll(ferry_device *dev, ferry_ticket t);
/* Seconds on the monotonic clock. */
double ferry__now(void);

/* A staging ring of the device's pool, held until ferry__ring_give; waits while
 * every ring is taken; NULL when the device has none and none can be pinned. */
ferry_ring *ferry__ring_take(ferry_device *dev);
void ferry__ring_give(ferry_device *dev, ferry_ring *ring);
/* The host copy of len bytes of a transfer of n bytes into a slot of the ring,
 * on the copy threads: with stores that bypass the caches where the transfer
 * fits the ring and a DMA (`dma`) reads the slot, plain stores otherwise
 * (engine.c says why). */
void ferry__ring_copy_in(const ferry_ring *r, size_t n, bool dma, void *slot, const void *src, size_t len);

/* One device's end of a staged transfer. */
typedef struct ferry_side {
  ferry_device *dev;
  ferry_lane *lane;
  ferry_mem *mem;
  size_t offset;     /* of the transfer in mem */
  bool dma;          /* the device reaches the ring by DMA; else its driver's call moves each piece */
  ferry_pinned ring; /* the ring's first byte as the device sees it */
} ferry_side;
ferry_side ferry__side_of(ferry_device *dev, ferry_lane *lane, ferry_mem *mem, size_t offset, char *ring,
                          size_t ring_bytes);
/* Slots of `piece` bytes in a ring (at most 16), and the length of piece i of a transfer. */
unsigned ferry__slot_count(size_t ring_bytes, size_t piece);
size_t ferry__piece_len(size_t total, size_t piece, size_t i);
/* Can the device reach [ptr, ptr + n) by DMA? Fills *pin. The driver is asked
 * about memory the registry does not know only with ask_driver. */
bool ferry__pinned_for(ferry_device *dev, const void *ptr, size_t n, bool ask_driver, ferry_pinned *pin);

/* How a transfer of `bytes` between pageable memory and a device runs. */
typedef struct ferry_plan {
  bool direct;  /* by the driver's own call; else through the staging ring */
  bool measure; /* the device's figures for this direction are to be measured first */
  size_t piece; /* the piece size when staged (also when direct: for a backend that refuses) */
} ferry_plan;

/* engine_plan.c: the choice of path and piece size, from the device's figures
 * or the FERRY_STAGE_* overrides. */
ferry_plan ferry__engine_plan(ferry_device *dev, ferry_dma_dir dir, size_t bytes);
/* Does the device want another round of measuring for `dir` (fewer than the rounds kept)? */
bool ferry__engine_wants_round(struct ferry_engine *e, ferry_dma_dir dir);
/* Prints the device's figures for `dir` and the plans they give (FERRY_DEBUG=engine). */
void ferry__engine_report(ferry_device *dev, ferry_dma_dir dir);
/* Estimated seconds for `bytes` through the ring in pieces of `piece` (the model). */
double ferry__engine_estimate(const ferry_figures *f, size_t bytes, size_t piece);

/* What the engine has moved by host copies (bytes memcpy'd into or out of
 * staging memory), for tests and benchmarks. */
uint64_t ferry__engine_host_copied(void);
/* The device's figures for one direction (measured false until they are). */
ferry_figures ferry__engine_figures(ferry_device *dev, ferry_dma_dir dir);

/* ---- handles ----------------------------------------------------------- */

/* A live buffer. Slots live in chunks that never move, so a pointer to a slot
 * stays valid while a reference is held. */
typedef struct ferry_slot {
  _Atomic uint64_t state; /* generation << 32 | references; generation odd = live */
  uint32_t next_free;
  uint32_t index; /* this slot's place in the table */
  ferry_kind kind;
  /* Made by alloc_zero_copy or alloc_host_ptr: a transfer from or to its own array
   * synchronises instead of copying. Whether it IS the array (no transfer needed,
   * ferry_is_zero_copy) is another fact: mem.flags & FERRY_MEM_ZERO_COPY. */
  bool over_host_array;
  ferry_device *device;
  ferry_mem mem;
  void *host_array; /* zero-copy and host-ptr buffers: the user's array */
  size_t length, elem_size, bytes;
  size_t class_bytes; /* the cache class mem came from; 0 when not cacheable */
  uint64_t serial;    /* "buffer 7" in messages: the 7th buffer made */
  /* References among state's that DLPack tensors hold (ferry__hold): generation
   * << 32 | count, the generation being the live one they were taken in. A
   * tensor's deleter and ferry_shutdown each take a reference out of it with one
   * atomic operation, so that exactly one of the two drops it. */
  _Atomic uint64_t holds;
  void *foreign; /* FERRY_MEM_FOREIGN memory: dlpack.c's record of its owner */
} ferry_slot;

/* Makes the table on first use; it then lasts as long as the process. */
ferry_status ferry__handles_init(void);
/* Frees every live buffer (reporting them when `report_leaks`), after the
 * transfers still holding them have returned; no call may start one meanwhile
 * (the gate is closed). The slots stay, each at its next generation. */
void ferry__handles_shutdown(bool report_leaks);

/* A fresh slot with one reference (the owner's); fill it, then publish. A
 * failure's sentence names `fn`. */
ferry_status ferry__slot_new(const char *fn, ferry_slot **out_slot, uint32_t *out_index);
/* Makes a filled slot reachable by its handle. */
ferry_buffer ferry__slot_publish(ferry_slot *slot, uint32_t index);
/* Returns an unpublished slot to the free list (a failed allocation). */
void ferry__slot_abandon(ferry_slot *slot, uint32_t index);

/* Takes a reference on the buffer's slot, or fails with STALE_BUFFER naming `fn`. */
ferry_status ferry__acquire(ferry_buffer b, const char *fn, ferry_slot **out_slot);
/* Like ferry__acquire without an error sentence (the info functions). */
ferry_slot *ferry__peek(ferry_buffer b);
void ferry__release(ferry_slot *slot);
/* Takes another reference on a slot that the caller holds one on already (a
 * companion's hold, whose buffer may have been freed meanwhile). */
void ferry__slot_ref(ferry_slot *slot);
/* Drops the owner's reference and marks the handle stale; the memory goes back
 * when the last reference is dropped. */
ferry_status ferry__retire(ferry_buffer b, const char *fn);

/* Test hook (ferry shut down): moves every slot's generation, and that of slots
 * made later, up to at least `gen`, as if each had been freed and reused that
 * often; generations never move back. Tests reach the generation limit with it
 * instead of 2^31 allocations. */
void ferry__handles_skip_generations(uint32_t gen);
/* The generation at which a slot is retired (its handles could otherwise repeat). */
#define FERRY_GENERATION_LIMIT 0xFFFFFFF0u

/* Writes "buffer 7 (1024 float32 elements) on device 0 (cuda: NVIDIA H200)". */
const char *ferry__buffer_text(const ferry_slot *slot, char buf[512]);

/* Releases the memory of a slot whose last reference is gone. */
ferry_status ferry__slot_destroy_memory(ferry_slot *slot);

/* References that may outlive the session (a DLPack export's). ferry__hold takes
 * one like ferry__acquire (failing the same way) and says which session it
 * belongs to; ferry_shutdown waits for transfers but not for these, takes them
 * over, releases the memory they held, and ends the session, after which
 * ferry__held_slot finds nothing and ferry__release_held does nothing.
 * ferry__release_held may run on any thread at any time, also while
 * ferry_shutdown runs: the reference is dropped exactly once, by one of the two.
 * ferry__held_slot takes no reference and runs inside the gate. */
ferry_status ferry__hold(ferry_buffer b, const char *fn, ferry_slot **out_slot, uint64_t *out_session);
ferry_slot *ferry__held_slot(ferry_buffer b, uint64_t session);
void ferry__release_held(ferry_buffer b);
/* The session now; moves on at every ferry_shutdown. */
uint64_t ferry__handles_session(void);

/* ---- operations (ops.c): what every transfer does, now or on a queue -------- */

typedef enum ferry_op_kind {
  FERRY_OP_WRITE,  /* host -> dst */
  FERRY_OP_READ,   /* src -> host */
  FERRY_OP_COPY,   /* src -> dst */
  FERRY_OP_FILL,   /* pattern -> dst */
  FERRY_OP_MARKER, /* queues only: completes an event's capture */
  FERRY_OP_WAIT,   /* queues only: waits for an event's capture */
} ferry_op_kind;

struct ferry_capture;

/* One operation, its arguments checked. The slots carry a reference each,
 * which the operation's owner releases when it ends (ferry__op_release). */
typedef struct ferry_op {
  ferry_op_kind kind;
  const char *fn; /* the public function, for sentences */
  ferry_slot *dst,
      *src; /* WRITE, FILL: dst; READ: src; COPY: both (the same slot twice for a copy within one buffer) */
  size_t dst_offset, src_offset, bytes;
  void *host;                    /* WRITE's source, READ's destination */
  uint32_t pattern;              /* FILL: the pattern's bytes in memory order, in the low pattern_size bytes */
  unsigned pattern_size;         /* 1, 2 or 4 */
  struct ferry_capture *capture; /* MARKER: the capture it completes; WAIT: the one waited for (a reference) */
} ferry_op;

/* Which lane each device's part of an operation goes on: the queue's lane for
 * the queue's device, else the device's synchronous lane for the direction. */
typedef struct ferry_lanes {
  ferry_device *queue_dev; /* NULL: the synchronous calls' lanes everywhere */
  ferry_lane *queue_lane;
} ferry_lanes;
ferry_lane *ferry__lane_for(ferry_lanes lanes, ferry_device *dev, ferry_dma_dir dir);

/* Runs a WRITE, READ, COPY or FILL to completion on `lanes` and counts it in
 * the statistics; a failure's sentence names op->fn and the buffers. */
ferry_status ferry__op_run(const ferry_op *op, ferry_lanes lanes);
/* A synchronous call's operation (transfer.c): the default queues' work on the
 * devices it touches first, then the operation, complete on return. The
 * references of op are the caller's. */
ferry_status ferry__run_now(ferry_op *op);
/* A WRITE (to_device) or READ of [offset, offset + bytes) of `slot`, from or
 * into `host`; the slot's reference is the caller's to give the operation. */
ferry_op ferry__op_host_transfer(const char *fn, bool to_device, ferry_slot *slot, size_t offset, void *host,
                                 size_t bytes);
/* Drops the references an operation holds (its slots, its capture). */
void ferry__op_release(ferry_op *op);
/* Counts a completed WRITE, READ or COPY in the statistics. */
void ferry__op_count(const ferry_op *op);
/* Does the host range name the buffer's own bytes (a zero-copy or host-ptr
 * buffer addressed through its own array)? */
bool ferry__op_own_bytes(const ferry_slot *slot, size_t offset, const void *host);
/* Fills n bytes at p with the pattern (any alignment). */
void ferry__host_fill(void *p, size_t n, uint32_t pattern, unsigned pattern_size);
/* Puts "fn: buffer ...: " in front of the thread's sentence. */
ferry_status ferry__op_failed(ferry_status st, const ferry_op *op);

/* ---- staged transfers on a queue (stage.c) -------------------------------- */

typedef struct ferry_stage ferry_stage;
/* A staged transfer to prepare: WRITE host -> b, READ a -> host, COPY a -> b;
 * the ring comes from ring_dev's pool. */
typedef struct ferry_stage_request {
  ferry_op_kind kind;
  size_t n;
  char *host;
  ferry_device *ring_dev;
  ferry_device *a_dev;
  ferry_lane *a_lane;
  ferry_mem *a_mem;
  size_t a_offset;
  ferry_device *b_dev;
  ferry_lane *b_lane;
  ferry_mem *b_mem;
  size_t b_offset;
} ferry_stage_request;
/* Can the device's part of a staged transfer be pushed at submission (lanes, DMA, gates)? */
bool ferry__stage_possible(ferry_device *dev);
/* Takes a ring and makes the gates and tickets (may wait for a ring: call it
 * holding no queue's lock). */
ferry_status ferry__stage_prepare(const ferry_stage_request *req, ferry_stage **out);
/* Is side a (else b) pushed at submission? */
bool ferry__stage_ahead(const ferry_stage *st, bool side_a);
/* Pushes the device's part (the queue's lock held, in the queue's order);
 * `start`: a ticket of the queue's earlier work (0: none) that the host's part
 * waits for; *out_final: the ticket of the last DMA into the destination when
 * that side is pushed ahead (its completion is the transfer's). */
ferry_status ferry__stage_push(ferry_stage *st, ferry_ticket start, ferry_device *start_dev, ferry_ticket *out_final);
/* The host's part, on the queue's thread; with `cancel` (or after a failed
 * push) it only raises the gates. */
ferry_status ferry__stage_run(ferry_stage *st, bool cancel);
/* Once the transfer has completed: its tickets, gates and ring go. */
void ferry__stage_free(ferry_stage *st);

/* ---- queue and event handles (objects.c) ---------------------------------- */

typedef enum ferry_object_kind {
  FERRY_OBJECT_NONE,
  FERRY_OBJECT_QUEUE,
  FERRY_OBJECT_EVENT,
  FERRY_OBJECT_KINDS,
} ferry_object_kind;

/* A handle for `object` with one reference, its owner's. */
ferry_status ferry__object_new(ferry_object_kind kind, void *object, const char *fn, uint64_t *out_id);
/* The object of a live handle with a reference added; NULL for a stale or made-up one. */
void *ferry__object_get(ferry_object_kind kind, uint64_t id);
/* Adds a reference for a holder that has one already (live or retired handle). */
void ferry__object_hold(ferry_object_kind kind, uint64_t id);
/* Drops a reference; true when it was the last of a retired handle: the
 * object is then the caller's to free. */
bool ferry__object_put(ferry_object_kind kind, uint64_t id);
typedef enum ferry_retire {
  FERRY_RETIRE_STALE, /* not a live handle: nothing changed */
  FERRY_RETIRE_HELD,  /* stale now; other holders keep the object (the last ferry__object_put frees it) */
  FERRY_RETIRE_LAST,  /* stale now, and the owner's was the last reference: the caller frees the object */
} ferry_retire;
/* Makes the handle stale and drops the owner's reference. */
ferry_retire ferry__object_retire(ferry_object_kind kind, uint64_t id);

/* ---- queues and events (queue.c, event.c) ---------------------------------- */

typedef struct ferry_queue_obj ferry_queue_obj;
typedef struct ferry_capture ferry_capture;

/* The queue of a live handle, with a reference (ferry__queue_unref), or
 * FERRY_ERROR_STALE_HANDLE naming fn. */
ferry_status ferry__queue_acquire(ferry_queue queue, const char *fn, ferry_queue_obj **out);
void ferry__queue_unref(ferry_queue_obj *q);
ferry_device *ferry__queue_device(const ferry_queue_obj *q);
/* Submits a checked operation; takes its references whatever it returns. */
ferry_status ferry__queue_submit(ferry_queue_obj *q, ferry_op *op);
/* A synchronous call's start: waits for the work submitted to the device's
 * default queue; FERRY_ERROR_CANCELLED while it has a failure not reported yet. */
ferry_status ferry__queue_settle_default(ferry_device *dev, const char *fn);
/* ferry_device_synchronize's part: waits for every queue of the device and
 * reports the first failure not yet reported. */
ferry_status ferry__queues_synchronize_device(ferry_device *dev, const char *fn);
/* DLPack's stream protocol: makes later work on `native_queue` (a native queue of
 * the program's, of this device) wait for everything submitted so far to the
 * device's queues: on the device where the backend can (native_wait), else on
 * the host, as ferry_device_synchronize's queue part. Reports a failure of a
 * queue's work as ferry_queue_synchronize would. */
ferry_status ferry__queues_native_wait(ferry_device *dev, uintptr_t native_queue, const char *fn);
/* At shutdown (gate closed), in this order: waits for every queue's work and
 * stops its thread (a failure never reported is printed under `report`);
 * frees every event; gives the lanes back and frees the queues. Their handles
 * are stale from then on. */
void ferry__queues_drain_device(ferry_device *dev, bool report);
void ferry__events_shutdown(void);
void ferry__queues_end_device(ferry_device *dev);
/* Stops the thread that releases what queue threads retired (after the queues ended). */
void ferry__queues_releaser_stop(void);
void ferry__queues_releaser_forget(void);
/* In a forked child: forgets the parent's queues and events without a driver
 * call (their threads are the parent's). */
void ferry__queues_forget_device(ferry_device *dev);
void ferry__events_forget(void);
/* Waits until the capture's work has completed. */
void ferry__capture_wait(ferry_capture *c);
bool ferry__capture_done(ferry_capture *c);
void ferry__capture_unref(ferry_capture *c);

/* ---- foreign memory (DLPack imports, dlpack.c) --------------------------- */

/* A buffer over `mem` (memory ferry did not allocate, flags including
 * FERRY_MEM_FOREIGN) whose release calls dlpack.c's ferry__foreign_release with
 * `foreign`. over_host_array and host_array as for a zero-copy buffer. */
ferry_status ferry__buffer_wrap_foreign(ferry_device *dev, ferry_kind kind, size_t length, const ferry_mem *mem,
                                        void *host_array, bool over_host_array, void *foreign, ferry_buffer *out);
/* Releases a FERRY_MEM_FOREIGN slot's memory: the backend's part, then the owner's deleter. */
ferry_status ferry__foreign_release(ferry_slot *slot);

/* ---- host memory ------------------------------------------------------- */

/* The range [ptr, ptr + bytes) now lies under a host-ptr buffer. FERRY_ERROR_REFUSED
 * (without a sentence: the caller says FERRY_REFUSAL_OVERLAP) when it overlaps one
 * already registered; FERRY_ERROR_OUT_OF_MEMORY (the sentence naming `fn`) when the
 * table cannot grow. */
ferry_status ferry__host_ranges_claim(const char *fn, const void *ptr, size_t bytes);
void ferry__host_ranges_unclaim(const void *ptr);
void ferry__host_ranges_shutdown(void);
void ferry__host_ranges_fork(ferry_fork_phase phase);

/* pinned.c: the one registry of pinned host memory. A block is allocated by
 * one device's pin_alloc (or page-aligned malloc where the device has none or
 * staging does not pay on it) and registered lazily with other devices that
 * DMA from it. `user` blocks are ferry_host_alloc's; the others the engine's. */
ferry_status ferry__pinned_alloc(ferry_device *dev, size_t bytes, bool user, void **out_ptr);
/* Releases a block starting at ptr; false if there is no such block (of that kind). */
bool ferry__pinned_free(void *ptr, bool user);
/* Is [ptr, ptr + bytes) inside a block `dev` can DMA from? Registers the block
 * with dev on first use where the backend can. Fills *out on true. */
bool ferry__pinned_find(ferry_device *dev, const void *ptr, size_t bytes, ferry_pinned *out);
/* The view of `host`, a byte inside the range `base` describes. */
static inline ferry_pinned ferry__pinned_at(const ferry_pinned *base, void *host) {
  return (ferry_pinned){
      .host = host, .token = base->token, .offset = base->offset + (size_t)((char *)host - (char *)base->host)};
}
/* Takes [ptr, ptr + bytes) of someone else's page-aligned host memory into the
 * registry (libferry_mpi's staging): devices register it as they DMA from it, as
 * they do the others' blocks, and ferry never frees it. It must not overlap a
 * block of the registry. Until ferry__pinned_take_back or ferry_shutdown. */
ferry_status ferry__pinned_lend(void *ptr, size_t bytes);
/* Undoes a lend starting at ptr (its registrations released); false if none. */
bool ferry__pinned_take_back(void *ptr);
/* Releases every block (at shutdown, before the devices go); lent memory is
 * only unregistered. */
void ferry__pinned_shutdown(void);
void ferry__pinned_fork(ferry_fork_phase phase);
/* In a forked child: forgets every block without a driver call (only plain host
 * memory that no driver made is freed). */
void ferry__pinned_forget(void);

/* copy_threads.c. A job: tasks 0..count-1, run(ctx, i) each, handed out in order. */
typedef struct ferry_copy_job {
  void (*task)(void *ctx, size_t index);
  void *ctx;
  size_t count;
  _Atomic size_t next;
} ferry_copy_job;
/* Hands the job to the copy threads and returns at once; false when there are
 * none, or another thread's job runs (then run it yourself). The job must stay
 * alive until ferry__copy_threads_finish returns. */
bool ferry__copy_threads_start(ferry_copy_job *job);
/* The caller takes tasks of the job until none is left. */
void ferry__copy_threads_help(ferry_copy_job *job);
/* Runs what is left and waits until every worker has left the job. */
void ferry__copy_threads_finish(ferry_copy_job *job);
void ferry__copy_threads_shutdown(void);
/* In a forked child: the parent's copy threads are not here; the pool starts afresh. */
void ferry__copy_threads_fork(ferry_fork_phase phase);
/* ferry__parallel_memcpy into memory a device is to read by DMA: stores that
 * bypass the caches where the processor has them (SSE2), so that the copy does
 * not first read each destination line. */
void ferry__parallel_copy_for_dma(void *dst, const void *src, size_t n);
/* Keeps the copy threads awake (spinning) between the pieces of a pipeline. */
void ferry__copy_threads_hold(void);
void ferry__copy_threads_release(void);

#endif /* FERRY_CORE_INTERNAL_H */
