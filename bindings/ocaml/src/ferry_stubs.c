/* The C stubs of ferry's OCaml binding: plain C over libferry's public API.
 *
 * Rules kept throughout, so that the binding is also right on OCaml 5:
 *  - no naked pointers: devices cross as their index (an int), buffers as their
 *    64-bit handle (a boxed int64 inside the OCaml record), addresses as boxed
 *    nativeints;
 *  - every value that must survive an allocation or a released runtime lock is
 *    registered (CAMLparam/CAMLlocal); Bigarray data is malloc'd (or the user's)
 *    and never moves, so its address may be used with the lock released while
 *    the Bigarray itself is a registered root;
 *  - the runtime lock is released around every call that may take long (transfers,
 *    allocations, free, synchronize), and re-acquired before anything touches an
 *    OCaml value or raises;
 *  - ferry_last_error() is copied to C memory before any OCaml allocation.
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign, also in strict C modes */
#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/bigarray.h>
#include <caml/callback.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/threads.h>
#include <caml/version.h>

#include <ferry.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ---------------------------------------------------------------- */

/* Raises Ferry.Error (status, text). Ferry.status lists FERRY_ERROR_INVALID_ARGUMENT
 * .. FERRY_ERROR_CANCELLED in the C order, so a status is its constructor + 1. */
static _Noreturn void raise_text(ferry_status st, const char *text) {
  CAMLparam0();
  CAMLlocal1(msg);
  const value *exn = caml_named_value("ferry.error");
  int index =
      (st >= FERRY_ERROR_INVALID_ARGUMENT && st <= FERRY_ERROR_CANCELLED) ? (int)st - 1 : (int)FERRY_ERROR_BACKEND - 1;
  msg = caml_copy_string(text);
  if (!exn) caml_failwith(text); /* Ferry registers it when it is linked: never here */
  value args[2] = {Val_int(index), msg};
  caml_raise_with_args(*exn, 2, args);
  CAMLnoreturn;
}

/* Raises Ferry.Error with ferry's sentence about this thread's last failure. */
static _Noreturn void raise_status(ferry_status st) {
  char text[1024];
  snprintf(text, sizeof text, "%s", ferry_last_error());
  raise_text(st, text);
}

static _Noreturn void raise_fmt(ferry_status st, const char *fmt, long a, long b) {
  char text[512];
  snprintf(text, sizeof text, fmt, a, b);
  raise_text(st, text);
}

/* ---- Bigarray kinds -------------------------------------------------------- */

/* OCaml >= 5.2 has float16 Bigarrays: kind 13, after CAML_BA_CHAR. Older headers
 * lack the name, and their Bigarrays never carry the number. */
#define FERRY_CAML_BA_FLOAT16 13
#if OCAML_VERSION_MAJOR > 5 || (OCAML_VERSION_MAJOR == 5 && OCAML_VERSION_MINOR >= 2)
_Static_assert(CAML_BA_FLOAT16 == FERRY_CAML_BA_FLOAT16, "float16 Bigarrays moved");
#endif

/* ferry's kind of a Bigarray kind (the Bigarray.kind value's number, as in the
 * Bigarray's flags); FERRY_CUSTOM when ferry has none. */
static ferry_kind kind_of_caml(int k) {
  switch (k) {
  case CAML_BA_FLOAT32: return FERRY_FLOAT32;
  case CAML_BA_FLOAT64: return FERRY_FLOAT64;
  case CAML_BA_SINT8: return FERRY_INT8;
  case CAML_BA_UINT8: return FERRY_UINT8;
  case CAML_BA_SINT16: return FERRY_INT16;
  case CAML_BA_UINT16: return FERRY_UINT16;
  case CAML_BA_INT32: return FERRY_INT32;
  case CAML_BA_INT64: return FERRY_INT64;
  case CAML_BA_CAML_INT: return FERRY_NATIVEINT; /* untagged machine words */
  case CAML_BA_NATIVE_INT: return FERRY_NATIVEINT;
  case CAML_BA_COMPLEX32: return FERRY_COMPLEX32;
  case CAML_BA_COMPLEX64: return FERRY_COMPLEX64;
  case CAML_BA_CHAR: return FERRY_CHAR;
  case FERRY_CAML_BA_FLOAT16: return FERRY_FLOAT16;
  default: return FERRY_CUSTOM;
  }
}

static ferry_kind kind_checked(const char *fn, int k) {
  ferry_kind kind = kind_of_caml(k);
  if (kind == FERRY_CUSTOM) {
    char text[256];
    snprintf(text, sizeof text, "%s: Bigarray kind %d has no ferry kind", fn, k);
    raise_text(FERRY_ERROR_INVALID_ARGUMENT, text);
  }
  return kind;
}

/* The host array a one-dimensional C-layout Bigarray is. */
static ferry_array array_of(value vba, const char *fn) {
  struct caml_ba_array *ba = Caml_ba_array_val(vba);
  int k = (int)(ba->flags & CAML_BA_KIND_MASK);
  ferry_kind kind = kind_of_caml(k);
  if (kind == FERRY_CUSTOM) {
    char text[256];
    snprintf(text, sizeof text, "%s: a Bigarray of kind %d has no ferry kind", fn, k);
    raise_text(FERRY_ERROR_KIND_MISMATCH, text);
  }
  return ferry_array_of(ba->data, (size_t)ba->dim[0], kind);
}

/* ---- library, devices ------------------------------------------------------ */

CAMLprim value ferry_ml_version(value unit) {
  (void)unit;
  return caml_copy_string(ferry_version());
}

/* Not released: ferry_shutdown must not race another ferry call, and holding the
 * runtime lock keeps the other OCaml threads (and finalisers) out of ferry. */
CAMLprim value ferry_ml_shutdown(value unit) {
  (void)unit;
  ferry_shutdown();
  return Val_unit;
}

CAMLprim value ferry_ml_init(value unit) {
  (void)unit;
  ferry_status st = ferry_init();
  if (st != FERRY_OK) raise_status(st);
  return Val_unit;
}

CAMLprim value ferry_ml_device_count(value unit) {
  (void)unit;
  return Val_long((long)ferry_device_count());
}

static ferry_device *device_of(value vindex) {
  long i = Long_val(vindex);
  if (i < 0)
    raise_fmt(FERRY_ERROR_NO_DEVICE, "Ferry.Device: device index %ld is negative (there are %ld devices)", i,
              (long)ferry_device_count());
  ferry_device *dev = NULL;
  ferry_status st = ferry_device_get((size_t)i, &dev);
  if (st != FERRY_OK) raise_status(st);
  return dev;
}

CAMLprim value ferry_ml_device_get(value vindex) {
  device_of(vindex);
  return vindex;
}

CAMLprim value ferry_ml_device_best(value unit) {
  (void)unit;
  ferry_device *dev = ferry_device_best();
  ferry_device_info info;
  if (!dev || ferry_device_info_get(dev, &info) != FERRY_OK) return Val_long(-1);
  return Val_long((long)info.index);
}

static void info_of(ferry_device *dev, ferry_device_info *info) {
  ferry_status st = ferry_device_info_get(dev, info);
  if (st != FERRY_OK) raise_status(st);
}

/* Ferry.Device.info: {name; backend; is_cpu; zero_copy; host_ptr_alignment; total_memory} */
CAMLprim value ferry_ml_device_info(value vindex) {
  CAMLparam1(vindex);
  CAMLlocal3(result, name, backend);
  ferry_device_info info;
  info_of(device_of(vindex), &info);
  name = caml_copy_string(info.name);
  backend = caml_copy_string(info.backend);
  result = caml_alloc_tuple(6);
  Store_field(result, 0, name);
  Store_field(result, 1, backend);
  Store_field(result, 2, Val_bool(info.is_cpu));
  Store_field(result, 3, Val_bool(info.zero_copy));
  Store_field(result, 4, Val_long(info.host_ptr ? (long)info.host_ptr_alignment : 0));
  Store_field(result, 5, Val_long(info.total_memory > (uint64_t)Max_long ? Max_long : (long)info.total_memory));
  CAMLreturn(result);
}

CAMLprim value ferry_ml_device_synchronize(value vindex) {
  ferry_device *dev = device_of(vindex);
  caml_release_runtime_system();
  ferry_status st = ferry_device_synchronize(dev);
  caml_acquire_runtime_system();
  if (st != FERRY_OK) raise_status(st);
  return Val_unit;
}

/* ---- buffers --------------------------------------------------------------- */

/* Ferry.Buffer.t's first field is the handle (a boxed int64), its second
 * whether the buffer's device memory is host memory. */
static ferry_buffer buffer_of(value vbuf) { return (ferry_buffer){(uint64_t)Int64_val(Field(vbuf, 0))}; }

/* Whether a transfer of `bytes` on this buffer releases the runtime lock. On
 * native and checked a transfer under this size is a memcpy of a few
 * microseconds at most: handing the lock to another thread and taking it back
 * costs about as much as a small one (docs/PERFORMANCE.md), and the runtime's
 * time slice is 50 ms. Everything else (GPU drivers, OpenCL, Vulkan, large
 * copies) releases it. */
#define FERRY_ML_HOLD_LOCK_BELOW ((size_t)64 << 10)
static int releases(value vbuf, size_t bytes) { return bytes >= FERRY_ML_HOLD_LOCK_BELOW || !Bool_val(Field(vbuf, 1)); }

CAMLprim value ferry_ml_device_memory_is_host(value vindex) {
  ferry_device_info info;
  info_of(device_of(vindex), &info);
  return Val_bool(info.zero_copy);
}

CAMLprim value ferry_ml_alloc(value vindex, value vlength, value vkind) {
  ferry_device *dev = device_of(vindex);
  ferry_kind kind = kind_checked("Memory.alloc", Int_val(vkind));
  size_t length = (size_t)Long_val(vlength);
  ferry_buffer b;
  caml_release_runtime_system();
  ferry_status st = ferry_alloc(dev, length, kind, &b);
  caml_acquire_runtime_system();
  if (st != FERRY_OK) raise_status(st);
  return caml_copy_int64((int64_t)b.id);
}

CAMLprim value ferry_ml_alloc_custom(value vindex, value vlength, value velem_size) {
  ferry_device *dev = device_of(vindex);
  ferry_buffer b;
  caml_release_runtime_system();
  ferry_status st = ferry_alloc_custom(dev, (size_t)Long_val(vlength), (size_t)Long_val(velem_size), &b);
  caml_acquire_runtime_system();
  if (st != FERRY_OK) raise_status(st);
  return caml_copy_int64((int64_t)b.id);
}

/* The kind argument of alloc_zero_copy/alloc_host_ptr says what the array is;
 * the types make them agree, Obj.magic can make them differ. */
static ferry_array array_of_kind(value varray, value vkind, const char *fn) {
  ferry_array a = array_of(varray, fn);
  ferry_kind kind = kind_of_caml(Int_val(vkind));
  if (kind != a.kind) {
    char text[256];
    snprintf(text, sizeof text, "%s: the array is a %s Bigarray, the kind argument says %s", fn,
             ferry_kind_name(a.kind), kind == FERRY_CUSTOM ? "an unknown kind" : ferry_kind_name(kind));
    raise_text(FERRY_ERROR_KIND_MISMATCH, text);
  }
  return a;
}

/* Some id, or None exactly where ferry says FERRY_ERROR_UNSUPPORTED. */
CAMLprim value ferry_ml_alloc_zero_copy(value vindex, value varray, value vkind) {
  CAMLparam3(vindex, varray, vkind);
  CAMLlocal1(id);
  ferry_device *dev = device_of(vindex);
  ferry_array a = array_of_kind(varray, vkind, "Memory.alloc_zero_copy");
  ferry_buffer b;
  caml_release_runtime_system();
  ferry_status st = ferry_alloc_zero_copy(dev, a, &b);
  caml_acquire_runtime_system();
  if (st == FERRY_ERROR_UNSUPPORTED) CAMLreturn(Val_none);
  if (st != FERRY_OK) raise_status(st);
  id = caml_copy_int64((int64_t)b.id);
  CAMLreturn(caml_alloc_some(id));
}

/* Made id | Refused (refusal, alignment, sentence): Refused exactly where ferry
 * says FERRY_ERROR_REFUSED. */
CAMLprim value ferry_ml_alloc_host_ptr(value vindex, value varray, value vkind) {
  CAMLparam3(vindex, varray, vkind);
  CAMLlocal3(result, id, text);
  ferry_device *dev = device_of(vindex);
  ferry_array a = array_of_kind(varray, vkind, "Memory.alloc_host_ptr");
  ferry_device_info info;
  info_of(dev, &info);
  ferry_buffer b;
  ferry_refusal why = FERRY_REFUSAL_NONE;
  caml_release_runtime_system();
  ferry_status st = ferry_alloc_host_ptr(dev, a, &b, &why);
  caml_acquire_runtime_system();
  if (st == FERRY_ERROR_REFUSED) {
    char sentence[1024];
    snprintf(sentence, sizeof sentence, "%s", ferry_last_error());
    text = caml_copy_string(sentence);
    result = caml_alloc_small(3, 1);
    Field(result, 0) = Val_int((int)why);
    Field(result, 1) = Val_long((long)info.host_ptr_alignment);
    Field(result, 2) = text;
    CAMLreturn(result);
  }
  if (st != FERRY_OK) raise_status(st);
  id = caml_copy_int64((int64_t)b.id);
  result = caml_alloc_small(1, 0);
  Field(result, 0) = id;
  CAMLreturn(result);
}

static ferry_status free_buffer(value vbuf) {
  ferry_buffer b = buffer_of(vbuf);
  caml_release_runtime_system();
  ferry_status st = ferry_free(b);
  caml_acquire_runtime_system();
  return st;
}

/* Memory.free: a stale handle (freed already, or by ferry_shutdown) is not an
 * error here; a driver failure while releasing is (the buffer is gone all the
 * same). */
CAMLprim value ferry_ml_free(value vbuf) {
  CAMLparam1(vbuf);
  ferry_status st = free_buffer(vbuf);
  if (st != FERRY_OK && st != FERRY_ERROR_STALE_BUFFER) raise_status(st);
  CAMLreturn(Val_unit);
}

/* The finaliser's free: never raises a ferry failure (there is nobody to tell). */
CAMLprim value ferry_ml_free_quietly(value vbuf) {
  CAMLparam1(vbuf);
  free_buffer(vbuf);
  CAMLreturn(Val_unit);
}

/* ---- transfers ------------------------------------------------------------- */

/* Each takes its arrays and buffer records as registered roots, so that they
 * (and the arrays the buffers are over) live until ferry returns, whatever the
 * other threads and the GC do meanwhile. */

CAMLprim value ferry_ml_host_to_device(value vsrc, value vdst) {
  CAMLparam2(vsrc, vdst);
  ferry_array src = array_of(vsrc, "Memory.host_to_device");
  ferry_buffer dst = buffer_of(vdst);
  int release = releases(vdst, src.length * ferry_kind_size(src.kind));
  if (release) caml_release_runtime_system();
  ferry_status st = ferry_host_to_device(src, dst);
  if (release) caml_acquire_runtime_system();
  if (st != FERRY_OK) raise_status(st);
  CAMLreturn(Val_unit);
}

CAMLprim value ferry_ml_device_to_host(value vsrc, value vdst) {
  CAMLparam2(vsrc, vdst);
  ferry_buffer src = buffer_of(vsrc);
  ferry_array dst = array_of(vdst, "Memory.device_to_host");
  int release = releases(vsrc, dst.length * ferry_kind_size(dst.kind));
  if (release) caml_release_runtime_system();
  ferry_status st = ferry_device_to_host(src, dst);
  if (release) caml_acquire_runtime_system();
  if (st != FERRY_OK) raise_status(st);
  CAMLreturn(Val_unit);
}

static size_t byte_size_of(value vbytes, const char *fn) {
  long n = Long_val(vbytes);
  if (n < 0) {
    char text[256];
    snprintf(text, sizeof text, "%s: byte_size %ld is negative", fn, n);
    raise_text(FERRY_ERROR_INVALID_ARGUMENT, text);
  }
  return (size_t)n;
}

CAMLprim value ferry_ml_host_ptr_to_device(value vptr, value vbytes, value vdst) {
  CAMLparam3(vptr, vbytes, vdst);
  const void *src = (const void *)Nativeint_val(vptr);
  size_t bytes = byte_size_of(vbytes, "Memory.host_ptr_to_device");
  ferry_buffer dst = buffer_of(vdst);
  int release = releases(vdst, bytes);
  if (release) caml_release_runtime_system();
  ferry_status st = ferry_host_ptr_to_device(src, bytes, dst);
  if (release) caml_acquire_runtime_system();
  if (st != FERRY_OK) raise_status(st);
  CAMLreturn(Val_unit);
}

CAMLprim value ferry_ml_device_to_host_ptr(value vsrc, value vptr, value vbytes) {
  CAMLparam3(vsrc, vptr, vbytes);
  ferry_buffer src = buffer_of(vsrc);
  void *dst = (void *)Nativeint_val(vptr);
  size_t bytes = byte_size_of(vbytes, "Memory.device_to_host_ptr");
  int release = releases(vsrc, bytes);
  if (release) caml_release_runtime_system();
  ferry_status st = ferry_device_to_host_ptr(src, dst, bytes);
  if (release) caml_acquire_runtime_system();
  if (st != FERRY_OK) raise_status(st);
  CAMLreturn(Val_unit);
}

CAMLprim value ferry_ml_device_to_device(value vsrc, value vdst) {
  CAMLparam2(vsrc, vdst);
  ferry_buffer src = buffer_of(vsrc), dst = buffer_of(vdst);
  caml_release_runtime_system();
  ferry_status st = ferry_device_to_device(src, dst);
  caml_acquire_runtime_system();
  if (st != FERRY_OK) raise_status(st);
  CAMLreturn(Val_unit);
}

/* ---- queues and events ---------------------------------------------------- */

/* Ferry's stream and event records have their 64-bit handle (a boxed int64) as
 * field 0. What an asynchronous operation must keep alive (its arrays and buffer
 * records) is rooted by the OCaml side, in the stream's list of pending roots,
 * right after the submission returns; during the submission the arguments are
 * registered here. */
static ferry_queue queue_of(value vs) { return (ferry_queue){(uint64_t)Int64_val(Field(vs, 0))}; }
static ferry_event event_of(value ve) { return (ferry_event){(uint64_t)Int64_val(Field(ve, 0))}; }

CAMLprim value ferry_ml_queue_create(value vindex) {
  ferry_device *dev = device_of(vindex);
  ferry_queue q;
  caml_release_runtime_system();
  ferry_status st = ferry_queue_create(dev, &q);
  caml_acquire_runtime_system();
  if (st != FERRY_OK) raise_status(st);
  return caml_copy_int64((int64_t)q.id);
}

CAMLprim value ferry_ml_queue_default(value vindex) {
  ferry_device *dev = device_of(vindex);
  ferry_queue q;
  ferry_status st = ferry_queue_default(dev, &q);
  if (st != FERRY_OK) raise_status(st);
  return caml_copy_int64((int64_t)q.id);
}

/* Each blocking call reads its handle before releasing the runtime lock (the
 * record may move once other threads run). */
static ferry_status queue_destroy(value vs) {
  ferry_queue q = queue_of(vs);
  caml_release_runtime_system();
  ferry_status st = ferry_queue_destroy(q);
  caml_acquire_runtime_system();
  return st;
}

CAMLprim value ferry_ml_queue_destroy(value vs) {
  CAMLparam1(vs);
  ferry_status st = queue_destroy(vs);
  if (st != FERRY_OK) raise_status(st);
  CAMLreturn(Val_unit);
}

/* The finaliser's destroy: never raises (there is nobody to tell). */
CAMLprim value ferry_ml_queue_destroy_quietly(value vs) {
  CAMLparam1(vs);
  queue_destroy(vs);
  CAMLreturn(Val_unit);
}

static ferry_status queue_synchronize(value vs) {
  ferry_queue q = queue_of(vs);
  caml_release_runtime_system();
  ferry_status st = ferry_queue_synchronize(q);
  caml_acquire_runtime_system();
  return st;
}

CAMLprim value ferry_ml_queue_synchronize(value vs) {
  CAMLparam1(vs);
  ferry_status st = queue_synchronize(vs);
  if (st != FERRY_OK) raise_status(st);
  CAMLreturn(Val_unit);
}

CAMLprim value ferry_ml_queue_synchronize_quietly(value vs) {
  CAMLparam1(vs);
  queue_synchronize(vs);
  CAMLreturn(Val_unit);
}

CAMLprim value ferry_ml_event_create(value unit) {
  (void)unit;
  ferry_event e;
  ferry_status st = ferry_event_create(&e);
  if (st != FERRY_OK) raise_status(st);
  return caml_copy_int64((int64_t)e.id);
}

CAMLprim value ferry_ml_event_destroy(value ve) {
  ferry_status st = ferry_event_destroy(event_of(ve));
  if (st != FERRY_OK && st != FERRY_ERROR_STALE_HANDLE) raise_status(st);
  return Val_unit;
}

CAMLprim value ferry_ml_event_destroy_quietly(value ve) {
  ferry_event_destroy(event_of(ve));
  return Val_unit;
}

CAMLprim value ferry_ml_event_record(value ve, value vs) {
  ferry_status st = ferry_event_record(event_of(ve), queue_of(vs));
  if (st != FERRY_OK) raise_status(st);
  return Val_unit;
}

CAMLprim value ferry_ml_event_synchronize(value ve) {
  CAMLparam1(ve);
  ferry_event e = event_of(ve);
  caml_release_runtime_system();
  ferry_status st = ferry_event_synchronize(e);
  caml_acquire_runtime_system();
  if (st != FERRY_OK) raise_status(st);
  CAMLreturn(Val_unit);
}

CAMLprim value ferry_ml_event_elapsed(value vstart, value vstop) {
  double ms = 0;
  ferry_status st = ferry_event_elapsed(event_of(vstart), event_of(vstop), &ms);
  if (st != FERRY_OK) raise_status(st);
  return caml_copy_double(ms);
}

/* The typed asynchronous calls of the C API: kinds and lengths are checked there,
 * at submission, with the synchronous transfers' sentences. */
CAMLprim value ferry_ml_write_async(value vs, value vsrc, value vdst) {
  CAMLparam3(vs, vsrc, vdst);
  ferry_array src = array_of(vsrc, "Memory.host_to_device_async");
  ferry_status st = ferry_host_to_device_async(queue_of(vs), src, buffer_of(vdst));
  if (st != FERRY_OK) raise_status(st);
  CAMLreturn(Val_unit);
}

CAMLprim value ferry_ml_read_async(value vs, value vsrc, value vdst) {
  CAMLparam3(vs, vsrc, vdst);
  ferry_array dst = array_of(vdst, "Memory.device_to_host_async");
  ferry_status st = ferry_device_to_host_async(queue_of(vs), buffer_of(vsrc), dst);
  if (st != FERRY_OK) raise_status(st);
  CAMLreturn(Val_unit);
}

CAMLprim value ferry_ml_copy_async(value vs, value vsrc, value vdst) {
  CAMLparam3(vs, vsrc, vdst);
  ferry_status st = ferry_device_to_device_async(queue_of(vs), buffer_of(vsrc), buffer_of(vdst));
  if (st != FERRY_OK) raise_status(st);
  CAMLreturn(Val_unit);
}

/* ---- buffer info ----------------------------------------------------------- */

CAMLprim value ferry_ml_device_ptr(value vbuf) {
  return caml_copy_nativeint((intnat)ferry_device_ptr(buffer_of(vbuf)));
}

CAMLprim value ferry_ml_is_zero_copy(value vbuf) { return Val_bool(ferry_is_zero_copy(buffer_of(vbuf))); }

/* ---- host arrays ----------------------------------------------------------- */

CAMLprim value ferry_ml_bigarray_address(value vba) { return caml_copy_nativeint((intnat)Caml_ba_data_val(vba)); }

/* A Bigarray over posix_memalign'd memory, CAML_BA_MANAGED: the GC frees it with
 * free(), which posix_memalign's memory takes. */
CAMLprim value ferry_ml_aligned_array(value vkind, value valign, value vlength) {
  int k = Int_val(vkind);
  ferry_kind kind = kind_of_caml(k);
  long align = Long_val(valign), length = Long_val(vlength);
  if (kind == FERRY_CUSTOM) kind_checked("Ferry.aligned_array", k);
  if (align <= 0 || (align & (align - 1)) != 0)
    raise_fmt(FERRY_ERROR_INVALID_ARGUMENT, "Ferry.aligned_array: alignment %ld is not a power of two", align, 0);
  if (length < 0) raise_fmt(FERRY_ERROR_INVALID_ARGUMENT, "Ferry.aligned_array: length %ld is negative", length, 0);
  size_t es = ferry_kind_size(kind);
  /* Element sizes and alignments are powers of two: a byte size that is a
   * multiple of the larger of the two is a whole number of elements and of
   * alignment units. */
  size_t unit = (size_t)align > es ? (size_t)align : es;
  if ((size_t)length > (SIZE_MAX - unit) / es)
    raise_fmt(FERRY_ERROR_OVERFLOW, "Ferry.aligned_array: %ld elements of %ld bytes overflow", length, (long)es);
  size_t asked = (size_t)length * es;
  size_t bytes = (asked + unit - 1) / unit * unit;
  if (bytes > (size_t)Max_long)
    raise_fmt(FERRY_ERROR_OVERFLOW, "Ferry.aligned_array: %ld bytes is too many", (long)bytes, 0);
  size_t memalign = (size_t)align < sizeof(void *) ? sizeof(void *) : (size_t)align;
  void *data = NULL;
  /* A zero-length array still gets memory of its own, aligned like the others. */
  if (posix_memalign(&data, memalign, bytes ? bytes : memalign) != 0 || !data)
    raise_fmt(FERRY_ERROR_OUT_OF_MEMORY, "Ferry.aligned_array: %ld bytes aligned to %ld cannot be allocated",
              (long)bytes, align);
  memset((char *)data + asked, 0, bytes - asked);
  return caml_ba_alloc_dims(k | CAML_BA_C_LAYOUT | CAML_BA_MANAGED, 1, data, (intnat)(bytes / es));
}
