/*
 * The core's context: every table the library keeps for the process, in one
 * structure, ferry__ctx (context.c).
 *
 *   registry  the backends, their devices and the session's state (registry.c)
 *   options   the settings: each one's value, where it came from (options.c)
 *   stats     the per-thread transfer counters (stats.c)
 *   buffers   the buffer handle table (handles.c)
 *   objects   the queue and event handle tables (objects.c)
 *
 * Each part is read and written by the file named beside it only, through a
 * pointer of its own to its part (`reg`, `options`, ...); other files reach a
 * part through that file's functions. Keeping them in one place shows at a
 * glance what state the library has and what a session starts and ends: the
 * registry's devices and the options' values are the session's; the handle
 * tables and the statistics' records outlive sessions, so that an old handle
 * never matches again and a thread's record stays valid after a shutdown.
 *
 * A device's own state (its queues, allocation cache, engine, counters) is in
 * its ferry_device_state (internal.h); a backend reads its options once, when
 * it starts, and keeps what it read in its device state.
 *
 * Not here: the copy threads' pool (copy_threads.c), the pinned registry
 * (pinned.c), the host ranges claimed by buffers (host_ranges.c) and the
 * releaser thread (queue.c) are services with a lifetime of their own, started
 * at their first use.
 */
#ifndef FERRY_CORE_CONTEXT_H
#define FERRY_CORE_CONTEXT_H

#include "internal.h"

/* ---- the registry (registry.c) ------------------------------------------------ */

enum {
#define FERRY_BACKEND(name) FERRY__BACKEND_INDEX_##name,
#include "backend_list.h"
#undef FERRY_BACKEND
  FERRY__BUILTIN_BACKENDS
};
#define FERRY__EXTRA_BACKENDS 4 /* ferry__register_backend's (tests' fault backend) */
#define FERRY__BACKEND_MAX    (FERRY__BUILTIN_BACKENDS + FERRY__EXTRA_BACKENDS)

typedef struct ferry_backend_entry {
  const ferry_backend *backend;
  bool enabled;
  size_t first, count; /* its devices: first .. first + count - 1 */
  char status[512];    /* "3 devices", or why it has none */
} ferry_backend_entry;

typedef struct ferry_registry {
  pthread_mutex_t init_lock; /* ferry_init and ferry_shutdown */
  _Atomic int ready;         /* 1 once initialised, back to 0 at shutdown */
  const ferry_backend *extra[FERRY__EXTRA_BACKENDS];
  _Atomic size_t extra_count;                      /* entries are written before the count that shows them */
  ferry_backend_entry entries[FERRY__BACKEND_MAX]; /* every backend, in numbering order */
  size_t entry_count;
  ferry_device **devices;
  size_t device_count, device_capacity;
} ferry_registry;

/* ---- the settings (options.c) -------------------------------------------------- */

#define FERRY__OPTION_MAX 96

/* A value ferry_option_get has handed out: kept for the rest of the process, so
 * that no later call of any thread can end a string a caller holds. One copy
 * per distinct value of each setting (a program that sets ever new values keeps
 * one small string for each). */
typedef struct ferry_shown_value {
  struct ferry_shown_value *next;
  char text[];
} ferry_shown_value;

typedef struct ferry_option_state {
  const ferry_option_def *def;
  ferry_shown_value *shown; /* every value ferry_option_get has shown for it; never freed */
  char *code;               /* ferry_set_option's value; NULL: none */
  char *value; /* the value in effect as text: this session's, or before init the next one's; NULL: unset */
  ferry_option_source source;
  uint64_t number; /* BYTES, COUNT, SWITCH: the parsed value */
} ferry_option_state;

typedef struct ferry_options {
  pthread_mutex_t lock;
  ferry_option_state items[FERRY__OPTION_MAX];
  size_t count;
  bool in_session; /* between ferry__options_load and ferry__options_end */
} ferry_options;

/* ---- the statistics (stats.c) ---------------------------------------------------- */

typedef struct ferry_stats_records {
  _Atomic(struct ferry_thread_counts *) records; /* every record ever made; only grows */
} ferry_stats_records;

/* ---- handle tables (handles.c, objects.c) ------------------------------------------ */

#define FERRY__NO_SLOT UINT32_MAX

typedef struct ferry_buffer_table {
  _Atomic(_Atomic(ferry_slot *) *) chunks; /* made once; each chunk never moves */
  pthread_mutex_t lock;                    /* slot allocation, the free list, serial */
  uint32_t used;                           /* slots ever handed out */
  uint32_t free_head;
  uint32_t start_generation; /* the dead (even) generation of slots made from now on */
  uint64_t serial;           /* the last buffer's serial number (ferry__buffer_text's "buffer N") */
  /* Moves on at every ferry_shutdown (and in a forked child's): a reference that
   * outlives its session (a DLPack export's) was taken in session N, and is gone
   * with it once this says otherwise. */
  _Atomic uint64_t session;
} ferry_buffer_table;

typedef struct ferry_object_table {
  pthread_mutex_t lock;
  _Atomic(_Atomic(struct ferry_object_slot *) *) chunks; /* made on first use */
  uint32_t used, free_head;
} ferry_object_table;

/* ---- the context ------------------------------------------------------------------- */

typedef struct ferry_context {
  ferry_registry registry;
  ferry_options options;
  ferry_stats_records stats;
  ferry_buffer_table buffers;
  ferry_object_table objects[FERRY_OBJECT_KINDS]; /* indexed by ferry_object_kind; [0] unused */
} ferry_context;

extern ferry_context ferry__ctx;

#endif /* FERRY_CORE_CONTEXT_H */
