/*
 * The opencl backend beyond the conformance suite:
 *  - device info against the driver's own answers;
 *  - host-pointer buffers: every operation in every ownership state (mapped /
 *    unmapped, for one and for two buffers), against a model of the bytes;
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
    snprintf(what, sizeof what, "buffer 1 %s, buffer 2 %s", host1 ? "mapped" : "unmapped",
             host2 ? "mapped" : "unmapped");
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
      /* Mapped, the array is the content: a read into it is a memmove within it. */
      CHECK_OK(ferry_read(h2.b, 64, h2.array + 128, 64));
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
  CHECK_MSG(memcmp(h1.array, chunk, bytes) == 0, "array after releasing an unmapped buffer");
  /* Released while the host owns it. */
  set_owner(&h2, true);
  CHECK_OK(ferry_write(h2.b, 0, chunk + 1, bytes - 1));
  CHECK_OK(ferry_free(h2.b));
  CHECK_MSG(memcmp(h2.array, chunk + 1, bytes - 1) == 0, "array after releasing a mapped buffer");
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

static void *failing_map(cl_command_queue q, cl_mem m, cl_bool b, cl_map_flags f, size_t o, size_t n, cl_uint ne,
                         const cl_event *w, cl_event *e, cl_int *err) {
  (void)q, (void)m, (void)b, (void)f, (void)o, (void)n, (void)ne, (void)w, (void)e;
  *err = fail_with;
  return NULL;
}

/* Maps as asked, then says the mapping is somewhere else than the array. */
static void *elsewhere_map(cl_command_queue q, cl_mem m, cl_bool b, cl_map_flags f, size_t o, size_t n, cl_uint ne,
                           const cl_event *w, cl_event *e, cl_int *err) {
  void *p = saved.clEnqueueMapBuffer(q, m, b, f, o, n, ne, w, e, err);
  if (p) {
    cl_event ev = NULL;
    if (saved.clEnqueueUnmapMemObject(q, m, p, 0, NULL, &ev) == CL_SUCCESS) {
      saved.clWaitForEvents(1, &ev);
      saved.clReleaseEvent(ev);
    }
  }
  static char elsewhere[64];
  return elsewhere;
}

static cl_int failing_unmap(cl_command_queue q, cl_mem m, void *p, cl_uint ne, const cl_event *w, cl_event *e) {
  (void)q, (void)m, (void)p, (void)ne, (void)w, (void)e;
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

  /* Host-ptr import: the map fails, or maps elsewhere than the array. */
  table->clEnqueueMapBuffer = failing_map;
  fail_with = CL_MAP_FAILURE;
  why = FERRY_REFUSAL_NONE;
  CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(array, hbytes, FERRY_UINT8), &b, &why), FERRY_ERROR_REFUSED);
  CHECK(why == FERRY_REFUSAL_DRIVER);
  CHECK_ERROR_HAS("CL_MAP_FAILURE (-12) from clEnqueueMapBuffer");
  table->clEnqueueMapBuffer = elsewhere_map;
  why = FERRY_REFUSAL_NONE;
  CHECK_STATUS(ferry_alloc_host_ptr(dev, ferry_array_of(array, hbytes, FERRY_UINT8), &b, &why), FERRY_ERROR_REFUSED);
  CHECK(why == FERRY_REFUSAL_DRIVER);
  CHECK_ERROR_HAS("does not use the array");
  table->clEnqueueMapBuffer = saved.clEnqueueMapBuffer;
  /* The refused ranges were given back: the array can be imported now. */
  CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(array, hbytes, FERRY_UINT8), &b, &why));
  /* An unmap that fails leaves the array the host's, and everything working. */
  table->clEnqueueUnmapMemObject = failing_unmap;
  fail_with = CL_OUT_OF_RESOURCES;
  CHECK_STATUS(ferry_host_to_device(ferry_array_of(array, hbytes, FERRY_UINT8), b), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("CL_OUT_OF_RESOURCES (-5) from clEnqueueUnmapMemObject");
  table->clEnqueueUnmapMemObject = saved.clEnqueueUnmapMemObject;
  memset(array, 9, hbytes);
  memset(back, 0, hbytes);
  CHECK_OK(ferry_read(b, 0, back, hbytes));
  CHECK(((unsigned char *)back)[hbytes - 1] == 9);
  CHECK_OK(ferry_host_to_device(ferry_array_of(array, hbytes, FERRY_UINT8), b));
  /* A map that fails when the host takes the array back. */
  table->clEnqueueMapBuffer = failing_map;
  fail_with = CL_MAP_FAILURE;
  CHECK_STATUS(ferry_device_to_host(b, ferry_array_of(array, hbytes, FERRY_UINT8)), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("CL_MAP_FAILURE (-12) from clEnqueueMapBuffer");
  table->clEnqueueMapBuffer = saved.clEnqueueMapBuffer;
  CHECK_OK(ferry_device_to_host(b, ferry_array_of(array, hbytes, FERRY_UINT8)));
  CHECK(((unsigned char *)array)[0] == 9);
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
  if (!(dev->caps & FERRY_CAP_STAGE) || !ops->dma_start || !ops->dma_wait) {
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
    if (i >= BLOCKS) CHECK_OK(ops->dma_wait(dev, ticket[k]));
    memcpy(block[k], src + done, n);
    CHECK_OK(ops->dma_start(dev, FERRY_DMA_TO_DEVICE, &s->mem, 100 + done, &pin[k], n, &ticket[k]));
  }
  for (unsigned k = 0; k < BLOCKS; k++)
    CHECK_OK(ops->dma_wait(dev, ticket[k]));
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
      CHECK_OK(ops->dma_wait(dev, ticket[k]));
      memcpy(back + pdone, block[k], block_bytes);
    }
    CHECK_OK(ops->dma_start(dev, FERRY_DMA_TO_HOST, &s->mem, 100 + done, &pin[k], n, &ticket[k]));
  }
  for (size_t i = chunks > BLOCKS ? chunks - BLOCKS : 0; i < chunks; i++) {
    unsigned k = (unsigned)(i % BLOCKS);
    size_t done = i * block_bytes, n = total - done < block_bytes ? total - done : block_bytes;
    CHECK_OK(ops->dma_wait(dev, ticket[k]));
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
  CHECK_OK(ops->dma_start(dev, FERRY_DMA_TO_DEVICE, &s->mem, 0, &other, 65536, &t));
  CHECK_OK(ops->dma_wait(dev, t));
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
  CHECK_STATUS(ops->dma_start(dev, FERRY_DMA_TO_DEVICE, &s->mem, 8, &pin[1], 16, &t), FERRY_ERROR_BACKEND);
  CHECK_ERROR_HAS("CL_INVALID_VALUE (-30) from clEnqueueWriteBuffer, 16 bytes at offset 8 from pinned host memory");
  *table = saved;
  ferry__release(s);
  CHECK_OK(ferry_free(b));
  for (int k = 0; k < BLOCKS; k++)
    CHECK_OK(ferry_host_free(block[k]));
  free(src);
  free(back);
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
    } parts[] = {{"device_info", 0}, {"host_ptr_states", 1}, {"failures", 2}, {"threads", 3}, {"pipeline", 4}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
      harness_context = context;
      int before = harness_failures;
      switch (parts[i].kind) {
      case 0: device_info(api, dev, &info); break;
      case 1: host_ptr_states(dev, &info); break;
      case 2: failures(api, dev, &info); break;
      case 3: threads(dev, &info); break;
      case 4: pipeline(api, dev); break;
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
