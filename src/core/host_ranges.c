/*
 * The host ranges under live host-pointer buffers, so that two buffers never
 * share bytes of the user's memory (drivers refuse, or worse, alias them).
 */
#include "internal.h"

#include <stdlib.h>

typedef struct host_range {
  uintptr_t start, end;
} host_range;

static struct {
  pthread_mutex_t lock;
  host_range *items;
  size_t count, capacity;
} ranges = {.lock = PTHREAD_MUTEX_INITIALIZER};

ferry_status ferry__host_ranges_claim(const char *fn, const void *ptr, size_t bytes) {
  uintptr_t start = (uintptr_t)ptr, end = start + bytes;
  ferry_status st = FERRY_OK;
  pthread_mutex_lock(&ranges.lock);
  for (size_t i = 0; i < ranges.count && st == FERRY_OK; i++)
    if (start < ranges.items[i].end && ranges.items[i].start < end) st = FERRY_ERROR_REFUSED;
  if (st == FERRY_OK && ranges.count == ranges.capacity) {
    size_t cap = ranges.capacity ? ranges.capacity * 2 : 16;
    host_range *grown = ferry__core_alloc(ranges.items, cap * sizeof *grown);
    if (grown) {
      ranges.items = grown;
      ranges.capacity = cap;
    } else {
      st = ferry__fail(FERRY_ERROR_OUT_OF_MEMORY,
                       "%s: no host memory to record the range of a host-pointer buffer (%zu bytes for %zu ranges)", fn,
                       cap * sizeof *grown, cap);
    }
  }
  if (st == FERRY_OK) ranges.items[ranges.count++] = (host_range){start, end};
  pthread_mutex_unlock(&ranges.lock);
  return st;
}

void ferry__host_ranges_unclaim(const void *ptr) {
  pthread_mutex_lock(&ranges.lock);
  for (size_t i = 0; i < ranges.count; i++) {
    if (ranges.items[i].start == (uintptr_t)ptr) {
      ranges.items[i] = ranges.items[--ranges.count];
      break;
    }
  }
  pthread_mutex_unlock(&ranges.lock);
}

void ferry__host_ranges_shutdown(void) {
  pthread_mutex_lock(&ranges.lock);
  free(ranges.items);
  ranges.items = NULL;
  ranges.count = ranges.capacity = 0;
  pthread_mutex_unlock(&ranges.lock);
}

void ferry__host_ranges_fork(ferry_fork_phase phase) {
  if (phase == FERRY_FORK_PREPARE)
    pthread_mutex_lock(&ranges.lock);
  else
    pthread_mutex_unlock(&ranges.lock);
}
