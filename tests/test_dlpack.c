/*
 * dlpack: ferry's DLPack export and import (include/ferry.h's DLPack section).
 *
 *  - ABI: a dlpack.h written here from the DLPack specification's numbers (as
 *    a consumer's program would include the real one, next to ferry.h) has the
 *    same sizes and offsets as ferry's declarations, and both compile together;
 *  - on every device present (native, checked, OpenCL, Vulkan, CUDA on the fake
 *    driver or a GPU): every kind exports with its dtype, shape, strides and
 *    device, and imports back as a second buffer over the same memory, in both
 *    forms; a write through either is seen through the other;
 *  - lifetime: ferry_free before the consumer's deleter keeps the memory until
 *    the deleter runs; several tensors of one buffer; the producer's deleter of
 *    an imported tensor runs exactly once, at ferry_free (or at ferry_shutdown for
 *    a buffer still live), never on a failed import; a deleter that runs after
 *    ferry_shutdown is harmless;
 *  - foreign memory: host memory (malloc) on native and checked, and as a
 *    host-pointer buffer on OpenCL; a cl_mem made in ferry's context; CUDA memory
 *    from cuMemAlloc outside ferry; byte_offset, 2-D and 0-D shapes, empty tensors;
 *  - refusals, each with its reason and sentence, and malformed tensors;
 *  - deleters on several threads racing the buffer's ferry_free.
 *
 * The CUDA part runs where a cuda device exists (the ctest dlpack.cuda_fake runs
 * it on the fake driver with two GPUs).
 */
#include "backends/cuda/cuda_api.h"
#include "backends/opencl/opencl_api.h"
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- dlpack.h, from the specification (DLPack 1.1), as a consumer includes it ---- */

typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;
typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17,
} DLDeviceType;
typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
} DLDataTypeCode;
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

#define SAME_LAYOUT(ours, theirs)                                                                                      \
  _Static_assert(sizeof(ours) == sizeof(theirs) && alignof(ours) == alignof(theirs), #ours " differs from " #theirs)
#define SAME_FIELD(ours, theirs, fo, ft)                                                                               \
  _Static_assert(offsetof(ours, fo) == offsetof(theirs, ft) && sizeof(((ours *)0)->fo) == sizeof(((theirs *)0)->ft),   \
                 #ours "." #fo " differs from " #theirs "." #ft)

SAME_LAYOUT(ferry_dl_version, DLPackVersion);
SAME_FIELD(ferry_dl_version, DLPackVersion, major, major);
SAME_FIELD(ferry_dl_version, DLPackVersion, minor, minor);
SAME_LAYOUT(ferry_dl_device, DLDevice);
SAME_FIELD(ferry_dl_device, DLDevice, device_type, device_type);
SAME_FIELD(ferry_dl_device, DLDevice, device_id, device_id);
SAME_LAYOUT(ferry_dl_data_type, DLDataType);
SAME_FIELD(ferry_dl_data_type, DLDataType, code, code);
SAME_FIELD(ferry_dl_data_type, DLDataType, bits, bits);
SAME_FIELD(ferry_dl_data_type, DLDataType, lanes, lanes);
SAME_LAYOUT(ferry_dl_tensor, DLTensor);
SAME_FIELD(ferry_dl_tensor, DLTensor, data, data);
SAME_FIELD(ferry_dl_tensor, DLTensor, device, device);
SAME_FIELD(ferry_dl_tensor, DLTensor, ndim, ndim);
SAME_FIELD(ferry_dl_tensor, DLTensor, dtype, dtype);
SAME_FIELD(ferry_dl_tensor, DLTensor, shape, shape);
SAME_FIELD(ferry_dl_tensor, DLTensor, strides, strides);
SAME_FIELD(ferry_dl_tensor, DLTensor, byte_offset, byte_offset);
SAME_LAYOUT(ferry_dl_managed_tensor, DLManagedTensor);
SAME_FIELD(ferry_dl_managed_tensor, DLManagedTensor, dl_tensor, dl_tensor);
SAME_FIELD(ferry_dl_managed_tensor, DLManagedTensor, manager_ctx, manager_ctx);
SAME_FIELD(ferry_dl_managed_tensor, DLManagedTensor, deleter, deleter);
SAME_LAYOUT(ferry_dl_managed_tensor_versioned, DLManagedTensorVersioned);
SAME_FIELD(ferry_dl_managed_tensor_versioned, DLManagedTensorVersioned, version, version);
SAME_FIELD(ferry_dl_managed_tensor_versioned, DLManagedTensorVersioned, manager_ctx, manager_ctx);
SAME_FIELD(ferry_dl_managed_tensor_versioned, DLManagedTensorVersioned, deleter, deleter);
SAME_FIELD(ferry_dl_managed_tensor_versioned, DLManagedTensorVersioned, flags, flags);
SAME_FIELD(ferry_dl_managed_tensor_versioned, DLManagedTensorVersioned, dl_tensor, dl_tensor);
_Static_assert((int)FERRY_DL_CPU == (int)kDLCPU && (int)FERRY_DL_CUDA == (int)kDLCUDA &&
                   (int)FERRY_DL_CUDA_HOST == (int)kDLCUDAHost && (int)FERRY_DL_OPENCL == (int)kDLOpenCL &&
                   (int)FERRY_DL_VULKAN == (int)kDLVulkan && (int)FERRY_DL_METAL == (int)kDLMetal &&
                   (int)FERRY_DL_VPI == (int)kDLVPI && (int)FERRY_DL_ROCM == (int)kDLROCM &&
                   (int)FERRY_DL_ROCM_HOST == (int)kDLROCMHost && (int)FERRY_DL_EXT_DEV == (int)kDLExtDev &&
                   (int)FERRY_DL_CUDA_MANAGED == (int)kDLCUDAManaged && (int)FERRY_DL_ONEAPI == (int)kDLOneAPI &&
                   (int)FERRY_DL_WEBGPU == (int)kDLWebGPU && (int)FERRY_DL_HEXAGON == (int)kDLHexagon &&
                   (int)FERRY_DL_MAIA == (int)kDLMAIA,
               "device types differ from DLPack's");
_Static_assert((int)FERRY_DL_INT == (int)kDLInt && (int)FERRY_DL_UINT == (int)kDLUInt &&
                   (int)FERRY_DL_FLOAT == (int)kDLFloat && (int)FERRY_DL_OPAQUE_HANDLE == (int)kDLOpaqueHandle &&
                   (int)FERRY_DL_BFLOAT == (int)kDLBfloat && (int)FERRY_DL_COMPLEX == (int)kDLComplex &&
                   (int)FERRY_DL_BOOL == (int)kDLBool,
               "dtype codes differ from DLPack's");
_Static_assert(FERRY_DL_FLAG_READ_ONLY == DLPACK_FLAG_BITMASK_READ_ONLY &&
                   FERRY_DL_FLAG_IS_COPIED == DLPACK_FLAG_BITMASK_IS_COPIED,
               "flags differ from DLPack's");

/* ---- helpers -------------------------------------------------------------------------- */

static size_t exports_at_start;

static ferry_stats stats_of(ferry_device *dev) {
  ferry_stats s = {0};
  ferry_device_stats(dev, &s);
  return s;
}

static const char *backend_of(const ferry_device *dev) {
  ferry_device_info info;
  ferry_device_info_get(dev, &info);
  return info.backend;
}

static ferry_device *device_of_backend(const char *backend) {
  for (size_t i = 0; i < ferry_device_count(); i++) {
    ferry_device *d;
    ferry_device_get(i, &d);
    if (strcmp(backend_of(d), backend) == 0) return d;
  }
  return NULL;
}

/* The DLPack device ferry must report for a device. */
static ferry_dl_device expected_dl_device(ferry_device *dev) {
  ferry_device_info info;
  ferry_device_info_get(dev, &info);
  if (strcmp(info.backend, "native") == 0 || strcmp(info.backend, "checked") == 0)
    return (ferry_dl_device){FERRY_DL_CPU, 0};
  if (strcmp(info.backend, "opencl") == 0) return (ferry_dl_device){FERRY_DL_OPENCL, (int32_t)info.backend_index};
  if (strcmp(info.backend, "vulkan") == 0) return (ferry_dl_device){FERRY_DL_VULKAN, (int32_t)info.backend_index};
  if (strcmp(info.backend, "metal") == 0) return (ferry_dl_device){FERRY_DL_METAL, (int32_t)info.backend_index};
  /* cuda: the ordinal; ferry numbers every GPU the driver lists, so with all
   * usable it is the backend index. */
  return (ferry_dl_device){FERRY_DL_CUDA, (int32_t)info.backend_index};
}

typedef struct kind_case {
  ferry_kind kind;
  ferry_dl_data_type dtype;
  ferry_kind imported; /* the kind the exported dtype imports as */
} kind_case;

static const kind_case kinds[] = {
    {FERRY_FLOAT16, {FERRY_DL_FLOAT, 16, 1}, FERRY_FLOAT16},
    {FERRY_BFLOAT16, {FERRY_DL_BFLOAT, 16, 1}, FERRY_BFLOAT16},
    {FERRY_FLOAT32, {FERRY_DL_FLOAT, 32, 1}, FERRY_FLOAT32},
    {FERRY_FLOAT64, {FERRY_DL_FLOAT, 64, 1}, FERRY_FLOAT64},
    {FERRY_INT8, {FERRY_DL_INT, 8, 1}, FERRY_INT8},
    {FERRY_UINT8, {FERRY_DL_UINT, 8, 1}, FERRY_UINT8},
    {FERRY_INT16, {FERRY_DL_INT, 16, 1}, FERRY_INT16},
    {FERRY_UINT16, {FERRY_DL_UINT, 16, 1}, FERRY_UINT16},
    {FERRY_INT32, {FERRY_DL_INT, 32, 1}, FERRY_INT32},
    {FERRY_UINT32, {FERRY_DL_UINT, 32, 1}, FERRY_UINT32},
    {FERRY_INT64, {FERRY_DL_INT, 64, 1}, FERRY_INT64},
    {FERRY_UINT64, {FERRY_DL_UINT, 64, 1}, FERRY_UINT64},
    {FERRY_NATIVEINT, {FERRY_DL_INT, (uint8_t)(8 * sizeof(intptr_t)), 1}, FERRY_INT64},
    {FERRY_COMPLEX32, {FERRY_DL_COMPLEX, 64, 1}, FERRY_COMPLEX32},
    {FERRY_COMPLEX64, {FERRY_DL_COMPLEX, 128, 1}, FERRY_COMPLEX64},
    {FERRY_CHAR, {FERRY_DL_UINT, 8, 1}, FERRY_UINT8},
    {FERRY_CUSTOM, {FERRY_DL_UINT, 8, 1}, FERRY_UINT8}, /* 12-byte records, as bytes */
};

#define CUSTOM_SIZE 12
#define LENGTH      37

static bool same_dtype(ferry_dl_data_type a, ferry_dl_data_type b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

static bool same_device(ferry_dl_device a, ferry_dl_device b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}

/* Checks an exported tensor's fields against its buffer. */
static void check_tensor(const ferry_dl_tensor *t, ferry_buffer b, const kind_case *k, ferry_dl_device want_device) {
  size_t bytes = ferry_size(b) * ferry_elem_size(b);
  int64_t extent = (int64_t)(k->kind == FERRY_CUSTOM ? bytes : ferry_size(b));
  CHECK(t->data == (void *)ferry_device_ptr(b));
  CHECK(same_device(t->device, want_device));
  CHECK(t->ndim == 1);
  CHECK(same_dtype(t->dtype, k->dtype));
  CHECK(t->shape && t->shape[0] == extent);
  CHECK(t->strides && t->strides[0] == 1);
  CHECK(t->byte_offset == 0);
}

/* Reads a buffer's bytes and compares them with fill_pattern(seed). */
static void check_content(ferry_buffer b, size_t bytes, uint32_t seed) {
  unsigned char *back = malloc(bytes ? bytes : 1);
  CHECK_OK(ferry_read(b, 0, back, bytes));
  CHECK_MSG(find_pattern_mismatch(back, bytes, seed) == SIZE_MAX, "content differs at byte %zu",
            find_pattern_mismatch(back, bytes, seed));
  free(back);
}

static void write_pattern(ferry_buffer b, size_t bytes, uint32_t seed) {
  unsigned char *h = malloc(bytes ? bytes : 1);
  fill_pattern(h, bytes, seed);
  CHECK_OK(ferry_write(b, 0, h, bytes));
  free(h);
}

/* ---- every kind, on one device ---------------------------------------------------------------- */

static void round_trip(ferry_device *dev, const kind_case *k, bool versioned) {
  ferry_stats before = stats_of(dev);
  ferry_buffer b;
  if (k->kind == FERRY_CUSTOM)
    CHECK_OK(ferry_alloc_custom(dev, LENGTH, CUSTOM_SIZE, &b));
  else
    CHECK_OK(ferry_alloc(dev, LENGTH, k->kind, &b));
  size_t bytes = ferry_size(b) * ferry_elem_size(b);
  write_pattern(b, bytes, 11);

  ferry_dl_managed_tensor *legacy = NULL;
  ferry_dl_managed_tensor_versioned *ver = NULL;
  ferry_buffer back = FERRY_NULL_BUFFER;
  ferry_refusal why = FERRY_REFUSAL_DRIVER;
  if (versioned) {
    CHECK_OK(ferry_dlpack_export_versioned(b, &ver));
    if (!ver) return;
    CHECK(ver->version.major == 1 && ver->version.minor == FERRY_DL_VERSION_MINOR);
    CHECK(ver->flags == 0);
    CHECK(ver->deleter != NULL);
    check_tensor(&ver->dl_tensor, b, k, expected_dl_device(dev));
    CHECK_OK(ferry_dlpack_import_versioned(ver, NULL, &back, &why));
  } else {
    CHECK_OK(ferry_dlpack_export(b, &legacy));
    if (!legacy) return;
    CHECK(legacy->deleter != NULL);
    check_tensor(&legacy->dl_tensor, b, k, expected_dl_device(dev));
    CHECK_OK(ferry_dlpack_import(legacy, NULL, &back, &why));
  }
  CHECK(why == FERRY_REFUSAL_NONE);
  /* A second buffer over the same memory, on the same device. */
  CHECK(ferry_buffer_device(back) == dev);
  CHECK(ferry_buffer_kind(back) == k->imported);
  CHECK(ferry_size(back) * ferry_elem_size(back) == bytes);
  CHECK(ferry_device_ptr(back) == ferry_device_ptr(b));
  check_content(back, bytes, 11);
  write_pattern(back, bytes, 12);
  check_content(b, bytes, 12);
  /* The original goes first: the imported buffer still has the memory. */
  CHECK_OK(ferry_free(b));
  CHECK_STATUS(ferry_free(b), FERRY_ERROR_STALE_BUFFER);
  check_content(back, bytes, 12);
  CHECK(ferry_dlpack_live_exports() == exports_at_start + 1);
  CHECK_OK(ferry_free(back));
  CHECK(ferry_dlpack_live_exports() == exports_at_start);
  ferry_stats after = stats_of(dev);
  CHECK(after.live_buffers == before.live_buffers);
  CHECK(after.bytes_in_use == before.bytes_in_use);
}

/* ferry_free before the consumer's deleter, and several tensors of one buffer. */
static void lifetime(ferry_device *dev) {
  ferry_stats before = stats_of(dev);
  ferry_buffer b;
  CHECK_OK(ferry_alloc(dev, 1000, FERRY_INT32, &b));
  write_pattern(b, 4000, 21);
  ferry_dl_managed_tensor *t1 = NULL;
  ferry_dl_managed_tensor_versioned *t2 = NULL;
  CHECK_OK(ferry_dlpack_export(b, &t1));
  CHECK_OK(ferry_dlpack_export_versioned(b, &t2));
  if (!t1 || !t2) return;
  CHECK(t1->dl_tensor.data == t2->dl_tensor.data);
  CHECK(ferry_dlpack_live_exports() == exports_at_start + 2);
  CHECK_OK(ferry_free(b));
  /* The handle is stale at once... */
  CHECK_STATUS(ferry_read(b, 0, NULL, 0), FERRY_ERROR_STALE_BUFFER);
  CHECK(ferry_size(b) == 0);
  /* ...the memory stays under the tensors. */
  CHECK(stats_of(dev).live_buffers == before.live_buffers + 1);
  ferry_device_info info;
  ferry_device_info_get(dev, &info);
  if (info.zero_copy) { /* host memory: the consumer reads it directly */
    CHECK(find_pattern_mismatch(t1->dl_tensor.data, 4000, 21) == SIZE_MAX);
  } else { /* a consumer on the device: ferry itself, through a third tensor's import */
    ferry_buffer view;
    CHECK_OK(ferry_dlpack_import_versioned(t2, NULL, &view, NULL));
    check_content(view, 4000, 21);
    t2 = NULL; /* the view owns it now */
    CHECK_OK(ferry_free(view));
  }
  t1->deleter(t1);
  if (t2) {
    CHECK(stats_of(dev).live_buffers == before.live_buffers + 1); /* t2 still holds it */
    t2->deleter(t2);
  }
  CHECK(stats_of(dev).live_buffers == before.live_buffers);
  CHECK(stats_of(dev).bytes_in_use == before.bytes_in_use);
  CHECK(ferry_dlpack_live_exports() == exports_at_start);
}

/* A zero-copy buffer (over the user's array) exports the array's address. */
static void zero_copy_export(ferry_device *dev) {
  float host[64];
  fill_pattern(host, sizeof host, 31);
  ferry_buffer b;
  CHECK_OK(ferry_alloc_zero_copy(dev, ferry_array_of(host, 64, FERRY_FLOAT32), &b));
  ferry_dl_managed_tensor *t = NULL;
  CHECK_OK(ferry_dlpack_export(b, &t));
  if (!t) return;
  CHECK(t->dl_tensor.data == (void *)host);
  ferry_buffer back;
  CHECK_OK(ferry_dlpack_import(t, NULL, &back, NULL));
  CHECK(ferry_is_zero_copy(back));
  CHECK(ferry_device_ptr(back) == (uintptr_t)host);
  CHECK_OK(ferry_free(back));
  CHECK_OK(ferry_free(b));
}

static void each_device(void) {
  for (size_t i = 0; i < ferry_device_count(); i++) {
    ferry_device *dev;
    ferry_device_get(i, &dev);
    ferry_device_info info;
    ferry_device_info_get(dev, &info);
    char context[256];
    snprintf(context, sizeof context, "%s (%s)", info.backend, info.name);
    harness_context = context;
    ferry_dl_device d;
    CHECK_OK(ferry_dlpack_device(dev, &d));
    CHECK(same_device(d, expected_dl_device(dev)));
    ferry_device *found = NULL;
    CHECK_OK(ferry_dlpack_find_device(d, &found));
    /* Host memory names one device: native (checked shares its DLPack name). */
    if (strcmp(info.backend, "checked") != 0 || !device_of_backend("native")) CHECK(found == dev);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
      round_trip(dev, &kinds[k], false);
      round_trip(dev, &kinds[k], true);
    }
    lifetime(dev);
    if (info.zero_copy) zero_copy_export(dev);
    printf("dlpack: %s: every kind exports and imports back, both forms\n", context);
  }
  harness_context = "";
}

/* ---- tensors made here, with a counting deleter -------------------------------------------------- */

typedef struct made {
  ferry_dl_managed_tensor legacy;
  ferry_dl_managed_tensor_versioned versioned;
  int64_t shape[4], strides[4];
  int deleted; /* how often the deleter ran */
  void (*release)(struct made *m);
  void *memory;
} made;

static void made_legacy_deleter(ferry_dl_managed_tensor *self) {
  made *m = self->manager_ctx;
  m->deleted++;
  if (m->release) m->release(m);
}

static void made_versioned_deleter(ferry_dl_managed_tensor_versioned *self) {
  made *m = self->manager_ctx;
  m->deleted++;
  if (m->release) m->release(m);
}

/* A 1-D tensor of `n` elements of `dtype` at data, on `device`. */
static void make(made *m, void *data, ferry_dl_device device, ferry_dl_data_type dtype, int64_t n) {
  memset(m, 0, sizeof *m);
  m->shape[0] = n;
  ferry_dl_tensor t = {.data = data, .device = device, .ndim = 1, .dtype = dtype, .shape = m->shape};
  m->legacy = (ferry_dl_managed_tensor){.dl_tensor = t, .manager_ctx = m, .deleter = made_legacy_deleter};
  m->versioned = (ferry_dl_managed_tensor_versioned){
      .version = {1, 1}, .manager_ctx = m, .deleter = made_versioned_deleter, .dl_tensor = t};
}

static const ferry_dl_device cpu = {FERRY_DL_CPU, 0};
static const ferry_dl_data_type f32 = {FERRY_DL_FLOAT, 32, 1};
static const ferry_dl_data_type u8 = {FERRY_DL_UINT, 8, 1};

/* The import must be refused with `reason`, the sentence holding `needle`, and
 * the tensor left with the caller (its deleter not run). */
static void expect_refused(made *m, ferry_device *dev, ferry_refusal reason, const char *needle) {
  ferry_buffer b = FERRY_NULL_BUFFER;
  ferry_refusal why = FERRY_REFUSAL_NONE;
  CHECK_STATUS(ferry_dlpack_import(&m->legacy, dev, &b, &why), FERRY_ERROR_REFUSED);
  CHECK_MSG(why == reason, "refusal %s, expected %s", ferry_refusal_name(why), ferry_refusal_name(reason));
  CHECK_ERROR_HAS(needle);
  CHECK(b.id == 0);
  CHECK(m->deleted == 0);
}

static void expect_status(made *m, ferry_status status, const char *needle) {
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_STATUS(ferry_dlpack_import(&m->legacy, NULL, &b, NULL), status);
  CHECK_ERROR_HAS(needle);
  CHECK(b.id == 0);
  CHECK(m->deleted == 0);
}

static void host_imports(void) {
  ferry_device *native = device_of_backend("native"), *checked = device_of_backend("checked");
  ferry_device *host_dev = native ? native : checked;
  if (!host_dev) {
    printf("dlpack: no host device, host imports skipped\n");
    return;
  }
  harness_context = "host memory";
  alignas(64) float data[256];
  fill_pattern(data, sizeof data, 41);
  made m;

  /* Onto the host device by default: a zero-copy buffer over the memory. */
  make(&m, data, cpu, f32, 256);
  ferry_buffer b;
  ferry_refusal why = FERRY_REFUSAL_DRIVER;
  CHECK_OK(ferry_dlpack_import(&m.legacy, NULL, &b, &why));
  CHECK(why == FERRY_REFUSAL_NONE);
  CHECK(ferry_buffer_device(b) == host_dev);
  CHECK(ferry_is_zero_copy(b));
  CHECK(ferry_device_ptr(b) == (uintptr_t)data);
  CHECK(ferry_buffer_kind(b) == FERRY_FLOAT32 && ferry_size(b) == 256);
  check_content(b, sizeof data, 41);
  float one = 1.5f;
  CHECK_OK(ferry_write(b, 4 * sizeof(float), &one, sizeof one));
  CHECK(data[4] == 1.5f); /* the tensor's own memory */
  CHECK(m.deleted == 0);
  CHECK_OK(ferry_free(b));
  CHECK(m.deleted == 1); /* exactly once */
  CHECK_STATUS(ferry_free(b), FERRY_ERROR_STALE_BUFFER);
  CHECK(m.deleted == 1);

  /* Versioned, with byte_offset, IS_COPIED (fine), onto checked explicitly. */
  if (checked) {
    fill_pattern(data, sizeof data, 42);
    make(&m, data, cpu, f32, 100);
    m.versioned.dl_tensor.byte_offset = 16;
    m.versioned.flags = FERRY_DL_FLAG_IS_COPIED;
    CHECK_OK(ferry_dlpack_import_versioned(&m.versioned, checked, &b, &why));
    CHECK(ferry_buffer_device(b) == checked);
    CHECK(ferry_device_ptr(b) == (uintptr_t)data + 16);
    float back[100];
    CHECK_OK(ferry_device_to_host(b, ferry_array_of(back, 100, FERRY_FLOAT32)));
    CHECK(memcmp(back, data + 4, sizeof back) == 0);
    CHECK_OK(ferry_device_synchronize(checked)); /* no guard bytes around memory ferry did not allocate */
    CHECK_OK(ferry_free(b));
    CHECK(m.deleted == 1);
  }

  /* 2-D, compact: with strides NULL, given explicitly, and extents of 1 with any stride. */
  make(&m, data, cpu, f32, 0);
  m.legacy.dl_tensor.ndim = 3;
  m.shape[0] = 4, m.shape[1] = 1, m.shape[2] = 8;
  CHECK_OK(ferry_dlpack_import(&m.legacy, NULL, &b, NULL));
  CHECK(ferry_size(b) == 32);
  CHECK_OK(ferry_free(b));
  m.legacy.dl_tensor.strides = m.strides;
  m.strides[0] = 8, m.strides[1] = 999, m.strides[2] = 1;
  CHECK_OK(ferry_dlpack_import(&m.legacy, NULL, &b, NULL));
  CHECK(ferry_size(b) == 32);
  CHECK_OK(ferry_free(b));
  CHECK(m.deleted == 2);
  /* Transposed: refused, not copied. */
  m.deleted = 0;
  m.strides[0] = 1, m.strides[2] = 4;
  expect_refused(&m, NULL, FERRY_REFUSAL_STRIDED, "not contiguous");
  CHECK_ERROR_HAS("dimension 2 (extent 8) has stride 4");
  /* Every other element: refused too. */
  make(&m, data, cpu, f32, 10);
  m.legacy.dl_tensor.strides = m.strides;
  m.strides[0] = 2;
  expect_refused(&m, NULL, FERRY_REFUSAL_STRIDED, "stride 2");

  /* 0-D: one element. Empty: length 0, data NULL. */
  make(&m, data, cpu, f32, 0);
  m.legacy.dl_tensor.ndim = 0;
  m.legacy.dl_tensor.shape = NULL;
  CHECK_OK(ferry_dlpack_import(&m.legacy, NULL, &b, NULL));
  CHECK(ferry_size(b) == 1);
  CHECK_OK(ferry_free(b));
  make(&m, NULL, cpu, f32, 0);
  CHECK_OK(ferry_dlpack_import(&m.legacy, NULL, &b, NULL));
  CHECK(ferry_size(b) == 0);
  CHECK_OK(ferry_free(b));
  CHECK(m.deleted == 1);

  /* bool: a uint8 buffer. */
  make(&m, data, cpu, (ferry_dl_data_type){FERRY_DL_BOOL, 8, 1}, 16);
  CHECK_OK(ferry_dlpack_import(&m.legacy, NULL, &b, NULL));
  CHECK(ferry_buffer_kind(b) == FERRY_UINT8 && ferry_size(b) == 16);
  CHECK_OK(ferry_free(b));

  /* Refusals, each leaving the tensor with the caller. */
  harness_context = "refusals";
  make(&m, data, cpu, (ferry_dl_data_type){FERRY_DL_FLOAT, 32, 4}, 8);
  expect_refused(&m, NULL, FERRY_REFUSAL_DTYPE, "lanes 1");
  make(&m, data, cpu, (ferry_dl_data_type){FERRY_DL_OPAQUE_HANDLE, 64, 1}, 8);
  expect_refused(&m, NULL, FERRY_REFUSAL_DTYPE, "no ferry kind");
  make(&m, data, cpu, (ferry_dl_data_type){FERRY_DL_FLOAT, 8, 1}, 8);
  expect_refused(&m, NULL, FERRY_REFUSAL_DTYPE, "float8");
  make(&m, data, cpu, (ferry_dl_data_type){FERRY_DL_INT, 12, 1}, 8);
  expect_refused(&m, NULL, FERRY_REFUSAL_DTYPE, "int12");
  make(&m, data, cpu, (ferry_dl_data_type){9, 8, 1}, 8);
  expect_refused(&m, NULL, FERRY_REFUSAL_DTYPE, "code 9");
  make(&m, (char *)data + 2, cpu, f32, 8);
  expect_refused(&m, NULL, FERRY_REFUSAL_MISALIGNED, "not aligned to its 4-byte elements");
  make(&m, data, cpu, f32, 8);
  m.legacy.dl_tensor.byte_offset = 1;
  expect_refused(&m, NULL, FERRY_REFUSAL_MISALIGNED, "byte_offset 1");
  make(&m, data, (ferry_dl_device){FERRY_DL_ROCM, 0}, f32, 8);
  expect_refused(&m, NULL, FERRY_REFUSAL_DEVICE, "no backend for DLPack device type 10");
  make(&m, data, (ferry_dl_device){FERRY_DL_CPU, 3}, f32, 8);
  expect_refused(&m, NULL, FERRY_REFUSAL_DEVICE, "no ferry device is DLPack device (CPU, 3)");
  make(&m, data, (ferry_dl_device){FERRY_DL_VULKAN, 0}, f32, 8);
  expect_refused(&m, NULL, FERRY_REFUSAL_DEVICE, "bare VkBuffer");
  make(&m, data, (ferry_dl_device){FERRY_DL_METAL, 0}, f32, 8);
  expect_refused(&m, NULL, FERRY_REFUSAL_DEVICE, "id<MTLBuffer>");
  if (!device_of_backend("cuda")) {
    make(&m, data, (ferry_dl_device){FERRY_DL_CUDA, 0}, f32, 8);
    expect_refused(&m, NULL, FERRY_REFUSAL_DEVICE, "no ferry device is DLPack device (CUDA, 0)");
  }
  /* Host memory onto a device whose DLPack name is another's: a CUDA tensor on native. */
  make(&m, data, (ferry_dl_device){FERRY_DL_CUDA, 0}, f32, 8);
  expect_refused(&m, host_dev, FERRY_REFUSAL_DEVICE, "cannot be used on");
  /* Versioned: read-only, another major version. */
  make(&m, data, cpu, f32, 8);
  m.versioned.flags = FERRY_DL_FLAG_READ_ONLY;
  CHECK_STATUS(ferry_dlpack_import_versioned(&m.versioned, NULL, &b, &why), FERRY_ERROR_REFUSED);
  CHECK(why == FERRY_REFUSAL_READ_ONLY);
  CHECK_ERROR_HAS("read-only");
  m.versioned.flags = 0;
  m.versioned.version.major = 2;
  CHECK_STATUS(ferry_dlpack_import_versioned(&m.versioned, NULL, &b, &why), FERRY_ERROR_REFUSED);
  CHECK(why == FERRY_REFUSAL_VERSION);
  CHECK_ERROR_HAS("DLPack 2.1");
  CHECK(m.deleted == 0);

  /* Malformed tensors. */
  harness_context = "malformed";
  CHECK_STATUS(ferry_dlpack_import(NULL, NULL, &b, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  make(&m, data, cpu, f32, 8);
  CHECK_STATUS(ferry_dlpack_import(&m.legacy, NULL, NULL, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_dlpack_import(&m.legacy, (ferry_device *)&m, &b, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  m.legacy.dl_tensor.ndim = -1;
  expect_status(&m, FERRY_ERROR_INVALID_ARGUMENT, "ndim -1");
  make(&m, data, cpu, f32, -5);
  expect_status(&m, FERRY_ERROR_INVALID_ARGUMENT, "extent 0 is -5");
  make(&m, data, cpu, f32, 8);
  m.legacy.dl_tensor.shape = NULL;
  expect_status(&m, FERRY_ERROR_INVALID_ARGUMENT, "no shape");
  make(&m, NULL, cpu, f32, 8);
  expect_status(&m, FERRY_ERROR_INVALID_ARGUMENT, "data NULL");
  make(&m, data, cpu, f32, 0);
  m.legacy.dl_tensor.ndim = 3;
  m.shape[0] = m.shape[1] = m.shape[2] = INT64_C(1) << 30;
  expect_status(&m, FERRY_ERROR_OVERFLOW, "overflow");
  make(&m, (void *)(UINTPTR_MAX - 3), cpu, u8, 8);
  m.legacy.dl_tensor.byte_offset = 16;
  expect_status(&m, FERRY_ERROR_INVALID_ARGUMENT, "wraps around");
  /* A start that fits, an end that does not: 64 bytes from UINTPTR_MAX - 63 end
   * one past UINTPTR_MAX, which wraps to 0. */
  make(&m, (void *)(UINTPTR_MAX - 63), cpu, f32, 16);
  expect_status(&m, FERRY_ERROR_INVALID_ARGUMENT, "past the end of the address space");
  make(&m, (void *)(UINTPTR_MAX - 127), cpu, f32, 16);
  m.legacy.dl_tensor.byte_offset = 64;
  expect_status(&m, FERRY_ERROR_INVALID_ARGUMENT, "past the end of the address space");
  /* An empty tensor with huge extents elsewhere is still empty. */
  make(&m, NULL, cpu, f32, 0);
  m.legacy.dl_tensor.ndim = 2;
  m.shape[0] = 0, m.shape[1] = INT64_MAX;
  CHECK_OK(ferry_dlpack_import(&m.legacy, NULL, &b, NULL));
  CHECK(ferry_size(b) == 0);
  CHECK_OK(ferry_free(b));

  /* Export argument checks. */
  ferry_dl_managed_tensor *t = NULL;
  CHECK_STATUS(ferry_dlpack_export(FERRY_NULL_BUFFER, &t), FERRY_ERROR_STALE_BUFFER);
  CHECK_OK(ferry_alloc(host_dev, 4, FERRY_UINT8, &b));
  CHECK_STATUS(ferry_dlpack_export(b, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ferry_dlpack_export_versioned(b, NULL), FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_OK(ferry_free(b));
  CHECK_STATUS(ferry_dlpack_export(b, &t), FERRY_ERROR_STALE_BUFFER);
  CHECK(t == NULL);
  CHECK_STATUS(ferry_dlpack_device(NULL, &(ferry_dl_device){0, 0}), FERRY_ERROR_INVALID_ARGUMENT);
  ferry_device *none = NULL;
  CHECK_STATUS(ferry_dlpack_find_device((ferry_dl_device){FERRY_DL_ROCM, 0}, &none), FERRY_ERROR_NO_DEVICE);
  CHECK(none == NULL);
  CHECK(ferry_dlpack_live_exports() == exports_at_start);
  harness_context = "";
}

/* ---- host memory under an OpenCL host-pointer buffer; a cl_mem of ferry's context ---------------- */

static void release_cl_mem(made *m) {
  const ferry_cl_api *cl = ferry__opencl_api();
  if (cl && m->memory) cl->clReleaseMemObject(m->memory);
}

static void opencl_imports(void) {
  ferry_device *dev = device_of_backend("opencl");
  const ferry_cl_api *cl = ferry__opencl_api();
  if (!dev || !cl) {
    printf("dlpack: no opencl device, OpenCL imports skipped\n");
    return;
  }
  ferry_device_info info;
  ferry_device_info_get(dev, &info);
  harness_context = "opencl";
  made m;
  ferry_buffer b;
  ferry_refusal why;

  /* Host memory on the OpenCL device: a host-pointer buffer over it. */
  size_t align = info.host_ptr_alignment > 64 ? info.host_ptr_alignment : 64;
  uint8_t *host = harness_aligned(align, 4096);
  fill_pattern(host, 4096, 51);
  make(&m, host, cpu, u8, 4096);
  if (info.host_ptr) {
    CHECK_OK(ferry_dlpack_import(&m.legacy, dev, &b, &why));
    CHECK(ferry_buffer_device(b) == dev);
    check_content(b, 4096, 51);
    uint8_t x = 0x5A;
    CHECK_OK(ferry_write(b, 100, &x, 1));
    CHECK_OK(ferry_device_to_host(b, ferry_array_of(host, 4096, FERRY_UINT8))); /* hands the array back */
    CHECK(host[100] == 0x5A);
    CHECK_OK(ferry_free(b));
    CHECK(m.deleted == 1);
    /* ferry_alloc_host_ptr's refusals carry over: the range overlaps a live host-pointer buffer. */
    ferry_buffer first;
    CHECK_OK(ferry_alloc_host_ptr(dev, ferry_array_of(host, 4096, FERRY_UINT8), &first, NULL));
    make(&m, host, cpu, u8, 4096);
    expect_refused(&m, dev, FERRY_REFUSAL_OVERLAP, "overlaps");
    CHECK_OK(ferry_free(first));
  }
  free(host);

  /* A cl_mem made in ferry's context by the program (as another library would). */
  ferry_native native;
  CHECK_OK(ferry_device_native(dev, &native));
  cl_int err = 0;
  cl_mem mem = cl->clCreateBuffer((cl_context)native.context, CL_MEM_READ_WRITE, 4096, NULL, &err);
  CHECK(err == CL_SUCCESS && mem);
  uint8_t pattern[4096], back[4096];
  fill_pattern(pattern, sizeof pattern, 52);
  CHECK(cl->clEnqueueWriteBuffer((cl_command_queue)native.queue, mem, CL_TRUE, 0, sizeof pattern, pattern, 0, NULL,
                                 NULL) == CL_SUCCESS);
  make(&m, mem, (ferry_dl_device){FERRY_DL_OPENCL, (int32_t)info.backend_index}, u8, 4096);
  m.memory = mem;
  m.release = release_cl_mem;
  m.legacy.dl_tensor.byte_offset = 64;
  expect_refused(&m, NULL, FERRY_REFUSAL_UNSUPPORTED, "byte_offset 64 into a cl_mem");
  m.legacy.dl_tensor.byte_offset = 0;
  m.shape[0] = 8192;
  expect_refused(&m, NULL, FERRY_REFUSAL_DEVICE, "only 4096");
  m.shape[0] = 4096;
  CHECK_OK(ferry_dlpack_import(&m.legacy, NULL, &b, &why));
  CHECK(ferry_buffer_device(b) == dev);
  CHECK(ferry_device_ptr(b) == (uintptr_t)mem);
  check_content(b, 4096, 52);
  fill_pattern(pattern, sizeof pattern, 53);
  CHECK_OK(ferry_write(b, 0, pattern, sizeof pattern));
  CHECK(cl->clEnqueueReadBuffer((cl_command_queue)native.queue, mem, CL_TRUE, 0, sizeof back, back, 0, NULL, NULL) ==
        CL_SUCCESS);
  CHECK(memcmp(back, pattern, sizeof back) == 0);
  CHECK_OK(ferry_free(b));
  CHECK(m.deleted == 1); /* and its deleter released the cl_mem */

  /* A cl_mem of another context: refused. */
  cl_device_id id = (cl_device_id)native.device;
  cl_context other = cl->clCreateContext(NULL, 1, &id, NULL, NULL, &err);
  if (other) {
    cl_mem foreign = cl->clCreateBuffer(other, CL_MEM_READ_WRITE, 256, NULL, &err);
    make(&m, foreign, (ferry_dl_device){FERRY_DL_OPENCL, (int32_t)info.backend_index}, u8, 256);
    expect_refused(&m, NULL, FERRY_REFUSAL_DEVICE, "another OpenCL context");
    cl->clReleaseMemObject(foreign);
    cl->clReleaseContext(other);
  }
  /* Handles that are no OpenCL object at all, which the driver would crash on:
   * refused before the driver is asked. */
  static uint64_t not_a_cl_mem[64];
  for (size_t i = 0; i < 64; i++)
    not_a_cl_mem[i] = 0x0123456789abcdefu + i;
  ferry_dl_device on_cl = {FERRY_DL_OPENCL, (int32_t)info.backend_index};
  make(&m, not_a_cl_mem, on_cl, u8, 256);
  expect_refused(&m, NULL, FERRY_REFUSAL_DEVICE, "not a cl_mem");
  make(&m, (void *)0x1000, on_cl, f32, 16);
  expect_refused(&m, NULL, FERRY_REFUSAL_DEVICE, "not a cl_mem");
  make(&m, (void *)(UINTPTR_MAX - 3), on_cl, u8, 16);
  expect_refused(&m, NULL, FERRY_REFUSAL_DEVICE, "not a cl_mem");
  /* An OpenCL object of the driver that is not a memory object: the driver says no. */
  make(&m, (void *)native.queue, on_cl, u8, 16);
  expect_refused(&m, NULL, FERRY_REFUSAL_DEVICE, "cl_mem");
  printf("dlpack: opencl: host memory and a cl_mem of ferry's context import; others are refused\n");
  harness_context = "";
}

/* ---- CUDA memory from cuMemAlloc, outside ferry ----------------------------------------------------- */

typedef struct cuda_memory {
  cu_context ctx;
  cu_deviceptr ptr;
} cuda_memory;

static void release_cuda(made *m) {
  const ferry_cuda_api *api = ferry__cuda_api();
  cuda_memory *cm = m->memory;
  if (api && cm->ptr && api->cuCtxPushCurrent(cm->ctx) == FCU_SUCCESS) {
    CHECK(api->cuMemFree(cm->ptr) == FCU_SUCCESS);
    cu_context popped;
    api->cuCtxPopCurrent(&popped);
  }
  cm->ptr = 0;
}

static cu_deviceptr cuda_alloc_raw(ferry_device *dev, size_t bytes, cu_context *out_ctx) {
  const ferry_cuda_api *api = ferry__cuda_api();
  ferry_native native;
  ferry_device_native(dev, &native);
  *out_ctx = (cu_context)native.context;
  cu_deviceptr p = 0;
  if (api->cuCtxPushCurrent(*out_ctx) != FCU_SUCCESS) return 0;
  if (api->cuMemAlloc(&p, bytes) != FCU_SUCCESS) p = 0;
  cu_context popped;
  api->cuCtxPopCurrent(&popped);
  return p;
}

static void cuda_imports(void) {
  ferry_device *dev = device_of_backend("cuda");
  const ferry_cuda_api *api = ferry__cuda_api();
  if (!dev || !api) {
    printf("dlpack: no cuda device, CUDA imports skipped\n");
    return;
  }
  harness_context = "cuda";
  ferry_dl_device dl;
  CHECK_OK(ferry_dlpack_device(dev, &dl));
  cuda_memory cm = {0};
  cm.ptr = cuda_alloc_raw(dev, 1 << 20, &cm.ctx);
  CHECK(cm.ptr != 0);
  made m;
  make(&m, (void *)(uintptr_t)cm.ptr, dl, f32, 1024);
  m.memory = &cm;
  m.release = release_cuda;
  m.legacy.dl_tensor.byte_offset = 4096;
  ferry_buffer b;
  ferry_refusal why;
  CHECK_OK(ferry_dlpack_import(&m.legacy, NULL, &b, &why));
  CHECK(ferry_buffer_device(b) == dev);
  CHECK(ferry_device_ptr(b) == cm.ptr + 4096);
  write_pattern(b, 4096, 61);
  check_content(b, 4096, 61);
  /* The bytes are where the tensor says: read them with the driver. */
  uint8_t raw[4096];
  CHECK(api->cuCtxPushCurrent(cm.ctx) == FCU_SUCCESS);
  CHECK(api->cuMemcpyDtoH(raw, cm.ptr + 4096, sizeof raw) == FCU_SUCCESS);
  cu_context popped;
  api->cuCtxPopCurrent(&popped);
  CHECK(find_pattern_mismatch(raw, sizeof raw, 61) == SIZE_MAX);
  /* ferry's own copies work on it like on any buffer. */
  ferry_buffer mine;
  CHECK_OK(ferry_alloc(dev, 1024, FERRY_FLOAT32, &mine));
  CHECK_OK(ferry_device_to_device(b, mine));
  check_content(mine, 4096, 61);
  CHECK_OK(ferry_free(mine));
  CHECK_OK(ferry_free(b));
  CHECK(m.deleted == 1);
  CHECK(cm.ptr == 0); /* the deleter freed it */

  /* Refusals: past the end of the allocation, memory the driver does not know,
   * another GPU's memory. */
  cm.ptr = cuda_alloc_raw(dev, 4096, &cm.ctx);
  make(&m, (void *)(uintptr_t)cm.ptr, dl, f32, 2048);
  m.memory = &cm;
  m.release = release_cuda;
  expect_refused(&m, NULL, FERRY_REFUSAL_DEVICE, "run past the end of the allocation");
  static float host_data[64];
  make(&m, host_data, dl, f32, 64);
  expect_refused(&m, NULL, FERRY_REFUSAL_DEVICE, "does not know");
  ferry_device *second = NULL;
  for (size_t i = 0; i < ferry_device_count(); i++) {
    ferry_device *d;
    ferry_device_get(i, &d);
    if (d != dev && strcmp(backend_of(d), "cuda") == 0) second = d;
  }
  if (second) {
    ferry_dl_device dl2;
    CHECK_OK(ferry_dlpack_device(second, &dl2));
    make(&m, (void *)(uintptr_t)cm.ptr, dl2, f32, 1024);
    expect_refused(&m, NULL, FERRY_REFUSAL_DEVICE, "is memory of CUDA device");
    make(&m, (void *)(uintptr_t)cm.ptr, dl, f32, 1024);
    expect_refused(&m, second, FERRY_REFUSAL_DEVICE, "cannot be used on");
  }
  m.memory = &cm;
  release_cuda(&m);

  /* Host memory on the CUDA device: a host-pointer buffer (page-aligned memory). */
  ferry_device_info info;
  ferry_device_info_get(dev, &info);
  if (info.host_ptr) {
    uint8_t *host = harness_aligned(info.host_ptr_alignment, info.host_ptr_alignment);
    fill_pattern(host, info.host_ptr_alignment, 62);
    make(&m, host, cpu, u8, (int64_t)info.host_ptr_alignment);
    CHECK_OK(ferry_dlpack_import(&m.legacy, dev, &b, &why));
    check_content(b, info.host_ptr_alignment, 62);
    CHECK_OK(ferry_free(b));
    CHECK(m.deleted == 1);
    make(&m, host + 8, cpu, u8, 64);
    expect_refused(&m, dev, FERRY_REFUSAL_MISALIGNED, "not aligned");
    free(host);
  }
  printf("dlpack: cuda: cuMemAlloc memory imports; foreign pointers are refused\n");
  harness_context = "";
}

/* ---- threads: deleters racing ferry_free and each other ------------------------------------------- */

#define RACE_THREADS 4
#define RACE_TENSORS 64

typedef struct race {
  ferry_dl_managed_tensor_versioned *tensors[RACE_TENSORS];
  int first;
} race;

static void *release_some(void *arg) {
  race *r = arg;
  for (int i = r->first; i < RACE_TENSORS; i += RACE_THREADS)
    r->tensors[i]->deleter(r->tensors[i]);
  return NULL;
}

/* Tensors of one buffer released on several threads while the main thread frees
 * the buffer: the memory goes exactly once, when the last reference does. */
static void racing_deleters(void) {
  ferry_device *dev = device_of_backend("native");
  if (!dev) dev = device_of_backend("checked");
  if (!dev) return;
  harness_context = "racing deleters";
  ferry_stats before = stats_of(dev);
  for (int round = 0; round < 20; round++) {
    ferry_buffer b;
    CHECK_OK(ferry_alloc(dev, 4096, FERRY_UINT8, &b));
    ferry_dl_managed_tensor_versioned *tensors[RACE_TENSORS];
    for (int i = 0; i < RACE_TENSORS; i++)
      CHECK_OK(ferry_dlpack_export_versioned(b, &tensors[i]));
    race r[RACE_THREADS];
    pthread_t threads[RACE_THREADS];
    for (int t = 0; t < RACE_THREADS; t++) {
      memcpy(r[t].tensors, tensors, sizeof tensors);
      r[t].first = t;
      CHECK(pthread_create(&threads[t], NULL, release_some, &r[t]) == 0);
    }
    CHECK_OK(ferry_free(b));
    for (int t = 0; t < RACE_THREADS; t++)
      pthread_join(threads[t], NULL);
    CHECK(stats_of(dev).live_buffers == before.live_buffers);
    CHECK(stats_of(dev).bytes_in_use == before.bytes_in_use);
  }
  CHECK(ferry_dlpack_live_exports() == exports_at_start);
  harness_context = "";
}

/* ---- shutdown ------------------------------------------------------------------------------------ */

static void shutdown_cases(void) {
  ferry_device *dev = device_of_backend("native");
  if (!dev) dev = device_of_backend("checked");
  if (!dev) return;
  harness_context = "shutdown";
  /* An imported buffer still live at ferry_shutdown: its deleter runs then, once. */
  static float data[16];
  made m;
  make(&m, data, cpu, f32, 16);
  ferry_buffer imported;
  CHECK_OK(ferry_dlpack_import(&m.legacy, NULL, &imported, NULL));
  /* A tensor still held by its consumer at ferry_shutdown, one freed and held, and
   * one imported back into ferry (a second buffer). */
  ferry_buffer b, c, d;
  CHECK_OK(ferry_alloc(dev, 16, FERRY_FLOAT32, &b));
  CHECK_OK(ferry_alloc(dev, 16, FERRY_FLOAT32, &c));
  CHECK_OK(ferry_alloc(dev, 16, FERRY_FLOAT32, &d));
  ferry_dl_managed_tensor *held = NULL, *held_freed = NULL, *into_ferry = NULL;
  CHECK_OK(ferry_dlpack_export(b, &held));
  CHECK_OK(ferry_dlpack_export(c, &held_freed));
  CHECK_OK(ferry_dlpack_export(d, &into_ferry));
  CHECK_OK(ferry_free(c));
  ferry_buffer view;
  CHECK_OK(ferry_dlpack_import(into_ferry, NULL, &view, NULL));
  CHECK(ferry_dlpack_live_exports() == exports_at_start + 3);
  ferry_shutdown();
  CHECK(m.deleted == 1);
  CHECK(ferry_dlpack_live_exports() == exports_at_start + 2); /* the view's went with it */
  /* Deleters after shutdown: safe, and they free only the tensors' records. */
  held_freed->deleter(held_freed);
  CHECK_OK(ferry_init());
  /* A tensor from before shutdown cannot come back: its memory is gone. */
  ferry_buffer again;
  CHECK_STATUS(ferry_dlpack_import(held, NULL, &again, NULL), FERRY_ERROR_STALE_BUFFER);
  CHECK_ERROR_HAS("before ferry_shutdown()");
  /* The new session's buffers are untouched by an old tensor's deleter. */
  dev = device_of_backend("native") ? device_of_backend("native") : device_of_backend("checked");
  ferry_buffer fresh;
  CHECK_OK(ferry_alloc(dev, 16, FERRY_FLOAT32, &fresh));
  ferry_stats before = stats_of(dev);
  held->deleter(held);
  CHECK(stats_of(dev).live_buffers == before.live_buffers);
  CHECK(ferry_size(fresh) == 16);
  CHECK_OK(ferry_free(fresh));
  CHECK(ferry_dlpack_live_exports() == exports_at_start);
  CHECK_STATUS(ferry_free(imported), FERRY_ERROR_STALE_BUFFER);
  CHECK(m.deleted == 1);
  harness_context = "";
}

/* ---- hangs fail ---------------------------------------------------------------------------------- */

/* The sections that could hang (a deleter waiting on ferry, a shutdown waiting
 * forever) run under an alarm: a hang ends the test as a failure, naming the
 * section, instead of stalling the run. */
static void on_alarm(int sig) {
  (void)sig;
  static const char text[] = "FAIL dlpack: hung (no progress for 120 s) in: ";
  ssize_t ignored = write(2, text, sizeof text - 1);
  ignored = write(2, harness_context, strlen(harness_context));
  ignored = write(2, "\n", 1);
  (void)ignored;
  _exit(1);
}

static void watchdog(bool on) {
  if (on) signal(SIGALRM, on_alarm);
  alarm(on ? 120 : 0);
}

/* ---- deleters that call ferry ------------------------------------------------------------------------ */

/* A producer's deleter is the program's code, and may call ferry: give memory
 * back with ferry_host_free, ask ferry_device_count, even shut ferry down. ferry
 * runs deleters where it holds no lock and is inside no call of its own, so that
 * each such call works, or fails at once with a status and a sentence; it never
 * waits for the call that runs the deleter. */
typedef enum reentry { REENTER_HOST_FREE, REENTER_DEVICE_COUNT, REENTER_SHUTDOWN } reentry;

typedef struct calling_tensor {
  made m; /* first: the deleter's `made` is the whole record */
  reentry what;
  ferry_status status; /* of the deleter's call */
  size_t count;        /* ferry_device_count's answer */
  char sentence[512];  /* ferry_last_error() after it */
} calling_tensor;

static void call_ferry(made *m) {
  calling_tensor *c = (calling_tensor *)m;
  c->status = FERRY_OK;
  switch (c->what) {
  case REENTER_HOST_FREE: c->status = ferry_host_free(m->memory); break;
  case REENTER_DEVICE_COUNT: c->count = ferry_device_count(); break;
  case REENTER_SHUTDOWN: ferry_shutdown(); break;
  }
  snprintf(c->sentence, sizeof c->sentence, "%s", ferry_last_error());
}

static ferry_device *host_device(void) {
  ferry_device *dev = device_of_backend("native");
  return dev ? dev : device_of_backend("checked");
}

/* An import of 64 float32 of ferry_host_alloc memory whose deleter calls ferry. */
static ferry_buffer import_calling(calling_tensor *c, reentry what) {
  ferry_device *dev = host_device();
  void *memory = NULL;
  CHECK_OK(ferry_host_alloc(dev, 64 * sizeof(float), &memory));
  make(&c->m, memory, cpu, f32, 64);
  c->m.memory = memory;
  c->m.release = call_ferry;
  c->what = what;
  c->status = FERRY_ERROR_BACKEND;
  c->count = SIZE_MAX;
  c->sentence[0] = '\0';
  ferry_buffer b = FERRY_NULL_BUFFER;
  CHECK_OK(ferry_dlpack_import(&c->m.legacy, dev, &b, NULL));
  return b;
}

static void deleters_calling_ferry(void) {
  if (!host_device()) return;
  harness_context = "deleters that call ferry";
  watchdog(true);
  calling_tensor c;
  /* From ferry_free: the calls work. */
  CHECK_OK(ferry_free(import_calling(&c, REENTER_HOST_FREE)));
  CHECK(c.m.deleted == 1);
  CHECK_OK(c.status);
  CHECK_OK(ferry_free(import_calling(&c, REENTER_DEVICE_COUNT)));
  CHECK(c.m.deleted == 1 && c.count > 0 && c.count == ferry_device_count());
  ferry_buffer b = import_calling(&c, REENTER_SHUTDOWN);
  CHECK_OK(ferry_free(b)); /* the deleter's ferry_shutdown ended the session */
  CHECK(c.m.deleted == 1);
  CHECK_STATUS(ferry_free(b), FERRY_ERROR_STALE_BUFFER);
  /* From the consumer's deleter of a tensor ferry exported, which drops the last
   * reference to an imported buffer (freed before): the calls work. */
  b = import_calling(&c, REENTER_SHUTDOWN);
  ferry_dl_managed_tensor *out = NULL;
  CHECK_OK(ferry_dlpack_export(b, &out));
  CHECK_OK(ferry_free(b));
  CHECK(c.m.deleted == 0);
  out->deleter(out);
  CHECK(c.m.deleted == 1);
  CHECK(ferry_dlpack_live_exports() == exports_at_start);
  /* From ferry_shutdown, for a buffer still live then: the deleter runs once the
   * session is gone and ferry's locks are free. ferry_shutdown released every
   * ferry_host_alloc block already, and does not start ferry again from the
   * deleters it runs: those calls fail at once, saying why, and ferry_shutdown
   * itself returns at once. */
  import_calling(&c, REENTER_HOST_FREE);
  ferry_shutdown();
  CHECK(c.m.deleted == 1);
  CHECK_STATUS(c.status, FERRY_ERROR_INVALID_ARGUMENT);
  CHECK_MSG(strstr(c.sentence, "ferry_host_free") && strstr(c.sentence, "ferry_shutdown"), "sentence: %s", c.sentence);
  import_calling(&c, REENTER_DEVICE_COUNT);
  ferry_shutdown();
  CHECK(c.m.deleted == 1 && c.count == 0);
  CHECK_MSG(strstr(c.sentence, "ferry_device_count") && strstr(c.sentence, "ferry_shutdown"), "sentence: %s",
            c.sentence);
  import_calling(&c, REENTER_SHUTDOWN);
  ferry_shutdown();
  CHECK(c.m.deleted == 1);
  /* ferry starts again as usual afterwards. */
  CHECK_OK(ferry_init());
  CHECK(ferry_device_count() > 0);
  CHECK(ferry_dlpack_live_exports() == exports_at_start);
  watchdog(false);
  harness_context = "";
}

/* ---- deleters racing ferry_shutdown --------------------------------------------------------------- */

/* A consumer's deleter may run on any thread at any time, a garbage collector's
 * included, also while another thread shuts ferry down: the tensor's reference
 * goes exactly once, either with the deleter or with the shutdown, never with
 * both. Each round hands a tensor of a freed (or live) buffer to another thread,
 * which runs its deleter at once, while this thread shuts ferry down. */
static _Atomic(ferry_dl_managed_tensor *) race_tensor;
static _Atomic bool race_stop;

static void *run_deleters(void *arg) {
  (void)arg;
  while (!atomic_load(&race_stop)) {
    ferry_dl_managed_tensor *t = atomic_exchange(&race_tensor, NULL);
    if (t) t->deleter(t);
  }
  return NULL;
}

static void deleters_racing_shutdown(void) {
  harness_context = "deleters racing ferry_shutdown";
  watchdog(true);
  ferry_shutdown();
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", "native"));
  pthread_t t;
  CHECK(pthread_create(&t, NULL, run_deleters, NULL) == 0);
  for (unsigned round = 0; round < 3000; round++) {
    ferry_device *dev = ferry_device_best();
    ferry_buffer b;
    ferry_dl_managed_tensor *tensor = NULL;
    if (!dev || ferry_alloc(dev, 64, FERRY_UINT8, &b) != FERRY_OK || ferry_dlpack_export(b, &tensor) != FERRY_OK) {
      CHECK_MSG(false, "round %u: %s", round, ferry_last_error());
      ferry_shutdown();
      break;
    }
    if (round % 2) CHECK_OK(ferry_free(b)); /* freed and held; else live and held */
    atomic_store(&race_tensor, tensor);
    for (volatile unsigned spin = round % 64 * 16; spin > 0; spin--) {
    }
    ferry_shutdown();
    while (atomic_load(&race_tensor) != NULL) {
    }
  }
  atomic_store(&race_stop, true);
  pthread_join(t, NULL);
  CHECK(ferry_dlpack_live_exports() == exports_at_start);
  CHECK_OK(ferry_set_option("FERRY_BACKENDS", NULL));
  CHECK_OK(ferry_init());
  watchdog(false);
  harness_context = "";
}

int main(void) {
  ferry_status st = ferry_init();
  if (st != FERRY_OK) {
    printf("FAIL dlpack: ferry_init: %s\n", ferry_last_error());
    return 1;
  }
  exports_at_start = ferry_dlpack_live_exports();
  each_device();
  host_imports();
  opencl_imports();
  cuda_imports();
  racing_deleters();
  shutdown_cases();
  deleters_calling_ferry();
  deleters_racing_shutdown();
  ferry_shutdown();
  return harness_finish("dlpack");
}
