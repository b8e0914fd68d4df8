/*
 * ferry._ferry's C API for the package's other extensions (ferry._mpi).
 *
 * ferry._ferry has libferry compiled in (or a libferry.a linked in), with
 * nothing exported: another extension that called libferry of its own would get
 * a second instance, with its own devices, buffers and sessions. So ferry._ferry
 * hands out the functions of ITS libferry, and a few of its own, through a
 * PyCapsule: ferry._ferry._C_API, named FERRY_PY_CAPI_NAME, pointing to one
 * ferry_py_capi. An importer checks `version` against FERRY_PY_CAPI_VERSION
 * (the extensions of one package are built together; a mismatch is a broken
 * install).
 *
 * The libferry functions are exactly those that src/mpi/ferry_mpi.c calls,
 * with their own signatures, except companion_fail, which takes the sentence
 * already formatted (a variadic function cannot be forwarded). They may be
 * called without the GIL. The three Python ones need the GIL.
 *
 * Not for programs: this header changes with the package.
 */
#ifndef FERRY_PY_CAPI_H
#define FERRY_PY_CAPI_H

#include <Python.h>

#include "companion.h" /* src/core: ferry_companion_hold */
#include "ferry.h"

#include <stdbool.h>
#include <stddef.h>

#define FERRY_PY_CAPI_NAME    "ferry._ferry._C_API"
#define FERRY_PY_CAPI_VERSION 5

typedef struct ferry_py_capi {
  int version; /* FERRY_PY_CAPI_VERSION */

  /* libferry's companion interface (src/core/companion.h). */
  ferry_status (*companion_fail)(ferry_status status, const char *message);
  bool (*companion_debug)(const char *word);
  bool (*companion_option)(const char *name, uint64_t *out);
  ferry_status (*companion_hold)(ferry_buffer buffer, const char *fn, ferry_companion_hold *out);
  void (*companion_release)(ferry_companion_hold *hold);
  ferry_status (*companion_transfer)(const ferry_companion_hold *hold, const char *fn, bool to_device, size_t offset,
                                     void *host, size_t bytes);
  ferry_status (*companion_map)(const ferry_companion_hold *hold, const char *fn, size_t offset, size_t bytes,
                                bool write, void **out);
  ferry_status (*companion_unmap)(const ferry_companion_hold *hold, const char *fn, void *ptr);
  ferry_status (*companion_device_address)(const ferry_companion_hold *hold, const char *fn, size_t offset,
                                           uintptr_t *out);
  ferry_status (*companion_lend)(void *ptr, size_t bytes, uint64_t *out_session);
  void (*companion_take_back)(void *ptr, uint64_t session);
  uint64_t (*companion_session)(void);
  ferry_status (*companion_transfer_async)(const ferry_companion_hold *hold, const char *fn, ferry_queue queue,
                                           bool to_device, size_t offset, void *host, size_t bytes);

  /* libferry's public functions (include/ferry.h). */
  size_t (*device_count)(void);
  ferry_status (*device_get)(size_t index, ferry_device **out);
  ferry_status (*device_info_get)(const ferry_device *device, ferry_device_info *out);
  const char *(*kind_name)(ferry_kind kind);
  const char *(*status_name)(ferry_status status);
  const char *(*last_error)(void);
  ferry_status (*queue_create)(ferry_device *device, ferry_queue *out);
  ferry_status (*queue_destroy)(ferry_queue queue);
  ferry_status (*queue_synchronize)(ferry_queue queue);
  ferry_status (*queue_query)(ferry_queue queue);
  ferry_status (*event_create)(ferry_event *out);
  ferry_status (*event_destroy)(ferry_event event);
  ferry_status (*event_record)(ferry_event event, ferry_queue queue);
  ferry_status (*event_query)(ferry_event event);

  /* ferry._ferry's own, with the GIL. */
  /* The handle of a live ferry.Buffer: 0; else a Python exception set
   * (TypeError for another type, ferry.StaleBufferError for a freed buffer)
   * and -1. */
  int (*buffer_handle)(PyObject *obj, ferry_buffer *out);
  /* The ferry.Device object of a device of this session (new reference), or
   * NULL with an exception set. */
  PyObject *(*device_object)(ferry_device *device);
  /* Raises the ferry.Error subclass of `status` with ferry_last_error() and
   * returns NULL. */
  PyObject *(*raise_status)(ferry_status status);
} ferry_py_capi;

/* An importing extension's pointer to ferry._ferry's ferry_py_capi: each
 * extension defines its own (not exported), set when it is imported. */
extern const ferry_py_capi *ferry__py_capi;

#endif
