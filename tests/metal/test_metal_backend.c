/*
 * The metal backend beyond the conformance suite, on whatever Metal ferry loaded
 * (the fake in CI, the Mac's own under tests/metal/run_on_macos.sh):
 *  - device info and native handles are Metal's (name, working set, largest
 *    buffer, page size, the device and its queue; private or shared storage);
 *  - byte ranges that start and end anywhere in a 4-byte word, written, read and
 *    copied within the device at every combination of offsets (blits move whole
 *    words on macOS: the bytes around a range must stay as they were);
 *  - threads writing neighbouring bytes of one word at once lose none;
 *  - pinned blocks from ferry_host_alloc; on discrete GPUs the engine's
 *    operations (pin_alloc, pin_register, dma_start, dma_wait) as engine.c calls
 *    them, at offsets on and off words;
 *  - host-pointer buffers are the array's own pages: a blit sees the host's
 *    writes, the host sees a blit's;
 *  - a queue's command queue (ferry_queue_native): the program's command buffer
 *    committed there runs after ferry's work before it and before ferry's work
 *    after it;
 *  - on the fake: nothing is left held after ferry_shutdown, session after session.
 */
#if !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif
#include "backends/metal/metal_objc.h"
#include "core/internal.h"
#include "fake_metal/fake_metal.h"
#include "harness.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static fake_metal_counts_fn fake_counts; /* NULL on Apple's Metal */

static void find_fake(void) {
  const char *path = getenv("FERRY_METAL_LIBRARY");
  void *lib = path && *path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  void *sym = lib ? dlsym(lib, "fake_metal_counts_get") : NULL;
  memcpy(&fake_counts, &sym, sizeof fake_counts);
}

static long live_objects(void) {
  fake_metal_counts c;
  fake_counts(&c);
  return c.live_objects;
}

static void section(const char *name) {
  harness_context = name;
  printf("  %s\n", name);
}

static bool unified(ferry_device *dev) {
  ferry_native nat;
  ferry_device_native(dev, &nat);
  void *pool = ferry__metal_rt.pool_push();
  bool u = mtl_has_unified_memory((mtl_id)nat.device);
  ferry__metal_rt.pool_pop(pool);
  return u;
}

/* ---- device info ------------------------------------------------------------------------ */

static void device_facts(ferry_device *dev) {
  section("device info and native handles");
  ferry_device_info info;
  CHECK_OK(ferry_device_info_get(dev, &info));
  ferry_native nat;
  CHECK_OK(ferry_device_native(dev, &nat));
  mtl_id device = (mtl_id)nat.device;
  CHECK(device && nat.queue && nat.context == 0 && nat.queue_family == 0);
  void *pool = ferry__metal_rt.pool_push();
  char name[256];
  mtl_string_copy(mtl_name(device), name, sizeof name);
  CHECK_MSG(strcmp(info.name, name) == 0, "name %s, Metal says %s", info.name, name);
  CHECK(info.total_memory == mtl_recommended_max_working_set_size(device));
  CHECK(info.max_allocation == (mtl_max_buffer_length(device) & ~(mtl_uint)3));
  CHECK(!info.is_cpu && !info.zero_copy && info.host_ptr);
  CHECK(info.host_ptr_alignment == (size_t)sysconf(_SC_PAGESIZE));
  /* The queue is the device's and takes command buffers. */
  mtl_id cb = mtl_command_buffer((mtl_id)nat.queue);
  CHECK(cb != MTL_NIL);
  /* Buffers: shared (contents) on unified memory, private (none) on discrete GPUs. */
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, 1001, FERRY_UINT8, &b));
  mtl_id buffer = (mtl_id)ferry_device_ptr(b);
  CHECK(buffer != MTL_NIL);
  if (buffer) {
    void *contents = mtl_contents(buffer);
    CHECK_MSG(unified(dev) ? contents != NULL : contents == NULL, "contents %p on a %s device", contents,
              unified(dev) ? "unified" : "discrete");
  }
  ferry__metal_rt.pool_pop(pool);
  CHECK_OK(ferry_free(b));
  CHECK_OK(ferry_device_synchronize(dev));
}

/* ---- byte ranges at every offset ---------------------------------------------------------- */

enum { SPAN = 64 };

static void read_all(ferry_buffer b, unsigned char *out) { CHECK_OK(ferry_read(b, 0, out, SPAN)); }

static void unaligned_ranges(ferry_device *dev) {
  section("writes and reads starting and ending anywhere in a word");
  unsigned char model[SPAN], back[SPAN], chunk[SPAN];
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, SPAN, FERRY_UINT8, &b));
  fill_pattern(model, SPAN, 1);
  CHECK_OK(ferry_write(b, 0, model, SPAN));
  uint32_t seed = 2;
  for (size_t off = 0; off < 9; off++) {
    for (size_t n = 1; n <= 13 && off + n <= SPAN; n++) {
      fill_pattern(chunk, n, seed++);
      CHECK_OK(ferry_write(b, off, chunk, n));
      memcpy(model + off, chunk, n);
      read_all(b, back);
      CHECK_MSG(memcmp(model, back, SPAN) == 0, "after writing %zu bytes at offset %zu", n, off);
      memset(chunk, 0, sizeof chunk);
      CHECK_OK(ferry_read(b, off, chunk, n));
      CHECK_MSG(memcmp(chunk, model + off, n) == 0, "reading %zu bytes at offset %zu", n, off);
    }
  }
  /* The last bytes of a buffer whose length is not a multiple of 4. */
  ferry_buffer odd = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, 7, FERRY_UINT8, &odd));
  unsigned char seven[7] = {1, 2, 3, 4, 5, 6, 7}, got[7] = {0};
  CHECK_OK(ferry_write(odd, 0, seven, 7));
  CHECK_OK(ferry_write(odd, 6, (unsigned char[]){70}, 1));
  CHECK_OK(ferry_read(odd, 0, got, 7));
  CHECK(memcmp(got, (unsigned char[]){1, 2, 3, 4, 5, 6, 70}, 7) == 0);
  CHECK_OK(ferry_read(odd, 5, got, 2));
  CHECK(got[0] == 6 && got[1] == 70);
  CHECK_OK(ferry_free(odd));
  CHECK_OK(ferry_free(b));
}

static long fills_run(void) {
  if (!fake_counts) return 0;
  fake_metal_counts c;
  fake_counts(&c);
  return c.fills;
}

/* Fills at every offset and length around a word: patterns of one byte value
 * by fillBuffer:range:value: on the whole words (discrete GPUs), the bytes
 * around them and patterns of different bytes written by the core. */
static void fills_at_every_offset(ferry_device *dev) {
  section("fills starting and ending anywhere in a word, of 1, 2 and 4 bytes");
  unsigned char model[SPAN], back[SPAN];
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, SPAN, FERRY_UINT8, &b));
  fill_pattern(model, SPAN, 3);
  CHECK_OK(ferry_write(b, 0, model, SPAN));
  static const unsigned char patterns[][4] = {
      {0x5a}, {0x77, 0x77}, {0x12, 0x34}, {0xc3, 0xc3, 0xc3, 0xc3}, {1, 2, 3, 4}};
  static const size_t sizes[] = {1, 2, 2, 4, 4};
  long before = fills_run();
  for (size_t p = 0; p < sizeof sizes / sizeof sizes[0]; p++) {
    size_t ps = sizes[p];
    for (size_t off = 0; off < 9; off += ps) {
      for (size_t n = ps; n <= 24 && off + n <= SPAN; n += ps) {
        CHECK_OK(ferry_fill(b, off, n, patterns[p], ps));
        for (size_t i = 0; i < n; i++)
          model[off + i] = patterns[p][i % ps];
        read_all(b, back);
        CHECK_MSG(memcmp(model, back, SPAN) == 0, "after filling %zu bytes at offset %zu with a %zu-byte pattern", n,
                  off, ps);
      }
    }
  }
  /* On a queue too, behind a write. */
  ferry_queue q = FERRY_NULL_QUEUE;
  CHECK_OK(ferry_queue_create(dev, &q));
  CHECK_OK(ferry_write_async(q, b, 0, model, SPAN));
  CHECK_OK(ferry_fill_async(q, b, 5, 40, (unsigned char[]){0xee}, 1));
  CHECK_OK(ferry_queue_synchronize(q));
  memset(model + 5, 0xee, 40);
  read_all(b, back);
  CHECK_MSG(memcmp(model, back, SPAN) == 0, "after a fill on a queue");
  CHECK_OK(ferry_queue_destroy(q));
  if (fake_counts && !unified(dev))
    CHECK_MSG(fills_run() > before, "no fillBuffer:range:value: on a discrete GPU (%ld before, %ld after)", before,
              fills_run());
  if (fake_counts && unified(dev))
    CHECK_MSG(fills_run() == before, "fillBuffer:range:value: on unified memory, which the core fills in place");
  CHECK_OK(ferry_free(b));
}

static void copies_at_every_offset(ferry_device *dev) {
  section("copies within the device at every pair of offsets");
  static const size_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 13, 29};
  unsigned char smodel[SPAN], dmodel[SPAN], back[SPAN];
  ferry_buffer s = FERRY_NULL_BUFFER, d = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, SPAN, FERRY_UINT8, &s));
  CHECK_OK(ferry_alloc(dev, SPAN, FERRY_UINT8, &d));
  fill_pattern(smodel, SPAN, 40);
  CHECK_OK(ferry_write(s, 0, smodel, SPAN));
  uint32_t seed = 41;
  for (size_t so = 0; so < 8; so++) {
    for (size_t doff = 0; doff < 8; doff++) {
      for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        fill_pattern(dmodel, SPAN, seed++);
        CHECK_OK(ferry_write(d, 0, dmodel, SPAN));
        CHECK_OK(ferry_copy(s, so, d, doff, n));
        memcpy(dmodel + doff, smodel + so, n);
        read_all(d, back);
        CHECK_MSG(memcmp(dmodel, back, SPAN) == 0, "copy of %zu bytes from offset %zu to offset %zu", n, so, doff);
        /* Within one buffer, apart: from the first half to the second. */
        if (n <= 24) {
          CHECK_OK(ferry_copy(d, so, d, 32 + doff, n));
          memcpy(dmodel + 32 + doff, dmodel + so, n);
          read_all(d, back);
          CHECK_MSG(memcmp(dmodel, back, SPAN) == 0, "copy within a buffer of %zu bytes from %zu to %zu", n, so,
                    32 + doff);
        }
      }
    }
  }
  /* Overlapping, within one buffer: the core goes through a temporary. */
  CHECK_OK(ferry_copy(d, 1, d, 3, 40));
  memmove(dmodel + 3, dmodel + 1, 40);
  read_all(d, back);
  CHECK(memcmp(dmodel, back, SPAN) == 0);
  CHECK_OK(ferry_free(s));
  CHECK_OK(ferry_free(d));
}

/* ---- neighbouring bytes from several threads ------------------------------------------------- */

enum { WRITERS = 8, ROUNDS = 60 };

typedef struct writer {
  ferry_buffer b;
  size_t index;
  ferry_status status;
} writer;

/* Writer i owns bytes 3i+1 .. 3i+3: every one shares a word with its neighbours. */
static void *write_neighbours(void *arg) {
  writer *w = arg;
  for (int r = 0; r < ROUNDS && w->status == FERRY_OK; r++) {
    unsigned char v[3] = {(unsigned char)(w->index * 16 + (size_t)r % 16), (unsigned char)(w->index + 100),
                          (unsigned char)r};
    w->status = ferry_write(w->b, 3 * w->index + 1, v, 3);
  }
  return NULL;
}

static void neighbours_at_once(ferry_device *dev) {
  section("threads writing neighbouring bytes of one word at once");
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, SPAN, FERRY_UINT8, &b));
  unsigned char zero[SPAN] = {0}, back[SPAN];
  CHECK_OK(ferry_write(b, 0, zero, SPAN));
  pthread_t threads[WRITERS];
  writer w[WRITERS];
  for (size_t i = 0; i < WRITERS; i++) {
    w[i] = (writer){b, i, FERRY_OK};
    pthread_create(&threads[i], NULL, write_neighbours, &w[i]);
  }
  for (size_t i = 0; i < WRITERS; i++) {
    pthread_join(threads[i], NULL);
    CHECK_MSG(w[i].status == FERRY_OK, "writer %zu: %s", i, ferry_status_name(w[i].status));
  }
  read_all(b, back);
  CHECK(back[0] == 0);
  for (size_t i = 0; i < WRITERS; i++) {
    int last = ROUNDS - 1;
    CHECK_MSG(back[3 * i + 1] == (unsigned char)(i * 16 + (size_t)last % 16) && back[3 * i + 2] == i + 100 &&
                  back[3 * i + 3] == (unsigned char)last,
              "writer %zu's bytes %zu..%zu were lost: %u %u %u", i, 3 * i + 1, 3 * i + 3, back[3 * i + 1],
              back[3 * i + 2], back[3 * i + 3]);
  }
  for (size_t i = 3 * WRITERS + 1; i < SPAN; i++)
    CHECK_MSG(back[i] == 0, "byte %zu, written by nobody, is %u", i, back[i]);
  CHECK_OK(ferry_free(b));
}

/* ---- pinned blocks and the engine's operations ------------------------------------------- */

/* ferry_host_alloc's blocks: on a discrete GPU shared buffers the engine blits
 * from and to directly, on unified memory plain memory the core copies. */
static void host_alloc_blocks(ferry_device *dev) {
  section("ferry_host_alloc blocks, on words and not");
  size_t bytes = (size_t)1 << 20;
  unsigned char *block = NULL, *other = NULL;
  CHECK_OK(ferry_host_alloc(dev, bytes, (void **)&block));
  CHECK_OK(ferry_host_alloc(dev, bytes, (void **)&other));
  unsigned char *model = malloc(bytes);
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, bytes, FERRY_UINT8, &b));
  if (!block || !other || !model) {
    CHECK(false);
    goto done;
  }
  CHECK((uintptr_t)block % 4096 == 0);
  fill_pattern(block, bytes, 60);
  CHECK_OK(ferry_write(b, 0, block, bytes));           /* straight from the block */
  CHECK_OK(ferry_write(b, 4096 + 3, block + 5, 1000)); /* from the block, offsets that differ modulo 4 */
  CHECK_OK(ferry_write(b, 8192 + 1, block + 9, 999));  /* equal modulo 4, not on words */
  CHECK_OK(ferry_read(b, 0, other, bytes));            /* straight into the block */
  fill_pattern(model, bytes, 60);
  memcpy(model + 4096 + 3, model + 5, 1000);
  memcpy(model + 8192 + 1, model + 9, 999);
  CHECK(memcmp(other, model, bytes) == 0);
  memset(other, 0, 64);
  other[1] = 0x11;
  other[52] = 0x22;
  CHECK_OK(ferry_read(b, 4097, other + 2, 50)); /* into the block, not on words */
  CHECK(memcmp(other + 2, model + 4097, 50) == 0);
  CHECK_MSG(other[1] == 0x11 && other[52] == 0x22, "a read into a block changed the bytes around it");
done:
  free(model);
  CHECK_OK(ferry_free(b));
  if (block) CHECK_OK(ferry_host_free(block));
  if (other) CHECK_OK(ferry_host_free(other));
}

/* The engine's operations, as engine.c calls them (discrete GPUs have them). */
static void engine_operations(ferry_device *dev) {
  const ferry_device_ops *ops = dev->ops;
  if (!ops->dma_start) {
    CHECK_MSG(!ops->pin_alloc && !ops->pin_register && !(dev->caps & FERRY_CAP_STAGE),
              "a unified device needs neither staging nor pinned memory");
    return;
  }
  section("pin_alloc, pin_register, dma_start and dma_wait");
  CHECK(dev->caps & FERRY_CAP_STAGE);
  enum { PIECES = 8 };
  const size_t piece = (size_t)128 << 10, bytes = piece * PIECES;
  void *base = NULL, *base2 = NULL;
  uintptr_t token = 0, token2 = 0;
  CHECK_OK(ops->pin_alloc(dev, bytes, &base, &token));
  CHECK_OK(ops->pin_alloc(dev, bytes, &base2, &token2));
  unsigned char *pin = base, *pin2 = base2, *model = malloc(bytes), *back = malloc(bytes);
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, bytes, FERRY_UINT8, &b));
  ferry_slot *slot = NULL;
  if (!pin || !pin2 || !model || !back || ferry__acquire(b, "test", &slot) != FERRY_OK) {
    CHECK(false);
    goto done;
  }
  /* The token is a shared buffer whose contents is the block. */
  void *pool = ferry__metal_rt.pool_push();
  CHECK(mtl_contents((mtl_id)token) == base);
  ferry__metal_rt.pool_pop(pool);

  /* Whole pieces, all in flight at once. */
  ferry_ticket tickets[PIECES];
  fill_pattern(pin, bytes, 80);
  for (size_t i = 0; i < PIECES; i++) {
    ferry_pinned p = {.host = pin + i * piece, .token = token, .offset = i * piece};
    CHECK_OK(ops->dma_start(dev, NULL, FERRY_DMA_TO_DEVICE, &slot->mem, i * piece, &p, piece, &tickets[i]));
  }
  for (size_t i = 0; i < PIECES; i++)
    CHECK_OK(ferry__ticket_finish(dev, tickets[i]));
  CHECK_OK(ferry_read(b, 0, back, bytes));
  CHECK_MSG(find_pattern_mismatch(back, bytes, 80) == SIZE_MAX, "after DMA to the device");
  memset(pin2, 0, bytes);
  for (size_t i = 0; i < PIECES; i++) {
    ferry_pinned p = {.host = pin2 + i * piece, .token = token2, .offset = i * piece};
    CHECK_OK(ops->dma_start(dev, NULL, FERRY_DMA_TO_HOST, &slot->mem, i * piece, &p, piece, &tickets[i]));
  }
  for (size_t i = 0; i < PIECES; i++)
    CHECK_OK(ferry__ticket_finish(dev, tickets[i]));
  CHECK_MSG(find_pattern_mismatch(pin2, bytes, 80) == SIZE_MAX, "after DMA to the host");

  /* Ranges off words: pinned and device offsets equal modulo 4 (one blit and the
   * ends through a temporary), and different (all through a temporary). The bytes
   * around each range stay, on the device and in the block. */
  static const size_t at[][3] = {{3, 7, 4001}, {1, 6, 4000}, {2, 2, 3}, {0, 1, 2}, {5, 0, 9}};
  fill_pattern(model, bytes, 81);
  CHECK_OK(ferry_write(b, 0, model, bytes));
  for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
    size_t po = at[k][0], mo = at[k][1], n = at[k][2];
    fill_pattern(pin, bytes, (uint32_t)(90 + k));
    ferry_pinned p = {.host = pin + po, .token = token, .offset = po};
    ferry_ticket t = 0;
    CHECK_OK(ops->dma_start(dev, NULL, FERRY_DMA_TO_DEVICE, &slot->mem, mo, &p, n, &t));
    CHECK_OK(ferry__ticket_finish(dev, t));
    memcpy(model + mo, pin + po, n);
    CHECK_OK(ferry_read(b, 0, back, bytes));
    CHECK_MSG(memcmp(back, model, bytes) == 0, "DMA of %zu bytes from pinned offset %zu to device offset %zu", n, po,
              mo);
    memset(pin2, 0xA5, 64 + n);
    p = (ferry_pinned){.host = pin2 + po, .token = token2, .offset = po};
    CHECK_OK(ops->dma_start(dev, NULL, FERRY_DMA_TO_HOST, &slot->mem, mo, &p, n, &t));
    CHECK_OK(ferry__ticket_finish(dev, t));
    CHECK_MSG(memcmp(pin2 + po, model + mo, n) == 0, "DMA of %zu bytes from device offset %zu to pinned offset %zu", n,
              mo, po);
    bool around = true;
    for (size_t i = 0; i < po; i++)
      around = around && pin2[i] == 0xA5;
    for (size_t i = po + n; i < po + n + 32; i++)
      around = around && pin2[i] == 0xA5;
    CHECK_MSG(around, "DMA to pinned offset %zu changed the block's bytes around the range", po);
  }
  CHECK_OK(ferry__ticket_finish(dev, 0)); /* a ticket of work done in dma_start */

  /* Another allocator's block: registered where it lies on whole pages. */
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  unsigned char *other = harness_aligned(page, 2 * page);
  uintptr_t t = 0;
  CHECK_OK(ops->pin_register(dev, other, 2 * page, &t));
  if (t) {
    fill_pattern(other, 2 * page, 95);
    ferry_pinned p = {.host = other + 8, .token = t, .offset = 8};
    ferry_ticket tk = 0;
    CHECK_OK(ops->dma_start(dev, NULL, FERRY_DMA_TO_DEVICE, &slot->mem, 100, &p, page, &tk));
    CHECK_OK(ferry__ticket_finish(dev, tk));
    CHECK_OK(ferry_read(b, 100, back, page));
    CHECK(memcmp(back, other + 8, page) == 0);
    ops->pin_release(dev, other, 2 * page, t, false);
  }
  t = 0;
  CHECK_STATUS(ops->pin_register(dev, other, page / 2, &t), FERRY_ERROR_UNSUPPORTED);
  CHECK_ERROR_HAS("not on whole pages");
  CHECK(t == 0);
  free(other);
done:
  if (slot) ferry__release(slot);
  CHECK_OK(ferry_free(b));
  if (base) ops->pin_release(dev, base, bytes, token, true);
  if (base2) ops->pin_release(dev, base2, bytes, token2, true);
  free(model);
  free(back);
}

/* ---- host-pointer buffers ------------------------------------------------------------------- */

static void host_pointer_buffers(ferry_device *dev) {
  section("host-pointer buffers are the array's pages");
  size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = 2 * page;
  unsigned char *array = harness_aligned(page, bytes), *back = malloc(bytes);
  fill_pattern(array, bytes, 70);
  ferry_buffer h = FERRY_NULL_BUFFER, d = FERRY_NULL_BUFFER;
  ferry_refusal why;
  CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(array, bytes, FERRY_UINT8), &h, &why));
  CHECK_OK(ferry_alloc(dev, bytes, FERRY_UINT8, &d));
  void *pool = ferry__metal_rt.pool_push();
  CHECK(mtl_contents((mtl_id)ferry_device_ptr(h)) == array);
  ferry__metal_rt.pool_pop(pool);
  /* A blit reads what the host wrote, with no transfer in between. */
  array[5] = 0xAB;
  CHECK_OK(ferry_copy(h, 0, d, 0, bytes));
  CHECK_OK(ferry_read(d, 0, back, bytes));
  CHECK(memcmp(back, array, bytes) == 0);
  /* And the array holds what a blit wrote. */
  fill_pattern(back, bytes, 71);
  CHECK_OK(ferry_write(d, 0, back, bytes));
  CHECK_OK(ferry_copy(d, 8, h, 8, bytes - 16));
  CHECK(memcmp(array + 8, back + 8, bytes - 16) == 0);
  CHECK(array[5] == 0xAB);
  CHECK_OK(ferry_free(h));
  CHECK_OK(ferry_free(d));
  free(array);
  free(back);
}

/* ---- a queue's command queue ---------------------------------------------------------- */

/* Commits, on `queue`, a command buffer that blits n bytes of `src` to `dst`
 * (both ferry buffers of the queue's device); returns it, retained. */
static mtl_id client_blit(mtl_id queue, ferry_buffer src, ferry_buffer dst, size_t n) {
  void *pool = ferry__metal_rt.pool_push();
  mtl_id cb = mtl_command_buffer(queue);
  mtl_id enc = mtl_blit_command_encoder(cb);
  mtl_copy_from_buffer(enc, (mtl_id)ferry_device_ptr(src), 0, (mtl_id)ferry_device_ptr(dst), 0, n);
  mtl_end_encoding(enc);
  mtl_commit(cb);
  mtl_id kept = mtl_retain(cb);
  ferry__metal_rt.pool_pop(pool);
  return kept;
}

/* The program's own work on ferry_queue_native's command queue runs after
 * ferry's work submitted before it, and ferry's work submitted after it runs
 * after it; ferry_event_elapsed comes from the command buffers' GPU times. */
static void client_on_native_queue(ferry_device *dev) {
  section("the program's command buffers on a queue's command queue, in order with ferry's");
  enum { N = 1 << 16 };
  unsigned char *model = malloc(N), *back = malloc(N);
  ferry_buffer a = FERRY_NULL_BUFFER, b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, N, FERRY_UINT8, &a));
  CHECK_OK(ferry_alloc(dev, N, FERRY_UINT8, &b));
  CHECK_OK(ferry_fill(b, 0, N, (unsigned char[]){0}, 1));
  ferry_queue q = FERRY_NULL_QUEUE;
  CHECK_OK(ferry_queue_create(dev, &q));
  ferry_native nat, dn;
  CHECK_OK(ferry_queue_native(q, &nat));
  CHECK_OK(ferry_device_native(dev, &dn));
  CHECK_MSG(nat.queue != 0 && nat.queue != dn.queue, "a queue's command queue is its own, not the device's");
  ferry_event e0 = FERRY_NULL_EVENT, e1 = FERRY_NULL_EVENT;
  CHECK_OK(ferry_event_create(&e0));
  CHECK_OK(ferry_event_create(&e1));
  for (int round = 0; round < 3; round++) {
    fill_pattern(model, N, 90 + (uint32_t)round);
    CHECK_OK(ferry_event_record(e0, q));
    CHECK_OK(ferry_write_async(q, a, 0, model, N));                     /* ferry's, then */
    mtl_id cb = client_blit((mtl_id)nat.queue, a, b, N);                /* the program's a -> b, then */
    CHECK_OK(ferry_fill_async(q, a, 0, N, (unsigned char[]){0x5c}, 1)); /* ferry's again */
    CHECK_OK(ferry_event_record(e1, q));
    CHECK_OK(ferry_queue_synchronize(q));
    void *pool = ferry__metal_rt.pool_push();
    mtl_wait_until_completed(cb);
    CHECK(mtl_status(cb) == MTL_CB_COMPLETED);
    mtl_release(cb);
    ferry__metal_rt.pool_pop(pool);
    CHECK_OK(ferry_read(b, 0, back, N));
    CHECK_MSG(memcmp(back, model, N) == 0,
              "the program's blit did not see ferry's write before it, or saw the fill "
              "after it (round %d)",
              round);
    CHECK_OK(ferry_read(a, 0, back, N));
    CHECK_MSG(back[0] == 0x5c && back[N - 1] == 0x5c, "ferry's fill after the program's blit (round %d)", round);
    double ms = -1;
    CHECK_OK(ferry_event_elapsed(e0, e1, &ms));
    CHECK_MSG(ms >= 0 && ms < 10000, "ferry_event_elapsed %.3f ms around the round's work", ms);
  }
  /* ferry_device_synchronize waits for the program's own work there too. */
  mtl_id cb = client_blit((mtl_id)nat.queue, a, b, N);
  CHECK_OK(ferry_device_synchronize(dev));
  void *pool = ferry__metal_rt.pool_push();
  CHECK_MSG(mtl_status(cb) == MTL_CB_COMPLETED, "ferry_device_synchronize returned before a command buffer the "
                                                "program committed on a queue's command queue");
  mtl_release(cb);
  ferry__metal_rt.pool_pop(pool);
  CHECK_OK(ferry_event_destroy(e0));
  CHECK_OK(ferry_event_destroy(e1));
  CHECK_OK(ferry_queue_destroy(q));
  CHECK_OK(ferry_free(a));
  CHECK_OK(ferry_free(b));
  free(model);
  free(back);
}

static void run_device(ferry_device *dev) {
  ferry_device_info info;
  ferry_device_info_get(dev, &info);
  printf("device %zu: %s (%s memory)\n", info.index, info.name, unified(dev) ? "unified" : "discrete");
  device_facts(dev);
  unaligned_ranges(dev);
  fills_at_every_offset(dev);
  copies_at_every_offset(dev);
  neighbours_at_once(dev);
  host_alloc_blocks(dev);
  engine_operations(dev);
  host_pointer_buffers(dev);
  client_on_native_queue(dev);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  find_fake();
  for (int session = 0; session < 2; session++) {
    ferry_backend_info b;
    int rc = harness_start_backend("metal", "metal_backend", &b);
    if (rc != 0) return rc;
    for (size_t i = 0; i < b.device_count; i++) {
      ferry_device *dev;
      CHECK_OK(ferry_device_get(b.first_device + i, &dev));
      run_device(dev);
    }
    ferry_shutdown();
    if (fake_counts) {
      harness_context = "after ferry_shutdown";
      long live = live_objects();
      CHECK_MSG(live == 0, "%ld Metal objects still held after ferry_shutdown (session %d)", live, session);
    }
  }
  harness_context = "";
  return harness_finish("metal_backend");
}
