/* Buffers: allocation in its four forms, free, and buffer info. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void stats_buffer_born(ferry_device *dev, size_t bytes) {
  struct ferry_device_state *s = dev->state;
  ferry__stat_add(&s->live_buffers, 1);
  uint64_t now = atomic_fetch_add_explicit(&s->bytes_in_use, bytes, memory_order_relaxed) + bytes;
  uint64_t peak = atomic_load_explicit(&s->peak_bytes_in_use, memory_order_relaxed);
  while (now > peak && !atomic_compare_exchange_weak_explicit(&s->peak_bytes_in_use, &peak, now, memory_order_relaxed,
                                                              memory_order_relaxed)) {
  }
}

static void stats_buffer_died(ferry_device *dev, size_t bytes) {
  struct ferry_device_state *s = dev->state;
  atomic_fetch_sub_explicit(&s->live_buffers, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&s->bytes_in_use, bytes, memory_order_relaxed);
}

/* Checks that `length` elements of `elem_size` bytes fit in size_t. */
static ferry_status byte_count(const char *fn, size_t length, size_t elem_size, const char *what, size_t *out) {
  if (elem_size && length > SIZE_MAX / elem_size)
    return ferry__fail(FERRY_ERROR_OVERFLOW, "%s: %zu elements of %zu bytes (%s) overflow size_t (at most %zu bytes)",
                       fn, length, elem_size, what, (size_t)SIZE_MAX);
  *out = length * elem_size;
  return FERRY_OK;
}

/* Checks a host array's own fields: a known, non-custom kind, data unless empty,
 * and a byte count that fits. */
static ferry_status array_bytes(const char *fn, ferry_array a, size_t *out) {
  if (a.kind == FERRY_CUSTOM)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                       "%s: a host array cannot be of kind custom (its element size is unknown); use the _ptr "
                       "transfers for custom data",
                       fn);
  if (ferry_kind_size(a.kind) == 0)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: host array kind %d is not a ferry_kind", fn, (int)a.kind);
  if (!a.data && a.length > 0)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: host array data is NULL but its length is %zu", fn, a.length);
  ferry_status st = byte_count(fn, a.length, ferry_kind_size(a.kind), ferry_kind_name(a.kind), out);
  if (st != FERRY_OK) return st;
  /* One past the last byte must be an address too (else it wraps to 0). */
  if (*out > UINTPTR_MAX - (uintptr_t)a.data)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                       "%s: host array at %p: its %zu bytes run past the end of the address space", fn, a.data, *out);
  return FERRY_OK;
}

static ferry_status too_big(const char *fn, ferry_device *dev, size_t bytes) {
  char a[64], b[64];
  return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: %s asked, but the largest buffer %s can hold is %s", fn,
                     ferry__bytes_text(bytes, a), dev->label, ferry__bytes_text(dev->info.max_allocation, b));
}

/* CPU devices' memory is the host's, and their drivers (PoCL, lavapipe), like
 * the host's own allocator, promise far more than there is: memory is only found
 * missing when it is first touched, by a crash. So on a CPU device ferry keeps
 * the live buffers with memory of their own within the device's total_memory. */
static bool counts_owned(const ferry_device *dev, size_t bytes) { return dev->info.is_cpu && bytes > 0; }

static ferry_status reserve_owned(const char *fn, ferry_device *dev, size_t bytes) {
  if (!counts_owned(dev, bytes)) return FERRY_OK;
  _Atomic uint64_t *owned = &dev->state->bytes_owned;
  uint64_t before = atomic_fetch_add_explicit(owned, bytes, memory_order_relaxed);
  if (before + bytes <= dev->info.total_memory && before + bytes >= before) return FERRY_OK;
  atomic_fetch_sub_explicit(owned, bytes, memory_order_relaxed);
  char a[64], b[64], c[64];
  return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY,
                     "%s: %s asked on %s, but its live buffers already hold %s of its %s (on a CPU device ferry keeps "
                     "buffers within the device's memory: the driver would promise more than the machine has)",
                     fn, ferry__bytes_text(bytes, a), dev->label, ferry__bytes_text(before, b),
                     ferry__bytes_text(dev->info.total_memory, c));
}

static void unreserve_owned(ferry_device *dev, size_t bytes) {
  if (counts_owned(dev, bytes)) atomic_fetch_sub_explicit(&dev->state->bytes_owned, bytes, memory_order_relaxed);
}

/* A buffer with memory of its own. */
static ferry_status make_buffer(const char *fn, ferry_device *dev, size_t length, ferry_kind kind, size_t elem_size,
                                ferry_buffer *out) {
  size_t bytes = 0;
  ferry_status st = byte_count(fn, length, elem_size, kind == FERRY_CUSTOM ? "custom" : ferry_kind_name(kind), &bytes);
  if (st != FERRY_OK) return st;
  if (bytes > dev->info.max_allocation) return too_big(fn, dev, bytes);
  if ((st = reserve_owned(fn, dev, bytes)) != FERRY_OK) return st;
  ferry_slot *slot;
  uint32_t index;
  st = ferry__slot_new(fn, &slot, &index);
  if (st != FERRY_OK) {
    unreserve_owned(dev, bytes);
    return st;
  }
  ferry_mem mem = {0};
  size_t class_bytes = 0;
  if (bytes > 0) {
    st = ferry__mem_alloc(dev, bytes, &mem, &class_bytes);
    if (st != FERRY_OK) {
      ferry__slot_abandon(slot, index);
      unreserve_owned(dev, bytes);
      char text[64];
      return ferry__fail(st, "%s: %zu %s elements (%s) on %s: %s", fn, length,
                         kind == FERRY_CUSTOM ? "custom" : ferry_kind_name(kind), ferry__bytes_text(bytes, text),
                         dev->label, ferry__error_text());
    }
  }
  slot->kind = kind;
  slot->device = dev;
  slot->mem = mem;
  slot->host_array = NULL;
  slot->length = length;
  slot->elem_size = elem_size;
  slot->bytes = bytes;
  slot->class_bytes = class_bytes;
  slot->over_host_array = false;
  stats_buffer_born(dev, bytes);
  *out = ferry__slot_publish(slot, index);
  return FERRY_OK;
}

static ferry_status alloc_in(ferry_device *device, size_t length, ferry_kind kind, ferry_buffer *out_buffer) {
  static const char fn[] = "ferry_alloc";
  if (!out_buffer) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_buffer is NULL", fn);
  if (kind == FERRY_CUSTOM)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                       "%s: kind custom has no element size; use ferry_alloc_custom(device, length, elem_size, out)",
                       fn);
  if (ferry_kind_size(kind) == 0)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: kind %d is not a ferry_kind", fn, (int)kind);
  return make_buffer(fn, device, length, kind, ferry_kind_size(kind), out_buffer);
}

static ferry_status alloc_custom_in(ferry_device *device, size_t length, size_t elem_size, ferry_buffer *out_buffer) {
  static const char fn[] = "ferry_alloc_custom";
  if (!out_buffer) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_buffer is NULL", fn);
  if (elem_size == 0) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: elem_size is 0", fn);
  return make_buffer(fn, device, length, FERRY_CUSTOM, elem_size, out_buffer);
}

/* A buffer over the user's array: zero-copy (mem is the array) or host-ptr (mem from the backend). */
static ferry_status wrap_array(const char *fn, ferry_device *dev, ferry_array host, size_t bytes, const ferry_mem *mem,
                               ferry_buffer *out) {
  ferry_slot *slot;
  uint32_t index;
  ferry_status st = ferry__slot_new(fn, &slot, &index);
  if (st != FERRY_OK) return st;
  slot->kind = host.kind;
  slot->device = dev;
  slot->mem = *mem;
  slot->host_array = host.data;
  slot->length = host.length;
  slot->elem_size = ferry_kind_size(host.kind);
  slot->bytes = bytes;
  slot->class_bytes = 0;
  slot->over_host_array = true;
  stats_buffer_born(dev, bytes);
  *out = ferry__slot_publish(slot, index);
  return FERRY_OK;
}

ferry_status ferry__buffer_wrap_foreign(ferry_device *dev, ferry_kind kind, size_t length, const ferry_mem *mem,
                                        void *host_array, bool over_host_array, void *foreign, ferry_buffer *out) {
  ferry_slot *slot;
  uint32_t index;
  ferry_status st = ferry__slot_new("ferry_dlpack_import", &slot, &index);
  if (st != FERRY_OK) return st;
  slot->kind = kind;
  slot->device = dev;
  slot->mem = *mem;
  slot->host_array = host_array;
  slot->length = length;
  slot->elem_size = ferry_kind_size(kind);
  slot->bytes = length * slot->elem_size; /* the caller checked it fits */
  slot->class_bytes = 0;
  slot->over_host_array = over_host_array;
  slot->foreign = foreign;
  stats_buffer_born(dev, slot->bytes);
  *out = ferry__slot_publish(slot, index);
  return FERRY_OK;
}

static ferry_status zero_copy(const char *fn, ferry_device *dev, ferry_array host, size_t bytes, ferry_buffer *out) {
  ferry_mem mem = {.handle = (uintptr_t)host.data, .host = host.data, .bytes = bytes, .flags = FERRY_MEM_ZERO_COPY};
  return wrap_array(fn, dev, host, bytes, &mem, out);
}

static ferry_status alloc_zero_copy_in(ferry_device *device, ferry_array host, ferry_buffer *out_buffer) {
  static const char fn[] = "ferry_alloc_zero_copy";
  ferry_status st = FERRY_OK;
  if (!out_buffer) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_buffer is NULL", fn);
  size_t bytes = 0;
  if ((st = array_bytes(fn, host, &bytes)) != FERRY_OK) return st;
  if (!device->info.zero_copy)
    return ferry__fail(FERRY_ERROR_UNSUPPORTED,
                       "%s: %s has memory of its own, so no buffer can be the host array (zero-copy buffers exist on "
                       "native and checked); ferry_alloc_host_ptr asks for a buffer over the array instead",
                       fn, device->label);
  return zero_copy(fn, device, host, bytes, out_buffer);
}

static ferry_status refuse(ferry_refusal reason, ferry_refusal *out_refusal) {
  if (out_refusal) *out_refusal = reason;
  return FERRY_ERROR_REFUSED;
}

ferry_status ferry__alloc_host_ptr_in(ferry_device *device, ferry_array host, ferry_buffer *out_buffer,
                                      ferry_refusal *out_refusal) {
  static const char fn[] = "ferry_alloc_host_ptr";
  ferry_status st = FERRY_OK;
  if (!out_buffer) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_buffer is NULL", fn);
  size_t bytes = 0;
  if ((st = array_bytes(fn, host, &bytes)) != FERRY_OK) return st;
  if (device->info.zero_copy) {
    st = zero_copy(fn, device, host, bytes, out_buffer);
    if (st == FERRY_OK && out_refusal) *out_refusal = FERRY_REFUSAL_NONE;
    return st;
  }
  if (!device->info.host_ptr || !device->ops->host_ptr_import) {
    ferry__fail(FERRY_ERROR_REFUSED, "%s: %s has no buffers over host memory", fn, device->label);
    return refuse(FERRY_REFUSAL_UNSUPPORTED, out_refusal);
  }
  size_t align = device->info.host_ptr_alignment;
  if ((uintptr_t)host.data % align) {
    ferry__fail(FERRY_ERROR_REFUSED, "%s: host array at %p is not aligned to %zu bytes, as %s needs (it is %zu past)",
                fn, host.data, align, device->label, (size_t)((uintptr_t)host.data % align));
    return refuse(FERRY_REFUSAL_MISALIGNED, out_refusal);
  }
  if (bytes == 0 || bytes % align) {
    ferry__fail(FERRY_ERROR_REFUSED, "%s: host array has %zu bytes; %s needs a nonzero multiple of %zu", fn, bytes,
                device->label, align);
    return refuse(FERRY_REFUSAL_BAD_LENGTH, out_refusal);
  }
  if ((st = ferry__host_ranges_claim(fn, host.data, bytes)) == FERRY_ERROR_OUT_OF_MEMORY) return st;
  if (st != FERRY_OK) {
    ferry__fail(FERRY_ERROR_REFUSED,
                "%s: host memory %p..%p (%zu bytes) overlaps the array of another live host-ptr buffer", fn, host.data,
                (void *)((char *)host.data + bytes), bytes);
    return refuse(FERRY_REFUSAL_OVERLAP, out_refusal);
  }
  ferry_mem mem = {0};
  ferry_refusal why = FERRY_REFUSAL_DRIVER;
  st = device->ops->host_ptr_import(device, host.data, bytes, &mem, &why);
  if (st != FERRY_OK) {
    /* Whatever the driver said, the caller gets a refusal with the driver's words. */
    ferry__host_ranges_unclaim(host.data);
    ferry__fail(FERRY_ERROR_REFUSED, "%s: %s", fn, ferry__error_text());
    return refuse(why == FERRY_REFUSAL_NONE ? FERRY_REFUSAL_DRIVER : why, out_refusal);
  }
  mem.flags |= FERRY_MEM_HOST_PTR;
  st = wrap_array(fn, device, host, bytes, &mem, out_buffer);
  if (st != FERRY_OK) {
    ferry_error_scope cleanup = ferry__first_failure_begin(true);
    device->ops->host_ptr_release(device, &mem);
    ferry__host_ranges_unclaim(host.data);
    ferry__first_failure_end(cleanup);
    return ferry__fail(st, "%s: %s", fn, ferry__error_text());
  }
  if (out_refusal) *out_refusal = FERRY_REFUSAL_NONE;
  return FERRY_OK;
}

/* ---- the public allocations: inside the gate ---------------------------- */
ferry_status ferry_alloc(ferry_device *device, size_t length, ferry_kind kind, ferry_buffer *out_buffer) {
  ferry_status st = ferry__enter_device(device, "ferry_alloc");
  if (st != FERRY_OK) return st;
  st = alloc_in(device, length, kind, out_buffer);
  ferry__leave();
  return st;
}

ferry_status ferry_alloc_custom(ferry_device *device, size_t length, size_t elem_size, ferry_buffer *out_buffer) {
  ferry_status st = ferry__enter_device(device, "ferry_alloc_custom");
  if (st != FERRY_OK) return st;
  st = alloc_custom_in(device, length, elem_size, out_buffer);
  ferry__leave();
  return st;
}

ferry_status ferry_alloc_zero_copy(ferry_device *device, ferry_array host, ferry_buffer *out_buffer) {
  ferry_status st = ferry__enter_device(device, "ferry_alloc_zero_copy");
  if (st != FERRY_OK) return st;
  st = alloc_zero_copy_in(device, host, out_buffer);
  ferry__leave();
  return st;
}

ferry_status ferry_alloc_host_ptr(ferry_device *device, ferry_array host, ferry_buffer *out_buffer,
                                  ferry_refusal *out_refusal) {
  ferry_status st = ferry__enter_device(device, "ferry_alloc_host_ptr");
  if (st != FERRY_OK) return st;
  st = ferry__alloc_host_ptr_in(device, host, out_buffer, out_refusal);
  ferry__leave();
  return st;
}

ferry_status ferry__slot_destroy_memory(ferry_slot *slot) {
  ferry_device *dev = slot->device;
  ferry_status st = FERRY_OK;
  if (slot->mem.flags & FERRY_MEM_FOREIGN) {
    st = ferry__foreign_release(slot); /* memory ferry did not allocate: dlpack.c gives it back */
  } else if (slot->mem.flags & FERRY_MEM_HOST_PTR) {
    st = dev->ops->host_ptr_release(dev, &slot->mem);
    ferry__host_ranges_unclaim(slot->host_array);
  } else if (!(slot->mem.flags & FERRY_MEM_ZERO_COPY) && slot->bytes > 0) {
    st = ferry__mem_release(dev, &slot->mem, slot->class_bytes);
    unreserve_owned(dev, slot->bytes);
  }
  stats_buffer_died(dev, slot->bytes);
  if (st != FERRY_OK) {
    char text[512];
    ferry__fail(st, "%s was released, but %s", ferry__buffer_text(slot, text), ferry__error_text());
  }
  return st;
}

ferry_status ferry_free(ferry_buffer buffer) {
  ferry_status st = ferry__enter("ferry_free");
  if (st != FERRY_OK) return st;
  st = ferry__retire(buffer, "ferry_free");
  /* A driver failure while releasing: the handle is gone either way, and the sentence says so. */
  if (st != FERRY_OK && st != FERRY_ERROR_STALE_BUFFER) ferry__fail(st, "ferry_free: %s", ferry__error_text());
  ferry__leave();
  return st;
}

/* ---- buffer info --------------------------------------------------------- */

size_t ferry_size(ferry_buffer b) {
  ferry_slot *s = ferry__peek(b);
  if (!s) return 0;
  size_t v = s->length;
  ferry__release(s);
  return v;
}

size_t ferry_elem_size(ferry_buffer b) {
  ferry_slot *s = ferry__peek(b);
  if (!s) return 0;
  size_t v = s->elem_size;
  ferry__release(s);
  return v;
}

ferry_kind ferry_buffer_kind(ferry_buffer b) {
  ferry_slot *s = ferry__peek(b);
  if (!s) return FERRY_CUSTOM;
  ferry_kind v = s->kind;
  ferry__release(s);
  return v;
}

uintptr_t ferry_device_ptr(ferry_buffer b) {
  ferry_slot *s = ferry__peek(b);
  if (!s) return 0;
  uintptr_t v = s->mem.handle;
  ferry__release(s);
  return v;
}

bool ferry_is_zero_copy(ferry_buffer b) {
  ferry_slot *s = ferry__peek(b);
  if (!s) return false;
  /* The seed's "no transfers needed": a buffer that IS its array. A host-ptr
   * buffer on a device with memory of its own is over its array too, but its
   * host access needs the transfers that synchronise it. */
  bool v = (s->mem.flags & FERRY_MEM_ZERO_COPY) != 0;
  ferry__release(s);
  return v;
}

ferry_device *ferry_buffer_device(ferry_buffer b) {
  ferry_slot *s = ferry__peek(b);
  if (!s) return NULL;
  ferry_device *v = s->device;
  ferry__release(s);
  return v;
}
