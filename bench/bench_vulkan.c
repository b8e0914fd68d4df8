/* A focused study beside `ferry bench`: Vulkan's copies against CUDA's own on the same GPU (an API against another,
 * not against Vulkan's raw calls), and the Vulkan targets (pass or miss): neither of which ferry bench measures. */
/*
 * bench_vulkan: ferry's transfers on every Vulkan device against the raw calls
 * measured in the same run, on the same buffers (raw/raw_vulkan.c), and where
 * a CUDA device is present against CUDA's own pinned and device copies.
 *
 *   CPU devices (lavapipe): ferry_write / ferry_read of 256 MiB against memcpy of
 *     the same bytes between two host arrays. Target: >= 0.9x memcpy.
 *   every device: host-to-device, device-to-host (from ordinary malloc'd memory
 *     and from pinned memory: ferry_host_alloc for ferry, a mapped host-visible
 *     VkBuffer for the raw calls) and device-to-device, of 256 MiB and 1 GiB
 *     (where two such buffers fit), against the raw Vulkan calls.
 *   with CUDA: the same transfers by cuMemcpyHtoD / cuMemcpyDtoH from
 *     cuMemAllocHost memory and cuMemcpyDtoD on the first CUDA device. Target for
 *     a GPU's Vulkan device, at 1 GiB: h2d and d2h from pinned memory >= 0.9x
 *     CUDA pinned, d2d >= 0.9x cuMemcpyDtoD.
 *
 * Every figure is the median of the repeats (9, or 3 with --quick), ferry and
 * the baseline alternating, each timed call right after an untimed call of the
 * same operation: on the H200 a copy within the device that directly follows a
 * different operation (the baseline's vkCmdCopyBuffer, which leaves the shader
 * cores idle for milliseconds) takes 20 us longer, which would charge one side
 * for the other's work; CUDA's figures are measured back to back as well. Before
 * the repeats each operation runs for 20 ms untimed, so that the GPU's clocks
 * are up after the PCIe-bound transfers before it (without that, 256 MiB copies
 * within the H200 measured 0.73x to 0.92x of cuMemcpyDtoD from run to run).
 *   two queues of one device (64 and 256 MiB, from malloc'd and from pinned
 *     memory): ferry_write_async on one queue alone, ferry_read_async on another
 *     alone, and both at once (each + ferry_queue_synchronize), against the raw
 *     program on the very VkQueues the two queues' lanes submit to
 *     (ferry_queue_native): memcpy + vkCmdCopyBuffer + fence on one thread, the
 *     reverse on a second thread started for the run, while ferry is idle. No
 *     target: the rows say what overlap each gets.
 * Exit status: the number of targets missed (0: all met).
 *
 * usage: bench_vulkan [--quick] [--repeats N] [--two-queues-only | --no-two-queues]
 */
#include "backends/vulkan/vulkan_api.h"
#include "raw.h"
#include "timing.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int repeats = 9;
static int missed;
static bool two_queues_wanted = true, only_two_queues = false;

static void *must_malloc(size_t bytes) {
  void *p = malloc(bytes);
  if (!p) {
    fprintf(stderr, "bench_vulkan: no host memory for %zu bytes\n", bytes);
    exit(255);
  }
  memset(p, 0x5a, bytes); /* touch every page before timing */
  return p;
}

static void check(ferry_status st, const char *what) {
  if (st != FERRY_OK) {
    fprintf(stderr, "bench_vulkan: %s: %s: %s\n", what, ferry_status_name(st), ferry_last_error());
    exit(255);
  }
}

/* One timed operation: ferry's or a baseline's. */
typedef enum op_kind {
  OP_WRITE,   /* ferry_host_ptr_to_device(host, buf) */
  OP_READ,    /* ferry_device_to_host_ptr(buf, host) */
  OP_COPY,    /* ferry_device_to_device(buf, buf2) */
  OP_MEMCPY,  /* memcpy(host2, host) */
  OP_RAW_H2D, /* raw->h2d(buf, host) */
  OP_RAW_D2H, /* raw->d2h(buf, host) */
  OP_RAW_D2D, /* raw->d2d(buf, buf2) */
} op_kind;

typedef struct op {
  op_kind kind;
  const raw_ops *ops;
  raw_baseline *raw;
  ferry_buffer buf, buf2;
  void *host, *host2;
  size_t bytes;
} op;

static void run(const op *o) {
  int rc = 0;
  switch (o->kind) {
  case OP_WRITE: check(ferry_host_ptr_to_device(o->host, o->bytes, o->buf), "ferry_host_ptr_to_device"); break;
  case OP_READ: check(ferry_device_to_host_ptr(o->buf, o->host, o->bytes), "ferry_device_to_host_ptr"); break;
  case OP_COPY: check(ferry_device_to_device(o->buf, o->buf2), "ferry_device_to_device"); break;
  case OP_MEMCPY:
    memcpy(o->host2, o->host, o->bytes);
    __asm__ volatile("" : : "r"(o->host2) : "memory");
    break;
  case OP_RAW_H2D: rc = o->ops->h2d(o->raw, o->buf, o->host, o->bytes); break;
  case OP_RAW_D2H: rc = o->ops->d2h(o->raw, o->buf, o->host, o->bytes); break;
  case OP_RAW_D2D: rc = o->ops->d2d(o->raw, o->buf, o->buf2, o->bytes); break;
  }
  if (rc != 0) {
    fprintf(stderr, "bench_vulkan: the raw %s call failed\n", o->ops->backend);
    exit(255);
  }
}

/* Seconds of one call of o, right after an untimed one. */
static double timed(const op *o) {
  run(o);
  double t0 = bench_seconds();
  run(o);
  return bench_seconds() - t0;
}

/* Runs o for at least 20 ms (two calls at least). */
static void warm_up(const op *o) {
  double t0 = bench_seconds();
  for (int n = 0; n < 2 || bench_seconds() - t0 < 0.02; n++)
    run(o);
}

/* Medians in GB/s of a and b, alternating. */
static void measure(const op *a, const op *b, double *gbs_a, double *gbs_b) {
  double ta[64], tb[64];
  warm_up(a);
  if (b) warm_up(b);
  for (int r = 0; r < repeats; r++) {
    ta[r] = timed(a);
    if (b) tb[r] = timed(b);
  }
  *gbs_a = (double)a->bytes / bench_median(ta, repeats) / 1e9;
  if (b) *gbs_b = (double)b->bytes / bench_median(tb, repeats) / 1e9;
}

static void header(void) {
  printf("%-38s %8s %10s %10s  %-34s %7s  %s\n", "test", "size", "ferry", "baseline", "baseline call", "ratio",
         "target");
}

static void row(const char *test, size_t bytes, double ferry, double base, const char *base_name, double target) {
  char size[32], verdict[64] = "";
  if (bytes >= ((size_t)1 << 30))
    snprintf(size, sizeof size, "%zu GiB", bytes >> 30);
  else
    snprintf(size, sizeof size, "%zu MiB", bytes >> 20);
  double ratio = base > 0 ? ferry / base : 0;
  if (target > 0) {
    bool ok = ratio >= target;
    if (!ok) missed++;
    snprintf(verdict, sizeof verdict, ">= %.2fx: %s", target, ok ? "ok" : "MISSED");
  }
  printf("%-38s %8s %6.2f GB/s %6.2f GB/s  %-34s %6.3fx  %s\n", test, size, ferry, base, base_name, ratio, verdict);
}

/* ---- CUDA's figures, for GPUs ------------------------------------------------------ */

typedef struct cuda_ref {
  bool have;
  double h2d, d2h, d2d; /* GB/s, pinned memory */
} cuda_ref;

static cuda_ref cuda_figures(size_t bytes) {
  cuda_ref c = {0};
  const raw_ops *cu = raw_ops_for("cuda");
  ferry_device *dev = NULL;
  for (size_t i = 0; i < ferry_device_count() && !dev; i++) {
    ferry_device *d;
    ferry_device_info info;
    ferry_device_get(i, &d);
    ferry_device_info_get(d, &info);
    if (strcmp(info.backend, "cuda") == 0 && bytes * 2 < info.total_memory) dev = d;
  }
  if (!cu || !dev || !cu->host_alloc) return c;
  char why[256] = "";
  raw_baseline *raw = cu->open(dev, why);
  if (!raw) {
    printf("(no CUDA baseline: %s)\n", why);
    return c;
  }
  void *pinned = cu->host_alloc(raw, bytes);
  ferry_buffer a, b;
  if (pinned && ferry_alloc(dev, bytes, FERRY_UINT8, &a) == FERRY_OK &&
      ferry_alloc(dev, bytes, FERRY_UINT8, &b) == FERRY_OK) {
    memset(pinned, 0x3c, bytes);
    op h2d = {.kind = OP_RAW_H2D, .ops = cu, .raw = raw, .buf = a, .host = pinned, .bytes = bytes};
    op d2h = {.kind = OP_RAW_D2H, .ops = cu, .raw = raw, .buf = a, .host = pinned, .bytes = bytes};
    op d2d = {.kind = OP_RAW_D2D, .ops = cu, .raw = raw, .buf = a, .buf2 = b, .bytes = bytes};
    measure(&h2d, NULL, &c.h2d, NULL);
    measure(&d2h, NULL, &c.d2h, NULL);
    measure(&d2d, NULL, &c.d2d, NULL);
    c.have = true;
    ferry_free(a);
    ferry_free(b);
  }
  if (pinned) cu->host_free(raw, pinned);
  cu->close(raw);
  return c;
}

/* ---- one Vulkan device --------------------------------------------------------------- */

static void memcpy_comparison(ferry_device *dev) {
  const size_t bytes = (size_t)256 << 20;
  unsigned char *src = must_malloc(bytes), *dst = must_malloc(bytes);
  for (size_t i = 0; i < bytes; i += 4096)
    src[i] = (unsigned char)(i >> 12);
  ferry_buffer b;
  check(ferry_alloc(dev, bytes, FERRY_UINT8, &b), "ferry_alloc");
  op w = {.kind = OP_WRITE, .buf = b, .host = src, .bytes = bytes};
  op r = {.kind = OP_READ, .buf = b, .host = dst, .bytes = bytes};
  op m = {.kind = OP_MEMCPY, .host = src, .host2 = dst, .bytes = bytes};
  double f, base;
  measure(&w, &m, &f, &base);
  row("write (malloc'd memory)", bytes, f, base, "memcpy", 0.9);
  measure(&r, &m, &f, &base);
  row("read (malloc'd memory)", bytes, f, base, "memcpy", 0.9);
  check(ferry_read(b, 0, dst, bytes), "ferry_read");
  if (memcmp(src, dst, bytes) != 0) {
    fprintf(stderr, "bench_vulkan: the bytes read back differ\n");
    exit(255);
  }
  ferry_free(b);
  free(src);
  free(dst);
}

static void transfers(ferry_device *dev, const ferry_device_info *info, const raw_ops *vk, raw_baseline *raw,
                      size_t bytes) {
  unsigned char *host = must_malloc(bytes);
  void *fpin = NULL, *rpin = vk->host_alloc ? vk->host_alloc(raw, bytes) : NULL;
  check(ferry_host_alloc(dev, bytes, &fpin), "ferry_host_alloc");
  memset(fpin, 0x11, bytes);
  if (rpin) memset(rpin, 0x22, bytes);
  ferry_buffer a, b;
  check(ferry_alloc(dev, bytes, FERRY_UINT8, &a), "ferry_alloc");
  check(ferry_alloc(dev, bytes, FERRY_UINT8, &b), "ferry_alloc");
  cuda_ref cu = info->is_cpu ? (cuda_ref){0} : cuda_figures(bytes);
  /* The targets are for 1 GiB; at 256 MiB the rows are shown without one. */
  double target = cu.have && bytes >= ((size_t)1 << 30) ? 0.9 : 0;
  double f, base;

  op fw = {.kind = OP_WRITE, .buf = a, .host = host, .bytes = bytes};
  op rw = {.kind = OP_RAW_H2D, .ops = vk, .raw = raw, .buf = a, .host = host, .bytes = bytes};
  measure(&fw, &rw, &f, &base);
  row("h2d from malloc'd memory", bytes, f, base, vk->h2d_name, 0);
  if (cu.have) row("  the same, against CUDA pinned", bytes, f, cu.h2d, "cuMemcpyHtoD (cuMemAllocHost)", 0);
  op fr = {.kind = OP_READ, .buf = a, .host = host, .bytes = bytes};
  op rr = {.kind = OP_RAW_D2H, .ops = vk, .raw = raw, .buf = a, .host = host, .bytes = bytes};
  measure(&fr, &rr, &f, &base);
  row("d2h to malloc'd memory", bytes, f, base, vk->d2h_name, 0);
  if (cu.have) row("  the same, against CUDA pinned", bytes, f, cu.d2h, "cuMemcpyDtoH (cuMemAllocHost)", 0);

  op fpw = {.kind = OP_WRITE, .buf = a, .host = fpin, .bytes = bytes};
  op rpw = {.kind = OP_RAW_H2D, .ops = vk, .raw = raw, .buf = a, .host = rpin ? rpin : host, .bytes = bytes};
  measure(&fpw, &rpw, &f, &base);
  row("h2d from pinned memory", bytes, f, base, rpin ? "vkCmdCopyBuffer (host-visible buffer)" : vk->h2d_name, 0);
  if (cu.have) row("  the same, against CUDA pinned", bytes, f, cu.h2d, "cuMemcpyHtoD (cuMemAllocHost)", target);
  op fpr = {.kind = OP_READ, .buf = a, .host = fpin, .bytes = bytes};
  op rpr = {.kind = OP_RAW_D2H, .ops = vk, .raw = raw, .buf = a, .host = rpin ? rpin : host, .bytes = bytes};
  measure(&fpr, &rpr, &f, &base);
  row("d2h to pinned memory", bytes, f, base, rpin ? "vkCmdCopyBuffer (host-visible buffer)" : vk->d2h_name, 0);
  if (cu.have) row("  the same, against CUDA pinned", bytes, f, cu.d2h, "cuMemcpyDtoH (cuMemAllocHost)", target);

  op fc = {.kind = OP_COPY, .buf = a, .buf2 = b, .bytes = bytes};
  op rc = {.kind = OP_RAW_D2D, .ops = vk, .raw = raw, .buf = a, .buf2 = b, .bytes = bytes};
  measure(&fc, &rc, &f, &base);
  row("d2d", bytes, f, base, vk->d2d_name, 0);
  if (cu.have) row("  the same, against CUDA", bytes, f, cu.d2d, "cuMemcpyDtoD", target);

  /* The figures are worth nothing if the bytes are wrong. */
  for (size_t i = 0; i < bytes; i += 4093)
    host[i] = (unsigned char)(i * 31 + 7);
  check(ferry_host_ptr_to_device(host, bytes, a), "ferry_host_ptr_to_device");
  check(ferry_device_to_device(a, b), "ferry_device_to_device");
  memset(fpin, 0, bytes);
  check(ferry_device_to_host_ptr(b, fpin, bytes), "ferry_device_to_host_ptr");
  if (memcmp(host, fpin, bytes) != 0) {
    fprintf(stderr, "bench_vulkan: the bytes after h2d, d2d, d2h differ\n");
    exit(255);
  }
  ferry_free(a);
  ferry_free(b);
  ferry_host_free(fpin);
  if (rpin) vk->host_free(raw, rpin);
  free(host);
}

/* ---- two queues of one device: one writes while the other reads -------------------------- */

/* The raw program's own table of the Vulkan calls it makes, looked up in the
 * loader ferry's vulkan backend opened (as raw/raw_vulkan.c does): a user of
 * ferry, not a part of it. */
#define DUO_VK_FUNCTIONS(X)                                                                                            \
  X(void, vkGetPhysicalDeviceMemoryProperties, (VkPhysicalDevice, VkPhysicalDeviceMemoryProperties *))                 \
  X(VkResult, vkCreateBuffer, (VkDevice, const VkBufferCreateInfo *, const void *, VkBuffer *))                        \
  X(void, vkDestroyBuffer, (VkDevice, VkBuffer, const void *))                                                         \
  X(void, vkGetBufferMemoryRequirements, (VkDevice, VkBuffer, VkMemoryRequirements *))                                 \
  X(VkResult, vkAllocateMemory, (VkDevice, const VkMemoryAllocateInfo *, const void *, VkDeviceMemory *))              \
  X(void, vkFreeMemory, (VkDevice, VkDeviceMemory, const void *))                                                      \
  X(VkResult, vkBindBufferMemory, (VkDevice, VkBuffer, VkDeviceMemory, VkDeviceSize))                                  \
  X(VkResult, vkMapMemory, (VkDevice, VkDeviceMemory, VkDeviceSize, VkDeviceSize, VkFlags, void **))                   \
  X(VkResult, vkCreateCommandPool, (VkDevice, const VkCommandPoolCreateInfo *, const void *, VkCommandPool *))         \
  X(void, vkDestroyCommandPool, (VkDevice, VkCommandPool, const void *))                                               \
  X(VkResult, vkAllocateCommandBuffers, (VkDevice, const VkCommandBufferAllocateInfo *, VkCommandBuffer *))            \
  X(VkResult, vkBeginCommandBuffer, (VkCommandBuffer, const VkCommandBufferBeginInfo *))                               \
  X(VkResult, vkEndCommandBuffer, (VkCommandBuffer))                                                                   \
  X(void, vkCmdCopyBuffer, (VkCommandBuffer, VkBuffer, VkBuffer, uint32_t, const VkBufferCopy *))                      \
  X(VkResult, vkCreateFence, (VkDevice, const VkFenceCreateInfo *, const void *, VkFence *))                           \
  X(void, vkDestroyFence, (VkDevice, VkFence, const void *))                                                           \
  X(VkResult, vkResetFences, (VkDevice, uint32_t, const VkFence *))                                                    \
  X(VkResult, vkWaitForFences, (VkDevice, uint32_t, const VkFence *, VkBool32, uint64_t))                              \
  X(VkResult, vkQueueSubmit, (VkQueue, uint32_t, const VkSubmitInfo *, VkFence))

typedef struct duo_vk {
#define DUO_VK_MEMBER(ret, name, params) ret(*name) params;
  DUO_VK_FUNCTIONS(DUO_VK_MEMBER)
#undef DUO_VK_MEMBER
} duo_vk;

static const duo_vk *duo_driver(void) {
  static duo_vk table;
  static bool loaded;
  if (loaded) return &table;
  char why[256] = "";
  void *lib = raw_library_open("FERRY_VULKAN_LIBRARY", "libvulkan.so.1", why);
  if (!lib) {
    printf("(two queues: no raw Vulkan baseline: %s)\n", why);
    return NULL;
  }
  duo_vk t;
#define DUO_VK_LOOKUP(ret, name, params)                                                                               \
  if (!raw_library_symbol(lib, #name, &t.name, sizeof t.name, why)) {                                                  \
    printf("(two queues: no raw Vulkan baseline: %s)\n", why);                                                         \
    return NULL;                                                                                                       \
  }
  DUO_VK_FUNCTIONS(DUO_VK_LOOKUP)
#undef DUO_VK_LOOKUP
  table = t;
  loaded = true;
  return &table;
}

/* The raw calls of one side, on a VkQueue of ferry's (the one a ferry queue's
 * lane submits to, from ferry_queue_native), while ferry is idle: a command
 * pool, buffer and fence, and a host-visible staging buffer as large as the
 * transfer. */
typedef struct raw_side {
  const duo_vk *vk;
  VkDevice device;
  VkQueue queue;
  VkCommandPool pool;
  VkCommandBuffer cb;
  VkFence fence;
  VkBuffer staging;
  VkDeviceMemory memory;
  char *map;
  size_t bytes;
} raw_side;

static bool raw_side_open(ferry_device *dev, ferry_queue q, size_t bytes, raw_side *s) {
  memset(s, 0, sizeof *s);
  const duo_vk *vk = duo_driver();
  ferry_native nat;
  if (!vk || ferry_queue_native(q, &nat) != FERRY_OK || ferry_device_native(dev, &(ferry_native){0}) != FERRY_OK)
    return false;
  s->vk = vk;
  s->device = (VkDevice)nat.context;
  s->queue = (VkQueue)nat.queue;
  s->bytes = bytes;
  VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                .queueFamilyIndex = nat.queue_family};
  VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 1};
  VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                           .size = bytes,
                           .usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                           .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  if (vk->vkCreateCommandPool(s->device, &pi, NULL, &s->pool) != VK_SUCCESS) return false;
  ai.commandPool = s->pool;
  if (vk->vkAllocateCommandBuffers(s->device, &ai, &s->cb) != VK_SUCCESS ||
      vk->vkCreateFence(s->device, &fi, NULL, &s->fence) != VK_SUCCESS ||
      vk->vkCreateBuffer(s->device, &bi, NULL, &s->staging) != VK_SUCCESS)
    return false;
  VkMemoryRequirements req;
  vk->vkGetBufferMemoryRequirements(s->device, s->staging, &req);
  VkPhysicalDeviceMemoryProperties mp;
  vk->vkGetPhysicalDeviceMemoryProperties((VkPhysicalDevice)nat.device, &mp);
  /* Host-visible and coherent, cached where there is such a type (what a program picks for staging). */
  uint32_t type = UINT32_MAX;
  int best = -1;
  for (uint32_t i = 0; i < mp.memoryTypeCount; i++) {
    VkFlags f = mp.memoryTypes[i].propertyFlags;
    if (!(req.memoryTypeBits & (1u << i)) || !(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) ||
        !(f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT))
      continue;
    int score = (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT ? 2 : 0) + (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT ? 0 : 1);
    if (score > best) {
      best = score;
      type = i;
    }
  }
  VkMemoryAllocateInfo mi = {
      .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size, .memoryTypeIndex = type};
  void *p = NULL;
  if (type == UINT32_MAX || vk->vkAllocateMemory(s->device, &mi, NULL, &s->memory) != VK_SUCCESS ||
      vk->vkBindBufferMemory(s->device, s->staging, s->memory, 0) != VK_SUCCESS ||
      vk->vkMapMemory(s->device, s->memory, 0, VK_WHOLE_SIZE, 0, &p) != VK_SUCCESS)
    return false;
  s->map = p;
  memset(s->map, 0x5a, bytes);
  return true;
}

static void raw_side_close(raw_side *s) {
  const duo_vk *vk = s->vk;
  if (!vk) return;
  if (s->memory) vk->vkFreeMemory(s->device, s->memory, NULL);
  if (s->staging) vk->vkDestroyBuffer(s->device, s->staging, NULL);
  if (s->fence) vk->vkDestroyFence(s->device, s->fence, NULL);
  if (s->pool) vk->vkDestroyCommandPool(s->device, s->pool, NULL);
}

/* One vkCmdCopyBuffer of the whole transfer between staging and the buffer, waited for by its fence. */
static void raw_copy(raw_side *s, VkBuffer src, VkBuffer dst) {
  const duo_vk *vk = s->vk;
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                 .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  VkBufferCopy region = {.size = s->bytes};
  VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &s->cb};
  if (vk->vkBeginCommandBuffer(s->cb, &bi) != VK_SUCCESS) exit(255);
  vk->vkCmdCopyBuffer(s->cb, src, dst, 1, &region);
  if (vk->vkEndCommandBuffer(s->cb) != VK_SUCCESS || vk->vkQueueSubmit(s->queue, 1, &si, s->fence) != VK_SUCCESS ||
      vk->vkWaitForFences(s->device, 1, &s->fence, VK_TRUE, UINT64_MAX) != VK_SUCCESS ||
      vk->vkResetFences(s->device, 1, &s->fence) != VK_SUCCESS) {
    fprintf(stderr, "bench_vulkan: a raw vkCmdCopyBuffer failed\n");
    exit(255);
  }
}

/* What one timed run of the pair does. */
typedef struct duo {
  ferry_queue qw, qr; /* ferry: writes on qw, reads on qr */
  raw_side rw, rr;    /* raw: the same two VkQueues */
  ferry_buffer a, b;  /* a is written, b read */
  VkBuffer va, vb;
  void *src, *dst; /* host memory: malloc'd, or pinned (ferry_host_alloc; raw: its staging buffers) */
  bool pinned;
  size_t bytes;
} duo;

static void duo_ferry_write(duo *u) {
  check(ferry_write_async(u->qw, u->a, 0, u->src, u->bytes), "ferry_write_async");
  check(ferry_queue_synchronize(u->qw), "ferry_queue_synchronize");
}

static void duo_ferry_read(duo *u) {
  check(ferry_read_async(u->qr, u->b, 0, u->dst, u->bytes), "ferry_read_async");
  check(ferry_queue_synchronize(u->qr), "ferry_queue_synchronize");
}

static void duo_ferry_both(duo *u) {
  check(ferry_write_async(u->qw, u->a, 0, u->src, u->bytes), "ferry_write_async");
  check(ferry_read_async(u->qr, u->b, 0, u->dst, u->bytes), "ferry_read_async");
  check(ferry_queue_synchronize(u->qw), "ferry_queue_synchronize");
  check(ferry_queue_synchronize(u->qr), "ferry_queue_synchronize");
}

/* The raw program: memcpy into its staging buffer and copy (from pinned memory: the copy alone). */
static void duo_raw_write(duo *u) {
  if (!u->pinned) memcpy(u->rw.map, u->src, u->bytes);
  raw_copy(&u->rw, u->rw.staging, u->va);
}

static void duo_raw_read(duo *u) {
  raw_copy(&u->rr, u->vb, u->rr.staging);
  if (!u->pinned) memcpy(u->dst, u->rr.map, u->bytes);
}

static void *duo_raw_read_thread(void *p) {
  duo_raw_read(p);
  return NULL;
}

/* A program's two threads, one per queue (the read's thread started for each run). */
static void duo_raw_both(duo *u) {
  pthread_t t;
  if (pthread_create(&t, NULL, duo_raw_read_thread, u) != 0) exit(255);
  duo_raw_write(u);
  pthread_join(t, NULL);
}

typedef void (*duo_fn)(duo *u);

static double duo_timed(duo_fn fn, duo *u) {
  fn(u);
  double t0 = bench_seconds();
  fn(u);
  return bench_seconds() - t0;
}

static void duo_row(const char *test, size_t bytes, double moved, double t_ferry, double t_raw) {
  char size[32];
  snprintf(size, sizeof size, "%zu MiB", bytes >> 20);
  double f = moved / t_ferry / 1e9, r = moved / t_raw / 1e9;
  printf("%-38s %8s %6.2f GB/s %6.2f GB/s  %-34s %6.3fx\n", test, size, f, r, "raw, the same VkQueues", f / r);
}

/* Write alone, read alone and both at once, on two ferry queues of the device
 * and by the raw calls on the same two VkQueues, alternating; medians. */
static void two_queues(ferry_device *dev, size_t bytes, bool pinned) {
  duo u = {.bytes = bytes, .pinned = pinned};
  check(ferry_queue_create(dev, &u.qw), "ferry_queue_create");
  check(ferry_queue_create(dev, &u.qr), "ferry_queue_create");
  check(ferry_alloc(dev, bytes, FERRY_UINT8, &u.a), "ferry_alloc");
  check(ferry_alloc(dev, bytes, FERRY_UINT8, &u.b), "ferry_alloc");
  u.va = (VkBuffer)ferry_device_ptr(u.a);
  u.vb = (VkBuffer)ferry_device_ptr(u.b);
  bool raw = raw_side_open(dev, u.qw, bytes, &u.rw) && raw_side_open(dev, u.qr, bytes, &u.rr);
  if (pinned) {
    check(ferry_host_alloc(dev, bytes, &u.src), "ferry_host_alloc");
    check(ferry_host_alloc(dev, bytes, &u.dst), "ferry_host_alloc");
    memset(u.src, 0x3c, bytes);
    memset(u.dst, 0, bytes);
  } else {
    u.src = must_malloc(bytes);
    u.dst = must_malloc(bytes);
  }
  if (!raw) {
    printf("(two queues: no raw Vulkan baseline)\n");
  } else {
    ferry_native nw, nr;
    check(ferry_queue_native(u.qw, &nw), "ferry_queue_native");
    check(ferry_queue_native(u.qr, &nr), "ferry_queue_native");
    printf("two queues (%s memory): the writer's VkQueue %s the reader's (family %u)\n", pinned ? "pinned" : "malloc'd",
           nw.queue == nr.queue ? "is" : "is not", nw.queue_family);
    double fw[64], fr[64], fb[64], rw[64], rr[64], rb[64];
    for (int k = 0; k < 2; k++) { /* warm up */
      duo_ferry_both(&u);
      duo_raw_both(&u);
    }
    for (int r = 0; r < repeats; r++) {
      fw[r] = duo_timed(duo_ferry_write, &u);
      rw[r] = duo_timed(duo_raw_write, &u);
      fr[r] = duo_timed(duo_ferry_read, &u);
      rr[r] = duo_timed(duo_raw_read, &u);
      fb[r] = duo_timed(duo_ferry_both, &u);
      rb[r] = duo_timed(duo_raw_both, &u);
    }
    double tfw = bench_median(fw, repeats), tfr = bench_median(fr, repeats), tfb = bench_median(fb, repeats);
    double trw = bench_median(rw, repeats), trr = bench_median(rr, repeats), trb = bench_median(rb, repeats);
    duo_row("  write alone (queue 1)", bytes, (double)bytes, tfw, trw);
    duo_row("  read alone (queue 2)", bytes, (double)bytes, tfr, trr);
    duo_row("  write + read at once (both bytes)", bytes, 2.0 * (double)bytes, tfb, trb);
    printf("  at once / one after the other: ferry %.2fx, raw %.2fx (1.00: no overlap; 2.00: full)\n",
           (tfw + tfr) / tfb, (trw + trr) / trb);
  }
  /* The figures are worth nothing if the bytes are wrong. */
  unsigned char *s = u.src, *d = u.dst;
  for (size_t i = 0; i < bytes; i += 4093)
    s[i] = (unsigned char)(i * 13 + 1);
  check(ferry_write(u.b, 0, s, bytes), "ferry_write");
  memset(d, 0, bytes);
  duo_ferry_both(&u);
  unsigned char *back = must_malloc(bytes);
  check(ferry_read(u.a, 0, back, bytes), "ferry_read");
  if (memcmp(back, s, bytes) != 0 || memcmp(d, s, bytes) != 0) {
    fprintf(stderr, "bench_vulkan: the bytes of the two queues' write and read differ\n");
    exit(255);
  }
  free(back);
  raw_side_close(&u.rw);
  raw_side_close(&u.rr);
  if (pinned) {
    ferry_host_free(u.src);
    ferry_host_free(u.dst);
  } else {
    free(u.src);
    free(u.dst);
  }
  ferry_free(u.a);
  ferry_free(u.b);
  check(ferry_queue_destroy(u.qw), "ferry_queue_destroy");
  check(ferry_queue_destroy(u.qr), "ferry_queue_destroy");
}

static void bench_device(ferry_device *dev, const ferry_device_info *info) {
  printf("\ndevice %zu: %s (%s, %.1f GiB, largest buffer %.1f GiB)\n", info->index, info->name,
         info->is_cpu ? "CPU" : "GPU", (double)info->total_memory / (1u << 30),
         (double)info->max_allocation / (1u << 30));
  header();
  if (only_two_queues) {
    const size_t duo_sizes[] = {(size_t)64 << 20, (size_t)256 << 20};
    for (size_t i = 0; i < sizeof duo_sizes / sizeof duo_sizes[0]; i++) {
      if (duo_sizes[i] * 4 > info->total_memory) continue;
      two_queues(dev, duo_sizes[i], false);
      two_queues(dev, duo_sizes[i], true);
    }
    return;
  }
  if (info->is_cpu) memcpy_comparison(dev);
  const raw_ops *vk = raw_ops_for("vulkan");
  char why[256] = "";
  raw_baseline *raw = vk ? vk->open(dev, why) : NULL;
  if (!raw) {
    printf("(no raw Vulkan baseline: %s)\n", vk ? why : "not built");
    return;
  }
  const size_t sizes[] = {(size_t)256 << 20, (size_t)1 << 30};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    if (sizes[i] > info->max_allocation || sizes[i] * 2 > info->total_memory) {
      printf("(%zu MiB: two such buffers do not fit)\n", sizes[i] >> 20);
      continue;
    }
    transfers(dev, info, vk, raw, sizes[i]);
  }
  vk->close(raw);
  if (!two_queues_wanted) return;
  /* Raw's calls run on ferry's VkQueues while ferry is idle on them. */
  const size_t duo_sizes[] = {(size_t)64 << 20, (size_t)256 << 20};
  for (size_t i = 0; i < sizeof duo_sizes / sizeof duo_sizes[0]; i++) {
    if (duo_sizes[i] * 4 > info->total_memory) continue;
    two_queues(dev, duo_sizes[i], false);
    two_queues(dev, duo_sizes[i], true);
  }
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      repeats = 3;
    else if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc)
      repeats = atoi(argv[++i]);
    else if (strcmp(argv[i], "--two-queues-only") == 0)
      only_two_queues = true;
    else if (strcmp(argv[i], "--no-two-queues") == 0)
      two_queues_wanted = false;
    else {
      fprintf(stderr, "usage: bench_vulkan [--quick] [--repeats N] [--two-queues-only | --no-two-queues]\n");
      return 255;
    }
  }
  if (repeats < 1) repeats = 1;
  if (repeats > 64) repeats = 64;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (ferry_init() != FERRY_OK) {
    fprintf(stderr, "bench_vulkan: ferry_init: %s\n", ferry_last_error());
    return 255;
  }
  size_t devices = 0;
  for (size_t i = 0; i < ferry_backend_count(); i++) {
    ferry_backend_info b;
    ferry_backend_get(i, &b);
    if (strcmp(b.name, "vulkan") == 0) {
      devices = b.device_count;
      if (!devices) printf("bench_vulkan: no Vulkan device: %s\n", b.status);
    }
  }
  printf("bench_vulkan: %zu Vulkan device(s); median of %d repeats; ratio = ferry / baseline (above 1: ferry is "
         "faster)\n",
         devices, repeats);
  double t0 = bench_seconds();
  for (size_t i = 0; i < ferry_device_count(); i++) {
    ferry_device *dev;
    ferry_device_info info;
    ferry_device_get(i, &dev);
    ferry_device_info_get(dev, &info);
    if (strcmp(info.backend, "vulkan") == 0) bench_device(dev, &info);
  }
  printf("\n%d target(s) missed; %.1f s\n", missed, bench_seconds() - t0);
  ferry_shutdown();
  return missed;
}
