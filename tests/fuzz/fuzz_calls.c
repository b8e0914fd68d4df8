/*
 * libFuzzer harness: random sequences of ferry calls, checked against a
 * byte-exact model of every buffer.
 *
 * Each input is a program: its bytes choose the calls (allocations of the four
 * kinds, free, typed, _ptr and byte-range transfers, copies within and between
 * buffers and devices, stale and made-up handles, shutdown and a new session)
 * and their arguments, valid ones mostly and each way of being wrong sometimes,
 * and bursts of asynchronous operations on queues, taken by the model in order.
 * The model knows what every call must return (the order of checks in
 * docs/API.md) and what every buffer and every host array must then hold; the
 * first difference aborts with the whole call sequence, so a crash file is a
 * reproducer whose trace says what went wrong.
 *
 * Devices: native and checked, and the test backend "fault" (two devices over
 * host memory, not zero-copy, with host-pointer buffers, deferred asynchronous
 * transfers, and FERRY_STAGE_MIN low enough that transfers of a few KiB go
 * through the core's staging pipeline).
 *
 * Built two ways (tests/fuzz/CMakeLists.txt): with clang -fsanitize=fuzzer,
 * address,undefined as ferry_fuzz (FERRY_FUZZ=ON; .ci/run runs it for a fixed
 * time), and with any compiler as fuzz_replay, which runs the committed corpus
 * (tests/fuzz/corpus/) in every build, valgrind and TSan included.
 */
#include "fault_backend.h"
#include "harness.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  MAX_BUFFERS = 8,
  MAX_STALE = 16,
  MAX_ARENAS = 3,
  MAX_DEVICES = 8,
  MAX_STEPS = 256,
  LARGE_BYTES = (4 << 20) + 4099, /* above the core's 4 MiB parallel-copy threshold */
};

/* ---- the input --------------------------------------------------------------------------- */

static const uint8_t *in_data;
static size_t in_left;

static uint8_t take8(void) {
  if (!in_left) return 0;
  in_left--;
  return *in_data++;
}
static uint32_t take16(void) { return (uint32_t)take8() | (uint32_t)take8() << 8; }
static uint32_t take32(void) { return take16() | take16() << 16; }
static size_t pick(size_t n) { return n ? take8() % n : 0; }
static bool chance(unsigned in256) { return take8() < in256; }

/* A byte count: mostly small, sometimes a few pages, rarely above the
 * parallel-copy threshold. */
static size_t take_bytes(void) {
  uint8_t b = take8();
  switch (b >> 6) {
  case 0: return b & 63;
  case 1: return take16() % 4096;
  case 2: return take16() % 70000;
  default: return (b & 63) < 3 ? LARGE_BYTES - (take16() % 8192) : take16() % 200000;
  }
}

/* ---- the call sequence, for the report --------------------------------------------------- */

static char trace[1 << 17];
static size_t trace_len;
static int step;

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
  if (trace_len + 300 >= sizeof trace) return;
  trace_len += (size_t)snprintf(trace + trace_len, sizeof trace - trace_len, "  %3d  ", step);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(trace + trace_len, sizeof trace - trace_len, fmt, ap);
  va_end(ap);
  if (n > 0) trace_len += (size_t)n < sizeof trace - trace_len ? (size_t)n : sizeof trace - trace_len - 1;
  if (trace_len + 1 < sizeof trace) trace[trace_len++] = '\n';
  trace[trace_len] = '\0';
  /* For a crash, which ends the process before the trace is printed: each call as it is made. */
  static int live = -1;
  if (live < 0) live = getenv("FERRY_FUZZ_TRACE") && !strcmp(getenv("FERRY_FUZZ_TRACE"), "live");
  if (live) {
    va_start(ap, fmt);
    fprintf(stderr, "  %3d  ", step);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
  }
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...) {
  fprintf(stderr, "\nferry_fuzz: MISMATCH between ferry and the model at step %d: ", step);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nferry_last_error(): %s\nthe call sequence (this input):\n%s\n", ferry_last_error(), trace);
  abort();
}

/* ---- the model --------------------------------------------------------------------------- */

/* Host memory the program owns (what zero-copy and host-pointer buffers are
 * made over): its bytes as the model says they must be, and which bytes the
 * model knows (a host-pointer buffer's device-side writes reach its array only
 * when the array is handed back). */
typedef struct arena {
  uint8_t *mem, *shadow, *known;
  size_t size;
} arena;

typedef struct model_buffer {
  bool live;
  ferry_buffer handle;
  int name; /* b<name> in the trace */
  size_t dev;
  ferry_kind kind; /* FERRY_CUSTOM for custom buffers */
  size_t elem, length, bytes;
  bool
      zero_copy; /* what ferry_is_zero_copy answers: zero-copy buffers, and host-pointer buffers on zero-copy devices */
  int arena;     /* -1: memory of its own; else the array it is over */
  size_t at;     /* its offset in that arena */
  bool host_ptr; /* over an arena on a device that is not zero-copy: contents of its own, synchronised */
  uint8_t *model; /* the buffer's bytes when it has its own (arena < 0, or host_ptr) */
  uint8_t *known;
} model_buffer;

static struct {
  bool started;
  size_t count;
  ferry_device *dev[MAX_DEVICES];
  ferry_device_info info[MAX_DEVICES];
} S;
static model_buffer bufs[MAX_BUFFERS];
/* One queue per device besides the default, made on first use in a session (queue bursts). */
static ferry_queue own_queue[MAX_DEVICES];
static ferry_buffer stale[MAX_STALE];
static size_t stale_count, stale_next;
static arena arenas[MAX_ARENAS];
static int next_name;
static uint8_t *scratch, *before, *before_known;
static size_t scratch_size;

static const char *kind_text(ferry_kind k) { return (unsigned)k <= FERRY_CUSTOM ? ferry_kind_name(k) : "(unknown)"; }

/* The bytes of a buffer as the model has them. */
static uint8_t *content(const model_buffer *b) {
  return b->arena >= 0 && !b->host_ptr ? arenas[b->arena].shadow + b->at : b->model;
}
static uint8_t *content_known(const model_buffer *b) {
  return b->arena >= 0 && !b->host_ptr ? arenas[b->arena].known + b->at : b->known;
}

static void remember_stale(ferry_buffer h) {
  stale[stale_next] = h;
  stale_next = (stale_next + 1) % MAX_STALE;
  if (stale_count < MAX_STALE) stale_count++;
}

/* A host pointer the calls read from or write into: the scratch block, an
 * arena (a buffer's own array, or memory overlapping it), or NULL. */
typedef struct host_range {
  uint8_t *p;
  int arena; /* -1: scratch */
  size_t at;
} host_range;

static void ensure_scratch(size_t bytes) {
  if (bytes <= scratch_size) return;
  free(scratch);
  free(before);
  free(before_known);
  scratch_size = bytes;
  scratch = malloc(bytes);
  before = malloc(bytes);
  before_known = malloc(bytes);
  if (!scratch || !before || !before_known) abort();
}

/* Deterministic bytes from one input byte (inputs are short; buffers are not). */
static void fill(uint8_t *p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 0x9e3779b9u;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = (uint8_t)x;
  }
}

/* Somewhere to read `bytes` from or write them to. */
static host_range host_for(size_t bytes, const model_buffer *b) {
  size_t way = pick(4);
  if (way >= 1 && b && b->arena >= 0 && way == 1 && b->bytes == bytes)
    return (host_range){arenas[b->arena].mem + b->at, b->arena, b->at}; /* its own array */
  if (way == 2) {
    int a = (int)pick(MAX_ARENAS);
    if (arenas[a].mem && arenas[a].size >= bytes) {
      size_t at = pick(4) == 0 ? 0 : take16() % (arenas[a].size - bytes + 1);
      return (host_range){arenas[a].mem + at, a, at};
    }
  }
  ensure_scratch(bytes ? bytes : 1);
  fill(scratch, bytes, take8());
  return (host_range){scratch, -1, 0};
}

/* Copies what a host range holds now (and what of it the model knows). */
static void snapshot_host(host_range h, size_t n) {
  ensure_scratch(n ? n : 1);
  if (n) memmove(before, h.p, n);
  if (h.arena >= 0)
    memcpy(before_known, arenas[h.arena].known + h.at, n);
  else
    memset(before_known, 1, n);
}

static void snapshot_buffer(const model_buffer *b, size_t off, size_t n) {
  ensure_scratch(n ? n : 1);
  memcpy(before, content(b) + off, n);
  memcpy(before_known, content_known(b) + off, n);
}

/* The model's rules for host-pointer buffers (devices that are not zero-copy):
 * bytes the program writes into the array are unknown to the device until it is
 * handed over (a transfer from its own array), and bytes written on the device
 * are unknown in the array until it is handed back. */
static void arena_changed(int a, size_t at, size_t n, const model_buffer *except) {
  for (int i = 0; i < MAX_BUFFERS; i++) {
    model_buffer *b = &bufs[i];
    if (!b->live || !b->host_ptr || b->arena != a || b == except) continue;
    size_t lo = at > b->at ? at : b->at, hi = at + n < b->at + b->bytes ? at + n : b->at + b->bytes;
    if (lo < hi) memset(b->known + (lo - b->at), 0, hi - lo);
  }
}

static void device_changed(const model_buffer *b, size_t off, size_t n) {
  if (!b->host_ptr) return;
  memset(arenas[b->arena].known + b->at + off, 0, n);
  arena_changed(b->arena, b->at + off, n, b);
}

/* Writes the snapshot into a buffer's model at off. */
static void model_write_buffer(model_buffer *b, size_t off, size_t n) {
  if (n == 0) return;
  memcpy(content(b) + off, before, n);
  memcpy(content_known(b) + off, before_known, n);
  if (b->arena >= 0 && !b->host_ptr) arena_changed(b->arena, b->at + off, n, NULL);
  device_changed(b, off, n);
}

/* Writes the snapshot into host memory (the model of an arena; scratch has none). */
static void model_write_host(host_range h, size_t n) {
  if (h.arena < 0 || n == 0) return;
  memcpy(arenas[h.arena].shadow + h.at, before, n);
  memcpy(arenas[h.arena].known + h.at, before_known, n);
  arena_changed(h.arena, h.at, n, NULL);
}

/* A failed transfer may have written part of its destination. */
static void forget_buffer(model_buffer *b, size_t off, size_t n) {
  if (n == 0) return;
  memset(content_known(b) + off, 0, n);
  if (b->arena >= 0 && !b->host_ptr) arena_changed(b->arena, b->at + off, n, NULL);
  device_changed(b, off, n);
}

static void forget_host(host_range h, size_t n) {
  if (h.arena < 0 || n == 0) return;
  memset(arenas[h.arena].known + h.at, 0, n);
  arena_changed(h.arena, h.at, n, NULL);
}

/* A transfer between a host-pointer buffer and its own array at the same bytes
 * hands the array over (to the device, or back), which the model follows. */
static bool own_bytes(const model_buffer *b, host_range h, size_t off) {
  return b->arena >= 0 && h.arena == b->arena && h.at == b->at + off;
}

static void sync_to_device(model_buffer *b, size_t off, size_t n) {
  if (!b->host_ptr) return;
  memcpy(b->model + off, arenas[b->arena].shadow + b->at + off, n);
  memcpy(b->known + off, arenas[b->arena].known + b->at + off, n);
}

static void sync_to_host(model_buffer *b, size_t off, size_t n) {
  if (!b->host_ptr) return;
  memcpy(arenas[b->arena].shadow + b->at + off, b->model + off, n);
  memcpy(arenas[b->arena].known + b->at + off, b->known + off, n);
}

/* What host memory holds after a read must be the buffer's bytes, where known. */
static void expect_bytes(const uint8_t *got, const char *what, const model_buffer *b, size_t off, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (before_known[i] && got[i] != before[i])
      fail("%s: byte %zu of b%d (offset %zu) is 0x%02x, the model says 0x%02x", what, off + i, b->name, off + i, got[i],
           before[i]);
}

/* The program's own arrays must hold what the model says, whatever ferry did. */
static void check_arenas(void) {
  for (int a = 0; a < MAX_ARENAS; a++) {
    arena *ar = &arenas[a];
    for (size_t i = 0; ar->mem && i < ar->size; i++)
      if (ar->known[i] && ar->mem[i] != ar->shadow[i])
        fail("host array a%d: byte %zu is 0x%02x, the model says 0x%02x", a, i, ar->mem[i], ar->shadow[i]);
  }
}

/* Every device's statistics count the model's live buffers and their bytes. */
static void check_stats(void) {
  for (size_t d = 0; d < S.count; d++) {
    uint64_t live = 0, bytes = 0;
    for (int i = 0; i < MAX_BUFFERS; i++)
      if (bufs[i].live && bufs[i].dev == d) live++, bytes += bufs[i].bytes;
    ferry_stats st;
    if (ferry_device_stats(S.dev[d], &st) != FERRY_OK) fail("ferry_device_stats(device %zu) failed", d);
    if (st.live_buffers != live || st.bytes_in_use != bytes)
      fail("device %zu (%s) counts %llu live buffers of %llu bytes, the model %llu of %llu", d, S.info[d].backend,
           (unsigned long long)st.live_buffers, (unsigned long long)st.bytes_in_use, (unsigned long long)live,
           (unsigned long long)bytes);
  }
}

static void expect(ferry_status got, ferry_status want, const char *call) {
  if (got != want) fail("%s returned %s, the model expects %s", call, ferry_status_name(got), ferry_status_name(want));
  if (got != FERRY_OK) {
    const char *why = ferry_last_error();
    if (!why[0] || strcmp(why, "no error") == 0)
      fail("%s failed with %s but left no sentence", call, ferry_status_name(got));
  }
}

/* ---- driver failures ---------------------------------------------------------------------- */

/* The fault devices fail one driver operation on demand (fault_arm). A call
 * during which the armed failure fires may succeed (the core retried, or fell
 * back) or fail with the driver's status; when it fails, its destination may be
 * partly written (docs/API.md), so the model forgets those bytes, and checks
 * everything else as always. */
static int armed = -1;
static ferry_status armed_status;

static void disarm(void) {
  memset(fault.fail_with, 0, sizeof fault.fail_with);
  memset(fault.fail_after, 0, sizeof fault.fail_after);
  armed = -1;
}

/* Did the armed failure make this call fail? (Then the call's status is one a
 * driver failure may give, else the model fails.) */
static bool failed_by_driver(ferry_status st, const char *call) {
  if (armed < 0 || fault.fail_with[armed] != FERRY_OK) return false;
  armed = -1; /* it fired during this call */
  if (st == FERRY_OK) return false;
  if (st != armed_status && st != FERRY_ERROR_BACKEND && st != FERRY_ERROR_REFUSED)
    fail("%s: a driver failure (%s) was injected, and the call returned %s", call, ferry_status_name(armed_status),
         ferry_status_name(st));
  note("      (the injected driver failure made it fail: its destination is unknown now)");
  return true;
}

/* ---- sessions ---------------------------------------------------------------------------- */

static void session_start(void) {
  ferry_status st = ferry_init();
  if (st != FERRY_OK) fail("ferry_init: %s", ferry_status_name(st));
  S.count = ferry_device_count();
  if (S.count == 0 || S.count > MAX_DEVICES) fail("%zu devices", S.count);
  for (size_t d = 0; d < S.count; d++) {
    if (ferry_device_get(d, &S.dev[d]) != FERRY_OK || ferry_device_info_get(S.dev[d], &S.info[d]) != FERRY_OK)
      fail("device %zu", d);
  }
  S.started = true;
}

static void buffer_forget(model_buffer *b) {
  free(b->model);
  free(b->known);
  memset(b, 0, sizeof *b);
}

/* ferry_shutdown: every buffer becomes stale; the program's arrays stay its own
 * (a host-pointer buffer's array may or may not get the device's last bytes). */
static void session_end(const char *why) {
  disarm(); /* ferry_shutdown's own driver calls are not what is fuzzed */
  note("ferry_shutdown()%s", why);
  for (int i = 0; i < MAX_BUFFERS; i++) {
    model_buffer *b = &bufs[i];
    if (!b->live) continue;
    if (b->host_ptr) memset(arenas[b->arena].known + b->at, 0, b->bytes);
    remember_stale(b->handle);
    buffer_forget(b);
  }
  ferry_shutdown();
  S.started = false;
  memset(own_queue, 0, sizeof own_queue); /* stale with the session */
  check_arenas();
}

/* ---- choosing buffers and handles -------------------------------------------------------- */

static model_buffer *live_buffer(void) {
  int start = (int)pick(MAX_BUFFERS);
  for (int k = 0; k < MAX_BUFFERS; k++) {
    model_buffer *b = &bufs[(start + k) % MAX_BUFFERS];
    if (b->live) return b;
  }
  return NULL;
}

static model_buffer *free_slot(void) {
  for (int i = 0; i < MAX_BUFFERS; i++)
    if (!bufs[i].live) return &bufs[i];
  return NULL;
}

/* A handle that names no live buffer: freed, from an earlier session, or made up. */
static ferry_buffer stale_handle(void) {
  if (stale_count && pick(4) != 0) return stale[pick(stale_count)];
  switch (pick(4)) {
  case 0: return FERRY_NULL_BUFFER;
  case 1: return (ferry_buffer){UINT64_MAX};
  default: {
    /* A live buffer's slot with another generation. */
    model_buffer *b = live_buffer();
    uint64_t id = b ? b->handle.id : take32();
    return (ferry_buffer){id + ((uint64_t)(1 + pick(3)) << 32)};
  }
  }
}

/* A buffer for a call, or now and then a stale handle (b NULL). */
static ferry_buffer operand(model_buffer **out) {
  model_buffer *b = live_buffer();
  if (!b || chance(20)) {
    *out = NULL;
    return stale_handle();
  }
  *out = b;
  return b->handle;
}

static const char *handle_text(const model_buffer *b, ferry_buffer h, char buf[48]) {
  if (b)
    snprintf(buf, 48, "b%d", b->name);
  else
    snprintf(buf, 48, "stale 0x%llx", (unsigned long long)h.id);
  return buf;
}

/* ---- the calls --------------------------------------------------------------------------- */

static const ferry_kind kinds[] = {FERRY_FLOAT16,   FERRY_BFLOAT16,  FERRY_FLOAT32,   FERRY_FLOAT64,
                                   FERRY_INT8,      FERRY_UINT8,     FERRY_INT16,     FERRY_UINT16,
                                   FERRY_INT32,     FERRY_UINT32,    FERRY_INT64,     FERRY_UINT64,
                                   FERRY_NATIVEINT, FERRY_COMPLEX32, FERRY_COMPLEX64, FERRY_CHAR};
enum { KIND_COUNT = sizeof kinds / sizeof kinds[0] };

static void add_buffer(model_buffer *b, ferry_buffer h, size_t dev, ferry_kind kind, size_t elem, size_t length) {
  memset(b, 0, sizeof *b);
  b->live = true;
  b->handle = h;
  b->name = next_name++;
  b->dev = dev;
  b->kind = kind;
  b->elem = elem;
  b->length = length;
  b->bytes = elem * length;
  b->arena = -1;
}

static void give_own_memory(model_buffer *b) {
  b->model = malloc(b->bytes ? b->bytes : 1);
  b->known = calloc(b->bytes ? b->bytes : 1, 1);
  if (!b->model || !b->known) abort();
}

/* The buffer's info functions say what the model says. */
static void check_info(const model_buffer *b) {
  ferry_buffer h = b->handle;
  if (ferry_size(h) != b->length || ferry_elem_size(h) != b->elem || ferry_buffer_kind(h) != b->kind ||
      ferry_buffer_device(h) != S.dev[b->dev] || ferry_is_zero_copy(h) != b->zero_copy)
    fail("b%d: info says %zu x %zu bytes, kind %s, device %p, zero-copy %d; the model %zu x %zu, %s, %p, %d", b->name,
         ferry_size(h), ferry_elem_size(h), kind_text(ferry_buffer_kind(h)), (void *)ferry_buffer_device(h),
         ferry_is_zero_copy(h), b->length, b->elem, kind_text(b->kind), (void *)S.dev[b->dev], b->zero_copy);
  uintptr_t ptr = ferry_device_ptr(h);
  if (b->arena >= 0 && !b->host_ptr && ptr != (uintptr_t)(arenas[b->arena].mem + b->at))
    fail("b%d: ferry_device_ptr is 0x%llx, not its array's address %p", b->name, (unsigned long long)ptr,
         (void *)(arenas[b->arena].mem + b->at));
  if (b->arena < 0 && (ptr == 0) != (b->bytes == 0))
    fail("b%d: ferry_device_ptr is 0x%llx for %zu bytes", b->name, (unsigned long long)ptr, b->bytes);
}

static void call_free(void);

static void call_alloc(bool custom) {
  model_buffer *b = free_slot();
  if (!b && pick(4)) {
    call_free();
    return;
  }
  size_t d = pick(S.count);
  size_t elem;
  ferry_kind kind = FERRY_CUSTOM;
  if (custom)
    elem = 1 + pick(40);
  else {
    kind = kinds[pick(KIND_COUNT)];
    elem = ferry_kind_size(kind);
  }
  size_t length = take_bytes() / elem;
  ferry_device *dev = S.dev[d];
  ferry_buffer h = {0xfeedULL}, *out = &h;
  ferry_status want = FERRY_OK;
  switch (b ? pick(12) : 1 + pick(5)) {
  case 1: dev = NULL, want = FERRY_ERROR_INVALID_ARGUMENT; break;
  case 2: out = NULL, want = FERRY_ERROR_INVALID_ARGUMENT; break;
  case 3:
    if (custom)
      elem = 0;
    else
      kind = pick(2) ? FERRY_CUSTOM : (ferry_kind)(17 + pick(200));
    want = FERRY_ERROR_INVALID_ARGUMENT;
    break;
  case 4: length = SIZE_MAX / (elem ? elem : 1) + 1 + pick(3), want = elem > 1 ? FERRY_ERROR_OVERFLOW : want; break;
  case 5: length = 0; break;
  }
  if (want == FERRY_OK && (!b || length > SIZE_MAX / elem)) {
    if (!b) return;
    length = 0;
  }
  char call[160];
  ferry_status st;
  if (custom) {
    snprintf(call, sizeof call, "ferry_alloc_custom(%s, %zu, %zu, %s)", dev ? S.info[d].backend : "NULL", length, elem,
             out ? "&b" : "NULL");
    st = ferry_alloc_custom(dev, length, elem, out);
  } else {
    snprintf(call, sizeof call, "ferry_alloc(%s, %zu, %s, %s)", dev ? S.info[d].backend : "NULL", length,
             kind_text(kind), out ? "&b" : "NULL");
    st = ferry_alloc(dev, length, kind, out);
  }
  note("%s -> %s", call, ferry_status_name(st));
  if (!failed_by_driver(st, call)) expect(st, want, call);
  if (st != FERRY_OK) {
    if (h.id != 0xfeedULL) fail("%s failed but changed *out_buffer", call);
    return;
  }
  add_buffer(b, h, d, kind, elem, length);
  note("      = b%d", b->name);
  give_own_memory(b);
  /* Fresh memory of the checked backend holds its poison (docs/API.md). */
  if (strcmp(S.info[d].backend, "checked") == 0) {
    memset(b->model, 0xCB, b->bytes);
    memset(b->known, 1, b->bytes);
  }
  check_info(b);
}

static void call_new_arena(void) {
  int a = (int)pick(MAX_ARENAS);
  arena *ar = &arenas[a];
  for (int i = 0; i < MAX_BUFFERS; i++)
    if (bufs[i].live && bufs[i].arena == a) return; /* in use: the program keeps it */
  free(ar->mem);
  free(ar->shadow);
  free(ar->known);
  size_t size = take_bytes() + 64;
  ar->size = size;
  ar->mem = harness_aligned(4096, size);
  ar->shadow = malloc(size);
  ar->known = malloc(size);
  if (!ar->mem || !ar->shadow || !ar->known) abort();
  fill(ar->mem, size, take8());
  memcpy(ar->shadow, ar->mem, size);
  memset(ar->known, 1, size);
  note("a%d = a host array of %zu bytes", a, size);
}

/* The program writes into its own array (through a zero-copy buffer's memory, say). */
static void call_poke_arena(void) {
  int a = (int)pick(MAX_ARENAS);
  arena *ar = &arenas[a];
  if (!ar->mem) return;
  size_t at = take16() % ar->size, n = 1 + take16() % 512;
  if (n > ar->size - at) n = ar->size - at;
  fill(ar->mem + at, n, take8());
  memcpy(ar->shadow + at, ar->mem + at, n);
  memset(ar->known + at, 1, n);
  arena_changed(a, at, n, NULL);
  note("the program writes %zu bytes into a%d at %zu", n, a, at);
}

static void call_over_host(bool host_ptr_call) {
  model_buffer *b = free_slot();
  size_t d = pick(S.count);
  int a = (int)pick(MAX_ARENAS);
  arena *ar = &arenas[a];
  if (!b || !ar->mem) return;
  ferry_kind kind = kinds[pick(KIND_COUNT)];
  size_t elem = ferry_kind_size(kind), align = S.info[d].host_ptr_alignment;
  size_t at = take16() % ar->size;
  if (host_ptr_call && !S.info[d].zero_copy && pick(4)) at -= at % align;
  size_t length = (ar->size - at) / elem;
  length = length ? take32() % (length + 1) : 0;
  if (host_ptr_call && !S.info[d].zero_copy && pick(4) && length * elem >= align)
    length = length * elem / align * align / elem;
  void *data = ar->mem + at;
  ferry_device *dev = S.dev[d];
  ferry_buffer h = {0xfeedULL}, *out = &h;
  ferry_status want = FERRY_OK;
  ferry_refusal why = (ferry_refusal)77, want_why = FERRY_REFUSAL_NONE;
  switch (pick(10)) {
  case 1: dev = NULL, want = FERRY_ERROR_INVALID_ARGUMENT; break;
  case 2: out = NULL, want = FERRY_ERROR_INVALID_ARGUMENT; break;
  case 3: kind = pick(2) ? FERRY_CUSTOM : (ferry_kind)(17 + pick(100)), want = FERRY_ERROR_INVALID_ARGUMENT; break;
  case 4:
    data = NULL;
    if (length) want = FERRY_ERROR_INVALID_ARGUMENT;
    break;
  case 5:
    if (elem > 1) length = SIZE_MAX / elem + 1, want = FERRY_ERROR_OVERFLOW;
    break;
  }
  size_t bytes = want == FERRY_OK ? length * elem : 0;
  bool real_host_ptr = host_ptr_call && !S.info[d].zero_copy;
  if (want == FERRY_OK && !host_ptr_call && !S.info[d].zero_copy) want = FERRY_ERROR_UNSUPPORTED;
  if (want == FERRY_OK && real_host_ptr) {
    /* Refusal order: unsupported, misaligned, bad length, overlap (docs/API.md). */
    if (!S.info[d].host_ptr)
      want_why = FERRY_REFUSAL_UNSUPPORTED;
    else if ((uintptr_t)data % align)
      want_why = FERRY_REFUSAL_MISALIGNED;
    else if (bytes == 0 || bytes % align)
      want_why = FERRY_REFUSAL_BAD_LENGTH;
    else
      for (int i = 0; i < MAX_BUFFERS; i++) {
        const model_buffer *o = &bufs[i];
        if (o->live && o->host_ptr && o->arena == a && at < o->at + o->bytes && o->at < at + bytes)
          want_why = FERRY_REFUSAL_OVERLAP;
      }
    if (want_why != FERRY_REFUSAL_NONE) want = FERRY_ERROR_REFUSED;
  }
  char call[200];
  ferry_status st;
  if (host_ptr_call) {
    snprintf(call, sizeof call, "ferry_alloc_host_ptr(%s, {a%d+%zu, %zu, %s}, %s, &why)",
             dev ? S.info[d].backend : "NULL", data ? a : -1, data ? at : 0, length, kind_text(kind),
             out ? "&b" : "NULL");
    st = ferry_alloc_host_ptr(dev, ferry_array_of(data, length, kind), out, &why);
  } else {
    snprintf(call, sizeof call, "ferry_alloc_zero_copy(%s, {a%d+%zu, %zu, %s}, %s)", dev ? S.info[d].backend : "NULL",
             data ? a : -1, data ? at : 0, length, kind_text(kind), out ? "&b" : "NULL");
    st = ferry_alloc_zero_copy(dev, ferry_array_of(data, length, kind), out);
  }
  note("%s -> %s", call, ferry_status_name(st));
  if (failed_by_driver(st, call))
    want = st, want_why = FERRY_REFUSAL_DRIVER;
  else
    expect(st, want, call);
  if (host_ptr_call && st == FERRY_ERROR_REFUSED && why != want_why)
    fail("%s refused with %s, the model expects %s", call, ferry_refusal_name(why), ferry_refusal_name(want_why));
  if (host_ptr_call && st == FERRY_OK && why != FERRY_REFUSAL_NONE)
    fail("%s succeeded but set *out_refusal to %s", call, ferry_refusal_name(why));
  if (st != FERRY_OK) {
    if (h.id != 0xfeedULL) fail("%s failed but changed *out_buffer", call);
    check_arenas();
    return;
  }
  add_buffer(b, h, d, kind, elem, length);
  note("      = b%d", b->name);
  b->zero_copy = !real_host_ptr; /* API.md: a host-pointer buffer on a device with memory of its own needs transfers */
  b->arena = data ? a : -1;
  b->at = data ? at : 0;
  if (real_host_ptr) {
    b->host_ptr = true;
    give_own_memory(b);
    /* Made over the array: the device's view starts as the array. */
    sync_to_device(b, 0, b->bytes);
  } else if (!data)
    give_own_memory(b);
  check_info(b);
  check_arenas();
}

static void call_free(void) {
  model_buffer *b;
  ferry_buffer h = operand(&b);
  char text[48], call[96];
  snprintf(call, sizeof call, "ferry_free(%s)", handle_text(b, h, text));
  ferry_status st = ferry_free(h);
  note("%s -> %s", call, ferry_status_name(st));
  /* A driver failure while freeing is reported, and the buffer is released all the same. */
  bool driver_failed = failed_by_driver(st, call);
  if (!driver_failed) expect(st, b ? FERRY_OK : FERRY_ERROR_STALE_BUFFER, call);
  if (!b) return;
  /* A host-pointer buffer hands its array back, synchronised. */
  if (driver_failed && b->host_ptr) memset(b->known, 0, b->bytes);
  sync_to_host(b, 0, b->bytes);
  if (b->host_ptr) arena_changed(b->arena, b->at, b->bytes, b);
  remember_stale(h);
  buffer_forget(b);
  expect(ferry_free(h), FERRY_ERROR_STALE_BUFFER, "ferry_free (again)");
  check_arenas();
}

/* A typed or _ptr transfer, host to device or back. */
static void call_transfer(bool to_device, bool typed) {
  model_buffer *b;
  ferry_buffer h = operand(&b);
  size_t bytes = b ? b->bytes : take_bytes();
  ferry_kind kind = b ? b->kind : kinds[pick(KIND_COUNT)];
  size_t length = b ? b->length : bytes;
  size_t elem = kind == FERRY_CUSTOM ? (b ? b->elem : 1) : ferry_kind_size(kind);
  ferry_status want = b ? FERRY_OK : FERRY_ERROR_STALE_BUFFER;
  bool null_data = false;
  size_t host_bytes = bytes;
  if (typed) {
    if (want == FERRY_OK && kind == FERRY_CUSTOM) want = FERRY_ERROR_KIND_MISMATCH; /* custom: _ptr only */
    switch (pick(10)) {
    case 1: {
      ferry_kind other = kinds[pick(KIND_COUNT)];
      if (other != kind) {
        kind = other;
        if (want == FERRY_OK) want = FERRY_ERROR_KIND_MISMATCH;
      }
      break;
    }
    case 2:
      kind = pick(2) ? FERRY_CUSTOM : (ferry_kind)(17 + pick(100));
      if (want == FERRY_OK || want == FERRY_ERROR_KIND_MISMATCH)
        want = kind == FERRY_CUSTOM ? FERRY_ERROR_KIND_MISMATCH : FERRY_ERROR_INVALID_ARGUMENT;
      break;
    case 3:
      if (length && pick(2))
        length -= 1 + pick(length < 3 ? length : 3);
      else
        length += 1 + pick(3);
      if (want == FERRY_OK) want = FERRY_ERROR_SIZE_MISMATCH;
      break;
    case 4:
      null_data = true;
      if (want == FERRY_OK && length) want = FERRY_ERROR_INVALID_ARGUMENT;
      break;
    }
    elem = ferry_kind_size(kind);
    host_bytes = elem && length <= SIZE_MAX / elem ? length * elem : 0;
  } else {
    switch (pick(10)) {
    case 1:
      host_bytes = bytes + 1 + pick(5);
      if (want == FERRY_OK) want = FERRY_ERROR_SIZE_MISMATCH;
      break;
    case 2:
      if (bytes) {
        host_bytes = bytes - 1 - pick(bytes < 3 ? 1 : 3);
        if (want == FERRY_OK) want = FERRY_ERROR_SIZE_MISMATCH;
      }
      break;
    case 3:
      null_data = true;
      if (want == FERRY_OK && bytes) want = FERRY_ERROR_INVALID_ARGUMENT;
      break;
    }
  }
  if (want != FERRY_OK && host_bytes > (size_t)16 << 20) host_bytes = 0; /* refused: never touched */
  host_range hr = null_data ? (host_range){NULL, -1, 0} : host_for(host_bytes, b);
  size_t n = want == FERRY_OK ? bytes : 0;
  if (to_device && hr.p) snapshot_host(hr, host_bytes);
  if (!to_device && b) snapshot_buffer(b, 0, b->bytes);
  char text[48], call[200], where[48];
  if (hr.arena >= 0)
    snprintf(where, sizeof where, "a%d+%zu", hr.arena, hr.at);
  else
    snprintf(where, sizeof where, "%s", hr.p ? "host" : "NULL");
  ferry_status st;
  if (typed && to_device) {
    snprintf(call, sizeof call, "ferry_host_to_device({%s, %zu, %s}, %s)", where, length, kind_text(kind),
             handle_text(b, h, text));
    st = ferry_host_to_device(ferry_array_of(hr.p, length, kind), h);
  } else if (typed) {
    snprintf(call, sizeof call, "ferry_device_to_host(%s, {%s, %zu, %s})", handle_text(b, h, text), where, length,
             kind_text(kind));
    st = ferry_device_to_host(h, ferry_array_of(hr.p, length, kind));
  } else if (to_device) {
    snprintf(call, sizeof call, "ferry_host_ptr_to_device(%s, %zu, %s)", where, host_bytes, handle_text(b, h, text));
    st = ferry_host_ptr_to_device(hr.p, host_bytes, h);
  } else {
    snprintf(call, sizeof call, "ferry_device_to_host_ptr(%s, %s, %zu)", handle_text(b, h, text), where, host_bytes);
    st = ferry_device_to_host_ptr(h, hr.p, host_bytes);
  }
  note("%s -> %s", call, ferry_status_name(st));
  if (failed_by_driver(st, call)) {
    if (to_device)
      forget_buffer(b, 0, n);
    else
      forget_host(hr, n);
    if (b && b->host_ptr) forget_buffer(b, 0, n), memset(arenas[b->arena].known + b->at, 0, n);
    check_arenas();
    return;
  }
  expect(st, want, call);
  if (st != FERRY_OK) {
    check_arenas();
    return;
  }
  if (to_device) {
    if (own_bytes(b, hr, 0) && b->host_ptr)
      sync_to_device(b, 0, n);
    else if (!own_bytes(b, hr, 0))
      model_write_buffer(b, 0, n);
  } else {
    expect_bytes(hr.p, call, b, 0, n);
    if (own_bytes(b, hr, 0) && b->host_ptr)
      sync_to_host(b, 0, n);
    else if (!own_bytes(b, hr, 0))
      model_write_host(hr, n);
  }
  check_arenas();
}

/* An offset and a count on a buffer of `size` bytes, and the status they must get. */
static ferry_status take_range(size_t size, size_t *off, size_t *n) {
  switch (pick(12)) {
  case 0: /* past the end */
    *off = take16() % (size + 1);
    *n = size - *off + 1 + pick(100);
    return FERRY_ERROR_OUT_OF_RANGE;
  case 1:
    *off = size + 1 + pick(100);
    *n = pick(3);
    return FERRY_ERROR_OUT_OF_RANGE;
  case 2: /* overflowing */
    *off = SIZE_MAX - pick(50);
    *n = 51 + pick(100);
    return FERRY_ERROR_OVERFLOW;
  case 3:
    *off = pick(2) ? size : take16() % (size + 1);
    *n = 0;
    return FERRY_OK;
  default:
    *off = size ? take32() % (size + 1) : 0;
    *n = size - *off ? take32() % (size - *off + 1) : 0;
    return FERRY_OK;
  }
}

static void call_range(bool write) {
  model_buffer *b;
  ferry_buffer h = operand(&b);
  size_t off, n;
  ferry_status want = take_range(b ? b->bytes : take_bytes(), &off, &n);
  bool null_data = pick(12) == 0;
  if (want == FERRY_OK && null_data && n) want = FERRY_ERROR_INVALID_ARGUMENT;
  if (!b) want = FERRY_ERROR_STALE_BUFFER;
  size_t host_n = want == FERRY_OK ? n : (n < 1024 ? n : 1024); /* never touched when refused */
  host_range hr = null_data ? (host_range){NULL, -1, 0} : host_for(host_n, NULL);
  /* Now and then the buffer's own array at the same offset (own-array detection). */
  if (!null_data && want == FERRY_OK && b && b->arena >= 0 && pick(3) == 0)
    hr = (host_range){arenas[b->arena].mem + b->at + off, b->arena, b->at + off};
  if (write && hr.p) snapshot_host(hr, host_n);
  if (!write && want == FERRY_OK) snapshot_buffer(b, off, n);
  char text[48], call[200], where[48];
  if (hr.arena >= 0)
    snprintf(where, sizeof where, "a%d+%zu", hr.arena, hr.at);
  else
    snprintf(where, sizeof where, "%s", hr.p ? "host" : "NULL");
  ferry_status st;
  if (write) {
    snprintf(call, sizeof call, "ferry_write(%s, %zu, %s, %zu)", handle_text(b, h, text), off, where, n);
    st = ferry_write(h, off, hr.p, n);
  } else {
    snprintf(call, sizeof call, "ferry_read(%s, %zu, %s, %zu)", handle_text(b, h, text), off, where, n);
    st = ferry_read(h, off, hr.p, n);
  }
  note("%s -> %s", call, ferry_status_name(st));
  if (failed_by_driver(st, call)) {
    if (write)
      forget_buffer(b, off, n);
    else
      forget_host(hr, n);
    if (b->host_ptr) forget_buffer(b, off, n), memset(arenas[b->arena].known + b->at + off, 0, n);
    check_arenas();
    return;
  }
  expect(st, want, call);
  if (st != FERRY_OK || n == 0) {
    check_arenas();
    return;
  }
  if (write) {
    if (own_bytes(b, hr, off) && b->host_ptr)
      sync_to_device(b, off, n);
    else if (!own_bytes(b, hr, off))
      model_write_buffer(b, off, n);
  } else {
    expect_bytes(hr.p, call, b, off, n);
    if (own_bytes(b, hr, off) && b->host_ptr)
      sync_to_host(b, off, n);
    else if (!own_bytes(b, hr, off))
      model_write_host(hr, n);
  }
  check_arenas();
}

/* ferry_copy: byte ranges of two buffers (or one), on any devices. Both ranges
 * are checked for overflow before either is checked for its end (docs/API.md),
 * so a run past the end of one and an overflow of the other is OVERFLOW. */
static void call_copy(void) {
  model_buffer *s, *d;
  ferry_buffer hs = operand(&s), hd;
  if (s && pick(3) == 0)
    d = s, hd = hs;
  else
    hd = operand(&d);
  size_t sbytes = s ? s->bytes : 64, dbytes = d ? d->bytes : 64;
  size_t most = sbytes < dbytes ? sbytes : dbytes;
  size_t n = most ? take32() % (most + 1) : 0;
  size_t so = sbytes - n ? take32() % (sbytes - n + 1) : 0, doff = dbytes - n ? take32() % (dbytes - n + 1) : 0;
  switch (pick(10)) {
  case 1: so = sbytes - n + 1 + pick(50); break;   /* the source runs past its end */
  case 2: doff = dbytes - n + 1 + pick(50); break; /* the destination does */
  case 3:
    so = SIZE_MAX - pick(n + 1);
    n += 1 + pick(50);
    break; /* the source range overflows */
  case 4:
    doff = SIZE_MAX - pick(n + 1);
    n += 1 + pick(50);
    break;
  case 5:
    doff = SIZE_MAX - pick(n + 1);
    n += 1 + pick(50);
    so = pick(2) ? 0 : sbytes;
    break; /* both wrong */
  case 6:
    so = SIZE_MAX - pick(n + 1);
    n += 1 + pick(50);
    doff = pick(2) ? 0 : dbytes;
    break;
  }
  bool s_over = so > SIZE_MAX - n, d_over = doff > SIZE_MAX - n;
  bool s_out = !s_over && so + n > sbytes, d_out = !d_over && doff + n > dbytes;
  ferry_status want = !s || !d           ? FERRY_ERROR_STALE_BUFFER
                      : s_over || d_over ? FERRY_ERROR_OVERFLOW
                      : s_out || d_out   ? FERRY_ERROR_OUT_OF_RANGE
                                         : FERRY_OK;
  if (want == FERRY_OK) snapshot_buffer(s, so, n);
  char ts[48], td[48], call[200];
  snprintf(call, sizeof call, "ferry_copy(%s, %zu, %s, %zu, %zu)", handle_text(s, hs, ts), so, handle_text(d, hd, td),
           doff, n);
  ferry_status st = ferry_copy(hs, so, hd, doff, n);
  note("%s -> %s", call, ferry_status_name(st));
  if (failed_by_driver(st, call))
    forget_buffer(d, doff, n);
  else
    expect(st, want, call);
  if (st == FERRY_OK && n) model_write_buffer(d, doff, n);
  check_arenas();
}

static void call_device_to_device(void) {
  model_buffer *s, *d;
  ferry_buffer hs = operand(&s), hd;
  if (s && pick(5) == 0)
    d = s, hd = hs;
  else
    hd = operand(&d);
  ferry_status want = FERRY_OK;
  if (!s || !d)
    want = FERRY_ERROR_STALE_BUFFER;
  else if (s->kind != d->kind || s->elem != d->elem)
    want = FERRY_ERROR_KIND_MISMATCH;
  else if (s->length != d->length)
    want = FERRY_ERROR_SIZE_MISMATCH;
  if (want == FERRY_OK) snapshot_buffer(s, 0, s->bytes);
  char ts[48], td[48], call[160];
  snprintf(call, sizeof call, "ferry_device_to_device(%s, %s)", handle_text(s, hs, ts), handle_text(d, hd, td));
  ferry_status st = ferry_device_to_device(hs, hd);
  note("%s -> %s", call, ferry_status_name(st));
  if (failed_by_driver(st, call))
    forget_buffer(d, 0, d->bytes);
  else
    expect(st, want, call);
  if (st == FERRY_OK && d->bytes) model_write_buffer(d, 0, d->bytes);
  check_arenas();
}

/* Everything a stale handle is asked must be refused, and change nothing. */
static void call_stale(void) {
  ferry_buffer h = stale_handle();
  model_buffer *live = live_buffer();
  ferry_buffer other = live ? live->handle : h;
  uint8_t byte = 0x5a;
  char call[96];
  snprintf(call, sizeof call, "stale handle 0x%llx", (unsigned long long)h.id);
  note("%s: every call", call);
  expect(ferry_write(h, 0, &byte, 1), FERRY_ERROR_STALE_BUFFER, "ferry_write(stale)");
  expect(ferry_read(h, 0, &byte, 1), FERRY_ERROR_STALE_BUFFER, "ferry_read(stale)");
  expect(ferry_copy(h, 0, other, 0, 0), FERRY_ERROR_STALE_BUFFER, "ferry_copy(stale, live)");
  expect(ferry_copy(other, 0, h, 0, 0), FERRY_ERROR_STALE_BUFFER, "ferry_copy(live, stale)");
  expect(ferry_device_to_device(h, other), FERRY_ERROR_STALE_BUFFER, "ferry_device_to_device(stale, live)");
  expect(ferry_device_to_device(other, h), FERRY_ERROR_STALE_BUFFER, "ferry_device_to_device(live, stale)");
  expect(ferry_host_ptr_to_device(&byte, 1, h), FERRY_ERROR_STALE_BUFFER, "ferry_host_ptr_to_device(stale)");
  expect(ferry_free(h), FERRY_ERROR_STALE_BUFFER, "ferry_free(stale)");
  if (ferry_size(h) || ferry_elem_size(h) || ferry_buffer_kind(h) != FERRY_CUSTOM || ferry_device_ptr(h) ||
      ferry_is_zero_copy(h) || ferry_buffer_device(h))
    fail("%s: the info functions do not say 'stale'", call);
  if (byte != 0x5a) fail("%s: a refused read wrote into host memory", call);
  check_arenas();
}

static void call_device(void) {
  size_t d = pick(S.count);
  if (pick(2)) {
    note("ferry_device_synchronize(%s)", S.info[d].backend);
    ferry_status st = ferry_device_synchronize(S.dev[d]);
    if (!failed_by_driver(st, "ferry_device_synchronize")) expect(st, FERRY_OK, "ferry_device_synchronize");
  } else {
    note("ferry_device_trim(%s)", S.info[d].backend);
    ferry_status st = ferry_device_trim(S.dev[d]);
    if (!failed_by_driver(st, "ferry_device_trim")) expect(st, FERRY_OK, "ferry_device_trim");
  }
}

static void call_arm_fault(void) {
  /* The transfer engine's operations (pinned blocks, DMA) in the places of the
   * pipeline's that they replaced, so that the corpus keeps its meaning. */
  static const fault_op ops[] = {OP_ALLOC,       OP_FREE,      OP_WRITE,    OP_READ,    OP_COPY,
                                 OP_COPY_PEER,   OP_IMPORT,    OP_SYNC,     OP_RELEASE, OP_PIN_ALLOC,
                                 OP_SYNCHRONIZE, OP_DMA_WRITE, OP_DMA_READ, OP_DMA_WAIT};
  disarm();
  armed = (int)ops[pick(sizeof ops / sizeof ops[0])];
  armed_status = pick(3) ? FERRY_ERROR_BACKEND : FERRY_ERROR_OUT_OF_MEMORY;
  int after = (int)pick(3);
  fault_arm((fault_op)armed, armed_status, after);
  note("the fault devices' next %d call(s) of their operation %d succeed, then one fails with %s", after, armed,
       ferry_status_name(armed_status));
}

/* ---- queues ------------------------------------------------------------------------------ */

typedef struct touched_range {
  model_buffer *b;
  size_t off, n;
} touched_range;

/* What an asynchronous read must bring, checked once its queue is done. */
typedef struct pending_read {
  uint8_t *host, *want, *known;
  size_t n;
  int buffer_name;
  size_t off;
} pending_read;

/* A buffer of device d, or of any device when d is MAX_DEVICES. */
static model_buffer *live_buffer_on(size_t d) {
  int start = (int)pick(MAX_BUFFERS);
  for (int k = 0; k < MAX_BUFFERS; k++) {
    model_buffer *b = &bufs[(start + k) % MAX_BUFFERS];
    if (b->live && (d == MAX_DEVICES || b->dev == d)) return b;
  }
  return NULL;
}

/* A valid byte range of `size` bytes, now and then an empty one at the end. */
static void valid_range(size_t size, size_t *off, size_t *n) {
  *off = size ? take32() % (size + 1) : 0;
  *n = size - *off ? take32() % (size - *off + 1) : 0;
  if (pick(16) == 0) *off = size, *n = 0;
}

/* A burst of asynchronous operations on one queue of one device (its default
 * queue or another), in order: writes from, and reads into, host memory of
 * their own, copies (to or from any device), fills, now and then an invalid
 * one (refused at once, submitting nothing), a free of a buffer the queue still
 * uses, and an event recorded and waited for on the other queue; then the
 * queue is synchronised in one of the ways there are (the queue, an event, the
 * device, or, for the default queue, a synchronous call on the device), and
 * every read is checked against the model, which took each operation in order. */
/* A submission in a burst: as the model expects, or refused because an
 * injected failure of an earlier operation of the burst is waiting to be
 * reported (then the burst stops submitting). */
static bool burst_submitted(ferry_status st, ferry_status want, const char *call, bool *stop) {
  if (st == FERRY_ERROR_CANCELLED && armed >= 0 && fault.fail_with[armed] == FERRY_OK) {
    *stop = true;
    return false;
  }
  expect(st, want, call);
  return st == FERRY_OK;
}

static void call_async_burst(void) {
  size_t d = pick(S.count);
  bool use_default = pick(2) == 0;
  ferry_queue q, other;
  ferry_status st = ferry_queue_default(S.dev[d], use_default ? &q : &other);
  if (st != FERRY_OK) fail("ferry_queue_default: %s", ferry_status_name(st));
  if (!own_queue[d].id && (st = ferry_queue_create(S.dev[d], &own_queue[d])) != FERRY_OK)
    fail("ferry_queue_create: %s", ferry_status_name(st));
  if (use_default)
    other = own_queue[d];
  else
    q = own_queue[d];
  note("a burst on the %s queue of device %zu (%s)", use_default ? "default" : "other", d, S.info[d].backend);
  enum { OPS = 8 };
  pending_read reads[OPS];
  int read_count = 0;
  touched_range touched[OPS + 1];
  int touched_count = 0;
  uint8_t *hosts[OPS];
  int host_count = 0;
  size_t ops = 1 + pick(OPS - 1);
  bool stop = false;
  for (size_t i = 0; i < ops && !stop; i++) {
    int what = (int)pick(6);
    model_buffer *b = live_buffer_on(d), *o = NULL;
    if (!b) break;
    size_t off, n;
    valid_range(b->bytes, &off, &n);
    bool bad = pick(10) == 0; /* a range past the end: refused, nothing submitted */
    if (bad) off = b->bytes + 1 + pick(9);
    char call[200], text[48], text2[48];
    ferry_status want = bad ? FERRY_ERROR_OUT_OF_RANGE : FERRY_OK;
    if (what <= 1) { /* write */
      uint8_t *h = malloc(n ? n : 1);
      if (!h) abort();
      fill(h, n, take8());
      hosts[host_count++] = h;
      snprintf(call, sizeof call, "ferry_write_async(q, %s, %zu, host, %zu)", handle_text(b, b->handle, text), off, n);
      st = ferry_write_async(q, b->handle, off, h, n);
      note("%s -> %s", call, ferry_status_name(st));
      if (burst_submitted(st, want, call, &stop) && n) {
        ensure_scratch(n);
        memcpy(before, h, n);
        memset(before_known, 1, n);
        model_write_buffer(b, off, n);
        touched[touched_count++] = (touched_range){b, off, n};
      }
    } else if (what == 2) { /* read */
      uint8_t *h = malloc(n ? n : 1);
      if (!h) abort();
      snprintf(call, sizeof call, "ferry_read_async(q, %s, %zu, host, %zu)", handle_text(b, b->handle, text), off, n);
      st = ferry_read_async(q, b->handle, off, h, n);
      note("%s -> %s", call, ferry_status_name(st));
      if (!burst_submitted(st, want, call, &stop) || n == 0) {
        free(h);
        continue;
      }
      snapshot_buffer(b, off, n);
      pending_read *r = &reads[read_count++];
      *r = (pending_read){.host = h, .n = n, .buffer_name = b->name, .off = off};
      r->want = malloc(n);
      r->known = malloc(n);
      if (!r->want || !r->known) abort();
      memcpy(r->want, before, n);
      memcpy(r->known, before_known, n);
    } else if (what == 3) { /* fill */
      static const size_t sizes[] = {1, 2, 4};
      size_t ps = sizes[pick(3)];
      /* Aligning must keep a bad offset past the end: round it up, a good one down. */
      off = bad ? off + (ps - off % ps) % ps : off - off % ps;
      n -= n % ps;
      uint8_t pattern[4] = {take8(), take8(), take8(), take8()};
      snprintf(call, sizeof call, "ferry_fill_async(q, %s, %zu, %zu, pattern, %zu)", handle_text(b, b->handle, text),
               off, n, ps);
      st = ferry_fill_async(q, b->handle, off, n, pattern, ps);
      note("%s -> %s", call, ferry_status_name(st));
      if (burst_submitted(st, want, call, &stop) && n) {
        ensure_scratch(n);
        for (size_t k = 0; k < n; k++)
          before[k] = pattern[k % ps];
        memset(before_known, 1, n);
        model_write_buffer(b, off, n);
        touched[touched_count++] = (touched_range){b, off, n};
      }
    } else if (what == 4 && (o = live_buffer_on(MAX_DEVICES)) != NULL) { /* a copy, either way */
      bool from_b = pick(2) == 0;
      model_buffer *src = from_b ? b : o, *dst = from_b ? o : b;
      size_t so, doff;
      size_t most = src->bytes < dst->bytes ? src->bytes : dst->bytes;
      n = most ? take32() % (most + 1) : 0;
      so = src->bytes - n ? take32() % (src->bytes - n + 1) : 0;
      doff = dst->bytes - n ? take32() % (dst->bytes - n + 1) : 0;
      if (bad) doff = dst->bytes + 1;
      snprintf(call, sizeof call, "ferry_copy_async(q, %s, %zu, %s, %zu, %zu)", handle_text(src, src->handle, text), so,
               handle_text(dst, dst->handle, text2), doff, n);
      st = ferry_copy_async(q, src->handle, so, dst->handle, doff, n);
      note("%s -> %s", call, ferry_status_name(st));
      if (burst_submitted(st, want, call, &stop) && n) {
        snapshot_buffer(src, so, n);
        model_write_buffer(dst, doff, n);
        touched[touched_count++] = (touched_range){dst, doff, n};
      }
    } else { /* an event between the two queues */
      ferry_event e;
      if (ferry_event_create(&e) != FERRY_OK) fail("ferry_event_create");
      bool forward = pick(2) == 0; /* the other queue waits for this one, or this one for the other */
      st = ferry_event_record(e, forward ? q : other);
      note("ferry_event_record(e, %s) -> %s", forward ? "q" : "other", ferry_status_name(st));
      if (burst_submitted(st, FERRY_OK, "ferry_event_record", &stop)) {
        st = ferry_queue_wait_event(forward ? other : q, e);
        burst_submitted(st, FERRY_OK, "ferry_queue_wait_event", &stop);
      }
      expect(ferry_event_destroy(e), FERRY_OK, "ferry_event_destroy of an event still waited for");
    }
  }
  /* The queue is done in one of four ways. */
  int way = (int)pick(4);
  const char *how = "ferry_queue_synchronize(q)";
  if (way == 0) {
    st = ferry_queue_synchronize(q);
  } else if (way == 1) {
    ferry_event e;
    if (ferry_event_create(&e) != FERRY_OK) fail("ferry_event_create");
    how = "ferry_event_synchronize";
    st = ferry_event_record(e, q);
    if (st == FERRY_OK) st = ferry_event_synchronize(e);
    /* A failure that happened before the record is not reported by it: the record is refused
     * (CANCELLED) and the queue reports. */
    else if (st == FERRY_ERROR_CANCELLED)
      st = ferry_queue_synchronize(q);
    ferry_event_destroy(e);
  } else if (way == 2) {
    how = "ferry_device_synchronize";
    st = ferry_device_synchronize(S.dev[d]);
  } else {
    /* A synchronous call on the device waits for its default queue; for the other queue, synchronise it. */
    uint8_t byte;
    model_buffer *b = live_buffer_on(d);
    how = "a synchronous ferry_read on the device";
    st = FERRY_OK;
    if (!use_default) st = ferry_queue_synchronize(q);
    /* An empty buffer's read of zero bytes waits too (it is the wait that matters here). */
    if (st == FERRY_OK && b) {
      st = ferry_read(b->handle, 0, &byte, b->bytes ? 1 : 0);
      if (st == FERRY_ERROR_CANCELLED) st = ferry_queue_synchronize(q); /* the failure, reported */
    } else if (st == FERRY_OK) {
      st = ferry_queue_synchronize(q); /* the burst freed the device's last buffer */
    }
  }
  note("%s -> %s", how, ferry_status_name(st));
  bool fired = armed >= 0 && fault.fail_with[armed] == FERRY_OK;
  if (st != FERRY_OK) {
    if (!fired) fail("%s returned %s with no driver failure injected", how, ferry_status_name(st));
    armed = -1;
    /* Reported now; the queues are idle and work again. What the burst wrote is unknown. */
    expect(ferry_queue_synchronize(q), FERRY_OK, "ferry_queue_synchronize after the report");
    expect(ferry_queue_synchronize(other), FERRY_OK, "ferry_queue_synchronize(other)");
    for (int i = 0; i < touched_count; i++)
      forget_buffer(touched[i].b, touched[i].off, touched[i].n);
    for (int i = 0; i < read_count; i++)
      reads[i].n = 0;
  } else {
    if (fired) armed = -1; /* it fired, and the core recovered */
    expect(ferry_queue_synchronize(other), FERRY_OK, "ferry_queue_synchronize(other)");
  }
  for (int i = 0; i < read_count; i++) {
    pending_read *r = &reads[i];
    for (size_t k = 0; k < r->n; k++)
      if (r->known[k] && r->host[k] != r->want[k])
        fail("ferry_read_async of b%d at %zu: byte %zu is 0x%02x, the model says 0x%02x", r->buffer_name, r->off, k,
             r->host[k], r->want[k]);
    free(r->host);
    free(r->want);
    free(r->known);
  }
  for (int i = 0; i < host_count; i++)
    free(hosts[i]);
  check_arenas();
}

static void call_info(void) {
  model_buffer *b = live_buffer();
  if (!b) return;
  note("info of b%d", b->name);
  check_info(b);
}

/* Reads every live buffer back whole: what the model knows must be there. */
static void check_all_buffers(void) {
  for (int i = 0; i < MAX_BUFFERS; i++) {
    model_buffer *b = &bufs[i];
    if (!b->live) continue;
    check_info(b);
    snapshot_buffer(b, 0, b->bytes);
    uint8_t *got = malloc(b->bytes ? b->bytes : 1);
    if (!got) abort();
    char call[64];
    snprintf(call, sizeof call, "ferry_read(b%d, 0, host, %zu) at the end", b->name, b->bytes);
    expect(ferry_read(b->handle, 0, got, b->bytes), FERRY_OK, call);
    expect_bytes(got, call, b, 0, b->bytes);
    free(got);
  }
}

/* ---- libFuzzer's entry points ------------------------------------------------------------ */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setenv("FERRY_BACKENDS", "native,checked", 1); /* and the fault backend, registered below */
  setenv("FERRY_STAGE_BYTES", "64K", 1);         /* staging slots of 64 KiB ... */
  setenv("FERRY_STAGE_MIN", "4K", 1);            /* ... for every transfer of 4 KiB and more */
  setenv("FERRY_COPY_THREADS", "2", 1);          /* the copy pool runs, whatever the machine */
  ferry__register_backend(&fault_backend);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  in_data = data;
  in_left = size;
  trace_len = 0;
  trace[0] = '\0';
  step = 0;
  next_name = 0;
  stale_count = stale_next = 0;
  memset(bufs, 0, sizeof bufs);
  disarm();
  session_start();
  while (in_left && step < MAX_STEPS) {
    step++;
    uint8_t op = take8();
    if (op >= 252) { /* the top of the range: queues (the corpus's other bytes keep their meaning) */
      call_async_burst();
      check_stats();
      continue;
    }
    switch (op % 21) {
    case 0:
    case 1: call_alloc(false); break;
    case 2: call_alloc(true); break;
    case 3: call_new_arena(); break;
    case 4: call_over_host(false); break;
    case 5: call_over_host(true); break;
    case 6: call_free(); break;
    case 7: call_transfer(true, true); break;
    case 8: call_transfer(false, true); break;
    case 9: call_transfer(true, false); break;
    case 10: call_transfer(false, false); break;
    case 11:
    case 12: call_range(true); break;
    case 13: call_range(false); break;
    case 14: call_copy(); break;
    case 15: call_device_to_device(); break;
    case 16: call_stale(); break;
    case 17: call_poke_arena(); break;
    case 18:
      if (pick(4) == 0) {
        session_end("");
        session_start();
        note("ferry_init() (a new session)");
      } else
        call_device();
      break;
    case 19: call_info(); break;
    case 20: call_arm_fault(); break;
    }
    check_stats();
  }
  step++;
  disarm();
  check_all_buffers();
  session_end(" at the end");
  if (getenv("FERRY_FUZZ_TRACE")) fprintf(stderr, "the call sequence:\n%s\n", trace);
  for (int a = 0; a < MAX_ARENAS; a++) {
    free(arenas[a].mem);
    free(arenas[a].shadow);
    free(arenas[a].known);
  }
  memset(arenas, 0, sizeof arenas);
  free(scratch);
  free(before);
  free(before_known);
  scratch = before = before_known = NULL;
  scratch_size = 0;
  return 0;
}
