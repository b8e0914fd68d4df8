/* The device registry: starting backends, numbering devices, FERRY_BACKENDS,
 * device queries, shutdown. */
#include "context.h"
#include "host_info.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FERRY_BACKEND(name) extern const ferry_backend ferry_backend_##name;
#include "backend_list.h"
#undef FERRY_BACKEND

static const ferry_backend *const builtin_backends[] = {
#define FERRY_BACKEND(name) &ferry_backend_##name,
#include "backend_list.h"
#undef FERRY_BACKEND
};
#define BUILTIN_COUNT (sizeof builtin_backends / sizeof builtin_backends[0])
_Static_assert(BUILTIN_COUNT == FERRY__BUILTIN_BACKENDS, "backend_list.h counted twice, differently");

/* This file's part of the context. */
static ferry_registry *const reg = &ferry__ctx.registry;

typedef ferry_backend_entry backend_entry;

struct ferry_probe {
  backend_entry *entry;
};

/* Does this thread hold the init lock (inside ferry_init or ferry_shutdown)? A
 * driver that forks from there must not have the fork handlers wait for it. */
static _Thread_local bool holding_init_lock;

static void init_lock_take(void) {
  pthread_mutex_lock(&reg->init_lock);
  holding_init_lock = true;
}

static void init_lock_give(void) {
  holding_init_lock = false;
  pthread_mutex_unlock(&reg->init_lock);
}

ferry_status ferry__register_backend(const ferry_backend *backend) {
  init_lock_take();
  ferry_status st = FERRY_OK;
  if (!backend || !backend->name || !backend->probe)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry__register_backend: backend, its name and probe are needed");
  else if (atomic_load(&reg->ready))
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry__register_backend: backend '%s' registered after ferry_init",
                     backend->name);
  else if (reg->extra_count == FERRY__EXTRA_BACKENDS)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry__register_backend: at most %d extra backends",
                     FERRY__EXTRA_BACKENDS);
  else {
    reg->extra[reg->extra_count] = backend;
    atomic_fetch_add(&reg->extra_count, 1);
  }
  init_lock_give();
  return st;
}

const ferry_backend *ferry__backend_at(size_t index) {
  if (index < BUILTIN_COUNT) return builtin_backends[index];
  index -= BUILTIN_COUNT;
  return index < atomic_load(&reg->extra_count) ? reg->extra[index] : NULL;
}

ferry_status ferry__device_add(ferry_probe *probe, const ferry_device_desc *desc) {
  const ferry_backend *b = probe->entry->backend;
  const ferry_device_ops *o = desc->ops;
  bool moves = (o && ((o->write && o->read) || o->dma_start)) || desc->zero_copy;
  bool tickets = o && o->ticket_wait && o->ticket_release;
  bool lanes_whole = o && (!o->lane_create || (o->lane_destroy && o->marker && tickets && o->fill_start));
  bool gates_whole = o && (!o->gate_create == !o->gate_push) && (!o->gate_create == !o->gate_raise) &&
                     (!o->gate_create == !o->gate_destroy) && (!o->gate_create || o->lane_create);
  if (!o || !o->alloc || !o->free || !o->copy_start || !moves || (o->dma_start && !tickets) || !lanes_whole ||
      !gates_whole || ((o->pin_alloc || o->pin_register) && !o->pin_release))
    return ferry__fail(FERRY_ERROR_BACKEND, "backend %s: a device without the required operations", b->name);
  if (desc->ops->host_ptr_import && (!desc->ops->host_ptr_release || !desc->ops->host_ptr_sync))
    return ferry__fail(FERRY_ERROR_BACKEND, "backend %s: host_ptr_import without host_ptr_release and host_ptr_sync",
                       b->name);
  if (reg->device_count == reg->device_capacity) {
    size_t cap = reg->device_capacity ? reg->device_capacity * 2 : 8;
    ferry_device **grown = realloc(reg->devices, cap * sizeof *grown);
    if (!grown) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "backend %s: no host memory for a device", b->name);
    reg->devices = grown;
    reg->device_capacity = cap;
  }
  ferry_device *dev = calloc(1, sizeof *dev);
  if (!dev) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "backend %s: no host memory for a device", b->name);
  dev->impl = desc->impl;
  dev->ops = desc->ops;
  dev->backend = b;
  dev->caps = desc->caps;
  dev->bounce_max = desc->bounce_max;
  snprintf(dev->name, sizeof dev->name, "%s", desc->name ? desc->name : "unnamed");
  ferry_device_info *info = &dev->info;
  info->index = reg->device_count;
  info->backend_index = probe->entry->count;
  info->name = dev->name;
  info->backend = b->name;
  info->total_memory = desc->total_memory;
  info->max_allocation = desc->max_allocation;
  info->is_cpu = desc->is_cpu;
  info->zero_copy = desc->zero_copy;
  info->host_ptr = desc->host_ptr;
  info->host_ptr_alignment = desc->host_ptr_alignment ? desc->host_ptr_alignment : 1;
  snprintf(dev->label, sizeof dev->label, "device %zu (%s: %s)", info->index, b->name, dev->name);
  ferry_status st = ferry__device_state_init(dev);
  if (st != FERRY_OK) {
    free(dev);
    return st;
  }
  ferry__engine_device_init(dev);
  /* The synchronous calls' lanes, one per direction. */
  for (int d = 0; d < 2 && st == FERRY_OK && dev->ops->lane_create && !(dev->caps & FERRY_CAP_SYNC_NO_LANES); d++)
    st = dev->ops->lane_create(dev, &dev->state->sync_lane[d]);
  if (st != FERRY_OK) {
    char text[1024];
    snprintf(text, sizeof text, "%s", ferry__error_text());
    for (int d = 0; d < 2; d++)
      if (dev->state->sync_lane[d]) dev->ops->lane_destroy(dev, dev->state->sync_lane[d]);
    ferry__engine_device_destroy(dev);
    ferry__device_state_destroy(dev);
    free(dev);
    return ferry__fail(st, "backend %s: the lanes of %s: %s", b->name, desc->name ? desc->name : "a device", text);
  }
  reg->devices[reg->device_count++] = dev;
  probe->entry->count++;
  return FERRY_OK;
}

static void device_destroy(ferry_device *dev) {
  if (ferry__cache_trim(dev) != FERRY_OK) fprintf(stderr, "ferry: ferry_shutdown: %s\n", ferry__error_text());
  ferry__engine_device_release(dev);
  for (int d = 0; d < 2; d++)
    if (dev->state->sync_lane[d]) dev->ops->lane_destroy(dev, dev->state->sync_lane[d]);
  if (dev->ops->destroy) dev->ops->destroy(dev);
  ferry__engine_device_destroy(dev);
  ferry__device_state_destroy(dev);
  free(dev);
}

/* Finds a backend by name among the built-in ones; its index, or -1. */
static int builtin_named(const char *name, size_t len) {
  for (size_t i = 0; i < BUILTIN_COUNT; i++)
    if (strlen(builtin_backends[i]->name) == len && memcmp(builtin_backends[i]->name, name, len) == 0) return (int)i;
  return -1;
}

/* Calls `each` with every name of a FERRY_BACKENDS list (blanks around names and
 * empty entries skipped) until it returns false; false then. */
static bool for_each_name(const char *list, bool (*each)(void *ctx, const char *name, size_t len), void *ctx) {
  for (const char *p = list; *p;) {
    while (*p == ' ' || *p == ',')
      p++;
    const char *start = p;
    while (*p && *p != ',')
      p++;
    const char *end = p;
    while (end > start && end[-1] == ' ')
      end--;
    if (end > start && !each(ctx, start, (size_t)(end - start))) return false;
  }
  return true;
}

typedef struct backends_check {
  bool picked[BUILTIN_COUNT];
  size_t named;
  char *why;
  size_t why_size;
} backends_check;

static bool check_name(void *ctx, const char *name, size_t len) {
  backends_check *c = ctx;
  int i = builtin_named(name, len);
  if (i < 0) {
    snprintf(c->why, c->why_size, "names '%.*s', which this build does not have", (int)len, name);
    return false;
  }
  if (c->picked[i]) {
    snprintf(c->why, c->why_size, "names '%s' twice", builtin_backends[i]->name);
    return false;
  }
  c->picked[i] = true;
  c->named++;
  return true;
}

bool ferry__backends_check(const char *value, char *why, size_t why_size) {
  backends_check c = {.why = why, .why_size = why_size};
  if (!for_each_name(value, check_name, &c)) return false;
  if (c.named == 0) {
    snprintf(why, why_size, "names no backend");
    return false;
  }
  return true;
}

static bool enable_name(void *ctx, const char *name, size_t len) {
  (void)ctx;
  int i = builtin_named(name, len);
  if (i >= 0) reg->entries[reg->entry_count++] = (backend_entry){.backend = builtin_backends[i], .enabled = true};
  return true;
}

/* Orders the entries as FERRY_BACKENDS says (checked already, by
 * ferry__backends_check): the named backends enabled, in its order, then the
 * others disabled (so ferry_backend_get still lists them). */
static void plan_backends(void) {
  const char *list = ferry__option_text("FERRY_BACKENDS");
  reg->entry_count = 0;
  if (list) for_each_name(list, enable_name, NULL);
  for (size_t i = 0; i < BUILTIN_COUNT; i++) {
    bool named = false;
    for (size_t k = 0; k < reg->entry_count; k++)
      named = named || reg->entries[k].backend == builtin_backends[i];
    if (!named) reg->entries[reg->entry_count++] = (backend_entry){.backend = builtin_backends[i], .enabled = !list};
  }
  size_t extras = atomic_load(&reg->extra_count);
  for (size_t i = 0; i < extras; i++)
    reg->entries[reg->entry_count++] = (backend_entry){.backend = reg->extra[i], .enabled = true};
  /* Enabled backends first, so that device numbers follow the entries' order. */
  backend_entry sorted[FERRY__BACKEND_MAX];
  size_t n = 0;
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < reg->entry_count; i++)
      if (reg->entries[i].enabled == (pass == 0)) sorted[n++] = reg->entries[i];
  memcpy(reg->entries, sorted, n * sizeof sorted[0]);
}

/* The process that first started each backend (by its place in
 * ferry__backend_at's order); 0 while none has. */
static pid_t started_by[FERRY__BACKEND_MAX];

static void probe_backend(backend_entry *e) {
  if (!e->enabled) {
    snprintf(e->status, sizeof e->status, "left out by FERRY_BACKENDS");
    return;
  }
  size_t at = 0;
  while (ferry__backend_at(at) != e->backend)
    at++;
  pid_t self = getpid();
  if (!e->backend->fork_safe && started_by[at] != 0 && started_by[at] != self) {
    /* Drivers keep threads and state that a child of fork() inherits broken
     * (PoCL hangs at the first call, CUDA forbids it). */
    snprintf(e->status, sizeof e->status,
             "not started in this process (%ld): the %s driver was started in process %ld, of which this process "
             "is a fork, and a driver does not survive fork(); start ferry in a process that never forked from one "
             "that used it (or exec a new program)",
             (long)self, e->backend->name, (long)started_by[at]);
    return;
  }
  if (started_by[at] == 0) started_by[at] = self;
  e->first = reg->device_count;
  ferry_probe probe = {.entry = e};
  /* An absent backend's reason is its status, never the caller's sentence. */
  ferry_error_target caller = ferry__error_redirect(e->status, sizeof e->status);
  ferry_status st = e->backend->probe(&probe);
  if (st != FERRY_OK) {
    /* A backend that fails half way gives up all of its devices; what its
     * cleanup says after the reason is not kept. */
    ferry_error_scope cleanup = ferry__first_failure_begin(true);
    while (reg->device_count > e->first)
      device_destroy(reg->devices[--reg->device_count]);
    e->count = 0;
    if (e->backend->unload) e->backend->unload();
    ferry__first_failure_end(cleanup);
    ferry__error_redirect_end(caller);
    if (!e->status[0])
      snprintf(e->status, sizeof e->status, "its start failed with %s, without a sentence", ferry_status_name(st));
    return;
  }
  ferry__error_redirect_end(caller);
  if (e->count == 0)
    snprintf(e->status, sizeof e->status, "the driver is present but reports no devices");
  else
    snprintf(e->status, sizeof e->status, "ok");
}

/* ---- fork() ----------------------------------------------------------------
 *
 * A child forked while ferry runs inherits the parent's session: its buffers,
 * devices and driver handles, but none of the threads behind them (the drivers'
 * and ferry's copy threads). Every call in the child fails at once with
 * FERRY_ERROR_BACKEND, before any driver is touched, until the child's
 * ferry_shutdown() forgets the parent's session; ferry may then start again in
 * the child, on the backends that survive fork() (fork_safe: native, checked).
 * The fork handlers take the core's locks around fork(), so that the child finds
 * the core's tables consistent and its locks free. */

_Atomic bool ferry__forked;
static pid_t session_process;               /* in a forked child: the process where the inherited session started */
static pid_t forking_process;               /* set by the prepare handler */
static _Thread_local bool fork_locks_taken; /* by this thread's prepare handler (not when a driver forks inside
                                               ferry_init or ferry_shutdown) */
static pthread_once_t fork_handlers_once = PTHREAD_ONCE_INIT;

ferry_status ferry__fork_refusal(const char *fn) {
  return ferry__fail(FERRY_ERROR_BACKEND,
                     "%s: ferry was started in process %ld, and this process (%ld) is a child forked from it: a "
                     "child cannot use its parent's devices (the drivers' threads and state stay with the parent). "
                     "Call ferry_shutdown() in the child, which forgets the parent's session, then start ferry again "
                     "(on the backends that survive fork(): native, checked)",
                     fn, (long)session_process, (long)getpid());
}

/* The gate (below): calls inside, and GATE_CLOSED while a shutdown runs. */
#define GATE_CLOSED ((uint64_t)1 << 63)
static _Atomic uint64_t gate;
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_empty = PTHREAD_COND_INITIALIZER;

static void fork_prepare(void) {
  fork_locks_taken = !holding_init_lock;
  if (!fork_locks_taken) return;
  pthread_mutex_lock(&reg->init_lock);
  ferry__options_fork(FERRY_FORK_PREPARE);
  ferry__handles_fork(FERRY_FORK_PREPARE);
  ferry__host_ranges_fork(FERRY_FORK_PREPARE);
  ferry__pinned_fork(FERRY_FORK_PREPARE);
  pthread_mutex_lock(&gate_lock);
  forking_process = getpid();
}

static void fork_parent(void) {
  if (!fork_locks_taken) return;
  pthread_mutex_unlock(&gate_lock);
  ferry__pinned_fork(FERRY_FORK_PARENT);
  ferry__host_ranges_fork(FERRY_FORK_PARENT);
  ferry__handles_fork(FERRY_FORK_PARENT);
  ferry__options_fork(FERRY_FORK_PARENT);
  pthread_mutex_unlock(&reg->init_lock);
}

static void fork_child(void) {
  if (!fork_locks_taken) return; /* a driver's helper process, about to exec */
  /* Only this thread runs here, and it is inside no ferry call. */
  atomic_store(&gate, 0);
  pthread_mutex_unlock(&gate_lock);
  ferry__copy_threads_fork(FERRY_FORK_CHILD);
  ferry__pinned_fork(FERRY_FORK_CHILD);
  ferry__host_ranges_fork(FERRY_FORK_CHILD);
  ferry__handles_fork(FERRY_FORK_CHILD);
  ferry__options_fork(FERRY_FORK_CHILD);
  if (atomic_load(&reg->ready)) {
    if (!atomic_load(&ferry__forked)) session_process = forking_process; /* a grandchild keeps the first */
    atomic_store(&ferry__forked, true);
  }
  pthread_mutex_unlock(&reg->init_lock);
}

static void register_fork_handlers(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

/* Starts the library if it is not running; FERRY_OK when it is. */
static ferry_status ensure_init(const char *fn) {
  if (atomic_load_explicit(&ferry__forked, memory_order_relaxed)) return ferry__fork_refusal(fn);
  if (atomic_load_explicit(&reg->ready, memory_order_acquire)) return FERRY_OK;
  if (ferry__in_shutdown_callback())
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                       "%s: called from a DLPack deleter that ferry_shutdown() runs once the session is gone: ferry "
                       "does not start again from there (ferry_shutdown() released everything, ferry_host_alloc's "
                       "blocks included)",
                       fn);
  pthread_once(&fork_handlers_once, register_fork_handlers);
  init_lock_take();
  ferry_status st = FERRY_OK;
  if (!atomic_load_explicit(&reg->ready, memory_order_relaxed)) {
    st = ferry__options_load();
    if (st == FERRY_OK) {
      plan_backends();
      st = ferry__handles_init();
      if (st != FERRY_OK) ferry__options_end();
    }
    if (st == FERRY_OK) {
      for (size_t i = 0; i < reg->entry_count; i++)
        probe_backend(&reg->entries[i]);
      atomic_store_explicit(&reg->ready, 1, memory_order_release);
    }
  }
  init_lock_give();
  return st;
}

ferry_status ferry_init(void) { return ensure_init("ferry_init"); }

/* ---- the gate ---------------------------------------------------------------
 *
 * One word: the number of calls inside, and GATE_CLOSED while ferry_shutdown()
 * runs. A call adds itself with one atomic add and looks at what was there
 * before: closed means a shutdown is under way, so it takes itself out again,
 * waits for the shutdown to end (it holds init_lock throughout) and starts
 * ferry again. The shutdown closes the gate, waits for the count to reach zero,
 * and opens the gate once the library is down. */

static void gate_out(void) {
  if (atomic_fetch_sub(&gate, 1) == (GATE_CLOSED | 1)) {
    /* The last call out of a closing gate: the shutdown may go on. */
    pthread_mutex_lock(&gate_lock);
    pthread_cond_broadcast(&gate_empty);
    pthread_mutex_unlock(&gate_lock);
  }
}

void ferry__leave(void) {
  gate_out();
  ferry__calls_leave(); /* out of the outermost call: the deleters its releases queued run now */
}

ferry_status ferry__enter(const char *fn) {
  for (;;) {
    ferry_status st = ensure_init(fn);
    if (st != FERRY_OK) return st;
    uint64_t before = atomic_fetch_add(&gate, 1);
    /* Inside an open gate with the library up, the library stays up until we leave. */
    if (!(before & GATE_CLOSED) && atomic_load(&reg->ready)) {
      ferry__calls_enter();
      return FERRY_OK;
    }
    gate_out();
    if (before & GATE_CLOSED) {
      init_lock_take(); /* the shutdown holds it until it is done */
      init_lock_give();
    }
  }
}

bool ferry__enter_if_up(void) {
  uint64_t before = atomic_fetch_add(&gate, 1);
  if (!(before & GATE_CLOSED) && atomic_load(&reg->ready)) {
    ferry__calls_enter();
    return true;
  }
  gate_out();
  return false;
}

ferry_status ferry__enter_device(const ferry_device *device, const char *fn) {
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  if (!device) {
    ferry__leave();
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: device is NULL", fn);
  }
  for (size_t i = 0; i < reg->device_count; i++)
    if (reg->devices[i] == device) return FERRY_OK;
  ferry__leave();
  return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                     "%s: %p is not a device of this session (a device pointer from before ferry_shutdown()?)", fn,
                     (const void *)device);
}

/* The child's ferry_shutdown(): forget the parent's session without a driver
 * call (the drivers' threads are the parent's) and without freeing what the
 * drivers own; only the core's own host memory goes. */
static void forget_parent_session(void) {
  for (size_t i = 0; i < reg->device_count; i++)
    ferry__queues_forget_device(reg->devices[i]);
  ferry__events_forget();
  ferry__queues_releaser_forget();
  ferry__handles_forget();
  ferry__pinned_forget();
  ferry__host_ranges_shutdown();
  for (size_t i = 0; i < reg->device_count; i++) {
    ferry__device_state_forget(reg->devices[i]);
    free(reg->devices[i]);
  }
  free(reg->devices);
  reg->devices = NULL;
  reg->device_count = reg->device_capacity = 0;
  reg->entry_count = 0;
  ferry__copy_threads_shutdown(); /* no threads here: only the parent's list of them goes */
  ferry__options_end();
  atomic_store(&reg->ready, 0);
  atomic_store(&gate, 0);
  pthread_cond_t fresh = PTHREAD_COND_INITIALIZER;
  gate_empty = fresh;
  atomic_store(&ferry__forked, false);
}

void ferry_shutdown(void) {
  ferry__shutdown_enter();
  init_lock_take();
  if (atomic_load(&ferry__forked)) {
    forget_parent_session();
  } else if (atomic_load(&reg->ready)) {
    /* No new call gets in; wait for those inside. */
    atomic_fetch_or(&gate, GATE_CLOSED);
    pthread_mutex_lock(&gate_lock);
    while (atomic_load(&gate) != GATE_CLOSED)
      pthread_cond_wait(&gate_empty, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
    /* Every queue's work, then the events, then the queues themselves. */
    bool debug = ferry__option_text("FERRY_DEBUG") != NULL;
    for (size_t i = 0; i < reg->device_count; i++)
      ferry__queues_drain_device(reg->devices[i], debug);
    ferry__events_shutdown();
    for (size_t i = 0; i < reg->device_count; i++)
      ferry__queues_end_device(reg->devices[i]);
    ferry__queues_releaser_stop();
    /* Transfers hold their buffers: this waits for them. */
    ferry__handles_shutdown(ferry__option_has_word("FERRY_DEBUG", "leaks"));
    for (size_t i = 0; i < reg->device_count; i++)
      ferry__engine_device_release(reg->devices[i]);
    ferry__pinned_shutdown();
    ferry__host_ranges_shutdown();
    for (size_t i = reg->device_count; i-- > 0;)
      device_destroy(reg->devices[i]);
    for (size_t i = reg->entry_count; i-- > 0;)
      if (reg->entries[i].enabled && reg->entries[i].count > 0 && reg->entries[i].backend->unload)
        reg->entries[i].backend->unload();
    free(reg->devices);
    reg->devices = NULL;
    reg->device_count = reg->device_capacity = 0;
    reg->entry_count = 0;
    ferry__copy_threads_shutdown();
    ferry__options_end();
    atomic_store(&reg->ready, 0);
    atomic_fetch_and(&gate, ~GATE_CLOSED);
  }
  init_lock_give();
  ferry__shutdown_leave(); /* the deleters of the buffers it released run now, where ferry holds no lock */
}

size_t ferry_device_count(void) {
  if (ferry__enter("ferry_device_count") != FERRY_OK) return 0;
  size_t n = reg->device_count;
  ferry__leave();
  return n;
}

ferry_status ferry_device_get(size_t index, ferry_device **out_device) {
  ferry_status st = ferry__enter("ferry_device_get");
  if (st != FERRY_OK) return st;
  if (!out_device)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_device_get: out_device is NULL");
  else if (index >= reg->device_count)
    st = ferry__fail(FERRY_ERROR_NO_DEVICE, "ferry_device_get: device index %zu, but there are %zu devices (0..%zu)",
                     index, reg->device_count, reg->device_count ? reg->device_count - 1 : 0);
  else
    *out_device = reg->devices[index];
  ferry__leave();
  return st;
}

static ferry_device *best_device(void) {
  if (reg->device_count == 0) return NULL;
  for (size_t i = 0; i < reg->device_count; i++)
    if (!reg->devices[i]->info.is_cpu) return reg->devices[i];
  for (size_t i = 0; i < reg->device_count; i++)
    if (strcmp(reg->devices[i]->backend->name, "native") == 0) return reg->devices[i];
  return reg->devices[0];
}

ferry_device *ferry__device_at(size_t index) { return index < reg->device_count ? reg->devices[index] : NULL; }

ferry_device *ferry_device_best(void) {
  if (ferry__enter("ferry_device_best") != FERRY_OK) return NULL;
  ferry_device *best = best_device();
  ferry__leave();
  return best;
}

ferry_status ferry_device_info_get(const ferry_device *device, ferry_device_info *out_info) {
  ferry_status st = ferry__enter_device(device, "ferry_device_info_get");
  if (st != FERRY_OK) return st;
  if (!out_info)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_device_info_get: out_info is NULL");
  else
    *out_info = device->info;
  ferry__leave();
  return st;
}

ferry_status ferry_device_native(const ferry_device *device, ferry_native *out_native) {
  ferry_status st = ferry__enter_device(device, "ferry_device_native");
  if (st != FERRY_OK) return st;
  ferry_native n = {0};
  if (!out_native)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_device_native: out_native is NULL");
  else if (device->ops->native && (st = device->ops->native(device, &n)) != FERRY_OK)
    ferry__fail(st, "ferry_device_native: %s: %s", device->label, ferry__error_text());
  if (st == FERRY_OK) *out_native = n;
  ferry__leave();
  return st;
}

void ferry__uuid_text(const unsigned char b[16], char out[40]) {
  snprintf(out, 40, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
           b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

void ferry__pci_text(unsigned domain, unsigned bus, unsigned device, unsigned function, char out[32]) {
  snprintf(out, 32, "%04x:%02x:%02x.%x", domain, bus, device, function);
}

ferry_status ferry_device_driver_info(const ferry_device *device, ferry_driver_info *out_info) {
  ferry_status st = ferry__enter_device(device, "ferry_device_driver_info");
  if (st != FERRY_OK) return st;
  if (!out_info) {
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_device_driver_info: out_info is NULL");
    ferry__leave();
    return st;
  }
  /* The registry's devices are the core's own; the operations take them mutable. */
  ferry_device *dev = (ferry_device *)device;
  ferry_driver_info info;
  memset(&info, 0, sizeof info);
  if (dev->ops->free_memory) info.free_memory = dev->ops->free_memory(dev);
  if (dev->ops->driver_info && (st = dev->ops->driver_info(dev, &info)) != FERRY_OK)
    ferry__fail(st, "ferry_device_driver_info: %s: %s", dev->label, ferry__error_text());
  /* A CPU device whose driver says nothing of its free memory (PoCL, lavapipe)
   * allocates from the host's: the host's figure, marked as such. The host
   * backends' memory is the host's, and they say so themselves. */
  if (st == FERRY_OK && info.free_memory == 0 && dev->info.is_cpu && !dev->info.zero_copy) {
    info.free_memory = ferry__host_available_memory();
    info.free_memory_from_host = info.free_memory != 0;
  }
  if (st == FERRY_OK) {
    /* Whatever a backend wrote, the strings end inside their arrays, the counts inside theirs. */
    if (info.heap_count > FERRY_MAX_HEAPS) info.heap_count = FERRY_MAX_HEAPS;
    if (info.memory_type_count > FERRY_MAX_MEMORY_TYPES) info.memory_type_count = FERRY_MAX_MEMORY_TYPES;
    if (info.queue_family_count > FERRY_MAX_QUEUE_FAMILIES) info.queue_family_count = FERRY_MAX_QUEUE_FAMILIES;
    info.driver[sizeof info.driver - 1] = info.driver_version[sizeof info.driver_version - 1] = '\0';
    info.api_version[sizeof info.api_version - 1] = info.pci_bus_id[sizeof info.pci_bus_id - 1] = '\0';
    info.uuid[sizeof info.uuid - 1] = '\0';
    *out_info = info;
  }
  ferry__leave();
  return st;
}

ferry_status ferry_device_synchronize(ferry_device *device) {
  ferry_status st = ferry__enter_device(device, "ferry_device_synchronize");
  if (st != FERRY_OK) return st;
  if ((st = ferry__queues_synchronize_device(device, "ferry_device_synchronize")) != FERRY_OK) {
    ferry__leave();
    return st;
  }
  if (device->ops->synchronize && (st = device->ops->synchronize(device)) != FERRY_OK)
    ferry__fail(st, "ferry_device_synchronize: %s: %s", device->label, ferry__error_text());
  ferry__leave();
  return st;
}

size_t ferry_backend_count(void) {
  if (ferry__enter("ferry_backend_count") != FERRY_OK) return 0;
  size_t n = reg->entry_count;
  ferry__leave();
  return n;
}

ferry_status ferry_backend_get(size_t index, ferry_backend_info *out_info) {
  ferry_status st = ferry__enter("ferry_backend_get");
  if (st != FERRY_OK) return st;
  if (!out_info) {
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_backend_get: out_info is NULL");
  } else if (index >= reg->entry_count) {
    st = ferry__fail(FERRY_ERROR_NO_DEVICE, "ferry_backend_get: backend index %zu, but there are %zu backends", index,
                     reg->entry_count);
  } else {
    const backend_entry *e = &reg->entries[index];
    *out_info = (ferry_backend_info){.name = e->backend->name,
                                     .enabled = e->enabled,
                                     .device_count = e->count,
                                     .first_device = e->first,
                                     .status = e->status};
  }
  ferry__leave();
  return st;
}

ferry_status ferry_device_stats(const ferry_device *device, ferry_stats *out_stats) {
  ferry_status st = ferry__enter_device(device, "ferry_device_stats");
  if (st != FERRY_OK) return st;
  if (!out_stats) {
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_device_stats: out_stats is NULL");
  } else {
    struct ferry_device_state *s = device->state;
    uint64_t bytes[FERRY_DIRECTIONS], count[FERRY_DIRECTIONS];
    ferry__transfer_totals(device, bytes, count);
    *out_stats = (ferry_stats){
        .live_buffers = atomic_load(&s->live_buffers),
        .bytes_in_use = atomic_load(&s->bytes_in_use),
        .bytes_cached = atomic_load(&s->bytes_cached),
        .peak_bytes_in_use = atomic_load(&s->peak_bytes_in_use),
        .h2d_bytes = bytes[FERRY_H2D],
        .d2h_bytes = bytes[FERRY_D2H],
        .d2d_bytes = bytes[FERRY_D2D],
        .h2d_count = count[FERRY_H2D],
        .d2h_count = count[FERRY_D2H],
        .d2d_count = count[FERRY_D2D],
    };
  }
  ferry__leave();
  return st;
}

ferry_status ferry_device_trim(ferry_device *device) {
  ferry_status st = ferry__enter_device(device, "ferry_device_trim");
  if (st != FERRY_OK) return st;
  if ((st = ferry__cache_trim(device)) != FERRY_OK)
    ferry__fail(st, "ferry_device_trim: %s: %s", device->label, ferry__error_text());
  ferry__leave();
  return st;
}
