/*
 * Handles across shutdowns, whatever the history: a slot whose generation
 * reaches the limit is retired, and no handle from before a ferry_shutdown() is
 * ever accepted again, also once slots have used up their generations. The
 * test-only hook ferry__handles_skip_generations moves generations near the
 * limit, in place of 2^31 allocations.
 */
#include "harness.h"

#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

#define KEEP 64

static ferry_buffer old[KEEP];
static size_t old_count;

static void remember(ferry_buffer b) {
  if (old_count < KEEP) old[old_count++] = b;
}

/* Every handle remembered is stale: no call accepts it, whatever is live now. */
static void all_stale(const char *when) {
  harness_context = when;
  unsigned char byte = 7;
  for (size_t i = 0; i < old_count; i++) {
    CHECK_MSG(ferry_write(old[i], 0, &byte, 1) == FERRY_ERROR_STALE_BUFFER,
              "handle %zu (0x%016llx) is accepted again %s", i, (unsigned long long)old[i].id, when);
    CHECK(ferry_size(old[i]) == 0);
    CHECK(ferry_buffer_device(old[i]) == NULL);
  }
}

/* Frees and reallocates until the first slot is retired (the next buffer gets
 * another slot); remembers every handle on the way. */
static void cycle_until_retired(ferry_device *dev) {
  ferry_buffer b;
  CHECK_OK(ferry_alloc(dev, 4, FERRY_UINT8, &b));
  uint32_t slot = (uint32_t)b.id;
  for (int i = 0; i < 32 && (uint32_t)b.id == slot; i++) {
    remember(b);
    CHECK_OK(ferry_write(b, 0, "abcd", 4));
    CHECK_OK(ferry_free(b));
    CHECK_OK(ferry_alloc(dev, 4, FERRY_UINT8, &b));
  }
  CHECK_MSG((uint32_t)b.id != slot, "slot %u was never retired", slot);
  remember(b);
  CHECK_OK(ferry_free(b));
}

int main(void) {
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", "native"));

  /* Session 0: the first handles ever, at the lowest generations. */
  harness_context = "session 0";
  ferry_device *dev = ferry_device_best();
  ferry_buffer first, second;
  CHECK_OK(ferry_alloc(dev, 4, FERRY_UINT8, &first));
  CHECK_OK(ferry_alloc(dev, 4, FERRY_UINT8, &second));
  remember(first);
  remember(second);
  ferry_shutdown();

  /* Session 1: generations close to the limit; slot 0 is used up. */
  ferry__handles_skip_generations(FERRY_GENERATION_LIMIT - 8);
  harness_context = "session 1";
  dev = ferry_device_best();
  all_stale("in session 1");
  cycle_until_retired(dev);
  all_stale("in session 1, after slot 0 retired");
  ferry_shutdown();

  /* Sessions 2 and 3: whatever is allocated, nothing from before comes back;
   * hooks that would move generations back (to where session 0 was) do not. */
  for (int session = 2; session <= 3; session++) {
    ferry__handles_skip_generations(1);
    dev = ferry_device_best();
    all_stale("at the start of a later session");
    ferry_buffer fresh[8];
    for (int i = 0; i < 8; i++) {
      CHECK_OK(ferry_alloc(dev, 4, FERRY_UINT8, &fresh[i]));
      for (size_t k = 0; k < old_count; k++)
        CHECK_MSG(fresh[i].id != old[k].id, "a new buffer has the handle 0x%016llx of an old one",
                  (unsigned long long)fresh[i].id);
      CHECK_OK(ferry_write(fresh[i], 0, "wxyz", 4));
    }
    all_stale("with new buffers live");
    for (int i = 0; i < 8; i++)
      CHECK_OK(ferry_free(fresh[i]));
    if (session == 2) cycle_until_retired(dev); /* the next slot used up too */
    ferry_shutdown();
  }
  ferry_set_option("FERRY_BACKENDS", NULL);
  harness_context = "";
  return harness_finish("handles");
}
