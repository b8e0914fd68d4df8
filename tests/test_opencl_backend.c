/*
 * The opencl backend beyond the conformance suite:
 *  - device info against the driver's own answers;
 *  - host-pointer buffers: every operation in every ownership state (the
 *    host's / the device's, for one and for two buffers), against a model of
 *    the bytes;
 *  - failures: driver calls made to fail (by swapping entries of the loaded API
 *    table) give the right status, a sentence naming the call, the CL code by
 *    name and number, the sizes and the device, and leave nothing behind;
 *  - many threads on one device at once;
 *  - FERRY_OPENCL_LIBRARY, a missing or wrong library, and shutdown + init again.
 *
 * Skipped (77) when there is no OpenCL device, unless FERRY_REQUIRE_BACKENDS
 * names opencl.
 */
#include "harness.h"

#include "backends/opencl/opencl_api.h"
#include "core/internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static ferry_device *find_opencl(size_t which, ferry_device_info *info) {
  size_t seen = 0;
  for (size_t i = 0; i < ferry_device_count(); i++) {
    ferry_device *d;
    if (ferry_device_get(i, &d) != FERRY_OK || ferry_device_info_get(d, info) != FERRY_OK) continue;
    if (strcmp(info->backend, "opencl") == 0 && seen++ == which) return d;
  }
  return NULL;
}

static bool opencl_status(ferry_backend_info *out) {
  for (size_t i = 0; i < ferry_backend_count(); i++)
    if (ferry_backend_get(i, out) == FERRY_OK && strcmp(out->name, "opencl") == 0) return true;
  return false;
}

/* ---- error names ------------------------------------------------------------ */

static void error_names(void) {
  CHECK(strcmp(ferry__opencl_error_name(0), "CL_SUCCESS") == 0);
  CHECK(strcmp(ferry__opencl_error_name(-4), "CL_MEM_OBJECT_ALLOCATION_FAILURE") == 0);
  CHECK(strcmp(ferry__opencl_error_name(-5), "CL_OUT_OF_RESOURCES") == 0);
  CHECK(strcmp(ferry__opencl_error_name(-8), "CL_MEM_COPY_OVERLAP") == 0);
  CHECK(strcmp(ferry__opencl_error_name(-30), "CL_INVALID_VALUE") == 0);
  CHECK(strcmp(ferry__opencl_error_name(-61), "CL_INVALID_BUFFER_SIZE") == 0);
  CHECK(strcmp(ferry__opencl_error_name(-72), "CL_MAX_SIZE_RESTRICTION_EXCEEDED") == 0);
  CHECK(strcmp(ferry__opencl_error_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR") == 0);
  CHECK(strstr(ferry__opencl_error_name(12345), "unknown") != NULL);
  CHECK(strstr(ferry__opencl_error_name(-20), "unknown") != NULL);
  /* Every code from -1 to -72 that the specification defines has a CL_ name. */
  for (int code = -1; code >= -72; code--) {
    if (code < -19 && code > -30) continue;
    CHECK_MSG(strncmp(ferry__opencl_error_name(code), "CL_", 3) == 0, "code %d has no name", code);
  }
}

/* ---- device info ---------------------------------------------------------------- */

static void device_info(const ferry_cl_api *api, ferry_device *dev, const ferry_device_info *info) {
  ferry_native nat;
  CHECK_OK(ferry_device_native(dev, &nat));
  cl_device_id id = (cl_device_id)nat.device;
  cl_ulong global = 0, max_alloc = 0;
  cl_uint align_bits = 0;
  cl_device_type type = 0;
  CHECK(api->clGetDeviceInfo(id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL) == CL_SUCCESS);
  CHECK(api->clGetDeviceInfo(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL) == CL_SUCCESS);
  CHECK(api->clGetDeviceInfo(id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, NULL) == CL_SUCCESS);
  CHECK(api->clGetDeviceInfo(id, CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS);
  CHECK(info->total_memory == global);
  CHECK(info->max_allocation == max_alloc);
  CHECK(info->host_ptr_alignment == align_bits / 8);
  CHECK(info->is_cpu == ((type & CL_DEVICE_TYPE_CPU) != 0));
  CHECK(!info->zero_copy);
  CHECK(info->host_ptr);
  char name[256] = "";
  CHECK(api->clGetDeviceInfo(id, CL_DEVICE_NAME, sizeof name - 1, name, NULL) == CL_SUCCESS);
  CHECK_MSG(strncmp(info->name, name, strlen(name)) == 0 && strstr(info->name, " (") != NULL,
            "device name \"%s\" is not \"%s (<platform>)\"", info->name, name);
  printf("  %s: %llu bytes, largest buffer %llu, host-ptr alignment %zu, %s\n", info->name, (unsigned long long)global,
         (unsigned long long)max_alloc, info->host_ptr_alignment, info->is_cpu ? "CPU" : "not a CPU");

  /* ferry_device_ptr is the cl_mem, with the buffer's size. */
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, 1000, FERRY_FLOAT64, &b));
  cl_mem mem = (cl_mem)ferry_device_ptr(b);
  size_t size = 0;
  CHECK(api->clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, NULL) == CL_SUCCESS);
  CHECK(size >= 8000);
  CHECK_OK(ferry_free(b));
  float f[16];
  CHECK_STATUS(ferry_alloc_zero_copy(dev, ferry_array_of(f, 16, FERRY_FLOAT32), &b), FERRY_ERROR_UNSUPPORTED);
}

/* ---- host-pointer buffers in every state ------------------------------------------ */

typedef struct tracked {
  ferry_buffer b;
  unsigned char *array; /* the host-ptr buffer's own array (NULL for a plain buffer) */
  unsigned char *model; /* what the buffer holds */
  size_t bytes;
} tracked;

static void set_owner(const tracked *t, bool host) {
  if (!t->array) return;
  if (host)
    CHECK_OK(ferry_device_to_host_ptr(t->b, t->array, t->bytes));
  else
    CHECK_OK(ferry_host_ptr_to_device(t->array, t->bytes, t->b));
}

static void expect_model(const tracked *t, const char *what) {
  unsigned char *back = malloc(t->bytes);
  memset(back, 0, t->bytes);
  CHECK_OK(ferry_read(t->b, 0, back, t->bytes));
  size_t at = SIZE_MAX;
  for (size_t i = 0; i < t->bytes && at == SIZE_MAX; i++)
    if (back[i] != t->model[i]) at = i;
  CHECK_MSG(at == SIZE_MAX, "%s: byte %zu of %zu is %d, expected %d", what, at, t->bytes, at == SIZE_MAX ? 0 : back[at],
            at == SIZE_MAX ? 0 : t->model[at]);
  free(back);
}

static void model_copy(tracked *src, size_t so, tracked *dst, size_t doff, size_t n) {
  memmove(dst->model + doff, src->model + so, n);
}

static void host_ptr_states(ferry_device *dev, const ferry_device_info *info) {
  size_t align = info->host_ptr_alignment;
  size_t bytes = 65536 > 4 * align ? 65536 : 4 * align;
  tracked h1 = {.bytes = bytes}, h2 = {.bytes = bytes}, p = {.bytes = bytes};
  h1.array = harness_aligned(align > 64 ? align : 64, bytes);
  h2.array = harness_aligned(align > 64 ? align : 64, bytes);
  h1.model = malloc(bytes);
  h2.model = malloc(bytes);
  p.model = malloc(bytes);
  fill_pattern(h1.array, bytes, 1);
  fill_pattern(h2.array, bytes, 2);
  memcpy(h1.model, h1.array, bytes);
  memcpy(h2.model, h2.array, bytes);
  fill_pattern(p.model, bytes, 3);
  CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(h1.array, bytes, FERRY_UINT8), &h1.b, NULL));
  CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(h2.array, bytes, FERRY_UINT8), &h2.b, NULL));
  CHECK_OK(ferry_alloc(dev, bytes, FERRY_UINT8, &p.b));
  CHECK_OK(ferry_write(p.b, 0, p.model, bytes));
  ferry_device *native = harness_device_of("native");
  tracked nb = {.bytes = bytes, .model = malloc(bytes)};
  fill_pattern(nb.model, bytes, 4);
  if (native) {
    CHECK_OK(ferry_alloc(native, bytes, FERRY_UINT8, &nb.b));
    CHECK_OK(ferry_write(nb.b, 0, nb.model, bytes));
  }
  unsigned char *chunk = malloc(bytes), *back = malloc(bytes);
  char what[128];
  uint32_t seed = 10;

  for (int s = 0; s < 4; s++) {
    bool host1 = s & 1, host2 = (s >> 1) & 1;
    snprintf(what, sizeof what, "buffer 1 %s, buffer 2 %s", host1 ? "the host's" : "the device's",
             host2 ? "the host's" : "the device's");
    harness_context = what;
    set_owner(&h1, host1);
    set_owner(&h2, host2);

    /* From and to other arrays. */
    fill_pattern(chunk, 1000, seed++);
    CHECK_OK(ferry_write(h1.b, 100, chunk, 1000));
    memcpy(h1.model + 100, chunk, 1000);
    memset(back, 0, 700);
    CHECK_OK(ferry_read(h1.b, 50, back, 700));
    CHECK(memcmp(back, h1.model + 50, 700) == 0);
    /* Device copies with plain buffers, both ways, odd offsets. */
    CHECK_OK(ferry_copy(h1.b, 10, p.b, 21, 3000));
    model_copy(&h1, 10, &p, 21, 3000);
    CHECK_OK(ferry_copy(p.b, 5, h1.b, 301, 2000));
    model_copy(&p, 5, &h1, 301, 2000);
    /* Between two host-ptr buffers, both ways. */
    CHECK_OK(ferry_copy(h1.b, 1000, h2.b, 17, 5000));
    model_copy(&h1, 1000, &h2, 17, 5000);
    CHECK_OK(ferry_copy(h2.b, 0, h1.b, 4096, 4096));
    model_copy(&h2, 0, &h1, 4096, 4096);
    /* Within one: apart, and overlapping (memmove). */
    CHECK_OK(ferry_copy(h1.b, 0, h1.b, 8192, 4096));
    model_copy(&h1, 0, &h1, 8192, 4096);
    CHECK_OK(ferry_copy(h1.b, 100, h1.b, 200, 4000));
    model_copy(&h1, 100, &h1, 200, 4000);
    CHECK_OK(ferry_copy(h2.b, 300, h2.b, 50, 7000));
    model_copy(&h2, 300, &h2, 50, 7000);
    /* Whole buffers. */
    CHECK_OK(ferry_device_to_device(h1.b, h2.b));
    memcpy(h2.model, h1.model, bytes);
    fill_pattern(chunk, bytes, seed++);
    CHECK_OK(ferry_write(p.b, 0, chunk, bytes));
    memcpy(p.model, chunk, bytes);
    CHECK_OK(ferry_device_to_device(p.b, h1.b));
    memcpy(h1.model, p.model, bytes);
    /* A source inside the buffer's own array, not at its own offset: the host's
     * bytes there are what is written, whoever owns the array. */
    memcpy(chunk, h2.array + 16, 64);
    CHECK_OK(ferry_write(h2.b, 0, h2.array + 16, 64));
    memcpy(h2.model, chunk, 64);
    if (host2) {
      /* A read into the array (the host's view), handed to the device: a
       * memmove within the buffer. Taken first, so that the array is the
       * buffer's content (on a GPU it is a copy the handovers synchronise). */
      set_owner(&h2, true);
      CHECK_OK(ferry_read(h2.b, 64, h2.array + 128, 64));
      set_owner(&h2, false);
      set_owner(&h2, true);
      memmove(h2.model + 128, h2.model + 64, 64);
    }
    /* Across devices: from and to a native buffer. */
    if (native) {
      CHECK_OK(ferry_copy(nb.b, 7, h1.b, 9, 20000));
      model_copy(&nb, 7, &h1, 9, 20000);
      CHECK_OK(ferry_copy(h2.b, 33, nb.b, 1, 30000));
      model_copy(&h2, 33, &nb, 1, 30000);
      expect_model(&nb, "native buffer");
    }
    expect_model(&h1, "buffer 1");
    expect_model(&h2, "buffer 2");
    expect_model(&p, "plain buffer");
    /* Taken back, each array is its buffer's content. */
    set_owner(&h1, true);
    set_owner(&h2, true);
    CHECK_MSG(memcmp(h1.array, h1.model, bytes) == 0, "array 1 differs from its buffer's content");
    CHECK_MSG(memcmp(h2.array, h2.model, bytes) == 0, "array 2 differs from its buffer's content");
    /* The states again, for the next round's starting point. */
    set_owner(&h1, host1);
    set_owner(&h2, host2);
    /* Synchronising twice in one direction is harmless. */
    set_owner(&h1, host1);
    expect_model(&h1, "buffer 1 after a second synchronisation");
  }
  harness_context = "host-ptr release";
  /* Released while the device owns it: the array gets the last content. */
  set_owner(&h1, false);
  fill_pattern(chunk, bytes, 99);
  CHECK_OK(ferry_write(h1.b, 0, chunk, bytes));
  CHECK_OK(ferry_free(h1.b));
  CHECK_MSG(memcmp(h1.array, chunk, bytes) == 0, "array after releasing a buffer the device held");
  /* Released while the host owns it. */
  set_owner(&h2, true);
  CHECK_OK(ferry_write(h2.b, 0, chunk + 1, bytes - 1));
  CHECK_OK(ferry_free(h2.b));
  CHECK_MSG(memcmp(h2.array, chunk + 1, bytes - 1) == 0, "array after releasing a buffer the host held");
  harness_context = "";
  CHECK_OK(ferry_free(p.b));
  if (native) CHECK_OK(ferry_free(nb.b));
  free(h1.array);
  free(h2.array);
  free(h1.model);
  free(h2.model);
  free(p.model);
  free(nb.model);
  free(chunk);
  free(back);
}

/* ---- failures, by fault injection ---------------------------------------------- */

static ferry_cl_api saved;
static cl_int fail_with;

static cl_mem failing_create_buffer(cl_context c, cl_mem_flags f, size_t n, void *h, cl_int *err) {
  (void)c, (void)f, (void)n, (void)h;
  *err = fail_with;
  return NULL;
}

static cl_int failing_write(cl_command_queue q, cl_mem m, cl_bool b, size_t o, size_t n, const void *p, cl_uint ne,
                            const cl_event *w, cl_event *e) {
  (void)q, (void)m, (void)b, (void)o, (void)n, (void)p, (void)ne, (void)w, (void)e;
  return fail_with;
}

static cl_int failing_read(cl_command_queue q, cl_mem m, cl_bool b, size_t o, size_t n, void *p, cl_uint ne,
                           const cl_event *w, cl_event *e) {
  (void)q, (void)m, (void)b, (void)o, (void)n, (void)p, (void)ne, (void)w, (void)e;
  return fail_with;
}

static cl_int failing_copy(cl_command_queue q, cl_mem s, cl_mem d, size_t so, size_t doff, size_t n, cl_uint ne,
                           const cl_event *w, cl_event *e) {
  (void)q, (void)s, (void)d, (void)so, (void)doff, (void)n, (void)ne, (void)w, (void)e;
  return fail_with;
}

static void failures(const ferry_cl_api *api, ferry_device *dev, const ferry_device_info *info) {
  /* The table ferry loaded lives in writable memory: swapping entries there (on
   * this thread, between calls) makes ferry's own calls fail. */
  ferry_cl_api *table = (ferry_cl_api *)api;
  saved = *table;
  char text[256];
  CHECK_OK(ferry_device_trim(dev));

  /* clCreateBuffer: out of memory, with the sizes, the call and the device. */
  table->clCreateBuffer = failing_create_buffer;
  ferry_buffer b = {12345};
  size_t n = 3 * 1024 * 1024 + 17;
  fail_with = CL_MEM_OBJECT_ALLOCATION_FAILURE;
  CHECK_STATUS(ferry_alloc(dev, n, FERRY_UINT8, &b), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_ERROR_HAS("CL_MEM_OBJECT_ALLOCATION_FAILURE (-4) from clCreateBuffer");
  snprintf(text, sizeof text, "%zu bytes on device %zu (opencl: %s)", n, info->index, info->name);
  CHECK_ERROR_HAS(text);
  CHECK_ERROR_HAS("ferry_alloc");
  CHECK(b.id == 12345);
  printf("  out of memory: %s\n", ferry_last_error());
  fail_with = CL_OUT_OF_RESOURCES; /* out of memory too, when allocating */
  CHECK_STATUS(ferry_alloc(dev, n, FERRY_UINT8, &b), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_ERROR_HAS("CL_OUT_OF_RESOURCES (-5)");
  fail_with = CL_OUT_OF_HOST_MEMORY;
  CHECK_STATUS(ferry_alloc(dev, n, FERRY_UINT8, &b), FERRY_ERROR_OUT_OF_MEMORY);
  fail_with = CL_INVALID_BUFFER_SIZE;
  CHECK_STATUS(ferry_alloc(dev, n, FERRY_UINT8, &b), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("CL_INVALID_BUFFER_SIZE (-61) from clCreateBuffer");
  /* A host-ptr buffer the driver will not make: a refusal naming the call. */
  size_t align = info->host_ptr_alignment;
  size_t hbytes = 4 * (align > 1024 ? align : 1024);
  void *array = harness_aligned(align > 64 ? align : 64, hbytes);
  memset(array, 7, hbytes);
  ferry_refusal why = FERRY_REFUSAL_NONE;
  fail_with = CL_INVALID_HOST_PTR;
  CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(array, hbytes, FERRY_UINT8), &b, &why), FERRY_ERROR_REFUSED);
  CHECK(why == FERRY_REFUSAL_DRIVER);
  CHECK_ERROR_HAS("CL_INVALID_HOST_PTR (-37) from clCreateBuffer(CL_MEM_USE_HOST_PTR)");
  table->clCreateBuffer = saved.clCreateBuffer;

  /* The first write that makes the driver back a new buffer. On CPU devices
   * ferry allocates a buffer's memory itself and makes no such write. */
  table->clEnqueueWriteBuffer = failing_write;
  fail_with = CL_MEM_OBJECT_ALLOCATION_FAILURE;
  if (!info->is_cpu) {
    CHECK_STATUS(ferry_alloc(dev, n, FERRY_UINT8, &b), FERRY_ERROR_OUT_OF_MEMORY);
    CHECK_ERROR_HAS("from clEnqueueWriteBuffer, the first write to a new buffer");
  } else {
    CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &b));
    CHECK_OK(ferry_free(b));
    CHECK_OK(ferry_device_trim(dev));
  }
  table->clEnqueueWriteBuffer = saved.clEnqueueWriteBuffer;
  ferry_stats stats;
  CHECK_OK(ferry_device_stats(dev, &stats));
  CHECK(stats.live_buffers == 0 && stats.bytes_cached == 0);

  /* Transfers: a backend error naming the call, the bytes and the offset; the
   * buffer keeps its content. */
  unsigned char *src = malloc(n), *back = malloc(n);
  fill_pattern(src, n, 5);
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &b));
  CHECK_OK(ferry_write(b, 0, src, n));
  table->clEnqueueWriteBuffer = failing_write;
  fail_with = CL_OUT_OF_RESOURCES;
  CHECK_STATUS(ferry_write(b, 100, back, 50), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("CL_OUT_OF_RESOURCES (-5) from clEnqueueWriteBuffer, 50 bytes at offset 100");
  CHECK_ERROR_HAS("ferry_write");
  fail_with = CL_MEM_OBJECT_ALLOCATION_FAILURE; /* a driver backing the buffer only now */
  CHECK_STATUS(ferry_write(b, 0, back, 50), FERRY_ERROR_OUT_OF_MEMORY);
  table->clEnqueueWriteBuffer = saved.clEnqueueWriteBuffer;
  table->clEnqueueReadBuffer = failing_read;
  fail_with = CL_INVALID_MEM_OBJECT;
  memset(back, 0xEE, 64);
  CHECK_STATUS(ferry_read(b, 8, back, 64), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("CL_INVALID_MEM_OBJECT (-38) from clEnqueueReadBuffer, 64 bytes at offset 8");
  table->clEnqueueReadBuffer = saved.clEnqueueReadBuffer;
  ferry_buffer c = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &c));
  table->clEnqueueCopyBuffer = failing_copy;
  fail_with = CL_MEM_COPY_OVERLAP;
  CHECK_STATUS(ferry_copy(b, 3, c, 5, 1000), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("CL_MEM_COPY_OVERLAP (-8) from clEnqueueCopyBuffer, 1000 bytes from offset 3 to offset 5");
  table->clEnqueueCopyBuffer = saved.clEnqueueCopyBuffer;
  memset(back, 0, n);
  CHECK_OK(ferry_read(b, 0, back, n));
  CHECK(memcmp(back, src, n) == 0);
  CHECK_OK(ferry_free(c));
  CHECK_OK(ferry_free(b));

  /* Host-pointer handovers: a read into the array itself (to the host) and a
   * write from it (to the device); the buffer is never mapped. */
  CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(array, hbytes, FERRY_UINT8), &b, &why));
  /* A write from the array that fails leaves the array the host's: handing it
   * over again works, with the host's bytes. */
  table->clEnqueueWriteBuffer = failing_write;
  fail_with = CL_OUT_OF_RESOURCES;
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(array, hbytes, FERRY_UINT8), b), FERRY_ERROR_BACKEND);
  snprintf(text, sizeof text, "CL_OUT_OF_RESOURCES (-5) from clEnqueueWriteBuffer, handing the %zu-byte array at %p",
           hbytes, array);
  CHECK_ERROR_HAS(text);
  CHECK_ERROR_HAS("a write from the array itself");
  table->clEnqueueWriteBuffer = saved.clEnqueueWriteBuffer;
  memset(array, 9, hbytes);
  CHECK_OK(ferry_host_to_device(ferry_array_of(array, hbytes, FERRY_UINT8), b));
  memset(back, 0, hbytes);
  CHECK_OK(ferry_read(b, 0, back, hbytes));
  CHECK(((unsigned char *)back)[0] == 9 && ((unsigned char *)back)[hbytes - 1] == 9);
  /* A read into the array that fails when the host takes it back; the next one
   * brings the buffer's content. */
  unsigned char five = 5;
  CHECK_OK(ferry_write(b, hbytes - 1, &five, 1));
  table->clEnqueueReadBuffer = failing_read;
  fail_with = CL_INVALID_VALUE;
  CHECK_STATUS(ferry_device_to_host(b, ferry_array_of(array, hbytes, FERRY_UINT8)), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("CL_INVALID_VALUE (-30) from clEnqueueReadBuffer, giving the");
  CHECK_ERROR_HAS("a read into the array itself");
  table->clEnqueueReadBuffer = saved.clEnqueueReadBuffer;
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(array, hbytes, FERRY_UINT8)));
  CHECK(((unsigned char *)array)[0] == 9 && ((unsigned char *)array)[hbytes - 1] == 5);
  /* Released with a read that fails: released all the same, saying so. */
  table->clEnqueueReadBuffer = failing_read;
  CHECK_STATUS(ferry_free(b), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("was released, but CL_INVALID_VALUE (-30) from clEnqueueReadBuffer");
  table->clEnqueueReadBuffer = saved.clEnqueueReadBuffer;
  /* The array is free for a buffer again. */
  CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(array, hbytes, FERRY_UINT8), &b, &why));
  CHECK_OK(ferry_free(b));
  *table = saved;
  free(array);
  free(src);
  free(back);
  CHECK_OK(ferry_device_stats(dev, &stats));
  CHECK(stats.live_buffers == 0);
}

/* ---- threads ------------------------------------------------------------------ */

typedef struct worker {
  ferry_device *dev;
  size_t align;
  ferry_buffer shared;
  const unsigned char *pattern;
  int id;
  int errors;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  size_t hbytes = 16384 > w->align ? 16384 : w->align;
  unsigned char *array = harness_aligned(w->align > 64 ? w->align : 64, hbytes);
  unsigned char *buf = malloc(200000), *back = malloc(200000);
  ferry_buffer h = FERRY_NULL_BUFFER;
  if (ferry_alloc_host_ptr(w->dev, ferry_array_of(array, hbytes, FERRY_UINT8), &h, NULL) != FERRY_OK) w->errors++;
  for (int i = 0; i < 40; i++) {
    size_t n = 1000 + (size_t)((w->id * 7919 + i * 104729) % 150000);
    uint32_t seed = (uint32_t)(w->id * 1000 + i);
    fill_pattern(buf, n, seed);
    ferry_buffer a = FERRY_NULL_BUFFER, b = FERRY_NULL_BUFFER;
    if (ferry_alloc(w->dev, n, FERRY_UINT8, &a) != FERRY_OK || ferry_alloc(w->dev, n, FERRY_UINT8, &b) != FERRY_OK) {
      w->errors++;
      continue;
    }
    if (ferry_write(a, 0, buf, n) != FERRY_OK || ferry_device_to_device(a, b) != FERRY_OK ||
        ferry_read(b, 0, back, n) != FERRY_OK || find_pattern_mismatch(back, n, seed) != SIZE_MAX)
      w->errors++;
    /* The host-ptr buffer through its states, and data through it. */
    if (ferry_copy(b, 0, h, 0, hbytes < n ? hbytes : n) != FERRY_OK ||
        ferry_device_to_host(h, ferry_array_of(array, hbytes, FERRY_UINT8)) != FERRY_OK ||
        find_pattern_mismatch(array, hbytes < n ? hbytes : n, seed) != SIZE_MAX ||
        ferry_host_to_device(ferry_array_of(array, hbytes, FERRY_UINT8), h) != FERRY_OK)
      w->errors++;
    /* Everyone reads the shared buffer. */
    if (ferry_read(w->shared, (size_t)i * 13, back, 4096) != FERRY_OK ||
        memcmp(back, w->pattern + (size_t)i * 13, 4096) != 0)
      w->errors++;
    if (ferry_free(a) != FERRY_OK || ferry_free(b) != FERRY_OK) w->errors++;
  }
  if (ferry_free(h) != FERRY_OK) w->errors++;
  free(array);
  free(buf);
  free(back);
  return NULL;
}

static void threads(ferry_device *dev, const ferry_device_info *info) {
  enum { THREADS = 6 };
  size_t shared_bytes = 1 << 20;
  unsigned char *pattern = malloc(shared_bytes), *back = malloc(shared_bytes);
  fill_pattern(pattern, shared_bytes, 777);
  ferry_buffer shared = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, shared_bytes, FERRY_UINT8, &shared));
  CHECK_OK(ferry_write(shared, 0, pattern, shared_bytes));
  pthread_t t[THREADS];
  worker w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){.dev = dev, .align = info->host_ptr_alignment, .shared = shared, .pattern = pattern, .id = i};
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    CHECK_MSG(w[i].errors == 0, "thread %d: %d operations failed or gave wrong bytes", i, w[i].errors);
  }
  CHECK_OK(ferry_read(shared, 0, back, shared_bytes));
  CHECK(memcmp(back, pattern, shared_bytes) == 0);
  CHECK_OK(ferry_free(shared));
  free(pattern);
  free(back);
}

/* ---- DMA through pinned memory ---------------------------------------------- */

/* The operations the core's engine calls, driven as it drives them: fill block
 * k while block k-1 moves, wait for a block's copy before reusing it. */
static void pipeline(const ferry_cl_api *api, ferry_device *dev) {
  const ferry_device_ops *ops = dev->ops;
  if (!(dev->caps & FERRY_CAP_STAGE) || !ops->dma_start || !ops->ticket_wait) {
    printf("  (no staging on this device)\n");
    return;
  }
  enum { BLOCKS = 4 };
  size_t block_bytes = ((size_t)1 << 20) + 4099, total = 9 * block_bytes + 777;
  void *block[BLOCKS] = {NULL};
  ferry_pinned pin[BLOCKS];
  ferry_ticket ticket[BLOCKS];
  for (int k = 0; k < BLOCKS; k++) {
    CHECK_OK(ferry_host_alloc(dev, block_bytes, &block[k]));
    if (!block[k]) return;
    CHECK(ferry__pinned_find(dev, block[k], block_bytes, &pin[k]));
  }
  unsigned char *src = malloc(total), *back = malloc(total);
  fill_pattern(src, total, 61);
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, total + 100, FERRY_UINT8, &b));
  ferry_slot *s = ferry__peek(b);
  CHECK(s != NULL);
  if (!s) return;
  size_t chunks = (total + block_bytes - 1) / block_bytes;
  for (size_t i = 0; i < chunks; i++) {
    unsigned k = (unsigned)(i % BLOCKS);
    size_t done = i * block_bytes, n = total - done < block_bytes ? total - done : block_bytes;
    if (i >= BLOCKS) CHECK_OK(ferry__ticket_finish(dev, ticket[k]));
    memcpy(block[k], src + done, n);
    CHECK_OK(ops->dma_start(dev, NULL, FERRY_DMA_TO_DEVICE, &s->mem, 100 + done, &pin[k], n, &ticket[k]));
  }
  for (unsigned k = 0; k < BLOCKS; k++)
    CHECK_OK(ferry__ticket_finish(dev, ticket[k]));
  memset(back, 0, total);
  CHECK_OK(ferry_read(b, 100, back, total));
  CHECK_MSG(memcmp(back, src, total) == 0, "DMA writes: bytes differ");
  /* Reads: start all, then wait, drain and refill. */
  memset(back, 0, total);
  for (size_t i = 0; i < chunks; i++) {
    unsigned k = (unsigned)(i % BLOCKS);
    size_t done = i * block_bytes, n = total - done < block_bytes ? total - done : block_bytes;
    if (i >= BLOCKS) {
      size_t pdone = (i - BLOCKS) * block_bytes;
      CHECK_OK(ferry__ticket_finish(dev, ticket[k]));
      memcpy(back + pdone, block[k], block_bytes);
    }
    CHECK_OK(ops->dma_start(dev, NULL, FERRY_DMA_TO_HOST, &s->mem, 100 + done, &pin[k], n, &ticket[k]));
  }
  for (size_t i = chunks > BLOCKS ? chunks - BLOCKS : 0; i < chunks; i++) {
    unsigned k = (unsigned)(i % BLOCKS);
    size_t done = i * block_bytes, n = total - done < block_bytes ? total - done : block_bytes;
    CHECK_OK(ferry__ticket_finish(dev, ticket[k]));
    memcpy(back + done, block[k], n);
  }
  CHECK_MSG(memcmp(back, src, total) == 0, "DMA reads: bytes differ");
  /* A block made by another allocator, registered (CL_MEM_USE_HOST_PTR). */
  unsigned char *plain = harness_aligned(4096, 65536);
  uintptr_t token = 0;
  CHECK_OK(ops->pin_register(dev, plain, 65536, &token));
  memcpy(plain, src, 65536);
  ferry_pinned other = {.host = plain, .token = token, .offset = 0};
  ferry_ticket t = 0;
  CHECK_OK(ops->dma_start(dev, NULL, FERRY_DMA_TO_DEVICE, &s->mem, 0, &other, 65536, &t));
  CHECK_OK(ferry__ticket_finish(dev, t));
  memset(back, 0, 65536);
  CHECK_OK(ferry_read(b, 0, back, 65536));
  CHECK_MSG(memcmp(back, src, 65536) == 0, "DMA from a registered block: bytes differ");
  ops->pin_release(dev, plain, 65536, token, false);
  free(plain);
  /* A driver failure names the call, the bytes and the memory. */
  ferry_cl_api *table = (ferry_cl_api *)api;
  saved = *table;
  table->clEnqueueWriteBuffer = failing_write;
  fail_with = CL_INVALID_VALUE;
  CHECK_STATUS(ops->dma_start(dev, NULL, FERRY_DMA_TO_DEVICE, &s->mem, 8, &pin[1], 16, &t), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("CL_INVALID_VALUE (-30) from clEnqueueWriteBuffer, 16 bytes at offset 8 from pinned host memory");
  *table = saved;
  ferry__release(s);
  CHECK_OK(ferry_free(b));
  for (int k = 0; k < BLOCKS; k++)
    CHECK_OK(ferry_host_free(block[k]));
  free(src);
  free(back);
}

/* ---- lanes, tickets and gates, called directly --------------------------------- */

/* A buffer and the core's allocation under it, for the backend's operations. */
typedef struct lane_buf {
  ferry_buffer b;
  ferry_slot *s;
  size_t bytes;
} lane_buf;

static lane_buf lane_buf_new(ferry_device *dev, size_t bytes, unsigned char byte) {
  lane_buf lb = {FERRY_NULL_BUFFER, NULL, bytes};
  CHECK_OK(ferry_alloc(dev, bytes, FERRY_UINT8, &lb.b));
  unsigned char *init = malloc(bytes);
  memset(init, byte, bytes);
  CHECK_OK(ferry_write(lb.b, 0, init, bytes));
  free(init);
  lb.s = ferry__peek(lb.b);
  CHECK(lb.s != NULL);
  return lb;
}

static void lane_buf_free(lane_buf *lb) {
  if (lb->s) ferry__release(lb->s);
  CHECK_OK(ferry_free(lb->b));
}

/* Host memory the device's lanes can move from and to: ferry_host_alloc's
 * (pinned on devices that stage, where the pushes below are DMAs). */
static unsigned char *lane_host(ferry_device *dev, size_t bytes) {
  void *p = NULL;
  CHECK_OK(ferry_host_alloc(dev, bytes, &p));
  return p;
}

/* A transfer between host memory and a buffer pushed on `lane`, the way the
 * core pushes one for the device: the driver's non-blocking transfer where the
 * device has it (CPU devices), else a DMA from pinned memory. */
static ferry_status host_push(ferry_device *dev, ferry_lane *lane, ferry_dma_dir dir, ferry_mem *mem, size_t off,
                              void *host, size_t n, ferry_ticket *out) {
  const ferry_device_ops *o = dev->ops;
  if (dir == FERRY_DMA_TO_DEVICE && o->write_start) return o->write_start(dev, lane, mem, off, host, n, out);
  if (dir == FERRY_DMA_TO_HOST && o->read_start) return o->read_start(dev, lane, mem, off, host, n, out);
  ferry_pinned pin;
  if (!ferry__pinned_find(dev, host, n, &pin))
    return ferry__fail(FERRY_ERROR_UNSUPPORTED, "test: host memory at %p is not pinned for %s", host, dev->label);
  return o->dma_start(dev, lane, dir, mem, off, &pin, n, out);
}

/* The first byte of [p, p + n) that is not `byte`, or SIZE_MAX. */
static size_t not_byte(const unsigned char *p, size_t n, unsigned char byte) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != byte) return i;
  return SIZE_MAX;
}

/* Work pushed on one lane runs in the order pushed, each command on the one
 * before's result, with no ticket until the marker at the end. */
static void lanes_in_order(const ferry_cl_api *api, ferry_device *dev) {
  const ferry_device_ops *o = dev->ops;
  ferry_lane *lane = NULL, *other = NULL;
  CHECK_OK(o->lane_create(dev, &lane));
  CHECK_OK(o->lane_create(dev, &other));
  if (!lane || !other) return;
  ferry_native dn, ln = {0}, on = {0};
  CHECK_OK(ferry_device_native(dev, &dn));
  CHECK_OK(o->lane_native(dev, lane, &ln));
  CHECK_OK(o->lane_native(dev, other, &on));
  CHECK(ln.queue != 0 && on.queue != 0 && ln.queue != on.queue && ln.queue != dn.queue);
  /* An in-order queue of the device's own context, without profiling (which
   * costs every command; timing markers use a clock queue of their own). */
  cl_context ctx = NULL;
  cl_device_id id = NULL;
  cl_command_queue_properties props = 0, device_props = 0;
  cl_command_queue lq = (cl_command_queue)ln.queue;
  CHECK(api->clGetCommandQueueInfo(lq, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL) == CL_SUCCESS);
  CHECK(api->clGetCommandQueueInfo(lq, CL_QUEUE_DEVICE, sizeof id, &id, NULL) == CL_SUCCESS);
  CHECK(api->clGetCommandQueueInfo(lq, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL) == CL_SUCCESS);
  CHECK(api->clGetDeviceInfo(id, CL_DEVICE_QUEUE_PROPERTIES, sizeof device_props, &device_props, NULL) == CL_SUCCESS);
  CHECK(ctx == (cl_context)dn.context && id == (cl_device_id)dn.device);
  CHECK_MSG(!(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE), "a lane is an out-of-order queue");
  CHECK_MSG(!(props & CL_QUEUE_PROFILING_ENABLE), "a lane has profiling (%llx; the device's %llx)",
            (unsigned long long)props, (unsigned long long)device_props);

  size_t n = ((size_t)1 << 20) + 13;
  lane_buf a = lane_buf_new(dev, n, 0), b = lane_buf_new(dev, n, 0), c = lane_buf_new(dev, n, 0x77);
  unsigned char *src = lane_host(dev, n), *back = lane_host(dev, n), *model = malloc(n);
  fill_pattern(src, n, 21);
  memcpy(model, src, n);
  uint32_t pattern = 0x11223344u;
  for (size_t i = 0; i < 4000; i++)
    model[4 + i] = ((const unsigned char *)&pattern)[i % 4];
  memset(back, 0, n);
  CHECK_OK(host_push(dev, lane, FERRY_DMA_TO_DEVICE, &a.s->mem, 0, src, n, NULL));
  CHECK_OK(o->copy_start(dev, lane, &a.s->mem, 0, &b.s->mem, 0, n, NULL));
  CHECK_OK(o->fill_start(dev, lane, &b.s->mem, 4, 4000, pattern, 4, NULL));
  CHECK_OK(o->copy_start(dev, lane, &b.s->mem, 0, &c.s->mem, 3, n - 3, NULL));
  CHECK_OK(host_push(dev, lane, FERRY_DMA_TO_HOST, &c.s->mem, 0, back, n, NULL));
  ferry_ticket m = 0;
  CHECK_OK(o->marker(dev, lane, false, &m));
  CHECK(m != 0);
  CHECK_OK(o->ticket_wait(dev, m));
  CHECK_OK(o->ticket_query(dev, m));
  o->ticket_release(dev, m);
  CHECK_MSG(not_byte(back, 3, 0x77) == SIZE_MAX && memcmp(back + 3, model, n - 3) == 0,
            "five commands on one lane: the bytes read back are not the last command's");

  /* 200 writes of one word, each from its own source, no ticket: the last one
   * pushed is what the buffer holds. */
  uint32_t *words = (uint32_t *)(void *)src;
  for (uint32_t k = 0; k < 200; k++) {
    words[k] = k + 1000;
    CHECK_OK(host_push(dev, lane, FERRY_DMA_TO_DEVICE, &a.s->mem, 8, &words[k], 4, NULL));
  }
  uint32_t got = 0;
  uint32_t *gotp = (uint32_t *)(void *)back;
  ferry_ticket t = 0;
  CHECK_OK(host_push(dev, lane, FERRY_DMA_TO_HOST, &a.s->mem, 8, gotp, 4, &t));
  CHECK(t != 0);
  CHECK_OK(ferry__ticket_finish(dev, t));
  got = *gotp;
  CHECK_MSG(got == 1199, "200 writes of one word on one lane: %u is left, not the last (1199)", got);
  /* Two lanes: each in its own order, both complete. */
  ferry_ticket t1 = 0, t2 = 0;
  CHECK_OK(o->fill_start(dev, lane, &a.s->mem, 0, 4096, 0x01, 1, NULL));
  CHECK_OK(o->fill_start(dev, other, &b.s->mem, 0, 4096, 0x02, 1, NULL));
  CHECK_OK(o->copy_start(dev, lane, &a.s->mem, 0, &a.s->mem, 8192, 4096, &t1));
  CHECK_OK(o->copy_start(dev, other, &b.s->mem, 0, &b.s->mem, 8192, 4096, &t2));
  CHECK_OK(ferry__ticket_finish(dev, t1));
  CHECK_OK(ferry__ticket_finish(dev, t2));
  CHECK_OK(ferry_read(a.b, 8192, back, 4096));
  CHECK(not_byte(back, 4096, 0x01) == SIZE_MAX);
  CHECK_OK(ferry_read(b.b, 8192, back, 4096));
  CHECK(not_byte(back, 4096, 0x02) == SIZE_MAX);
  lane_buf_free(&a);
  lane_buf_free(&b);
  lane_buf_free(&c);
  CHECK_OK(ferry_host_free(src));
  CHECK_OK(ferry_host_free(back));
  free(model);
  o->lane_destroy(dev, lane);
  o->lane_destroy(dev, other);
}

/* Work behind a gate does not run before the gate is raised to its value, and
 * runs once it is; other lanes go on meanwhile. */
static void gates(ferry_device *dev) {
  const ferry_device_ops *o = dev->ops;
  ferry_lane *lane = NULL, *other = NULL;
  ferry_gate *g = NULL, *g2 = NULL;
  CHECK_OK(o->lane_create(dev, &lane));
  CHECK_OK(o->lane_create(dev, &other));
  CHECK_OK(o->gate_create(dev, &g));
  CHECK_OK(o->gate_create(dev, &g2));
  if (!lane || !other || !g || !g2) return;
  size_t n = 3 * 4096;
  lane_buf x = lane_buf_new(dev, n, 0), y = lane_buf_new(dev, 4096, 0);
  unsigned char *ones = lane_host(dev, 4096), *twos = lane_host(dev, 4096), *back = malloc(n);
  memset(ones, 1, 4096);
  memset(twos, 2, 4096);
  ferry_ticket t1 = 0, t2 = 0, t3 = 0, ty = 0;
  CHECK_OK(o->gate_push(dev, lane, g, 1));
  CHECK_OK(host_push(dev, lane, FERRY_DMA_TO_DEVICE, &x.s->mem, 0, ones, 4096, &t1));
  CHECK_OK(o->gate_push(dev, lane, g, 2));
  CHECK_OK(host_push(dev, lane, FERRY_DMA_TO_DEVICE, &x.s->mem, 4096, twos, 4096, &t2));
  CHECK_OK(o->gate_push(dev, lane, g, 3));
  CHECK_OK(o->fill_start(dev, lane, &x.s->mem, 8192, 4096, 0x03030303u, 4, &t3));
  /* Another lane is not held: its work completes while the first waits. */
  CHECK_OK(o->fill_start(dev, other, &y.s->mem, 0, 4096, 0x09, 1, &ty));
  CHECK_OK(ferry__ticket_finish(dev, ty));
  harness_sleep_ms(50);
  CHECK_STATUS(o->ticket_query(dev, t1), FERRY_NOT_READY);
  CHECK_STATUS(o->ticket_query(dev, t3), FERRY_NOT_READY);
  /* The synchronous read is on another lane: the bytes are the old ones. */
  CHECK_OK(ferry_read(x.b, 0, back, n));
  CHECK_MSG(not_byte(back, n, 0) == SIZE_MAX, "a write behind a gate landed before the gate was raised (byte %zu)",
            not_byte(back, n, 0));
  CHECK_OK(ferry_read(y.b, 0, back, 4096));
  CHECK_MSG(not_byte(back, 4096, 9) == SIZE_MAX, "a lane without a gate was held by another lane's gate");
  /* To 1: the first write, not the second. */
  CHECK_OK(o->gate_raise(dev, g, 1));
  CHECK_OK(o->ticket_wait(dev, t1));
  harness_sleep_ms(30);
  CHECK_STATUS(o->ticket_query(dev, t2), FERRY_NOT_READY);
  CHECK_OK(ferry_read(x.b, 0, back, n));
  CHECK(not_byte(back, 4096, 1) == SIZE_MAX && not_byte(back + 4096, 8192, 0) == SIZE_MAX);
  /* To 3 at once: the rest. */
  CHECK_OK(o->gate_raise(dev, g, 3));
  CHECK_OK(o->ticket_wait(dev, t2));
  CHECK_OK(o->ticket_wait(dev, t3));
  CHECK_OK(ferry_read(x.b, 0, back, n));
  CHECK(not_byte(back, 4096, 1) == SIZE_MAX && not_byte(back + 4096, 4096, 2) == SIZE_MAX &&
        not_byte(back + 8192, 4096, 3) == SIZE_MAX);
  o->ticket_release(dev, t1);
  o->ticket_release(dev, t2);
  o->ticket_release(dev, t3);
  /* A value raised already holds nothing. */
  CHECK_OK(o->gate_push(dev, lane, g, 2));
  CHECK_OK(o->fill_start(dev, lane, &x.s->mem, 0, 4096, 0x04, 1, &t1));
  CHECK_OK(ferry__ticket_finish(dev, t1));
  /* One value waited for by two lanes, pushed in the other order, raised once. */
  CHECK_OK(o->gate_push(dev, other, g2, 5));
  CHECK_OK(o->gate_push(dev, lane, g2, 2));
  CHECK_OK(o->gate_push(dev, lane, g2, 5));
  CHECK_OK(o->fill_start(dev, lane, &x.s->mem, 0, 4096, 0x05, 1, &t1));
  CHECK_OK(o->fill_start(dev, other, &y.s->mem, 0, 4096, 0x06, 1, &t2));
  harness_sleep_ms(30);
  CHECK_STATUS(o->ticket_query(dev, t1), FERRY_NOT_READY);
  CHECK_STATUS(o->ticket_query(dev, t2), FERRY_NOT_READY);
  CHECK_OK(o->gate_raise(dev, g2, 4)); /* opens 2, not 5 */
  harness_sleep_ms(30);
  CHECK_STATUS(o->ticket_query(dev, t1), FERRY_NOT_READY);
  CHECK_STATUS(o->ticket_query(dev, t2), FERRY_NOT_READY);
  CHECK_OK(o->gate_raise(dev, g2, 5));
  CHECK_OK(ferry__ticket_finish(dev, t1));
  CHECK_OK(ferry__ticket_finish(dev, t2));
  CHECK_OK(ferry_read(x.b, 0, back, 4096));
  CHECK(not_byte(back, 4096, 5) == SIZE_MAX);
  CHECK_OK(ferry_read(y.b, 0, back, 4096));
  CHECK(not_byte(back, 4096, 6) == SIZE_MAX);
  o->gate_destroy(dev, g);
  o->gate_destroy(dev, g2);
  /* A gate destroyed with a value never raised lets its lane go on. */
  CHECK_OK(o->gate_create(dev, &g));
  CHECK_OK(o->gate_push(dev, lane, g, 1));
  CHECK_OK(o->fill_start(dev, lane, &x.s->mem, 0, 4096, 0x07, 1, &t1));
  o->gate_destroy(dev, g);
  CHECK_OK(ferry__ticket_finish(dev, t1));
  lane_buf_free(&x);
  lane_buf_free(&y);
  CHECK_OK(ferry_host_free(ones));
  CHECK_OK(ferry_host_free(twos));
  free(back);
  o->lane_destroy(dev, lane);
  o->lane_destroy(dev, other);
}

/* Every pattern size at offsets and lengths that are odd multiples of it, on a
 * plain buffer and on a host-pointer buffer, against a model. */
static void fills(ferry_device *dev, const ferry_device_info *info) {
  const ferry_device_ops *o = dev->ops;
  ferry_lane *lane = NULL;
  CHECK_OK(o->lane_create(dev, &lane));
  if (!lane) return;
  size_t align = info->host_ptr_alignment > 64 ? info->host_ptr_alignment : 64;
  size_t n = 3 * 65536;
  n = (n + align - 1) / align * align;
  lane_buf p = lane_buf_new(dev, n, 0xEE);
  unsigned char *array = harness_aligned(align, n), *model = malloc(n), *back = malloc(n);
  memset(array, 0xEE, n);
  ferry_buffer hb = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(array, n, FERRY_UINT8), &hb, NULL));
  CHECK_OK(ferry_host_to_device(ferry_array_of(array, n, FERRY_UINT8), hb));
  ferry_slot *hs = ferry__peek(hb);
  memset(model, 0xEE, n);
  static const uint32_t patterns[] = {0xA1u, 0xB2C3u, 0xD4E5F607u};
  static const unsigned sizes[] = {1, 2, 4};
  static const size_t offsets[] = {0, 1, 3, 7, 4097, 30001};
  static const size_t lengths[] = {1, 3, 5, 1001, 4099, 65537};
  for (int k = 0; k < 3; k++) {
    unsigned size = sizes[k];
    uint32_t pattern = patterns[k];
    const unsigned char *pb = (const unsigned char *)&pattern;
    for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) {
      size_t off = offsets[i] * size, len = lengths[(i + k) % 6] * size;
      if (off + len > n) continue;
      ferry_ticket t = 0, th = 0;
      CHECK_OK(o->fill_start(dev, lane, &p.s->mem, off, len, pattern, size, &t));
      if (hs) CHECK_OK(o->fill_start(dev, lane, &hs->mem, off, len, pattern, size, &th));
      CHECK_OK(ferry__ticket_finish(dev, t));
      CHECK_OK(ferry__ticket_finish(dev, th));
      for (size_t b = 0; b < len; b++)
        model[off + b] = pb[b % size];
    }
    /* The whole buffer too, once per size, then back to the model's bytes. */
    ferry_ticket t = 0;
    CHECK_OK(o->fill_start(dev, lane, &p.s->mem, 0, n, pattern, size, &t));
    CHECK_OK(ferry__ticket_finish(dev, t));
    CHECK_OK(ferry_read(p.b, 0, back, n));
    size_t bad = SIZE_MAX;
    for (size_t b = 0; b < n && bad == SIZE_MAX; b++)
      if (back[b] != pb[b % size]) bad = b;
    CHECK_MSG(bad == SIZE_MAX, "a %u-byte fill of the whole buffer: byte %zu differs", size, bad);
    CHECK_OK(ferry_write(p.b, 0, model, n));
  }
  CHECK_OK(ferry_read(p.b, 0, back, n));
  size_t bad = SIZE_MAX;
  for (size_t b = 0; b < n && bad == SIZE_MAX; b++)
    if (back[b] != model[b]) bad = b;
  CHECK_MSG(bad == SIZE_MAX, "fills at odd offsets: byte %zu is 0x%02x, expected 0x%02x", bad,
            bad == SIZE_MAX ? 0 : back[bad], bad == SIZE_MAX ? 0 : model[bad]);
  /* The host-pointer buffer's fills reach the array when the host takes it. */
  if (hs) ferry__release(hs);
  CHECK_OK(ferry_device_to_host(hb, ferry_array_of(array, n, FERRY_UINT8)));
  bad = SIZE_MAX;
  for (size_t b = 0; b < n && bad == SIZE_MAX; b++)
    if (array[b] != model[b]) bad = b;
  CHECK_MSG(bad == SIZE_MAX, "fills of a host-pointer buffer: array byte %zu is 0x%02x, expected 0x%02x", bad,
            bad == SIZE_MAX ? 0 : array[bad], bad == SIZE_MAX ? 0 : model[bad]);
  CHECK_OK(ferry_free(hb));
  lane_buf_free(&p);
  free(array);
  free(model);
  free(back);
  o->lane_destroy(dev, lane);
}

/* Timing markers: the time between two of them on the device's clock, against
 * the host's; negative the other way round; across two lanes of the device. */
static void markers(ferry_device *dev) {
  const ferry_device_ops *o = dev->ops;
  ferry_lane *lane = NULL, *other = NULL;
  CHECK_OK(o->lane_create(dev, &lane));
  CHECK_OK(o->lane_create(dev, &other));
  if (!lane || !other) return;
  size_t n = (size_t)32 << 20;
  lane_buf a = lane_buf_new(dev, n, 0);
  unsigned char *src = lane_host(dev, n);
  memset(src, 0x3c, n);
  ferry_ticket m0 = 0, m1 = 0, m2 = 0;
  double t0 = harness_now_s();
  CHECK_OK(o->marker(dev, lane, true, &m0));
  for (int i = 0; i < 4; i++)
    CHECK_OK(host_push(dev, lane, FERRY_DMA_TO_DEVICE, &a.s->mem, 0, src, n, NULL));
  CHECK_OK(o->marker(dev, lane, true, &m1));
  CHECK_OK(o->ticket_wait(dev, m1));
  double host_ms = (harness_now_s() - t0) * 1e3;
  CHECK_OK(o->ticket_wait(dev, m0));
  CHECK_OK(o->marker(dev, other, true, &m2));
  CHECK_OK(o->ticket_wait(dev, m2));
  double ms = 0, back_ms = 0, across = 0;
  ferry_status st = o->ticket_elapsed(dev, m0, m1, &ms);
  if (st == FERRY_ERROR_UNSUPPORTED) {
    printf("  (the driver keeps no profiling for markers: ferry_event_elapsed uses the host's clock)\n");
  } else {
    CHECK_OK(st);
    CHECK_OK(o->ticket_elapsed(dev, m1, m0, &back_ms));
    CHECK_OK(o->ticket_elapsed(dev, m1, m2, &across));
    printf("  4 writes of 32 MiB between two markers: %.3f ms on the device's clock, %.3f ms on the host's\n", ms,
           host_ms);
    CHECK_MSG(ms > 0 && ms <= host_ms + 1.0, "elapsed %.3f ms between markers, the host saw %.3f ms", ms, host_ms);
    CHECK(back_ms == -ms);
    CHECK_MSG(across >= 0, "a marker on another lane, made after, is %.3f ms before", across);
  }
  if (strstr(dev->name, "Portable Computing Language"))
    CHECK_MSG(st == FERRY_OK, "PoCL keeps profiling for markers; ticket_elapsed said %s", ferry_status_name(st));
  o->ticket_release(dev, m0);
  o->ticket_release(dev, m1);
  o->ticket_release(dev, m2);
  lane_buf_free(&a);
  CHECK_OK(ferry_host_free(src));
  o->lane_destroy(dev, lane);
  o->lane_destroy(dev, other);
}

/* One lane waits for another's marker on the device; tickets of another
 * context or another backend are refused without a message (the core then
 * waits on the host). */
static void lane_waits(const ferry_cl_api *api, ferry_device *dev) {
  const ferry_device_ops *o = dev->ops;
  ferry_lane *l1 = NULL, *l2 = NULL;
  ferry_gate *g = NULL;
  CHECK_OK(o->lane_create(dev, &l1));
  CHECK_OK(o->lane_create(dev, &l2));
  CHECK_OK(o->gate_create(dev, &g));
  if (!l1 || !l2 || !g) return;
  lane_buf x = lane_buf_new(dev, 4096, 0);
  unsigned char *ones = lane_host(dev, 4096), *back = lane_host(dev, 4096);
  memset(ones, 1, 4096);
  memset(back, 0xEE, 4096);
  ferry_ticket m1 = 0, t2 = 0;
  CHECK_OK(o->gate_push(dev, l1, g, 1));
  CHECK_OK(host_push(dev, l1, FERRY_DMA_TO_DEVICE, &x.s->mem, 0, ones, 4096, NULL));
  CHECK_OK(o->marker(dev, l1, false, &m1));
  CHECK_OK(o->lane_wait(dev, l2, dev, m1));
  CHECK_OK(host_push(dev, l2, FERRY_DMA_TO_HOST, &x.s->mem, 0, back, 4096, &t2));
  harness_sleep_ms(50);
  CHECK_STATUS(o->ticket_query(dev, t2), FERRY_NOT_READY);
  CHECK_MSG(not_byte(back, 4096, 0xEE) == SIZE_MAX, "a read waiting for another lane ran before it");
  CHECK_OK(o->gate_raise(dev, g, 1));
  CHECK_OK(ferry__ticket_finish(dev, t2));
  CHECK_MSG(not_byte(back, 4096, 1) == SIZE_MAX, "a read after another lane's write does not see it");
  /* A completed ticket: nothing to wait for. */
  CHECK_OK(o->ticket_wait(dev, m1));
  CHECK_OK(o->lane_wait(dev, l2, dev, m1));
  o->ticket_release(dev, m1);
  /* A user event of another context of the same device: refused, no message. */
  ferry_native nat;
  CHECK_OK(ferry_device_native(dev, &nat));
  cl_device_id id = (cl_device_id)nat.device;
  cl_int err = CL_SUCCESS;
  cl_context other = api->clCreateContext(NULL, 1, &id, NULL, NULL, &err);
  CHECK(err == CL_SUCCESS && other);
  if (other) {
    cl_event ue = api->clCreateUserEvent(other, &err);
    CHECK(err == CL_SUCCESS && ue);
    ferry__fail(FERRY_OK, "sentinel");
    CHECK_STATUS(o->lane_wait(dev, l2, dev, (ferry_ticket)(uintptr_t)ue), FERRY_ERROR_UNSUPPORTED);
    CHECK_MSG(strcmp(ferry_last_error(), "sentinel") == 0, "a refused lane_wait wrote a sentence: %s",
              ferry_last_error());
    api->clSetUserEventStatus(ue, CL_COMPLETE);
    api->clReleaseEvent(ue);
    api->clReleaseContext(other);
  }
  /* A ticket of another backend's device. */
  ferry_device *native = harness_device_of("native");
  if (native) CHECK_STATUS(o->lane_wait(dev, l2, native, 12345), FERRY_ERROR_UNSUPPORTED);
  lane_buf_free(&x);
  CHECK_OK(ferry_host_free(ones));
  CHECK_OK(ferry_host_free(back));
  o->gate_destroy(dev, g);
  o->lane_destroy(dev, l1);
  o->lane_destroy(dev, l2);
}

/* ---- lanes' failures, by fault injection ---------------------------------------- */

static cl_int failing_fill(cl_command_queue q, cl_mem m, const void *p, size_t ps, size_t o, size_t n, cl_uint ne,
                           const cl_event *w, cl_event *e) {
  (void)q, (void)m, (void)p, (void)ps, (void)o, (void)n, (void)ne, (void)w, (void)e;
  return fail_with;
}

static cl_event failing_user_event(cl_context c, cl_int *err) {
  (void)c;
  *err = fail_with;
  return NULL;
}

static cl_int failing_marker(cl_command_queue q, cl_uint ne, const cl_event *w, cl_event *e) {
  (void)q, (void)ne, (void)w, (void)e;
  return fail_with;
}

static cl_command_queue failing_queue(cl_context c, cl_device_id d, cl_command_queue_properties p, cl_int *err) {
  (void)c, (void)d, (void)p;
  *err = fail_with;
  return NULL;
}

static cl_command_queue failing_queue_props(cl_context c, cl_device_id d, const cl_queue_properties *p, cl_int *err) {
  (void)c, (void)d, (void)p;
  *err = fail_with;
  return NULL;
}

/* A command that fails as it runs: the driver says so through the event's
 * execution status (PoCL 3.1 itself aborts when a failure reaches a command
 * through a user event, so the failure is made up here). */
static cl_event doomed;

static cl_int doomed_event_info(cl_event ev, cl_event_info what, size_t size, void *value, size_t *size_ret) {
  if (ev == doomed && what == CL_EVENT_COMMAND_EXECUTION_STATUS && size >= sizeof(cl_int)) {
    cl_int status = fail_with;
    memcpy(value, &status, sizeof status);
    if (size_ret) *size_ret = sizeof status;
    return CL_SUCCESS;
  }
  return saved.clGetEventInfo(ev, what, size, value, size_ret);
}

static cl_int dooming_marker(cl_command_queue q, cl_uint ne, const cl_event *w, cl_event *e) {
  cl_int err = saved.clEnqueueMarkerWithWaitList(q, ne, w, e);
  if (err == CL_SUCCESS && e) doomed = *e;
  return err;
}

static cl_int doomed_wait(cl_uint n, const cl_event *events) {
  cl_int err = saved.clWaitForEvents(n, events);
  for (cl_uint i = 0; i < n; i++)
    if (events[i] == doomed) return CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;
  return err;
}

static void lane_failures(const ferry_cl_api *api, ferry_device *dev, const ferry_device_info *info) {
  ferry_cl_api *table = (ferry_cl_api *)api;
  const ferry_device_ops *o = dev->ops;
  saved = *table;
  char text[512];
  ferry_lane *lane = NULL;
  ferry_gate *g = NULL;
  CHECK_OK(o->lane_create(dev, &lane));
  CHECK_OK(o->gate_create(dev, &g));
  if (!lane || !g) return;
  lane_buf x = lane_buf_new(dev, 4096, 0);
  snprintf(text, sizeof text, "on device %zu (opencl: %s)", info->index, info->name);
  ferry_ticket t = 77;

  table->clEnqueueFillBuffer = failing_fill;
  fail_with = CL_INVALID_VALUE;
  CHECK_STATUS(o->fill_start(dev, lane, &x.s->mem, 6, 100, 0xabcd, 2, &t), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("CL_INVALID_VALUE (-30) from clEnqueueFillBuffer, a 2-byte pattern over 100 bytes at offset 6");
  CHECK_ERROR_HAS(text);
  CHECK(t == 0);
  /* Through a queue: the submission fails, saying which operation. */
  ferry_queue q = FERRY_NULL_QUEUE;
  CHECK_OK(ferry_queue_create(dev, &q));
  uint16_t pat = 7;
  CHECK_STATUS(ferry_fill_async(q, x.b, 2, 10, &pat, 2), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("ferry_fill_async");
  CHECK_ERROR_HAS("from clEnqueueFillBuffer");
  table->clEnqueueFillBuffer = saved.clEnqueueFillBuffer;
  CHECK_OK(ferry_fill_async(q, x.b, 2, 10, &pat, 2));
  CHECK_OK(ferry_queue_synchronize(q));

  table->clCreateUserEvent = failing_user_event;
  fail_with = CL_OUT_OF_HOST_MEMORY;
  CHECK_STATUS(o->gate_push(dev, lane, g, 1), FERRY_ERROR_OUT_OF_MEMORY);
  CHECK_ERROR_HAS("CL_OUT_OF_HOST_MEMORY (-6) from clCreateUserEvent, a queue waiting for the host (a gate at 1)");
  table->clCreateUserEvent = saved.clCreateUserEvent;
  /* Nothing was left waiting: the lane goes on. */
  CHECK_OK(o->fill_start(dev, lane, &x.s->mem, 0, 4096, 1, 1, &t));
  CHECK_OK(ferry__ticket_finish(dev, t));

  table->clEnqueueMarkerWithWaitList = failing_marker;
  fail_with = CL_OUT_OF_RESOURCES;
  t = 77;
  CHECK_STATUS(o->marker(dev, lane, true, &t), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("CL_OUT_OF_RESOURCES (-5) from clEnqueueMarkerWithWaitList, a marker of the queue's work");
  CHECK(t == 0);
  ferry_event ev = FERRY_NULL_EVENT;
  CHECK_OK(ferry_event_create(&ev));
  CHECK_STATUS(ferry_event_record(ev, q), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("from clEnqueueMarkerWithWaitList");
  table->clEnqueueMarkerWithWaitList = saved.clEnqueueMarkerWithWaitList;
  CHECK_OK(ferry_event_record(ev, q));
  CHECK_OK(ferry_event_synchronize(ev));
  CHECK_OK(ferry_event_destroy(ev));
  CHECK_OK(ferry_queue_destroy(q));

  /* A queue the driver will not make: ferry_queue_create says why. */
  table->clCreateCommandQueue = failing_queue;
  table->clCreateCommandQueueWithProperties = saved.clCreateCommandQueueWithProperties ? failing_queue_props : NULL;
  fail_with = CL_INVALID_QUEUE_PROPERTIES;
  q = (ferry_queue){12345};
  CHECK_STATUS(ferry_queue_create(dev, &q), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("ferry_queue_create: a queue on");
  CHECK_ERROR_HAS("CL_INVALID_QUEUE_PROPERTIES (-35) from clCreateCommandQueue");
  CHECK(q.id == 12345);
  table->clCreateCommandQueue = saved.clCreateCommandQueue;
  table->clCreateCommandQueueWithProperties = saved.clCreateCommandQueueWithProperties;

  /* A command that fails as it runs: its ticket says so, with the driver's code. */
  ferry_ticket bad = 0;
  CHECK_OK(o->fill_start(dev, lane, &x.s->mem, 0, 4096, 2, 1, &bad));
  doomed = (cl_event)(uintptr_t)bad;
  table->clGetEventInfo = doomed_event_info;
  table->clWaitForEvents = doomed_wait;
  fail_with = CL_OUT_OF_RESOURCES;
  CHECK_STATUS(o->ticket_query(dev, bad), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("CL_OUT_OF_RESOURCES (-5) from a command's execution status");
  CHECK_ERROR_HAS(text);
  CHECK_STATUS(o->ticket_wait(dev, bad), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("CL_OUT_OF_RESOURCES (-5) from clWaitForEvents, waiting for a command ferry queued");
  fail_with = CL_MEM_OBJECT_ALLOCATION_FAILURE; /* a buffer the driver backs only as the command runs */
  CHECK_STATUS(o->ticket_wait(dev, bad), FERRY_ERROR_OUT_OF_MEMORY);
  table->clGetEventInfo = saved.clGetEventInfo;
  table->clWaitForEvents = saved.clWaitForEvents;
  o->ticket_release(dev, bad);
  doomed = NULL;

  /* The same through a queue: ferry_queue_synchronize reports it once, naming
   * the operation, and the queue works again. */
  CHECK_OK(ferry_queue_create(dev, &q));
  unsigned char word[4] = {1, 2, 3, 4};
  CHECK_OK(ferry_fill_async(q, x.b, 0, 8, word, 4)); /* no ticket of its own: the marker after it completes it */
  table->clEnqueueMarkerWithWaitList = dooming_marker;
  table->clGetEventInfo = doomed_event_info;
  table->clWaitForEvents = doomed_wait;
  fail_with = CL_OUT_OF_RESOURCES;
  CHECK_STATUS(ferry_queue_synchronize(q), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("ferry_queue_synchronize");
  CHECK_ERROR_HAS("ferry_fill_async");
  CHECK_ERROR_HAS("CL_OUT_OF_RESOURCES (-5)");
  printf("  a command failing as it runs: %s\n", ferry_last_error());
  table->clEnqueueMarkerWithWaitList = saved.clEnqueueMarkerWithWaitList;
  table->clGetEventInfo = saved.clGetEventInfo;
  table->clWaitForEvents = saved.clWaitForEvents;
  doomed = NULL;
  CHECK_OK(ferry_fill_async(q, x.b, 0, 8, word, 4));
  CHECK_OK(ferry_queue_synchronize(q));
  CHECK_OK(ferry_queue_destroy(q));
  *table = saved;
  lane_buf_free(&x);
  o->gate_destroy(dev, g);
  o->lane_destroy(dev, lane);
}

/* ---- host-pointer buffers under queued commands ----------------------------------- */

static void model_fill(unsigned char *m, size_t off, size_t n, const void *pattern, unsigned size) {
  for (size_t i = 0; i < n; i++)
    m[off + i] = ((const unsigned char *)pattern)[i % size];
}

/* Handovers are host parts of the queue, run by its thread; the commands
 * submitted after them were pushed on the lane at submission, before the
 * handovers ran. Whatever runs when, the bytes are those of the order submitted. */
static void host_ptr_queued(ferry_device *dev, const ferry_device_info *info) {
  size_t align = info->host_ptr_alignment > 64 ? info->host_ptr_alignment : 64;
  size_t n = (((size_t)256 << 10) + align - 1) / align * align;
  unsigned char *array = harness_aligned(align, n), *model = malloc(n), *pmodel = malloc(n), *other = malloc(n),
                *back = malloc(n);
  fill_pattern(array, n, 31);
  memcpy(model, array, n);
  fill_pattern(other, n, 32);
  ferry_buffer h = FERRY_NULL_BUFFER, p = FERRY_NULL_BUFFER, p2 = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(array, n, FERRY_UINT8), &h, NULL));
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &p));
  CHECK_OK(ferry_alloc(dev, n, FERRY_UINT8, &p2));
  ferry_queue q = FERRY_NULL_QUEUE, q2 = FERRY_NULL_QUEUE;
  CHECK_OK(ferry_queue_create(dev, &q));
  CHECK_OK(ferry_queue_create(dev, &q2));
  uint32_t pat4 = 0x0a0b0c0du;
  uint16_t pat2 = 0x5150;
  unsigned char pat1 = 0x99;
  for (int round = 0; round < 3; round++) {
    CHECK_OK(ferry_write_async(q, h, 0, array, n)); /* the host hands the array over */
    CHECK_OK(ferry_copy_async(q, h, 0, p, 0, n));
    memcpy(pmodel, model, n);
    CHECK_OK(ferry_fill_async(q, h, 64, 4096, &pat4, 4));
    model_fill(model, 64, 4096, &pat4, 4);
    CHECK_OK(ferry_read_async(q, h, 0, array, n)); /* and takes it back */
    /* Pushed now, behind the take-back that has not run yet. */
    CHECK_OK(ferry_copy_async(q, p, 0, h, 8192, 4096));
    memcpy(model + 8192, pmodel, 4096);
    CHECK_OK(ferry_write_async(q, h, 100, other + round, 1000));
    memcpy(model + 100, other + round, 1000);
    CHECK_OK(ferry_fill_async(q, h, 6, 10, &pat2, 2));
    model_fill(model, 6, 10, &pat2, 2);
    CHECK_OK(ferry_fill_async(q, h, 3, 5, &pat1, 1));
    model_fill(model, 3, 5, &pat1, 1);
    /* Another queue, ordered after this one's work by an event, copies it out. */
    ferry_event ev = FERRY_NULL_EVENT;
    CHECK_OK(ferry_event_create(&ev));
    CHECK_OK(ferry_event_record(ev, q));
    CHECK_OK(ferry_queue_wait_event(q2, ev));
    CHECK_OK(ferry_copy_async(q2, h, 0, p2, 0, n));
    CHECK_OK(ferry_read_async(q, h, 0, array, n)); /* taken back again, with everything */
    CHECK_OK(ferry_queue_synchronize(q));
    CHECK_OK(ferry_queue_synchronize(q2));
    CHECK_OK(ferry_event_destroy(ev));
    size_t bad = SIZE_MAX;
    for (size_t i = 0; i < n && bad == SIZE_MAX; i++)
      if (array[i] != model[i]) bad = i;
    CHECK_MSG(bad == SIZE_MAX, "round %d: the array's byte %zu is 0x%02x, expected 0x%02x", round, bad,
              bad == SIZE_MAX ? 0 : array[bad], bad == SIZE_MAX ? 0 : model[bad]);
    CHECK_OK(ferry_read(p, 0, back, n));
    CHECK_MSG(memcmp(back, pmodel, n) == 0, "round %d: the copy out of the buffer is not its content then", round);
    CHECK_OK(ferry_read(p2, 0, back, n));
    CHECK_MSG(memcmp(back, model, n) == 0, "round %d: the other queue's copy is not the buffer's content", round);
    /* The host's own writes to the array, handed over, are the buffer's. */
    memset(array + 1000, round + 1, 3000);
    memset(model + 1000, round + 1, 3000);
  }
  CHECK_OK(ferry_queue_destroy(q));
  CHECK_OK(ferry_queue_destroy(q2));
  CHECK_OK(ferry_host_to_device(ferry_array_of(array, n, FERRY_UINT8), h));
  CHECK_OK(ferry_read(h, 0, back, n));
  CHECK(memcmp(back, model, n) == 0);
  CHECK_OK(ferry_free(h));
  CHECK_OK(ferry_free(p));
  CHECK_OK(ferry_free(p2));
  free(array);
  free(model);
  free(pmodel);
  free(other);
  free(back);
}

/* ---- several threads on one lane -------------------------------------------------- */

enum { LANE_THREADS = 4, LANE_REGION = 65536, LANE_ROUNDS = 40 };

typedef struct lane_worker {
  ferry_device *dev;
  ferry_lane *lane;
  ferry_mem *mem;
  unsigned char *src, *back; /* the thread's own host memory, LANE_REGION each */
  int id, errors;
} lane_worker;

/* Each thread's pushes are in its own order on the shared lane, whatever the
 * others push between them; its gate holds everyone's later work until it
 * raises it. No CHECK here: the harness's counters are the main thread's. */
static void *lane_work(void *arg) {
  lane_worker *w = arg;
  const ferry_device_ops *o = w->dev->ops;
  size_t at = (size_t)w->id * LANE_REGION;
  ferry_gate *g = NULL;
  if (o->gate_create(w->dev, &g) != FERRY_OK) {
    w->errors++;
    return NULL;
  }
  for (int i = 0; i < LANE_ROUNDS; i++) {
    uint32_t seed = (uint32_t)(w->id * 1000 + i);
    fill_pattern(w->src, LANE_REGION, seed);
    memset(w->back, 0, LANE_REGION);
    ferry_ticket t = 0;
    bool ok = o->gate_push(w->dev, w->lane, g, (uint64_t)i + 1) == FERRY_OK &&
              host_push(w->dev, w->lane, FERRY_DMA_TO_DEVICE, w->mem, at, w->src, LANE_REGION, NULL) == FERRY_OK &&
              o->gate_raise(w->dev, g, (uint64_t)i + 1) == FERRY_OK &&
              o->fill_start(w->dev, w->lane, w->mem, at + 16, 32, 0xC0DEu, 2, NULL) == FERRY_OK &&
              host_push(w->dev, w->lane, FERRY_DMA_TO_HOST, w->mem, at, w->back, LANE_REGION, &t) == FERRY_OK &&
              ferry__ticket_finish(w->dev, t) == FERRY_OK;
    if (!ok) {
      w->errors++;
      continue;
    }
    uint16_t c = 0xC0DE;
    model_fill(w->src, 16, 32, &c, 2);
    if (memcmp(w->back, w->src, LANE_REGION) != 0) w->errors++;
  }
  o->gate_destroy(w->dev, g);
  return NULL;
}

static void threads_on_one_lane(ferry_device *dev) {
  const ferry_device_ops *o = dev->ops;
  ferry_lane *lane = NULL;
  CHECK_OK(o->lane_create(dev, &lane));
  if (!lane) return;
  lane_buf x = lane_buf_new(dev, (size_t)LANE_THREADS * LANE_REGION, 0);
  pthread_t t[LANE_THREADS];
  lane_worker w[LANE_THREADS];
  for (int i = 0; i < LANE_THREADS; i++) {
    w[i] = (lane_worker){.dev = dev, .lane = lane, .mem = &x.s->mem, .id = i};
    w[i].src = lane_host(dev, LANE_REGION);
    w[i].back = lane_host(dev, LANE_REGION);
  }
  for (int i = 0; i < LANE_THREADS; i++)
    pthread_create(&t[i], NULL, lane_work, &w[i]);
  for (int i = 0; i < LANE_THREADS; i++) {
    pthread_join(t[i], NULL);
    CHECK_MSG(w[i].errors == 0, "thread %d on a shared lane: %d rounds failed or read other bytes (%s)", i, w[i].errors,
              ferry_last_error());
    CHECK_OK(ferry_host_free(w[i].src));
    CHECK_OK(ferry_host_free(w[i].back));
  }
  lane_buf_free(&x);
  o->lane_destroy(dev, lane);
}

/* ---- ferry_device_synchronize and the program's own work ------------------------- */

typedef struct later {
  const ferry_cl_api *api;
  cl_event ev;
} later;

static void *complete_later(void *arg) {
  later *l = arg;
  harness_sleep_ms(60);
  l->api->clSetUserEventStatus(l->ev, CL_COMPLETE);
  return NULL;
}

/* Work the program queued itself on the device's queue or on a ferry queue's
 * native queue, held by a user event a thread completes 60 ms later:
 * ferry_device_synchronize returns once it has run. */
static void synchronize_waits(const ferry_cl_api *api, ferry_device *dev) {
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_alloc(dev, 64, FERRY_UINT8, &b));
  ferry_queue q = FERRY_NULL_QUEUE;
  CHECK_OK(ferry_queue_create(dev, &q));
  ferry_native dn, qn;
  CHECK_OK(ferry_device_native(dev, &dn));
  CHECK_OK(ferry_queue_native(q, &qn));
  cl_command_queue queues[2] = {(cl_command_queue)dn.queue, (cl_command_queue)qn.queue};
  static const char *const names[2] = {"ferry_device_native's queue", "ferry_queue_native's queue"};
  for (int k = 0; k < 2; k++) {
    static uint32_t word;
    word = 0xfeed0000u + (uint32_t)k;
    cl_int err = CL_SUCCESS;
    later l = {.api = api, .ev = api->clCreateUserEvent((cl_context)dn.context, &err)};
    CHECK(err == CL_SUCCESS);
    CHECK(api->clEnqueueBarrierWithWaitList(queues[k], 1, &l.ev, NULL) == CL_SUCCESS);
    CHECK(api->clEnqueueWriteBuffer(queues[k], (cl_mem)ferry_device_ptr(b), CL_FALSE, 0, 4, &word, 0, NULL, NULL) ==
          CL_SUCCESS);
    CHECK(api->clFlush(queues[k]) == CL_SUCCESS);
    pthread_t t;
    double t0 = harness_now_s();
    pthread_create(&t, NULL, complete_later, &l);
    CHECK_OK(ferry_device_synchronize(dev));
    double waited = harness_now_s() - t0;
    pthread_join(t, NULL);
    CHECK_MSG(waited >= 0.05, "ferry_device_synchronize returned after %.1f ms, before the work on %s ran",
              waited * 1e3, names[k]);
    uint32_t got = 0;
    CHECK_OK(ferry_read(b, 0, &got, 4));
    CHECK_MSG(got == word, "the write on %s: 0x%x, expected 0x%x", names[k], got, word);
    api->clReleaseEvent(l.ev);
  }
  CHECK_OK(ferry_queue_destroy(q));
  CHECK_OK(ferry_free(b));
}

/* ---- loading ---------------------------------------------------------------- */

static void loading(void) {
  ferry_backend_info b;
  ferry_shutdown();
  CHECK_OK(setenv("FERRY_OPENCL_LIBRARY", "/nonexistent/libOpenCL.so.1", 1) == 0 ? FERRY_OK : FERRY_ERROR_BACKEND);
  CHECK_OK(ferry_init());
  CHECK(opencl_status(&b) && b.device_count == 0);
  CHECK_MSG(strstr(b.status, "/nonexistent/libOpenCL.so.1") && strstr(b.status, "cannot open shared object file"),
            "status without the library's path and dlerror: %s", b.status);
  printf("  missing library: opencl skipped: %s\n", b.status);
  CHECK(ferry__opencl_api() == NULL);
  CHECK(harness_device_of("native") != NULL);
  ferry_shutdown();

  setenv("FERRY_OPENCL_LIBRARY", "libm.so.6", 1);
  CHECK_OK(ferry_init());
  CHECK(opencl_status(&b) && b.device_count == 0);
  CHECK_MSG(strstr(b.status, "has no clGetPlatformIDs") != NULL, "status: %s", b.status);
  printf("  not an OpenCL library: opencl skipped: %s\n", b.status);
  ferry_shutdown();

  unsetenv("FERRY_OPENCL_LIBRARY");
  /* The loader, but no driver: an empty vendors folder. */
  char empty[] = "/tmp/ferry_no_icd_XXXXXX";
  const char *old_vendors = getenv("OCL_ICD_VENDORS");
  char *saved_vendors = old_vendors ? strdup(old_vendors) : NULL;
  if (mkdtemp(empty)) {
    setenv("OCL_ICD_VENDORS", empty, 1);
    CHECK_OK(ferry_init());
    CHECK(opencl_status(&b));
    if (b.device_count == 0) {
      CHECK_MSG(strstr(b.status, "no platform") != NULL && strstr(b.status, empty) != NULL, "status: %s", b.status);
      printf("  no driver: opencl skipped: %s\n", b.status);
    } else {
      /* An ICD loader that stays loaded after dlclose reads its vendors once. */
      printf("  no driver: not checked (the ICD loader stayed loaded and kept its platforms)\n");
    }
    ferry_shutdown();
    rmdir(empty);
  }
  if (saved_vendors)
    setenv("OCL_ICD_VENDORS", saved_vendors, 1);
  else
    unsetenv("OCL_ICD_VENDORS");
  free(saved_vendors);

  CHECK_OK(ferry_init());
  CHECK(opencl_status(&b) && b.device_count > 0);
  CHECK(ferry__opencl_api() != NULL);
  ferry_device_info info;
  ferry_device *dev = find_opencl(0, &info);
  CHECK(dev != NULL);
  if (dev) {
    unsigned char in[300], out[300];
    fill_pattern(in, sizeof in, 3);
    ferry_buffer x = FERRY_NULL_BUFFER;
    CHECK_OK(ferry_alloc(dev, sizeof in, FERRY_UINT8, &x));
    CHECK_OK(ferry_write(x, 0, in, sizeof in));
    CHECK_OK(ferry_read(x, 0, out, sizeof out));
    CHECK(memcmp(in, out, sizeof in) == 0);
    CHECK_OK(ferry_free(x));
  }
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  error_names();
  ferry_backend_info backend;
  int present = harness_start_backend("opencl", "opencl_backend", &backend);
  if (present != 0) return present;
  const ferry_cl_api *api = ferry__opencl_api();
  CHECK(api != NULL);
  char context[512];
  for (size_t d = 0; api && d < backend.device_count; d++) {
    ferry_device_info info;
    ferry_device *dev = find_opencl(d, &info);
    snprintf(context, sizeof context, "opencl[%zu]", info.index);
    printf("device %zu: %s\n", info.index, info.name);
    struct {
      const char *name;
      int kind;
    } parts[] = {{"device_info", 0},
                 {"host_ptr_states", 1},
                 {"failures", 2},
                 {"threads", 3},
                 {"pipeline", 4},
                 {"lanes_in_order", 5},
                 {"gates", 6},
                 {"fills", 7},
                 {"markers", 8},
                 {"lane_waits", 9},
                 {"lane_failures", 10},
                 {"host_ptr_queued", 11},
                 {"threads_on_one_lane", 12},
                 {"synchronize_waits", 13}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
      harness_context = context;
      int before = harness_failures;
      switch (parts[i].kind) {
      case 0: device_info(api, dev, &info); break;
      case 1: host_ptr_states(dev, &info); break;
      case 2: failures(api, dev, &info); break;
      case 3: threads(dev, &info); break;
      case 4: pipeline(api, dev); break;
      case 5: lanes_in_order(api, dev); break;
      case 6: gates(dev); break;
      case 7: fills(dev, &info); break;
      case 8: markers(dev); break;
      case 9: lane_waits(api, dev); break;
      case 10: lane_failures(api, dev, &info); break;
      case 11: host_ptr_queued(dev, &info); break;
      case 12: threads_on_one_lane(dev); break;
      case 13: synchronize_waits(api, dev); break;
      }
      printf("  %-28s %s\n", parts[i].name, harness_failures == before ? "ok" : "FAILED");
    }
  }
  /* Pipelined transfers and pinned memory on every device, CPUs included. */
  ferry_shutdown();
  const char *old_pipeline = getenv("FERRY_OPENCL_PIPELINE");
  char *saved_pipeline = old_pipeline ? strdup(old_pipeline) : NULL;
  setenv("FERRY_OPENCL_PIPELINE", "1", 1);
  CHECK_OK(ferry_init());
  api = ferry__opencl_api();
  for (size_t d = 0; api && d < backend.device_count; d++) {
    ferry_device_info info;
    ferry_device *dev = find_opencl(d, &info);
    snprintf(context, sizeof context, "opencl[%zu] FERRY_OPENCL_PIPELINE=1", info.index);
    harness_context = context;
    int before = harness_failures;
    CHECK(dev && (dev->caps & FERRY_CAP_STAGE));
    if (dev) {
      pipeline(api, dev);
      host_ptr_states(dev, &info);
      gates(dev);
      host_ptr_queued(dev, &info);
    }
    printf("  %-28s %s\n", "pipeline (forced)", harness_failures == before ? "ok" : "FAILED");
  }
  ferry_shutdown();
  if (saved_pipeline)
    setenv("FERRY_OPENCL_PIPELINE", saved_pipeline, 1);
  else
    unsetenv("FERRY_OPENCL_PIPELINE");
  free(saved_pipeline);
  CHECK_OK(ferry_init());

  harness_context = "loading";
  int before = harness_failures;
  loading();
  printf("  %-28s %s\n", "loading", harness_failures == before ? "ok" : "FAILED");
  harness_context = "";
  ferry_shutdown();
  return harness_finish("opencl_backend");
}
