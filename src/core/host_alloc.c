/*
 * ferry_host_alloc and ferry_host_free: the public face of the pinned registry
 * (pinned.c). Kept apart from it so that the registry sits below the device
 * registry (which releases it at shutdown) and only this file looks up.
 */
#include "internal.h"

ferry_status ferry_host_alloc(ferry_device *device, size_t bytes, void **out_ptr) {
  static const char fn[] = "ferry_host_alloc";
  ferry_status st = ferry__enter_device(device, fn);
  if (st != FERRY_OK) return st;
  if (!out_ptr)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_ptr is NULL", fn);
  else if (bytes == 0)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: bytes is 0", fn);
  else if ((st = ferry__pinned_alloc(device, bytes, true, out_ptr)) != FERRY_OK)
    ferry__fail(st, "%s: %s", fn, ferry__error_text());
  ferry__leave();
  return st;
}

ferry_status ferry_host_free(void *ptr) {
  static const char fn[] = "ferry_host_free";
  if (!ptr) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: ptr is NULL", fn);
  /* Inside the gate: the block's device must outlive its free. */
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  if (!ferry__pinned_free(ptr, true))
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                     "%s: %p did not come from ferry_host_alloc (or was released already)", fn, ptr);
  ferry__leave();
  return st;
}
