/* What libferry gives its companion libraries (companion.h). */
#include "companion.h"

#include "internal.h"

#include <string.h>

ferry_status ferry__companion_fail(ferry_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ferry__failv(status, fmt, ap);
  va_end(ap);
  return status;
}

bool ferry__companion_debug(const char *word) { return ferry__option_has_word("FERRY_DEBUG", word); }

bool ferry__companion_option(const char *name, uint64_t *out) { return ferry__option_number(name, out); }

ferry_status ferry__companion_hold(ferry_buffer buffer, const char *fn, ferry_companion_hold *out) {
  if (!out) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  ferry_slot *slot;
  uint64_t session;
  if ((st = ferry__hold(buffer, fn, &slot, &session)) == FERRY_OK) {
    *out = (ferry_companion_hold){.buffer = buffer,
                                  .session = session,
                                  .host = slot->mem.host,
                                  .device = slot->device,
                                  .lanes = slot->device->ops->lane_create != NULL,
                                  .kind = slot->kind,
                                  .elem_size = slot->elem_size,
                                  .length = slot->length,
                                  .bytes = slot->bytes}; /* the reference taken is the hold's */
  }
  ferry__leave();
  return st;
}

ferry_status ferry__companion_native_wait(ferry_device *device, uintptr_t native_queue, const char *fn) {
  ferry_status st = ferry__enter_device(device, fn);
  if (st != FERRY_OK) return st;
  st = ferry__queues_native_wait(device, native_queue, fn);
  ferry__leave();
  return st;
}

void ferry__companion_release(ferry_companion_hold *hold) {
  if (!hold || hold->buffer.id == 0) return;
  ferry__release_held(hold->buffer);
  hold->buffer = FERRY_NULL_BUFFER;
}

/* The held slot, inside the gate (ferry__leave after), or a failure. */
static ferry_status held(const ferry_companion_hold *hold, const char *fn, ferry_slot **out) {
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  if (!(*out = ferry__held_slot(hold->buffer, hold->session))) {
    ferry__leave();
    return ferry__fail(FERRY_ERROR_STALE_BUFFER, "%s: the buffer was released by ferry_shutdown() meanwhile", fn);
  }
  return FERRY_OK;
}

/* held(), and [offset, offset + bytes) inside the buffer. */
static ferry_status held_range(const ferry_companion_hold *hold, const char *fn, size_t offset, size_t bytes,
                               ferry_slot **out) {
  ferry_status st = held(hold, fn, out);
  if (st != FERRY_OK) return st;
  if (offset > (*out)->bytes || bytes > (*out)->bytes - offset) {
    size_t size = (*out)->bytes;
    ferry__leave();
    return ferry__fail(FERRY_ERROR_OUT_OF_RANGE, "%s: bytes %zu..%zu of a buffer of %zu bytes", fn, offset,
                       offset + bytes, size);
  }
  return FERRY_OK;
}

ferry_status ferry__companion_transfer(const ferry_companion_hold *hold, const char *fn, bool to_device, size_t offset,
                                       void *host, size_t bytes) {
  ferry_slot *slot;
  ferry_status st = held_range(hold, fn, offset, bytes, &slot);
  if (st != FERRY_OK) return st;
  ferry_op op = ferry__op_host_transfer(fn, to_device, slot, offset, host, bytes);
  st = ferry__run_now(&op);
  ferry__leave();
  return st;
}

ferry_status ferry__companion_transfer_async(const ferry_companion_hold *hold, const char *fn, ferry_queue queue,
                                             bool to_device, size_t offset, void *host, size_t bytes) {
  ferry_slot *slot;
  ferry_status st = held_range(hold, fn, offset, bytes, &slot);
  if (st != FERRY_OK) return st;
  ferry_queue_obj *q = NULL;
  if ((st = ferry__queue_acquire(queue, fn, &q)) == FERRY_OK) {
    if (ferry__queue_device(q) != slot->device) {
      char text[512];
      st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: the queue is one of %s, but %s is on another device", fn,
                       ferry__queue_device(q)->label, ferry__buffer_text(slot, text));
    } else if ((st = ferry__queue_settle_default(slot->device, fn)) == FERRY_OK) { /* as the public calls */
      ferry__slot_ref(slot); /* the queue's, released when the transfer retires */
      ferry_op op = ferry__op_host_transfer(fn, to_device, slot, offset, host, bytes);
      st = ferry__queue_submit(q, &op);
    }
    ferry__queue_unref(q);
  }
  ferry__leave();
  return st;
}

ferry_status ferry__companion_map(const ferry_companion_hold *hold, const char *fn, size_t offset, size_t bytes,
                                  bool write, void **out) {
  ferry_slot *slot;
  ferry_status st = held(hold, fn, &slot);
  if (st != FERRY_OK) return st;
  const ferry_device_ops *ops = slot->device->ops;
  if (!ops->map || !ops->unmap)
    st = ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s: %s maps no buffers", fn, slot->device->label);
  else if (bytes == 0 || offset > slot->bytes || bytes > slot->bytes - offset)
    st = ferry__fail(FERRY_ERROR_OUT_OF_RANGE, "%s: a map of bytes %zu..%zu of a buffer of %zu bytes", fn, offset,
                     offset + bytes, slot->bytes);
  else if ((st = ferry__queue_settle_default(slot->device, fn)) == FERRY_OK)
    st = ops->map(slot->device, &slot->mem, offset, bytes, write, out);
  ferry__leave();
  return st;
}

ferry_status ferry__companion_unmap(const ferry_companion_hold *hold, const char *fn, void *ptr) {
  ferry_slot *slot;
  ferry_status st = held(hold, fn, &slot);
  if (st != FERRY_OK) return st;
  st = slot->device->ops->unmap(slot->device, &slot->mem, ptr);
  ferry__leave();
  return st;
}

ferry_status ferry__companion_device_address(const ferry_companion_hold *hold, const char *fn, size_t offset,
                                             uintptr_t *out) {
  ferry_slot *slot;
  ferry_status st = held(hold, fn, &slot);
  if (st != FERRY_OK) return st;
  if (strcmp(slot->device->backend->name, "cuda") != 0)
    st = ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s: %s is not a CUDA device", fn, slot->device->label);
  else if (offset > slot->bytes)
    st = ferry__fail(FERRY_ERROR_OUT_OF_RANGE, "%s: offset %zu of a buffer of %zu bytes", fn, offset, slot->bytes);
  else if ((st = ferry__queue_settle_default(slot->device, fn)) == FERRY_OK)
    *out = slot->mem.handle + offset;
  ferry__leave();
  return st;
}

ferry_status ferry__companion_lend(void *ptr, size_t bytes, uint64_t *out_session) {
  ferry_status st = ferry__enter("ferry__companion_lend");
  if (st != FERRY_OK) return st;
  if ((st = ferry__pinned_lend(ptr, bytes)) == FERRY_OK) *out_session = ferry__handles_session();
  ferry__leave();
  return st;
}

void ferry__companion_take_back(void *ptr, uint64_t session) {
  /* Inside the gate only if ferry is up: a take-back after ferry_shutdown must
   * not start ferry again, and one during it leaves the registry to the
   * shutdown, which waits for calls inside the gate before devices go. */
  if (!ferry__enter_if_up()) return;
  if (ferry__handles_session() == session) ferry__pinned_take_back(ptr);
  ferry__leave();
}

uint64_t ferry__companion_session(void) { return ferry__handles_session(); }
