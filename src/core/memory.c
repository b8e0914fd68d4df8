/*
 * Device memory through the allocation cache, and per-device statistics.
 *
 * On devices whose allocations are slow (GPU drivers: tens of microseconds for a
 * large cuMemAlloc), freed memory is kept in size classes and handed to the next
 * allocation of the same class. Classes are 2^k x {1, 1.25, 1.5, 1.75}, so a
 * buffer wastes at most a quarter of its size. The cache holds at most
 * cache_limit bytes (FERRY_CACHE_LIMIT, default a quarter of the device's
 * memory); on out-of-memory it is emptied and the allocation tried again.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_CLASS 256u

ferry_status ferry__device_state_init(ferry_device *dev) {
  struct ferry_device_state *s = calloc(1, sizeof *s);
  if (!s) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for the device's state", dev->label);
  pthread_mutex_init(&s->cache_lock, NULL);
  pthread_mutex_init(&s->default_lock, NULL);
  pthread_mutex_init(&s->queues_lock, NULL);
  uint64_t limit;
  if (!ferry__option_number("FERRY_CACHE_LIMIT", &limit)) limit = dev->info.total_memory / 4;
  s->cache_limit = (dev->caps & FERRY_CAP_CACHE) ? limit : 0;
  s->session = ferry__handles_session();
  dev->state = s;
  return FERRY_OK;
}

void ferry__device_state_destroy(ferry_device *dev) {
  while (dev->state->spare_nodes) {
    ferry_cache_node *n = dev->state->spare_nodes;
    dev->state->spare_nodes = n->next;
    free(n);
  }
  pthread_mutex_destroy(&dev->state->cache_lock);
  pthread_mutex_destroy(&dev->state->default_lock);
  pthread_mutex_destroy(&dev->state->queues_lock);
  free(dev->state);
  dev->state = NULL;
}

void ferry__device_set_total_memory(ferry_device *dev, uint64_t bytes) { dev->info.total_memory = bytes; }

void ferry__device_state_forget(ferry_device *dev) {
  struct ferry_device_state *s = dev->state;
  /* The cached blocks belong to the parent's driver: only the nodes go. Locks
   * held by the parent's threads are not touched. */
  for (unsigned b = 0; b < FERRY_CACHE_BUCKETS; b++) {
    while (s->cache[b]) {
      ferry_cache_node *n = s->cache[b];
      s->cache[b] = n->next;
      free(n);
    }
  }
  while (s->spare_nodes) {
    ferry_cache_node *n = s->spare_nodes;
    s->spare_nodes = n->next;
    free(n);
  }
  free(s);
  dev->state = NULL;
}

static unsigned floor_log2(size_t v) {
  return (unsigned)(sizeof(unsigned long long) * 8 - 1) - (unsigned)__builtin_clzll(v);
}

size_t ferry__size_class(size_t bytes) {
  if (bytes <= MIN_CLASS) return MIN_CLASS;
  unsigned k = floor_log2(bytes - 1); /* 2^k < bytes <= 2^(k+1) */
  size_t step = (size_t)1 << (k - 2);
  size_t rounded = (bytes + step - 1) & ~(step - 1);
  return rounded < bytes ? bytes : rounded; /* no class above SIZE_MAX - step */
}

static unsigned bucket_of(size_t class_bytes) {
  unsigned k = floor_log2(class_bytes);
  unsigned mantissa = (unsigned)(class_bytes >> (k - 2)) & 3u; /* 4..7 -> 0..3 */
  return (k * 4 + mantissa) % FERRY_CACHE_BUCKETS;
}

static bool cache_take(ferry_device *dev, size_t class_bytes, ferry_mem *out) {
  struct ferry_device_state *s = dev->state;
  bool found = false;
  pthread_mutex_lock(&s->cache_lock);
  ferry_cache_node **link = &s->cache[bucket_of(class_bytes)];
  for (ferry_cache_node *n = *link; n; link = &n->next, n = n->next) {
    if (n->class_bytes == class_bytes) {
      *link = n->next;
      *out = n->mem;
      /* Written under the lock only; readers outside it see one value or the other. */
      atomic_store_explicit(&s->bytes_cached,
                            atomic_load_explicit(&s->bytes_cached, memory_order_relaxed) - class_bytes,
                            memory_order_relaxed);
      n->next = s->spare_nodes;
      s->spare_nodes = n;
      found = true;
      break;
    }
  }
  pthread_mutex_unlock(&s->cache_lock);
  return found;
}

static bool cache_put(ferry_device *dev, const ferry_mem *mem, size_t class_bytes) {
  struct ferry_device_state *s = dev->state;
  bool kept = false;
  pthread_mutex_lock(&s->cache_lock);
  if (atomic_load_explicit(&s->bytes_cached, memory_order_relaxed) + class_bytes <= s->cache_limit) {
    ferry_cache_node *n = s->spare_nodes;
    if (n)
      s->spare_nodes = n->next;
    else
      n = malloc(sizeof *n);
    if (n) {
      n->mem = *mem;
      n->class_bytes = class_bytes;
      ferry_cache_node **head = &s->cache[bucket_of(class_bytes)];
      n->next = *head;
      *head = n;
      atomic_store_explicit(&s->bytes_cached,
                            atomic_load_explicit(&s->bytes_cached, memory_order_relaxed) + class_bytes,
                            memory_order_relaxed);
      kept = true;
    }
  }
  pthread_mutex_unlock(&s->cache_lock);
  return kept;
}

ferry_status ferry__cache_trim(ferry_device *dev) {
  struct ferry_device_state *s = dev->state;
  ferry_cache_node *all = NULL;
  pthread_mutex_lock(&s->cache_lock);
  for (unsigned b = 0; b < FERRY_CACHE_BUCKETS; b++) {
    while (s->cache[b]) {
      ferry_cache_node *n = s->cache[b];
      s->cache[b] = n->next;
      n->next = all;
      all = n;
    }
  }
  atomic_store_explicit(&s->bytes_cached, 0, memory_order_relaxed);
  pthread_mutex_unlock(&s->cache_lock);
  /* Back to the driver outside the lock: frees can be slow. Every block leaves
   * the cache; the first driver failure is reported (with its sentence). */
  ferry_status first = FERRY_OK;
  ferry_error_scope scope = ferry__first_failure_begin(false);
  while (all) {
    ferry_cache_node *n = all;
    all = n->next;
    ferry_status st = dev->ops->free(dev, &n->mem);
    if (st != FERRY_OK && first == FERRY_OK) first = st;
    free(n);
  }
  /* Then what the backend keeps for itself (checked's quarantine). */
  if (dev->ops->trim) {
    ferry_status st = dev->ops->trim(dev);
    if (st != FERRY_OK && first == FERRY_OK) first = st;
  }
  ferry__first_failure_end(scope);
  return first;
}

ferry_status ferry__mem_alloc(ferry_device *dev, size_t bytes, ferry_mem *out, size_t *out_class) {
  size_t class_bytes = 0;
  if (dev->state->cache_limit) {
    class_bytes = ferry__size_class(bytes);
    if (class_bytes > dev->info.max_allocation) class_bytes = 0;
  }
  ferry_mem mem = {0};
  if (class_bytes && cache_take(dev, class_bytes, &mem)) {
    *out = mem;
    *out_class = class_bytes;
    return FERRY_OK;
  }
  size_t ask = class_bytes ? class_bytes : bytes;
  ferry_status st = dev->ops->alloc(dev, ask, &mem);
  if (st == FERRY_ERROR_OUT_OF_MEMORY && (atomic_load(&dev->state->bytes_cached) > 0 || dev->ops->trim)) {
    /* A failure to free is the driver's, and the retry says what matters; a
     * corruption found in memory the backend kept has nobody else to go to. */
    ferry_error_scope quiet = ferry__first_failure_begin(true);
    ferry_status trimmed = ferry__cache_trim(dev);
    ferry__first_failure_end(quiet);
    if (trimmed == FERRY_ERROR_BACKEND && dev->ops->trim)
      fprintf(stderr, "ferry: %s: the cache given back after an out-of-memory: a driver failure\n", dev->label);
    st = dev->ops->alloc(dev, ask, &mem);
    if (st != FERRY_OK && st != FERRY_ERROR_OUT_OF_MEMORY)
      ferry__fail(st, "%s (a second try, after the cache was given back on an out-of-memory)", ferry__error_text());
  }
  if (st == FERRY_ERROR_OUT_OF_MEMORY && ask != bytes) {
    /* The rounding may be what did not fit: the exact size, not cached later. */
    class_bytes = 0;
    st = dev->ops->alloc(dev, bytes, &mem);
  }
  if (st != FERRY_OK) return st;
  *out = mem;
  *out_class = class_bytes;
  return FERRY_OK;
}

ferry_status ferry__mem_release(ferry_device *dev, ferry_mem *mem, size_t class_bytes) {
  if (class_bytes && cache_put(dev, mem, class_bytes)) return FERRY_OK;
  return dev->ops->free(dev, mem);
}
