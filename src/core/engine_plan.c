/*
 * The engine's plan: for a transfer between pageable memory and a device, the
 * driver's own call or the staging ring, and in pieces of which size. Decided
 * here alone, for every backend, from figures the engine measures once per
 * device and direction (engine.c, `measure`), at the first pageable transfer of
 * 2 MiB or more on a device that stages (FERRY_CAP_STAGE):
 *
 *   direct_rate            the driver's call on up to 8 MiB of the transfer's bytes (half of it at most)
 *   copy_fixed, copy_rate  a host copy between the ring and the user's memory on
 *                          the copy threads, fitted through a quarter of that and all of it
 *   dma_fixed, dma_rate    a DMA between the ring and the device, start to wait,
 *                          fitted the same way
 *
 *   dma_issue              the time dma_start takes to return
 *
 * A pipeline of k pieces of p bytes then takes about
 *     copy(p) + dma(p) + (k - 1) * max(copy(p) + dma_issue, p / dma_rate + dma_issue)
 * where copy(p) = copy_fixed + p / copy_rate and dma(p) = dma_fixed + p /
 * dma_rate: the first piece's copy and DMA in full, then, for each further
 * piece, whichever of the engine's thread (a host copy on the copy threads, and
 * a start) and the device (the DMA itself, queued behind the one before, its
 * start-up hidden) is slower. The driver's call takes n / direct_rate. The
 * piece is the power of two from 256 KiB to a quarter of the ring with the least
 * estimate, and the ring is taken when its estimate beats the driver's call.
 *
 * Before the figures exist, and for transfers under 64 KiB, the driver's call.
 * Devices that do not stage (CPUs) always take the driver's call.
 *
 * Overrides: FERRY_STAGE_MIN (pageable transfers of at least this many bytes
 * are staged, smaller ones are not; 0: none is) and FERRY_STAGE_BYTES (the
 * piece size); with both set nothing is measured. FERRY_DEBUG=engine prints
 * the figures and the plan they give once measured.
 */
#include "internal.h"

#include <stdio.h>

#define SMALL       ((size_t)64 << 10)  /* below: the driver's call */
#define MEASURE_MIN ((size_t)2 << 20)   /* the first transfers this large measure the device */
#define ROUNDS      3                   /* of which the best figures are kept */
#define PIECE_MIN   ((size_t)256 << 10) /* below, the copy threads gain little */
#define RING_PIECES 4                   /* a piece is at most a quarter of the ring */
#define RING_BYTES  ((size_t)64 << 20)  /* engine.c's ring */

static size_t round_page(size_t n) { return (n + 4095) & ~(size_t)4095; }

static size_t piece_max(const struct ferry_engine *e) {
  return e->piece_override ? e->piece_override : RING_BYTES / RING_PIECES;
}

/* Before any figures: half the transfer (so that two pieces overlap), at least
 * 4 MiB, where host copies spread over the copy threads. */
static size_t default_piece(const struct ferry_engine *e, size_t n) {
  if (e->piece_override) return e->piece_override;
  size_t piece = round_page(n / 2), floor = (size_t)4 << 20, ceiling = piece_max(e);
  if (piece < floor) piece = floor;
  return piece < ceiling ? piece : ceiling;
}

double ferry__engine_estimate(const ferry_figures *f, size_t bytes, size_t piece) {
  double p = (double)(piece < bytes ? piece : bytes);
  double k = (double)((bytes + piece - 1) / piece);
  double copy = f->copy_fixed + p / f->copy_rate;
  double dma = f->dma_fixed + p / f->dma_rate;
  double host_step = copy + f->dma_issue;
  double device_step = p / f->dma_rate + f->dma_issue;
  return copy + dma + (k - 1) * (host_step > device_step ? host_step : device_step);
}

/* The piece with the least estimate, and that estimate. */
static size_t best_piece(const struct ferry_engine *e, const ferry_figures *f, size_t n, double *out_time) {
  size_t best = 0, limit = piece_max(e);
  double best_time = 0;
  for (size_t p = PIECE_MIN; p <= limit; p *= 2) {
    size_t piece = p < n ? p : round_page(n);
    double t = ferry__engine_estimate(f, n, piece);
    if (best == 0 || t < best_time) {
      best = piece;
      best_time = t;
    }
    if (p >= n) break;
  }
  *out_time = best_time;
  return best;
}

bool ferry__engine_wants_round(struct ferry_engine *e, ferry_dma_dir dir) {
  return atomic_load_explicit(&e->rounds[dir], memory_order_relaxed) < ROUNDS;
}

ferry_plan ferry__engine_plan(ferry_device *dev, ferry_dma_dir dir, size_t n) {
  struct ferry_engine *e = &dev->state->engine;
  ferry_plan plan = {.direct = true, .measure = false, .piece = default_piece(e, n)};
  if (!(dev->caps & FERRY_CAP_STAGE)) return plan;
  if (dir == FERRY_DMA_TO_DEVICE && n <= dev->bounce_max) { /* one piece through the ring */
    plan.direct = false;
    plan.piece = round_page(n);
    return plan;
  }
  bool measured = atomic_load_explicit(&e->measured[dir], memory_order_acquire);
  ferry_figures figures = ferry__engine_figures(dev, dir); /* a copy: another round may rewrite them */
  const ferry_figures *f = &figures;
  double staged_time = 0;
  if (e->min_set) {
    plan.direct = e->min_override == 0 || n < e->min_override;
    if (!plan.direct && !e->piece_override) {
      if (measured)
        plan.piece = best_piece(e, f, n, &staged_time);
      else
        plan.measure = n >= MEASURE_MIN;
    }
    return plan;
  }
  if (n < SMALL) return plan;
  if (!measured) {
    plan.measure = n >= MEASURE_MIN;
    plan.direct = !plan.measure;
    return plan;
  }
  plan.measure = n >= MEASURE_MIN && ferry__engine_wants_round(e, dir);
  size_t piece = best_piece(e, f, n, &staged_time);
  if (!e->piece_override) plan.piece = piece;
  plan.direct = f->direct_rate > 0 && (double)n / f->direct_rate <= staged_time;
  return plan;
}

/* "4 MiB in pieces of 1 MiB", or "... by the driver's call". */
static const char *short_size(size_t n, char buf[32]) {
  if (n >= ((size_t)1 << 30) && n % ((size_t)1 << 30) == 0)
    snprintf(buf, 32, "%zuG", n >> 30);
  else if (n >= ((size_t)1 << 20) && n % ((size_t)1 << 20) == 0)
    snprintf(buf, 32, "%zuM", n >> 20);
  else
    snprintf(buf, 32, "%zuK", n >> 10);
  return buf;
}

/* "4M: pieces of 1M", or "4M: direct". */
static int plan_text(ferry_device *dev, ferry_dma_dir dir, size_t n, char *buf, size_t size) {
  ferry_plan p = ferry__engine_plan(dev, dir, n);
  char a[32], b[32];
  if (p.direct) return snprintf(buf, size, "%s: direct", short_size(n, a));
  return snprintf(buf, size, "%s: pieces of %s", short_size(n, a), short_size(p.piece, b));
}

void ferry__engine_report(ferry_device *dev, ferry_dma_dir dir) {
  ferry_figures figures = ferry__engine_figures(dev, dir);
  const ferry_figures *f = &figures;
  char plans[1024];
  size_t used = 0;
  const size_t sizes[] = {(size_t)256 << 10, (size_t)1 << 20,  (size_t)4 << 20,
                          (size_t)16 << 20,  (size_t)64 << 20, (size_t)1 << 30};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && used < sizeof plans; i++) {
    int w = plan_text(dev, dir, sizes[i], plans + used, sizeof plans - used);
    if (w < 0) break;
    used += (size_t)w;
    if (used + 2 < sizeof plans && i + 1 < sizeof sizes / sizeof sizes[0]) {
      plans[used++] = ';';
      plans[used++] = ' ';
      plans[used] = '\0';
    }
  }
  fprintf(stderr,
          "ferry: engine: %s, %s: the driver's call %.2f GB/s; host copy %.1f us + %.2f GB/s; DMA %.1f us + %.2f "
          "GB/s, its start %.1f us. Plan: %s\n",
          dev->label, dir == FERRY_DMA_TO_DEVICE ? "to the device" : "to the host", f->direct_rate / 1e9,
          f->copy_fixed * 1e6, f->copy_rate / 1e9, f->dma_fixed * 1e6, f->dma_rate / 1e9, f->dma_issue * 1e6, plans);
}
