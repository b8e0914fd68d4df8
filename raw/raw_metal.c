/*
 * Raw Metal baseline: what a program without ferry writes to move bytes into and
 * out of an MTLBuffer, on the very same ferry buffers (ferry_device_ptr is the
 * id<MTLBuffer>), on ferry's device and queue (ferry_device_native), through a
 * runtime table of its own (below: objc_msgSend, sel_registerName and the
 * autorelease pool, from the Objective-C runtime ferry loaded, FERRY_OBJC_LIBRARY
 * else Apple's) and typed wrappers of the dozen methods it sends, each call in an
 * autorelease pool as @autoreleasepool would make it:
 *
 *   unified memory (shared buffers)
 *     h2d       memcpy into the buffer's contents
 *     d2h       memcpy out of the buffer's contents
 *   discrete GPUs (private buffers)
 *     h2d       memcpy into a shared staging buffer + blit + commit + waitUntilCompleted
 *               (from host_alloc memory below: the blit from that buffer, no memcpy)
 *     d2h       blit into the staging buffer + commit + waitUntilCompleted + memcpy out
 *   d2d         blit + commit + waitUntilCompleted
 *   host_alloc  a shared newBufferWithLength:options: buffer's contents (Metal's pinned memory)
 *   alloc_free  newBufferWithLength:options: (the storage ferry uses) + release
 *
 * The staging buffer is one shared buffer as large as the transfer, made once:
 * the simplest fast code. Blits take sizes that are multiples of 4 on macOS;
 * sizes that are not fail here (ferry bench's sizes never are).
 */
#include "raw.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the runtime: types, constants, and the methods sent (Apple's headers) ---- */

typedef struct raw_objc_object *mtl_id;          /* id */
typedef const struct raw_objc_selector *mtl_sel; /* SEL */
typedef unsigned long mtl_uint;                  /* NSUInteger */
#if defined(__x86_64__) || defined(__i386__)
typedef signed char mtl_bool; /* BOOL on Intel Macs */
#else
typedef bool mtl_bool; /* BOOL on arm64 */
#endif
#define MTL_NIL                      ((mtl_id)0)
#define MTL_RESOURCE_STORAGE_SHARED  ((mtl_uint)0 << 4) /* MTLResourceStorageModeShared */
#define MTL_RESOURCE_STORAGE_PRIVATE ((mtl_uint)2 << 4) /* MTLResourceStorageModePrivate */
#define MTL_CB_COMPLETED             4                  /* MTLCommandBufferStatusCompleted */
#define OBJC_DEFAULT_PATH            "/usr/lib/libobjc.A.dylib"

enum {
  SEL_HAS_UNIFIED_MEMORY,
  SEL_NEW_BUFFER,
  SEL_CONTENTS,
  SEL_RELEASE,
  SEL_COMMAND_BUFFER,
  SEL_BLIT_ENCODER,
  SEL_COPY,
  SEL_END_ENCODING,
  SEL_COMMIT,
  SEL_WAIT,
  SEL_STATUS,
  SEL_COUNT
};
static const char *const selector_names[SEL_COUNT] = {
    [SEL_HAS_UNIFIED_MEMORY] = "hasUnifiedMemory",
    [SEL_NEW_BUFFER] = "newBufferWithLength:options:",
    [SEL_CONTENTS] = "contents",
    [SEL_RELEASE] = "release",
    [SEL_COMMAND_BUFFER] = "commandBuffer",
    [SEL_BLIT_ENCODER] = "blitCommandEncoder",
    [SEL_COPY] = "copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:",
    [SEL_END_ENCODING] = "endEncoding",
    [SEL_COMMIT] = "commit",
    [SEL_WAIT] = "waitUntilCompleted",
    [SEL_STATUS] = "status",
};

static struct {
  bool loaded;
  void (*msg_send)(void); /* objc_msgSend: only ever called through a cast to the method's prototype */
  mtl_sel (*sel_register_name)(const char *name);
  void *(*pool_push)(void);
  void (*pool_pop)(void *pool);
  mtl_sel sel[SEL_COUNT];
} rt;

static bool runtime_load(char why[256]) {
  if (rt.loaded) return true;
  void *lib = raw_library_open("FERRY_OBJC_LIBRARY", OBJC_DEFAULT_PATH, why);
  if (!lib || !raw_library_symbol(lib, "objc_msgSend", &rt.msg_send, sizeof rt.msg_send, why) ||
      !raw_library_symbol(lib, "sel_registerName", &rt.sel_register_name, sizeof rt.sel_register_name, why) ||
      !raw_library_symbol(lib, "objc_autoreleasePoolPush", &rt.pool_push, sizeof rt.pool_push, why) ||
      !raw_library_symbol(lib, "objc_autoreleasePoolPop", &rt.pool_pop, sizeof rt.pool_pop, why))
    return false;
  for (int i = 0; i < SEL_COUNT; i++)
    if (!(rt.sel[i] = rt.sel_register_name(selector_names[i]))) {
      snprintf(why, 256, "sel_registerName(\"%s\") failed", selector_names[i]);
      return false;
    }
  rt.loaded = true;
  return true;
}

/* The methods, each through objc_msgSend cast to its prototype. */
static mtl_bool mtl_has_unified_memory(mtl_id d) {
  return ((mtl_bool(*)(mtl_id, mtl_sel))rt.msg_send)(d, rt.sel[SEL_HAS_UNIFIED_MEMORY]);
}
static mtl_id mtl_new_buffer_with_length(mtl_id d, mtl_uint length, mtl_uint options) {
  return ((mtl_id(*)(mtl_id, mtl_sel, mtl_uint, mtl_uint))rt.msg_send)(d, rt.sel[SEL_NEW_BUFFER], length, options);
}
static void *mtl_contents(mtl_id b) { return ((void *(*)(mtl_id, mtl_sel))rt.msg_send)(b, rt.sel[SEL_CONTENTS]); }
static void mtl_release(mtl_id o) { ((void (*)(mtl_id, mtl_sel))rt.msg_send)(o, rt.sel[SEL_RELEASE]); }
static mtl_id mtl_command_buffer(mtl_id q) {
  return ((mtl_id(*)(mtl_id, mtl_sel))rt.msg_send)(q, rt.sel[SEL_COMMAND_BUFFER]);
}
static mtl_id mtl_blit_command_encoder(mtl_id cb) {
  return ((mtl_id(*)(mtl_id, mtl_sel))rt.msg_send)(cb, rt.sel[SEL_BLIT_ENCODER]);
}
static void mtl_copy_from_buffer(mtl_id enc, mtl_id src, mtl_uint so, mtl_id dst, mtl_uint doff, mtl_uint size) {
  ((void (*)(mtl_id, mtl_sel, mtl_id, mtl_uint, mtl_id, mtl_uint, mtl_uint))rt.msg_send)(enc, rt.sel[SEL_COPY], src, so,
                                                                                         dst, doff, size);
}
static void mtl_end_encoding(mtl_id enc) { ((void (*)(mtl_id, mtl_sel))rt.msg_send)(enc, rt.sel[SEL_END_ENCODING]); }
static void mtl_commit(mtl_id cb) { ((void (*)(mtl_id, mtl_sel))rt.msg_send)(cb, rt.sel[SEL_COMMIT]); }
static void mtl_wait_until_completed(mtl_id cb) { ((void (*)(mtl_id, mtl_sel))rt.msg_send)(cb, rt.sel[SEL_WAIT]); }
static mtl_uint mtl_status(mtl_id cb) { return ((mtl_uint(*)(mtl_id, mtl_sel))rt.msg_send)(cb, rt.sel[SEL_STATUS]); }

typedef struct shared_buffer {
  struct shared_buffer *next;
  mtl_id buffer;
  void *contents;
  size_t bytes;
} shared_buffer;

struct raw_baseline {
  mtl_id device, queue;
  bool unified;
  shared_buffer staging;
  shared_buffer *pinned; /* from host_alloc */
};

static int shared_make(raw_baseline *raw, size_t bytes, shared_buffer *out) {
  memset(out, 0, sizeof *out);
  out->buffer = mtl_new_buffer_with_length(raw->device, bytes, MTL_RESOURCE_STORAGE_SHARED);
  if (!out->buffer) return -1;
  out->contents = mtl_contents(out->buffer);
  out->bytes = bytes;
  return 0;
}

static void shared_free(shared_buffer *b) {
  if (b->buffer) mtl_release(b->buffer);
  memset(b, 0, sizeof *b);
}

static raw_baseline *metal_open(ferry_device *dev, char why[256]) {
  ferry_native nat;
  if (!runtime_load(why)) return NULL;
  if (ferry_device_native(dev, &nat) != FERRY_OK || nat.device == 0 || nat.queue == 0) {
    snprintf(why, 256, "not a metal device: %s", ferry_last_error());
    return NULL;
  }
  raw_baseline *raw = calloc(1, sizeof *raw);
  if (!raw) {
    snprintf(why, 256, "no host memory");
    return NULL;
  }
  raw->device = (mtl_id)nat.device;
  raw->queue = (mtl_id)nat.queue;
  void *pool = rt.pool_push();
  raw->unified = mtl_has_unified_memory(raw->device);
  rt.pool_pop(pool);
  return raw;
}

static void metal_close(raw_baseline *raw) {
  if (!raw) return;
  void *pool = rt.pool_push();
  shared_free(&raw->staging);
  while (raw->pinned) {
    shared_buffer *b = raw->pinned;
    raw->pinned = b->next;
    shared_free(b);
    free(b);
  }
  rt.pool_pop(pool);
  free(raw);
}

/* One blit, committed and waited for; inside the caller's pool. */
static int blit(raw_baseline *raw, mtl_id src, size_t so, mtl_id dst, size_t doff, size_t bytes) {
  if (bytes % 4 || so % 4 || doff % 4) return -1;
  mtl_id cb = mtl_command_buffer(raw->queue);
  mtl_id enc = cb ? mtl_blit_command_encoder(cb) : MTL_NIL;
  if (!enc) return -1;
  mtl_copy_from_buffer(enc, src, so, dst, doff, bytes);
  mtl_end_encoding(enc);
  mtl_commit(cb);
  mtl_wait_until_completed(cb);
  return mtl_status(cb) == MTL_CB_COMPLETED ? 0 : -1;
}

static int staging(raw_baseline *raw, size_t bytes) {
  if (raw->staging.bytes >= bytes) return 0;
  shared_free(&raw->staging);
  return shared_make(raw, bytes, &raw->staging);
}

/* The host_alloc buffer whose contents start at p, if any. */
static shared_buffer *pinned_at(raw_baseline *raw, const void *p, size_t bytes) {
  for (shared_buffer *b = raw->pinned; b; b = b->next)
    if (b->contents == p && b->bytes >= bytes) return b;
  return NULL;
}

static int metal_h2d(raw_baseline *raw, ferry_buffer dst, const void *src, size_t bytes) {
  mtl_id buffer = (mtl_id)ferry_device_ptr(dst);
  int rc = 0;
  void *pool = rt.pool_push();
  shared_buffer *pinned;
  if (raw->unified) {
    void *contents = mtl_contents(buffer);
    if (contents)
      memcpy(contents, src, bytes);
    else
      rc = -1;
  } else if ((pinned = pinned_at(raw, src, bytes))) {
    rc = blit(raw, pinned->buffer, 0, buffer, 0, bytes);
  } else if ((rc = staging(raw, bytes)) == 0) {
    memcpy(raw->staging.contents, src, bytes);
    rc = blit(raw, raw->staging.buffer, 0, buffer, 0, bytes);
  }
  rt.pool_pop(pool);
  return rc;
}

static int metal_d2h(raw_baseline *raw, ferry_buffer src, void *dst, size_t bytes) {
  mtl_id buffer = (mtl_id)ferry_device_ptr(src);
  int rc = 0;
  void *pool = rt.pool_push();
  shared_buffer *pinned;
  if (raw->unified) {
    void *contents = mtl_contents(buffer);
    if (contents)
      memcpy(dst, contents, bytes);
    else
      rc = -1;
  } else if ((pinned = pinned_at(raw, dst, bytes))) {
    rc = blit(raw, buffer, 0, pinned->buffer, 0, bytes);
  } else if ((rc = staging(raw, bytes)) == 0 && (rc = blit(raw, buffer, 0, raw->staging.buffer, 0, bytes)) == 0) {
    memcpy(dst, raw->staging.contents, bytes);
  }
  rt.pool_pop(pool);
  return rc;
}

static int metal_d2d(raw_baseline *raw, ferry_buffer src, ferry_buffer dst, size_t bytes) {
  void *pool = rt.pool_push();
  int rc = blit(raw, (mtl_id)ferry_device_ptr(src), 0, (mtl_id)ferry_device_ptr(dst), 0, bytes);
  rt.pool_pop(pool);
  return rc;
}

static void *metal_host_alloc(raw_baseline *raw, size_t bytes) {
  shared_buffer *b = malloc(sizeof *b);
  if (!b) return NULL;
  void *pool = rt.pool_push();
  int rc = shared_make(raw, bytes ? bytes : 1, b);
  rt.pool_pop(pool);
  if (rc != 0 || !b->contents) {
    free(b);
    return NULL;
  }
  b->next = raw->pinned;
  raw->pinned = b;
  return b->contents;
}

static void metal_host_free(raw_baseline *raw, void *ptr) {
  for (shared_buffer **link = &raw->pinned; *link; link = &(*link)->next) {
    if ((*link)->contents == ptr) {
      shared_buffer *b = *link;
      *link = b->next;
      void *pool = rt.pool_push();
      shared_free(b);
      rt.pool_pop(pool);
      free(b);
      return;
    }
  }
}

static int metal_alloc_free(raw_baseline *raw, size_t bytes) {
  void *pool = rt.pool_push();
  mtl_uint options = raw->unified ? MTL_RESOURCE_STORAGE_SHARED : MTL_RESOURCE_STORAGE_PRIVATE;
  mtl_id buffer = mtl_new_buffer_with_length(raw->device, bytes ? bytes : 4, options);
  if (buffer) mtl_release(buffer);
  rt.pool_pop(pool);
  return buffer ? 0 : -1;
}

static const raw_ops metal_raw = {
    .backend = "metal",
    .h2d_name = "memcpy into contents / staged blit",
    .d2h_name = "memcpy from contents / staged blit",
    .d2d_name = "blit + waitUntilCompleted",
    .open = metal_open,
    .close = metal_close,
    .h2d = metal_h2d,
    .d2h = metal_d2h,
    .d2d = metal_d2d,
    .host_alloc = metal_host_alloc,
    .host_free = metal_host_free,
    .alloc_free = metal_alloc_free,
};

const raw_ops *raw_metal_ops(void) { return &metal_raw; }
