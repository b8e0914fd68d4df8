/*
 * The checked backend catches a program's own memory bugs made through
 * ferry_device_ptr: writes just past the end or before the start of a buffer
 * (reported on the next transfer, on synchronize and on free, with the offset
 * and the bytes found), and writes into freed memory (reported by synchronize).
 * Fresh memory is poisoned so that reading it before writing shows.
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

static ferry_device *checked_device(void) {
  for (size_t i = 0; i < ferry_device_count(); i++) {
    ferry_device *d;
    ferry_device_info info;
    ferry_device_get(i, &d);
    ferry_device_info_get(d, &info);
    if (strcmp(info.backend, "checked") == 0) return d;
  }
  return NULL;
}

int main(void) {
  ferry_device *dev = checked_device();
  if (!dev) {
    printf("SKIP checked: no checked device (FERRY_BACKENDS?)\n");
    return HARNESS_SKIP;
  }
  unsigned char h[100], back[100];

  harness_context = "fresh poison";
  ferry_buffer fresh;
  CHECK_OK(ferry_alloc(dev, 100, FERRY_UINT8, &fresh));
  CHECK_OK(ferry_device_to_host(fresh, ferry_array_of(back, 100, FERRY_UINT8)));
  for (int i = 0; i < 100; i++)
    CHECK(back[i] == 0xCB);
  CHECK_OK(ferry_free(fresh));

  harness_context = "past the end";
  ferry_buffer b;
  CHECK_OK(ferry_alloc(dev, 100, FERRY_UINT8, &b));
  fill_pattern(h, 100, 1);
  CHECK_OK(ferry_host_to_device(ferry_array_of(h, 100, FERRY_UINT8), b));
  unsigned char *raw = (unsigned char *)ferry_device_ptr(b);
  raw[100] = 0x2A; /* one byte past the end: the program's bug */
  raw[101] = 0x00;
  fill_pattern(back, 100, 2);
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(back, 100, FERRY_UINT8), b), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("out-of-bounds write");
  CHECK_ERROR_HAS("its own bytes are 0..99");
  CHECK_ERROR_HAS("after the end");
  CHECK_ERROR_HAS("offset 100");
  CHECK_ERROR_HAS("holds 2a 00 fd");
  CHECK_ERROR_HAS("ferry_host_to_device: bytes 0..100 of buffer");
  /* The failed transfer changed nothing. */
  CHECK(memcmp(raw, h, 100) == 0);
  CHECK_STATUS(ferry_device_to_host(b, ferry_array_of(back, 100, FERRY_UINT8)), FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_device_synchronize(dev), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("offset 100");
  /* Free reports it and still releases the buffer. */
  CHECK_STATUS(ferry_free(b), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("released");
  CHECK_ERROR_HAS("offset 100");
  CHECK_STATUS(ferry_free(b), FERRY_ERROR_STALE_BUFFER);
  CHECK_OK(ferry_device_synchronize(dev));

  harness_context = "before the start";
  CHECK_OK(ferry_alloc(dev, 64, FERRY_FLOAT32, &b));
  raw = (unsigned char *)ferry_device_ptr(b);
  raw[-3] = 0x77;
  ferry_buffer other;
  CHECK_OK(ferry_alloc(dev, 64, FERRY_FLOAT32, &other));
  CHECK_STATUS(ferry_device_to_device(b, other), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("before the start");
  CHECK_ERROR_HAS("offset -3");
  CHECK_ERROR_HAS("holds 77");
  CHECK_STATUS(ferry_copy(other, 0, b, 0, 4), FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_write(b, 0, h, 4), FERRY_ERROR_BACKEND);
  raw[-3] = 0xFD; /* repaired: the buffer is usable again */
  CHECK_OK(ferry_write(b, 0, h, 4));
  CHECK_OK(ferry_free(b));
  CHECK_OK(ferry_free(other));

  harness_context = "write after free";
  CHECK_OK(ferry_alloc(dev, 256, FERRY_UINT8, &b));
  raw = (unsigned char *)ferry_device_ptr(b);
  CHECK_OK(ferry_free(b));
  CHECK(raw[0] == 0xDD && raw[255] == 0xDD); /* freed memory is poisoned (and still quarantined) */
  raw[17] = 0x01;                            /* the program's bug: a stale device pointer */
  CHECK_STATUS(ferry_device_synchronize(dev), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("write after free");
  CHECK_ERROR_HAS("offset 17");
  raw[17] = 0xDD;
  CHECK_OK(ferry_device_synchronize(dev));

  harness_context = "transfers that move nothing";
  /* Every transfer touching a damaged buffer fails, also one of zero bytes and a
   * copy onto itself (which move nothing, so the core checks the guards itself). */
  CHECK_OK(ferry_alloc(dev, 100, FERRY_UINT8, &b));
  CHECK_OK(ferry_alloc(dev, 100, FERRY_UINT8, &other));
  raw = (unsigned char *)ferry_device_ptr(b);
  raw[104] = 0x11;
  CHECK_STATUS(ferry_write(b, 0, NULL, 0), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("ferry_write: bytes 0..0 of buffer");
  CHECK_ERROR_HAS("offset 104");
  CHECK_STATUS(ferry_read(b, 100, NULL, 0), FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_copy(b, 10, b, 10, 50), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("ferry_copy: buffer");
  CHECK_STATUS(ferry_copy(b, 0, other, 0, 0), FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_copy(other, 0, b, 0, 0), FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_device_to_device(b, b), FERRY_ERROR_BACKEND);
  CHECK_STATUS(ferry_host_ptr_to_device(h, 100, b), FERRY_ERROR_BACKEND);
  CHECK_OK(ferry_copy(other, 0, other, 0, 100)); /* the intact buffer is fine */
  CHECK_OK(ferry_write(other, 0, NULL, 0));
  ferry_stats stats_before, stats_after;
  CHECK_OK(ferry_device_stats(dev, &stats_before));
  CHECK_STATUS(ferry_copy(b, 0, b, 0, 0), FERRY_ERROR_BACKEND);
  CHECK_OK(ferry_device_stats(dev, &stats_after));
  CHECK(stats_after.d2d_count == stats_before.d2d_count); /* a failed call counts nothing */
  raw[104] = 0xFD;
  CHECK_OK(ferry_copy(b, 0, b, 0, 0));
  CHECK_OK(ferry_device_stats(dev, &stats_after));
  CHECK(stats_after.d2d_count == stats_before.d2d_count + 1);
  CHECK_OK(ferry_free(b));
  CHECK_OK(ferry_free(other));

  harness_context = "ferry_device_trim gives the quarantine back";
  ferry_buffer freed[4];
  unsigned char *freed_raw[4];
  for (int i = 0; i < 4; i++) {
    CHECK_OK(ferry_alloc(dev, (size_t)4 << 20, FERRY_UINT8, &freed[i]));
    freed_raw[i] = (unsigned char *)ferry_device_ptr(freed[i]);
  }
  for (int i = 0; i < 4; i++)
    CHECK_OK(ferry_free(freed[i]));
  freed_raw[2][99] = 0x42; /* a write after free, found when the quarantine is let go */
  CHECK_STATUS(ferry_device_trim(dev), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("write after free");
  CHECK_ERROR_HAS("offset 99");
  CHECK_ERROR_HAS("ferry_device_trim");
  /* The quarantine is empty now: nothing is left to verify, or to trim. */
  CHECK_OK(ferry_device_synchronize(dev));
  CHECK_OK(ferry_device_trim(dev));

  harness_context = "zero-copy buffers have no guards";
  float arr[8] = {0};
  ferry_buffer z;
  CHECK_OK(ferry_alloc_zero_copy(dev, ferry_array_of(arr, 8, FERRY_FLOAT32), &z));
  float other_arr[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  CHECK_OK(ferry_host_to_device(ferry_array_of(other_arr, 8, FERRY_FLOAT32), z));
  CHECK(arr[7] == 8);
  CHECK_OK(ferry_free(z));

  ferry_shutdown();
  harness_context = "";
  return harness_finish("checked");
}
