/* A program outside the project, built against an installed ferry. */
#include <ferry.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  ferry_device *dev = ferry_device_best();
  float in[4] = {1, 2, 3, 4}, out[4] = {0};
  ferry_buffer b;
  if (!dev || ferry_alloc(dev, 4, FERRY_FLOAT32, &b) != FERRY_OK ||
      ferry_host_to_device(ferry_array_of(in, 4, FERRY_FLOAT32), b) != FERRY_OK ||
      ferry_device_to_host(b, ferry_array_of(out, 4, FERRY_FLOAT32)) != FERRY_OK || ferry_free(b) != FERRY_OK) {
    fprintf(stderr, "consumer: %s\n", ferry_last_error());
    return 1;
  }
  ferry_shutdown();
  if (memcmp(in, out, sizeof in) != 0) return 1;
  printf("consumer: ferry %s works\n", ferry_version());
  return 0;
}
