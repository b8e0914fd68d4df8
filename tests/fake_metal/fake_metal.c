/*
 * A fake Objective-C runtime and Metal framework, for testing ferry's metal
 * backend on machines without macOS: one shared library exporting the runtime's
 * entry points (objc_msgSend, sel_registerName, objc_autoreleasePoolPush/Pop,
 * and the introspection functions the selector check uses) and Metal's
 * (MTLCopyAllDevices, MTLCreateSystemDefaultDevice).
 *
 * objc_msgSend's dispatcher (fake_msg_send_impl) is a C function of (id, SEL,
 * five uintptr_t): every method ferry calls has integer and pointer arguments
 * only, which the 64-bit calling conventions pass exactly like uintptr_t. Its
 * result is a uintptr_t; a method that returns a double returns the double's
 * bits. objc_msgSend itself is a few instructions of assembly (x86-64 and arm64,
 * ELF) that call the dispatcher with the arguments untouched and copy its result
 * into the first floating-point register as well, so that a call through a cast
 * to a prototype returning double reads the double, as from Apple's objc_msgSend;
 * elsewhere it is the dispatcher under that name, and a double result does not
 * reliably reach a caller that expects one.
 * It dispatches on the receiver's class and the selector, and behaves as Apple
 * documents, strictly:
 *  - a selector the receiver's class does not have, or a message to a released
 *    object, aborts with its name (Apple's runtime raises; ferry must never);
 *  - reference counts are real: new... and Copy... results are +1, others are
 *    autoreleased into the calling thread's innermost pool; an autorelease with
 *    no pool, pools popped out of order or left at thread exit abort; every
 *    object still held is counted (fake_metal_counts_get, FAKE_METAL_CHECK_LEAKS);
 *  - command buffers run on their queue's own thread, after FAKE_METAL_DELAY_US,
 *    so a missing waitUntilCompleted shows as wrong bytes;
 *  - GPUStartTime and GPUEndTime: Metal gives the host times (seconds, a double)
 *    when the GPU started and finished executing the command buffer, 0.0 until it
 *    completed. The fake takes CLOCK_MONOTONIC on the queue's thread when it starts
 *    the commands (after FAKE_METAL_DELAY_US) and after the last one, and answers
 *    0.0 until the status is completed or error; an event wait lies between the
 *    two, as on a GPU;
 *  - private buffers have no contents; managed ones keep a CPU and a GPU copy,
 *    so a missing didModifyRange: or synchronizeResource: shows stale bytes;
 *  - blits follow macOS's rules (offsets and size multiples of 4, in bounds, no
 *    overlap within a buffer, buffers of the queue's device); encoding after
 *    endEncoding, a second encoder while one is open, committing twice, an
 *    encoder released without endEncoding all abort;
 *  - newBufferWithBytesNoCopy returns nil for memory not on whole pages of
 *    FAKE_METAL_PAGE;
 *  - shared events (FakeMTLSharedEvent, from -[MTLDevice newSharedEvent], +1,
 *    signaledValue 0): the host reads signaledValue and sets setSignaledValue:
 *    to any value, lower ones too, as Metal allows. encodeWaitForEvent:value:
 *    and encodeSignalEvent:value: are recorded in the command buffer in order
 *    with its blits; on the queue's thread a wait sleeps on the event's
 *    condition variable (no spinning) until the value is at least the one
 *    waited for, which lets the commands after it and the command buffers
 *    behind it on that queue wait too; a signal sets the value (not only
 *    raises it) and wakes the waits it satisfies, as setSignaledValue: does.
 *    A wait satisfied once goes on even if the value is lowered before its
 *    thread wakes. Encoding either while a blit encoder of the command buffer
 *    is open, after commit, with nil or a released event aborts (an event of
 *    another device is fine: shared events order work across devices). The command buffer retains the event until it is
 *    deallocated (so at least until it ran), as it does its buffers. A command
 *    buffer that fails by injection skips its blits but still waits and
 *    signals, so that no other queue waits for it forever.
 *    A queue whose thread waits for an event nobody signals hangs, as the GPU
 *    would: waitUntilCompleted on such a command buffer does not return. The
 *    counts do not wait for those command buffers, the exit does not either
 *    (FAKE_METAL_CHECK_LEAKS lists them, with their event). Releasing a queue
 *    otherwise waits for its committed command buffers to run; if its thread
 *    waits for an event, the release returns at once instead and the thread
 *    finishes on its own when the event is signalled (from the host, or from
 *    another queue), since the release's caller may be the one who signals.
 * fake_metal.h lists the environment variables. It is a test double: a run on a
 * Mac (tests/metal/run_on_macos.sh) is what shows the backend works on Metal.
 */
#if !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif
#include "fake_metal.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FAKE_API       __attribute__((visibility("default")))
#define MAX_DEVICES    8
#define MAX_POOL_DEPTH 64

#define LIVE_MAGIC  0x4c495645u /* "LIVE" */
#define DEAD_MAGIC  0x44454144u /* "DEAD" */
#define CLASS_MAGIC 0x434c4153u /* "CLAS" */
#define SEL_MAGIC   0x53454c21u

#if defined(__x86_64__) || defined(__i386__)
#define ENC_BOOL "c"
#else
#define ENC_BOOL "B"
#endif

/* ---- misuse -------------------------------------------------------------------------- */

static void misuse(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void misuse(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fake_metal: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stderr);
  abort();
}

/* ---- configuration ---------------------------------------------------------------------- */

enum { FAIL_NEW_BUFFER, FAIL_NO_COPY_BUFFER, FAIL_COMMAND_BUFFER, FAIL_COUNT };
static const char *const fail_names[FAIL_COUNT] = {"new-buffer", "no-copy-buffer", "command-buffer"};

static struct {
  int devices;
  bool unified[MAX_DEVICES];
  size_t page;
  long delay_us;
  uint64_t mem, max_buffer;
  long error_code;
  bool old_os, only_default, check_leaks;
} cfg;

static struct { int skip, times; } injections[FAIL_COUNT];

static unsigned long long env_bytes(const char *name, unsigned long long fallback) {
  const char *s = getenv(name);
  if (!s || !*s) return fallback;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return fallback;
  switch (toupper((unsigned char)*end)) {
  case 'K': return v << 10;
  case 'M': return v << 20;
  case 'G': return v << 30;
  default: return v;
  }
}

static long env_long(const char *name, long fallback) {
  const char *s = getenv(name);
  return s && *s ? strtol(s, NULL, 0) : fallback;
}

static int fail_index(const char *name, size_t len) {
  for (int i = 0; i < FAIL_COUNT; i++)
    if (strlen(fail_names[i]) == len && strncmp(fail_names[i], name, len) == 0) return i;
  return -1;
}

static void parse_failures(const char *spec) {
  while (spec && *spec) {
    const char *colon = strchr(spec, ':');
    if (!colon) misuse("FAKE_METAL_FAIL: '%s' is not WHAT:SKIP:TIMES", spec);
    int which = fail_index(spec, (size_t)(colon - spec));
    if (which < 0) misuse("FAKE_METAL_FAIL: unknown failure '%.*s'", (int)(colon - spec), spec);
    char *end;
    injections[which].skip = (int)strtol(colon + 1, &end, 10);
    injections[which].times = *end == ':' ? (int)strtol(end + 1, &end, 10) : 1;
    spec = *end == ',' ? end + 1 : NULL;
  }
}

static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static void make_devices(void);

static void read_config(void) {
  cfg.devices = (int)env_long("FAKE_METAL_DEVICES", 1);
  if (cfg.devices < 0) cfg.devices = 0;
  if (cfg.devices > MAX_DEVICES) cfg.devices = MAX_DEVICES;
  const char *unified = getenv("FAKE_METAL_UNIFIED");
  bool last = true;
  for (int i = 0; i < MAX_DEVICES; i++) {
    if (unified && *unified) {
      last = *unified != '0';
      const char *comma = strchr(unified, ',');
      unified = comma ? comma + 1 : NULL;
    }
    cfg.unified[i] = last;
  }
  long page = sysconf(_SC_PAGESIZE);
  cfg.page = (size_t)env_bytes("FAKE_METAL_PAGE", page > 0 ? (unsigned long long)page : 4096);
  if (cfg.page == 0 || (cfg.page & (cfg.page - 1))) misuse("FAKE_METAL_PAGE=%zu is not a power of two", cfg.page);
  cfg.delay_us = env_long("FAKE_METAL_DELAY_US", 0);
  cfg.mem = env_bytes("FAKE_METAL_MEM", 1ull << 30);
  cfg.max_buffer = env_bytes("FAKE_METAL_MAX_BUFFER", 512ull << 20);
  cfg.error_code = env_long("FAKE_METAL_ERROR_CODE", 3);
  cfg.old_os = env_long("FAKE_METAL_OLD_OS", 0) != 0;
  cfg.only_default = env_long("FAKE_METAL_ONLY_DEFAULT", 0) != 0;
  cfg.check_leaks = env_long("FAKE_METAL_CHECK_LEAKS", 0) != 0;
  parse_failures(getenv("FAKE_METAL_FAIL"));
  make_devices();
}

static void configure(void) { pthread_once(&config_once, read_config); }

/* ---- objects ------------------------------------------------------------------------------ */

typedef enum kind {
  K_DEVICE,
  K_QUEUE,
  K_BUFFER,
  K_COMMAND_BUFFER,
  K_BLIT_ENCODER,
  K_SHARED_EVENT,
  K_STRING,
  K_ARRAY,
  K_ERROR,
  K_COUNT
} kind;

typedef struct fclass {
  uint32_t magic;
  const char *name;
  kind kind;
} fclass;

static const fclass classes[K_COUNT] = {
    {CLASS_MAGIC, "FakeMTLDevice", K_DEVICE},
    {CLASS_MAGIC, "FakeMTLCommandQueue", K_QUEUE},
    {CLASS_MAGIC, "FakeMTLBuffer", K_BUFFER},
    {CLASS_MAGIC, "FakeMTLCommandBuffer", K_COMMAND_BUFFER},
    {CLASS_MAGIC, "FakeMTLBlitCommandEncoder", K_BLIT_ENCODER},
    {CLASS_MAGIC, "FakeMTLSharedEvent", K_SHARED_EVENT},
    {CLASS_MAGIC, "NSString", K_STRING},
    {CLASS_MAGIC, "NSArray", K_ARRAY},
    {CLASS_MAGIC, "NSError", K_ERROR},
};

typedef struct fobj {
  uint32_t magic;
  kind kind;
  _Atomic long refs;
  struct fobj *prev, *next; /* the live list, then the zombie list */
} fobj;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* the object lists, counts, injections */
static fobj live_head = {.prev = &live_head, .next = &live_head};
static fobj *zombies;
static fake_metal_counts counts;
/* Command buffers committed whose queue thread has not let go of them yet: the
 * counts wait for none, so that they do not depend on that thread's timing. */
static _Atomic long in_flight;
/* Of those, the ones that cannot go on before an event is signalled: those of
 * queues whose thread waits for an event. The counts do not wait for them, since
 * only the program can let them go. */
static _Atomic long stalled;

typedef struct fdevice {
  fobj h;
  int index;
  bool unified;
  uint64_t allocated; /* every buffer's length (currentAllocatedSize); under lock */
  uint64_t resident;  /* the lengths in the device's own memory, which FAKE_METAL_MEM limits; under lock */
} fdevice;

struct fcb;

typedef struct fqueue {
  fobj h;
  fdevice *device;
  pthread_t thread;
  pthread_mutex_t qlock;
  pthread_cond_t cond;
  struct fcb *head, *tail;
  bool stop;
  long pending;                    /* committed, not completed; under qlock */
  bool blocked;                    /* the thread waits for an event; under qlock */
  _Atomic bool finished, detached; /* the thread left its loop; the queue was released while it waited */
  /* The event wait in progress, under that event's elock. */
  uint64_t wait_value;
  bool wait_done;
  struct fqueue *next_waiter;
} fqueue;

/* An MTLSharedEvent. Queue threads that wait for it are on its waiters list, so
 * that whoever raises the value marks exactly those it lets go. */
typedef struct fevent {
  fobj h;
  fdevice *device;
  pthread_mutex_t elock;
  pthread_cond_t cond;
  uint64_t value;  /* signaledValue; under elock */
  fqueue *waiters; /* under elock */
} fevent;

typedef enum storage { STORAGE_SHARED = 0, STORAGE_MANAGED = 1, STORAGE_PRIVATE = 2 } storage;

typedef struct fbuffer {
  fobj h;
  fdevice *device;
  storage mode;
  size_t length;
  unsigned char *gpu; /* what blits read and write */
  unsigned char *cpu; /* what contents returns (NULL for private); == gpu for shared */
  bool wraps_host;    /* newBufferWithBytesNoCopy: cpu is the program's memory */
  bool resident;      /* in the device's own memory: every buffer of a unified device; private and
                         managed ones of a discrete device (its shared ones are system memory) */
} fbuffer;

typedef enum op_kind {
  OP_COPY,         /* copyFromBuffer:... from src to dst */
  OP_FILL,         /* fillBuffer:range:value: of dst with value */
  OP_SYNCHRONIZE,  /* synchronizeResource: of src */
  OP_WAIT_EVENT,   /* encodeWaitForEvent:value: */
  OP_SIGNAL_EVENT, /* encodeSignalEvent:value: */
} op_kind;

typedef struct fop {
  op_kind kind;
  unsigned char value;
  fbuffer *src, *dst; /* NULL for the event commands */
  fevent *event;      /* the event commands' only */
  uint64_t event_value;
  size_t src_offset, dst_offset, size;
} fop;

typedef struct fstring {
  fobj h;
  char *text;
} fstring;

typedef struct fnserror {
  fobj h;
  long code;
  fstring *domain;
  char *description;
} fnserror;

enum { CB_NOT_ENQUEUED = 0, CB_COMMITTED = 2, CB_COMPLETED = 4, CB_ERROR = 5 };

struct fblit;

typedef struct fcb {
  fobj h;
  fqueue *queue;
  _Atomic int status;    /* written by the queue's thread under its qlock */
  struct fblit *encoder; /* the open one, or the last */
  fop *ops;
  size_t op_count, op_capacity;
  bool fail;       /* injected: ends in error */
  fnserror *error; /* set when it ends in error */
  /* GPUStartTime and GPUEndTime (CLOCK_MONOTONIC seconds): written by the queue's
   * thread before it stores the final status, read only after loading it. */
  double gpu_start, gpu_end;
  struct fcb *next_in_queue;
} fcb;

typedef struct fblit {
  fobj h;
  fcb *cb; /* retained */
  bool ended;
} fblit;

typedef struct farray {
  fobj h;
  fobj **items;
  size_t count;
} farray;

static fdevice devices[MAX_DEVICES];

static const char *class_name(const fobj *o) { return classes[o->kind].name; }

static void *obj_new(kind k, size_t size) {
  fobj *o = calloc(1, size);
  if (!o) misuse("out of host memory");
  o->magic = LIVE_MAGIC;
  o->kind = k;
  atomic_init(&o->refs, 1);
  pthread_mutex_lock(&lock);
  o->next = live_head.next;
  o->prev = &live_head;
  live_head.next->prev = o;
  live_head.next = o;
  pthread_mutex_unlock(&lock);
  return o;
}

/* A receiver or argument that must be a live object (of kind k, unless K_COUNT). */
static void check_object(const fobj *o, kind k, const char *what) {
  if (!o) misuse("%s: nil where an object is needed", what);
  if (o->magic == DEAD_MAGIC)
    misuse("%s: message to a deallocated %s (%p): it was released", what, class_name(o), (const void *)o);
  if (o->magic != LIVE_MAGIC) misuse("%s: %p is not an object of this runtime", what, (const void *)o);
  if (k != K_COUNT && o->kind != k)
    misuse("%s: a %s (%p) where a %s is needed", what, class_name(o), (const void *)o, classes[k].name);
}

static void obj_release(fobj *o);

static void dealloc(fobj *o) {
  switch (o->kind) {
  case K_DEVICE: misuse("a device was released more often than it was retained");
  case K_QUEUE: {
    fqueue *q = (fqueue *)o;
    /* The release waits for the committed command buffers to run, unless the
     * thread waits for an event: only the program can signal it, maybe this very
     * thread after this release (which Metal allows), so joining could hang a
     * correct program. Then the thread is left to finish on its own; it keeps the
     * queue's memory (a zombie, which at_exit leaves alone while it runs). */
    pthread_mutex_lock(&q->qlock);
    q->stop = true;
    pthread_cond_broadcast(&q->cond);
    while (!atomic_load(&q->finished) && !q->blocked)
      pthread_cond_wait(&q->cond, &q->qlock);
    bool detach = !atomic_load(&q->finished);
    atomic_store(&q->detached, detach);
    pthread_mutex_unlock(&q->qlock);
    if (detach) {
      pthread_detach(q->thread);
      break;
    }
    pthread_join(q->thread, NULL);
    pthread_mutex_destroy(&q->qlock);
    pthread_cond_destroy(&q->cond);
    break;
  }
  case K_BUFFER: {
    fbuffer *b = (fbuffer *)o;
    pthread_mutex_lock(&lock);
    b->device->allocated -= b->length;
    if (b->resident) b->device->resident -= b->length;
    pthread_mutex_unlock(&lock);
    if (b->gpu != b->cpu) free(b->gpu);
    if (!b->wraps_host) free(b->cpu);
    b->gpu = b->cpu = NULL;
    break;
  }
  case K_COMMAND_BUFFER: {
    fcb *cb = (fcb *)o;
    for (size_t i = 0; i < cb->op_count; i++) {
      if (cb->ops[i].src) obj_release(&cb->ops[i].src->h);
      if (cb->ops[i].dst) obj_release(&cb->ops[i].dst->h);
      if (cb->ops[i].event) obj_release(&cb->ops[i].event->h);
    }
    free(cb->ops);
    if (cb->error) obj_release(&cb->error->h);
    break;
  }
  case K_BLIT_ENCODER: {
    fblit *e = (fblit *)o;
    if (!e->ended) misuse("a blit command encoder was released without endEncoding");
    obj_release(&e->cb->h);
    break;
  }
  case K_SHARED_EVENT: {
    /* No waiter is left: the command buffers that wait hold the event until they ran. */
    fevent *ev = (fevent *)o;
    pthread_mutex_destroy(&ev->elock);
    pthread_cond_destroy(&ev->cond);
    break;
  }
  case K_STRING: free(((fstring *)o)->text); break;
  case K_ARRAY: {
    farray *a = (farray *)o;
    for (size_t i = 0; i < a->count; i++)
      obj_release(a->items[i]);
    free(a->items);
    break;
  }
  case K_ERROR: {
    fnserror *e = (fnserror *)o;
    obj_release(&e->domain->h);
    free(e->description);
    break;
  }
  case K_COUNT: break;
  }
  /* A zombie: the header stays, so that a later message names what was released. */
  pthread_mutex_lock(&lock);
  o->prev->next = o->next;
  o->next->prev = o->prev;
  o->magic = DEAD_MAGIC;
  o->next = zombies;
  zombies = o;
  pthread_mutex_unlock(&lock);
}

static void obj_retain(fobj *o) {
  check_object(o, K_COUNT, "retain");
  atomic_fetch_add(&o->refs, 1);
}

static void obj_release(fobj *o) {
  check_object(o, K_COUNT, "release");
  long before = atomic_fetch_sub(&o->refs, 1);
  if (before <= 0) misuse("release of a %s (%p) that has no reference left", class_name(o), (void *)o);
  if (before == 1) dealloc(o);
}

/* ---- autorelease pools ------------------------------------------------------------------ */

static _Thread_local struct {
  fobj **items;
  size_t count, capacity;
  size_t marks[MAX_POOL_DEPTH];
  unsigned depth;
} pool;

static pthread_key_t pool_key;
static pthread_once_t pool_key_once = PTHREAD_ONCE_INIT;

static void pool_thread_exit(void *value) {
  (void)value;
  if (pool.depth > 0) misuse("a thread exited with %u autorelease pool(s) still pushed", pool.depth);
  free(pool.items);
  pool.items = NULL;
  pool.count = pool.capacity = 0;
}

static void make_pool_key(void) { pthread_key_create(&pool_key, pool_thread_exit); }

static void autorelease(fobj *o, const char *what) {
  if (pool.depth == 0)
    misuse("%s: an autoreleased %s with no autorelease pool in place (objc_autoreleasePoolPush first)", what,
           class_name(o));
  if (pool.count == pool.capacity) {
    pool.capacity = pool.capacity ? pool.capacity * 2 : 64;
    pool.items = realloc(pool.items, pool.capacity * sizeof *pool.items);
    if (!pool.items) misuse("out of host memory");
  }
  pool.items[pool.count++] = o;
}

FAKE_API void *objc_autoreleasePoolPush(void) {
  configure();
  pthread_once(&pool_key_once, make_pool_key);
  if (pool.depth == MAX_POOL_DEPTH) misuse("objc_autoreleasePoolPush: more than %d pools nested", MAX_POOL_DEPTH);
  pool.marks[pool.depth] = pool.count;
  pthread_setspecific(pool_key, &pool); /* so that the thread's exit is checked and its pool freed */
  pthread_mutex_lock(&lock);
  counts.pools_pushed++;
  pthread_mutex_unlock(&lock);
  return &pool.marks[pool.depth++];
}

FAKE_API void objc_autoreleasePoolPop(void *token) {
  if (pool.depth == 0) misuse("objc_autoreleasePoolPop(%p): this thread has no pool pushed", token);
  if (token != &pool.marks[pool.depth - 1])
    misuse("objc_autoreleasePoolPop(%p): not this thread's innermost pool (%p); pools are popped in reverse order, "
           "on the thread that pushed them",
           token, (void *)&pool.marks[pool.depth - 1]);
  size_t mark = pool.marks[--pool.depth];
  while (pool.count > mark)
    obj_release(pool.items[--pool.count]);
}

/* ---- selectors and methods -------------------------------------------------------------- */

enum {
  S_RETAIN,
  S_RELEASE,
  S_AUTORELEASE,
  S_RESPONDS,
  S_UTF8,
  S_COUNT,
  S_OBJECT_AT,
  S_DESCRIPTION,
  S_CODE,
  S_DOMAIN,
  S_NAME,
  S_UNIFIED,
  S_WORKING_SET,
  S_MAX_BUFFER,
  S_ALLOCATED,
  S_SUPPORTS_FAMILY,
  S_NEW_QUEUE,
  S_NEW_BUFFER,
  S_NEW_NO_COPY,
  S_CONTENTS,
  S_LENGTH,
  S_DID_MODIFY,
  S_COMMAND_BUFFER,
  S_BLIT_ENCODER,
  S_COMMIT,
  S_WAIT,
  S_STATUS,
  S_ERROR,
  S_GPU_START,
  S_GPU_END,
  S_COPY,
  S_FILL,
  S_SYNCHRONIZE,
  S_END_ENCODING,
  S_NEW_SHARED_EVENT,
  S_SIGNALED_VALUE,
  S_SET_SIGNALED_VALUE,
  S_ENCODE_WAIT,
  S_ENCODE_SIGNAL,
  SELECTOR_COUNT
};

#define ALL_KINDS ((1u << K_COUNT) - 1)
#define KIND(k)   (1u << (k))

/* Selector, classes that have it, encoding (Apple's, without offsets). */
static const struct method_info {
  const char *name;
  unsigned kinds;
  const char *types;
} method_info[SELECTOR_COUNT] = {
    [S_RETAIN] = {"retain", ALL_KINDS, "@@:"},
    [S_RELEASE] = {"release", ALL_KINDS, "Vv@:"},
    [S_AUTORELEASE] = {"autorelease", ALL_KINDS, "@@:"},
    [S_RESPONDS] = {"respondsToSelector:", ALL_KINDS, ENC_BOOL "@::"},
    [S_UTF8] = {"UTF8String", KIND(K_STRING), "r*@:"},
    [S_COUNT] = {"count", KIND(K_ARRAY), "Q@:"},
    [S_OBJECT_AT] = {"objectAtIndex:", KIND(K_ARRAY), "@@:Q"},
    [S_DESCRIPTION] = {"localizedDescription", KIND(K_ERROR), "@@:"},
    [S_CODE] = {"code", KIND(K_ERROR), "q@:"},
    [S_DOMAIN] = {"domain", KIND(K_ERROR), "@@:"},
    [S_NAME] = {"name", KIND(K_DEVICE), "@@:"},
    [S_UNIFIED] = {"hasUnifiedMemory", KIND(K_DEVICE), ENC_BOOL "@:"},
    [S_WORKING_SET] = {"recommendedMaxWorkingSetSize", KIND(K_DEVICE), "Q@:"},
    [S_MAX_BUFFER] = {"maxBufferLength", KIND(K_DEVICE), "Q@:"},
    [S_ALLOCATED] = {"currentAllocatedSize", KIND(K_DEVICE), "Q@:"},
    [S_SUPPORTS_FAMILY] = {"supportsFamily:", KIND(K_DEVICE), ENC_BOOL "@:q"},
    [S_NEW_QUEUE] = {"newCommandQueue", KIND(K_DEVICE), "@@:"},
    [S_NEW_BUFFER] = {"newBufferWithLength:options:", KIND(K_DEVICE), "@@:QQ"},
    [S_NEW_NO_COPY] = {"newBufferWithBytesNoCopy:length:options:deallocator:", KIND(K_DEVICE), "@@:^vQQ@?"},
    [S_CONTENTS] = {"contents", KIND(K_BUFFER), "^v@:"},
    [S_LENGTH] = {"length", KIND(K_BUFFER), "Q@:"},
    [S_DID_MODIFY] = {"didModifyRange:", KIND(K_BUFFER), "v@:{_NSRange=QQ}"},
    [S_COMMAND_BUFFER] = {"commandBuffer", KIND(K_QUEUE), "@@:"},
    [S_BLIT_ENCODER] = {"blitCommandEncoder", KIND(K_COMMAND_BUFFER), "@@:"},
    [S_COMMIT] = {"commit", KIND(K_COMMAND_BUFFER), "v@:"},
    [S_WAIT] = {"waitUntilCompleted", KIND(K_COMMAND_BUFFER), "v@:"},
    [S_STATUS] = {"status", KIND(K_COMMAND_BUFFER), "Q@:"},
    [S_ERROR] = {"error", KIND(K_COMMAND_BUFFER), "@@:"},
    [S_GPU_START] = {"GPUStartTime", KIND(K_COMMAND_BUFFER), "d@:"},
    [S_GPU_END] = {"GPUEndTime", KIND(K_COMMAND_BUFFER), "d@:"},
    [S_COPY] = {"copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:", KIND(K_BLIT_ENCODER), "v@:@Q@QQ"},
    [S_FILL] = {"fillBuffer:range:value:", KIND(K_BLIT_ENCODER), "v@:@{_NSRange=QQ}C"},
    [S_SYNCHRONIZE] = {"synchronizeResource:", KIND(K_BLIT_ENCODER), "v@:@"},
    [S_END_ENCODING] = {"endEncoding", KIND(K_BLIT_ENCODER), "v@:"},
    [S_NEW_SHARED_EVENT] = {"newSharedEvent", KIND(K_DEVICE), "@@:"},
    [S_SIGNALED_VALUE] = {"signaledValue", KIND(K_SHARED_EVENT), "Q@:"},
    [S_SET_SIGNALED_VALUE] = {"setSignaledValue:", KIND(K_SHARED_EVENT), "v@:Q"},
    [S_ENCODE_WAIT] = {"encodeWaitForEvent:value:", KIND(K_COMMAND_BUFFER), "v@:@Q"},
    [S_ENCODE_SIGNAL] = {"encodeSignalEvent:value:", KIND(K_COMMAND_BUFFER), "v@:@Q"},
};

/* The encodings as method_getTypeEncoding gives them: each type followed by its
 * frame offset, the return type by the frame size. */
static char method_encodings[SELECTOR_COUNT][96];

static size_t type_length(const char *t) {
  size_t n = 0;
  while (strchr("rnNoORV", t[n]))
    n++;
  if (t[n] == '^') return n + 1 + type_length(t + n + 1);
  if (t[n] == '@' && t[n + 1] == '?') return n + 2;
  if (t[n] == '{') {
    int depth = 0;
    do {
      if (t[n] == '{') depth++;
      if (t[n] == '}') depth--;
      n++;
    } while (depth > 0 && t[n]);
    return n;
  }
  return n + 1;
}

static void make_encodings(void) {
  for (int s = 0; s < SELECTOR_COUNT; s++) {
    const char *t = method_info[s].types;
    size_t ret = type_length(t), offset = 0;
    char args[80] = "";
    for (const char *a = t + ret; *a;) {
      size_t len = type_length(a);
      size_t used = strlen(args);
      snprintf(args + used, sizeof args - used, "%.*s%zu", (int)len, a, offset);
      offset += a[0] == '{' ? 16 : 8;
      a += len;
    }
    snprintf(method_encodings[s], sizeof method_encodings[s], "%.*s%zu%s", (int)ret, t, offset, args);
  }
}

typedef struct fsel {
  uint32_t magic;
  int id; /* S_..., or -1: registered, but nothing has it */
  struct fsel *next;
  char name[];
} fsel;

static fsel *selectors;

FAKE_API const fsel *sel_registerName(const char *name) {
  configure();
  pthread_mutex_lock(&lock);
  fsel *s = selectors;
  while (s && strcmp(s->name, name) != 0)
    s = s->next;
  if (!s) {
    size_t len = strlen(name);
    s = malloc(sizeof *s + len + 1);
    if (!s) misuse("out of host memory");
    s->magic = SEL_MAGIC;
    s->id = -1;
    for (int i = 0; i < SELECTOR_COUNT; i++)
      if (strcmp(method_info[i].name, name) == 0) s->id = i;
    memcpy(s->name, name, len + 1);
    s->next = selectors;
    selectors = s;
  }
  pthread_mutex_unlock(&lock);
  return s;
}

FAKE_API const char *sel_getName(const fsel *s) { return s ? s->name : "<null selector>"; }

static bool has_method(kind k, int id) {
  if (id < 0 || !(method_info[id].kinds & KIND(k))) return false;
  if (k == K_DEVICE && (id == S_UNIFIED || id == S_SUPPORTS_FAMILY) && cfg.old_os) return false; /* 10.15 */
  return true;
}

/* The runtime's introspection, for tests/metal/metal_selectors.c. */
FAKE_API const fclass *objc_getClass(const char *name) {
  configure();
  for (int k = 0; k < K_COUNT; k++)
    if (strcmp(classes[k].name, name) == 0) return &classes[k];
  return NULL;
}

FAKE_API const fclass *object_getClass(const fobj *o) {
  if (!o) return NULL;
  check_object(o, K_COUNT, "object_getClass");
  return &classes[o->kind];
}

FAKE_API const char *class_getName(const fclass *c) { return c ? c->name : "nil"; }

FAKE_API const struct method_info *class_getInstanceMethod(const fclass *c, const fsel *s) {
  if (!c || c->magic != CLASS_MAGIC || !s || s->magic != SEL_MAGIC) return NULL;
  return has_method(c->kind, s->id) ? &method_info[s->id] : NULL;
}

FAKE_API const char *method_getTypeEncoding(const struct method_info *m) {
  return m ? method_encodings[m - method_info] : NULL;
}

/* ---- strings, errors, arrays --------------------------------------------------------------- */

static fstring *string_new(const char *text) {
  fstring *s = obj_new(K_STRING, sizeof *s);
  s->text = strdup(text);
  if (!s->text) misuse("out of host memory");
  return s;
}

/* ---- devices -------------------------------------------------------------------------------- */

static void make_devices(void) {
  make_encodings();
  for (int i = 0; i < cfg.devices; i++) {
    fdevice *d = &devices[i];
    d->h.magic = LIVE_MAGIC;
    d->h.kind = K_DEVICE;
    atomic_init(&d->h.refs, 1); /* the system's own reference: never released */
    d->index = i;
    d->unified = cfg.unified[i];
  }
}

FAKE_API fobj *MTLCopyAllDevices(void) {
  configure();
  farray *a = obj_new(K_ARRAY, sizeof *a);
  int n = cfg.only_default ? 0 : cfg.devices;
  a->items = calloc((size_t)(n ? n : 1), sizeof *a->items);
  for (int i = 0; i < n; i++) {
    obj_retain(&devices[i].h);
    a->items[a->count++] = &devices[i].h;
  }
  return &a->h; /* +1: the Copy rule */
}

FAKE_API fobj *MTLCreateSystemDefaultDevice(void) {
  configure();
  if (cfg.devices == 0) return NULL;
  obj_retain(&devices[0].h);
  return &devices[0].h; /* +1: the Create rule */
}

/* ---- shared events ------------------------------------------------------------------------------ */

static fevent *event_new(fdevice *d) {
  fevent *ev = obj_new(K_SHARED_EVENT, sizeof *ev);
  ev->device = d;
  pthread_mutex_init(&ev->elock, NULL);
  pthread_cond_init(&ev->cond, NULL);
  pthread_mutex_lock(&lock);
  counts.events++;
  pthread_mutex_unlock(&lock);
  return ev;
}

static uint64_t event_value(fevent *ev) {
  pthread_mutex_lock(&ev->elock);
  uint64_t v = ev->value;
  pthread_mutex_unlock(&ev->elock);
  return v;
}

/* setSignaledValue: from the host, or a signal command on a queue's thread: any
 * value, lower ones too (Metal allows it). The waiters it satisfies are marked
 * done here, not when they wake, so that a wait once satisfied goes on even if
 * the value is lowered again before its thread runs, and so that the counts know
 * at once that their command buffers are no longer stalled. */
static void event_set(fevent *ev, uint64_t value) {
  pthread_mutex_lock(&ev->elock);
  ev->value = value;
  for (fqueue **link = &ev->waiters; *link;) {
    fqueue *q = *link;
    if (q->wait_value > value) {
      link = &q->next_waiter;
      continue;
    }
    *link = q->next_waiter;
    q->wait_done = true;
    pthread_mutex_lock(&q->qlock);
    q->blocked = false;
    atomic_fetch_sub(&stalled, q->pending);
    pthread_mutex_unlock(&q->qlock);
  }
  pthread_cond_broadcast(&ev->cond);
  pthread_mutex_unlock(&ev->elock);
}

/* A wait command, on queue q's thread: sleeps on the event's condition variable
 * (never spins) until a signal or setSignaledValue: reaches value. */
static void event_wait(fqueue *q, fevent *ev, uint64_t value) {
  pthread_mutex_lock(&ev->elock);
  if (ev->value < value) {
    q->wait_value = value;
    q->wait_done = false;
    q->next_waiter = ev->waiters;
    ev->waiters = q;
    pthread_mutex_lock(&q->qlock);
    q->blocked = true;
    atomic_fetch_add(&stalled, q->pending);
    pthread_cond_broadcast(&q->cond); /* a release of the queue waiting for this thread goes on */
    pthread_mutex_unlock(&q->qlock);
    while (!q->wait_done)
      pthread_cond_wait(&ev->cond, &ev->elock);
  }
  pthread_mutex_unlock(&ev->elock);
}

/* ---- command queues ---------------------------------------------------------------------------- */

static void sleep_us(long us) {
  if (us <= 0) return;
  struct timespec t = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&t, &t) == -1 && errno == EINTR) {
  }
}

/* The host time GPUStartTime and GPUEndTime answer, in seconds. */
static double host_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The commands in the order they were encoded. A command buffer that fails
 * (injected) skips its blits but still waits and signals: otherwise a queue
 * waiting for it would wait forever. Its GPU times span them all, event waits
 * included; queue_thread publishes them with the status. */
static void run_command_buffer(fcb *cb) {
  sleep_us(cfg.delay_us);
  cb->gpu_start = host_seconds();
  if (cb->fail) {
    fnserror *e = obj_new(K_ERROR, sizeof *e);
    e->code = cfg.error_code;
    e->domain = string_new("MTLCommandBufferErrorDomain");
    char text[256];
    snprintf(text, sizeof text,
             "Caused GPU Address Fault Error (0000000b:kIOGPUCommandBufferCallbackErrorPageFault) [fake_metal: "
             "injected, command buffer %p]",
             (void *)cb);
    e->description = strdup(text);
    cb->error = e;
  }
  for (size_t i = 0; i < cb->op_count; i++) {
    fop *op = &cb->ops[i];
    switch (op->kind) {
    case OP_WAIT_EVENT: event_wait(cb->queue, op->event, op->event_value); break;
    case OP_SIGNAL_EVENT: event_set(op->event, op->event_value); break;
    case OP_SYNCHRONIZE:
      if (!cb->fail && op->src->mode == STORAGE_MANAGED) memcpy(op->src->cpu, op->src->gpu, op->src->length);
      break;
    case OP_FILL:
      if (cb->fail) break;
      memset(op->dst->gpu + op->dst_offset, op->value, op->size);
      pthread_mutex_lock(&lock);
      counts.fills++;
      pthread_mutex_unlock(&lock);
      break;
    case OP_COPY:
      if (cb->fail) break;
      memcpy(op->dst->gpu + op->dst_offset, op->src->gpu + op->src_offset, op->size);
      pthread_mutex_lock(&lock);
      counts.blits++;
      pthread_mutex_unlock(&lock);
      break;
    }
  }
  cb->gpu_end = host_seconds();
}

static void *queue_thread(void *arg) {
  fqueue *q = arg;
  pthread_mutex_lock(&q->qlock);
  for (;;) {
    while (!q->head && !q->stop)
      pthread_cond_wait(&q->cond, &q->qlock);
    if (!q->head) break; /* stopped, and nothing left */
    fcb *cb = q->head;
    q->head = cb->next_in_queue;
    if (!q->head) q->tail = NULL;
    pthread_mutex_unlock(&q->qlock);
    run_command_buffer(cb);
    pthread_mutex_lock(&q->qlock);
    /* Sequentially consistent, so a release: the error and the GPU times written
     * above are visible to whoever loads this status. */
    atomic_store(&cb->status, cb->error ? CB_ERROR : CB_COMPLETED);
    q->pending--;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->qlock);
    obj_release(&cb->h); /* the queue's reference, taken at commit */
    atomic_fetch_sub(&in_flight, 1);
    pthread_mutex_lock(&q->qlock);
  }
  atomic_store(&q->finished, true);
  pthread_cond_broadcast(&q->cond); /* the release waits for this */
  pthread_mutex_unlock(&q->qlock);
  return NULL;
}

static fqueue *queue_new(fdevice *d) {
  fqueue *q = obj_new(K_QUEUE, sizeof *q);
  q->device = d;
  pthread_mutex_init(&q->qlock, NULL);
  pthread_cond_init(&q->cond, NULL);
  atomic_init(&q->finished, false);
  atomic_init(&q->detached, false);
  if (pthread_create(&q->thread, NULL, queue_thread, q) != 0) misuse("cannot start a queue thread");
  return q;
}

/* ---- buffers ------------------------------------------------------------------------------------- */

static bool inject(int which) {
  bool fail = false;
  pthread_mutex_lock(&lock);
  if (injections[which].times > 0) {
    if (injections[which].skip > 0)
      injections[which].skip--;
    else {
      injections[which].times--;
      fail = true;
    }
  }
  pthread_mutex_unlock(&lock);
  return fail;
}

static storage storage_of(const char *call, uintptr_t options) {
  unsigned mode = (unsigned)(options >> 4) & 0xf;
  if (mode > STORAGE_PRIVATE)
    misuse("%s: storage mode %u is not one a buffer can have (options 0x%lx)", call, mode, (unsigned long)options);
  return (storage)mode;
}

/* Does a buffer of this storage take the device's own memory? A discrete GPU's
 * shared buffers live in system memory (the GPU reaches them over the bus). */
static bool resides(const fdevice *d, storage mode) { return d->unified || mode != STORAGE_SHARED; }

static fbuffer *buffer_new(fdevice *d, storage mode, size_t length) {
  fbuffer *b = obj_new(K_BUFFER, sizeof *b);
  b->device = d;
  b->mode = mode;
  b->length = length;
  b->resident = resides(d, mode);
  pthread_mutex_lock(&lock);
  d->allocated += length;
  if (b->resident) d->resident += length;
  pthread_mutex_unlock(&lock);
  return b;
}

static fobj *new_buffer(fdevice *d, uintptr_t length, uintptr_t options) {
  static const char call[] = "newBufferWithLength:options:";
  storage mode = storage_of(call, options);
  if (length == 0) misuse("%s: length 0", call);
  if (inject(FAIL_NEW_BUFFER)) return NULL;
  pthread_mutex_lock(&lock);
  bool fits = length <= cfg.max_buffer && (!resides(d, mode) || d->resident + length <= cfg.mem);
  pthread_mutex_unlock(&lock);
  if (!fits) return NULL;
  unsigned char *gpu = malloc(length), *cpu = NULL;
  if (!gpu) return NULL;
  memset(gpu, 0xcd, length); /* fresh memory holds anything */
  if (mode == STORAGE_SHARED) cpu = gpu;
  if (mode == STORAGE_MANAGED) {
    cpu = malloc(length);
    if (!cpu) {
      free(gpu);
      return NULL;
    }
    memset(cpu, 0xcd, length);
  }
  fbuffer *b = buffer_new(d, mode, length);
  b->gpu = gpu;
  b->cpu = cpu;
  pthread_mutex_lock(&lock);
  counts.buffers++;
  pthread_mutex_unlock(&lock);
  return &b->h;
}

static fobj *new_buffer_no_copy(fdevice *d, uintptr_t pointer, uintptr_t length, uintptr_t options,
                                uintptr_t deallocator) {
  static const char call[] = "newBufferWithBytesNoCopy:length:options:deallocator:";
  storage mode = storage_of(call, options);
  if (deallocator) misuse("%s: fake_metal supports only a nil deallocator", call);
  if (mode == STORAGE_PRIVATE) misuse("%s: private storage cannot wrap host memory", call);
  if (!pointer || length == 0 || pointer % cfg.page || length % cfg.page || inject(FAIL_NO_COPY_BUFFER)) {
    pthread_mutex_lock(&lock);
    counts.no_copy_refused++;
    pthread_mutex_unlock(&lock);
    return NULL; /* as documented: nil, no error */
  }
  unsigned char *gpu = (unsigned char *)pointer;
  if (mode == STORAGE_MANAGED) {
    gpu = malloc(length);
    if (!gpu) return NULL;
    memcpy(gpu, (void *)pointer, length);
  }
  fbuffer *b = buffer_new(d, mode, length);
  b->gpu = gpu;
  b->cpu = (unsigned char *)pointer;
  b->wraps_host = true;
  pthread_mutex_lock(&lock);
  counts.no_copy_buffers++;
  pthread_mutex_unlock(&lock);
  return &b->h;
}

/* ---- command buffers and blits ----------------------------------------------------------------- */

static void add_op(fcb *cb, fop op) {
  if (cb->op_count == cb->op_capacity) {
    cb->op_capacity = cb->op_capacity ? cb->op_capacity * 2 : 4;
    cb->ops = realloc(cb->ops, cb->op_capacity * sizeof *cb->ops);
    if (!cb->ops) misuse("out of host memory");
  }
  /* A command buffer keeps its resources and events alive until it is deallocated. */
  if (op.src) obj_retain(&op.src->h);
  if (op.dst) obj_retain(&op.dst->h);
  if (op.event) obj_retain(&op.event->h);
  cb->ops[cb->op_count++] = op;
}

static void check_encoding(fblit *e, const char *call) {
  if (e->ended) misuse("%s: encoding after endEncoding", call);
  if (atomic_load(&e->cb->status) != CB_NOT_ENQUEUED) misuse("%s: encoding into a committed command buffer", call);
}

static fbuffer *blit_buffer(fblit *e, uintptr_t arg, const char *call, const char *which) {
  fbuffer *b = (fbuffer *)arg;
  check_object(&b->h, K_BUFFER, call);
  if (b->device != e->cb->queue->device)
    misuse("%s: the %s buffer belongs to device %d, the command buffer's queue to device %d", call, which,
           b->device->index, e->cb->queue->device->index);
  return b;
}

static void blit_copy(fblit *e, uintptr_t src_arg, uintptr_t so, uintptr_t dst_arg, uintptr_t doff, uintptr_t size) {
  static const char call[] = "copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:";
  check_encoding(e, call);
  fbuffer *src = blit_buffer(e, src_arg, call, "source"), *dst = blit_buffer(e, dst_arg, call, "destination");
  if (so % 4 || doff % 4 || size % 4)
    misuse("%s: sourceOffset %lu, destinationOffset %lu and size %lu must be multiples of 4 on macOS", call,
           (unsigned long)so, (unsigned long)doff, (unsigned long)size);
  if (size == 0) misuse("%s: size 0", call);
  if (so > src->length || size > src->length - so)
    misuse("%s: source bytes %lu..%lu past the end of a %zu-byte buffer", call, (unsigned long)so,
           (unsigned long)(so + size), src->length);
  if (doff > dst->length || size > dst->length - doff)
    misuse("%s: destination bytes %lu..%lu past the end of a %zu-byte buffer", call, (unsigned long)doff,
           (unsigned long)(doff + size), dst->length);
  if (src == dst && so < doff + size && doff < so + size)
    misuse("%s: overlapping ranges %lu..%lu and %lu..%lu of one buffer (undefined in Metal)", call, (unsigned long)so,
           (unsigned long)(so + size), (unsigned long)doff, (unsigned long)(doff + size));
  add_op(e->cb, (fop){.kind = OP_COPY, .src = src, .dst = dst, .src_offset = so, .dst_offset = doff, .size = size});
}

/* The NSRange comes as two integer arguments (both ABIs pass it in two registers). */
static void blit_fill(fblit *e, uintptr_t dst_arg, uintptr_t location, uintptr_t length, uintptr_t value) {
  static const char call[] = "fillBuffer:range:value:";
  check_encoding(e, call);
  fbuffer *dst = blit_buffer(e, dst_arg, call, "destination");
  if (location % 4 || length % 4)
    misuse("%s: range {%lu, %lu} must start and end on multiples of 4 on macOS", call, (unsigned long)location,
           (unsigned long)length);
  if (length == 0) misuse("%s: an empty range", call);
  if (location > dst->length || length > dst->length - location)
    misuse("%s: bytes %lu..%lu past the end of a %zu-byte buffer", call, (unsigned long)location,
           (unsigned long)(location + length), dst->length);
  if (value > 0xff) misuse("%s: value %lu is not a byte", call, (unsigned long)value);
  /* src = dst: add_op and the release take a reference to each */
  add_op(e->cb, (fop){.kind = OP_FILL,
                      .value = (unsigned char)value,
                      .src = dst,
                      .dst = dst,
                      .dst_offset = location,
                      .size = length});
}

/* encodeWaitForEvent:value: and encodeSignalEvent:value:, between blit encoders. */
static void encode_event(fcb *cb, uintptr_t event_arg, uintptr_t value, bool signal) {
  const char *call = signal ? "encodeSignalEvent:value:" : "encodeWaitForEvent:value:";
  if (atomic_load(&cb->status) != CB_NOT_ENQUEUED) misuse("%s: the command buffer was committed", call);
  if (cb->encoder && !cb->encoder->ended)
    misuse("%s: a blit command encoder is still encoding (endEncoding first)", call);
  fevent *ev = (fevent *)event_arg;
  check_object((fobj *)ev, K_SHARED_EVENT, call);
  /* A shared event (unlike MTLEvent) may order work across devices. */
  add_op(cb, (fop){.kind = signal ? OP_SIGNAL_EVENT : OP_WAIT_EVENT, .event = ev, .event_value = value});
}

static void commit(fcb *cb) {
  if (atomic_load(&cb->status) != CB_NOT_ENQUEUED) misuse("commit: the command buffer was committed already");
  if (cb->encoder && !cb->encoder->ended)
    misuse("commit: a blit command encoder is still encoding (endEncoding first)");
  check_object(&cb->queue->h, K_QUEUE, "commit (the command buffer's queue)");
  cb->fail = inject(FAIL_COMMAND_BUFFER);
  pthread_mutex_lock(&lock);
  counts.command_buffers++;
  pthread_mutex_unlock(&lock);
  obj_retain(&cb->h); /* the queue's, until it ran */
  atomic_fetch_add(&in_flight, 1);
  fqueue *q = cb->queue;
  pthread_mutex_lock(&q->qlock);
  atomic_store(&cb->status, CB_COMMITTED);
  q->pending++;
  if (q->blocked) atomic_fetch_add(&stalled, 1); /* behind a wait: it runs no sooner */
  cb->next_in_queue = NULL;
  if (q->tail)
    q->tail->next_in_queue = cb;
  else
    q->head = cb;
  q->tail = cb;
  pthread_cond_broadcast(&q->cond);
  pthread_mutex_unlock(&q->qlock);
}

static void wait_until_completed(fcb *cb) {
  if (atomic_load(&cb->status) == CB_NOT_ENQUEUED) misuse("waitUntilCompleted: the command buffer was never committed");
  fqueue *q = cb->queue;
  pthread_mutex_lock(&q->qlock);
  while (atomic_load(&cb->status) < CB_COMPLETED)
    pthread_cond_wait(&q->cond, &q->qlock);
  pthread_mutex_unlock(&q->qlock);
}

/* ---- objc_msgSend ------------------------------------------------------------------------------- */

/* objc_msgSend is an assembly trampoline over the dispatcher where one is written
 * (64-bit x86 and arm64, ELF); elsewhere it is a C function that calls it. */
#if defined(__ELF__) && (defined(__x86_64__) || defined(__aarch64__)) && UINTPTR_MAX == UINT64_MAX
#define FAKE_MSG_SEND_TRAMPOLINE 1
#else
#define FAKE_MSG_SEND_TRAMPOLINE 0
#endif

/* The dispatcher: hidden, so that the trampoline's call binds to it directly,
 * and kept though no C code calls it. */
__attribute__((visibility("hidden"), used)) uintptr_t
fake_msg_send_impl(fobj *self, const fsel *op, uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3, uintptr_t a4);

static _Noreturn void unrecognized(const fobj *self, const fsel *op) {
  misuse("-[%s %s]: unrecognized selector sent to instance %p", class_name(self), op->name, (const void *)self);
}

/* A double result, as the dispatcher returns it: its bits, which objc_msgSend's
 * trampoline puts in the floating-point return register. */
static uintptr_t double_result(double value) {
  _Static_assert(sizeof(uintptr_t) >= sizeof(double) || !FAKE_MSG_SEND_TRAMPOLINE, "a double fits a uintptr_t");
  uintptr_t bits = 0;
  memcpy(&bits, &value, sizeof bits < sizeof value ? sizeof bits : sizeof value);
  return bits;
}

uintptr_t fake_msg_send_impl(fobj *self, const fsel *op, uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3,
                             uintptr_t a4) {
  if (!op || op->magic != SEL_MAGIC)
    misuse("objc_msgSend: %p is not a selector from sel_registerName", (const void *)op);
  if (!self) return 0; /* a message to nil returns nil */
  check_object(self, K_COUNT, op->name);
  pthread_mutex_lock(&lock);
  counts.messages++;
  pthread_mutex_unlock(&lock);
  if (!has_method(self->kind, op->id)) unrecognized(self, op);
  switch (op->id) {
  /* NSObject */
  case S_RETAIN: obj_retain(self); return (uintptr_t)self;
  case S_RELEASE: obj_release(self); return 0;
  case S_AUTORELEASE: autorelease(self, "autorelease"); return (uintptr_t)self;
  case S_RESPONDS: {
    const fsel *asked = (const fsel *)a0;
    if (!asked || asked->magic != SEL_MAGIC) misuse("respondsToSelector: %p is not a selector", (const void *)asked);
    return has_method(self->kind, asked->id);
  }
  /* NSString, NSArray, NSError */
  case S_UTF8: return (uintptr_t)((fstring *)self)->text;
  case S_COUNT: return ((farray *)self)->count;
  case S_OBJECT_AT: {
    farray *a = (farray *)self;
    if (a0 >= a->count) misuse("objectAtIndex: index %lu beyond bounds [0 .. %zu)", (unsigned long)a0, a->count);
    return (uintptr_t)a->items[a0];
  }
  case S_DESCRIPTION: {
    fstring *s = string_new(((fnserror *)self)->description);
    autorelease(&s->h, "localizedDescription");
    return (uintptr_t)s;
  }
  case S_CODE: return (uintptr_t)((fnserror *)self)->code;
  case S_DOMAIN: return (uintptr_t)((fnserror *)self)->domain;
  /* MTLDevice */
  case S_NAME: {
    fdevice *d = (fdevice *)self;
    char text[64];
    snprintf(text, sizeof text, "Fake Metal GPU %d", d->index);
    fstring *s = string_new(text);
    autorelease(&s->h, "name");
    return (uintptr_t)s;
  }
  case S_UNIFIED: return ((fdevice *)self)->unified;
  case S_WORKING_SET: return cfg.mem;
  case S_MAX_BUFFER: return cfg.max_buffer;
  case S_ALLOCATED: {
    pthread_mutex_lock(&lock);
    uint64_t v = ((fdevice *)self)->allocated;
    pthread_mutex_unlock(&lock);
    return v;
  }
  case S_SUPPORTS_FAMILY: /* Common1-3, Mac2 and Metal3 (5001), as a recent Mac's GPU */
    return (a0 >= 3001 && a0 <= 3003) || a0 == 2002 || a0 == 5001;
  case S_NEW_QUEUE: return (uintptr_t)queue_new((fdevice *)self);
  case S_NEW_BUFFER: return (uintptr_t)new_buffer((fdevice *)self, a0, a1);
  case S_NEW_SHARED_EVENT: return (uintptr_t)event_new((fdevice *)self);
  case S_NEW_NO_COPY: return (uintptr_t)new_buffer_no_copy((fdevice *)self, a0, a1, a2, a3);
  /* MTLBuffer */
  case S_CONTENTS: return (uintptr_t)((fbuffer *)self)->cpu;
  case S_LENGTH: return ((fbuffer *)self)->length;
  case S_DID_MODIFY: {
    fbuffer *b = (fbuffer *)self;
    if (b->mode != STORAGE_MANAGED) misuse("didModifyRange: on a buffer whose storage is not managed");
    if (a0 > b->length || a1 > b->length - a0)
      misuse("didModifyRange: {%lu, %lu} past the end of a %zu-byte buffer", (unsigned long)a0, (unsigned long)a1,
             b->length);
    memcpy(b->gpu + a0, b->cpu + a0, a1);
    return 0;
  }
  /* MTLCommandQueue */
  case S_COMMAND_BUFFER: {
    fcb *cb = obj_new(K_COMMAND_BUFFER, sizeof *cb);
    cb->queue = (fqueue *)self;
    atomic_init(&cb->status, CB_NOT_ENQUEUED);
    autorelease(&cb->h, "commandBuffer");
    return (uintptr_t)cb;
  }
  /* MTLCommandBuffer */
  case S_BLIT_ENCODER: {
    fcb *cb = (fcb *)self;
    if (atomic_load(&cb->status) != CB_NOT_ENQUEUED) misuse("blitCommandEncoder: the command buffer was committed");
    if (cb->encoder && !cb->encoder->ended) misuse("blitCommandEncoder: another encoder is still encoding");
    fblit *e = obj_new(K_BLIT_ENCODER, sizeof *e);
    obj_retain(&cb->h);
    e->cb = cb;
    cb->encoder = e;
    autorelease(&e->h, "blitCommandEncoder");
    return (uintptr_t)e;
  }
  case S_COMMIT: commit((fcb *)self); return 0;
  case S_WAIT: wait_until_completed((fcb *)self); return 0;
  case S_ENCODE_WAIT: encode_event((fcb *)self, a0, a1, false); return 0;
  case S_ENCODE_SIGNAL: encode_event((fcb *)self, a0, a1, true); return 0;
  case S_STATUS: return (uintptr_t)atomic_load(&((fcb *)self)->status);
  case S_ERROR: {
    fcb *cb = (fcb *)self;
    return atomic_load(&cb->status) == CB_ERROR ? (uintptr_t)cb->error : 0;
  }
  case S_GPU_START:
  case S_GPU_END: {
    /* The status is loaded first (an acquire): the times were written before it was stored. */
    fcb *cb = (fcb *)self;
    if (atomic_load(&cb->status) < CB_COMPLETED) return double_result(0.0);
    return double_result(op->id == S_GPU_START ? cb->gpu_start : cb->gpu_end);
  }
  /* MTLBlitCommandEncoder */
  case S_COPY: blit_copy((fblit *)self, a0, a1, a2, a3, a4); return 0;
  case S_FILL: blit_fill((fblit *)self, a0, a1, a2, a3 & 0xff); return 0;
  case S_SYNCHRONIZE: {
    fblit *e = (fblit *)self;
    check_encoding(e, "synchronizeResource:");
    add_op(e->cb, (fop){.kind = OP_SYNCHRONIZE, .src = blit_buffer(e, a0, "synchronizeResource:", "resource")});
    return 0;
  }
  case S_END_ENCODING: {
    fblit *e = (fblit *)self;
    if (e->ended) misuse("endEncoding: the encoder ended already");
    e->ended = true;
    return 0;
  }
  /* MTLSharedEvent */
  case S_SIGNALED_VALUE: return (uintptr_t)event_value((fevent *)self);
  case S_SET_SIGNALED_VALUE: event_set((fevent *)self, a0); return 0;
  default: unrecognized(self, op);
  }
}

#if FAKE_MSG_SEND_TRAMPOLINE
/* objc_msgSend: calls fake_msg_send_impl with every argument as it came (the
 * seventh, a4, is on the stack on x86-64: copied to the dispatcher's own
 * argument slot, the stack 16-byte aligned at the call), then copies the integer
 * result into the floating-point return register too (xmm0, d0), so that both an
 * integer and a double return read what the method answered. The landing pad
 * (endbr64, bti c) is there when the compiler marks the object for CET or BTI. */
#if defined(__x86_64__)
__asm__(".pushsection .text\n"
        ".globl objc_msgSend\n"
        ".type objc_msgSend,@function\n"
        ".p2align 4\n"
        "objc_msgSend:\n"
        ".cfi_startproc\n"
#if defined(__CET__) && (__CET__ & 1)
        "endbr64\n"
#endif
        "sub $24, %rsp\n"
        ".cfi_adjust_cfa_offset 24\n"
        "mov 32(%rsp), %rax\n"
        "mov %rax, (%rsp)\n"
        "call fake_msg_send_impl@PLT\n"
        "add $24, %rsp\n"
        ".cfi_adjust_cfa_offset -24\n"
        "movq %rax, %xmm0\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size objc_msgSend, .-objc_msgSend\n"
        ".popsection\n");
#else /* __aarch64__ */
__asm__(".pushsection .text\n"
        ".globl objc_msgSend\n"
        ".type objc_msgSend,%function\n"
        ".p2align 2\n"
        "objc_msgSend:\n"
        ".cfi_startproc\n"
#if defined(__ARM_FEATURE_BTI_DEFAULT)
        "hint #34\n" /* bti c */
#endif
        "stp x29, x30, [sp, #-16]!\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset x29, -16\n"
        ".cfi_offset x30, -8\n"
        "mov x29, sp\n"
        "bl fake_msg_send_impl\n"
        "fmov d0, x0\n"
        "ldp x29, x30, [sp], #16\n"
        ".cfi_restore x30\n"
        ".cfi_restore x29\n"
        ".cfi_def_cfa_offset 0\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size objc_msgSend, .-objc_msgSend\n"
        ".popsection\n");
#endif
#else
/* No trampoline for this platform: objc_msgSend calls the dispatcher in C, and a
 * caller that expects a double reads whatever its floating-point register holds. */
FAKE_API uintptr_t objc_msgSend(fobj *self, const fsel *op, uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3,
                                uintptr_t a4) {
  return fake_msg_send_impl(self, op, a0, a1, a2, a3, a4);
}
#endif

/* ---- test entry points --------------------------------------------------------------------------- */

static long live_objects(bool print) {
  for (int i = 0; i < 5000 && atomic_load(&in_flight) > atomic_load(&stalled); i++)
    sleep_us(1000);
  long n = 0;
  pthread_mutex_lock(&lock);
  for (fobj *o = live_head.next; o != &live_head; o = o->next) {
    n++;
    if (print)
      fprintf(stderr, "fake_metal:   %s %p (%ld references)\n", class_name(o), (void *)o, atomic_load(&o->refs));
  }
  for (int i = 0; i < cfg.devices; i++) {
    long extra = atomic_load(&devices[i].h.refs) - 1;
    n += extra;
    if (print && extra)
      fprintf(stderr, "fake_metal:   FakeMTLDevice %p (%ld references held by the program)\n", (void *)&devices[i],
              extra);
  }
  pthread_mutex_unlock(&lock);
  return n;
}

FAKE_API void fake_metal_counts_get(fake_metal_counts *out) {
  configure();
  long live = live_objects(false);
  pthread_mutex_lock(&lock);
  *out = counts;
  pthread_mutex_unlock(&lock);
  out->live_objects = live;
}

FAKE_API int fake_metal_inject(const char *what, int skip, int times) {
  configure();
  int which = what ? fail_index(what, strlen(what)) : -1;
  if (what && which < 0) return -1;
  pthread_mutex_lock(&lock);
  if (!what)
    memset(injections, 0, sizeof injections);
  else
    injections[which].skip = skip, injections[which].times = times;
  pthread_mutex_unlock(&lock);
  return 0;
}

FAKE_API long fake_metal_report(void) {
  configure();
  return live_objects(true);
}

__attribute__((destructor)) static void at_exit(void) {
  if (cfg.check_leaks && live_objects(false) > 0) {
    fprintf(stderr, "fake_metal: objects still held at exit:\n");
    fprintf(stderr, "fake_metal: %ld in all\n", live_objects(true));
    fflush(NULL);
    _exit(1);
  }
  /* A queue released while its thread waited for an event may still have that
   * thread, which uses the queue's memory: that one stays. The thread marks
   * itself finished under the queue's lock and touches the queue no more once
   * it lets go of it, so the lock taken here is what says it is gone. */
  for (fobj **link = &zombies; *link;) {
    fobj *z = *link;
    if (z->kind == K_QUEUE && atomic_load(&((fqueue *)z)->detached)) {
      fqueue *q = (fqueue *)z;
      pthread_mutex_lock(&q->qlock);
      bool gone = atomic_load(&q->finished);
      pthread_mutex_unlock(&q->qlock);
      if (!gone) {
        link = &z->next;
        continue;
      }
    }
    *link = z->next;
    free(z);
  }
  while (selectors) {
    fsel *s = selectors;
    selectors = s->next;
    free(s);
  }
}
