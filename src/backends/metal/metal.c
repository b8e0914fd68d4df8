/*
 * metal: Apple's GPUs, through Metal, from plain C.
 *
 * The Objective-C runtime and Metal are loaded at run time by path, through the
 * core's loader (/usr/lib/libobjc.A.dylib and
 * /System/Library/Frameworks/Metal.framework/Metal, or FERRY_OBJC_LIBRARY and
 * FERRY_METAL_LIBRARY, declared below), and every method is sent through
 * objc_msgSend cast to its exact prototype (metal_objc.h). The backend is compiled
 * on every platform; where the libraries are missing it reports itself absent with
 * the loader's reason. CI runs it against a fake runtime and Metal
 * (tests/fake_metal); tests/metal/run_on_macos.sh runs it on a Mac.
 *
 * Devices: every MTLCopyAllDevices device (else MTLCreateSystemDefaultDevice),
 * each with one command queue of ferry's for the synchronous calls, and one for
 * each ferry queue (metal_lanes.c). Memory follows hasUnifiedMemory:
 *  - unified memory (Apple silicon): shared-storage buffers, whose `contents` the
 *    core reads and writes directly (ferry_mem.host): transfers are host copies,
 *    and the device needs no staging;
 *  - discrete GPUs: private-storage buffers; the core's transfer engine moves
 *    bytes through pinned blocks that are shared-storage buffers, by blits
 *    (metal_transfer.c: pin_alloc, dma_start, dma_wait).
 * Copies within a device are blits; host-pointer buffers are
 * newBufferWithBytesNoCopy:length:options:deallocator: over the user's array.
 * Not fork-safe: a forked child reports the backend unavailable.
 * docs/backends/metal.md has the whole mapping and what is not verified.
 */
#include "metal_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#define METAL_MAX_DEVICES 16

size_t ferry__metal_page_size(void) {
  long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? (size_t)page : (size_t)16384; /* 16384 is a multiple of every page size Macs use */
}

static void *pool_push(void) { return ferry__metal_rt.pool_push(); }
static void pool_pop(void *pool) { ferry__metal_rt.pool_pop(pool); }

/* ---- errors ------------------------------------------------------------------------ */

ferry_status ferry__metal_completed(const ferry_device *dev, mtl_id command_buffer, const char *what) {
  mtl_uint status = mtl_status(command_buffer);
  if (status == MTL_CB_COMPLETED) return FERRY_OK;
  if (status != MTL_CB_ERROR)
    return ferry__fail(FERRY_ERROR_BACKEND,
                       "%s on %s: after waitUntilCompleted the command buffer's status is %lu, not completed (%d)",
                       what, dev->label, (unsigned long)status, MTL_CB_COMPLETED);
  mtl_id error = mtl_error(command_buffer);
  if (!error)
    return ferry__fail(FERRY_ERROR_BACKEND, "%s on %s: the command buffer ended in error (status %d) with no NSError",
                       what, dev->label, MTL_CB_ERROR);
  char description[512], domain[128];
  mtl_string_copy(mtl_localized_description(error), description, sizeof description);
  mtl_string_copy(mtl_error_domain(error), domain, sizeof domain);
  return ferry__fail(FERRY_ERROR_BACKEND, "%s on %s: the command buffer ended in error: %s (%s, code %ld)", what,
                     dev->label, description[0] ? description : "(no description)", domain[0] ? domain : "no domain",
                     (long)mtl_error_code(error));
}

ferry_status ferry__metal_no_buffer(const ferry_device *dev, size_t length, const char *storage, const char *purpose) {
  const metal_device *md = dev->impl;
  char asked[64], allocated[64], working_set[64], largest[64], beyond[128] = "";
  mtl_uint max_length = mtl_max_buffer_length(md->device);
  if (length > max_length) /* pinned blocks and temporaries are not checked against it by the core */
    snprintf(beyond, sizeof beyond, ", more than the largest buffer, %s (maxBufferLength)",
             ferry__bytes_text(max_length, largest));
  return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY,
                     "newBufferWithLength:options: of %s (%s storage%s%s) on %s returned nil%s; the device has %s "
                     "allocated (currentAllocatedSize) of a recommended working set of %s "
                     "(recommendedMaxWorkingSetSize)",
                     ferry__bytes_text(length, asked), storage, purpose ? ", " : "", purpose ? purpose : "", dev->label,
                     beyond, ferry__bytes_text(mtl_current_allocated_size(md->device), allocated),
                     ferry__bytes_text(mtl_recommended_max_working_set_size(md->device), working_set));
}

/* ---- device memory ------------------------------------------------------------------ */

static uint64_t metal_free_memory(ferry_device *dev) {
  metal_device *md = dev->impl;
  void *pool = pool_push();
  uint64_t working_set = mtl_recommended_max_working_set_size(md->device);
  uint64_t allocated = mtl_current_allocated_size(md->device);
  pool_pop(pool);
  return working_set > allocated ? working_set - allocated : 0;
}

static ferry_status metal_alloc(ferry_device *dev, size_t bytes, ferry_mem *out) {
  metal_device *md = dev->impl;
  char asked[64];
  /* Blits move whole 4-byte words on macOS: every buffer ends on a word boundary,
   * so that the word holding a buffer's last byte can always be read and written. */
  size_t length = (bytes + 3) & ~(size_t)3;
  if (length < bytes)
    return ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "%s is more than a Metal buffer can hold on %s",
                       ferry__bytes_text(bytes, asked), dev->label);
  mtl_uint options = md->unified ? MTL_RESOURCE_STORAGE_SHARED : MTL_RESOURCE_STORAGE_PRIVATE;
  const char *storage = md->unified ? "shared" : "private";
  ferry_status st = FERRY_OK;
  void *pool = pool_push();
  mtl_id buffer = mtl_new_buffer_with_length(md->device, length, options);
  if (!buffer) {
    st = ferry__metal_no_buffer(dev, length, storage, NULL);
  } else {
    void *contents = md->unified ? mtl_contents(buffer) : NULL;
    if (md->unified && !contents) {
      mtl_release(buffer);
      st = ferry__fail(FERRY_ERROR_BACKEND, "contents of a shared-storage buffer of %s on %s returned NULL",
                       ferry__bytes_text(length, asked), dev->label);
    } else {
      *out = (ferry_mem){.handle = (uintptr_t)buffer, .host = contents, .impl = NULL, .bytes = length};
    }
  }
  pool_pop(pool);
  return st;
}

static ferry_status metal_free(ferry_device *dev, ferry_mem *mem) {
  (void)dev;
  void *pool = pool_push();
  mtl_release((mtl_id)mem->handle);
  pool_pop(pool);
  return FERRY_OK;
}

/* ---- host-pointer buffers ------------------------------------------------------------- */

static ferry_status metal_host_ptr_import(ferry_device *dev, void *host, size_t bytes, ferry_mem *out,
                                          ferry_refusal *out_refusal) {
  metal_device *md = dev->impl;
  ferry_status st = FERRY_OK;
  void *pool = pool_push();
  /* Shared storage on every Mac (discrete GPUs reach it over the bus), nil
   * deallocator: the array stays the user's. */
  mtl_id buffer = mtl_new_buffer_with_bytes_no_copy(md->device, host, bytes, MTL_RESOURCE_STORAGE_SHARED, NULL);
  if (!buffer) {
    char size[64];
    *out_refusal = FERRY_REFUSAL_DRIVER;
    st = ferry__fail(FERRY_ERROR_REFUSED,
                     "newBufferWithBytesNoCopy:length:options:deallocator: over %p (%s, shared storage) on %s "
                     "returned nil (page size %zu)",
                     host, ferry__bytes_text(bytes, size), dev->label, md->page);
  } else {
    *out = (ferry_mem){.handle = (uintptr_t)buffer, .host = host, .impl = NULL, .bytes = bytes};
  }
  pool_pop(pool);
  return st;
}

static ferry_status metal_host_ptr_sync(ferry_device *dev, ferry_mem *mem, ferry_sync_dir dir) {
  (void)dev;
  (void)mem;
  (void)dir;
  /* Shared storage is coherent at command-buffer boundaries and ferry's own
   * blits are complete on return; work the user committed on the buffer is the
   * user's to wait for (ferry_device_native). Nothing to hand over either way. */
  return FERRY_OK;
}

static ferry_status metal_host_ptr_release(ferry_device *dev, ferry_mem *mem) { return metal_free(dev, mem); }

/* ---- device-wide operations ------------------------------------------------------------ */

static ferry_status metal_synchronize(ferry_device *dev) {
  metal_device *md = dev->impl;
  /* The queues' command queues first: the program may have committed its own
   * work there (ferry_queue_native). */
  ferry_status st = ferry__metal_lanes_drain(dev);
  return st == FERRY_OK ? ferry__metal_queue_drain(dev, md->queue, "ferry's device queue") : st;
}

static ferry_status metal_native(const ferry_device *dev, ferry_native *out) {
  const metal_device *md = dev->impl;
  *out = (ferry_native){.device = (uintptr_t)md->device, .context = 0, .queue = (uintptr_t)md->queue};
  return FERRY_OK;
}

/* MTLGPUFamily's Metal3 and Metal4 (MTLDevice.h). */
#define MTL_GPU_FAMILY_METAL3 5001
#define MTL_GPU_FAMILY_METAL4 5002

/* Metal has no version of its own: it ships with the operating system, whose
 * release (uname) is the driver's version; the API is named by the newest Metal
 * family the device supports (supportsFamily:, macOS 10.15). */
static ferry_status metal_driver_info(ferry_device *dev, ferry_driver_info *out) {
  metal_device *md = dev->impl;
  snprintf(out->driver, sizeof out->driver, "Metal");
  struct utsname u;
  if (uname(&u) == 0) snprintf(out->driver_version, sizeof out->driver_version, "%.120s %.120s", u.sysname, u.release);
  const char *api = "Metal";
  void *pool = pool_push();
  if (mtl_responds_to_selector(md->device, ferry__metal_rt.sel[MTL_SEL_mtl_supports_family])) {
    if (mtl_supports_family(md->device, MTL_GPU_FAMILY_METAL4))
      api = "Metal 4";
    else if (mtl_supports_family(md->device, MTL_GPU_FAMILY_METAL3))
      api = "Metal 3";
  }
  pool_pop(pool);
  snprintf(out->api_version, sizeof out->api_version, "%s", api);
  return FERRY_OK;
}

static void device_teardown(metal_device *md) {
  void *pool = pool_push();
  ferry__metal_transfer_destroy(md);
  if (md->queue) mtl_release(md->queue);
  if (md->device) mtl_release(md->device);
  pool_pop(pool);
  free(md);
}

static void metal_destroy(ferry_device *dev) { device_teardown(dev->impl); }

/* The synchronous calls' entry points (no lane: FERRY_CAP_SYNC_NO_LANES). */
static ferry_status metal_write_op(ferry_device *dev, ferry_lane *lane, ferry_mem *dst, size_t offset, const void *src,
                                   size_t bytes) {
  (void)lane;
  return ferry__metal_write(dev, dst, offset, src, bytes);
}

static ferry_status metal_read_op(ferry_device *dev, ferry_lane *lane, const ferry_mem *src, size_t offset, void *dst,
                                  size_t bytes) {
  (void)lane;
  return ferry__metal_read(dev, src, offset, dst, bytes);
}

#define METAL_LANE_OPS                                                                                                 \
  .fill_start = ferry__metal_fill_start, .lane_create = ferry__metal_lane_create,                                      \
  .lane_destroy = ferry__metal_lane_destroy, .lane_native = ferry__metal_lane_native, .marker = ferry__metal_marker,   \
  .lane_wait = ferry__metal_lane_wait, .gate_create = ferry__metal_gate_create, .gate_push = ferry__metal_gate_push,   \
  .gate_raise = ferry__metal_gate_raise, .gate_destroy = ferry__metal_gate_destroy,                                    \
  .ticket_query = ferry__metal_ticket_query, .ticket_wait = ferry__metal_ticket_wait,                                  \
  .ticket_release = ferry__metal_ticket_release, .ticket_elapsed = ferry__metal_ticket_elapsed

/* Apple silicon: every buffer is shared memory the core reads and writes
 * directly (ferry_mem.host), so transfers need neither the backend nor staging. */
static const ferry_device_ops unified_ops = {
    .alloc = metal_alloc,
    .free = metal_free,
    .write = metal_write_op, /* a host copy: the core never needs it (ferry_mem.host), the registry asks for it */
    .read = metal_read_op,
    .copy_start = ferry__metal_copy_start,
    METAL_LANE_OPS,
    .host_ptr_import = metal_host_ptr_import,
    .host_ptr_sync = metal_host_ptr_sync,
    .host_ptr_release = metal_host_ptr_release,
    .synchronize = metal_synchronize,
    .native = metal_native,
    .free_memory = metal_free_memory,
    .driver_info = metal_driver_info,
    .destroy = metal_destroy,
};

/* Discrete GPUs: private memory, moved by blits from and to pinned blocks that
 * are shared buffers (the engine's staging, ferry_host_alloc). */
static const ferry_device_ops discrete_ops = {
    .alloc = metal_alloc,
    .free = metal_free,
    .write = metal_write_op,
    .read = metal_read_op,
    .copy_start = ferry__metal_copy_start,
    .pin_alloc = ferry__metal_pin_alloc,
    .pin_register = ferry__metal_pin_register,
    .pin_release = ferry__metal_pin_release,
    .dma_start = ferry__metal_dma_start,
    METAL_LANE_OPS,
    .host_ptr_import = metal_host_ptr_import,
    .host_ptr_sync = metal_host_ptr_sync,
    .host_ptr_release = metal_host_ptr_release,
    .synchronize = metal_synchronize,
    .native = metal_native,
    .free_memory = metal_free_memory,
    .driver_info = metal_driver_info,
    .destroy = metal_destroy,
};

/* ---- probing ------------------------------------------------------------------------------- */

/* The device's properties this backend needs, from macOS 10.15 on (hasUnifiedMemory). */
static const char *missing_property(mtl_id device) {
  static const int needed[] = {MTL_SEL_mtl_has_unified_memory, MTL_SEL_mtl_recommended_max_working_set_size,
                               MTL_SEL_mtl_max_buffer_length, MTL_SEL_mtl_current_allocated_size};
  for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++)
    if (!mtl_responds_to_selector(device, ferry__metal_rt.sel[needed[i]]))
      return ferry__metal_methods[needed[i]].selector;
  return NULL;
}

/* Fills in one device (which md now owns) and its description; on failure sets
 * the sentence, and the caller tears down. Runs inside the caller's pool. */
static ferry_status device_setup(metal_device *md, mtl_id device, size_t index, ferry_device_desc *desc) {
  md->device = device;
  md->page = ferry__metal_page_size();
  ferry__metal_transfer_init(md);
  mtl_string_copy(mtl_name(device), md->name, sizeof md->name);
  if (!md->name[0]) snprintf(md->name, sizeof md->name, "Metal device %zu", index);
  const char *missing = missing_property(device);
  if (missing)
    return ferry__fail(FERRY_ERROR_UNSUPPORTED,
                       "Metal device %zu (%s) does not respond to %s: ferry needs macOS 10.15 or later", index,
                       md->name, missing);
  md->unified = mtl_has_unified_memory(device);
  uint64_t working_set = mtl_recommended_max_working_set_size(device);
  uint64_t max_length = mtl_max_buffer_length(device) & ~(mtl_uint)3; /* buffers are whole words */
  md->queue = mtl_new_command_queue(device);
  if (!md->queue)
    return ferry__fail(FERRY_ERROR_BACKEND, "newCommandQueue on Metal device %zu (%s) returned nil", index, md->name);
  *desc = (ferry_device_desc){
      .ops = md->unified ? &unified_ops : &discrete_ops,
      .impl = md,
      .name = md->name,
      .total_memory = working_set,
      .max_allocation = max_length,
      .is_cpu = false,
      .zero_copy = false, /* Metal's memory is never the caller's own array */
      .host_ptr = true,
      .host_ptr_alignment = md->page, /* newBufferWithBytesNoCopy wraps whole pages */
      /* Discrete GPUs: large transfers from ordinary memory staged through
       * pinned blocks by the engine (Metal has no direct path for them). */
      .caps = FERRY_CAP_CACHE | FERRY_CAP_LANE_WORDS | FERRY_CAP_SYNC_NO_LANES | (md->unified ? 0u : FERRY_CAP_STAGE),
  };
  return FERRY_OK;
}

/* Every device Metal lists, each retained (+1); the count. */
static size_t list_devices(mtl_id *devices, size_t max) {
  size_t n = 0;
  if (ferry__metal_rt.copy_all_devices) {
    mtl_id array = ferry__metal_rt.copy_all_devices();
    if (array) {
      mtl_uint count = mtl_count(array);
      for (mtl_uint i = 0; i < count && n < max; i++) {
        mtl_id device = mtl_object_at_index(array, i);
        if (device) devices[n++] = mtl_retain(device);
      }
      mtl_release(array);
    }
  }
  if (n == 0 && ferry__metal_rt.create_system_default_device) {
    ferry__metal_load_graphics();
    mtl_id device = ferry__metal_rt.create_system_default_device();
    if (device) devices[n++] = device;
  }
  return n;
}

static ferry_status metal_probe(ferry_probe *probe) {
  ferry_status st = ferry__metal_load();
  if (st != FERRY_OK) return st;
  mtl_id devices[METAL_MAX_DEVICES];
  void *pool = pool_push();
  size_t count = list_devices(devices, METAL_MAX_DEVICES);
  char first_failure[1024] = "";
  size_t added = 0, i = 0;
  st = FERRY_OK;
  for (; i < count && st == FERRY_OK; i++) {
    metal_device *md = calloc(1, sizeof *md);
    if (!md) {
      st = ferry__fail(FERRY_ERROR_OUT_OF_MEMORY, "no host memory for Metal device %zu", i);
      break; /* devices[i] is released below */
    }
    ferry_device_desc desc;
    if (device_setup(md, devices[i], i, &desc) != FERRY_OK) {
      /* A device that cannot be used is left out; the others go on. */
      if (!first_failure[0]) snprintf(first_failure, sizeof first_failure, "%s", ferry__error_text());
      device_teardown(md);
      continue;
    }
    if ((st = ferry__device_add(probe, &desc)) != FERRY_OK)
      device_teardown(md);
    else
      added++;
  }
  for (; i < count; i++) /* after a failure: the devices not set up */
    mtl_release(devices[i]);
  pool_pop(pool);
  if (st != FERRY_OK) return st;
  if (count == 0)
    return ferry__fail(FERRY_ERROR_UNSUPPORTED, "Metal (%s) reports no device", ferry__metal_rt.metal_path);
  if (added == 0) return ferry__fail(FERRY_ERROR_UNSUPPORTED, "no Metal device could be used: %s", first_failure);
  return FERRY_OK;
}

static void metal_unload(void) { ferry__metal_unload(); }

static const ferry_option_def metal_options[] = {
    {.name = "FERRY_OBJC_LIBRARY",
     .type = FERRY_OPTION_TEXT,
     .default_value = FERRY_METAL_OBJC_DEFAULT_PATH,
     .range = "a library name or path for dlopen",
     .description = "the Objective-C runtime to load (may name the same file as FERRY_METAL_LIBRARY)"},
    {.name = "FERRY_METAL_LIBRARY",
     .type = FERRY_OPTION_TEXT,
     .default_value = FERRY_METAL_DEFAULT_PATH,
     .range = "a library name or path for dlopen",
     .description = "the Metal framework to load"},
    {.name = NULL},
};

/* fork_safe is false: Metal's objects and queues are the parent's. */
const ferry_backend ferry_backend_metal = {
    .name = "metal", .options = metal_options, .probe = metal_probe, .unload = metal_unload};
