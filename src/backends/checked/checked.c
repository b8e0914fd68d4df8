/*
 * checked: host memory like native, for finding a program's own memory bugs.
 *
 * Every allocation sits between two guard zones of GUARD_BYTE. Fresh memory is
 * filled with FRESH_BYTE, freed memory with FREED_BYTE and kept in a quarantine
 * (QUARANTINE_BYTES, QUARANTINE_COUNT) before it goes back to the C library, so
 * that a late write through a stale ferry_device_ptr shows up as changed poison.
 * Guards are checked on every transfer touching the buffer and on free;
 * ferry_device_synchronize checks every live buffer and the quarantine. A broken
 * guard is FERRY_ERROR_BACKEND naming the offset and the bytes found.
 */
#include "../../core/backend.h"
#include "../../core/host_info.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD            64 /* bytes before and (at least) after each buffer */
#define GUARD_BYTE       0xFD
#define FRESH_BYTE       0xCB
#define FREED_BYTE       0xDD
#define QUARANTINE_BYTES ((size_t)64 << 20)
#define QUARANTINE_COUNT 1024

typedef struct checked_alloc {
  struct checked_alloc *prev, *next; /* in the live list or the quarantine */
  unsigned char *raw;                /* GUARD | bytes | tail guard (to a multiple of 64, plus GUARD) */
  size_t bytes, total;
} checked_alloc;

typedef struct checked_device {
  pthread_mutex_t lock;
  checked_alloc live;       /* list head */
  checked_alloc quarantine; /* list head; oldest at head.next */
  size_t quarantine_bytes, quarantine_count;
} checked_device;

static checked_device the_device;
static char checked_name[300];

static void list_init(checked_alloc *head) { head->prev = head->next = head; }
static void list_push(checked_alloc *head, checked_alloc *a) {
  a->prev = head->prev;
  a->next = head;
  head->prev->next = a;
  head->prev = a;
}
static void list_remove(checked_alloc *a) {
  a->prev->next = a->next;
  a->next->prev = a->prev;
}

static unsigned char *user_bytes(const checked_alloc *a) { return a->raw + GUARD; }

/* Finds the first byte in [p, p+n) that is not `expected`. */
static const unsigned char *first_changed(const unsigned char *p, size_t n, unsigned char expected) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != expected) return p + i;
  return NULL;
}

/* Formats up to 8 bytes from p (within [lo, hi)) as hex. */
static void hex_bytes(char *buf, size_t size, const unsigned char *p, const unsigned char *hi) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < 8 && p + i < hi && used + 4 < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%02x", i ? " " : "", p[i]);
}

static ferry_status verify(const ferry_device *dev, const checked_alloc *a) {
  const unsigned char *user = user_bytes(a);
  const unsigned char *end = a->raw + a->total;
  const unsigned char *bad = first_changed(a->raw, GUARD, GUARD_BYTE);
  const char *where = "before the start";
  if (!bad) {
    bad = first_changed(user + a->bytes, (size_t)(end - (user + a->bytes)), GUARD_BYTE);
    where = "after the end";
  }
  if (!bad) return FERRY_OK;
  char found[64];
  hex_bytes(found, sizeof found, bad, end);
  long long offset = (long long)(bad - user);
  (void)dev;
  return ferry__fail(FERRY_ERROR_BACKEND,
                     "checked: out-of-bounds write into the guard bytes %s of the %zu-byte buffer at %p: offset "
                     "%lld (its own bytes are 0..%lld) holds %s, expected %02x",
                     where, a->bytes, (void *)user, offset, (long long)a->bytes - 1, found, GUARD_BYTE);
}

/* Checks a quarantined block's poison; reports a write after free. */
static ferry_status verify_freed(const ferry_device *dev, const checked_alloc *a) {
  ferry_status st = verify(dev, a);
  if (st != FERRY_OK) return st;
  const unsigned char *bad = first_changed(user_bytes(a), a->bytes, FREED_BYTE);
  if (!bad) return FERRY_OK;
  char found[64];
  hex_bytes(found, sizeof found, bad, user_bytes(a) + a->bytes);
  (void)dev;
  return ferry__fail(FERRY_ERROR_BACKEND,
                     "checked: write after free into the freed %zu-byte buffer at %p: offset %zu holds %s, "
                     "expected %02x",
                     a->bytes, (void *)user_bytes(a), (size_t)(bad - user_bytes(a)), found, FREED_BYTE);
}

static ferry_status checked_alloc_mem(ferry_device *dev, size_t bytes, ferry_mem *out) {
  checked_device *cd = dev->impl;
  size_t body = (bytes + 63) & ~(size_t)63;
  size_t total = GUARD + body + GUARD;
  checked_alloc *a = malloc(sizeof *a);
  void *raw = NULL;
  if (body < bytes || total < body || !a || posix_memalign(&raw, 64, total) != 0) {
    free(a);
    char text[64];
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "posix_memalign could not give %s on %s",
                       ferry__bytes_text(bytes, text), dev->label);
  }
  a->raw = raw;
  a->bytes = bytes;
  a->total = total;
  memset(a->raw, GUARD_BYTE, GUARD);
  memset(user_bytes(a), FRESH_BYTE, bytes);
  memset(user_bytes(a) + bytes, GUARD_BYTE, total - GUARD - bytes);
  pthread_mutex_lock(&cd->lock);
  list_push(&cd->live, a);
  pthread_mutex_unlock(&cd->lock);
  *out = (ferry_mem){.handle = (uintptr_t)user_bytes(a), .impl = a, .bytes = bytes};
  return FERRY_OK;
}

/* Lets the oldest quarantined block go, after checking its poison. Called with
 * the lock held. */
static ferry_status quarantine_release_oldest(ferry_device *dev, checked_device *cd) {
  checked_alloc *old = cd->quarantine.next;
  ferry_status st = verify_freed(dev, old);
  list_remove(old);
  cd->quarantine_bytes -= old->bytes;
  cd->quarantine_count--;
  free(old->raw);
  free(old);
  return st;
}

/* Lets the oldest quarantined blocks go until the quarantine is within bounds.
 * Called with the lock held. A block whose poison changed is reported on stderr:
 * the call that pushed it out is not the one at fault. */
static void quarantine_trim(ferry_device *dev, checked_device *cd, size_t keep_bytes, size_t keep_count) {
  while (cd->quarantine_count > keep_count || cd->quarantine_bytes > keep_bytes)
    if (quarantine_release_oldest(dev, cd) != FERRY_OK)
      fprintf(stderr, "ferry: %s: %s\n", dev->label, ferry__error_text());
}

/* ferry_device_trim, and a retry after out-of-memory: the whole quarantine goes
 * back; the first write after free found on the way is the call's error. */
static ferry_status checked_trim(ferry_device *dev) {
  checked_device *cd = dev->impl;
  ferry_status first = FERRY_OK;
  ferry_error_scope scope = ferry__first_failure_begin(false); /* the first write after free is the one told */
  pthread_mutex_lock(&cd->lock);
  while (cd->quarantine_count > 0)
    if (quarantine_release_oldest(dev, cd) != FERRY_OK && first == FERRY_OK) first = FERRY_ERROR_BACKEND;
  pthread_mutex_unlock(&cd->lock);
  ferry__first_failure_end(scope);
  if (first != FERRY_OK) ferry__fail(first, "%s (found while giving the quarantine back)", ferry__error_text());
  return first;
}

static ferry_status checked_free(ferry_device *dev, ferry_mem *mem) {
  checked_device *cd = dev->impl;
  checked_alloc *a = mem->impl;
  /* The corruption is reported, and the memory released all the same: the bug is
   * the program's, and keeping the buffer would only leak it. */
  ferry_status st = verify(dev, a);
  ferry_error_scope scope = ferry__first_failure_begin(st != FERRY_OK); /* the quarantine's own reports come after */
  /* Out of the live list before it is poisoned: ferry_device_synchronize reads
   * the live buffers' guards under the lock, from any thread. */
  pthread_mutex_lock(&cd->lock);
  list_remove(a);
  pthread_mutex_unlock(&cd->lock);
  memset(a->raw, GUARD_BYTE, a->total);
  memset(user_bytes(a), FREED_BYTE, a->bytes);
  pthread_mutex_lock(&cd->lock);
  list_push(&cd->quarantine, a);
  cd->quarantine_bytes += a->bytes;
  cd->quarantine_count++;
  quarantine_trim(dev, cd, QUARANTINE_BYTES, QUARANTINE_COUNT);
  pthread_mutex_unlock(&cd->lock);
  ferry__first_failure_end(scope);
  return st;
}

static ferry_status check_mem(const ferry_device *dev, const ferry_mem *mem) {
  return mem->impl ? verify(dev, mem->impl) : FERRY_OK; /* zero-copy memory has no guards */
}

static ferry_status checked_check(ferry_device *dev, const ferry_mem *mem) { return check_mem(dev, mem); }

/* No lanes: every operation is done on return. */
static ferry_status checked_write(ferry_device *dev, ferry_lane *lane, ferry_mem *dst, size_t off, const void *src,
                                  size_t n) {
  (void)lane;
  ferry_status st = check_mem(dev, dst);
  if (st == FERRY_OK) memmove((char *)dst->handle + off, src, n);
  return st;
}

static ferry_status checked_read(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t off, void *dst,
                                 size_t n) {
  (void)lane;
  ferry_status st = check_mem(dev, src);
  if (st == FERRY_OK) memmove(dst, (const char *)src->handle + off, n);
  return st;
}

static ferry_status checked_copy(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t so, ferry_mem *dst,
                                 size_t doff, size_t n, ferry_ticket *out) {
  (void)lane;
  if (out) *out = 0;
  ferry_status st = check_mem(dev, src);
  if (st == FERRY_OK) st = check_mem(dev, dst);
  if (st == FERRY_OK) memmove((char *)dst->handle + doff, (const char *)src->handle + so, n);
  return st;
}

static ferry_status checked_synchronize(ferry_device *dev) {
  checked_device *cd = dev->impl;
  ferry_status st = FERRY_OK;
  pthread_mutex_lock(&cd->lock);
  for (checked_alloc *a = cd->live.next; a != &cd->live && st == FERRY_OK; a = a->next)
    st = verify(dev, a);
  for (checked_alloc *a = cd->quarantine.next; a != &cd->quarantine && st == FERRY_OK; a = a->next)
    st = verify_freed(dev, a);
  pthread_mutex_unlock(&cd->lock);
  return st;
}

static void checked_destroy(ferry_device *dev) {
  checked_device *cd = dev->impl;
  pthread_mutex_lock(&cd->lock);
  quarantine_trim(dev, cd, 0, 0);
  pthread_mutex_unlock(&cd->lock);
  pthread_mutex_destroy(&cd->lock);
}

static ferry_status checked_driver_info(ferry_device *dev, ferry_driver_info *out) {
  (void)dev;
  ferry__host_driver_info(out);
  return FERRY_OK;
}

static const ferry_device_ops checked_ops = {
    .alloc = checked_alloc_mem,
    .free = checked_free,
    .write = checked_write,
    .read = checked_read,
    .copy_start = checked_copy,
    .synchronize = checked_synchronize,
    .driver_info = checked_driver_info,
    .trim = checked_trim,
    .check = checked_check,
    .destroy = checked_destroy,
};

static ferry_status checked_probe(ferry_probe *probe) {
  char cpu[256];
  ferry__host_cpu_name(cpu, sizeof cpu);
  snprintf(checked_name, sizeof checked_name, "%s (checked)", cpu);
  checked_device *cd = &the_device;
  pthread_mutex_init(&cd->lock, NULL);
  list_init(&cd->live);
  list_init(&cd->quarantine);
  cd->quarantine_bytes = cd->quarantine_count = 0;
  uint64_t memory = ferry__host_ram();
  ferry_device_desc desc = {
      .ops = &checked_ops,
      .impl = cd,
      .name = checked_name,
      .total_memory = memory,
      .max_allocation = memory,
      .is_cpu = true,
      .zero_copy = true,
      .host_ptr = true,
      .host_ptr_alignment = 1,
      .caps = FERRY_CAP_OVERLAP_COPY,
  };
  return ferry__device_add(probe, &desc);
}

const ferry_backend ferry_backend_checked = {.name = "checked", .probe = checked_probe, .fork_safe = true};
