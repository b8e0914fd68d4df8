/*
 * The contract between the core and a backend.
 *
 * The core validates every argument (handles, kinds, sizes, ranges, overflow),
 * owns the handle table, the device registry, statistics and the allocation
 * cache. A backend only moves bytes: it sees allocations (ferry_mem) and byte
 * ranges that are already known to be in bounds, and it never sees a handle.
 *
 * Adding a backend: a folder src/backends/<name>/ with a `const ferry_backend
 * ferry_backend_<name>` and one line in src/core/backend_list.h.
 */
#ifndef FERRY_CORE_BACKEND_H
#define FERRY_CORE_BACKEND_H

#include "ferry.h"

#include <stdarg.h>
#include <stdatomic.h>

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
 * Operations on one device. Every operation that fails sets the thread's error
 * sentence (ferry__fail) naming the driver call, its code and dev->label, and
 * returns a status; a failed operation leaves nothing allocated. Byte ranges are
 * in bounds of the allocation and bytes > 0 unless said otherwise.
 */
typedef struct ferry_device_ops {
  /* Required. */
  ferry_status (*alloc)(ferry_device *dev, size_t bytes, ferry_mem *out); /* bytes > 0 */
  ferry_status (*free)(ferry_device *dev, ferry_mem *mem);                /* not for HOST_PTR or ZERO_COPY mem */
  ferry_status (*write)(ferry_device *dev, ferry_mem *dst, size_t dst_offset, const void *src, size_t bytes);
  ferry_status (*read)(ferry_device *dev, const ferry_mem *src, size_t src_offset, void *dst, size_t bytes);
  /* Copy within the device. When src == dst the ranges may overlap only if the
   * device has FERRY_CAP_OVERLAP_COPY; otherwise the core goes through a temporary. */
  ferry_status (*copy)(ferry_device *dev, const ferry_mem *src, size_t src_offset, ferry_mem *dst, size_t dst_offset,
                       size_t bytes);

  /* Optional (NULL: not offered). */

  /* Copy between two devices of this backend; FERRY_ERROR_UNSUPPORTED (without a
   * message) lets the core stage the copy through host memory. */
  ferry_status (*copy_peer)(ferry_device *src_dev, const ferry_mem *src, size_t src_offset, ferry_device *dst_dev,
                            ferry_mem *dst, size_t dst_offset, size_t bytes);
  /* A buffer over the user's array (the core already checked alignment against
   * host_ptr_alignment, the length, and overlap with other host-ptr buffers). On
   * success the host owns the array. On refusal: FERRY_ERROR_REFUSED and a reason. */
  ferry_status (*host_ptr_import)(ferry_device *dev, void *host, size_t bytes, ferry_mem *out,
                                  ferry_refusal *out_refusal);
  /* Hand a HOST_PTR allocation to the device or back to the host (no data copy). */
  ferry_status (*host_ptr_sync)(ferry_device *dev, ferry_mem *mem, ferry_sync_dir dir);
  /* Release a HOST_PTR allocation (the array is the user's and stays). */
  ferry_status (*host_ptr_release)(ferry_device *dev, ferry_mem *mem);
  /* Pinned host memory (default: page-aligned malloc). */
  ferry_status (*host_alloc)(ferry_device *dev, size_t bytes, void **out);
  void (*host_free)(ferry_device *dev, void *ptr, size_t bytes);
  /* Wait for all queued work (default: nothing to wait for). */
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
  /* Check an allocation before a transfer that moves no bytes (zero bytes, a copy
   * onto itself), which the core makes without calling write, read or copy:
   * checked's guard bytes. */
  ferry_status (*check)(ferry_device *dev, const ferry_mem *mem);

  /* Pipelined transfers (all three or none). For large transfers from or to
   * ordinary (pageable) host memory, the core copies through FERRY_STAGE_SLOTS
   * pinned staging slots from this device's host_alloc, on several threads,
   * while the device moves the previous slot. write_async / read_async start a
   * transfer between a slot and device memory and return at once; wait_slot
   * returns when the transfer last started on that slot is complete (at once if
   * none). The core runs one pipelined transfer per device at a time. */
  ferry_status (*write_async)(ferry_device *dev, ferry_mem *dst, size_t dst_offset, const void *pinned_src,
                              size_t bytes, unsigned slot);
  ferry_status (*read_async)(ferry_device *dev, const ferry_mem *src, size_t src_offset, void *pinned_dst, size_t bytes,
                             unsigned slot);
  ferry_status (*wait_slot)(ferry_device *dev, unsigned slot);
  /* Is this host range already pinned for the device by the driver (the user's
   * own cuMemAllocHost memory, say)? Then the core skips staging. Blocks from
   * ferry_host_alloc the core recognises itself. */
  bool (*host_is_pinned)(ferry_device *dev, const void *ptr, size_t bytes);
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
  /* Called once at shutdown after every allocation of the device was freed. */
  void (*destroy)(ferry_device *dev);
} ferry_device_ops;

#define FERRY_STAGE_SLOTS 4

/* Device capabilities the core acts on. */
enum {
  FERRY_CAP_CACHE = 1u << 0,        /* the core may keep freed allocations for reuse */
  FERRY_CAP_OVERLAP_COPY = 1u << 1, /* copy handles overlapping ranges of one allocation (memmove) */
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
  ferry_device_info info;
  char name[256];
  struct ferry_device_state *state; /* core-private: cache, statistics */
};

/* Sets this thread's error sentence and returns `status`. */
ferry_status ferry__fail(ferry_status status, const char *fmt, ...) FERRY_PRINTF(2, 3);
ferry_status ferry__failv(ferry_status status, const char *fmt, va_list ap);

/* The thread's current error sentence, for backends that prefix or extend it. */
const char *ferry__error_text(void);

/* Does [ptr, ptr + bytes) lie inside one block from ferry_host_alloc on a device of
 * this backend? Backends use it to skip staging for memory that is already pinned. */
bool ferry__host_is_pinned(const ferry_backend *backend, const void *ptr, size_t bytes);

/* Copies n bytes on the core's copy threads when it is large enough to gain
 * (4 MiB and up, on machines with the threads); memcpy semantics (no overlap). */
void ferry__parallel_memcpy(void *dst, const void *src, size_t n);

/* memmove semantics: ferry__parallel_memcpy when the ranges are apart, memmove
 * when they overlap, nothing when they are the same. */
void ferry__host_move(void *dst, const void *src, size_t n);

/* Formats a byte count for messages: "16 GiB (17179869184 bytes)". */
const char *ferry__bytes_text(uint64_t bytes, char buf[64]);
/* For driver_info: 16 UUID bytes as "8-4-4-4-12" lowercase hex, and a PCI
 * address as "0000:1b:00.0". */
void ferry__uuid_text(const unsigned char bytes[16], char out[40]);
void ferry__pci_text(unsigned domain, unsigned bus, unsigned device, unsigned function, char out[32]);

#endif /* FERRY_CORE_BACKEND_H */
