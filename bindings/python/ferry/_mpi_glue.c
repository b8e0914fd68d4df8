/*
 * The libferry functions that src/mpi/ferry_mpi.c calls, for ferry._mpi, which
 * has ferry_mpi.c compiled in: each forwards to ferry._ferry's libferry through
 * its C API (_capi.h), so that ferry.mpi moves the buffers of the one libferry
 * that the ferry package uses. Compiled with nothing exported (FERRY_API empty,
 * -fvisibility=hidden): these definitions are this extension's alone.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_capi.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

const ferry_py_capi *ferry__py_capi;

ferry_status ferry__companion_fail(ferry_status status, const char *fmt, ...) {
  char small[512], *big = NULL;
  const char *message = small;
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    message = fmt;
  } else if ((size_t)n >= sizeof small) {
    big = malloc((size_t)n + 1);
    if (big) {
      vsnprintf(big, (size_t)n + 1, fmt, again);
      message = big;
    }
  }
  va_end(again);
  ferry_status st = ferry__py_capi->companion_fail(status, message);
  free(big);
  return st;
}

bool ferry__companion_debug(const char *word) { return ferry__py_capi->companion_debug(word); }

bool ferry__companion_option(const char *name, uint64_t *out) { return ferry__py_capi->companion_option(name, out); }

ferry_status ferry__companion_device_address(const ferry_companion_hold *hold, const char *fn, size_t offset,
                                             uintptr_t *out) {
  return ferry__py_capi->companion_device_address(hold, fn, offset, out);
}

ferry_status ferry__companion_lend(void *ptr, size_t bytes, uint64_t *out_session) {
  return ferry__py_capi->companion_lend(ptr, bytes, out_session);
}

void ferry__companion_take_back(void *ptr, uint64_t session) { ferry__py_capi->companion_take_back(ptr, session); }

uint64_t ferry__companion_session(void) { return ferry__py_capi->companion_session(); }

ferry_status ferry__companion_hold(ferry_buffer buffer, const char *fn, ferry_companion_hold *out) {
  return ferry__py_capi->companion_hold(buffer, fn, out);
}

void ferry__companion_release(ferry_companion_hold *hold) { ferry__py_capi->companion_release(hold); }

ferry_status ferry__companion_transfer(const ferry_companion_hold *hold, const char *fn, bool to_device, size_t offset,
                                       void *host, size_t bytes) {
  return ferry__py_capi->companion_transfer(hold, fn, to_device, offset, host, bytes);
}

ferry_status ferry__companion_transfer_async(const ferry_companion_hold *hold, const char *fn, ferry_queue queue,
                                             bool to_device, size_t offset, void *host, size_t bytes) {
  return ferry__py_capi->companion_transfer_async(hold, fn, queue, to_device, offset, host, bytes);
}

ferry_status ferry__companion_map(const ferry_companion_hold *hold, const char *fn, size_t offset, size_t bytes,
                                  bool write, void **out) {
  return ferry__py_capi->companion_map(hold, fn, offset, bytes, write, out);
}

ferry_status ferry__companion_unmap(const ferry_companion_hold *hold, const char *fn, void *ptr) {
  return ferry__py_capi->companion_unmap(hold, fn, ptr);
}

size_t ferry_device_count(void) { return ferry__py_capi->device_count(); }

ferry_status ferry_device_get(size_t index, ferry_device **out_device) {
  return ferry__py_capi->device_get(index, out_device);
}

ferry_status ferry_device_info_get(const ferry_device *device, ferry_device_info *out_info) {
  return ferry__py_capi->device_info_get(device, out_info);
}

const char *ferry_kind_name(ferry_kind k) { return ferry__py_capi->kind_name(k); }

const char *ferry_status_name(ferry_status s) { return ferry__py_capi->status_name(s); }

const char *ferry_last_error(void) { return ferry__py_capi->last_error(); }

ferry_status ferry_queue_create(ferry_device *device, ferry_queue *out_queue) {
  return ferry__py_capi->queue_create(device, out_queue);
}

ferry_status ferry_queue_destroy(ferry_queue queue) { return ferry__py_capi->queue_destroy(queue); }

ferry_status ferry_queue_synchronize(ferry_queue queue) { return ferry__py_capi->queue_synchronize(queue); }

ferry_status ferry_queue_query(ferry_queue queue) { return ferry__py_capi->queue_query(queue); }

ferry_status ferry_event_create(ferry_event *out_event) { return ferry__py_capi->event_create(out_event); }

ferry_status ferry_event_destroy(ferry_event event) { return ferry__py_capi->event_destroy(event); }

ferry_status ferry_event_record(ferry_event event, ferry_queue queue) {
  return ferry__py_capi->event_record(event, queue);
}

ferry_status ferry_event_query(ferry_event event) { return ferry__py_capi->event_query(event); }
