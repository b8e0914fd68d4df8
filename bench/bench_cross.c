/*
 * bench_cross: copies between devices of different backends, and which pinned
 * memory each device's DMA moves fastest (the transfer engine's focused study; `ferry
 * bench` measures one device at a time).
 *
 *  1. Every ordered pair of devices of different backends: ferry_device_to_device
 *     against the slower of the source's read into its own pinned memory and the
 *     destination's write from its own pinned memory (ferry_host_alloc blocks),
 *     measured in the same run (target: at least 0.8x). Between two CPU devices
 *     (PoCL, lavapipe) against memcpy of the same bytes instead (target: 0.8x).
 *  2. The pinned matrix: for each device that stages (GPUs), a write and a read
 *     of its buffer from ferry_host_alloc blocks of every such device and of the
 *     native device (page-aligned malloc), which the core registers with the
 *     device on first use (cuMemHostRegister, CL_MEM_USE_HOST_PTR,
 *     VK_EXT_external_memory_host). Shows which allocator's memory each driver
 *     moves fastest, and what a cross-backend copy can reach.
 *
 *   bench_cross [--size BYTES] [--repeats N] [--quick]
 *
 * Default size 1 GiB (256 MiB between CPU devices); each figure the median of
 * the repeats (5), after one untimed call. Exit status: targets missed.
 */
#include "ferry.h"
#include "timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)
enum { MAX_DEVICES = 16 };

static int repeats = 5;
static int missed;

static void die(const char *what) {
  fprintf(stderr, "bench_cross: %s: %s\n", what, ferry_last_error());
  exit(1);
}

typedef enum op_kind { OP_COPY, OP_WRITE, OP_READ, OP_MEMCPY } op_kind;

typedef struct op {
  op_kind kind;
  ferry_buffer a, b;
  void *host, *host2;
  size_t bytes;
} op;

static void run(const op *o) {
  ferry_status st = FERRY_OK;
  switch (o->kind) {
  case OP_COPY: st = ferry_copy(o->a, 0, o->b, 0, o->bytes); break;
  case OP_WRITE: st = ferry_write(o->a, 0, o->host, o->bytes); break;
  case OP_READ: st = ferry_read(o->a, 0, o->host, o->bytes); break;
  case OP_MEMCPY: memcpy(o->host2, o->host, o->bytes); break;
  }
  if (st != FERRY_OK) die("a transfer");
}

/* Median GB/s of `o`, after one untimed call. */
static double rate(const op *o) {
  double t[64];
  int n = repeats > 64 ? 64 : repeats;
  run(o);
  for (int r = 0; r < n; r++) {
    double t0 = bench_seconds();
    run(o);
    t[r] = bench_seconds() - t0;
  }
  return (double)o->bytes / bench_median(t, n) / 1e9;
}

typedef struct dev {
  ferry_device *d;
  ferry_device_info info;
  bool stages; /* a GPU: its pinned memory is what the matrix is about */
} dev;

/* ---- 1: copies between backends ------------------------------------------------- */

static void pair(const dev *s, const dev *t, size_t bytes) {
  bool cpus = s->info.is_cpu && t->info.is_cpu;
  if (s->info.is_cpu != t->info.is_cpu) return; /* a GPU and a CPU device: the GPU's own transfers */
  if (bytes > s->info.max_allocation) bytes = (size_t)(s->info.max_allocation / MIB) * MIB;
  if (bytes > t->info.max_allocation) bytes = (size_t)(t->info.max_allocation / MIB) * MIB;
  ferry_buffer a = FERRY_NULL_BUFFER, b = FERRY_NULL_BUFFER;
  if (ferry_alloc(s->d, bytes, FERRY_UINT8, &a) != FERRY_OK || ferry_alloc(t->d, bytes, FERRY_UINT8, &b) != FERRY_OK) {
    printf("  %zu -> %zu: %s\n", s->info.index, t->info.index, ferry_last_error());
    ferry_free(a);
    return;
  }
  unsigned char *pattern = malloc(bytes), *back = malloc(bytes);
  if (!pattern || !back) die("malloc");
  for (size_t i = 0; i < bytes; i++)
    pattern[i] = (unsigned char)(i * 7 + 3);
  if (ferry_write(a, 0, pattern, bytes) != FERRY_OK) die("ferry_write");
  op copy = {.kind = OP_COPY, .a = a, .b = b, .bytes = bytes};
  run(&copy);
  memset(back, 0, bytes);
  if (ferry_read(b, 0, back, bytes) != FERRY_OK) die("ferry_read");
  if (memcmp(back, pattern, bytes) != 0) {
    printf("  %zu -> %zu: the copy differs\n", s->info.index, t->info.index);
    missed++;
  }
  double got = rate(&copy), base = 0;
  const char *what;
  char base_text[160];
  if (cpus) {
    op m = {.kind = OP_MEMCPY, .host = pattern, .host2 = back, .bytes = bytes};
    base = rate(&m);
    what = "memcpy";
    snprintf(base_text, sizeof base_text, "memcpy %.2f GB/s", base);
  } else {
    void *ps = NULL, *pt = NULL;
    if (ferry_host_alloc(s->d, bytes, &ps) != FERRY_OK || ferry_host_alloc(t->d, bytes, &pt) != FERRY_OK)
      die("ferry_host_alloc");
    memset(ps, 1, bytes);
    memset(pt, 2, bytes);
    op rd = {.kind = OP_READ, .a = a, .host = ps, .bytes = bytes},
       wr = {.kind = OP_WRITE, .a = b, .host = pt, .bytes = bytes};
    double r = rate(&rd), w = rate(&wr);
    base = r < w ? r : w;
    what = r < w ? "source's pinned read" : "destination's pinned write";
    snprintf(base_text, sizeof base_text, "pinned read %.2f / write %.2f GB/s", r, w);
    ferry_host_free(ps);
    ferry_host_free(pt);
  }
  double ratio = base > 0 ? got / base : 0;
  bool ok = ratio >= 0.8;
  if (!ok) missed++;
  printf("  %zu (%s) -> %zu (%s)  %5zu MiB  %8.2f GB/s  %6.3fx of the %s (%s)  target 0.8x: %s\n", s->info.index,
         s->info.backend, t->info.index, t->info.backend, bytes / MIB, got, ratio, what, base_text,
         ok ? "met" : "MISSED");
  free(pattern);
  free(back);
  ferry_free(a);
  ferry_free(b);
}

/* ---- 2: the pinned matrix ---------------------------------------------------------- */

static void matrix(const dev *devs, size_t n, const dev *native, size_t bytes) {
  printf("\npinned matrix: %zu MiB ferry_write / ferry_read of a buffer on the row's device from a\n"
         "ferry_host_alloc block of the column's device (GB/s, median of %d; the core registers the block\n"
         "with the row's device on first use)\n",
         bytes / MIB, repeats);
  const dev *cols[MAX_DEVICES + 1];
  size_t nc = 0;
  for (size_t i = 0; i < n; i++)
    if (devs[i].stages) cols[nc++] = &devs[i];
  if (native) cols[nc++] = native;
  void *blocks[MAX_DEVICES + 1];
  printf("  %-34s", "device \\ memory of");
  for (size_t c = 0; c < nc; c++) {
    if (ferry_host_alloc(cols[c]->d, bytes, &blocks[c]) != FERRY_OK) die("ferry_host_alloc");
    memset(blocks[c], 0x11, bytes);
    char head[40];
    snprintf(head, sizeof head, "%zu %s", cols[c]->info.index, cols[c]->info.backend);
    printf(" %18s", head);
  }
  printf("\n");
  for (size_t r = 0; r < n; r++) {
    if (!devs[r].stages) continue;
    ferry_buffer a = FERRY_NULL_BUFFER;
    if (ferry_alloc(devs[r].d, bytes, FERRY_UINT8, &a) != FERRY_OK) die("ferry_alloc");
    for (int way = 0; way < 2; way++) {
      char label[64];
      snprintf(label, sizeof label, "%zu %s %s", devs[r].info.index, devs[r].info.backend,
               way ? "read (d2h)" : "write (h2d)");
      printf("  %-34s", label);
      for (size_t c = 0; c < nc; c++) {
        op o = {.kind = way ? OP_READ : OP_WRITE, .a = a, .host = blocks[c], .bytes = bytes};
        double t0 = bench_seconds();
        run(&o); /* the first use: registration included */
        double first = bench_seconds() - t0;
        printf(" %8.2f (%6.1fms)", rate(&o), first * 1e3);
      }
      printf("\n");
    }
    ferry_free(a);
  }
  printf("  (in brackets: the first transfer, which registers the block with the device)\n");
  for (size_t c = 0; c < nc; c++)
    ferry_host_free(blocks[c]);
}

int main(int argc, char **argv) {
  size_t size = 0;
  bool quick = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--size") == 0 && i + 1 < argc)
      size = (size_t)strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc)
      repeats = atoi(argv[++i]);
    else if (strcmp(argv[i], "--quick") == 0)
      quick = true;
    else {
      fprintf(stderr, "usage: bench_cross [--size BYTES] [--repeats N] [--quick]\n");
      return 2;
    }
  }
  if (repeats < 1) repeats = 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (ferry_init() != FERRY_OK) die("ferry_init");
  dev devs[MAX_DEVICES];
  size_t n = 0;
  const dev *native = NULL;
  for (size_t i = 0; i < ferry_device_count() && n < MAX_DEVICES; i++) {
    dev *d = &devs[n];
    ferry_device_get(i, &d->d);
    ferry_device_info_get(d->d, &d->info);
    if (strcmp(d->info.backend, "checked") == 0) continue;
    d->stages = !d->info.is_cpu;
    if (strcmp(d->info.backend, "native") == 0) {
      native = d;
      n++;
      continue;
    }
    n++;
  }
  time_t t = time(NULL);
  char date[64];
  strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", gmtime(&t));
  printf("bench_cross, %s; median of %d\n\ncopies between backends (ferry_device_to_device):\n", date, repeats);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) {
      if (i == j || &devs[i] == native || &devs[j] == native) continue;
      if (strcmp(devs[i].info.backend, devs[j].info.backend) == 0) continue;
      size_t bytes = size ? size : devs[i].info.is_cpu ? 256 * MIB : 1024 * MIB;
      if (quick) bytes = 16 * MIB;
      pair(&devs[i], &devs[j], bytes);
    }
  size_t stagers = 0;
  for (size_t i = 0; i < n; i++)
    stagers += devs[i].stages;
  if (stagers) matrix(devs, n, native, quick ? 16 * MIB : 256 * MIB);
  ferry_shutdown();
  printf("\n%d target(s) missed\n", missed);
  return missed ? 1 : 0;
}
