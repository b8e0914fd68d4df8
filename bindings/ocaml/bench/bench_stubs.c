/* The raw side of the OCaml benchmark: libferry's C calls, timed in C, in the
 * same process as the OCaml calls they are compared with. Every loop here holds
 * the OCaml runtime lock (the bench runs one thread). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/bigarray.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>

#include <ferry.h>

#include <stdint.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

CAMLprim value bench_now(value unit) {
  (void)unit;
  return caml_copy_double(now());
}

static ferry_device *device(value vindex) {
  ferry_device *dev = NULL;
  if (ferry_device_get((size_t)Long_val(vindex), &dev) != FERRY_OK) caml_failwith(ferry_last_error());
  return dev;
}

/* Seconds per call of `calls` ferry_write (which = 0) or ferry_host_to_device
 * (which = 1) of 16 float32 (64 bytes) into one buffer. */
CAMLprim value bench_c_small(value vindex, value vwhich, value vcalls) {
  ferry_device *dev = device(vindex);
  long calls = Long_val(vcalls);
  float src[16];
  for (int i = 0; i < 16; i++)
    src[i] = (float)i;
  ferry_buffer b;
  if (ferry_alloc(dev, 16, FERRY_FLOAT32, &b) != FERRY_OK) caml_failwith(ferry_last_error());
  ferry_array a = ferry_array_of(src, 16, FERRY_FLOAT32);
  ferry_status st = FERRY_OK;
  double t0 = now();
  if (Int_val(vwhich) == 0)
    for (long i = 0; i < calls && st == FERRY_OK; i++)
      st = ferry_write(b, 0, src, sizeof src);
  else
    for (long i = 0; i < calls && st == FERRY_OK; i++)
      st = ferry_host_to_device(a, b);
  double t = now() - t0;
  ferry_free(b);
  if (st != FERRY_OK) caml_failwith(ferry_last_error());
  return caml_copy_double(t / (double)calls);
}

/* A uint8 buffer of `length` elements, for bench_c_large; its handle. */
CAMLprim value bench_c_alloc(value vindex, value vlength) {
  ferry_buffer b;
  if (ferry_alloc(device(vindex), (size_t)Long_val(vlength), FERRY_UINT8, &b) != FERRY_OK)
    caml_failwith(ferry_last_error());
  return caml_copy_int64((int64_t)b.id);
}

CAMLprim value bench_c_free(value vid) {
  ferry_free((ferry_buffer){(uint64_t)Int64_val(vid)});
  return Val_unit;
}

/* Seconds of one ferry_host_to_device from the int8_unsigned Bigarray's memory
 * into the buffer: the call Memory.host_to_device makes, made from C. */
CAMLprim value bench_c_large(value vid, value vba) {
  struct caml_ba_array *ba = Caml_ba_array_val(vba);
  ferry_array a = ferry_array_of(ba->data, (size_t)ba->dim[0], FERRY_UINT8);
  double t0 = now();
  ferry_status st = ferry_host_to_device(a, (ferry_buffer){(uint64_t)Int64_val(vid)});
  double t = now() - t0;
  if (st != FERRY_OK) caml_failwith(ferry_last_error());
  return caml_copy_double(t);
}

/* Seconds per submission of `calls` ferry_host_to_device_async (the call
 * Memory.host_to_device_async makes) of 16 float32 on a queue of its own, in
 * batches of `batch`, the queue synchronised after each batch, untimed. */
CAMLprim value bench_c_async_small(value vindex, value vcalls, value vbatch) {
  ferry_device *dev = device(vindex);
  long calls = Long_val(vcalls), batch = Long_val(vbatch);
  float src[16];
  for (int i = 0; i < 16; i++)
    src[i] = (float)i;
  ferry_buffer b;
  ferry_queue q;
  if (ferry_alloc(dev, 16, FERRY_FLOAT32, &b) != FERRY_OK) caml_failwith(ferry_last_error());
  if (ferry_queue_create(dev, &q) != FERRY_OK) {
    ferry_free(b);
    caml_failwith(ferry_last_error());
  }
  ferry_array a = ferry_array_of(src, 16, FERRY_FLOAT32);
  ferry_status st = FERRY_OK;
  double spent = 0;
  for (long done = 0; done < calls && st == FERRY_OK; done += batch) {
    long n = calls - done < batch ? calls - done : batch;
    double t0 = now();
    for (long i = 0; i < n && st == FERRY_OK; i++)
      st = ferry_host_to_device_async(q, a, b);
    spent += now() - t0;
    if (st == FERRY_OK) st = ferry_queue_synchronize(q);
  }
  ferry_queue_destroy(q);
  ferry_free(b);
  if (st != FERRY_OK) caml_failwith(ferry_last_error());
  return caml_copy_double(spent / (double)calls);
}

/* Seconds of one ferry_host_to_device_async from the Bigarray's memory into the
 * buffer, on a queue of the buffer's device made once, and its synchronisation. */
static ferry_queue large_queue;

CAMLprim value bench_c_async_large(value vindex, value vid, value vba) {
  struct caml_ba_array *ba = Caml_ba_array_val(vba);
  ferry_array a = ferry_array_of(ba->data, (size_t)ba->dim[0], FERRY_UINT8);
  if (!large_queue.id && ferry_queue_create(device(vindex), &large_queue) != FERRY_OK)
    caml_failwith(ferry_last_error());
  double t0 = now();
  ferry_status st = ferry_host_to_device_async(large_queue, a, (ferry_buffer){(uint64_t)Int64_val(vid)});
  if (st == FERRY_OK) st = ferry_queue_synchronize(large_queue);
  double t = now() - t0;
  if (st != FERRY_OK) caml_failwith(ferry_last_error());
  return caml_copy_double(t);
}

CAMLprim value bench_c_async_done(value unit) {
  (void)unit;
  if (large_queue.id) ferry_queue_destroy(large_queue);
  large_queue = FERRY_NULL_QUEUE;
  return Val_unit;
}
