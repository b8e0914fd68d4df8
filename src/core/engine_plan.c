/*
 * The engine's plan: for a transfer between pageable memory and a device, the
 * driver's own call or the staging ring, and in pieces of which size. Decided
 * here alone, for every backend, from figures the engine measures once per
 * device and direction (engine.c, `measure`), at the first pageable transfer of
 * 2 MiB or more on a device that stages (FERRY_CAP_STAGE):
 *
 *   direct_rate            the driver's call on 1 MiB of the transfer's bytes
 *   copy_fixed, copy_rate  a host copy between the ring and the user's memory on
 *                          the copy threads, fitted through 256 KiB and 1 MiB
 *   dma_fixed, dma_rate    a DMA between the ring and the device, start to wait,
 *                          fitted the same way
 *
 * A pipeline of k pieces of p bytes then takes about
 *     copy(p) + dma(p) + (k - 1) * max(copy(p), dma_queued(p))
 * where copy(p) = copy_fixed + p / copy_rate, dma(p) = dma_fixed + p / dma_rate
 * and dma_queued(p) = dma_fixed / 4 + p / dma_rate (a DMA queued behind another
 * hides most of its start-up); the driver's call takes n / direct_rate. The
 * piece is the power of two from 64 KiB to a quarter of the ring with the least
 * estimate, and the ring is taken when its estimate beats the driver's call.
 *
 * Before the figures exist, and for transfers under 64 KiB, the driver's call.
 * Devices that do not stage (CPUs) always take the driver's call.
 *
 * Overrides: FERRY_STAGE_MIN (pageable transfers of at least this many bytes
 * are staged, smaller ones are not; 0: none is) and FERRY_STAGE_BYTES (the
 * piece size); with both set nothing is measured.
 */
#include "internal.h"

#define SMALL       ((size_t)64 << 10) /* below: the driver's call */
#define MEASURE_MIN ((size_t)2 << 20)  /* the first transfer this large measures the device */
#define PIECE_MIN   ((size_t)64 << 10)
#define RING_PIECES 4                  /* a piece is at most a quarter of the ring */
#define RING_BYTES  ((size_t)64 << 20) /* engine.c's ring */

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
  double queued = f->dma_fixed / 4 + p / f->dma_rate;
  return copy + dma + (k - 1) * (copy > queued ? copy : queued);
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
  const ferry_figures *f = &e->figures[dir];
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
  size_t piece = best_piece(e, f, n, &staged_time);
  if (!e->piece_override) plan.piece = piece;
  plan.direct = f->direct_rate > 0 && (double)n / f->direct_rate <= staged_time;
  return plan;
}
