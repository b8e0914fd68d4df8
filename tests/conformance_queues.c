/*
 * The conformance suite's queue cases: queues, asynchronous transfers, fills
 * and events, on every device and every ordered pair of devices. Like the rest
 * of the suite they assert results (bytes read back, statuses, sentences,
 * untouched outputs) and run unchanged on every backend.
 */
#include "conformance.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)

static ferry_queue new_queue(ferry_device *dev) {
  ferry_queue q = FERRY_NULL_QUEUE;
  CHECK_OK(ferry_queue_create(dev, &q));
  return q;
}

static ferry_event new_event(void) {
  ferry_event e = FERRY_NULL_EVENT;
  CHECK_OK(ferry_event_create(&e));
  return e;
}

static unsigned char *pattern_bytes(size_t n, uint32_t seed) {
  unsigned char *p = malloc(n ? n : 1);
  fill_pattern(p, n, seed);
  return p;
}

/* ---- handles ----------------------------------------------------------------- */

static void queue_handles(ferry_device *dev, const ferry_device_info *info) {
  ferry_queue d1, d2, q = new_queue(dev), q2 = new_queue(dev);
  CHECK_OK(ferry_queue_default(dev, &d1));
  CHECK_OK(ferry_queue_default(dev, &d2));
  CHECK(d1.id == d2.id && d1.id != 0);
  CHECK(q.id != 0 && q.id != q2.id && q.id != d1.id);
  /* The default queue is the device's own. */
  CHECK_STATUS(ferry_queue_destroy(d1), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("default");
  CHECK_OK(ferry_queue_synchronize(d1));
  /* Native handles: the device's, and a queue of its own where the device has native queues. */
  ferry_native dn, qn, qn2;
  memset(&qn, 0xAB, sizeof qn);
  CHECK_OK(ferry_device_native(dev, &dn));
  /* A queue whose work runs on no native queue of its own has none to give
   * (conformance_backends.c says which backends' queues may not). */
  conformance_queue_native expect = conformance_backend_of(info->backend)->queue_native;
  ferry_status native_st = ferry_queue_native(q, &qn);
  if (native_st == FERRY_ERROR_UNSUPPORTED) {
    CHECK_ERROR_HAS("do not yet run on a native queue");
    CHECK_MSG(expect != CONF_QUEUE_NATIVE_GIVEN, "ferry_queue_native refused on %s, whose queues have a native queue",
              info->backend);
    ferry_native untouched;
    memset(&untouched, 0xAB, sizeof untouched);
    CHECK(memcmp(&qn, &untouched, sizeof qn) == 0);
  } else {
    CHECK_STATUS(native_st, FERRY_OK);
    CHECK_MSG(expect != CONF_QUEUE_NATIVE_REFUSED, "ferry_queue_native gave a queue on %s", info->backend);
    CHECK_OK(ferry_queue_native(q2, &qn2));
    CHECK(qn.device == dn.device && qn.context == dn.context);
    CHECK(qn.queue == 0 || qn.queue != qn2.queue || qn.queue_family == qn2.queue_family);
  }
  CHECK_STATUS(ferry_queue_native(q, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_queue_create(dev, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_queue_default(NULL, &d2), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_event_create(NULL), FERRY_ERROR_INVALID_ARGUMENT);
  /* Destroyed, null and made-up handles are stale, for every call; nothing crashes. */
  CHECK_OK(ferry_queue_destroy(q));
  ferry_event e = new_event();
  unsigned char byte = 1;
  ferry_buffer b = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, 16, FERRY_UINT8, &b));
  const ferry_queue bad[] = {q, FERRY_NULL_QUEUE, {0x123456789abcdefULL}, {e.id}, {q.id ^ ((uint64_t)1 << 40)}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ferry_queue x = bad[i];
    CHECK_STATUS(ferry_queue_destroy(x), FERRY_ERROR_STALE_HANDLE);
    CHECK_STATUS(ferry_queue_synchronize(x), FERRY_ERROR_STALE_HANDLE);
    CHECK_STATUS(ferry_queue_query(x), FERRY_ERROR_STALE_HANDLE);
    CHECK_STATUS(ferry_queue_native(x, &qn), FERRY_ERROR_STALE_HANDLE);
    CHECK_STATUS(ferry_write_async(x, b, 0, &byte, 1), FERRY_ERROR_STALE_HANDLE);
    CHECK_STATUS(ferry_read_async(x, b, 0, &byte, 1), FERRY_ERROR_STALE_HANDLE);
    CHECK_STATUS(ferry_copy_async(x, b, 0, b, 8, 1), FERRY_ERROR_STALE_HANDLE);
    CHECK_STATUS(ferry_fill_async(x, b, 0, 1, &byte, 1), FERRY_ERROR_STALE_HANDLE);
    CHECK_STATUS(ferry_event_record(e, x), FERRY_ERROR_STALE_HANDLE);
    CHECK_STATUS(ferry_queue_wait_event(x, e), FERRY_ERROR_STALE_HANDLE);
  }
  CHECK_ERROR_HAS("queue");
  /* Events likewise; an event's handle is no queue's, nor the other way round. */
  ferry_event gone = new_event();
  CHECK_OK(ferry_event_destroy(gone));
  const ferry_event bad_events[] = {gone, FERRY_NULL_EVENT, {0x5555555555555555ULL}, {q2.id}, {d1.id}};
  double ms = 0;
  for (size_t i = 0; i < sizeof bad_events / sizeof bad_events[0]; i++) {
    ferry_event x = bad_events[i];
    CHECK_STATUS(ferry_event_destroy(x), FERRY_ERROR_STALE_HANDLE);
    CHECK_STATUS(ferry_event_record(x, q2), FERRY_ERROR_STALE_HANDLE);
    CHECK_STATUS(ferry_event_synchronize(x), FERRY_ERROR_STALE_HANDLE);
    CHECK_STATUS(ferry_event_query(x), FERRY_ERROR_STALE_HANDLE);
    CHECK_STATUS(ferry_queue_wait_event(q2, x), FERRY_ERROR_STALE_HANDLE);
    CHECK_STATUS(ferry_event_elapsed(x, e, &ms), FERRY_ERROR_STALE_HANDLE);
    CHECK_STATUS(ferry_event_elapsed(e, x, &ms), FERRY_ERROR_STALE_HANDLE);
  }
  CHECK_ERROR_HAS("event");
  /* A stale buffer on a live queue. */
  ferry_buffer freed = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, 16, FERRY_UINT8, &freed));
  CHECK_OK(ferry_free(freed));
  CHECK_STATUS(ferry_write_async(q2, freed, 0, &byte, 1), FERRY_ERROR_STALE_BUFFER);
  CHECK_STATUS(ferry_copy_async(q2, b, 0, freed, 0, 1), FERRY_ERROR_STALE_BUFFER);
  CHECK_OK(ferry_queue_synchronize(q2));
  CHECK_OK(ferry_queue_destroy(q2));
  CHECK_OK(ferry_event_destroy(e));
  CHECK_OK(ferry_free(b));
}

/* ---- order on one queue -------------------------------------------------------- */

static void queue_order(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  const size_t n = 1 << 16;
  ferry_queue q = new_queue(dev);
  ferry_buffer a = conf_sentinel(), b = conf_sentinel(), c = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &a));
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &b));
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &c));
  unsigned char *src = pattern_bytes(n, 11), *model = malloc(n), *back = calloc(1, n);
  /* A chain where each step needs the one before: write, copy, fill, copy back, read. */
  memcpy(model, src, n);
  uint32_t word = 0x04030201u;
  CHECK_OK(ferry_write_async(q, a, 0, src, n));
  CHECK_OK(ferry_copy_async(q, a, 0, b, 0, n));
  CHECK_OK(ferry_fill_async(q, b, 400, 800, &word, 4));
  for (size_t i = 400; i < 1200; i++)
    model[i] = (unsigned char)(1 + (i - 400) % 4);
  CHECK_OK(ferry_copy_async(q, b, 100, c, 0, n - 100));
  CHECK_OK(ferry_copy_async(q, b, 0, c, n - 100, 100));
  CHECK_OK(ferry_read_async(q, c, 0, back, n));
  CHECK_OK(ferry_queue_synchronize(q));
  CHECK(memcmp(back, model + 100, n - 100) == 0);
  CHECK(memcmp(back + n - 100, model, 100) == 0);
  /* Fifty-one swaps by copies, each overwriting what the next one reads,
   * submitted at once: only the order makes the last bytes right. */
  unsigned char *x = pattern_bytes(n, 12), *y = pattern_bytes(n, 13);
  CHECK_OK(ferry_write_async(q, a, 0, x, n));
  CHECK_OK(ferry_write_async(q, b, 0, y, n));
  for (int i = 0; i < 51; i++) {
    CHECK_OK(ferry_copy_async(q, a, 0, c, 0, n)); /* c = a */
    CHECK_OK(ferry_copy_async(q, b, 0, a, 0, n)); /* a = b */
    CHECK_OK(ferry_copy_async(q, c, 0, b, 0, n)); /* b = c: a and b swap */
  }
  memset(back, 0, n);
  CHECK_OK(ferry_read_async(q, a, 0, back, n)); /* an odd number of swaps: a holds y */
  unsigned char *back2 = calloc(1, n);
  CHECK_OK(ferry_read_async(q, b, 0, back2, n));
  CHECK_OK(ferry_queue_synchronize(q));
  CHECK(memcmp(back, y, n) == 0);
  CHECK(memcmp(back2, x, n) == 0);
  /* Reads and writes of one host array in turn: each write sees the read before it. */
  unsigned char *h = pattern_bytes(4096, 14);
  CHECK_OK(ferry_write_async(q, a, 0, h, 4096));
  CHECK_OK(ferry_read_async(q, a, 0, h + 0, 2048)); /* the same bytes back: unchanged */
  CHECK_OK(ferry_copy_async(q, a, 2048, a, 0, 2048));
  CHECK_OK(ferry_read_async(q, a, 0, h, 2048));
  CHECK_OK(ferry_write_async(q, b, 0, h, 4096));
  unsigned char *h2 = calloc(1, 4096), *m2 = pattern_bytes(4096, 14);
  memcpy(m2, m2 + 2048, 2048);
  CHECK_OK(ferry_read_async(q, b, 0, h2, 4096));
  CHECK_OK(ferry_queue_synchronize(q));
  CHECK(memcmp(h2, m2, 4096) == 0);
  CHECK_OK(ferry_queue_query(q));
  CHECK_OK(ferry_queue_destroy(q));
  CHECK_OK(ferry_free(a));
  CHECK_OK(ferry_free(b));
  CHECK_OK(ferry_free(c));
  free(src), free(model), free(back), free(back2), free(x), free(y), free(h), free(h2), free(m2);
}

/* ---- sizes ---------------------------------------------------------------------- */

static void queue_sizes(ferry_device *dev, const ferry_device_info *info) {
  ferry_queue q = new_queue(dev);
  /* Zero bytes: valid anywhere in range, the end included, moving nothing. */
  ferry_buffer b = conf_patterned(dev, 100, 21), empty = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, 0, FERRY_UINT8, &empty));
  unsigned char byte = 0x77;
  CHECK_OK(ferry_write_async(q, b, 100, NULL, 0));
  CHECK_OK(ferry_read_async(q, b, 100, NULL, 0));
  CHECK_OK(ferry_copy_async(q, b, 100, b, 0, 0));
  CHECK_OK(ferry_fill_async(q, b, 100, 0, &byte, 1));
  CHECK_OK(ferry_write_async(q, empty, 0, &byte, 0));
  CHECK_OK(ferry_copy_async(q, empty, 0, b, 0, 0));
  CHECK_OK(ferry_queue_synchronize(q));
  conf_expect_pattern(b, 100, 21, "after zero-byte operations");
  /* Odd sizes and offsets, and sizes that the engine stages in pieces. */
  const size_t sizes[] = {1, 3, 4095, 4097, 65537, 3 * MIB + 5, 9 * MIB + 3};
  size_t limit = info->max_allocation;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i], off = 7;
    if (n + off > limit) continue;
    ferry_buffer d = conf_sentinel(), e = conf_sentinel();
    CHECK_OK(ferry_alloc(dev, n + off, FERRY_UINT8, &d));
    CHECK_OK(ferry_alloc(dev, n + off, FERRY_UINT8, &e));
    unsigned char *src = pattern_bytes(n, 30 + (uint32_t)i), *back = calloc(1, n);
    CHECK_OK(ferry_write_async(q, d, off, src, n));
    CHECK_OK(ferry_copy_async(q, d, off, e, 0, n));
    CHECK_OK(ferry_read_async(q, e, 0, back, n));
    CHECK_OK(ferry_queue_synchronize(q));
    CHECK_MSG(memcmp(src, back, n) == 0, "%zu bytes at offset %zu: bytes differ", n, off);
    CHECK_OK(ferry_free(d));
    CHECK_OK(ferry_free(e));
    free(src);
    free(back);
  }
  CHECK_OK(ferry_queue_destroy(q));
  CHECK_OK(ferry_free(b));
  CHECK_OK(ferry_free(empty));
}

/* ---- checked when submitted ------------------------------------------------------ */

static void queue_checks(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  ferry_queue q = new_queue(dev);
  ferry_buffer b = conf_patterned(dev, 64, 41), c = conf_patterned(dev, 64, 42);
  unsigned char h[64], pat[4] = {1, 2, 3, 4};
  memset(h, 0x5A, sizeof h);
  CHECK_STATUS(ferry_write_async(q, b, 60, h, 5), FERRY_ERROR_OUT_OF_RANGE);
  CHECK_STATUS(ferry_write_async(q, b, 65, h, 0), FERRY_ERROR_OUT_OF_RANGE);
  CHECK_STATUS(ferry_write_async(q, b, SIZE_MAX, h, 2), FERRY_ERROR_OVERFLOW);
  CHECK_STATUS(ferry_write_async(q, b, 0, NULL, 1), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_read_async(q, b, 1, h, 64), FERRY_ERROR_OUT_OF_RANGE);
  CHECK_STATUS(ferry_read_async(q, b, 0, NULL, 1), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_copy_async(q, b, 0, c, 1, 64), FERRY_ERROR_OUT_OF_RANGE);
  CHECK_STATUS(ferry_copy_async(q, b, SIZE_MAX, c, 0, 1), FERRY_ERROR_OVERFLOW);
  CHECK_STATUS(ferry_fill_async(q, b, 0, 8, pat, 3), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_fill_async(q, b, 0, 8, pat, 0), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_fill_async(q, b, 2, 8, pat, 4), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_fill_async(q, b, 0, 6, pat, 4), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("multiples");
  CHECK_STATUS(ferry_fill_async(q, b, 0, 8, NULL, 2), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_fill_async(q, b, 60, 8, pat, 4), FERRY_ERROR_OUT_OF_RANGE);
  CHECK_STATUS(ferry_fill(b, 1, 2, pat, 2), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_fill(b, 0, 2, pat, 8), FERRY_ERROR_INVALID_ARGUMENT);
  /* A queue of another device is refused for a buffer of this one. */
  size_t other_index = info->index == 0 ? 1 : 0;
  ferry_device *other = NULL;
  if (ferry_device_count() > 1 && ferry_device_get(other_index, &other) == FERRY_OK) {
    ferry_queue oq = new_queue(other);
    CHECK_STATUS(ferry_write_async(oq, b, 0, h, 4), FERRY_ERROR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("queue");
    CHECK_STATUS(ferry_fill_async(oq, b, 0, 4, pat, 4), FERRY_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ferry_read_async(oq, b, 0, h, 4), FERRY_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ferry_copy_async(oq, b, 0, c, 0, 4), FERRY_ERROR_INVALID_ARGUMENT);
    CHECK_OK(ferry_queue_destroy(oq));
  }
  /* Nothing of that was submitted: the buffers and the host array are as they were. */
  CHECK_OK(ferry_queue_synchronize(q));
  conf_expect_pattern(b, 64, 41, "after refused submissions");
  conf_expect_pattern(c, 64, 42, "after refused submissions");
  for (size_t i = 0; i < sizeof h; i++)
    CHECK(h[i] == 0x5A);
  CHECK_OK(ferry_queue_destroy(q));
  CHECK_OK(ferry_free(b));
  CHECK_OK(ferry_free(c));
}

/* ---- fills --------------------------------------------------------------------------- */

static void fill_model(unsigned char *m, size_t off, size_t n, const unsigned char *pat, size_t ps) {
  for (size_t i = 0; i < n; i++)
    m[off + i] = pat[i % ps];
}

static void queue_fills(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  const size_t n = 3 * MIB + 12;
  ferry_queue q = new_queue(dev);
  ferry_buffer b = conf_patterned(dev, n, 51);
  unsigned char *model = pattern_bytes(n, 51), *back = malloc(n);
  const unsigned char pat[4] = {0xDE, 0xAD, 0xBE, 0xEF};
  /* Every pattern size, odd offsets and lengths (multiples of the pattern), sync and async. */
  struct {
    size_t off, bytes, ps;
    bool sync;
  } fills[] = {{0, 1, 1, false},     {3, 5, 1, true},        {6, 10, 2, false},
               {102, 2, 2, true},    {8, 4, 4, false},       {4, 4092, 4, true},
               {1000, 1, 1, false},  {4, MIB + 4, 4, false}, {2 * MIB + 2, 2 * 1000, 2, true},
               {n - 4, 4, 4, false}, {n - 3, 3, 1, true}};
  for (size_t i = 0; i < sizeof fills / sizeof fills[0]; i++) {
    /* A synchronous call is ordered with the default queue only: wait for q first. */
    if (fills[i].sync) CHECK_OK(ferry_queue_synchronize(q));
    if (fills[i].sync)
      CHECK_OK(ferry_fill(b, fills[i].off, fills[i].bytes, pat, fills[i].ps));
    else
      CHECK_OK(ferry_fill_async(q, b, fills[i].off, fills[i].bytes, pat, fills[i].ps));
    fill_model(model, fills[i].off, fills[i].bytes, pat, fills[i].ps);
  }
  CHECK_OK(ferry_queue_synchronize(q));
  CHECK_OK(ferry_read(b, 0, back, n));
  size_t at = SIZE_MAX;
  for (size_t i = 0; i < n && at == SIZE_MAX; i++)
    if (back[i] != model[i]) at = i;
  CHECK_MSG(at == SIZE_MAX, "byte %zu is 0x%02x, 0x%02x expected", at, at == SIZE_MAX ? 0 : back[at],
            at == SIZE_MAX ? 0 : model[at]);
  /* A fill on a queue is ordered with the transfers around it. */
  unsigned char *h = pattern_bytes(4096, 52), *r = calloc(1, 4096);
  CHECK_OK(ferry_write_async(q, b, 0, h, 4096));
  CHECK_OK(ferry_fill_async(q, b, 1024, 1024, pat + 1, 1));
  CHECK_OK(ferry_read_async(q, b, 0, r, 4096));
  CHECK_OK(ferry_queue_synchronize(q));
  memset(h + 1024, pat[1], 1024);
  CHECK(memcmp(h, r, 4096) == 0);
  /* The pattern is copied at submission: overwritten right after the call,
   * behind a transfer of the whole buffer that keeps the fill from running
   * yet, it still fills with what it was. */
  uint32_t word = 0x01020304, was = word;
  CHECK_OK(ferry_write_async(q, b, 0, model, n));
  CHECK_OK(ferry_fill_async(q, b, 8, 64, &word, 4));
  word = 0xFFFFFFFF;
  CHECK_OK(ferry_read_async(q, b, 0, r, 128));
  CHECK_OK(ferry_queue_synchronize(q));
  fill_model(model, 8, 64, (const unsigned char *)&was, 4);
  CHECK_MSG(memcmp(r, model, 128) == 0, "a fill used its pattern as changed after the call, not as submitted");
  CHECK_OK(ferry_queue_destroy(q));
  CHECK_OK(ferry_free(b));
  free(model), free(back), free(h), free(r);
}

/* ---- events ---------------------------------------------------------------------------- */

static void queue_events(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  ferry_queue q = new_queue(dev), q2 = new_queue(dev);
  ferry_event never = new_event(), start = new_event(), stop = new_event(), e = new_event();
  double ms = -1;
  /* Never recorded: complete, and no clock to measure. */
  CHECK_OK(ferry_event_query(never));
  CHECK_OK(ferry_event_synchronize(never));
  CHECK_OK(ferry_queue_wait_event(q, never));
  CHECK_STATUS(ferry_event_elapsed(never, stop, &ms), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK(ms == -1);
  /* Recorded around work: complete after it, elapsed non-negative and finite. */
  const size_t n = 4 * MIB;
  ferry_buffer a = conf_sentinel(), b = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &a));
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &b));
  unsigned char *src = pattern_bytes(n, 61), *back = calloc(1, n);
  CHECK_OK(ferry_event_record(start, q));
  CHECK_OK(ferry_write_async(q, a, 0, src, n));
  CHECK_OK(ferry_copy_async(q, a, 0, b, 0, n));
  CHECK_OK(ferry_event_record(stop, q));
  CHECK_STATUS(ferry_event_elapsed(start, stop, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_OK(ferry_event_synchronize(stop));
  CHECK_OK(ferry_event_query(stop));
  CHECK_OK(ferry_event_query(start));
  CHECK_OK(ferry_event_elapsed(start, stop, &ms));
  CHECK_MSG(ms >= 0 && isfinite(ms) && ms < 600e3, "elapsed %g ms", ms);
  double back_ms = 1;
  CHECK_OK(ferry_event_elapsed(stop, start, &back_ms));
  CHECK_MSG(back_ms <= 0 && isfinite(back_ms), "stop to start %g ms", back_ms);
  /* The copy was done when stop completed: b holds the bytes. */
  CHECK_OK(ferry_read(b, 0, back, n));
  CHECK(memcmp(back, src, n) == 0);
  /* Another queue waits for an event of the first, recorded after a write;
   * destroying the event right after does not release the wait. */
  unsigned char *src2 = pattern_bytes(n, 62);
  CHECK_OK(ferry_write_async(q, a, 0, src2, n));
  CHECK_OK(ferry_event_record(e, q));
  CHECK_OK(ferry_queue_wait_event(q2, e));
  CHECK_OK(ferry_event_destroy(e));
  memset(back, 0, n);
  CHECK_OK(ferry_read_async(q2, a, 0, back, n));
  CHECK_OK(ferry_queue_synchronize(q2));
  CHECK(memcmp(back, src2, n) == 0);
  /* Recording again replaces the capture: a wait taken before keeps the old one. */
  ferry_event r = new_event();
  CHECK_OK(ferry_event_record(r, q));
  CHECK_OK(ferry_event_synchronize(r));
  CHECK_OK(ferry_write_async(q, b, 0, src, n));
  CHECK_OK(ferry_event_record(r, q2)); /* now on the other queue */
  CHECK_OK(ferry_event_synchronize(r));
  CHECK_OK(ferry_queue_synchronize(q));
  CHECK_OK(ferry_queue_synchronize(q2));
  CHECK_OK(ferry_event_elapsed(start, r, &ms)); /* two queues, one device: one clock */
  CHECK(isfinite(ms));
  CHECK_OK(ferry_queue_destroy(q));
  CHECK_OK(ferry_queue_destroy(q2));
  /* An event of a destroyed queue is still complete, and its time still there. */
  CHECK_OK(ferry_event_query(stop));
  CHECK_OK(ferry_event_elapsed(start, stop, &ms));
  CHECK_OK(ferry_event_destroy(never));
  CHECK_OK(ferry_event_destroy(start));
  CHECK_OK(ferry_event_destroy(stop));
  CHECK_OK(ferry_event_destroy(r));
  CHECK_OK(ferry_free(a));
  CHECK_OK(ferry_free(b));
  free(src), free(src2), free(back);
}

/* ---- lifetimes ---------------------------------------------------------------------------- */

static void queue_lifetimes(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  const size_t n = 2 * MIB + 3;
  ferry_queue q = new_queue(dev);
  /* Buffers freed while queued work uses them stay valid until it ends. */
  ferry_buffer a = conf_patterned(dev, n, 71), b = conf_sentinel(), c = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &b));
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &c));
  unsigned char *back = calloc(1, n);
  CHECK_OK(ferry_copy_async(q, a, 0, b, 0, n));
  CHECK_OK(ferry_free(a));
  CHECK_OK(ferry_copy_async(q, b, 0, c, 0, n));
  CHECK_OK(ferry_free(b));
  CHECK_STATUS(ferry_free(b), FERRY_ERROR_STALE_BUFFER);
  CHECK_OK(ferry_read_async(q, c, 0, back, n));
  CHECK_OK(ferry_free(c));
  CHECK_OK(ferry_queue_synchronize(q));
  unsigned char *model = pattern_bytes(n, 71);
  CHECK(memcmp(back, model, n) == 0);
  /* Destroying a queue with work pending waits for it. */
  ferry_buffer d = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &d));
  memset(back, 0, n);
  for (int i = 0; i < 8; i++)
    CHECK_OK(ferry_write_async(q, d, 0, model, n));
  CHECK_OK(ferry_read_async(q, d, 0, back, n));
  CHECK_OK(ferry_queue_destroy(q));
  CHECK(memcmp(back, model, n) == 0);
  /* The synchronous calls wait for the default queue's work first. */
  ferry_queue dq;
  CHECK_OK(ferry_queue_default(dev, &dq));
  unsigned char *other = pattern_bytes(n, 72);
  CHECK_OK(ferry_write_async(dq, d, 0, other, n));
  memset(back, 0, n);
  CHECK_OK(ferry_read(d, 0, back, n));
  CHECK(memcmp(back, other, n) == 0);
  CHECK_OK(ferry_fill_async(dq, d, 0, 1024, other, 1));
  CHECK_OK(ferry_device_to_host_ptr(d, back, n));
  for (size_t i = 0; i < 1024; i++)
    CHECK(back[i] == other[0]);
  /* ferry_device_synchronize waits for every queue of the device. */
  ferry_queue q2 = new_queue(dev);
  memset(back, 0, n);
  CHECK_OK(ferry_read_async(q2, d, 0, back, n));
  CHECK_OK(ferry_device_synchronize(dev));
  for (size_t i = 0; i < 1024; i++)
    CHECK(back[i] == other[0]);
  CHECK(memcmp(back + 1024, other + 1024, n - 1024) == 0);
  CHECK_OK(ferry_queue_query(q2));
  CHECK_OK(ferry_queue_destroy(q2));
  CHECK_OK(ferry_free(d));
  free(back), free(model), free(other);
}

/* ---- buffers over host arrays ---------------------------------------------------------------- */

static void queue_host_arrays(ferry_device *dev, const ferry_device_info *info) {
  const size_t n = 1 << 16;
  size_t align = info->host_ptr_alignment;
  unsigned char *arr = harness_aligned(align > 64 ? align : 64, n);
  fill_pattern(arr, n, 81);
  ferry_buffer z = conf_sentinel();
  ferry_refusal why;
  ferry_status st = ferry_alloc_host_ptr(dev, ferry_array_of(arr, n, FERRY_UINT8), &z, &why);
  if (st == FERRY_ERROR_REFUSED) {
    harness_not_applicable("no host-pointer buffers (%s)", ferry_refusal_name(why));
    CHECK(why != FERRY_REFUSAL_NONE);
    free(arr);
    return;
  }
  CHECK_OK(st);
  ferry_queue q = new_queue(dev);
  ferry_buffer b = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &b));
  unsigned char *other = pattern_bytes(n, 82), *back = calloc(1, n);
  /* Through its own array: the transfers only hand the array over; from another, they copy. */
  CHECK_OK(ferry_write_async(q, z, 0, arr, n));
  CHECK_OK(ferry_copy_async(q, z, 0, b, 0, n));
  CHECK_OK(ferry_write_async(q, z, 0, other, n));
  CHECK_OK(ferry_read_async(q, z, 0, arr, n)); /* the array gets the buffer's bytes: other's */
  CHECK_OK(ferry_read_async(q, b, 0, back, n));
  CHECK_OK(ferry_queue_synchronize(q));
  unsigned char *model = pattern_bytes(n, 81);
  CHECK(memcmp(back, model, n) == 0);
  CHECK(memcmp(arr, other, n) == 0);
  /* Handed over, written from another array, taken back, with nothing between:
   * the take waits for the write's last DMA (staged on GPUs). */
  fill_pattern(arr, n, 83);
  CHECK_OK(ferry_write_async(q, z, 0, arr, n));
  CHECK_OK(ferry_write_async(q, z, 0, other, n));
  CHECK_OK(ferry_read_async(q, z, 0, arr, n));
  CHECK_OK(ferry_queue_synchronize(q));
  CHECK(memcmp(arr, other, n) == 0);
  CHECK_OK(ferry_queue_destroy(q));
  CHECK_OK(ferry_free(z));
  CHECK_OK(ferry_free(b));
  free(arr), free(other), free(back), free(model);
}

/* ---- typed transfers on a queue ------------------------------------------------------------ */

static void queue_typed(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  const size_t n = 3001; /* odd: no piece size divides it */
  ferry_queue q = new_queue(dev);
  float *src = malloc(n * sizeof *src), *back = calloc(n, sizeof *back);
  for (size_t i = 0; i < n; i++)
    src[i] = (float)i * 0.5f - 7.0f;
  ferry_buffer a = conf_sentinel(), b = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, n, FERRY_FLOAT32, &a));
  CHECK_OK(ferry_alloc(dev, n, FERRY_FLOAT32, &b));
  CHECK_OK(ferry_host_to_device_async(q, ferry_array_of(src, n, FERRY_FLOAT32), a));
  CHECK_OK(ferry_device_to_device_async(q, a, b));
  CHECK_OK(ferry_device_to_host_async(q, b, ferry_array_of(back, n, FERRY_FLOAT32)));
  CHECK_OK(ferry_queue_synchronize(q));
  CHECK(memcmp(src, back, n * sizeof *src) == 0);
  /* The synchronous typed calls' checks, at submission: nothing is submitted. */
  int32_t ints[8] = {0};
  ferry_buffer c = conf_sentinel(), w = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, 8, FERRY_INT32, &c));
  CHECK_OK(ferry_alloc(dev, n + 1, FERRY_FLOAT32, &w));
  CHECK_STATUS(ferry_host_to_device_async(q, ferry_array_of(ints, 8, FERRY_INT32), a), FERRY_ERROR_KIND_MISMATCH);
  CHECK_ERROR_HAS("ferry_host_to_device_async");
  CHECK_STATUS(ferry_host_to_device_async(q, ferry_array_of(src, n - 1, FERRY_FLOAT32), a), FERRY_ERROR_SIZE_MISMATCH);
  CHECK_STATUS(ferry_device_to_host_async(q, c, ferry_array_of(back, 8, FERRY_FLOAT32)), FERRY_ERROR_KIND_MISMATCH);
  CHECK_ERROR_HAS("ferry_device_to_host_async");
  CHECK_STATUS(ferry_device_to_host_async(q, a, ferry_array_of(NULL, n, FERRY_FLOAT32)), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_device_to_device_async(q, a, c), FERRY_ERROR_KIND_MISMATCH);
  CHECK_ERROR_HAS("ferry_device_to_device_async");
  CHECK_STATUS(ferry_device_to_device_async(q, a, w), FERRY_ERROR_SIZE_MISMATCH);
  CHECK_STATUS(ferry_host_to_device_async(FERRY_NULL_QUEUE, ferry_array_of(src, n, FERRY_FLOAT32), a),
               FERRY_ERROR_STALE_HANDLE);
  CHECK_OK(ferry_queue_synchronize(q));
  memset(back, 0, n * sizeof *back);
  CHECK_OK(ferry_device_to_host(a, ferry_array_of(back, n, FERRY_FLOAT32)));
  CHECK(memcmp(src, back, n * sizeof *src) == 0);
  CHECK_OK(ferry_queue_destroy(q));
  CHECK_OK(ferry_free(a));
  CHECK_OK(ferry_free(b));
  CHECK_OK(ferry_free(c));
  CHECK_OK(ferry_free(w));
  free(src), free(back);
}

/* ---- threads -------------------------------------------------------------------------------- */

typedef struct thread_job {
  ferry_device *dev;
  uint32_t seed;
  int failures;
} thread_job;

static void *queue_thread(void *arg) {
  thread_job *j = arg;
  const size_t n = (1 << 18) + 7 * j->seed;
  ferry_queue q;
  ferry_buffer b;
  if (ferry_queue_create(j->dev, &q) != FERRY_OK || ferry_alloc(j->dev, n, FERRY_UINT8, &b) != FERRY_OK) {
    j->failures++;
    return NULL;
  }
  unsigned char *src = pattern_bytes(n, j->seed), *back = calloc(1, n);
  for (int round = 0; round < 6; round++) {
    memset(back, 0, n);
    if (ferry_write_async(q, b, 0, src, n) != FERRY_OK || ferry_read_async(q, b, 0, back, n) != FERRY_OK ||
        ferry_queue_synchronize(q) != FERRY_OK || memcmp(src, back, n) != 0)
      j->failures++;
  }
  if (ferry_queue_destroy(q) != FERRY_OK || ferry_free(b) != FERRY_OK) j->failures++;
  free(src);
  free(back);
  return NULL;
}

static void queue_threads(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  enum { THREADS = 4 };
  pthread_t t[THREADS];
  thread_job jobs[THREADS];
  for (int i = 0; i < THREADS; i++) {
    jobs[i] = (thread_job){.dev = dev, .seed = 90 + (uint32_t)i};
    CHECK(pthread_create(&t[i], NULL, queue_thread, &jobs[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    CHECK_MSG(jobs[i].failures == 0, "thread %d: %d rounds failed", i, jobs[i].failures);
  }
}

const conformance_case conformance_queue_cases[] = {
    {"queue_handles", queue_handles},
    {"queue_order", queue_order},
    {"queue_sizes", queue_sizes},
    {"queue_checks", queue_checks},
    {"queue_fills", queue_fills},
    {"queue_events", queue_events},
    {"queue_lifetimes", queue_lifetimes},
    {"queue_host_arrays", queue_host_arrays},
    {"queue_threads", queue_threads},
    {"queue_typed", queue_typed},
    {NULL, NULL},
};

/* ---- pairs of devices ----------------------------------------------------------------------- */

static void cross_queue_copies(ferry_device *a, const ferry_device_info *ia, ferry_device *b,
                               const ferry_device_info *ib) {
  (void)ia;
  (void)ib;
  const size_t sizes[] = {0, 1, 4097, (9u << 20) + 3};
  ferry_queue qa = new_queue(a), qb = new_queue(b);
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    ferry_buffer s = conf_patterned(a, n, 101 + (uint32_t)i), d1 = conf_sentinel(), d2 = conf_sentinel();
    CHECK_OK(ferry_alloc(b, n, FERRY_UINT8, &d1));
    CHECK_OK(ferry_alloc(b, n, FERRY_UINT8, &d2));
    CHECK_OK(ferry_copy_async(qa, s, 0, d1, 0, n)); /* on the source's queue */
    CHECK_OK(ferry_copy_async(qb, s, 0, d2, 0, n)); /* on the destination's */
    CHECK_OK(ferry_queue_synchronize(qa));
    CHECK_OK(ferry_queue_synchronize(qb));
    conf_expect_pattern(d1, n, 101 + (uint32_t)i, "a copy on the source's queue");
    conf_expect_pattern(d2, n, 101 + (uint32_t)i, "a copy on the destination's queue");
    CHECK_OK(ferry_free(s));
    CHECK_OK(ferry_free(d1));
    CHECK_OK(ferry_free(d2));
  }
  /* A queue of neither device is refused. */
  ferry_buffer s = conf_patterned(b, 16, 109), d = conf_patterned(b, 16, 110);
  CHECK_STATUS(ferry_copy_async(qa, s, 0, d, 0, 16), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("source's or the destination's");
  conf_expect_pattern(d, 16, 110, "after a refused copy");
  CHECK_OK(ferry_free(s));
  CHECK_OK(ferry_free(d));
  CHECK_OK(ferry_queue_destroy(qa));
  CHECK_OK(ferry_queue_destroy(qb));
}

static void cross_queue_events(ferry_device *a, const ferry_device_info *ia, ferry_device *b,
                               const ferry_device_info *ib) {
  (void)ia;
  (void)ib;
  const size_t n = 3 * MIB + 1;
  ferry_queue qa = new_queue(a), qb = new_queue(b);
  ferry_buffer x = conf_sentinel(), y = conf_sentinel();
  CHECK_OK(ferry_alloc(a, n, FERRY_UINT8, &x));
  CHECK_OK(ferry_alloc(b, n, FERRY_UINT8, &y));
  unsigned char *src = pattern_bytes(n, 111), *back = calloc(1, n);
  ferry_event e = new_event();
  /* b's queue waits for a's write, then copies from a to b and reads back. */
  CHECK_OK(ferry_write_async(qa, x, 0, src, n));
  CHECK_OK(ferry_event_record(e, qa));
  CHECK_OK(ferry_queue_wait_event(qb, e));
  CHECK_OK(ferry_copy_async(qb, x, 0, y, 0, n));
  CHECK_OK(ferry_read_async(qb, y, 0, back, n));
  CHECK_OK(ferry_queue_synchronize(qb));
  CHECK(memcmp(back, src, n) == 0);
  /* Events of two devices have no common clock. */
  ferry_event ea = new_event(), eb = new_event();
  double ms = 0;
  CHECK_OK(ferry_event_record(ea, qa));
  CHECK_OK(ferry_event_record(eb, qb));
  CHECK_OK(ferry_event_synchronize(ea));
  CHECK_OK(ferry_event_synchronize(eb));
  CHECK_STATUS(ferry_event_elapsed(ea, eb, &ms), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("recorded on");
  CHECK_OK(ferry_event_destroy(e));
  CHECK_OK(ferry_event_destroy(ea));
  CHECK_OK(ferry_event_destroy(eb));
  CHECK_OK(ferry_queue_destroy(qa));
  CHECK_OK(ferry_queue_destroy(qb));
  CHECK_OK(ferry_free(x));
  CHECK_OK(ferry_free(y));
  free(src);
  free(back);
}

const conformance_pair_case conformance_queue_pair_cases[] = {
    {"cross_queue_copies", cross_queue_copies},
    {"cross_queue_events", cross_queue_events},
    {NULL, NULL},
};
