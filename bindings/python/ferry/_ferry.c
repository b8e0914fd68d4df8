/*
 * ferry._ferry: the Python C extension over libferry (the Python C API only).
 *
 * Types: Device (one per ferry device and session, cached so that identity
 * holds) and Buffer (a ferry buffer handle, its device, and its NumPy dtype).
 * Transfers take the array through the buffer protocol (no NumPy C API: the
 * extension builds without NumPy's headers and works with NumPy 1 and 2) and run
 * with the GIL released. DLPack: Buffer.__dlpack__ / __dlpack_device__ export
 * through ferry_dlpack_export(_versioned); from_dlpack consumes any producer's
 * capsule through ferry_dlpack_import(_versioned); zero-copy and host-pointer
 * buffers over Python objects are DLPack imports of a tensor made here over the
 * object's buffer, so the object stays alive exactly as long as ferry uses its
 * memory (also when the buffer was exported and freed).
 *
 * _C_API (a capsule, _capi.h) hands this extension's libferry to ferry._mpi.
 *
 * docs/PYTHON.md is the user's guide; ferry/__init__.py documents the API.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "ferry.h"
#ifdef FERRY_PY_C_API
#include "_capi.h"
#endif

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- module state ---------------------------------------------------------------- */

static PyObject *numpy_empty;                            /* numpy.empty */
static PyObject *numpy_asarray;                          /* numpy.asarray */
static PyObject *numpy_dtype;                            /* numpy.dtype */
static PyObject *Error;                                  /* ferry.Error */
static PyObject *error_class[FERRY_ERROR_CANCELLED + 1]; /* by status */
static PyTypeObject StatsType;
static PyTypeObject BackendInfoType;
static unsigned long session = 1; /* moves on at ferry.shutdown(): older devices and buffers are stale */
static PyObject *device_cache;    /* list of Device, index = ferry's device index; NULL until asked */
static PyObject *default_queues;  /* dict: device index -> its default Queue, this session's */
/* Sessions below this one have been shut down completely: no queued work of
 * theirs runs any more (a session's number goes up when ferry.shutdown() starts,
 * and this one when it has returned). */
static unsigned long settled_session = 1;

static bool finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

/* Runs `stmt` (ferry calls only, no Python API) with the GIL released. Every
 * ferry call that enters ferry's gate may wait for a ferry_shutdown() on another
 * thread, and a shutdown runs the deleters of buffers over Python memory, which
 * take the GIL: waiting on ferry with the GIL held could wait forever. Transfers
 * release it too, for as long as the bytes move. */
#define WITHOUT_GIL(stmt)                                                                                              \
  do {                                                                                                                 \
    Py_BEGIN_ALLOW_THREADS stmt;                                                                                       \
    Py_END_ALLOW_THREADS                                                                                               \
  } while (0)

/* ---- errors ------------------------------------------------------------------------ */

static PyObject *class_of(ferry_status st) {
  if (st > FERRY_OK && st <= FERRY_ERROR_CANCELLED && error_class[st]) return error_class[st];
  return Error;
}

/* Raises the class of `st` with `message`; for refusals, sets .refusal. */
static PyObject *raise_message(ferry_status st, const char *message, ferry_refusal refusal) {
  PyObject *cls = class_of(st);
  PyObject *exc = PyObject_CallFunction(cls, "s", message);
  if (!exc) return NULL;
  if (st == FERRY_ERROR_REFUSED) {
    PyObject *name = PyUnicode_FromString(ferry_refusal_name(refusal));
    if (!name || PyObject_SetAttrString(exc, "refusal", name) < 0) {
      Py_XDECREF(name);
      Py_DECREF(exc);
      return NULL;
    }
    Py_DECREF(name);
  }
  PyErr_SetObject(cls, exc);
  Py_DECREF(exc);
  return NULL;
}

/* Raises the error of the failed ferry call that returned `st` (its sentence). */
static PyObject *raise_ferry(ferry_status st) { return raise_message(st, ferry_last_error(), FERRY_REFUSAL_NONE); }

static PyObject *raise_refused(ferry_status st, ferry_refusal refusal) {
  return raise_message(st, ferry_last_error(), refusal);
}

static PyObject *raise_format(ferry_status st, const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  return raise_message(st, text, FERRY_REFUSAL_NONE);
}

/* ---- element types ----------------------------------------------------------------- */

/* What a buffer holds, as Python sees it: ferry's kind, plus bool (ferry has no
 * boolean kind: a bool buffer is a uint8 buffer that NumPy sees as bool). */
typedef struct elem_type {
  ferry_kind kind;
  bool is_bool;
  size_t elem_size; /* bytes per element (custom: the record's) */
} elem_type;

static bool little_endian(void) {
  const uint16_t one = 1;
  return *(const uint8_t *)&one == 1;
}

/* The NumPy dtype string of an element type: "float32", "bool", "V12". */
static void dtype_name(elem_type t, char buf[32]) {
  if (t.is_bool) {
    snprintf(buf, 32, "bool");
    return;
  }
  switch (t.kind) {
  case FERRY_FLOAT16: snprintf(buf, 32, "float16"); return;
  case FERRY_BFLOAT16: snprintf(buf, 32, "uint16"); return; /* raw bits: NumPy has no bfloat16 */
  case FERRY_FLOAT32: snprintf(buf, 32, "float32"); return;
  case FERRY_FLOAT64: snprintf(buf, 32, "float64"); return;
  case FERRY_INT8: snprintf(buf, 32, "int8"); return;
  case FERRY_UINT8: snprintf(buf, 32, "uint8"); return;
  case FERRY_INT16: snprintf(buf, 32, "int16"); return;
  case FERRY_UINT16: snprintf(buf, 32, "uint16"); return;
  case FERRY_INT32: snprintf(buf, 32, "int32"); return;
  case FERRY_UINT32: snprintf(buf, 32, "uint32"); return;
  case FERRY_INT64: snprintf(buf, 32, "int64"); return;
  case FERRY_UINT64: snprintf(buf, 32, "uint64"); return;
  case FERRY_NATIVEINT: snprintf(buf, 32, "intp"); return;
  case FERRY_COMPLEX32: snprintf(buf, 32, "complex64"); return;
  case FERRY_COMPLEX64: snprintf(buf, 32, "complex128"); return;
  case FERRY_CHAR: snprintf(buf, 32, "uint8"); return;
  default: snprintf(buf, 32, "V%zu", t.elem_size); return;
  }
}

/* The element type of a NumPy dtype string ("<f4", "|b1", "|V12"); false when
 * ferry has none. */
static bool elem_type_of_dtype_str(const char *s, elem_type *out, const char **why) {
  *why = "ferry has no kind for it";
  char order = s[0];
  if (order == '>' && little_endian()) {
    *why = "it is big-endian (ferry's memory is in the machine's byte order)";
    return false;
  }
  char kind = s[1];
  long size = strtol(s + 2, NULL, 10);
  elem_type t = {.kind = FERRY_CUSTOM, .is_bool = false, .elem_size = (size_t)size};
  static const ferry_kind ints[] = {FERRY_INT8, FERRY_INT16, FERRY_INT32, FERRY_INT64};
  static const ferry_kind uints[] = {FERRY_UINT8, FERRY_UINT16, FERRY_UINT32, FERRY_UINT64};
  int width = size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : size == 8 ? 3 : -1;
  switch (kind) {
  case 'b':
    if (size != 1) return false;
    t.kind = FERRY_UINT8;
    t.is_bool = true;
    break;
  case 'i':
    if (width < 0) return false;
    t.kind = ints[width];
    break;
  case 'u':
    if (width < 0) return false;
    t.kind = uints[width];
    break;
  case 'f':
    if (width < 1) return false;
    t.kind = width == 1 ? FERRY_FLOAT16 : width == 2 ? FERRY_FLOAT32 : FERRY_FLOAT64;
    break;
  case 'c':
    if (size != 8 && size != 16) return false;
    t.kind = size == 8 ? FERRY_COMPLEX32 : FERRY_COMPLEX64;
    break;
  case 'V':
    if (size <= 0) return false;
    t.kind = FERRY_CUSTOM; /* records: a custom buffer of that element size */
    break;
  default: return false;
  }
  *out = t;
  return true;
}

/* The element type of a buffer-protocol format ("f", "<i", "Zd", "?") and item
 * size; false when ferry has none. */
static bool elem_type_of_format(const char *fmt, Py_ssize_t itemsize, elem_type *out, const char **why) {
  *why = "ferry has no kind for it";
  if (!fmt) fmt = "B";
  char order = fmt[0];
  if (order == '@' || order == '=' || order == '<' || order == '>' || order == '!') {
    if ((order == '>' || order == '!') == little_endian() || (order == '<' && !little_endian())) {
      *why = "it is not in the machine's byte order";
      return false;
    }
    fmt++;
  }
  elem_type t = {.kind = FERRY_CUSTOM, .is_bool = false, .elem_size = (size_t)itemsize};
  static const ferry_kind ints[] = {FERRY_INT8, FERRY_INT16, FERRY_INT32, FERRY_INT64};
  static const ferry_kind uints[] = {FERRY_UINT8, FERRY_UINT16, FERRY_UINT32, FERRY_UINT64};
  int width = itemsize == 1 ? 0 : itemsize == 2 ? 1 : itemsize == 4 ? 2 : itemsize == 8 ? 3 : -1;
  if (fmt[0] == 'Z' && (fmt[1] == 'f' || fmt[1] == 'd') && fmt[2] == '\0') {
    t.kind = fmt[1] == 'f' ? FERRY_COMPLEX32 : FERRY_COMPLEX64;
  } else if (fmt[0] != '\0' && fmt[1] == '\0') {
    switch (fmt[0]) {
    case '?':
      t.kind = FERRY_UINT8;
      t.is_bool = true;
      break;
    case 'b':
    case 'h':
    case 'i':
    case 'l':
    case 'q':
    case 'n':
      if (width < 0) return false;
      t.kind = ints[width];
      break;
    case 'B':
    case 'H':
    case 'I':
    case 'L':
    case 'Q':
    case 'N':
    case 'c':
      if (width < 0) return false;
      t.kind = uints[width];
      break;
    case 'e': t.kind = FERRY_FLOAT16; break;
    case 'f': t.kind = FERRY_FLOAT32; break;
    case 'd': t.kind = FERRY_FLOAT64; break;
    default: t.kind = FERRY_CUSTOM; break; /* records and the rest: only their size is known */
    }
  }
  /* Anything else (structs "T{...}", "12x"): a record of itemsize bytes. */
  *out = t;
  return true;
}

/* Can an array of element type `a` go to or from a buffer of element type `b`? */
static bool elem_types_match(elem_type a, elem_type b) {
  if (b.kind == FERRY_CUSTOM) return a.elem_size == b.elem_size; /* records: same size */
  if (a.is_bool != b.is_bool) return false;
  if (a.kind == b.kind) return true;
  /* ferry kinds NumPy shows as another: nativeint as intp, char as uint8, bfloat16 as its bits */
  if (b.kind == FERRY_NATIVEINT) return a.kind == (sizeof(intptr_t) == 8 ? FERRY_INT64 : FERRY_INT32);
  if (b.kind == FERRY_CHAR) return a.kind == FERRY_UINT8;
  if (b.kind == FERRY_BFLOAT16) return a.kind == FERRY_UINT16;
  return false;
}

/* ---- Device ------------------------------------------------------------------------- */

typedef struct DeviceObject {
  PyObject_HEAD ferry_device *dev;
  unsigned long session;
  ferry_device_info info;
  PyObject *name, *backend;
} DeviceObject;

static PyTypeObject DeviceType;

static bool device_live(DeviceObject *d) {
  if (d->session == session) return true;
  raise_format(FERRY_ERROR_INVALID_ARGUMENT,
               "device %zu (%s) belongs to a session that ferry.shutdown() ended; ask ferry.devices() again",
               d->info.index, PyUnicode_AsUTF8(d->backend));
  return false;
}

static PyObject *device_new(ferry_device *dev) {
  DeviceObject *d = PyObject_New(DeviceObject, &DeviceType);
  if (!d) return NULL;
  d->dev = dev;
  d->session = session;
  d->name = d->backend = NULL;
  ferry_status st;
  WITHOUT_GIL(st = ferry_device_info_get(dev, &d->info));
  if (st != FERRY_OK) {
    Py_DECREF(d);
    return raise_ferry(st);
  }
  d->name = PyUnicode_FromString(d->info.name);
  d->backend = PyUnicode_FromString(d->info.backend);
  if (!d->name || !d->backend) {
    Py_DECREF(d);
    return NULL;
  }
  return (PyObject *)d;
}

static void device_dealloc(DeviceObject *d) {
  Py_XDECREF(d->name);
  Py_XDECREF(d->backend);
  PyObject_Free(d);
}

/* The session's devices, made once. A borrowed reference. */
static PyObject *devices_list(void) {
  if (device_cache) return device_cache;
  ferry_status st;
  size_t n = 0;
  WITHOUT_GIL(st = ferry_init(); if (st == FERRY_OK) n = ferry_device_count());
  if (st != FERRY_OK) return raise_ferry(st);
  PyObject *list = PyList_New((Py_ssize_t)n);
  if (!list) return NULL;
  for (size_t i = 0; i < n; i++) {
    ferry_device *dev;
    WITHOUT_GIL(st = ferry_device_get(i, &dev));
    PyObject *d = st == FERRY_OK ? device_new(dev) : raise_ferry(st);
    if (!d) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, d);
  }
  device_cache = list;
  return list;
}

/* The Device object of a ferry device (new reference). */
static PyObject *device_object(const ferry_device *dev) {
  PyObject *list = devices_list();
  if (!list) return NULL;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
    DeviceObject *d = (DeviceObject *)PyList_GET_ITEM(list, i);
    if (d->dev == dev) {
      Py_INCREF(d);
      return (PyObject *)d;
    }
  }
  return raise_format(FERRY_ERROR_INVALID_ARGUMENT, "a device that is not among ferry.devices()");
}

static PyObject *device_repr(DeviceObject *d) {
  return PyUnicode_FromFormat("<ferry.Device %zu: %U %U%s>", d->info.index, d->backend, d->name,
                              d->session == session ? "" : " (stale: before ferry.shutdown())");
}

/* ---- Buffer ------------------------------------------------------------------------ */

typedef struct BufferObject {
  PyObject_HEAD ferry_buffer handle;
  PyObject *device; /* DeviceObject */
  PyObject *dtype;  /* numpy.dtype */
  elem_type type;
  size_t length;
  unsigned long session;
  bool freed;
  PyObject *weakrefs;
} BufferObject;

static PyTypeObject BufferType;

/* A Buffer object for a handle the caller owns (freed here on failure). */
static PyObject *buffer_new(ferry_buffer handle, PyObject *device, elem_type type, PyObject *dtype) {
  BufferObject *b = PyObject_New(BufferObject, &BufferType);
  if (!b) {
    WITHOUT_GIL(ferry_free(handle));
    return NULL;
  }
  b->handle = handle;
  b->type = type;
  b->length = ferry_size(handle);
  b->session = session;
  b->freed = false;
  b->weakrefs = NULL;
  Py_INCREF(device);
  b->device = device;
  if (dtype) {
    Py_INCREF(dtype);
    b->dtype = dtype;
  } else {
    char name[32];
    dtype_name(type, name);
    b->dtype = PyObject_CallFunction(numpy_dtype, "s", name);
    if (!b->dtype) {
      Py_DECREF(b);
      return NULL;
    }
  }
  return (PyObject *)b;
}

static void buffer_release(BufferObject *b) {
  /* A buffer of an earlier session is gone with it (and freeing it would start
   * ferry again). */
  if (!b->freed && b->session == session) {
    ferry_buffer h = b->handle;
    WITHOUT_GIL(ferry_free(h));
  }
  b->freed = true;
}

static void buffer_dealloc(BufferObject *b) {
  if (b->weakrefs) PyObject_ClearWeakRefs((PyObject *)b);
  buffer_release(b);
  Py_XDECREF(b->device);
  Py_XDECREF(b->dtype);
  PyObject_Free(b);
}

/* The buffer's handle is usable in this session; else raises StaleBufferError. */
static bool buffer_live(BufferObject *b) {
  if (!b->freed && b->session == session) return true;
  raise_format(FERRY_ERROR_STALE_BUFFER, "ferry.Buffer (%zu elements on %s): the buffer was freed%s", b->length,
               PyUnicode_AsUTF8(((DeviceObject *)b->device)->backend), b->freed ? "" : " by ferry.shutdown()");
  return false;
}

static PyObject *buffer_repr(BufferObject *b) {
  char name[32];
  dtype_name(b->type, name);
  DeviceObject *d = (DeviceObject *)b->device;
  return PyUnicode_FromFormat("<ferry.Buffer %zu x %s on device %zu (%U)%s>", b->length, name, d->info.index,
                              d->backend, b->freed || b->session != session ? ", freed" : "");
}

/* The array's contiguous bytes; raises on a non-contiguous array. */
static bool get_array(PyObject *array, Py_buffer *view, bool writable, const char *fn) {
  int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(array, view, flags) == 0) return true;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject *text = value ? PyObject_Str(value) : NULL;
  const char *reason = text ? PyUnicode_AsUTF8(text) : NULL;
  raise_format(FERRY_ERROR_INVALID_ARGUMENT,
               "%s: a %s object cannot be used: %s (ferry needs a C-contiguous%s array; numpy.ascontiguousarray "
               "makes one)",
               fn, Py_TYPE(array)->tp_name, reason ? reason : "no buffer protocol", writable ? ", writable" : "");
  Py_XDECREF(text);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return false;
}

/* Checks the array's element type against the buffer's; raises KindMismatchError. */
static bool check_array_type(const char *fn, const Py_buffer *view, BufferObject *b) {
  elem_type a;
  const char *why;
  char mine[32];
  dtype_name(b->type, mine);
  if (!elem_type_of_format(view->format, view->itemsize, &a, &why)) {
    raise_format(FERRY_ERROR_KIND_MISMATCH, "%s: the array's format '%s' cannot be used: %s (the buffer holds %s)", fn,
                 view->format ? view->format : "B", why, mine);
    return false;
  }
  if (!elem_types_match(a, b->type)) {
    char theirs[32];
    dtype_name(a, theirs);
    if (b->type.kind == FERRY_CUSTOM)
      raise_format(FERRY_ERROR_KIND_MISMATCH,
                   "%s: the array's elements have %zd bytes, the buffer's records %zu (a custom buffer takes arrays "
                   "of records of its size)",
                   fn, view->itemsize, b->type.elem_size);
    else
      raise_format(FERRY_ERROR_KIND_MISMATCH, "%s: the array is %s, the buffer holds %s (%zu elements on %s)", fn,
                   theirs, mine, b->length, PyUnicode_AsUTF8(((DeviceObject *)b->device)->backend));
    return false;
  }
  return true;
}

static size_t view_elements(const Py_buffer *view) {
  return view->itemsize > 0 ? (size_t)(view->len / view->itemsize) : 0;
}

/* Reads an `offset` keyword (elements, >= 0) into *out_bytes (bytes); false on error. */
static bool parse_offset(PyObject *obj, const BufferObject *b, const char *fn, size_t *out_elements,
                         size_t *out_bytes) {
  Py_ssize_t offset = PyLong_AsSsize_t(obj);
  if (offset == -1 && PyErr_Occurred()) return false;
  if (offset < 0) {
    raise_format(FERRY_ERROR_INVALID_ARGUMENT, "%s: offset %zd is negative", fn, offset);
    return false;
  }
  if ((size_t)offset > SIZE_MAX / b->type.elem_size) {
    raise_format(FERRY_ERROR_OVERFLOW, "%s: offset %zd elements of %zu bytes overflows size_t", fn, offset,
                 b->type.elem_size);
    return false;
  }
  *out_elements = (size_t)offset;
  *out_bytes = (size_t)offset * b->type.elem_size;
  return true;
}

/* ---- queues: what an asynchronous operation keeps alive ---------------------------- */

/* The array of an asynchronous transfer, held through its buffer view (so that
 * it can neither go nor be resized) until the operation has completed. A
 * queue's list is newest first, `seq` strictly decreasing; entries are dropped
 * only by a call that saw every operation submitted before it complete. */
typedef struct pending_op {
  struct pending_op *next;
  uint64_t seq;
  Py_buffer view;
} pending_op;

typedef struct QueueObject {
  PyObject_HEAD ferry_queue handle;
  PyObject *device; /* its Device */
  unsigned long session;
  bool is_default, destroyed;
  uint64_t next_seq; /* the seq of the next operation kept */
  pending_op *pending;
} QueueObject;

static PyTypeObject QueueType;

/* Drops what the operations numbered below `upto` kept. The list is cut first:
 * releasing a view may run Python code, which may submit to this queue. */
static void queue_release(QueueObject *q, uint64_t upto) {
  pending_op **link = &q->pending;
  while (*link && (*link)->seq >= upto)
    link = &(*link)->next;
  pending_op *old = *link;
  *link = NULL;
  while (old) {
    pending_op *next = old->next;
    PyBuffer_Release(&old->view);
    PyMem_Free(old);
    old = next;
  }
}

/* The queue's handle is usable; else raises StaleHandleError. */
static bool queue_live(QueueObject *q, const char *fn) {
  if (!q->destroyed && q->session == session) return true;
  if (q->session < settled_session) queue_release(q, UINT64_MAX); /* the shutdown waited for its work */
  raise_format(FERRY_ERROR_STALE_HANDLE, "%s: the queue (handle 0x%llx) was %s", fn, (unsigned long long)q->handle.id,
               q->destroyed ? "destroyed" : "released by ferry.shutdown()");
  return false;
}

/* A `queue=` argument: a ferry.Queue, or None for a synchronous call. */
static bool queue_arg(const char *fn, PyObject *obj, QueueObject **out) {
  *out = NULL;
  if (obj == Py_None) return true;
  if (!PyObject_TypeCheck(obj, &QueueType)) {
    PyErr_Format(PyExc_TypeError, "%s: queue must be a ferry.Queue or None, not %s", fn, Py_TYPE(obj)->tp_name);
    return false;
  }
  *out = (QueueObject *)obj;
  return true;
}

/* The arguments of write and read: one optional positional, an `offset` keyword. */
static bool parse_transfer_args(const char *fn, const char *first, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames, bool first_required, PyObject **out_first, PyObject **out_offset,
                                QueueObject **out_queue) {
  *out_first = NULL;
  *out_offset = NULL;
  *out_queue = NULL;
  if (nargs > 1 || (first_required && nargs < 1 && !kwnames)) {
    PyErr_Format(PyExc_TypeError, "%s takes %s (and offset=, queue=)", fn,
                 first_required ? "one array" : "at most one array");
    return false;
  }
  if (nargs == 1) *out_first = args[0];
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; i++) {
    PyObject *key = PyTuple_GET_ITEM(kwnames, i);
    if (PyUnicode_CompareWithASCIIString(key, "offset") == 0) {
      *out_offset = args[nargs + i];
    } else if (PyUnicode_CompareWithASCIIString(key, "queue") == 0) {
      if (!queue_arg(fn, args[nargs + i], out_queue)) return false;
    } else if (PyUnicode_CompareWithASCIIString(key, first) == 0 && !*out_first) {
      *out_first = args[nargs + i];
    } else {
      PyErr_Format(PyExc_TypeError, "%s got an unexpected keyword argument '%U'", fn, key);
      return false;
    }
  }
  if (*out_offset == Py_None) *out_offset = NULL;
  if (first_required && !*out_first) {
    PyErr_Format(PyExc_TypeError, "%s needs the array", fn);
    return false;
  }
  return true;
}

/* Moves the bytes between `array` and the buffer, in either direction: the
 * whole buffer with exact sizes, or the array's bytes at `offset` bytes (a
 * range) when `ranged`. The GIL is released while the bytes move. With a queue,
 * the transfer is submitted to it and the array's view is kept until the
 * operation has completed. */
static bool transfer(const char *fn, BufferObject *b, PyObject *array, bool to_host, bool ranged, size_t offset,
                     QueueObject *q) {
  if (q && !queue_live(q, fn)) return false;
  Py_buffer view;
  if (!get_array(array, &view, to_host, fn)) return false;
  if (!check_array_type(fn, &view, b)) {
    PyBuffer_Release(&view);
    return false;
  }
  ferry_status st;
  size_t n = view_elements(&view), bytes = (size_t)view.len;
  ferry_kind kind = b->type.kind;
  ferry_buffer h = b->handle;
  pending_op *keep = NULL;
  if (q) {
    /* Made before the submission: once submitted, the view must be kept. */
    if (!(keep = PyMem_Malloc(sizeof *keep))) {
      PyBuffer_Release(&view);
      PyErr_NoMemory();
      return false;
    }
    size_t whole = b->length * b->type.elem_size;
    if (kind == FERRY_CUSTOM && !ranged && bytes != whole) {
      PyMem_Free(keep);
      PyBuffer_Release(&view);
      raise_format(FERRY_ERROR_SIZE_MISMATCH, "%s: the array has %zu bytes, the buffer %zu (%zu records of %zu bytes)",
                   fn, bytes, whole, b->length, b->type.elem_size);
      return false;
    }
    ferry_queue qh = q->handle;
    Py_BEGIN_ALLOW_THREADS;
    if (ranged || kind == FERRY_CUSTOM)
      st = to_host ? ferry_read_async(qh, h, offset, view.buf, bytes)
                   : ferry_write_async(qh, h, offset, view.buf, bytes);
    else
      st = to_host ? ferry_device_to_host_async(qh, h, ferry_array_of(view.buf, n, kind))
                   : ferry_host_to_device_async(qh, ferry_array_of(view.buf, n, kind), h);
    Py_END_ALLOW_THREADS;
    if (st == FERRY_OK) {
      keep->seq = q->next_seq++;
      keep->view = view;
      keep->next = q->pending;
      q->pending = keep;
      return true;
    }
    PyMem_Free(keep);
  } else {
    Py_BEGIN_ALLOW_THREADS;
    if (ranged)
      st = to_host ? ferry_read(h, offset, view.buf, bytes) : ferry_write(h, offset, view.buf, bytes);
    else if (kind == FERRY_CUSTOM)
      st = to_host ? ferry_device_to_host_ptr(h, view.buf, bytes) : ferry_host_ptr_to_device(view.buf, bytes, h);
    else
      st = to_host ? ferry_device_to_host(h, ferry_array_of(view.buf, n, kind))
                   : ferry_host_to_device(ferry_array_of(view.buf, n, kind), h);
    Py_END_ALLOW_THREADS;
  }
  PyBuffer_Release(&view);
  if (st != FERRY_OK) raise_ferry(st);
  return st == FERRY_OK;
}

PyDoc_STRVAR(buffer_write_doc,
             "write(array, /, *, offset=None, queue=None)\n--\n\n"
             "Copies the array into the buffer. The array must have the buffer's dtype (any shape,\n"
             "C-contiguous); nothing is converted or clamped. Without offset, it must have exactly the\n"
             "buffer's number of elements (SizeMismatchError); with offset, its elements go to\n"
             "elements offset.. of the buffer (OutOfRangeError past the end). The GIL is released\n"
             "while the bytes move. With queue (a ferry.Queue of the buffer's device), the write is\n"
             "submitted to the queue and the call returns at once; the array is kept alive (and\n"
             "cannot be resized) until the write has completed: do not change it before then.");

static PyObject *buffer_write(BufferObject *b, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char fn[] = "Buffer.write";
  PyObject *array, *offset_obj;
  QueueObject *q;
  if (!parse_transfer_args(fn, "array", args, nargs, kwnames, true, &array, &offset_obj, &q)) return NULL;
  if (!buffer_live(b)) return NULL;
  size_t offset_elements = 0, offset = 0;
  if (offset_obj && !parse_offset(offset_obj, b, fn, &offset_elements, &offset)) return NULL;
  if (!transfer(fn, b, array, false, offset_obj != NULL, offset, q)) return NULL;
  Py_RETURN_NONE;
}

PyDoc_STRVAR(buffer_read_doc,
             "read(out=None, *, offset=None, queue=None)\n--\n\n"
             "Copies the buffer into `out` (a C-contiguous, writable array of the buffer's dtype) and\n"
             "returns it; without `out`, into a new 1-D NumPy array. Without offset, `out` must have\n"
             "exactly the buffer's number of elements; with offset, `out` receives elements offset..\n"
             "(without `out`: offset to the end). The GIL is released while the bytes move. With queue\n"
             "(a ferry.Queue of the buffer's device), the read is submitted to the queue and the array\n"
             "is returned at once: its contents are the buffer's once the queue (or an event recorded\n"
             "after the read) has been synchronised; until then it is kept alive and must not be used.");

static PyObject *buffer_read(BufferObject *b, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char fn[] = "Buffer.read";
  PyObject *out, *offset_obj;
  QueueObject *q;
  if (!parse_transfer_args(fn, "out", args, nargs, kwnames, false, &out, &offset_obj, &q)) return NULL;
  if (!buffer_live(b)) return NULL;
  if (q && !queue_live(q, fn)) return NULL;
  size_t offset_elements = 0, offset = 0;
  if (offset_obj && !parse_offset(offset_obj, b, fn, &offset_elements, &offset)) return NULL;
  if (out == NULL || out == Py_None) {
    if (offset_elements > b->length) { /* ferry's own sentence for an offset past the end */
      ferry_status st = ferry_read(b->handle, offset, NULL, 0);
      return raise_ferry(st == FERRY_OK ? FERRY_ERROR_OUT_OF_RANGE : st);
    }
    out = PyObject_CallFunction(numpy_empty, "nO", (Py_ssize_t)(b->length - offset_elements), b->dtype);
  } else {
    Py_INCREF(out);
  }
  if (!out) return NULL;
  if (!transfer(fn, b, out, true, offset_obj != NULL, offset, q)) {
    Py_DECREF(out);
    return NULL;
  }
  return out;
}

PyDoc_STRVAR(buffer_copy_to_doc, "copy_to(other, /, *, queue=None)\n--\n\n"
                                 "Copies this buffer into `other`, on any device: the same dtype and length.\n"
                                 "With queue (a ferry.Queue of either buffer's device), the copy is submitted\n"
                                 "to it and the call returns at once.");

static PyObject *buffer_copy_to(BufferObject *b, PyObject *args, PyObject *kwargs) {
  static char *names[] = {"", "queue", NULL};
  PyObject *other, *queue_obj = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$O:copy_to", names, &other, &queue_obj)) return NULL;
  QueueObject *q;
  if (!queue_arg("Buffer.copy_to", queue_obj, &q)) return NULL;
  if (!PyObject_TypeCheck(other, &BufferType)) {
    PyErr_Format(PyExc_TypeError, "Buffer.copy_to needs a ferry.Buffer, not %s", Py_TYPE(other)->tp_name);
    return NULL;
  }
  BufferObject *o = (BufferObject *)other;
  if (!buffer_live(b) || !buffer_live(o)) return NULL;
  if (b->type.is_bool != o->type.is_bool) {
    char a[32], c[32];
    dtype_name(b->type, a);
    dtype_name(o->type, c);
    return raise_format(FERRY_ERROR_KIND_MISMATCH, "Buffer.copy_to: this buffer holds %s, the other %s", a, c);
  }
  if (q && !queue_live(q, "Buffer.copy_to")) return NULL;
  ferry_status st;
  ferry_buffer src = b->handle, dst = o->handle;
  ferry_queue qh = q ? q->handle : FERRY_NULL_QUEUE;
  Py_BEGIN_ALLOW_THREADS;
  st = q ? ferry_device_to_device_async(qh, src, dst) : ferry_device_to_device(src, dst);
  Py_END_ALLOW_THREADS;
  if (st != FERRY_OK) return raise_ferry(st);
  Py_RETURN_NONE;
}

PyDoc_STRVAR(buffer_free_doc, "free()\n--\n\n"
                              "Releases the buffer; later use raises StaleBufferError. Freeing again does\n"
                              "nothing. Memory that a DLPack consumer or a memoryview still holds stays until\n"
                              "they let go of it.");

static PyObject *buffer_free(BufferObject *b, PyObject *unused) {
  (void)unused;
  if (!b->freed && b->session == session) {
    ferry_status st;
    ferry_buffer h = b->handle;
    b->freed = true;
    WITHOUT_GIL(st = ferry_free(h));
    if (st != FERRY_OK && st != FERRY_ERROR_STALE_BUFFER) return raise_ferry(st);
  }
  b->freed = true;
  Py_RETURN_NONE;
}

static PyObject *buffer_enter(BufferObject *b, PyObject *unused) {
  (void)unused;
  if (!buffer_live(b)) return NULL;
  Py_INCREF(b);
  return (PyObject *)b;
}

static PyObject *buffer_exit(BufferObject *b, PyObject *args) {
  (void)args;
  PyObject *r = buffer_free(b, NULL);
  if (!r) return NULL;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

/* ---- DLPack: producing ------------------------------------------------------------------ */

static void capsule_legacy_destructor(PyObject *capsule) {
  /* Renamed by a consumer that took it; a capsule nobody took frees itself. */
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  ferry_dl_managed_tensor *t = PyCapsule_GetPointer(capsule, "dltensor");
  if (t && t->deleter) t->deleter(t);
}

static void capsule_versioned_destructor(PyObject *capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor_versioned")) return;
  ferry_dl_managed_tensor_versioned *t = PyCapsule_GetPointer(capsule, "dltensor_versioned");
  if (t && t->deleter) t->deleter(t);
}

/* Is `obj` a tuple of two ints, as the array API has its pairs? Else TypeError;
 * `what` names the argument in the sentence, `shape` its fields. */
static bool is_int_pair(PyObject *obj, const char *what, const char *shape) {
  if (PyTuple_Check(obj) && PyTuple_GET_SIZE(obj) == 2 && PyLong_Check(PyTuple_GET_ITEM(obj, 0)) &&
      PyLong_Check(PyTuple_GET_ITEM(obj, 1)))
    return true;
  PyErr_Format(PyExc_TypeError, "%s must be a tuple of two ints %s, not %R", what, shape, obj);
  return false;
}

/* Item i of an int pair, in [lo, hi] (ValueError naming `what` if not); with
 * `saturate`, a value above the range reads as hi. */
static bool pair_item(PyObject *pair, Py_ssize_t i, const char *what, long long lo, long long hi, bool saturate,
                      long long *out) {
  PyObject *item = PyTuple_GET_ITEM(pair, i);
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
  if (v == -1 && PyErr_Occurred()) return false;
  if (saturate && (overflow > 0 || v > hi)) {
    *out = hi;
    return true;
  }
  if (overflow || v < lo || v > hi) {
    PyErr_Format(PyExc_ValueError, "%s %R: %S is out of range (%lld to %lld)", what, pair, item, lo, hi);
    return false;
  }
  *out = v;
  return true;
}

/* Reads a (device_type, device_id) pair (DLDevice's two int32 fields). */
static bool parse_dl_device(PyObject *obj, const char *what, ferry_dl_device *out) {
  long long type, id;
  if (!is_int_pair(obj, what, "(device_type, device_id)") ||
      !pair_item(obj, 0, what, INT32_MIN, INT32_MAX, false, &type) ||
      !pair_item(obj, 1, what, INT32_MIN, INT32_MAX, false, &id))
    return false;
  *out = (ferry_dl_device){(int32_t)type, (int32_t)id};
  return true;
}

/* Reads __dlpack__'s max_version; *versioned: major 1 or later (any, however large). */
static bool parse_max_version(PyObject *obj, bool *versioned) {
  long long major, minor;
  if (!is_int_pair(obj, "max_version", "(major, minor)") ||
      !pair_item(obj, 0, "max_version", 0, LLONG_MAX, true, &major) ||
      !pair_item(obj, 1, "max_version", 0, LLONG_MAX, true, &minor))
    return false;
  *versioned = major >= 1;
  return true;
}

/* Reads __dlpack__'s stream: None, or an int that can be a stream (-1: none,
 * else a handle of 64 bits, in *handle). *wait is false for -1 only: the
 * consumer asks for no synchronisation. */
static bool parse_stream(PyObject *obj, bool *wait, uint64_t *handle) {
  *wait = true;
  *handle = 0;
  if (obj == Py_None) return true;
  if (!PyLong_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "__dlpack__: stream must be an int or None, not %R", obj);
    return false;
  }
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (v == -1 && PyErr_Occurred()) return false;
  if (overflow > 0) {
    unsigned long long u = PyLong_AsUnsignedLongLong(obj);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
      PyErr_Clear();
      PyErr_Format(PyExc_ValueError, "__dlpack__: stream %S is no stream: a stream is -1 (none) or a 64-bit handle",
                   obj);
      return false;
    }
    *handle = (uint64_t)u;
  } else if (overflow < 0 || v < -1) {
    PyErr_Format(PyExc_ValueError, "__dlpack__: stream %S is no stream: a stream is -1 (none) or a 64-bit handle", obj);
    return false;
  }
  *wait = overflow > 0 || v != -1;
  if (overflow == 0 && v >= 0) *handle = (uint64_t)v;
  return true;
}

PyDoc_STRVAR(buffer_dlpack_doc,
             "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
             "The buffer as a DLPack capsule (the array API's protocol): \"dltensor_versioned\" when\n"
             "max_version is (1, x) or later, else \"dltensor\". The consumer shares the buffer's memory,\n"
             "which stays valid until the consumer releases it, also after free(). copy=True, or a\n"
             "dl_device other than the buffer's, exports a copy (on that device); copy=False refuses\n"
             "to copy (BufferError). Unless stream is -1, the device's queued work (ferry's queues; on\n"
             "CUDA the program's work too) is waited for first, so that the consumer may use the\n"
             "memory on any stream of its; stream=-1 waits for nothing. A stream for an OpenCL, Vulkan\n"
             "or Metal buffer, whose DLPack data is an object handle, is refused (BufferError): DLPack\n"
             "defines none, and mpi4py passes one before it takes the handle for host memory.\n"
             "max_version and dl_device are tuples of two ints and stream an int or None (TypeError\n"
             "otherwise; ValueError for values no version, device or stream can have).");

static PyObject *buffer_dlpack(BufferObject *b, PyObject *args, PyObject *kwargs) {
  static char *names[] = {"stream", "max_version", "dl_device", "copy", NULL};
  PyObject *stream = Py_None, *max_version = Py_None, *dl_device_obj = Py_None, *copy_obj = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOO:__dlpack__", names, &stream, &max_version, &dl_device_obj,
                                   &copy_obj))
    return NULL;
  if (!buffer_live(b)) return NULL;
  DeviceObject *d = (DeviceObject *)b->device;
  if (!device_live(d)) return NULL;
  bool versioned = false, wait = true;
  uint64_t stream_handle = 0;
  if (max_version != Py_None && !parse_max_version(max_version, &versioned)) return NULL;
  int copy = copy_obj == Py_None ? -1 : PyObject_IsTrue(copy_obj);
  if (copy_obj != Py_None && copy < 0) return NULL;
  if (!parse_stream(stream, &wait, &stream_handle)) return NULL;
  ferry_dl_device own;
  ferry_device *target = d->dev;
  ferry_status st;
  WITHOUT_GIL(st = ferry_dlpack_device(target, &own));
  if (st != FERRY_OK) return raise_ferry(st);
  /* The array API defines streams for CUDA and ROCm only. An OpenCL, Vulkan or
   * Metal buffer's DLPack data is an object handle, and the consumer that passes
   * a stream for one anyway (mpi4py 3: Comm.Send and friends call
   * __dlpack__(stream=-1) on any device that is not the CPU's) hands that handle
   * to MPI as if it were host memory: wrong bytes, silently. Refused, loudly. */
  bool handle_data =
      own.device_type == FERRY_DL_OPENCL || own.device_type == FERRY_DL_VULKAN || own.device_type == FERRY_DL_METAL;
  if (stream != Py_None && handle_data && dl_device_obj == Py_None) {
    PyErr_Format(PyExc_BufferError,
                 "__dlpack__: stream=%S for a buffer on DLPack device (%d, %d) (%s): its DLPack data is the "
                 "buffer's %s, not memory the CPU can read, and DLPack defines no streams for it. A consumer "
                 "that passes one takes the handle for host memory (mpi4py's Comm.Send, Recv and the other "
                 "buffer calls do): move the buffer with ferry.mpi, or read it into a NumPy array first",
                 stream, own.device_type, own.device_id,
                 own.device_type == FERRY_DL_OPENCL   ? "OpenCL"
                 : own.device_type == FERRY_DL_VULKAN ? "Vulkan"
                                                      : "Metal",
                 own.device_type == FERRY_DL_OPENCL   ? "cl_mem"
                 : own.device_type == FERRY_DL_VULKAN ? "VkBuffer"
                                                      : "id<MTLBuffer>");
    return NULL;
  }
  bool need_copy = copy == 1;
  if (dl_device_obj != Py_None) {
    ferry_dl_device want;
    if (!parse_dl_device(dl_device_obj, "dl_device", &want)) return NULL;
    if (want.device_type != own.device_type || want.device_id != own.device_id) {
      if (copy == 0) {
        PyErr_Format(PyExc_BufferError,
                     "__dlpack__: the buffer is on DLPack device (%d, %d); (%d, %d) needs a copy, and copy=False",
                     own.device_type, own.device_id, want.device_type, want.device_id);
        return NULL;
      }
      WITHOUT_GIL(st = ferry_dlpack_find_device(want, &target));
      if (st != FERRY_OK) {
        PyErr_Format(PyExc_BufferError, "__dlpack__: %s", ferry_last_error());
        return NULL;
      }
      need_copy = true;
    }
  }
  /* Unless the consumer asks for no synchronisation (stream=-1), the consumer's
   * work sees everything ferry's queues were given before this call. On CUDA, as
   * the array API says: the consumer's stream (None: the legacy default stream, 1;
   * 2: the per-thread default stream; 0 is ambiguous and refused) waits on the
   * device for an event of each busy queue; this thread does not wait. Elsewhere,
   * and for an export that copies, the device's work is waited for here, on the
   * host, without the GIL. */
  if (wait && own.device_type == FERRY_DL_CUDA && !need_copy) {
    if (stream != Py_None && stream_handle == 0) {
      PyErr_SetString(PyExc_ValueError, "__dlpack__: stream=0 on CUDA is ambiguous (the array API refuses it): pass "
                                        "1 for the legacy default stream, 2 for the per-thread one, or a CUstream");
      return NULL;
    }
    uintptr_t consumer = stream == Py_None ? 1 : (uintptr_t)stream_handle;
    ferry_device *dev = d->dev;
    WITHOUT_GIL(st = ferry__companion_native_wait(dev, consumer, "__dlpack__"));
    if (st != FERRY_OK) return raise_ferry(st);
  } else if (wait) {
    ferry_device *dev = d->dev;
    Py_BEGIN_ALLOW_THREADS;
    st = ferry_device_synchronize(dev);
    Py_END_ALLOW_THREADS;
    if (st != FERRY_OK) return raise_ferry(st);
  }
  ferry_buffer source = b->handle;
  if (need_copy) {
    ferry_buffer tmp;
    Py_BEGIN_ALLOW_THREADS;
    if (b->type.kind == FERRY_CUSTOM)
      st = ferry_alloc_custom(target, b->length, b->type.elem_size, &tmp);
    else
      st = ferry_alloc(target, b->length, b->type.kind, &tmp);
    if (st == FERRY_OK && (st = ferry_device_to_device(b->handle, tmp)) != FERRY_OK)
      ferry_free(tmp); /* succeeds, and leaves the copy's sentence as it was */
    Py_END_ALLOW_THREADS;
    if (st != FERRY_OK) return raise_ferry(st);
    source = tmp;
  }
  PyObject *capsule;
  if (versioned) {
    ferry_dl_managed_tensor_versioned *t = NULL;
    WITHOUT_GIL(st = ferry_dlpack_export_versioned(source, &t);
                if (need_copy) ferry_free(source)); /* the tensor holds the copy */
    if (st != FERRY_OK) return raise_ferry(st);
    if (b->type.is_bool) t->dl_tensor.dtype.code = FERRY_DL_BOOL;
    if (need_copy) t->flags |= FERRY_DL_FLAG_IS_COPIED;
    capsule = PyCapsule_New(t, "dltensor_versioned", capsule_versioned_destructor);
    if (!capsule) t->deleter(t);
  } else {
    ferry_dl_managed_tensor *t = NULL;
    WITHOUT_GIL(st = ferry_dlpack_export(source, &t); if (need_copy) ferry_free(source));
    if (st != FERRY_OK) return raise_ferry(st);
    /* bool stays uint8 here: consumers of unversioned capsules (NumPy 1.x) predate kDLBool. */
    capsule = PyCapsule_New(t, "dltensor", capsule_legacy_destructor);
    if (!capsule) t->deleter(t);
  }
  return capsule;
}

PyDoc_STRVAR(buffer_dlpack_device_doc, "__dlpack_device__()\n--\n\n"
                                       "The buffer's DLPack device: (device_type, device_id), e.g. (1, 0) for\n"
                                       "host memory, (2, ordinal) for CUDA.");

static PyObject *buffer_dlpack_device(BufferObject *b, PyObject *unused) {
  (void)unused;
  DeviceObject *d = (DeviceObject *)b->device;
  if (!device_live(d)) return NULL;
  ferry_dl_device dl;
  ferry_device *dev = d->dev;
  ferry_status st;
  WITHOUT_GIL(st = ferry_dlpack_device(dev, &dl));
  if (st != FERRY_OK) return raise_ferry(st);
  return Py_BuildValue("(ii)", (int)dl.device_type, (int)dl.device_id);
}

/* ---- the buffer protocol (host memory only) ---------------------------------------------- */

static const char *format_of(elem_type t) {
  if (t.is_bool) return "?";
  switch (t.kind) {
  case FERRY_FLOAT16: return "e";
  case FERRY_FLOAT32: return "f";
  case FERRY_FLOAT64: return "d";
  case FERRY_INT8: return "b";
  case FERRY_INT16: return "h";
  case FERRY_INT32: return "i";
  case FERRY_INT64: return sizeof(long) == 8 ? "l" : "q";
  case FERRY_NATIVEINT: return "n";
  case FERRY_UINT16:
  case FERRY_BFLOAT16: return "H";
  case FERRY_UINT32: return "I";
  case FERRY_UINT64: return sizeof(long) == 8 ? "L" : "Q";
  case FERRY_COMPLEX32: return "Zf";
  case FERRY_COMPLEX64: return "Zd";
  default: return "B"; /* uint8, char; custom records as bytes */
  }
}

/* What a view of a buffer holds: the DLPack export that keeps the memory, and
 * the view's shape and strides. */
typedef struct view_hold {
  ferry_dl_managed_tensor *tensor;
  Py_ssize_t shape[1], strides[1];
} view_hold;

static int buffer_getbuffer(BufferObject *b, Py_buffer *view, int flags) {
  if (!buffer_live(b)) return -1;
  DeviceObject *d = (DeviceObject *)b->device;
  if (!d->info.zero_copy) {
    PyErr_Format(PyExc_BufferError,
                 "ferry.Buffer on %s device %U: its memory is not host memory, so it has no buffer protocol; use "
                 "read() or DLPack",
                 PyUnicode_AsUTF8(d->backend), d->name);
    return -1;
  }
  view_hold *hold = PyMem_Malloc(sizeof *hold);
  if (!hold) {
    PyErr_NoMemory();
    return -1;
  }
  /* A DLPack export holds the memory while the view exists, also past free(). */
  ferry_status st;
  ferry_buffer h = b->handle;
  WITHOUT_GIL(st = ferry_dlpack_export(h, &hold->tensor));
  if (st != FERRY_OK) {
    PyMem_Free(hold);
    raise_ferry(st);
    return -1;
  }
  bool custom = b->type.kind == FERRY_CUSTOM; /* records as bytes */
  Py_ssize_t itemsize = custom ? 1 : (Py_ssize_t)b->type.elem_size;
  Py_ssize_t bytes = (Py_ssize_t)(b->length * b->type.elem_size);
  hold->shape[0] = itemsize ? bytes / itemsize : 0;
  hold->strides[0] = itemsize;
  view->obj = (PyObject *)b;
  Py_INCREF(b);
  view->buf = hold->tensor->dl_tensor.data;
  view->len = bytes;
  view->readonly = 0;
  view->itemsize = itemsize;
  view->format = (flags & PyBUF_FORMAT) ? (char *)format_of(b->type) : NULL;
  view->ndim = 1;
  view->shape = (flags & PyBUF_ND) ? hold->shape : NULL;
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? hold->strides : NULL;
  view->suboffsets = NULL;
  view->internal = hold;
  return 0;
}

static void buffer_releasebuffer(BufferObject *b, Py_buffer *view) {
  (void)b;
  view_hold *hold = view->internal;
  if (hold) {
    hold->tensor->deleter(hold->tensor);
    PyMem_Free(hold);
  }
  view->internal = NULL;
}

static PyBufferProcs buffer_as_buffer = {
    .bf_getbuffer = (getbufferproc)buffer_getbuffer,
    .bf_releasebuffer = (releasebufferproc)buffer_releasebuffer,
};

PyDoc_STRVAR(buffer_array_doc,
             "__array__(dtype=None, copy=None)\n--\n\n"
             "NumPy's implicit conversion (numpy.asarray(buf), numpy.array(buf)). On host memory\n"
             "(native, checked): a writable view of the buffer's memory, the memory numpy.from_dlpack(buf)\n"
             "shares (records as bytes, bfloat16 as its uint16 bits); dtype converts (a copy; ValueError\n"
             "with copy=False), copy=True copies. Device memory is never converted implicitly (as in\n"
             "CuPy): TypeError, naming buf.read(), the explicit copy into a new NumPy array.");

static PyObject *buffer_array(BufferObject *b, PyObject *args, PyObject *kwargs) {
  static char *names[] = {"dtype", "copy", NULL};
  PyObject *dtype = Py_None, *copy_obj = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:__array__", names, &dtype, &copy_obj)) return NULL;
  if (!buffer_live(b)) return NULL;
  DeviceObject *d = (DeviceObject *)b->device;
  if (!d->info.zero_copy) {
    char name[32];
    dtype_name(b->type, name);
    PyErr_Format(PyExc_TypeError,
                 "ferry.Buffer of %zu %s on %s device %U: device memory is not converted to a NumPy array "
                 "implicitly; buf.read() copies it into a new one (or pass it by DLPack to an array library of "
                 "that device)",
                 b->length, name, PyUnicode_AsUTF8(d->backend), d->name);
    return NULL;
  }
  int copy = copy_obj == Py_None ? -1 : PyObject_IsTrue(copy_obj);
  if (copy_obj != Py_None && copy < 0) return NULL;
  /* The buffer protocol's view: what numpy.asarray(buf) itself takes first. */
  PyObject *view = PyMemoryView_FromObject((PyObject *)b);
  PyObject *array = view ? PyObject_CallOneArg(numpy_asarray, view) : NULL;
  Py_XDECREF(view);
  if (!array) return NULL;
  if (dtype == Py_None && copy != 1) return array;
  PyObject *want = dtype == Py_None ? PyObject_GetAttrString(array, "dtype") : PyObject_CallOneArg(numpy_dtype, dtype);
  PyObject *have = want ? PyObject_GetAttrString(array, "dtype") : NULL;
  int same = have ? PyObject_RichCompareBool(want, have, Py_EQ) : -1;
  Py_XDECREF(have);
  PyObject *result = NULL;
  if (same < 0) {
    /* the error is set */
  } else if (!same && copy == 0) {
    PyErr_Format(PyExc_ValueError, "__array__: the buffer holds %R; %R needs a copy, and copy=False", b->dtype, want);
  } else if (same && copy != 1) {
    Py_INCREF(array);
    result = array;
  } else {
    result = PyObject_CallMethod(array, "astype", "O", want); /* a new array */
  }
  Py_XDECREF(want);
  Py_DECREF(array);
  return result;
}

/* ---- Buffer properties ------------------------------------------------------------------- */

static PyObject *buffer_get_device(BufferObject *b, void *unused) {
  (void)unused;
  Py_INCREF(b->device);
  return b->device;
}

static PyObject *buffer_get_dtype(BufferObject *b, void *unused) {
  (void)unused;
  Py_INCREF(b->dtype);
  return b->dtype;
}

static PyObject *buffer_get_kind(BufferObject *b, void *unused) {
  (void)unused;
  return PyUnicode_FromString(b->type.is_bool ? "bool" : ferry_kind_name(b->type.kind));
}

static PyObject *buffer_get_size(BufferObject *b, void *unused) {
  (void)unused;
  return PyLong_FromSize_t(b->length);
}

static PyObject *buffer_get_shape(BufferObject *b, void *unused) {
  (void)unused;
  return Py_BuildValue("(n)", (Py_ssize_t)b->length);
}

static PyObject *buffer_get_itemsize(BufferObject *b, void *unused) {
  (void)unused;
  return PyLong_FromSize_t(b->type.elem_size);
}

static PyObject *buffer_get_nbytes(BufferObject *b, void *unused) {
  (void)unused;
  return PyLong_FromSize_t(b->length * b->type.elem_size);
}

static PyObject *buffer_get_device_ptr(BufferObject *b, void *unused) {
  (void)unused;
  if (!buffer_live(b)) return NULL;
  return PyLong_FromSize_t((size_t)ferry_device_ptr(b->handle));
}

static PyObject *buffer_get_is_zero_copy(BufferObject *b, void *unused) {
  (void)unused;
  if (!buffer_live(b)) return NULL;
  return PyBool_FromLong(ferry_is_zero_copy(b->handle));
}

static PyObject *buffer_get_freed(BufferObject *b, void *unused) {
  (void)unused;
  return PyBool_FromLong(b->freed || b->session != session);
}

static PyObject *buffer_get_handle(BufferObject *b, void *unused) {
  (void)unused;
  return PyLong_FromUnsignedLongLong(b->handle.id);
}

static Py_ssize_t buffer_len(BufferObject *b) { return (Py_ssize_t)b->length; }

static PySequenceMethods buffer_as_sequence = {.sq_length = (lenfunc)buffer_len};

static PyMethodDef buffer_methods[] = {
    {"write", (PyCFunction)(void (*)(void))buffer_write, METH_FASTCALL | METH_KEYWORDS, buffer_write_doc},
    {"read", (PyCFunction)(void (*)(void))buffer_read, METH_FASTCALL | METH_KEYWORDS, buffer_read_doc},
    {"copy_to", (PyCFunction)(void (*)(void))buffer_copy_to, METH_VARARGS | METH_KEYWORDS, buffer_copy_to_doc},
    {"free", (PyCFunction)buffer_free, METH_NOARGS, buffer_free_doc},
    {"__enter__", (PyCFunction)buffer_enter, METH_NOARGS, "Returns the buffer; `with` frees it at exit."},
    {"__exit__", (PyCFunction)buffer_exit, METH_VARARGS, "Frees the buffer."},
    {"__dlpack__", (PyCFunction)(void (*)(void))buffer_dlpack, METH_VARARGS | METH_KEYWORDS, buffer_dlpack_doc},
    {"__dlpack_device__", (PyCFunction)buffer_dlpack_device, METH_NOARGS, buffer_dlpack_device_doc},
    {"__array__", (PyCFunction)(void (*)(void))buffer_array, METH_VARARGS | METH_KEYWORDS, buffer_array_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef buffer_getset[] = {
    {"device", (getter)buffer_get_device, NULL, "The Device the buffer is on.", NULL},
    {"dtype", (getter)buffer_get_dtype, NULL, "The NumPy dtype of its elements.", NULL},
    {"kind", (getter)buffer_get_kind, NULL, "ferry's kind name: \"float32\", \"bool\", \"custom\".", NULL},
    {"size", (getter)buffer_get_size, NULL, "Number of elements (also len(buffer)).", NULL},
    {"shape", (getter)buffer_get_shape, NULL, "(size,)", NULL},
    {"itemsize", (getter)buffer_get_itemsize, NULL, "Bytes per element.", NULL},
    {"nbytes", (getter)buffer_get_nbytes, NULL, "size x itemsize.", NULL},
    {"device_ptr", (getter)buffer_get_device_ptr, NULL,
     "The native handle: CUdeviceptr, cl_mem, VkBuffer, id<MTLBuffer>, or the host address.", NULL},
    {"is_zero_copy", (getter)buffer_get_is_zero_copy, NULL,
     "True when the buffer IS host memory, with nothing to synchronise: alloc_zero_copy, and\n"
     "alloc_host_ptr or host memory from DLPack on native and checked. False for host-pointer\n"
     "buffers on devices with memory of their own (OpenCL, CUDA, Vulkan: their host access goes\n"
     "through transfers that synchronise) and for device memory.",
     NULL},
    {"freed", (getter)buffer_get_freed, NULL, "True once free() (or ferry.shutdown()) released it.", NULL},
    {"handle", (getter)buffer_get_handle, NULL, "The ferry_buffer handle, for C code in the same process.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Buffer",
    .tp_basicsize = sizeof(BufferObject),
    .tp_dealloc = (destructor)buffer_dealloc,
    .tp_repr = (reprfunc)buffer_repr,
    .tp_as_sequence = &buffer_as_sequence,
    .tp_as_buffer = &buffer_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A ferry buffer: a typed, one-dimensional block of memory on a Device.\n\n"
              "Made by Device.alloc, Device.alloc_zero_copy, Device.alloc_host_ptr and ferry.from_dlpack.",
    .tp_weaklistoffset = offsetof(BufferObject, weakrefs),
    .tp_methods = buffer_methods,
    .tp_getset = buffer_getset,
};

/* ---- Device methods ------------------------------------------------------------------------ */

/* The element type and NumPy dtype asked for ("float32", numpy.float32, a dtype, "bfloat16"). */
static bool parse_dtype(PyObject *obj, elem_type *out, PyObject **out_dtype) {
  if (PyUnicode_Check(obj) && PyUnicode_CompareWithASCIIString(obj, "bfloat16") == 0) {
    *out = (elem_type){.kind = FERRY_BFLOAT16, .elem_size = 2};
    *out_dtype = PyObject_CallFunction(numpy_dtype, "s", "uint16");
    return *out_dtype != NULL;
  }
  PyObject *dtype = PyObject_CallOneArg(numpy_dtype, obj);
  if (!dtype) return false;
  PyObject *str = PyObject_GetAttrString(dtype, "str");
  const char *s = str ? PyUnicode_AsUTF8(str) : NULL;
  const char *why = NULL;
  bool ok = s && elem_type_of_dtype_str(s, out, &why);
  if (s && !ok) {
    PyObject *r = PyObject_Repr(dtype);
    raise_format(FERRY_ERROR_INVALID_ARGUMENT, "dtype %s: %s", r ? PyUnicode_AsUTF8(r) : s, why);
    Py_XDECREF(r);
  }
  Py_XDECREF(str);
  if (!ok) {
    Py_DECREF(dtype);
    return false;
  }
  *out_dtype = dtype;
  return true;
}

PyDoc_STRVAR(device_alloc_doc,
             "alloc(size, dtype='float32')\n--\n\n"
             "A new buffer of `size` elements of `dtype` (anything numpy.dtype accepts, or \"bfloat16\"):\n"
             "bool, int8..int64, uint8..uint64, float16/32/64, complex64/128, and record dtypes (a custom\n"
             "buffer of records of that size). Its contents are unspecified until written.");

static PyObject *device_alloc(DeviceObject *d, PyObject *args, PyObject *kwargs) {
  static char *names[] = {"size", "dtype", NULL};
  Py_ssize_t size;
  PyObject *dtype_obj = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n|O:alloc", names, &size, &dtype_obj)) return NULL;
  if (!device_live(d)) return NULL;
  if (size < 0) return raise_format(FERRY_ERROR_INVALID_ARGUMENT, "Device.alloc: size %zd is negative", size);
  elem_type t = {.kind = FERRY_FLOAT32, .elem_size = 4};
  PyObject *dtype = NULL;
  if (dtype_obj ? !parse_dtype(dtype_obj, &t, &dtype) : !(dtype = PyObject_CallFunction(numpy_dtype, "s", "float32")))
    return NULL;
  ferry_buffer h;
  ferry_status st;
  ferry_device *dev = d->dev;
  Py_BEGIN_ALLOW_THREADS;
  if (t.kind == FERRY_CUSTOM)
    st = ferry_alloc_custom(dev, (size_t)size, t.elem_size, &h);
  else
    st = ferry_alloc(dev, (size_t)size, t.kind, &h);
  Py_END_ALLOW_THREADS;
  if (st != FERRY_OK) {
    Py_DECREF(dtype);
    return raise_ferry(st);
  }
  PyObject *b = buffer_new(h, (PyObject *)d, t, dtype);
  Py_DECREF(dtype);
  return b;
}

/* A DLPack tensor over a Python object's buffer (the object kept, its buffer
 * locked against resizing, until ferry releases the memory). */
typedef struct py_tensor {
  ferry_dl_managed_tensor t;
  int64_t shape[1];
  Py_buffer view;
} py_tensor;

static void py_tensor_deleter(ferry_dl_managed_tensor *self) {
  py_tensor *p = self->manager_ctx;
  /* ferry may release the memory from any thread, with or without the GIL. */
  if (Py_IsInitialized() && !finalizing()) {
    PyGILState_STATE g = PyGILState_Ensure();
    PyBuffer_Release(&p->view);
    PyGILState_Release(g);
  }
  PyMem_RawFree(p);
}

/* A buffer over `array`'s memory on `d` (zero-copy or host-pointer). */
static PyObject *wrap_array(DeviceObject *d, PyObject *array, const char *fn) {
  if (!device_live(d)) return NULL;
  py_tensor *p = PyMem_RawCalloc(1, sizeof *p);
  if (!p) return PyErr_NoMemory();
  if (!get_array(array, &p->view, true, fn)) {
    PyMem_RawFree(p);
    return NULL;
  }
  elem_type t;
  const char *why;
  if (!elem_type_of_format(p->view.format, p->view.itemsize, &t, &why) || t.kind == FERRY_CUSTOM) {
    raise_format(FERRY_ERROR_INVALID_ARGUMENT, "%s: the array's format '%s' has no ferry kind%s%s", fn,
                 p->view.format ? p->view.format : "B", t.kind == FERRY_CUSTOM ? "" : ": ",
                 t.kind == FERRY_CUSTOM ? " (view records as uint8 first)" : why);
    PyBuffer_Release(&p->view);
    PyMem_RawFree(p);
    return NULL;
  }
  ferry_dl_data_type dtype = {FERRY_DL_UINT, 8, 1};
  switch (t.kind) {
  case FERRY_FLOAT16: dtype = (ferry_dl_data_type){FERRY_DL_FLOAT, 16, 1}; break;
  case FERRY_FLOAT32: dtype = (ferry_dl_data_type){FERRY_DL_FLOAT, 32, 1}; break;
  case FERRY_FLOAT64: dtype = (ferry_dl_data_type){FERRY_DL_FLOAT, 64, 1}; break;
  case FERRY_INT8: dtype = (ferry_dl_data_type){FERRY_DL_INT, 8, 1}; break;
  case FERRY_INT16: dtype = (ferry_dl_data_type){FERRY_DL_INT, 16, 1}; break;
  case FERRY_INT32: dtype = (ferry_dl_data_type){FERRY_DL_INT, 32, 1}; break;
  case FERRY_INT64: dtype = (ferry_dl_data_type){FERRY_DL_INT, 64, 1}; break;
  case FERRY_UINT16: dtype = (ferry_dl_data_type){FERRY_DL_UINT, 16, 1}; break;
  case FERRY_UINT32: dtype = (ferry_dl_data_type){FERRY_DL_UINT, 32, 1}; break;
  case FERRY_UINT64: dtype = (ferry_dl_data_type){FERRY_DL_UINT, 64, 1}; break;
  case FERRY_COMPLEX32: dtype = (ferry_dl_data_type){FERRY_DL_COMPLEX, 64, 1}; break;
  case FERRY_COMPLEX64: dtype = (ferry_dl_data_type){FERRY_DL_COMPLEX, 128, 1}; break;
  default: break; /* uint8 and bool: bytes */
  }
  p->shape[0] = (int64_t)view_elements(&p->view);
  p->t = (ferry_dl_managed_tensor){
      .dl_tensor = {.data = p->view.buf, .device = {FERRY_DL_CPU, 0}, .ndim = 1, .dtype = dtype, .shape = p->shape},
      .manager_ctx = p,
      .deleter = py_tensor_deleter,
  };
  ferry_buffer h;
  ferry_refusal why_not = FERRY_REFUSAL_NONE;
  ferry_status st;
  ferry_device *dev = d->dev;
  WITHOUT_GIL(st = ferry_dlpack_import(&p->t, dev, &h, &why_not));
  if (st != FERRY_OK) {
    PyBuffer_Release(&p->view); /* the tensor is still ours */
    PyMem_RawFree(p);
    char text[1024];
    snprintf(text, sizeof text, "%s: %s", fn, ferry_last_error());
    return raise_message(st, text, why_not);
  }
  return buffer_new(h, (PyObject *)d, t, NULL);
}

PyDoc_STRVAR(device_alloc_zero_copy_doc,
             "alloc_zero_copy(array, /)\n--\n\n"
             "A buffer that IS the array's memory (no copy), on devices whose memory is host memory\n"
             "(native, checked); UnsupportedError elsewhere. The array must be C-contiguous and\n"
             "writable; it is kept alive (and cannot be resized) while ferry uses its memory.");

static PyObject *device_alloc_zero_copy(DeviceObject *d, PyObject *array) {
  if (!device_live(d)) return NULL;
  if (!d->info.zero_copy) {
    /* ferry's own refusal, with its sentence; nothing is made. */
    ferry_buffer unused;
    ferry_device *dev = d->dev;
    ferry_status st;
    WITHOUT_GIL(st = ferry_alloc_zero_copy(dev, ferry_array_of(NULL, 0, FERRY_UINT8), &unused);
                if (st == FERRY_OK) ferry_free(unused));
    return raise_ferry(st == FERRY_OK ? FERRY_ERROR_UNSUPPORTED : st);
  }
  return wrap_array(d, array, "Device.alloc_zero_copy");
}

PyDoc_STRVAR(device_alloc_host_ptr_doc,
             "alloc_host_ptr(array, /)\n--\n\n"
             "A device buffer over the array's memory (OpenCL CL_MEM_USE_HOST_PTR, CUDA host\n"
             "registration, Vulkan external host memory); the zero-copy buffer on native and checked.\n"
             "RefusedError (with .refusal) when the device cannot. The array is kept alive while\n"
             "ferry uses its memory; write(array) / read(array) with the same array synchronise.");

static PyObject *device_alloc_host_ptr(DeviceObject *d, PyObject *array) {
  return wrap_array(d, array, "Device.alloc_host_ptr");
}

static PyObject *device_synchronize(DeviceObject *d, PyObject *unused) {
  (void)unused;
  if (!device_live(d)) return NULL;
  ferry_status st;
  ferry_device *dev = d->dev;
  Py_BEGIN_ALLOW_THREADS;
  st = ferry_device_synchronize(dev);
  Py_END_ALLOW_THREADS;
  if (st != FERRY_OK) return raise_ferry(st);
  Py_RETURN_NONE;
}

static PyObject *device_trim(DeviceObject *d, PyObject *unused) {
  (void)unused;
  if (!device_live(d)) return NULL;
  ferry_status st;
  ferry_device *dev = d->dev;
  WITHOUT_GIL(st = ferry_device_trim(dev));
  if (st != FERRY_OK) return raise_ferry(st);
  Py_RETURN_NONE;
}

static PyObject *device_stats(DeviceObject *d, PyObject *unused) {
  (void)unused;
  if (!device_live(d)) return NULL;
  ferry_stats s;
  ferry_status st;
  ferry_device *dev = d->dev;
  WITHOUT_GIL(st = ferry_device_stats(dev, &s));
  if (st != FERRY_OK) return raise_ferry(st);
  PyObject *r = PyStructSequence_New(&StatsType);
  if (!r) return NULL;
  const uint64_t v[] = {s.live_buffers, s.bytes_in_use, s.bytes_cached, s.peak_bytes_in_use, s.h2d_bytes,
                        s.d2h_bytes,    s.d2d_bytes,    s.h2d_count,    s.d2h_count,         s.d2d_count};
  for (Py_ssize_t i = 0; i < (Py_ssize_t)(sizeof v / sizeof v[0]); i++) {
    PyObject *n = PyLong_FromUnsignedLongLong(v[i]);
    if (!n) {
      Py_DECREF(r);
      return NULL;
    }
    PyStructSequence_SET_ITEM(r, i, n);
  }
  return r;
}

/* Device.native() and Queue.native(): the handles as a dict of ints. */
static PyObject *native_dict(const ferry_native *n) {
  return Py_BuildValue("{s:K,s:K,s:K,s:I}", "device", (unsigned long long)n->device, "context",
                       (unsigned long long)n->context, "queue", (unsigned long long)n->queue, "queue_family",
                       (unsigned int)n->queue_family);
}

static PyObject *device_native(DeviceObject *d, PyObject *unused) {
  (void)unused;
  if (!device_live(d)) return NULL;
  ferry_native n;
  ferry_status st;
  ferry_device *dev = d->dev;
  WITHOUT_GIL(st = ferry_device_native(dev, &n));
  if (st != FERRY_OK) return raise_ferry(st);
  return native_dict(&n);
}

static PyObject *device_dlpack_device(DeviceObject *d, PyObject *unused) {
  (void)unused;
  if (!device_live(d)) return NULL;
  ferry_dl_device dl;
  ferry_device *dev = d->dev;
  ferry_status st;
  WITHOUT_GIL(st = ferry_dlpack_device(dev, &dl));
  if (st != FERRY_OK) return raise_ferry(st);
  return Py_BuildValue("(ii)", (int)dl.device_type, (int)dl.device_id);
}

static PyMethodDef device_methods[] = {
    {"alloc", (PyCFunction)(void (*)(void))device_alloc, METH_VARARGS | METH_KEYWORDS, device_alloc_doc},
    {"alloc_zero_copy", (PyCFunction)device_alloc_zero_copy, METH_O, device_alloc_zero_copy_doc},
    {"alloc_host_ptr", (PyCFunction)device_alloc_host_ptr, METH_O, device_alloc_host_ptr_doc},
    {"synchronize", (PyCFunction)device_synchronize, METH_NOARGS,
     "Waits for work queued on the device through its native handles (ferry's own transfers are synchronous)."},
    {"trim", (PyCFunction)device_trim, METH_NOARGS, "Releases the device's cached free memory to the driver."},
    {"stats", (PyCFunction)device_stats, METH_NOARGS, "The device's statistics (ferry.Stats)."},
    {"native", (PyCFunction)device_native, METH_NOARGS,
     "The vendor handles: {'device', 'context', 'queue', 'queue_family'} as ints."},
    {"__dlpack_device__", (PyCFunction)device_dlpack_device, METH_NOARGS,
     "The device's DLPack name: (device_type, device_id)."},
    {NULL, NULL, 0, NULL},
};

#define DEVICE_INFO_GETTER(field, make)                                                                                \
  static PyObject *device_get_##field(DeviceObject *d, void *unused) {                                                 \
    (void)unused;                                                                                                      \
    return make(d->info.field);                                                                                        \
  }
DEVICE_INFO_GETTER(index, PyLong_FromSize_t)
DEVICE_INFO_GETTER(backend_index, PyLong_FromSize_t)
DEVICE_INFO_GETTER(total_memory, PyLong_FromUnsignedLongLong)
DEVICE_INFO_GETTER(max_allocation, PyLong_FromUnsignedLongLong)
DEVICE_INFO_GETTER(is_cpu, PyBool_FromLong)
DEVICE_INFO_GETTER(zero_copy, PyBool_FromLong)
DEVICE_INFO_GETTER(host_ptr, PyBool_FromLong)
DEVICE_INFO_GETTER(host_ptr_alignment, PyLong_FromSize_t)

static PyObject *device_get_name(DeviceObject *d, void *unused) {
  (void)unused;
  Py_INCREF(d->name);
  return d->name;
}

static PyObject *device_get_backend(DeviceObject *d, void *unused) {
  (void)unused;
  Py_INCREF(d->backend);
  return d->backend;
}

static PyObject *device_default_queue(DeviceObject *d, void *unused);

static PyGetSetDef device_getset[] = {
    {"index", (getter)device_get_index, NULL, "Global index, 0 .. len(ferry.devices())-1.", NULL},
    {"backend_index", (getter)device_get_backend_index, NULL, "Index among its backend's devices.", NULL},
    {"name", (getter)device_get_name, NULL, "\"NVIDIA H200 (sm_90)\", \"pthread-... (PoCL)\".", NULL},
    {"backend", (getter)device_get_backend, NULL,
     "\"cuda\", \"opencl\", \"vulkan\", \"metal\", \"native\", \"checked\".", NULL},
    {"total_memory", (getter)device_get_total_memory, NULL, "Bytes of device memory.", NULL},
    {"max_allocation", (getter)device_get_max_allocation, NULL, "Largest single buffer in bytes.", NULL},
    {"is_cpu", (getter)device_get_is_cpu, NULL, "The device computes on the host's processors.", NULL},
    {"zero_copy", (getter)device_get_zero_copy, NULL, "alloc_zero_copy works: device memory is host memory.", NULL},
    {"host_ptr", (getter)device_get_host_ptr, NULL, "alloc_host_ptr can succeed on this device.", NULL},
    {"host_ptr_alignment", (getter)device_get_host_ptr_alignment, NULL,
     "Alignment alloc_host_ptr needs of the array's address and byte length.", NULL},
    {"default_queue", (getter)device_default_queue, NULL,
     "The device's own ferry.Queue (the same object every time), which the synchronous calls wait for.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject DeviceType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Device",
    .tp_basicsize = sizeof(DeviceObject),
    .tp_dealloc = (destructor)device_dealloc,
    .tp_repr = (reprfunc)device_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A compute device (ferry.devices(), ferry.best()).",
    .tp_methods = device_methods,
    .tp_getset = device_getset,
};

/* ---- module functions ------------------------------------------------------------------------ */

/* ---- Queue and Event ------------------------------------------------------------------ */

/* Was the queue's work waited for, whatever the status? (A stale or refused
 * handle was not; a failure of the work was, and is over.) */
static bool waited_for(ferry_status st) {
  return st != FERRY_ERROR_STALE_HANDLE && st != FERRY_ERROR_INVALID_ARGUMENT && st != FERRY_NOT_READY;
}

static PyObject *queue_wrap(ferry_queue h, PyObject *device, bool is_default) {
  QueueObject *q = PyObject_New(QueueObject, &QueueType);
  if (!q) return NULL;
  q->handle = h;
  Py_INCREF(device);
  q->device = device;
  q->session = session;
  q->is_default = is_default;
  q->destroyed = false;
  q->next_seq = 0;
  q->pending = NULL;
  return (PyObject *)q;
}

static PyObject *queue_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  (void)type;
  static char *names[] = {"device", NULL};
  PyObject *dev_obj;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:Queue", names, &dev_obj)) return NULL;
  if (!PyObject_TypeCheck(dev_obj, &DeviceType)) {
    PyErr_Format(PyExc_TypeError, "ferry.Queue needs a ferry.Device, not %s", Py_TYPE(dev_obj)->tp_name);
    return NULL;
  }
  DeviceObject *d = (DeviceObject *)dev_obj;
  if (!device_live(d)) return NULL;
  ferry_queue h = FERRY_NULL_QUEUE;
  ferry_status st;
  ferry_device *dev = d->dev;
  WITHOUT_GIL(st = ferry_queue_create(dev, &h));
  if (st != FERRY_OK) return raise_ferry(st);
  PyObject *q = queue_wrap(h, dev_obj, false);
  if (!q) WITHOUT_GIL(ferry_queue_destroy(h));
  return q;
}

/* The device's default queue: one Queue object per device and session. */
static PyObject *device_default_queue(DeviceObject *d, void *unused) {
  (void)unused;
  if (!device_live(d)) return NULL;
  PyObject *key = PyLong_FromSize_t(d->info.index);
  if (!key) return NULL;
  if (!default_queues && !(default_queues = PyDict_New())) {
    Py_DECREF(key);
    return NULL;
  }
  PyObject *q = PyDict_GetItemWithError(default_queues, key);
  if (q) {
    Py_DECREF(key);
    Py_INCREF(q);
    return q;
  }
  if (PyErr_Occurred()) {
    Py_DECREF(key);
    return NULL;
  }
  ferry_queue h = FERRY_NULL_QUEUE;
  ferry_status st;
  ferry_device *dev = d->dev;
  WITHOUT_GIL(st = ferry_queue_default(dev, &h));
  if (st != FERRY_OK) {
    Py_DECREF(key);
    return raise_ferry(st);
  }
  q = queue_wrap(h, (PyObject *)d, true);
  if (q && PyDict_SetItem(default_queues, key, q) < 0) Py_CLEAR(q);
  Py_DECREF(key);
  return q;
}

/* A queue collected by Python: its work is waited for (a queue of its own is
 * destroyed), and only then is what its operations kept let go. A failure not
 * yet reported cannot be raised here: it is reported as an unraisable error. */
static void queue_dealloc(QueueObject *q) {
  if (q->session == session && !q->destroyed) {
    ferry_queue h = q->handle;
    ferry_status st = FERRY_OK;
    if (!q->is_default)
      WITHOUT_GIL(st = ferry_queue_destroy(h));
    else if (q->pending)
      WITHOUT_GIL(st = ferry_queue_synchronize(h));
    if (st != FERRY_OK) {
      PyObject *type, *value, *tb;
      PyErr_Fetch(&type, &value, &tb);
      raise_ferry(st);
      PyErr_WriteUnraisable(Py_None);
      PyErr_Restore(type, value, tb);
    }
    queue_release(q, UINT64_MAX);
  } else if (q->session < settled_session || q->destroyed) {
    queue_release(q, UINT64_MAX); /* its session's shutdown has waited for the work */
  }
  /* Else a ferry.shutdown() of its session is still running on another thread and
   * may still be moving these arrays' bytes: they are left alive. */
  Py_XDECREF(q->device);
  PyObject_Free(q);
}

static PyObject *queue_repr(QueueObject *q) {
  DeviceObject *d = (DeviceObject *)q->device;
  char text[256];
  snprintf(text, sizeof text, "<ferry.Queue %s0x%llx of device %zu (%s)%s>", q->is_default ? "default, " : "",
           (unsigned long long)q->handle.id, d->info.index, d->info.backend,
           q->destroyed            ? ", destroyed"
           : q->session != session ? ", stale"
                                   : "");
  return PyUnicode_FromString(text);
}

PyDoc_STRVAR(queue_synchronize_doc, "synchronize()\n--\n\n"
                                    "Waits (without the GIL) until everything submitted to the queue has completed;\n"
                                    "raises a failure of its work not yet reported (then the queue works again).");

static PyObject *queue_synchronize(QueueObject *q, PyObject *unused) {
  (void)unused;
  if (!queue_live(q, "Queue.synchronize")) return NULL;
  uint64_t upto = q->next_seq;
  ferry_queue h = q->handle;
  ferry_status st;
  WITHOUT_GIL(st = ferry_queue_synchronize(h));
  if (waited_for(st)) queue_release(q, upto);
  if (st != FERRY_OK) return raise_ferry(st);
  Py_RETURN_NONE;
}

PyDoc_STRVAR(queue_query_doc, "query()\n--\n\n"
                              "True when everything submitted has completed, False while work runs; never\n"
                              "waits. Raises a failure of the queue's work not yet reported.");

static PyObject *queue_query(QueueObject *q, PyObject *unused) {
  (void)unused;
  if (!queue_live(q, "Queue.query")) return NULL;
  uint64_t upto = q->next_seq;
  ferry_queue h = q->handle;
  ferry_status st;
  WITHOUT_GIL(st = ferry_queue_query(h));
  if (st == FERRY_NOT_READY) Py_RETURN_FALSE;
  if (waited_for(st)) queue_release(q, upto);
  if (st != FERRY_OK) return raise_ferry(st);
  Py_RETURN_TRUE;
}

PyDoc_STRVAR(queue_destroy_doc, "destroy()\n--\n\n"
                                "Waits for the queue's work, then frees the queue; later use raises StaleHandleError.\n"
                                "Destroying again does nothing. A device's default queue cannot be destroyed\n"
                                "(InvalidArgumentError). Raises a failure of its work not yet reported (the queue is\n"
                                "freed all the same).");

static PyObject *queue_destroy(QueueObject *q, PyObject *unused) {
  (void)unused;
  if (q->destroyed || q->session != session) Py_RETURN_NONE;
  ferry_queue h = q->handle;
  ferry_status st;
  WITHOUT_GIL(st = ferry_queue_destroy(h));
  if (st == FERRY_ERROR_INVALID_ARGUMENT || st == FERRY_ERROR_STALE_HANDLE) return raise_ferry(st);
  q->destroyed = true;
  queue_release(q, UINT64_MAX);
  if (st != FERRY_OK) return raise_ferry(st);
  Py_RETURN_NONE;
}

static PyObject *queue_enter(QueueObject *q, PyObject *unused) {
  (void)unused;
  if (!queue_live(q, "Queue.__enter__")) return NULL;
  Py_INCREF(q);
  return (PyObject *)q;
}

static PyObject *queue_exit(QueueObject *q, PyObject *args) {
  (void)args;
  PyObject *r = q->is_default ? queue_synchronize(q, NULL) : queue_destroy(q, NULL);
  if (!r) return NULL;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

PyDoc_STRVAR(queue_native_doc, "native()\n--\n\n"
                               "The native queue under this one, as a dict: queue (CUstream, cl_command_queue,\n"
                               "VkQueue or MTLCommandQueue, as an int; 0 on the host devices), queue_family, and\n"
                               "the device's device and context. UnsupportedError where the backend's queues do\n"
                               "not run on a native queue yet.");

static PyObject *queue_native(QueueObject *q, PyObject *unused) {
  (void)unused;
  if (!queue_live(q, "Queue.native")) return NULL;
  ferry_native n;
  ferry_status st;
  ferry_queue h = q->handle;
  WITHOUT_GIL(st = ferry_queue_native(h, &n));
  if (st != FERRY_OK) return raise_ferry(st);
  return native_dict(&n);
}

typedef struct EventObject {
  PyObject_HEAD ferry_event handle;
  unsigned long session;
  bool destroyed;
  QueueObject *recorded_on; /* the queue of the last record (a reference), NULL before one */
  uint64_t recorded_upto;   /* that queue's next_seq then */
} EventObject;

static PyTypeObject EventType;

static bool event_live(EventObject *e, const char *fn) {
  if (!e->destroyed && e->session == session) return true;
  raise_format(FERRY_ERROR_STALE_HANDLE, "%s: the event (handle 0x%llx) was %s", fn, (unsigned long long)e->handle.id,
               e->destroyed ? "destroyed" : "released by ferry.shutdown()");
  return false;
}

static bool event_arg(const char *fn, PyObject *obj, EventObject **out) {
  if (!PyObject_TypeCheck(obj, &EventType)) {
    PyErr_Format(PyExc_TypeError, "%s needs a ferry.Event, not %s", fn, Py_TYPE(obj)->tp_name);
    return false;
  }
  *out = (EventObject *)obj;
  return event_live(*out, fn);
}

static PyObject *event_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  (void)type;
  if (!PyArg_ParseTuple(args, ":Event") || (kwargs && PyDict_Size(kwargs) > 0)) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "ferry.Event() takes no arguments");
    return NULL;
  }
  ferry_event h = FERRY_NULL_EVENT;
  ferry_status st;
  WITHOUT_GIL(st = ferry_event_create(&h));
  if (st != FERRY_OK) return raise_ferry(st);
  EventObject *e = PyObject_New(EventObject, &EventType);
  if (!e) {
    WITHOUT_GIL(ferry_event_destroy(h));
    return NULL;
  }
  e->handle = h;
  e->session = session;
  e->destroyed = false;
  e->recorded_on = NULL;
  e->recorded_upto = 0;
  return (PyObject *)e;
}

static void event_dealloc(EventObject *e) {
  if (!e->destroyed && e->session == session) {
    ferry_event h = e->handle;
    WITHOUT_GIL(ferry_event_destroy(h));
  }
  Py_XDECREF(e->recorded_on);
  PyObject_Free(e);
}

static PyObject *event_repr(EventObject *e) {
  char text[128];
  snprintf(text, sizeof text, "<ferry.Event 0x%llx%s>", (unsigned long long)e->handle.id,
           e->destroyed            ? ", destroyed"
           : e->session != session ? ", stale"
                                   : "");
  return PyUnicode_FromString(text);
}

PyDoc_STRVAR(event_record_doc, "record(queue, /)\n--\n\n"
                               "Captures all work submitted to the queue so far (recording again replaces the\n"
                               "capture, on any queue of any device).");

static PyObject *event_record(EventObject *e, PyObject *queue_obj) {
  QueueObject *q;
  if (!event_live(e, "Event.record")) return NULL;
  if (!PyObject_TypeCheck(queue_obj, &QueueType)) {
    PyErr_Format(PyExc_TypeError, "Event.record needs a ferry.Queue, not %s", Py_TYPE(queue_obj)->tp_name);
    return NULL;
  }
  q = (QueueObject *)queue_obj;
  if (!queue_live(q, "Event.record")) return NULL;
  uint64_t upto = q->next_seq;
  ferry_event eh = e->handle;
  ferry_queue qh = q->handle;
  ferry_status st;
  WITHOUT_GIL(st = ferry_event_record(eh, qh));
  if (st != FERRY_OK) return raise_ferry(st);
  Py_INCREF(q);
  Py_XSETREF(e->recorded_on, q);
  e->recorded_upto = upto;
  Py_RETURN_NONE;
}

/* After a wait that saw the capture complete: what the operations it covers kept
 * goes, unless the event was recorded again meanwhile. */
static void event_settled(EventObject *e, QueueObject *on, uint64_t upto) {
  if (on && e->recorded_on == on && e->recorded_upto == upto && on->session == session && !on->destroyed)
    queue_release(on, upto);
}

PyDoc_STRVAR(event_synchronize_doc, "synchronize()\n--\n\n"
                                    "Waits (without the GIL) until the captured work has completed; raises a failure\n"
                                    "of the queue it was recorded on not yet reported.");

static PyObject *event_synchronize(EventObject *e, PyObject *unused) {
  (void)unused;
  if (!event_live(e, "Event.synchronize")) return NULL;
  QueueObject *on = e->recorded_on;
  uint64_t upto = e->recorded_upto;
  Py_XINCREF(on);
  ferry_event h = e->handle;
  ferry_status st;
  WITHOUT_GIL(st = ferry_event_synchronize(h));
  if (waited_for(st)) event_settled(e, on, upto);
  Py_XDECREF(on);
  if (st != FERRY_OK) return raise_ferry(st);
  Py_RETURN_NONE;
}

PyDoc_STRVAR(event_query_doc, "query()\n--\n\n"
                              "True once the captured work has completed (an event never recorded is), False\n"
                              "before; never waits.");

static PyObject *event_query(EventObject *e, PyObject *unused) {
  (void)unused;
  if (!event_live(e, "Event.query")) return NULL;
  QueueObject *on = e->recorded_on;
  uint64_t upto = e->recorded_upto;
  ferry_event h = e->handle;
  ferry_status st;
  WITHOUT_GIL(st = ferry_event_query(h));
  if (st == FERRY_NOT_READY) Py_RETURN_FALSE;
  Py_XINCREF(on);
  if (waited_for(st)) event_settled(e, on, upto);
  Py_XDECREF(on);
  if (st != FERRY_OK) return raise_ferry(st);
  Py_RETURN_TRUE;
}

PyDoc_STRVAR(event_elapsed_doc, "elapsed_time(end, /)\n--\n\n"
                                "Milliseconds from this event's completion to `end`'s (negative if `end` completed\n"
                                "first), both recorded on queues of one device, from the device's clock where it has\n"
                                "one, else the host's. InvalidArgumentError if either was never recorded or they were\n"
                                "recorded on different devices; NotReadyError if either has not completed.");

static PyObject *event_elapsed(EventObject *e, PyObject *end_obj) {
  EventObject *end;
  if (!event_live(e, "Event.elapsed_time") || !event_arg("Event.elapsed_time", end_obj, &end)) return NULL;
  ferry_event a = e->handle, b = end->handle;
  double ms = 0;
  ferry_status st;
  WITHOUT_GIL(st = ferry_event_elapsed(a, b, &ms));
  if (st != FERRY_OK) return raise_ferry(st);
  return PyFloat_FromDouble(ms);
}

PyDoc_STRVAR(event_destroy_doc, "destroy()\n--\n\n"
                                "Frees the event; later use raises StaleHandleError. Waits that queues already\n"
                                "take on it stay. Destroying again does nothing.");

static PyObject *event_destroy(EventObject *e, PyObject *unused) {
  (void)unused;
  if (e->destroyed || e->session != session) Py_RETURN_NONE;
  ferry_event h = e->handle;
  ferry_status st;
  WITHOUT_GIL(st = ferry_event_destroy(h));
  e->destroyed = true;
  Py_CLEAR(e->recorded_on);
  if (st != FERRY_OK && st != FERRY_ERROR_STALE_HANDLE) return raise_ferry(st);
  Py_RETURN_NONE;
}

static PyObject *event_get_handle(EventObject *e, void *unused) {
  (void)unused;
  return PyLong_FromUnsignedLongLong(e->handle.id);
}

static PyMethodDef event_methods[] = {
    {"record", (PyCFunction)event_record, METH_O, event_record_doc},
    {"synchronize", (PyCFunction)event_synchronize, METH_NOARGS, event_synchronize_doc},
    {"query", (PyCFunction)event_query, METH_NOARGS, event_query_doc},
    {"elapsed_time", (PyCFunction)event_elapsed, METH_O, event_elapsed_doc},
    {"destroy", (PyCFunction)event_destroy, METH_NOARGS, event_destroy_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef event_getset[] = {
    {"handle", (getter)event_get_handle, NULL, "The ferry_event handle, for C code in the same process.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject EventType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Event",
    .tp_basicsize = sizeof(EventObject),
    .tp_dealloc = (destructor)event_dealloc,
    .tp_repr = (reprfunc)event_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Event()\n--\n\n"
              "A point in a queue's work (CUDA's events, the framework's Event): bound to no device\n"
              "until recorded; one never recorded is complete. Queue.wait_event orders another queue\n"
              "after it, on any device of any backend, without blocking Python.",
    .tp_methods = event_methods,
    .tp_getset = event_getset,
    .tp_new = event_new,
};

PyDoc_STRVAR(queue_wait_event_doc, "wait_event(event, /)\n--\n\n"
                                   "Makes the queue's later work wait for the event's capture as it stands now,\n"
                                   "whatever its device and backend, without blocking the calling thread.");

static PyObject *queue_wait_event(QueueObject *q, PyObject *event_obj) {
  EventObject *e;
  if (!queue_live(q, "Queue.wait_event") || !event_arg("Queue.wait_event", event_obj, &e)) return NULL;
  ferry_queue qh = q->handle;
  ferry_event eh = e->handle;
  ferry_status st;
  WITHOUT_GIL(st = ferry_queue_wait_event(qh, eh));
  if (st != FERRY_OK) return raise_ferry(st);
  Py_RETURN_NONE;
}

PyDoc_STRVAR(queue_record_doc, "record(event=None, /)\n--\n\n"
                               "Records `event` (a new ferry.Event when None) on this queue and returns it.");

static PyObject *queue_record(QueueObject *q, PyObject *args) {
  PyObject *event_obj = Py_None;
  if (!PyArg_ParseTuple(args, "|O:record", &event_obj)) return NULL;
  if (!queue_live(q, "Queue.record")) return NULL;
  PyObject *e;
  if (event_obj == Py_None) {
    PyObject *none = PyTuple_New(0);
    e = none ? event_new(&EventType, none, NULL) : NULL;
    Py_XDECREF(none);
    if (!e) return NULL;
  } else {
    EventObject *given;
    if (!event_arg("Queue.record", event_obj, &given)) return NULL;
    e = event_obj;
    Py_INCREF(e);
  }
  PyObject *r = event_record((EventObject *)e, (PyObject *)q);
  if (!r) {
    Py_DECREF(e);
    return NULL;
  }
  Py_DECREF(r);
  return e;
}

static PyObject *queue_get_device(QueueObject *q, void *unused) {
  (void)unused;
  Py_INCREF(q->device);
  return q->device;
}

static PyObject *queue_get_handle(QueueObject *q, void *unused) {
  (void)unused;
  return PyLong_FromUnsignedLongLong(q->handle.id);
}

static PyObject *queue_get_is_default(QueueObject *q, void *unused) {
  (void)unused;
  return PyBool_FromLong(q->is_default);
}

static PyObject *queue_get_pending(QueueObject *q, void *unused) {
  (void)unused;
  size_t n = 0;
  for (pending_op *p = q->pending; p; p = p->next)
    n++;
  return PyLong_FromSize_t(n);
}

static PyMethodDef queue_methods[] = {
    {"synchronize", (PyCFunction)queue_synchronize, METH_NOARGS, queue_synchronize_doc},
    {"query", (PyCFunction)queue_query, METH_NOARGS, queue_query_doc},
    {"destroy", (PyCFunction)queue_destroy, METH_NOARGS, queue_destroy_doc},
    {"wait_event", (PyCFunction)queue_wait_event, METH_O, queue_wait_event_doc},
    {"record", (PyCFunction)queue_record, METH_VARARGS, queue_record_doc},
    {"native", (PyCFunction)queue_native, METH_NOARGS, queue_native_doc},
    {"__enter__", (PyCFunction)queue_enter, METH_NOARGS, "Returns the queue; `with` destroys it at exit."},
    {"__exit__", (PyCFunction)queue_exit, METH_VARARGS,
     "Destroys the queue (waiting for its work); a default queue is synchronised instead."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef queue_getset[] = {
    {"device", (getter)queue_get_device, NULL, "The Device the queue belongs to.", NULL},
    {"handle", (getter)queue_get_handle, NULL, "The ferry_queue handle, for C code in the same process.", NULL},
    {"is_default", (getter)queue_get_is_default, NULL, "It is its device's default queue.", NULL},
    {"pending", (getter)queue_get_pending, NULL,
     "How many operations' arrays the queue still keeps alive (until a synchronisation sees them complete).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject QueueType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Queue",
    .tp_basicsize = sizeof(QueueObject),
    .tp_dealloc = (destructor)queue_dealloc,
    .tp_repr = (reprfunc)queue_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Queue(device)\n--\n\n"
              "A new queue of the device (CUDA's streams, the framework's Stream): operations\n"
              "submitted to one queue (write, read and copy_to with queue=) run in order; two\n"
              "queues are unordered unless wait_event orders them. Device.default_queue is the\n"
              "device's own, which the synchronous calls wait for. A queue collected by Python, or\n"
              "left by `with`, is destroyed once its work is done.",
    .tp_methods = queue_methods,
    .tp_getset = queue_getset,
    .tp_new = queue_new,
};

static PyObject *mod_version(PyObject *m, PyObject *unused) {
  (void)m, (void)unused;
  return PyUnicode_FromString(ferry_version());
}

static PyObject *mod_devices(PyObject *m, PyObject *unused) {
  (void)m, (void)unused;
  PyObject *list = devices_list();
  return list ? PyList_GetSlice(list, 0, PyList_GET_SIZE(list)) : NULL;
}

static PyObject *mod_best(PyObject *m, PyObject *unused) {
  (void)m, (void)unused;
  if (!devices_list()) return NULL;
  ferry_device *dev;
  WITHOUT_GIL(dev = ferry_device_best());
  if (!dev) return raise_format(FERRY_ERROR_NO_DEVICE, "ferry.best: there are no devices (FERRY_BACKENDS?)");
  return device_object(dev);
}

static PyObject *mod_device(PyObject *m, PyObject *arg) {
  (void)m;
  Py_ssize_t index = PyLong_AsSsize_t(arg);
  if (index == -1 && PyErr_Occurred()) return NULL;
  PyObject *list = devices_list();
  if (!list) return NULL;
  if (index < 0) {
    Py_ssize_t n = PyList_GET_SIZE(list);
    return raise_format(FERRY_ERROR_NO_DEVICE, "ferry.device: device index %zd, but there are %zd devices (0..%zd)",
                        index, n, n ? n - 1 : 0);
  }
  ferry_device *dev;
  ferry_status st;
  WITHOUT_GIL(st = ferry_device_get((size_t)index, &dev));
  if (st != FERRY_OK) return raise_ferry(st);
  return device_object(dev);
}

static PyObject *mod_backends(PyObject *m, PyObject *unused) {
  (void)m, (void)unused;
  ferry_status st;
  size_t n = 0;
  WITHOUT_GIL(st = ferry_init(); if (st == FERRY_OK) n = ferry_backend_count());
  if (st != FERRY_OK) return raise_ferry(st);
  PyObject *list = PyList_New((Py_ssize_t)n);
  if (!list) return NULL;
  for (size_t i = 0; i < n; i++) {
    ferry_backend_info info;
    PyObject *r = NULL;
    WITHOUT_GIL(st = ferry_backend_get(i, &info));
    if (st != FERRY_OK) {
      Py_DECREF(list);
      return raise_ferry(st);
    }
    r = PyStructSequence_New(&BackendInfoType);
    if (r) {
      PyStructSequence_SET_ITEM(r, 0, PyUnicode_FromString(info.name));
      PyStructSequence_SET_ITEM(r, 1, PyBool_FromLong(info.enabled));
      PyStructSequence_SET_ITEM(r, 2, PyLong_FromSize_t(info.device_count));
      PyStructSequence_SET_ITEM(r, 3, PyUnicode_FromString(info.status));
    }
    if (!r || PyErr_Occurred()) {
      Py_XDECREF(r);
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, r);
  }
  return list;
}

static PyObject *mod_stats(PyObject *m, PyObject *arg) {
  (void)m;
  if (!PyObject_TypeCheck(arg, &DeviceType)) {
    PyErr_Format(PyExc_TypeError, "ferry.stats needs a ferry.Device, not %s", Py_TYPE(arg)->tp_name);
    return NULL;
  }
  return device_stats((DeviceObject *)arg, NULL);
}

static PyObject *mod_live_exports(PyObject *m, PyObject *unused) {
  (void)m, (void)unused;
  return PyLong_FromSize_t(ferry_dlpack_live_exports());
}

static PyObject *mod_shutdown(PyObject *m, PyObject *args, PyObject *kwargs) {
  (void)m;
  static char *names[] = {"force", NULL};
  int force = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$p:shutdown", names, &force)) return NULL;
  size_t held = ferry_dlpack_live_exports();
  if (held > 0 && !force) {
    PyErr_Format(PyExc_BufferError,
                 "ferry.shutdown: %zu DLPack tensor(s) or memoryview(s) still use ferry memory (arrays made by "
                 "numpy.from_dlpack, torch.from_dlpack, ... from ferry buffers); shutting down would release the "
                 "memory under them. Release them first, or call ferry.shutdown(force=True)",
                 held);
    return NULL;
  }
  /* The objects of this session are stale from here: a Buffer collected during
   * the shutdown (a deleter the shutdown runs may drop the last reference to
   * one) or on another thread meanwhile leaves its handle to the shutdown
   * instead of freeing it. Then the wait, without the GIL: the shutdown waits
   * for the transfers in flight and runs deleters of buffers over Python
   * memory, which take the GIL. */
  unsigned long ending = session++;
  Py_CLEAR(device_cache);
  Py_CLEAR(default_queues);
  WITHOUT_GIL(ferry_shutdown());
  if (settled_session < ending + 1) settled_session = ending + 1; /* its queues' work is over */
  Py_RETURN_NONE;
}

/* Imports a DLPack capsule (taking it on success: renamed "used_..."). */
static PyObject *import_capsule(PyObject *capsule, DeviceObject *onto) {
  ferry_device *dev = onto ? onto->dev : NULL;
  ferry_buffer h;
  ferry_refusal why = FERRY_REFUSAL_NONE;
  ferry_status st;
  ferry_dl_data_type dtype;
  if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
    ferry_dl_managed_tensor_versioned *t = PyCapsule_GetPointer(capsule, "dltensor_versioned");
    dtype = t->version.major == FERRY_DL_VERSION_MAJOR ? t->dl_tensor.dtype : (ferry_dl_data_type){0, 0, 0};
    WITHOUT_GIL(st = ferry_dlpack_import_versioned(t, dev, &h, &why));
    if (st == FERRY_OK && PyCapsule_SetName(capsule, "used_dltensor_versioned") < 0) return NULL;
  } else if (PyCapsule_IsValid(capsule, "dltensor")) {
    ferry_dl_managed_tensor *t = PyCapsule_GetPointer(capsule, "dltensor");
    dtype = t->dl_tensor.dtype;
    WITHOUT_GIL(st = ferry_dlpack_import(t, dev, &h, &why));
    if (st == FERRY_OK && PyCapsule_SetName(capsule, "used_dltensor") < 0) return NULL;
  } else {
    const char *name = PyCapsule_GetName(capsule);
    PyErr_Clear();
    return raise_format(FERRY_ERROR_INVALID_ARGUMENT,
                        "ferry.from_dlpack: the capsule is named \"%s\", not \"dltensor\" or \"dltensor_versioned\" "
                        "(a capsule is consumed once)",
                        name ? name : "");
  }
  if (st != FERRY_OK) return raise_refused(st, why);
  elem_type t = {.kind = ferry_buffer_kind(h), .is_bool = dtype.code == FERRY_DL_BOOL, .elem_size = ferry_elem_size(h)};
  PyObject *device = device_object(ferry_buffer_device(h));
  if (!device) {
    WITHOUT_GIL(ferry_free(h));
    return NULL;
  }
  PyObject *b = buffer_new(h, device, t, NULL);
  Py_DECREF(device);
  return b;
}

PyDoc_STRVAR(mod_from_dlpack_doc,
             "from_dlpack(x, /, *, device=None)\n--\n\n"
             "A ferry buffer over the memory of `x`, without a copy: any object with __dlpack__\n"
             "(NumPy, PyTorch, CuPy, JAX arrays, ferry buffers) or a DLPack capsule. The buffer is\n"
             "one-dimensional (the tensor's elements in order; non-contiguous tensors are refused)\n"
             "and keeps the producer's memory until it is freed. `device` picks the ferry device\n"
             "(default: the one that holds the memory; host memory on a GPU device becomes a\n"
             "host-pointer buffer).");

static PyObject *mod_from_dlpack(PyObject *m, PyObject *args, PyObject *kwargs) {
  (void)m;
  static char *names[] = {"x", "device", NULL};
  PyObject *x, *device = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$O:from_dlpack", names, &x, &device)) return NULL;
  if (device != Py_None && !PyObject_TypeCheck(device, &DeviceType)) {
    PyErr_Format(PyExc_TypeError, "from_dlpack: device must be a ferry.Device, not %s", Py_TYPE(device)->tp_name);
    return NULL;
  }
  DeviceObject *onto = device == Py_None ? NULL : (DeviceObject *)device;
  if (onto && !device_live(onto)) return NULL;
  if (!devices_list()) return NULL;
  if (PyCapsule_CheckExact(x)) return import_capsule(x, onto);
  /* The producer's device decides the stream: ferry's CUDA work runs on the
   * legacy default stream (1); host memory takes None. */
  PyObject *stream = Py_None;
  PyObject *dl_device = PyObject_CallMethod(x, "__dlpack_device__", NULL);
  if (!dl_device) return NULL;
  ferry_dl_device producer;
  bool parsed = parse_dl_device(dl_device, "the producer's __dlpack_device__()", &producer);
  Py_DECREF(dl_device);
  if (!parsed) return NULL;
  PyObject *one = NULL;
  if (producer.device_type == FERRY_DL_CUDA || producer.device_type == FERRY_DL_CUDA_MANAGED) {
    one = PyLong_FromLong(1);
    if (!one) return NULL;
    stream = one;
  }
  PyObject *method = PyObject_GetAttrString(x, "__dlpack__");
  if (!method) {
    Py_XDECREF(one);
    return NULL;
  }
  PyObject *empty = PyTuple_New(0);
  PyObject *kw =
      Py_BuildValue("{s:O,s:(ii)}", "stream", stream, "max_version", FERRY_DL_VERSION_MAJOR, FERRY_DL_VERSION_MINOR);
  PyObject *capsule = empty && kw ? PyObject_Call(method, empty, kw) : NULL;
  if (!capsule && PyErr_ExceptionMatches(PyExc_TypeError)) {
    /* A producer from before DLPack 1.0 (NumPy 1.x): no max_version keyword. */
    PyErr_Clear();
    Py_XDECREF(kw);
    kw = Py_BuildValue("{s:O}", "stream", stream);
    capsule = kw ? PyObject_Call(method, empty, kw) : NULL;
  }
  Py_XDECREF(kw);
  Py_XDECREF(empty);
  Py_DECREF(method);
  Py_XDECREF(one);
  if (!capsule) return NULL;
  PyObject *b = import_capsule(capsule, onto);
  Py_DECREF(capsule); /* not taken: its destructor calls the producer's deleter */
  return b;
}

/* For bindings/python/bench/bench_python.py: `iterations` calls of the C function
 * the method calls (ferry_write or ferry_read of the array's bytes at offset 0),
 * timed in C, in seconds: the raw call measured in the same run. */
/* For the benchmark: `iterations` C calls of `op` ("write", "read": ferry_write,
 * ferry_read; "write_async": ferry_write_async on `queue`, submitted only: the
 * caller synchronises the queue, untimed) with the array's bytes, timed in C. */
static PyObject *mod_time_c(PyObject *m, PyObject *args) {
  (void)m;
  const char *op;
  PyObject *buffer, *array, *queue = Py_None;
  Py_ssize_t iterations;
  if (!PyArg_ParseTuple(args, "sO!On|O:_time_c", &op, &BufferType, &buffer, &array, &iterations, &queue)) return NULL;
  BufferObject *b = (BufferObject *)buffer;
  if (!buffer_live(b)) return NULL;
  bool reading = strcmp(op, "read") == 0, async = strcmp(op, "write_async") == 0;
  if (!reading && !async && strcmp(op, "write") != 0)
    return PyErr_Format(PyExc_ValueError, "_time_c: op is \"write\", \"read\" or \"write_async\", not \"%s\"", op);
  if (async && !PyObject_TypeCheck(queue, &QueueType))
    return PyErr_Format(PyExc_TypeError, "_time_c: \"write_async\" takes a ferry.Queue");
  if (async && !queue_live((QueueObject *)queue, "_time_c")) return NULL;
  ferry_queue q = async ? ((QueueObject *)queue)->handle : FERRY_NULL_QUEUE;
  Py_buffer view;
  if (!get_array(array, &view, reading, "_time_c")) return NULL;
  ferry_status st = FERRY_OK;
  struct timespec t0, t1;
  ferry_buffer h = b->handle;
  Py_BEGIN_ALLOW_THREADS;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (async)
    for (Py_ssize_t i = 0; i < iterations && st == FERRY_OK; i++)
      st = ferry_write_async(q, h, 0, view.buf, (size_t)view.len);
  else
    for (Py_ssize_t i = 0; i < iterations && st == FERRY_OK; i++)
      st = reading ? ferry_read(h, 0, view.buf, (size_t)view.len) : ferry_write(h, 0, view.buf, (size_t)view.len);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  Py_END_ALLOW_THREADS;
  PyBuffer_Release(&view);
  if (st != FERRY_OK) return raise_ferry(st);
  return PyFloat_FromDouble((double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
}

static PyMethodDef module_methods[] = {
    {"_time_c", mod_time_c, METH_VARARGS,
     "_time_c(op, buffer, array, iterations, queue=None, /)\n--\n\nFor the benchmark."},
    {"version", mod_version, METH_NOARGS, "version()\n--\n\nlibferry's version, \"MAJOR.MINOR.PATCH\"."},
    {"devices", mod_devices, METH_NOARGS,
     "devices()\n--\n\nEvery device, backend by backend (cuda, metal, opencl, vulkan, native, checked)."},
    {"best", mod_best, METH_NOARGS, "best()\n--\n\nThe first GPU if any, else the native CPU device."},
    {"device", mod_device, METH_O, "device(index, /)\n--\n\nThe device with that global index."},
    {"backends", mod_backends, METH_NOARGS,
     "backends()\n--\n\nEvery backend of the build: name, enabled, device_count, status (why it has none)."},
    {"stats", mod_stats, METH_O, "stats(device, /)\n--\n\nThe device's statistics (ferry.Stats)."},
    {"live_exports", mod_live_exports, METH_NOARGS,
     "live_exports()\n--\n\nDLPack tensors (and memoryviews) of ferry memory not yet released by their consumer."},
    {"shutdown", (PyCFunction)(void (*)(void))mod_shutdown, METH_VARARGS | METH_KEYWORDS,
     "shutdown(*, force=False)\n--\n\n"
     "Releases every buffer and device; later calls start ferry again. Existing Device and\n"
     "Buffer objects become stale. Refused (BufferError) while DLPack consumers or memoryviews\n"
     "still hold ferry memory, unless force=True (their memory is then released under them)."},
    {"from_dlpack", (PyCFunction)(void (*)(void))mod_from_dlpack, METH_VARARGS | METH_KEYWORDS, mod_from_dlpack_doc},
    {NULL, NULL, 0, NULL},
};

/* ---- module init -------------------------------------------------------------------------------- */

static PyStructSequence_Field stats_fields[] = {
    {"live_buffers", "buffers not yet freed"},
    {"bytes_in_use", "bytes of live buffers"},
    {"bytes_cached", "bytes the allocation cache holds"},
    {"peak_bytes_in_use", "the most bytes_in_use has been"},
    {"h2d_bytes", "bytes written from the host"},
    {"d2h_bytes", "bytes read to the host"},
    {"d2d_bytes", "bytes copied into this device's buffers"},
    {"h2d_count", "host-to-device transfers"},
    {"d2h_count", "device-to-host transfers"},
    {"d2d_count", "device-to-device copies"},
    {NULL, NULL},
};

static PyStructSequence_Desc stats_desc = {"ferry.Stats", "A device's statistics (since ferry started).", stats_fields,
                                           10};

static PyStructSequence_Field backend_fields[] = {
    {"name", "\"cuda\", \"opencl\", ..."},
    {"enabled", "FERRY_BACKENDS keeps it"},
    {"device_count", "devices it contributed"},
    {"status", "\"ok\", or why it has no devices"},
    {NULL, NULL},
};

static PyStructSequence_Desc backend_desc = {"ferry.BackendInfo", "A backend of this build.", backend_fields, 4};

/* One exception class per status, with the builtin it also is. */
static bool add_errors(PyObject *module) {
  Error = PyErr_NewExceptionWithDoc("ferry.Error",
                                    "A failed ferry call. str(e) is ferry's sentence about it, with the numbers;\n"
                                    "e.status is the ferry_status value and e.status_name its name.",
                                    PyExc_Exception, NULL);
  if (!Error || PyModule_AddObjectRef(module, "Error", Error) < 0) return false;
  if (PyObject_SetAttrString(Error, "status", Py_None) < 0 || PyObject_SetAttrString(Error, "status_name", Py_None) < 0)
    return false;
  static const struct {
    ferry_status status;
    const char *name;
    const char *doc;
  } table[] = {
      {FERRY_ERROR_INVALID_ARGUMENT, "InvalidArgumentError", "A bad argument (also a ValueError)."},
      {FERRY_ERROR_OVERFLOW, "OverflowError", "A size that does not fit (also the builtin OverflowError)."},
      {FERRY_ERROR_SIZE_MISMATCH, "SizeMismatchError", "The array's length differs from the buffer's (a ValueError)."},
      {FERRY_ERROR_KIND_MISMATCH, "KindMismatchError", "The array's dtype differs from the buffer's (a TypeError)."},
      {FERRY_ERROR_OUT_OF_RANGE, "OutOfRangeError", "A byte range past the end of a buffer (an IndexError)."},
      {FERRY_ERROR_STALE_BUFFER, "StaleBufferError", "The buffer was freed (or ferry shut down)."},
      {FERRY_ERROR_UNSUPPORTED, "UnsupportedError", "The device cannot do this."},
      {FERRY_ERROR_REFUSED, "RefusedError", "The device refused; e.refusal names the reason (\"FERRY_REFUSAL_...\")."},
      {FERRY_ERROR_OUT_OF_MEMORY, "OutOfMemoryError", "Device or host memory is exhausted (also a MemoryError)."},
      {FERRY_ERROR_NO_DEVICE, "NoDeviceError", "No such device (a LookupError)."},
      {FERRY_ERROR_BACKEND, "BackendError", "A driver call failed; the sentence names the call and its code."},
      {FERRY_NOT_READY, "NotReadyError", "Event.elapsed_time of work not yet complete."},
      {FERRY_ERROR_STALE_HANDLE, "StaleHandleError", "The queue or event was destroyed (or ferry shut down)."},
      {FERRY_ERROR_CANCELLED, "CancelledError",
       "Not run: an earlier operation on the same queue failed, and its failure was not yet reported."},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    PyObject *builtin = NULL;
    switch (table[i].status) {
    case FERRY_ERROR_INVALID_ARGUMENT:
    case FERRY_ERROR_SIZE_MISMATCH: builtin = PyExc_ValueError; break;
    case FERRY_ERROR_OVERFLOW: builtin = PyExc_OverflowError; break;
    case FERRY_ERROR_KIND_MISMATCH: builtin = PyExc_TypeError; break;
    case FERRY_ERROR_OUT_OF_RANGE: builtin = PyExc_IndexError; break;
    case FERRY_ERROR_OUT_OF_MEMORY: builtin = PyExc_MemoryError; break;
    case FERRY_ERROR_NO_DEVICE: builtin = PyExc_LookupError; break;
    default: break;
    }
    PyObject *bases = builtin ? PyTuple_Pack(2, Error, builtin) : PyTuple_Pack(1, Error);
    PyObject *dict =
        Py_BuildValue("{s:i,s:s}", "status", (int)table[i].status, "status_name", ferry_status_name(table[i].status));
    if (table[i].status == FERRY_ERROR_REFUSED && dict) PyDict_SetItemString(dict, "refusal", Py_None);
    char qualified[64];
    snprintf(qualified, sizeof qualified, "ferry.%s", table[i].name);
    PyObject *cls = bases && dict ? PyErr_NewExceptionWithDoc(qualified, table[i].doc, bases, dict) : NULL;
    Py_XDECREF(bases);
    Py_XDECREF(dict);
    if (!cls || PyModule_AddObjectRef(module, table[i].name, cls) < 0) {
      Py_XDECREF(cls);
      return false;
    }
    error_class[table[i].status] = cls; /* the module keeps it too */
  }
  return true;
}

/* ---- the C API of the package's other extensions (_capi.h) ------------------------- */

#ifdef FERRY_PY_C_API
static ferry_status capi_companion_fail(ferry_status status, const char *message) {
  return ferry__companion_fail(status, "%s", message);
}

static int capi_buffer_handle(PyObject *obj, ferry_buffer *out) {
  if (!PyObject_TypeCheck(obj, &BufferType)) {
    PyErr_Format(PyExc_TypeError, "a ferry.Buffer is needed, not %.200s", Py_TYPE(obj)->tp_name);
    return -1;
  }
  BufferObject *b = (BufferObject *)obj;
  if (!buffer_live(b)) return -1;
  *out = b->handle;
  return 0;
}

static PyObject *capi_device_object(ferry_device *dev) { return device_object(dev); }

static PyObject *capi_raise_status(ferry_status st) { return raise_ferry(st); }

static const ferry_py_capi capi = {
    .version = FERRY_PY_CAPI_VERSION,
    .companion_fail = capi_companion_fail,
    .companion_debug = ferry__companion_debug,
    .companion_option = ferry__companion_option,
    .companion_hold = ferry__companion_hold,
    .companion_release = ferry__companion_release,
    .companion_transfer = ferry__companion_transfer,
    .companion_map = ferry__companion_map,
    .companion_unmap = ferry__companion_unmap,
    .companion_device_address = ferry__companion_device_address,
    .companion_lend = ferry__companion_lend,
    .companion_take_back = ferry__companion_take_back,
    .companion_session = ferry__companion_session,
    .companion_transfer_async = ferry__companion_transfer_async,
    .device_count = ferry_device_count,
    .device_get = ferry_device_get,
    .device_info_get = ferry_device_info_get,
    .kind_name = ferry_kind_name,
    .status_name = ferry_status_name,
    .last_error = ferry_last_error,
    .queue_create = ferry_queue_create,
    .queue_destroy = ferry_queue_destroy,
    .queue_synchronize = ferry_queue_synchronize,
    .queue_query = ferry_queue_query,
    .event_create = ferry_event_create,
    .event_destroy = ferry_event_destroy,
    .event_record = ferry_event_record,
    .event_query = ferry_event_query,
    .buffer_handle = capi_buffer_handle,
    .device_object = capi_device_object,
    .raise_status = capi_raise_status,
};

static bool add_capi(PyObject *module) {
  PyObject *capsule = PyCapsule_New((void *)&capi, FERRY_PY_CAPI_NAME, NULL);
  if (!capsule) return false;
  int rc = PyModule_AddObjectRef(module, "_C_API", capsule);
  Py_DECREF(capsule);
  return rc == 0;
}
#else
/* Built against an installed libferry (pkg-config), without ferry's sources:
 * no companion interface, so no C API and no ferry._mpi. */
static bool add_capi(PyObject *module) {
  (void)module;
  return true;
}
#endif

static struct PyModuleDef ferry_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ferry._ferry",
    .m_doc = "The C extension behind the ferry package (import ferry, not this).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__ferry(void) {
  PyObject *numpy = PyImport_ImportModule("numpy");
  if (!numpy) return NULL;
  numpy_empty = PyObject_GetAttrString(numpy, "empty");
  numpy_dtype = PyObject_GetAttrString(numpy, "dtype");
  numpy_asarray = PyObject_GetAttrString(numpy, "asarray");
  Py_DECREF(numpy);
  if (!numpy_empty || !numpy_dtype || !numpy_asarray) return NULL;
  if (PyType_Ready(&DeviceType) < 0 || PyType_Ready(&BufferType) < 0 || PyType_Ready(&QueueType) < 0 ||
      PyType_Ready(&EventType) < 0)
    return NULL;
  if (PyStructSequence_InitType2(&StatsType, &stats_desc) < 0) return NULL;
  if (PyStructSequence_InitType2(&BackendInfoType, &backend_desc) < 0) return NULL;
  PyObject *m = PyModule_Create(&ferry_module);
  if (!m) return NULL;
  if (PyModule_AddObjectRef(m, "Device", (PyObject *)&DeviceType) < 0 ||
      PyModule_AddObjectRef(m, "Buffer", (PyObject *)&BufferType) < 0 ||
      PyModule_AddObjectRef(m, "Queue", (PyObject *)&QueueType) < 0 ||
      PyModule_AddObjectRef(m, "Event", (PyObject *)&EventType) < 0 ||
      PyModule_AddObjectRef(m, "Stats", (PyObject *)&StatsType) < 0 ||
      PyModule_AddObjectRef(m, "BackendInfo", (PyObject *)&BackendInfoType) < 0 || !add_errors(m) || !add_capi(m)) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
