/*
 * The contract between the core and a backend.
 *
 * The core validates every argument (handles, kinds, sizes, ranges, overflow),
 * owns the handle table, the device registry, statistics, the allocation cache
 * and the transfer engine (every choice of path, all staging, all pinned host
 * memory). A backend does what only its driver can: allocate, copy within the
 * device, its own transfer from any host memory, pin host memory and DMA
 * between pinned memory and the device. It sees allocations (ferry_mem) and
 * byte ranges that are already known to be in bounds, and it never sees a handle.
 *
 * Adding a backend: a folder src/backends/<name>/ with a `const ferry_backend
 * ferry_backend_<name>` and one line in src/core/backend_list.h.
 */
#ifndef FERRY_CORE_BACKEND_H
#define FERRY_CORE_BACKEND_H

#include "ferry.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define FERRY_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define FERRY_PRINTF(f, a)
#endif

/* One allocation of device memory, as the backend made it. */
enum {
  FERRY_MEM_ZERO_COPY = 1u << 0, /* the core wrapped a host array (native, checked); no backend state */
  FERRY_MEM_HOST_PTR = 1u << 1,  /* made by host_ptr_import over the user's array */
  FERRY_MEM_FOREIGN = 1u << 2,   /* not ferry's (a DLPack import): never given to free or the cache; the
                                    core releases it through dlpack.c, which calls the owner's deleter */
};

typedef struct ferry_mem {
  uintptr_t handle; /* what ferry_device_ptr returns: CUdeviceptr, cl_mem, VkBuffer, host address */
  void *host;       /* non-NULL when the bytes are plain, coherent host memory that the core may read
                       and write directly at any time (native; CUDA registered memory); else NULL */
  void *impl;       /* the backend's own per-allocation state */
  size_t bytes;     /* bytes the backend reserved (at least what was asked) */
  unsigned flags;   /* FERRY_MEM_* */
} ferry_mem;

typedef enum ferry_sync_dir {
  FERRY_SYNC_TO_DEVICE, /* the host is done with the array: hand it to the device (unmap, flush) */
  FERRY_SYNC_TO_HOST,   /* the host wants the array: take it back (map, invalidate, wait) */
} ferry_sync_dir;

/*
 * Moving bytes through pinned host memory (the transfer engine, src/core/engine.c).
 *
 * The core owns every block of pinned host memory (ferry_host_alloc's, and its
 * own staging blocks) in one registry, and runs every pipeline, bounce and
 * cross-device copy itself. A backend offers only what only it can do: pin a
 * block for its device (pin_alloc: memory the driver allocates; pin_register:
 * a block another allocator made), start a copy between pinned memory and
 * device memory (dma_start), and wait for it (dma_wait).
 *
 * A range of pinned memory is given to the backend with the token the backend
 * returned for its block, and the range's offset from the block's base (the
 * address pin_alloc returned or pin_register was given). Memory the driver
 * pinned itself (host_pinned: the program's own cuMemAllocHost memory) comes
 * with token 0 and offset 0.
 */
typedef struct ferry_pinned {
  void *host;      /* the range's first byte */
  uintptr_t token; /* the backend's token for the block holding it */
  size_t offset;   /* of host from the block's base */
} ferry_pinned;

typedef enum ferry_dma_dir {
  FERRY_DMA_TO_DEVICE, /* pinned host memory -> device memory */
  FERRY_DMA_TO_HOST,   /* device memory -> pinned host memory */
} ferry_dma_dir;

/*
 * Asynchronous work: lanes, tickets and gates.
 *
 * A lane is one of the backend's ordered native queues (a CUDA stream, an
 * in-order OpenCL command queue, a chain of Vulkan submissions, a Metal command
 * queue). Work pushed on one lane runs in the order pushed; work on different
 * lanes is unordered unless a lane_wait or a gate orders it. Each ferry queue
 * has a lane of its own, and every device has two more for the synchronous
 * calls (one per direction, none with FERRY_CAP_SYNC_NO_LANES); the core makes
 * them with lane_create. A device
 * without lane_create has no lanes: the core passes NULL for every lane, and
 * each *_start operation does its work before it returns (ticket 0).
 *
 * A ticket stands for work pushed on a lane: it completes when that work and
 * everything pushed on the lane before it has completed. Operations that push
 * work return one in *out when out is not NULL (NULL: none wanted; the work is
 * still pushed). Ticket 0 means "complete already": it is never queried,
 * waited for or released. Every other ticket is released exactly once, with
 * ticket_release, after ticket_wait or ticket_query said it completed (or
 * failed); ticket_wait and ticket_query may be called any number of times
 * before that, from any thread.
 *
 * A gate is a counter that the host raises and that work pushed on lanes
 * waits for: after gate_push(lane, g, v), later work on the lane starts only
 * once gate_raise(g, w) was called with w >= v. The core never makes a lane
 * wait for anything but host progress and work pushed before (so no lane
 * waits for work pushed after it: no deadlock, however the driver maps lanes
 * onto hardware queues). The values the core raises a gate to only grow; a
 * gate starts at 0 and is destroyed once every value pushed on it was raised
 * and the lanes have passed the waits (their later tickets completed).
 *
 * A device that has lanes but no gates (gate_create NULL) gets its work pushed
 * by the core's queue thread as it becomes ready, instead of at submission.
 */
typedef struct ferry_lane ferry_lane; /* the backend's own */
typedef struct ferry_gate ferry_gate; /* the backend's own */
typedef uint64_t ferry_ticket;

/*
 * Operations on one device. Every operation that fails sets the thread's error
 * sentence (ferry__fail) naming the driver call, its code and dev->label, and
 * returns a status; a failed operation leaves nothing allocated. Byte ranges are
 * in bounds of the allocation and bytes > 0 unless said otherwise. Operations
 * may be called from several threads at once, also on one lane (a device's
 * synchronous lanes are shared by every thread's synchronous calls).
 */
typedef struct ferry_device_ops {
  /* ---- required -------------------------------------------------------- */
  ferry_status (*alloc)(ferry_device *dev, size_t bytes, ferry_mem *out); /* bytes > 0 */
  ferry_status (*free)(ferry_device *dev, ferry_mem *mem);                /* not for HOST_PTR or ZERO_COPY mem */
  /* Copy within the device, pushed on `lane`. When src == dst the ranges may
   * overlap only if the device has FERRY_CAP_OVERLAP_COPY; otherwise the core
   * goes through a temporary. */
  ferry_status (*copy_start)(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t so, ferry_mem *dst,
                             size_t doff, size_t bytes, ferry_ticket *out);

  /* ---- optional (NULL: not offered) ------------------------------------- */

  /* The driver's own synchronous transfer between any host memory (pageable,
   * or inside the allocation's own array) and device memory, on `lane` (after
   * the work pushed on it before), complete on return. The core never calls
   * them for memory with ferry_mem.host (it copies that itself).
   * FERRY_ERROR_UNSUPPORTED without a message: the backend cannot move this
   * range directly (no driver call for it, or the host range lies inside the
   * allocation's own array); the core then stages it through pinned memory. A
   * device needs these or dma_start, unless every allocation of it has
   * ferry_mem.host (zero_copy devices). */
  ferry_status (*write)(ferry_device *dev, ferry_lane *lane, ferry_mem *dst, size_t dst_offset, const void *src,
                        size_t bytes);
  ferry_status (*read)(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t src_offset, void *dst,
                       size_t bytes);
  /* The same from pageable memory, pushed on the lane and returning at once
   * (OpenCL's non-blocking writes and reads): the driver reads or writes the
   * host bytes at any time until the ticket completes. Only where the driver
   * itself does this without blocking the caller; FERRY_ERROR_UNSUPPORTED
   * without a message for a range it cannot take (the core stages it). */
  ferry_status (*write_start)(ferry_device *dev, ferry_lane *lane, ferry_mem *dst, size_t dst_offset, const void *src,
                              size_t bytes, ferry_ticket *out);
  ferry_status (*read_start)(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t src_offset, void *dst,
                             size_t bytes, ferry_ticket *out);

  /* Pinned host memory for this device's DMA: pin_alloc allocates `bytes`
   * (any alignment; the core aligns its blocks), pin_register makes a block
   * another allocator made reachable (base and bytes are page-aligned),
   * pin_release undoes either (allocated tells which); each returns a token
   * the core hands back with every range of the block. Without pin_alloc the
   * core's blocks are page-aligned malloc. */
  ferry_status (*pin_alloc)(ferry_device *dev, size_t bytes, void **out_base, uintptr_t *out_token);
  ferry_status (*pin_register)(ferry_device *dev, void *base, size_t bytes, uintptr_t *out_token);
  void (*pin_release)(ferry_device *dev, void *base, size_t bytes, uintptr_t token, bool allocated);
  /* Did the driver pin [ptr, ptr + bytes) itself (the program's own pinned
   * memory)? The core asks once per large transfer from memory it does not
   * know, and then moves it as pinned, with token 0. */
  bool (*host_pinned)(ferry_device *dev, const void *ptr, size_t bytes);
  /* A copy between pinned host memory and [mem_offset, mem_offset + bytes) of
   * mem, pushed on `lane`; the host must not touch the pinned range until the
   * ticket completed (or, without a ticket, a later one of the lane did). */
  ferry_status (*dma_start)(ferry_device *dev, ferry_lane *lane, ferry_dma_dir dir, ferry_mem *mem, size_t mem_offset,
                            const ferry_pinned *host, size_t bytes, ferry_ticket *out);
  /* Sets [offset, offset + bytes) of mem to a repeated pattern of 1, 2 or 4
   * bytes, pushed on `lane`: the pattern is the first pattern_size bytes of
   * `pattern` as it lies in memory (copy them out with memcpy); offset and
   * bytes are multiples of pattern_size. Required of devices with lanes, for
   * every range; on devices without, FERRY_ERROR_UNSUPPORTED without a message
   * lets the core write the pattern itself. */
  ferry_status (*fill_start)(ferry_device *dev, ferry_lane *lane, ferry_mem *mem, size_t offset, size_t bytes,
                             uint32_t pattern, unsigned pattern_size, ferry_ticket *out);
  /* Copy between two devices of this backend, pushed on `lane`, a lane of
   * lane_dev (which is src_dev or dst_dev); FERRY_ERROR_UNSUPPORTED (without a
   * message) lets the core stage the copy through host memory. */
  ferry_status (*peer_start)(ferry_device *lane_dev, ferry_lane *lane, ferry_device *src_dev, const ferry_mem *src,
                             size_t src_offset, ferry_device *dst_dev, ferry_mem *dst, size_t dst_offset, size_t bytes,
                             ferry_ticket *out);

  /* Lanes (see above). lane_destroy is called once every ticket of the lane
   * was released and its work has completed. */
  ferry_status (*lane_create)(ferry_device *dev, ferry_lane **out);
  void (*lane_destroy)(ferry_device *dev, ferry_lane *lane);
  /* What ferry_queue_native reports: .queue (the CUstream, cl_command_queue,
   * VkQueue, id<MTLCommandQueue>) and .queue_family; .device and .context as
   * ferry_device_native. */
  ferry_status (*lane_native)(ferry_device *dev, ferry_lane *lane, ferry_native *out);
  /* A ticket for everything pushed on the lane so far; with `timing`, one that
   * ticket_elapsed can measure from the device's clock. */
  ferry_status (*marker)(ferry_device *dev, ferry_lane *lane, bool timing, ferry_ticket *out);
  /* Makes later work on `native_queue`, a native queue of the program's (a
   * CUstream; DLPack's stream protocol hands one over), wait on the device for
   * `ticket` of this device. Optional: without it the core waits on the host. */
  ferry_status (*native_wait)(ferry_device *dev, ferry_ticket ticket, uintptr_t native_queue);
  /* Makes later work on `lane` wait, on the device, for `ticket` of device
   * `ticket_dev` (which may be another device). FERRY_ERROR_UNSUPPORTED
   * without a message where the driver cannot (the core then waits on the
   * host and opens a gate). */
  ferry_status (*lane_wait)(ferry_device *dev, ferry_lane *lane, ferry_device *ticket_dev, ferry_ticket ticket);
  /* Gates (see above). */
  ferry_status (*gate_create)(ferry_device *dev, ferry_gate **out);
  ferry_status (*gate_push)(ferry_device *dev, ferry_lane *lane, ferry_gate *gate, uint64_t value);
  ferry_status (*gate_raise)(ferry_device *dev, ferry_gate *gate, uint64_t value);
  void (*gate_destroy)(ferry_device *dev, ferry_gate *gate);
  /* Tickets (see above). ticket_query: FERRY_OK when complete, FERRY_NOT_READY
   * (without a message) while not, else the failure of the work, with the
   * driver's words. */
  ferry_status (*ticket_query)(ferry_device *dev, ferry_ticket ticket);
  ferry_status (*ticket_wait)(ferry_device *dev, ferry_ticket ticket);
  void (*ticket_release)(ferry_device *dev, ferry_ticket ticket);
  /* Milliseconds from `start` to `stop`, two completed timing markers of this
   * device, from its own clock. FERRY_ERROR_UNSUPPORTED without a message: the
   * core uses the host's clock. */
  ferry_status (*ticket_elapsed)(ferry_device *dev, ferry_ticket start, ferry_ticket stop, double *out_ms);

  /* A buffer over the user's array (the core already checked alignment against
   * host_ptr_alignment, the length, and overlap with other host-ptr buffers). On
   * success the host owns the array. On refusal: FERRY_ERROR_REFUSED and a reason. */
  ferry_status (*host_ptr_import)(ferry_device *dev, void *host, size_t bytes, ferry_mem *out,
                                  ferry_refusal *out_refusal);
  /* Hand a HOST_PTR allocation to the device or back to the host (no data copy),
   * complete on return; the core calls it once the work before it completed. */
  ferry_status (*host_ptr_sync)(ferry_device *dev, ferry_mem *mem, ferry_sync_dir dir);
  /* Release a HOST_PTR allocation (the array is the user's and stays). */
  ferry_status (*host_ptr_release)(ferry_device *dev, ferry_mem *mem);
  /* Wait for all work on the device, the program's own included (cuCtxSynchronize;
   * default: nothing to wait for). */
  ferry_status (*synchronize)(ferry_device *dev);
  /* Vendor handles (default: zeros). */
  ferry_status (*native)(const ferry_device *dev, ferry_native *out);
  /* Free device memory right now, for out-of-memory messages; 0 if unknown. */
  uint64_t (*free_memory)(ferry_device *dev);
  /* What the driver says about itself (ferry_device_driver_info): the backend
   * fills the strings it knows, and may set free_memory where free_memory above
   * is NULL. *out arrives zeroed, with free_memory from free_memory above. */
  ferry_status (*driver_info)(ferry_device *dev, ferry_driver_info *out);
  /* Give back memory the backend keeps for itself (checked's quarantine of freed
   * buffers), on ferry_device_trim and before an allocation that ran out of memory
   * is tried again. Everything goes back; a problem found on the way (checked: a
   * write after free) is reported afterwards as FERRY_ERROR_BACKEND. */
  ferry_status (*trim)(ferry_device *dev);
  /* [offset, offset + n) of `mem` as host memory the CPU reads (and, with
   * `write`, writes) without a copy until unmap, for libferry_mpi, which hands
   * it to MPI: devices whose memory is the host's behind a buffer object
   * (OpenCL on a CPU). After the work of the device's synchronous calls.
   * FERRY_ERROR_UNSUPPORTED where only a copy could do it. n > 0. */
  ferry_status (*map)(ferry_device *dev, ferry_mem *mem, size_t offset, size_t n, bool write, void **out_ptr);
  /* Ends a map; the device's later work sees what the CPU wrote. */
  ferry_status (*unmap)(ferry_device *dev, ferry_mem *mem, void *ptr);
  /* Check an allocation before a transfer that moves no bytes (zero bytes, a copy
   * onto itself), which the core makes without calling write, read or copy:
   * checked's guard bytes. */
  ferry_status (*check)(ferry_device *dev, const ferry_mem *mem);

  /* DLPack (src/core/dlpack.c). A buffer over memory that ferry did not allocate:
   * `data` is what DLPack's data means on this device (CUdeviceptr, cl_mem) and
   * the tensor's bytes are [byte_offset, byte_offset + bytes) of it. The backend
   * checks that the device can use that memory (the driver knows the pointer as
   * this device's, the cl_mem is of this device's context, the range lies inside
   * it) and fills *out (handle, host, impl, bytes; the core sets the flags). On
   * refusal: FERRY_ERROR_REFUSED and a reason (FERRY_REFUSAL_DEVICE,
   * FERRY_REFUSAL_UNSUPPORTED, FERRY_REFUSAL_DRIVER). NULL: the device imports no
   * foreign device memory (host memory is imported by the core itself). */
  ferry_status (*foreign_import)(ferry_device *dev, uintptr_t data, uint64_t byte_offset, size_t bytes, ferry_mem *out,
                                 ferry_refusal *out_refusal);
  /* Releases what foreign_import made (not the memory: its owner's deleter does). May be NULL. */
  void (*foreign_release)(ferry_device *dev, ferry_mem *mem);
  /* DLPack's name for the device. NULL: the core's (CPU 0 for devices whose
   * memory is host memory; OpenCL, Vulkan, Metal by backend name and index). */
  ferry_dl_device (*dlpack_device)(const ferry_device *dev);
  /* Called once at shutdown after every allocation and pinned block of the device was released. */
  void (*destroy)(ferry_device *dev);
} ferry_device_ops;

/* Device capabilities the core acts on. */
enum {
  FERRY_CAP_CACHE = 1u << 0,        /* the core may keep freed allocations for reuse */
  FERRY_CAP_OVERLAP_COPY = 1u << 1, /* copy handles overlapping ranges of one allocation (memmove) */
  FERRY_CAP_STAGE = 1u << 2,        /* transfers from pinned memory beat the driver's pageable ones: the core
                                       stages large pageable transfers through pinned blocks (GPUs) */
  /* Work pushed on a lane moves whole 4-byte words at offsets that are
   * multiples of 4 (Metal's blits on macOS): a queue's copy, fill or DMA that
   * is not one runs as a host part (the backend's synchronous calls, which move
   * the odd bytes through the host). */
  FERRY_CAP_LANE_WORDS = 1u << 3,
  /* The synchronous calls pass no lane (NULL), so that the backend does each on
   * its own device queue as it did before lanes (complete on return where it
   * must); the device's queues still have lanes. */
  FERRY_CAP_SYNC_NO_LANES = 1u << 4,
};

/* What a backend tells the core about each device it found. */
typedef struct ferry_device_desc {
  const ferry_device_ops *ops;
  void *impl; /* the backend's per-device state, reachable as dev->impl */
  const char *name;
  uint64_t total_memory, max_allocation;
  bool is_cpu, zero_copy, host_ptr;
  size_t host_ptr_alignment; /* 1 if none */
  unsigned caps;             /* FERRY_CAP_* */
  size_t bounce_max;         /* writes from pageable memory up to this size go through a pinned block (0: none) */
} ferry_device_desc;

typedef struct ferry_probe ferry_probe; /* the core's list of devices under construction */

/* Adds a device; called by a backend's probe in the order its devices are to be numbered. */
ferry_status ferry__device_add(ferry_probe *probe, const ferry_device_desc *desc);

/* ---- settings (options.c) -----------------------------------------------
 *
 * Every FERRY_* variable the library reads is declared once, by the code that
 * uses it: the core's in options.c, each backend's in its ferry_backend.options.
 * ferry_init reads them all (ferry_set_option's value first, else the
 * environment's), checks each against its declaration and fails with
 * FERRY_ERROR_INVALID_ARGUMENT naming the variable, the value and what it takes;
 * the core and the backends then read the checked values through the getters
 * below, never through getenv. An empty value counts as unset. */
typedef enum ferry_option_type {
  FERRY_OPTION_BYTES,  /* a byte count: digits and an optional K, M, G or T (powers of 1024), in [min, max] */
  FERRY_OPTION_COUNT,  /* a whole number, in [min, max] */
  FERRY_OPTION_SWITCH, /* 0 or 1 */
  FERRY_OPTION_CHOICE, /* exactly one of `words` (a comma-separated list) */
  FERRY_OPTION_WORDS,  /* one or more of `words`, separated by commas or spaces */
  FERRY_OPTION_TEXT,   /* any text (a library path), checked by `check` if given */
} ferry_option_type;

typedef struct ferry_option_def {
  const char *name; /* the environment variable: "FERRY_CACHE_LIMIT" */
  ferry_option_type type;
  uint64_t min, max;         /* BYTES and COUNT */
  const char *words;         /* CHOICE and WORDS: "stream,memops,bounce" */
  const char *default_value; /* in effect when unset, as text; NULL when it depends (on the device, the machine) */
  const char *range;         /* what it takes, in words: "0 to 2^62 bytes; suffixes K, M, G, T" */
  const char *description;   /* one line; says the default in words where default_value is NULL */
  /* A further check of a value the type accepts (NULL: none): false, with what is
   * wrong in `why` ("names 'cuda-typo', which this build does not have"). */
  bool (*check)(const char *value, char *why, size_t why_size);
} ferry_option_def;

/* The checked value of a BYTES, COUNT or SWITCH option in this session: true with
 * *out when it is set, false when unset (the caller's default applies). */
bool ferry__option_number(const char *name, uint64_t *out);
/* The value of any option in this session as text; NULL when unset. Valid until
 * ferry_shutdown(). */
const char *ferry__option_text(const char *name);
/* Does WORDS option `name` hold `word`? */
bool ferry__option_has_word(const char *name, const char *word);

typedef struct ferry_backend {
  const char *name;
  /* The backend's own FERRY_* variables, ended by an entry whose name is NULL;
   * NULL when it has none. Listed by ferry_option_get, checked at ferry_init. */
  const ferry_option_def *options;
  /* The backend keeps no driver state that a child of fork() would inherit
   * broken (native, checked), so a forked child may start it again. Backends
   * with a driver leave this false: in a child forked from a process that had
   * started them, they report themselves unavailable, saying why. */
  bool fork_safe;
  /* Load the driver and add every device (ferry__device_add). A missing driver
   * returns FERRY_ERROR_UNSUPPORTED with a sentence saying what is missing; the
   * core reports the backend as absent with that sentence and goes on. */
  ferry_status (*probe)(ferry_probe *probe);
  /* After every device of the backend was destroyed: release backend-wide state
   * (driver handles, dlclose). May be NULL. */
  void (*unload)(void);
} ferry_backend;

/* The core's view of a device; backends read impl and label only. */
struct ferry_device {
  void *impl;
  char label[320]; /* "device 2 (opencl: pthread-skylake-avx512 (PoCL))", for messages */
  const ferry_device_ops *ops;
  const ferry_backend *backend;
  unsigned caps;
  size_t bounce_max; /* from the description */
  ferry_device_info info;
  char name[256];
  struct ferry_device_state *state; /* core-private: cache, statistics */
};

/* Sets this thread's error sentence and returns `status`. */
ferry_status ferry__fail(ferry_status status, const char *fmt, ...) FERRY_PRINTF(2, 3);
ferry_status ferry__failv(ferry_status status, const char *fmt, va_list ap);

/* A first-failure section: between ferry__first_failure_begin and _end, only
 * the first failure writes the thread's sentence; later ones (a cleanup call
 * that fails too) return their status and leave it. With `failed` true the
 * caller's own failure (or, for a try that may fail quietly, its sentence) is
 * the one kept from the start. Sections nest. */
typedef struct ferry_error_scope {
  bool active, failed, wrote;
} ferry_error_scope;
ferry_error_scope ferry__first_failure_begin(bool failed);
void ferry__first_failure_end(ferry_error_scope outer);

/* Sends the thread's failures into `buf` (emptied here) instead of its
 * sentence, until ferry__error_redirect_end puts back what was in force before:
 * around work whose own failures are kept elsewhere (a backend's reason for
 * being absent, kept as its status) while the caller's sentence must stay.
 * ferry__error_text reads the buffer meanwhile. Redirections nest. */
typedef struct ferry_error_target {
  char *buf;
  size_t size;
} ferry_error_target;
ferry_error_target ferry__error_redirect(char *buf, size_t size);
void ferry__error_redirect_end(ferry_error_target outer);

/* The thread's current error sentence, for backends that prefix or extend it. */
const char *ferry__error_text(void);

/* Copies n bytes on the core's copy threads when it is large enough to gain;
 * memcpy semantics (no overlap). For memory a driver maps, and pieces. */
void ferry__parallel_memcpy(void *dst, const void *src, size_t n);
/* The same for a whole copy between plain host memory (ferry_mem.host, the
 * program's arrays): one memcpy where no copy thread helps, streaming stores
 * past the last-level cache's size. */
void ferry__parallel_memcpy_plain(void *dst, const void *src, size_t n);

/* memmove semantics with `large` above a few KiB: memmove when the ranges overlap,
 * nothing when they are the same, else memcpy for a few KiB. Inline: the per-call
 * cost of a small native transfer is a target (docs/PERFORMANCE.md), and the copy
 * threads' path is calls deep before it reaches a memcpy. */
static inline void ferry__move_with(void *dst, const void *src, size_t n, void (*large)(void *, const void *, size_t)) {
  uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
  if (d == s || n == 0) return;
  if (d < s + n && s < d + n)
    memmove(dst, src, n);
  else if (n <= 4096)
    memcpy(dst, src, n);
  else
    large(dst, src, n);
}

/* A move to or from memory a driver maps (ferry__parallel_memcpy above a few KiB). */
static inline void ferry__host_move(void *dst, const void *src, size_t n) {
  ferry__move_with(dst, src, n, ferry__parallel_memcpy);
}

/* A whole move between plain host memory (ferry__parallel_memcpy_plain). */
static inline void ferry__plain_move(void *dst, const void *src, size_t n) {
  ferry__move_with(dst, src, n, ferry__parallel_memcpy_plain);
}

/* Copies n bytes (at most 512) from addr into out without faulting where there
 * is no readable memory: false then. For handles from the program that a driver
 * would dereference (safe_read.c). */
bool ferry__read_safely(const void *addr, void *out, size_t n);

/* Bytes of physical memory on the host (UINT64_MAX if unknown). */
uint64_t ferry__host_ram(void);

/* The size an allocation of `bytes` is rounded up to so that freed memory can be
 * reused by requests of nearby sizes: 2^k x {1, 1.25, 1.5, 1.75}, from 256 bytes
 * (at most 25% more). Backends that pool memory use the same classes. */
size_t ferry__size_class(size_t bytes);

/* Formats a byte count for messages: "16 GiB (17179869184 bytes)". */
const char *ferry__bytes_text(uint64_t bytes, char buf[64]);
/* For driver_info: 16 UUID bytes as "8-4-4-4-12" lowercase hex, and a PCI
 * address as "0000:1b:00.0". */
void ferry__uuid_text(const unsigned char bytes[16], char out[40]);
void ferry__pci_text(unsigned domain, unsigned bus, unsigned device, unsigned function, char out[32]);

#endif /* FERRY_CORE_BACKEND_H */
