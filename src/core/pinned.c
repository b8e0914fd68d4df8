/*
 * The one registry of pinned host memory: blocks from ferry_host_alloc and the
 * engine's staging rings, for every backend.
 *
 * A block is allocated once, by the pin_alloc of the device it was asked for
 * (memory its driver pins: cuMemHostAlloc, a mapped CL_MEM_ALLOC_HOST_PTR
 * buffer, host-visible Vulkan memory), or by page-aligned malloc where that
 * device has no pin_alloc or staging does not pay on it (CPU devices). Other
 * devices reach the same block through pin_register, made the first time one of
 * them moves bytes from or to it and kept until the block is freed; a device
 * whose backend cannot register it is remembered as such and not asked again.
 * Every block is page-aligned: the core aligns what the backend returns.
 *
 * Blocks are kept sorted by address, so "is this range pinned for device D?" is
 * a binary search under a read lock, asked once per transfer by the engine.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PAGE ((size_t)4096)

/* A device's view of a block it did not allocate. */
typedef struct pin_reg {
  ferry_device *dev;
  uintptr_t token;
  bool ok; /* false: the device could not register the block */
} pin_reg;

typedef struct pinned_block {
  uintptr_t start;     /* page-aligned, what the caller got */
  size_t bytes;        /* what the caller asked */
  size_t span;         /* bytes rounded up to pages: what registrations cover */
  void *base;          /* what the allocator returned */
  size_t base_bytes;   /* what it was asked for */
  ferry_device *owner; /* whose pin_alloc made it; NULL for malloc */
  uintptr_t owner_token;
  bool user; /* ferry_host_alloc's: the user's to free */
  bool lent; /* memory a companion library lent (ferry__pinned_lend): never freed here */
  pin_reg *regs;
  size_t nregs;
} pinned_block;

/* Sorted by start. `lock` guards the array and the blocks' registrations;
 * `register_lock` makes one registration at a time, outside `lock`, since a
 * driver may take milliseconds to pin a large block. */
static struct {
  pthread_rwlock_t lock;
  pthread_mutex_t register_lock;
  pinned_block **items;
  size_t count, capacity;
} reg = {.lock = PTHREAD_RWLOCK_INITIALIZER, .register_lock = PTHREAD_MUTEX_INITIALIZER};

uint64_t ferry__host_ram(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
}

/* Index of the first block starting after p. */
static size_t upper(uintptr_t p) {
  size_t lo = 0, hi = reg.count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (reg.items[mid]->start <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The block holding [p, p + bytes), or NULL; with a lock held. */
static pinned_block *holding(uintptr_t p, size_t bytes) {
  size_t at = upper(p);
  if (at == 0) return NULL;
  pinned_block *b = reg.items[at - 1];
  return p - b->start <= b->bytes && bytes <= b->bytes - (p - b->start) ? b : NULL;
}

static bool stages(const ferry_device *dev) { return (dev->caps & FERRY_CAP_STAGE) && dev->ops->pin_alloc; }

/* ---- allocation ------------------------------------------------------------- */

/* The device's pinned memory, page-aligned: asked as is, and again with a page
 * more to align by hand when the driver's block was not aligned (remembered
 * per device, so that the next block is asked that way at once). */
static ferry_status pin_aligned(ferry_device *dev, size_t span, pinned_block *b) {
  struct ferry_device_state *s = dev->state;
  for (int attempt = 0; attempt < 2; attempt++) {
    size_t ask = s->pin_misaligned ? span + PAGE : span;
    if (ask < span) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no address space for %zu bytes", span);
    void *base = NULL;
    uintptr_t token = 0;
    ferry_status st = dev->ops->pin_alloc(dev, ask, &base, &token);
    if (st != FERRY_OK) return st;
    uintptr_t start = ((uintptr_t)base + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
    if (start == (uintptr_t)base || s->pin_misaligned) {
      *b = (pinned_block){.start = start, .base = base, .base_bytes = ask, .owner = dev, .owner_token = token};
      return FERRY_OK;
    }
    dev->ops->pin_release(dev, base, ask, token, true);
    s->pin_misaligned = true;
  }
  return ferry__fail(FERRY_ERROR_BACKEND, "%s gave no page-aligned pinned memory", dev->label);
}

/* Puts b in the registry, sorted by start; false (nothing changed) when there is
 * no memory to grow it or (`exclusive`) b overlaps a block already there. */
static bool insert(pinned_block *b, bool exclusive) {
  pthread_rwlock_wrlock(&reg.lock);
  size_t at = upper(b->start);
  bool overlaps = exclusive && ((at > 0 && reg.items[at - 1]->start + reg.items[at - 1]->span > b->start) ||
                                (at < reg.count && b->start + b->span > reg.items[at]->start));
  if (overlaps) {
    pthread_rwlock_unlock(&reg.lock);
    return false;
  }
  if (reg.count == reg.capacity) {
    size_t cap = reg.capacity ? reg.capacity * 2 : 16;
    pinned_block **grown = realloc(reg.items, cap * sizeof *grown);
    if (!grown) {
      pthread_rwlock_unlock(&reg.lock);
      return false;
    }
    reg.items = grown;
    reg.capacity = cap;
  }
  memmove(&reg.items[at + 1], &reg.items[at], (reg.count - at) * sizeof reg.items[0]);
  reg.items[at] = b;
  reg.count++;
  pthread_rwlock_unlock(&reg.lock);
  return true;
}

ferry_status ferry__pinned_alloc(ferry_device *dev, size_t bytes, bool user, void **out_ptr) {
  char size[64], ram[64];
  uint64_t limit = ferry__host_ram();
  size_t span = (bytes + PAGE - 1) & ~(PAGE - 1);
  /* Never handed to an allocator: sanitizers abort on such sizes. */
  if (bytes > limit || span < bytes)
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s asked, but this machine has %s of memory",
                       ferry__bytes_text(bytes, size), ferry__bytes_text(limit, ram));
  pinned_block *b = malloc(sizeof *b);
  if (!b) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory to track a pinned block");
  if (stages(dev)) {
    ferry_status st = pin_aligned(dev, span, b);
    if (st != FERRY_OK) {
      free(b);
      return st;
    }
  } else {
    void *p = NULL;
    if (posix_memalign(&p, PAGE, span) != 0) {
      free(b);
      return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for %s", ferry__bytes_text(bytes, size));
    }
    *b = (pinned_block){.start = (uintptr_t)p, .base = p, .base_bytes = span};
  }
  b->bytes = bytes;
  b->span = span;
  b->user = user;
  b->lent = false;
  b->regs = NULL;
  b->nregs = 0;
  if (!insert(b, false)) {
    if (b->owner)
      b->owner->ops->pin_release(b->owner, b->base, b->base_bytes, b->owner_token, true);
    else
      free(b->base);
    free(b);
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory to track a pinned block");
  }
  *out_ptr = (void *)b->start;
  return FERRY_OK;
}

static void block_release(pinned_block *b) {
  for (size_t i = 0; i < b->nregs; i++)
    if (b->regs[i].ok)
      b->regs[i].dev->ops->pin_release(b->regs[i].dev, (void *)b->start, b->span, b->regs[i].token, false);
  if (b->owner)
    b->owner->ops->pin_release(b->owner, b->base, b->base_bytes, b->owner_token, true);
  else if (!b->lent)
    free(b->base);
  free(b->regs);
  free(b);
}

bool ferry__pinned_free(void *ptr, bool user) {
  pthread_rwlock_wrlock(&reg.lock);
  size_t at = upper((uintptr_t)ptr);
  pinned_block *b = at > 0 ? reg.items[at - 1] : NULL;
  if (!b || b->start != (uintptr_t)ptr || b->user != user || b->lent) {
    pthread_rwlock_unlock(&reg.lock);
    return false;
  }
  memmove(&reg.items[at - 1], &reg.items[at], (reg.count - at) * sizeof reg.items[0]);
  reg.count--;
  pthread_rwlock_unlock(&reg.lock);
  block_release(b);
  return true;
}

ferry_status ferry__pinned_lend(void *ptr, size_t bytes) {
  uintptr_t start = (uintptr_t)ptr;
  size_t span = (bytes + PAGE - 1) & ~(PAGE - 1);
  if (!ptr || bytes == 0 || (start & (PAGE - 1)) != 0 || span < bytes || start > UINTPTR_MAX - span)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%zu bytes at %p cannot be lent: a page-aligned range is needed",
                       bytes, ptr);
  /* Devices pin whole pages: the part of a last page past `bytes` would be
   * pinned too, under memory the lender does not own (the next heap block,
   * whose transfers a driver then refuses: a range partly registered). */
  if (span != bytes)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                       "%zu bytes at %p cannot be lent: devices pin whole pages, so the range must be whole pages "
                       "(a multiple of %zu bytes) that the lender owns",
                       bytes, ptr, PAGE);
  pinned_block *b = malloc(sizeof *b);
  if (!b) return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory to track a pinned block");
  *b = (pinned_block){.start = start, .bytes = bytes, .span = span, .base = ptr, .base_bytes = span, .lent = true};
  if (insert(b, true)) return FERRY_OK;
  free(b);
  return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                     "%zu bytes at %p cannot be lent: they overlap pinned memory of ferry's, or there is no host "
                     "memory to track them",
                     bytes, ptr);
}

bool ferry__pinned_take_back(void *ptr) {
  pthread_rwlock_wrlock(&reg.lock);
  size_t at = upper((uintptr_t)ptr);
  pinned_block *b = at > 0 ? reg.items[at - 1] : NULL;
  if (!b || b->start != (uintptr_t)ptr || !b->lent) {
    pthread_rwlock_unlock(&reg.lock);
    return false;
  }
  memmove(&reg.items[at - 1], &reg.items[at], (reg.count - at) * sizeof reg.items[0]);
  reg.count--;
  pthread_rwlock_unlock(&reg.lock);
  block_release(b); /* the registrations only */
  return true;
}

void ferry__pinned_shutdown(void) {
  pthread_rwlock_wrlock(&reg.lock);
  pinned_block **items = reg.items;
  size_t count = reg.count;
  reg.items = NULL;
  reg.count = reg.capacity = 0;
  pthread_rwlock_unlock(&reg.lock);
  for (size_t i = 0; i < count; i++)
    block_release(items[i]);
  free(items);
}

/* ---- finding and registering ------------------------------------------------ */

/* The device's view of the block, with `lock` held: 1 reachable (filled in),
 * 0 not reachable, -1 not yet asked. */
static int view(const pinned_block *b, const ferry_device *dev, uintptr_t p, ferry_pinned *out) {
  if (b->owner == dev) {
    *out = (ferry_pinned){.host = (void *)p, .token = b->owner_token, .offset = p - (uintptr_t)b->base};
    return 1;
  }
  for (size_t i = 0; i < b->nregs; i++) {
    if (b->regs[i].dev != dev) continue;
    if (!b->regs[i].ok) return 0;
    *out = (ferry_pinned){.host = (void *)p, .token = b->regs[i].token, .offset = p - b->start};
    return 1;
  }
  return -1;
}

/* Registers the block starting at `start` with dev (register_lock held). */
static void register_block(ferry_device *dev, uintptr_t start) {
  pthread_rwlock_rdlock(&reg.lock);
  pinned_block *b = holding(start, 0);
  ferry_pinned ignored;
  bool asked = !b || b->start != start || view(b, dev, start, &ignored) >= 0;
  size_t span = b ? b->span : 0;
  pthread_rwlock_unlock(&reg.lock);
  if (asked) return; /* freed meanwhile, or another thread registered it */
  uintptr_t token = 0;
  /* A refusal is remembered, not reported: the transfer goes on staged, and the
   * thread's sentence stays the caller's. */
  ferry_error_scope quiet = ferry__first_failure_begin(true);
  bool ok = dev->ops->pin_register(dev, (void *)start, span, &token) == FERRY_OK;
  ferry__first_failure_end(quiet);
  pthread_rwlock_wrlock(&reg.lock);
  b = holding(start, 0);
  pin_reg *grown = b && b->start == start ? realloc(b->regs, (b->nregs + 1) * sizeof *grown) : NULL;
  if (grown) {
    b->regs = grown;
    b->regs[b->nregs++] = (pin_reg){.dev = dev, .token = token, .ok = ok};
  }
  pthread_rwlock_unlock(&reg.lock);
  if (!grown && ok) dev->ops->pin_release(dev, (void *)start, span, token, false);
}

bool ferry__pinned_find(ferry_device *dev, const void *ptr, size_t bytes, ferry_pinned *out) {
  uintptr_t p = (uintptr_t)ptr;
  for (int attempt = 0; attempt < 2; attempt++) {
    pthread_rwlock_rdlock(&reg.lock);
    pinned_block *b = reg.count ? holding(p, bytes) : NULL;
    int seen = b ? view(b, dev, p, out) : 0;
    uintptr_t start = b ? b->start : 0;
    pthread_rwlock_unlock(&reg.lock);
    if (seen >= 0) return seen == 1;
    if (!dev->ops->pin_register || !(dev->caps & FERRY_CAP_STAGE) || attempt > 0) return false;
    pthread_mutex_lock(&reg.register_lock);
    register_block(dev, start);
    pthread_mutex_unlock(&reg.register_lock);
  }
  return false;
}

/* ---- fork() ----------------------------------------------------------------- */

void ferry__pinned_fork(ferry_fork_phase phase) {
  if (phase == FERRY_FORK_PREPARE) {
    pthread_mutex_lock(&reg.register_lock);
    pthread_rwlock_wrlock(&reg.lock);
    return;
  }
  pthread_rwlock_unlock(&reg.lock);
  if (phase == FERRY_FORK_CHILD) {
    /* glibc's write lock remembers its writer's thread id, which differs in the
     * child, so the unlock above did not release it (it only balances the
     * sanitizers' books): the child's lock starts afresh. */
    pthread_rwlock_t fresh = PTHREAD_RWLOCK_INITIALIZER;
    reg.lock = fresh;
  }
  pthread_mutex_unlock(&reg.register_lock);
}

void ferry__pinned_forget(void) {
  /* The blocks a driver pinned or registered are the parent's driver's: only the
   * records go, and the plain host memory of blocks no driver made. */
  for (size_t i = 0; i < reg.count; i++) {
    if (!reg.items[i]->owner && !reg.items[i]->lent) free(reg.items[i]->base);
    free(reg.items[i]->regs);
    free(reg.items[i]);
  }
  free(reg.items);
  reg.items = NULL;
  reg.count = reg.capacity = 0;
}
