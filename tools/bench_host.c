/*
 * `ferry bench`: the host's limit for a pageable transfer, and pageable
 * transfers measured cache-cold.
 *
 * A transfer from ordinary (pageable) memory to a GPU goes through a host copy
 * into pinned memory and a DMA from there, overlapped; it can go no faster than
 * the slower of the two. So, on a device that stages (not a CPU device), the run
 * measures once the best streaming copy the host makes (memcpy on 1, 2, 4, ...
 * threads, up to the processors online, of a block larger than the last-level
 * cache) and takes the lesser of that and the device's pinned rows as the limit.
 * The pageable rows are cache-warm (the same block every sample; a block smaller
 * than the cache stays in it); the cold figures take the blocks of an area at
 * least twice the last-level cache in turn, as a program that streams through
 * its data does. Both are printed against the limit.
 */
#define _GNU_SOURCE /* sysconf: _SC_LEVEL3_CACHE_SIZE, _SC_NPROCESSORS_ONLN */
#include "bench.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COPY_MIN      ((size_t)256 << 20) /* the host copy's block: at least this, and twice the cache */
#define COLD_MIN_SIZE ((size_t)4 << 20)   /* cold figures from this size up */
#define COLD_SAMPLES  5                   /* unless --repeat says otherwise */
#define LLC_ASSUMED   ((size_t)32 << 20)  /* where the system says nothing */
#define COPY_ROUNDS   3                   /* the best of these, per thread count */
#define MAX_THREADS   256

/* "300M", "32768K" -> bytes; 0 if unreadable. */
static size_t size_in_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char text[64] = {0};
  size_t n = 0;
  if (fgets(text, sizeof text, f)) {
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 10);
    if (end && (*end == 'K' || *end == 'k')) v <<= 10;
    if (end && (*end == 'M' || *end == 'm')) v <<= 20;
    if (end && (*end == 'G' || *end == 'g')) v <<= 30;
    n = (size_t)v;
  }
  fclose(f);
  return n;
}

static int int_in_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int v = -1;
  if (fscanf(f, "%d", &v) != 1) v = -1;
  fclose(f);
  return v;
}

/* The largest cache of the highest level that holds data (Linux sysfs), else
 * what the C library says, else 0. */
static size_t last_level_cache(void) {
  size_t best = 0;
  int best_level = 0;
  for (int i = 0; i < 16; i++) {
    char path[128], type[32] = {0};
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    int level = int_in_file(path);
    if (level < 0) break;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
    FILE *f = fopen(path, "r");
    if (f) {
      if (!fgets(type, sizeof type, f)) type[0] = '\0';
      fclose(f);
    }
    if (strncmp(type, "Instruction", 11) == 0) continue;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    size_t size = size_in_file(path);
    if (level > best_level || (level == best_level && size > best)) {
      best_level = level;
      best = size;
    }
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (best == 0) {
    long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (v > 0) best = (size_t)v;
  }
#endif
  return best;
}

/* ---- the host's streaming copy ---------------------------------------------------- */

typedef struct copy_part {
  char *dst;
  const char *src;
  size_t n;
} copy_part;

static void *copy_part_run(void *arg) {
  copy_part *p = arg;
  memcpy(p->dst, p->src, p->n);
  return NULL;
}

/* One copy of n bytes split over `threads` threads; its seconds, or a negative
 * number when a thread could not start. */
static double timed_copy(char *dst, const char *src, size_t n, int threads) {
  pthread_t tid[MAX_THREADS];
  copy_part parts[MAX_THREADS];
  size_t share = (n / (size_t)threads + 4095) & ~(size_t)4095;
  double t0 = bench_now();
  int started = 0;
  for (int t = 0; t < threads; t++) {
    size_t at = (size_t)t * share;
    parts[t] = (copy_part){dst + at, src + at, at >= n ? 0 : (n - at < share ? n - at : share)};
    if (t == 0) continue; /* the calling thread copies the first part */
    if (pthread_create(&tid[t], NULL, copy_part_run, &parts[t]) != 0) break;
    started = t;
  }
  copy_part_run(&parts[0]);
  for (int t = 1; t <= started; t++)
    pthread_join(tid[t], NULL);
  double seconds = bench_now() - t0;
  return started == threads - 1 ? seconds : -1;
}

void bench_measure_host_copy(bench_run *run) {
  bench_host_copy *h = &run->host_copy;
  if (h->done) return;
  h->done = true;
  h->llc = last_level_cache();
  h->llc_known = h->llc != 0;
  if (!h->llc_known) h->llc = LLC_ASSUMED;
  size_t n = 2 * h->llc > COPY_MIN ? 2 * h->llc : COPY_MIN;
  /* Two blocks in at most a quarter of what the host can give: smaller on a small
   * host (then perhaps not cache-cold; the line says how much was copied). */
  uint64_t avail = bench_host_available();
  if (avail && 2 * (uint64_t)n > avail / 4) n = (size_t)(avail / 8) & ~(size_t)4095;
  if (n < ((size_t)16 << 20)) {
    snprintf(h->why, sizeof h->why, "the host has too little memory available (%llu MiB) for the copy",
             (unsigned long long)(avail >> 20));
    return;
  }
  char *src = malloc(n), *dst = malloc(n);
  if (!src || !dst) {
    free(src);
    free(dst);
    snprintf(h->why, sizeof h->why, "no host memory for two blocks of %zu MiB", n >> 20);
    return;
  }
  memset(src, 0x5A, n); /* page faults are not bandwidth */
  memset(dst, 0xA5, n);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  int most = online < 1 ? 1 : online > MAX_THREADS ? MAX_THREADS : (int)online;
  for (int threads = 1;; threads = threads * 2 < most ? threads * 2 : most) {
    double best = 0;
    for (int r = 0; r < COPY_ROUNDS; r++) {
      double s = timed_copy(dst, src, n, threads);
      if (s > 0 && (best == 0 || s < best)) best = s;
    }
    double gbs = best > 0 ? (double)n / best / 1e9 : 0;
    if (gbs > h->gbs) {
      h->gbs = gbs;
      h->threads = threads;
    }
    if (threads == 1) h->one_thread_gbs = gbs;
    if (threads == most) break;
  }
  h->bytes = n;
  h->measured = h->gbs > 0;
  if (!h->measured) snprintf(h->why, sizeof h->why, "no copy thread could be started");
  free(src);
  free(dst);
}

/* ---- pageable transfers, cache-cold ------------------------------------------------ */

bool bench_wants_limit(const bench_run *run, const bench_device *d) {
  return !run->opt.quick && !run->opt.summary && !d->info.is_cpu && !tool_is_debugging(&d->info) &&
         (run->opt.paths[PATH_H2D] || run->opt.paths[PATH_D2H]);
}

/* Slice k of the area, filled with bytes of its own. */
static void fill_slice(unsigned char *p, size_t n, size_t k) {
  for (size_t i = 0; i < n; i += 4096)
    p[i] = (unsigned char)(k * 31 + i / 4096);
}

static bool slice_holds(const unsigned char *p, size_t n, size_t k) {
  for (size_t i = 0; i < n; i += 4096)
    if (p[i] != (unsigned char)(k * 31 + i / 4096)) return false;
  return true;
}

/* The median GB/s of `samples` transfers of `bytes`, each from or into the next
 * slice of the area; 0 with why[] on failure. */
static double cold_rate(ferry_buffer buf, unsigned char *area, size_t slices, size_t bytes, bool to_device, int samples,
                        char *why, size_t why_size) {
  double t[64];
  if (samples > 64) samples = 64;
  for (int i = 0; i < samples; i++) {
    unsigned char *slice = area + (size_t)i % slices * bytes;
    ferry_array a = ferry_array_of(slice, bytes, FERRY_UINT8);
    double t0 = bench_now();
    ferry_status st = to_device ? ferry_host_to_device(a, buf) : ferry_device_to_host(buf, a);
    t[i] = bench_now() - t0;
    if (st != FERRY_OK) {
      snprintf(why, why_size, "%s (%s)", ferry_last_error(), ferry_status_name(st));
      return 0;
    }
  }
  double median = bench_summarise(t, samples).median;
  return median > 0 ? (double)bytes / median / 1e9 : 0;
}

/* One size: h2d from the slices in turn, then d2h into them; the bytes checked
 * (the last slice read back holds what the last slice written held). */
static void cold_size(bench_run *run, bench_device *d, bench_cold *out, size_t llc) {
  size_t bytes = out->bytes, slices = (2 * llc + bytes - 1) / bytes;
  if (slices < 2 && bytes < 2 * llc) slices = 2;
  /* The area in at most a quarter of what the host can give (the rows' own blocks
   * are freed by now); at least one block, as the rows had. */
  uint64_t avail = bench_host_available();
  if (avail && (uint64_t)slices * bytes > avail / 4) slices = (size_t)(avail / 4 / bytes);
  if (slices < 1) slices = 1;
  char why[600] = "";
  unsigned char *area = malloc(slices * bytes);
  ferry_buffer buf = FERRY_NULL_BUFFER;
  ferry_status st = area ? ferry_alloc(d->dev, bytes, FERRY_UINT8, &buf) : FERRY_ERROR_OUT_OF_MEMORY;
  if (!area) {
    snprintf(out->why, sizeof out->why, "no host memory for %zu MiB of blocks", slices * bytes >> 20);
  } else if (st != FERRY_OK) {
    snprintf(out->why, sizeof out->why, "ferry_alloc: %.150s (%s)", ferry_last_error(), ferry_status_name(st));
  } else {
    for (size_t k = 0; k < slices; k++)
      fill_slice(area + k * bytes, bytes, k);
    int samples = run->opt.repeat > 0 ? run->opt.repeat : COLD_SAMPLES;
    size_t last_written = (size_t)(samples - 1) % slices;
    out->h2d = cold_rate(buf, area, slices, bytes, true, samples, why, sizeof why);
    if (out->h2d > 0) out->d2h = cold_rate(buf, area, slices, bytes, false, samples, why, sizeof why);
    size_t last_read = (size_t)(samples - 1) % slices;
    if (out->h2d > 0 && out->d2h > 0 && !slice_holds(area + last_read * bytes, bytes, last_written)) {
      snprintf(why, sizeof why, "the bytes read back were not the bytes written");
      out->h2d = out->d2h = 0;
    }
    if (why[0]) {
      snprintf(out->why, sizeof out->why, "%.190s", why);
      run->failures++;
      bench_note("device %zu (%s), cache-cold pageable transfers, %zu MiB: %s", d->info.index, d->info.backend,
                 bytes >> 20, why);
    }
    out->slices = slices;
  }
  if (st == FERRY_OK && area) ferry_free(buf);
  free(area);
}

void bench_measure_limit(bench_run *run, bench_device *d) {
  bench_host_limit *l = &d->limit;
  memset(l, 0, sizeof *l);
  if (!bench_wants_limit(run, d) || bench_interrupted()) return;
  bench_measure_host_copy(run);
  const bench_host_copy *h = &run->host_copy;
  /* The pinned rows at the largest size measured. */
  for (size_t si = run->opt.size_count; si-- > 0;) {
    const bench_row *hp = bench_device_row(run, d, PATH_H2D_PINNED, si);
    const bench_row *dp = bench_device_row(run, d, PATH_D2H_PINNED, si);
    if (hp->status == ROW_OK && dp->status == ROW_OK) {
      l->pinned_bytes = hp->bytes;
      l->pinned_h2d = bench_figure(hp, hp->ferry.median);
      l->pinned_d2h = bench_figure(dp, dp->ferry.median);
      break;
    }
  }
  for (size_t si = 0; si < run->opt.size_count && !bench_interrupted(); si++) {
    size_t bytes = run->opt.sizes[si];
    if (bytes < COLD_MIN_SIZE || bytes > d->size_cap) continue;
    bench_cold *c = &l->cold[l->cold_count++];
    c->bytes = bytes;
    char where[32];
    snprintf(where, sizeof where, "device %zu", d->info.index);
    bench_progress_step(where, "cache-cold", bytes);
    cold_size(run, d, c, h->llc);
  }
  l->measured = true;
}

double bench_limit_of(const bench_run *run, const bench_device *d, bool to_device) {
  const bench_host_limit *l = &d->limit;
  double pinned = to_device ? l->pinned_h2d : l->pinned_d2h, copy = run->host_copy.measured ? run->host_copy.gbs : 0;
  if (pinned > 0 && copy > 0) return pinned < copy ? pinned : copy;
  return pinned > 0 ? pinned : copy;
}

bool bench_pinned_is_limit(const bench_run *run, const bench_device *d) {
  const bench_host_limit *l = &d->limit;
  const bench_host_copy *h = &run->host_copy;
  return l->pinned_bytes && h->measured && l->pinned_h2d <= h->gbs && l->pinned_d2h <= h->gbs;
}

double bench_limit_target(size_t bytes, bool pinned_is_limit) {
  if (bytes >= ((size_t)1 << 30)) return pinned_is_limit ? 0.95 : 0.90;
  if (bytes >= ((size_t)64 << 20)) return 0.90;
  if (bytes >= ((size_t)16 << 20)) return 0.85;
  if (bytes >= ((size_t)4 << 20)) return 0.75;
  return 0;
}

void bench_limit_warm(const bench_run *run, const bench_device *d, size_t bytes, double out[2]) {
  out[0] = out[1] = 0;
  for (size_t si = 0; si < run->opt.size_count; si++) {
    if (run->opt.sizes[si] != bytes) continue;
    const bench_row *rh = bench_device_row(run, d, PATH_H2D, si), *rd = bench_device_row(run, d, PATH_D2H, si);
    if (rh->status == ROW_OK) out[0] = bench_figure(rh, rh->ferry.median);
    if (rd->status == ROW_OK) out[1] = bench_figure(rd, rd->ferry.median);
  }
}
