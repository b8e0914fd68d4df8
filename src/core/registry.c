/* The device registry: starting backends, numbering devices, FERRY_BACKENDS,
 * device queries, shutdown. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FERRY_BACKEND(name) extern const ferry_backend ferry_backend_##name;
#include "backend_list.h"
#undef FERRY_BACKEND

static const ferry_backend *const builtin_backends[] = {
#define FERRY_BACKEND(name) &ferry_backend_##name,
#include "backend_list.h"
#undef FERRY_BACKEND
};
#define BUILTIN_COUNT (sizeof builtin_backends / sizeof builtin_backends[0])
#define EXTRA_MAX     4
#define BACKEND_MAX   (BUILTIN_COUNT + EXTRA_MAX)

typedef struct backend_entry {
  const ferry_backend *backend;
  bool enabled;
  size_t first, count;
  char status[512];
} backend_entry;

struct ferry_probe {
  backend_entry *entry;
};

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int ready; /* 1 once initialised, back to 0 at shutdown */

static const ferry_backend *extra_backends[EXTRA_MAX];
static _Atomic size_t extra_count; /* entries are written before the count that shows them */

static struct {
  backend_entry entries[BACKEND_MAX]; /* every backend, in numbering order */
  size_t entry_count;
  ferry_device **devices;
  size_t device_count, device_capacity;
} reg;

ferry_status ferry__register_backend(const ferry_backend *backend) {
  pthread_mutex_lock(&init_lock);
  ferry_status st = FERRY_OK;
  if (!backend || !backend->name || !backend->probe)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry__register_backend: backend, its name and probe are needed");
  else if (atomic_load(&ready))
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry__register_backend: backend '%s' registered after ferry_init",
                     backend->name);
  else if (extra_count == EXTRA_MAX)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry__register_backend: at most %d extra backends", EXTRA_MAX);
  else {
    extra_backends[extra_count] = backend;
    atomic_fetch_add(&extra_count, 1);
  }
  pthread_mutex_unlock(&init_lock);
  return st;
}

const ferry_backend *ferry__backend_at(size_t index) {
  if (index < BUILTIN_COUNT) return builtin_backends[index];
  index -= BUILTIN_COUNT;
  return index < atomic_load(&extra_count) ? extra_backends[index] : NULL;
}

ferry_status ferry__device_add(ferry_probe *probe, const ferry_device_desc *desc) {
  const ferry_backend *b = probe->entry->backend;
  const ferry_device_ops *o = desc->ops;
  bool moves = (o && ((o->write && o->read) || (o->dma_start && o->dma_wait))) || desc->zero_copy;
  if (!o || !o->alloc || !o->free || !o->copy || !moves || (!o->dma_start != !o->dma_wait) ||
      ((o->pin_alloc || o->pin_register) && !o->pin_release))
    return ferry__fail(FERRY_ERROR_BACKEND, "backend %s: a device without the required operations", b->name);
  if (desc->ops->host_ptr_import && (!desc->ops->host_ptr_release || !desc->ops->host_ptr_sync))
    return ferry__fail(FERRY_ERROR_BACKEND, "backend %s: host_ptr_import without host_ptr_release and host_ptr_sync",
                       b->name);
  if (reg.device_count == reg.device_capacity) {
    size_t cap = reg.device_capacity ? reg.device_capacity * 2 : 8;
    ferry_device **grown = realloc(reg.devices, cap * sizeof *grown);
    if (!grown) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "backend %s: no host memory for a device", b->name);
    reg.devices = grown;
    reg.device_capacity = cap;
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
  info->index = reg.device_count;
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
  reg.devices[reg.device_count++] = dev;
  probe->entry->count++;
  return FERRY_OK;
}

static void device_destroy(ferry_device *dev) {
  if (ferry__cache_trim(dev) != FERRY_OK) fprintf(stderr, "ferry: ferry_shutdown: %s\n", ferry__error_text());
  ferry__engine_device_release(dev);
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
  if (i >= 0) reg.entries[reg.entry_count++] = (backend_entry){.backend = builtin_backends[i], .enabled = true};
  return true;
}

/* Orders the entries as FERRY_BACKENDS says (checked already, by
 * ferry__backends_check): the named backends enabled, in its order, then the
 * others disabled (so ferry_backend_get still lists them). */
static void plan_backends(void) {
  const char *list = ferry__option_text("FERRY_BACKENDS");
  reg.entry_count = 0;
  if (list) for_each_name(list, enable_name, NULL);
  for (size_t i = 0; i < BUILTIN_COUNT; i++) {
    bool named = false;
    for (size_t k = 0; k < reg.entry_count; k++)
      named = named || reg.entries[k].backend == builtin_backends[i];
    if (!named) reg.entries[reg.entry_count++] = (backend_entry){.backend = builtin_backends[i], .enabled = !list};
  }
  size_t extras = atomic_load(&extra_count);
  for (size_t i = 0; i < extras; i++)
    reg.entries[reg.entry_count++] = (backend_entry){.backend = extra_backends[i], .enabled = true};
  /* Enabled backends first, so that device numbers follow the entries' order. */
  backend_entry sorted[BACKEND_MAX];
  size_t n = 0;
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < reg.entry_count; i++)
      if (reg.entries[i].enabled == (pass == 0)) sorted[n++] = reg.entries[i];
  memcpy(reg.entries, sorted, n * sizeof sorted[0]);
}

static void probe_backend(backend_entry *e) {
  if (!e->enabled) {
    snprintf(e->status, sizeof e->status, "left out by FERRY_BACKENDS");
    return;
  }
  e->first = reg.device_count;
  ferry_probe probe = {.entry = e};
  ferry_status st = e->backend->probe(&probe);
  if (st != FERRY_OK) {
    /* A backend that fails half way gives up all of its devices. */
    snprintf(e->status, sizeof e->status, "%s", ferry__error_text());
    while (reg.device_count > e->first)
      device_destroy(reg.devices[--reg.device_count]);
    e->count = 0;
    if (e->backend->unload) e->backend->unload();
    return;
  }
  if (e->count == 0)
    snprintf(e->status, sizeof e->status, "the driver is present but reports no devices");
  else
    snprintf(e->status, sizeof e->status, "ok");
}

ferry_status ferry__ensure_init(void) {
  if (atomic_load_explicit(&ready, memory_order_acquire)) return FERRY_OK;
  pthread_mutex_lock(&init_lock);
  ferry_status st = FERRY_OK;
  if (!atomic_load_explicit(&ready, memory_order_relaxed)) {
    /* Backends that are absent write their reasons into the thread's sentence;
     * the caller's sentence is kept. */
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", ferry__error_text());
    st = ferry__options_load();
    if (st == FERRY_OK) {
      plan_backends();
      st = ferry__handles_init();
      if (st != FERRY_OK) ferry__options_end();
    }
    if (st == FERRY_OK) {
      for (size_t i = 0; i < reg.entry_count; i++)
        probe_backend(&reg.entries[i]);
      ferry__fail(FERRY_OK, "%s", saved);
      atomic_store_explicit(&ready, 1, memory_order_release);
    }
  }
  pthread_mutex_unlock(&init_lock);
  return st;
}

ferry_status ferry_init(void) { return ferry__ensure_init(); }

void ferry_shutdown(void) {
  pthread_mutex_lock(&init_lock);
  if (atomic_load(&ready)) {
    ferry__handles_shutdown(ferry__option_has_word("FERRY_DEBUG", "leaks"));
    for (size_t i = 0; i < reg.device_count; i++)
      ferry__engine_device_release(reg.devices[i]);
    ferry__pinned_shutdown();
    ferry__host_ranges_shutdown();
    for (size_t i = reg.device_count; i-- > 0;)
      device_destroy(reg.devices[i]);
    for (size_t i = reg.entry_count; i-- > 0;)
      if (reg.entries[i].enabled && reg.entries[i].count > 0 && reg.entries[i].backend->unload)
        reg.entries[i].backend->unload();
    free(reg.devices);
    reg.devices = NULL;
    reg.device_count = reg.device_capacity = 0;
    reg.entry_count = 0;
    ferry__copy_threads_shutdown();
    ferry__options_end();
    atomic_store(&ready, 0);
  }
  pthread_mutex_unlock(&init_lock);
}

ferry_status ferry__check_device(const ferry_device *device, const char *fn) {
  ferry_status st = ferry__ensure_init();
  if (st != FERRY_OK) return st;
  if (!device) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: device is NULL", fn);
  for (size_t i = 0; i < reg.device_count; i++)
    if (reg.devices[i] == device) return FERRY_OK;
  return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                     "%s: %p is not a device of this session (a device pointer from before ferry_shutdown()?)", fn,
                     (const void *)device);
}

size_t ferry_device_count(void) { return ferry__ensure_init() == FERRY_OK ? reg.device_count : 0; }

ferry_status ferry_device_get(size_t index, ferry_device **out_device) {
  ferry_status st = ferry__ensure_init();
  if (st != FERRY_OK) return st;
  if (!out_device) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_device_get: out_device is NULL");
  if (index >= reg.device_count)
    return ferry__fail(FERRY_ERROR_NO_DEVICE, "ferry_device_get: device index %zu, but there are %zu devices (0..%zu)",
                       index, reg.device_count, reg.device_count ? reg.device_count - 1 : 0);
  *out_device = reg.devices[index];
  return FERRY_OK;
}

ferry_device *ferry_device_best(void) {
  if (ferry__ensure_init() != FERRY_OK || reg.device_count == 0) return NULL;
  for (size_t i = 0; i < reg.device_count; i++)
    if (!reg.devices[i]->info.is_cpu) return reg.devices[i];
  for (size_t i = 0; i < reg.device_count; i++)
    if (strcmp(reg.devices[i]->backend->name, "native") == 0) return reg.devices[i];
  return reg.devices[0];
}

ferry_status ferry_device_info_get(const ferry_device *device, ferry_device_info *out_info) {
  ferry_status st = ferry__check_device(device, "ferry_device_info_get");
  if (st != FERRY_OK) return st;
  if (!out_info) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_device_info_get: out_info is NULL");
  *out_info = device->info;
  return FERRY_OK;
}

ferry_status ferry_device_native(const ferry_device *device, ferry_native *out_native) {
  ferry_status st = ferry__check_device(device, "ferry_device_native");
  if (st != FERRY_OK) return st;
  if (!out_native) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_device_native: out_native is NULL");
  ferry_native n = {0};
  if (device->ops->native) {
    st = device->ops->native(device, &n);
    if (st != FERRY_OK) return ferry__fail(st, "ferry_device_native: %s: %s", device->label, ferry__error_text());
  }
  *out_native = n;
  return FERRY_OK;
}

void ferry__uuid_text(const unsigned char b[16], char out[40]) {
  snprintf(out, 40, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
           b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

void ferry__pci_text(unsigned domain, unsigned bus, unsigned device, unsigned function, char out[32]) {
  snprintf(out, 32, "%04x:%02x:%02x.%x", domain, bus, device, function);
}

ferry_status ferry_device_driver_info(const ferry_device *device, ferry_driver_info *out_info) {
  ferry_status st = ferry__check_device(device, "ferry_device_driver_info");
  if (st != FERRY_OK) return st;
  if (!out_info) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_device_driver_info: out_info is NULL");
  /* The registry's devices are the core's own; the operations take them mutable. */
  ferry_device *dev = (ferry_device *)device;
  ferry_driver_info info;
  memset(&info, 0, sizeof info);
  if (dev->ops->free_memory) info.free_memory = dev->ops->free_memory(dev);
  if (dev->ops->driver_info) {
    st = dev->ops->driver_info(dev, &info);
    if (st != FERRY_OK) return ferry__fail(st, "ferry_device_driver_info: %s: %s", dev->label, ferry__error_text());
  }
  /* Whatever a backend wrote, the strings end inside their arrays. */
  info.driver[sizeof info.driver - 1] = info.driver_version[sizeof info.driver_version - 1] = '\0';
  info.api_version[sizeof info.api_version - 1] = info.pci_bus_id[sizeof info.pci_bus_id - 1] = '\0';
  info.uuid[sizeof info.uuid - 1] = '\0';
  *out_info = info;
  return FERRY_OK;
}

ferry_status ferry_device_synchronize(ferry_device *device) {
  ferry_status st = ferry__check_device(device, "ferry_device_synchronize");
  if (st != FERRY_OK || !device->ops->synchronize) return st;
  st = device->ops->synchronize(device);
  if (st != FERRY_OK) ferry__fail(st, "ferry_device_synchronize: %s: %s", device->label, ferry__error_text());
  return st;
}

size_t ferry_backend_count(void) { return ferry__ensure_init() == FERRY_OK ? reg.entry_count : 0; }

ferry_status ferry_backend_get(size_t index, ferry_backend_info *out_info) {
  ferry_status st = ferry__ensure_init();
  if (st != FERRY_OK) return st;
  if (!out_info) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_backend_get: out_info is NULL");
  if (index >= reg.entry_count)
    return ferry__fail(FERRY_ERROR_NO_DEVICE, "ferry_backend_get: backend index %zu, but there are %zu backends", index,
                       reg.entry_count);
  const backend_entry *e = &reg.entries[index];
  *out_info = (ferry_backend_info){.name = e->backend->name,
                                   .enabled = e->enabled,
                                   .device_count = e->count,
                                   .first_device = e->first,
                                   .status = e->status};
  return FERRY_OK;
}

ferry_status ferry_device_stats(const ferry_device *device, ferry_stats *out_stats) {
  ferry_status st = ferry__check_device(device, "ferry_device_stats");
  if (st != FERRY_OK) return st;
  if (!out_stats) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_device_stats: out_stats is NULL");
  struct ferry_device_state *s = device->state;
  *out_stats = (ferry_stats){
      .live_buffers = atomic_load(&s->live_buffers),
      .bytes_in_use = atomic_load(&s->bytes_in_use),
      .bytes_cached = atomic_load(&s->bytes_cached),
      .peak_bytes_in_use = atomic_load(&s->peak_bytes_in_use),
      .h2d_bytes = atomic_load(&s->h2d_bytes),
      .d2h_bytes = atomic_load(&s->d2h_bytes),
      .d2d_bytes = atomic_load(&s->d2d_bytes),
      .h2d_count = atomic_load(&s->h2d_count),
      .d2h_count = atomic_load(&s->d2h_count),
      .d2d_count = atomic_load(&s->d2d_count),
  };
  return FERRY_OK;
}

ferry_status ferry_device_trim(ferry_device *device) {
  ferry_status st = ferry__check_device(device, "ferry_device_trim");
  if (st != FERRY_OK) return st;
  st = ferry__cache_trim(device);
  if (st != FERRY_OK) return ferry__fail(st, "ferry_device_trim: %s: %s", device->label, ferry__error_text());
  return FERRY_OK;
}
