/*
 * The right status for each failure, and a sentence that says where:
 *  - the handle table running out of host memory names the function;
 *  - host memory running out while ferry_alloc_host_ptr records the array's range
 *    is FERRY_ERROR_OUT_OF_MEMORY, not a refusal for an overlap that is not there;
 *  - ferry_copy reports an overflowing range before one that runs past the end;
 *  - a typed transfer with a host array of an unknown kind is INVALID_ARGUMENT,
 *    also on a custom buffer (which would otherwise be KIND_MISMATCH);
 *  - ferry_host_alloc refuses absurd sizes itself, before any allocator sees them
 *    (a sanitizer aborts on those).
 * Host allocations of the core's tables fail on demand through the test hook
 * ferry__fail_core_allocs.
 */
#include "fault_backend.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

/* Must run first: the table makes its first chunk of slots at the first allocation. */
static void handle_table_out_of_memory(ferry_device *native) {
  harness_context = "handle table out of memory";
  ferry_buffer b = {12345};
  ferry__fail_core_allocs(1);
  CHECK_STATUS(ferry_alloc(native, 8, FERRY_UINT8, &b), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_ERROR_HAS("ferry_alloc: no host memory for 4096 more buffer handles");
  CHECK(b.id == 12345);
  unsigned char array[8];
  ferry__fail_core_allocs(1);
  CHECK_STATUS(ferry_alloc_zero_copy(native, ferry_array_of(array, 8, FERRY_UINT8), &b), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_ERROR_HAS("ferry_alloc_zero_copy: no host memory");
  ferry__fail_core_allocs(0);
  CHECK_OK(ferry_alloc(native, 8, FERRY_UINT8, &b));
  CHECK_OK(ferry_free(b));
}

static void host_ptr_out_of_memory(ferry_device *dev) {
  harness_context = "ferry_alloc_host_ptr out of memory";
  void *array = harness_aligned(64, 4096);
  ferry_buffer b = {777};
  ferry_refusal why = (ferry_refusal)99;
  ferry__fail_core_allocs(1); /* the table of host-pointer ranges cannot grow */
  CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(array, 4096, FERRY_UINT8), &b, &why),
               FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_ERROR_HAS("ferry_alloc_host_ptr: no host memory");
  CHECK_MSG(strstr(ferry_last_error(), "overlap") == NULL, "the sentence speaks of an overlap: %s", ferry_last_error());
  CHECK(b.id == 777 && why == (ferry_refusal)99); /* a failed call changes nothing */
  CHECK(fault.live_imports == 0);
  /* Memory back: the same call works, and an overlap is still a refusal. */
  ferry__fail_core_allocs(0);
  CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(array, 4096, FERRY_UINT8), &b, &why));
  CHECK(why == FERRY_REFUSAL_NONE);
  ferry_buffer again;
  CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(array, 4096, FERRY_UINT8), &again, &why), FERRY_ERROR_REFUSED);
  CHECK(why == FERRY_REFUSAL_OVERLAP);
  CHECK_OK(ferry_free(b));
  free(array);
}

static void copy_check_order(ferry_device *dev) {
  harness_context = "ferry_copy's order of checks";
  ferry_buffer a, b;
  CHECK_OK(ferry_alloc(dev, 64, FERRY_UINT8, &a));
  CHECK_OK(ferry_alloc(dev, 64, FERRY_UINT8, &b));
  /* The source's range is past the end, the destination's overflows: overflow first. */
  CHECK_STATUS(ferry_copy(a, 0, b, SIZE_MAX, SIZE_MAX), FERRY_ERROR_OVERFLOW);
  CHECK_ERROR_HAS("destination offset");
  CHECK_STATUS(ferry_copy(a, SIZE_MAX, b, 0, SIZE_MAX), FERRY_ERROR_OVERFLOW);
  CHECK_ERROR_HAS("source offset");
  CHECK_STATUS(ferry_copy(a, 0, b, 0, SIZE_MAX), FERRY_ERROR_OUT_OF_RANGE);
  CHECK_STATUS(ferry_copy(a, 0, b, 60, 8), FERRY_ERROR_OUT_OF_RANGE);
  CHECK_ERROR_HAS("destination");
  CHECK_STATUS(ferry_copy(a, 60, b, 0, 8), FERRY_ERROR_OUT_OF_RANGE);
  CHECK_ERROR_HAS("source");
  CHECK_OK(ferry_free(a));
  CHECK_OK(ferry_free(b));
}

static void typed_check_order(ferry_device *dev) {
  harness_context = "typed transfers: an unknown kind before a custom buffer";
  ferry_buffer custom;
  CHECK_OK(ferry_alloc_custom(dev, 4, 12, &custom));
  unsigned char bytes[48];
  ferry_array unknown = ferry_array_of(bytes, 4, (ferry_kind)(FERRY_CUSTOM + 7));
  CHECK_STATUS(ferry_host_to_device(unknown, custom), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("is not a ferry_kind");
  CHECK_STATUS(ferry_device_to_host(custom, unknown), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_ERROR_HAS("is not a ferry_kind");
  /* A known kind on a custom buffer: the kind mismatch, as before. */
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(bytes, 48, FERRY_UINT8), custom), FERRY_ERROR_KIND_MISMATCH);
  CHECK_ERROR_HAS("custom buffer");
  CHECK_OK(ferry_free(custom));
}

static void host_alloc_absurd(ferry_device *dev) {
  harness_context = "ferry_host_alloc of absurd sizes";
  void *p = (void *)1;
  CHECK_STATUS(ferry_host_alloc(dev, (size_t)1 << 63, &p), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_ERROR_HAS("ferry_host_alloc: 8 EiB (9223372036854775808 bytes) asked");
  CHECK_ERROR_HAS("this machine has");
  CHECK_STATUS(ferry_host_alloc(dev, SIZE_MAX, &p), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK(p == (void *)1);
  CHECK_OK(ferry_host_alloc(dev, 4096, &p));
  CHECK_OK(ferry_host_free(p));
}

int main(void) {
  CHECK_OK(ferry__register_backend(&fault_backend));
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", "native"));
  CHECK_OK(ferry_init());
  ferry_device *native = harness_device_of("native");
  ferry_device *fault_dev = harness_device_of("fault");
  CHECK(native && fault_dev);
  if (!native || !fault_dev) return harness_finish("statuses");
  handle_table_out_of_memory(native);
  host_ptr_out_of_memory(fault_dev);
  copy_check_order(native);
  copy_check_order(fault_dev);
  typed_check_order(native);
  host_alloc_absurd(native);
  host_alloc_absurd(fault_dev);
  ferry_shutdown();
  ferry_set_option("FERRY_BACKENDS", NULL);
  harness_context = "";
  return harness_finish("statuses");
}
