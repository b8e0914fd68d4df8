/*
 * The per-device and per-pair cases of the conformance suite. Every case
 * asserts results (bytes read back, statuses, sentences, untouched outputs), and
 * runs unchanged on every backend; what a device cannot do (zero-copy, host
 * pointers) is checked as a refusal instead.
 */
#include "conformance.h"

#include <stdlib.h>
#include <string.h>

#define SENTINEL_ID 0x5e5e5e5e5e5e5e5eULL

ferry_buffer conf_sentinel(void) { return (ferry_buffer){SENTINEL_ID}; }

/* A buffer of n bytes (uint8) holding fill_pattern(seed). */
ferry_buffer conf_patterned(ferry_device *dev, size_t n, uint32_t seed) {
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &b));
  unsigned char *h = malloc(n ? n : 1);
  fill_pattern(h, n, seed);
  CHECK_OK(ferry_host_to_device(ferry_array_of(h, n, FERRY_UINT8), b));
  free(h);
  return b;
}

/* The buffer's bytes must be fill_pattern(seed). */
void conf_expect_pattern(ferry_buffer b, size_t n, uint32_t seed, const char *what) {
  unsigned char *h = malloc(n ? n : 1);
  memset(h, 0, n);
  CHECK_OK(ferry_device_to_host_ptr(b, h, n));
  size_t at = find_pattern_mismatch(h, n, seed);
  CHECK_MSG(at == SIZE_MAX, "%s: byte %zu of %zu differs", what, at, n);
  free(h);
}

/* ---- devices --------------------------------------------------------------- */

static void device_info(ferry_device *dev, const ferry_device_info *info) {
  CHECK(info->name && info->name[0]);
  CHECK(info->backend && info->backend[0]);
  ferry_device *again = NULL;
  CHECK_OK(ferry_device_get(info->index, &again));
  CHECK(again == dev);
  CHECK(info->index < ferry_device_count());
  CHECK(info->total_memory > 0);
  CHECK(info->max_allocation > 0);
  CHECK(info->host_ptr_alignment >= 1 && (info->host_ptr_alignment & (info->host_ptr_alignment - 1)) == 0);
  if (info->zero_copy) CHECK(info->is_cpu && info->host_ptr);

  ferry_native nat;
  memset(&nat, 0xAB, sizeof nat);
  CHECK_OK(ferry_device_native(dev, &nat));
  /* What the backend fills is in conformance_backends.c's table. */
  unsigned fields = conformance_backend_of(info->backend)->native_fields;
  if (fields == 0) {
    CHECK(nat.device == 0 && nat.context == 0 && nat.queue == 0 && nat.queue_family == 0);
  } else {
    if (fields & CONF_NATIVE_DEVICE) CHECK(nat.device != 0);
    if (fields & CONF_NATIVE_CONTEXT) CHECK(nat.context != 0);
    if (fields & CONF_NATIVE_QUEUE) CHECK(nat.queue != 0);
    if (!(fields & CONF_NATIVE_CONTEXT) && (fields & CONF_NATIVE_DEVICE)) CHECK(nat.context == 0); /* Metal */
  }
  CHECK_OK(ferry_device_synchronize(dev));

  ferry_device_info untouched;
  memset(&untouched, 0x11, sizeof untouched);
  CHECK_STATUS(ferry_device_info_get(NULL, &untouched), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK(untouched.index == (size_t)0x1111111111111111ULL);
  CHECK_STATUS(ferry_device_info_get(dev, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_device_native(dev, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_device_stats(dev, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_device_synchronize(NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_device_trim(NULL), FERRY_ERROR_INVALID_ARGUMENT);
  /* A pointer that is not a device is refused, not dereferenced. */
  long not_a_device[64] = {0};
  CHECK_STATUS(ferry_device_synchronize((ferry_device *)not_a_device), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("not a device");
  ferry_device *none = (ferry_device *)not_a_device;
  CHECK_STATUS(ferry_device_get(ferry_device_count(), &none), FERRY_ERROR_NO_DEVICE);
  CHECK(none == (ferry_device *)not_a_device);
  CHECK_STATUS(ferry_device_get(0, NULL), FERRY_ERROR_INVALID_ARGUMENT);
}

/* ---- buffers of every kind ------------------------------------------------- */

static void every_kind(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  for (int k = FERRY_FLOAT16; k < FERRY_CUSTOM; k++) {
    ferry_kind kind = (ferry_kind)k;
    size_t n = 1000 + (size_t)k * 7, es = ferry_kind_size(kind), bytes = n * es;
    unsigned char *src = malloc(bytes), *dst = calloc(1, bytes);
    fill_pattern(src, bytes, (uint32_t)k + 1);
    ferry_buffer b = conf_sentinel();
    CHECK_OK(ferry_alloc(dev, n, kind, &b));
    CHECK(ferry_size(b) == n);
    CHECK(ferry_elem_size(b) == es);
    CHECK(ferry_buffer_kind(b) == kind);
    CHECK(ferry_buffer_device(b) == dev);
    CHECK(ferry_device_ptr(b) != 0);
    CHECK(!ferry_is_zero_copy(b));
    CHECK_OK(ferry_host_to_device(ferry_array_of(src, n, kind), b));
    CHECK_OK(ferry_device_to_host(b, ferry_array_of(dst, n, kind)));
    CHECK_MSG(memcmp(src, dst, bytes) == 0, "kind %s: bytes read back differ", ferry_kind_name(kind));
    /* A sub-range through the byte-range call. */
    memset(dst, 0, bytes);
    CHECK_OK(ferry_read(b, es * 3, dst, es * 5));
    CHECK(memcmp(src + es * 3, dst, es * 5) == 0);
    /* Device to device, same kind and length. */
    ferry_buffer c = conf_sentinel();
    CHECK_OK(ferry_alloc(dev, n, kind, &c));
    CHECK_OK(ferry_device_to_device(b, c));
    memset(dst, 0, bytes);
    CHECK_OK(ferry_device_to_host(c, ferry_array_of(dst, n, kind)));
    CHECK(memcmp(src, dst, bytes) == 0);
    CHECK_OK(ferry_free(c));
    CHECK_OK(ferry_free(b));
    free(src);
    free(dst);
  }
}

static void zero_length(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  for (int k = FERRY_FLOAT16; k < FERRY_CUSTOM; k++) {
    ferry_kind kind = (ferry_kind)k;
    ferry_buffer b = conf_sentinel(), c = conf_sentinel();
    CHECK_OK(ferry_alloc(dev, 0, kind, &b));
    CHECK_OK(ferry_alloc(dev, 0, kind, &c));
    CHECK(b.id != SENTINEL_ID && b.id != c.id);
    CHECK(ferry_size(b) == 0);
    CHECK(ferry_elem_size(b) == ferry_kind_size(kind));
    CHECK(ferry_buffer_kind(b) == kind);
    CHECK(ferry_device_ptr(b) == 0);
    CHECK_OK(ferry_host_to_device(ferry_array_of(NULL, 0, kind), b));
    CHECK_OK(ferry_device_to_host(b, ferry_array_of(NULL, 0, kind)));
    CHECK_OK(ferry_host_ptr_to_device(NULL, 0, b));
    CHECK_OK(ferry_device_to_host_ptr(b, NULL, 0));
    CHECK_OK(ferry_write(b, 0, NULL, 0));
    CHECK_OK(ferry_read(b, 0, NULL, 0));
    CHECK_OK(ferry_copy(b, 0, c, 0, 0));
    CHECK_OK(ferry_device_to_device(b, c));
    char one = 1;
    CHECK_STATUS(ferry_write(b, 0, &one, 1), FERRY_ERROR_OUT_OF_RANGE);
    CHECK_STATUS(ferry_write(b, 1, &one, 0), FERRY_ERROR_OUT_OF_RANGE);
    CHECK_STATUS(ferry_host_to_device(ferry_array_of(&one, 1, kind), b), FERRY_ERROR_SIZE_MISMATCH);
    CHECK_OK(ferry_free(b));
    CHECK_OK(ferry_free(c));
  }
  ferry_buffer r = conf_sentinel();
  CHECK_OK(ferry_alloc_custom(dev, 0, 24, &r));
  CHECK(ferry_size(r) == 0 && ferry_elem_size(r) == 24);
  CHECK_OK(ferry_host_ptr_to_device(NULL, 0, r));
  CHECK_OK(ferry_free(r));
}

typedef struct record {
  double x;
  int32_t id;
  char tag[4];
} record;

static void custom_records(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  enum { N = 37 };
  record in[N], out[N];
  for (int i = 0; i < N; i++)
    in[i] = (record){.x = i * 1.5, .id = 1000 + i, .tag = {'r', (char)('a' + i % 26), 0, 0}};
  memset(out, 0, sizeof out);
  ferry_buffer b = conf_sentinel();
  CHECK_OK(ferry_alloc_custom(dev, N, sizeof(record), &b));
  CHECK(ferry_size(b) == N);
  CHECK(ferry_elem_size(b) == sizeof(record));
  CHECK(ferry_buffer_kind(b) == FERRY_CUSTOM);
  CHECK_OK(ferry_host_ptr_to_device(in, sizeof in, b));
  CHECK_OK(ferry_device_to_host_ptr(b, out, sizeof out));
  CHECK(memcmp(in, out, sizeof in) == 0);
  /* Typed transfers refuse custom buffers, whatever the byte count. */
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(in, sizeof in, FERRY_UINT8), b), FERRY_ERROR_KIND_MISMATCH);
  CHECK_ERROR_HAS("custom");
  CHECK_STATUS(ferry_device_to_host(b, ferry_array_of(out, sizeof out, FERRY_UINT8)), FERRY_ERROR_KIND_MISMATCH);
  CHECK_STATUS(ferry_host_ptr_to_device(in, sizeof in - 1, b), FERRY_ERROR_SIZE_MISMATCH);
  CHECK_STATUS(ferry_device_to_host_ptr(b, out, sizeof out + 1), FERRY_ERROR_SIZE_MISMATCH);
  /* Device to device: same element size and length only. */
  ferry_buffer same = conf_sentinel(), halves = conf_sentinel(), typed = conf_sentinel();
  CHECK_OK(ferry_alloc_custom(dev, N, sizeof(record), &same));
  CHECK_OK(ferry_alloc_custom(dev, N * 2, sizeof(record) / 2, &halves));
  CHECK_OK(ferry_alloc(dev, N * sizeof(record), FERRY_UINT8, &typed));
  CHECK_OK(ferry_device_to_device(b, same));
  memset(out, 0, sizeof out);
  CHECK_OK(ferry_device_to_host_ptr(same, out, sizeof out));
  CHECK(memcmp(in, out, sizeof in) == 0);
  CHECK_STATUS(ferry_device_to_device(b, halves), FERRY_ERROR_KIND_MISMATCH);
  CHECK_STATUS(ferry_device_to_device(b, typed), FERRY_ERROR_KIND_MISMATCH);
  /* Byte ranges work on custom buffers. */
  record one = {.x = -1, .id = -7, .tag = {'z', 0, 0, 0}};
  CHECK_OK(ferry_write(b, 5 * sizeof(record), &one, sizeof one));
  record back;
  CHECK_OK(ferry_read(b, 5 * sizeof(record), &back, sizeof back));
  CHECK(back.id == -7 && back.x == -1);
  ferry_buffer bad = conf_sentinel();
  CHECK_STATUS(ferry_alloc_custom(dev, 10, 0, &bad), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_alloc_custom(dev, SIZE_MAX / 16 + 1, 16, &bad), FERRY_ERROR_OVERFLOW);
  CHECK_STATUS(ferry_alloc_custom(dev, 10, 16, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK(bad.id == SENTINEL_ID);
  CHECK_OK(ferry_free(same));
  CHECK_OK(ferry_free(halves));
  CHECK_OK(ferry_free(typed));
  CHECK_OK(ferry_free(b));
}

static void bad_arguments(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  ferry_buffer b = conf_sentinel();
  CHECK_STATUS(ferry_alloc(NULL, 10, FERRY_FLOAT32, &b), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("device is NULL");
  CHECK_STATUS(ferry_alloc(dev, 10, FERRY_FLOAT32, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_alloc(dev, 10, FERRY_CUSTOM, &b), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("ferry_alloc_custom");
  CHECK_STATUS(ferry_alloc(dev, 10, (ferry_kind)99, &b), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("99");
  CHECK_STATUS(ferry_alloc(dev, 10, (ferry_kind)-1, &b), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_alloc_custom(NULL, 10, 4, &b), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_alloc_zero_copy(dev, ferry_array_of(NULL, 10, FERRY_FLOAT32), &b), FERRY_ERROR_INVALID_ARGUMENT);
  float f[4] = {0};
  CHECK_STATUS(ferry_alloc_zero_copy(dev, ferry_array_of(f, 4, (ferry_kind)42), &b), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_alloc_zero_copy(dev, ferry_array_of(f, 4, FERRY_CUSTOM), &b), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_alloc_zero_copy(dev, ferry_array_of(f, 4, FERRY_FLOAT32), NULL), FERRY_ERROR_INVALID_ARGUMENT);
  ferry_refusal why = (ferry_refusal)77;
  CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(NULL, 10, FERRY_FLOAT32), &b, &why),
               FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_alloc_host_ptr(NULL, ferry_array_of(f, 4, FERRY_FLOAT32), &b, &why), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(f, 4, FERRY_FLOAT32), NULL, &why),
               FERRY_ERROR_INVALID_ARGUMENT);
  CHECK(why == (ferry_refusal)77);
  CHECK(b.id == SENTINEL_ID);

  ferry_buffer real = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, 4, FERRY_FLOAT32, &real));
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(NULL, 4, FERRY_FLOAT32), real), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_device_to_host(real, ferry_array_of(NULL, 4, FERRY_FLOAT32)), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(f, 4, (ferry_kind)1234), real), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_host_ptr_to_device(NULL, 16, real), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_device_to_host_ptr(real, NULL, 16), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_write(real, 0, NULL, 4), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_read(real, 0, NULL, 4), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_OK(ferry_free(real));
}

static void overflow_and_out_of_memory(ferry_device *dev, const ferry_device_info *info) {
  ferry_buffer b = conf_sentinel();
  CHECK_STATUS(ferry_alloc(dev, SIZE_MAX, FERRY_FLOAT64, &b), FERRY_ERROR_OVERFLOW);
  CHECK_ERROR_HAS("overflow");
  CHECK_STATUS(ferry_alloc(dev, SIZE_MAX / 2 + 1, FERRY_INT16, &b), FERRY_ERROR_OVERFLOW);
  CHECK_STATUS(ferry_alloc(dev, SIZE_MAX / 8 + 1, FERRY_COMPLEX32, &b), FERRY_ERROR_OVERFLOW);
  char fake[16];
  CHECK_STATUS(ferry_alloc_zero_copy(dev, ferry_array_of(fake, SIZE_MAX / 4 + 1, FERRY_FLOAT32), &b),
               FERRY_ERROR_OVERFLOW);
  CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(fake, SIZE_MAX / 4 + 1, FERRY_FLOAT32), &b, NULL),
               FERRY_ERROR_OVERFLOW);
  /* A byte count that fits, at an address where the array's end does not. */
  void *top = (void *)(UINTPTR_MAX - 63);
  CHECK_STATUS(ferry_alloc_zero_copy(dev, ferry_array_of(top, 16, FERRY_FLOAT32), &b), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("past the end of the address space");
  CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(top, 16, FERRY_FLOAT32), &b, NULL),
               FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("past the end of the address space");
  if (info->max_allocation < SIZE_MAX) {
    size_t too_many = (size_t)info->max_allocation + 1;
    CHECK_STATUS(ferry_alloc(dev, too_many, FERRY_UINT8, &b), FERRY_ERROR_OUT_OF_MEMORY);
    char number[32];
    snprintf(number, sizeof number, "%zu", too_many);
    CHECK_ERROR_HAS(number);
  }
  CHECK(b.id == SENTINEL_ID);
}

/* ---- mismatches change nothing --------------------------------------------- */

static void mismatches_change_nothing(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  enum { N = 128 };
  float a[N], other[N];
  fill_pattern(a, sizeof a, 11);
  ferry_buffer b = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, N, FERRY_FLOAT32, &b));
  CHECK_OK(ferry_host_to_device(ferry_array_of(a, N, FERRY_FLOAT32), b));

  fill_pattern(other, sizeof other, 12);
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(other, 100, FERRY_FLOAT32), b), FERRY_ERROR_SIZE_MISMATCH);
  CHECK_ERROR_HAS("100");
  CHECK_ERROR_HAS("128");
  CHECK_ERROR_HAS("float32");
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(other, N, FERRY_INT32), b), FERRY_ERROR_KIND_MISMATCH);
  CHECK_ERROR_HAS("int32");
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(other, N + 1, FERRY_FLOAT32), b), FERRY_ERROR_SIZE_MISMATCH);
  CHECK_STATUS(ferry_host_ptr_to_device(other, sizeof other - 1, b), FERRY_ERROR_SIZE_MISMATCH);
  CHECK_ERROR_HAS("511");
  CHECK_STATUS(ferry_write(b, 500, other, 13), FERRY_ERROR_OUT_OF_RANGE);
  conf_expect_pattern(b, sizeof a, 11, "buffer after refused writes");

  fill_pattern(other, sizeof other, 13);
  CHECK_STATUS(ferry_device_to_host(b, ferry_array_of(other, 100, FERRY_FLOAT32)), FERRY_ERROR_SIZE_MISMATCH);
  CHECK_STATUS(ferry_device_to_host(b, ferry_array_of(other, N, FERRY_UINT32)), FERRY_ERROR_KIND_MISMATCH);
  CHECK_STATUS(ferry_device_to_host_ptr(b, other, sizeof other + 4), FERRY_ERROR_SIZE_MISMATCH);
  CHECK_STATUS(ferry_read(b, 0, other, sizeof other + 1), FERRY_ERROR_OUT_OF_RANGE);
  CHECK_MSG(find_pattern_mismatch(other, sizeof other, 13) == SIZE_MAX, "host array changed by a refused read");

  ferry_buffer shorter = conf_sentinel(), ints = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, N - 1, FERRY_FLOAT32, &shorter));
  CHECK_OK(ferry_alloc(dev, N, FERRY_INT32, &ints));
  CHECK_OK(ferry_host_ptr_to_device(other, (N - 1) * sizeof(float), shorter));
  CHECK_STATUS(ferry_device_to_device(b, shorter), FERRY_ERROR_SIZE_MISMATCH);
  CHECK_STATUS(ferry_device_to_device(shorter, b), FERRY_ERROR_SIZE_MISMATCH);
  CHECK_STATUS(ferry_device_to_device(b, ints), FERRY_ERROR_KIND_MISMATCH);
  conf_expect_pattern(shorter, (N - 1) * sizeof(float), 13, "destination after a refused device_to_device");
  conf_expect_pattern(b, sizeof a, 11, "buffer after refused copies");
  CHECK_OK(ferry_free(shorter));
  CHECK_OK(ferry_free(ints));
  CHECK_OK(ferry_free(b));
}

/* ---- byte ranges ------------------------------------------------------------ */

static void byte_ranges(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  enum { N = 4096 };
  unsigned char model[N], chunk[300], back[N];
  fill_pattern(model, N, 21);
  ferry_buffer b = conf_patterned(dev, N, 21);

  fill_pattern(chunk, sizeof chunk, 22);
  CHECK_OK(ferry_write(b, 1000, chunk, 100));
  memcpy(model + 1000, chunk, 100);
  CHECK_OK(ferry_write(b, N - 7, chunk, 7)); /* the very end */
  memcpy(model + N - 7, chunk, 7);
  CHECK_OK(ferry_write(b, 3, chunk + 50, 1)); /* odd offsets and sizes */
  model[3] = chunk[50];
  CHECK_OK(ferry_read(b, 0, back, N));
  CHECK(memcmp(model, back, N) == 0);
  memset(back, 0, N);
  CHECK_OK(ferry_read(b, 997, back, 111));
  CHECK(memcmp(model + 997, back, 111) == 0);

  CHECK_STATUS(ferry_write(b, N - 99, chunk, 100), FERRY_ERROR_OUT_OF_RANGE);
  CHECK_ERROR_HAS("4096");
  CHECK_STATUS(ferry_read(b, N + 1, back, 0), FERRY_ERROR_OUT_OF_RANGE);
  CHECK_OK(ferry_read(b, N, back, 0));
  CHECK_STATUS(ferry_write(b, SIZE_MAX, chunk, 2), FERRY_ERROR_OVERFLOW);
  CHECK_STATUS(ferry_read(b, 2, back, SIZE_MAX - 1), FERRY_ERROR_OVERFLOW);

  /* ferry_copy within one buffer is memmove: forward, backward, disjoint. */
  CHECK_OK(ferry_copy(b, 0, b, 10, 1000));
  memmove(model + 10, model, 1000);
  CHECK_OK(ferry_copy(b, 500, b, 400, 1000));
  memmove(model + 400, model + 500, 1000);
  CHECK_OK(ferry_copy(b, 3000, b, 100, 50));
  memmove(model + 100, model + 3000, 50);
  CHECK_OK(ferry_copy(b, 77, b, 77, 500)); /* onto itself */
  CHECK_OK(ferry_read(b, 0, back, N));
  CHECK_MSG(memcmp(model, back, N) == 0, "ferry_copy within a buffer is not memmove");

  ferry_buffer c = conf_patterned(dev, 2000, 23);
  unsigned char cmodel[2000];
  fill_pattern(cmodel, sizeof cmodel, 23);
  CHECK_OK(ferry_copy(b, 1234, c, 17, 1500));
  memcpy(cmodel + 17, model + 1234, 1500);
  CHECK_STATUS(ferry_copy(b, 3000, c, 0, 1500), FERRY_ERROR_OUT_OF_RANGE); /* source runs past */
  CHECK_STATUS(ferry_copy(b, 0, c, 1000, 1001), FERRY_ERROR_OUT_OF_RANGE); /* destination runs past */
  CHECK_ERROR_HAS("destination");
  CHECK_STATUS(ferry_copy(b, SIZE_MAX, c, 0, 1), FERRY_ERROR_OVERFLOW);
  CHECK_OK(ferry_copy(b, 0, c, 0, 0));
  unsigned char cback[2000];
  CHECK_OK(ferry_read(c, 0, cback, sizeof cback));
  CHECK(memcmp(cmodel, cback, sizeof cback) == 0);
  CHECK_OK(ferry_read(b, 0, back, N));
  CHECK(memcmp(model, back, N) == 0);
  CHECK_OK(ferry_free(c));
  CHECK_OK(ferry_free(b));
}

/* ---- zero-copy and host-pointer buffers -------------------------------------- */

static void zero_copy(ferry_device *dev, const ferry_device_info *info) {
  enum { N = 1000 };
  float *data = calloc(N + 2, sizeof(float));
  float other[N], back[N];
  ferry_buffer b = conf_sentinel();
  if (!info->zero_copy) {
    CHECK_STATUS(ferry_alloc_zero_copy(dev, ferry_array_of(data, N, FERRY_FLOAT32), &b), FERRY_ERROR_UNSUPPORTED);
    CHECK_ERROR_HAS(info->backend);
    CHECK(b.id == SENTINEL_ID);
    free(data);
    return;
  }
  fill_pattern(data, N * sizeof(float), 31);
  CHECK_OK(ferry_alloc_zero_copy(dev, ferry_array_of(data, N, FERRY_FLOAT32), &b));
  CHECK(ferry_device_ptr(b) == (uintptr_t)data);
  CHECK(ferry_size(b) == N);
  CHECK(ferry_is_zero_copy(b));
  CHECK(ferry_buffer_kind(b) == FERRY_FLOAT32);
  /* The buffer IS the array: a change to the array is the buffer's content. */
  fill_pattern(data, N * sizeof(float), 32);
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(back, N, FERRY_FLOAT32)));
  CHECK(memcmp(back, data, sizeof back) == 0);
  /* Own array: no data moves. */
  CHECK_OK(ferry_host_to_device(ferry_array_of(data, N, FERRY_FLOAT32), b));
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(data, N, FERRY_FLOAT32)));
  CHECK(find_pattern_mismatch(data, N * sizeof(float), 32) == SIZE_MAX);
  /* Another array: copied, and the own array then equals it. */
  fill_pattern(other, sizeof other, 33);
  CHECK_OK(ferry_host_to_device(ferry_array_of(other, N, FERRY_FLOAT32), b));
  CHECK(memcmp(data, other, sizeof other) == 0);
  memset(back, 0, sizeof back);
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(back, N, FERRY_FLOAT32)));
  CHECK(memcmp(back, other, sizeof back) == 0);
  /* Overlapping host ranges behave like memmove. */
  float expect[N];
  memcpy(expect, data + 2, sizeof expect);
  data[N] = 1.5f;
  data[N + 1] = 2.5f;
  memcpy(expect, data + 2, sizeof expect);
  CHECK_OK(ferry_host_to_device(ferry_array_of(data + 2, N, FERRY_FLOAT32), b));
  CHECK(memcmp(data, expect, sizeof expect) == 0);
  /* Mismatches are refused here too. */
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(other, N - 1, FERRY_FLOAT32), b), FERRY_ERROR_SIZE_MISMATCH);
  CHECK(memcmp(data, expect, sizeof expect) == 0);
  CHECK_OK(ferry_free(b));
  CHECK(!ferry_is_zero_copy(b));
  /* Freeing neither frees nor changes the array: it is still ours, as it was (a
   * write after a free would be caught by ASan and valgrind). */
  CHECK(memcmp(data, expect, sizeof expect) == 0);
  data[0] = 42.0f;
  ferry_buffer empty = conf_sentinel();
  CHECK_OK(ferry_alloc_zero_copy(dev, ferry_array_of(NULL, 0, FERRY_INT8), &empty));
  CHECK(ferry_size(empty) == 0 && ferry_is_zero_copy(empty));
  CHECK_OK(ferry_free(empty));
  free(data);
}

static void host_ptr(ferry_device *dev, const ferry_device_info *info) {
  size_t align = info->host_ptr_alignment;
  size_t bytes = 65536 > align ? 65536 : align;
  size_t n = bytes / sizeof(int32_t);
  int32_t *array = harness_aligned(align > 64 ? align : 64, bytes + align);
  int32_t *other = malloc(bytes), *back = malloc(bytes);
  ferry_buffer b = conf_sentinel();
  ferry_refusal why = (ferry_refusal)77;
  fill_pattern(array, bytes, 41);

  if (!info->host_ptr) {
    CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(array, n, FERRY_INT32), &b, &why), FERRY_ERROR_REFUSED);
    CHECK(why == FERRY_REFUSAL_UNSUPPORTED);
    CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(array, n, FERRY_INT32), &b, NULL), FERRY_ERROR_REFUSED);
    CHECK(b.id == SENTINEL_ID);
    goto done;
  }
  CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(array, n, FERRY_INT32), &b, &why));
  CHECK(why == FERRY_REFUSAL_NONE);
  /* "No transfers needed" only where the buffer IS the array; elsewhere host
   * access goes through the synchronising transfers below. */
  CHECK_MSG(ferry_is_zero_copy(b) == info->zero_copy, "ferry_is_zero_copy of a host-pointer buffer is %d on %s",
            (int)ferry_is_zero_copy(b), info->name);
  CHECK(ferry_size(b) == n);
  CHECK(ferry_device_ptr(b) != 0);
  if (info->zero_copy) CHECK(ferry_device_ptr(b) == (uintptr_t)array);
  /* Own array: synchronisation only; the device sees the host's writes. */
  CHECK_OK(ferry_host_to_device(ferry_array_of(array, n, FERRY_INT32), b));
  ferry_buffer plain = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, n, FERRY_INT32, &plain));
  CHECK_OK(ferry_device_to_device(b, plain));
  conf_expect_pattern(plain, bytes, 41, "plain buffer copied from a host-ptr buffer");
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(array, n, FERRY_INT32)));
  CHECK(find_pattern_mismatch(array, bytes, 41) == SIZE_MAX);
  /* Device-side writes land in the array once the host takes it back. */
  fill_pattern(other, bytes, 42);
  CHECK_OK(ferry_host_ptr_to_device(other, bytes, plain));
  CHECK_OK(ferry_host_to_device(ferry_array_of(array, n, FERRY_INT32), b));
  CHECK_OK(ferry_device_to_device(plain, b));
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(array, n, FERRY_INT32)));
  CHECK_MSG(find_pattern_mismatch(array, bytes, 42) == SIZE_MAX, "array after device_to_device into its buffer");
  /* Another array: copied, and the own array then equals it. */
  fill_pattern(other, bytes, 43);
  CHECK_OK(ferry_host_to_device(ferry_array_of(other, n, FERRY_INT32), b));
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(array, n, FERRY_INT32)));
  CHECK_MSG(find_pattern_mismatch(array, bytes, 43) == SIZE_MAX, "array after a write from another array");
  memset(back, 0, bytes);
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(back, n, FERRY_INT32)));
  CHECK(find_pattern_mismatch(back, bytes, 43) == SIZE_MAX);
  /* Byte ranges through the buffer. */
  int32_t word = -12345, got = 0;
  CHECK_OK(ferry_write(b, 8, &word, sizeof word));
  CHECK_OK(ferry_read(b, 8, &got, sizeof got));
  CHECK(got == -12345);
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(array, n, FERRY_INT32)));
  CHECK(array[2] == -12345);

  if (!info->zero_copy) {
    ferry_buffer again = conf_sentinel();
    /* The same memory under a second buffer. */
    why = (ferry_refusal)77;
    CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(array, n, FERRY_INT32), &again, &why), FERRY_ERROR_REFUSED);
    CHECK(why == FERRY_REFUSAL_OVERLAP);
    CHECK(again.id == SENTINEL_ID);
    if (align > 1) {
      why = (ferry_refusal)77;
      CHECK_STATUS(
          ferry_alloc_host_ptr(dev, ferry_array_of((char *)array + bytes + 1, align - 1, FERRY_UINT8), &again, &why),
          FERRY_ERROR_REFUSED);
      CHECK(why == FERRY_REFUSAL_MISALIGNED);
      why = (ferry_refusal)77;
      CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(other, 0, FERRY_UINT8), &again, &why), FERRY_ERROR_REFUSED);
      CHECK(why == FERRY_REFUSAL_BAD_LENGTH || why == FERRY_REFUSAL_MISALIGNED);
    }
    char *spare = harness_aligned(align > 64 ? align : 64, align * 2);
    why = (ferry_refusal)77;
    CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(spare, 0, FERRY_UINT8), &again, &why), FERRY_ERROR_REFUSED);
    CHECK(why == FERRY_REFUSAL_BAD_LENGTH);
    if (align > 1) {
      why = (ferry_refusal)77;
      CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(spare, align + 1, FERRY_UINT8), &again, &why),
                   FERRY_ERROR_REFUSED);
      CHECK(why == FERRY_REFUSAL_BAD_LENGTH);
    }
    free(spare);
  }
  CHECK_OK(ferry_free(plain));
  CHECK_OK(ferry_free(b));
  /* The array is the user's again, with the last content, and can be imported anew. */
  CHECK(array[2] == -12345);
  CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(array, n, FERRY_INT32), &b, NULL));
  CHECK_OK(ferry_free(b));
done:
  free(array);
  free(other);
  free(back);
}

/* ---- handles ------------------------------------------------------------------ */

static void stale_handles(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  unsigned char h[64] = {0};
  ferry_buffer a = conf_sentinel(), live = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, 64, FERRY_UINT8, &a));
  CHECK_OK(ferry_alloc(dev, 64, FERRY_UINT8, &live));
  CHECK_OK(ferry_free(a));
  CHECK_STATUS(ferry_free(a), FERRY_ERROR_STALE_BUFFER);
  CHECK_ERROR_HAS("stale");
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(h, 64, FERRY_UINT8), a), FERRY_ERROR_STALE_BUFFER);
  CHECK_STATUS(ferry_device_to_host(a, ferry_array_of(h, 64, FERRY_UINT8)), FERRY_ERROR_STALE_BUFFER);
  CHECK_STATUS(ferry_host_ptr_to_device(h, 64, a), FERRY_ERROR_STALE_BUFFER);
  CHECK_STATUS(ferry_device_to_host_ptr(a, h, 64), FERRY_ERROR_STALE_BUFFER);
  CHECK_STATUS(ferry_device_to_device(a, live), FERRY_ERROR_STALE_BUFFER);
  CHECK_STATUS(ferry_device_to_device(live, a), FERRY_ERROR_STALE_BUFFER);
  CHECK_STATUS(ferry_write(a, 0, h, 1), FERRY_ERROR_STALE_BUFFER);
  CHECK_STATUS(ferry_read(a, 0, h, 1), FERRY_ERROR_STALE_BUFFER);
  CHECK_STATUS(ferry_copy(a, 0, live, 0, 1), FERRY_ERROR_STALE_BUFFER);
  CHECK_STATUS(ferry_copy(live, 0, a, 0, 1), FERRY_ERROR_STALE_BUFFER);
  CHECK(ferry_size(a) == 0);
  CHECK(ferry_elem_size(a) == 0);
  CHECK(ferry_buffer_kind(a) == FERRY_CUSTOM);
  CHECK(ferry_device_ptr(a) == 0);
  CHECK(!ferry_is_zero_copy(a));
  CHECK(ferry_buffer_device(a) == NULL);

  /* Made-up handles. */
  const uint64_t made_up[] = {0,
                              1,
                              2,
                              0xdeadbeef,
                              UINT64_MAX,
                              a.id + (2ULL << 32),
                              a.id ^ 1,
                              live.id + 1,
                              live.id + (2ULL << 32),
                              live.id - (2ULL << 32),
                              (uint64_t)1 << 63 | 1ULL << 32};
  for (size_t i = 0; i < sizeof made_up / sizeof made_up[0]; i++) {
    ferry_buffer f = {made_up[i]};
    CHECK_MSG(ferry_write(f, 0, h, 1) == FERRY_ERROR_STALE_BUFFER, "made-up handle 0x%llx accepted",
              (unsigned long long)made_up[i]);
    CHECK(ferry_size(f) == 0);
    CHECK(ferry_free(f) == FERRY_ERROR_STALE_BUFFER);
  }
  CHECK_STATUS(ferry_free(FERRY_NULL_BUFFER), FERRY_ERROR_STALE_BUFFER);
  CHECK_ERROR_HAS("FERRY_NULL_BUFFER");

  /* The freed slot is reused: the old handle must not reach the new buffer. */
  ferry_buffer reuse = conf_patterned(dev, 64, 51);
  CHECK_MSG((uint32_t)reuse.id == (uint32_t)a.id, "the freed slot was not reused (test assumption)");
  fill_pattern(h, 64, 52);
  CHECK_STATUS(ferry_write(a, 0, h, 64), FERRY_ERROR_STALE_BUFFER);
  CHECK_STATUS(ferry_host_ptr_to_device(h, 64, a), FERRY_ERROR_STALE_BUFFER);
  CHECK_STATUS(ferry_free(a), FERRY_ERROR_STALE_BUFFER);
  conf_expect_pattern(reuse, 64, 51, "new buffer in a reused slot");
  CHECK(ferry_size(reuse) == 64);
  CHECK_OK(ferry_free(reuse));
  CHECK_OK(ferry_free(live));
}

/* ---- statistics, pinned memory, the cache --------------------------------------- */

static void statistics(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  ferry_stats s0, s1, s2;
  CHECK_OK(ferry_device_stats(dev, &s0));
  float h[1000];
  fill_pattern(h, sizeof h, 61);
  ferry_buffer b = conf_sentinel(), c = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, 1000, FERRY_FLOAT32, &b));
  CHECK_OK(ferry_alloc(dev, 1000, FERRY_FLOAT32, &c));
  CHECK_OK(ferry_device_stats(dev, &s1));
  CHECK(s1.live_buffers == s0.live_buffers + 2);
  CHECK(s1.bytes_in_use == s0.bytes_in_use + 8000);
  CHECK(s1.peak_bytes_in_use >= s1.bytes_in_use);
  CHECK_OK(ferry_host_to_device(ferry_array_of(h, 1000, FERRY_FLOAT32), b));
  CHECK_OK(ferry_write(b, 0, h, 10));
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(h, 1000, FERRY_FLOAT32)));
  CHECK_OK(ferry_read(b, 4, h, 20));
  CHECK_OK(ferry_device_to_device(b, c));
  CHECK_OK(ferry_copy(b, 0, c, 8, 100));
  /* Refused calls are not counted. */
  CHECK_STATUS(ferry_write(b, 4000, h, 1), FERRY_ERROR_OUT_OF_RANGE);
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(h, 999, FERRY_FLOAT32), b), FERRY_ERROR_SIZE_MISMATCH);
  CHECK_OK(ferry_device_stats(dev, &s2));
  CHECK(s2.h2d_count == s1.h2d_count + 2 && s2.h2d_bytes == s1.h2d_bytes + 4010);
  CHECK(s2.d2h_count == s1.d2h_count + 2 && s2.d2h_bytes == s1.d2h_bytes + 4020);
  CHECK(s2.d2d_count == s1.d2d_count + 2 && s2.d2d_bytes == s1.d2d_bytes + 4100);
  CHECK_OK(ferry_free(b));
  CHECK_OK(ferry_free(c));
  CHECK_OK(ferry_device_stats(dev, &s2));
  CHECK(s2.live_buffers == s0.live_buffers);
  CHECK(s2.bytes_in_use == s0.bytes_in_use);
  CHECK(s2.peak_bytes_in_use >= s0.bytes_in_use + 8000);
  CHECK_OK(ferry_device_trim(dev));
  CHECK_OK(ferry_device_stats(dev, &s2));
  CHECK(s2.bytes_cached == 0);
}

static void pinned_host_memory(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  size_t bytes = 3u << 20;
  void *p = NULL;
  CHECK_OK(ferry_host_alloc(dev, bytes, &p));
  CHECK(p != NULL && ((uintptr_t)p % 4096) == 0);
  if (!p) return;
  fill_pattern(p, bytes, 71);
  ferry_buffer b = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, bytes, FERRY_UINT8, &b));
  CHECK_OK(ferry_host_to_device(ferry_array_of(p, bytes, FERRY_UINT8), b));
  memset(p, 0, bytes);
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(p, bytes, FERRY_UINT8)));
  CHECK(find_pattern_mismatch(p, bytes, 71) == SIZE_MAX);
  CHECK_OK(ferry_free(b));
  CHECK_OK(ferry_host_free(p));
  CHECK_STATUS(ferry_host_free(p), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_host_free(NULL), FERRY_ERROR_INVALID_ARGUMENT);
  void *mine = malloc(64);
  CHECK_STATUS(ferry_host_free(mine), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("ferry_host_alloc");
  free(mine); /* still ours: ferry left it alone */
  void *q = (void *)0x1;
  CHECK_STATUS(ferry_host_alloc(dev, 0, &q), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_host_alloc(dev, 16, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_host_alloc(NULL, 16, &q), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_host_alloc(dev, SIZE_MAX, &q), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK(q == (void *)0x1);
}

static void allocation_reuse(ferry_device *dev, const ferry_device_info *info) {
  (void)info;
  /* Buffers alive together never share memory, whatever the cache does. */
  enum { COUNT = 64 };
  ferry_buffer bufs[COUNT];
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < COUNT; i++)
      bufs[i] = conf_patterned(dev, 1000 + (size_t)(i % 4) * 100, (uint32_t)(round * 100 + i));
    for (int i = 0; i < COUNT; i++)
      conf_expect_pattern(bufs[i], 1000 + (size_t)(i % 4) * 100, (uint32_t)(round * 100 + i), "live buffer");
    for (int i = 0; i < COUNT; i += 2)
      CHECK_OK(ferry_free(bufs[i]));
    for (int i = 1; i < COUNT; i += 2)
      conf_expect_pattern(bufs[i], 1000 + (size_t)(i % 4) * 100, (uint32_t)(round * 100 + i), "survivor");
    for (int i = 1; i < COUNT; i += 2)
      CHECK_OK(ferry_free(bufs[i]));
  }
  ferry_stats s;
  CHECK_OK(ferry_device_stats(dev, &s));
  CHECK_OK(ferry_device_trim(dev));
  CHECK_OK(ferry_device_stats(dev, &s));
  CHECK(s.bytes_cached == 0);
}

/* ---- large transfers ------------------------------------------------------------- */

static void large_transfers(ferry_device *dev, const ferry_device_info *info) {
  size_t bytes = ((size_t)64 << 20) + 123; /* odd, and larger than any staging chunk */
  if (bytes > info->max_allocation / 2) bytes = (size_t)(info->max_allocation / 4) + 123;
  unsigned char *src = malloc(bytes), *dst = malloc(bytes);
  if (!src || !dst) {
    free(src);
    free(dst);
    CHECK_MSG(false, "no host memory for %zu bytes", bytes);
    return;
  }
  fill_pattern(src, bytes, 81);
  ferry_buffer a = conf_sentinel(), b = conf_sentinel();
  CHECK_OK(ferry_alloc(dev, bytes, FERRY_UINT8, &a));
  CHECK_OK(ferry_alloc(dev, bytes, FERRY_UINT8, &b));
  CHECK_OK(ferry_host_to_device(ferry_array_of(src, bytes, FERRY_UINT8), a));
  memset(dst, 0, bytes);
  CHECK_OK(ferry_device_to_host(a, ferry_array_of(dst, bytes, FERRY_UINT8)));
  size_t at = find_pattern_mismatch(dst, bytes, 81);
  CHECK_MSG(at == SIZE_MAX, "large round trip differs at byte %zu of %zu", at, bytes);
  CHECK_OK(ferry_device_to_device(a, b));
  memset(dst, 0, bytes);
  CHECK_OK(ferry_device_to_host_ptr(b, dst, bytes));
  at = find_pattern_mismatch(dst, bytes, 81);
  CHECK_MSG(at == SIZE_MAX, "large device copy differs at byte %zu", at);
  /* Unaligned ranges that cross chunk boundaries. */
  size_t off = (9u << 20) - 5, len = (17u << 20) + 9;
  memset(dst, 0, len);
  CHECK_OK(ferry_read(a, off, dst, len));
  CHECK(memcmp(dst, src + off, len) == 0);
  CHECK_OK(ferry_write(b, off + 1, src, len));
  memset(dst, 0, len);
  CHECK_OK(ferry_read(b, off + 1, dst, len));
  CHECK(memcmp(dst, src, len) == 0);
  CHECK_OK(ferry_free(a));
  CHECK_OK(ferry_free(b));
  free(src);
  free(dst);
}

const conformance_case conformance_device_cases[] = {
    {"device_info", device_info},
    {"every_kind", every_kind},
    {"zero_length", zero_length},
    {"custom_records", custom_records},
    {"bad_arguments", bad_arguments},
    {"overflow_and_out_of_memory", overflow_and_out_of_memory},
    {"mismatches_change_nothing", mismatches_change_nothing},
    {"byte_ranges", byte_ranges},
    {"zero_copy", zero_copy},
    {"host_ptr", host_ptr},
    {"stale_handles", stale_handles},
    {"statistics", statistics},
    {"pinned_host_memory", pinned_host_memory},
    {"allocation_reuse", allocation_reuse},
    {"large_transfers", large_transfers},
    {NULL, NULL},
};

/* ---- pairs of devices -------------------------------------------------------------- */

static void cross_copies(ferry_device *a, const ferry_device_info *ia, ferry_device *b, const ferry_device_info *ib) {
  (void)ia;
  (void)ib;
  const size_t sizes[] = {0, 1, 4097, (9u << 20) + 3};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    ferry_buffer s = conf_patterned(a, n, 91 + (uint32_t)i), d = conf_sentinel();
    CHECK_OK(ferry_alloc(b, n, FERRY_UINT8, &d));
    CHECK_OK(ferry_device_to_device(s, d));
    conf_expect_pattern(d, n, 91 + (uint32_t)i, "cross-device copy");
    CHECK_OK(ferry_free(s));
    CHECK_OK(ferry_free(d));
  }
  /* Byte ranges across devices. */
  ferry_buffer s = conf_patterned(a, 10000, 95), d = conf_patterned(b, 8000, 96);
  unsigned char model[8000], src[10000], back[8000];
  fill_pattern(model, sizeof model, 96);
  fill_pattern(src, sizeof src, 95);
  CHECK_OK(ferry_copy(s, 1234, d, 77, 5000));
  memcpy(model + 77, src + 1234, 5000);
  CHECK_STATUS(ferry_copy(s, 0, d, 4000, 5000), FERRY_ERROR_OUT_OF_RANGE);
  CHECK_OK(ferry_read(d, 0, back, sizeof back));
  CHECK(memcmp(model, back, sizeof back) == 0);
  /* Kinds and lengths are checked across devices too. */
  ferry_buffer f = conf_sentinel(), g = conf_sentinel();
  CHECK_OK(ferry_alloc(a, 100, FERRY_FLOAT32, &f));
  CHECK_OK(ferry_alloc(b, 100, FERRY_INT32, &g));
  CHECK_STATUS(ferry_device_to_device(f, g), FERRY_ERROR_KIND_MISMATCH);
  CHECK_STATUS(ferry_device_to_device(s, d), FERRY_ERROR_SIZE_MISMATCH);
  CHECK_OK(ferry_free(f));
  CHECK_OK(ferry_free(g));
  CHECK_OK(ferry_free(s));
  CHECK_OK(ferry_free(d));
}

static void cross_over_host_arrays(ferry_device *a, const ferry_device_info *ia, ferry_device *b,
                                   const ferry_device_info *ib) {
  (void)ib;
  if (!ia->host_ptr) {
    harness_not_applicable("%s has no host-pointer buffers", ia->backend);
    return;
  }
  size_t align = ia->host_ptr_alignment, bytes = 65536 > align ? 65536 : align;
  unsigned char *array = harness_aligned(align > 64 ? align : 64, bytes);
  fill_pattern(array, bytes, 97);
  ferry_buffer h = conf_sentinel(), d = conf_sentinel();
  CHECK_OK(ferry_alloc_host_ptr(a, ferry_array_of(array, bytes, FERRY_UINT8), &h, NULL));
  CHECK_OK(ferry_host_to_device(ferry_array_of(array, bytes, FERRY_UINT8), h));
  CHECK_OK(ferry_alloc(b, bytes, FERRY_UINT8, &d));
  CHECK_OK(ferry_device_to_device(h, d));
  conf_expect_pattern(d, bytes, 97, "copy from a host-array buffer to another device");
  ferry_buffer e = conf_patterned(b, bytes, 98);
  CHECK_OK(ferry_device_to_device(e, h));
  CHECK_OK(ferry_device_to_host(h, ferry_array_of(array, bytes, FERRY_UINT8)));
  CHECK(find_pattern_mismatch(array, bytes, 98) == SIZE_MAX);
  CHECK_OK(ferry_free(h));
  CHECK_OK(ferry_free(d));
  CHECK_OK(ferry_free(e));
  free(array);
}

const conformance_pair_case conformance_pair_cases[] = {
    {"cross_copies", cross_copies},
    {"cross_over_host_arrays", cross_over_host_arrays},
    {NULL, NULL},
};
