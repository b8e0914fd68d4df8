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
/* ferry__enter, then a check that `device` is a device of the running session
 * (the sentence names `fn`); on failure nothing is held. */
ferry_status ferry__enter_device(const ferry_device *device, const char *fn);
void ferry__leave(void);
/* The session's device at `index`, NULL past the last; inside the gate only. */
ferry_device *ferry__device_at(size_t index);
/* ferry_alloc_host_ptr inside the gate (DLPack imports of host memory). */
ferry_status ferry__alloc_host_ptr_in(ferry_device *device, ferry_array host, ferry_buffer *out_buffer,
                                      ferry_refusal *out_refusal);

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

/* A device's transfer engine (engine.c): its staging ring and figures. */
struct ferry_engine {
  pthread_mutex_t lock; /* held for a whole staged transfer: the ring is the device's one at a time */
  char *ring;           /* staging memory, a block of the pinned registry; NULL until first use */
  size_t ring_bytes;
  size_t ring_next;      /* the slot after the last one the device's last staged transfer used */
  bool ring_failed;      /* no staging memory could be had: direct transfers only */
  size_t piece_override; /* FERRY_STAGE_BYTES, 0 if unset */
  size_t min_override;   /* FERRY_STAGE_MIN */
  bool min_set;
  ferry_figures figures[2]; /* per ferry_dma_dir: written once under lock, then `measured` set */
  _Atomic bool measured[2];
  unsigned reports; /* staged transfers described under FERRY_DEBUG=engine */
};

/* The statistics' three kinds of transfer (stats.c). */
typedef enum ferry_direction { FERRY_H2D, FERRY_D2H, FERRY_D2D, FERRY_DIRECTIONS } ferry_direction;

struct ferry_device_state {
  struct ferry_engine engine;
  bool pin_misaligned; /* the backend's pin_alloc gave an unaligned block once: ask with room to align */
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
/* Frees the device's staging ring (before the backend's destroy); the device stays usable. */
void ferry__engine_device_release(ferry_device *dev);
void ferry__engine_device_destroy(ferry_device *dev);
/* Host memory to or from one allocation: ferry_mem.host copied by the core,
 * pinned memory by one DMA, pageable memory by the driver's call or through
 * the staging ring, whichever the device's figures say is faster. */
ferry_status ferry__engine_write(ferry_device *dev, ferry_mem *dst, size_t offset, const void *src, size_t bytes);
ferry_status ferry__engine_read(ferry_device *dev, const ferry_mem *src, size_t offset, void *dst, size_t bytes);
/* Between allocations of two devices that have no peer copy for each other:
 * the source's DMA into pinned memory the destination's DMA reads, overlapped
 * piece by piece. */
ferry_status ferry__engine_copy(ferry_device *sdev, const ferry_mem *src, size_t so, ferry_device *ddev, ferry_mem *dst,
                                size_t doff, size_t bytes);

/* How a transfer of `bytes` between pageable memory and a device runs. */
typedef struct ferry_plan {
  bool direct;  /* by the driver's own call; else through the staging ring */
  bool measure; /* the device's figures for this direction are to be measured first */
  size_t piece; /* the piece size when staged (also when direct: for a backend that refuses) */
} ferry_plan;

/* engine_plan.c: the choice of path and piece size, from the device's figures
 * or the FERRY_STAGE_* overrides. */
ferry_plan ferry__engine_plan(ferry_device *dev, ferry_dma_dir dir, size_t bytes);
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
  ferry_device *device;
  ferry_mem mem;
  void *host_array; /* zero-copy and host-ptr buffers: the user's array */
  size_t length, elem_size, bytes;
  size_t class_bytes; /* the cache class mem came from; 0 when not cacheable */
  uint64_t serial;    /* "buffer 7" in messages: the 7th buffer made */
  /* Made by alloc_zero_copy or alloc_host_ptr: a transfer from or to its own array
   * synchronises instead of copying. Whether it IS the array (no transfer needed,
   * ferry_is_zero_copy) is another fact: mem.flags & FERRY_MEM_ZERO_COPY. */
  bool over_host_array;
  _Atomic uint32_t holds; /* references among state's that DLPack tensors hold (ferry__hold) */
  void *foreign;          /* FERRY_MEM_FOREIGN memory: dlpack.c's record of its owner */
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
 * belongs to; ferry_shutdown waits for transfers but not for these, releases the
 * memory they hold, and ends the session, after which ferry__held_slot finds
 * nothing and ferry__release_held does nothing. No reference is taken by
 * ferry__held_slot. Must not race ferry_shutdown (a documented rule). */
ferry_status ferry__hold(ferry_buffer b, const char *fn, ferry_slot **out_slot, uint64_t *out_session);
ferry_slot *ferry__held_slot(ferry_buffer b, uint64_t session);
void ferry__release_held(ferry_buffer b, uint64_t session);
/* The session now; moves on at every ferry_shutdown. */
uint64_t ferry__handles_session(void);

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
/* Releases every block (at shutdown, before the devices go). */
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
