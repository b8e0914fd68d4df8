/*
 * ferry_host_alloc and ferry_host_free: the public face of the pinned registry
 * (pinned.c). Kept apart from it so that the registry sits below the device
 * registry (which releases it at shutdown) and only this file looks up.
 */
#include "internal.h"

ferry_status ferry_host_alloc(ferry_device *device, size_t bytes, void **out_ptr) {
  static const char fn[] = "ferry_host_alloc";
  ferry_status st = ferry__check_device(device, fn);
  if (st != FERRY_OK) return st;
  if (!out_ptr) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_ptr is NULL", fn);
  if (bytes == 0) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: bytes is 0", fn);
  st = ferry__pinned_alloc(device, bytes, true, out_ptr);
  return st == FERRY_OK ? st : ferry__fail(st, "%s: %s", fn, ferry__error_text());
}

ferry_status ferry_host_free(void *ptr) {
  static const char fn[] = "ferry_host_free";
  if (!ptr) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: ptr is NULL", fn);
  if (!ferry__pinned_free(ptr, true))
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                       "%s: %p did not come from ferry_host_alloc (or was released already)", fn, ptr);
  return FERRY_OK;
}
