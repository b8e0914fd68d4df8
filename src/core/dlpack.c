/*
 * DLPack export and import (include/ferry.h's DLPack section, docs/API.md).
 *
 * Export: a managed tensor, in either form, lives in one heap block with its
 * shape and strides, and holds a reference on the buffer's slot (the handle
 * table counts references): ferry_free makes the handle stale at once while the
 * memory stays until the consumer calls the deleter, which drops the reference.
 * The reference belongs to the session: ferry_shutdown releases every buffer's
 * memory, and a deleter that runs after it only frees the block.
 *
 * Import: the tensor is checked completely before ferry takes it (so that a
 * failed import leaves it with the caller); then a buffer is made over its
 * memory (FERRY_MEM_FOREIGN), whose release calls the tensor's deleter, once. A
 * tensor that ferry itself exported (recognised by its deleter) becomes a second
 * buffer over the same memory on the same device, which works on every backend,
 * Vulkan and Metal included, where a bare VkBuffer or MTLBuffer could not be used.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ----------------------------------------------------------------- */

static const char *dl_device_type_name(int32_t type, char buf[32]) {
  switch (type) {
  case FERRY_DL_CPU: return "CPU";
  case FERRY_DL_CUDA: return "CUDA";
  case FERRY_DL_CUDA_HOST: return "CUDAHost";
  case FERRY_DL_OPENCL: return "OpenCL";
  case FERRY_DL_VULKAN: return "Vulkan";
  case FERRY_DL_METAL: return "Metal";
  case FERRY_DL_VPI: return "VPI";
  case FERRY_DL_ROCM: return "ROCm";
  case FERRY_DL_ROCM_HOST: return "ROCmHost";
  case FERRY_DL_EXT_DEV: return "ExtDev";
  case FERRY_DL_CUDA_MANAGED: return "CUDAManaged";
  case FERRY_DL_ONEAPI: return "oneAPI";
  case FERRY_DL_WEBGPU: return "WebGPU";
  case FERRY_DL_HEXAGON: return "Hexagon";
  case FERRY_DL_MAIA: return "MAIA";
  default: snprintf(buf, 32, "device type %d", (int)type); return buf;
  }
}

/* "(CUDA, 1)" */
static const char *dl_device_text(ferry_dl_device d, char buf[64]) {
  char type[32];
  snprintf(buf, 64, "(%s, %d)", dl_device_type_name(d.device_type, type), (int)d.device_id);
  return buf;
}

/* "float32", "bool", "uint8 x4", "code 9 with 8 bits" */
static const char *dl_dtype_text(ferry_dl_data_type t, char buf[64]) {
  static const char *const codes[] = {"int", "uint", "float", "opaque handle", "bfloat", "complex", "bool"};
  int used;
  if (t.code == FERRY_DL_BOOL && t.bits == 8)
    used = snprintf(buf, 64, "bool");
  else if (t.code < sizeof codes / sizeof codes[0])
    used = snprintf(buf, 64, "%s%u", codes[t.code], (unsigned)t.bits);
  else
    used = snprintf(buf, 64, "code %u with %u bits", (unsigned)t.code, (unsigned)t.bits);
  if (t.lanes != 1 && used > 0 && used < 64) snprintf(buf + used, 64 - (size_t)used, " x%u lanes", (unsigned)t.lanes);
  return buf;
}

/* ---- kinds and dtypes -------------------------------------------------------- */

static ferry_dl_data_type dtype_of_kind(ferry_kind k) {
  switch (k) {
  case FERRY_FLOAT16: return (ferry_dl_data_type){FERRY_DL_FLOAT, 16, 1};
  case FERRY_BFLOAT16: return (ferry_dl_data_type){FERRY_DL_BFLOAT, 16, 1};
  case FERRY_FLOAT32: return (ferry_dl_data_type){FERRY_DL_FLOAT, 32, 1};
  case FERRY_FLOAT64: return (ferry_dl_data_type){FERRY_DL_FLOAT, 64, 1};
  case FERRY_INT8: return (ferry_dl_data_type){FERRY_DL_INT, 8, 1};
  case FERRY_INT16: return (ferry_dl_data_type){FERRY_DL_INT, 16, 1};
  case FERRY_INT32: return (ferry_dl_data_type){FERRY_DL_INT, 32, 1};
  case FERRY_INT64: return (ferry_dl_data_type){FERRY_DL_INT, 64, 1};
  case FERRY_UINT16: return (ferry_dl_data_type){FERRY_DL_UINT, 16, 1};
  case FERRY_UINT32: return (ferry_dl_data_type){FERRY_DL_UINT, 32, 1};
  case FERRY_UINT64: return (ferry_dl_data_type){FERRY_DL_UINT, 64, 1};
  case FERRY_NATIVEINT: return (ferry_dl_data_type){FERRY_DL_INT, (uint8_t)(8 * sizeof(intptr_t)), 1};
  case FERRY_COMPLEX32: return (ferry_dl_data_type){FERRY_DL_COMPLEX, 64, 1};
  case FERRY_COMPLEX64: return (ferry_dl_data_type){FERRY_DL_COMPLEX, 128, 1};
  case FERRY_UINT8:
  case FERRY_CHAR:
  case FERRY_CUSTOM: /* custom buffers travel as bytes */
  default: return (ferry_dl_data_type){FERRY_DL_UINT, 8, 1};
  }
}

/* The kind a dtype is imported as; false when ferry has none. */
static bool kind_of_dtype(ferry_dl_data_type t, ferry_kind *out) {
  if (t.lanes != 1) return false;
  static const ferry_kind ints[] = {FERRY_INT8, FERRY_INT16, FERRY_INT32, FERRY_INT64};
  static const ferry_kind uints[] = {FERRY_UINT8, FERRY_UINT16, FERRY_UINT32, FERRY_UINT64};
  int width = t.bits == 8 ? 0 : t.bits == 16 ? 1 : t.bits == 32 ? 2 : t.bits == 64 ? 3 : -1;
  switch (t.code) {
  case FERRY_DL_INT:
    if (width < 0) return false;
    *out = ints[width];
    return true;
  case FERRY_DL_UINT:
    if (width < 0) return false;
    *out = uints[width];
    return true;
  case FERRY_DL_FLOAT:
    if (width < 1) return false;
    *out = width == 1 ? FERRY_FLOAT16 : width == 2 ? FERRY_FLOAT32 : FERRY_FLOAT64;
    return true;
  case FERRY_DL_BFLOAT:
    if (t.bits != 16) return false;
    *out = FERRY_BFLOAT16;
    return true;
  case FERRY_DL_COMPLEX:
    if (t.bits != 64 && t.bits != 128) return false;
    *out = t.bits == 64 ? FERRY_COMPLEX32 : FERRY_COMPLEX64;
    return true;
  case FERRY_DL_BOOL:
    if (t.bits != 8) return false;
    *out = FERRY_UINT8; /* ferry has no boolean kind: one byte, 0 or 1 */
    return true;
  default: return false;
  }
}

/* The alignment an element's address needs: its scalar's size (a complex
 * number's half). */
static size_t scalar_alignment(ferry_dl_data_type t) {
  size_t bytes = t.bits / 8u;
  return t.code == FERRY_DL_COMPLEX ? bytes / 2 : bytes;
}

/* ---- devices ----------------------------------------------------------------- */

/* DLPack's name for a device; false when DLPack has none. */
static bool dl_of(const ferry_device *dev, ferry_dl_device *out) {
  if (dev->ops->dlpack_device) {
    *out = dev->ops->dlpack_device(dev);
    return true;
  }
  if (dev->info.zero_copy) {
    *out = (ferry_dl_device){FERRY_DL_CPU, 0};
    return true;
  }
  static const struct {
    const char *backend;
    int32_t type;
  } by_name[] = {{"opencl", FERRY_DL_OPENCL}, {"vulkan", FERRY_DL_VULKAN}, {"metal", FERRY_DL_METAL}};
  for (size_t i = 0; i < sizeof by_name / sizeof by_name[0]; i++) {
    if (strcmp(dev->backend->name, by_name[i].backend) == 0) {
      *out = (ferry_dl_device){by_name[i].type, (int32_t)dev->info.backend_index};
      return true;
    }
  }
  return false;
}

static ferry_status device_dl(const char *fn, const ferry_device *dev, ferry_dl_device *out) {
  if (dl_of(dev, out)) return FERRY_OK;
  return ferry__fail(FERRY_ERROR_UNSUPPORTED, "%s: DLPack has no device type for %s (backend %s)", fn, dev->label,
                     dev->backend->name);
}

ferry_status ferry_dlpack_device(const ferry_device *device, ferry_dl_device *out_dl_device) {
  static const char fn[] = "ferry_dlpack_device";
  ferry_status st = ferry__enter_device(device, fn);
  if (st != FERRY_OK) return st;
  if (!out_dl_device)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_dl_device is NULL", fn);
  else
    st = device_dl(fn, device, out_dl_device);
  ferry__leave();
  return st;
}

static bool is_host_memory_type(int32_t type) {
  return type == FERRY_DL_CPU || type == FERRY_DL_CUDA_HOST || type == FERRY_DL_ROCM_HOST;
}

/* The device a DLPack device names, or NULL (no sentence). Inside the gate. */
static ferry_device *find_device(ferry_dl_device want) {
  ferry_device *dev = NULL;
  if (is_host_memory_type(want.device_type)) {
    if (want.device_id != 0) return NULL;
    ferry_device *host = NULL;
    for (size_t i = 0; (dev = ferry__device_at(i)) != NULL; i++) {
      if (strcmp(dev->backend->name, "native") == 0) return dev;
      if (!host && dev->info.zero_copy) host = dev;
    }
    return host;
  }
  if (want.device_type == FERRY_DL_CUDA_MANAGED) want.device_type = FERRY_DL_CUDA;
  for (size_t i = 0; (dev = ferry__device_at(i)) != NULL; i++) {
    ferry_dl_device d;
    if (dl_of(dev, &d) && d.device_type == want.device_type && d.device_id == want.device_id) return dev;
  }
  return NULL;
}

ferry_status ferry_dlpack_find_device(ferry_dl_device dl_device, ferry_device **out_device) {
  static const char fn[] = "ferry_dlpack_find_device";
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  ferry_device *dev = NULL;
  char text[64];
  if (!out_device)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_device is NULL", fn);
  else if (!(dev = find_device(dl_device)))
    st = ferry__fail(FERRY_ERROR_NO_DEVICE, "%s: no ferry device is DLPack device %s", fn,
                     dl_device_text(dl_device, text));
  else
    *out_device = dev;
  ferry__leave();
  return st;
}

/* ---- export ------------------------------------------------------------------- */

typedef struct dl_export {
  union {
    ferry_dl_managed_tensor legacy;
    ferry_dl_managed_tensor_versioned versioned;
  } t;
  int64_t shape[1], strides[1];
  ferry_buffer buffer; /* the handle when exported: the tensor's reference is on its slot */
  uint64_t session;    /* the session the reference belongs to (ferry__hold) */
} dl_export;

static _Atomic size_t live_exports;

static void export_release(dl_export *e) {
  ferry__release_held(e->buffer);
  atomic_fetch_sub_explicit(&live_exports, 1, memory_order_relaxed);
  free(e);
}

static void legacy_deleter(ferry_dl_managed_tensor *self) {
  if (self) export_release(self->manager_ctx);
}

static void versioned_deleter(ferry_dl_managed_tensor_versioned *self) {
  if (self) export_release(self->manager_ctx);
}

static ferry_status export_tensor(const char *fn, ferry_buffer buffer, bool versioned, void **out_tensor) {
  ferry_status st = ferry__enter(fn);
  if (st != FERRY_OK) return st;
  ferry_slot *slot;
  uint64_t session = 0;
  if ((st = ferry__hold(buffer, fn, &slot, &session)) != FERRY_OK) {
    ferry__leave();
    return st;
  }
  ferry_dl_device device = {0};
  if (!out_tensor)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_tensor is NULL", fn);
  else
    st = device_dl(fn, slot->device, &device);
  dl_export *e = NULL;
  if (st == FERRY_OK && !(e = malloc(sizeof *e)))
    st = ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory for a DLPack tensor", fn);
  if (st != FERRY_OK) {
    ferry__release_held(buffer);
    ferry__leave();
    return st;
  }
  /* The reference taken above is now the tensor's, until its deleter runs. */
  e->shape[0] = (int64_t)(slot->kind == FERRY_CUSTOM ? slot->bytes : slot->length);
  e->strides[0] = 1;
  e->buffer = buffer;
  e->session = session;
  ferry_dl_tensor t = {
      .data = (void *)slot->mem.handle,
      .device = device,
      .ndim = 1,
      .dtype = dtype_of_kind(slot->kind),
      .shape = e->shape,
      .strides = e->strides,
      .byte_offset = 0,
  };
  if (versioned) {
    e->t.versioned = (ferry_dl_managed_tensor_versioned){
        .version = {FERRY_DL_VERSION_MAJOR, FERRY_DL_VERSION_MINOR},
        .manager_ctx = e,
        .deleter = versioned_deleter,
        .flags = 0,
        .dl_tensor = t,
    };
  } else {
    e->t.legacy = (ferry_dl_managed_tensor){.dl_tensor = t, .manager_ctx = e, .deleter = legacy_deleter};
  }
  atomic_fetch_add_explicit(&live_exports, 1, memory_order_relaxed);
  *out_tensor = &e->t;
  ferry__leave();
  return FERRY_OK;
}

ferry_status ferry_dlpack_export(ferry_buffer buffer, ferry_dl_managed_tensor **out_tensor) {
  return export_tensor("ferry_dlpack_export", buffer, false, (void **)out_tensor);
}

ferry_status ferry_dlpack_export_versioned(ferry_buffer buffer, ferry_dl_managed_tensor_versioned **out_tensor) {
  return export_tensor("ferry_dlpack_export_versioned", buffer, true, (void **)out_tensor);
}

size_t ferry_dlpack_live_exports(void) { return atomic_load_explicit(&live_exports, memory_order_relaxed); }

/* ---- import ------------------------------------------------------------------- */

typedef enum import_how {
  IMPORT_HOST,     /* host memory as a zero-copy buffer: nothing of ferry's to release */
  IMPORT_HOST_PTR, /* host memory under a host-pointer buffer of a device with memory of its own */
  IMPORT_DEVICE,   /* device memory through the backend's foreign_import */
  IMPORT_SHARED,   /* a tensor ferry exported: another buffer's memory, held by that tensor */
} import_how;

/* What a FERRY_MEM_FOREIGN slot's `foreign` points to. */
typedef struct dl_import {
  ferry_callback deleter_call; /* first: the producer's deleter, run where ferry holds no lock */
  import_how how;
  bool versioned;
  void *tensor; /* the managed tensor, whose deleter runs when the memory goes */
} dl_import;

static void run_deleter(ferry_callback *cb) {
  dl_import *imp = (dl_import *)cb;
  if (imp->versioned) {
    ferry_dl_managed_tensor_versioned *t = imp->tensor;
    if (t->deleter) t->deleter(t);
  } else {
    ferry_dl_managed_tensor *t = imp->tensor;
    if (t->deleter) t->deleter(t);
  }
  free(imp);
}

ferry_status ferry__foreign_release(ferry_slot *slot) {
  dl_import *imp = slot->foreign;
  ferry_device *dev = slot->device;
  ferry_status st = FERRY_OK;
  if (imp->how == IMPORT_HOST_PTR) {
    st = dev->ops->host_ptr_release(dev, &slot->mem);
    ferry__host_ranges_unclaim(slot->host_array);
  } else if (imp->how == IMPORT_DEVICE && dev->ops->foreign_release) {
    dev->ops->foreign_release(dev, &slot->mem);
  }
  /* The producer's deleter, exactly once (the slot's memory is released once),
   * once this thread is out of ferry: it is the program's code, and may call
   * ferry or wait for threads that do (callbacks.c). */
  ferry__callback_defer(&imp->deleter_call, run_deleter);
  return st;
}

/* What the import checks found, before ferry takes the tensor. */
typedef struct import_plan {
  const char *fn;
  ferry_dl_tensor *t;
  ferry_kind kind;
  size_t length, bytes;
  char what[160]; /* "a float32 tensor of 1000 elements on DLPack device (CUDA, 0)" */
} import_plan;

static ferry_status refuse(ferry_refusal *out_refusal, ferry_refusal why, const char *fmt, ...) FERRY_PRINTF(3, 4);
static ferry_status refuse(ferry_refusal *out_refusal, ferry_refusal why, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ferry__failv(FERRY_ERROR_REFUSED, fmt, ap);
  va_end(ap);
  if (out_refusal) *out_refusal = why;
  return FERRY_ERROR_REFUSED;
}

/* Shape, dtype and strides: the buffer's kind and length, or why not. */
static ferry_status check_layout(import_plan *p, ferry_refusal *out_refusal) {
  const ferry_dl_tensor *t = p->t;
  const char *fn = p->fn;
  if (t->ndim < 0) return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: the tensor has ndim %d", fn, (int)t->ndim);
  if (t->ndim > 0 && !t->shape)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: the tensor has ndim %d but no shape (NULL)", fn,
                       (int)t->ndim);
  bool empty = false;
  for (int32_t i = 0; i < t->ndim; i++) {
    if (t->shape[i] < 0)
      return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: the tensor's extent %d is %lld", fn, (int)i,
                         (long long)t->shape[i]);
    if (t->shape[i] == 0) empty = true;
  }
  char dtype[64];
  dl_dtype_text(t->dtype, dtype);
  if (!kind_of_dtype(t->dtype, &p->kind)) {
    if (t->dtype.lanes != 1)
      return refuse(out_refusal, FERRY_REFUSAL_DTYPE,
                    "%s: the tensor's dtype is %s: ferry buffers hold one value per element (lanes 1)", fn, dtype);
    return refuse(out_refusal, FERRY_REFUSAL_DTYPE,
                  "%s: the tensor's dtype is %s, which no ferry kind holds (ferry imports int and uint of 8 to 64 "
                  "bits, float16/32/64, bfloat16, complex64/128 and bool)",
                  fn, dtype);
  }
  size_t elem = ferry_kind_size(p->kind), length = empty ? 0 : 1;
  for (int32_t i = 0; i < t->ndim && !empty; i++) {
    uint64_t extent = (uint64_t)t->shape[i];
    if (extent > SIZE_MAX / length)
      return ferry__fail(FERRY_ERROR_OVERFLOW, "%s: the product of the tensor's %d extents overflows size_t", fn,
                         (int)t->ndim);
    length *= (size_t)extent;
  }
  if (length > SIZE_MAX / elem)
    return ferry__fail(FERRY_ERROR_OVERFLOW, "%s: %zu %s elements overflow size_t", fn, length, dtype);
  p->length = length;
  p->bytes = length * elem;
  if (t->strides && length > 0) {
    /* Compact row-major: each stride is the product of the extents after it;
     * an extent of 1 may have any stride (it is never stepped). */
    uint64_t expected = 1;
    for (int32_t i = t->ndim - 1; i >= 0; i--) {
      if (t->shape[i] != 1 && t->strides[i] != (int64_t)expected)
        return refuse(out_refusal, FERRY_REFUSAL_STRIDED,
                      "%s: the tensor is not contiguous: dimension %d (extent %lld) has stride %lld where a compact "
                      "row-major tensor has %llu; ferry imports compact memory only, without copying (make the "
                      "tensor contiguous first)",
                      fn, (int)i, (long long)t->shape[i], (long long)t->strides[i], (unsigned long long)expected);
      expected *= (uint64_t)t->shape[i];
    }
  }
  char dev[64];
  snprintf(p->what, sizeof p->what, "a %s tensor of %zu elements on DLPack device %s", dtype, p->length,
           dl_device_text(t->device, dev));
  return FERRY_OK;
}

/* The start of the tensor's bytes, for devices whose data is an address. */
static ferry_status check_address(const import_plan *p, ferry_refusal *out_refusal, uintptr_t *out) {
  const ferry_dl_tensor *t = p->t;
  uintptr_t base = (uintptr_t)t->data;
  if (!t->data && p->bytes > 0)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: %s has data NULL", p->fn, p->what);
  if (t->byte_offset > UINTPTR_MAX - base)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: %s: data %p + byte_offset %llu wraps around", p->fn, p->what,
                       t->data, (unsigned long long)t->byte_offset);
  uintptr_t start = base + (uintptr_t)t->byte_offset;
  /* One past the last byte must be an address too (else it wraps to 0). */
  if (p->bytes > UINTPTR_MAX - start)
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT,
                       "%s: %s: its %zu bytes from 0x%llx (data %p + byte_offset %llu) run past the end of the address "
                       "space",
                       p->fn, p->what, p->bytes, (unsigned long long)start, t->data,
                       (unsigned long long)t->byte_offset);
  size_t align = scalar_alignment(t->dtype);
  if (p->bytes > 0 && align > 1 && start % align)
    return refuse(out_refusal, FERRY_REFUSAL_MISALIGNED,
                  "%s: %s starts at 0x%llx (data %p + byte_offset %llu), which is not aligned to its %zu-byte "
                  "elements",
                  p->fn, p->what, (unsigned long long)start, t->data, (unsigned long long)t->byte_offset, align);
  *out = start;
  return FERRY_OK;
}

static dl_import *new_import(const char *fn, import_how how, bool versioned, void *tensor) {
  dl_import *imp = malloc(sizeof *imp);
  if (!imp) {
    ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s: no host memory to record an imported tensor", fn);
    return NULL;
  }
  *imp = (dl_import){.how = how, .versioned = versioned, .tensor = tensor};
  return imp;
}

/* A buffer over mem, owned through a new record; nothing taken on failure. */
static ferry_status wrap(const import_plan *p, ferry_device *dev, import_how how, bool versioned, void *tensor,
                         ferry_mem mem, void *host_array, bool over_host_array, ferry_buffer *out) {
  dl_import *imp = new_import(p->fn, how, versioned, tensor);
  if (!imp) return FERRY_ERROR_OUT_OF_MEMORY;
  mem.flags |= FERRY_MEM_FOREIGN;
  ferry_status st = ferry__buffer_wrap_foreign(dev, p->kind, p->length, &mem, host_array, over_host_array, imp, out);
  if (st != FERRY_OK) {
    free(imp);
    return ferry__fail(st, "%s: %s", p->fn, ferry__error_text());
  }
  return FERRY_OK;
}

/* A tensor ferry exported in this session, imported without `device` or onto
 * its own device: a second buffer over the same memory. Returns false when the
 * tensor is not one of those (the general path then decides). */
static bool import_own(const import_plan *p, const dl_export *e, ferry_device *device, bool versioned, void *tensor,
                       ferry_buffer *out, ferry_status *out_status) {
  ferry_slot *slot = ferry__held_slot(e->buffer, e->session); /* the tensor's reference keeps it */
  if (!slot) {
    *out_status =
        ferry__fail(FERRY_ERROR_STALE_BUFFER,
                    "%s: %s was exported by ferry before ferry_shutdown(), which released its memory", p->fn, p->what);
    return true;
  }
  if ((device && device != slot->device) || p->t->data != (void *)slot->mem.handle || p->t->byte_offset != 0 ||
      p->bytes != slot->bytes)
    return false;
  *out_status =
      wrap(p, slot->device, IMPORT_SHARED, versioned, tensor, slot->mem, slot->host_array, slot->over_host_array, out);
  return true;
}

static ferry_status import_host(const import_plan *p, ferry_device *dev, bool versioned, void *tensor,
                                ferry_buffer *out, ferry_refusal *out_refusal) {
  uintptr_t start;
  ferry_status st = check_address(p, out_refusal, &start);
  if (st != FERRY_OK) return st;
  if (dev->info.zero_copy) {
    ferry_mem mem = {.handle = start, .host = (void *)start, .bytes = p->bytes, .flags = FERRY_MEM_ZERO_COPY};
    return wrap(p, dev, IMPORT_HOST, versioned, tensor, mem, (void *)start, true, out);
  }
  /* A device with memory of its own: a host-pointer buffer over the tensor's memory. */
  dl_import *imp = new_import(p->fn, IMPORT_HOST_PTR, versioned, tensor);
  if (!imp) return FERRY_ERROR_OUT_OF_MEMORY;
  ferry_buffer b;
  ferry_refusal why = FERRY_REFUSAL_NONE;
  st = ferry__alloc_host_ptr_in(dev, ferry_array_of((void *)start, p->length, p->kind), &b, &why);
  if (st != FERRY_OK) {
    free(imp);
    ferry__fail(st, "%s: %s: %s", p->fn, p->what, ferry__error_text());
    if (st == FERRY_ERROR_REFUSED && out_refusal) *out_refusal = why;
    return st;
  }
  /* Nobody else has the handle yet: the buffer becomes the tensor's. */
  ferry_slot *slot = ferry__peek(b);
  slot->mem.flags |= FERRY_MEM_FOREIGN;
  slot->foreign = imp;
  ferry__release(slot);
  *out = b;
  return FERRY_OK;
}

static ferry_status import_device(const import_plan *p, ferry_device *dev, bool versioned, void *tensor,
                                  ferry_buffer *out, ferry_refusal *out_refusal) {
  const ferry_dl_tensor *t = p->t;
  bool address = t->device.device_type != FERRY_DL_OPENCL; /* an OpenCL tensor's data is a cl_mem */
  uintptr_t start = (uintptr_t)t->data;
  if (address) {
    ferry_status st = check_address(p, out_refusal, &start);
    if (st != FERRY_OK) return st;
  } else if (!t->data && p->bytes > 0) {
    return ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: %s has data NULL (no cl_mem)", p->fn, p->what);
  }
  ferry_mem mem = {.handle = start, .bytes = 0};
  if (p->bytes > 0) {
    if (!dev->ops->foreign_import)
      return refuse(out_refusal, FERRY_REFUSAL_DEVICE, "%s: %s: %s cannot use memory that ferry did not allocate",
                    p->fn, p->what, dev->label);
    ferry_refusal why = FERRY_REFUSAL_DRIVER;
    ferry_status st = dev->ops->foreign_import(dev, start, address ? 0 : t->byte_offset, p->bytes, &mem, &why);
    if (st != FERRY_OK) {
      ferry__fail(st, "%s: %s: %s", p->fn, p->what, ferry__error_text());
      if (st == FERRY_ERROR_REFUSED && out_refusal) *out_refusal = why;
      return st;
    }
  }
  ferry_status st = wrap(p, dev, IMPORT_DEVICE, versioned, tensor, mem, NULL, false, out);
  if (st != FERRY_OK && p->bytes > 0 && dev->ops->foreign_release) dev->ops->foreign_release(dev, &mem);
  return st;
}

/* `own`: the tensor's deleter is ferry's, and `own` is its record (manager_ctx). */
static ferry_status import_tensor(const char *fn, ferry_dl_tensor *t, bool versioned, void *tensor,
                                  const dl_export *own, ferry_device *device, ferry_buffer *out,
                                  ferry_refusal *out_refusal) {
  import_plan p = {.fn = fn, .t = t};
  ferry_status st = check_layout(&p, out_refusal);
  if (st != FERRY_OK) return st;
  if (own && import_own(&p, own, device, versioned, tensor, out, &st)) return st;
  int32_t type = t->device.device_type;
  char dl_text[64];
  dl_device_text(t->device, dl_text);
  if (type == FERRY_DL_VULKAN || type == FERRY_DL_METAL)
    return refuse(out_refusal, FERRY_REFUSAL_DEVICE,
                  "%s: %s: its data is a bare %s without the memory bound to it, which ferry cannot use (only tensors "
                  "that ferry itself exported import on Vulkan and Metal)",
                  fn, p.what, type == FERRY_DL_VULKAN ? "VkBuffer" : "id<MTLBuffer>");
  bool host = is_host_memory_type(type);
  if (!host && type != FERRY_DL_CUDA && type != FERRY_DL_CUDA_MANAGED && type != FERRY_DL_OPENCL)
    return refuse(out_refusal, FERRY_REFUSAL_DEVICE, "%s: %s: ferry has no backend for DLPack device type %d", fn,
                  p.what, (int)type);
  ferry_device *dev = device;
  if (!dev) {
    dev = find_device(t->device);
    if (!dev)
      return refuse(out_refusal, FERRY_REFUSAL_DEVICE, "%s: %s: no ferry device is DLPack device %s", fn, p.what,
                    dl_text);
  } else if (host) {
    if (t->device.device_id != 0)
      return refuse(out_refusal, FERRY_REFUSAL_DEVICE, "%s: %s: host memory is DLPack device id 0", fn, p.what);
  } else {
    ferry_dl_device d;
    ferry_dl_device want = t->device;
    if (want.device_type == FERRY_DL_CUDA_MANAGED) want.device_type = FERRY_DL_CUDA;
    bool named = dl_of(dev, &d);
    if (!named || d.device_type != want.device_type || d.device_id != want.device_id) {
      char mine[64] = "none";
      if (named) dl_device_text(d, mine);
      return refuse(out_refusal, FERRY_REFUSAL_DEVICE, "%s: %s cannot be used on %s (DLPack device %s)", fn, p.what,
                    dev->label, mine);
    }
  }
  if (host) return import_host(&p, dev, versioned, tensor, out, out_refusal);
  return import_device(&p, dev, versioned, tensor, out, out_refusal);
}

/* Enters the gate; on FERRY_OK the caller leaves it. */
static ferry_status import_start(const char *fn, const void *tensor, ferry_device *device, ferry_buffer *out_buffer) {
  ferry_status st = device ? ferry__enter_device(device, fn) : ferry__enter(fn);
  if (st != FERRY_OK) return st;
  if (!tensor)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: tensor is NULL", fn);
  else if (!out_buffer)
    st = ferry__fail(FERRY_ERROR_INVALID_ARGUMENT, "%s: out_buffer is NULL", fn);
  if (st != FERRY_OK) ferry__leave();
  return st;
}

ferry_status ferry_dlpack_import(ferry_dl_managed_tensor *tensor, ferry_device *device, ferry_buffer *out_buffer,
                                 ferry_refusal *out_refusal) {
  static const char fn[] = "ferry_dlpack_import";
  ferry_status st = import_start(fn, tensor, device, out_buffer);
  if (st != FERRY_OK) return st;
  const dl_export *own = tensor->deleter == legacy_deleter ? tensor->manager_ctx : NULL;
  st = import_tensor(fn, &tensor->dl_tensor, false, tensor, own, device, out_buffer, out_refusal);
  if (st == FERRY_OK && out_refusal) *out_refusal = FERRY_REFUSAL_NONE;
  ferry__leave();
  return st;
}

ferry_status ferry_dlpack_import_versioned(ferry_dl_managed_tensor_versioned *tensor, ferry_device *device,
                                           ferry_buffer *out_buffer, ferry_refusal *out_refusal) {
  static const char fn[] = "ferry_dlpack_import_versioned";
  ferry_status st = import_start(fn, tensor, device, out_buffer);
  if (st != FERRY_OK) return st;
  if (tensor->version.major != FERRY_DL_VERSION_MAJOR)
    st = refuse(out_refusal, FERRY_REFUSAL_VERSION,
                "%s: the tensor is DLPack %u.%u; ferry reads DLPack %d.x (the caller still owns the tensor and "
                "should call its deleter)",
                fn, (unsigned)tensor->version.major, (unsigned)tensor->version.minor, FERRY_DL_VERSION_MAJOR);
  else if (tensor->flags & FERRY_DL_FLAG_READ_ONLY)
    st = refuse(out_refusal, FERRY_REFUSAL_READ_ONLY,
                "%s: the tensor is read-only (DLPACK_FLAG_BITMASK_READ_ONLY), and every ferry buffer can be "
                "written",
                fn);
  if (st == FERRY_OK) {
    const dl_export *own = tensor->deleter == versioned_deleter ? tensor->manager_ctx : NULL;
    st = import_tensor(fn, &tensor->dl_tensor, true, tensor, own, device, out_buffer, out_refusal);
  }
  if (st == FERRY_OK && out_refusal) *out_refusal = FERRY_REFUSAL_NONE;
  ferry__leave();
  return st;
}
